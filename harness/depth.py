"""Sequential depth: work, span, path length and the schedule on P processors, measured.

The lessons' three claims, taken from the computation that runs:

* an RNN's T steps run one after another whatever the number of processors;
* attention is a constant number of stages that grows in work, not in depth;
* the multiplication counts cross at T = d (RNN 2 T d^2 against the grid 2 T^2 d).

``trace_model`` runs ``harness.reference``'s NumPy forward on recording arrays
(``harness.trace``) and gets the dependency graph of the code itself; every
number below is read off that graph and checked against a closed form.

Conventions, named once:

* ``macs``: multiply-adds of the matrix products, one multiplication each, as
  in the lessons. For the RNN the recurrence plus the input products; for
  attention the Q K^T grid plus the A V mix (the lessons' comparison; the three
  projections are counted separately, in ``macs_all``).
* ``flops`` = 2 x macs, as PyTorch's FlopCounterMode reports them.
* op granularity: one traced NumPy operation is one node; ``span`` is the
  longest chain of dependent operations, ``max_path`` the fewest operations
  from input position 1 to output position T (Table 1 of "Attention Is All You
  Need", third column).
* scalar granularity: every multiply, add, compare, exp ... is one unit task;
  a sum or max of n terms is a balanced tree of ceil(log2 n) levels.
  ``scalar_span`` is exact at every T: per-element depths are propagated
  through the traced ops, so the scalar graph (``scalar_work`` nodes) is never
  built and nothing is extrapolated.
* ``parallelism`` = scalar_work / scalar_span (average scalar tasks that can
  run at once).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd

from harness import reference, trace
from harness._io import UsageError, atomic_write_csv, output_dir
from harness._validate import available_memory_bytes

MODELS = ("rnn", "attention")
GRAINS = ("scalar", "element")

# which part of the model a product with a named weight belongs to
WEIGHT_PARTS = {"W_xh": "input", "W_hh": "recurrence",
                "Wq": "projections", "Wk": "projections", "Wv": "projections"}
# the parts the lessons compare: RNN products against attention's grid + mix
LESSON_PARTS = {"rnn": ("recurrence", "input"), "attention": ("grid", "mix")}


@dataclass(frozen=True)
class DepthConfig:
    d: int = 512                                        # the paper's d_model
    T_values: tuple = (50, 100, 200, 500, 512, 800, 1000, 2000)  # lesson's 50/1000/2000, T = d, 800 tokens
    schedule_T: tuple = (800,)                          # the lesson's 800-token text
    schedule_grains: tuple = GRAINS                     # both task models, side by side
    measure_T: tuple = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # brackets T = d and the measured crossover
    scaling_T: int = 1024                               # strong scaling at one T past the crossover (--scaling-T)
    repeats: int = 3                                    # best of, after one warm-up call
    seed: int = 0                                       # inputs from default_rng(seed)
    fit_min_T: int = 128                                # exponents fitted where overheads stop dominating
    min_seconds: float = 0.05                           # keep calling a short kernel until this much ran
    max_calls: int = 50                                 # ... but never more calls than this
    extrapolate_max: float = 100.0                      # an extrapolated crossover past this x max(T) is NaN


CONFIG = DepthConfig()


def default_processors(d):
    """P from 1 to 10^7: powers of ten, plus d, 2d, 4d, d^2 and the lesson's 800."""
    return tuple(sorted({1, 10, 100, 800, 1000, 10**4, 10**5, 10**6, 10**7,
                         d, 2 * d, 4 * d, d * d}))


# ----------------------------------------------------------------------------- counts

def closed_form_macs(model, T, d, d_k=None, d_v=None, d_h=None):
    """Multiplications per part from the lessons' formulas (the check on the trace)."""
    if model == "rnn":
        d_h = d if d_h is None else d_h
        return {"input": T * d_h * d, "recurrence": T * d_h * d_h}
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    return {"projections": T * d * (2 * d_k + d_v), "grid": T * T * d_k, "mix": T * T * d_v}


@dataclass
class Trace:
    """A traced forward: the op graph, its outputs, and what was read off it."""
    model: str
    T: int
    d: int
    graph: trace.Graph
    outputs: tuple
    seconds: float = 0.0

    def macs_by_part(self):
        parts = {}
        for op in self.graph.ops:
            if op.kind == "matmul":
                parts[op.part] = parts.get(op.part, 0) + op.macs
        return parts

    @property
    def ops(self):
        return len(self.graph.ops)

    @property
    def span(self):
        """Longest chain of dependent operations."""
        return max(op.op_depth for op in self.graph.ops)

    @property
    def max_path(self):
        """Fewest operations from input position 1 to output position T."""
        y = self.outputs[0]
        return int(y.dist[..., self.T - 1, :].min())

    @property
    def scalar_span(self):
        return int(max(int(y.sdepth.max()) for y in self.outputs))

    @property
    def scalar_work(self):
        return int(sum(sum(op.levels("scalar")) for op in self.graph.ops))


