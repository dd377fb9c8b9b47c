"""Plain NumPy forwards of the lessons' models, written as the lessons write them.

These are the models at their most obvious: the RNN as a step loop after one
input product, attention as matrix products and a row softmax. They serve three
purposes:

* the NumPy peer that the compiled kernels are timed against (``harness compare``);
* the computation that ``harness.analysis.depth`` traces into a dependency graph, which is
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
from scipy.special import expit


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


# ----------------------------------------------------------------------------- gated recurrences
# Weights in PyTorch's layout: W_ih (G d_h, d_in), W_hh (G d_h, d_h), the gates stacked in
# PyTorch's order (LSTM: i, f, g, o; GRU: r, z, n). sigmoid is scipy.special.expit, a ufunc
# the tracer records.

def lstm_forward(X, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, c0=None):
    """c_t = f c_{t-1} + i g, h_t = o tanh(c_t); returns (H, C), every h_t and c_t."""
    T, d_h = X.shape[-2], W_hh.shape[1]
    XW = X @ W_ih.T                          # (..., T, 4 d_h): the half that parallelises
    if b_ih is not None:
        XW = XW + (b_ih + b_hh)
    zero = np.zeros(X.shape[:-2] + (d_h,), dtype=X.dtype)
    h = zero if h0 is None else h0
    c = zero if c0 is None else c0
    states, cells = [], []
    for t in range(T):                       # c_t needs c_{t-1}, and the gates need h_{t-1}
        a = h @ W_hh.T + XW[..., t, :]       # (..., 4 d_h)
        i, f = expit(a[..., :d_h]), expit(a[..., d_h:2 * d_h])
        g, o = np.tanh(a[..., 2 * d_h:3 * d_h]), expit(a[..., 3 * d_h:])
        c = f * c + i * g                    # the additive route: dc_t/dc_{t-1} = diag(f)
        h = o * np.tanh(c)
        states.append(h)
        cells.append(c)
    return np.stack(states, axis=-2), np.stack(cells, axis=-2)


def lstm_backward(X, H, C, W_ih, W_hh, dH, h0=None, c0=None):
    """BPTT of ``lstm_forward`` (no biases) as a NumPy step loop; returns (dX, dW_ih, dW_hh,
    db, dh0, dc0), db the gradient of either bias."""
    T, d_h = X.shape[-2], W_hh.shape[1]
    zero = np.zeros(H.shape[:-2] + (d_h,), dtype=H.dtype)
    h0 = zero if h0 is None else h0
    c0 = zero if c0 is None else c0
    H_prev = np.concatenate([h0[..., None, :], H[..., :-1, :]], axis=-2)
    C_prev = np.concatenate([c0[..., None, :], C[..., :-1, :]], axis=-2)
    A = X @ W_ih.T + H_prev @ W_hh.T         # (..., T, 4 d_h): the gates, recomputed at once
    i, f = expit(A[..., :d_h]), expit(A[..., d_h:2 * d_h])
    g, o = np.tanh(A[..., 2 * d_h:3 * d_h]), expit(A[..., 3 * d_h:])
    tc = np.tanh(C)
    dA = np.empty_like(A)
    dh, dc = np.zeros_like(zero), np.zeros_like(zero)
    for t in range(T - 1, -1, -1):
        dh = dh + dH[..., t, :]
        do = dh * tc[..., t, :]
        dc = dc + dh * o[..., t, :] * (1.0 - tc[..., t, :] ** 2)
        dA[..., t, :d_h] = dc * g[..., t, :] * i[..., t, :] * (1.0 - i[..., t, :])
        dA[..., t, d_h:2 * d_h] = dc * C_prev[..., t, :] * f[..., t, :] * (1.0 - f[..., t, :])
        dA[..., t, 2 * d_h:3 * d_h] = dc * i[..., t, :] * (1.0 - g[..., t, :] ** 2)
        dA[..., t, 3 * d_h:] = do * o[..., t, :] * (1.0 - o[..., t, :])
        dc = dc * f[..., t, :]
        dh = dA[..., t, :] @ W_hh
    dA2 = dA.reshape(-1, dA.shape[-1])
    return (dA @ W_ih, dA2.T @ X.reshape(-1, X.shape[-1]), dA2.T @ H_prev.reshape(-1, d_h),
            dA2.sum(axis=0), dh, dc)


def gru_forward(X, W_ih, W_hh, b_ih=None, b_hh=None, h0=None):
    """h_t = (1 - z) n + z h_{t-1}, n = tanh(W_in x + b_in + r (W_hn h_{t-1} + b_hn)), as
    ``torch.nn.GRU``; returns every h_t."""
    T, d_h = X.shape[-2], W_hh.shape[1]
    XW = X @ W_ih.T                          # (..., T, 3 d_h)
    if b_ih is not None:
        XW = XW + b_ih
    h = np.zeros(X.shape[:-2] + (d_h,), dtype=X.dtype) if h0 is None else h0
    states = []
    for t in range(T):
        a = h @ W_hh.T                       # (..., 3 d_h)
        if b_hh is not None:
            a = a + b_hh
        x = XW[..., t, :]
        r = expit(x[..., :d_h] + a[..., :d_h])
        z = expit(x[..., d_h:2 * d_h] + a[..., d_h:2 * d_h])
        n = np.tanh(x[..., 2 * d_h:] + r * a[..., 2 * d_h:])
        h = n + z * (h - n)                  # the additive route: z h_{t-1}
        states.append(h)
    return np.stack(states, axis=-2)


def gru_backward(X, H, W_ih, W_hh, dH, h0=None):
    """BPTT of ``gru_forward`` (no biases) as a NumPy step loop; returns (dX, dW_ih, dW_hh,
    db_ih, db_hh, dh0)."""
    T, d_h = X.shape[-2], W_hh.shape[1]
    h0 = np.zeros(H.shape[:-2] + (d_h,), dtype=H.dtype) if h0 is None else h0
    H_prev = np.concatenate([h0[..., None, :], H[..., :-1, :]], axis=-2)
    XW, HW = X @ W_ih.T, H_prev @ W_hh.T     # (..., T, 3 d_h) each
    r = expit(XW[..., :d_h] + HW[..., :d_h])
    z = expit(XW[..., d_h:2 * d_h] + HW[..., d_h:2 * d_h])
    hn = HW[..., 2 * d_h:]
    n = np.tanh(XW[..., 2 * d_h:] + r * hn)
    dX_gates, dH_gates = np.empty_like(XW), np.empty_like(HW)
    dh = np.zeros_like(h0)
    for t in range(T - 1, -1, -1):
        dh = dh + dH[..., t, :]
        dn = dh * (1.0 - z[..., t, :])
        dz = dh * (H_prev[..., t, :] - n[..., t, :])
        dan = dn * (1.0 - n[..., t, :] ** 2)
        dr = dan * hn[..., t, :]
        dar = dr * r[..., t, :] * (1.0 - r[..., t, :])
        daz = dz * z[..., t, :] * (1.0 - z[..., t, :])
        dX_gates[..., t, :] = np.concatenate([dar, daz, dan], axis=-1)
        dH_gates[..., t, :] = np.concatenate([dar, daz, dan * r[..., t, :]], axis=-1)
        dh = dh * z[..., t, :] + dH_gates[..., t, :] @ W_hh
    gx = dX_gates.reshape(-1, 3 * d_h)
    gh = dH_gates.reshape(-1, 3 * d_h)
    return (dX_gates @ W_ih, gx.T @ X.reshape(-1, X.shape[-1]), gh.T @ H_prev.reshape(-1, d_h),
            gx.sum(axis=0), gh.sum(axis=0), dh)


# ----------------------------------------------------------------------------- linear recurrence (LRU)
# The NumPy peers of harness.kernels.lru: a step loop, and Heinsen's log-space scan.

def lru_forward(X, lam, B):
    """The step loop a NumPy user would write: one input product, then in-place steps."""
    U = X @ B.T                                   # (..., T, d_h)
    H = np.empty(U.shape, dtype=np.result_type(U, lam))
    h = np.zeros(U.shape[:-2] + U.shape[-1:], dtype=H.dtype)
    for t in range(U.shape[-2]):
        np.multiply(lam, h, out=H[..., t, :])
        H[..., t, :] += U[..., t, :]
        h = H[..., t, :]
    return H


def _lru_grads(X, H, lam, B, G):
    """(dX, dlam, dB) from the gradient at every state G, PyTorch's convention."""
    Hprev = np.concatenate([np.zeros_like(H[..., :1, :]), H[..., :-1, :]], axis=-2)
    dlam = (np.conj(Hprev) * G).reshape(-1, G.shape[-1]).sum(axis=0)
    dX = G @ np.conj(B)
    dB = G.reshape(-1, G.shape[-1]).T @ np.conj(X.reshape(-1, X.shape[-1]))
    return tuple(g.real if a.dtype.kind != "c" else g for g, a in ((dX, X), (dlam, lam), (dB, B)))


