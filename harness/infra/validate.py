"""Input checks done once, at the public boundary of every kernel.

Each check names the argument, what was expected and what came, so that no
Numba typing traceback ever reaches a user. The compiled kernels behind the
public functions check nothing.
"""

from __future__ import annotations

import math
import os

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def as_float_array(name, x, ndims, dtype=None):
    """Return ``x`` as a C-contiguous float32/float64 array with an allowed ndim.

    ``ndims`` is an int or a tuple of allowed ndims. When ``dtype`` is given the
    array must already have it (mixed dtypes are an error, never a silent cast).
    A non-contiguous input is copied, never written to; the copy is checked against
    the memory available first, naming ``name`` (see ``contiguous``).
    """
    return contiguous(name, as_float_view(name, x, ndims, dtype))


def as_float_view(name, x, ndims, dtype=None, finite_known=False):
    """``as_float_array``'s checks without its copy: ``x`` as it came (a view, maybe strided).

    Nothing of ``x``'s full size is allocated, so a wrapper can count the copy with its own
    buffers (``check_memory(..., inputs=...)``) before ``contiguous`` makes it. A broadcast
    input (zero strides, ``np.broadcast_to``) is checked finite on its distinct values only;
    with ``finite_known``, not at all (the caller has checked them, more cheaply).
    """
    if isinstance(ndims, int):
        ndims = (ndims,)
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array, whose mask the kernels would ignore; "
                        f"please pass {name}.filled(value) or a plain array.")
    if not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple)) or np.isscalar(x):
            x = np.asarray(x)
        else:
            raise TypeError(
                f"{name} must be a NumPy array of float32 or float64, "
                f"got {type(x).__name__}. Please pass np.asarray({name}, dtype=np.float64)."
            )
    _check_float_dtype(name, x)
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the other inputs are {dtype}; "
            f"mixed dtypes are not accepted. Please pass {name}.astype(np.{dtype})."
        )
    if x.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise ValueError(f"{name} must be {want}, got {x.ndim}-D with shape {x.shape}.")
    for axis, n in enumerate(x.shape):
        if n == 0:
            raise ValueError(f"{name} has a zero-length axis {axis} (shape {x.shape}); "
                             f"T and every width must be at least 1.")
    u = distinct(x)
    if not finite_known and not np.isfinite(u).all():
        bad = int(u.size - np.count_nonzero(np.isfinite(u))) * (x.size // u.size)
        raise ValueError(f"{name} holds {bad} NaN or inf value(s); every input must be finite.")
    return x


def _check_float_dtype(name, x):
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must have dtype float32 or float64, got {x.dtype}. "
            f"Please change your input dtype with {name}.astype(np.float64)."
        )


def sequence(X):
    """The recurrences' input X, (T, d_in) or (B, T, d_in), checked as ``as_float_view`` does
    (a strided X is copied later, once its bytes are counted): (X, dtype, batched, B, T, d_in)."""
    dtype = common_dtype("X", X)
    X = as_float_view("X", X, (2, 3))
    batched = X.ndim == 3
    T, d_in = X.shape[-2:]
    return X, dtype, batched, (X.shape[0] if batched else 1), T, d_in


def projections(Wq, Wk, Wv, d_model, dtype, axis):
    """The attention projections checked against X's d_model on ``axis`` (0: (d_model, d_k),
    applied as X W; 1: (d_k, d_model), applied as W x), Wk shaped as Wq: (Wq, Wk, Wv)."""
    def check(name, W, width):
        W = as_float_array(name, W, 2, dtype)
        if W.shape[axis] != d_model:
            want = f"({d_model}, {width})" if axis == 0 else f"({width}, {d_model})"
            raise ValueError(f"{name} must have shape {want} to match X's d_model = {d_model}, "
                             f"got {W.shape}.")
        return W
    Wq = check("Wq", Wq, "d_k")
    Wk = as_float_array("Wk", Wk, 2, dtype)
    check_shape("Wk", Wk, Wq.shape)
    return Wq, Wk, check("Wv", Wv, "d_v")


def initial_state(name, s, batched, B, d_h, dtype):
    """A recurrence's h0 or c0 as (d_h,) unbatched or (B, d_h) batched; None means zeros, and
    a (d_h,) state with a batch is shared by every sequence."""
    if s is None:
        return np.zeros((B, d_h) if batched else d_h, dtype=dtype)
    s = as_float_array(name, s, (1, 2) if batched else 1, dtype)
    if s.ndim == 1:
        check_shape(name, s, (d_h,))
        if batched:
            s = np.ascontiguousarray(np.broadcast_to(s, (B, d_h)))
    else:
        check_shape(name, s, (B, d_h))
    return s