def trace_memory_bytes(model, T, d, d_k=None, d_v=None, d_h=None):
    """Peak bytes of ``trace_model`` (an upper estimate, measured with tracemalloc).

    Every traced value carries ``trace.BYTES_PER_ELEMENT`` per element (its dist and
    its scalar depth): the weights, a few (T, width) values and, for attention, a few
    T x T grids; the RNN adds the Python objects of its T steps.
    """
    e = trace.BYTES_PER_ELEMENT
    if model == "rnn":
        d_h = d if d_h is None else d_h
        return e * (2 * T * max(d, d_h) + 2 * d_h * d + 2 * d_h * d_h) + trace.BYTES_PER_STEP * T
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    return e * (4 * T * max(d, d_k, d_v) + 2 * d * (2 * d_k + d_v)) + 5 * e * T * T


def check_trace_memory(model, T, d, available=None, **widths):
    """Raise MemoryError naming T and d when tracing ``model`` would not fit in memory."""
    need = trace_memory_bytes(model, T, d, **widths)
    avail = available_memory_bytes() if available is None else available
    if need > avail:
        raise MemoryError(f"tracing the {model} at T={T}, d={d} needs about {need:,} bytes "
                          f"({need / 2**30:.2f} GiB) but only {avail / 2**30:.2f} GiB are "
                          f"available; use a smaller T or d")


def trace_model(model, T, d, d_k=None, d_v=None, d_h=None):
    """Run ``harness.reference``'s forward for ``model`` on recording arrays.

    X is (T, d); RNN: W_xh (d_h, d), W_hh (d_h, d_h); attention: Wq, Wk (d, d_k),
    Wv (d, d_v). Widths default to d, the lessons' equal-width comparison.
    Returns a ``Trace``; T = 2000 traces in well under a second per model.
    """
    model = _check_model(model)
    T, d = _check_pos("T", T), _check_pos("d", d)
    widths = {k: _check_pos(k, v) for k, v in (("d_k", d_k), ("d_v", d_v), ("d_h", d_h))
              if v is not None}
    try:
        check_trace_memory(model, T, d, **widths)
    except MemoryError as e:
        raise ValueError(str(e)) from None
    t0 = time.perf_counter()
    g = trace.Graph(weight_parts=dict(WEIGHT_PARTS))
    X = trace.leaf(g, "X", (T, d), ("T", "d_model"), source_row=0)   # position 1 is row 0
    if model == "rnn":
        d_h = d if d_h is None else _check_pos("d_h", d_h)
        W_xh = trace.leaf(g, "W_xh", (d_h, d), ("d_h", "d_model"))
        W_hh = trace.leaf(g, "W_hh", (d_h, d_h), ("d_h", "d_h"))
        outputs = (reference.rnn_forward(X, W_xh, W_hh),)          # (T, d_h)
    else:
        d_k = d if d_k is None else _check_pos("d_k", d_k)
        d_v = d if d_v is None else _check_pos("d_v", d_v)
        Wq = trace.leaf(g, "Wq", (d, d_k), ("d_model", "d_k"))
        Wk = trace.leaf(g, "Wk", (d, d_k), ("d_model", "d_k"))
        Wv = trace.leaf(g, "Wv", (d, d_v), ("d_model", "d_v"))
        outputs = tuple(reference.attention_forward(X, Wq, Wk, Wv))  # (T, d_v), (T, T)
    return Trace(model, T, d, g, outputs, time.perf_counter() - t0)


def _traced(traces, model, T, d):
    """The trace of (model, T) from ``traces`` (a dict filled as it goes), traced once."""
    if traces is None:
        return trace_model(model, T, d)
    key = (model, T, d)
    if key not in traces:
        traces[key] = trace_model(model, T, d)
    return traces[key]


