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

Self-attention also has a tiled variant (``forward(..., return_weights=False)``) that
never stores A: query tiles meet key tiles with an online softmax (a running row
maximum and sum), and the forward keeps L, each row's log-sum-exp, from which the
backward recomputes each tile's weights (FlashAttention's scheme, on the CPU).
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import NamedTuple, Optional

import numpy as np
from numba import njit
from numba.extending import overload

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels import steps, tiles
from harness.kernels.blas import dot, matmul
from harness.kernels.steps import of_sequence
from harness.kernels.vmath import exp_shifted_inplace, row_dot, row_max, row_sum, tanh_inplace

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
        dot(Q[b], K[b].T, A[b])                      # every pair at once: one GEMM
        _softmax_rows_inplace(A[b], scale, causal, scratch)
        dot(A[b], V[b], Y[b])                        # the mix: a second GEMM


@njit(cache=True, error_model="numpy")
def _attend_backward(Q, K, V, A, dY, scale, dQ, dK, dV, dS):
    # Reverses Y = A V, A = softmax(scale * Q K^T). dS (T, T) is scratch.
    B, T, _ = Q.shape
    for b in range(B):
        dot(A[b].T, dY[b], dV[b])                    # dV = A^T dY
        dot(dY[b], V[b].T, dS)                       # dA = dY V^T
        Ab = A[b]
        for i in range(T):
            r = row_dot(dS[i], Ab[i], T)
            for j in range(T):                       # softmax: dE_ij = A_ij (dA_ij - sum_k A_ik dA_ik)
                dS[i, j] = Ab[i, j] * (dS[i, j] - r) * scale
        dot(dS, K[b], dQ[b])                         # dQ = dE K
        dot(dS.T, Q[b], dK[b])                       # dK = dE^T Q


# The tiled kernels work on TILE_Q query rows against TILE_K key columns at a time.
# One score tile, TILE_Q x TILE_K, is 512 KiB in float32 and 1 MiB in float64: it stays
# in this machine's 1 MiB L2 (AMD EPYC, Zen 5: 48 KiB L1d and 1 MiB L2 per core, 32 MiB
# L3; lscpu) between the GEMM that writes it, the exp pass and the GEMM that reads it.
# Measured at T = 4096, one thread, 9 interleaved rounds, each tile's time paired with
# (256, 512)'s in the same round, forward and backward, float32 and float64, d = 64 and
# 256 (asv: bench_kernels.AttentionTiles): no tile was faster by more than 5 % (512 x 512
# forward at d = 256 by 4-5 %, inside the rounds' spread); 64-row tiles were 5-16 %
# slower (their GEMMs are thin), 128 x 256 5-12 % slower in the backward.
TILE_Q, TILE_K = 256, 512
# The tiled backward redoes dP_ij = dY_i . V_j in float64, as D_i, wherever P_ij holds at least
# HEAVY of its row's sum so far: a few entries a row (at most 1 / HEAVY a tile), O(d_v) each.
HEAVY = 0.25


@njit(cache=True, error_model="numpy")
def _attend_forward_tiled(Q, K, V, scale, causal, tile_q, tile_k, Y, L, work, stats, scratch):
    # Q, K (B, T, d_k), V (B, T, d_v) -> Y (B, T, d_v), L (B, T) = log sum_j exp(scale q_i . k_j).
    # One query tile against each key tile in turn, with a running row maximum m and sum l
    # (the online softmax): when m grows, what was summed so far is rescaled by
    # exp(scale (m_old - m_new)). Causal: key tiles past the query tile are never visited.
    # work (tile_q tile_k + 2 tile_q d_v,) in Q's dtype; stats float64 (3 tile_q,);
    # scratch int64 (tile_k,).
    B, T, _ = Q.shape
    d_v = V.shape[2]
    S_all, PV, acc, m, l, corr = tiles.forward_work(work, stats, tile_q, tile_k, d_v)
    for b in range(B):
        for i0 in range(0, T, tile_q):
            i1 = min(i0 + tile_q, T)
            bq = i1 - i0
            m[:] = -np.inf
            l[:] = 0.0
            acc[:] = 0.0
            for j0 in range(0, i1 if causal else T, tile_k):
                j1 = min(j0 + tile_k, i1 if causal else T)
                bk = j1 - j0
                S = tiles.scores(Q[b, i0:i1], K[b, j0:j1], S_all)    # (bq, bk)
                for r in range(bq):
                    row = S[r]
                    w = tiles.visible(bk, i0 + r, j0, causal)        # columns row i0 + r sees
                    m_new = tiles.online_max(row, w, r, m, corr, scale)
                    if w > 0:
                        exp_shifted_inplace(row, w, m_new, scale, scratch)
                        tiles.online_add(row, w, r, m, l, corr, m_new)
                dot(S, V[b, j0:j1], PV[:bq])                          # (bq, d_v)
                tiles.rescale_add(acc, PV, corr, bq)
            for r in range(bq):
                inv = 1.0 / l[r]
                for k in range(d_v):
                    Y[b, i0 + r, k] = acc[r, k] * inv
                L[b, i0 + r] = m[r] * scale + math.log(l[r])


@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def _scale_and_sum(row, n, f):
    # row[:n] *= f (f in row's dtype) -> (sum, sum of squares) of the new row in float64, in
    # one pass that vectorises
    s = 0.0
    s2 = 0.0
    for j in range(n):
        row[j] *= f
        x = np.float64(row[j])
        s += x
        s2 += x * x
    return s, s2


