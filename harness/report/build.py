"""``build_report``: run the analysers and write the report folder, all new or not at all.

``_sections`` runs the analysers, one section at a time; ``_build`` writes each
section's CSVs, reads them back, and draws its figures and caption from what
was read; ``build_report`` stages every file with ``OutputSet`` inside the folder
and moves them into place together, ``index.html`` last, so an interrupted run
never leaves a folder that looks like a finished report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import time
from pathlib import Path

import pandas as pd

from harness import models
from harness.analysis import (claims, clipping, depth, figure1, gradpath, lesson_checks, lessons,
                              peakmem, roofline, schedule, walltime)
from harness.infra import machine, signals, timing
from harness.infra.config import REPORT
from harness.infra.files import OutputSet, UsageError
from harness.infra.files import check_out as _check_out
from harness.models import ATTENTION as ATT
from harness.models import GATED_RECURRENCES as GATED
from harness.models import PARALLEL_RECURRENCE as LRU
from harness.models import RECURRENCE as RNN
from harness.report import captions, figures, history, html

STAGES = 10         # the progress calls of _sections, for a bar with a count
# the data dictionary, copied beside the CSVs it describes (from a checkout; a wheel has no docs/)
DATA_DICTIONARY = Path(__file__).resolve().parents[2] / "docs" / "data.md"


def depth_frames(config):
    """The depth section's tables: ``depth`` at ``config.depth``'s lengths, and ``depth_long``
    at ``config.depth_long``'s when it has any (the full report's figure goes on to T =
    65,536, at its own d)."""
    frames = {"depth": depth.depth_table(config.depth.T_values, config.depth.d)}
    if config.depth_long.T_values:
        frames["depth_long"] = depth.depth_table(config.depth_long.T_values, config.depth_long.d)
    return frames


def gated_rows(frame):
    """The decay sweep's rows the gated section draws: every gated family's, and beside them
    the tanh RNN's on orthogonal W_hh."""
    return frame[frame.model.isin(GATED) | ((frame.model == RNN) & (frame.activation == "tanh")
                                            & (frame.weight == "orthogonal"))]


def roofline_config(config):
    """The roofline section's config: ``config.roofline`` where the report's config has one,
    else ``roofline.QUICK`` (about 30 s), in the full report as in the quick one."""
    return getattr(config, "roofline", None) or roofline.QUICK


