"""The report's figures, tested by what they draw.

Each ``figures.figure_*`` is called on frames built here with known values; the
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

from harness.analysis import lessons
from harness.report import captions, figures  # noqa: E402
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
    fig = figures.figure_decay({"decay": d})
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


def test_decay_figure_draws_every_family_in_its_frame():
    """No family is selected by name: the LRU's rows (one activation, no input scale) are drawn
    in every panel, and a family the registry does not know is drawn under its own name."""
    k = np.arange(1, 6)
    lru = pd.DataFrame(dict(model="lru", weight="ring", input_scale=np.nan, activation="identity",
                            rho=0.9, distance=k, log10_norm=-0.3 * k, log10_bound=-0.2 * k))
    new = pd.DataFrame([dict(model="newfam", weight="gaussian", input_scale=1.0, activation=act,
                             rho=0.7, distance=kk, log10_norm=-5.0 * kk - (act == "tanh"),
                             log10_bound=np.nan) for act in ("identity", "tanh") for kk in k])
    fig = figures.figure_decay({"decay": pd.concat([_decay_frame(), lru, new], ignore_index=True)})
    legend = _legend(fig)
    labels = list(legend)
    for act in ("identity", "tanh"):
        ax = _axis(fig, act)
        assert _curves(ax, legend[_label(labels, "(LRU)", "0.9")]) == sorted(
            [_xy(k, -0.3 * k), _xy(k, -0.2 * k)])                 # measured and its bound
        drawn = new[new.activation == act]
        assert _curves(ax, legend[_label(labels, "newfam", "0.7")]) == [
            _xy(drawn.distance, drawn.log10_norm)]                # its own panel only


# ------------------------------------------------------------------ clipping

def test_clipping_figure_bars_are_the_far_over_near_ratios_before_and_after():
    c = pd.DataFrame({"rho": [1.5, 0.5, 1.0],
                      "log10_far_over_near_before": [3.0, -4.0, 0.25],
                      "log10_far_over_near_after": [3.5, -4.5, 0.5]})
    fig = figures.figure_clipping({"clipping": c})
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
    fig = figures.figure_depth({"depth": t})
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
    fig = figures.figure_schedule({"schedule": s})
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
    fig = figures.figure_work({"work": w, "crossover": _crossover_frame(measured, extrapolated)})
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


def _layer_work_frame():
    """The layer's counts, linear 104 T and quadratic 2 T^2 (they meet at T = 52 = 6.5 d), and
    two recurrences' (linear only)."""
    rows = []
    for T in (16, 64, 256):
        rows.append(dict(model="transformer", T=T, d=8, linear=104 * T, quadratic=2 * T * T,
                         macs=104 * T + 2 * T * T))
        for model, c in ((RECURRENCE, 128), ("lstm", 512)):
            rows.append(dict(model=model, T=T, d=8, linear=c * T, quadratic=0, macs=c * T))
    return pd.DataFrame(rows)


