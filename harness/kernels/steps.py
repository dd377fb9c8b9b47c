"""What the step-by-step recurrences share (``harness.kernels.lstm`` and ``gru``; ``rnn``'s
overflow message): a step's state as columns, the checks that name the step where a value
stopped being finite, and the bookkeeping by which a backward knows it was handed the states
of the forward that left its buffers.

The batched float32 loops keep a step's values as (n, B) columns, so that the gates of one
sequence are contiguous for the vectorised tanh; ``to_columns`` and ``to_rows`` copy one step
between that and the caller's (B, T, n) layout.
"""

from __future__ import annotations

import weakref

import numpy as np
from numba import njit

from harness.kernels.blas import matmul


# --------------------------------------------------------------------------- compiled

@njit(cache=True, fastmath={"reassoc"})
def nonfinite(u):
    # True if some u[j] is inf or NaN: u[j] * 0 is 0 for every finite value and NaN otherwise.
    # Reassociated so that the sum vectorises (without nnan and ninf the product is not folded)
    s = 0.0
    for j in range(u.shape[0]):
        s += u[j] * 0.0
    return s != s


@njit(cache=True, error_model="numpy")
def _blocked_copy(a, A, t, to_A):
    # between a (n, B) and the caller's layout A (B, T, n) at step t, in blocks of 16 rows of a,
    # so that each block's strided reads or writes stay in L1 (1 KiB in float32 for B = 16)
    n, B = a.shape
    for j0 in range(0, n, 16):
        j1 = min(j0 + 16, n)
        for r in range(B):
            row = A[r, t]
            if to_A:
                for j in range(j0, j1):
                    row[j] = a[j, r]
            else:
                for j in range(j0, j1):
                    a[j, r] = row[j]


@njit(cache=True, error_model="numpy")
def to_rows(a, A, t):
    # A[r, t, :] = a[:, r] for every r
    _blocked_copy(a, A, t, True)


@njit(cache=True, error_model="numpy")
def to_columns(A, t, a):
    # a[:, r] = A[r, t, :] for every r
    _blocked_copy(a, A, t, False)


@njit(cache=True)
def first_bad_column(a, j0, j1):
    # the first column r with a non-finite a[j0:j1, r]
    for r in range(a.shape[1]):
        for j in range(j0, j1):
            if not np.isfinite(a[j, r]):
                return r
    return -1


# --------------------------------------------------------------------------- checks

def raise_if_not_finite(A, who, what, advice):
    """A NaN never leaves a kernel unannounced. ``A`` is (T, n) or (B, T, n), computed from
    finite inputs, so a non-finite entry means a product overflowed: raise
    ``FloatingPointError`` naming ``what`` and the first step (then sequence) where it is not
    finite, ``who`` overflowed, followed by ``advice``."""
    if np.isfinite(A).all():
        return
    bad = (~np.isfinite(A)).reshape(-1, A.shape[-2], A.shape[-1]).any(axis=-1)   # (B, T)
    t = int(np.flatnonzero(bad.any(axis=0))[0])
    seq = int(np.flatnonzero(bad[:, t])[0])
    of = f" of sequence {seq}" if A.ndim == 3 else ""
    raise FloatingPointError(
        f"{who} overflowed: {what} is not finite from step t={t + 1} of {A.shape[-2]}{of}, "
        f"although every input is finite ({A.dtype} holds at most {np.finfo(A.dtype).max:.3g}). "
        f"{advice}")


def sigmoid(u):
    """sigma(u) = 1/2 + tanh(u/2)/2, as the compiled gates compute it."""
    return 0.5 + 0.5 * np.tanh(0.5 * u)


def row_norms(W):
    """||W[j]||_2 for every row, in one pass and no copy of W."""
    return np.sqrt(np.einsum("ij,ij->i", W, W))


def step_major(A3, steps):
    """A3[:, :steps] (B, T, n) as (steps B, n) rows, step-major: row s B + r is (step s,
    sequence r)."""
    B = A3.shape[0]
    return np.ascontiguousarray(A3[:, :steps].transpose(1, 0, 2)).reshape(steps * B, -1)


def entering_states(A3, a0, steps):
    """The states entering steps 1..steps of every sequence, a0 then A3[:, 0], ...: (steps B,
    width), step-major as ``step_major``."""
    B = A3.shape[0]
    prev = np.concatenate([a0.reshape(B, 1, -1), A3[:, :steps - 1]], axis=1)   # (B, steps, .)
    return step_major(prev, steps)


def first_steps(X, H, W_ih, W_hh, h0, steps=2):
    """What a state check recomputes for the first ``steps`` steps of every sequence: the
    inputs x (steps B, d_in), the entering states h_prev (steps B, d_h), W_ih x and W_hh h_prev
    (in float64), the rounding scales ||W_ih j|| ||x|| and ||W_hh j|| ||h_prev|| of each
    product's entries (Cauchy-Schwarz), and the held states (steps B, d_h). Every array
    step-major as ``step_major``."""
    X3, H3 = X.reshape(-1, *X.shape[-2:]), H.reshape(-1, *H.shape[-2:])   # (B, T, .)
    steps = min(steps, H3.shape[1])
    x, hp = step_major(X3, steps), entering_states(H3, h0, steps)
    ax = matmul(x, W_ih.T).astype(np.float64)
    ah = matmul(hp, W_hh.T).astype(np.float64)
    sx = np.outer(np.linalg.norm(x, axis=1), row_norms(W_ih))
    sh = np.outer(np.linalg.norm(hp, axis=1), row_norms(W_hh))
    return x, hp, ax, ah, sx, sh, step_major(H3, steps)


def first_off(bad, B, batched):
    """(row, column, t, 'of sequence ...') of the first True entry of a step-major ``bad``."""
    row, k = np.argwhere(bad)[0]                        # the first step, then sequence, that is off
    t, seq = divmod(int(row), B)
    return row, k, t, (f" of sequence {seq}" if batched else "")


def vec_operands(W_hh, forward):
    """(M, vec_left) for the unbatched loops of the gated recurrences: h @ M if vec_left, else
    M @ h.

    OpenBLAS's gemv kernels differ by dtype and direction here (one thread, d_h = 256,
    T = 1000, interleaved rounds, measured on the LSTM): the forward's W_hh h runs fastest as
    h @ W_hh^T for float32 and as W_hh @ h for float64; the backward's W_hh^T da as
    (W_hh^T) @ da for both. The transposed copy is O(d_h^2), once per call.
    """
    if forward:
        if W_hh.dtype == np.float32:
            return np.ascontiguousarray(W_hh.T), True
        return W_hh, False
    return np.ascontiguousarray(W_hh.T), False


# --------------------------------------------------------------------------- the kept forward

def weak(args):
    """Weak references to the caller's arrays (None stays None); None if one is not an array."""
    refs = []
    for a in args:
        if a is not None and not isinstance(a, np.ndarray):
            return None
        refs.append(None if a is None else weakref.ref(a))
    return refs


def same(refs, args):
    """True if ``refs`` (from ``weak``) still point at exactly the arrays ``args``."""
    return refs is not None and all((r is None and a is None) or (r is not None and r() is a)
                                    for r, a in zip(refs, args))
