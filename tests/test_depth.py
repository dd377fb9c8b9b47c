"""Tests for harness.analysis.depth and harness.analysis.trace: counts, span, path, schedule, CLI."""

import dataclasses
import math
import re
import time
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from _helpers import _toy_trace
from harness.kernels import greedy
from harness import cli, models
from harness.infra import config
from harness.analysis import depth, schedule, trace, walltime
from harness.models import ATTENTION, RECURRENCE, reference
from harness.analysis.trace import clog2


# ----------------------------------------------------------------------------- the lesson

def test_the_lessons_counts_at_d512():
    """The lesson's table (RNN products against attention's grid and mix), traced."""
    frame = depth.depth_table((50, 1000, 2000), 512, families=(models.RECURRENCE, models.ATTENTION))
    tab = frame.pivot(index="T", columns="model", values="macs")
    assert tab.loc[50, "rnn"] == 26_214_400
    assert tab.loc[50, "attention"] == 2_560_000
    assert tab.loc[1000, "rnn"] == 524_288_000
    assert tab.loc[1000, "attention"] == 1_024_000_000
    assert tab.loc[2000, "rnn"] == 1_048_576_000
    assert tab.loc[2000, "attention"] == 4_096_000_000
    ratio = tab["attention"] / tab["rnn"]
    assert round(ratio.loc[2000], 1) == 3.9
    assert ratio.loc[1000] == pytest.approx(1000 / 512)


def test_counts_cross_at_T_equals_d():
    d = 512
    tab = depth.depth_table([d - 1, d, d + 1], d).pivot(index="T", columns="model", values="macs")
    assert tab.loc[d - 1, "attention"] < tab.loc[d - 1, "rnn"]
    assert tab.loc[d, "attention"] == tab.loc[d, "rnn"]
    assert tab.loc[d + 1, "attention"] > tab.loc[d + 1, "rnn"]


def test_counts_cross_at_T_equals_d_at_a_small_d():
    # the lesson's crossover at d = 16: the grid's 2 T^2 d against the recurrence's 2 T d^2,
    # each form counting its lesson's parts (attention without its projections)
    d = 16
    tab = depth.depth_table([d - 1, d, d + 1], d).pivot(index="T", columns="model", values="macs")
    assert tab.loc[d - 1, "attention"] < tab.loc[d - 1, "rnn"]
    assert tab.loc[d, "attention"] == tab.loc[d, "rnn"] == 2 * d ** 3
    assert tab.loc[d + 1, "attention"] > tab.loc[d + 1, "rnn"]


def test_tables_give_the_count_and_depth_tables_of_the_same_traces():
    counts, rows, kept = depth.tables([6, 9], 4, keep=(9,))
    want = depth.depth_table([6, 9], 4)
    cols = [c for c in want.columns if c != "trace_seconds"]        # measured, not counted
    pd.testing.assert_frame_equal(rows[cols], want[cols])
    pd.testing.assert_frame_equal(counts, depth.count_table([6, 9], 4))
    assert sorted(kept) == sorted((m, 9, 4) for m in models.traced_forms())


def test_tables_tell_progress_of_each_trace_that_took_a_second_or_more(monkeypatch):
    real = depth.trace_model

    def timed(model, T, d, **kw):
        tr = real(model, T, d, **kw)
        tr.seconds = 1.0 if T == 1234 else 0.999
        return tr
    monkeypatch.setattr(depth, "trace_model", timed)
    lines = []
    depth.tables([1234, 5], 2, families=("rnn",), progress=lines.append)
    assert lines == ["traced rnn at T = 1,234 in 1.0 s"]


def test_flops_are_twice_macs():
    tab = depth.depth_table([7, 30], 16)
    assert (tab.flops == 2 * tab.macs).all()
    counts = depth.count_table([7], 16)
    assert (counts.flops == 2 * counts.macs).all()


# ----------------------------------------------------------------------------- traced counts

@pytest.mark.parametrize("T", [1, 2, 7, 33])
@pytest.mark.parametrize("d,other", [(1, 1), (3, 5), (16, 8), (24, 40)])
def test_traced_counts_equal_closed_forms(T, d, other):
    rnn = depth.trace_model("rnn", T, d, d_h=other)
    assert rnn.macs_by_part() == models.get("rnn").tracing.forms[0].macs(T, d, d_h=other)
    att = depth.trace_model("attention", T, d, d_k=other, d_v=other + 1)
    assert att.macs_by_part() == models.get("attention").tracing.forms[0].macs(T, d, d_k=other,
                                                        d_v=other + 1)


def test_count_table_has_every_part():
    counts = depth.count_table([5], 8)
    parts = set(zip(counts.model, counts.part))
    assert parts == {("rnn", "input"), ("rnn", "recurrence"), ("attention", "projections"),
                     ("attention", "grid"), ("attention", "mix"), ("lru", "input"),
                     ("lru", "recurrence"), ("lru-scan", "input"), ("lru-scan", "recurrence"),
                     ("lstm", "input"), ("lstm", "recurrence"), ("lstm", "mul"),
                     ("gru", "input"), ("gru", "recurrence"), ("gru", "mul"),
                     *(("transformer", p) for p in ("projections", "grid", "mix", "out_projection",
                                                    "feedforward", "norm", "mul")),
                     *((f"linear_attention{form}", p) for form in ("", "-parallel", "-chunked")
                       for p in ("projections", "mul", "product", "grid", "mix"))}
    assert (counts.macs == counts.closed_form).all()


@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 33, 64])
@pytest.mark.parametrize("d,other", [(1, 1), (3, 5), (16, 8)])
def test_linear_recurrence_counts_equal_closed_forms(T, d, other):
    """The loop multiplies T d_h times by lam; the scan about twice (2T - 3 per channel at T = 2^n)."""
    for form in ("lru", "lru-scan"):
        counted = depth.trace_model(form, T, d, d_h=other).macs_by_part()
        closed = models.form(form)[1].macs(T, d, d_h=other)
        assert counted == {k: v for k, v in closed.items() if v}, form
    assert models.form("lru")[1].macs(T, d, d_h=other)["recurrence"] == T * other
    if T & (T - 1) == 0 and T > 1:
        assert models.form("lru-scan")[1].macs(T, d, d_h=other)["recurrence"] == (2 * T - 3) * other


def test_trace_names_the_grid_and_the_mix_when_T_equals_d():
    # with T = d the output shapes alone cannot tell QK^T from AV; the axis labels can
    parts = depth.trace_model("attention", 8, 8).macs_by_part()
    assert parts == {"projections": 3 * 8 * 8 * 8, "grid": 8 ** 3, "mix": 8 ** 3}


# ----------------------------------------------------------------------------- span and path

@pytest.mark.parametrize("d", [1, 4, 13])
def test_rnn_span_and_path_grow_linearly(d):
    for T in (1, 2, 10, 100):
        tr = depth.trace_model("rnn", T, d)
        # per step: W_hh h, + W_xh x_t, tanh
        assert tr.span == 3 * T
        assert tr.max_path == 3 * T
        assert tr.scalar_span == T * (clog2(d) + 3)


@pytest.mark.parametrize("d", [1, 4, 13])
def test_attention_span_and_path_are_flat(d):
    for T in (1, 2, 10, 100, 300):
        tr = depth.trace_model("attention", T, d)
        # projection, QK^T, scale, max, subtract, exp, sum, divide, AV
        assert tr.span == 9
        # x_1 -> v_1 -> y_T: one projection, one weighted sum
        assert tr.max_path == 2
        assert tr.scalar_span == 7 + 2 * clog2(d) + 3 * clog2(T)


def test_path_is_position_exact():
    # the path to position 1 itself is shorter than to position T for the RNN
    tr = depth.trace_model("rnn", 6, 4)
    y = tr.outputs[0]
    assert [int(y.dist[t].min()) for t in range(6)] == [3, 6, 9, 12, 15, 18]


def test_tracing_T2000_is_tractable():
    tab = depth.depth_table([2000], 512)
    assert set(tab.model) == set(models.traced_forms())
    assert tab.set_index("model").loc["rnn", "span"] == 6000
    assert tab.set_index("model").loc["attention", "span"] == 9
    assert tab.set_index("model").loc["lru", "span"] == 4000
    assert tab.set_index("model").loc["lru-scan", "span"] == 1 + 2 * (10 + 10)   # 2000 .. 3 halve
    # linear attention: its recurrence T steps and 9 more, the masked product 10 at every T, the
    # chunked form one step per chunk of 64 (32 chunks) and 8 more
    assert tab.set_index("model").loc["linear_attention", "span"] == 2009
    assert tab.set_index("model").loc["linear_attention-parallel", "span"] == 10
    assert tab.set_index("model").loc["linear_attention-chunked", "span"] == 40


