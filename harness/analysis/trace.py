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

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

_INF = np.float32(np.inf)

# memory of a trace: every dense traced element carries dist (float32) and sdepth (int32) ...
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


@dataclass(slots=True)
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


# ----------------------------------------------------------------------------- per-element depths

DENSE_MAX = 1 << 16   # a Field of at most this many elements is kept as one dense array

_HOW = {"min": (np.minimum, np.float32, _INF), "max": (np.maximum, np.int32, 0)}


def field_bytes(rows, cols):
    """Bytes of the depths of a (rows, cols) value that a product or an elementwise op of
    products computes: dense up to ``DENSE_MAX`` elements, a row term and a column term past
    it (the memory estimates of the traced forms count their T x T grids with this)."""
    n = rows * cols
    return BYTES_PER_ELEMENT * (n if n <= DENSE_MAX else rows + cols)


def _numel(shape):
    return math.prod(shape)


def _covers(big, small):
    """True when an array of shape ``small`` broadcasts into ``big`` (same number of axes)."""
    return all(s == 1 or s == b for b, s in zip(big, small))


class Field:
    """Per-element values of ``shape``: the elementwise min (``dist``) or max (``sdepth``) of a
    few terms, each an array with as many axes as ``shape`` that broadcasts to it.

    That is the structure a traced forward's depths have: a leaf's depth is constant or
    depends on its row, a product's element (i, j) is max(row term of a, column term of b),
    and an elementwise op of such arrays is again a min or max of row and column terms. So a
    T x T grid costs two vectors of T, not T^2 numbers; a Field of at most ``DENSE_MAX``
    elements is kept as one dense array, and every operation below gives exactly the values
    the dense array would have.
    """

    __slots__ = ("shape", "terms", "how")

    def __init__(self, shape, terms, how):
        self.shape = tuple(int(s) for s in shape)
        self.how = how
        ufunc, dtype, _ = _HOW[how]
        nd = len(self.shape)
        out = []
        for t in terms:
            t = np.asarray(t)
            if t.dtype != dtype:
                t = t.astype(dtype)
            if t.ndim < nd:
                t = t.reshape((1,) * (nd - t.ndim) + t.shape)
            elif t.ndim > nd:
                raise ValueError(f"trace: a term of shape {t.shape} has more axes than {self.shape}")
            if not _covers(self.shape, t.shape):
                raise ValueError(f"trace: a term of shape {t.shape} does not broadcast to {self.shape}")
            out.append(t)
        if not out:
            out = [np.full((1,) * nd, _HOW[how][2], dtype=dtype)]
        if len(out) > 1 or out[0].shape != self.shape:
            if _numel(self.shape) <= DENSE_MAX:
                acc = np.broadcast_to(out[0], self.shape).copy()
                for t in out[1:]:
                    ufunc(acc, t, out=acc)
                out = [acc]
            else:
                out = self._merged(out, ufunc)
        self.terms = out

    @staticmethod
    def _merged(terms, ufunc):
        """Fold each term into a kept term it broadcasts into (the larger first)."""
        kept = []
        for t in sorted(terms, key=lambda a: -a.size):
            for i, k in enumerate(kept):
                if _covers(k.shape, t.shape):
                    kept[i] = ufunc(k, t)
                    break
            else:
                kept.append(t)
        return kept

    @classmethod
    def constant(cls, shape, how, value=None):
        """Every element ``value`` (the identity of ``how``, inf or 0, by default)."""
        _, dtype, ident = _HOW[how]
        return cls(shape, [np.full((1,) * len(shape), ident if value is None else value, dtype)],
                   how)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nbytes(self):
        return sum(t.nbytes for t in self.terms)

    def dense(self):
        """The values as one array of ``shape`` (a read-only broadcast view where it can be)."""
        if len(self.terms) == 1:
            t = self.terms[0]
            return t if t.shape == self.shape else np.broadcast_to(t, self.shape)
        ufunc = _HOW[self.how][0]
        return ufunc.reduce([np.broadcast_to(t, self.shape) for t in self.terms])

    @classmethod
    def _raw(cls, shape, terms, how):
        """A Field from terms already checked (the tracer's own, on its hot path)."""
        f = object.__new__(cls)
        f.shape, f.terms, f.how = shape, terms, how
        return f

    def shift(self, c):
        """Every element plus ``c``."""
        return Field._raw(self.shape, [t + c for t in self.terms], self.how)

    @staticmethod
    def combine(fields, shape, how):
        """The elementwise min/max of ``fields`` broadcast to ``shape``."""
        shape = tuple(shape)
        if _numel(shape) <= DENSE_MAX:                 # small: fold into one dense array
            ufunc = _HOW[how][0]
            terms = [t for f in fields for t in f.terms]
            if not terms:
                return Field.constant(shape, how)
            acc = terms[0]
            for t in terms[1:]:
                acc = ufunc(acc, t)                    # a new array: terms are never written
            if acc.shape != shape:
                acc = np.array(np.broadcast_to(acc, shape))
            return Field._raw(shape, [acc], how)
        return Field(shape, [t for f in fields for t in f.terms], how)

    def reduce(self, axis, keepdims=False):
        """Min/max over ``axis`` (as ``ndarray.min``/``max``), term by term."""
        ufunc = _HOW[self.how][0]
        axis = axis % self.ndim
        if len(self.terms) == 1 and self.terms[0].shape == self.shape and self.shape[axis]:
            t = ufunc.reduce(self.terms[0], axis=axis, keepdims=keepdims)
            return Field._raw(t.shape, [t], self.how)
        terms = [t if t.shape[axis] == 1 or self.shape[axis] == 0 else ufunc.reduce(t, axis=axis, keepdims=True)
                 for t in self.terms]
        shape = list(self.shape)
        if keepdims:
            shape[axis] = 1
        else:
            del shape[axis]
            terms = [t.reshape(t.shape[:axis] + t.shape[axis + 1:]) for t in terms]
        return Field(shape, terms, self.how)

    def total(self):
        """The min/max of every element: a number."""
        ufunc = _HOW[self.how][0]
        return ufunc.reduce([ufunc.reduce(t, axis=None) for t in self.terms])

    def swap(self, a1, a2):
        shape = list(self.shape)
        shape[a1], shape[a2] = shape[a2], shape[a1]
        return Field._raw(tuple(shape), [np.swapaxes(t, a1, a2) for t in self.terms], self.how)

    def reshape(self, shape):
        return Field(shape, [self.dense().reshape(shape)], self.how)

    def index(self, idx):
        """``self[idx]``: basic indexing term by term (a term's broadcast axis stays one wide);
        anything else on the dense values."""
        if len(self.terms) == 1 and self.terms[0].shape == self.shape:
            t = self.terms[0][idx]
            return Field._raw(t.shape, [t], self.how)
        out_shape = np.lib.stride_tricks.as_strided(np.zeros(1, bool), self.shape,
                                                    (0,) * self.ndim)[idx].shape
        per_axis = _basic_index(idx, self.ndim)
        if per_axis is None:
            return Field(out_shape, [np.asarray(self.dense()[idx])], self.how)
        terms = []
        for t in self.terms:
            sub, ax = [], 0
            for e in per_axis:
                if e is None:
                    sub.append(None)
                    continue
                n, one = self.shape[ax], t.shape[ax] == 1 and self.shape[ax] != 1
                if isinstance(e, slice):
                    sub.append(slice(0, 1 if len(range(n)[e]) else 0) if one else e)
                else:
                    range(n)[e]                                   # IndexError as numpy's
                    sub.append(0 if one else e)
                ax += 1
            terms.append(t[tuple(sub)])
        return Field(out_shape, terms, self.how)


