"""The report's figures, tested by what they draw.

Each ``report.figure_*`` is called on frames built here with known values; the
test then reads the drawn lines, bars, heat maps and legends back from the
matplotlib objects and compares them with the values that went in. Legend
entries are matched to lines by colour, so a series drawn under the wrong
label, a dropped filter or a swapped column fails.
"""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from harness import lessons, report  # noqa: E402
from harness.models import ATTENTION, RECURRENCE  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ------------------------------------------------------------------ reading a figure back

def _legend(fig):
    """{label: colour} of the figure-level legend seaborn draws."""
    assert len(fig.legends) == 1
    leg = fig.legends[0]
    out = {}
    for text, handle in zip(leg.texts, leg.legend_handles):
        color = handle.get_color() if hasattr(handle, "get_color") else handle.get_facecolor()
        out[text.get_text()] = mcolors.to_rgba(color)
    return out


def _lines(ax):
    """[(rgba, x, y)] of every line with data on ``ax`` (vertical markers included)."""
    return [(mcolors.to_rgba(ln.get_color()), np.asarray(ln.get_xdata(), float),
             np.asarray(ln.get_ydata(), float))
            for ln in ax.lines if len(ln.get_xdata())]


def _curves(ax, color):
    """Every (x, y) drawn on ``ax`` in ``color``, sorted so the comparison ignores order."""
    return sorted(((tuple(x), tuple(y)) for c, x, y in _lines(ax) if np.allclose(c, color)))


def _axis(fig, value):
    """The one panel whose title names the facet ``value`` ("measure = span", "span")."""
    found = [ax for ax in fig.axes
             if value in (part.strip() for part in re.split(r"[=,|]", ax.get_title()))]
    assert len(found) == 1, (value, [ax.get_title() for ax in fig.axes])
    return found[0]


def _label(labels, *parts):
    """The one legend label that contains every part."""
    found = [lab for lab in labels if all(p in lab for p in parts)]
    assert len(found) == 1, (parts, list(labels))
    return found[0]


def _xy(x, y):
    return tuple(float(v) for v in x), tuple(float(v) for v in y)


# ------------------------------------------------------------------ decay

def _decay_frame():
    """RNN rows at two radii and both activations (plus rows the figure must leave out),
    attention rows at two input scales. Values are arbitrary and distinct."""
    rows = []
    k = np.arange(1, 6)
    for weight in ("orthogonal", "gaussian"):
        for scale in (1.0, 4.0):
            for act in ("identity", "tanh"):
                for rho in (0.5, 0.9):
                    base = 100 * (weight == "gaussian") + 10 * (scale == 4.0) + (act == "tanh")
                    norm = k * math.log10(rho) - base
                    bound = k * math.log10(2 * rho) - base
                    if rho == 0.5 and act == "tanh":
                        norm = norm.astype(float).copy()
                        norm[-1] = -75.0               # outside the drawn window (-60, 60)
                    for kk, n, b in zip(k, norm, bound):
                        rows.append(dict(model=RECURRENCE, weight=weight, input_scale=scale,
                                         activation=act, rho=rho, distance=kk, log10_norm=n,
                                         log10_bound=b))
    for scale in (1.0, 4.0):
        for kk in k:
            rows.append(dict(model=ATTENTION, weight="gaussian", input_scale=scale,
                             activation="softmax", rho=np.nan, distance=kk,
                             log10_norm=-0.1 * kk - (scale == 4.0), log10_bound=np.nan))
    return pd.DataFrame(rows)


