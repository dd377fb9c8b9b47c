"""Slow, obvious twins of the compiled kernels, for the tests to compare against.

Every function here is written as loops over the indices of the lessons'
equations, in float64 whatever the input dtype, so that it can be checked by
reading it. Shapes use the lessons' names: T, d_in, d_h (RNN); T, d_model,
d_k, d_v (self-attention); T_y, T_x, d_h, d_a (additive attention).

Also here: central finite differences, the other reference every gradient is
checked against.
"""

from __future__ import annotations

import math

import numpy as np


def _f64(*arrays):
    return [None if a is None else np.asarray(a, dtype=np.float64) for a in arrays]


# ----------------------------------------------------------------------------- RNN

def _phi(a, activation):
    return math.tanh(a) if activation == "tanh" else a


def rnn_forward(X, W_xh, W_hh, b=None, h0=None, activation="tanh"):
    """h_t = phi(W_hh h_{t-1} + W_xh x_t + b), one unit at a time. X (T, d_in) or (B, T, d_in)."""
    X, W_xh, W_hh, b, h0 = _f64(X, W_xh, W_hh, b, h0)
    if X.ndim == 3:
        B = X.shape[0]
        if h0 is not None and h0.ndim == 1:
            h0 = np.stack([h0] * B)
        return np.stack([rnn_forward(X[n], W_xh, W_hh, b, None if h0 is None else h0[n], activation)
                         for n in range(B)])
    T, d_in = X.shape
    d_h = W_hh.shape[0]
    h_prev = np.zeros(d_h) if h0 is None else h0
    H = np.zeros((T, d_h))
    for t in range(T):
        for i in range(d_h):
            a = 0.0 if b is None else b[i]
            for k in range(d_in):
                a += W_xh[i, k] * X[t, k]
            for k in range(d_h):
                a += W_hh[i, k] * h_prev[k]
            H[t, i] = _phi(a, activation)
        h_prev = H[t]
    return H


def rnn_backward(X, H, W_xh, W_hh, dH, h0=None, activation="tanh"):
    """BPTT by hand: returns dX, dW_xh, dW_hh, db, dh0 (dh0 shaped like h0, or (B, d_h))."""
    X, H, W_xh, W_hh, dH, h0 = _f64(X, H, W_xh, W_hh, dH, h0)
    if X.ndim == 3:
        B = X.shape[0]
        shared = h0 is not None and h0.ndim == 1
        parts = [rnn_backward(X[n], H[n], W_xh, W_hh, dH[n],
                              None if h0 is None else (h0 if shared else h0[n]), activation)
                 for n in range(B)]
        dX = np.stack([p[0] for p in parts])
        dW_xh = sum(p[1] for p in parts)
        dW_hh = sum(p[2] for p in parts)
        db = sum(p[3] for p in parts)
        dh0 = sum(p[4] for p in parts) if shared else np.stack([p[4] for p in parts])
        return dX, dW_xh, dW_hh, db, dh0
    T, d_in = X.shape
    d_h = W_hh.shape[0]
    h0 = np.zeros(d_h) if h0 is None else h0
    dX = np.zeros((T, d_in))
    dW_xh = np.zeros((d_h, d_in))
    dW_hh = np.zeros((d_h, d_h))
    db = np.zeros(d_h)
    dh_next = np.zeros(d_h)                  # dl/dh_t arriving from step t+1
    for t in range(T - 1, -1, -1):
        h_prev = H[t - 1] if t > 0 else h0
        da = np.zeros(d_h)
        for i in range(d_h):
            g = dH[t, i] + dh_next[i]
            da[i] = g * (1.0 - H[t, i] ** 2) if activation == "tanh" else g
        dh_next = np.zeros(d_h)
        for i in range(d_h):
            db[i] += da[i]
            for k in range(d_in):
                dW_xh[i, k] += da[i] * X[t, k]
                dX[t, k] += da[i] * W_xh[i, k]
            for k in range(d_h):
                dW_hh[i, k] += da[i] * h_prev[k]
                dh_next[k] += da[i] * W_hh[i, k]
    return dX, dW_xh, dW_hh, db, dh_next