def _basic_index(idx, ndim):
    """``idx`` as one entry (int, slice or None) per axis and new axis, or None when it is not
    basic indexing (arrays, booleans)."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    for e in idx:
        if isinstance(e, (bool, np.bool_)) or not (
                e is None or e is Ellipsis or isinstance(e, (slice, int, np.integer))):
            return None
    if sum(e is Ellipsis for e in idx) > 1:
        return None
    real = sum(1 for e in idx if e is not None and e is not Ellipsis)
    if real > ndim:
        return None
    if Ellipsis in idx:
        i = idx.index(Ellipsis)
        return idx[:i] + (slice(None),) * (ndim - real) + idx[i + 1:]
    return idx + (slice(None),) * (ndim - real)


def _field(x, how, shape=None):
    """The dist (``how`` = "min") or sdepth ("max") Field of ``x``; a plain array's is the
    identity (inf, 0): it is never an input position and waits for nothing."""
    if isinstance(x, Traced):
        return x._dist if how == "min" else x._sdep
    return Field.constant(np.shape(x) if shape is None else shape, how)


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

    def _reduce(self, kind, axis=-1, keepdims=False):
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
    which is the line of the traced forward that asked for the operation."""
    import os
    import traceback

    import scipy
    inside = (os.path.dirname(np.__file__) + os.sep, os.path.dirname(scipy.__file__) + os.sep)
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
