"""The bookkeeping of the tiled attention backward, shared by ``harness.kernels.attention``
and ``harness.kernels.transformer``: the split of the work buffer, the row terms D_i, and
the views of one key tile and one query tile. Each helper checks nothing (the callers' public
functions did)."""

from __future__ import annotations

import numpy as np
from numba import njit

from harness.kernels.vmath import row_dot


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
def key_tile(K, V, dK, dV, tmp_k, g, j0, j1):
    # key tile j = rows j0:j1 of sequence g: K_j, V_j, and dK_j, dV_j zeroed (finished in place
    # as the query tiles add to them); tk_v (bk, d_v) and tk_k (bk, d_k) on tmp_k
    bk = j1 - j0
    dK_j, dV_j = dK[g, j0:j1], dV[g, j0:j1]
    dK_j[:] = 0.0
    dV_j[:] = 0.0
    tk_v = tmp_k[:bk * V.shape[2]].reshape(bk, V.shape[2])
    tk_k = tmp_k[:bk * K.shape[2]].reshape(bk, K.shape[2])
    return K[g, j0:j1], V[g, j0:j1], dK_j, dV_j, tk_v, tk_k


@njit(cache=True, error_model="numpy")
def query_tile(Q, dY, K_j, P_all, dP_all, g, i0, i1):
    # query tile i = rows i0:i1 of sequence g: Q_i, dY_i, and P = Q_i K_j^T (bq, bk) (the
    # scores, unscaled), dP (bq, bk) on the work buffer
    bq, bk = i1 - i0, K_j.shape[0]
    Q_i = Q[g, i0:i1]
    P = P_all[:bq * bk].reshape(bq, bk)
    np.dot(Q_i, K_j.T, P)
    return Q_i, dY[g, i0:i1], P, dP_all[:bq * bk].reshape(bq, bk)


@njit(cache=True, error_model="numpy")
def add_dQ_dK(dP, Q_i, K_j, tmp_q, tk_k, dQ, dK_j, g, i0, i1):
    # dQ_i += dE K_j,  dK_j += dE^T Q_i   (E = scale Q K^T; dP holds dE)
    bq = i1 - i0
    np.dot(dP, K_j, tmp_q[:bq])
    dQ[g, i0:i1] += tmp_q[:bq]
    np.dot(dP.T, Q_i, tk_k)
    dK_j += tk_k
