"""Record the dependency graph of a NumPy forward by running it on recording arrays.

``Traced`` stands in for an ndarray. It carries no values, only what the depth
analysis needs, and every operation on it appends one node to a ``Graph``:

* the operation, its output shape and its inner length (the k of a matrix
  product, the n of a row reduction), hence its multiplications and levels;
* which earlier operations it waits for (row-exact where the code indexes one
  row, as the RNN does with ``XW[..., t, :]``);
* per element, the fewest operations from input position 1 (``dist``) and the
  scalar-level depth with reductions as balanced trees (``sdepth``), each a ``Field``:
  the min (max) of a few terms that broadcast to the shape, so that a product's output,
  whose element (i, j) waits for row i of one operand and column j of the other, is a
  row term and a column term, and attention's T x T grids cost 2T numbers. Fields of at
  most ``DENSE_MAX`` elements are one dense array; every operation gives exactly the
  values the dense array would (tests/test_depth_baseline.py holds it to the numbers of
  the per-element tracer it replaced). The graph keeps no array: a value nothing reads
  any more is freed.

So the graph is the computation that ran (``harness.models.reference``), not a graph
typed beside it. Supported: ``@``, ``+``, ``-``, ``*``, ``/``, unary ``-``,
``np.tanh``, ``np.exp``, ``scipy.special.expit`` (sigmoid), ``np.sqrt`` (a layer norm's
standard deviation), ``np.maximum`` (ReLU), ``.max``/``.sum`` over the last axis, ``.T``,
indexing and slicing (with steps), ``.reshape``, ``np.stack``,
``np.concatenate``, ``np.swapaxes``, ``np.where`` and ``np.tril`` (a ``where`` with the
lower triangle, its mask never built). Anything else raises TypeError naming the
operation and the line of the forward that called it, so an untraceable forward fails
loudly.

Multiplications counted: every multiply-add of a matrix product, and every
product of an elementwise ``*`` (the linear recurrence's lam * h), each under
the part of the weight it multiplies (``Graph.weight_parts``). A value computed
from weights alone (lam * lam, a power of the recurrence's coefficient) keeps
its weight's part, and a slice of a weight is that weight (the query block
``W_in[:d]`` of a Transformer's stacked projection counts under W_in's part).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from harness.analysis.field import (BYTES_PER_ELEMENT, DENSE_MAX, Field, _INF, basic_index,  # noqa: F401
                                    field_bytes)
from harness.analysis.ops import MULTIPLYING, REDUCTIONS, Op, clog2, tree_levels  # noqa: F401

# memory of a trace: every dense traced element carries dist and sdepth (BYTES_PER_ELEMENT),
# and every traced RNN step a few ops and views (Python objects), measured with tracemalloc
BYTES_PER_STEP = 3000

@dataclass
class Graph:
    """The traced computation: ops in program (hence topological) order."""
    ops: list = field(default_factory=list)
    weight_parts: dict = field(default_factory=dict)  # leaf name -> part label
    seq_axis_label: str = "T"

    def part_of(self, kind, a, b, out_axes, k_label):
        """Name a product after what it multiplies: a named weight, the T x T grid, or the mix."""
        if kind == "mul":           # lam * h: the part of the weight (or weight power) it scales
            for x in (a, b):
                if isinstance(x, Traced) and x.part is not None:
                    return x.part
            return kind             # a gate times a state (the gated recurrences' f * c)
        if kind != "matmul":
            return kind
        for x in (a, b):
            if isinstance(x, Traced) and x.leaf in self.weight_parts:
                return self.weight_parts[x.leaf]
        if k_label == self.seq_axis_label:
            return "mix"            # contracts over positions: A V
        if out_axes[-2:] == (self.seq_axis_label, self.seq_axis_label):
            return "grid"           # every pair of positions: Q K^T
        return "product"

    def new_op(self, kind, inputs, shape, inner, axes, k_label=None):
        deps = _union_deps(inputs)
        depth = 1 + max((self.ops[i].op_depth for i, _ in deps), default=0)
        a = inputs[0] if inputs else None
        b = inputs[1] if len(inputs) > 1 else None
        op = Op(len(self.ops), kind, self.part_of(kind, a, b, axes, k_label),
                tuple(shape), int(inner), deps, depth)
        self.ops.append(op)
        return op


def _field(x, how):
    """The dist (``how`` = "min") or sdepth ("max") Field of ``x``; a plain array's is the
    identity (inf, 0): it is never an input position and waits for nothing."""
    if isinstance(x, Traced):
        return x._dist if how == "min" else x._sdep
    return Field.constant(np.shape(x), how)


def _shape(x):
    return x.shape if isinstance(x, Traced) else np.shape(x)


def _axes(x):
    if isinstance(x, Traced):
        return x.axes
    return ("?",) * np.ndim(x)


def _broadcast_axes(*xs):
    nd = max(len(_axes(x)) for x in xs)
    out = []
    for i in range(1, nd + 1):
        lab = "?"
        for x in xs:
            ax = _axes(x)
            # "1" marks an axis kept by a reduction: the other operand names it
            if i <= len(ax) and ax[-i] not in ("?", "1"):
                lab = ax[-i]
                break
        out.append(lab)
    return tuple(reversed(out))


class Traced:
    """A recording stand-in for an ndarray: shape, lineage and per-element depths (Fields)."""

    __array_priority__ = 1000

    def __init__(self, graph, shape, deps, dist, sdepth, axes, leaf=None, owner=None,
                 dtype=np.float64, part=None):
        self.graph = graph
        self.shape = tuple(shape)
        self.deps = deps          # [(op id, row)] this value waits for
        # fewest ops from input position 1 (float32, inf: none) and the scalar depth with
        # reductions as trees (int32), each a Field (an ndarray is taken as its dense values)
        self._dist = dist if isinstance(dist, Field) else Field(self.shape, [dist], "min")
        self._sdep = sdepth if isinstance(sdepth, Field) else Field(self.shape, [sdepth], "max")
        self.axes = tuple(axes)   # a label per axis ("T", "d_model", ...)
        self.leaf = leaf          # name of the input this is (or a transpose of)
        self.owner = owner        # op whose direct output this is, else None
        self.dtype = np.dtype(dtype)
        self.part = part          # the weight part of a value computed from weights alone

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    @property
    def dist(self):
        """(shape) float32: fewest ops from input position 1, as one array (a view where it can)."""
        return self._dist.dense()

    @property
    def sdepth(self):
        """(shape) int32: the scalar depth, reductions as balanced trees, as one array."""
        return self._sdep.dense()

    @property
    def depth_bytes(self):
        """Bytes the depths of this value hold (shared with the values it is a view of)."""
        return self._dist.nbytes + self._sdep.nbytes

    def __repr__(self):
        return f"Traced(shape={self.shape}, axes={self.axes})"

    # --- values computed by an op -------------------------------------------------
    def _out(self, op, dist, sdepth, axes, part=None):
        return Traced(self.graph, op.shape, [(op.id, -1)], dist, sdepth, axes, owner=op.id,
                      part=part)

    def _elementwise(self, kind, *xs):
        shape = np.broadcast_shapes(*(_shape(x) for x in xs))
        axes = _broadcast_axes(*xs)
        op = self.graph.new_op(kind, list(xs), shape, 1, axes)
        traced = [x for x in xs if isinstance(x, Traced)]
        dist = Field.combine([x._dist for x in traced], shape, "min")
        sdep = Field.combine([x._sdep for x in traced], shape, "max")
        parts = {x.part for x in traced}
        return self._out(op, dist.shift(1), sdep.shift(1), axes,
                         parts.pop() if len(parts) == 1 else None)

    def _matmul(self, a, b):
        sa, sb = _shape(a), _shape(b)
        da, db = _field(a, "min"), _field(b, "min")
        ea, eb = _field(a, "max"), _field(b, "max")
        xa, xb = _axes(a), _axes(b)
        if len(sa) == 1:                       # (k,) @ (..., k, n): a row vector
            da, ea = da.index((None, slice(None))), ea.index((None, slice(None)))
            sa, xa = (1,) + sa, ("1",) + xa
        if len(sb) == 1:                       # (..., m, k) @ (k,): a column vector
            db, eb = db.index((slice(None), None)), eb.index((slice(None), None))
            sb, xb = sb + (1,), xb + ("1",)
        k = sa[-1]
        if sb[-2] != k:
            raise ValueError(f"trace: matmul shapes {sa} and {sb} do not align")
        shape = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        # element (i, j) waits for row i of a and column j of b: a row term and a column term
        dist = Field.combine([da.reduce(-1, keepdims=True), db.reduce(-2, keepdims=True)],
                             shape, "min")
        sdep = Field.combine([ea.reduce(-1, keepdims=True), eb.reduce(-2, keepdims=True)],
                             shape, "max")
        # batch axes broadcast as the shapes do (right-aligned), each named by the operand
        # that names it; then a's rows and b's columns
        nb = len(shape) - 2
        pa, pb = ("?",) * (nb - len(xa[:-2])) + xa[:-2], ("?",) * (nb - len(xb[:-2])) + xb[:-2]
        axes = tuple(x if x not in ("?", "1") else y for x, y in zip(pa, pb)) + (xa[-2], xb[-1])
        if len(_shape(a)) == 1:
            shape, axes = shape[:-2] + shape[-1:], axes[:-2] + axes[-1:]
            dist, sdep = dist.index((Ellipsis, 0, slice(None))), sdep.index((Ellipsis, 0, slice(None)))
        if len(_shape(b)) == 1:
            shape, axes = shape[:-1], axes[:-1]
            dist, sdep = dist.index((Ellipsis, 0)), sdep.index((Ellipsis, 0))
        op = self.graph.new_op("matmul", [a, b], shape, k, axes, k_label=xa[-1])
        return self._out(op, dist.shift(1), sdep.shift(1 + clog2(k)), axes)

    def _reduce(self, kind, axis, keepdims):
        if axis not in (-1, self.ndim - 1):
            raise TypeError(f"trace: .{kind}() is traced over the last axis only, got "
                            f"axis={axis}{_called_at()}")
        n = self.shape[-1]
        shape = self.shape[:-1] + ((1,) if keepdims else ())
        axes = self.axes[:-1] + (("1",) if keepdims else ())
        op = self.graph.new_op(kind, [self], shape, n, axes)
        dist = self._dist.reduce(-1, keepdims).shift(1)
        sdep = self._sdep.reduce(-1, keepdims).shift(clog2(n))
        return self._out(op, dist, sdep, axes)

    def sum(self, axis=-1, keepdims=False):
        return self._reduce("sum", axis, keepdims)

    def max(self, axis=-1, keepdims=False):
        return self._reduce("max", axis, keepdims)

    # --- views: free, they only move dependencies --------------------------------
    def _view(self, dist, sdepth, axes, deps=None, leaf=None):
        return Traced(self.graph, dist.shape, self.deps if deps is None else deps,
                      dist, sdepth, axes, leaf=leaf, part=self.part)

    def reshape(self, *shape):
        """A view with the same elements in ``shape``; trailing axes that keep their size keep
        their labels, and merged leading axes take the label of the outermost one."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        shape = np.lib.stride_tricks.as_strided(np.zeros(1, bool), self.shape,
                                                (0,) * self.ndim).reshape(shape).shape
        dist, sdep = self._dist.reshape(shape), self._sdep.reshape(shape)
        keep = 0                                  # trailing axes whose size is unchanged
        while (keep < min(self.ndim, len(shape))
               and shape[-1 - keep] == self.shape[-1 - keep]):
            keep += 1
        merged = self.axes[:self.ndim - keep]
        lead = (merged[0] if merged else "?",) * (len(shape) - keep)
        return self._view(dist, sdep, lead + (self.axes[self.ndim - keep:] if keep else ()))

    @property
    def T(self):
        return self._swap(-1, -2)

    def _swap(self, a1, a2):
        axes = list(self.axes)
        axes[a1], axes[a2] = axes[a2], axes[a1]
        return self._view(self._dist.swap(a1, a2), self._sdep.swap(a1, a2), axes, leaf=self.leaf)

    def __getitem__(self, idx):
        dist, sdep = self._dist.index(idx), self._sdep.index(idx)
        row = _single_row(idx, self.ndim)
        if row is not None:
            axes = self.axes[:-2] + self.axes[-1:]
            if self.owner is not None:
                # reading one row of an op's output waits for that row only
                self.graph.ops[self.owner].split = True
                return self._view(dist, sdep, axes, deps=[(self.owner, row % self.shape[-2])])
            return self._view(dist, sdep, axes, leaf=self.leaf)
        axes = self.axes if dist.ndim == self.ndim else ("?",) * dist.ndim
        return self._view(dist, sdep, axes, leaf=self.leaf)       # a slice of a weight is that weight

    # --- views and reductions an exported PyTorch graph needs (harness.torchmodel.interp) ----
    def transpose(self, *perm):
        """A view with its axes in the order ``perm`` (np.transpose; no argument reverses them),
        made of swaps; a permutation of a weight is that weight."""
        perm = tuple(perm[0]) if len(perm) == 1 and isinstance(perm[0], (tuple, list)) else perm
        perm = tuple(range(self.ndim))[::-1] if not perm else tuple(p % max(self.ndim, 1)
                                                                      for p in perm)
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"trace: transpose of {self.ndim} axes by {perm}, not a permutation")
        dist, sdep, axes, order = self._dist, self._sdep, list(self.axes), list(range(self.ndim))
        for i, p in enumerate(perm):                # selection sort by swaps: at most ndim - 1
            j = order.index(p)
            if j != i:
                dist, sdep = dist.swap(i, j), sdep.swap(i, j)
                order[i], order[j] = order[j], order[i]
                axes[i], axes[j] = axes[j], axes[i]
        return self._view(dist, sdep, axes, leaf=self.leaf)

    def broadcast_to(self, shape):
        """A view of ``shape`` that repeats this value along its one-wide (or missing leading)
        axes, as np.broadcast_to: free, every copy waits for what the original waits for."""
        shape = tuple(int(s) for s in shape)
        np.broadcast_shapes(self.shape, shape)               # ValueError as numpy's
        if np.broadcast_shapes(self.shape, shape) != shape:
            raise ValueError(f"trace: cannot broadcast {self.shape} to {shape}")
        lead = ("?",) * (len(shape) - self.ndim)
        return self._view(Field(shape, self._dist.terms, "min"),
                          Field(shape, self._sdep.terms, "max"), lead + self.axes, leaf=self.leaf)

    def reshape_kept(self, shape):
        """``reshape`` that keeps a large Field's terms where the reshape only adds or drops
        one-wide axes or regroups the axes before the last two (a (1, h, T, T) grid viewed
        as (h, T, T)), so that a T x T grid stays two vectors of T; else ``reshape``. The
        values are the dense reshape's either way."""
        shape = np.lib.stride_tricks.as_strided(np.zeros(1, bool), self.shape,
                                                (0,) * self.ndim).reshape(shape).shape
        d1, s1 = _reshape_terms(self._dist, shape), _reshape_terms(self._sdep, shape)
        if d1 is None or s1 is None:
            return self.reshape(shape)
        return self._view(d1, s1, ("?",) * len(shape), leaf=self.leaf)

    def reduce_axes(self, kind, axes, keepdims=False):
        """``kind`` ("sum" or "max") over the axes ``axes`` as one operation (n = the product of
        their lengths, a tree of ceil(log2 n) levels), as ``.sum``/``.max`` over the last axis:
        the axes moved to the end and merged by free views; keepdims leaves them one wide."""
        axes = sorted({a % max(self.ndim, 1) for a in axes})
        rest = [i for i in range(self.ndim) if i not in axes]
        x = self.transpose(rest + axes)
        if len(axes) > 1:
            x = x.reshape(x.shape[:len(rest)] + (-1,))
        x = x._reduce(kind, -1, False)
        if keepdims:
            x = x.reshape_kept(tuple(1 if i in axes else n for i, n in enumerate(self.shape)))
        return x

    # --- operators ------------------------------------------------------------------
    def __add__(self, o): return self._elementwise("add", self, o)
    def __radd__(self, o): return self._elementwise("add", o, self)
    def __sub__(self, o): return self._elementwise("sub", self, o)
    def __rsub__(self, o): return self._elementwise("sub", o, self)
    def __mul__(self, o): return self._elementwise("mul", self, o)
    def __rmul__(self, o): return self._elementwise("mul", o, self)
    def __truediv__(self, o): return self._elementwise("div", self, o)
    def __rtruediv__(self, o): return self._elementwise("div", o, self)
    def __neg__(self): return self._elementwise("neg", self)
    def __matmul__(self, o): return self._matmul(self, o)
    def __rmatmul__(self, o): return self._matmul(o, self)

    # what a forward cannot do with a traced array: each says which line of the forward tried
    def _unsupported(what):
        def refuse(self, *args, **kwargs):
            raise TypeError(f"trace: {what} is not traced{_called_at()}; {SUPPORTED}")
        return refuse

    __pow__ = __rpow__ = _unsupported("** (power)")
    __floordiv__ = __rfloordiv__ = _unsupported("// (floor division)")
    __mod__ = __rmod__ = _unsupported("% (modulo)")
    __abs__ = _unsupported("abs()")
    __lt__ = __le__ = __gt__ = __ge__ = _unsupported("a comparison (< <= > >=)")
    __bool__ = _unsupported("bool() of a traced array (an if or while on values)")
    __float__ = __int__ = _unsupported("float() or int() of a traced array")
    __array__ = _unsupported("np.asarray / np.array of a traced array")
    __setitem__ = _unsupported("item assignment (x[...] = ...; build a list and np.stack it)")
    __iadd__ = __isub__ = __imul__ = __itruediv__ = _unsupported(
        "an in-place operator (+=, -=, *=, /=; write x = x + y)")
    astype = _unsupported(".astype()")
    copy = _unsupported(".copy()")
    mean = _unsupported(".mean() (write .sum(axis=-1) / n)")
    del _unsupported

    _UFUNCS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
               np.negative: "neg", np.tanh: "tanh", np.exp: "exp", expit: "sigmoid",
               np.sqrt: "sqrt", np.maximum: "maximum"}

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            what = f"np.{ufunc.__name__}.{method}" if method != "__call__" else \
                f"np.{ufunc.__name__}(..., out=...)"
            raise TypeError(f"trace: {what} is not traced{_called_at()}; {SUPPORTED}")
        if ufunc is np.matmul:
            return self._matmul(*inputs)
        kind = self._UFUNCS.get(ufunc)
        if kind is None:
            raise TypeError(f"trace: np.{ufunc.__name__} is not traced{_called_at()}; {SUPPORTED}")
        return self._elementwise(kind, *inputs)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.stack:
            return _stack(*args, **kwargs)
        if func is np.concatenate:
            return _concatenate(*args, **kwargs)
        if func is np.swapaxes:
            a, a1, a2 = args
            return a._swap(a1, a2)
        if func is np.where:
            cond, x, y = args
            ref = x if isinstance(x, Traced) else y
            return ref._elementwise("where", cond, x, y)
        if func is np.tril and not kwargs.get("k") and len(args) == 1 and args[0].ndim >= 2:
            # np.where(lower triangle, m, 0): one elementwise op, the mask never stored
            m = args[0]
            return m._elementwise("where", m, 0.0)
        raise TypeError(f"trace: np.{func.__name__} is not traced{_called_at()}; {SUPPORTED}")


