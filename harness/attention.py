"""Self-attention and Bahdanau's additive attention, forward and backward.

Self-attention (the self-attention lesson, row-stacked X):

    Q = X Wq,  K = X Wk,  V = X Wv
    A = row-softmax(Q K^T / sqrt(d_k))       (causal: position i sees j <= i)
    Y = A V

Additive attention (the Bahdanau lesson):

    p_ij = Wsa s_i + Wha h_j,  e_ij = va . tanh(p_ij),  alpha = row-softmax(e),  c_i = sum_j alpha_ij h_j

Every matrix product goes to BLAS into a preallocated buffer; the T x T work that
is not a product (the row softmax, the tanh grid) is a compiled loop that
vectorises (see ``_vmath``). The forward keeps what the backward needs: A for
self-attention; the alignment backward recomputes its small grid.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
from numba import njit

from harness import _validate as v
from harness import _workspace
from harness._blas import matmul
from harness._vmath import exp_shifted_inplace, row_dot, row_max, row_sum, tanh_inplace

NONLINEARITIES = ("tanh", None)


# ------------------------------------------------------------------ row softmax

@njit(cache=True, error_model="numpy")
def _softmax_rows_inplace(E, scale, causal, scratch):
    # E (T_q, T_k) raw scores -> row-softmax(scale * E) in place; causal zeroes j > i.
    # The row maximum is subtracted first: a constant per row changes nothing but overflow.
    # scratch: int64 (T_k,), the bits of the powers of two in exp.
    n_rows, n_cols = E.shape
    for i in range(n_rows):
        row = E[i]
        width = min(i + 1, n_cols) if causal else n_cols
        exp_shifted_inplace(row, width, row_max(row, width), scale, scratch)
        inv = 1.0 / row_sum(row, width)
        for j in range(width):
            row[j] *= inv
        for j in range(width, n_cols):
            row[j] = 0.0


# --------------------------------------------------------------- self-attention

@njit(cache=True, error_model="numpy")
def _attend_forward(Q, K, V, scale, causal, A, Y):
    # Q, K (B, T, d_k), V (B, T, d_v) -> A (B, T, T), Y (B, T, d_v)
    B, T, _ = Q.shape
    scratch = np.empty(T, dtype=np.int64)
    for b in range(B):
        np.dot(Q[b], K[b].T, A[b])                   # every pair at once: one GEMM
        _softmax_rows_inplace(A[b], scale, causal, scratch)
        np.dot(A[b], V[b], Y[b])                     # the mix: a second GEMM


@njit(cache=True, error_model="numpy")
def _attend_backward(Q, K, V, A, dY, scale, dQ, dK, dV, dS):
    # Reverses Y = A V, A = softmax(scale * Q K^T). dS (T, T) is scratch.
    B, T, _ = Q.shape
    for b in range(B):
        np.dot(A[b].T, dY[b], dV[b])                 # dV = A^T dY
        np.dot(dY[b], V[b].T, dS)                    # dA = dY V^T
        Ab = A[b]
        for i in range(T):
            r = row_dot(dS[i], Ab[i], T)
            for j in range(T):                       # softmax: dE_ij = A_ij (dA_ij - sum_k A_ik dA_ik)
                dS[i, j] = Ab[i, j] * (dS[i, j] - r) * scale
        np.dot(dS, K[b], dQ[b])                      # dQ = dE K
        np.dot(dS.T, Q[b], dK[b])                    # dK = dE^T Q


class AttentionGrads(NamedTuple):
    dX: np.ndarray                  # like X
    dWq: Optional[np.ndarray]       # (d_model, d_k), None without projections
    dWk: Optional[np.ndarray]       # (d_model, d_k)
    dWv: Optional[np.ndarray]       # (d_model, d_v)


def _check_self(X, Wq, Wk, Wv, scale, causal):
    dtype = v.common_dtype("X", X)
    X = v.as_float_array("X", X, (2, 3))
    d_model = X.shape[-1]
    given = [w is not None for w in (Wq, Wk, Wv)]
    if any(given) and not all(given):
        raise ValueError("Wq, Wk and Wv must all be arrays or all be None (no projections); "
                         f"got {['array' if g else 'None' for g in given]}.")
    if all(given):
        Wq = v.as_float_array("Wq", Wq, 2, dtype)
        if Wq.shape[0] != d_model:
            raise ValueError(f"Wq must have shape ({d_model}, d_k) to match X's d_model = {d_model}, "
                             f"got {Wq.shape}.")
        Wk = v.as_float_array("Wk", Wk, 2, dtype)
        v.check_shape("Wk", Wk, Wq.shape)
        Wv = v.as_float_array("Wv", Wv, 2, dtype)
        if Wv.shape[0] != d_model:
            raise ValueError(f"Wv must have shape ({d_model}, d_v) to match X's d_model = {d_model}, "
                             f"got {Wv.shape}.")
    if not isinstance(scale, (bool, np.bool_)):
        raise TypeError(f"scale must be True or False, got {scale!r}.")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}.")
    return X, Wq, Wk, Wv


def _grid_bytes(B, T, itemsize, n):
    nbytes = n * B * T * T * itemsize
    v.check_memory(nbytes, f"attention at T = {T}{f', B = {B}' if B > 1 else ''} "
                           f"({n} T x T buffer{'s' if n > 1 else ''})")


def _project(X3, Wq, Wk, Wv):
    """Q, K, V (B, T, d_k/d_v) = X Wq, X Wk, X Wv; all three are X without projections.

    They are internal (never returned), so they live in reused workspace buffers.
    """
    if Wq is None:
        return X3, X3, X3
    B, T, d_model = X3.shape
    Q, K, V = (_workspace.buffer(name, (B * T, W.shape[1]), X3.dtype)
               for name, W in (("Q", Wq), ("K", Wk), ("V", Wv)))
    _projections(X3.reshape(B * T, d_model), Wq, Wk, Wv, Q, K, V)
    return Q.reshape(B, T, -1), K.reshape(B, T, -1), V.reshape(B, T, -1)


@njit(cache=True)
def _projections(X2, Wq, Wk, Wv, Q, K, V):
    # X2 (B T, d_model): one GEMM per weight over the whole batch, in one compiled call
    np.dot(X2, Wq, Q)
    np.dot(X2, Wk, K)
    np.dot(X2, Wv, V)


@njit(cache=True)
def _projection_grads(X2, Wq, Wk, Wv, dQ2, dK2, dV2, dX, dWq, dWk, dWv, part):
    # Reverses Q = X Wq, K = X Wk, V = X Wv: dX = dQ Wq^T + dK Wk^T + dV Wv^T, dW = X^T dQ ...
    np.dot(dQ2, Wq.T, dX)
    np.dot(dK2, Wk.T, part)
    dX += part
    np.dot(dV2, Wv.T, part)
    dX += part
    np.dot(X2.T, dQ2, dWq)
    np.dot(X2.T, dK2, dWk)
    np.dot(X2.T, dV2, dWv)


def _batch3(X):
    return X if X.ndim == 3 else X[None]


def forward(X, Wq=None, Wk=None, Wv=None, scale=True, causal=False):
    """Single-head self-attention. Returns (Y, A).

    X is (T, d_model) or (B, T, d_model); Wq, Wk (d_model, d_k); Wv (d_model, d_v).
    Wq = Wk = Wv = None means no projections: Q = K = V = X. Y is (..., T, d_v) and
    A is (..., T, T), in X's dtype.
    """
    X, Wq, Wk, Wv = _check_self(X, Wq, Wk, Wv, scale, causal)
    X3 = _batch3(X)
    B, T, _ = X3.shape
    _grid_bytes(B, T, X.itemsize, 1)
    Q, K, V = _project(X3, Wq, Wk, Wv)
    factor = 1.0 / math.sqrt(Q.shape[-1]) if scale else 1.0
    A = np.empty((B, T, T), dtype=X.dtype)
    Y = np.empty((B, T, V.shape[-1]), dtype=X.dtype)
    _attend_forward(Q, K, V, factor, bool(causal), A, Y)
    if X.ndim == 2:
        return Y[0], A[0]
    return Y, A


def backward(X, Wq, Wk, Wv, A, dY, scale=True, causal=False):
    """Gradients of self-attention given A from ``forward`` and the upstream dY.

    Returns ``AttentionGrads(dX, dWq, dWk, dWv)``; without projections the weight
    gradients are None. ``causal`` is accepted for symmetry: the mask lives in A.
    """
    X, Wq, Wk, Wv = _check_self(X, Wq, Wk, Wv, scale, causal)
    X3 = _batch3(X)
    B, T, d_model = X3.shape
    _grid_bytes(B + 1, T, X.itemsize, 1)             # A (copied if strided) and dS, before either
    lead = X.shape[:-1]                              # (T,) or (B, T): shapes as the user passed them
    A = v.as_float_array("A", A, X.ndim, X.dtype)
    v.check_shape("A", A, lead + (T,))
    d_v = d_model if Wv is None else Wv.shape[1]
    dY = v.as_float_array("dY", dY, X.ndim, X.dtype)
    v.check_shape("dY", dY, lead + (d_v,))
    A, dY = _batch3(A), _batch3(dY)
    Q, K, V = _project(X3, Wq, Wk, Wv)               # recomputed: cheaper to redo than to keep
    factor = 1.0 / math.sqrt(Q.shape[-1]) if scale else 1.0
    dQ, dK, dV = (_workspace.buffer(n, g.shape, g.dtype) for n, g in (("dQ", Q), ("dK", K), ("dV", V)))
    dS = _workspace.buffer("dS", (T, T), X.dtype)
    _attend_backward(Q, K, V, A, dY, factor, dQ, dK, dV, dS)
    if Wq is None:
        dX = dQ + dK + dV                            # X plays all three roles
        grads = AttentionGrads(dX, None, None, None)
    else:
        X2 = X3.reshape(B * T, d_model)
        dQ2, dK2, dV2 = (g.reshape(B * T, -1) for g in (dQ, dK, dV))
        dX = np.empty((B * T, d_model), dtype=X.dtype)
        dWq, dWk, dWv = np.empty_like(Wq), np.empty_like(Wk), np.empty_like(Wv)
        _projection_grads(X2, Wq, Wk, Wv, dQ2, dK2, dV2, dX, dWq, dWk, dWv,
                          _workspace.buffer("dX_part", dX.shape, dX.dtype))
        grads = AttentionGrads(dX.reshape(B, T, d_model), dWq, dWk, dWv)
    if X.ndim == 2:
        grads = grads._replace(dX=grads.dX[0])
    return grads


# ----------------------------------------------------------- additive attention

@njit(cache=True, error_model="numpy")
def _alignment_grid(Ps, Ph, va, use_tanh, Tn, E):
    # Ps (T_y, d_a), Ph (T_x, d_a), va (d_a,) -> Tn (T_y, T_x, d_a) = phi(p_ij), E (T_y, T_x)
    T_y, T_x, d_a = Tn.shape
    scratch = np.empty(T_x * d_a, dtype=np.int64)
    for i in range(T_y):
        Ti = Tn[i]
        for j in range(T_x):
            for k in range(d_a):
                Ti[j, k] = Ps[i, k] + Ph[j, k]       # the pair's hidden pre-activation
        if use_tanh:
            tanh_inplace(Ti.reshape(T_x * d_a), scratch)
        np.dot(Ti, va, E[i])                         # e_ij = va . phi(p_ij)


@njit(cache=True, error_model="numpy")
def _alignment_grid_backward(Tn, va, dE, use_tanh, dPs, dPh, dva):
    # Reverses e_ij = va . phi(p_ij), p_ij = Ps_i + Ph_j. Accumulates into dPs, dPh, dva.
    T_y, T_x, d_a = Tn.shape
    for i in range(T_y):
        for j in range(T_x):
            g = dE[i, j]
            for k in range(d_a):
                t = Tn[i, j, k]
                dva[k] += g * t
                dp = g * va[k] * (1.0 - t * t) if use_tanh else g * va[k]
                dPs[i, k] += dp
                dPh[j, k] += dp


class AlignmentGrads(NamedTuple):
    dS: np.ndarray          # (T_y, d_h)
    dH: np.ndarray          # (T_x, d_h) = dH_value + dH_score
    dWsa: np.ndarray        # (d_a, d_h)
    dWha: np.ndarray        # (d_a, d_h)
    dva: np.ndarray         # (d_a,)
    dH_value: np.ndarray    # route 1: h_j as a term of each c_i
    dH_score: np.ndarray    # route 2: h_j as an argument of the score a(s_i, h_j)


def _check_alignment(S, H, Wsa, Wha, va, nonlinearity):
    v.check_choice("nonlinearity", nonlinearity, NONLINEARITIES)
    dtype = v.common_dtype("S", S)
    S = v.as_float_array("S", S, 2)
    d_h = S.shape[1]
    H = v.as_float_array("H", H, 2, dtype)
    if H.shape[1] != d_h:
        raise ValueError(f"H must have shape (T_x, {d_h}) to match S's d_h = {d_h}, got {H.shape}.")
    Wsa = v.as_float_array("Wsa", Wsa, 2, dtype)
    if Wsa.shape[1] != d_h:
        raise ValueError(f"Wsa must have shape (d_a, {d_h}), got {Wsa.shape}.")
    d_a = Wsa.shape[0]
    Wha = v.as_float_array("Wha", Wha, 2, dtype)
    v.check_shape("Wha", Wha, (d_a, d_h))
    va = v.as_float_array("va", va, 1, dtype)
    v.check_shape("va", va, (d_a,))
    v.check_memory(S.shape[0] * H.shape[0] * (d_a + 2) * S.itemsize,
                   f"the additive score grid ({S.shape[0]} x {H.shape[0]} x {d_a})")
    return S, H, Wsa, Wha, va


def _alignment(S, H, Wsa, Wha, va, use_tanh):
    T_y, T_x, d_a = S.shape[0], H.shape[0], va.shape[0]
    Ps = matmul(S, Wsa.T)                            # (T_y, d_a): one projection per step
    Ph = matmul(H, Wha.T)                            # (T_x, d_a): one per position
    Tn = np.empty((T_y, T_x, d_a), dtype=S.dtype)
    alpha = np.empty((T_y, T_x), dtype=S.dtype)
    _alignment_grid(Ps, Ph, va, use_tanh, Tn, alpha)
    _softmax_rows_inplace(alpha, 1.0, False, np.empty(T_x, dtype=np.int64))
    return alpha, Tn


def alignment(S, H, Wsa, Wha, va, nonlinearity="tanh"):
    """Bahdanau's additive alignment alpha (T_y, T_x), rows summing to 1.

    S (T_y, d_h): row i is the decoder state that scores step i; H (T_x, d_h):
    encoder states; Wsa, Wha (d_a, d_h); va (d_a,). nonlinearity=None is the
    lesson's ablation without tanh, where every row comes out the same.
    """
    S, H, Wsa, Wha, va = _check_alignment(S, H, Wsa, Wha, va, nonlinearity)
    return _alignment(S, H, Wsa, Wha, va, nonlinearity == "tanh")[0]


def alignment_backward(S, H, Wsa, Wha, va, dC, nonlinearity="tanh"):
    """Gradients of a loss whose gradient w.r.t. the contexts C = alpha H is dC (T_y, d_h).

    Returns ``AlignmentGrads``; the gradient reaching H is also split into its two
    routes, which sum to dH: the value route alpha^T dC and the score route
    through the alignment model.
    """
    S, H, Wsa, Wha, va = _check_alignment(S, H, Wsa, Wha, va, nonlinearity)
    dC = v.as_float_array("dC", dC, 2, S.dtype)
    v.check_shape("dC", dC, (S.shape[0], H.shape[1]))
    use_tanh = nonlinearity == "tanh"
    alpha, Tn = _alignment(S, H, Wsa, Wha, va, use_tanh)
    C = matmul(alpha, H)                             # (T_y, d_h)
    dH_value = matmul(alpha.T, dC)                   # route 1: c_i = sum_j alpha_ij h_j
    # dl/de_ij = alpha_ij dC_i . (h_j - c_i): a score moves by how far h_j is from the mix
    dE = alpha * (matmul(dC, H.T) - (dC * C).sum(axis=1, keepdims=True))
    dPs = np.zeros((S.shape[0], va.shape[0]), dtype=S.dtype)
    dPh = np.zeros((H.shape[0], va.shape[0]), dtype=S.dtype)
    dva = np.zeros_like(va)
    _alignment_grid_backward(Tn, va, dE, use_tanh, dPs, dPh, dva)
    dH_score = matmul(dPh, Wha)                      # route 2: h_j inside a(s_i, h_j)
    return AlignmentGrads(
        dS=matmul(dPs, Wsa), dH=dH_value + dH_score, dWsa=matmul(dPs.T, S),
        dWha=matmul(dPh.T, H), dva=dva,
        dH_value=dH_value, dH_score=dH_score,
    )
