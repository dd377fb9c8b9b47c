"""What the step-by-step recurrences share (``harness.kernels.lstm`` and ``gru``; ``rnn``'s
and ``lru``'s messages): the input products before the loop, the product a step waits for
(``matvec``, ``carry_back``) and which loop runs a call (``loop``), a step's product as columns,
the checks that name the step where a value stopped being finite, and the bookkeeping by which
a backward knows it was handed the values (not merely the arrays) of the forward that left its
buffers.

The LSTM's batched float32 loops take a step's product as (n, B) columns (W_hh h^T forward,
W_hh^T da backward); ``add_columns`` and ``to_columns`` move one step between that and the
caller's (B, T, n) layout.

The batched loops take their buffers from ``row_buffers`` (forward) and ``carry_buffers``
(backward); each family writes its own loops over steps and sequences around
its own cell. One loop taking the cell as an argument compiles, but Numba does not cache a
function that takes a function: measured here (Numba 0.68.1), a second process found no cache
entry for it and compiled it again, as every process would, where the families' loops load
from the cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels.blas import dot, matmul


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
    # between a (n, B) and the caller's layout A (B, T, n) at step t. When 8 divides B, 8
    # sequences at a time (as add_columns: 8 contiguous values of a row of a, one per row of A,
    # whose lines stay in L1); else in blocks of 16 rows of a, so that each block's strided reads
    # or writes stay in L1 (1 KiB in float32 for B = 16)
    n, B = a.shape
    if B % 8 == 0:
        for r0 in range(0, B, 8):
            for j in range(n):
                for rr in range(8):             # a constant trip count: unrolled
                    if to_A:
                        A[r0 + rr, t, j] = a[j, r0 + rr]
                    else:
                        a[j, r0 + rr] = A[r0 + rr, t, j]
        return
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
def to_columns(A, t, a):
    # a[:, r] = A[r, t, :] for every r
    _blocked_copy(a, A, t, False)


@njit(cache=True, error_model="numpy")
def add_columns(A, t, a):
    # A[r, t, :] += a[:, r] for every r: a step's product as (n, B) columns into the caller's
    # (B, T, n) rows. When 8 divides B, 8 sequences at a time: each j reads 8 contiguous
    # a[j, r] and writes one value to each of 8 rows, whose cache lines stay in L1 over 16 j.
    # Measured (B = 32, n = 1024, float32, one thread, CPU time): 20-24 us a step, against 50-77
    # for a row at a time or blocks of 16 j per row (so is a loop over the whole blocks of 8
    # that leaves a remainder: LLVM vectorises this form only)
    n, B = a.shape
    if B % 8 == 0:
        for r0 in range(0, B, 8):
            for j in range(n):
                for rr in range(8):             # a constant trip count: unrolled
                    A[r0 + rr, t, j] += a[j, r0 + rr]
    else:
        for r in range(B):
            row = A[r, t]
            for j in range(n):
                row[j] += a[j, r]


@njit(cache=True, error_model="numpy")
def input_products(X, W_ih, G):
    # G = W_ih x for every (sequence, step) at once, one GEMM before the loop, which then adds
    # only what waits for h_{t-1}: X (..., d_in) -> G (..., n), both C-contiguous
    dot(X.reshape(-1, X.shape[-1]), W_ih.T, G.reshape(-1, G.shape[-1]))


@njit(cache=True, error_model="numpy")
def row_buffers(h0, n, scratch_size):
    # A batched loop's buffers with a step's values as rows: the product the step waits for,
    # a (B, n); the state, h0's copy (B, d_h), h_{t-1} and then h_t; the vectorised tanh's scratch
    return (np.empty((h0.shape[0], n), dtype=h0.dtype), h0.copy(),
            np.empty(scratch_size, dtype=np.int64))


@njit(cache=True, error_model="numpy")
def matvec(M, x, vec_left, out):
    # out = x M if vec_left, else M x: the product one step of an unbatched loop waits for, in
    # the form ``vec_operands`` chose for M
    if vec_left:
        dot(x, M, out)
    else:
        dot(M, x, out)


@njit(cache=True, error_model="numpy")
def add_to(out, a, b):
    # out = a + b, one element at a time, without a temporary
    for k in range(out.shape[0]):
        out[k] = a[k] + b[k]


@njit(cache=True, error_model="numpy")
def add_into(out, a):
    # out += a, one element at a time: add_to(out, out, a), written so that the compiler sees
    # two arrays, not three that may overlap
    for k in range(out.shape[0]):
        out[k] += a[k]


@njit(cache=True, error_model="numpy")
def carry_buffers(B, n, d_h, cols, like):
    # A batched backward's buffers for B sequences of n pre-activations and d_h states: the
    # carry (B, d_h), what h_t receives through W_hh, zero after the last step; dh (d_h,), one
    # sequence's dl/dh_t in full; and the scratch of ``carry_back``
    carry = np.zeros((B, d_h), dtype=like.dtype)
    dh = np.empty(d_h, dtype=like.dtype)
    da = np.empty((n, B) if cols else (B, n), dtype=like.dtype)
    cc = np.empty((d_h, B) if cols else (0, 0), dtype=like.dtype)
    return carry, dh, da, cc


@njit(cache=True, error_model="numpy")
def carry_back(G, t, M, cols, da, cc, carry):
    # carry (B, d_h) <- (W_hh^T dl/da_t)^T for every sequence, what h_{t-1} receives through
    # W_hh, from G[:, t] (dl/da_t): one GEMM. As rows, da (B, n) @ M with M = W_hh; as columns
    # (cols), M (d_h, n) @ da (n, B) with M = W_hh^T made contiguous, into cc (d_h, B), then
    # copied to rows: for float32, OpenBLAS runs that form faster by more than the copies cost
    if cols:
        to_columns(G, t, da)
        dot(M, da, cc)
        carry[:, :] = cc.T
    else:
        for r in range(G.shape[0]):
            da[r, :] = G[r, t]
        dot(da, M, carry)


# --------------------------------------------------------------------------- checks

def of_sequence(seq, batched):
    """" of sequence <seq>" where a message names a place in a batch; nothing without one."""
    return f" of sequence {seq}" if batched else ""


def gated_weights(X, W_ih, W_hh, gates, module):
    """X checked as a sequence, and the weights of a recurrence whose ``gates`` are stacked in
    W_ih (k d_h, d_in) and W_hh (k d_h, d_h), as ``module``'s weight_ih_l0 and weight_hh_l0.
    Returns (X, batched, B, T, d_in, d_h, W_ih, W_hh), every array in X's dtype."""
    X, dtype, batched, B, T, d_in = v.sequence(X)
    k = len(gates)
    W_hh = v.as_float_array("W_hh", W_hh, 2, dtype)
    d_h = W_hh.shape[1]
    if W_hh.shape[0] != k * d_h:
        raise ValueError(f"W_hh must have shape ({k}*d_h, d_h) (the gates {', '.join(gates)} "
                         f"stacked, as {module}'s weight_hh_l0), got {W_hh.shape}.")
    W_ih = v.shaped("W_ih", W_ih, (k * d_h, d_in), dtype)
    return X, batched, B, T, d_in, d_h, W_ih, W_hh