SUPPORTED = ("a traced forward may use only @ + - * / (and unary -), np.tanh, np.exp, "
             "scipy.special.expit, np.sqrt, np.maximum, .sum/.max over the last axis, .T, "
             "indexing and slicing, .reshape, np.stack, np.concatenate, np.swapaxes, np.where "
             "and np.tril")


def _called_at():
    """' (called at FILE:LINE: code)': the innermost frame outside the tracer, NumPy and SciPy,
    which is the line of the traced forward that asked for the operation. Under ``make
    mutate`` mutmut's trampolines stand between every two functions of the tracer: their
    frames are skipped too."""
    import os
    import sys
    import traceback

    import scipy
    packages = [np, scipy] + [m for m in (sys.modules.get("mutmut"),) if m is not None]
    inside = tuple(os.path.dirname(m.__file__) + os.sep for m in packages)
    for frame in reversed(traceback.extract_stack()[:-1]):
        f = frame.filename
        if f == __file__ or f.startswith(inside) or f.startswith("<"):
            continue
        return f" (called at {f}:{frame.lineno}: {(frame.line or '').strip()})"
    return ""


def _single_row(idx, ndim):
    """Row t when ``idx`` selects one position on the sequence axis (-2) and all of the rest."""
    if ndim < 2:
        return None
    if not isinstance(idx, tuple):
        idx = (idx,)
    if Ellipsis in idx:
        i = idx.index(Ellipsis)
        idx = idx[:i] + (slice(None),) * (ndim - len(idx) + 1) + idx[i + 1:]
    idx = idx + (slice(None),) * (ndim - len(idx))
    if len(idx) != ndim:
        return None
    t = idx[-2]
    if not isinstance(t, (int, np.integer)):
        return None
    full = slice(None)
    if all(s == full for j, s in enumerate(idx) if j != ndim - 2):
        return int(t)
    return None


