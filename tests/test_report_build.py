"""harness.report.build: the report folder, with the analysers stubbed.

The sections hand each analyser its part of the report's config and file what it returns
under its section; the folder is staged, then moved in whole or not at all (a failure, a
signal, a folder it cannot create or stage in), under a lock against a second writer; its
files are checked against values worked out by hand (the depth table's cells, the claims a
depth frame decides, the noise figures in machine.json, the data dictionary beside the CSVs);
and check_out refuses a folder it cannot use, naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import html
import json
import os
import re
import stat
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from _helpers import _listing, _with_umask
from harness import report
from harness.analysis import claims as claims_module
from harness.infra import config, signals
from harness.infra import files as files_module
from harness.infra.files import OutputSet, UsageError
from harness.models import ATTENTION, RECURRENCE
from harness.report import build

RATES = {"noise_ratio": 1.0234, "noise_ratio_lo": 0.9712, "noise_ratio_hi": 1.0811,
         "noise_floor": 0.0456}


def test_check_out_refuses_what_it_cannot_use(tmp_path, monkeypatch):
    from harness import report
    from harness.infra.files import UsageError
    assert report.check_out(tmp_path / "new") == (tmp_path / "new").resolve()
    (tmp_path / "empty").mkdir()
    assert report.check_out(tmp_path / "empty") == (tmp_path / "empty").resolve()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for bad, why in (("full", "exists and is not an empty directory"),
                     ("file", "exists and is not a directory")):
        with pytest.raises(UsageError, match=why):
            report.check_out(tmp_path / bad)
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert report.check_out(tmp_path / "link") == (tmp_path / "empty").resolve()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for bad in (work, tmp_path, "."):
        with pytest.raises(UsageError, match="current directory"):
            report.check_out(bad)


def test_report_lock_refuses_a_live_writer_and_takes_over_a_dead_ones(tmp_path):
    import subprocess
    import sys
    from harness.report import build
    from harness.infra.files import UsageError
    out = tmp_path / "rep"
    lock = tmp_path / ".rep.lock"
    with build._lock(out):
        assert lock.read_text() == str(os.getpid())
        with pytest.raises(UsageError, match=rf"pid {os.getpid()}"):
            with build._lock(out):
                pass
    assert not lock.exists()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)
    for left in (str(dead), "", "garbage"):
        lock.write_text(left)                   # left by a run killed with -9
        with build._lock(out):
            assert lock.read_text() == str(os.getpid())
        assert not lock.exists()
    with pytest.raises(RuntimeError):
        with build._lock(out):
            raise RuntimeError("the run failed")
    assert not lock.exists()


def _one_section(config, progress):
    from harness.report import figures
    progress("clipping")
    c = pd.DataFrame({"rho": [0.5, 1.5], "threshold": 4.0, "log10_total_before": [-1.0, 3.0],
                      "log10_total_after": [-1.0, 0.6], "log10_far_over_near_before": [-2.0, 2.0],
                      "log10_far_over_near_after": [-2.0, 2.0]})
    yield ("clipping", "Clipping & co", {"clipping": c}, [("clipping", figures.figure_clipping)])


def _claims(frames):
    return pd.DataFrame({"claim": ["c1", "c2"], "lesson": ["l", "l"], "measured": ["m", "m"],
                         "value": [1.0, 2.0], "low": np.nan, "high": np.nan,
                         "verdict": ["holds", "does not hold"]})


def test_build_report_writes_a_complete_folder_in_one_move(tmp_path):
    from harness import report
    from harness.report import build
    out = tmp_path / "reports" / "r1"
    seen = []
    with mock.patch.object(build, "_sections", _one_section), \
            mock.patch.object(build.claims, "claims_table", _claims):
        got = _with_umask(0o022, report.build_report, out, None, seen.append, "harness report <x>")
    assert got == out.resolve() and seen == ["clipping"]
    names = _listing(out)
    assert {"clipping.csv", "clipping.png", "clipping.svg", "claims.csv", "machine.json",
            "index.html"} <= set(names)
    assert not [n for n in names if n.endswith((".tmp", ".partial", ".lock"))]
    assert _listing(out.parent) == ["r1"]                       # no stage, no lock left beside it
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert all(stat.S_IMODE((out / n).stat().st_mode) == 0o644 for n in names)
    page = (out / "index.html").read_text()
    assert "Clipping &amp; co" in page and "harness report &lt;x&gt;" in page
    assert page.index('id="claims"') < page.index('id="clipping"')          # the claims first
    assert pd.read_csv(out / "clipping.csv").rho.tolist() == [0.5, 1.5]
    assert "seconds" in __import__("json").loads((out / "machine.json").read_text())
    assert (out / "clipping.png").read_bytes().startswith(b"\x89PNG")


def test_build_report_failing_leaves_nothing(tmp_path):
    from harness import report
    from harness.report import build

    def broken(config, progress):
        yield from _one_section(config, progress)
        raise RuntimeError("the analyser failed")
    out = tmp_path / "r2"
    with mock.patch.object(build, "_sections", broken), \
            mock.patch.object(build.claims, "claims_table", _claims):
        with pytest.raises(RuntimeError, match="analyser failed"):
            report.build_report(out)
    assert list(tmp_path.iterdir()) == []


class _Recorder:
    """Stands in for an analyser: records its arguments, returns a frame that says who made it."""

    def __init__(self, name, returns=None):
        self.name, self.calls, self.returns = name, [], returns

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.returns is not None:
            return self.returns(*args, **kwargs)
        out = pd.DataFrame({"made_by": [self.name]})
        if self.name == "wall":                          # wall times keep their rounds
            out.attrs["samples"] = pd.DataFrame({"made_by": [self.name + " samples"]})
        return out


# the lessons' smaller checks (harness.analysis.lesson_checks), stubbed as every analyser is
LESSON_CHECKS = ("self_attention_shapes", "unprojected_symmetry", "unequal_lengths",
                 "softmax_jacobian", "kv_shuffle", "recurrence_halves", "additive_bias",
                 "additive_widths", "score_gradient_rows", "encoder_routes", "additive_cost",
                 "additive_timing")


def _stubbed_sections(tmp_path, depth_frame=None, history=None):
    """``build._sections`` with every analyser stubbed by a ``_Recorder``: returns
    (cfg, sections, progress messages, {recorder: calls}, (decay frame, depth frame))."""
    from harness.models import linear_attention as linear
    from harness.report import build
    from harness.report import history as asv
    cfg = dataclasses.replace(
        config.QUICK_REPORT, asv_results=str(tmp_path), schedule_d=5,
        schedule=dataclasses.replace(config.QUICK_REPORT.schedule, T_values=(7, 9),
                                     grains=("element",), processors=(1, 3)))
    from harness.analysis import roofline
    object.__setattr__(cfg, "roofline", dataclasses.replace(roofline.QUICK, rounds=4))  # its own
    if depth_frame is None:
        depth_frame = pd.DataFrame({"model": ["m"], "T": [1], "d": [2], "macs": [3], "flops": [6],
                                    "span": [4]})
    decay_frame = pd.DataFrame({"model": ["rnn", "lru", "attention"], "distance": [1, 2, 3],
                                "activation": ["tanh", "identity", "softmax"],
                                "weight": ["orthogonal", "ring", "gaussian"]})
    fakes = {
        (build.gradpath, "decay_sweep"): _Recorder("decay", lambda c: (decay_frame, "summary")),
        (build.gradpath, "path_levels"): _Recorder("levels"),
        (build.clipping, "clipping_experiment"): _Recorder("clipping"),
        (build.depth, "depth_table"): _Recorder("depth", lambda *a: depth_frame),
        (build.depth, "traced"): _Recorder("traced", lambda traces, m, T, d: (m, T, d)),
        (build.schedule, "schedule"): _Recorder("schedule"),
        (build.walltime, "measure_wall_times"): _Recorder("wall"),
        (build.walltime, "matmul_rates"): _Recorder("rates", lambda *a: {"gemm_gmacs": 2.0}),
        (build.walltime, "noise_kernel"): _Recorder("kernel", lambda c: "the kernel"),
        (build.timing, "noise_floor"): _Recorder("noise", lambda *a: {"noise_floor": 0.01}),
        (build.walltime, "measured_crossover"): _Recorder("crossover"),
        (build.walltime, "fit_exponents"): _Recorder("exponents"),
        (build.peakmem, "measure"): _Recorder("memory"),
        (build.lessons, "self_attention_maps"): _Recorder("maps"),
        (build.lessons, "diagonal_share"): _Recorder("diagonal"),
        (build.lessons, "row_max_vs_dk"): _Recorder("row_max"),
        (build.lessons, "lesson_draw_percentiles"): _Recorder("lesson_draw"),
        (build.lessons, "additive_maps"): _Recorder("additive_maps"),
        (build.lessons, "lesson_additive_routes"): _Recorder("routes"),
        (linear, "method_agreement"): _Recorder("linear_methods"),
        (linear, "selective_spread"): _Recorder("linear_draws"),
        (linear, "spread_summary"): _Recorder("linear_spread",
                                              lambda draws: draws.assign(summary_of=draws.made_by)),
        (build.lessons, "lesson_additive_figures"): _Recorder("additive_figures"),
        (build.figure1, "box_table"): _Recorder("boxes"),
        (build.figure1, "cost_over_heads"): _Recorder("heads"),
        (build.figure1, "layer_work"): _Recorder("layer_work"),
        (build.roofline, "run"): _Recorder("roofline", lambda c: tuple(
            pd.DataFrame({"made_by": [n]}) for n in ("ceilings", "roofline", "roofline_crossover"))),
        **{(build.lesson_checks, name): _Recorder(name) for name in LESSON_CHECKS},
    }
    if history is not None:
        fakes[(asv, "kernel_history")] = _Recorder("history", lambda h: history)
    stages = []
    with contextlib.ExitStack() as stack:
        for (module, name), fake in fakes.items():
            stack.enter_context(mock.patch.object(module, name, fake))
        sections = list(build._sections(cfg, stages.append))
    return cfg, sections, stages, {f.name: f.calls for f in fakes.values()}, (decay_frame,
                                                                              depth_frame)


def test_report_sections_run_each_analyser_on_the_report_configs_values(tmp_path):
    """Every analyser stubbed: the sections hand each one its own part of the report's config
    and put what it returns, untouched, in the frames of its section."""
    from harness.report import build, captions
    cfg, sections, stages, calls, (decay_frame, depth_frame) = _stubbed_sections(tmp_path)
    assert len(stages) == build.STAGES
    assert calls["decay"] == [((cfg.decay,), {})]
    assert calls["levels"] == [((ATTENTION, cfg.path_T, cfg.path_input_scales, cfg.decay.ds[0],
                                 cfg.decay), {})]
    assert calls["clipping"] == [((), dataclasses.asdict(cfg.clipping))]
    assert calls["depth"] == [((cfg.depth.T_values, cfg.depth.d), {})]
    from harness import models
    forms = list(models.traced_forms())                 # every traced form is scheduled
    assert [c[0][:5] for c in calls["schedule"]] == [(m, 7, 5, (1, 3), "element") for m in forms]
    assert [c[1]["tr"] for c in calls["schedule"]] == [(m, 7, 5) for m in forms]
    assert calls["wall"] == [((cfg.wall,), {})]
    assert calls["rates"] == [((cfg.wall.d, cfg.wall), {})]
    assert calls["noise"] == [(("the kernel", cfg.wall.rounds, cfg.wall.min_sample_s), {})]
    (cross_args, _), = calls["crossover"]
    assert cross_args[1] == cfg.wall and cross_args[2] == {"gemm_gmacs": 2.0, "noise_floor": 0.01}
    assert calls["exponents"][0][0][1] == cfg.wall.fit_min_T
    assert calls["memory"] == [((cfg.memory,), {})]
    assert calls["roofline"] == [((cfg.roofline,), {})] and cfg.roofline.rounds == 4
    assert calls["row_max"] == [((cfg.lessons,), {})] and calls["maps"] == [((cfg.lessons,), {})]
    assert calls["routes"] == [((cfg.lessons.va_scales,), {})]
    assert calls["softmax_jacobian"] == [((cfg.lessons,), {})]
    by_key = {key: (frames, figs) for key, _, frames, figs in sections}
    assert set(by_key) <= set(captions.CAPTIONS)
    assert by_key["decay"][0]["decay"] is decay_frame
    assert by_key["decay"][0]["decay_summary"] == "summary"
    pd.testing.assert_frame_equal(by_key["gated"][0]["gated_decay"], build.gated_rows(decay_frame))
    assert list(by_key["recurrence"][0]["lru_decay"].distance) == [2]     # the LRU's rows only
    assert by_key["clipping"][0]["clipping"].made_by[0] == "clipping"
    assert by_key["depth"][0]["depth"] is depth_frame
    sched = by_key["schedule"][0]["schedule"]
    assert list(sched.made_by) == ["schedule"] * len(forms)
    work = by_key["work"][0]
    assert list(work["work"].columns) == ["model", "T", "d", "macs", "flops"]
    assert work["crossover"].made_by[0] == "crossover"
    assert work["rates"].to_dict("records") == [{"d": cfg.wall.d, "threads": cfg.wall.threads,
                                                 "gemm_gmacs": 2.0, "noise_floor": 0.01}]
    wall = by_key["wall"][0]
    assert wall["wall_times"].made_by[0] == "wall" and wall["exponents"].made_by[0] == "exponents"
    assert wall["wall_samples"].made_by[0] == "wall samples"
    assert by_key["memory"][0]["peak_memory"].made_by[0] == "memory"
    assert [f.made_by[0] for f in by_key["roofline"][0].values()] == ["ceilings", "roofline",
                                                                      "roofline_crossover"]
    linear = by_key["linear"][0]                  # the frames above, shared, and its own two
    assert linear["depth"] is depth_frame and linear["wall_times"] is wall["wall_times"]
    assert linear["peak_memory"] is by_key["memory"][0]["peak_memory"]
    assert calls["linear_methods"] == [((), {})] and calls["linear_draws"] == [((), {})]
    assert linear["linear_methods"].made_by[0] == "linear_methods"
    assert linear["linear_spread"].summary_of[0] == "linear_draws"
    assert by_key["maps"][0]["row_max_lesson"].made_by[0] == "lesson_draw"
    lesson_frames = {**by_key["maps"][0], **by_key["additive"][0]}
    assert all(lesson_frames[name].made_by[0] == name for name in LESSON_CHECKS)
    assert all(calls[name] for name in LESSON_CHECKS)
    assert calls["layer_work"] == [((cfg.depth.T_values, cfg.depth.d), {})]
    assert calls["heads"] == [((7, cfg.depth.d), {})]        # the scheduled T, the traced d
    assert by_key["transformer"][0]["figure1_boxes"].made_by[0] == "boxes"
    assert by_key["additive"][0]["additive_routes"].made_by[0] == "routes"
    assert "history" not in by_key                       # no asv results: no section
    for frames, figs in by_key.values():
        assert all(callable(fn) and fn.__name__.startswith("figure_") for _, fn in figs)
    # the figures `make docs-figures` copies out of a report are among those it draws
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    wanted = re.search(r"^DOCS_FIGURES := (.+)$", makefile, re.M).group(1).split()
    stems = {stem for _, figs in by_key.values() for stem, _ in figs}
    assert set(wanted) <= stems, (wanted, stems)
    assert {"decay", "clipping", "depth", "schedule", "work", "wall_times"} <= stems


def test_report_sections_are_announced_titled_and_filed_in_order(tmp_path):
    """The report's table of contents, as a reader sees it: each stage's progress line, each
    section's key, title, CSV stems and figures; the schedule shares one trace cache and
    numbers its rows afresh; the recurrence section holds the RNN's and the LRU's forms only."""
    from harness import models
    forms = list(models.traced_forms())
    recurrent = [m for m, (fam, _) in models.traced_forms().items()
                 if fam.name in (RECURRENCE, "lru")]
    assert ATTENTION in forms and set(recurrent) < set(forms) and "lru-scan" in recurrent
    dt = pd.DataFrame({"model": forms, "T": 1, "d": 2, "macs": 3, "flops": 6, "span": 4})
    history = pd.DataFrame({"made_by": ["history"]})
    cfg, sections, stages, calls, _ = _stubbed_sections(tmp_path, dt, history)
    assert stages == ["gradient decay (RNN and attention)",
                      "attention's path over T and input scale", "clipping",
                      "depth: tracing the forwards", "Figure 1 and the Transformer layer, traced",
                      "schedule on P processors (T = 7)",
                      "wall times over T, in interleaved rounds",
                      "roofline: the machine's ceilings, each kernel placed on them",
                      "peak memory over T, a fresh process per variant",
                      "attention experiments of the lessons"]
    toc = [(key, title, list(frames), [(stem, fn.__name__) for stem, fn in figs])
           for key, title, frames, figs in sections]
    assert toc == [
        ("decay", "Gradient path: T−1 Jacobians against one α", ["decay", "decay_summary"],
         [("decay", "figure_decay")]),
        ("attention_path", "Attention's one α: flat in distance, not in T or input scale",
         ["attention_level"], [("attention_level", "figure_attention_path")]),
        ("clipping", "Clipping stops explosion, not vanishing", ["clipping"],
         [("clipping", "figure_clipping")]),
        ("depth", "Sequential depth: span and path length", ["depth"], [("depth", "figure_depth")]),
        ("recurrence", "The recurrence that parallelises", ["scan_depth", "lru_decay"],
         [("lru_decay", "figure_lru_decay")]),
        ("gated", "The gated recurrences: survivable, not short", ["gated_decay"],
         [("gated_decay", "figure_gated")]),
        ("transformer", "The Transformer layer: which of Figure 1's boxes mix positions",
         ["figure1_boxes", "heads_cost", "layer_work"], [("layer_work", "figure_layer_work")]),
        ("schedule", "The 7-token text on P processors", ["schedule"],
         [("schedule", "figure_schedule")]),
        ("work", "Work: multiplications cross at T = d", ["work", "crossover", "rates"],
         [("work", "figure_work")]),
        ("wall", "Measured: forward time against T",
         ["wall_times", "wall_samples", "exponents", "rates"], [("wall_times", "figure_wall")]),
        ("roofline", "The roofline: every kernel against the machine's ceilings",
         ["ceilings", "roofline", "roofline_crossover"], [("roofline", "figure_roofline")]),
        ("memory", "Measured: peak memory against T", ["peak_memory"],
         [("peak_memory", "figure_memory")]),
        ("linear", "Linear attention: one model, three algorithms",
         ["depth", "wall_times", "peak_memory", "linear_methods", "linear_spread"],
         [("linear_algorithms", "figure_linear")]),
        ("maps", "Self-attention: the diagonal, projections and √d_k",
         ["attention_maps", "attention_diagonal", "row_max", "row_max_lesson",
          "self_attention_shapes", "unprojected_symmetry", "unequal_lengths", "softmax_jacobian",
          "kv_shuffle", "recurrence_halves"],
         [("attention_maps", "figure_maps"), ("row_max", "figure_row_max")]),
        ("additive", "Additive attention: untrained map, no tanh, two gradient routes",
         ["additive_maps", "additive_routes", "additive_figures", "additive_bias",
          "additive_widths", "score_gradient_rows", "encoder_routes", "additive_cost",
          "additive_timing"],
         [("additive_maps", "figure_additive"), ("additive_routes", "figure_routes")]),
        ("history", "Benchmarks across commits (asv)", ["asv_history"],
         [("asv_history", "figure_history")]),
    ]
    frames = {key: fr for key, _, fr, _ in sections}
    assert list(frames["recurrence"]["scan_depth"].model) == recurrent
    assert frames["history"]["asv_history"] is history
    sched = frames["schedule"]["schedule"]
    assert list(sched.index) == list(range(len(forms)))         # one row per form, renumbered
    caches = [args[0] for args, _ in calls["traced"]]
    assert len(caches) == len(forms) and all(c is caches[0] for c in caches)
    assert isinstance(caches[0], dict)                           # one cache, shared
    wall = frames["wall"]["wall_times"]
    assert calls["kernel"] == [((cfg.wall,), {})]
    assert calls["crossover"][0][0][0] is wall
    assert calls["exponents"][0][0][0] is wall
    assert calls["diagonal"] == [((frames["maps"]["attention_maps"],), {})]
    assert calls["lesson_draw"] == [((cfg.lessons,), {})]


def test_build_report_stages_in_the_folder_and_files_every_part(tmp_path):
    """The files are staged in a hidden ``OutputSet`` folder inside the destination (a dead
    run's is removed) and moved out of it together; the CSVs carry no index; the claims section
    comes first with its counts; machine.json is indented and times the run; the data
    dictionary is copied beside."""
    import json
    from harness import report
    from harness.analysis import claims
    from harness.infra.files import STAGING_PREFIX
    from harness.report import build
    out = tmp_path / "a" / "b" / "r1"                            # parents made as needed
    out.mkdir(parents=True)
    dead = out / f"{STAGING_PREFIX}999999999-x"                  # a run killed with -9
    dead.mkdir()
    stages = []
    real_build = build._build

    def spy(files, *args):
        stages.append(files.stage)
        return real_build(files, *args)
    with mock.patch.object(build, "_sections", _one_section), \
            mock.patch.object(build.claims, "claims_table", _claims), \
            mock.patch.object(build, "_build", spy):
        report.build_report(out)
    (stage,) = stages
    assert stage.parent == out.resolve()
    assert re.fullmatch(rf"{re.escape(STAGING_PREFIX)}{os.getpid()}-.+", stage.name), stage.name
    assert not stage.exists() and not dead.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["r1"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert (out / "clipping.csv").read_text().splitlines()[0].startswith("rho,threshold,")
    assert (out / "claims.csv").read_text().splitlines()[0].startswith("claim,lesson,")
    page = (out / "index.html").read_text()
    assert "<code>harness report</code>" in page                 # the default command
    assert '<img src="clipping.png"' in page
    counts = ", ".join(f"{(['holds', 'does not hold'].count(v))} {v}" for v in claims.VERDICTS)
    assert (f'<section id="claims"><h2>The lessons&#x27; claims, measured</h2>\n<p class="caption" '
            f'data-section="claims">2 claims of the three lessons against this run&#x27;s '
            f"measurements: {counts}. Each verdict is computed from the data by a rule in "
            f"harness/analysis/claims/; the columns of every CSV are described in "
            f"docs/data.md.</p>") in page
    assert '<a href="claims.csv">claims.csv</a>' in page and 'class="dataframe table claims"' in page
    text = (out / "machine.json").read_text()
    assert text.startswith('{\n "date": ')
    assert 0.0 <= float(json.loads(text)["seconds"]) < 600.0
    if build.DATA_DICTIONARY.exists():                           # a checkout, not a wheel
        assert (out / "data.md").read_text() == build.DATA_DICTIONARY.read_text()


def _depth_frame():
    """RNN: span 3T, 2·T·d² multiplies; attention: span 7, 2·T²·d, scalar span growing."""
    d = 64
    rows = []
    for T in (100, 1000):
        rows.append({"model": RECURRENCE, "T": T, "d": d, "macs": 2 * T * d * d,
                     "flops": 4 * T * d * d, "span": 3 * T, "max_path": 3 * T,
                     "scalar_span": 20 * T, "parallelism": 2730.6667})
        rows.append({"model": ATTENTION, "T": T, "d": d, "macs": 2 * T * T * d,
                     "flops": 4 * T * T * d, "span": 7, "max_path": 7,
                     "scalar_span": {100: 25, 1000: 31}[T], "parallelism": 12.25})
    return pd.DataFrame(rows)


def _stub_sections(config, progress):
    """Two of the report's sections, from hand-built frames and without figures."""
    progress("depth")
    yield ("depth", "Sequential depth", {"depth": _depth_frame()}, [])
    progress("wall")
    w = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "T": 64, "d": 32, "threads": 1,
                      "seconds_per_step": 2e-6})
    e = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "exponent": [1.0, 2.0],
                      "exponent_lo": [0.9, 1.9], "exponent_hi": [1.1, 2.1]})
    yield ("wall", "Measured", {"wall_times": w, "exponents": e,
                                "rates": pd.DataFrame([dict(d=32, threads=1, **RATES)])}, [])


