"""Compiled kernels of the gradient-path analyser: products of RNN Jacobians in log space.

They check nothing (``harness.models.rnn`` does) and write into buffers that the
caller allocates: a Numba function that returns a tuple can crash the process
when a signal arrives during its return (Numba 0.68), one that fills its
arguments cannot.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from harness.kernels.blas import dot


@njit(cache=True)
def probe_backward(WT, u, S, m, V, L):
    """Back-propagate the probe loss u.h_T to every state, renormalising each step.

    WT (d_h, d_h) = W_hh transposed, contiguous; u (d_h,) probe, unit norm;
    S (T, d_h) phi'(a_t) / exp(m_t) in [0, 1]; m (T,) log of that factor.
    Fills V (T, d_h) with unit directions and L (T,) so that
    dl/dh_t = exp(L[t]) V[t]   (L[T-1] = 0, V[T-1] = u).
    """
    T, d_h = S.shape
    v = u.copy()                              # (d_h,)
    V[T - 1] = v
    L[T - 1] = 0.0
    acc = 0.0
    w = np.empty(d_h)                         # (d_h,) phi'_i * dl/dh_i, reused every step
    for i in range(T - 1, 0, -1):
        # forward: h_i = phi(W_hh h_{i-1} + W_xh x_i)  =>  dl/dh_{i-1} = W_hh^T (phi'_i * dl/dh_i)
        for j in range(d_h):
            w[j] = S[i, j] * v[j]
        dot(WT, w, v)                         # (d_h,) into v: no allocation in the loop
        ss = 0.0
        for j in range(d_h):
            ss += v[j] * v[j]
        n = math.sqrt(ss)
        if n == 0.0:                          # an exactly singular path: the gradient is 0
            for r in range(i - 1, -1, -1):
                V[r] = 0.0
                L[r] = -np.inf
            return
        # the scale leaves the vector and enters the log: no underflow, no overflow
        acc += m[i] + math.log(n)
        for j in range(d_h):
            v[j] /= n
        V[i - 1] = v
        L[i - 1] = acc


@njit(cache=True)
def jacobian_products(W, S, m, P, logs):
    """Accumulate P_k = dh_T/dh_{T-k} = P_{k-1} diag(phi'_{T-k+1}) W_hh, renormalised.

    W (d_h, d_h) = W_hh; S (T, d_h), m (T,) as in probe_backward.
    Fills P (T-1, d_h, d_h) with unit-Frobenius-norm products and logs (T-1,) so that
    dh_T/dh_{T-k} = exp(logs[k-1]) P[k-1].
    """
    T, d_h = S.shape
    cur = np.eye(d_h)                         # (d_h, d_h): dh_T/dh_T
    Q = np.empty((d_h, d_h))
    acc = 0.0
    for k in range(1, T):
        i = T - k                             # the state whose Jacobian is appended
        for r in range(d_h):                  # cur @ diag(phi'_i): scale the columns
            for c in range(d_h):
                Q[r, c] = cur[r, c] * S[i, c]
        dot(Q, W, cur)                        # (d_h, d_h) into cur: no allocation in the loop
        ss = 0.0
        for r in range(d_h):
            for c in range(d_h):
                ss += cur[r, c] * cur[r, c]
        n = math.sqrt(ss)
        if n == 0.0:
            for r in range(k - 1, T - 1):
                P[r] = 0.0
                logs[r] = -np.inf
            return
        acc += m[i] + math.log(n)
        cur /= n
        P[k - 1] = cur
        logs[k - 1] = acc