@njit(cache=True, error_model="numpy")
def _attend_backward_tiled(Q, K, V, L, Y, dY, score_scale, grad_scale, causal, tile_q, tile_k,
                           dQ, dK, dV, D, rows, arg, work, scratch):
    # Reverses the tiled forward one key tile j at a time (its rows of dK, dV finished in
    # place) against every query tile i that sees it, recomputing the weights from L:
    #   P = exp(score_scale Q_i K_j^T - L_i)       (the forward's A, tile by tile)
    #     = exp(score_scale (s - c_i)) exp(score_scale c_i - L_i),  c_i = L_i / score_scale
    #       rounded to Q's dtype: s - c_i is exact near the row maximum, and what c_i's
    #       rounding drops of L_i (in float32, most of log l_i) is put back in float64
    #   dV_j += P^T dY_i                           (Y = A V)
    #   dP = dY_i V_j^T,  dS = grad_scale P (dP - D_i)   with D_i = dY_i . Y_i = sum_j P_ij dP_ij
    #   dQ_i += dS K_j,  dK_j += dS^T Q_i           (E = scale Q K^T)
    # Where the scores are large, two roundings are of the size of what they round: L_i's
    # own (eps |L_i|, which scales row i of P by rho_i = sum_j P_ij != 1), and D_i's (from
    # Y, not from the rounded dP: in a saturated row, where the exact dS is 0, dP - D is
    # rounding only, eps |dY_i| |V|, and times K it swamps dQ and dK). A saturated row has
    # one weight, at j*. Its dP_ij* is redone in float64 (see HEAVY), summed as D_i was:
    # where Y_i = V_j* (a one-hot row) the two are equal and dS_ij* is 0, not rounding. The
    # kernel keeps, per row, sigma_i = sum_j dS_ij (0 exactly), rho_i, and the largest
    # weight P_ij* and j*, and takes what is left of both errors out at j*:
    #   dQ_i -= sigma_i K_j*,  dK_j* -= sigma_i Q_i,  dV_j* -= P_ij* (rho_i - 1) / rho_i dY_i
    # In a row that is not saturated what is left is (rho_i - 1) (1 - P_ij* / rho_i)
    # relative, which the caller checks (see ``_check_row_weights``).
    # Causal: query tiles that end before the key tile starts are never visited.
    # D float64 (B, T); rows float64 (3, B, T) -> sigma, rho, P_ij*; arg int64 (B, T) -> j*;
    # work (2 tile_q tile_k + tile_q d_k + tile_k max(d_k, d_v),) in Q's dtype; scratch
    # int64 (tile_k,).
    B, T, d_k = Q.shape
    d_v = V.shape[2]
    P_all, dP_all, tmp_q, tmp_k = tiles.backward_start(dY, Y, work, tile_q, tile_k, D, dQ)
    shift = np.empty(1, dtype=Q.dtype)                # rounds c_i to the scores' dtype
    heavy = np.empty(tile_q, dtype=np.bool_)          # the tile's row holds a weight >= HEAVY
    sigma, rho, top = rows[0], rows[1], rows[2]
    sigma[:] = 0.0
    rho[:] = 0.0
    top[:] = 0.0
    arg[:] = 0
    for b in range(B):
        for j0 in range(0, T, tile_k):
            K_j, V_j, dK_j, dV_j, tk_v, tk_k = tiles.key_tile(K, V, dK, dV, tmp_k, b, j0, tile_k)
            bk = K_j.shape[0]
            for i0 in range(tiles.first_query_tile(j0, tile_q, causal), T, tile_q):
                Q_i, dY_i, P, dP = tiles.query_tile(Q, dY, K_j, P_all, dP_all, b, i0, tile_q)
                bq = P.shape[0]
                for r in range(bq):
                    row = P[r]
                    i = i0 + r
                    w = max(0, tiles.visible(bk, i, j0, causal))
                    row[w:] = 0.0
                    heavy[r] = False
                    if w == 0:
                        continue
                    shift[0] = L[b, i] / score_scale
                    c_i = np.float64(shift[0])
                    exp_shifted_inplace(row, w, c_i, score_scale, scratch)
                    shift[0] = math.exp(c_i * score_scale - L[b, i])
                    total, squares = _scale_and_sum(row, w, shift[0])
                    rho[b, i] += total
                    least = HEAVY * rho[b, i]
                    heavy[r] = squares > 0.0 and squares >= least * least   # may hold one
                tiles.add_dV_dP(P, dY_i, V_j, tk_v, dV_j, dP)
                for r in range(bq):
                    Dr = D[b, i0 + r]
                    p, g = P[r], dP[r]
                    tiles.softmax_backward_row(p, g, Dr, grad_scale, bk)
                    if heavy[r]:                      # dP again where the weight is heavy,
                        least = HEAVY * rho[b, i0 + r]    # summed as D_i was: 0 if Y_i = V_j
                        for col in range(bk):
                            if p[col] >= least:
                                g[col] = p[col] * (row_dot(dY_i[r], V_j[col], d_v) - Dr) * grad_scale
                                if p[col] > top[b, i0 + r]:
                                    top[b, i0 + r] = p[col]
                                    arg[b, i0 + r] = j0 + col
                    sigma[b, i0 + r] += row_sum(g, bk)
                tiles.add_dQ_dK(dP, Q_i, K_j, tmp_q, tk_k, dQ, dK_j, b, i0)
        for i in range(T):                            # the row's errors, taken out at j*
            if not top[b, i] >= HEAVY * rho[b, i] > 0.0:
                top[b, i] = 0.0                       # no weight dominates: nothing taken out
                continue
            j, s_i = arg[b, i], sigma[b, i]
            v_i = top[b, i] * (rho[b, i] - 1.0) / rho[b, i]
            for k in range(d_k):
                dQ[b, i, k] -= s_i * K[b, j, k]
                dK[b, j, k] -= s_i * Q[b, i, k]
            for k in range(d_v):
                dV[b, j, k] -= v_i * dY[b, i, k]


@njit(cache=True, fastmath=True)
def _weights_defect(A, causal, tol, out):
    # A (B, T, T) -> out = (b, i, kind) of the first row that is not a softmax row, kind
    # 0 (none), 1 (sum off 1 by more than tol), 2 (a weight above the diagonal, causal),
    # 3 (a negative weight). One pass over A, two loops per row that vectorise (every
    # fastmath flag holds: A was checked finite before); returned through out, not a tuple.
    B, T, _ = A.shape
    out[:] = 0
    for b in range(B):
        for i in range(T):
            row = A[b, i]
            w = i + 1 if causal else T
            total, negative, above = 0.0, 0.0, 0.0     # sums, not a min or max: they vectorise
            for j in range(w):
                x = np.float64(row[j])
                total += x
                negative += min(x, 0.0)
            for j in range(w, T):                       # causal: exact zeros past the diagonal
                above += abs(np.float64(row[j]))
            kind = 3 if negative < 0.0 else 2 if above != 0.0 else 1 if abs(total - 1.0) > tol else 0
            if kind:
                out[0], out[1], out[2] = b, i, kind
                return


class AttentionGrads(NamedTuple):
    dX: np.ndarray                  # like X
    dWq: Optional[np.ndarray]       # (d_model, d_k), None without projections
    dWk: Optional[np.ndarray]       # (d_model, d_k)
    dWv: Optional[np.ndarray]       # (d_model, d_v)


def _check_self(X, Wq, Wk, Wv, scale, causal):
    dtype = v.common_dtype("X", X)
    X = v.as_float_view("X", X, (2, 3))           # the caller copies it (if strided) once counted
    d_model = X.shape[-1]
    given = [w is not None for w in (Wq, Wk, Wv)]
    if any(given) and not all(given):
        raise ValueError("Wq, Wk and Wv must all be arrays or all be None (no projections); "
                         f"got {['array' if g else 'None' for g in given]}.")
    if all(given):
        Wq, Wk, Wv = v.projections(Wq, Wk, Wv, d_model, dtype, axis=0)
    _check_flag("scale", scale)
    _check_flag("causal", causal)
    return X, Wq, Wk, Wv


def _check_flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}.")


def _grid_bytes(B, T, itemsize, n, inputs=()):
    nbytes = n * B * T * T * itemsize
    v.check_memory(nbytes, f"attention at T = {T}{f', B = {B}' if B > 1 else ''} "
                           f"({n} T x T buffer{'s' if n > 1 else ''})", inputs=inputs)


def tiled_bytes(B, T, d_model, d_k, d_v, itemsize, backward=False):
    """Bytes the tiled path allocates beyond its inputs and outputs: Q, K, V (and dQ, dK, dV,
    and Y if it is recomputed, in the backward) of B T rows, the forward's copies of X and
    the weights when they are small (``COPY_MAX``; what a backward's inputs are compared
    with), and the tiles. Nothing grows
    like T^2."""
    tq, tk = min(TILE_Q, T), min(TILE_K, T)
    rows = B * T * ((2 * d_k + d_v) * 2 + d_v if backward else 2 * d_k + d_v)
    inputs = (B * T + (2 * d_k + d_v)) * d_model                     # X and the weights
    if not backward and _copies_kept(inputs * itemsize):
        rows += inputs                                               # their kept copies
    tiles = (2 * tq * tk + tq * d_k + tk * max(d_k, d_v) if backward else tq * tk + 2 * tq * d_v)
    parts = _PART_ROWS * d_model if backward else 0                  # dX's partial products
    per_row = 5 * B * T if backward else B * T                       # D, sigma, rho, P_ij*, j*
    return (rows + tiles + parts) * itemsize + 8 * (per_row + 3 * tq + tk)


