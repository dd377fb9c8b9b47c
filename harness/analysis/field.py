"""Per-element depths kept as structure: a ``Field`` is the min (or max) of a few terms that
broadcast to its shape.

A matrix product's output element (i, j) waits for row i of one operand and column j of the
other, so its depths are a row term and a column term; attention's T x T grids, built from
such products and row-wise softmax operations, keep that form and cost 2T numbers instead of
T^2. Fields of at most ``DENSE_MAX`` elements are one dense array. Every operation gives
exactly the values the dense array would (tests/test_analysis_trace.py checks each against
its dense twin). ``harness.analysis.trace`` keeps a Field per traced array for its distance
from input position 1 ("min") and its scalar depth ("max").
"""

from __future__ import annotations

import math

import numpy as np

_INF = np.float32(np.inf)
BYTES_PER_ELEMENT = 8       # every dense traced element carries dist (float32) and sdepth (int32)


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
    def constant(cls, shape, how):
        """Every element the identity of ``how``: inf for "min", 0 for "max"."""
        _, dtype, ident = _HOW[how]
        return cls(shape, [np.full((1,) * len(shape), ident, dtype)], how)

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

    def reduce(self, axis, keepdims):
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
        per_axis = basic_index(idx, self.ndim)
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


def basic_index(idx, ndim):
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