def lru_backward(X, H, lam, B, dH):
    """The reverse step loop G_t = dH_t + conj(lam) G_{t+1}, then the sums over steps."""
    G = np.empty(H.shape, dtype=H.dtype)
    g = np.zeros(H.shape[:-2] + H.shape[-1:], dtype=H.dtype)
    lc = np.conj(lam)
    for t in range(H.shape[-2] - 1, -1, -1):
        np.multiply(lc, g, out=G[..., t, :])
        G[..., t, :] += dH[..., t, :]
        g = G[..., t, :]
    return _lru_grads(X, H, lam, B, G)


def heinsen_scan(lam, U):
    """h_t = lam h_{t-1} + u_t (h_0 = 0) in log space (Heinsen, 2023): h_t = lam^t S_t,
    S_t = sum_{s<=t} u_s / lam^s, the sum a cumulative log-sum-exp of log u_s - s log lam.

    NumPy has no complex logcumsumexp: S's real and imaginary parts are each split into
    their positive and negative terms, four ``np.logaddexp.accumulate``; complex logs
    make negative and complex u and lam fine. Applies where no lam is 0; its precision
    falls as T |log|lam|| grows (the logs hold the whole decay).
    """
    cdt = np.result_type(U.dtype, lam.dtype, np.complex64)
    T = U.shape[-2]
    a_star = np.arange(1, T + 1, dtype=U.real.dtype)[:, None] * np.log(lam.astype(cdt))  # log lam^t
    with np.errstate(divide="ignore"):
        z = np.log(U.astype(cdt)) - a_star                    # (..., T, d_h): log(u_t / lam^t)
    parts = []
    for trig in (np.cos, np.sin):                              # Re S, Im S
        c = trig(z.imag)
        with np.errstate(divide="ignore"):
            lc = z.real + np.log(np.abs(c))
        pos = np.logaddexp.accumulate(np.where(c > 0, lc, -np.inf), axis=-2)
        neg = np.logaddexp.accumulate(np.where(c < 0, lc, -np.inf), axis=-2)
        parts.append(np.exp(pos + a_star.real) - np.exp(neg + a_star.real))
    H = (parts[0] + 1j * parts[1]) * np.exp(1j * a_star.imag)
    return H if np.iscomplexobj(U) or np.iscomplexobj(lam) else H.real