def test_build_writes_the_depth_table_the_claims_and_the_noise_floor(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"                # a checkout: harness/ beside docs/data.md
    (checkout / "docs").mkdir(parents=True)
    (checkout / "docs" / "data.md").write_text("# the data dictionary of this checkout\n")
    monkeypatch.setattr(build, "DATA_DICTIONARY", checkout / "docs" / "data.md")
    stage = tmp_path / "stage"
    stage.mkdir()
    files = OutputSet(stage)
    seen = []
    with mock.patch.object(build, "_sections", _stub_sections):
        build._build(files, None, seen.append, "harness report")
    files.commit()
    files.discard()
    assert seen == ["depth", "wall"]
    page = (stage / "index.html").read_text(encoding="utf-8")
    depth = page.split('<section id="depth">')[1].split("</section>")[0]
    # the depth table under its caption: 2·1000·64² = 8,192,000 and 2·1000²·64 = 128,000,000
    for cell in ("8,192,000", "16,384,000", "128,000,000", "2,730.7", "12.2"):
        assert f"<td>{cell}</td>" in depth, cell
    # span/T = 3 at both T: the RNN's steps in sequence; attention's span 7 at both T while
    # its scalar span grows 25 -> 31: constant stages, with a qualification
    claims = pd.read_csv(stage / "claims.csv")
    judged = claims[claims.verdict != claims_module.NOT_MEASURED]
    assert judged.claim.tolist() == ["An RNN's T steps run one after another",
                                     "Attention is a constant number of stages"]
    assert judged.verdict.tolist() == ["holds", "holds with a qualification"]
    assert judged.value.tolist() == [3.0, 7.0]
    # every other claim is a row that names what this run did not measure
    assert len(claims) == len(claims_module.CLAIMS)
    assert claims.measured[claims.claim == "tanh saturation makes vanishing worse"].tolist() == [
        "not measured: this run has no decay_summary.csv"]
    assert (f"{len(claims)} claims of the three lessons against this run's measurements: 1 holds, "
            f"1 holds with a qualification, 0 does not hold, {len(claims) - 2} not measured."
            ) in html.unescape(page)
    meta = json.loads((stage / "machine.json").read_text())
    assert {k: meta.get(k) for k in RATES} == RATES
    # the data dictionary of the checkout the module runs from, copied beside the CSVs
    assert (stage / "data.md").read_text() == "# the data dictionary of this checkout\n"


def test_build_report_creates_missing_parent_folders(tmp_path):
    out = tmp_path / "a" / "b" / "c" / "report"
    with mock.patch.object(build, "_sections", _stub_sections):
        got = report.build_report(out)
    assert got == out.resolve() and (out / "index.html").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["report"]


def test_build_report_names_the_folder_it_cannot_create(tmp_path):
    (tmp_path / "file").write_text("x")              # a file where a parent folder should be
    parent = (tmp_path / "file" / "sub").resolve()
    with pytest.raises(UsageError) as err:
        report.build_report(parent / "report")
    # checked before any work: the nearest existing ancestor is a file, not a folder
    assert str(err.value) == (f"--out: cannot create {str(parent / 'report')!r}: "
                              f"{str(tmp_path / 'file')!r} is not a directory")


def test_build_report_names_the_folder_it_cannot_stage_in(tmp_path):
    out = tmp_path / "report"
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with mock.patch.object(files_module.tempfile, "mkdtemp", side_effect=full), \
            pytest.raises(UsageError) as err:
        report.build_report(out)
    # the folder does not exist yet: its parent, where it will be made, is the one probed
    assert str(err.value) == (f"--out: cannot write in {str(tmp_path.resolve())!r}: "
                              f"{os.strerror(errno.ENOSPC)}")
    assert list(tmp_path.iterdir()) == []            # no lock, no stage, no folder left behind


def test_a_signal_during_the_rename_leaves_the_report_and_still_interrupts(tmp_path):
    out = tmp_path / "report"

    @contextlib.contextmanager
    def delivered_at_the_end():                      # a signal held back, delivered as it ends:
        yield                                        # the deferral that moved the report in
        if (out / "index.html").exists():            # (the --out probe's is held back too)
            raise KeyboardInterrupt

    with mock.patch.object(build, "_sections", _stub_sections), \
            mock.patch.object(signals, "deferred", delivered_at_the_end), \
            pytest.raises(KeyboardInterrupt):
        report.build_report(out)
    assert (out / "index.html").is_file()             # moved in whole before the signal
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]   # no lock
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]   # no stage