# The last projections made in this thread, and copies of the inputs they were made from
# (``workspace.keep``: ``workspace.clear`` drops them with the buffers): a backward whose X
# and weights hold the same values reuses them instead of redoing the three GEMMs (as
# autograd keeps Q, K, V from the forward). At T = 512, d = 256 the projections are 201 of
# the backward's 1,140 MFLOP. Copies, not digests: a BLAKE2b digest of X and the weights
# took 134 us at T = 128, d = 64 (float32) and 1.9 ms at d = 256, more than the forward's
# products; copying them takes 8.5 and 37 us, comparing 11 and 70 us. The copy of X is
# a third of what Q, K and V already keep, but past the long-attention bound (64 MiB beyond
# inputs and outputs at T = 32,768, d = 64, float32: 68 MiB with a copy): past COPY_MAX bytes
# of inputs a digest is kept instead (under 1 % of a forward's time there).
COPY_MAX = 4 << 20
_KEPT = "projections"


def _copies_kept(nbytes):
    """Whether inputs of ``nbytes`` (X and the weights together) are kept as copies, else as
    digests."""
    return nbytes <= COPY_MAX


def _digest(a):
    """(shape, dtype, BLAKE2b-256 of the bytes) of a C-contiguous array."""
    return a.shape, a.dtype, hashlib.blake2b(a.data, digest_size=32).digest()


def _kept_projections(X3, Ws):
    """The kept (Q, K, V) if they were made from exactly these values of X and the weights
    (an array changed in place since is not the same input), else None."""
    kept = workspace.kept(_KEPT)
    if kept is None or kept[1] is None:
        return None
    inputs, qkv = kept[0], kept[1:]
    arrays = (X3, *Ws)
    if isinstance(inputs, list):                  # digests: the same bytes
        same = inputs == [_digest(a) for a in arrays]
        return tuple(qkv) if same else None
    qkv = steps.kept_buffers(kept, arrays, qkv[0].shape, qkv[0].dtype)   # copies: the same values
    return None if qkv is None else tuple(qkv)


def _keep_projections(X3, Ws, qkv):
    arrays = (X3, *Ws)
    if _copies_kept(sum(a.nbytes for a in arrays)):
        inputs = steps.keep_inputs("attention", arrays)
    else:
        inputs = [_digest(a) for a in arrays]
    workspace.keep(_KEPT, (inputs, *qkv))


def _project(X3, Wq, Wk, Wv, reuse=False):
    """Q, K, V (B, T, d_k/d_v) = X Wq, X Wk, X Wv; all three are X without projections.

    They are internal (never returned), so they live in reused workspace buffers. A
    projection that overflows is a FloatingPointError naming it, not a NaN later. With
    ``reuse``, the last projections of this thread are returned if they were made from
    these very values of X and the weights (compared element by element).
    """
    if Wq is None:
        return X3, X3, X3
    if reuse:
        qkv = _kept_projections(X3, (Wq, Wk, Wv))
        if qkv is not None:
            return qkv
    B, T, d_model = X3.shape
    Q, K, V = (workspace.buffer(name, (B * T, W.shape[1]), X3.dtype)
               for name, W in (("Q", Wq), ("K", Wk), ("V", Wv)))
    kept = workspace.kept(_KEPT)
    if kept is not None:                          # the buffers change: nothing kept meanwhile
        workspace.keep(_KEPT, (kept[0], None))
    _projections(X3.reshape(B * T, d_model), Wq, Wk, Wv, Q, K, V)
    for name, P in (("Q = X Wq", Q), ("K = X Wk", K), ("V = X Wv", V)):
        _check_finite(name, P, "the projection")
    qkv = Q.reshape(B, T, -1), K.reshape(B, T, -1), V.reshape(B, T, -1)
    _keep_projections(X3, (Wq, Wk, Wv), qkv)     # only the workspace's "Q", "K", "V" hold them,
    return qkv                                    # and only this function writes those


def _check_finite(name, a, what):
    """FloatingPointError naming ``name`` if ``a`` holds an inf or NaN: never a silent NaN."""
    if not np.isfinite(a).all():
        hint = ", or use float64" if a.dtype == np.float32 else ""
        raise FloatingPointError(f"{what} {name} overflows {a.dtype}: the inputs are finite but "
                                 f"too large; scale them down{hint}.")


@njit(cache=True)
def _projections(X2, Wq, Wk, Wv, Q, K, V):
    # X2 (B T, d_model): one GEMM per weight over the whole batch, in one compiled call
    dot(X2, Wq, Q)
    dot(X2, Wk, K)
    dot(X2, Wv, V)


_PART_ROWS = 1024       # dX's partial products go through a (1024, d_model) buffer, not (B T, d_model)


@njit(cache=True)
def _projection_grads(X2, Wq, Wk, Wv, dQ2, dK2, dV2, dX, dWq, dWk, dWv, part):
    # Reverses Q = X Wq, K = X Wk, V = X Wv: dX = dQ Wq^T + dK Wk^T + dV Wv^T, dW = X^T dQ ...
    # part: (rows, d_model) scratch; dX's second and third terms are added a block at a time.
    dot(dQ2, Wq.T, dX)
    rows = part.shape[0]
    for r0 in range(0, dX.shape[0], rows):
        r1 = min(r0 + rows, dX.shape[0])
        p = part[:r1 - r0]
        dot(dK2[r0:r1], Wk.T, p)
        dX[r0:r1] += p
        dot(dV2[r0:r1], Wv.T, p)
        dX[r0:r1] += p
    dot(X2.T, dQ2, dWq)
    dot(X2.T, dK2, dWk)
    dot(X2.T, dV2, dWv)


def _batch3(X):
    return X if X.ndim == 3 else X[None]


def _score_range(Q, K, factor):
    """(Q', factor', e): Q' K^T is the scores' GEMM, factor' its scale, Q' = Q / 2^e.

    |q . k| <= d_k max|Q| max|K|. Where that could overflow the dtype (X * 1e154 in float64,
    X * 1e19 in float32), Q is divided by a power of two, exactly, and factor multiplied by
    it: the softmax sees the same scaled scores and stays finite (the row maximum is
    subtracted before exp). e = 0 and Q unchanged otherwise.
    """
    info = np.finfo(Q.dtype)
    q = max(float(Q.max()), -float(Q.min()))
    k = max(float(K.max()), -float(K.min()))
    if q == 0.0 or k == 0.0:
        return Q, factor, 0
    log2_bound = math.log2(Q.shape[-1]) + math.log2(q) + math.log2(k)
    e = math.ceil(log2_bound - math.log2(info.max / 16))
    if e <= 0:
        return Q, factor, 0
    if math.log2(factor) + e > math.log2(info.max / 16):
        raise FloatingPointError(
            f"the scores q . k reach 2^{log2_bound:.0f}, beyond what {Q.dtype} can scale; "
            f"scale X down, or use float64.")
    return np.ldexp(Q, -e), factor * 2.0 ** e, e


@functools.lru_cache(maxsize=256)
def _sample_rows(T):
    """Up to 8 rows, spread over 0..T-1, that the backward's cheap checks recompute
    (kept per T, read-only: the same few lengths come back call after call)."""
    rows = np.unique(np.linspace(0, T - 1, min(T, 8)).round().astype(np.int64))
    rows.flags.writeable = False
    return rows