def lru_heinsen_forward(X, lam, B):
    return heinsen_scan(lam, X @ B.T)


def lru_heinsen_backward(X, H, lam, B, dH):
    """The reverse scan in log space too: G = heinsen_scan(conj(lam), dH reversed), reversed."""
    G = heinsen_scan(np.conj(lam), dH[..., ::-1, :])[..., ::-1, :]
    return _lru_grads(X, H, lam, B, G)


# ------------------------------------------------------------------ the Transformer layer
# its sublayers, written with the tracer's operations (harness.models.transformer's traced
# forward and harness.analysis.figure1 run them), then the whole layer as a peer, every head
# at once, with its backward

def layer_norm(x, gamma, beta, eps):
    """(x - mean) / sqrt(var + eps) gamma + beta over the last axis (torch.nn.LayerNorm)."""
    d = x.shape[-1]
    xc = x - x.sum(axis=-1, keepdims=True) / d
    var = (xc * xc).sum(axis=-1, keepdims=True) / d           # the squares: T d products
    return xc / np.sqrt(var + eps) * gamma + beta             # the gain: T d more


def multi_head_attention(xq, xkv, W_in, b_in, W_o, b_o, heads, causal=False):
    """concat_h(softmax(Q_h K_h^T / sqrt(d_k)) V_h) W_o^T + b_o, one head at a time.

    xq (T, d_model) gives the queries; xkv (S, d_model) the keys and values, or None for
    self-attention (one product with the stacked W_in (3 d_model, d_model), as the kernel).
    d_k = d_model / heads, so the grid and the mix are T S d_k per head, T S d_model in all.
    causal: query row i meets keys 0..i only, computed row by row from those keys alone, so
    that the tracer (which follows slices exactly, where ``np.where`` reaches every element)
    records that row i reads nothing after it; the grid and the mix are then T (T + 1) / 2
    d_model each.
    """
    d = W_o.shape[0]
    d_k = d // heads
    if xkv is None:
        P = xq @ W_in.T + b_in                                 # (T, 3 d_model)
        Q, K, V = P[..., :d], P[..., d:2 * d], P[..., 2 * d:]
    else:
        Q = xq @ W_in[:d].T + b_in[:d]                         # (T, d_model)
        KV = xkv @ W_in[d:].T + b_in[d:]                       # (S, 2 d_model)
        K, V = KV[..., :d], KV[..., d:]
    out = []
    for h in range(heads):
        c = slice(h * d_k, (h + 1) * d_k)
        Qh, Kh, Vh = Q[..., c], K[..., c], V[..., c]           # (T, d_k), (S, d_k), (S, d_k)
        if causal:
            rows = []
            for i in range(Qh.shape[-2]):
                e = Qh[..., i:i + 1, :] @ np.swapaxes(Kh[..., :i + 1, :], -1, -2) / math.sqrt(d_k)
                rows.append(softmax_rows(e) @ Vh[..., :i + 1, :])    # (1, d_k)
            out.append(np.concatenate(rows, axis=-2))
        else:
            E = Qh @ np.swapaxes(Kh, -1, -2) / math.sqrt(d_k)                   # (T, S): the grid
            out.append(softmax_rows(E) @ Vh)                          # (T, d_k): the mix
    O = np.concatenate(out, axis=-1)                           # (T, d_model)
    return O @ W_o.T + b_o