def _sections(config, progress):
    """Run the analysers: yields (key, title, frames, figure fns). Calls ``progress(stage)``
    ``STAGES`` times."""
    progress("gradient decay (RNN and attention)")
    frame, summary = gradpath.decay_sweep(config.decay)
    yield ("decay", "Gradient path: T−1 Jacobians against one α",
           {"decay": frame, "decay_summary": summary}, [("decay", figures.figure_decay)])

    progress("attention's path over T and input scale")
    level = gradpath.path_levels(ATT, config.path_T, config.path_input_scales,
                                 config.decay.ds[0], config.decay)
    yield ("attention_path", "Attention's one α: flat in distance, not in T or input scale",
           {"attention_level": level}, [("attention_level", figures.figure_attention_path)])

    progress("clipping")
    clip = clipping.clipping_experiment(**dataclasses.asdict(config.clipping))
    yield ("clipping", "Clipping stops explosion, not vanishing", {"clipping": clip},
           [("clipping", figures.figure_clipping)])

    progress("depth: tracing the forwards")
    frames = depth_frames(config)
    dt = frames["depth"]
    yield ("depth", "Sequential depth: span and path length", frames,
           [("depth", figures.figure_depth)])

    recurrences = list(models.traced_forms((RNN, LRU)))
    lru_rows = frame[frame.model == LRU]
    yield ("recurrence", "The recurrence that parallelises",
           {"scan_depth": dt[dt.model.isin(recurrences)], "lru_decay": lru_rows},
           [("lru_decay", figures.figure_lru_decay)])

    gated = gated_rows(frame)
    yield ("gated", "The gated recurrences: survivable, not short", {"gated_decay": gated},
           [("gated_decay", figures.figure_gated)])

    progress("Figure 1 and the Transformer layer, traced")
    yield ("transformer", "The Transformer layer: which of Figure 1's boxes mix positions",
           {"figure1_boxes": figure1.box_table(),
            "heads_cost": figure1.cost_over_heads(config.schedule.T_values[0], config.depth.d),
            "layer_work": figure1.layer_work(config.depth.T_values, config.depth.d)},
           [("layer_work", figures.figure_layer_work)])

    T, d = config.schedule.T_values[0], config.schedule_d
    progress(f"schedule on P processors (T = {T})")
    traces = {}
    sched = pd.concat([schedule.schedule(m, T, d, config.schedule.processors, grain,
                                         tr=depth.traced(traces, m, T, d))
                       for grain in config.schedule.grains for m in models.traced_forms()],
                      ignore_index=True)
    yield ("schedule", f"The {T}-token text on P processors", {"schedule": sched},
           [("schedule", figures.figure_schedule)])

    progress("wall times over T, in interleaved rounds")
    wall = walltime.measure_wall_times(config.wall)
    rates = walltime.matmul_rates(config.wall.d, config.wall)
    kernel = walltime.noise_kernel(config.wall)
    rates.update(timing.noise_floor(kernel, config.wall.rounds, config.wall.min_sample_s))
    cross = walltime.measured_crossover(wall, config.wall, rates)
    expo = walltime.fit_exponents(wall, config.wall.fit_min_T)
    work = dt[["model", "T", "d", "macs", "flops"]]
    rates_frame = pd.DataFrame([{"d": config.wall.d, "threads": config.wall.threads, **rates}])
    yield ("work", "Work: multiplications cross at T = d",
           {"work": work, "crossover": cross, "rates": rates_frame},
           [("work", figures.figure_work)])
    yield ("wall", "Measured: forward time against T",
           {"wall_times": wall, "wall_samples": wall.attrs["samples"], "exponents": expo,
            "rates": rates_frame}, [("wall_times", figures.figure_wall)])

    progress("roofline: the machine's ceilings, each kernel placed on them")
    ceil, kern, cross = roofline.run(roofline_config(config))
    yield ("roofline", "The roofline: every kernel against the machine's ceilings",
           {"ceilings": ceil, "roofline": kern, "roofline_crossover": cross},
           [("roofline", figures.figure_roofline)])

    progress("peak memory over T, a fresh process per variant")
    mem = peakmem.measure(config.memory)
    yield ("memory", "Measured: peak memory against T", {"peak_memory": mem},
           [("peak_memory", figures.figure_memory)])

    # linear attention: one model, three algorithms, read off the depth, wall and memory above
    from harness.models import linear_attention as linear
    yield ("linear", "Linear attention: one model, three algorithms",
           {"depth": dt, "wall_times": wall, "peak_memory": mem,
            "linear_methods": linear.method_agreement(),
            "linear_spread": linear.spread_summary(linear.selective_spread())},
           [("linear_algorithms", figures.figure_linear)])

    progress("attention experiments of the lessons")
    maps = lessons.self_attention_maps(config.lessons)
    yield ("maps", "Self-attention: the diagonal, projections and √d_k",
           {"attention_maps": maps, "attention_diagonal": lessons.diagonal_share(maps),
            "row_max": lessons.row_max_vs_dk(config.lessons),
            "row_max_lesson": lessons.lesson_draw_percentiles(config.lessons),
            # the self-attention and goodbye-to-recurrence lessons' smaller claims (#24)
            "self_attention_shapes": lesson_checks.self_attention_shapes(),
            "unprojected_symmetry": lesson_checks.unprojected_symmetry(),
            "unequal_lengths": lesson_checks.unequal_lengths(),
            "softmax_jacobian": lesson_checks.softmax_jacobian(config.lessons),
            "kv_shuffle": lesson_checks.kv_shuffle(),
            "recurrence_halves": lesson_checks.recurrence_halves()},
           [("attention_maps", figures.figure_maps), ("row_max", figures.figure_row_max)])
    yield ("additive", "Additive attention: untrained map, no tanh, two gradient routes",
           {"additive_maps": lessons.additive_maps(),
            "additive_routes": lessons.lesson_additive_routes(config.lessons.va_scales),
            # the additive-attention lesson's other claims and printed figures (#24)
            "additive_figures": lessons.lesson_additive_figures(),
            "additive_bias": lesson_checks.additive_bias(),
            "additive_widths": lesson_checks.additive_widths(),
            "score_gradient_rows": lesson_checks.score_gradient_rows(),
            "encoder_routes": lesson_checks.encoder_routes(),
            "additive_cost": lesson_checks.additive_cost(),
            "additive_timing": lesson_checks.additive_timing()},
           [("additive_maps", figures.figure_additive),
            ("additive_routes", figures.figure_routes)])

    hist = history.kernel_history(history.read_asv_results(config.asv_results))
    if len(hist):
        yield ("history", "Benchmarks across commits (asv)", {"asv_history": hist},
               [("asv_history", figures.figure_history)])


