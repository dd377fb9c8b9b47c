"""Slow, obvious twins of harness.kernels.linear_attention, for the tests to compare against.

The recurrence of the lesson, one step and one entry at a time, in float64 whatever the
input dtype: the state S (d_k, d_v) and the normaliser z (d_k,) are kept apart (the kernels
fold z into S as a column), and the backward is reverse-mode through those same loops,
every state kept (the kernels keep none, or one per chunk). Shapes: X (T, d_model) or
(B, T, d_model); Wq, Wk (d_k, d_model); Wv (d_v, d_model).
"""

from __future__ import annotations

import math

import numpy as np


def _f64(*arrays):
    return [None if a is None else np.asarray(a, dtype=np.float64) for a in arrays]


def phi(u):
    """elu(u) + 1."""
    return u + 1.0 if u > 0.0 else math.exp(u)


def dphi(u):
    return 1.0 if u > 0.0 else math.exp(u)


def softplus(s):
    return max(s, 0.0) + math.log1p(math.exp(-abs(s)))


def sigmoid(s):
    return 1.0 / (1.0 + math.exp(-s)) if s >= 0 else math.exp(s) / (1.0 + math.exp(s))


def _decays(X, decay, gamma, w_a, b_a):
    """a_t for every t, and s_t = x_t . w_a + b_a (selective) or None."""
    T = X.shape[0]
    if decay is None:
        return [1.0] * T, None
    if decay == "constant":
        return [gamma] * T, None
    s = [sum(X[t, m] * w_a[m] for m in range(X.shape[1])) + b_a for t in range(T)]
    return [math.exp(-softplus(st)) for st in s], s


def _project(X, W):
    T, d_model = X.shape
    return np.array([[sum(W[i, m] * X[t, m] for m in range(d_model)) for i in range(W.shape[0])]
                     for t in range(T)])


def _run(X, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize):
    """Everything the backward needs, for one sequence."""
    T = X.shape[0]
    d_k, d_v = Wq.shape[0], Wv.shape[0]
    q, k, v = _project(X, Wq), _project(X, Wk), _project(X, Wv)
    fq = np.array([[phi(x) for x in row] for row in q])
    fk = np.array([[phi(x) for x in row] for row in k])
    a, s = _decays(X, decay, gamma, w_a, b_a)
    S, z = np.zeros((d_k, d_v)), np.zeros(d_k)
    Ss, zs, o, n = [S.copy()], [z.copy()], np.zeros((T, d_v)), np.ones(T)
    for t in range(T):
        for i in range(d_k):
            z[i] = a[t] * z[i] + fk[t, i]                       # z_t = a_t z_{t-1} + phi(k_t)
            for j in range(d_v):
                S[i, j] = a[t] * S[i, j] + fk[t, i] * v[t, j]   # S_t = a_t S_{t-1} + phi(k_t) v_t^T
        Ss.append(S.copy())
        zs.append(z.copy())
        for j in range(d_v):
            o[t, j] = sum(S[i, j] * fq[t, i] for i in range(d_k))
        if normalize:
            n[t] = sum(z[i] * fq[t, i] for i in range(d_k))
    Y = o / n[:, None]
    return dict(q=q, k=k, v=v, fq=fq, fk=fk, a=a, s=s, Ss=Ss, zs=zs, o=o, n=n, Y=Y)


def linear_forward(X, Wq, Wk, Wv, decay=None, gamma=None, w_a=None, b_a=None, normalize=True):
    """Y (T, d_v) or (B, T, d_v), step by step."""
    X, Wq, Wk, Wv, w_a = _f64(X, Wq, Wk, Wv, w_a)
    if X.ndim == 3:
        return np.stack([linear_forward(x, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize) for x in X])
    return _run(X, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize)["Y"]


def linear_backward(X, Wq, Wk, Wv, dY, decay=None, gamma=None, w_a=None, b_a=None, normalize=True):
    """(dX, dWq, dWk, dWv, dw_a, db_a) by reverse-mode through the loops (the last two None
    unless selective)."""
    X, Wq, Wk, Wv, w_a, dY = _f64(X, Wq, Wk, Wv, w_a, dY)
    if X.ndim == 3:
        parts = [linear_backward(x, Wq, Wk, Wv, g, decay, gamma, w_a, b_a, normalize)
                 for x, g in zip(X, dY)]
        dX = np.stack([p[0] for p in parts])
        rest = [None if parts[0][n] is None else sum(p[n] for p in parts) for n in range(1, 6)]
        return (dX, *rest)
    T, d_model = X.shape
    d_k, d_v = Wq.shape[0], Wv.shape[0]
    r = _run(X, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize)
    fq, fk, v, a, o, n = r["fq"], r["fk"], r["v"], r["a"], r["o"], r["n"]
    dq, dk, dv = np.zeros((T, d_k)), np.zeros((T, d_k)), np.zeros((T, d_v))
    da = np.zeros(T)
    gS, gz = np.zeros((d_k, d_v)), np.zeros(d_k)     # dL/dS_t, dL/dz_t from the steps after t
    for t in range(T - 1, -1, -1):
        S, z, S_prev, z_prev = r["Ss"][t + 1], r["zs"][t + 1], r["Ss"][t], r["zs"][t]
        do = dY[t] / n[t]                                            # y_t = o_t / n_t
        dn = -sum(dY[t, j] * o[t, j] for j in range(d_v)) / n[t] ** 2 if normalize else 0.0
        for i in range(d_k):
            for j in range(d_v):
                gS[i, j] += fq[t, i] * do[j]                         # o_t = S_t^T phi(q_t)
            gz[i] += fq[t, i] * dn                                   # n_t = z_t . phi(q_t)
        for i in range(d_k):
            dfq = sum(S[i, j] * do[j] for j in range(d_v)) + z[i] * dn
            dfk = sum(gS[i, j] * v[t, j] for j in range(d_v)) + gz[i]
            dq[t, i] = dfq * dphi(r["q"][t, i])
            dk[t, i] = dfk * dphi(r["k"][t, i])
        for j in range(d_v):
            dv[t, j] = sum(gS[i, j] * fk[t, i] for i in range(d_k))
        da[t] = (sum(gS[i, j] * S_prev[i, j] for i in range(d_k) for j in range(d_v))
                 + sum(gz[i] * z_prev[i] for i in range(d_k)))
        gS *= a[t]                                                   # to S_{t-1} through a_t S_{t-1}
        gz *= a[t]
    dX = dq @ Wq + dk @ Wk + dv @ Wv
    dWq, dWk, dWv = dq.T @ X, dk.T @ X, dv.T @ X
    dw_a = db_a = None
    if decay == "selective":
        # a_t = exp(-softplus(s_t)): da_t / ds_t = -a_t sigmoid(s_t)
        ds = np.array([-da[t] * a[t] * sigmoid(r["s"][t]) for t in range(T)])
        dX += ds[:, None] * w_a[None, :]
        dw_a = ds @ X
        db_a = float(ds.sum())
    return dX, dWq, dWk, dWv, dw_a, db_a