def _union_deps(arrays):
    """Every (op id, row) that any traced array among ``arrays`` waits for, once, in order."""
    deps, seen = [], set()
    for a in arrays:
        for dep in (a.deps if isinstance(a, Traced) else []):
            if dep not in seen:
                seen.add(dep)
                deps.append(dep)
    return deps


def _stack(arrays, axis=0):
    arrays = list(arrays)
    ref = next(a for a in arrays if isinstance(a, Traced))
    dist = np.stack([_field(a, "min").dense() for a in arrays], axis=axis)
    sdep = np.stack([_field(a, "max").dense() for a in arrays], axis=axis)
    axes = list(_axes(ref))
    axes.insert(axis if axis >= 0 else len(axes) + 1 + axis, ref.graph.seq_axis_label)
    return Traced(ref.graph, dist.shape, _union_deps(arrays), dist, sdep, axes)


def _concatenate(arrays, axis=0):
    """Free, like a view: the pieces' elements side by side, waiting for every piece."""
    arrays = list(arrays)
    ref = next(a for a in arrays if isinstance(a, Traced))
    dist = np.concatenate([_field(a, "min").dense() for a in arrays], axis=axis)
    sdep = np.concatenate([_field(a, "max").dense() for a in arrays], axis=axis)
    return Traced(ref.graph, dist.shape, _union_deps(arrays), dist, sdep, _axes(ref))


