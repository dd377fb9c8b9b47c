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

import math
import os
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
        """Fewest operations from input position 1 to output position T (inf: no path, as in a
        causal convolution narrower than T)."""
        y = self.outputs[0]
        v = float(y._dist.index((Ellipsis, self.T - 1, slice(None))).total())
        return int(v) if math.isfinite(v) else math.inf

    @property
    def scalar_span(self):
        return int(max(int(y._sdep.total()) for y in self.outputs))

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

def _count_rows(model, fam, form, tr):
    """count_table's rows of one trace: one per part, traced and closed form side by side."""
    counted, closed = tr.macs_by_part(), form.macs(tr.T, tr.d)
    return [dict(model=model, T=tr.T, d=tr.d, part=part, macs=counted.get(part, 0),
                 flops=2 * counted.get(part, 0), closed_form=closed.get(part, 0),
                 in_lesson_comparison=part in fam.tracing.lesson_parts)
            for part in sorted(set(counted) | set(closed))]


def _checked_counts(rows):
    frame = pd.DataFrame(rows)
    bad = frame[frame.macs != frame.closed_form]
    if len(bad):
        raise AssertionError(f"traced counts differ from the closed forms:\n{bad}")
    return frame


def _depth_row(model, lesson_parts, tr):
    """depth_table's row of one trace; ``lesson_parts``: the parts ``macs`` sums (None: all)."""
    parts = tr.macs_by_part()
    macs = sum(parts.values()) if lesson_parts is None else \
        sum(parts.get(p, 0) for p in lesson_parts)
    sw, ss = tr.scalar_work, tr.scalar_span
    return dict(model=model, T=tr.T, d=tr.d,
                macs=macs, flops=2 * macs, macs_all=sum(parts.values()),
                ops=tr.ops, span=tr.span, max_path=tr.max_path,
                scalar_work=sw, scalar_span=ss, parallelism=sw / ss,
                trace_seconds=tr.seconds)


def count_table(T_values, d, families=models.NAMES, traces=None):
    """Tidy counts: one row per (traced form, T, part), traced and closed form side by side.

    ``families``: every traced form of these families is counted. ``traces``: a dict
    shared with ``depth_table`` and ``schedule_table`` so that each (model, T, d) is
    traced once; None traces afresh.
    """
    rows = []
    for model, (fam, form) in models.traced_forms(families).items():
        for T in T_values:
            rows += _count_rows(model, fam, form, traced(traces, model, T, d))
    return _checked_counts(rows)


def depth_table(T_values, d, families=models.NAMES, traces=None):
    """One row per (traced form, T): the columns of depth.csv (Table 1 of the paper, measured)."""
    rows = []
    for model, (fam, _) in models.traced_forms(families).items():
        for T in T_values:
            rows.append(_depth_row(model, fam.tracing.lesson_parts, traced(traces, model, T, d)))
    return pd.DataFrame(rows)


def tables(T_values, d, families=models.NAMES, keep=(), progress=None):
    """(count_table, depth_table, kept traces) with each (form, T) traced once and dropped as
    soon as its rows are read, unless T is in ``keep`` (the lengths the schedule reuses):
    so that T = 65,536 holds one trace at a time. ``progress(line)`` hears of each trace that
    took a second or more."""
    counts, rows, kept = [], [], {}
    for model, (fam, form) in models.traced_forms(families).items():
        for T in T_values:
            tr = trace_model(model, T, d)
            if progress is not None and tr.seconds >= 1.0:       # the long ones only
                progress(f"traced {model} at T = {T:,} in {tr.seconds:.1f} s")
            counts += _count_rows(model, fam, form, tr)
            rows.append(_depth_row(model, fam.tracing.lesson_parts, tr))
            if T in set(keep):
                kept[(model, T, d)] = tr
            del tr
    return _checked_counts(counts), pd.DataFrame(rows), kept


# ----------------------------------------------------------------------------- a user's forward

DIMENSIONS = ("T", "d")      # the symbols a --shape may use beside integers