def test_check_out_names_the_folder_it_refuses(tmp_path, monkeypatch):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(UsageError) as err:
        report.check_out(full)
    assert str(err.value) == f"--out: {str(full)!r} exists and is not an empty directory"
    monkeypatch.chdir(full)
    with pytest.raises(UsageError) as err:
        report.check_out(".")
    assert str(err.value).startswith("--out: '.' is the current directory or holds it; ")


@pytest.mark.parametrize("which", ["parent", "folder"])
def test_build_report_names_the_folder_it_cannot_make(tmp_path, which):
    out = (tmp_path / "runs" / "report").resolve()
    target = out.parent if which == "parent" else out
    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self == target:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real(self, *a, **k)
    with mock.patch.object(Path, "mkdir", mkdir), pytest.raises(UsageError) as err:
        report.build_report(out)
    assert str(err.value) == f"--out: cannot write in {str(target)!r}: {os.strerror(errno.EACCES)}"


def test_the_gated_section_draws_the_gated_families_and_the_tanh_rnn_on_orthogonal_weights():
    from harness.report import build
    rows = [dict(model=m, activation=a, weight=w) for m in ("lstm", "gru", "rnn", "attention")
            for a in ("tanh", "identity") for w in ("orthogonal", "gaussian")]
    frame = pd.DataFrame(rows)
    got = build.gated_rows(frame)
    want = frame[frame.model.isin(["lstm", "gru"])
                 | ((frame.model == "rnn") & (frame.activation == "tanh") & (frame.weight == "orthogonal"))]
    pd.testing.assert_frame_equal(got, want)
    assert len(got) == 9                                   # 4 lstm, 4 gru, 1 rnn


