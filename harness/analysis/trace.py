"""Record the dependency graph of a NumPy forward by running it on recording arrays.

``Traced`` stands in for an ndarray. It carries no values, only what the depth
analysis needs, and every operation on it appends one node to a ``Graph``:

* the operation, its output shape and its inner length (the k of a matrix
  product, the n of a row reduction), hence its multiplications and levels;
* which earlier operations it waits for (row-exact where the code indexes one
  row, as the RNN does with ``XW[..., t, :]``);
* per element, the fewest operations from input position 1 (``dist``) and the
  scalar-level depth with reductions as balanced trees (``sdepth``).

So the graph is the computation that ran (``harness.models.reference``), not a graph
typed beside it. Supported: ``@``, ``+``, ``-``, ``*``, ``/``, unary ``-``,
``np.tanh``, ``np.exp``, ``scipy.special.expit`` (sigmoid), ``np.sqrt`` (a layer norm's
standard deviation), ``np.maximum`` (ReLU), ``.max``/``.sum`` over the last axis, ``.T``,
indexing and slicing (with steps), ``.reshape``, ``np.stack``,
``np.concatenate``, ``np.swapaxes`` and ``np.where``. Anything else raises
TypeError naming the operation, so an untraceable forward fails loudly.

Multiplications counted: every multiply-add of a matrix product, and every
product of an elementwise ``*`` (the linear recurrence's lam * h), each under
the part of the weight it multiplies (``Graph.weight_parts``). A value computed
from weights alone (lam * lam, a power of the recurrence's coefficient) keeps
its weight's part, and a slice of a weight is that weight (the query block
``W_in[:d]`` of a Transformer's stacked projection counts under W_in's part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

_INF = np.float32(np.inf)

# memory of a trace: every traced element carries dist (float32) and sdepth (int32) ...
BYTES_PER_ELEMENT = 8
# ... and every traced RNN step a few ops and views (Python objects), measured with tracemalloc
BYTES_PER_STEP = 3000

REDUCTIONS = {"sum", "max"}
MULTIPLYING = {"matmul", "mul"}      # the ops whose multiplications are counted (Op.macs)


def clog2(n):
    """Depth of a balanced binary tree over n leaves: ceil(log2 n), 0 for n = 1."""
    return 0 if n <= 1 else int(math.ceil(math.log2(n)))


def tree_levels(n):
    """Combines per level when n values are summed as a balanced tree (sums to n - 1)."""
    sizes, c = [], int(n)
    while c > 1:
        sizes.append(c // 2)
        c -= c // 2
    return sizes


@dataclass
class Op:
    id: int
    kind: str                    # matmul, add, ..., sum, max
    part: str                    # which part of the model (see Graph.part_of)
    shape: tuple                 # output shape
    inner: int                   # k of a matmul, n of a reduction, 1 otherwise
    deps: list                   # [(op id, row)], row = -1 for the whole output
    op_depth: int = 0            # longest chain of ops ending here (this op included)
    split: bool = False          # some consumer reads single rows of the output

    @property
    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def rows(self):
        """Independent row tasks the op is cut into when a consumer reads single rows."""
        return self.shape[-2] if (self.split and len(self.shape) >= 2) else 1

    @property
    def macs(self):
        """Multiplications: a matrix product's multiply-adds, an elementwise product's elements;
        0 for other ops."""
        if self.kind == "matmul":
            return self.numel * self.inner
        return self.numel if self.kind in MULTIPLYING else 0

    def levels(self, grain):
        """Unit tasks per level of the whole op, under ``grain`` ('scalar' or 'element').

        scalar: each multiply, add, compare, exp... is one task; a sum of n terms
        is a balanced tree of ceil(log2 n) levels.
        element: one processor computes one output element; a dot product of k
        terms is k sequential multiply-adds, a row reduction n - 1 combines.
        """
        N = self.numel
        if self.kind == "matmul":
            if grain == "scalar":
                return [N * self.inner] + [N * c for c in tree_levels(self.inner)]
            return [N] * self.inner
        if self.kind in REDUCTIONS:
            if grain == "scalar":
                return [N * c for c in tree_levels(self.inner)]
            return [N] * (self.inner - 1)
        return [N]


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


def _dist(x, shape=None):
    if isinstance(x, Traced):
        return x.dist
    return np.full(np.shape(x) if shape is None else shape, _INF, dtype=np.float32)


def _sdep(x):
    if isinstance(x, Traced):
        return x.sdepth
    return np.zeros(np.shape(x), dtype=np.int32)


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
    """A recording stand-in for an ndarray: shape, lineage and per-element depths."""

    __array_priority__ = 1000

    def __init__(self, graph, shape, deps, dist, sdepth, axes, leaf=None, owner=None,
                 dtype=np.float64, part=None):
        self.graph = graph
        self.shape = tuple(shape)
        self.deps = deps          # [(op id, row)] this value waits for
        self.dist = dist          # (shape) float32: fewest ops from input position 1
        self.sdepth = sdepth      # (shape) int32: scalar depth, reductions as trees
        self.axes = tuple(axes)   # a label per axis ("T", "d_model", ...)
        self.leaf = leaf          # name of the input this is (or a transpose of)
        self.owner = owner        # op whose direct output this is, else None
        self.dtype = np.dtype(dtype)
        self.part = part          # the weight part of a value computed from weights alone

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def __repr__(self):
        return f"Traced(shape={self.shape}, axes={self.axes})"

    # --- values computed by an op -------------------------------------------------
    def _out(self, op, dist, sdepth, axes, part=None):
        return Traced(self.graph, op.shape, [(op.id, -1)], dist.astype(np.float32, copy=False),
                      sdepth.astype(np.int32, copy=False), axes, owner=op.id, part=part)

    def _elementwise(self, kind, *xs):
        shape = np.broadcast_shapes(*(np.shape(x) if not isinstance(x, Traced) else x.shape
                                      for x in xs))
        axes = _broadcast_axes(*xs)
        op = self.graph.new_op(kind, list(xs), shape, 1, axes)
        dist = np.full(shape, _INF, dtype=np.float32)
        sdep = np.zeros(shape, dtype=np.int32)
        for x in xs:
            dist = np.minimum(dist, _dist(x))
            sdep = np.maximum(sdep, _sdep(x))
        parts = {x.part for x in xs if isinstance(x, Traced)}
        return self._out(op, dist + 1, sdep + 1, axes, parts.pop() if len(parts) == 1 else None)

    def _matmul(self, a, b):
        sa = a.shape if isinstance(a, Traced) else np.shape(a)
        sb = b.shape if isinstance(b, Traced) else np.shape(b)
        da, db = _dist(a), _dist(b)
        ea, eb = _sdep(a), _sdep(b)
        xa, xb = _axes(a), _axes(b)
        if len(sa) == 1:                       # (k,) @ (..., k, n): a row vector
            da, ea, sa, xa = da[None, :], ea[None, :], (1,) + sa, ("1",) + xa
        if len(sb) == 1:                       # (..., m, k) @ (k,): a column vector
            db, eb, sb, xb = db[:, None], eb[:, None], sb + (1,), xb + ("1",)
        k = sa[-1]
        if sb[-2] != k:
            raise ValueError(f"trace: matmul shapes {sa} and {sb} do not align")
        # element (i, j) waits for row i of a and column j of b
        dist = np.minimum(da.min(axis=-1, keepdims=True), db.min(axis=-2, keepdims=True))
        sdep = np.maximum(ea.max(axis=-1, keepdims=True), eb.max(axis=-2, keepdims=True))
        shape = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        # batch axes broadcast as the shapes do (right-aligned), each named by the operand
        # that names it; then a's rows and b's columns
        nb = len(shape) - 2
        pa, pb = ("?",) * (nb - len(xa[:-2])) + xa[:-2], ("?",) * (nb - len(xb[:-2])) + xb[:-2]
        axes = tuple(x if x not in ("?", "1") else y for x, y in zip(pa, pb)) + (xa[-2], xb[-1])
        if len(np.shape(a) if not isinstance(a, Traced) else a.shape) == 1:
            shape, dist, sdep, axes = shape[:-2] + shape[-1:], dist[..., 0, :], sdep[..., 0, :], axes[:-2] + axes[-1:]
        if len(np.shape(b) if not isinstance(b, Traced) else b.shape) == 1:
            shape, dist, sdep, axes = shape[:-1], dist[..., 0], sdep[..., 0], axes[:-1]
        op = self.graph.new_op("matmul", [a, b], shape, k, axes, k_label=xa[-1])
        dist = np.broadcast_to(dist, shape) + 1
        sdep = np.broadcast_to(sdep, shape) + 1 + clog2(k)
        return self._out(op, dist, sdep, axes)

    def _reduce(self, kind, axis=-1, keepdims=False):
        if axis not in (-1, self.ndim - 1):
            raise TypeError(f"trace: .{kind}() is traced over the last axis only, got axis={axis}")
        n = self.shape[-1]
        shape = self.shape[:-1] + ((1,) if keepdims else ())
        axes = self.axes[:-1] + (("1",) if keepdims else ())
        op = self.graph.new_op(kind, [self], shape, n, axes)
        dist = self.dist.min(axis=-1, keepdims=keepdims) + 1
        sdep = self.sdepth.max(axis=-1, keepdims=keepdims) + clog2(n)
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
        dist, sdep = self.dist.reshape(shape), self.sdepth.reshape(shape)
        keep = 0                                  # trailing axes whose size is unchanged
        while (keep < min(self.ndim, dist.ndim)
               and dist.shape[-1 - keep] == self.shape[-1 - keep]):
            keep += 1
        merged = self.axes[:self.ndim - keep]
        lead = (merged[0] if merged else "?",) * (dist.ndim - keep)
        return self._view(dist, sdep, lead + (self.axes[self.ndim - keep:] if keep else ()))

    @property
    def T(self):
        return self._swap(-1, -2)

    def _swap(self, a1, a2):
        axes = list(self.axes)
        axes[a1], axes[a2] = axes[a2], axes[a1]
        return self._view(np.swapaxes(self.dist, a1, a2), np.swapaxes(self.sdepth, a1, a2),
                          axes, leaf=self.leaf)

    def __getitem__(self, idx):
        dist, sdep = self.dist[idx], self.sdepth[idx]
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

    _UFUNCS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
               np.negative: "neg", np.tanh: "tanh", np.exp: "exp", expit: "sigmoid",
               np.sqrt: "sqrt", np.maximum: "maximum"}

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            raise TypeError(f"trace: np.{ufunc.__name__}.{method} is not traced")
        if ufunc is np.matmul:
            return self._matmul(*inputs)
        kind = self._UFUNCS.get(ufunc)
        if kind is None:
            raise TypeError(f"trace: np.{ufunc.__name__} is not traced; the traced forward "
                            f"may use only @ + - * / tanh exp sigmoid (scipy.special.expit) sqrt maximum, "
                            f"max/sum, indexing, reshape, stack, concatenate, where")
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
        raise TypeError(f"trace: np.{func.__name__} is not traced")


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
    dist = np.stack([_dist(a) for a in arrays], axis=axis)
    sdep = np.stack([_sdep(a) for a in arrays], axis=axis)
    axes = list(_axes(ref))
    axes.insert(axis if axis >= 0 else len(axes) + 1 + axis, ref.graph.seq_axis_label)
    return Traced(ref.graph, dist.shape, _union_deps(arrays), dist, sdep, axes)


def _concatenate(arrays, axis=0):
    """Free, like a view: the pieces' elements side by side, waiting for every piece."""
    arrays = list(arrays)
    ref = next(a for a in arrays if isinstance(a, Traced))
    dist = np.concatenate([_dist(a) for a in arrays], axis=axis)
    sdep = np.concatenate([_sdep(a) for a in arrays], axis=axis)
    return Traced(ref.graph, dist.shape, _union_deps(arrays), dist, sdep, _axes(ref))


def leaf(graph, name, shape, axes, source_row=None):
    """An input of the traced forward. ``source_row``: the row that is input position 1."""
    dist = np.full(shape, _INF, dtype=np.float32)
    if source_row is not None:
        dist[..., source_row, :] = 0
    return Traced(graph, shape, [], dist, np.zeros(shape, dtype=np.int32), axes, leaf=name,
                  part=graph.weight_parts.get(name))