def test_decay_figure_draws_each_radius_its_bound_and_attention_in_both_panels():
    d = _decay_frame()
    fig = report.figure_decay({"decay": d})
    legend = _legend(fig)
    labels = list(legend)
    att = legend[_label(labels, ATTENTION)]
    for act in ("identity", "tanh"):
        ax = _axis(fig, act)
        for rho in (0.5, 0.9):
            color = legend[_label(labels, "RNN", f"{rho:g}")]
            r = d[(d.model == RECURRENCE) & (d.weight == "orthogonal") & (d.input_scale == 1.0)
                  & (d.activation == act) & (d.rho == rho)]
            want_bound = _xy(r.distance, r.log10_bound)
            drawn = _curves(ax, color)
            assert len(drawn) == 2 and want_bound in drawn, (act, rho)
            measured = dict(zip(*drawn[1 - drawn.index(want_bound)]))
            # inside the window every point as measured; the one beyond -60 decades is left
            # out or drawn on the window's edge, never below it
            inside = r[r.log10_norm.abs() < 60]
            assert {k: measured[k] for k in inside.distance} == dict(zip(inside.distance,
                                                                         inside.log10_norm))
            outside = set(r.distance) - set(inside.distance)
            assert all(measured.get(k, -60.0) == -60.0 for k in outside)
            assert set(measured) <= set(r.distance)
        a = d[(d.model == ATTENTION) & (d.input_scale == 1.0)]
        assert _curves(ax, att) == [_xy(a.distance, a.log10_norm)]
    assert {"measured", "theory / bound"} <= set(labels)     # the two line styles


# ------------------------------------------------------------------ clipping

def test_clipping_figure_bars_are_the_far_over_near_ratios_before_and_after():
    c = pd.DataFrame({"rho": [1.5, 0.5, 1.0],
                      "log10_far_over_near_before": [3.0, -4.0, 0.25],
                      "log10_far_over_near_after": [3.5, -4.5, 0.5]})
    fig = report.figure_clipping({"clipping": c})
    legend = _legend(fig)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1.0", "1.5"]
    by_rho = c.sort_values("rho")
    for when, column in (("before", "log10_far_over_near_before"),
                         ("after", "log10_far_over_near_after")):
        color = legend[_label(legend, when)]
        bars = [p for cont in ax.containers for p in cont if np.allclose(p.get_facecolor(), color)]
        assert [p.get_height() for p in sorted(bars, key=lambda p: p.get_x())] == \
            by_rho[column].tolist(), when


# ------------------------------------------------------------------ depth, schedule, work

def _depth_frame():
    rows = []
    for T in (10, 100, 1000):
        rows.append(dict(model=RECURRENCE, T=T, d=8, span=3 * T, max_path=3 * T - 1,
                         scalar_span=T * 6, macs=2 * T * 64, flops=4 * T * 64))
        rows.append(dict(model=ATTENTION, T=T, d=8, span=9, max_path=2,
                         scalar_span=13 + 3 * round(math.log2(T)), macs=2 * T * T * 8,
                         flops=4 * T * T * 8))
    return pd.DataFrame(rows)


def test_depth_figure_has_one_panel_per_measure_and_one_line_per_model():
    t = _depth_frame().assign(scalar_work=7, ops=3)            # columns the figure leaves out
    fig = report.figure_depth({"depth": t})
    legend = _legend(fig)
    assert sorted(ax.get_title().split("= ")[-1] for ax in fig.axes) == \
        ["max_path", "scalar_span", "span"]
    shared = fig.axes[0].get_shared_y_axes()
    assert not shared.joined(fig.axes[0], fig.axes[2])         # a y scale per measure
    for measure in ("span", "max_path", "scalar_span"):
        ax = _axis(fig, measure)
        assert ax.get_xscale() == ax.get_yscale() == "log"
        for model in (RECURRENCE, ATTENTION):
            g = t[t.model == model]
            assert _curves(ax, legend[model]) == [_xy(g["T"], g[measure])], (measure, model)