# ------------------------------------------------------------------ softmax, attention

def softmax_row(e):
    """Softmax of one row of finite scores (shifted by its maximum)."""
    m = max(e)
    z = [math.exp(x - m) for x in e]
    s = sum(z)
    return np.array([x / s for x in z])


def attention_forward(X, Wq=None, Wk=None, Wv=None, scale=True, causal=False):
    """Y, A of single-head self-attention, score by score. X (T, d_model) or (B, T, d_model)."""
    X, Wq, Wk, Wv = _f64(X, Wq, Wk, Wv)
    if X.ndim == 3:
        out = [attention_forward(x, Wq, Wk, Wv, scale, causal) for x in X]
        return np.stack([o[0] for o in out]), np.stack([o[1] for o in out])
    T = X.shape[0]
    if Wq is None:
        Q = K = V = X
    else:
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
    d_k = Q.shape[1]
    A = np.zeros((T, T))
    for i in range(T):
        seen = range(i + 1) if causal else range(T)
        e = []
        for j in seen:
            s = sum(Q[i, k] * K[j, k] for k in range(d_k))
            e.append(s / math.sqrt(d_k) if scale else s)
        A[i, :len(e)] = softmax_row(e)
    Y = np.zeros((T, V.shape[1]))
    for i in range(T):
        for j in range(T):
            Y[i] += A[i, j] * V[j]
    return Y, A


def attention_backward(X, Wq, Wk, Wv, dY, scale=True, causal=False):
    """dX, dWq, dWk, dWv by the chain rule, entry by entry (weights None without projections)."""
    X, Wq, Wk, Wv, dY = _f64(X, Wq, Wk, Wv, dY)
    if X.ndim == 3:
        out = [attention_backward(x, Wq, Wk, Wv, g, scale, causal) for x, g in zip(X, dY)]
        dX = np.stack([o[0] for o in out])
        if Wq is None:
            return dX, None, None, None
        return (dX,) + tuple(sum(o[n] for o in out) for n in (1, 2, 3))
    T = X.shape[0]
    _, A = attention_forward(X, Wq, Wk, Wv, scale, causal)
    if Wq is None:
        Q = K = V = X
    else:
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
    c = 1.0 / math.sqrt(Q.shape[1]) if scale else 1.0
    dA = np.zeros((T, T))
    dV = np.zeros_like(V)
    for i in range(T):
        for j in range(T):
            dA[i, j] = dY[i] @ V[j]              # Y_i = sum_j A_ij V_j
            dV[j] += A[i, j] * dY[i]
    dE = np.zeros((T, T))
    for i in range(T):
        for j in range(T):                       # dA_ij/dE_ik = A_ij (delta_jk - A_ik)
            dE[i, j] = A[i, j] * (dA[i, j] - sum(A[i, k] * dA[i, k] for k in range(T)))
    dQ = np.zeros_like(Q)
    dK = np.zeros_like(K)
    for i in range(T):
        for j in range(T):                       # E_ij = c Q_i . K_j
            dQ[i] += c * dE[i, j] * K[j]
            dK[j] += c * dE[i, j] * Q[i]
    if Wq is None:
        return dQ + dK + dV, None, None, None
    dX = dQ @ Wq.T + dK @ Wk.T + dV @ Wv.T
    return dX, X.T @ dQ, X.T @ dK, X.T @ dV


# ----------------------------------------------------------------- additive attention

