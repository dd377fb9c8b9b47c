"""Laws that hold for every input, checked with Hypothesis on inputs it draws.

* the greedy schedule of any task DAG never starts a task before its predecessors
  are done, and its steps lie within Brent's bounds read from its own columns;
* the tracer's span is the longest chain of the graph it recorded, and its
  per-element depths are those of a plain twin of the same program;
* a linear RNN with orthogonal W_hh of radius rho decays as exactly k log10 rho.

Deterministic: every test draws from a derandomized Hypothesis, with no deadline
(the first call compiles) and no example database on disk.
"""

from __future__ import annotations

import math
import types
from unittest import mock

import numpy as np
import pytest

from _deps import require_module

require_module("hypothesis", "pip install -e '.[test]'")      # a test extra: CI fails without it
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from harness.kernels import greedy
from harness.analysis import gradpath, schedule, trace
from harness import models  # noqa: E402
from harness.models import rnn as rnn_family  # noqa: E402
from harness.analysis.trace import clog2  # noqa: E402

LAW = settings(derandomize=True, deadline=None, max_examples=60, database=None,
               print_blob=False)


# ----------------------------------------------------------------------------- task DAGs

@st.composite
def dags(draw, max_tasks=9):
    """(levels, preds): task i runs the unit-task batches levels[i] in order, after every
    task in preds[i] (all lower ids, so ids are topological). Task 0 has work, so W > 0."""
    n = draw(st.integers(1, max_tasks))
    levels, preds = [], []
    for i in range(n):
        levels.append(draw(st.lists(st.integers(1, 6), min_size=1 if i == 0 else 0, max_size=3)))
        preds.append(sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [])
    return levels, preds


def _longest(levels, preds):
    """finish[i]: levels on the longest chain ending with task i; bottom[i]: starting with it."""
    n = len(levels)
    finish = [0] * n
    for i in range(n):
        finish[i] = len(levels[i]) + max((finish[p] for p in preds[i]), default=0)
    succs = [[j for j in range(n) if i in preds[j]] for i in range(n)]
    bottom = [0] * n
    for i in reversed(range(n)):
        bottom[i] = len(levels[i]) + max((bottom[s] for s in succs[i]), default=0)
    return finish, bottom


def _task_graph(levels, preds):
    """A schedule.TaskGraph built by hand, its span and priorities computed here."""
    n = len(levels)
    finish, bottom = _longest(levels, preds)
    edges = sorted((p, j) for j in range(n) for p in preds[j])     # by source, then target
    succ_ptr = np.zeros(n + 1, np.int64)
    for p, _ in edges:
        succ_ptr[p + 1] += 1
    level_ptr = np.cumsum([0] + [len(lv) for lv in levels]).astype(np.int64)
    return schedule.TaskGraph(
        grain="scalar", level_ptr=level_ptr,
        level_size=np.array([s for lv in levels for s in lv], np.int64),
        succ_ptr=np.cumsum(succ_ptr).astype(np.int64),
        succ_idx=np.array([j for _, j in edges], np.int64),
        indeg=np.array([len(p) for p in preds], np.int64), prio=np.array(bottom, np.int64),
        work=sum(map(sum, levels)), span=max(finish))


def _twin_schedule(levels, preds, prio, P):
    """Step by step, highest priority first (ties: lower id), recording when each task starts
    and ends: the plain twin of ``greedy.greedy_schedule``. Returns (steps, start, end):
    task i runs its first unit in step start[i] + 1 and is done after step end[i]."""
    n = len(levels)
    end, start = [None] * n, [None] * n
    cur, rem = [0] * n, [lv[0] if lv else 0 for lv in levels]
    steps = 0

    def settle():            # a task without levels is done as soon as its inputs are
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if end[i] is None and not levels[i] and all(end[p] is not None for p in preds[i]):
                    end[i], start[i], changed = steps, steps, True

    settle()
    while any(e is None for e in end):
        ready = sorted((i for i in range(n) if end[i] is None and levels[i]
                        and all(end[p] is not None for p in preds[i])), key=lambda i: (-prio[i], i))
        left = P
        for i in ready:
            if left == 0:
                break
            if start[i] is None:
                start[i] = steps
            a = min(rem[i], left)
            rem[i] -= a
            left -= a
        steps += 1
        for i in ready:
            if rem[i] == 0:
                cur[i] += 1
                if cur[i] < len(levels[i]):
                    rem[i] = levels[i][cur[i]]
                else:
                    end[i] = steps
        settle()
    return steps, start, end