def _schedule_frame(T=800):
    rows = []
    for grain in ("scalar", "element"):
        for P in (1, 10, 100, 1000):
            rows.append(dict(model=RECURRENCE, T=T, d=8, grain=grain, P=P,
                             time=5000 // min(P, 10) + (grain == "element")))
            rows.append(dict(model=ATTENTION, T=T, d=8, grain=grain, P=P,
                             time=9000 // P + 7 + (grain == "element")))
    return pd.DataFrame(rows)


def test_schedule_figure_draws_steps_per_grain_and_marks_P_equals_T():
    s = _schedule_frame(T=800)
    fig = report.figure_schedule({"schedule": s})
    legend = _legend(fig)
    for grain in ("scalar", "element"):
        ax = _axis(fig, grain)
        assert ax.get_xscale() == ax.get_yscale() == "log"
        for model in (RECURRENCE, ATTENTION):
            g = s[(s.model == model) & (s.grain == grain)]
            assert _xy(g.P, g.time) in _curves(ax, legend[model])
        # the lesson's T processors, marked by a vertical line
        verticals = [x for _, x, y in _lines(ax) if len(x) == 2 and x[0] == x[1]]
        assert verticals and all(v[0] == 800 for v in verticals)


def _crossover_frame(measured, extrapolated, counted=8):
    return pd.DataFrame([dict(d=8, variant=ATTENTION, counted_T=counted, measured_T=measured,
                              extrapolated_T=extrapolated, gemm_over_matvec=3.0),
                         dict(d=8, variant=ATTENTION + "+proj", counted_T=np.nan,
                              measured_T=999.0, extrapolated_T=np.nan, gemm_over_matvec=1.0)])


@pytest.mark.parametrize("measured,extrapolated,ratio", [
    (20.0, 500.0, 2.5),                  # measured: the extrapolation is ignored
    (np.nan, 36.0, 4.5),                 # not measured: the extrapolated crossover
    (np.nan, np.nan, np.nan),            # neither: no line
])
def test_work_figure_marks_the_counted_and_the_measured_crossover(measured, extrapolated, ratio):
    w = _depth_frame()[["model", "T", "d", "macs", "flops"]]
    fig = report.figure_work({"work": w, "crossover": _crossover_frame(measured, extrapolated)})
    legend = _legend(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    for model in (RECURRENCE, ATTENTION):
        g = w[w.model == model]
        assert _curves(ax, legend[model]) == [_xy(g["T"], g.macs)]
    verticals = sorted(x[0] for _, x, _ in _lines(ax) if len(x) == 2 and x[0] == x[1])
    want = [8.0] if math.isnan(ratio) else sorted([8.0, ratio * 8])
    assert verticals == pytest.approx(want)
    texts = [t.get_text() for t in ax.get_legend().texts if t.get_text() not in legend]
    assert len(texts) == len(want)
    if not math.isnan(ratio):
        assert any(f"{ratio:.1f}" in t for t in texts)


# ------------------------------------------------------------------ lessons

def _maps_frame():
    rows = []
    n = len(lessons.SENTENCE)
    for s, setting in enumerate(("length 1", "length 3", "projected")):
        for i, q in enumerate(lessons.SENTENCE):
            for j, k in enumerate(lessons.SENTENCE):
                rows.append(dict(setting=setting, query=q, key=k, i=i, j=j,
                                 weight=round((1 + i * n + j + s) / (n * n + 3), 4)))
    # stored in an order other than the sentence's: the figure must put it back
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)


def test_attention_maps_are_drawn_in_sentence_order_per_setting():
    m = _maps_frame()
    fig = report.figure_maps({"attention_maps": m})
    order = list(lessons.SENTENCE)
    for setting in ("length 1", "length 3", "projected"):
        ax = _axis(fig, setting)
        want = (m[m.setting == setting].pivot(index="query", columns="key", values="weight")
                .loc[order, order].to_numpy())
        np.testing.assert_array_equal(np.asarray(ax.collections[0].get_array()).reshape(want.shape),
                                      want)
        assert [t.get_text() for t in ax.texts] == [f"{v:.2f}" for v in want.ravel()]
        assert [t.get_text() for t in ax.get_xticklabels()] == order
        norm = ax.collections[0].norm                           # one colour scale for all panels
        assert (norm.vmin, norm.vmax) == (0.0, 1.0)


def test_additive_maps_are_drawn_per_setting():
    rows = [dict(setting=s, i=i, j=j, weight=0.01 * (i * 4 + j) + 0.1 * k)
            for k, s in enumerate(("tanh", "no tanh")) for i in range(4) for j in range(4)]
    m = pd.DataFrame(rows)
    fig = report.figure_additive({"additive_maps": m})
    for s in ("tanh", "no tanh"):
        ax = _axis(fig, s)
        want = m[m.setting == s].pivot(index="i", columns="j", values="weight").to_numpy()
        np.testing.assert_allclose(np.asarray(ax.collections[0].get_array()).reshape(4, 4), want)
    norms = {(a.collections[0].norm.vmin, a.collections[0].norm.vmax) for a in fig.axes}
    assert len(norms) == 1 and norms.pop()[0] == 0.0           # one colour scale, from 0


def test_row_max_figure_has_a_line_per_scaling():
    rm = pd.DataFrame([dict(d_k=dk, scaled=sc, row_max=(0.3 if sc else 0.5) + 0.01 * i,
                            band_lo=0.1 + 0.01 * i, band_hi=0.9 - 0.01 * i, draws=50)
                       for i, dk in enumerate((8, 64, 512)) for sc in (False, True)])
    fig = report.figure_row_max({"row_max": rm})
    legend = _legend(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    for sc in (False, True):
        g = rm[rm.scaled == sc]
        assert _curves(ax, legend[str(sc)]) == [_xy(g.d_k, g.row_max)]


def test_routes_figure_draws_each_route_under_its_own_name():
    r = pd.DataFrame({"va_scale": [0.25, 0.5, 2.0], "value_norm": [3.0, 2.8, 2.5],
                      "score_norm": [0.05, 0.26, 4.1], "value_over_score": [60.0, 10.8, 0.6]})
    fig = report.figure_routes({"additive_routes": r})
    legend = _legend(fig)
    ax = fig.axes[0]
    assert len(_lines(ax)) == 2 and ax.get_xscale() == ax.get_yscale() == "log"
    assert _curves(ax, legend[_label(legend, "value")]) == [_xy(r.va_scale, r.value_norm)]
    assert _curves(ax, legend[_label(legend, "score")]) == [_xy(r.va_scale, r.score_norm)]


# ------------------------------------------------------------------ measured

def test_wall_figure_has_a_line_per_variant():
    rows = [dict(model=m, T=T, d=8, threads=1, seconds=c * T ** p)
            for m, c, p in ((RECURRENCE, 1e-6, 1), (ATTENTION, 1e-8, 2), (ATTENTION + "+proj", 2e-8, 2))
            for T in (32, 64, 128)]
    w = pd.DataFrame(rows)
    fig = report.figure_wall({"wall_times": w})
    legend = _legend(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    for m in w.model.unique():
        g = w[w.model == m]
        assert _curves(ax, legend[m]) == [_xy(g["T"], g.seconds)], m


def test_history_figure_has_a_panel_per_T_and_a_line_per_series():
    rows = [dict(commit=c, date=pd.Timestamp("2026-01-01") + pd.Timedelta(days=i), series=s, T=T,
                 d=256, seconds=(i + 1) * T * (2 if "backward" in s else 1) * 1e-6)
            for i, c in enumerate(("aaaa1111", "bbbb2222", "cccc3333"))
            for s in ("rnn forward", "rnn backward") for T in (64, 1024)]
    h = pd.DataFrame(rows)
    fig = report.figure_history({"asv_history": h})
    legend = _legend(fig)
    a64, a1024 = _axis(fig, "64"), _axis(fig, "1024")
    assert a64.get_yscale() == "log" and not a64.get_shared_y_axes().joined(a64, a1024)
    for T in (64, 1024):
        ax = _axis(fig, str(T))
        assert [t.get_text() for t in ax.get_xticklabels()] == ["aaaa1111", "bbbb2222", "cccc3333"]
        for s in ("rnn forward", "rnn backward"):
            g = h[(h.series == s) & (h["T"] == T)]
            assert _curves(ax, legend[s]) == [_xy(range(3), g.seconds)], (T, s)


def test_attention_path_figure_draws_a_level_and_a_band_per_input_scale():
    lv = pd.DataFrame([dict(T=T, input_scale=s, log10_level=-s * math.log10(T),
                            log10_min=-s * math.log10(T) - 1, log10_max=-s * math.log10(T) + 0.5)
                       for s in (1.0, 4.0) for T in (10, 100, 1000)])
    fig = report.figure_attention_path({"attention_level": lv})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    levels = sorted(_xy(x, y) for _, x, y in _lines(ax))
    want = sorted(_xy(g["T"], g.log10_level) for _, g in lv.groupby("input_scale"))
    assert levels == want
    bands = [c for c in ax.collections if len(c.get_paths())]
    assert len(bands) == 2
    for band, (_, g) in zip(bands, lv.groupby("input_scale")):
        v = band.get_paths()[0].vertices
        assert v[:, 1].min() == pytest.approx(g.log10_min.min())
        assert v[:, 1].max() == pytest.approx(g.log10_max.max())


def _horizontal(ax):
    return sorted(y[0] for _, x, y in _lines(ax) if len(y) == 2 and y[0] == y[1])


def test_decay_figure_marks_the_window_edge_only_when_a_value_is_beyond_it():
    d = _decay_frame()
    fig = report.figure_decay({"decay": d})
    for act in ("identity", "tanh"):
        ax = _axis(fig, act)
        assert _horizontal(ax) == [-60.0, 60.0]
        (text,) = [t.get_text() for t in ax.texts]
        nums = [float(v) for v in re.findall(r"\d+", text)]
        assert 60 in nums and 1 in nums                 # one value beyond 60 decades
    inside = d[d.log10_norm.abs() < 60]
    fig = report.figure_decay({"decay": inside})
    for ax in fig.axes:
        assert _horizontal(ax) == [] and len(ax.texts) == 0


def test_row_max_figure_draws_the_band_of_single_draws_and_the_lessons_draw():
    rm = pd.DataFrame([dict(d_k=dk, scaled=sc, row_max=(0.3 if sc else 0.5) + 0.01 * i,
                            band_lo=(0.1 if sc else 0.2) + 0.01 * i, band_hi=0.9 - 0.01 * i, draws=50)
                       for i, dk in enumerate((8, 64, 512)) for sc in (False, True)])
    lesson = pd.DataFrame({"d_k": [8, 512], "scaled": [False, False], "lesson_row_max": [0.558, 0.983]})
    fig = report.figure_row_max({"row_max": rm, "row_max_lesson": lesson})
    ax = fig.axes[0]
    spans = [(p.vertices[:, 1].min(), p.vertices[:, 1].max()) for c in ax.collections
             for p in c.get_paths()[:1] if len(p.vertices)]
    for _, g in rm.groupby("scaled"):                   # a band from band_lo to band_hi each
        assert any(np.allclose(sp, (g.band_lo.min(), g.band_hi.max())) for sp in spans), spans
    dots = [c for c in ax.collections if type(c).__name__ == "PathCollection"
            and len(c.get_offsets()) == 2]
    assert len(dots) == 1
    np.testing.assert_allclose(dots[0].get_offsets(), [[8, 0.558], [512, 0.983]])
    assert any("lesson" in t.get_text() for t in ax.get_legend().texts)
    plain = report.figure_row_max({"row_max": rm})
    assert not [c for c in plain.axes[0].collections if type(c).__name__ == "PathCollection"
                and len(c.get_offsets()) == 2]


def test_wall_figure_draws_each_interval_in_its_lines_colour():
    rows = [dict(model=m, T=T, d=8, threads=1, seconds=c * T, seconds_lo=0.9 * c * T,
                 seconds_hi=1.2 * c * T) for m, c in ((RECURRENCE, 1e-6), (ATTENTION, 3e-6))
            for T in (32, 64)]
    w = pd.DataFrame(rows)
    fig = report.figure_wall({"wall_times": w})
    legend = _legend(fig)
    ax = fig.axes[0]
    segs = {}
    for c in ax.collections:
        if type(c).__name__ == "LineCollection":
            color = tuple(mcolors.to_rgba(c.get_colors()[0]))
            segs[color] = sorted(tuple(map(tuple, s)) for s in c.get_segments())
    for m in (RECURRENCE, ATTENTION):
        g = w[w.model == m]
        want = sorted(((T, lo), (T, hi)) for T, lo, hi in zip(g["T"], g.seconds_lo, g.seconds_hi))
        got = [v for k, v in segs.items() if np.allclose(k, legend[m])]
        assert len(got) == 1 and np.allclose(got[0], want), m