def parse_shape(text, arg="--shape"):
    """``"X=T,d"`` -> ("X", ("T", "d")): an input's name and its dimensions, each an integer,
    T, d, or an integer times T or d (``3*d``)."""
    name, eq, dims = text.partition("=")
    if not eq or not name.isidentifier() or not dims:
        raise ValueError(f"{arg}: expected NAME=DIM,DIM,... (e.g. X=T,d or W_hh=d,d), got {text!r}")
    out = []
    for tok in dims.split(","):
        tok = tok.strip()
        k, star, sym = tok.rpartition("*")
        ok = (tok.isdigit() and int(tok) > 0) or tok in DIMENSIONS or (
            star and k.isdigit() and int(k) > 0 and sym in DIMENSIONS)
        if not ok:
            raise ValueError(f"{arg}: each dimension of {name} must be a positive integer, T, d "
                             f"or k*T / k*d, got {tok!r} in {text!r}")
        out.append(tok)
    return name, tuple(out)


def _size(tok, T, d):
    if tok.isdigit():
        return int(tok)
    k, _, sym = tok.rpartition("*")
    return (int(k) if k else 1) * {"T": T, "d": d}[sym]


def load_forward(spec, arg="--forward"):
    """The function ``spec`` names: ``package.module:function`` (imported, the working folder
    first on the path) or ``path/to/file.py:function``."""
    import importlib
    import importlib.util
    import os
    import sys
    if callable(spec):
        return spec
    mod, colon, fn = str(spec).rpartition(":")
    if not colon or not mod or not fn.isidentifier():
        raise ValueError(f"{arg}: expected package.module:function or file.py:function, got {spec!r}")
    if mod.endswith(".py") or os.sep in mod:
        if not os.path.isfile(mod):
            raise ValueError(f"{arg}: no file {mod!r}")
        name = "_harness_forward_" + os.path.splitext(os.path.basename(mod))[0]
        module_spec = importlib.util.spec_from_file_location(name, mod)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name is not None and e.name != mod and not mod.startswith(e.name + "."):
                raise              # a module their code imports is missing: their error
            raise ValueError(f"{arg}: cannot import {mod!r} ({e}); run from the folder that holds "
                             f"it, set PYTHONPATH, or give file.py:function") from None
    f = getattr(module, fn, None)
    if not callable(f):
        raise ValueError(f"{arg}: {mod!r} has no function {fn!r}")
    return f


def check_inputs(f, names, name, arg="shapes"):
    """Refuse, naming it, an input of ``names`` that the forward ``f`` does not take by name,
    and an input it needs that ``names`` lacks: the inputs are passed by keyword. A callable
    whose signature Python cannot read is called as it is."""
    import inspect
    try:
        params = inspect.signature(f).parameters
    except (TypeError, ValueError):
        return
    P = inspect.Parameter
    by_name = (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
    takes = [p.name for p in params.values() if p.kind in by_name]
    its = f"its inputs: {', '.join(takes)}" if takes else "it names none of its inputs"
    for n in names:
        p = params.get(n)
        if p is not None and p.kind == P.POSITIONAL_ONLY:
            raise ValueError(f"{arg}: {name} takes {n!r} by position only, but the inputs are "
                             f"passed by name; drop the '/' from its parameters")
        if (p is None or p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD)) and not any(
                q.kind == P.VAR_KEYWORD for q in params.values()):
            raise ValueError(f"{arg}: {name} takes no input named {n!r} ({its})")
    for p in params.values():
        if p.default is P.empty and p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD,
                                               P.KEYWORD_ONLY) and p.name not in names:
            raise ValueError(f"{arg}: {name} needs its input {p.name!r} too ({its}); give each "
                             f"one a shape, e.g. {p.name}=d,d")


TRACED_BYTES = 8        # a traced input keeps a float32 and an int32 per element (trace.leaf)