@njit(cache=True)
def _sampled_scores(Qr, K, S):
    # Qr (B, k, d_k) sampled queries, K (B, T, d_k) -> S (B, k, T) = Qr K^T, one GEMM each
    for b in range(Qr.shape[0]):
        dot(Qr[b], K[b].T, S[b])


@njit(cache=True)
def _sampled_mix(P, V, Yr):
    # P (B, k, T) sampled weights, V (B, T, d_v) -> Yr (B, k, d_v) = P V
    for b in range(P.shape[0]):
        dot(P[b], V[b], Yr[b])


def _check_against_forward(Qs, K, V, factor_s, causal, A=None, L=None, Y=None):
    """ValueError naming A (or L) or Y where a sampled row disagrees with the forward redone.

    Cheap (8 rows per sequence, O(T d) each, every sequence at once): it catches weights,
    L or Y from another X, other weights, another ``scale`` or ``causal``, or a multiple of
    them. A difference within the rounding of the scores passes, and so does anything
    outside the sampled rows.
    """
    B, T, d_k = Qs.shape
    eps = np.finfo(Qs.dtype).eps
    slack = math.sqrt(eps)
    rows = _sample_rows(T)
    Qr = np.ascontiguousarray(Qs[:, rows])                                 # (B, k, d_k)
    S = np.empty((B, rows.size, T), dtype=Qs.dtype)
    _sampled_scores(Qr, K, S)
    S = S.astype(np.float64)
    if causal:
        S[:, np.arange(T)[None, :] > rows[:, None]] = -np.inf
    # rounding of the scaled scores: 2 d_k eps factor' |q'_i| max_j |k_j|, per sequence and row
    k_max = np.maximum(K.max(axis=(1, 2)), -K.min(axis=(1, 2))).astype(np.float64) * math.sqrt(d_k)
    err = 2.0 * d_k * eps * factor_s * np.linalg.norm(Qr.astype(np.float64), axis=2) * k_max[:, None]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if L is not None:                 # scores and L minus the row maximum: no overflow
            lse = L[:, rows]                                                 # (B, k)
            P = np.exp((S - lse[..., None] / factor_s) * factor_s)          # (B, k, T)
            tol = np.expm1(4 * err + 2 * eps * np.abs(lse)) + slack
            shown = P.sum(axis=2)
            off = np.abs(shown - 1.0)
            name, what = "A (here L, the row log-sum-exp)", "exp(scores - L) sums to {:.6g}, not 1"
        else:
            P = np.exp((S - S.max(axis=2, keepdims=True)) * factor_s)
            P /= P.sum(axis=2, keepdims=True)
            tol = np.expm1(4 * err) + slack
            shown = off = np.abs(A[:, rows].astype(np.float64) - P).max(axis=2)
            name, what = "A", "it differs from the softmax recomputed from X and the weights by {:.3g}"
        _raise_first(~(off <= tol) & np.isfinite(tol), rows, name, what, shown)   # NaN tol: unbounded
        if Y is not None:
            Yr = np.empty((B, rows.size, V.shape[2]), dtype=V.dtype)
            _sampled_mix(P.astype(V.dtype), V, Yr)
            v_max = np.maximum(V.max(axis=(1, 2)), -V.min(axis=(1, 2))).astype(np.float64)
            tol = (np.expm1(4 * err) + slack) * np.maximum(v_max, np.finfo(np.float64).tiny)[:, None]
            off = np.abs(Yr.astype(np.float64) - Y[:, rows]).max(axis=2)
            _raise_first(~(off <= tol) & np.isfinite(tol), rows, "Y",
                         "it differs from the Y recomputed from X and the weights by {:.3g}", off)


def _raise_first(bad, rows, name, what, shown):
    """The ValueError for the first sampled (sequence, row) marked in ``bad`` (B, k), if any."""
    if bad.any():
        b, n = np.argwhere(bad)[0]
        where = f"row {rows[n]}" + of_sequence(b, bad.shape[0] > 1)
        raise ValueError(f"{name} does not match this forward: in {where}, {what.format(shown[b, n])}. "
                         f"Pass what forward returned for these inputs, with the same scale and causal.")


def _check_weights(A, causal):
    """ValueError naming A unless each row is a softmax row: no negative weight, a sum of 1
    within sqrt(eps), and (causal) nothing above the diagonal. One pass over A."""
    out = np.zeros(3, dtype=np.int64)
    _weights_defect(A, bool(causal), math.sqrt(np.finfo(A.dtype).eps), out)
    b, i, kind = (int(x) for x in out)
    if kind == 0:
        return
    at = f"row {i}" + of_sequence(b, A.shape[0] > 1)
    if kind == 1:
        raise ValueError(f"A must hold attention weights (each row sums to 1), but {at} sums to "
                         f"{row_sum(A[b, i], A.shape[2] if not causal else i + 1):.6g}. "
                         f"Pass the A that forward returned.")
    if kind == 2:
        raise ValueError(f"A has weights above the diagonal in {at}, but causal=True: pass the A "
                         f"that forward(..., causal=True) returned, or causal=False.")
    raise ValueError(f"A must hold attention weights, but {at} has a negative weight. "
                     f"Pass the A that forward returned.")


def _check_lse(L, L2, dtype):
    """ValueError naming A (as L) unless L equals the recomputed L2 within X's rounding."""
    tol = 16 * np.finfo(dtype).eps * (1.0 + np.abs(L2))
    off = np.abs(L - L2)
    if not np.all(off <= tol):
        b, i = np.unravel_index(int(np.argmax(off - tol)), off.shape)
        at = f"row {i}" + of_sequence(b, L.shape[0] > 1)
        raise ValueError(f"A (here L, the row log-sum-exp) does not match this forward: {at} is "
                         f"{float(L[b, i]):.9g}, recomputed {float(L2[b, i]):.9g}. Pass the L that "
                         f"forward(..., return_weights=False) returned for these inputs, scale and causal.")


def _check_row_weights(L, L_dtype, rho, top, dtype):
    """ValueError naming A (as L) where the weights recomputed from L are off by more than
    sqrt(eps) of X's dtype after the tiled backward's correction at each row's largest weight.

    L_i is held to eps |L_i|, and exp(scores - L_i) carries that as a factor rho_i on the whole
    row (rho_i, the row's sum, is 1 exactly). The backward takes the factor out at the row's
    largest weight P_ij*: a saturated row comes out exact at any L, and what is left, (rho_i - 1)
    (1 - P_ij* / rho_i), plus the rounding of the larger products, eps rho_i, must stay within
    sqrt(eps). Past that, no digit of the recomputed weights need survive.
    """
    eps = np.finfo(dtype).eps
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        left = np.abs(rho - 1.0) * (1.0 - top / rho) + eps * rho
    bad = ~(left <= math.sqrt(eps))                      # NaN, inf (rho = 0 or inf): bad too
    if not bad.any():
        return
    b, i = np.argwhere(bad)[0]
    at = f"row {i}" + of_sequence(b, L.shape[0] > 1)
    ulp = float(np.spacing(np.abs(L[b, i]).astype(L_dtype)))
    r = float(rho[b, i])
    if 0.0 < r < math.inf:
        share = float(top[b, i]) / r
        held = f"its largest weight is {share:.3g} of the sum" if share > 0.0 else \
            "no weight holds a quarter of the sum"
        what = (f"sum to {r:.6g}, not 1, in a row that is not saturated ({held}), where that "
                f"cannot be corrected")
    else:
        what = f"sum to {r:.3g}: no digit of them survives"
    raise ValueError(
        f"A (here L, the row log-sum-exp) is too coarse to recompute the weights from: in {at}, "
        f"L = {float(L[b, i]):.9g} is held to +-{ulp:.2g} in {np.dtype(L_dtype).name}, and the "
        f"weights exp(scores - L) {what}. Pass the weights A (forward(..., return_weights=True)) "
        f"instead, or scale X down.")