def feed_forward(x, W1, b1, W2, b2):
    """relu(x W1^T + b1) W2^T + b2: each row alone."""
    return np.maximum(x @ W1.T + b1, 0.0) @ W2.T + b2          # (T, d_ff) -> (T, d_model)


def _split_heads(P, h):
    """[Q | K | V] (B, T, 3 d_model) -> (3, B, h, T, d_k)."""
    B, T, n = P.shape
    return P.reshape(B, T, 3, h, n // (3 * h)).transpose(2, 0, 3, 1, 4)


def _norm_forward(a, gamma, beta, eps):
    mu = a.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((a - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (a - mu) * rstd
    return xhat * gamma + beta, (xhat, rstd)


def _norm_backward(dy, gamma, cache):
    xhat, rstd = cache
    g = dy * gamma                                             # d xhat
    da = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return da, (dy * xhat).reshape(-1, dy.shape[-1]).sum(0), dy.reshape(-1, dy.shape[-1]).sum(0)


def transformer_forward(X, W, heads, eps):
    """A post-norm Transformer encoder layer (ReLU) in plain NumPy, every head at once: W its 12
    weights in ``harness.transformer.ENCODER_KEYS`` order, ``heads`` heads of d_model / heads,
    layer norms with ``eps``. Returns (Y like X, the cache ``transformer_backward`` reads)."""
    W_in, b_in, W_o, b_o, g1, be1, W1, b1, W2, b2, g2, be2 = W
    X3 = X if X.ndim == 3 else X[None]                         # (B, T, d)
    B, T, d = X3.shape
    h = heads
    d_k = d // h
    Q, K, V = _split_heads(X3 @ W_in.T + b_in, h)                 # (B, h, T, d_k) each
    S = Q @ K.swapaxes(-1, -2) * X.dtype.type(1 / math.sqrt(d_k))   # (B, h, T, T)
    A = np.exp(S - S.max(axis=-1, keepdims=True))
    A /= A.sum(axis=-1, keepdims=True)
    O = (A @ V).transpose(0, 2, 1, 3).reshape(B, T, d)         # (B, T, d)
    a1 = X3 + O @ W_o.T + b_o
    x1, n1 = _norm_forward(a1, g1, be1, eps)
    H = x1 @ W1.T + b1                                         # (B, T, d_ff)
    R = np.maximum(H, 0)
    y, n2 = _norm_forward(x1 + R @ W2.T + b2, g2, be2, eps)
    return y.reshape(X.shape), (X3, W, Q, K, V, A, O, x1, n1, H, R, n2)


def transformer_backward(cache, dY):
    """The gradients of ``transformer_forward``'s layer given dY, each line reversing a forward
    line: (dX, the 12 weights' gradients in ``W``'s order)."""
    X3, W, Q, K, V, A, O, x1, n1, H, R, n2 = cache
    W_in, b_in, W_o, b_o, g1, be1, W1, b1, W2, b2, g2, be2 = W
    B, T, d = X3.shape
    h, d_k = Q.shape[1], Q.shape[-1]
    flat = (lambda a: a.reshape(-1, a.shape[-1]))
    # y = LN2(x1 + R W2^T + b2)
    da2, dg2, dbe2 = _norm_backward(dY.reshape(B, T, d), g2, n2)
    dW2, db2 = flat(da2).T @ flat(R), flat(da2).sum(0)
    dH = (da2 @ W2) * (H > 0)                                  # R = max(H, 0)
    dW1, db1 = flat(dH).T @ flat(x1), flat(dH).sum(0)
    dx1 = da2 + dH @ W1                                        # H = x1 W1^T + b1, and the residual
    # x1 = LN1(X + O W_o^T + b_o)
    da1, dg1, dbe1 = _norm_backward(dx1, g1, n1)
    dWo, dbo = flat(da1).T @ flat(O), flat(da1).sum(0)
    dO = (da1 @ W_o).reshape(B, T, h, d_k).transpose(0, 2, 1, 3)    # (B, h, T, d_k)
    dV = A.swapaxes(-1, -2) @ dO                               # O = A V
    dA = dO @ V.swapaxes(-1, -2)
    dS = A * (dA - (A * dA).sum(axis=-1, keepdims=True)) * X3.dtype.type(1 / math.sqrt(d_k))
    dQ, dK = dS @ K, dS.swapaxes(-1, -2) @ Q                   # S = Q K^T / sqrt(d_k)
    dP = np.stack([dQ, dK, dV]).transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * d)
    dW_in, db_in = flat(dP).T @ flat(X3), flat(dP).sum(0)
    dX = da1 + dP @ W_in                                       # P = X W_in^T + b_in, and the residual
    return dX.reshape(dY.shape), (dW_in, db_in, dWo, dbo, dg1, dbe1, dW1, db1, dW2, db2, dg2, dbe2)