def count_table(T_values, d, models=MODELS, traces=None):
    """Tidy counts: one row per (model, T, part), traced and closed form side by side.

    ``traces``: a dict shared with ``depth_table`` and ``schedule_table`` so that each
    (model, T, d) is traced once; None traces afresh.
    """
    rows = []
    for model in models:
        for T in T_values:
            tr = _traced(traces, model, T, d)
            traced = tr.macs_by_part()
            closed = closed_form_macs(model, T, d)
            for part in sorted(set(traced) | set(closed)):
                m = traced.get(part, 0)
                rows.append(dict(model=model, T=T, d=d, part=part, macs=m, flops=2 * m,
                                 closed_form=closed.get(part, 0),
                                 in_lesson_comparison=part in LESSON_PARTS[model]))
    frame = pd.DataFrame(rows)
    bad = frame[frame.macs != frame.closed_form]
    if len(bad):
        raise AssertionError(f"traced counts differ from the closed forms:\n{bad}")
    return frame


def depth_table(T_values, d, models=MODELS, traces=None):
    """One row per (model, T): the columns of depth.csv (Table 1 of the paper, measured)."""
    rows = []
    for model in models:
        for T in T_values:
            tr = _traced(traces, model, T, d)
            parts = tr.macs_by_part()
            macs = sum(parts.get(p, 0) for p in LESSON_PARTS[model])
            sw, ss = tr.scalar_work, tr.scalar_span
            rows.append(dict(
                model=model, T=T, d=d,
                macs=macs, flops=2 * macs, macs_all=sum(parts.values()),
                ops=tr.ops, span=tr.span, max_path=tr.max_path,
                scalar_work=sw, scalar_span=ss, parallelism=sw / ss,
                trace_seconds=tr.seconds))
    return pd.DataFrame(rows)


def lesson_table(d=512, T_values=(50, 1000, 2000)):
    """The "goodbye to recurrence" table: RNN products against the attention grid, and T/d."""
    frame = depth_table(T_values, d)
    wide = frame.pivot(index="T", columns="model", values="macs")
    wide = wide.rename(columns={"rnn": "rnn_macs", "attention": "attention_macs"})
    wide["ratio"] = wide["attention_macs"] / wide["rnn_macs"]
    wide["T_over_d"] = wide.index / d
    return wide.reset_index()[["T", "rnn_macs", "attention_macs", "ratio", "T_over_d"]]


# ----------------------------------------------------------------------------- schedule

@numba.njit(cache=True)
def _release(i, succ_ptr, succ_idx, indeg, stack, sp):
    # task i finished: push every successor whose last dependency this was
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        j = succ_idx[e]
        indeg[j] -= 1
        if indeg[j] == 0:
            stack[sp] = j
            sp += 1
    return sp


@numba.njit(cache=True)
def _greedy_schedule(level_ptr, level_size, succ_ptr, succ_idx, indeg0, prio, P):
    # level_ptr (n+1,), level_size (L,): task i runs levels level_ptr[i]..level_ptr[i+1]-1,
    # each a batch of unit tasks that may start when the previous level is done.
    # succ_ptr (n+1,), succ_idx (E,): task edges; ids are topological. prio (n,): bottom level.
    n = indeg0.shape[0]
    indeg = indeg0.copy()
    cur = level_ptr[:n].copy()
    rem = np.zeros(n, np.int64)
    active = np.empty(n, np.int64)        # ready tasks, highest priority first
    n_act = 0
    stack = np.empty(n, np.int64)         # tasks whose predecessors are all done
    sp = 0
    for i in range(n):
        if indeg[i] == 0:
            stack[sp] = i
            sp += 1
    steps = 0
    busy = 0
    done = 0
    while True:
        while sp > 0:
            sp -= 1
            i = stack[sp]
            if cur[i] == level_ptr[i + 1]:          # no levels (a reduction of one term)
                done += 1
                sp = _release(i, succ_ptr, succ_idx, indeg, stack, sp)
                continue
            rem[i] = level_size[cur[i]]
            pos = n_act
            while pos > 0 and (prio[active[pos - 1]] < prio[i] or
                               (prio[active[pos - 1]] == prio[i] and active[pos - 1] > i)):
                active[pos] = active[pos - 1]
                pos -= 1
            active[pos] = i
            n_act += 1
        if n_act == 0:
            break
        first = active[0]
        if rem[first] > P:
            # the first task alone takes every processor until it fits in one step
            k = (rem[first] - 1) // P
            rem[first] -= k * P
            steps += k
            busy += k * P
            continue
        left = P                               # one step: greedy, in priority order
        m = 0
        while m < n_act and left > 0:
            i = active[m]
            a = rem[i] if rem[i] < left else left
            rem[i] -= a
            left -= a
            busy += a
            m += 1
        steps += 1
        w = 0
        for q in range(m):
            i = active[q]
            if rem[i] > 0:
                active[w] = i
                w += 1
                continue
            cur[i] += 1
            if cur[i] < level_ptr[i + 1]:      # next level is ready at the next step
                rem[i] = level_size[cur[i]]
                active[w] = i
                w += 1
                continue
            done += 1
            sp = _release(i, succ_ptr, succ_idx, indeg, stack, sp)
        if w < m:
            for q in range(m, n_act):
                active[w + q - m] = active[q]
            n_act -= m - w
    return steps, busy, done


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
    finish, prio = _span_and_priority(level_ptr, succ_ptr, succ_idx)
    return TaskGraph(grain, level_ptr, level_size, succ_ptr, succ_idx, indeg, prio,
                     int(level_size.sum()), int(finish.max()) if n else 0)