LOG_T = range(6, 17)       # T = 2^6 .. 2^16


@pytest.mark.parametrize("d", [1, 8, 64])
def test_scan_span_is_logarithmic_and_the_loop_linear(d):
    """At T = 2^n the scan's span is the GEMM, then 2n - 1 combine levels of two ops each
    (multiply, add): n up-sweep levels and n - 1 down-sweep levels, 4n - 1 in all; the
    loop's is two ops per step."""
    for n in LOG_T:
        T = 2 ** n
        tr = depth.trace_model("lru-scan", T, d)
        assert tr.span == 1 + 2 * (2 * n - 1)
        assert tr.span - 1 == 2 * (2 * clog2(T) - 1)         # within a constant of 2 ceil(log2 T)
        assert tr.max_path == 1 + 2 * n                        # x_1 climbs the up-sweep to h_T
        # element-exact: the deepest state waits for 2n - 2 combines after the GEMM
        assert tr.scalar_span == 1 + clog2(d) + 2 * (2 * n - 2)
        if n <= 12:                                            # the loop, T steps of (mul, add)
            loop = depth.trace_model("lru", T, d)
            assert loop.span == loop.max_path == 2 * T
            assert loop.scalar_span == 2 * T + clog2(d)


def test_scan_span_for_any_T():
    """Between powers of two: floor(log2 T) up levels, and a down level wherever the
    recursion still has more than two states."""
    for T in range(1, 200):
        up, down, n = 0, 0, T
        while n > 1:
            down += n > 2
            up += 1
            n //= 2
        assert depth.trace_model("lru-scan", T, 2).span == 1 + 2 * (up + down), T


def test_scan_work_is_about_twice_the_loops():
    tab = depth.count_table([2 ** 10], 16).set_index(["model", "part"])["macs"]
    ratio = tab[("lru-scan", "recurrence")] / tab[("lru", "recurrence")]
    assert ratio == pytest.approx(2.0, abs=0.01)
    assert tab[("lru-scan", "input")] == tab[("lru", "input")]


def test_untraceable_operation_is_refused():
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    with pytest.raises(TypeError, match="np.sin"):
        np.sin(X)
    with pytest.raises(TypeError, match="sort"):
        np.sort(X)
    with pytest.raises(TypeError, match="cumsum"):
        np.cumsum(X)


