"""Sequential depth: work, span and path length, read off the traced computation.

The lessons' three claims, taken from the computation that runs:

* an RNN's T steps run one after another whatever the number of processors;
* attention is a constant number of stages that grows in work, not in depth;
* the multiplication counts cross at T = d (RNN 2 T d^2 against the grid 2 T^2 d).

``trace_model`` runs a family's plain NumPy forward on recording arrays
(``harness.analysis.trace``) and gets the dependency graph of the code itself; every
number below is read off that graph and checked against a closed form.

Conventions, named once:

* ``macs``: multiply-adds of the matrix products, one multiplication each, as
  in the lessons, and the products of elementwise multiplications (the linear
  recurrence's lam * h). For the RNN the recurrence plus the input products;
  for attention the Q K^T grid plus the A V mix (the lessons' comparison; the
  three projections are counted separately, in ``macs_all``); for the linear
  recurrence its input products plus its lam * h products (T d_h in the loop,
  about 2 T d_h in the scan). A complex product counts as one.
* ``model``: the traced form (``harness.models.traced_forms``): each family
  under its own name, and further forms of it under theirs (``lru-scan``, the
  linear recurrence computed as a parallel scan beside its loop, ``lru``).
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

import time
from dataclasses import dataclass

import pandas as pd

from harness import models
from harness.analysis import trace
from harness.infra.validate import available_memory_bytes, check_int


# ----------------------------------------------------------------------------- tracing

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
            if op.kind in trace.MULTIPLYING:
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


def check_trace_memory(model, T, d, available=None, **widths):
    """Raise MemoryError naming T and d when tracing ``model`` would not fit in memory.

    ``model``: a traced form, or a family's name, which checks each of its forms.
    """
    fam = models.form(model)[0]
    names = list(models.traced_forms((fam.name,))) if model == fam.name else [model]
    avail = available_memory_bytes() if available is None else available
    for name in names:
        need = models.form(name)[1].trace_memory_bytes(T, d, **widths)
        if need > avail:
            raise MemoryError(f"tracing the {name} at T={T}, d={d} needs about {need:,} bytes "
                              f"({need / 2**30:.2f} GiB) but only {avail / 2**30:.2f} GiB are "
                              f"available; use a smaller T or d")


def trace_model(model, T, d, **widths):
    """Run a traced form's plain NumPy forward (``models.traced_forms``) on recording arrays.

    ``model``: a family's name (its ``reference_forward``) or a further form's (``lru-scan``).
    X is (T, d), position 1 its row 0; the weights are the family's ``trace_weights``
    (RNN: W_xh (d_h, d), W_hh (d_h, d_h); attention: Wq, Wk (d, d_k), Wv (d, d_v);
    LRU: lam (d_h,), B (d_h, d)). ``widths`` (d_h, d_k, d_v) default to d, the
    lessons' equal-width comparison. Returns a ``Trace``; T = 2000 traces in well
    under a second per model.
    """
    fam, form = models.form(model)
    T, d = check_int("T", T), check_int("d", d)
    widths = {k: check_int(k, v) for k, v in widths.items() if v is not None}
    try:
        check_trace_memory(model, T, d, **widths)
    except MemoryError as e:
        raise ValueError(str(e)) from None
    t0 = time.perf_counter()
    weights = fam.tracing.weights(d, **widths)
    g = trace.Graph(weight_parts={name: part for name, _, _, part in weights})
    X = trace.leaf(g, "X", (T, d), ("T", "d_model"), source_row=0)   # position 1 is row 0
    W = [trace.leaf(g, name, shape, axes) for name, shape, axes, _ in weights]
    outputs = form.forward(X, *W)
    return Trace(model, T, d, g, outputs, time.perf_counter() - t0)


def traced(traces, model, T, d):
    """The trace of (model, T, d) from ``traces`` (a dict filled as it goes), traced once."""
    if traces is None:
        return trace_model(model, T, d)
    key = (model, T, d)
    if key not in traces:
        traces[key] = trace_model(model, T, d)
    return traces[key]


# ----------------------------------------------------------------------------- tables

def count_table(T_values, d, families=models.NAMES, traces=None):
    """Tidy counts: one row per (traced form, T, part), traced and closed form side by side.

    ``families``: every traced form of these families is counted. ``traces``: a dict
    shared with ``depth_table`` and ``schedule_table`` so that each (model, T, d) is
    traced once; None traces afresh.
    """
    rows = []
    for model, (fam, form) in models.traced_forms(families).items():
        for T in T_values:
            tr = traced(traces, model, T, d)
            counted = tr.macs_by_part()
            closed = form.macs(T, d)
            for part in sorted(set(counted) | set(closed)):
                m = counted.get(part, 0)
                rows.append(dict(model=model, T=T, d=d, part=part, macs=m, flops=2 * m,
                                 closed_form=closed.get(part, 0),
                                 in_lesson_comparison=part in fam.tracing.lesson_parts))
    frame = pd.DataFrame(rows)
    bad = frame[frame.macs != frame.closed_form]
    if len(bad):
        raise AssertionError(f"traced counts differ from the closed forms:\n{bad}")
    return frame


def depth_table(T_values, d, families=models.NAMES, traces=None):
    """One row per (traced form, T): the columns of depth.csv (Table 1 of the paper, measured)."""
    rows = []
    for model, (fam, _) in models.traced_forms(families).items():
        for T in T_values:
            tr = traced(traces, model, T, d)
            parts = tr.macs_by_part()
            macs = sum(parts.get(p, 0) for p in fam.tracing.lesson_parts)
            sw, ss = tr.scalar_work, tr.scalar_span
            rows.append(dict(
                model=model, T=T, d=d,
                macs=macs, flops=2 * macs, macs_all=sum(parts.values()),
                ops=tr.ops, span=tr.span, max_path=tr.max_path,
                scalar_work=sw, scalar_span=ss, parallelism=sw / ss,
                trace_seconds=tr.seconds))
    return pd.DataFrame(rows)