def check_out(out):
    """The report folder, resolved; a UsageError at once for one that cannot be used
    (``harness.infra.files.check_out``, which ``harness report`` calls before loading this).

    A folder that holds nothing but the staging of a run (a live one is refused by the lock,
    a dead one's is removed) counts as empty."""
    return _check_out(out, whole=True)


@contextlib.contextmanager
def _lock(path):
    """One report at a time per folder: a second run with the same --out refuses at once.

    The lock is made and its pid written with signals held back, inside the ``try`` whose
    ``finally`` removes it: a signal at any moment leaves no ``.<name>.lock`` behind."""
    lock = path.parent / f".{path.name}.lock"
    held = False
    try:
        with signals.deferred():
            while True:
                try:
                    fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                    held = True
                    break
                except FileExistsError:
                    try:
                        pid = int(lock.read_text() or 0)
                    except (OSError, ValueError):
                        pid = 0
                    if pid and signals.pid_alive(pid):
                        raise UsageError(f"--out: another harness report (pid {pid}) is "
                                         f"writing {str(path)!r}; wait for it or choose "
                                         f"another folder") from None
                    lock.unlink(missing_ok=True)   # left by a run killed with -9
                except OSError as e:               # a parent we may not write in (not root)
                    raise UsageError(f"--out: cannot write in {str(path.parent)!r}: "
                                     f"{e.strerror}") from None
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        yield
    finally:
        if held:
            lock.unlink(missing_ok=True)


def build_report(out, config=REPORT, progress=None, command="harness report"):
    """Write the report folder ``out`` (must not exist or be empty). Returns its path."""
    out = check_out(out)
    progress = progress or (lambda msg: None)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out: cannot write in {str(out.parent)!r}: {e.strerror}") from None
    with _lock(out):
        created = not out.exists()
        try:
            try:
                out.mkdir(exist_ok=True)
                files = OutputSet(out)
            except OSError as e:
                raise UsageError(f"--out: cannot write in {str(out)!r}: {e.strerror}") from None
            try:
                _build(files, config, progress, command)
                check_out(out)                     # still ours: nothing appeared meanwhile
                files.commit()                     # index.html last: it marks a complete report
            finally:
                files.discard()
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()                    # only if empty: a committed report stays
            raise
    return out


def _build(files, config, progress, command):
    """Stage every file of the report in ``files`` (an ``OutputSet``)."""
    started = time.perf_counter()
    sections, read, written = [], {}, {}
    for key, title, frames, figs in _sections(config, progress):
        signals.checkpoint()
        for name, frame in frames.items():
            if name not in written:                # a frame two sections show is written once
                files.write_csv(f"{name}.csv", frame)
                written[name] = frame
            elif written[name] is not frame:
                raise ValueError(f"two sections of the report write different {name}.csv")
        # captions and figures are drawn from the frames as the CSVs hold them
        back = {name: pd.read_csv(files.stage / f"{name}.csv") for name in frames}
        for stem, fn in figs:
            for suffix, data in figures.encode(fn(back)).items():
                files.write_bytes(f"{stem}.{suffix}", data)
        table = html.TABLES.get(key)
        sections.append(html.Section(key, title, frames, captions.CAPTIONS[key](back),
                                     [stem for stem, _ in figs], table(back) if table else ""))
        read.update(back)
    files.write_csv("claims.csv", claims.claims_table(read))
    back = {"claims": pd.read_csv(files.stage / "claims.csv")}
    sections.insert(0, html.Section("claims", "The lessons' claims, measured", back,
                                    captions.caption_claims(back), [],
                                    html.claims_table_html(back["claims"])))
    rates = read.get("rates")
    noise = {k: float(rates[k].iloc[0]) for k in ("noise_ratio", "noise_ratio_lo",
                                                   "noise_ratio_hi", "noise_floor")
             if rates is not None and k in rates}
    meta = {"date": _dt.datetime.now().isoformat(timespec="seconds"), **machine.describe(),
            **noise, "seconds": f"{time.perf_counter() - started:.1f}"}
    files.write_text("machine.json", json.dumps(meta, indent=1, default=str))
    if DATA_DICTIONARY.exists():
        files.write_bytes("data.md", DATA_DICTIONARY.read_bytes())
    # index.html last: its presence marks a complete report
    files.write_text("index.html", html.render_html(sections, meta, command))