def bias(name, b, n, dtype):
    """A bias of n values, checked; None means zeros."""
    if b is None:
        return np.zeros(n, dtype=dtype)
    b = as_float_array(name, b, 1, dtype)
    check_shape(name, b, (n,))
    return b


def distinct(x):
    """``x`` without the repeats of its zero-stride axes (a view of the values it holds)."""
    return x[tuple(slice(0, 1) if st == 0 else slice(None) for st in x.strides)]


def _describe_copy(name, x):
    zero = [i for i, (st, n) in enumerate(zip(x.strides, x.shape)) if st == 0 and n > 1]
    what = (f"a broadcast of {distinct(x).size:,} value(s), zero strides on axis "
            f"{', '.join(map(str, zero))}" if zero else "not C-contiguous")
    return f"a contiguous copy of {name} (shape {x.shape}, {what})"


def contiguous(name, x, what=None):
    """``x`` as a C-contiguous array; a copy (of a strided or broadcast view) is checked
    against the memory available before it is made, and a refusal names ``name``."""
    if x.flags.c_contiguous:
        return x
    check_memory(0, what, inputs=((name, x),))
    return np.ascontiguousarray(x)


def common_dtype(name, x):
    """The dtype that every other input must share: the dtype of ``x``."""
    x = np.asarray(x) if not isinstance(x, np.ndarray) else x
    _check_float_dtype(name, x)
    return x.dtype


def shaped(name, x, expected, dtype=None):
    """``x`` as a float array of exactly the shape ``expected`` (and ``dtype``, if given)."""
    x = as_float_array(name, x, len(expected), dtype)
    check_shape(name, x, expected)
    return x


def check_shape(name, x, expected):
    """``expected`` is a tuple of ints; the message shows both shapes."""
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(x.shape)}.")


def required(name, x, expected):
    """``x``, or a TypeError naming ``name`` and ``expected`` when it is None: for an input a
    function cannot do without, where None would otherwise read as "not given"."""
    if x is None:
        raise TypeError(f"{name} must be {expected}, got None.")
    return x


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)!r}, got {value!r}.")
    return value


# Scalar arguments. One behaviour each: a value of the wrong type is a TypeError,
# a value of the right type outside its range a ValueError; both name the argument.

def check_int(name, v, minimum=1):
    """An integer (not a bool) >= ``minimum``; returned as a Python int."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(v).__name__} {v!r}.")
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}.")
    return int(v)


def check_seed(name, v):
    """A seed for np.random.default_rng: an integer >= 0 (SeedSequence rejects negatives)."""
    return check_int(name, v, 0)


def check_real(name, v, minimum=0.0, strict=False):
    """A finite real number >= ``minimum`` (> it when ``strict``); returned as a float."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}.")
    op = ">" if strict else ">="
    if not (math.isfinite(v) and (v > minimum if strict else v >= minimum)):
        raise ValueError(f"{name} must be a finite number {op} {minimum:g}, got {v!r}.")
    return float(v)


def check_positive(name, v):
    """A finite real number > 0 (a spectral radius, a threshold, a scale)."""
    return check_real(name, v, 0.0, strict=True)


def check_sequence(name, values, check):
    """A non-empty sequence whose every item passes ``check(name, item)``; returned as a tuple."""
    try:
        values = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence, got {type(values).__name__} {values!r}.") from None
    if len(values) == 0:
        raise ValueError(f"{name} must not be empty.")
    return tuple(check(name, v) for v in values)


def available_memory_bytes():
    """Memory the kernels may allocate: MemAvailable from /proc/meminfo, else physical."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1


_SMALL_BYTES = 64 * 2**20    # below this, reading /proc/meminfo costs more than it saves


def check_memory(nbytes, what, inputs=()):
    """Raise MemoryError before allocating ``nbytes`` that do not fit.

    ``inputs``: (name, array) pairs from ``as_float_view`` not yet made contiguous; the
    copies of those that are not count too, and the message names them first.
    """
    copies = [(n, a) for n, a in inputs if not a.flags.c_contiguous]
    nbytes += sum(a.nbytes for _, a in copies)
    if nbytes <= _SMALL_BYTES:
        return
    avail = available_memory_bytes()
    if nbytes > avail:
        parts = [_describe_copy(n, a) for n, a in copies] + ([what] if what else [])
        hint = (f"pass {' and '.join(n for n, _ in copies)} with fewer rows (a broadcast input "
                f"is copied whole: the kernels need C-contiguous arrays)" if copies else
                "use a shorter sequence or a smaller batch")
        raise MemoryError(
            f"{' with '.join(parts)} needs {nbytes:,} bytes "
            f"({nbytes / 2**30:.2f} GiB) but only {avail:,} bytes ({avail / 2**30:.2f} GiB) "
            f"are available; {hint}."
        )