def test_layer_work_figure_draws_each_model_and_where_the_layers_square_terms_pass_the_rest():
    w = _layer_work_frame()
    fig = figures.figure_layer_work({"layer_work": w})
    legend = _legend(fig)
    assert set(legend) == {"transformer", RECURRENCE, "lstm"}
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    for model in legend:
        g = w[w.model == model]
        assert _curves(ax, legend[model]) == [_xy(g["T"], g.macs)]
    label = "the layer's T² terms pass the rest: T = 6.5·d"
    (v,) = [ln for ln in ax.lines if ln.get_label() == label]
    assert tuple(v.get_xdata()) == (52.0, 52.0)
    assert (v.get_linestyle(), v.get_linewidth(), mcolors.to_hex(v.get_color())) == ("--", 1.0, "#000000")
    leg = ax.get_legend()
    assert [t.get_text() for t in leg.texts] == [label]
    assert leg._loc == 2 and {t.get_fontsize() for t in leg.texts} == {8}   # upper left


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
    fig = figures.figure_maps({"attention_maps": m})
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
    fig = figures.figure_additive({"additive_maps": m})
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
    fig = figures.figure_row_max({"row_max": rm})
    legend = _legend(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    for sc in (False, True):
        g = rm[rm.scaled == sc]
        assert _curves(ax, legend[str(sc)]) == [_xy(g.d_k, g.row_max)]


def test_routes_figure_draws_each_route_under_its_own_name():
    r = pd.DataFrame({"va_scale": [0.25, 0.5, 2.0], "value_norm": [3.0, 2.8, 2.5],
                      "score_norm": [0.05, 0.26, 4.1], "value_over_score": [60.0, 10.8, 0.6]})
    fig = figures.figure_routes({"additive_routes": r})
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
    fig = figures.figure_wall({"wall_times": w})
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
    fig = figures.figure_history({"asv_history": h})
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
    fig = figures.figure_attention_path({"attention_level": lv})
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
    fig = figures.figure_decay({"decay": d})
    for act in ("identity", "tanh"):
        ax = _axis(fig, act)
        assert _horizontal(ax) == [-60.0, 60.0]
        (text,) = [t.get_text() for t in ax.texts]
        nums = [float(v) for v in re.findall(r"\d+", text)]
        assert 60 in nums and 1 in nums                 # one value beyond 60 decades
    inside = d[d.log10_norm.abs() < 60]
    fig = figures.figure_decay({"decay": inside})
    for ax in fig.axes:
        assert _horizontal(ax) == [] and len(ax.texts) == 0


def test_row_max_figure_draws_the_band_of_single_draws_and_the_lessons_draw():
    rm = pd.DataFrame([dict(d_k=dk, scaled=sc, row_max=(0.3 if sc else 0.5) + 0.01 * i,
                            band_lo=(0.1 if sc else 0.2) + 0.01 * i, band_hi=0.9 - 0.01 * i, draws=50)
                       for i, dk in enumerate((8, 64, 512)) for sc in (False, True)])
    lesson = pd.DataFrame({"d_k": [8, 512], "scaled": [False, False], "lesson_row_max": [0.558, 0.983]})
    fig = figures.figure_row_max({"row_max": rm, "row_max_lesson": lesson})
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
    plain = figures.figure_row_max({"row_max": rm})
    assert not [c for c in plain.axes[0].collections if type(c).__name__ == "PathCollection"
                and len(c.get_offsets()) == 2]


def test_wall_figure_draws_each_interval_in_its_lines_colour():
    rows = [dict(model=m, T=T, d=8, threads=1, seconds=c * T, seconds_lo=0.9 * c * T,
                 seconds_hi=1.2 * c * T) for m, c in ((RECURRENCE, 1e-6), (ATTENTION, 3e-6))
            for T in (32, 64)]
    w = pd.DataFrame(rows)
    fig = figures.figure_wall({"wall_times": w})
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


# ------------------------------------------------------------------ the linear recurrence

def _lru_decay_frame():
    """Two radii, k = 1..4: the measured norm a little off k log10 r, so the two curves differ."""
    return pd.DataFrame([dict(model="lru", rho=r, distance=k, log10_norm=k * math.log10(r) + 0.01 * k,
                              log10_linear=k * math.log10(r)) for r in (0.5, 0.99) for k in range(1, 5)])


def test_lru_decay_figure_draws_each_radius_measured_and_its_line():
    d = _lru_decay_frame()
    fig = figures.figure_lru_decay({"lru_decay": d})
    legend = _legend(fig)
    assert {"max|λ| = 0.5", "max|λ| = 0.99", "measured", "k·log10 r"} <= set(legend)
    ax = fig.axes[0]
    for r in (0.5, 0.99):
        g = d[d.rho == r]
        assert _curves(ax, legend[f"max|λ| = {r:g}"]) == sorted(
            [_xy(g.distance, g.log10_norm), _xy(g.distance, g.log10_linear)])
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("distance k",
                                                  "log10 ‖∂h_T/∂h_(T−k)‖, linear recurrence")


def test_recurrence_caption_states_the_scans_span_work_and_exact_decay():
    # spans and scalar work per form at two T; the scan's work 2.5x the loop's at the larger T
    rows = []
    for T, scan_span, loop_span, rnn_span in ((16, 9, 1600, 48), (256, 17, 25600, 768)):
        rows += [dict(model="lru-scan", T=T, span=scan_span, scalar_work=5 * T),
                 dict(model="lru", T=T, span=loop_span, scalar_work=2 * T),
                 dict(model=RECURRENCE, T=T, span=rnn_span, scalar_work=7 * T)]
    d = pd.DataFrame(rows).sample(frac=1.0, random_state=1)       # any row order
    lr = _lru_decay_frame()
    lr.loc[(lr.rho == 0.5) & (lr.distance == 4), "log10_norm"] = -1.25
    lr.loc[(lr.rho == 0.99) & (lr.distance == 4), "log10_norm"] = -0.04
    cap = captions.caption_recurrence({"scan_depth": d, "lru_decay": lr})
    assert ("computed by a parallel scan (lru-scan) its span goes from 9 to 17 operations as T "
            "goes from 16 to 256, like log T, where its step loop's goes from 1,600 to 25,600 and "
            "the tanh RNN's from 48 to 768. For that, the scan does 2.50× the loop's scalar "
            "operations at T = 256.") in cap
    assert cap.endswith("at k = 4, 10^-1.2 for max|λ| = 0.5, 10^-0.0 for max|λ| = 0.99.")
    assert cap.startswith("A diagonal linear recurrence, h_t = λ ⊙ h_(t−1) + B x_t (LRU, S5, Mamba), "
                          "is a prefix scan: ")


# ------------------------------------------------------------------ what every figure says

def _memory_frame():
    return pd.DataFrame({"model": ["a"] * 3 + ["b"] * 3, "T": [10, 20, 40] * 2, "d": 4,
                         "dtype": "float64", "peak_bytes": [2.0**20 * k for k in (1, 2, 4, 4, 16, 64)],
                         "output_bytes": 0, "estimate_bytes": 0})


def _every_figure():
    """{name: (figure, frames)} for each figure, on the frames the tests above build."""
    w = _depth_frame()
    rm = pd.DataFrame([dict(d_k=dk, scaled=sc, row_max=0.3 + 0.01 * i, band_lo=0.1, band_hi=0.9,
                            draws=50) for i, dk in enumerate((8, 64, 512)) for sc in (False, True)])
    lesson = pd.DataFrame({"d_k": [8, 512], "scaled": [False, False], "lesson_row_max": [0.5, 0.9]})
    wall = pd.DataFrame([dict(model=m, T=T, d=8, threads=1, seconds=c * T, seconds_lo=0.9 * c * T,
                              seconds_hi=1.1 * c * T)
                         for m, c in ((RECURRENCE, 1e-6), (ATTENTION, 3e-6)) for T in (32, 64, 128)])
    hist = pd.DataFrame([dict(commit=c, date=pd.Timestamp("2026-01-01") + pd.Timedelta(days=i),
                              series="rnn forward", T=T, d=256, seconds=(i + 1) * 1e-6)
                         for i, c in enumerate(("a1", "b2", "c3")) for T in (64, 128, 256, 512, 1024)])
    lv = pd.DataFrame([dict(T=T, input_scale=s, log10_level=-s, log10_min=-s - 1, log10_max=-s + 1)
                       for s in (1.0, 4.0) for T in (10, 100, 1000)])
    routes = pd.DataFrame({"va_scale": [0.25, 0.5, 2.0], "value_norm": [3.0, 2.8, 2.5],
                           "score_norm": [0.05, 0.26, 4.1]})
    clip = pd.DataFrame({"rho": [0.5, 1.5], "log10_far_over_near_before": [-4.0, 3.0],
                         "log10_far_over_near_after": [-4.0, 3.0]})
    additive = pd.DataFrame([dict(setting=s, i=i, j=j, weight=0.02 * (i + j))
                             for s in ("tanh", "no tanh") for i in range(3) for j in range(3)])
    return {
        "decay": (figures.figure_decay, {"decay": _decay_frame()}),
        "lru_decay": (figures.figure_lru_decay, {"lru_decay": _lru_decay_frame()}),
        "attention_path": (figures.figure_attention_path, {"attention_level": lv}),
        "clipping": (figures.figure_clipping, {"clipping": clip}),
        "depth": (figures.figure_depth, {"depth": w}),
        "schedule": (figures.figure_schedule, {"schedule": _schedule_frame()}),
        "work": (figures.figure_work, {"work": w[["model", "T", "d", "macs", "flops"]],
                                      "crossover": _crossover_frame(20.0, np.nan)}),
        "maps": (figures.figure_maps, {"attention_maps": _maps_frame()}),
        "additive": (figures.figure_additive, {"additive_maps": additive}),
        "row_max": (figures.figure_row_max, {"row_max": rm, "row_max_lesson": lesson}),
        "routes": (figures.figure_routes, {"additive_routes": routes}),
        "wall": (figures.figure_wall, {"wall_times": wall}),
        "memory": (figures.figure_memory, {"peak_memory": _memory_frame()}),
        "history": (figures.figure_history, {"asv_history": hist}),
        "layer_work": (figures.figure_layer_work, {"layer_work": _layer_work_frame()}),
    }


AXIS_LABELS = {          # (x, y) as the reader sees them; None where seaborn names the column
    "decay": ("distance k", "log10 ‖∂(state or output at T) / ∂(position T−k)‖"),
    "lru_decay": ("distance k", "log10 ‖∂h_T/∂h_(T−k)‖, linear recurrence"),
    "attention_path": ("T", "log10 ‖∂y_T/∂x_(T−k)‖: mean over k, band min–max"),
    "clipping": ("ρ", "log10 (far / near contribution)"),
    "depth": ("T", "operations"),
    "schedule": ("processors P", "steps T_P (greedy schedule)"),
    "work": ("T", "multiplications (traced)"),
    "row_max": ("d_k", "mean row maximum of A (band: 95 % of draws)"),
    "routes": ("scale of va", "‖gradient reaching H‖"),
    "wall": ("T", "forward wall time (s), median and 95 % interval"),
    "memory": ("T", "peak memory of one forward (MiB)"),
    "history": ("commit (oldest first)", "time (s)"),
    "layer_work": ("T", "multiplications (traced), every product"),
}


@pytest.mark.parametrize("name", sorted(AXIS_LABELS))
def test_every_figure_names_its_axes(name):
    fn, frames = _every_figure()[name]
    fig = fn(frames)
    xs = {ax.get_xlabel() for ax in fig.axes} - {""}
    ys = {ax.get_ylabel() for ax in fig.axes} - {""}
    assert (xs, ys) == ({AXIS_LABELS[name][0]}, {AXIS_LABELS[name][1]})


# the line figures mark each sampled value with a dot, so a reader sees where the samples are
MARKED = ["attention_path", "depth", "schedule", "work", "row_max", "routes", "wall", "memory",
          "history", "layer_work"]


@pytest.mark.parametrize("name", MARKED)
def test_line_figures_mark_every_sample(name):
    fn, frames = _every_figure()[name]
    fig = fn(frames)
    data = [ln for ax in fig.axes for ln in ax.lines if len(ln.get_xdata()) >= 3]
    assert data and all(ln.get_marker() not in (None, "None", "", " ") for ln in data), name
    if name in ("work", "layer_work"):   # a marker per model: overlapping lines stay told apart
        assert len({str(ln.get_marker()) for ln in data}) == len(data), name


def test_history_panels_wrap_after_four_with_rotated_commit_labels():
    fn, frames = _every_figure()["history"]
    fig = fn(frames)
    rows = sorted({round(ax.get_position().y0, 3) for ax in fig.axes})
    cols = sorted({round(ax.get_position().x0, 3) for ax in fig.axes})
    assert len(fig.axes) == 5 and (len(rows), len(cols)) == (2, 4)
    for ax in fig.axes:
        assert all(t.get_rotation() == 60 and t.get_fontsize() == 7 for t in ax.get_xticklabels())


@pytest.mark.parametrize("name, vmax, title", [("maps", 1.0, "{}"),
                                                ("additive", 0.4, "additive alignment, {}")])
def test_heat_maps_are_annotated_on_one_viridis_scale_without_a_colour_bar(name, vmax, title):
    fn, frames = _every_figure()[name]
    data = next(iter(frames.values()))
    fig = fn(frames)
    settings = list(dict.fromkeys(data.setting))
    assert len(fig.axes) == len(settings)                      # no colour-bar axes
    assert [ax.get_title() for ax in fig.axes] == [title.format(s) for s in settings]
    for ax in fig.axes:
        mesh = ax.collections[0]
        assert mesh.get_cmap().name == "viridis"
        assert (mesh.norm.vmin, mesh.norm.vmax) == (0.0, vmax)
        values = np.asarray(mesh.get_array()).ravel()
        assert [t.get_text() for t in ax.texts] == [f"{v:.2f}" for v in values]
        assert {t.get_fontsize() for t in ax.texts} == {7}


def test_work_figure_legend_names_the_two_crossovers_in_their_styles():
    fn, frames = _every_figure()["work"]
    ax = fn(frames).axes[0]
    legend = ax.get_legend()
    assert legend._loc == 2                                    # upper left
    assert {t.get_fontsize() for t in legend.texts} == {8}
    texts = [t.get_text() for t in legend.texts]
    assert texts[-2:] == ["counted crossover T = d", "measured wall-time crossover (2.5 d)"]
    v = {ln.get_label(): ln for ln in ax.lines if ln.get_label() in
         ("counted crossover T = d", "measured wall-time crossover (2.5 d)")}
    counted, measured = v["counted crossover T = d"], v["measured wall-time crossover (2.5 d)"]
    assert (counted.get_linestyle(), counted.get_linewidth(), mcolors.to_hex(counted.get_color())) \
        == ("--", 1.0, "#000000")
    assert (measured.get_linestyle(), measured.get_linewidth(),
            mcolors.to_hex(measured.get_color())) == (":", 1.5, mcolors.to_hex("tab:red"))


def test_row_max_figure_names_the_lessons_draw_as_black_crosses():
    fn, frames = _every_figure()["row_max"]
    ax = fn(frames).axes[0]
    legend = ax.get_legend()
    assert legend._loc == 7                                    # center right
    assert "the lesson's single draw" in [t.get_text() for t in legend.texts]
    assert {t.get_fontsize() for t in legend.texts} == {8}
    (dots,) = [c for c in ax.collections if c.get_label() == "the lesson's single draw"]
    assert mcolors.to_hex(dots.get_facecolor()[0]) == "#000000" and dots.get_zorder() == 5
    cross = plt.figure().gca().scatter([0], [0], marker="x").get_paths()[0].vertices
    np.testing.assert_allclose(dots.get_paths()[0].vertices, cross)


def test_schedule_figure_marks_P_equals_T_with_a_thin_grey_dotted_line():
    fn, frames = _every_figure()["schedule"]
    for ax in fn(frames).axes:
        (line,) = [ln for ln in ax.lines if len(ln.get_xdata()) == 2
                   and ln.get_xdata()[0] == ln.get_xdata()[1]]
        assert line.get_xdata()[0] == 800 and line.get_linestyle() == ":"
        assert line.get_linewidth() == 1 and mcolors.to_hex(line.get_color()) == "#808080"


def test_bands_are_translucent_and_interval_bars_two_points_wide():
    fn, frames = _every_figure()["attention_path"]
    bands = [c for c in fn(frames).axes[0].collections if len(c.get_paths())]
    assert bands and {c.get_alpha() for c in bands} == {0.12}
    fn, frames = _every_figure()["row_max"]
    bands = [c for c in fn(frames).axes[0].collections if c.get_alpha() == 0.15]
    assert len(bands) == 2                                     # one per scaling
    fn, frames = _every_figure()["wall"]
    bars = [c for c in fn(frames).axes[0].collections if type(c).__name__ == "LineCollection"]
    assert len(bars) == 2 and all(list(c.get_linewidths()) == [2.0] for c in bars)


def test_encode_gives_png_and_svg_and_closes_the_figure():
    import io
    fig = plt.figure(figsize=(2, 1))
    fig.gca().plot([0, 1], [0, 1])
    other = plt.figure()                                       # the current figure, not ours
    files = figures.encode(fig)
    assert sorted(files) == ["png", "svg"]
    assert not plt.fignum_exists(fig.number) and plt.fignum_exists(other.number)
    from PIL import Image
    with Image.open(io.BytesIO(files["png"])) as im:
        assert [round(v) for v in im.info["dpi"]] == [110, 110]
    assert files["svg"].decode("utf-8").lstrip().startswith("<?xml")


# ------------------------------------------------------------------ the gated recurrences

def _gated_frame():
    k = np.arange(1, 21)
    base = dict(weight="gaussian", activation="tanh", rho=np.nan, input_scale=1.0, T=21, d=4,
                seed=0, gate_bias=np.nan, log10_gated=np.nan)
    rows = [pd.DataFrame({**base, "model": "rnn", "weight": "orthogonal", "rho": 0.9,
                          "distance": k, "log10_norm": -0.5 * k})]
    for m, b, s in (("lstm", 0.0, 0.3), ("lstm", 3.0, 0.01), ("gru", 1.0, 0.1)):
        rows.append(pd.DataFrame({**base, "model": m, "gate_bias": b, "distance": k,
                                  "log10_norm": -s * k, "log10_gated": -2 * s * k}))
    return pd.concat(rows, ignore_index=True)


def test_gated_caption_states_each_reach_and_the_far_values():
    cap = captions.caption_gated({"gated_decay": _gated_frame()})
    # reach, worked out by hand: -s (k - 1) >= -3 up to k = 1 + 3 / s, capped at T - 1 = 20
    assert "the LSTM's out to k = 11 at gate bias 0, k = 20 at gate bias 3" in cap
    assert "the GRU's out to k = 20 at gate bias 1" in cap
    assert "the tanh RNN's at best out to k = 7" in cap
    assert "LSTM at gate bias 3: 10^-0.2 (its additive route 10^-0.4)" in cap
    assert "GRU at gate bias 1: 10^-2.0 (its additive route 10^-4.0)" in cap


def test_gated_figure_draws_both_routes_of_each_family_beside_the_rnn():
    fig = figures.figure_gated({"gated_decay": _gated_frame()})
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_title())
    assert titles == ["model = gru", "model = lstm", "model = rnn"]
    lstm = next(ax for ax in fig.axes if ax.get_title() == "model = lstm")
    ys = sorted(round(float(line.get_ydata()[-1]), 6) for line in lstm.get_lines()
                if len(line.get_ydata()) == 20)
    # gate bias 0: full -6, additive -12; gate bias 3: full -0.2, additive -0.4
    assert ys == [-12.0, -6.0, -0.4, -0.2]


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