def test_concatenate_and_reshape_are_free_views_that_keep_their_lineage():
    g = trace.Graph()
    X = trace.leaf(g, "X", (6, 4), ("T", "d_model"), source_row=0)
    a, b = np.exp(X[0:3]), np.tanh(np.exp(X[3:6]))          # scalar depths 1 and 2
    before = len(g.ops)
    c = np.concatenate([a, b], axis=0)
    assert len(g.ops) == before and c.shape == (6, 4) and c.axes == ("T", "d_model")
    assert sorted(i for i, _ in c.deps) == sorted([a.owner, b.owner])
    np.testing.assert_array_equal(c.sdepth[:, 0], [1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(c.dist[:, 0], [1, np.inf, np.inf, np.inf, np.inf, np.inf])
    # interleave by stack + reshape: rows a0, b0, a1, b1, ...; nothing recorded
    s = np.stack([a, b], axis=-2).reshape(6, 4)
    assert len(g.ops) == before and s.shape == (6, 4) and s.axes == ("T", "d_model")
    np.testing.assert_array_equal(s.sdepth[:, 0], [1, 2, 1, 2, 1, 2])
    assert X.reshape(24).axes == ("T",) and X.reshape((2, 3, 4)).axes == ("T", "T", "d_model")
    # strided slices keep per-element depths
    np.testing.assert_array_equal(X[0::2].dist[:, 0], [0, np.inf, np.inf])
    # the twin on plain arrays: the same shapes
    A = np.arange(24.0).reshape(6, 4)
    assert np.concatenate([A[0:3], A[3:6]], axis=0).shape == c.shape


def test_elementwise_products_count_under_their_weights_part():
    g = trace.Graph(weight_parts={"lam": "recurrence", "B": "input"})
    lam = trace.leaf(g, "lam", (4,), ("d_h",))
    U = trace.leaf(g, "U", (5, 4), ("T", "d_h"), source_row=0)
    sq = lam * lam                          # a power of the weight: still the weight's part
    assert sq.part == "recurrence" and g.ops[-1].part == "recurrence" and g.ops[-1].macs == 4
    y = sq * U                              # scales a state: counted, (5, 4) products
    assert g.ops[-1].part == "recurrence" and g.ops[-1].macs == 20 and y.part is None
    U * U                                   # neither operand a weight: its own part
    assert g.ops[-1].part == "mul" and g.ops[-1].macs == 20
    U + lam                                 # additions are not multiplications
    assert g.ops[-1].macs == 0


def test_causal_attention_traces():
    g = trace.Graph(weight_parts={n: p for f in models.families() for n, _, _, p in f.tracing.weights(8)})
    X = trace.leaf(g, "X", (5, 4), ("T", "d_model"), source_row=0)
    W = [trace.leaf(g, n, (4, 4), ("d_model", "d_k")) for n in ("Wq", "Wk", "Wv")]
    Y, A = reference.attention_forward(X, *W, causal=True)
    assert Y.shape == (5, 4) and A.shape == (5, 5)
    assert any(op.kind == "where" for op in g.ops)


# ----------------------------------------------------------------------------- schedule

def _naive_schedule(tg, P):
    """Step by step, unit task by unit task: the obvious twin of _greedy_schedule."""
    n = len(tg.indeg)
    preds = [[] for _ in range(n)]
    for i in range(n):
        for e in range(tg.succ_ptr[i], tg.succ_ptr[i + 1]):
            preds[tg.succ_idx[e]].append(i)
    levels = [list(tg.level_size[tg.level_ptr[i]:tg.level_ptr[i + 1]]) for i in range(n)]
    finished = [len(levels[i]) == 0 for i in range(n)]
    changed = True
    while changed:            # tasks without levels finish as soon as their inputs do
        changed = False
        for i in range(n):
            if not finished[i] and not levels[i] and all(finished[j] for j in preds[i]):
                finished[i] = changed = True
    level = [0] * n
    rem = [lv[0] if lv else 0 for lv in levels]
    started = [False] * n
    steps = 0
    while not all(finished):
        ready = [i for i in range(n) if not finished[i]
                 and (started[i] or all(finished[j] for j in preds[i]))]
        for i in ready:
            started[i] = True
        ready.sort(key=lambda i: (-tg.prio[i], i))
        left = P
        for i in ready:
            a = min(rem[i], left)
            rem[i] -= a
            left -= a
        steps += 1
        for i in ready:
            if rem[i] == 0:
                level[i] += 1
                if level[i] < len(levels[i]):
                    rem[i] = levels[i][level[i]]
                else:
                    finished[i] = True
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if not finished[i] and not levels[i] and all(finished[j] for j in preds[i]):
                    finished[i] = changed = True
    return steps


@pytest.mark.parametrize("model", list(models.traced_forms()))
@pytest.mark.parametrize("grain", schedule.GRAINS)
def test_greedy_schedule_matches_naive_twin(model, grain):
    tr = depth.trace_model(model, 4, 3)
    tg = schedule.task_graph(tr, grain)
    for P in (1, 2, 3, 5, 8, 40):
        out = np.zeros(3, np.int64)
        greedy.greedy_schedule(tg.level_ptr, tg.level_size, tg.succ_ptr, tg.succ_idx,
                                tg.indeg, tg.prio, P, out)
        steps, busy, done = out
        assert steps == _naive_schedule(tg, P), P
        assert busy == tg.work and done == len(tg.indeg)


@pytest.mark.parametrize("model", list(models.traced_forms()))
@pytest.mark.parametrize("grain", schedule.GRAINS)
def test_brent_bounds_hold(model, grain):
    rng = np.random.default_rng(0)
    Ps = sorted({1, 2, 7, 64, 10**6} | set(int(p) for p in rng.integers(1, 5000, 6)))
    frame = schedule.schedule(model, 40, 12, Ps, grain)
    W, S = frame.work.iloc[0], frame.span.iloc[0]
    for P, t in zip(frame.P, frame.time):
        assert max(W / P, S) <= t <= W / P + S
    assert frame.set_index("P").loc[1, "time"] == W       # one processor does all the work
    assert frame.set_index("P").loc[10**6, "time"] == S   # enough processors: the span
    # the column says what the bounds say, read from the schedule's own columns
    held = (np.maximum(frame.work / frame.P, frame.span) <= frame.time) & \
        (frame.time <= frame.work / frame.P + frame.span)
    assert (frame.bounds_ok == held).all()


def test_bounds_ok_reports_a_schedule_that_breaks_them(monkeypatch):
    """A scheduler that takes one step too many: the column says so, it is not hard-coded."""
    real = greedy.greedy_schedule

    def slow(*args):
        real(*args)
        out = args[-1]
        out[0] = int(out[0]) + 10**9                    # far past W/P + S
    monkeypatch.setattr(greedy, "greedy_schedule", slow)
    frame = schedule.schedule("rnn", 6, 3, (1, 4), "scalar")
    assert not frame.bounds_ok.any()


def test_scheduled_span_equals_traced_scalar_span():
    for model in models.traced_forms():
        for T, d in ((1, 1), (5, 3), (30, 16), (64, 4)):
            tr = depth.trace_model(model, T, d)
            tg = schedule.task_graph(tr, "scalar")
            assert tg.work == tr.scalar_work
            if model != "lru-scan":
                assert tg.span == tr.scalar_span
            else:
                # a down-sweep op reads part of a view that also holds the sweep's total, and a
                # task waits for whole inputs: one combine (2 levels) more than the exact span
                assert tr.scalar_span <= tg.span <= tr.scalar_span + 2


def test_scan_falls_to_its_logarithmic_span_where_the_rnn_stops_at_its_chain():
    d, T = 8, 256
    Ps = [1, 16, 256, 4096, 10**6]
    frame = schedule.schedule_table([T], d, Ps, grains=("scalar",), families=("rnn", "lru"))
    t = frame.pivot(index="P", columns="model", values="time")
    span = frame.groupby("model")["span"].first()
    assert t.loc[10**6, "rnn"] == T * (clog2(d) + 3)          # the chain of T steps
    assert t.loc[10**6, "lru"] == span["lru"] >= 2 * T        # the loop: T steps as well
    assert t.loc[10**6, "lru-scan"] == span["lru-scan"] <= 1 + clog2(d) + 2 * (2 * 8 - 1)
    assert t.loc[10**6, "lru-scan"] < t.loc[10**6, "rnn"] / 40
    assert t.loc[1, "lru-scan"] < 1.2 * t.loc[1, "lru"]       # about the same work, ...
    assert t.loc[4096, "lru-scan"] < t.loc[4096, "lru"] / 5   # ... far less time on many P


def test_rnn_plateaus_once_P_passes_about_d_and_attention_keeps_falling():
    d, T = 32, 64
    Ps = [1, d // 2, d, 2 * d, 4 * d, 16 * d, d * d, 10**4, 10**6]
    rnn = schedule.schedule("rnn", T, d, Ps, "element").set_index("P")["time"]
    floor = rnn.loc[10**6]
    assert floor == T * (d + 2)                 # T steps of (dot product, add, tanh)
    assert rnn.loc[d // 2] > 1.5 * floor         # below d, more processors still help
    for P in (2 * d, 4 * d, 16 * d, d * d, 10**4):
        assert rnn.loc[P] == pytest.approx(floor, rel=0.02)   # past ~d: bound by the T steps
    att = schedule.schedule("attention", T, d, Ps, "element").set_index("P")["time"]
    assert att.loc[2 * d] > 10 * att.loc[10**4]  # attention keeps falling past d
    # projection d, QK^T d, scale 1, max T-1, subtract 1, exp 1, sum T-1, divide 1, AV T
    assert att.loc[10**6] == 2 * d + 3 * T + 2
    assert att.loc[10**6] < floor / 5
    # scalar tasks: one RNN step is d^2 multiplications wide, so the floor comes at ~d^2
    rs = schedule.schedule("rnn", T, d, Ps, "scalar").set_index("P")["time"]
    assert rs.loc[d * d] == pytest.approx(rs.loc[10**6], rel=0.02)
    assert rs.loc[10**6] == T * (clog2(d) + 3)
    assert rs.loc[4 * d] > 2 * rs.loc[10**6]


def test_plateau_P():
    frame = schedule.schedule_table([64], 32, [1, 16, 32, 64, 128, 10**6], grains=("element",))
    pl = schedule.plateau_P(frame, tol=0.02).set_index("model")
    assert pl.loc["rnn", "plateau_P"] == 64
    assert pl.loc["attention", "plateau_P"] == 10**6


# ----------------------------------------------------------------------------- measured

def _synthetic_times():
    rows = []
    for T in (10, 30, 100, 300, 1000):
        rows.append(dict(model="rnn", T=T, d=100, seconds=1e-3 * T, gmacs_per_s=1.0))
        rows.append(dict(model="attention", T=T, d=100, seconds=1e-5 * T * T, gmacs_per_s=4.0))
    return pd.DataFrame(rows)


def test_measured_crossover_interpolates_in_log_T():
    cross = walltime.measured_crossover(_synthetic_times()).set_index("variant")
    assert cross.loc["attention", "measured_T"] == pytest.approx(100)
    assert cross.loc["attention", "extrapolated_T"] == pytest.approx(100)
    assert cross.loc["attention", "counted_T"] == 100
    assert cross.loc["attention", "gemm_over_matvec"] == pytest.approx(4.0)


def test_fit_exponents():
    ex = walltime.fit_exponents(_synthetic_times(), min_T=10).set_index("model")["exponent"]
    assert ex["rnn"] == pytest.approx(1.0)
    assert ex["attention"] == pytest.approx(2.0)


def test_crossover_and_exponents_are_nan_without_two_points(recwarn):
    one = _synthetic_times()
    one = one[one["T"] == 1000]
    cross = walltime.measured_crossover(one).set_index("variant")
    assert math.isnan(cross.loc["attention", "extrapolated_T"])
    ex = walltime.fit_exponents(one, min_T=10)
    assert set(ex.model) == {"rnn", "attention"} and ex.exponent.isna().all()
    # nothing at or above min_T: a NaN row, not a missing one
    assert walltime.fit_exponents(_synthetic_times(), min_T=10**6).exponent.isna().all()
    assert not recwarn.list                        # no RankWarning, no RuntimeWarning


FIT10 = dataclasses.replace(config.WALL, fit_min_T=10)


def test_extrapolated_crossover_is_nan_when_the_fits_do_not_cross_plausibly():
    t = _synthetic_times()
    # attention's exponent no larger than the RNN's: the curves never cross ahead
    flat = t.copy()
    flat.loc[flat.model == "attention", "seconds"] = 1e-4 * flat.loc[flat.model == "attention", "T"]
    assert math.isnan(walltime.measured_crossover(flat, FIT10).set_index("variant")
                      .loc["attention", "extrapolated_T"])
    # they cross below T = 1 (attention always slower): no extrapolation either
    slow = t.copy()
    slow.loc[slow.model == "attention", "seconds"] *= 1e6
    row = walltime.measured_crossover(slow, FIT10).set_index("variant").loc["attention"]
    assert math.isnan(row.extrapolated_T)
    # ... and far past the sweep
    far = t.copy()
    far.loc[far.model == "attention", "seconds"] *= 1e-6
    row = walltime.measured_crossover(far, FIT10).set_index("variant").loc["attention"]
    assert math.isnan(row.extrapolated_T) and math.isnan(row.measured_T)


def test_measure_wall_times_runs_the_kernels():
    t = walltime.measure_wall_times(dataclasses.replace(config.WALL, T_values=(4, 8), d=8, rounds=1,
                                                        min_sample_s=0.001))
    assert set(t.model) == set(models.variants())
    assert (t.seconds > 0).all()
    assert t.set_index(["model", "T"]).loc[("attention", 8), "macs"] == 2 * 8 * 8 * 8


# ----------------------------------------------------------------------------- CLI

@pytest.mark.parametrize("argv,needle", [
    (["depth", "--T", "0", "--no-measure"], "--T"),
    (["depth", "--T", "5", "-3", "--no-measure"], "--T"),
    (["depth", "--d", "0", "--no-measure"], "--d"),
    (["depth", "--P", "0", "--no-measure"], "--P"),
    (["depth", "--repeats", "0", "--no-measure"], "--repeats"),
    (["depth", "--T", "10", "--d", "4", "--schedule-T", "10", "--measure-T", "1", "--repeats", "1",
      "--P", "1", "4"], "--measure-T: needs at least 2 distinct values"),
    (["depth", "--T", "10", "--d", "4", "--measure-T", "8", "8"], "--measure-T"),
    (["depth", "--T", "10", "--d", "100000", "--no-measure"], "--T/--d: tracing the rnn"),
    (["depth", "--T", "10", "--d", "4", "--schedule-T", "1000000", "--no-measure"],
     "--schedule-T: must be at most 16,384"),
    (["depth", "--T", "1000000", "--d", "4096", "--no-measure"], "--T/--d: tracing the"),
    (["depth", "--T", "10", "--d", "4", "--measure-T", "8", "1000000"], "--measure-T"),
    (["depth", "--T", "10", "--d", "4", "--scaling-T", "0"], "--scaling-T"),
])
def test_cli_bad_arguments(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_cli_memory_error_creates_no_out_dir(tmp_path, capsys):
    out = tmp_path / "new"
    assert cli.main(["depth", "--T", "10", "--d", "100000", "--no-measure", "--out", str(out)]) == 2
    assert not out.exists()


def test_cli_failure_leaves_no_empty_out_dir(tmp_path, capsys, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(depth, "tables", boom)
    from harness.infra import progress      # the kernels' warm-up is not what fails here
    monkeypatch.setattr(progress, "warm_up_kernels", lambda progress: None)
    out = tmp_path / "o"
    assert cli.main(["depth", "--T", "5", "--d", "4", "--no-measure", "--out", str(out)]) == 130
    assert not out.exists()


def test_trace_model_refuses_what_does_not_fit(monkeypatch):
    monkeypatch.setattr(depth, "available_memory_bytes", lambda: 2**30)
    with pytest.raises(ValueError, match=r"T=10, d=100000"):
        depth.trace_model("rnn", 10, 100_000)
    # attention's T x T grids are a row and a column term each: T = 100,000 fits in 1 GiB ...
    depth.check_trace_memory("attention", 100_000, 4, available=2**30)
    with pytest.raises(ValueError, match=r"attention at T=100000000, d=4"):
        depth.trace_model("attention", 100_000_000, 4)     # ... and its (T, d) values are O(T)


@pytest.mark.parametrize("model", list(models.traced_forms()))
@pytest.mark.parametrize("T,d", [(400, 50), (1000, 20), (20, 300)])
def test_trace_memory_estimate_is_an_upper_bound(model, T, d):
    import tracemalloc
    tracemalloc.start()
    try:
        depth.trace_model(model, T, d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    est = models.form(model)[1].trace_memory_bytes(T, d)
    assert peak <= est <= 4 * peak + 2**20


def test_the_depth_command_traces_each_model_and_T_once(monkeypatch, capsys):
    from harness.infra import progress      # the kernels' warm-up is not what this counts
    monkeypatch.setattr(progress, "warm_up_kernels", lambda progress: None)
    calls = []
    real = depth.trace_model
    monkeypatch.setattr(depth, "trace_model", lambda m, T, d, **k: calls.append((m, T)) or real(m, T, d, **k))
    assert cli.main(["depth", "--T", "8", "16", "--d", "4", "--schedule-T", "16", "--P", "1", "4",
                     "--no-measure"]) == 0
    assert sorted(calls) == sorted({(m, T) for m in models.traced_forms() for T in (8, 16)})


def test_cli_scaling_T_defaults_to_the_config(monkeypatch, capsys):
    seen = {}

    def fake_scaling(cfg):
        seen["T"] = cfg.scaling_T
        return pd.DataFrame([dict(model="rnn", T=cfg.scaling_T, d=cfg.d, threads=1, seconds=1.0,
                                  speedup=1.0, efficiency=1.0)])
    monkeypatch.setattr(walltime, "strong_scaling", fake_scaling)
    assert cli.main(["depth", "--T", "8", "--d", "4", "--schedule-T", "8", "--P", "1",
                     "--measure-T", "4", "8", "--repeats", "1"]) == 0
    assert seen["T"] == config.WALL.scaling_T


def test_cli_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["depth", "--T", "5", "--d", "4", "--no-measure", "--out", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "depth.csv").exists()


def test_cli_argparse_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["depth", "--T", "abc"])
    assert e.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_cli_writes_depth_csv(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["depth", "--T", "50", "800", "--d", "512", "--schedule-T", "800",
                   "--no-measure", "--out", str(out)])
    assert rc == 0
    frame = pd.read_csv(out / "depth.csv")
    for col in ("model", "T", "d", "macs", "flops", "span", "max_path", "parallelism"):
        assert col in frame.columns
    row = frame.set_index(["model", "T"])
    assert row.loc[("rnn", 50), "macs"] == 26_214_400
    assert row.loc[("attention", 50), "macs"] == 2_560_000
    assert row.loc[("rnn", 800), "span"] == 2400
    assert row.loc[("attention", 800), "max_path"] == 2
    sched = pd.read_csv(out / "schedule.csv")
    lesson = sched[(sched["T"] == 800) & (sched["P"] == 800)]
    assert set(lesson.model) == set(models.traced_forms())
    assert lesson.bounds_ok.all()
    printed = capsys.readouterr().out
    assert "Table 1" in printed and "800 tokens on 800 processors" in printed
    assert not list(out.glob(".*.tmp"))         # atomic writes left no temporaries


@pytest.mark.parametrize("T,d", [(3, 2), (5, 4), (2, 7)])
def test_rnn_depth_row_closed_forms(T, d):
    from harness.analysis import depth
    from harness.analysis.trace import clog2
    row = depth.depth_table([T], d, families=(RECURRENCE,)).iloc[0]
    # X W_xh^T, then per step h W_hh^T, + x_t, tanh
    assert row.ops == 1 + 3 * T
    assert row.macs == row.macs_all == 2 * T * d * d and row.flops == 4 * T * d * d
    assert row.span == row.max_path == 3 * T
    assert row.scalar_work == 4 * T * d * d     # (2d - 1) d per product, d adds, d tanh
    assert row.scalar_span == T * (clog2(d) + 3)
    assert row.parallelism == row.scalar_work / row.scalar_span
    assert (row.model, row["T"], row.d) == (RECURRENCE, T, d)


@pytest.mark.parametrize("T,d", [(3, 2), (6, 4)])
def test_attention_depth_row_closed_forms(T, d):
    from harness.analysis import depth
    from harness.analysis.trace import clog2
    row = depth.depth_table([T], d, families=(ATTENTION,)).iloc[0]
    assert row.ops == 11          # Q K V, Q K^T, / sqrt(d_k), max, -, exp, sum, /, A V
    assert row.macs == 2 * T * T * d and row.macs_all == 2 * T * T * d + 3 * T * d * d
    assert row.span == 9 and row.max_path == 2
    work = (3 * T * d * (2 * d - 1) + T * T * (2 * d - 1) + T * T + T * (T - 1) + T * T + T * T
            + T * (T - 1) + T * T + T * d * (2 * T - 1))
    assert row.scalar_work == work
    assert row.scalar_span == 7 + 2 * clog2(d) + 3 * clog2(T)


def test_count_table_marks_the_lessons_parts():
    from harness.analysis import depth
    c = depth.count_table([3], 2, families=(RECURRENCE, ATTENTION))
    got = {(r.model, r.part): (r.macs, r.flops, r.closed_form, r.in_lesson_comparison)
           for r in c.itertuples()}
    assert got[(RECURRENCE, "input")] == (12, 24, 12, True)
    assert got[(RECURRENCE, "recurrence")] == (12, 24, 12, True)
    assert got[(ATTENTION, "projections")] == (36, 72, 36, False)
    assert got[(ATTENTION, "grid")] == (18, 36, 18, True)
    assert got[(ATTENTION, "mix")] == (18, 36, 18, True)
    assert (c["T"] == 3).all() and (c.d == 2).all()


def test_traces_are_cached_by_model_T_and_d():
    from harness.analysis import depth
    traces = {}
    a = depth.traced(traces, RECURRENCE, 3, 2)
    assert depth.traced(traces, RECURRENCE, 3, 2) is a and list(traces) == [(RECURRENCE, 3, 2)]
    b = depth.traced(traces, RECURRENCE, 3, 3)
    assert b is not a and b.d == 3
    assert depth.traced(None, RECURRENCE, 3, 2) is not a


def test_trace_memory_check_names_the_form_T_and_d():
    from harness.analysis import depth
    from harness import models
    need = models.get(ATTENTION).tracing.forms[0].trace_memory_bytes(50, 8)
    depth.check_trace_memory(ATTENTION, 50, 8, available=need)        # exactly enough
    with pytest.raises(MemoryError, match=r"attention at T=50, d=8 needs about [\d,]+ bytes"):
        depth.check_trace_memory(ATTENTION, 50, 8, available=need - 1)
    with pytest.raises(ValueError, match="T=50, d=8"):
        with mock.patch.object(depth, "available_memory_bytes", lambda: need - 1):
            depth.trace_model(ATTENTION, 50, 8)


def _parts_trace(seconds):
    """The toy trace plus an empty product under a weight part: parts product 12, mul 4, idle 0."""
    tr = _toy_trace()
    g = tr.graph
    g.weight_parts["E"] = "idle"
    trace.leaf(g, "E", (0, 2), ("T", "d_model")) @ trace.leaf(g, "W2", (2, 2), ("d_model", "d_k"))
    Z = trace.leaf(g, "Z", (3, 2), ("T", "d_model"), source_row=0)
    tr.outputs = (np.exp(np.concatenate([Z[:1]] * 3)),)   # every row one op from position 1
    tr.seconds = seconds
    assert tr.macs_by_part() == {"product": 12, "mul": 4, "idle": 0}
    return tr


class _Fam:
    class tracing:
        lesson_parts = ("product", "spare")


class _Form:
    def __init__(self, parts):
        self.parts = parts

    def macs(self, T, d):
        return dict(self.parts)


def _one_toy_form(monkeypatch, closed):
    monkeypatch.setattr(depth.models, "traced_forms",
                        lambda families: {"toy": (_Fam(), _Form(closed))})


def test_count_table_rows_a_part_missing_on_one_side_as_zero(monkeypatch):
    _one_toy_form(monkeypatch, {"product": 12, "mul": 4, "spare": 0})
    traces = {("toy", 3, 2): _parts_trace(0.0)}
    frame = depth.count_table([3], 2, families=("toy",), traces=traces)
    assert frame.part.tolist() == ["idle", "mul", "product", "spare"]
    assert frame.macs.tolist() == [0, 4, 12, 0] and frame.flops.tolist() == [0, 8, 24, 0]
    assert frame.closed_form.tolist() == [0, 4, 12, 0]
    assert frame.in_lesson_comparison.tolist() == [False, False, True, True]
    # a closed form that disagrees stops the table, showing the rows that differ
    _one_toy_form(monkeypatch, {"product": 13, "mul": 4})
    with pytest.raises(AssertionError, match=r"(?s)traced counts differ from the closed "
                                             r"forms:\n.*product.*12.*13"):
        depth.count_table([3], 2, families=("toy",), traces=traces)


def test_depth_table_counts_lesson_parts_it_did_not_trace_as_zero(monkeypatch):
    _one_toy_form(monkeypatch, {})
    tr = _parts_trace(0.125)
    frame = depth.depth_table([3], 2, families=("toy",), traces={("toy", 3, 2): tr})
    row = frame.iloc[0]
    assert (row.macs, row.flops, row.macs_all) == (12, 24, 16)      # product 12 + spare 0
    assert (row.ops, row.max_path, row.scalar_work, row.scalar_span) == (7, 1, 29 + 6, 1)
    assert row.trace_seconds == tr.seconds == 0.125                 # the trace's own figure
    assert list(frame.columns)[-1] == "trace_seconds"


def test_a_trace_records_the_seconds_it_took_within_the_call():
    t0 = time.perf_counter()
    tr = depth.trace_model("rnn", 6, 3)
    outer = time.perf_counter() - t0
    assert isinstance(tr.seconds, float)
    assert 0 < tr.seconds <= outer


@pytest.mark.parametrize("args, widths, name", [
    ((0, 4), {}, "T"), ((4, 0), {}, "d"), ((4, 4), {"d_h": 0}, "d_h"),
    ((2.5, 4), {}, "T"), ((4, "4"), {}, "d")])
def test_a_refused_size_names_its_argument(args, widths, name):
    with pytest.raises((TypeError, ValueError), match=rf"^{name} must be an integer >= 1"):
        depth.trace_model("rnn", *args, **widths)


def test_the_widths_count_in_the_memory_check():
    T, d, d_h = 4, 2, 400_000                  # small T and d, a width that cannot fit
    need = models.form("rnn")[1].trace_memory_bytes(T, d, d_h=d_h)
    assert need > depth.available_memory_bytes()
    assert models.form("rnn")[1].trace_memory_bytes(T, d) < 2**20
    with pytest.raises(ValueError, match="tracing the rnn at T=4, d=2 needs about"):
        depth.trace_model("rnn", T, d, d_h=d_h)
    with pytest.raises(MemoryError):
        depth.check_trace_memory("rnn", T, d, available=2**30, d_h=d_h)
    depth.check_trace_memory("rnn", T, d, available=2**30)          # fits without the width


def test_a_memory_refusal_states_bytes_and_gib_that_agree():
    T, d = 3_000_000, 64              # GiB large (its T x T grids are O(T): issue #26)
    need = models.form("attention")[1].trace_memory_bytes(T, d)
    avail = need // 3
    with pytest.raises(MemoryError) as e:
        depth.check_trace_memory("attention", T, d, available=avail)
    m = re.fullmatch(r"tracing the attention at T=3000000, d=64 needs about ([\d,]+) bytes "
                     r"\(([\d.]+) GiB\) but only ([\d.]+) GiB are available; use a smaller T or d",
                     str(e.value))
    assert m, str(e.value)
    stated = int(m[1].replace(",", ""))
    assert stated == need
    assert float(m[2]) == pytest.approx(stated / 1024**3, abs=0.005)
    assert float(m[3]) == pytest.approx(avail / 1024**3, abs=0.005)
    assert float(m[3]) < float(m[2])


@pytest.mark.parametrize("T, d, widths", [
    (4096, 16, {}),             # the loop's trace is the larger
    (64, 4, {"d_h": 4096})])    # a wide state: the scan's is
def test_a_family_name_checks_each_of_its_traced_forms_and_a_form_only_itself(T, d, widths):
    needs = {name: form.trace_memory_bytes(T, d, **widths)
             for name, (_, form) in models.traced_forms(("lru",)).items()}
    assert set(needs) == {"lru", "lru-scan"}
    big = max(needs, key=needs.get)
    between = (needs["lru"] + needs["lru-scan"]) // 2
    if big == "lru-scan":
        with pytest.raises(MemoryError, match="tracing the lru-scan at"):
            depth.check_trace_memory("lru-scan", T, d, available=between, **widths)
    else:
        depth.check_trace_memory("lru-scan", T, d, available=between, **widths)  # fits alone
    with pytest.raises(MemoryError, match=f"tracing the {big} at"):
        depth.check_trace_memory("lru", T, d, available=between, **widths)   # both forms
    depth.check_trace_memory("lru", T, d, available=needs[big], **widths)    # exactly enough


# ----------------------------------------------------------------------------- a user's forward

RNN2 = '''
import numpy as np


def rnn2(X, W1, U1, W2, U2):
    """Two stacked tanh RNNs: layer 2 reads layer 1's states."""
    h1 = h2 = np.zeros(W1.shape[0])
    XW = X @ W1.T
    out = []
    for t in range(X.shape[0]):
        h1 = np.tanh(h1 @ U1.T + XW[t])
        h2 = np.tanh(h2 @ U2.T + h1 @ W2.T)
        out.append(h2)
    return np.stack(out)


def causal_conv(X, K0, K1, K2):
    """y_t = x_t K0 + x_{t-1} K1 + x_{t-2} K2, the first rows padded with zeros."""
    Z = np.zeros((2, X.shape[1]))
    P = np.concatenate([Z, X])
    T = X.shape[0]
    return P[2:] @ K0 + P[1:T + 1] @ K1 + P[:T] @ K2


def bad(X, W):
    Y = X @ W
    return np.cumsum(Y, axis=0)
'''


def _write_forward(tmp_path):
    path = tmp_path / "myforward.py"
    path.write_text(RNN2)
    return path


def test_a_forward_written_outside_the_package_is_traced_from_the_command_line(tmp_path,
                                                                             capsys,
                                                                             monkeypatch):
    path = _write_forward(tmp_path)
    monkeypatch.chdir(tmp_path)                         # package.module:function from here
    out = tmp_path / "o"
    argv = ["depth", "--forward", "myforward:rnn2", "--shape", "X=T,d", "--shape", "W1=d,d",
            "--shape", "U1=d,d", "--shape", "W2=d,d", "--shape", "U2=d,d", "--T", "5", "9",
            "--d", "3", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "depth.csv")
    assert list(table.columns) == list(depth.depth_table([2], 2, families=("rnn",)).columns)
    for T in (5, 9):
        row = table[table["T"] == T].iloc[0]
        # per step: layer 1 a product, an add, a tanh; layer 2 two products, an add, a tanh; and
        # the X W1^T before the loop: T d^2 + 3 T d^2 multiplications
        assert row.macs == row.macs_all == 4 * T * 3 * 3
        # layer 1's h_t ends 3 (t + 1) ops in (a product, an add, a tanh a step, the first add
        # after X W1^T); layer 2's h_t three ops after it (h1_t W2^T, the add, the tanh), and
        # x_1 reaches them along the same chain
        assert row.span == row.max_path == 3 * T + 3
    assert "W1" in printed and "U2" in printed
    # the same through the Python function, by file path, and the counts under each input
    counts, tab = depth.forward_tables(f"{path}:rnn2", {"X": ("T", "d"), "W1": ("d", "d"),
                                       "U1": ("d", "d"), "W2": ("d", "d"), "U2": ("d", "d")},
                                       [5], 3)
    assert dict(zip(counts.part, counts.macs)) == {"W1": 45, "U1": 45, "W2": 45, "U2": 45}
    assert tab.span.iloc[0] == table.span.iloc[0]


def test_a_causal_convolution_has_constant_span_and_path(tmp_path):
    path = _write_forward(tmp_path)
    shapes = {"X": ("T", "d"), "K0": ("d", "d"), "K1": ("d", "d"), "K2": ("d", "d")}
    Ts = [2, 3, 4, 1024]
    _, tab = depth.forward_tables(f"{path}:causal_conv", shapes, Ts, 2)
    assert tab.span.tolist() == [3] * 4              # a product, then two adds
    # x_1 is y_2's middle term (a product and two adds), y_3's last (a product and one add),
    # and past a width of 3 it reaches y_T by no path at all
    assert tab.max_path.tolist() == [3, 2, math.inf, math.inf]
    assert tab.macs.tolist() == [3 * T * 4 for T in Ts]


def test_an_unsupported_operation_names_itself_and_the_forwards_line(tmp_path, capsys):
    path = _write_forward(tmp_path)
    with pytest.raises(TypeError, match=r"np\.cumsum is not traced \(called at .*myforward\.py:"
                                        r"\d+: return np\.cumsum\(Y, axis=0\)\)"):
        depth.trace_forward(f"{path}:bad", {"X": ("T", "d"), "W": ("d", "d")}, 4, 2)
    assert cli.main(["depth", "--forward", f"{path}:bad", "--shape", "X=T,d", "--shape", "W=d,d",
                     "--T", "4", "--d", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "np.cumsum is not traced" in err and "myforward.py:" in err and len(err.splitlines()) == 1


def test_a_forward_function_is_traced_under_its_name_with_each_input_labelled():
    seen = {}

    def two_layer(X, W, V):
        seen.update(X=X.axes, W=W.axes, V=V.axes)
        return np.tanh(X @ W) @ V

    tr = depth.trace_forward(two_layer, {"X": ("T", "d"), "W": ("d", "2*d"), "V": ("2*d", "3")}, 5, 2)
    assert (tr.model, tr.T, tr.d) == ("two_layer", 5, 2)
    assert seen == {"X": ("T", "d_model"), "W": ("d_model", "?"), "V": ("?", "?")}
    assert 0.0 < tr.seconds < 60.0
    pair = depth.trace_forward(lambda X, W, V: (X @ W, X), {"X": ("T", "d"), "W": ("d", "d"),
                                                            "V": ("d", "d")}, 3, 2)
    assert len(pair.outputs) == 2 and pair.outputs[1].axes == ("T", "d_model")   # a tuple: kept
    assert depth.trace_forward(two_layer, {"X": ("T", "d"), "W": ("d", "d"), "V": ("d", "d")}, 3,
                               2, name="mine").model == "mine"

    class Anonymous:                                     # a callable with no __name__
        def __call__(self, X, W):
            return X @ W
    assert depth.trace_forward(Anonymous(), {"X": ("T", "d"), "W": ("d", "d")}, 3, 2).model == "forward"


def _raises(match, *args, error=ValueError):
    with pytest.raises(error) as e:
        depth.trace_forward(*args)
    assert str(e.value) == match, str(e.value)


def test_a_forward_that_cannot_be_traced_is_named_with_what_to_change():
    xw = {"X": ("T", "d"), "W": ("d", "d")}
    with pytest.raises(ValueError, match=r"^T must be"):
        depth.trace_forward(lambda X, W: X @ W, xw, 0, 2)
    with pytest.raises(ValueError, match=r"^d must be"):
        depth.trace_forward(lambda X, W: X @ W, xw, 3, 0)
    _raises("shapes: give each input of the forward a shape, the sequence first "
            "(e.g. --shape X=T,d --shape W=d,d)", lambda X: X, {}, 3, 2)
    _raises("shapes: the first input (X) is the sequence, its second-to-last dimension must be "
            "T, got X=d,T", lambda X: X, {"X": ("d", "T")}, 3, 2)
    _raises("shapes: the first input (X) is the sequence, its second-to-last dimension must be "
            "T, got X=T", lambda X: X, {"X": ("T",)}, 3, 2)

    def wrong_width(X, W):
        return (X @ W).T

    _raises("tracing wrong_width: the first output must be (..., T, width) with T = 3 on its "
            "second-to-last axis, got shape (2, 3)", wrong_width, xw, 3, 2)

    def untouched(X, W):
        return X

    _raises("tracing untouched: the forward did no traced operation", untouched, xw, 3, 2)

    def number(X, W):
        return 1

    _raises("tracing number: the forward must return a traced array or a tuple of them (built "
            "from its inputs with the tracer's operations), got int", number, xw, 3, 2,
            error=TypeError)
    _raises("tracing pair: the forward must return a traced array or a tuple of them (built "
            "from its inputs with the tracer's operations), got tuple", lambda X, W: (X @ W, 1.0),
            xw, 3, 2, "pair", error=TypeError)

    def cumsum(X, W):
        return np.cumsum(X @ W, axis=0)

    with pytest.raises(TypeError) as e:                 # the tracer named the line: as it came
        depth.trace_forward(cumsum, xw, 3, 2)
    assert str(e.value).startswith("trace: np.cumsum is not traced (called at ")

    def refuses(X, W):
        raise IndexError("no such row")

    with pytest.raises(IndexError) as e:
        depth.trace_forward(refuses, xw, 3, 2)
    assert str(e.value).startswith("tracing refuses: no such row (called at ")
    assert str(e.value).endswith('raise IndexError("no such row"))')
    assert isinstance(e.value.__cause__, IndexError)


def test_an_error_names_the_users_innermost_line_past_numpys_frames(tmp_path):
    import importlib.util
    path = tmp_path / "user.py"
    path.write_text("import numpy as np\n\n\ndef f():\n    return np.linalg.inv(np.zeros((2, 2)))\n")
    spec = importlib.util.spec_from_file_location("user_forward", path)
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    with pytest.raises(np.linalg.LinAlgError) as e:
        user.f()
    assert depth._user_line(e.value) == (f" (called at {path}:5: "
                                         f"return np.linalg.inv(np.zeros((2, 2))))")
    assert depth._user_line(ValueError("raised nowhere")) == ""     # no frames at all


@pytest.mark.parametrize("argv, needle", [
    (["--forward", "m:f"], "--shape: --forward needs one --shape"),
    (["--shape", "X=T,d"], "--shape: goes with --forward"),
    (["--forward", "m:f", "--shape", "X=d,T"], "second-to-last dimension must be T"),
    (["--forward", "m:f", "--shape", "X=T,q"], "--shape: each dimension of X must be"),
    (["--forward", "m:f", "--shape", "X"], "--shape: expected NAME=DIM"),
    (["--forward", "m:f", "--shape", "X=T,d", "--shape", "X=d,d"], "--shape: each input once"),
    (["--forward", "nomodule_here_xyz:f", "--shape", "X=T,d"], "--forward: cannot import"),
    (["--forward", "no_colon", "--shape", "X=T,d"], "--forward: expected package.module:function"),
])
def test_cli_forward_bad_arguments(argv, needle, capsys):
    assert cli.main(["depth", "--T", "4", "--d", "2", "--no-measure"] + argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_the_full_reports_depth_figure_reaches_65536_and_the_quick_report_stays_short():
    from harness.report import figures
    assert max(config.REPORT.depth_long.T_values) == 65536 and config.QUICK_REPORT.depth_long.T_values == ()
    short = depth.depth_table([4, 8], 3, families=("rnn",))
    long = depth.depth_table([64], 2, families=("rnn",))
    fig = figures.figure_depth({"depth": short, "depth_long": long})
    xs = {x for ax in fig.axes for line in ax.get_lines() for x in line.get_xdata()}
    assert {4, 8, 64} <= xs
    ys = {y for ax in fig.axes for line in ax.get_lines() for y in line.get_ydata()}
    assert 3 * 64 in ys                                  # the RNN's span at the long length
    assert {4, 8} <= {x for ax in figures.figure_depth({"depth": short}).axes
                      for line in ax.get_lines() for x in line.get_xdata()}


def test_tables_read_each_trace_once_and_keep_only_what_the_schedule_reuses():
    heard = []
    counts, table, kept = depth.tables([3, 5], 2, families=("rnn", "lru"), keep=(5,),
                                       progress=heard.append)
    pd.testing.assert_frame_equal(counts, depth.count_table([3, 5], 2, families=("rnn", "lru")))
    pd.testing.assert_frame_equal(table.drop(columns="trace_seconds"),
                                  depth.depth_table([3, 5], 2, families=("rnn", "lru"))
                                  .drop(columns="trace_seconds"))
    assert sorted(kept) == [("lru", 5, 2), ("lru-scan", 5, 2), ("rnn", 5, 2)]
    assert heard == []                                   # no trace took a second


# ------------------------------------------------------------------ --shape and --forward

@pytest.mark.parametrize("text, expected", [
    ("W_hh=3*d,d", ("W_hh", ("3*d", "d"))),
    ("X=4,T", ("X", ("4", "T"))),
    ("b=1,1*T", ("b", ("1", "1*T"))),
])
def test_a_shape_names_an_input_and_its_dimensions(text, expected):
    assert depth.parse_shape(text) == expected


@pytest.mark.parametrize("text, message", [
    ("X=T=d", "each dimension of X must be a positive integer, T, d or k*T / k*d, got 'T=d'"),
    ("1X=T", "expected NAME=DIM,DIM,..."),
    ("=T", "expected NAME=DIM,DIM,..."),
    ("X=", "expected NAME=DIM,DIM,..."),
    ("X=0,d", "got '0'"),
    ("X=0*d", "got '0*d'"),
    ("X=x*d", "got 'x*d'"),
    ("X=T*", "got 'T*'"),
    ("X=2*q", "got '2*q'"),
])
def test_a_bad_shape_is_refused_naming_the_argument_and_the_token(text, message):
    with pytest.raises(ValueError, match="^--shape: ") as err:
        depth.parse_shape(text)
    assert message in str(err.value)


def test_forward_is_refused_before_any_import_when_it_names_no_function():
    for spec in (":f", "harness:1f", "f"):
        with pytest.raises(ValueError, match="--forward: expected package.module:function or "
                                             "file.py:function"):
            depth.load_forward(spec)
    # the function is after the last colon: what comes before is the module, whole
    with pytest.raises(ValueError, match="cannot import 'a.b:c'"):
        depth.load_forward("a.b:c:f")
    with pytest.raises(ValueError, match="--forward: no file 'nofile.py'"):
        depth.load_forward("nofile.py:f")


def test_forward_from_a_file_is_loaded_under_a_name_of_its_own(tmp_path):
    src = tmp_path / "mymod.py"
    src.write_text("def f(X):\n    return X\n")
    f = depth.load_forward(f"{src}:f")
    assert f.__module__ == "_harness_forward_mymod" and f(3) == 3
    with pytest.raises(ValueError, match=f"--forward: '{re.escape(str(src))}' has no function "
                                         "'nofn'"):
        depth.load_forward(f"{src}:nofn")


def test_forward_from_a_module_looks_in_the_working_folder_first(tmp_path, monkeypatch):
    import os
    import sys
    (tmp_path / "cwdmod_forward.py").write_text("def g(X):\n    return 2 * X\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    try:
        assert depth.load_forward("cwdmod_forward:g")(2) == 4
        assert sys.path[0] == os.getcwd()               # put first, not after the others
        monkeypatch.setattr(sys, "path", ["", *[p for p in sys.path if p != os.getcwd()]])
        before = list(sys.path)
        depth.load_forward("cwdmod_forward:g")
        assert sys.path == before                      # "" is the working folder already
    finally:
        sys.modules.pop("cwdmod_forward", None)         # no module of this test left behind


def test_forward_tables_count_every_input_at_every_length_under_the_name_given(tmp_path):
    path = _write_forward(tmp_path)
    shapes = {"X": ("T", "d"), "W1": ("d", "d"), "U1": ("d", "d"), "W2": ("d", "d"),
              "U2": ("d", "d")}
    counts, tab = depth.forward_tables(f"{path}:rnn2", shapes, [5, 9], 3, name="two layers")
    want = pd.DataFrame([dict(model="two layers", T=T, d=3, part=p, macs=9 * T, flops=18 * T)
                         for T in (5, 9) for p in ("U1", "U2", "W1", "W2")])
    pd.testing.assert_frame_equal(counts, want)
    assert tab.model.tolist() == ["two layers"] * 2 and tab["T"].tolist() == [5, 9]
    # without a name, the spec names it
    counts, _ = depth.forward_tables(f"{path}:rnn2", shapes, [5], 3)
    assert set(counts.model) == {f"{path}:rnn2"}


@pytest.mark.parametrize("tok, size", [("4", 4), ("T", 5), ("d", 6), ("3*d", 18), ("1*T", 5),
                                       ("2*T", 10)])
def test_a_dimension_is_sized_at_the_traced_lengths(tok, size):
    assert depth._size(tok, 5, 6) == size


def test_an_errors_line_whose_source_is_gone_is_named_by_file_and_line_alone(monkeypatch):
    import traceback
    frames = [traceback.FrameSummary("/nonexistent/forward.py", 12, "forward", line=None)]
    monkeypatch.setattr(traceback, "extract_tb", lambda tb: list(frames))
    assert depth._user_line(ValueError("x")) == " (called at /nonexistent/forward.py:12: )"


def test_a_forward_without_multiplications_has_an_empty_counts_table_with_its_columns(tmp_path):
    path = tmp_path / "adds.py"
    path.write_text("def twice(X):\n    return X + X\n")
    counts, tab = depth.forward_tables(f"{path}:twice", {"X": ("T", "d")}, [5], 3)
    assert counts.empty and list(counts.columns) == ["model", "T", "d", "part", "macs", "flops"]
    assert tab["T"].tolist() == [5] and tab.macs.tolist() == [0]


# ------------------------------------------------------- a user's code that raises

FORWARD_ARGS = ["--shape", "X=T,d", "--shape", "W=d,d", "--T", "4", "--d", "2", "--no-measure",
                "--quiet"]


class _Odd(ValueError):
    def __init__(self, a, b):                  # a class of theirs with arguments of its own
        super().__init__(f"{a} and {b}")


# (source, function, line that raised, exception as the message names it (a regular
# expression), while)
USER_FAILURES = {
    "syntax error": ("def f(X, W)\n    return X @ W\n", "f", 1, "SyntaxError: expected ':'",
                     "importing"),
    "missing module": ("import nonexistent_module_39\n\n\ndef f(X, W):\n    return X @ W\n", "f",
                       1, "ModuleNotFoundError: No module named 'nonexistent_module_39'",
                       "importing"),
    "import error": ("from os import nothing_here_39\n", "f", 1,
                     r"ImportError: cannot import name 'nothing_here_39' from 'os' \(.*os\.py\)",
                     "importing"),
    "runtime error at import": ("x = 1\nraise RuntimeError('not on this machine')\n", "f", 2,
                                "RuntimeError: not on this machine", "importing"),
    "exit at import": ("import sys\nsys.exit(3)\n", "f", 2,
                       r"SystemExit: sys\.exit\(3\) was called; a forward returns its output",
                       "importing"),
    "attribute error": ("def f(X, W):\n    return X.nothing\n", "f", 2,
                        "AttributeError: 'Traced' object has no attribute 'nothing'", "tracing"),
    "key error": ("def f(X, W):\n    return {}['k']\n", "f", 2, "KeyError: 'k'", "tracing"),
    "runtime error": ("def f(X, W):\n    raise RuntimeError('no')\n", "f", 2,
                      "RuntimeError: no", "tracing"),
    "recursion": ("def f(X, W):\n    return f(X @ W, W)\n", "f", 2,
                  "RecursionError: maximum recursion depth exceeded.*", "tracing"),
    "value error": ("def f(X, W):\n    raise ValueError('no such row')\n", "f", 2,
                    "ValueError: no such row", "tracing"),
    "zero division": ("def f(X, W):\n    return X @ W * (1 / 0)\n", "f", 2,
                      "ZeroDivisionError: division by zero", "tracing"),
    "a class of theirs": ("class Odd(ValueError):\n    def __init__(self, a, b):\n"
                          "        super().__init__(f'{a} and {b}')\n\n\n"
                          "def f(X, W):\n    raise Odd(1, 2)\n", "f", 7, "Odd: 1 and 2",
                          "tracing"),
    "a helper of theirs": ("def g(x):\n    return x.missing\n\n\ndef f(X, W):\n    return g(X)\n",
                           "f", 2, "AttributeError: 'Traced' object has no attribute 'missing'",
                           "tracing"),
    "sys.exit(0)": ("import sys\n\n\ndef f(X, W):\n    sys.exit(0)\n", "f", 5,
                    r"SystemExit: sys\.exit\(0\) was called; a forward returns its output",
                    "tracing"),
}


@pytest.mark.parametrize("case", list(USER_FAILURES))
@pytest.mark.parametrize("form", ["file", "module"])
def test_a_users_code_that_raises_reads_as_theirs(case, form, tmp_path, monkeypatch, capsys):
    """Whatever the user's file or forward raises: one line naming their file, line and
    exception, their own frames below it (none of the harness's), exit 2; never a traceback
    through the harness, never exit 0 (sys.exit(0)). It was a 23-line traceback, exit 1,
    for all but ValueError, TypeError, MemoryError and ArithmeticError (#39)."""
    import os
    import sys

    import harness
    source, fn, line, what, doing = USER_FAILURES[case]
    module = f"user39_{abs(hash(case)) % 10**8}_{form}"
    path = tmp_path / f"{module}.py"
    path.write_text(source)
    monkeypatch.chdir(tmp_path)
    spec = f"{path}:{fn}" if form == "file" else f"{module}:{fn}"
    try:
        assert cli.main(["depth", "--forward", spec, *FORWARD_ARGS]) == 2
    finally:
        sys.modules.pop(module, None)
    err = capsys.readouterr().err
    first, *below = err.splitlines()
    where = "importing " + (str(path) if form == "file" else module) if doing == "importing" \
        else f"tracing {spec}"
    assert re.fullmatch(re.escape(f"harness depth: error: --forward: {path}:{line}: ") + what
                        + re.escape(f" (raised while {where}; your code's frames below)"),
                        first), err
    assert f'File "{path}", line {line}' in err, err
    assert below and os.path.dirname(harness.__file__) not in err and "importlib" not in err, err
    assert "Traceback" not in err, err


def test_a_users_error_shows_the_harnesss_frames_only_when_debugging(tmp_path, monkeypatch):
    from harness.infra.files import UserCodeError
    path = tmp_path / "keys.py"
    path.write_text("def f(X, W):\n    return {}['k']\n")
    monkeypatch.setenv("HARNESS_DEBUG", "1")
    with pytest.raises(UserCodeError) as e:
        cli.main(["depth", "--forward", f"{path}:f", *FORWARD_ARGS])
    assert isinstance(e.value.__cause__, KeyError)


def test_a_users_exception_class_with_arguments_of_its_own_is_raised_as_it_came():
    def f(X, W):
        raise _Odd(1, 2)

    with pytest.raises(_Odd, match="^1 and 2$"):
        depth.trace_forward(f, {"X": ("T", "d"), "W": ("d", "d")}, 3, 2)


def test_a_module_missing_inside_the_forwards_file_is_theirs_not_the_spec(tmp_path, monkeypatch):
    import sys
    (tmp_path / "needs_missing_39.py").write_text("import not_installed_39\n")
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(ModuleNotFoundError, match="not_installed_39"):
            depth.load_forward("needs_missing_39:f")
    finally:
        sys.modules.pop("needs_missing_39", None)


def test_the_inputs_are_passed_by_name_whatever_order_the_forward_takes_them(tmp_path):
    path = tmp_path / "swapped.py"
    path.write_text("def f(W, X):\n    return X @ W\n")
    counts, tab = depth.forward_tables(f"{path}:f", {"X": ("T", "d"), "W": ("d", "3")}, [5], 2)
    assert dict(zip(counts.part, counts.macs)) == {"W": 5 * 2 * 3}
    tr = depth.trace_forward(lambda X, **weights: X @ weights["W"],
                             {"X": ("T", "d"), "W": ("d", "d")}, 3, 2)
    assert tr.macs_by_part() == {"W": 12}


@pytest.mark.parametrize("source, shapes, message", [
    ("def f(X, W):\n    return X @ W\n", ["X=T,d", "Q=d,d"],
     "--shape: {spec} takes no input named 'Q' (its inputs: X, W)"),
    ("def f(X, W):\n    return X @ W\n", ["X=T,d"],
     "--shape: {spec} needs its input 'W' too (its inputs: X, W); give each one a shape, e.g. "
     "W=d,d"),
    ("def f(X, W, /):\n    return X @ W\n", ["X=T,d", "W=d,d"],
     "--shape: {spec} takes 'X' by position only, but the inputs are passed by name; drop the "
     "'/' from its parameters"),
    ("def f(*inputs):\n    return inputs[0]\n", ["X=T,d"],
     "--shape: {spec} takes no input named 'X' (it names none of its inputs)"),
])
def test_a_shape_the_forward_does_not_take_is_refused_by_name(source, shapes, message, tmp_path,
                                                              capsys):
    path = tmp_path / "sig.py"
    path.write_text(source)
    spec = f"{path}:f"
    argv = ["depth", "--forward", spec, *[a for s in shapes for a in ("--shape", s)], "--T", "4",
            "--d", "2", "--no-measure", "--quiet"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"harness depth: error: {message.format(spec=spec)}\n"
    with pytest.raises(ValueError, match="^shapes: "):
        depth.trace_forward(spec, dict(depth.parse_shape(s) for s in shapes), 4, 2)


def test_a_shape_too_large_to_trace_names_the_shape(tmp_path, capsys):
    path = tmp_path / "big.py"
    path.write_text("def f(X, W):\n    return X @ W\n")
    argv = ["depth", "--forward", f"{path}:f", "--shape", "X=T,d", "--shape",
            "W=99999999999999999999,d", "--T", "4", "--d", "2", "--no-measure", "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness depth: error: --shape: W=99999999999999999999,d at T = 4, "
                          "d = 2 is 199,999,999,999,999,999,998 elements; the traced inputs need "
                          "about 1,600,000,000,000,000,000,048 bytes"), err
    assert err.endswith("are available; give smaller dimensions\n") and err.count("\n") == 1
    shapes = {"X": ("T", "d"), "W": ("30", "d")}      # 10 and 60 elements, 8 bytes each
    with pytest.raises(MemoryError, match=r"^--shape: W=30,d at T = 5, d = 2 is 60 elements; "
                                          r"the traced inputs need about 560 bytes \(5\.22e-07 "
                                          r"GiB, 8 a traced element\) but only 0\.00 GiB"):
        depth.check_forward_memory(shapes, 5, 2, available=559, arg="--shape")
    depth.check_forward_memory(shapes, 5, 2, available=560)
    with pytest.raises(ValueError, match=r"^shapes: W=10000000000,d at T = 3"):
        depth.trace_forward(lambda X, W: X @ W.T, {"X": ("T", "d"), "W": ("10000000000", "d")},
                            3, 2)
