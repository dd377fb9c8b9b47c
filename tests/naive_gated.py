"""Slow, obvious twins of the LSTM and GRU kernels, for the tests to compare against.

Loops over sequences and steps, one line per equation of ``torch.nn.LSTM`` and
``torch.nn.GRU`` (gate order i, f, g, o and r, z, n; weights (gates * d_h, d_in) and
(gates * d_h, d_h)), in float64 whatever the input dtype, so that each can be checked by
reading it. The backward walks the same equations in reverse, one step at a time.
"""

from __future__ import annotations

import numpy as np


def _f64(*arrays):
    return [None if a is None else np.asarray(a, dtype=np.float64) for a in arrays]


def _sigmoid(a):
    with np.errstate(over="ignore"):              # exp(-a) = inf for a << 0 gives 0, as it should
        return 1.0 / (1.0 + np.exp(-a))


def _per_sequence(X, states):
    """X as (B, T, d_in) and each initial state as (B, d_h) or None, plus whether each was shared."""
    X3 = X if X.ndim == 3 else X[None]
    B = X3.shape[0]
    out, shared = [], []
    for s in states:
        shared.append(s is not None and s.ndim == 1 and X.ndim == 3)
        if s is None:
            out.append(None)
        elif s.ndim == 1:
            out.append(np.stack([s] * B))
        else:
            out.append(s)
    return X3, out, shared


def _unbatch(X, A):
    return A if X.ndim == 3 else A[0]


def _state_grad(X, g, shared):
    """dl/ds0 shaped like the s0 the caller passed: summed when one was shared over the batch."""
    if shared:
        return g.sum(axis=0)
    return g if X.ndim == 3 else g[0]


# ---------------------------------------------------------------------------- LSTM