def raise_if_overflowed(bad, X, who, what):
    """``bad`` is a compiled forward's (step, sequence) where the gates' pre-activations
    ``what`` first stopped being finite, step -1 if they never did."""
    if bad[0] < 0:
        return
    of = of_sequence(bad[1], X.ndim == 3)
    raise FloatingPointError(
        f"{who} overflowed: the gates' pre-activations {what} are not finite from step "
        f"t={bad[0] + 1} of {X.shape[-2]}{of}, although every input is finite ({X.dtype} holds "
        f"at most {np.finfo(X.dtype).max:.3g}). Scale X, W_ih or W_hh down, or use float64.")


def check_gradients(who, dX, dW_ih, dW_hh, upstream):
    """A backward's dX, and its weight gradients (sums over every step), all finite; else a
    FloatingPointError that names ``who`` and advises scaling the ``upstream`` gradients."""
    raise_if_not_finite(dX, f"{who}'s backward", "dl/dx_t",
                        f"Scale {', '.join(upstream)} or the weights down, or use float64.")
    if not (np.isfinite(dW_ih).all() and np.isfinite(dW_hh).all()):
        raise FloatingPointError(
            f"{who}'s backward overflowed: dW_ih or dW_hh, a sum over every step, is not finite "
            f"({dX.dtype} holds at most {np.finfo(dX.dtype).max:.3g}). Scale "
            f"{' or '.join(upstream)} down, or use float64.")


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
    of = of_sequence(seq, A.ndim == 3)
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
    return row, k, t, of_sequence(seq, batched)


def loop(W_hh, batched, forward, float32_cols=True):
    """Which compiled loop of a gated recurrence runs a call, and what it takes: (kind, M, flag).
    "cols" for float32 batches when ``float32_cols`` (a step's values as (n, B) columns: W_hh @ h
    forward, W_hh^T @ da backward), "rows" for the other batches (h @ W_hh^T, da @ W_hh), "vec"
    unbatched. The flag is vec_left for "vec" (M and it from ``vec_operands``), True for "cols"
    and False for "rows": the batched backward is one loop that reads it (``carry_back``), the
    batched forwards do not."""
    if batched and W_hh.dtype == np.float32 and float32_cols:
        return "cols", (W_hh if forward else np.ascontiguousarray(W_hh.T)), True
    if batched:
        return "rows", (np.ascontiguousarray(W_hh.T) if forward else W_hh), False
    return ("vec",) + vec_operands(W_hh, forward)


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

def keep_inputs(prefix, arrays):
    """Copies of ``arrays`` (None stays None) in this thread's workspace buffers ``prefix_kept<n>``,
    for ``kept_buffers`` to compare a backward's inputs with. Copies, not the arrays or
    references to them: an array changed in place after the forward is the same object with
    other values, and the gates kept from the old values are not its gates."""
    copies = []
    for n, a in enumerate(arrays):
        if a is None:
            copies.append(None)
            continue
        c = workspace.buffer(f"{prefix}_kept{n}", a.shape, a.dtype)
        np.copyto(c, a)
        copies.append(c)
    return tuple(copies)


def kept_buffers(kept, arrays, shape, dtype):
    """The buffers a forward left with ``workspace.keep(name, (keep_inputs(prefix, arrays),
    *buffers))``, if ``arrays`` hold exactly the values of that call's, element by element (the
    same objects or not), and its first buffer has this shape and dtype; else None. The
    comparison is O(T d), against the O(T d^2) products it saves."""
    if kept is None:
        return None
    copies, buffers = kept[0], kept[1:]
    if len(copies) != len(arrays):
        return None
    for c, a in zip(copies, arrays):
        if (c is None) != (a is None):
            return None
        if c is not None and (c.shape != a.shape or c.dtype != a.dtype or not np.array_equal(c, a)):
            return None
    return buffers if buffers[0].shape == shape and buffers[0].dtype == dtype else None
