"""The LSTM, forward and exact backpropagation through time, compiled with Numba.

Weights in PyTorch's layout and gate order, so that ``torch.nn.LSTM``'s
``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0`` and ``bias_hh_l0`` can be passed
as they are. With a_t = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh split in four
blocks of d_h rows:

    i_t = sigma(a_i)   f_t = sigma(a_f)   g_t = tanh(a_g)   o_t = sigma(a_o)
    c_t = f_t * c_{t-1} + i_t * g_t
    h_t = o_t * tanh(c_t)

As in the RNN (``harness.kernels.rnn``) the input products W_ih x_t for every t are
one matrix product before the loop, and each step is one BLAS product with W_hh
(matrix-vector, or matrix-matrix for a batch) into a preallocated buffer. The
gates take two vectorised tanh passes per step (``vmath``): sigma(a) = 1/2 +
tanh(a/2)/2, so i, f, g and o are one pass over 4 d_h values, and tanh(c_t) the
other. Nothing is allocated per step. The tanh runs in the data's own precision
(``vmath.tanh_fast_inplace``): float32 gates in float32 arithmetic, within 2 ulp,
four times as fast as the correctly rounded float64 evaluation (1.0 against 4.4 us
for 1024 values here); at batch 32 that pass was a third of the work besides the
products.

The forward leaves the activated gates (i, f, g, o for every step) in a per-thread
scratch buffer, with copies of what they follow from (X, the weights, b, h0 and H); a
backward whose X, weights, biases, h0 and H equal those copies element by element reads
them there instead of recomputing them, whether or not it was handed the same arrays (an
array changed in place after the forward is not). Any other backward rebuilds them from X and H with one GEMM,
[x_t | h_{t-1}] @ [W_ih | W_hh]^T, which is parallel over t. The backward writes
dl/da_t over the gates in place, so the weight gradients are GEMMs after the loop
over every step at once: [dW_ih | dW_hh] = dA^T [X | H_prev], dX = dA W_ih.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels.blas import dot, matmul
from harness.kernels import steps
from harness.kernels.steps import (add_columns, add_into, add_to, carry_back, carry_buffers,
                                   input_products, matvec, nonfinite, row_buffers, sigmoid)
from harness.kernels.vmath import tanh_fast_inplace

GATES = ("i", "f", "g", "o")    # the order of the four row blocks of W_ih, W_hh, b_ih, b_hh


# --------------------------------------------------------------------------- forward


@njit(cache=True, error_model="numpy")
def _activate_gates(g, b, d_h, scratch):
    # g (4 d_h,): a_t without b on entry; i, f, g, o on exit. sigma(a) = 1/2 + tanh(a/2)/2, so
    # one tanh pass serves all four gates (a/2 is exact in binary floating point).
    # Returns True if a product overflowed: tanh would turn an inf into a plausible +-1
    for j in range(2 * d_h):                       # i, f
        g[j] = (g[j] + b[j]) * 0.5
    for j in range(2 * d_h, 3 * d_h):              # g
        g[j] = g[j] + b[j]
    for j in range(3 * d_h, 4 * d_h):              # o
        g[j] = (g[j] + b[j]) * 0.5
    overflow = nonfinite(g)
    tanh_fast_inplace(g, scratch)
    for j in range(2 * d_h):
        g[j] = 0.5 + 0.5 * g[j]
    for j in range(3 * d_h, 4 * d_h):
        g[j] = 0.5 + 0.5 * g[j]
    return overflow


@njit(cache=True, error_model="numpy")
def _cell(g, c_prev, c, h, tc, d_h, scratch):
    # c_t = f * c_{t-1} + i * g, h_t = o * tanh(c_t), from the activated gates g (4 d_h,)
    for k in range(d_h):
        ck = g[d_h + k] * c_prev[k] + g[k] * g[2 * d_h + k]
        c[k] = ck
        tc[k] = ck
    tanh_fast_inplace(tc, scratch)
    for k in range(d_h):
        h[k] = g[3 * d_h + k] * tc[k]


@njit(cache=True, error_model="numpy")
def _forward_vec(X, W_ih, W_hh, b, h0, c0, vec_left, H, C, G):
    # X (T, d_in), W_ih (4 d_h, d_in), b = b_ih + b_hh (4 d_h,), h0, c0 (d_h,)
    # -> H, C (T, d_h) and G (T, 4 d_h), the activated gates i, f, g, o of every step.
    # W_hh is (4 d_h, d_h), or its contiguous transpose (d_h, 4 d_h) when vec_left.
    # Returns the first step whose pre-activations overflowed, -1 if none
    T, d_h = H.shape
    input_products(X, W_ih, G)
    tc = np.empty(d_h, dtype=G.dtype)
    scratch = np.empty(4 * d_h, dtype=np.int64)
    a = np.empty(4 * d_h, dtype=G.dtype)
    h_prev, c_prev = h0, c0
    bad = -1
    for t in range(T):
        matvec(W_hh, h_prev, vec_left, a)  # a = W_hh h_{t-1}: the step that must wait
        g = G[t]
        add_into(g, a)
        if _activate_gates(g, b, d_h, scratch) and bad < 0:
            bad = t
        _cell(g, c_prev, C[t], H[t], tc, d_h, scratch)
        h_prev, c_prev = H[t], C[t]
    return bad, 0


@njit(cache=True, error_model="numpy")
def _forward_batch(X, W_ih, W_hhT, b, h0, c0, cols, H, C, G):
    # X (B, T, d_in), h0, c0 (B, d_h) -> H, C (B, T, d_h), G (B, T, 4 d_h), all in the
    # caller's batch-major layout: each step gathers its B rows into contiguous buffers for the
    # GEMM. W_hhT is W_hh^T made contiguous, (d_h, 4 d_h): (B, d_h) @ (d_h, 4 d_h) is OpenBLAS's
    # faster form here. cols is not read (every loop takes the same arguments; see steps.loop).
    # Returns the first (step, sequence) whose pre-activations overflowed
    B, T, d_h = H.shape
    input_products(X, W_ih, G)
    tc = np.empty(d_h, dtype=G.dtype)
    a, h, scratch = row_buffers(h0, 4 * d_h, 4 * d_h)
    bad_t, bad_r = -1, -1
    for t in range(T):
        dot(h, W_hhT, a)                   # (B, d_h) @ (d_h, 4 d_h): one GEMM per step
        for r in range(B):
            g = G[r, t]
            add_into(g, a[r])
            if _activate_gates(g, b, d_h, scratch) and bad_t < 0:
                bad_t, bad_r = t, r
            c_prev = C[r, t - 1] if t > 0 else c0[r]
            _cell(g, c_prev, C[r, t], H[r, t], tc, d_h, scratch)
            h[r, :] = H[r, t]
    return bad_t, bad_r


@njit(cache=True, error_model="numpy")
def _forward_batch_cols(X, W_ih, W_hh, b, h0, c0, cols, H, C, G):
    # As _forward_batch, with the step's product as columns, a (4 d_h, B) = W_hh h^T: for
    # float32, OpenBLAS runs (4 d_h, d_h) @ (d_h, B) about 1.5 times as fast as
    # (B, d_h) @ (d_h, 4 d_h) (B = 32, d_h = 256, one thread); for float64 the rows form is
    # the faster. h stays (B, d_h) rows (h.T is the F-contiguous operand), and a's columns are
    # added to the gates' rows G[r, t] 8 sequences at a time (``steps.add_columns``), so that
    # everything after the product runs on contiguous rows, as in _forward_batch
    B, T, d_h = H.shape
    input_products(X, W_ih, G)
    tc = np.empty(d_h, dtype=G.dtype)
    a = np.empty((4 * d_h, B), dtype=G.dtype)
    h = h0.copy()                          # (B, d_h): h_{t-1}, then h_t
    scratch = np.empty(4 * d_h, dtype=np.int64)
    bad_t, bad_r = -1, -1
    for t in range(T):
        dot(W_hh, h.T, a)                  # (4 d_h, d_h) @ (d_h, B): one GEMM per step
        add_columns(G, t, a)               # G[r, t] += a[:, r]
        for r in range(B):
            g = G[r, t]
            if _activate_gates(g, b, d_h, scratch) and bad_t < 0:
                bad_t, bad_r = t, r
            c_prev = C[r, t - 1] if t > 0 else c0[r]
            _cell(g, c_prev, C[r, t], H[r, t], tc, d_h, scratch)
            h[r, :] = H[r, t]
    return bad_t, bad_r


@njit(cache=True, error_model="numpy")
def _gates_from_products(G, b, d_h):
    # G (n, 4 d_h): [x_t | h_{t-1}] @ [W_ih | W_hh]^T on entry, the activated gates on exit
    scratch = np.empty(4 * d_h, dtype=np.int64)
    for r in range(G.shape[0]):
        _activate_gates(G[r], b, d_h, scratch)


# -------------------------------------------------------------------------- backward

@njit(cache=True, error_model="numpy")
def _cell_backward(g, c, c_prev, dh, dc, dC_t, use_dC, tc, d_h, scratch):
    # Reverses h = o * tanh(c), c = f * c_prev + i * g and the four activations, for one step of
    # one sequence. g (4 d_h,): i, f, g, o on entry, dl/da on exit; dh: dl/dh_t in full;
    # dc: dl/dc_t from step t+1 on entry, dl/dc_{t-1} through this step on exit
    for k in range(d_h):
        tc[k] = c[k]
    tanh_fast_inplace(tc, scratch)
    for k in range(d_h):
        i = g[k]
        f = g[d_h + k]
        gg = g[2 * d_h + k]
        o = g[3 * d_h + k]
        t = tc[k]
        dck = dc[k] + dh[k] * o * (1.0 - t * t)        # h = o tanh(c)
        if use_dC:
            dck += dC_t[k]
        g[k] = dck * gg * i * (1.0 - i)               # sigma' = s (1 - s)
        g[d_h + k] = dck * c_prev[k] * f * (1.0 - f)
        g[2 * d_h + k] = dck * i * (1.0 - gg * gg)    # tanh' = 1 - g^2
        g[3 * d_h + k] = dh[k] * t * o * (1.0 - o)
        dc[k] = dck * f                               # c = f c_prev + ...


@njit(cache=True, error_model="numpy")
def _backward_vec(C, c0, dH, dC, use_dC, M, vec_left, G):
    # C, dH, dC (T, d_h); G (T, 4 d_h): the gates on entry, dA = dl/da_t on exit.
    # Returns (dl/dh0, dl/dc0). M is W_hh (4 d_h, d_h) when vec_left (dh = da W_hh), else
    # W_hh^T made contiguous (d_h, 4 d_h)
    T, d_h = C.shape
    scratch = np.empty(d_h, dtype=np.int64)
    tc = np.empty(d_h, dtype=C.dtype)
    carry = np.zeros(d_h, dtype=C.dtype)       # W_hh^T da_{t+1}: what h_t passes back
    dh = np.empty(d_h, dtype=C.dtype)
    dc = np.zeros(d_h, dtype=C.dtype)
    for t in range(T - 1, -1, -1):
        add_to(dh, dH[t], carry)
        c_prev = C[t - 1] if t > 0 else c0
        _cell_backward(G[t], C[t], c_prev, dh, dc, dC[t], use_dC, tc, d_h, scratch)
        matvec(M, G[t], vec_left, carry)       # carry = W_hh^T da_t
    return carry, dc


@njit(cache=True, error_model="numpy")
def _backward_batch(C, c0, dH, dC, use_dC, M, cols, G):
    # C, dH, dC (B, T, d_h), c0 (B, d_h); G (B, T, 4 d_h): gates in, dA out. Returns
    # (dl/dh0, dl/dc0), each (B, d_h). M is W_hh, or W_hh^T made contiguous when cols
    # (see carry_back)
    B, T, d_h = C.shape
    carry, dh, da, cc = carry_buffers(B, 4 * d_h, d_h, cols, C)
    scratch = np.empty(d_h, dtype=np.int64)
    tc = np.empty(d_h, dtype=C.dtype)
    dc = np.zeros((B, d_h), dtype=C.dtype)
    for t in range(T - 1, -1, -1):
        for r in range(B):
            add_to(dh, dH[r, t], carry[r])
            c_prev = C[r, t - 1] if t > 0 else c0[r]
            _cell_backward(G[r, t], C[r, t], c_prev, dh, dc[r], dC[r, t], use_dC, tc, d_h,
                           scratch)
        carry_back(G, t, M, cols, da, cc, carry)
    return carry, dc


# ---------------------------------------------------------------------------- public

class LSTMGrads(NamedTuple):
    dX: np.ndarray      # like X
    dW_ih: np.ndarray   # (4 d_h, d_in)
    dW_hh: np.ndarray   # (4 d_h, d_h)
    db_ih: np.ndarray   # (4 d_h,), also when b_ih was None (the gradient at a zero bias)
    db_hh: np.ndarray   # (4 d_h,), equal to db_ih: both biases enter a_t the same way
    dh0: np.ndarray     # like h0: (d_h,) unbatched, (B, d_h) batched, (d_h,) if one h0 was shared
    dc0: np.ndarray     # like c0, likewise


def _check(X, W_ih, W_hh, b_ih, b_hh, h0, c0):
    X, batched, B, T, d_in, d_h, W_ih, W_hh = steps.gated_weights(X, W_ih, W_hh, GATES,
                                                                   "torch.nn.LSTM")
    dtype = X.dtype
    b = np.zeros(4 * d_h, dtype=dtype)
    babs = np.zeros(4 * d_h, dtype=dtype)            # |b_ih| + |b_hh|, for the states check
    for name, bias in (("b_ih", b_ih), ("b_hh", b_hh)):
        if bias is not None:
            bias = v.shaped(name, bias, (4 * d_h,), dtype)
            b += bias
            babs += np.abs(bias)
    h0 = v.initial_state("h0", h0, batched, B, d_h, dtype)
    c0 = v.initial_state("c0", c0, batched, B, d_h, dtype)
    # H, C, the gates (4 d_h), [x_t | h_{t-1}], dX and the kept copies of X and H, per step
    v.check_memory(B * T * (8 * d_h + 3 * d_in) * X.itemsize, "the LSTM's state and gate buffers",
                   inputs=(("X", X),))
    return v.contiguous("X", X), W_ih, W_hh, b, babs, h0, c0, batched


_FORWARD = {"cols": _forward_batch_cols, "rows": _forward_batch, "vec": _forward_vec}
_BACKWARD = {"cols": _backward_batch, "rows": _backward_batch, "vec": _backward_vec}


def _check_states(X, H, C, W_ih, W_hh, b, babs, h0, c0):
    """Cheap check that H and C came from this forward: the first two steps of every sequence
    are recomputed from X, the weights and the states entering them (h0, c0, then H and C's
    first step), one product for all of them, and must agree to within the rounding of the
    dtype they were computed in."""
    x, hp, ax, ah, sx, sh, got_h = steps.first_steps(X, H, W_ih, W_hh, h0)
    C3 = C.reshape(-1, *C.shape[-2:])
    B, n, d_h = C3.shape[0], len(x) // C3.shape[0], C3.shape[-1]
    cp = steps.entering_states(C3, c0, n).astype(np.float64)
    a = ax + ah + b                                                           # (steps B, 4 d_h)
    i, f = sigmoid(a[:, :d_h]), sigmoid(a[:, d_h:2 * d_h])
    g, o = np.tanh(a[:, 2 * d_h:3 * d_h]), sigmoid(a[:, 3 * d_h:])
    c = f * cp + i * g
    h = o * np.tanh(c)
    # rounding: each pre-activation is off by ~eps times the sum of its |terms|, at most
    # ||W_j|| ||x|| + ||W_hh j|| ||h|| + |b_j| (Cauchy-Schwarz); the derivatives of sigma and
    # tanh are at most 1, so c is off by that times (|c_prev| + 2), and h by c's and o's
    S = (sx + sh + babs).reshape(-1, 4, d_h).max(axis=1) + 1.0               # (steps B, d_h)
    eps = float(np.finfo(H.dtype).eps)
    tol_c = 64 * eps * S * (np.abs(cp) + 3.0)
    tol_h = tol_c + 64 * eps * S
    got_c = steps.step_major(C3, n)
    bad_c = np.abs(got_c - c) > tol_c
    bad_h = np.abs(got_h - h) > tol_h
    if not (bad_c.any() or bad_h.any()):
        return
    row, k, t, of = steps.first_off(bad_c | bad_h, B, H.ndim == 3)
    name, want, held = ("C", c, got_c) if bad_c[row, k] else ("H", h, got_h)
    raise ValueError(
        f"{name} does not follow from X, the weights, the biases, h0 and c0: at step t={t + 1}{of} "
        f"the forward gives {want[row, k]:.6g} where {name} holds {held[row, k]:.6g}. Pass "
        f"backward the H and C that forward returned for these same inputs (h0=None and c0=None "
        f"mean zeros).")


def _inputs_and_previous_states(X, H, h0):
    """Z = [x_t | h_{t-1}] for every (sequence, step), (B T, d_in + d_h), in a scratch buffer:
    the right operand of every weight gradient, and the left one when gates are recomputed."""
    X3, H3 = X.reshape(-1, *X.shape[-2:]), H.reshape(-1, *H.shape[-2:])
    B, T, d_in = X3.shape
    d_h = H3.shape[-1]
    Z = workspace.buffer("lstm_Z", (B, T, d_in + d_h), X.dtype)
    Z[:, :, :d_in] = X3
    Z[:, 1:, d_in:] = H3[:, :-1]
    Z[:, 0, d_in:] = h0.reshape(B, d_h)
    return Z.reshape(B * T, d_in + d_h)


def forward(X, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, c0=None):
    """Run the LSTM over every position and return (H, C), every hidden and cell state.

    X is (T, d_in) or (B, T, d_in); W_ih (4 d_h, d_in) and W_hh (4 d_h, d_h), the gates i,
    f, g, o stacked as in ``torch.nn.LSTM``; b_ih, b_hh (4 d_h,), zeros when not given;
    h0, c0 (d_h,) or (B, d_h), zeros when not given (a (d_h,) state is shared by every
    sequence of a batch). Returns H and C, each (T, d_h) or (B, T, d_h), in X's dtype.
    """
    args = (X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    X, W_ih, W_hh, b, _, h0, c0, batched = _check(*args)
    d_h = W_hh.shape[1]
    H = np.empty(X.shape[:-1] + (d_h,), dtype=X.dtype)
    C = np.empty_like(H)
    workspace.keep("lstm", None)                    # the gates buffer is about to change
    G = workspace.buffer("lstm_G", X.shape[:-1] + (4 * d_h,), X.dtype)
    kind, M, flag = steps.loop(W_hh, batched, forward=True)
    bad = _FORWARD[kind](X, W_ih, M, b, h0, c0, flag, H, C, G)
    steps.raise_if_overflowed(bad, X, "the LSTM", "W_ih x_t + W_hh h_(t-1) + b")
    workspace.keep("lstm", (steps.keep_inputs("lstm", (X, W_ih, W_hh, b, h0, H)), G))
    return H, C


def backward(X, H, C, W_ih, W_hh, dH, b_ih=None, b_hh=None, h0=None, c0=None, dC=None):
    """Full backpropagation through time from upstream gradients dH (and dC), shaped like H.

    H and C must be the states that ``forward`` returned for these inputs, with the same
    biases, h0 and c0. What is checked, cheaply: the first two steps of every sequence
    follow from X, the weights, the biases, h0 and c0. What cannot be checked: later steps,
    and whether dH is the gradient meant. dC, the gradient with respect to the cell states,
    is zero when not given. Returns an ``LSTMGrads`` with dX, dW_ih, dW_hh, db_ih, db_hh,
    dh0 and dc0.
    """
    args = (X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    kept = workspace.kept("lstm")                   # the forward's gates, if these are its values
    batched_in = np.ndim(X) == 3
    shared = [s is not None and np.ndim(s) == 1 and batched_in for s in (h0, c0)]
    X, W_ih, W_hh, b, babs, h0, c0, batched = _check(*args)
    dtype = X.dtype
    d_h = W_hh.shape[1]
    shape = X.shape[:-1] + (d_h,)
    H, C, dH = (v.shaped(name, a, shape, dtype) for name, a in (("H", H), ("C", C), ("dH", dH)))
    use_dC = dC is not None
    if use_dC:
        dC = v.shaped("dC", dC, shape, dtype)
    else:
        dC = dH                                     # not read: use_dC is False
    _check_states(X, H, C, W_ih, W_hh, b, babs, h0, c0)
    workspace.keep("lstm", None)                    # dA is written over the gates below
    Z = _inputs_and_previous_states(X, H, h0)       # (B T, d_in + d_h)
    gshape = X.shape[:-1] + (4 * d_h,)
    kept = steps.kept_buffers(kept, (X, W_ih, W_hh, b, h0, H), gshape, dtype)
    if kept is not None:
        G, = kept                                   # the forward's gates, as it left them
    else:
        G = workspace.buffer("lstm_G", gshape, dtype)
        G2 = G.reshape(-1, 4 * d_h)
        matmul(Z, np.concatenate([W_ih, W_hh], axis=1).T, G2)   # a_t - b for every t: one GEMM
        _gates_from_products(G2, b, d_h)
    kind, M, flag = steps.loop(W_hh, batched, forward=False)
    dh0, dc0 = _BACKWARD[kind](C, c0, dH, dC, use_dC, M, flag, G)
    dA = G.reshape(-1, 4 * d_h)                     # (B T, 4 d_h): dl/da for every step
    dW = matmul(dA.T, Z)                            # [dW_ih | dW_hh]: sums over every step at once
    d_in = X.shape[-1]
    dW_ih, dW_hh = np.ascontiguousarray(dW[:, :d_in]), np.ascontiguousarray(dW[:, d_in:])
    dX = matmul(dA, W_ih).reshape(X.shape)
    db_ih = dA.sum(axis=0)
    if shared[0]:                      # one state broadcast over the batch: its gradient sums
        dh0 = dh0.sum(axis=0)
    if shared[1]:
        dc0 = dc0.sum(axis=0)
    steps.check_gradients("the LSTM", dX, dW_ih, dW_hh, ("dH", "dC"))
    return LSTMGrads(dX, dW_ih, dW_hh, db_ih, db_ih.copy(), dh0, dc0)
