"""The GRU, forward and exact backpropagation through time, compiled with Numba.

Weights in PyTorch's layout and gate order, so that ``torch.nn.GRU``'s ``weight_ih_l0``,
``weight_hh_l0``, ``bias_ih_l0`` and ``bias_hh_l0`` can be passed as they are. With
the rows split in three blocks of d_h (r, z, n):

    r_t = sigma(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
    z_t = sigma(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
    n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
    h_t = (1 - z_t) * n_t + z_t * h_{t-1}

The input products W_ih x_t for every t are one matrix product before the loop, and
each step is one BLAS product with W_hh into a preallocated buffer, then two vectorised
tanh passes (``vmath``), one for r and z (sigma(a) = 1/2 + tanh(a/2)/2) and one for n,
which needs r first. Nothing is allocated per step. The tanh runs in the data's own
precision (``vmath.tanh_fast_inplace``, as the LSTM's): float32 in float32 arithmetic,
within 2 ulp and four times as fast as the correctly rounded float64 evaluation.

The forward leaves r, z, n and W_hn h_{t-1} + b_hn (what dr needs) in per-thread
scratch buffers, with copies of what they follow from (X, the weights, the biases, h0
and H); a backward whose inputs equal those copies element by element reads them there,
whether or not it was handed the same arrays (an array changed in place after the
forward is not). Any other rebuilds them from X and H with
two GEMMs that are parallel over t. The pre-activation gradients differ on the two
sides only in the n block (dl/d(W_hn h + b_hn) = r * dl/d(n's argument)), so the
backward keeps the hidden side's in place of the gates, makes dW_hh from it, then
writes the input side's n block over it for dW_ih and dX: every weight gradient is
one GEMM after the loop over every step at once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels.blas import dot, matmul
from harness.kernels import steps
from harness.kernels.steps import (add_to, carry_back, carry_buffers, input_products, matvec,
                                   nonfinite, row_buffers, sigmoid)
from harness.kernels.vmath import tanh_fast_inplace

GATES = ("r", "z", "n")    # the order of the three row blocks of W_ih, W_hh, b_ih, b_hh


# --------------------------------------------------------------------------- forward


@njit(cache=True, error_model="numpy")
def _gates(g, a, hn, b_ih, b_hh, d_h, scratch):
    # g (3 d_h,): W_ih x_t on entry, r, z, n on exit; a (3 d_h,): W_hh h_{t-1};
    # hn (d_h,) <- W_hn h_{t-1} + b_hn. Returns True if a product overflowed (tanh would turn
    # an inf into a plausible +-1)
    for j in range(2 * d_h):                     # sigma(u) = 1/2 + tanh(u/2)/2; u/2 is exact
        g[j] = (g[j] + b_ih[j] + a[j] + b_hh[j]) * 0.5
    rz = g[:2 * d_h]
    overflow = nonfinite(rz)
    tanh_fast_inplace(rz, scratch)
    for j in range(2 * d_h):
        rz[j] = 0.5 + 0.5 * rz[j]
    for k in range(d_h):
        hn[k] = a[2 * d_h + k] + b_hh[2 * d_h + k]
        g[2 * d_h + k] += b_ih[2 * d_h + k] + g[k] * hn[k]
    overflow |= nonfinite(g[2 * d_h:])          # r * inf or inf - inf
    tanh_fast_inplace(g[2 * d_h:], scratch)
    return overflow


@njit(cache=True, error_model="numpy")
def _step(g, a, hn, b_ih, b_hh, h_prev, h, d_h, scratch):
    # One step of one sequence: the gates (see _gates), then h (d_h,) <- h_t =
    # (1 - z) * n + z * h_{t-1}. Returns True if a product overflowed
    overflow = _gates(g, a, hn, b_ih, b_hh, d_h, scratch)
    for k in range(d_h):
        z = g[d_h + k]
        h[k] = (1.0 - z) * g[2 * d_h + k] + z * h_prev[k]
    return overflow


@njit(cache=True, error_model="numpy")
def _forward_vec(X, W_ih, W_hh, b_ih, b_hh, h0, vec_left, H, G, N):
    # X (T, d_in), W_ih (3 d_h, d_in), b_ih, b_hh (3 d_h,), h0 (d_h,) -> H (T, d_h),
    # G (T, 3 d_h): r, z, n of every step, N (T, d_h): W_hn h_{t-1} + b_hn.
    # W_hh is (3 d_h, d_h), or its contiguous transpose (d_h, 3 d_h) when vec_left.
    # Returns the first step whose pre-activations overflowed, -1 if none
    T, d_h = H.shape
    input_products(X, W_ih, G)
    scratch = np.empty(2 * d_h, dtype=np.int64)
    a = np.empty(3 * d_h, dtype=G.dtype)
    h_prev = h0
    bad = -1
    for t in range(T):
        matvec(W_hh, h_prev, vec_left, a)  # a = W_hh h_{t-1}: the step that must wait
        if _step(G[t], a, N[t], b_ih, b_hh, h_prev, H[t], d_h, scratch) and bad < 0:
            bad = t
        h_prev = H[t]
    return bad, 0


@njit(cache=True, error_model="numpy")
def _forward_batch(X, W_ih, W_hhT, b_ih, b_hh, h0, cols, H, G, N):
    # X (B, T, d_in), h0 (B, d_h) -> H (B, T, d_h), G (B, T, 3 d_h), N (B, T, d_h), in the
    # caller's batch-major layout: each step gathers its B rows into a contiguous buffer for the
    # GEMM. W_hhT is W_hh^T made contiguous, (d_h, 3 d_h); cols is not read (every loop takes
    # the same arguments; see steps.loop). Returns the first (step, sequence) whose pre-activations
    # overflowed
    B, T, d_h = H.shape
    input_products(X, W_ih, G)
    a, h, scratch = row_buffers(h0, 3 * d_h, 2 * d_h)
    bad_t, bad_r = -1, -1
    for t in range(T):
        dot(h, W_hhT, a)                   # (B, d_h) @ (d_h, 3 d_h): one GEMM per step
        for r in range(B):
            if _step(G[r, t], a[r], N[r, t], b_ih, b_hh, h[r], H[r, t], d_h, scratch) and bad_t < 0:
                bad_t, bad_r = t, r
            h[r, :] = H[r, t]
    return bad_t, bad_r


@njit(cache=True, error_model="numpy")
def _gates_from_products(G, P, N, b_ih, b_hh, d_h):
    # G (n, 3 d_h): W_ih x_t on entry, r, z, n on exit; P (n, 3 d_h): W_hh h_{t-1}; N (n, d_h)
    scratch = np.empty(2 * d_h, dtype=np.int64)
    for r in range(G.shape[0]):
        _gates(G[r], P[r], N[r], b_ih, b_hh, d_h, scratch)


# -------------------------------------------------------------------------- backward

@njit(cache=True, error_model="numpy")
def _step_backward(g, hn, h_prev, dh, direct, d_h):
    # Reverses one step of one sequence. g (3 d_h,): r, z, n on entry, dl/d(W_hh h_{t-1} + b_hh)
    # on exit; hn (d_h,): W_hn h_{t-1} + b_hn on entry, dl/d(n's argument) on exit (the input
    # side's n block); dh: dl/dh_t in full; direct <- dl/dh_{t-1} through z * h_{t-1}
    for k in range(d_h):
        r = g[k]
        z = g[d_h + k]
        n = g[2 * d_h + k]
        dn = dh[k] * (1.0 - z) * (1.0 - n * n)     # h = (1 - z) n + z h_prev, tanh' = 1 - n^2
        g[k] = dn * hn[k] * r * (1.0 - r)           # n's argument holds r * hn; sigma' = s (1 - s)
        g[d_h + k] = dh[k] * (h_prev[k] - n) * z * (1.0 - z)
        g[2 * d_h + k] = dn * r
        hn[k] = dn
        direct[k] = dh[k] * z


@njit(cache=True, error_model="numpy")
def _backward_vec(H, h0, dH, M, vec_left, G, N):
    # H, dH (T, d_h); G (T, 3 d_h), N (T, d_h): the forward's gates and W_hn h + b_hn on entry,
    # the hidden and input sides' pre-activation gradients on exit (see _step_backward).
    # Returns dl/dh0. M is W_hh (3 d_h, d_h) when vec_left, else W_hh^T made contiguous
    T, d_h = H.shape
    carry = np.zeros(d_h, dtype=H.dtype)       # dl/dh_t from step t+1
    dh = np.empty(d_h, dtype=H.dtype)
    direct = np.empty(d_h, dtype=H.dtype)
    for t in range(T - 1, -1, -1):
        add_to(dh, dH[t], carry)
        h_prev = H[t - 1] if t > 0 else h0
        _step_backward(G[t], N[t], h_prev, dh, direct, d_h)
        matvec(M, G[t], vec_left, carry)       # carry = W_hh^T dl/da_h + z dh
        for k in range(d_h):
            carry[k] += direct[k]
    return carry


@njit(cache=True, error_model="numpy")
def _backward_batch(H, h0, dH, M, cols, G, N):
    # H, dH (B, T, d_h), h0 (B, d_h); G (B, T, 3 d_h), N (B, T, d_h) as in _backward_vec.
    # Returns dl/dh0 (B, d_h). M is W_hh, or W_hh^T made contiguous when cols (see carry_back)
    B, T, d_h = H.shape
    carry, dh, da, cc = carry_buffers(B, 3 * d_h, d_h, cols, H)
    direct = np.empty((B, d_h), dtype=H.dtype)
    for t in range(T - 1, -1, -1):
        for r in range(B):
            add_to(dh, dH[r, t], carry[r])
            h_prev = H[r, t - 1] if t > 0 else h0[r]
            _step_backward(G[r, t], N[r, t], h_prev, dh, direct[r], d_h)
        carry_back(G, t, M, cols, da, cc, carry)
        for r in range(B):
            for k in range(d_h):
                carry[r, k] += direct[r, k]
    return carry


# ---------------------------------------------------------------------------- public

class GRUGrads(NamedTuple):
    dX: np.ndarray      # like X
    dW_ih: np.ndarray   # (3 d_h, d_in)
    dW_hh: np.ndarray   # (3 d_h, d_h)
    db_ih: np.ndarray   # (3 d_h,), also when b_ih was None (the gradient at a zero bias)
    db_hh: np.ndarray   # (3 d_h,); differs from db_ih in the n block (b_hn sits inside r *)
    dh0: np.ndarray     # like h0: (d_h,) unbatched, (B, d_h) batched, (d_h,) if one h0 was shared


def _check(X, W_ih, W_hh, b_ih, b_hh, h0):
    X, batched, B, T, d_in, d_h, W_ih, W_hh = steps.gated_weights(X, W_ih, W_hh, GATES,
                                                                   "torch.nn.GRU")
    dtype = X.dtype
    biases = [v.bias(name, bias, 3 * d_h, dtype) for name, bias in (("b_ih", b_ih), ("b_hh", b_hh))]
    h0 = v.initial_state("h0", h0, batched, B, d_h, dtype)
    # H, the gates (3 d_h), W_hn h + b_hn, h_{t-1}, W_hh h_{t-1} (3 d_h), dX and the kept
    # copies of X and H, per step
    v.check_memory(B * T * (10 * d_h + 2 * d_in) * X.itemsize, "the GRU's state and gate buffers",
                   inputs=(("X", X),))
    return v.contiguous("X", X), W_ih, W_hh, biases[0], biases[1], h0, batched


_FORWARD = {"rows": _forward_batch, "vec": _forward_vec}
_BACKWARD = {"rows": _backward_batch, "vec": _backward_vec}


def _check_states(X, H, W_ih, W_hh, b_ih, b_hh, h0):
    """Cheap check that H came from this forward: the first two steps of every sequence are
    recomputed from X, the weights and the states entering them (h0, then H's first step), one
    product for all of them, and must agree to within the rounding of the dtype they were
    computed in."""
    x, hp, ax, ah, sx, sh, got = steps.first_steps(X, H, W_ih, W_hh, h0)
    B, d_h = len(x) // min(2, H.shape[-2]), H.shape[-1]
    ax, ah, hp = ax + b_ih, ah + b_hh, hp.astype(np.float64)                 # (steps B, 3 d_h)
    r = sigmoid(ax[:, :d_h] + ah[:, :d_h])
    z = sigmoid(ax[:, d_h:2 * d_h] + ah[:, d_h:2 * d_h])
    hn = ah[:, 2 * d_h:]
    n = np.tanh(ax[:, 2 * d_h:] + r * hn)
    h = (1.0 - z) * n + z * hp
    # rounding: each product is off by ~eps times the sum of its |terms|, at most
    # ||W_j|| ||x|| + |b_j| (Cauchy-Schwarz), and the derivatives of sigma and tanh are at
    # most 1/4 and 1
    sx, sh = sx + np.abs(b_ih), sh + np.abs(b_hh)
    s_r = sx[:, :d_h] + sh[:, :d_h]
    s_z = sx[:, d_h:2 * d_h] + sh[:, d_h:2 * d_h]
    s_n = sx[:, 2 * d_h:] + r * sh[:, 2 * d_h:] + np.abs(hn) * s_r
    tol = 64 * float(np.finfo(H.dtype).eps) * (s_z * np.abs(n - hp) + s_n + np.abs(hp) + 1.0)
    bad = np.abs(got - h) > tol
    if not bad.any():
        return
    row, k, t, of = steps.first_off(bad, B, H.ndim == 3)
    raise ValueError(
        f"H does not follow from X, the weights, the biases and h0: at step t={t + 1}{of} the "
        f"forward gives {h[row, k]:.6g} where H holds {got[row, k]:.6g}. Pass backward the H "
        f"that forward returned for these same inputs (h0=None means zeros).")


def _previous_states(H, h0):
    """h_{t-1} for every (sequence, step), (B T, d_h), in a scratch buffer: the right operand of
    dW_hh, and the left one when the gates are recomputed."""
    H3 = H.reshape(-1, *H.shape[-2:])
    B, T, d_h = H3.shape
    P = workspace.buffer("gru_Hprev", (B, T, d_h), H.dtype)
    P[:, 1:] = H3[:, :-1]
    P[:, 0] = h0.reshape(B, d_h)
    return P.reshape(B * T, d_h)


def forward(X, W_ih, W_hh, b_ih=None, b_hh=None, h0=None):
    """Run the GRU over every position and return H, every hidden state.

    X is (T, d_in) or (B, T, d_in); W_ih (3 d_h, d_in) and W_hh (3 d_h, d_h), the gates r,
    z, n stacked as in ``torch.nn.GRU``; b_ih, b_hh (3 d_h,), zeros when not given; h0
    (d_h,) or (B, d_h), zeros when not given (a (d_h,) h0 is shared by every sequence of a
    batch). Returns H, (T, d_h) or (B, T, d_h), in X's dtype.
    """
    args = (X, W_ih, W_hh, b_ih, b_hh, h0)
    X, W_ih, W_hh, b_ih, b_hh, h0, batched = _check(*args)
    d_h = W_hh.shape[1]
    H = np.empty(X.shape[:-1] + (d_h,), dtype=X.dtype)
    workspace.keep("gru", None)                     # the gate buffers are about to change
    G = workspace.buffer("gru_G", X.shape[:-1] + (3 * d_h,), X.dtype)
    N = workspace.buffer("gru_N", H.shape, X.dtype)
    kind, M, flag = steps.loop(W_hh, batched, forward=True, float32_cols=False)
    bad = _FORWARD[kind](X, W_ih, M, b_ih, b_hh, h0, flag, H, G, N)
    steps.raise_if_overflowed(bad, X, "the GRU",
                              "(W_ih x_t + b_ih, W_hh h_(t-1) + b_hh and their sums)")
    workspace.keep("gru", (steps.keep_inputs("gru", (X, W_ih, W_hh, b_ih, b_hh, h0, H)), G, N))
    return H


def backward(X, H, W_ih, W_hh, dH, b_ih=None, b_hh=None, h0=None):
    """Full backpropagation through time from an upstream gradient dH (shaped like H).

    H must be the states that ``forward`` returned for these inputs, with the same biases
    and h0. What is checked, cheaply: the first two steps of every sequence follow from X,
    the weights, the biases and h0. What cannot be checked: later steps, and whether dH is
    the gradient meant. Returns a ``GRUGrads`` with dX, dW_ih, dW_hh, db_ih, db_hh and dh0.
    """
    args = (X, W_ih, W_hh, b_ih, b_hh, h0)
    kept = workspace.kept("gru")                    # the forward's gates, if these are its values
    shared_h0 = h0 is not None and np.ndim(h0) == 1 and np.ndim(X) == 3
    X, W_ih, W_hh, b_ih, b_hh, h0, batched = _check(*args)
    dtype = X.dtype
    d_h = W_hh.shape[1]
    shape = X.shape[:-1] + (d_h,)
    H = v.shaped("H", H, shape, dtype)
    dH = v.shaped("dH", dH, shape, dtype)
    _check_states(X, H, W_ih, W_hh, b_ih, b_hh, h0)
    workspace.keep("gru", None)                     # the gradients are written over the gates
    Hprev = _previous_states(H, h0)                 # (B T, d_h)
    gshape = X.shape[:-1] + (3 * d_h,)
    kept = steps.kept_buffers(kept, (X, W_ih, W_hh, b_ih, b_hh, h0, H), gshape, dtype)
    if kept is not None:
        G, N = kept                                 # the forward's gates, as it left them
    else:
        G = workspace.buffer("gru_G", gshape, dtype)
        N = workspace.buffer("gru_N", shape, dtype)
        G2 = G.reshape(-1, 3 * d_h)
        P = workspace.buffer("gru_P", G2.shape, dtype)
        matmul(X.reshape(-1, X.shape[-1]), W_ih.T, G2)   # W_ih x_t for every t: one GEMM
        matmul(Hprev, W_hh.T, P)                          # W_hh h_{t-1} for every t: another
        _gates_from_products(G2, P, N.reshape(-1, d_h), b_ih, b_hh, d_h)
    kind, M, flag = steps.loop(W_hh, batched, forward=False, float32_cols=False)
    dh0 = _BACKWARD[kind](H, h0, dH, M, flag, G, N)
    dA = G.reshape(-1, 3 * d_h)                     # (B T, 3 d_h): the hidden side's dl/da
    dW_hh = matmul(dA.T, Hprev)                     # sums over every step at once
    db_hh = dA.sum(axis=0)
    dA[:, 2 * d_h:] = N.reshape(-1, d_h)            # now the input side's: n's block differs
    dW_ih = matmul(dA.T, X.reshape(-1, X.shape[-1]))
    dX = matmul(dA, W_ih).reshape(X.shape)
    db_ih = dA.sum(axis=0)
    if shared_h0:                      # one h0 broadcast over the batch: its gradient sums
        dh0 = dh0.sum(axis=0)
    steps.check_gradients("the GRU", dX, dW_ih, dW_hh, ("dH",))
    return GRUGrads(dX, dW_ih, dW_hh, db_ih, db_hh, dh0)