def test_gated_caption_word_for_word_in_the_frames_order_at_unit_scale_only():
    f = _gated_frame()
    # the same LSTM at input scale 3, far worse: not what the unit-scale sentence reads
    other = f[f.model == "lstm"].assign(input_scale=3.0, log10_norm=lambda x: -9.0 * x.distance)
    cap = captions.caption_gated({"gated_decay": pd.concat([f, other], ignore_index=True)})
    # k = 20 = T - 1; the LSTM first, as in the frame (not sorted by name)
    assert cap == (
        "With unit-scale inputs, the gradient stays within 10^-3 of its value at k = 1: the "
        "LSTM's out to k = 11 at gate bias 0, k = 20 at gate bias 3; the GRU's out to k = 20 at "
        "gate bias 1; the tanh RNN's at best out to k = 7. At k = 20: LSTM at gate bias 0: "
        "10^-6.0 (its additive route 10^-12.0), LSTM at gate bias 3: 10^-0.2 (its additive route "
        "10^-0.4), GRU at gate bias 1: 10^-2.0 (its additive route 10^-4.0). The gates open a "
        "route that survives, but its norm still falls with distance: the trip is survivable, "
        "not short (the span and path length in the depth section grow with T as the RNN's).")


# ------------------------------------------------------------------ gated and linear attention