def check_forward_memory(shapes, T, d, available=None, arg="shapes"):
    """MemoryError naming the largest input of ``shapes`` when the traced inputs alone, at this
    T and d, would not fit in memory (or have more elements than an array can)."""
    sizes = {}
    for k, dims in dict(shapes).items():
        n = 1
        for tok in dims:
            n *= _size(tok, T, d)
        sizes[k] = n
    need = TRACED_BYTES * sum(sizes.values())
    avail = available_memory_bytes() if available is None else available
    if need > avail or max(sizes.values()) > 2**62:
        k = max(sizes, key=sizes.get)
        raise MemoryError(f"{arg}: {k}={','.join(dict(shapes)[k])} at T = {T}, d = {d} is "
                          f"{sizes[k]:,} elements; the traced inputs need about {need:,} bytes "
                          f"({need / 2**30:.3g} GiB, {TRACED_BYTES} a traced element) but only "
                          f"{avail / 2**30:.2f} GiB are available; give smaller dimensions")


def _not_theirs():
    """Where the frames that are not the user's code lie: the harness and importlib."""
    import importlib

    import harness
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                 for m in (harness, importlib)) + ("<frozen ",)


def _theirs(filename, skip=()):
    """Whether a frame's file is the user's code: neither the harness's nor importlib's, nor
    in a folder of ``skip`` (a library the harness drives, as PyTorch under ``--torch``)."""
    return not filename.startswith(_not_theirs() + tuple(skip))


def _libraries():
    """Folders whose frames are not where a user's mistake is: the standard library, NumPy,
    SciPy."""
    import sysconfig

    import numpy as np
    import scipy
    return tuple(os.path.abspath(p) + os.sep for p in (
        sysconfig.get_paths()["stdlib"], os.path.dirname(np.__file__),
        os.path.dirname(scipy.__file__)))


def user_error(exc, spec, doing, arg="--forward", skip=()):
    """``exc``, raised by the user's code while ``doing`` (importing their file, tracing their
    forward ``spec``), as a ``UserCodeError``: one line naming their file, line and exception,
    with their own frames (the harness's and importlib's left out) to print below it.

    None when ``exc`` is not theirs: a signal's KeyboardInterrupt, an exception no frame of
    theirs raised (a bad ``spec``, a check of the forward's output), or the tracer refusing
    an operation (a TypeError, ValueError or IndexError raised inside the harness, whose
    message names their line already)."""
    import traceback

    from harness.infra.files import UserCodeError
    if isinstance(exc, KeyboardInterrupt):
        return None
    original = exc
    if exc.__cause__ is not None and not any(
            _theirs(f.filename, skip) for f in traceback.extract_tb(exc.__traceback__)):
        original = exc.__cause__                  # trace_forward named it: what they raised
    tb = traceback.extract_tb(original.__traceback__)
    frames = [f for f in tb if _theirs(f.filename, skip)]
    syntax = isinstance(original, SyntaxError) and bool(original.filename) and \
        _theirs(os.path.abspath(original.filename), skip)
    if not frames and not syntax:
        return None
    if tb and tb[-1].filename.startswith(_not_theirs()[0]) \
            and isinstance(original, (TypeError, ValueError, IndexError)):
        return None
    text = traceback.StackSummary.from_list(frames).format() if frames else []
    if syntax:
        file, line = original.filename, original.lineno
        text += traceback.format_exception_only(type(original), original)[:-1]
    else:
        libs = _libraries()
        at = next((f for f in reversed(frames) if not f.filename.startswith(libs)), frames[-1])
        file, line = at.filename, at.lineno
    kind = type(original).__name__
    if isinstance(original, SystemExit):
        what = f"{kind}: sys.exit({original.code!r}) was called; a forward returns its output"
    elif isinstance(original, SyntaxError):
        what = f"{kind}: {original.msg}"
    else:
        message = str(original).strip().splitlines()
        what = f"{kind}: {message[0]}" if message else kind
    return UserCodeError(f"{arg}: {file}:{line}: {what} (raised while {doing}; your code's "
                         f"frames below)", "".join(text))


def _user_line(exc):
    """' (called at FILE:LINE: code)' of the innermost frame of ``exc`` outside the tracer,
    NumPy and SciPy: the user's line that raised it."""
    import os
    import traceback

    import numpy as np
    import scipy
    inside = (os.path.dirname(np.__file__) + os.sep, os.path.dirname(scipy.__file__) + os.sep,
              os.path.dirname(trace.__file__) + os.sep)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith(inside):
            return f" (called at {frame.filename}:{frame.lineno}: {(frame.line or '').strip()})"
    return ""


