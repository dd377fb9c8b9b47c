"""harness.analysis.schedule: the task graph and the greedy schedule of hand-built graphs
whose levels, edges, bottom levels, work and span are worked out by hand; the table and the
plateau of processors."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
import pytest

from _helpers import _toy_trace
from harness.analysis import depth, schedule, trace
from harness.kernels import greedy as _greedy
from harness.models import ATTENTION, RECURRENCE


def test_plateau_is_the_first_P_within_the_tolerance_of_the_floor():
    from harness.analysis import schedule
    frame = pd.DataFrame(dict(model="m", T=1, grain="g", P=[1000, 1, 10, 100], span=7,
                              time=[100, 400, 101, 100.5]))
    pl = schedule.plateau_P(frame, tol=0.01).iloc[0]
    assert pl.plateau_P == 10 and pl.floor == 100 and pl.span == 7
    assert schedule.plateau_P(frame, tol=0.006).iloc[0].plateau_P == 100  # 100.5 <= 100.6
    assert schedule.plateau_P(frame, tol=0.004).iloc[0].plateau_P == 1000
    two = pd.concat([frame, frame.assign(grain="h", time=[50, 50, 50, 50])])
    pl = schedule.plateau_P(two, tol=0.01).set_index("grain")
    assert pl.loc["h", "plateau_P"] == 1 and pl.loc["g", "plateau_P"] == 10


def _hand_graph():
    """Five ops whose task graph is known:

        op0 matmul (2, 3), k = 4 ──> op1 add (2, 3) ──> op2 row sum (2,), n = 3
                                              └──> op3 tanh (2, 3), read row by row ──row 0──> op4 mul (3,)
    """
    from harness.analysis import trace
    g = trace.Graph()
    Op = trace.Op
    g.ops = [Op(0, "matmul", "w", (2, 3), 4, []),
             Op(1, "add", "add", (2, 3), 1, [(0, -1)]),
             Op(2, "sum", "sum", (2,), 3, [(1, -1)]),
             Op(3, "tanh", "tanh", (2, 3), 1, [(1, -1)], split=True),
             Op(4, "mul", "mul", (3,), 1, [(3, 0)])]
    import types
    return types.SimpleNamespace(model="hand", T=2, d=3, graph=g)


def test_task_graph_of_a_hand_built_graph():
    from harness.analysis import schedule
    tr = _hand_graph()
    tg = schedule.task_graph(tr, "scalar")
    # tasks: op0, op1, op2, op3 row 0, op3 row 1, op4
    assert tg.level_ptr.tolist() == [0, 3, 4, 6, 7, 8, 9]
    # matmul: 24 products, then a tree over k = 4 (12, 6); the sum of 3: levels 2 and 2;
    # tanh's 6 elements split into two rows of 3
    assert tg.level_size.tolist() == [24, 12, 6, 6, 2, 2, 3, 3, 3]
    assert tg.succ_ptr.tolist() == [0, 1, 4, 4, 5, 5, 5]
    assert tg.succ_idx.tolist() == [1, 2, 3, 4, 5]
    assert tg.indeg.tolist() == [0, 1, 1, 1, 1, 1]
    assert tg.prio.tolist() == [6, 3, 2, 2, 1, 1]       # levels from the task to the end
    assert (tg.work, tg.span, tg.grain) == (61, 6, "scalar")
    el = schedule.task_graph(tr, "element")
    # one processor per element: k = 4 steps of the matmul, n - 1 = 2 of the sum
    assert el.level_size.tolist() == [6, 6, 6, 6, 6, 2, 2, 3, 3, 3]
    assert (el.work, el.span) == (43, 7)
    with pytest.raises(ValueError, match="grain"):
        schedule.task_graph(tr, "row")


def test_schedule_of_a_hand_built_graph():
    from harness.analysis import schedule
    tr = _hand_graph()
    with mock.patch.object(schedule.depth, "trace_model", side_effect=AssertionError):
        f = schedule.schedule("hand", 2, 3, (1, 7, 100), "scalar", tr=tr).set_index("P")
    # P = 7: 24 products take 4 steps (7+7+7+3), 12 take 2, then 6, the add 6: 8 steps;
    # then the sum's 2 with tanh's two rows 3 + 2 of 3 (step 9), and the rest in step 10
    assert f.time.tolist() == [61, 10, 6]
    assert (f.work == 61).all() and (f.span == 6).all() and (f.grain == "scalar").all()
    assert (f.model == "hand").all() and (f["T"] == 2).all() and (f.d == 3).all()
    assert f.lower.tolist() == [61.0, 61 / 7, 6.0]
    assert f.upper.tolist() == [67.0, 61 / 7 + 6, 0.61 + 6]
    assert f.speedup.tolist() == [1.0, 6.1, 61 / 6]
    assert f.efficiency.tolist() == pytest.approx([1.0, 6.1 / 7, 61 / 600])
    assert f.time_over_span.tolist() == pytest.approx([61 / 6, 10 / 6, 1.0])
    assert f.bounds_ok.all()
    with pytest.raises(ValueError, match="P"):
        schedule.schedule("hand", 2, 3, (0,), "scalar", tr=tr)


def test_schedule_defaults_and_table():
    from harness.analysis import depth, schedule
    assert schedule.default_processors(3) == (1, 3, 6, 9, 10, 12, 100, 800, 1000, 10**4, 10**5,
                                              10**6, 10**7)
    assert schedule.default_processors(1000)[:6] == (1, 10, 100, 800, 1000, 2000)
    f = schedule.schedule("rnn", 3, 2)
    assert f.P.tolist() == list(schedule.default_processors(2))
    traces = {}
    table = schedule.schedule_table([3, 4], 2, (1, 5), grains=("scalar", "element"),
                                    families=("rnn",), traces=traces)
    assert sorted(traces) == [("rnn", 3, 2), ("rnn", 4, 2)]
    assert list(zip(table["T"], table.grain, table.P)) == [
        (3, "scalar", 1), (3, "scalar", 5), (3, "element", 1), (3, "element", 5),
        (4, "scalar", 1), (4, "scalar", 5), (4, "element", 1), (4, "element", 5)]
    one = schedule.schedule("rnn", 4, 2, (1, 5), "element", tr=depth.trace_model("rnn", 4, 2))
    pd.testing.assert_frame_equal(table.iloc[6:].reset_index(drop=True), one)


def test_task_graph_is_scalar_by_default():
    from harness.analysis import depth, schedule
    tr = depth.trace_model(ATTENTION, 4, 2)
    a, b = schedule.task_graph(tr), schedule.task_graph(tr, "scalar")
    assert (a.grain, a.work, a.span) == (b.grain, b.work, b.span) == ("scalar", b.work, b.span)
    assert a.level_size.dtype == np.int64 and a.indeg.dtype == np.int64


def test_task_graph_of_a_hand_built_trace():
    tg = schedule.task_graph(_toy_trace(), "scalar")
    # scalar levels: matmul [N k, N (k-1)] = [12, 6], a third per row; sum of 2: [1];
    # sum of 1: none; add [6]; mul [4]
    np.testing.assert_array_equal(tg.level_ptr, [0, 2, 4, 6, 7, 7, 8, 9])
    np.testing.assert_array_equal(tg.level_size, [4, 2, 4, 2, 4, 2, 1, 6, 4])
    # edges (1, 3), (0, 5), (1, 5), (2, 5), (3, 5)
    np.testing.assert_array_equal(tg.succ_ptr, [0, 1, 3, 4, 5, 5, 5, 5])
    np.testing.assert_array_equal(tg.succ_idx, [5, 3, 5, 5, 5])
    np.testing.assert_array_equal(tg.indeg, [0, 0, 0, 1, 0, 4, 0])
    # bottom levels: 6 -> 1, 5 -> 1, 4 -> 0, 3 -> 1 + 1, 2 -> 2 + 1, 1 -> 2 + 2, 0 -> 2 + 1
    np.testing.assert_array_equal(tg.prio, [3, 4, 3, 2, 0, 1, 1])
    assert (tg.work, tg.span) == (18 + 1 + 6 + 4, 4)       # chain: row 1, sum, add
    # the compiled kernels are given int64 buffers, whatever the ops' levels
    for name in ("level_ptr", "level_size", "succ_ptr", "succ_idx", "indeg", "prio"):
        assert getattr(tg, name).dtype == np.int64, name
    el = schedule.task_graph(_toy_trace(), "element")
    # element: a dot product of k = 2 terms is 2 steps of N; a sum of 2 is 1 combine
    np.testing.assert_array_equal(el.level_size, [2, 2, 2, 2, 2, 2, 1, 6, 4])
    assert (el.work, el.span) == (12 + 1 + 6 + 4, 4)
    assert el.level_size.dtype == np.int64 and el.prio.dtype == np.int64


def test_schedule_of_a_hand_built_trace():
    frame = schedule.schedule("toy", 3, 2, (1, 100), "scalar", tr=_toy_trace())
    assert list(frame.P) == [1, 100]
    assert list(frame.time) == [29, 4]       # one processor: the work; many: the span
    assert frame.bounds_ok.all()
    assert frame.speedup.tolist() == pytest.approx([1.0, 29 / 4])


def test_a_graph_without_ops_has_no_work_and_no_span():
    tg = schedule.task_graph(depth.Trace("none", 1, 1, trace.Graph(), ()), "scalar")
    assert (tg.work, tg.span) == (0, 0)
    np.testing.assert_array_equal(tg.level_ptr, [0])
    assert tg.level_size.shape == (0,) and tg.level_size.dtype == np.int64
    assert len(tg.indeg) == len(tg.prio) == len(tg.succ_idx) == 0


def test_upper_bound_is_inclusive():
    """An op on an empty array: one step that does nothing. W = 0, S = 1, so the
    schedule takes exactly W/P + S = 1 step, which Brent's bound allows."""
    g = trace.Graph()
    x = trace.leaf(g, "x", (0, 3), ("T", "d_model"))
    y = x + x
    frame = schedule.schedule("empty", 0, 3, (1, 2), "scalar", tr=depth.Trace("empty", 0, 3, g, (y,)))
    assert list(frame.time) == [1, 1] and list(frame.upper) == [1.0, 1.0]
    assert frame.bounds_ok.all()