def _gated_scales_frame(beyond=False):
    """lstm and gru at gate biases 0 and 1 (their full path and additive route), the tanh RNN at
    rho 0.9, each at input scales 1 (drawn) and 3 (left out); distinct values everywhere."""
    rows = []
    for m, base in (("lstm", -1.0), ("gru", -2.0)):
        for b in (0.0, 1.0):
            for s in (1.0, 3.0):
                for k in (1, 2, 3):
                    rows.append(dict(model=m, gate_bias=b, rho=np.nan, input_scale=s, distance=k,
                                     log10_norm=base * k - b - 10 * (s - 1),
                                     log10_gated=base * k / 2 - b - 10 * (s - 1)))
    for s in (1.0, 3.0):
        for k in (1, 2, 3):
            rows.append(dict(model="rnn", gate_bias=np.nan, rho=0.9, input_scale=s, distance=k,
                             log10_norm=-0.3 * k - 10 * (s - 1), log10_gated=np.nan))
    d = pd.DataFrame(rows)
    if beyond:                            # one value past the window, both signs
        d.loc[(d.model == "gru") & (d.gate_bias == 1.0) & (d.input_scale == 1.0) & (d.distance == 3),
              "log10_norm"] = -1e3
        d.loc[(d.model == "rnn") & (d.input_scale == 1.0) & (d.distance == 1), "log10_norm"] = 75.0
        # at the edge, not beyond it: drawn where it is, and not counted
        d.loc[(d.model == "lstm") & (d.gate_bias == 0.0) & (d.input_scale == 1.0) & (d.distance == 3),
              "log10_norm"] = -figures.CLIP_DECADES
    return d