@numba.njit(cache=True)
def _span_and_priority(level_ptr, succ_ptr, succ_idx):
    # ids are topological: relax forwards for finish levels, backwards for bottom levels
    n = level_ptr.shape[0] - 1
    start = np.zeros(n, np.int64)
    finish = np.zeros(n, np.int64)
    for i in range(n):
        finish[i] = start[i] + level_ptr[i + 1] - level_ptr[i]
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            j = succ_idx[e]
            if finish[i] > start[j]:
                start[j] = finish[i]
    bottom = np.zeros(n, np.int64)
    for i in range(n - 1, -1, -1):
        b = 0
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            if bottom[succ_idx[e]] > b:
                b = bottom[succ_idx[e]]
        bottom[i] = b + level_ptr[i + 1] - level_ptr[i]
    return finish, bottom


def schedule(model, T, d, processors=None, grain="scalar", tr=None):
    """Greedy list scheduling of the traced DAG on P processors, one row per P.

    Highest-level-first list scheduling of unit tasks: at each step every idle
    processor takes a ready task if there is one. Checks Brent/Graham on every
    row, max(W/P, S) <= T_P <= W/P + S, and raises AssertionError if broken.
    ``grain``: 'scalar' (each multiply or add is a task, sums are trees) or
    'element' (one processor computes a whole output element, a dot product of
    k terms in k steps).
    """
    tr = trace_model(model, T, d) if tr is None else tr
    tg = task_graph(tr, grain)
    processors = default_processors(tr.d) if processors is None else processors
    rows = []
    for P in processors:
        P = _check_pos("P", P)
        steps, busy, done = _greedy_schedule(tg.level_ptr, tg.level_size, tg.succ_ptr,
                                             tg.succ_idx, tg.indeg, tg.prio, P)
        if busy != tg.work or done != len(tg.indeg):
            raise AssertionError(f"schedule of {model} T={T} P={P} lost tasks")
        lower, upper = max(tg.work / P, tg.span), tg.work / P + tg.span
        if not (lower <= steps <= upper):
            raise AssertionError(f"Brent bound broken for {model} T={T} P={P}: "
                                 f"{lower} <= {steps} <= {upper} is false")
        rows.append(dict(model=tr.model, T=tr.T, d=tr.d, grain=grain, P=P, time=steps,
                         work=tg.work, span=tg.span, lower=lower, upper=upper,
                         bounds_ok=True, speedup=None, efficiency=None))
    frame = pd.DataFrame(rows)
    t1 = tg.work  # one processor does the work, nothing else: T_1 = W
    frame["speedup"] = t1 / frame["time"]
    frame["efficiency"] = frame["speedup"] / frame["P"]
    frame["time_over_span"] = frame["time"] / frame["span"]   # the most more processors can buy
    return frame


def schedule_table(T_values, d, processors=None, grains=CONFIG.schedule_grains, models=MODELS,
                   traces=None):
    """``schedule`` for every (model, T, grain), concatenated; one trace per (model, T)."""
    frames = []
    for model in models:
        for T in T_values:
            tr = _traced(traces, model, T, d)
            for grain in grains:
                frames.append(schedule(model, T, d, processors, grain, tr=tr))
    return pd.concat(frames, ignore_index=True)


def plateau_P(frame, tol=0.01):
    """Per (model, T, grain): the smallest P within ``tol`` of the time at the largest P."""
    out = []
    for key, g in frame.groupby(["model", "T", "grain"]):
        g = g.sort_values("P")
        floor = g["time"].iloc[-1]
        P = int(g.loc[g["time"] <= floor * (1 + tol), "P"].iloc[0])
        out.append(dict(zip(["model", "T", "grain"], key), plateau_P=P, floor=int(floor),
                        span=int(g["span"].iloc[0])))
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------- measured