@LAW
@given(dag=dags())
def test_span_and_priority_are_the_longest_chains(dag):
    levels, preds = dag
    tg = _task_graph(levels, preds)
    finish, bottom = np.zeros(len(levels), np.int64), np.zeros(len(levels), np.int64)
    greedy.span_and_priority(tg.level_ptr, tg.succ_ptr, tg.succ_idx, finish, bottom)
    want_finish, want_bottom = _longest(levels, preds)
    assert finish.tolist() == want_finish
    assert bottom.tolist() == want_bottom


@LAW
@given(dag=dags(), P=st.integers(1, 12))
def test_greedy_schedule_respects_every_dependency(dag, P):
    """The twin records start and end steps: no task starts before its predecessors end.
    The kernel takes as many steps as the twin, and run uncompiled, it makes a task ready
    only once every predecessor has finished, and finishes each task exactly once."""
    levels, preds = dag
    tg = _task_graph(levels, preds)
    args = (tg.level_ptr, tg.level_size, tg.succ_ptr, tg.succ_idx, tg.indeg, tg.prio, P)
    out = np.zeros(3, np.int64)
    greedy.greedy_schedule(*args, out)

    steps, start, end = _twin_schedule(levels, preds, tg.prio.tolist(), P)
    for j in range(len(levels)):
        assert all(start[j] >= end[p] for p in preds[j]), (j, start, end)
    assert out.tolist() == [steps, tg.work, len(levels)]

    ready = {i for i in range(len(levels)) if not preds[i]}
    finished = []
    real = greedy.release

    def spy(i, succ_ptr, succ_idx, indeg, stack, sp):
        assert i in ready and i not in finished
        assert all(p in finished for p in preds[i])
        finished.append(i)
        new_sp = real(i, succ_ptr, succ_idx, indeg, stack, sp)
        for j in stack[sp:new_sp]:
            assert all(p in finished for p in preds[j]), (j, finished)
            ready.add(int(j))
        return new_sp

    slow = np.zeros(3, np.int64)
    with mock.patch.object(greedy, "release", spy):
        greedy.greedy_schedule.py_func(*args, slow)
    assert sorted(finished) == list(range(len(levels)))
    assert slow.tolist() == out.tolist()


@LAW
@given(dag=dags(), Ps=st.lists(st.integers(1, 40), min_size=1, max_size=4, unique=True))
def test_schedule_lies_within_brents_bounds_read_from_its_own_columns(dag, Ps):
    levels, preds = dag
    tg = _task_graph(levels, preds)
    tr = types.SimpleNamespace(model="dag", T=len(levels), d=1)
    with mock.patch.object(schedule, "task_graph", lambda tr, grain: tg):
        frame = schedule.schedule("dag", len(levels), 1, Ps + [1, tg.work], "scalar", tr=tr)
    W, S, P, t = frame.work, frame.span, frame.P, frame.time
    assert (W == sum(map(sum, levels))).all()
    assert (S == max(_longest(levels, preds)[0])).all()
    assert (np.maximum(W / P, S) <= t).all() and (t <= W / P + S).all()
    assert (frame.lower == np.maximum(W / P, S)).all() and (frame.upper == W / P + S).all()
    assert frame.bounds_ok.all()
    assert (frame.speedup == W / t).all() and (frame.efficiency == W / t / P).all()
    assert (frame.time_over_span == t / S).all()
    by_P = frame.drop_duplicates("P").set_index("P").time
    assert by_P.loc[1] == tg.work                 # one processor: one unit per step, never idle
    assert by_P.loc[tg.work] == tg.span           # every level fits in one step: the span


# ----------------------------------------------------------------------------- the tracer