def lstm_forward(X, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, c0=None):
    """(H, C) for X (T, d_in) or (B, T, d_in)."""
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = _f64(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    X3, (h0, c0), _ = _per_sequence(X, (h0, c0))
    B, T, _ = X3.shape
    d_h = W_hh.shape[1]
    b_ih = np.zeros(4 * d_h) if b_ih is None else b_ih
    b_hh = np.zeros(4 * d_h) if b_hh is None else b_hh
    H, C = np.zeros((B, T, d_h)), np.zeros((B, T, d_h))
    for n in range(B):
        h = np.zeros(d_h) if h0 is None else h0[n]
        c = np.zeros(d_h) if c0 is None else c0[n]
        for t in range(T):
            a = W_ih @ X3[n, t] + b_ih + W_hh @ h + b_hh
            i = _sigmoid(a[0:d_h])
            f = _sigmoid(a[d_h:2 * d_h])
            g = np.tanh(a[2 * d_h:3 * d_h])
            o = _sigmoid(a[3 * d_h:4 * d_h])
            c = f * c + i * g
            h = o * np.tanh(c)
            H[n, t], C[n, t] = h, c
    return _unbatch(X, H), _unbatch(X, C)


def lstm_backward(X, W_ih, W_hh, dH, b_ih=None, b_hh=None, h0=None, c0=None, dC=None):
    """(dX, dW_ih, dW_hh, db_ih, db_hh, dh0, dc0), recomputing the forward step by step."""
    X, W_ih, W_hh, dH, b_ih, b_hh, h0, c0, dC = _f64(X, W_ih, W_hh, dH, b_ih, b_hh, h0, c0, dC)
    X3, (h03, c03), shared = _per_sequence(X, (h0, c0))
    B, T, d_in = X3.shape
    d_h = W_hh.shape[1]
    dH3 = dH if dH.ndim == 3 else dH[None]
    dC3 = np.zeros_like(dH3) if dC is None else (dC if dC.ndim == 3 else dC[None])
    b_ih = np.zeros(4 * d_h) if b_ih is None else b_ih
    b_hh = np.zeros(4 * d_h) if b_hh is None else b_hh
    dX = np.zeros_like(X3)
    dW_ih, dW_hh, db = np.zeros_like(W_ih), np.zeros_like(W_hh), np.zeros(4 * d_h)
    dh0, dc0 = np.zeros((B, d_h)), np.zeros((B, d_h))
    for n in range(B):
        # the forward again, keeping every step's gates and states
        hs = [np.zeros(d_h) if h03 is None else h03[n]]
        cs = [np.zeros(d_h) if c03 is None else c03[n]]
        gates = []
        for t in range(T):
            a = W_ih @ X3[n, t] + b_ih + W_hh @ hs[-1] + b_hh
            i, f = _sigmoid(a[0:d_h]), _sigmoid(a[d_h:2 * d_h])
            g, o = np.tanh(a[2 * d_h:3 * d_h]), _sigmoid(a[3 * d_h:4 * d_h])
            cs.append(f * cs[-1] + i * g)
            hs.append(o * np.tanh(cs[-1]))
            gates.append((i, f, g, o))
        dh_next, dc_next = np.zeros(d_h), np.zeros(d_h)     # from step t+1
        for t in range(T - 1, -1, -1):
            i, f, g, o = gates[t]
            c, c_prev, h_prev = cs[t + 1], cs[t], hs[t]
            dh = dH3[n, t] + dh_next
            dc = dC3[n, t] + dc_next + dh * o * (1 - np.tanh(c) ** 2)      # h = o tanh(c)
            do = dh * np.tanh(c)
            di, df, dg = dc * g, dc * c_prev, dc * i                          # c = f c_prev + i g
            da = np.concatenate([di * i * (1 - i), df * f * (1 - f),
                                 dg * (1 - g ** 2), do * o * (1 - o)])
            dX[n, t] = W_ih.T @ da
            dW_ih += np.outer(da, X3[n, t])
            dW_hh += np.outer(da, h_prev)
            db += da
            dh_next = W_hh.T @ da
            dc_next = dc * f
        dh0[n], dc0[n] = dh_next, dc_next
    return (_unbatch(X, dX), dW_ih, dW_hh, db, db.copy(),
            _state_grad(X, dh0, shared[0]), _state_grad(X, dc0, shared[1]))


# ----------------------------------------------------------------------------- GRU

def gru_forward(X, W_ih, W_hh, b_ih=None, b_hh=None, h0=None):
    """H for X (T, d_in) or (B, T, d_in)."""
    X, W_ih, W_hh, b_ih, b_hh, h0 = _f64(X, W_ih, W_hh, b_ih, b_hh, h0)
    X3, (h0,), _ = _per_sequence(X, (h0,))
    B, T, _ = X3.shape
    d_h = W_hh.shape[1]
    b_ih = np.zeros(3 * d_h) if b_ih is None else b_ih
    b_hh = np.zeros(3 * d_h) if b_hh is None else b_hh
    H = np.zeros((B, T, d_h))
    for n in range(B):
        h = np.zeros(d_h) if h0 is None else h0[n]
        for t in range(T):
            ax = W_ih @ X3[n, t] + b_ih
            ah = W_hh @ h + b_hh
            r = _sigmoid(ax[0:d_h] + ah[0:d_h])
            z = _sigmoid(ax[d_h:2 * d_h] + ah[d_h:2 * d_h])
            nn = np.tanh(ax[2 * d_h:3 * d_h] + r * ah[2 * d_h:3 * d_h])
            h = (1 - z) * nn + z * h
            H[n, t] = h
    return _unbatch(X, H)


def gru_backward(X, W_ih, W_hh, dH, b_ih=None, b_hh=None, h0=None):
    """(dX, dW_ih, dW_hh, db_ih, db_hh, dh0), recomputing the forward step by step."""
    X, W_ih, W_hh, dH, b_ih, b_hh, h0 = _f64(X, W_ih, W_hh, dH, b_ih, b_hh, h0)
    X3, (h03,), shared = _per_sequence(X, (h0,))
    B, T, d_in = X3.shape
    d_h = W_hh.shape[1]
    dH3 = dH if dH.ndim == 3 else dH[None]
    b_ih = np.zeros(3 * d_h) if b_ih is None else b_ih
    b_hh = np.zeros(3 * d_h) if b_hh is None else b_hh
    dX = np.zeros_like(X3)
    dW_ih, dW_hh = np.zeros_like(W_ih), np.zeros_like(W_hh)
    db_ih, db_hh = np.zeros(3 * d_h), np.zeros(3 * d_h)
    dh0 = np.zeros((B, d_h))
    for n in range(B):
        hs = [np.zeros(d_h) if h03 is None else h03[n]]
        saved = []
        for t in range(T):
            ax = W_ih @ X3[n, t] + b_ih
            ah = W_hh @ hs[-1] + b_hh
            r = _sigmoid(ax[0:d_h] + ah[0:d_h])
            z = _sigmoid(ax[d_h:2 * d_h] + ah[d_h:2 * d_h])
            nn = np.tanh(ax[2 * d_h:3 * d_h] + r * ah[2 * d_h:3 * d_h])
            hs.append((1 - z) * nn + z * hs[-1])
            saved.append((r, z, nn, ah[2 * d_h:3 * d_h]))
        dh_next = np.zeros(d_h)
        for t in range(T - 1, -1, -1):
            r, z, nn, hn = saved[t]
            h_prev = hs[t]
            dh = dH3[n, t] + dh_next
            dnn = dh * (1 - z)                        # h = (1 - z) n + z h_prev
            dz = dh * (h_prev - nn)
            dn_pre = dnn * (1 - nn ** 2)              # n = tanh(x_n + r hn)
            dr = dn_pre * hn
            dr_pre, dz_pre = dr * r * (1 - r), dz * z * (1 - z)
            dax = np.concatenate([dr_pre, dz_pre, dn_pre])        # d(W_ih x + b_ih)
            dah = np.concatenate([dr_pre, dz_pre, dn_pre * r])    # d(W_hh h_prev + b_hh)
            dX[n, t] = W_ih.T @ dax
            dW_ih += np.outer(dax, X3[n, t])
            dW_hh += np.outer(dah, h_prev)
            db_ih += dax
            db_hh += dah
            dh_next = W_hh.T @ dah + dh * z
        dh0[n] = dh_next
    return (_unbatch(X, dX), dW_ih, dW_hh, db_ih, db_hh, _state_grad(X, dh0, shared[0]))