@pytest.mark.parametrize("beyond", [False, True])
def test_gated_figure_draws_each_familys_full_path_and_additive_route_per_gate_bias(beyond):
    d = _gated_scales_frame(beyond)
    fig = figures.figure_gated({"gated_decay": d})
    legend = _legend(fig)
    full, additive = "full ∂h_T/∂h_(T−k)", "additive route alone"
    assert [t.get_text() for t in fig.legends[0].texts] == [
        "config", "gate bias 0", "gate bias 1", "ρ = 0.9", "route", full, additive]
    assert sorted(ax.get_title() for ax in fig.axes) == ["model = gru", "model = lstm", "model = rnn"]
    edge = figures.CLIP_DECADES
    u = d[d.input_scale == 1.0]
    for m in ("lstm", "gru"):
        ax = _axis(fig, m)
        for b in (0.0, 1.0):
            g = u[(u.model == m) & (u.gate_bias == b)]
            assert _curves(ax, legend[f"gate bias {b:g}"]) == sorted(
                [_xy(g.distance, g.log10_norm.clip(-edge, edge)), _xy(g.distance, g.log10_gated)])
        assert _curves(ax, legend["ρ = 0.9"]) == []
        # the additive route in its own dashes, the full path solid
        styles = {tuple(ln.get_ydata()): ln.get_linestyle() for ln in ax.lines if len(ln.get_xdata())}
        g = u[(u.model == m) & (u.gate_bias == 0.0)]
        assert styles[tuple(g.log10_norm.clip(-edge, edge))] == "-"
        assert styles[tuple(g.log10_gated)] != "-"
    r = u[u.model == "rnn"]
    assert _curves(_axis(fig, "rnn"), legend["ρ = 0.9"]) == [_xy(r.distance, r.log10_norm.clip(-edge, edge))]
    assert sum(len(_lines(ax)) for ax in fig.axes) == 9          # nothing of input scale 3
    assert {ax.get_xlabel() for ax in fig.axes} - {""} == {"distance k"}
    assert {ax.get_ylabel() for ax in fig.axes} - {""} == {"log10 ‖∂h_T/∂h_(T−k)‖"}
    assert len({ax.get_ylim() for ax in fig.axes}) == 1           # one y scale for the three
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    assert title == (f"values beyond ±{edge} decades drawn at the edge (2 points)" if beyond else "")
    if beyond:                                   # a note in small type just above the panels
        assert (fig._suptitle.get_fontsize(), fig._suptitle.get_position()[1]) == (8.0, 1.02)