def _kernels():
    try:
        from harness import attention, rnn
    except ImportError as e:
        raise RuntimeError(f"the compiled kernels are not available ({e}); "
                           f"run with --no-measure") from None
    return rnn, attention


# what is timed: the RNN; attention on Q = K = V = X (grid + mix only, the lessons'
# comparison, counted crossover T = d); attention with its three projections
TIMED = ("rnn", "attention", "attention+proj")


def _inputs(model, T, d, rng, dtype=np.float64):
    X = rng.standard_normal((T, d)).astype(dtype)            # (T, d)
    s = 1 / math.sqrt(d)                                      # keeps tanh out of saturation
    if model == "rnn":
        return (X, (rng.standard_normal((d, d)) * s).astype(dtype),   # W_xh (d_h, d_in)
                (rng.standard_normal((d, d)) * s).astype(dtype))      # W_hh (d_h, d_h)
    if model == "attention":
        return (X * s,)                                               # Q = K = V = X
    return (X,) + tuple((rng.standard_normal((d, d)) * s).astype(dtype) for _ in range(3))


def _forward(model):
    rnn, attention = _kernels()
    return rnn.forward if model == "rnn" else attention.forward


def timed_bytes(T, d):
    """Memory of the largest timed call, attention with projections: its T x T buffers and inputs."""
    return 3 * T * T * 8 + 8 * T * d * 8 + 4 * d * d * 8


def timed_macs(model, T, d):
    """Multiplications the timed kernel call does (closed form, checked against the trace)."""
    parts = closed_form_macs("rnn" if model == "rnn" else "attention", T, d)
    if model == "attention":
        parts.pop("projections")
    return sum(parts.values())


def time_forward(model, T, d, repeats=CONFIG.repeats, seed=CONFIG.seed):
    """Best-of-``repeats`` seconds of one compiled forward; compiles on a tiny input first.

    ``model``: 'rnn', 'attention' (Q = K = V = X) or 'attention+proj'.
    """
    if model not in TIMED:
        raise ValueError(f"model must be one of {list(TIMED)!r}, got {model!r}.")
    f = _forward(model)
    rng = np.random.default_rng(seed)
    f(*_inputs(model, 2, 2, rng))                            # warm-up: compile outside the clock
    args = _inputs(model, T, d, rng)
    f(*args)                                                 # touch memory and caches once
    best, spent, n = math.inf, 0.0, 0
    # at least ``repeats`` calls and CONFIG.min_seconds of them: short calls are noisy
    while n < repeats or (spent < CONFIG.min_seconds and n < CONFIG.max_calls):
        t0 = time.perf_counter()
        f(*args)
        dt = time.perf_counter() - t0
        best, spent, n = min(best, dt), spent + dt, n + 1
    return best


def measure_wall_times(T_values=CONFIG.measure_T, d=CONFIG.d, repeats=CONFIG.repeats,
                       threads=None, seed=CONFIG.seed):
    """Wall time of the compiled forwards over T: model, T, d, threads, seconds, per step, MAC rate.

    model is 'rnn', 'attention' (Q = K = V = X: grid + mix) or 'attention+proj';
    ``macs`` counts every product the timed call does.
    """
    from harness import machine
    threads = os.cpu_count() if threads is None else threads
    rows = []
    with machine.threads(threads):
        for model in TIMED:
            for T in T_values:
                sec = time_forward(model, T, d, repeats, seed)
                macs = timed_macs(model, T, d)
                rows.append(dict(model=model, T=T, d=d, threads=threads, seconds=sec,
                                 seconds_per_step=sec / T, macs=macs,
                                 gmacs_per_s=macs / sec / 1e9))
    return pd.DataFrame(rows)


def _power_law(T, seconds):
    """(exponent, log prefactor) of seconds = a T^p by least squares in log-log, NaN if underdetermined.

    Needs two distinct T with positive finite times; never warns.
    """
    T = np.asarray(T, dtype=float)
    y = np.asarray(seconds, dtype=float)
    ok = (T > 0) & np.isfinite(y) & (y > 0)
    if np.unique(T[ok]).size < 2:
        return math.nan, math.nan
    x, y = np.log(T[ok]), np.log(y[ok])
    xm, ym = x.mean(), y.mean()
    p = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    return p, float(ym - p * xm)