class _Twin:
    """A value of the plain twin: shape, op depth, per-element fewest ops from position 1
    (dist) and scalar depth (sdepth), computed by the rules the tracer states."""

    def __init__(self, depth, dist, sdepth):
        self.depth, self.dist, self.sdepth = depth, dist, sdepth


def _elementwise(*xs):
    dist = np.minimum.reduce(np.broadcast_arrays(*(x.dist for x in xs))) + 1
    sdep = np.maximum.reduce(np.broadcast_arrays(*(x.sdepth for x in xs))) + 1
    return _Twin(1 + max(x.depth for x in xs), dist, sdep)


def _matmul(a, b):
    da, db = a.dist, b.dist
    ea, eb = a.sdepth, b.sdepth
    a1, b1 = da.ndim == 1, db.ndim == 1
    da, ea = (da[None], ea[None]) if a1 else (da, ea)
    db, eb = (db[:, None], eb[:, None]) if b1 else (db, eb)
    k = da.shape[-1]
    m, n = da.shape[0], db.shape[1]
    dist = np.empty((m, n))
    sdep = np.empty((m, n))
    for i in range(m):                  # element (i, j): row i of a and column j of b
        for j in range(n):
            dist[i, j] = min(da[i].min(), db[:, j].min()) + 1
            sdep[i, j] = max(ea[i].max(), eb[:, j].max()) + 1 + clog2(k)
    if a1:
        dist, sdep = dist[0], sdep[0]
    if b1:
        dist, sdep = dist[..., 0], sdep[..., 0]
    return _Twin(1 + max(a.depth, b.depth), dist, sdep)


def _reduce(x, keepdims):
    n = x.dist.shape[-1]
    return _Twin(1 + x.depth, x.dist.min(axis=-1, keepdims=keepdims) + 1,
                 x.sdepth.max(axis=-1, keepdims=keepdims) + clog2(n))


@st.composite
def programs(draw):
    """A random straight-line NumPy program on (n, n) inputs, as a list of instructions."""
    n = draw(st.integers(1, 4))
    steps = draw(st.lists(st.tuples(
        st.sampled_from(["add", "mul", "sub", "div", "neg", "tanh", "exp", "matmul",
                         "sum", "max", "row", "T", "stack"]),
        st.integers(0, 10**6), st.integers(0, 10**6), st.booleans(), st.integers(0, 3)),
        min_size=1, max_size=12))
    return n, steps


def _run(n, steps):
    """Run ``steps`` on traced leaves and on the twin side by side: (graph, [(traced, twin)])."""
    g = trace.Graph(weight_parts={"W": "weight"})
    X = trace.leaf(g, "X", (n, n), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (n, n), ("d_model", "d_model"))
    x_dist = np.full((n, n), np.inf)
    x_dist[0] = 0
    vals = [(X, _Twin(0, x_dist, np.zeros((n, n)))),
            (W, _Twin(0, np.full((n, n), np.inf), np.zeros((n, n))))]
    unary = {"neg": lambda v: -v, "tanh": np.tanh, "exp": np.exp}
    binary = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
              "sub": lambda a, b: a - b, "div": lambda a, b: a / b}
    for kind, i, j, keep, row in steps:
        (a, ta), (b, tb) = vals[i % len(vals)], vals[j % len(vals)]
        if kind in binary:
            if not _broadcastable(a.shape, b.shape):
                continue
            vals.append((binary[kind](a, b), _elementwise(ta, tb)))
        elif kind in unary:
            vals.append((unary[kind](a), _elementwise(ta)))
        elif kind == "matmul":
            if a.ndim + b.ndim < 3 or a.shape[-1] != b.shape[0] or max(a.ndim, b.ndim) > 2:
                continue
            vals.append((a @ b, _matmul(ta, tb)))
        elif kind in ("sum", "max"):
            if a.ndim == 0 or (a.ndim == 1 and not keep):
                continue
            vals.append((getattr(a, kind)(axis=-1, keepdims=keep), _reduce(ta, keep)))
        elif kind == "row":
            if a.ndim != 2:
                continue
            t = row % a.shape[0]
            vals.append((a[t], _Twin(ta.depth, ta.dist[t], ta.sdepth[t])))
        elif kind == "T":
            if a.ndim != 2:
                continue
            vals.append((a.T, _Twin(ta.depth, ta.dist.T, ta.sdepth.T)))
        elif kind == "stack":
            same = [(v, t) for v, t in vals if v.shape == a.shape][: row + 1]
            vals.append((np.stack([v for v, _ in same], axis=0),
                         _Twin(max(t.depth for _, t in same), np.stack([t.dist for _, t in same]),
                               np.stack([t.sdepth for _, t in same]))))
    return g, vals