def _linear_frames():
    forms = dict(zip(figures.numbers.linear_forms(), figures.numbers.LINEAR_ALGORITHMS))
    Ts = (64, 256, 1024)
    rows = lambda col, f: pd.DataFrame(  # noqa: E731
        [{"model": m, "T": T, col: f(i, j)} for i, m in enumerate(list(forms) + ["rnn"])
         for j, T in enumerate(Ts)])
    depth = rows("span", lambda i, j: 10.0 ** (i + j))
    memory = rows("peak_bytes", lambda i, j: 2.0 ** 20 * (i + 2) * (j + 1))
    wall = rows("seconds", lambda i, j: 1e-3 * (i + 1) * 4 ** j)
    wall["T"] *= 8                                   # timed further out: each panel its own T
    wall.loc[(wall.model == list(forms)[1]) & (wall["T"] == 8192), "seconds"] = np.nan
    depth["work"] = [np.nan] + [1.0] * (len(depth) - 1)    # a gap elsewhere drops no row
    return forms, {"depth": depth, "peak_memory": memory, "wall_times": wall}


def test_linear_figure_draws_each_algorithms_span_memory_and_time_in_its_own_panel():
    forms, f = _linear_frames()
    fig = figures.figure_linear(f)
    legend = _legend(fig)
    assert [t.get_text() for t in fig.legends[0].texts] == list(figures.numbers.LINEAR_ALGORITHMS)
    assert sorted(ax.get_title() for ax in fig.axes) == sorted(
        ["span (operations, traced)", "peak memory (MiB)", "forward time (s)"])
    for title, frame, column, scale in (("span (operations, traced)", f["depth"], "span", 1.0),
                                        ("peak memory (MiB)", f["peak_memory"], "peak_bytes", 2.0 ** -20),
                                        ("forward time (s)", f["wall_times"], "seconds", 1.0)):
        ax = next(ax for ax in fig.axes if ax.get_title() == title)
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("T", "")
        assert isinstance(ax.xaxis.get_minor_formatter(), matplotlib.ticker.NullFormatter)
        for model, algorithm in forms.items():
            g = frame[frame.model == model].dropna(subset=[column])
            assert _curves(ax, legend[algorithm]) == [_xy(g["T"], g[column] * scale)], (title, model)
        assert len(_lines(ax)) == 3                                   # the rnn's rows left out
        # each algorithm its own marker, every line solid
        lines = [ln for ln in ax.lines if len(ln.get_xdata())]
        assert len({ln.get_marker() for ln in lines}) == 3
        assert {ln.get_linestyle() for ln in lines} == {"-"}
        assert "None" not in {ln.get_marker() for ln in lines}
    assert len({ax.get_ylim() for ax in fig.axes}) == 3               # each measure its own scale
    assert len({ax.get_xlim() for ax in fig.axes}) == 2               # and its own T range