def _crossing(pa, pr, T_max):
    """T where a_att T^pa[0] = a_rnn T^pr[0], or NaN when the fitted curves do not cross
    ahead (attention's exponent not the larger) or cross outside [1, extrapolate_max x T_max]."""
    if not (math.isfinite(pa[0]) and math.isfinite(pr[0])) or pa[0] <= pr[0]:
        return math.nan
    # a T^p = b T^q  ->  log T = (log b - log a) / (p - q)
    logT = (pr[1] - pa[1]) / (pa[0] - pr[0])
    if not (0.0 <= logT <= math.log(CONFIG.extrapolate_max * T_max)):
        return math.nan
    return math.exp(logT)


def measured_crossover(times, min_T=CONFIG.fit_min_T):
    """Where attention's measured time overtakes the RNN's, against the counted crossover.

    One row per (d, attention variant). ``measured_T``: log(t_att / t_rnn)
    interpolated linearly in log T between the two sampled T that bracket the
    sign change (NaN if the sweep does not bracket it). ``extrapolated_T``: the
    same from power laws fitted for T >= ``min_T`` (used when the sweep ends
    first); NaN when fewer than two T are fitted, when the fitted curves do not
    cross, or when they cross below T = 1 or past ``CONFIG.extrapolate_max`` x the
    largest T sampled. ``counted_T``: d for the grid (2 T^2 d = 2 T d^2); none with the
    projections, which alone already cost 1.5 x the RNN. ``predicted_T`` =
    d x (GEMM MAC rate / matrix-vector MAC rate), the rates taken at the sampled
    T nearest the crossover (``rate_at_T``): the counted crossover moved by how
    much faster each of attention's multiplications runs.
    """
    rows = []
    for d, g in times.groupby("d"):
        w = g.pivot(index="T", columns="model", values="seconds").sort_index()
        rate = g.pivot(index="T", columns="model", values="gmacs_per_s").sort_index()
        Ts = w.index.to_numpy(dtype=float)
        for variant in [m for m in ("attention", "attention+proj") if m in w.columns]:
            r = np.log(w[variant] / w["rnn"]).to_numpy()
            cross = math.nan
            for i in range(1, len(Ts)):
                if r[i - 1] < 0 <= r[i]:
                    f = -r[i - 1] / (r[i] - r[i - 1])
                    cross = math.exp(math.log(Ts[i - 1]) + f * math.log(Ts[i] / Ts[i - 1]))
                    break
            if math.isnan(cross) and len(r) and r[0] >= 0:
                cross = Ts[0]          # attention already slower at the smallest T
            upper = Ts >= min(min_T, Ts.max())
            pa = _power_law(Ts[upper], w[variant].to_numpy()[upper])
            pr = _power_law(Ts[upper], w["rnn"].to_numpy()[upper])
            extra = _crossing(pa, pr, Ts.max())
            # throughputs at the sampled T nearest the crossover (the largest T if none)
            at = cross if not math.isnan(cross) else extra
            Tmax = (Ts[np.argmin(np.abs(np.log(Ts) - math.log(at)))]
                    if math.isfinite(at) and at > 0 else Ts.max())
            Tmax = int(Tmax)
            speed = float(rate.loc[Tmax, variant] / rate.loc[Tmax, "rnn"])
            counted = d if variant == "attention" else math.nan
            rows.append(dict(
                d=d, variant=variant, counted_T=counted, measured_T=cross,
                extrapolated_T=extra,
                measured_over_counted=(cross if not math.isnan(cross) else extra) / d,
                gemm_over_matvec=speed, predicted_T=d * speed if variant == "attention" else math.nan,
                rate_at_T=int(Tmax)))
    return pd.DataFrame(rows)


def fit_exponents(times, min_T=CONFIG.fit_min_T):
    """Least-squares slope of log(seconds) against log(T), per model, for T >= min_T.

    One row per (model, d) always; ``exponent`` is NaN when fewer than two distinct T
    (with positive times) are at or above ``min_T``.
    """
    rows = []
    for (model, d), g in times.groupby(["model", "d"]):
        g = g[g["T"] >= min_T]
        slope, _ = _power_law(g["T"], g["seconds"])
        rows.append(dict(model=model, d=d, exponent=slope,
                         T_min=int(g["T"].min()) if len(g) else math.nan,
                         T_max=int(g["T"].max()) if len(g) else math.nan, points=len(g)))
    return pd.DataFrame(rows)


