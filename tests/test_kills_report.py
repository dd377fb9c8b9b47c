"""``harness.report``: captions on edge-case frames, and the report folder's assembly.

Written against mutants of the report's modules that the other tests left alive.
The captions are fed hand-built frames whose numbers are known; the folder is
built by ``build_report``/``build._build`` with the analysers stubbed by small frames
(no figures, no timing), and its files are checked against values worked out
by hand: the depth table's cells, the two claims a depth frame decides, the
noise figures in machine.json, the data dictionary beside the CSVs.
"""

from __future__ import annotations

import contextlib
import errno
import html
import json
import math
import os
import re
import warnings
from pathlib import Path
from unittest import mock

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from harness import report
from harness.analysis import claims as claims_module
from harness.infra import files as files_module, signals
from harness.infra.files import OutputSet, UsageError
from harness.report import build, captions, figures
from harness.models import ATTENTION, RECURRENCE

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- captions

def _schedule_rows(T, d, series):
    """``series``: {(model, grain): (span, {P: time})} -> a schedule frame, rows shuffled."""
    rows = [{"model": m, "T": T, "d": d, "grain": g, "P": P, "time": t, "span": span,
             "bounds_ok": True}
            for (m, g), (span, times) in series.items() for P, t in times.items()]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=3)


def test_schedule_caption_of_one_token_on_one_processor():
    # the smallest schedule: T = 1, so P = 1 is both "one processor" and "T processors",
    # and every (model, grain) has a single row
    s = _schedule_rows(1, 2, {(RECURRENCE, "scalar"): (6, {1: 14}),
                              (ATTENTION, "scalar"): (9, {1: 30}),
                              (RECURRENCE, "element"): (4, {1: 11}),
                              (ATTENTION, "element"): (5, {1: 25})})
    cap = captions.caption_schedule({"schedule": s})
    assert "for the lesson's T = 1 tokens (d = 2)" in cap
    assert "the RNN needs 14 steps against 14 on one processor: 1.0× faster" in cap
    assert "its span of 6 (reached at P = 1)" in cap
    assert "Attention needs 30 steps on 1 processors" in cap
    assert "only at none of the P scheduled; its span, 9, is not constant" in cap
    assert "stops improving at P = 1 (" in cap and "on a floor of 4 steps" in cap
    assert cap.endswith("hold on all 4 of 4 runs.")


def test_schedule_caption_compares_only_the_P_both_models_ran_at():
    # attention was also scheduled at P = 50, where the RNN was not: no comparison there,
    # so the first P where attention is faster is 100 (30 < 40), not 50
    s = _schedule_rows(20, 4, {
        (RECURRENCE, "scalar"): (40, {1: 500, 4: 130, 20: 60, 100: 40}),
        (ATTENTION, "scalar"): (10, {1: 900, 4: 230, 20: 70, 50: 35, 100: 30}),
        (RECURRENCE, "element"): (50, {1: 600, 4: 160, 20: 80, 100: 50})})
    cap = captions.caption_schedule({"schedule": s})
    assert "is faster than the RNN only from P = 100 on;" in cap
    assert "needs 60 steps against 500 on one processor: 8.3× faster" in cap   # 500 / 60


def test_wall_caption_gives_each_model_its_own_interval_and_the_step_in_microseconds():
    w = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "T": 64, "d": 32, "threads": 2,
                      "seconds_per_step": [0.0625, 0.5]})
    e = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "exponent": [1.0312, 1.8765],
                      "exponent_lo": [0.9222, 1.7111], "exponent_hi": [1.1333, 1.9444]})
    cap = captions.caption_wall({"wall_times": w, "exponents": e})
    assert f"{RECURRENCE} 1.03 [0.92, 1.13], {ATTENTION} 1.88 [1.71, 1.94]." in cap
    assert "takes 62500.0 µs per step" in cap             # 0.0625 s = 62,500 µs exactly


def test_memory_caption_compares_the_largest_with_the_smallest_of_three():
    peaks = {"a": (2**20, 2**20), "b": (2**20, 10 * 2**20), "c": (2**20, 40 * 2**20)}
    f = pd.DataFrame([{"model": m, "T": T, "d": 8, "dtype": "float64", "peak_bytes": p,
                       "output_bytes": 0, "estimate_bytes": 0}
                      for m, pair in peaks.items() for T, p in zip((100, 1000), pair)])
    cap = captions.caption_memory({"peak_memory": f})
    assert "At T = 1000: a 1.0 MiB (T^0.00); b 10.0 MiB (T^1.00); c 40.0 MiB (T^" in cap
    assert cap.endswith("c needs 40 times what a needs.")