def _lose_one_task(monkeypatch):
    real = _greedy.greedy_schedule

    def lossy(*args):
        real(*args)
        args[-1][2] -= 1                    # every unit of work done, one task never finished
    monkeypatch.setattr(_greedy, "greedy_schedule", lossy)


def test_schedule_refuses_a_kernel_that_loses_a_task(monkeypatch):
    tr = _toy_trace()
    assert schedule.schedule("toy", 3, 2, (2,), "scalar", tr=tr).time.iloc[0] > 0
    _lose_one_task(monkeypatch)
    with pytest.raises(AssertionError, match="schedule of toy T=3 P=2 lost tasks"):
        schedule.schedule("toy", 3, 2, (2,), "scalar", tr=tr)
    # the table names the model and T it was scheduling
    with pytest.raises(AssertionError, match=f"schedule of {RECURRENCE} T=3 P=4 lost tasks"):
        schedule.schedule_table([3], 2, processors=(4,), grains=("scalar",),
                                families=(RECURRENCE,))


def test_schedule_table_is_one_tidy_frame():
    frame = schedule.schedule_table([3, 4], 2, processors=(1, 4), grains=("scalar", "element"),
                                    families=(RECURRENCE,))
    assert len(frame) == 2 * 2 * 2
    assert list(frame.index) == list(range(8))
    assert frame.set_index(["T", "grain", "P"]).index.is_unique
    assert (frame.d == 2).all() and set(frame.model) == {RECURRENCE}


def test_plateau_P_keys_each_row_by_model_T_and_grain():
    rows = []
    for T, times in ((5, [100, 50, 30, 29.8]), (7, [80, 40, 39.9, 39.9])):
        for P, t in zip([8, 1, 4, 2], [times[3], times[0], times[2], times[1]]):   # unsorted
            rows.append({"model": "toy", "T": T, "grain": "scalar", "P": P, "time": t, "span": T})
    pl = schedule.plateau_P(pd.DataFrame(rows), tol=0.01)
    assert list(pl.columns) == ["model", "T", "grain", "plateau_P", "floor", "span"]
    # T=5: floor 29.8, 30 <= 29.8 * 1.01 = 30.098 -> P = 4; T=7: 40 <= 40.299 -> P = 2
    assert pl.set_index("T").plateau_P.to_dict() == {5: 4, 7: 2}
    assert pl.set_index("T").floor.to_dict() == {5: 29, 7: 39}
    assert pl.set_index("T").span.to_dict() == {5: 5, 7: 7}
