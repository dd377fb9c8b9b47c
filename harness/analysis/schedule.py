"""Scheduling the traced computation on P processors: task graphs, a greedy list
schedule, and Brent's bounds.

A traced forward (``harness.analysis.depth.trace_model``) is cut into tasks at one of two
grains: ``scalar`` (each multiply, add, compare or exp is a unit task; a sum of n
terms a balanced tree of ceil(log2 n) levels) or ``element`` (one processor
computes a whole output element; a dot product of k terms takes k steps). The
greedy schedule's steps T_P on P processors lie within Brent/Graham's
max(W/P, S) <= T_P <= W/P + S, W the work and S the span of the task graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.kernels import greedy
from harness.analysis import depth
from harness import models
from harness.infra.validate import check_int
from harness.infra.config import GRAINS, ScheduleConfig

DEFAULT = ScheduleConfig()


def default_processors(d):
    """P from 1 to 10^7: powers of ten, plus d, 2d, 4d, d^2 and the lesson's 800."""
    return tuple(sorted({1, 10, 100, 800, 1000, 10**4, 10**5, 10**6, 10**7,
                         d, 2 * d, 4 * d, d * d}))


@dataclass
class TaskGraph:
    """The traced ops cut into tasks (an op read row by row becomes one task per row)."""
    grain: str
    level_ptr: np.ndarray
    level_size: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    indeg: np.ndarray
    prio: np.ndarray            # bottom level: longest chain of levels from the task to the end
    work: int                   # unit tasks in all
    span: int                   # longest chain of levels


def task_graph(tr, grain="scalar"):
    """Level-expanded task DAG of a ``Trace``.

    A task's levels run in order; its first level waits for every level of the
    tasks it depends on. That is coarser than the true scalar graph, never
    finer, so Graham's bound holds for it exactly.
    """
    if grain not in GRAINS:
        raise ValueError(f"grain must be one of {list(GRAINS)!r}, got {grain!r}.")
    ops = tr.graph.ops
    base = np.zeros(len(ops) + 1, np.int64)
    for op in ops:
        base[op.id + 1] = base[op.id] + op.rows
    n = int(base[-1])
    sizes, counts = [], np.zeros(n, np.int64)
    for op in ops:
        lv = np.asarray(op.levels(grain), dtype=np.int64) // op.rows
        for r in range(op.rows):
            sizes.append(lv)
            counts[base[op.id] + r] = len(lv)
    level_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=level_ptr[1:])
    level_size = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    edges = []
    for op in ops:
        targets = range(base[op.id], base[op.id + 1])
        for i, row in op.deps:
            srcs = range(base[i], base[i + 1]) if row < 0 else (base[i] + row,)
            edges.extend((s, t) for s in srcs for t in targets)
    e = np.array(edges, dtype=np.int64).reshape(-1, 2)
    e = e[np.lexsort((e[:, 1], e[:, 0]))]
    succ_ptr = np.zeros(n + 1, np.int64)
    np.add.at(succ_ptr, e[:, 0] + 1, 1)
    succ_ptr = np.cumsum(succ_ptr)
    succ_idx = np.ascontiguousarray(e[:, 1])
    indeg = np.bincount(e[:, 1], minlength=n).astype(np.int64)
    finish, prio = np.zeros(n, np.int64), np.zeros(n, np.int64)
    greedy.span_and_priority(level_ptr, succ_ptr, succ_idx, finish, prio)
    return TaskGraph(grain, level_ptr, level_size, succ_ptr, succ_idx, indeg, prio,
                     int(level_size.sum()), int(finish.max()) if n else 0)


def schedule(model, T, d, processors=None, grain="scalar", tr=None):
    """Greedy list scheduling of the traced DAG on P processors, one row per P.

    Highest-level-first list scheduling of unit tasks: at each step every idle
    processor takes a ready task if there is one. ``lower`` and ``upper`` are
    Brent/Graham's max(W/P, S) <= T_P <= W/P + S; ``bounds_ok`` says whether the
    steps fall between them (a greedy schedule always should).
    ``grain``: 'scalar' (each multiply or add is a task, sums are trees) or
    'element' (one processor computes a whole output element, a dot product of
    k terms in k steps).
    """
    tr = depth.trace_model(model, T, d) if tr is None else tr
    tg = task_graph(tr, grain)
    processors = default_processors(tr.d) if processors is None else processors
    rows = []
    counts = np.zeros(3, np.int64)                 # steps, busy processor-steps, tasks done
    for P in processors:
        P = check_int("P", P)
        greedy.greedy_schedule(tg.level_ptr, tg.level_size, tg.succ_ptr, tg.succ_idx,
                                tg.indeg, tg.prio, P, counts)
        steps, busy, done = (int(c) for c in counts)
        if busy != tg.work or done != len(tg.indeg):
            raise AssertionError(f"schedule of {model} T={T} P={P} lost tasks")
        lower, upper = max(tg.work / P, tg.span), tg.work / P + tg.span
        speedup = tg.work / steps             # one processor does the work, nothing else: T_1 = W
        rows.append(dict(model=tr.model, T=tr.T, d=tr.d, grain=grain, P=P, time=steps,
                         work=tg.work, span=tg.span, lower=lower, upper=upper,
                         bounds_ok=bool(lower <= steps <= upper), speedup=speedup,
                         efficiency=speedup / P,
                         time_over_span=steps / tg.span))   # the most more processors can buy
    return pd.DataFrame(rows)


def schedule_table(T_values, d, processors=None, grains=DEFAULT.grains, families=models.NAMES,
                   traces=None):
    """``schedule`` for every (traced form, T, grain) of ``families``, concatenated; one trace
    per (model, T)."""
    frames = []
    for model in models.traced_forms(families):
        for T in T_values:
            tr = depth.traced(traces, model, T, d)
            for grain in grains:
                frames.append(schedule(model, T, d, processors, grain, tr=tr))
    return pd.concat(frames, ignore_index=True)


def plateau_P(frame, tol=DEFAULT.plateau_tol):
    """Per (model, T, grain): the smallest P within ``tol`` of the time at the largest P."""
    out = []
    for key, g in frame.groupby(["model", "T", "grain"]):
        g = g.sort_values("P")
        floor = g["time"].iloc[-1]
        P = int(g.loc[g["time"] <= floor * (1 + tol), "P"].iloc[0])
        out.append(dict(zip(["model", "T", "grain"], key), plateau_P=P, floor=int(floor),
                        span=int(g["span"].iloc[0])))
    return pd.DataFrame(out)