# ------------------------------------------------------------------- the folder

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


RATES = {"noise_ratio": 1.0234, "noise_ratio_lo": 0.9712, "noise_ratio_hi": 1.0811,
         "noise_floor": 0.0456}


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
    assert str(err.value) == (f"--out: cannot write in {str(parent)!r}: "
                              f"{os.strerror(errno.ENOTDIR)}")


def test_build_report_names_the_folder_it_cannot_stage_in(tmp_path):
    out = tmp_path / "report"
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with mock.patch.object(files_module.tempfile, "mkdtemp", side_effect=full), \
            pytest.raises(UsageError) as err:
        report.build_report(out)
    assert str(err.value) == (f"--out: cannot write in {str(out.resolve())!r}: "
                              f"{os.strerror(errno.ENOSPC)}")
    assert list(tmp_path.iterdir()) == []            # no lock, no stage, no folder left behind


def test_a_signal_during_the_rename_leaves_the_report_and_still_interrupts(tmp_path):
    @contextlib.contextmanager
    def delivered_at_the_end():                      # a signal held back, delivered as it ends
        yield
        raise KeyboardInterrupt

    out = tmp_path / "report"
    with mock.patch.object(build, "_sections", _stub_sections), \
            mock.patch.object(signals, "deferred", delivered_at_the_end), \
            pytest.raises(KeyboardInterrupt):
        report.build_report(out)
    assert (out / "index.html").is_file()             # moved in whole before the signal
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]   # no lock
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]   # no stage


# ------------------------------------------------------ captions on one-row frames

def test_clipping_caption_of_a_single_radius_states_its_threshold():
    # clipping_experiment(rhos=(1.5,)) gives one row: the caption still names the threshold
    c = pd.DataFrame({"rho": [1.5], "threshold": [2.0], "log10_total_before": [3.0],
                      "log10_total_after": [math.log10(2.0)],
                      "log10_far_over_near_before": [2.0], "log10_far_over_near_after": [2.0]})
    cap = captions.caption_clipping({"clipping": c})
    assert cap.startswith("Clipping the total gradient to 2 rescales every distance by ")


def test_memory_caption_of_one_measured_variant_at_one_T():
    # measure(variants=["a"]) at a single T: one row, no growth to read
    f = pd.DataFrame([{"model": "a", "T": 100, "d": 8, "dtype": "float32",
                       "peak_bytes": 3 * 2**20, "output_bytes": 0, "estimate_bytes": 0}])
    cap = captions.caption_memory({"peak_memory": f})
    assert cap.startswith("Peak resident memory of one forward call (float32, d = 8, ")
    assert "At T = 100: a 3.0 MiB" in cap
    assert cap.endswith("a needs 1 times what a needs.")


def test_memory_caption_when_only_one_variant_fits_at_the_largest_T():
    # b's call at T = 1000 was refused (MemoryError: NaN peak): a alone is compared there
    f = pd.DataFrame([{"model": m, "T": T, "d": 8, "dtype": "float64", "peak_bytes": p,
                       "output_bytes": 0, "estimate_bytes": 0}
                      for m, T, p in (("a", 100, 2**20), ("a", 1000, 10 * 2**20),
                                      ("b", 100, 4 * 2**20), ("b", 1000, math.nan))])
    cap = captions.caption_memory({"peak_memory": f})
    assert "At T = 1000: a 10.0 MiB (T^1.00); in brackets" in cap     # 10 = 10^1
    assert cap.endswith("a needs 1 times what a needs.")


