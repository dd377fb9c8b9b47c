"""Plain NumPy forwards of the lessons' models, written as the lessons write them.

These are the models at their most obvious: the RNN as a step loop after one
input product, attention as matrix products and a row softmax. They serve three
purposes:

* the NumPy peer that the compiled kernels are timed against (``harness compare``);
* the computation that ``harness.depth`` traces into a dependency graph, which is
  why they use only ``@``, ``+``, ``-``, ``*``, ``/``, ``np.tanh``, ``np.exp``,
  ``max``/``sum`` over the last axis, indexing and ``np.stack``;
* a second, independent implementation for the kernel tests (the tests also have
  loop-level twins in ``tests/naive.py``).

Shapes follow the lessons: X is (T, d_in) or (B, T, d_in); W_xh is (d_h, d_in)
and W_hh is (d_h, d_h) (column-vector convention); Wq, Wk are (d_model, d_k) and
Wv is (d_model, d_v) (row-stacked convention of the self-attention lesson).
"""

from __future__ import annotations

import math

import numpy as np


def rnn_forward(X, W_xh, W_hh, b=None, h0=None, activation="tanh"):
    """h_t = phi(W_hh h_{t-1} + W_xh x_t + b); returns every state h_1..h_T."""
    T = X.shape[-2]
    XW = X @ W_xh.T                          # (..., T, d_h): the half that parallelises
    if b is not None:
        XW = XW + b
    h = h0 if h0 is not None else np.zeros(X.shape[:-2] + (W_hh.shape[0],), dtype=X.dtype)
    states = []
    for t in range(T):                       # the half that does not: h_t needs h_{t-1}
        a = h @ W_hh.T + XW[..., t, :]       # (..., d_h)
        h = np.tanh(a) if activation == "tanh" else a
        states.append(h)
    return np.stack(states, axis=-2)         # (..., T, d_h)


def softmax_rows(E):
    """Row softmax, shifted by the row maximum (which changes nothing but overflow)."""
    Z = np.exp(E - E.max(axis=-1, keepdims=True))
    return Z / Z.sum(axis=-1, keepdims=True)


def attention_forward(X, Wq=None, Wk=None, Wv=None, scale=True, causal=False):
    """Single-head self-attention; Wq = Wk = Wv = None means Q = K = V = X."""
    if Wq is None:
        Q = K = V = X
    else:
        Q, K, V = X @ Wq, X @ Wk, X @ Wv     # (..., T, d_k), (..., T, d_k), (..., T, d_v)
    E = Q @ np.swapaxes(K, -1, -2)           # (..., T, T): every pair at once
    if scale:
        E = E / math.sqrt(Q.shape[-1])
    if causal:
        T = X.shape[-2]
        E = np.where(np.tril(np.ones((T, T), dtype=bool)), E, -np.inf)
    A = softmax_rows(E)
    return A @ V, A


def rnn_backward(X, H, W_xh, W_hh, dH, h0=None, activation="tanh"):
    """BPTT as a NumPy step loop; returns (dX, dW_xh, dW_hh, db, dh0)."""
    T = X.shape[-2]
    if h0 is None:
        h0 = np.zeros(H.shape[:-2] + H.shape[-1:], dtype=H.dtype)
    dA = np.empty_like(H)
    carry = np.zeros_like(h0)
    for t in range(T - 1, -1, -1):              # dl/da_t needs dl/da_{t+1}: a loop again
        g = dH[..., t, :] + carry
        dA[..., t, :] = g * (1.0 - H[..., t, :] ** 2) if activation == "tanh" else g
        carry = dA[..., t, :] @ W_hh
    H_prev = np.concatenate([h0[..., None, :], H[..., :-1, :]], axis=-2)
    dA2 = dA.reshape(-1, dA.shape[-1])
    return (dA @ W_xh, dA2.T @ X.reshape(-1, X.shape[-1]), dA2.T @ H_prev.reshape(dA2.shape),
            dA2.sum(axis=0), carry)


def attention_forward_blocked(X, Wq, Wk, Wv, block=256):
    """Self-attention (T, d) with projections, ``block`` query rows at a time: each block's
    (block, T) scores, softmax and mix, never the T x T weights. Returns (Y, L), L the rows'
    log-sum-exp of the scaled scores: the plain NumPy a user writes for long T."""
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = 1.0 / math.sqrt(Q.shape[-1])
    Y = np.empty((X.shape[0], V.shape[1]), dtype=X.dtype)
    L = np.empty(X.shape[0], dtype=np.float64)
    for i in range(0, X.shape[0], block):
        E = (Q[i:i + block] @ K.T) * X.dtype.type(s)
        m = E.max(axis=1, keepdims=True)
        P = np.exp(E - m)
        z = P.sum(axis=1, keepdims=True)
        Y[i:i + block] = (P @ V) / z
        L[i:i + block] = (m + np.log(z))[:, 0]
    return Y, L


def attention_backward_blocked(X, Wq, Wk, Wv, Y, L, dY, block=256):
    """The backward of ``attention_forward_blocked`` from its (Y, L), ``block`` query rows at
    a time, recomputing each block's weights from L; returns (dX, dWq, dWk, dWv)."""
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = X.dtype.type(1.0 / math.sqrt(Q.shape[-1]))
    D = (dY * Y).sum(axis=1, keepdims=True)            # sum_j A_ij dA_ij = dY_i . Y_i
    dQ, dK, dV = np.empty_like(Q), np.zeros_like(K), np.zeros_like(V)
    for i in range(0, X.shape[0], block):
        P = np.exp((Q[i:i + block] @ K.T) * s - L[i:i + block, None].astype(X.dtype))
        dV += P.T @ dY[i:i + block]
        dE = P * (dY[i:i + block] @ V.T - D[i:i + block]) * s
        dQ[i:i + block] = dE @ K
        dK += dE.T @ Q[i:i + block]
    return (dQ @ Wq.T + dK @ Wk.T + dV @ Wv.T, X.T @ dQ, X.T @ dK, X.T @ dV)


def attention_backward(X, Wq, Wk, Wv, A, dY, scale=True):
    """Self-attention backward with matrix products; returns (dX, dWq, dWk, dWv)."""
    if Wq is None:
        Q = K = V = X
    else:
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
    dV = np.swapaxes(A, -1, -2) @ dY
    dA = dY @ np.swapaxes(V, -1, -2)
    dE = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    if scale:
        dE = dE / math.sqrt(Q.shape[-1])
    dQ, dK = dE @ K, np.swapaxes(dE, -1, -2) @ Q
    if Wq is None:
        return dQ + dK + dV, None, None, None
    X2 = X.reshape(-1, X.shape[-1])
    dQ2, dK2, dV2 = (g.reshape(-1, g.shape[-1]) for g in (dQ, dK, dV))
    return (dQ @ Wq.T + dK @ Wk.T + dV @ Wv.T, X2.T @ dQ2, X2.T @ dK2, X2.T @ dV2)