def additive_scores(S, H, Wsa, Wha, va, nonlinearity="tanh"):
    """e_ij = va . phi(Wsa s_i + Wha h_j), pair by pair."""
    S, H, Wsa, Wha, va = _f64(S, H, Wsa, Wha, va)
    T_y, T_x, d_a = S.shape[0], H.shape[0], va.shape[0]
    E = np.zeros((T_y, T_x))
    for i in range(T_y):
        for j in range(T_x):
            for k in range(d_a):
                p = Wsa[k] @ S[i] + Wha[k] @ H[j]
                E[i, j] += va[k] * (math.tanh(p) if nonlinearity == "tanh" else p)
    return E


def alignment(S, H, Wsa, Wha, va, nonlinearity="tanh"):
    E = additive_scores(S, H, Wsa, Wha, va, nonlinearity)
    return np.stack([softmax_row(list(e)) for e in E])


def alignment_backward(S, H, Wsa, Wha, va, dC, nonlinearity="tanh"):
    """dS, dH, dWsa, dWha, dva, dH_value, dH_score for the contexts c_i = sum_j alpha_ij h_j."""
    S, H, Wsa, Wha, va, dC = _f64(S, H, Wsa, Wha, va, dC)
    T_y, T_x, d_a = S.shape[0], H.shape[0], va.shape[0]
    alpha = alignment(S, H, Wsa, Wha, va, nonlinearity)
    dS, dWsa, dWha, dva = (np.zeros_like(a) for a in (S, Wsa, Wha, va))
    dH_value = np.zeros_like(H)
    dH_score = np.zeros_like(H)
    for i in range(T_y):
        dalpha = [dC[i] @ H[j] for j in range(T_x)]              # c_i = sum_j alpha_ij h_j
        for j in range(T_x):
            dH_value[j] += alpha[i, j] * dC[i]
        for j in range(T_x):                                     # through the row softmax
            de = alpha[i, j] * (dalpha[j] - sum(alpha[i, k] * dalpha[k] for k in range(T_x)))
            for k in range(d_a):
                p = Wsa[k] @ S[i] + Wha[k] @ H[j]
                t = math.tanh(p) if nonlinearity == "tanh" else p
                dva[k] += de * t
                dp = de * va[k] * ((1.0 - t * t) if nonlinearity == "tanh" else 1.0)
                dWsa[k] += dp * S[i]
                dWha[k] += dp * H[j]
                dS[i] += dp * Wsa[k]
                dH_score[j] += dp * Wha[k]
    return dS, dH_value + dH_score, dWsa, dWha, dva, dH_value, dH_score


# ---------------------------------------------------------------- finite differences

def numeric_grad(f, x, step=1e-6):
    """Central differences of the scalar f() with respect to every entry of x (float64, in place)."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        old = x[idx]
        x[idx] = old + step
        up = f()
        x[idx] = old - step
        down = f()
        x[idx] = old
        g[idx] = (up - down) / (2 * step)
    return g


def rel_err(got, want, scale=0.0):
    """max |got - want| / max |want|: the relative error of a whole gradient.

    ``scale`` floors the denominator, for a gradient that is zero in exact
    arithmetic (S without tanh): pass the largest entry of its sibling gradients.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), scale, 1e-300))


# ----------------------------------------------------------------- linear recurrence (LRU)

def _c128(*arrays):
    return [None if a is None else np.asarray(a, dtype=np.complex128) for a in arrays]


def lru_forward(X, lam, B, h0=None):
    """h_t,i = lam_i h_{t-1},i + sum_k B_ik x_t,k, one unit at a time, in complex128.

    X (T, d_in) or (B, T, d_in); h0 (d_h,), shared over a batch, or (B, d_h).
    """
    X, lam, B, h0 = _c128(X, lam, B, h0)
    if X.ndim == 3:
        return np.stack([lru_forward(X[n], lam, B, None if h0 is None else
                                     (h0 if h0.ndim == 1 else h0[n])) for n in range(X.shape[0])])
    T, d_in = X.shape
    d_h = lam.shape[0]
    h_prev = np.zeros(d_h, dtype=np.complex128) if h0 is None else h0
    H = np.zeros((T, d_h), dtype=np.complex128)
    for t in range(T):
        for i in range(d_h):
            a = lam[i] * h_prev[i]
            for k in range(d_in):
                a += B[i, k] * X[t, k]
            H[t, i] = a
        h_prev = H[t]
    return H