# ------------------------------------------------------- the forward of plain inputs
#
# At small T the checked forward's Python costs as much as its products: at T = 128, d = 64
# (float32, one thread) it took 355 us a call under cProfile, 92 of them in _attend_forward and
# 55 in the projections; the rest went to 12 NumPy reductions (the finiteness of X, the weights,
# Q, K, V and Y, and _score_range's max and min), seven buffer lookups and four copies. The
# common case (C-contiguous float arrays of one dtype, projections, Python bools, the weights
# kept as copies, a grid that needs no memory check) runs here in two compiled calls instead;
# anything else, and any input, projection or score that the checks would act on, goes the
# checked way, which raises or rescales as it always has. The results are the same calls in
# the same order: bit for bit the checked forward's (tests/test_attention_fast.py).
# The copies of X and the weights are made as they are scanned, and whether the checked way
# must run is decided in compiled code: at T = 128, d = 64 (float32, one thread) a call went
# from 176 to 139 us (NumPy's forward: 163), at d = 256 from 972 to 888 (9 interleaved rounds).

_U = {4: (np.uint32, 0x7FFFFFFF, 0x7F800000), 8: (np.uint64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000)}
# The plain forward also keeps copies of A and Y when A is at most this (T <= 256 in float32,
# 181 in float64): a backward given exactly those skips the checks that A follows from X. A copy
# costs the forward about 1 % at T = 128, d = 64; past this the copies cost more than the checks.
OUTPUTS_MAX = 256 << 10
# log2(max / 16) per dtype: where max |Q| max |K| d_k reaches it, _score_range rescales Q
_LIMIT_LOG2 = {np.dtype(t): math.log2(np.finfo(t).max / 16) for t in (np.float32, np.float64)}


@njit(cache=True)
def _abs_bits(u, mask):
    # u: a float array's bits, flat. The largest |x|'s bits: IEEE order is integer order for
    # |x|, so this is max |x| exactly, and it is the infinity's bits or more iff some x is not finite.
    m = mask ^ mask                               # 0, in u's integer type
    for i in range(u.size):
        b = u[i] & mask
        if b > m:
            m = b
    return m


def _bits(a):
    """a's bits, flat: a C-contiguous float32 (float64) array viewed as uint32 (uint64)."""
    return a.reshape(-1).view(_U[a.itemsize][0])