def _broadcastable(s1, s2):
    try:
        np.broadcast_shapes(s1, s2)
    except ValueError:
        return False
    return True


@LAW
@given(prog=programs())
def test_traced_span_is_the_longest_chain_of_the_recorded_graph(prog):
    g, vals = _run(*prog)
    # longest chain of ops, by a walk over the recorded dependencies alone
    chain = {}
    for op in g.ops:
        assert all(i < op.id for i, _ in op.deps)            # program order is topological
        chain[op.id] = 1 + max((chain[i] for i, _ in op.deps), default=0)
    assert [op.op_depth for op in g.ops] == [chain[op.id] for op in g.ops]
    # ... and by the program as written
    for v, twin in vals:
        got = max((g.ops[i].op_depth for i, _ in v.deps), default=0)
        assert got == twin.depth
        np.testing.assert_array_equal(v.dist, twin.dist)
        np.testing.assert_array_equal(v.sdepth, twin.sdepth)
    if g.ops:
        assert max(chain.values()) == max(t.depth for _, t in vals)


@LAW
@given(model=st.sampled_from(models.NAMES), T=st.integers(1, 12), d=st.integers(1, 6))
def test_trace_of_a_model_spans_its_longest_chain(model, T, d):
    from harness.analysis import depth
    tr = depth.trace_model(model, T, d)
    chain = {}
    for op in tr.graph.ops:
        chain[op.id] = 1 + max((chain[i] for i, _ in op.deps), default=0)
    assert tr.span == max(chain.values())
    # the scalar task graph of the same trace: the same longest chain of levels
    tg = schedule.task_graph(tr, "scalar")
    n = len(tg.indeg)
    finish = np.zeros(n, np.int64)
    for i in range(n):                      # relax forwards: ids are topological
        finish[i] += tg.level_ptr[i + 1] - tg.level_ptr[i]
        for e in range(tg.succ_ptr[i], tg.succ_ptr[i + 1]):
            j = tg.succ_idx[e]
            assert j > i
            finish[j] = max(finish[j], finish[i])
    assert tg.span == finish.max() == tr.scalar_span
    assert tg.work == tg.level_size.sum() == tr.scalar_work


# ----------------------------------------------------------------------------- the decay law

@LAW
@given(log10_rho=st.floats(-3.0, 3.0), T=st.integers(2, 40), d=st.integers(1, 6),
       seed=st.integers(0, 2**16), measure=st.sampled_from(["probe", "exact"]))
def test_linear_orthogonal_decay_is_k_log10_rho(log10_rho, T, d, seed, measure):
    rho = 10.0 ** log10_rho
    f = rnn_family.rnn_decay(T=T, d=d, rho=rho, weight="orthogonal", activation="identity",
                             seed=seed, measure=measure)
    k = np.arange(1, T)
    assert f.distance.tolist() == k.tolist()
    want = k * math.log10(rho)
    tol = 1e-9 * (1 + np.abs(want))                    # rounding grows with k |log rho|
    assert (np.abs(f.log10_norm - want) <= tol).all()
    assert (np.abs(f.log10_linear - want) <= tol).all()
    # every singular value of rho Q is rho: the bound is the law itself
    assert (np.abs(f.log10_bound - want) <= tol).all()
    summary = gradpath.summarise(f, 0.5).iloc[0]
    if T >= 3:
        assert summary.ln_rate == pytest.approx(math.log(rho), abs=1e-9)
    assert summary.ln_rate_theory == pytest.approx(math.log(rho), rel=1e-12, abs=1e-15)
    assert summary.log10_transient == pytest.approx(0.0, abs=1e-8 * (1 + abs(want[-1])))
