"""The bookkeeping of the tiled attention backward, shared by ``harness.kernels.attention``
and ``harness.kernels.transformer``: the split of the work buffer, the row terms D_i, and
the views of one key tile and one query tile. Each helper checks nothing (the callers' public
functions did)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from harness.kernels.blas import dot
from harness.kernels.vmath import row_dot, row_max, row_sum


@njit(cache=True, error_model="numpy")
def backward_start(dY, Y, work, tile_q, tile_k, D, dQ):
    # work (2 tile_q tile_k + tile_q d_k + tile_k max(d_k, d_v),) -> P_all, dP_all (tile_q
    # tile_k,), tmp_q (tile_q, d_k), tmp_k (tile_k max(d_k, d_v),); D float64 (G, T_q) =
    # D_i = dY_i . Y_i = sum_j P_ij dP_ij; dQ (G, T_q, d_k) zeroed for the key tiles to add to.
    G, T_q, d_k = dQ.shape
    d_v = Y.shape[2]
    n_s = tile_q * tile_k
    P_all, dP_all = work[:n_s], work[n_s:2 * n_s]
    tmp_q = work[2 * n_s:2 * n_s + tile_q * d_k].reshape(tile_q, d_k)
    tmp_k = work[2 * n_s + tile_q * d_k:2 * n_s + tile_q * d_k + tile_k * max(d_k, d_v)]
    for g in range(G):
        for i in range(T_q):
            D[g, i] = row_dot(dY[g, i], Y[g, i], d_v)
    dQ[:] = 0.0
    return P_all, dP_all, tmp_q, tmp_k


@njit(cache=True, error_model="numpy")
def key_tile(K, V, dK, dV, tmp_k, g, j0, tile_k):
    # key tile j = rows j0:j1 of sequence g, j1 = min(j0 + tile_k, T_k): K_j, V_j, and dK_j,
    # dV_j zeroed (finished in place as the query tiles add to them); tk_v (bk, d_v) and tk_k
    # (bk, d_k) on tmp_k
    j1 = min(j0 + tile_k, K.shape[1])
    bk = j1 - j0
    dK_j, dV_j = dK[g, j0:j1], dV[g, j0:j1]
    dK_j[:] = 0.0
    dV_j[:] = 0.0
    tk_v = tmp_k[:bk * V.shape[2]].reshape(bk, V.shape[2])
    tk_k = tmp_k[:bk * K.shape[2]].reshape(bk, K.shape[2])
    return K[g, j0:j1], V[g, j0:j1], dK_j, dV_j, tk_v, tk_k


@njit(cache=True, error_model="numpy")
def first_query_tile(j0, tile_q, causal):
    # the first query tile that sees key j0: causal, the one holding row j0; else the first
    return (j0 // tile_q) * tile_q if causal else 0


@njit(cache=True, error_model="numpy")
def query_tile(Q, dY, K_j, P_all, dP_all, g, i0, tile_q):
    # query tile i = rows i0:i1 of sequence g, i1 = min(i0 + tile_q, T_q): Q_i, dY_i, and
    # P = Q_i K_j^T (bq, bk) (the scores, unscaled), dP (bq, bk) on the work buffer
    i1 = min(i0 + tile_q, Q.shape[1])
    bq, bk = i1 - i0, K_j.shape[0]
    Q_i = Q[g, i0:i1]
    P = P_all[:bq * bk].reshape(bq, bk)
    dot(Q_i, K_j.T, P)
    return Q_i, dY[g, i0:i1], P, dP_all[:bq * bk].reshape(bq, bk)


@njit(cache=True, error_model="numpy")
def add_dQ_dK(dP, Q_i, K_j, tmp_q, tk_k, dQ, dK_j, g, i0):
    # dQ_i += dE K_j,  dK_j += dE^T Q_i   (E = scale Q K^T; dP holds dE, (bq, bk))
    bq = dP.shape[0]
    dot(dP, K_j, tmp_q[:bq])
    dQ[g, i0:i0 + bq] += tmp_q[:bq]
    dot(dP.T, Q_i, tk_k)
    dK_j += tk_k


# --------------------------------------------------------------------------- forward and rows

@njit(cache=True, error_model="numpy")
def forward_work(work, stats, tile_q, tile_k, d_v):
    # the tiled forward's buffers: S_all (tile_q tile_k,), PV and acc (tile_q, d_v) on work (in
    # Q's dtype); the running row maximum m, sum l and correction corr (tile_q,) on stats
    n_s = tile_q * tile_k
    PV = work[n_s:n_s + tile_q * d_v].reshape(tile_q, d_v)
    acc = work[n_s + tile_q * d_v:n_s + 2 * tile_q * d_v].reshape(tile_q, d_v)
    return work[:n_s], PV, acc, stats[:tile_q], stats[tile_q:2 * tile_q], stats[2 * tile_q:3 * tile_q]


@njit(cache=True, error_model="numpy")
def scores(Q_i, K_j, S_all):
    # S = Q_i K_j^T (bq, bk), the scores unscaled, on S_all
    bq, bk = Q_i.shape[0], K_j.shape[0]
    S = S_all[:bq * bk].reshape(bq, bk)
    dot(Q_i, K_j.T, S)
    return S


@njit(cache=True)
def visible(bk, i, j0, causal):
    # how many of the bk keys from j0 on row i sees: all, or (causal) those at or before i;
    # zero or less for none
    return min(bk, i + 1 - j0) if causal else bk


@njit(cache=True, error_model="numpy")
def online_max(row, w, r, m, corr, scale):
    # The online softmax's new shift for row r of a tile that sees w keys: max(m_r, row[:w]),
    # with corr_r = exp(scale (m_r - new)) (0 on the first tile). A row that sees none is
    # zeroed, with corr_r = 1 (the shift it returns is then not used)
    if w <= 0:
        row[:] = 0.0
        corr[r] = 1.0
        return m[r]
    m_new = max(m[r], row_max(row, w))
    corr[r] = math.exp((m[r] - m_new) * scale)
    return m_new


@njit(cache=True, error_model="numpy")
def online_add(row, w, r, m, l, corr, m_new):
    # After the row's w weights exp(scale (s - m_new)) were written: the rest of the row zeroed,
    # l_r = l_r corr_r + their sum, m_r = m_new
    row[w:] = 0.0
    l[r] = l[r] * corr[r] + row_sum(row, w)
    m[r] = m_new


@njit(cache=True, error_model="numpy")
def rescale_add(acc, PV, corr, bq):
    # acc[r] = acc[r] corr[r] + PV[r] for the tile's bq rows: the online softmax's running sum,
    # rescaled where the row maximum grew
    for r in range(bq):
        c = corr[r]
        for k in range(acc.shape[1]):
            acc[r, k] = acc[r, k] * c + PV[r, k]


@njit(cache=True, error_model="numpy")
def add_dV_dP(P, dY_i, V_j, tk_v, dV_j, dP):
    # dV_j += P^T dY_i (Y = A V), and dP = dY_i V_j^T
    dot(P.T, dY_i, tk_v)
    dV_j += tk_v
    dot(dY_i, V_j.T, dP)


@njit(cache=True, error_model="numpy")
def softmax_backward_row(p, s, D_i, scale, n):
    # s[:n] = dE = scale p (dP - D_i), s holding dP on entry (E = scale Q K^T, P = softmax(E))
    for c in range(n):
        s[c] = p[c] * (s[c] - D_i) * scale