# every panel's size in inches (height, width): the report's layout, each figure's facets side
# by side and its legend outside them (seaborn widens the figure by the legend's width)
PANELS = {"additive": (3.2, 3.2), "attention_path": (3.6, 5.04), "clipping": (3.4, 5.1),
          "decay": (3.6, 4.5), "depth": (3.2, 3.52), "gated": (3.4, 3.74), "history": (3.2, 3.2),
          "layer_work": (3.6, 5.4), "linear": (3.2, 3.52), "lru_decay": (3.6, 5.04),
          "maps": (3.4, 3.4), "memory": (3.6, 5.4), "routes": (3.2, 4.48), "row_max": (3.2, 4.48),
          "schedule": (3.4, 4.08), "wall": (3.6, 5.4), "work": (3.6, 5.4)}


@pytest.mark.parametrize("name", sorted(PANELS))
def test_every_figures_panels_have_the_reports_size(name):
    every = _every_figure()
    every["gated"] = (figures.figure_gated, {"gated_decay": _gated_scales_frame()})
    every["linear"] = (figures.figure_linear, _linear_frames()[1])
    fn, frames = every[name]
    fig = fn(frames)
    width, height = fig.get_size_inches()
    cols = len({round(ax.get_position().x0, 3) for ax in fig.axes})
    rows = len({round(ax.get_position().y0, 3) for ax in fig.axes})
    legend = fig.legends[0].get_window_extent().width / fig.dpi if fig.legends else 0.0
    assert height / rows == pytest.approx(PANELS[name][0], abs=1e-9)
    assert (width - legend) / cols == pytest.approx(PANELS[name][1], abs=1e-3)


