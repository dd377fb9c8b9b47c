"""The vanilla RNN of the lessons, forward and full BPTT, compiled with Numba.

    h_t = phi(W_hh h_{t-1} + W_xh x_t + b),    phi = tanh or the identity

The input products W_xh x_t for every t are one matrix product before the loop:
that is the half that parallelises. Only the recurrence is a loop, one BLAS
matrix-vector (or, batched, matrix-matrix) product per step into a preallocated
buffer, followed by a vectorised tanh (see ``_vmath``). Nothing is allocated per
step.

States stay in the caller's layout, (T, d_h) or (B, T, d_h): a batched step
gathers its strided rows into one contiguous (B, d_h) buffer for the GEMM, which
costs O(B d_h) per step and saves transposed copies of whole sequences (fresh
pages are expensive here: 64 MiB first-touched costs 60 to 160 ms).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels.blas import dot, matmul
from harness.kernels.steps import of_sequence, raise_if_not_finite, row_buffers
from harness.kernels.vmath import tanh_inplace

ACTIVATIONS = ("tanh", "identity")
# The widest W_hh whose unbatched forward runs its step product in the loop (_forward_vec_axpy)
# rather than as a gemv call, by itemsize. gemv time over loop time, T = 1000, one thread, 9
# interleaved rounds (Xeon, AVX-512), quiet: float32 1.59 / 1.32 at d_h = 32 / 64, float64
# 1.35 / 1.08. At d_h = 128 the loop won quiet (1.14 to 1.34) but lost with mutmut on the other
# core (0.95 float32, 0.83 float64), and lost at 256 (0.83): the switch stays at 64.
_AXPY_MAX = {4: 64, 8: 64}


# --------------------------------------------------------------------------- forward

@njit(cache=True, error_model="numpy")
def _input_products(X, W_xh, b, H):
    # H[t] = W_xh x_t + b for every t (one GEMM: the half that parallelises); returns the
    # step's buffers (a, scratch for tanh)
    T, d_h = H.shape
    dot(X, W_xh.T, H)
    for t in range(T):
        for i in range(d_h):
            H[t, i] += b[i]
    return np.empty(d_h, dtype=H.dtype), np.empty(d_h, dtype=np.int64)


@njit(cache=True, error_model="numpy")
def _forward_vec(X, W_xh, W_hh, b, h0, use_tanh, H):
    # X (T, d_in), W_xh (d_h, d_in), W_hh (d_h, d_h), b (d_h,), h0 (d_h,) -> H (T, d_h)
    T, d_h = H.shape
    a, scratch = _input_products(X, W_xh, b, H)
    h_prev = h0
    for t in range(T):
        dot(W_hh, h_prev, a)             # a = W_hh h_{t-1}: the step that must wait
        h = H[t]
        for i in range(d_h):
            h[i] += a[i]
        if use_tanh:
            tanh_inplace(h, scratch)
        h_prev = h


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _forward_vec_axpy(X, W_xh, W_hhT, b, h0, use_tanh, H):
    # As _forward_vec, with the step's product in the loop instead of a BLAS call:
    # a = sum_j W_hh[:, j] h_{t-1}[j] as axpys over the rows of W_hh^T (contiguous), four at a
    # time, so that a is loaded and stored once per four columns. At small widths a gemv
    # call's fixed cost is most of a step (see _AXPY_MAX for where this form wins).
    T, d_h = H.shape
    a, scratch = _input_products(X, W_xh, b, H)
    h_prev = h0
    d4 = d_h - d_h % 4
    for t in range(T):
        h = H[t]
        for i in range(d_h):
            a[i] = h[i]
        for j in range(0, d4, 4):
            p0, p1, p2, p3 = h_prev[j], h_prev[j + 1], h_prev[j + 2], h_prev[j + 3]
            w0, w1, w2, w3 = W_hhT[j], W_hhT[j + 1], W_hhT[j + 2], W_hhT[j + 3]
            for i in range(d_h):
                a[i] += w0[i] * p0 + w1[i] * p1 + w2[i] * p2 + w3[i] * p3
        for j in range(d4, d_h):
            p, w = h_prev[j], W_hhT[j]
            for i in range(d_h):
                a[i] += w[i] * p
        for i in range(d_h):
            h[i] = a[i]
        if use_tanh:
            tanh_inplace(h, scratch)
        h_prev = h


@njit(cache=True, error_model="numpy")
def _forward_batch(X, W_xh, W_hhT, b, h0, use_tanh, H):
    # X (B, T, d_in), h0 (B, d_h) -> H (B, T, d_h), in the caller's batch-major layout:
    # the step's rows H[:, t] are strided, so each step works in a contiguous (B, d_h) buffer.
    # W_hhT is W_hh^T made contiguous: OpenBLAS's NN gemm beat the NT one by 7 % here
    # (B = 32, d_h = 256, float32, one thread, median of 9 interleaved rounds). On NumPy's
    # OpenBLAS (``blas.dot``) this rows form also beat the columns one, (d_h, d_h) @ (d_h, B)
    # with H's rows read and written transposed: 154 against 166 ms (float32, T = 1000, 7
    # interleaved rounds); on SciPy's the columns form had been the faster for float32.
    B, T, d_h = H.shape
    d_in = X.shape[2]
    Hf = H.reshape(B * T, d_h)
    dot(X.reshape(B * T, d_in), W_xh.T, Hf)      # every input product at once
    for r in range(B * T):
        for i in range(d_h):
            Hf[r, i] += b[i]
    a, h, scratch = row_buffers(h0, d_h, B * d_h)   # a, h (B, d_h): swapped every step
    for t in range(T):
        dot(h, W_hhT, a)                         # (B, d_h) @ (d_h, d_h): one GEMM per step
        for r in range(B):
            for i in range(d_h):
                a[r, i] += H[r, t, i]
        if use_tanh:
            tanh_inplace(a.reshape(B * d_h), scratch)
        for r in range(B):
            for i in range(d_h):
                H[r, t, i] = a[r, i]
        h, a = a, h                              # swap buffers: nothing allocated per step


# -------------------------------------------------------------------------- backward

@njit(cache=True, error_model="numpy")
def _backward_vec(H, M, vec_left, dH, use_tanh, dA):
    # H, dH (T, d_h) -> dA (T, d_h), dA[t] = dl/da_t; returns dl/dh0.
    # Reverses: h_t = phi(a_t), a_t = W_hh h_{t-1} + W_xh x_t + b.
    # M is W_hh^T made contiguous, or W_hh itself when vec_left (da^T W_hh = (W_hh^T da)^T)
    T, d_h = H.shape
    carry = np.zeros(d_h, dtype=H.dtype)     # W_hh^T da_{t+1}: what h_t passes back
    for t in range(T - 1, -1, -1):
        da = dA[t]
        h = H[t]
        if use_tanh:
            for i in range(d_h):
                da[i] = (dH[t, i] + carry[i]) * (1.0 - h[i] * h[i])   # tanh' = 1 - h^2
        else:
            for i in range(d_h):
                da[i] = dH[t, i] + carry[i]
        if vec_left:                           # carry = W_hh^T da_t
            dot(da, M, carry)
        else:
            dot(M, da, carry)
    return carry


@njit(cache=True, error_model="numpy")
def _backward_batch(H, W_hh, dH, use_tanh, dA):
    # H, dH (B, T, d_h) batch-major -> dA (B, T, d_h); returns dl/dh0 (B, d_h)
    B, T, d_h = H.shape
    carry = np.zeros((B, d_h), dtype=H.dtype)
    da = np.empty((B, d_h), dtype=H.dtype)     # the step's rows, contiguous for the GEMM
    for t in range(T - 1, -1, -1):
        for r in range(B):
            if use_tanh:
                for i in range(d_h):
                    h = H[r, t, i]
                    da[r, i] = (dH[r, t, i] + carry[r, i]) * (1.0 - h * h)
            else:
                for i in range(d_h):
                    da[r, i] = dH[r, t, i] + carry[r, i]
            for i in range(d_h):
                dA[r, t, i] = da[r, i]
        dot(da, W_hh, carry)                   # rows: (W_hh^T da_t)^T = da_t^T W_hh
    return carry


# ---------------------------------------------------------------------------- public

def _carry_operand(W_hh):
    """(M, vec_left) for the backward's W_hh^T da: da @ M if vec_left, else M @ da.

    OpenBLAS's two gemv kernels differ here (one thread, T = 1000 steps, in the loop):
    float64 runs W_hh^T da fastest as (contiguous W_hh^T) @ da, 7.4 ms against 8.2 at
    d = 256 and 47 against 52 at d = 512; float32 as da @ W_hh, 2.6 against 3.8 ms.
    (The forward's W_hh @ h is the faster form for both.) The copy is O(d^2), once.
    """
    if W_hh.dtype == np.float32:
        return W_hh, True
    return np.ascontiguousarray(W_hh.T), False


class RNNGrads(NamedTuple):
    dX: np.ndarray      # like X
    dW_xh: np.ndarray   # (d_h, d_in)
    dW_hh: np.ndarray   # (d_h, d_h)
    db: np.ndarray      # (d_h,)
    dh0: np.ndarray     # like h0: (d_h,) unbatched, (B, d_h) batched


def _check(X, W_xh, W_hh, b, h0, activation):
    v.check_choice("activation", activation, ACTIVATIONS)
    X, dtype, batched, B, T, d_in = v.sequence(X)
    W_hh = v.as_float_array("W_hh", W_hh, 2, dtype)
    d_h = W_hh.shape[0]
    v.check_shape("W_hh", W_hh, (d_h, d_h))
    W_xh = v.as_float_array("W_xh", W_xh, 2, dtype)
    v.check_shape("W_xh", W_xh, (d_h, d_in))
    b = v.bias("b", b, d_h, dtype)
    h0 = v.initial_state("h0", h0, batched, B, d_h, dtype)
    v.check_memory(2 * T * B * (d_h + d_in) * X.itemsize, "the RNN's state and input buffers",
                   inputs=(("X", X),))
    return v.contiguous("X", X), W_xh, W_hh, b, h0, batched


def _check_finite(H, what):
    """A NaN never leaves the kernel unannounced: finite inputs gave a non-finite result only if
    the recurrence overflowed; say at which step and in which quantity."""
    raise_if_not_finite(H, "the RNN", what,
                        "Scale X, W_xh or W_hh down (a spectral radius of W_hh above 1 grows like "
                        "rho^t), or use float64.")


def _check_states(X, H, W_xh, W_hh, h0, use_tanh):
    """Cheap checks that H came from this forward: tanh states lie in [-1, 1], and in every
    sequence the first two steps imply the same bias b = phi^-1(h_t) - W_xh x_t - W_hh h_{t-1}
    (b itself is not passed). O(B d_h (d_h + d_in)): two steps per sequence, all at once."""
    top = float(np.abs(H).max())
    if use_tanh and top > 1.0:
        raise ValueError(f"H holds values up to {top:.3g} in magnitude, which tanh cannot produce: "
                         f"was it computed with activation='identity'? Pass backward the "
                         f"activation that forward used.")
    T = H.shape[-2]
    if T < 2:
        return
    x = X.reshape(-1, *X.shape[-2:])[:, :2]                       # (B, 2, d_in)
    h = H.reshape(-1, *H.shape[-2:])[:, :2]                       # (B, 2, d_h)
    prev = np.stack([h0.reshape(-1, h0.shape[-1]), h[:, 0]], axis=1)   # (B, 2, d_h): h_0, h_1
    with np.errstate(divide="ignore", invalid="ignore"):        # atanh(+-1): masked out below
        a = np.arctanh(h) if use_tanh else h
    terms = (x @ W_xh.T, prev @ W_hh.T)                           # (B, 2, d_h) each
    with np.errstate(invalid="ignore"):                           # inf - inf at atanh(+-1): masked
        r = a - terms[0] - terms[1]
        scale = (np.abs(a) + np.abs(terms[0]) + np.abs(terms[1])).sum(axis=1)   # (B, d_h)
    eps = np.finfo(H.dtype).eps
    if use_tanh:                  # atanh amplifies rounding by 1 / (1 - h^2): leave saturated states out
        ok = (np.abs(h) < 0.9).all(axis=1)                        # (B, d_h)
        amp = 1.0 / np.maximum(1.0 - (h ** 2).max(axis=1), 0.19)    # 0.19 = 1 - 0.9^2
    else:
        ok, amp = np.ones(scale.shape, bool), 1.0
    tol = 256 * eps * (scale * amp + float(np.abs(W_hh).sum(axis=1).max()) + 1.0)
    with np.errstate(invalid="ignore"):
        gap = np.abs(r[:, 0] - r[:, 1])                           # (B, d_h)
    bad = ok & (gap > tol)
    if bad.any():
        seq = int(np.flatnonzero(bad.any(axis=1))[0])
        where = of_sequence(seq, X.ndim == 3)
        largest = float(gap[seq][ok[seq]].max())
        raise ValueError(
            f"H does not follow from X and h0{where}: steps 1 and 2 imply different biases "
            f"(largest difference {largest:.3g}). Pass backward the h0 and the activation that "
            f"forward used (h0=None means zeros), and the H it returned for this X.")


def _parameter_products(X, H, W_xh, h0, dA):
    """(dX, dW_xh, dW_hh) from dA = dl/da_t: sums over steps, so GEMMs after the loop, on
    views of the caller's layout (no transposed copies). a_t used h_{t-1}, and h_0 for t = 1."""
    batched = X.ndim == 3
    dA3, H3 = (dA, H) if batched else (dA[None], H[None])     # (B, T, d_h)
    h03 = h0 if batched else h0[None]                          # (B, d_h)
    B, T, d_h = dA3.shape
    dW_hh = matmul(dA3[:, 0].T, h03)                           # the first step's h_0 term
    if T > 1:
        part = np.empty_like(dW_hh)
        for r in range(B):                                     # one (T-1)-long GEMM per sequence
            dW_hh += matmul(dA3[r, 1:].T, H3[r, :-1], out=part)
    dA2 = dA.reshape(-1, d_h)                                  # (B T, d_h)
    dW_xh = matmul(dA2.T, X.reshape(-1, X.shape[-1]))
    dX = matmul(dA2, W_xh).reshape(X.shape)
    return dX, dW_xh, dW_hh


# ------------------------------------------------------------ the BLAS calls alone
# ``harness compare`` times these beside the kernels (impl "gemm"): the same products in
# the same shapes, on the same BLAS, with nothing else. Their time is what the kernels
# cannot go below on this BLAS, and peer time / their time is the largest speed-up over
# a peer that the kernels could show.

@njit(cache=True)
def _steps_blas_only(W, H, a, steps_left):
    # one product per step, as the loops make them: W (d_h, d_h) against each step's
    # state, a row of H (T, d_h) as a vector (steps_left: h @ W, else W @ h), or, batched,
    # H (T, B, d_h) rows against W as (B, d_h) @ (d_h, d_h), or (T, d_h, B) columns as
    # W @ (d_h, B).
    for t in range(H.shape[0]):
        if steps_left:
            dot(H[t], W, a)
        else:
            dot(W, H[t], a)


def forward_blas_only(X, W_xh, W_hh):
    """A no-argument call that makes the products ``forward`` makes for (X, W_xh, W_hh),
    in its shapes and forms, and nothing else."""
    batched = X.ndim == 3
    B, T, d_in = (X.shape if batched else (1, *X.shape))
    d_h = W_hh.shape[0]
    inputs = np.empty((B * T, d_h), dtype=X.dtype)
    if not batched:
        steps, W, a, left = np.zeros((T, d_h), X.dtype), W_hh, np.empty(d_h, X.dtype), False
    else:                                        # _forward_batch: (B, d_h) @ W_hh^T
        steps, W, a, left = (np.zeros((T, B, d_h), X.dtype), np.ascontiguousarray(W_hh.T),
                             np.empty((B, d_h), X.dtype), True)
    X2 = X.reshape(B * T, d_in)

    def call():
        matmul(X2, W_xh.T, inputs)
        _steps_blas_only(W, steps, a, left)
    return call


def backward_blas_only(X, H, W_xh, W_hh, h0=None):
    """A no-argument call that makes the products ``backward`` makes, in its shapes and
    forms (the loop's carry products, then dX, dW_xh and dW_hh), and nothing else."""
    batched = X.ndim == 3
    B, T = (X.shape[:2] if batched else (1, X.shape[0]))
    d_h = W_hh.shape[0]
    if h0 is None:
        h0 = np.zeros((B, d_h) if batched else d_h, dtype=X.dtype)
    dA = np.zeros_like(H)
    if batched:                                  # _backward_batch: (B, d_h) @ W_hh
        steps, W, a, left = np.zeros((T, B, d_h), X.dtype), W_hh, np.empty((B, d_h), X.dtype), True
    else:
        W, left = _carry_operand(W_hh)
        steps, a = np.zeros((T, d_h), X.dtype), np.empty(d_h, X.dtype)

    def call():
        _steps_blas_only(W, steps, a, left)
        _parameter_products(X, H, W_xh, h0, dA)
    return call


def _forward_unbatched(X, W_xh, W_hh, b, h0, use_tanh, H):
    """The unbatched forward's compiled loop: the step product in the loop up to _AXPY_MAX,
    a gemv call past it."""
    if W_hh.shape[0] <= _AXPY_MAX[X.itemsize]:
        _forward_vec_axpy(X, W_xh, np.ascontiguousarray(W_hh.T), b, h0, use_tanh, H)
    else:
        _forward_vec(X, W_xh, W_hh, b, h0, use_tanh, H)


def forward(X, W_xh, W_hh, b=None, h0=None, activation="tanh"):
    """Run the RNN over every position and return every state h_1..h_T.

    X is (T, d_in) or (B, T, d_in); W_xh (d_h, d_in); W_hh (d_h, d_h); b (d_h,);
    h0 (d_h,) or (B, d_h), zeros when not given. Returns H, (T, d_h) or (B, T, d_h),
    in X's dtype.
    """
    X, W_xh, W_hh, b, h0, batched = _check(X, W_xh, W_hh, b, h0, activation)
    use_tanh = activation == "tanh"
    d_h = W_hh.shape[0]
    if not batched:
        H = np.empty((X.shape[0], d_h), dtype=X.dtype)
        _forward_unbatched(X, W_xh, W_hh, b, h0, use_tanh, H)
    else:
        H = np.empty(X.shape[:2] + (d_h,), dtype=X.dtype)
        _forward_batch(X, W_xh, np.ascontiguousarray(W_hh.T), b, h0, use_tanh, H)
    _check_finite(H, "h_t")
    return H


def backward(X, H, W_xh, W_hh, dH, h0=None, activation="tanh"):
    """Full backpropagation through time from an upstream gradient dH (shaped like H).

    H must be the states that ``forward`` returned for these inputs, with the same h0
    and activation. What is checked, cheaply: tanh states lie in [-1, 1], and in
    every sequence the first two steps of H follow from X, W_hh and h0 with one bias
    (b is not needed here). What cannot be checked: later steps, states saturated
    past |h| = 0.9, and whether dH is the gradient meant. Returns an ``RNNGrads`` with
    dX, dW_xh, dW_hh, db and dh0.
    """
    shared_h0 = h0 is not None and np.ndim(h0) == 1 and np.ndim(X) == 3
    X, W_xh, W_hh, _, h0, batched = _check(X, W_xh, W_hh, None, h0, activation)
    dtype = X.dtype
    d_h = W_hh.shape[0]
    H = v.as_float_array("H", H, X.ndim, dtype)
    v.check_shape("H", H, X.shape[:-1] + (d_h,))
    dH = v.as_float_array("dH", dH, X.ndim, dtype)
    v.check_shape("dH", dH, H.shape)
    use_tanh = activation == "tanh"
    _check_states(X, H, W_xh, W_hh, h0, use_tanh)
    dA = workspace.buffer("dA", H.shape, H.dtype)             # dl/da_t, shaped like H (internal)
    if batched:
        dh0 = _backward_batch(H, W_hh, dH, use_tanh, dA)
    else:
        dh0 = _backward_vec(H, *_carry_operand(W_hh), dH, use_tanh, dA)
    dX, dW_xh, dW_hh = _parameter_products(X, H, W_xh, h0, dA)
    db = dA.reshape(-1, d_h).sum(axis=0)
    if shared_h0:                      # one h0 broadcast over the batch: its gradient sums
        dh0 = dh0.sum(axis=0)
    _check_finite(dX, "dl/dx_t")
    return RNNGrads(dX, dW_xh, dW_hh, db, dh0)