def trace_forward(forward, shapes, T, d, name=None):
    """Trace a plain NumPy forward written with the tracer's operations, as ``trace_model``
    traces a family's, without registering a family.

    ``forward``: a function or ``package.module:function``; it is called with one traced array
    per entry of ``shapes`` ({input name: dimensions}, each passed by its name, which the
    forward must take: ``check_inputs``; dimensions ints, "T", "d" or "k*T", as
    ``parse_shape`` reads them). The first entry is the sequence:
    its axis -2 is T and its row 0 is input position 1. The others are weights: a product with
    one is counted under its name. The forward returns an array (..., T, width) or a tuple
    whose first such array is the output whose position T ``max_path`` reads. An operation the
    tracer does not support raises TypeError naming it and the forward's line that called it.
    """
    T, d = check_int("T", T), check_int("d", d)
    f = load_forward(forward)
    name = name or (forward if isinstance(forward, str) else getattr(f, "__name__", "forward"))
    if not shapes:
        raise ValueError("shapes: give each input of the forward a shape, the sequence first "
                         "(e.g. --shape X=T,d --shape W=d,d)")
    shapes = {k: tuple(v) for k, v in dict(shapes).items()}
    first, dims = next(iter(shapes.items()))
    if len(dims) < 2 or dims[-2] != "T":
        raise ValueError(f"shapes: the first input ({first}) is the sequence, its second-to-last "
                         f"dimension must be T, got {first}={','.join(dims)}")
    check_inputs(f, shapes, name)
    try:
        check_forward_memory(shapes, T, d)
    except MemoryError as e:
        raise ValueError(str(e)) from None
    t0 = time.perf_counter()
    g = trace.Graph(weight_parts={k: k for k in list(shapes)[1:]})
    label = {"T": "T", "d": "d_model"}
    inputs = {}
    for i, (k, dims) in enumerate(shapes.items()):
        shape = tuple(_size(tok, T, d) for tok in dims)
        axes = tuple(label.get(tok, "?") for tok in dims)
        inputs[k] = trace.leaf(g, k, shape, axes, source_row=0 if i == 0 else None)
    try:
        out = f(**inputs)
    except (TypeError, ValueError, IndexError) as e:
        if "(called at" in str(e):
            raise
        try:
            named = type(e)(f"tracing {name}: {e}{_user_line(e)}")
        except Exception:               # a class of theirs that takes other arguments
            raise e from None
        raise named from e
    outputs = out if isinstance(out, tuple) else (out,)
    if not outputs or not all(isinstance(o, trace.Traced) for o in outputs):
        raise TypeError(f"tracing {name}: the forward must return a traced array or a tuple of "
                        f"them (built from its inputs with the tracer's operations), got "
                        f"{type(out).__name__}")
    y = outputs[0]
    if y.ndim < 2 or y.shape[-2] != T:
        raise ValueError(f"tracing {name}: the first output must be (..., T, width) with T = {T} "
                         f"on its second-to-last axis, got shape {y.shape}")
    if not g.ops:
        raise ValueError(f"tracing {name}: the forward did no traced operation")
    return Trace(name, T, d, g, outputs, time.perf_counter() - t0)


def forward_tables(forward, shapes, T_values, d, name=None):
    """(counts, depths) of a user's forward over ``T_values``: one row per (T, part) with its
    multiplications, and one row per T with depth.csv's columns (``macs`` counts every part:
    a user's forward has no lesson parts)."""
    counts, rows = [], []
    for T in T_values:
        tr = trace_forward(forward, shapes, T, d, name)
        for part, m in sorted(tr.macs_by_part().items()):
            counts.append(dict(model=tr.model, T=T, d=d, part=part, macs=m, flops=2 * m))
        rows.append(_depth_row(tr.model, None, tr))
        del tr
    return pd.DataFrame(counts, columns=["model", "T", "d", "part", "macs", "flops"]), pd.DataFrame(rows)