def test_attention_path_caption_of_a_single_T_states_its_input_scale():
    lv = pd.DataFrame([{"T": 64, "input_scale": s, "log10_level": -s, "log10_min": -s - 1,
                        "log10_max": -s + 1, "log10_value": -2.0, "log10_score": -3.0}
                       for s in (0.5, 2.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # a line through one point: rank-deficient
        cap = captions.caption_attention_path({"attention_level": lv})
    assert "At input scale 0.5 its level (the mean of log10" in cap
    assert "falls from 10^-0.5 at T = 64 to 10^-0.5 at T = 64" in cap


# ------------------------------------------------------------- check_out messages

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


# ------------------------------------------------------------------ figures

def _decay(tanh_far):
    """RNN at ρ = 0.9, k = 1..3, both activations; attention at k = 1..3.
    The tanh RNN's value at k = 3 is ``tanh_far``; everything else within ±3 decades."""
    rows = []
    for act in ("identity", "tanh"):
        for k in (1, 2, 3):
            n = -1.0 * k if act == "identity" else -2.0 * k
            if act == "tanh" and k == 3:
                n = tanh_far
            rows.append({"model": RECURRENCE, "weight": "orthogonal", "input_scale": 1.0,
                         "activation": act, "rho": 0.9, "distance": k, "log10_norm": n,
                         "log10_bound": -0.5 * k})
    for k in (1, 2, 3):
        rows.append({"model": ATTENTION, "weight": "gaussian", "input_scale": 1.0,
                     "activation": "softmax", "rho": float("nan"), "distance": k,
                     "log10_norm": -0.25 * k, "log10_bound": float("nan")})
    return pd.DataFrame(rows)


def _panel(fig, act):
    (ax,) = [ax for ax in fig.axes if ax.get_title() == f"activation = {act}"]
    return ax


def _edges(ax):
    """The horizontal lines (the window's edges) on ``ax``."""
    return [ln for ln in ax.lines if len(ln.get_ydata()) == 2
            and ln.get_ydata()[0] == ln.get_ydata()[1] and list(ln.get_xdata()) == [0, 1]]


def _data_y(ax):
    return [float(y) for ln in ax.lines if ln not in _edges(ax) for y in ln.get_ydata()]


def test_decay_figure_legend_has_one_measured_and_one_theory_style_and_its_title():
    fig = figures.figure_decay({"decay": _decay(-6.0)})
    assert [t.get_text() for t in fig.legends[0].texts] == [
        "series", "RNN ρ=0.9", ATTENTION, "curve", "measured", "theory / bound"]
    assert fig._suptitle.get_text() == "RNN: ‖∂h_T/∂h_(T−k)‖;  attention: ‖∂y_T/∂x_(T−k)‖"
    plt.close(fig)


def test_decay_figure_draws_a_value_exactly_on_the_window_as_it_is_on_a_shared_axis():
    # -60 decades is inside the window (|v| > 60 is beyond): no edges, no note, nothing moved;
    # the panels share one y axis, so the identity panel reaches down to -60 too
    fig = figures.figure_decay({"decay": _decay(-60.0)})
    ident, tanh = _panel(fig, "identity"), _panel(fig, "tanh")
    for ax in (ident, tanh):
        assert _edges(ax) == [] and len(ax.texts) == 0
    assert min(_data_y(tanh)) == -60.0
    assert ident.get_ylim() == tanh.get_ylim() and ident.get_ylim()[0] <= -60.0
    plt.close(fig)


def test_decay_figure_draws_values_beyond_the_window_on_its_dotted_edges_with_a_note():
    # +75 decades (an exploding tanh value) is drawn on the +60 edge, not above it
    fig = figures.figure_decay({"decay": _decay(75.0)})
    fig.canvas.draw()
    for act in ("identity", "tanh"):
        ax = _panel(fig, act)
        edges = _edges(ax)
        assert sorted(ln.get_ydata()[0] for ln in edges) == [-60.0, 60.0]
        assert {ln.get_linestyle() for ln in edges} == {":"}     # "the dotted line"
        (note,) = ax.texts
        assert note.get_text() == ("values beyond ±60 decades drawn on the dotted line "
                                   "(1 points)")
        # the note lies inside its panel (outside, the panel's clip would hide it)
        box, frame = note.get_window_extent(), ax.get_window_extent()
        assert (frame.x0 <= box.x0 and box.x1 <= frame.x1
                and frame.y0 <= box.y0 and box.y1 <= frame.y1), (box, frame)
        assert max(_data_y(ax)) <= 60.0
    assert 60.0 in _data_y(_panel(fig, "tanh"))
    plt.close(fig)


def test_clipping_figure_legend_says_before_and_after_clipping():
    c = pd.DataFrame({"rho": [0.5, 1.5], "log10_far_over_near_before": [-4.0, 3.0],
                      "log10_far_over_near_after": [-4.0, 3.0]})
    fig = figures.figure_clipping({"clipping": c})
    assert [t.get_text() for t in fig.legends[0].texts] == ["before clipping", "after clipping"]
    plt.close(fig)


def test_attention_path_figure_colours_input_scale_on_viridis():
    # two input scales: the smaller at viridis' dark end, the larger at its yellow end
    lv = pd.DataFrame([{"T": T, "input_scale": s, "log10_level": -s, "log10_min": -s - 1,
                        "log10_max": -s + 1} for s in (1.0, 4.0) for T in (10, 100, 1000)])
    fig = figures.figure_attention_path({"attention_level": lv})
    viridis = matplotlib.colormaps["viridis"]
    drawn = {float(ln.get_ydata()[0]): mcolors.to_rgba(ln.get_color())
             for ln in fig.axes[0].lines if len(ln.get_xdata()) == 3}
    assert np.allclose(drawn[-1.0], viridis(0.0)) and np.allclose(drawn[-4.0], viridis(1.0))
    # each min-max band in its own line's colour (from its vertices: the band of scale s
    # spans -s - 1 to -s + 1)
    bands = {round(float(np.min(b.get_paths()[0].vertices[:, 1]))): mcolors.to_rgb(b.get_facecolor()[0])
             for b in fig.axes[0].collections if len(b.get_paths())}
    assert np.allclose(bands[-2], mcolors.to_rgb(drawn[-1.0]))
    assert np.allclose(bands[-5], mcolors.to_rgb(drawn[-4.0]))
    plt.close(fig)


def test_encode_keeps_what_lies_outside_the_figure():
    # the decay figure's title sits above the figure (y = 1.02): the files must hold it
    import io
    fig = plt.figure(figsize=(2, 1))
    fig.text(0.5, 1.5, "above")                    # 0.5 in above the top edge
    fig.text(0.5, -1.5, "below")                   # 1.5 in below the bottom edge
    files = figures.encode(fig)
    from PIL import Image
    with Image.open(io.BytesIO(files["png"])) as im:
        assert im.size[1] > 2 * 110                # taller than the 1-inch figure: both texts
    svg = files["svg"].decode("utf-8")
    height = float(re.search(r'<svg[^>]*height="([\d.]+)pt"', svg).group(1))
    assert height > 2 * 72


def _clip_rows(*rows):
    # (rho, log10 before, log10 after, log10 far/near after), threshold 1
    return {"clipping": pd.DataFrame(
        [{"rho": r, "threshold": 1.0, "log10_total_before": b, "log10_total_after": a,
          "log10_far_over_near_before": fn, "log10_far_over_near_after": fn}
         for r, b, a, fn in rows])}


def test_clipping_caption_says_what_was_clipped_from_the_norms():
    lesson = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.5, -1.0, -1.0, -9.0)))
    assert "At ρ = 0.5 nothing is clipped" in lesson
    assert lesson.endswith(": clipping stops explosion, it does not rescue vanishing.")
    both = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.9, 2.0, 0.0, -9.0)))
    assert "At ρ = 0.9 the gradient is clipped too, from 10^+2.0 to 10^+0.0" in both
    assert "nothing is clipped" not in both and "does not rescue" not in both
    neither = captions.caption_clipping(_clip_rows((1.1, -0.5, -0.5, -1.0)))
    assert "At ρ = 1.1 the gradient's norm, 10^-0.5, is under the threshold: nothing is clipped" in neither
    assert "cut to" not in neither and "does not rescue" not in neither


def test_clipping_caption_whole_sentences_and_where_the_conclusion_holds():
    lesson = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.5, -1.0, -1.0, -9.0)))
    assert lesson.startswith("Clipping the total gradient to 1 rescales every distance by the same "
                             "factor. At ρ = 1.5 the gradient of norm 10^+6.0 is cut to 10^+0.0")
    assert lesson.endswith("At ρ = 0.5 nothing is clipped and the far contribution stays 10^-9.0 of "
                           "the near one: clipping stops explosion, it does not rescue vanishing.")
    mild = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.9, 0.5, 0.0, -9.0)))
    assert "At ρ = 0.9 the gradient is clipped too, from 10^+0.5 to 10^+0.0" in mild   # half a decade
    assert mild.startswith("Clipping the total gradient to 1 rescales")
    for far in (0.0, 0.5):            # the small radius does not vanish: no conclusion
        cap = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.5, -1.0, -1.0, far)))
        assert cap.endswith("of the near one.") and "rescue" not in cap
    one = captions.caption_clipping(_clip_rows((1.1, -0.5, -0.5, -1.0)))
    assert one.startswith("Clipping the total gradient to 1 rescales") and one.count("At ρ") == 1