def leaf(graph, name, shape, axes, source_row=None):
    """An input of the traced forward. ``source_row``: the row that is input position 1.

    Its depths are dense (an input is as large as what it stands for), so that a
    forward's trace holds at least its inputs, as the memory estimates of the forms count."""
    dist = np.full(shape, _INF, dtype=np.float32)
    if source_row is not None:
        dist[..., source_row, :] = 0
    return Traced(graph, shape, [], dist, np.zeros(shape, dtype=np.int32), axes, leaf=name,
                  part=graph.weight_parts.get(name))


def _reshape_terms(f, shape):
    """The Field ``f`` reshaped term by term (None when it cannot be): each term is reshaped
    alike when it is full on every axis that is regrouped, or one wide on all of them."""
    if len(f.terms) == 1 and f.terms[0].shape == f.shape:
        return Field(shape, [f.terms[0].reshape(shape)], f.how)
    src, dst = f.shape, tuple(shape)
    nz_s = [i for i, n in enumerate(src) if n != 1]
    nz_d = [i for i, n in enumerate(dst) if n != 1]
    if [src[i] for i in nz_s] == [dst[i] for i in nz_d]:     # one-wide axes added or dropped
        terms = []
        for t in f.terms:
            sub = [1] * len(dst)
            for i, j in zip(nz_s, nz_d):
                sub[j] = t.shape[i]
            terms.append(t.reshape(sub))
        return Field(dst, terms, f.how)
    if len(src) >= 2 and len(dst) >= 2 and src[-2:] == dst[-2:]:    # the leading axes regrouped
        lead = len(src) - 2
        terms = []
        for t in f.terms:
            if all(n == 1 for n in t.shape[:lead]):
                terms.append(t.reshape((1,) * (len(dst) - 2) + t.shape[-2:]))
            elif t.shape[:lead] == src[:lead]:
                terms.append(t.reshape(dst[:-2] + t.shape[-2:]))
            else:
                return None
        return Field(dst, terms, f.how)
    return None