def test_the_depth_section_traces_its_long_lengths_only_when_it_has_some():
    import dataclasses
    from harness.analysis import depth
    from harness.infra.config import DepthConfig, REPORT
    from harness.report import build
    cfg = dataclasses.replace(REPORT, depth=DepthConfig(d=2, T_values=(4, 8)),
                              depth_long=DepthConfig(d=3, T_values=(16,)))
    got = build.depth_frames(cfg)
    assert sorted(got) == ["depth", "depth_long"]
    timed = ["trace_seconds"]                          # the tracer's own time: measured
    pd.testing.assert_frame_equal(got["depth"].drop(columns=timed),
                                  depth.depth_table((4, 8), 2).drop(columns=timed))
    pd.testing.assert_frame_equal(got["depth_long"].drop(columns=timed),
                                  depth.depth_table((16,), 3).drop(columns=timed))
    short = build.depth_frames(dataclasses.replace(cfg, depth_long=DepthConfig(d=3, T_values=())))
    assert list(short) == ["depth"]


def test_build_writes_a_frame_two_sections_show_once_and_refuses_two_different_ones(
        tmp_path, monkeypatch):
    from harness.infra import machine
    from harness.report import html as html_module
    monkeypatch.setattr(machine, "describe", lambda: {"blas": Path("/opt/libblas.so")})
    shared = _depth_frame()

    def sections(second):
        def run(config, progress):
            yield ("depth", "Sequential depth", {"depth": shared}, [])
            w = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "T": 64, "d": 32, "threads": 1,
                              "seconds_per_step": 2e-6})
            e = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "exponent": [1.0, 2.0],
                              "exponent_lo": [0.9, 1.9], "exponent_hi": [1.1, 2.1]})
            yield ("wall", "Measured", {"wall_times": w, "exponents": e, "depth": second}, [])
        return run

    rendered = []
    real_render = html_module.render_html

    def render(sections_, meta, command):
        rendered.append(sections_)
        return real_render(sections_, meta, command)
    monkeypatch.setattr(html_module, "render_html", render)
    stage = tmp_path / "stage"
    stage.mkdir()
    files = OutputSet(stage)
    with mock.patch.object(build, "_sections", sections(shared)):
        build._build(files, None, lambda msg: None, "harness report")   # the same frame: once
    files.commit()
    assert len(pd.read_csv(stage / "depth.csv")) == len(shared)
    by_key = {s.key: s for s in rendered[0]}
    assert "depth" in html_module.TABLES and "wall" not in html_module.TABLES
    assert by_key["depth"].table_html.startswith("<details><summary>the table") and by_key["wall"].table_html == ""
    assert json.loads((stage / "machine.json").read_text())["blas"] == "/opt/libblas.so"
    other = tmp_path / "other"
    other.mkdir()
    files = OutputSet(other)
    with mock.patch.object(build, "_sections", sections(shared.copy())), \
            pytest.raises(ValueError) as e:
        build._build(files, None, lambda msg: None, "harness report")
    files.discard()
    assert str(e.value) == "two sections of the report write different depth.csv"


def test_the_report_package_names_what_it_does_not_have():
    assert report.build_report is build.build_report and report.STAGES == build.STAGES
    with pytest.raises(AttributeError) as e:
        report.nothing_here
    assert str(e.value) == "module 'harness.report' has no attribute 'nothing_here'"