def lru_backward(X, lam, B, dH, h0=None):
    """dX, dlam, dB, dh0 by the chain rule, entry by entry, in complex128.

    PyTorch's convention (a real loss L; the gradient of z = x + iy is dL/dx + i dL/dy):
    a product y = c z sends the gradient g of y back to z as conj(c) g, and to c as
    conj(z) g. dh0 is (d_h,) for an h0 shared over a batch (summed), else one per sequence.
    """
    X, lam, B, dH, h0 = _c128(X, lam, B, dH, h0)
    if X.ndim == 3:
        Bn = X.shape[0]
        shared = h0 is not None and h0.ndim == 1
        parts = [lru_backward(X[n], lam, B, dH[n], None if h0 is None else
                              (h0 if h0.ndim == 1 else h0[n])) for n in range(Bn)]
        dh0 = sum(p[3] for p in parts) if shared else np.stack([p[3] for p in parts])
        return (np.stack([p[0] for p in parts]), sum(p[1] for p in parts),
                sum(p[2] for p in parts), dh0)
    H = lru_forward(X, lam, B, h0)
    T, d_in = X.shape
    d_h = lam.shape[0]
    h0 = np.zeros(d_h, dtype=np.complex128) if h0 is None else h0
    dX = np.zeros((T, d_in), dtype=np.complex128)
    dlam = np.zeros(d_h, dtype=np.complex128)
    dB = np.zeros((d_h, d_in), dtype=np.complex128)
    g_next = np.zeros(d_h, dtype=np.complex128)       # dl/dh_t arriving from step t+1
    for t in range(T - 1, -1, -1):
        h_prev = H[t - 1] if t > 0 else h0
        g = np.zeros(d_h, dtype=np.complex128)
        for i in range(d_h):
            g[i] = dH[t, i] + np.conj(lam[i]) * g_next[i]     # h_{t+1} = lam h_t + ...
            dlam[i] += np.conj(h_prev[i]) * g[i]              # h_t = lam h_{t-1} + ...
            for k in range(d_in):
                dB[i, k] += g[i] * np.conj(X[t, k])           # ... + sum_k B_ik x_tk
                dX[t, k] += np.conj(B[i, k]) * g[i]
        g_next = g
    return dX, dlam, dB, np.conj(lam) * g_next


def complex_numeric_grad(f, z, step=1e-6):
    """dL/dRe z + i dL/dIm z by central differences (PyTorch's convention), z complex128 in place."""
    g = numeric_grad(f, z.view(np.float64), step)        # (..., 2n): Re, Im interleaved
    return g[..., 0::2] + 1j * g[..., 1::2]


# ------------------------------------------------------- attention's row log-sum-exp

def attention_logsumexp(X, Wq=None, Wk=None, Wv=None, scale=True, causal=False):
    """L_i = log sum_j exp(e_ij), score by score, as the tiled forward returns it. (T,) or (B, T)."""
    X, Wq, Wk, Wv = _f64(X, Wq, Wk, Wv)
    if X.ndim == 3:
        return np.stack([attention_logsumexp(x, Wq, Wk, Wv, scale, causal) for x in X])
    T = X.shape[0]
    Q, K = (X, X) if Wq is None else (X @ Wq, X @ Wk)
    c = 1.0 / math.sqrt(Q.shape[1]) if scale else 1.0
    L = np.zeros(T)
    for i in range(T):
        e = [c * sum(Q[i, k] * K[j, k] for k in range(Q.shape[1]))
             for j in (range(i + 1) if causal else range(T))]
        m = max(e)
        L[i] = m + math.log(sum(math.exp(x - m) for x in e))
    return L