@overload(_bits)
def _bits_overload(a):
    u = _U[a.dtype.bitwidth // 8][0]
    return lambda a: a.reshape(-1).view(u)


@njit(cache=True)
def _copy_abs_bits(dst, src, mask):
    # dst[...] = src[...] (flat, C-contiguous, one size), and src's largest |x|'s bits as
    # _abs_bits finds them, in one pass
    d, s = _bits(dst), _bits(src)
    m = mask ^ mask
    for i in range(s.size):
        b = s[i]
        d[i] = b
        b &= mask
        if b > m:
            m = b
    return m


@njit(cache=True)
def _value_of(bits, like):
    # the float in like's dtype whose bits these are
    v = np.empty(1, dtype=like.dtype)
    _bits(v)[0] = bits
    return v[0]


@njit(cache=True)
def _project_bits(X2, Wq, Wk, Wv, Q, K, V, cX, cWq, cWk, cWv, mask, inf, limit_log2):
    # The plain forward's projections, with copies of X and the weights for the backward (each
    # copied as it is scanned). 0: X, the weights and Q, K, V are finite and the scores need no
    # rescaling (_score_range's test on max |Q| max |K| d_k against limit_log2 = log2(max / 16));
    # 1: something is not finite or the scores need rescaling: the checked forward decides
    if (_copy_abs_bits(cX, X2, mask) >= inf or _copy_abs_bits(cWq, Wq, mask) >= inf
            or _copy_abs_bits(cWk, Wk, mask) >= inf or _copy_abs_bits(cWv, Wv, mask) >= inf):
        return 1
    dot(X2, Wq, Q)
    dot(X2, Wk, K)
    dot(X2, Wv, V)
    uq, uk = _abs_bits(_bits(Q), mask), _abs_bits(_bits(K), mask)
    if uq >= inf or uk >= inf or _abs_bits(_bits(V), mask) >= inf:
        return 1
    q, k = _value_of(uq, Q), _value_of(uk, K)
    if q != 0.0 and k != 0.0 and math.ceil(math.log2(Q.shape[1]) + math.log2(q) + math.log2(k)
                                           - limit_log2) > 0:
        return 1
    return 0


@njit(cache=True, error_model="numpy")
def _attend_keep(Q, K, V, scale, causal, A, Y, mask, inf, outputs, cA, cY):
    # the forward's attention, then (with outputs) copies of A and Y for the backward; True if
    # Y is finite
    _attend_forward(Q, K, V, scale, causal, A, Y)
    if outputs:
        _copy_flat(cA, A)
        _copy_flat(cY, Y)
    return _abs_bits(_bits(Y), mask) < inf


@njit(cache=True)
def _copy_flat(dst, src):
    # dst[...] = src[...], both C-contiguous of one size: a flat loop, which LLVM vectorises
    # (Numba's slice assignment of a 2-D or 3-D array ran 2.5 to 4 times slower: 24 against
    # 6 us for a 256 x 256 float32 array here)
    d, s = dst.reshape(-1), src.reshape(-1)
    for i in range(d.size):
        d[i] = s[i]


_SAME_CHUNK = 1024      # elements compared between two looks at the result


@njit(cache=True)
def _same_bits(a, b):
    # two arrays' bits, flat: all equal (a -0.0 against a 0.0 is not: the checked path decides).
    # The XORs of a chunk are OR-ed without a branch, so that the loop vectorises (3 to 4 times
    # the speed of a test per element), and a difference ends the scan at its chunk.
    n = a.size
    if n != b.size:
        return False
    if n == 0:
        return True
    full = n - n % _SAME_CHUNK
    for c in range(0, full, _SAME_CHUNK):
        acc = a[0] ^ a[0]
        for k in range(_SAME_CHUNK):
            acc |= a[c + k] ^ b[c + k]
        if acc != 0:
            return False
    acc = a[0] ^ a[0]
    for k in range(full, n):
        acc |= a[k] ^ b[k]
    return acc == 0


@njit(cache=True)
def _same_as_kept(uX, uWq, uWk, uWv, uA, uY, cX, cWq, cWk, cWv, cA, cY, use_Y, udY, mask, inf):
    # 0: the backward's X, weights, A (and Y) are the plain forward's, bit for bit, and dY is
    # finite; 1: something differs; 2: dY is not finite
    if not (_same_bits(uX, cX) and _same_bits(uWq, cWq) and _same_bits(uWk, cWk)
            and _same_bits(uWv, cWv) and _same_bits(uA, cA)):
        return 1
    if use_Y and not _same_bits(uY, cY):
        return 1
    return 2 if _abs_bits(udY, mask) >= inf else 0


@njit(cache=True, error_model="numpy")
def _backward_bits(Q, K, V, A, dY, scale, dQ, dK, dV, dS, X2, Wq, Wk, Wv, dX, dWq, dWk, dWv, part,
                   udX, udWq, udWk, udWv, mask, bits):
    # the weights path's backward (_attend_backward, _projection_grads), then each gradient's
    # |max| bits
    _attend_backward(Q, K, V, A, dY, scale, dQ, dK, dV, dS)
    B, T, _ = Q.shape
    _projection_grads(X2, Wq, Wk, Wv, dQ.reshape(B * T, Q.shape[2]), dK.reshape(B * T, K.shape[2]),
                      dV.reshape(B * T, V.shape[2]), dX, dWq, dWk, dWv, part)
    bits[0] = _abs_bits(udX, mask)
    bits[1] = _abs_bits(udWq, mask)
    bits[2] = _abs_bits(udWk, mask)
    bits[3] = _abs_bits(udWv, mask)


def _plain(a, dtype):
    return type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous and a.ndim == 2


def _fast_forward(X, Wq, Wk, Wv, scale, causal):
    """(Y, A) of the plain case, or None where the checked forward must run (see above)."""
    if type(X) is not np.ndarray or type(scale) is not bool or type(causal) is not bool:
        return None
    dtype = X.dtype
    if dtype not in v.FLOAT_DTYPES or X.ndim not in (2, 3) or not X.flags.c_contiguous \
            or not (_plain(Wq, dtype) and _plain(Wk, dtype) and _plain(Wv, dtype)):
        return None
    X3 = _batch3(X)
    B, T, d_model = X3.shape
    d_k, d_v = Wq.shape[1], Wv.shape[1]
    if 0 in (B, T, d_model, d_k, d_v) or Wq.shape[0] != d_model or Wk.shape != Wq.shape \
            or Wv.shape[0] != d_model:
        return None
    if B * T * T * X.itemsize > v._SMALL_BYTES \
            or not _copies_kept(X.nbytes + Wq.nbytes + Wk.nbytes + Wv.nbytes):
        return None
    key = (B, T, d_model, d_k, d_v, dtype)
    held = workspace.kept("attention_fast")
    if held is None or held[0] != key:
        Q, K, V = (np.empty((B, T, w), dtype=dtype) for w in (d_k, d_k, d_v))
        copies = tuple(np.empty(a.shape, dtype=dtype) for a in (X3, Wq, Wk, Wv))
        held = (key, Q, K, V, copies)
        workspace.keep("attention_fast", held)
    _, Q, K, V, copies = held
    workspace.keep(_KEPT, None)                   # these buffers change: nothing kept meanwhile
    U, mask, inf = _U[X.itemsize]
    mask, inf = U(mask), U(inf)
    if _project_bits(X3.reshape(B * T, d_model), Wq, Wk, Wv, Q.reshape(B * T, d_k),
                     K.reshape(B * T, d_k), V.reshape(B * T, d_v), *copies, mask, inf,
                     _LIMIT_LOG2[dtype]):
        return None                               # not finite, or scores to rescale
    factor = 1.0 / math.sqrt(d_k) if scale else 1.0
    A = np.empty((B, T, T), dtype=dtype)
    Y = np.empty((B, T, d_v), dtype=dtype)
    outputs = A.nbytes <= OUTPUTS_MAX
    shape_A, shape_Y = (A.shape, Y.shape) if outputs else ((0, 0, 0), (0, 0, 0))
    outs = workspace.kept("attention_fast_out")
    if outs is None or outs[3].shape != shape_A or outs[4].shape != shape_Y or outs[3].dtype != dtype:
        outs = (None, None, None, np.empty(shape_A, dtype=dtype), np.empty(shape_Y, dtype=dtype))
    workspace.keep("attention_fast_out", None)
    if not _attend_keep(Q, K, V, factor, causal, A, Y, mask, inf, outputs, outs[3], outs[4]):
        _check_finite("Y", Y, "the output")
    kept = (copies, Q, K, V)
    workspace.keep(_KEPT, kept)
    if outputs:                                   # valid while these projections are the kept ones
        workspace.keep("attention_fast_out", (kept, scale, causal, outs[3], outs[4]))
    if X.ndim == 2:
        return Y[0], A[0]
    return Y, A


def _fast_backward(X, Wq, Wk, Wv, A, dY, scale, causal, Y):
    """The backward of the plain forward's own X, weights, A (and Y), or None where the checked
    backward must run.

    When X and the weights hold the values the plain forward kept, and A (and Y, if given)
    the values it returned, A follows from X: the checks that ask whether it does
    (``_check_weights``, ``_check_against_forward``) would pass, and are skipped. Everything
    else is the checked backward's weights path, the same calls in the same order.
    """
    outs = workspace.kept("attention_fast_out")
    if outs is None or workspace.kept(_KEPT) is not outs[0]:
        return None
    (copies, Q, K, V), scale0, causal0, cA, cY = outs
    if type(scale) is not bool or type(causal) is not bool or scale != scale0 or causal != causal0:
        return None
    dtype = Q.dtype
    X3 = X if type(X) is np.ndarray and X.ndim == 3 else X[None] if type(X) is np.ndarray else None
    if X3 is None or X3.shape != copies[0].shape or X.dtype != dtype or not X.flags.c_contiguous:
        return None
    for a, c in zip((Wq, Wk, Wv), copies[1:]):
        if type(a) is not np.ndarray or a.shape != c.shape or a.dtype != dtype \
                or not a.flags.c_contiguous:
            return None
    lead = X.shape[:-1]
    for a, shape in ((A, lead + (X3.shape[1],)), (dY, lead + (V.shape[2],)),
                     (Y, lead + (V.shape[2],))):
        if a is Y and Y is None:
            continue
        if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype \
                or not a.flags.c_contiguous:
            return None
    U, mask, inf = _U[X.itemsize]
    mask, inf = U(mask), U(inf)
    flat = [a.reshape(-1).view(U) for a in (X, Wq, Wk, Wv, A, cY if Y is None else Y,
                                            *copies, cA, cY, dY)]
    same = _same_as_kept(*flat[:12], Y is not None, flat[12], mask, inf)
    if same != 0:
        return None                               # other values, or a dY the checks name
    B, T, d_model = X3.shape
    d_k, d_v = Q.shape[2], V.shape[2]
    key = (B, T, d_model, d_k, d_v, dtype)
    held = workspace.kept("attention_fast_bwd")
    if held is None or held[0] != key:
        held = (key, *(np.empty(g.shape, dtype=dtype) for g in (Q, K, V)),
                np.empty((T, T), dtype=dtype),
                np.empty((min(_PART_ROWS, B * T), d_model), dtype=dtype), np.zeros(4, np.uint64))
        workspace.keep("attention_fast_bwd", held)
    _, dQ, dK, dV, dS, part, bits = held
    dX = np.empty((B * T, d_model), dtype=dtype)
    dWq, dWk, dWv = np.empty_like(Wq), np.empty_like(Wk), np.empty_like(Wv)
    factor = 1.0 / math.sqrt(d_k) if scale else 1.0
    _backward_bits(Q, K, V, A.reshape(B, T, T), dY.reshape(B, T, d_v), factor, dQ, dK, dV, dS,
                   X3.reshape(B * T, d_model), Wq, Wk, Wv, dX, dWq, dWk, dWv, part,
                   *(g.reshape(-1).view(U) for g in (dX, dWq, dWk, dWv)), mask, bits)
    grads = AttentionGrads(dX.reshape(B, T, d_model), dWq, dWk, dWv)
    if int(bits.max()) >= int(inf):
        for name, g in zip(grads._fields, grads):
            _check_finite(name, g, "the gradient")
    if X.ndim == 2:
        grads = grads._replace(dX=grads.dX[0])
    return grads


def forward(X, Wq=None, Wk=None, Wv=None, scale=True, causal=False, return_weights=True):
    """Single-head self-attention. Returns (Y, A), or (Y, L) with ``return_weights=False``.

    X is (T, d_model) or (B, T, d_model); Wq, Wk (d_model, d_k); Wv (d_model, d_v).
    Wq = Wk = Wv = None means no projections: Q = K = V = X. Y is (..., T, d_v), in X's
    dtype. A (..., T, T) holds the weights. With ``return_weights=False`` the weights are
    never stored: queries and keys go through in tiles (TILE_Q x TILE_K) with an online
    softmax, and L (..., T) is each row's log-sum-exp of the scaled scores, all that
    ``backward`` needs to recompute them; memory grows like T, not T^2. L is float64
    whatever X's dtype (float32 scores of X * 1e19 have a log-sum-exp beyond float32).

    Finite inputs whose scores would overflow are rescaled by a power of two first, so A
    and Y stay finite. A FloatingPointError names what cannot: a projection that overflows,
    or an L beyond the dtype's range.
    """
    if return_weights is True and Wq is not None:
        out = _fast_forward(X, Wq, Wk, Wv, scale, causal)
        if out is not None:
            return out
    X, Wq, Wk, Wv = _check_self(X, Wq, Wk, Wv, scale, causal)
    _check_flag("return_weights", return_weights)
    X3 = _batch3(X)
    B, T, d_model = X3.shape
    d_k = d_model if Wq is None else Wq.shape[1]
    d_v = d_model if Wv is None else Wv.shape[1]
    if return_weights:
        _grid_bytes(B, T, X.itemsize, 1, inputs=(("X", X),))
    else:
        v.check_memory(tiled_bytes(B, T, d_model, d_k, d_v, X.itemsize),
                       f"tiled attention at T = {T}{f', B = {B}' if B > 1 else ''}",
                       inputs=(("X", X),))
    X = v.contiguous("X", X)                         # a broadcast X: only now, and counted above
    X3 = _batch3(X)
    Q, K, V = _project(X3, Wq, Wk, Wv)
    factor = 1.0 / math.sqrt(d_k) if scale else 1.0
    Qs, factor_s, _ = _score_range(Q, K, factor)
    Y = np.empty((B, T, d_v), dtype=X.dtype)
    if return_weights:
        second = np.empty((B, T, T), dtype=X.dtype)
        _attend_forward(Qs, K, V, factor_s, bool(causal), second, Y)
    else:
        second = np.empty((B, T))                    # L: float64 whatever X's dtype
        tq, tk = min(TILE_Q, T), min(TILE_K, T)
        _attend_forward_tiled(Qs, K, V, factor_s, bool(causal), tq, tk, Y, second,
                              workspace.buffer("tiles", (tq * tk + 2 * tq * d_v,), X.dtype),
                              workspace.buffer("tile_stats", (3 * tq,), np.float64),
                              workspace.buffer("exp_bits", (tk,), np.int64))
        _check_finite("L", second, "the row log-sum-exp")
    _check_finite("Y", Y, "the output")
    if X.ndim == 2:
        return Y[0], second[0]
    return Y, second


def backward(X, Wq, Wk, Wv, A, dY, scale=True, causal=False, Y=None):
    """Gradients of self-attention given the forward's A (or L) and the upstream dY.

    Returns ``AttentionGrads(dX, dWq, dWk, dWv)``; without projections the weight
    gradients are None. A is either the weights (..., T, T) or L (..., T), the row
    log-sum-exp from ``forward(..., return_weights=False)``; given L, the weights are
    recomputed tile by tile and nothing of size T x T is kept. ``Y``, the forward's output,
    spares the L path a forward pass (it needs dY_i . Y_i per row); without it Y is
    recomputed, and L checked against the recomputation. ``scale`` and ``causal`` must be
    the forward's.

    Checked, cheaply: A's rows are softmax rows (non-negative, summing to 1 within
    sqrt(eps), zero above the diagonal when causal); and 8 rows per sequence of A (or of L,
    and of Y when given) are recomputed from X and the weights. A ValueError names the one
    that disagrees. Not checked: rows outside the sample, and differences within the
    rounding of the scores (where the scores are huge, that rounding is large).

    Where the softmax saturates, L's own rounding (eps |L|) and that of dY . Y are of the
    size of what they round; the L path takes both out at each row's largest weight (see
    ``_attend_backward_tiled``), and gives the weights' gradients at any score. A row that
    is not saturated and whose weights L leaves off by more than sqrt(eps) is a ValueError
    naming A (here L): pass the weights instead.
    """
    grads = _fast_backward(X, Wq, Wk, Wv, A, dY, scale, causal, Y)
    if grads is not None:
        return grads
    X, Wq, Wk, Wv = _check_self(X, Wq, Wk, Wv, scale, causal)
    X3 = _batch3(X)
    B, T, d_model = X3.shape
    lead = X.shape[:-1]                              # (T,) or (B, T): shapes as the user passed them
    d_k = d_model if Wq is None else Wq.shape[1]
    d_v = d_model if Wv is None else Wv.shape[1]
    weights = np.ndim(A) == X.ndim                   # else L, one value per row
    if weights:
        _grid_bytes(B + 1, T, X.itemsize, 1, inputs=(("X", X),))   # A (copied if strided) and dS
    else:
        v.check_memory(tiled_bytes(B, T, d_model, d_k, d_v, X.itemsize, backward=True),
                       f"the tiled attention backward at T = {T}{f', B = {B}' if B > 1 else ''}",
                       inputs=(("X", X),))
    X = v.contiguous("X", X)                         # a broadcast X: only now, and counted above
    X3 = _batch3(X)
    # weights in X's dtype; L in either float dtype (float64 from forward), held in float64
    A = v.as_float_array("A", A, (X.ndim, X.ndim - 1), X.dtype if weights else None)
    if A.shape not in (lead + (T,), lead):
        raise ValueError(f"A must have shape {lead + (T,)} (the weights) or {lead} (L, the row "
                         f"log-sum-exp), as forward returned them, got {A.shape}.")
    dY = v.as_float_array("dY", dY, X.ndim, X.dtype)
    v.check_shape("dY", dY, lead + (d_v,))
    if Y is not None:
        Y = v.as_float_array("Y", Y, X.ndim, X.dtype)
        v.check_shape("Y", Y, lead + (d_v,))
        Y = _batch3(Y)
    L_dtype = A.dtype                                # L's digits: float64 from forward
    A = _batch3(A) if weights else A.reshape(B, T).astype(np.float64, copy=False)
    dY = _batch3(dY)
    Q, K, V = _project(X3, Wq, Wk, Wv, reuse=True)   # the forward's, if X and the weights are
    factor = 1.0 / math.sqrt(d_k) if scale else 1.0
    Qs, factor_s, e = _score_range(Q, K, factor)
    dQ, dK, dV = (workspace.buffer(n, g.shape, g.dtype) for n, g in (("dQ", Q), ("dK", K), ("dV", V)))
    if weights:
        _check_weights(A, causal)
        _check_against_forward(Qs, K, V, factor_s, causal, A=A, Y=Y)
        dS = workspace.buffer("dS", (T, T), X.dtype)
        _attend_backward(Q, K, V, A, dY, factor, dQ, dK, dV, dS)
    else:
        tq, tk = min(TILE_Q, T), min(TILE_K, T)
        if Y is None:                                # one forward pass: Y, and L to check A against
            Y = np.empty((B, T, d_v), dtype=X.dtype)
            L2 = np.empty((B, T))
            _attend_forward_tiled(Qs, K, V, factor_s, bool(causal), tq, tk, Y, L2,
                                  workspace.buffer("tiles", (tq * tk + 2 * tq * d_v,), X.dtype),
                                  workspace.buffer("tile_stats", (3 * tq,), np.float64),
                                  workspace.buffer("exp_bits", (tk,), np.int64))
            _check_lse(A, L2, X.dtype)
        else:
            _check_against_forward(Qs, K, V, factor_s, causal, L=A, Y=Y)
        rows = workspace.buffer("row_fix", (3, B, T), np.float64)
        _attend_backward_tiled(Qs, K, V, A, Y, dY, factor_s, factor, bool(causal), tq, tk,
                               dQ, dK, dV, workspace.buffer("D", (B, T), np.float64), rows,
                               workspace.buffer("row_top", (B, T), np.int64),
                               workspace.buffer("tiles_bwd", (2 * tq * tk + tq * d_k
                                                               + tk * max(d_k, d_v),), X.dtype),
                               workspace.buffer("exp_bits", (tk,), np.int64))
        _check_row_weights(A, L_dtype, rows[1], rows[2], X.dtype)
        if e:
            dK *= dK.dtype.type(2.0 ** e)            # dK = dS^T Q, and the kernel saw Q / 2^e
    if Wq is None:
        dX = dQ + dK + dV                            # X plays all three roles
        grads = AttentionGrads(dX, None, None, None)
    else:
        X2 = X3.reshape(B * T, d_model)
        dQ2, dK2, dV2 = (g.reshape(B * T, -1) for g in (dQ, dK, dV))
        dX = np.empty((B * T, d_model), dtype=X.dtype)
        dWq, dWk, dWv = np.empty_like(Wq), np.empty_like(Wk), np.empty_like(Wv)
        _projection_grads(X2, Wq, Wk, Wv, dQ2, dK2, dV2, dX, dWq, dWk, dWv,
                          workspace.buffer("dX_part", (min(_PART_ROWS, B * T), d_model), dX.dtype))
        grads = AttentionGrads(dX.reshape(B, T, d_model), dWq, dWk, dWv)
    for name, g in zip(grads._fields, grads):
        if g is not None:
            _check_finite(name, g, "the gradient")
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
        dot(Ti, va, E[i])                            # e_ij = va . phi(p_ij)


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
    dS: np.ndarray          # (T_y, d_s)
    dH: np.ndarray          # (T_x, d_h) = dH_value + dH_score
    dWsa: np.ndarray        # (d_a, d_s)
    dWha: np.ndarray        # (d_a, d_h)
    dva: np.ndarray         # (d_a,)
    dH_value: np.ndarray    # route 1: h_j as a term of each c_i
    dH_score: np.ndarray    # route 2: h_j as an argument of the score a(s_i, h_j)


def _check_alignment(S, H, Wsa, Wha, va, nonlinearity):
    # The decoder's width d_s and the encoder's d_h may differ: "las dos matrices tienen d_a
    # filas cada una, y sus columnas son cosa de cada lado" (the additive-attention lesson).
    v.check_choice("nonlinearity", nonlinearity, NONLINEARITIES)
    dtype = v.common_dtype("S", S)
    S = v.as_float_array("S", S, 2)
    d_s = S.shape[1]
    H = v.as_float_array("H", H, 2, dtype)
    d_h = H.shape[1]
    Wsa = v.as_float_array("Wsa", Wsa, 2, dtype)
    if Wsa.shape[1] != d_s:
        raise ValueError(f"Wsa must have shape (d_a, {d_s}) to match S's width d_s = {d_s}, "
                         f"got {Wsa.shape}.")
    d_a = Wsa.shape[0]
    Wha = v.as_float_array("Wha", Wha, 2, dtype)
    if Wha.shape != (d_a, d_h):
        raise ValueError(f"Wha must have shape ({d_a}, {d_h}): d_a = {d_a} rows as Wsa and H's "
                         f"width d_h = {d_h} columns, got {Wha.shape}.")
    va = v.as_float_array("va", va, 1, dtype)
    v.check_shape("va", va, (d_a,))
    v.check_memory(S.shape[0] * H.shape[0] * (d_a + 2) * S.itemsize,
                   f"the additive score grid ({S.shape[0]} x {H.shape[0]} x {d_a})")
    return S, H, Wsa, Wha, va


def _alignment(S, H, Wsa, Wha, va, use_tanh):
    T_y, T_x, d_a = S.shape[0], H.shape[0], va.shape[0]
    Ps = matmul(S, Wsa.T)                            # (T_y, d_a): one projection per step
    Ph = matmul(H, Wha.T)                            # (T_x, d_a): one per position
    _check_finite("Wsa s_i", Ps, "the projection")
    _check_finite("Wha h_j", Ph, "the projection")
    Tn = np.empty((T_y, T_x, d_a), dtype=S.dtype)
    alpha = np.empty((T_y, T_x), dtype=S.dtype)
    _alignment_grid(Ps, Ph, va, use_tanh, Tn, alpha)
    _check_finite("e_ij = va . phi(Wsa s_i + Wha h_j)", alpha, "the score")   # Tn's overflow too
    _softmax_rows_inplace(alpha, 1.0, False, np.empty(T_x, dtype=np.int64))
    return alpha, Tn


def alignment(S, H, Wsa, Wha, va, nonlinearity="tanh"):
    """Bahdanau's additive alignment alpha (T_y, T_x), rows summing to 1.

    S (T_y, d_s): row i is the decoder state that scores step i; H (T_x, d_h):
    encoder states (d_s and d_h may differ); Wsa (d_a, d_s), Wha (d_a, d_h); va (d_a,).
    nonlinearity=None is the
    lesson's ablation without tanh, where every row comes out the same.
    """
    S, H, Wsa, Wha, va = _check_alignment(S, H, Wsa, Wha, va, nonlinearity)
    return _alignment(S, H, Wsa, Wha, va, nonlinearity == "tanh")[0]


def alignment_backward(S, H, Wsa, Wha, va, dC, nonlinearity="tanh"):
    """Gradients of a loss whose gradient w.r.t. the contexts C = alpha H is dC (T_y, d_h).

    Returns ``AlignmentGrads``; the gradient reaching H is also split into its two
    routes, which sum to dH: the value route alpha^T dC and the score route
    through the alignment model. A gradient that overflows (the score route grows like
    |H|^2 without tanh) is a FloatingPointError naming it, never a NaN.
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
    grads = AlignmentGrads(
        dS=matmul(dPs, Wsa), dH=dH_value + dH_score, dWsa=matmul(dPs.T, S),
        dWha=matmul(dPh.T, H), dva=dva,
        dH_value=dH_value, dH_score=dH_score,
    )
    for name, g in zip(grads._fields, grads):        # e.g. dva = sum dE phi(p): |dE| |p| ~ |H|^2
        _check_finite(name, g, "the gradient")
    return grads