def test_depth_figure_draws_the_long_lengths_at_their_own_d_in_their_own_style():
    short = _depth_frame()
    long = _depth_frame().assign(d=64, T=lambda x: x["T"] * 100)
    fig = figures.figure_depth({"depth": short, "depth_long": long})
    texts = [t.get_text() for t in fig.legends[0].texts]
    assert texts[texts.index("d"):] == ["d", "8", "64"]
    ax = _axis(fig, "span")
    styles = {}
    for ln in ax.lines:
        if len(ln.get_xdata()) == 3:
            styles[float(ln.get_xdata()[0])] = ln.get_linestyle()
    assert styles[10.0] != styles[1000.0]              # d = 8 from T = 10, d = 64 from T = 1000
    one = figures.figure_depth({"depth": short})        # one d: no style, no "d" in the legend
    assert "d" not in [t.get_text() for t in one.legends[0].texts]
    assert {ln.get_linestyle() for ax in one.axes for ln in ax.lines if len(ln.get_xdata())} == {"-"}


@pytest.mark.parametrize("name", ["work", "layer_work"])
def test_count_figures_draw_every_model_solid_and_told_apart_by_marker(name):
    fn, frames = _every_figure()[name]
    fig = fn(frames)
    lines = [ln for ax in fig.axes for ln in ax.lines if len(ln.get_xdata()) >= 3]
    assert lines and {ln.get_linestyle() for ln in lines} == {"-"}
    assert len({ln.get_marker() for ln in lines}) == len(lines)


def test_a_curves_label_is_its_familys_title_and_each_configuration_key_it_has():
    d = pd.DataFrame({"model": ["rnn", "lstm", "mystery"], "rho": [0.9, np.nan, 1.5],
                      "gate_bias": [np.nan, 1.0, 2.0]})
    assert figures._CURVE_KEYS == ("rho", "gate_bias")
    assert figures._series(d) == ["RNN ρ=0.9", "LSTM gate_bias=1", "mystery ρ=1.5 gate_bias=2"]


# ----------------------------------------------------------------------------- coincident lines

def _three_lines(dy=0.0):
    T = np.array([1.0, 10.0, 100.0])
    return pd.DataFrame({"T": np.tile(T, 3), "macs": np.r_[T, T * (1 + dy), 3 * T],
                         "model": np.repeat(["a", "b", "c"], 3)})


def test_a_line_under_another_is_drawn_apart_and_named():
    g = sns_relplot(_three_lines())
    assert figures.hidden(g.figure) == [["a", "b"]]
    assert figures.reveal(g.figure) == [["a", "b"]]
    assert figures.hidden(g.figure) == []
    a, b, c = g.ax.get_lines()[:3]
    assert b.get_markerfacecolor() == "none" and b.get_markersize() > a.get_markersize()
    assert b.get_linestyle() != a.get_linestyle() and c.get_linestyle() == a.get_linestyle()
    assert any(t.get_text().endswith("\na = b") for t in g.ax.texts)


def test_lines_apart_by_more_than_the_tolerance_are_left_alone():
    g = sns_relplot(_three_lines(dy=2.5 * figures.COINCIDE))
    assert figures.coincident(g.ax) == [] and figures.reveal(g.figure) == []
    g = sns_relplot(_three_lines(dy=0.5 * figures.COINCIDE))
    assert [len(grp) for grp in figures.coincident(g.ax)] == [2]


def sns_relplot(frame):
    import seaborn as sns
    return sns.relplot(data=frame, x="T", y="macs", hue="model", kind="line", marker="o")


def test_no_family_is_hidden_in_the_work_figure_of_the_committed_report():
    """The work figure of docs/figures' quick report, where the traced counts of several
    families coincide (the RNN's and linear attention's, attention's and its parallel forms,
    the LRU's loop and scan): every one of them is drawn apart once encoded."""
    from pathlib import Path
    fig_dir = Path(__file__).resolve().parents[1] / "docs" / "figures"
    depth = pd.read_csv(fig_dir / "depth.csv")
    frames = {"work": depth[["model", "T", "d", "macs", "flops"]],
              "crossover": pd.read_csv(fig_dir / "crossover.csv")}
    fig = figures.figure_work(frames)
    before = figures.hidden(fig)
    assert before                                    # the committed counts do coincide
    figures.reveal(fig)
    assert figures.hidden(fig) == []
    assert figures.encode(figures.figure_work(frames))["png"][:4] == b"\x89PNG"