def strong_scaling(T=CONFIG.scaling_T, d=CONFIG.d, thread_counts=None, repeats=CONFIG.repeats,
                   seed=CONFIG.seed):
    """Both forwards at fixed (T, d) on 1..nproc threads (BLAS and Numba set together)."""
    from harness import machine
    thread_counts = thread_counts or tuple(range(1, (os.cpu_count() or 1) + 1))
    rows = []
    for n in thread_counts:
        with machine.threads(n):
            for model in TIMED:
                rows.append(dict(model=model, T=T, d=d, threads=n,
                                 seconds=time_forward(model, T, d, repeats, seed)))
    frame = pd.DataFrame(rows)
    one = frame[frame.threads == frame.threads.min()].set_index("model")["seconds"]
    frame["speedup"] = frame["seconds"] / frame["model"].map(one)
    frame["speedup"] = 1 / frame["speedup"]
    frame["efficiency"] = frame["speedup"] / frame["threads"]
    return frame


# ----------------------------------------------------------------------------- checks

def _check_pos(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer, got {v!r}.")
    if v < 1:
        raise ValueError(f"{name} must be at least 1, got {v}.")
    return int(v)


def _check_model(model):
    if model not in MODELS:
        raise ValueError(f"model must be one of {list(MODELS)!r}, got {model!r}.")
    return model


# ----------------------------------------------------------------------------- CLI

HELP = "work, span, path length and the P-processor schedule of RNN vs attention"

DESCRIPTION = """\
Trace harness.reference's RNN and attention forwards into dependency graphs and
read off, per model and T: the multiplications (macs: one per multiply-add, as
in the lessons; flops = 2 x macs, PyTorch's convention), the span (longest
chain of operations), the path length from position 1 to position T, and the
parallelism. Then schedule the graphs greedily on P = 1 .. 10^7 processors
(Brent/Graham bounds checked on every row) and time the compiled kernels on
this machine (wall time over T, crossover, strong scaling, fitted exponents).

example:
  harness depth --T 50 800 1000 2000 --d 512 --out reports/depth
  harness depth --T 50 100 --d 64 --no-measure
"""


def add_arguments(p):
    p.add_argument("--T", type=int, nargs="+", default=list(CONFIG.T_values), metavar="T",
                   help=f"sequence lengths to trace (default {' '.join(map(str, CONFIG.T_values))})")
    p.add_argument("--d", type=int, default=CONFIG.d,
                   help=f"model width, all widths equal as in the lessons (default {CONFIG.d})")
    p.add_argument("--P", type=int, nargs="+", default=None, metavar="P",
                   help="processor counts to schedule on (default 1, 10, ..., 10^7, d, d^2, 800)")
    p.add_argument("--schedule-T", type=int, nargs="+", default=list(CONFIG.schedule_T),
                   metavar="T", help="T values to schedule (default 800, the lesson's text)")
    p.add_argument("--measure-T", type=int, nargs="+", default=list(CONFIG.measure_T),
                   metavar="T", help="T values to time the compiled kernels at")
    p.add_argument("--scaling-T", type=int, default=CONFIG.scaling_T, metavar="T",
                   help=f"T of the strong-scaling runs (default {CONFIG.scaling_T})")
    p.add_argument("--repeats", type=int, default=CONFIG.repeats,
                   help=f"timed calls per point, best kept (default {CONFIG.repeats})")
    p.add_argument("--no-measure", action="store_true",
                   help="skip the wall-time measurements (counts, depth and schedule only)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write depth.csv (and schedule.csv, timings.csv, scaling.csv) here")


def _validate(args):
    """Check every argument, naming it as typed, before any work or any directory is made."""
    for name, vals in (("--T", args.T), ("--schedule-T", args.schedule_T),
                       ("--measure-T", args.measure_T), ("--P", args.P or [1]),
                       ("--scaling-T", [args.scaling_T])):
        for v in vals:
            if v < 1:
                raise UsageError(f"{name}: must be a positive integer, got {v}")
    if args.d < 1:
        raise UsageError(f"--d: must be a positive integer, got {args.d}")
    if args.repeats < 1:
        raise UsageError(f"--repeats: must be at least 1, got {args.repeats}")
    if not args.no_measure and len(set(args.measure_T)) < 2:
        raise UsageError(f"--measure-T: needs at least 2 distinct values to fit exponents and a "
                         f"crossover, got {' '.join(map(str, args.measure_T))} (or use --no-measure)")
    avail = available_memory_bytes()
    for name, Ts in (("--T", args.T), ("--schedule-T", args.schedule_T)):
        for model in MODELS:
            try:
                check_trace_memory(model, max(Ts), args.d, available=avail)
            except MemoryError as e:
                raise UsageError(f"{name}/--d: {e}") from None
    if not args.no_measure:
        T = max(max(args.measure_T), args.scaling_T)
        need = timed_bytes(T, args.d)
        if need > avail:
            raise UsageError(f"--measure-T/--scaling-T/--d: timing attention at T={T}, d={args.d} "
                             f"needs about {need / 2**30:.2f} GiB but only {avail / 2**30:.2f} GiB "
                             f"are available; use a smaller T or d (or --no-measure)")
    return args.out


def _print(title, frame):
    print(f"\n{title}")
    print(frame.to_string(index=False))


def run(args):
    out = _validate(args)                      # every check first: a bad argument creates nothing
    if out is None:
        return _run(args, None)
    with output_dir(out) as out_dir:
        return _run(args, out_dir)


def _run(args, out_dir):
    t0 = time.perf_counter()
    T_values = sorted(set(args.T))
    traces = {}                                              # one trace per (model, T), shared
    count_table(T_values, args.d, traces=traces)             # raises if trace != closed form
    table = depth_table(T_values, args.d, traces=traces)
    for key in [k for k in traces if k[1] not in set(args.schedule_T)]:
        del traces[key]                                      # keep only what the schedule reuses
    outputs = {"depth.csv": table}      # written together at the end: a run that fails
                                        # part-way leaves no partial set behind
    view = table[["model", "T", "macs", "flops", "span", "max_path", "scalar_span",
                  "parallelism"]].copy()
    view["parallelism"] = view["parallelism"].map(lambda v: f"{v:.4g}")
    _print(f"Table 1, measured on the traced forwards (d = {args.d}; macs: one per multiply-add, "
           f"RNN recurrence + input, attention QK^T + AV; flops = 2 x macs, PyTorch's convention;\n"
           f"span and max_path in operations; scalar_span exact with sums as ceil(log2 n) trees; "
           f"parallelism = scalar work / scalar span)", view)
    ratio = table.pivot(index="T", columns="model", values="macs")
    ratio["attention/rnn"] = (ratio["attention"] / ratio["rnn"]).round(3)
    ratio["T/d"] = (ratio.index / args.d).round(3)
    _print(f"counts cross at T = d = {args.d} (traced per-part counts equal the closed forms)",
           ratio.reset_index())

    processors = tuple(args.P) if args.P else default_processors(args.d)
    sched = schedule_table(sorted(set(args.schedule_T)), args.d, processors,
                           CONFIG.schedule_grains, traces=traces)
    traces.clear()
    outputs["schedule.csv"] = sched
    wide = sched.pivot_table(index="P", columns=["grain", "model", "T"], values="time")
    _print("greedy list schedule, steps T_P (Brent/Graham max(W/P,S) <= T_P <= W/P+S held on "
           "every row). grain=scalar: each multiply/add a unit task, sums as trees;\n"
           "grain=element: one processor per output element, a k-term dot product takes k steps",
           wide.reset_index())
    _print("where T_P stops falling (within 1% of its floor)", plateau_P(sched))
    if 800 in set(args.schedule_T) and 800 in processors:
        _print("the lesson's case: 800 tokens on 800 processors (time_over_span: the most that any "
               "number of further processors could still buy)",
               sched[(sched["T"] == 800) & (sched["P"] == 800)][
                   ["model", "grain", "P", "time", "span", "work", "speedup", "time_over_span"]])

    if not args.no_measure:
        from harness import machine
        times = measure_wall_times(sorted(set(args.measure_T)), args.d, args.repeats)
        cross = measured_crossover(times)
        expo = fit_exponents(times)
        scaling = strong_scaling(args.scaling_T, args.d, repeats=args.repeats)
        outputs.update({"timings.csv": times, "scaling.csv": scaling,
                        "machine.csv": pd.DataFrame([machine.describe()])})
        _print(f"wall time of the compiled forwards (best of >= {args.repeats} calls; attention: "
               "Q = K = V = X, grid + mix only; attention+proj: with its three projections)", times)
        _print("crossover: counted T = d for the grid; measured where attention gets slower. "
               "GEMM does far more multiplications per second than the RNN's T dependent "
               "matrix-vector steps, so the measured crossover moves from d to about "
               "d x gemm_over_matvec (predicted_T); with projections attention does more "
               "multiplications than the RNN at every T, so no crossover is counted", cross)
        _print("fitted exponents of time against T", expo)
        _print("strong scaling (BLAS and Numba threads set together)", scaling)
    if out_dir is not None:
        for name, frame in outputs.items():
            atomic_write_csv(frame, out_dir / name)
    print(f"\nharness depth: {time.perf_counter() - t0:.1f} s", file=sys.stdout)
    return 0
