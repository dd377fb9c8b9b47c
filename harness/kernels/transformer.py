"""The Transformer layer of the attention lesson, encoder and decoder, forward and exact backward.

Parameters come in the layout of torch.nn.TransformerEncoderLayer and
TransformerDecoderLayer's ``state_dict`` (batch_first), so that
``{k: v.numpy() for k, v in layer.state_dict().items()}`` is a valid ``params``.

Post-norm (the paper; torch's default), one stage per sublayer:

    x = LN1(x + SA(x))                 encoder and decoder: self-attention (causal: j <= i)
    x = LN2(x + CA(x, memory))         decoder only: attention over the encoder's memory
    x = LN(x + FF(x))                  FF(x) = act(x W1^T + b1) W2^T + b2

Pre-norm (``norm_first=True``): x = x + SA(LN1(x)), and so on; memory is never normed.
Multi-head attention splits d_model into h heads of d_k = d_model / h, each with its own
row-softmax of Q K^T / sqrt(d_k):

    [Q | K | V] = x W_in^T + b_in      Z = concat_h(softmax(Q_h K_h^T / sqrt(d_k)) V_h) W_o^T + b_o

Every product goes to BLAS into a preallocated buffer: the projections over all B T rows
at once, the scores and mixes one head at a time on head-major copies (B h, T, d_k). What
is not a product (head split, softmax, GELU, layer norm, bias sums) is a compiled loop
that vectorises. Below ``TILED_FROM`` keys, a head's weights are stored, one block of query
rows at a time (causal: only the columns a block sees); from there on, queries meet keys
in tiles and only each row's log-sum-exp is kept (as its shift and log-sum), from which the
backward recomputes the weights (FlashAttention's scheme, as ``harness.kernels.attention``
has it for one head; its kernels assume as many keys as queries, which cross-attention does
not have). The softmax is shifted by a bound on each row's maximum instead of the maximum
itself, which saves a pass over the scores (see ``_weight_floor``). Its backward keeps its
digits where a row saturates (see ``_softmax_backward_row``), and the layer norm's where a
row's squares pass float64's range (``_norm_row_scaled``): at X x 1e150 dX is as exact as
at X.

The forward keeps what the backward needs (its "tape") in this thread's workspace, with
copies of its inputs: a backward given exactly those inputs (compared bit for bit, with the
same options) starts from the tape, as autograd would; any other recomputes the forward.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels import tiles
from harness.kernels.blas import dot, matmul
from harness.kernels.vmath import (_EXP_FLOOR, _F_EXP_FLOOR, _F_HALF, _F_INV_LN2, _F_LN2_HI,
                                   _F_LN2_LO, _F_ONE, _expm1_reduced, _expm1f_reduced, _pow2_bits,
                                   _reduce, _round_k, row_dot, row_max, row_sum)

ACTIVATIONS = ("relu", "gelu")
LN_EPS = 1e-5                  # torch.nn.LayerNorm's default, which both torch layers use
# From this many keys on, attention goes through tiles and never stores a head's weights.
# Below it the stored weights spare the backward a score GEMM and an exp per weight; at
# T = 1024 the two paths took the same time, at 2048 the stored one was 25 % slower (float32,
# 8 heads of 32, one thread: its 128 MiB of weights go through memory twice).
TILED_FROM = 1024
CAUSAL_ROWS = 128              # causal, stored weights: query rows per block (w = its last row + 1)
TILE_Q, TILE_K = 256, 512      # the tiled path's tiles, as harness.kernels.attention's

ENCODER_STAGES = (("self_attn", "norm1"), ("linear", "norm2"))
DECODER_STAGES = (("self_attn", "norm1"), ("multihead_attn", "norm2"), ("linear", "norm3"))


# ------------------------------------------------------------------------ exp
# vmath's exp, in one pass: 2**k is made from its bits by an LLVM bitcast, which vectorises,
# where vmath goes through a view of an int64 scratch in a pass of its own (Numba has no
# scalar view). The softmax's exp is then as fast as NumPy's SIMD np.exp (measured: 262,144
# float32 in 0.15 ms, both), twice vmath's.

def _from_bits(float_type, int_type):
    # the float whose bits are an int of its width, as one LLVM bitcast
    @intrinsic
    def from_bits(typingctx, bits):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(float_type))
        return float_type(int_type), codegen
    return from_bits


_float32_from_bits = _from_bits(types.float32, types.int32)
_float64_from_bits = _from_bits(types.float64, types.int64)


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def _exp32(x):
    # exp(x) for float32 x <= 0 in float32 arithmetic (vmath's reduction and polynomial); 0
    # below float32's smallest normal
    y = max(x, _F_EXP_FLOOR)
    k = np.floor(y * _F_INV_LN2 + _F_HALF)
    r = (y - k * _F_LN2_HI) - k * _F_LN2_LO
    two_k = _float32_from_bits((np.int32(k) + np.int32(127)) << np.int32(23))
    e = (_F_ONE + _expm1f_reduced(r)) * two_k
    return e if x >= _F_EXP_FLOOR else np.float32(0.0)


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def _exp64(x):
    # exp(x) for float64 x <= 0 (vmath's reduction and polynomial); 0 below exp(-708)
    y = max(x, _EXP_FLOOR)
    k = _round_k(y)
    e = (1.0 + _expm1_reduced(_reduce(y, k))) * _float64_from_bits(_pow2_bits(k))
    return e if x >= _EXP_FLOOR else 0.0


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_shifted(row, n, m, scale):
    # row[:n] = exp((row[:n] - m) scale) for m >= max(row[:n]), scale > 0, in row's dtype
    if row.itemsize == 4:                    # resolved at compile time: one path per dtype
        mf, sf = np.float32(m), np.float32(scale)
        for j in range(n):
            row[j] = _exp32((row[j] - mf) * sf)
    else:
        for j in range(n):
            row[j] = _exp64((row[j] - m) * scale)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_shifted_less(row, n, m, scale, c):
    # row[:n] = exp((row[:n] - m) scale - c): _exp_shifted's steps, then - c
    if row.itemsize == 4:
        mf, sf, cf = np.float32(m), np.float32(scale), np.float32(c)
        for j in range(n):
            row[j] = _exp32((row[j] - mf) * sf - cf)
    else:
        for j in range(n):
            row[j] = _exp64((row[j] - m) * scale - c)


# ---------------------------------------------------------------------- heads

@njit(cache=True, error_model="numpy")
def _split_heads(P, bias, out):
    # P (B T, n d_model): n projections side by side; bias (n d_model,) or empty
    # -> out (n, B h, T, d_k): out[p, b h + i, t] = P[b T + t, p d + i d_k : ...] + bias[...]
    # One head at a time: its rows are written in order (measured twice as fast as row by row).
    n, BH, T, d_k = out.shape
    d = P.shape[1] // n
    H = d // d_k
    with_bias = bias.shape[0] > 0
    for b in range(BH // H):
        for p in range(n):
            for h in range(H):
                dst = out[p, b * H + h]
                c0 = p * d + h * d_k
                for t in range(T):
                    src, row = P[b * T + t], dst[t]
                    if with_bias:
                        for k in range(d_k):
                            row[k] = src[c0 + k] + bias[c0 + k]
                    else:
                        for k in range(d_k):
                            row[k] = src[c0 + k]


@njit(cache=True, error_model="numpy")
def _merge_heads(heads, out):
    # The reverse of _split_heads (no bias): heads (n, B h, T, d_k) -> out (B T, n d_model)
    n, BH, T, d_k = heads.shape
    d = out.shape[1] // n
    H = d // d_k
    for b in range(BH // H):
        for t in range(T):
            row = out[b * T + t]
            for p in range(n):
                for h in range(H):
                    src = heads[p, b * H + h, t]
                    c0 = p * d + h * d_k
                    for k in range(d_k):
                        row[c0 + k] = src[k]


# ------------------------------------------------------------ the softmax's backward
# dE_ij = scale A_ij (dA_ij - D_i), D_i = sum_k A_ik dA_ik, cancels where one weight A_it is
# near 1 (a saturated row: large inputs): dA_it - D_i = -sum_{k != t} A_ik (dA_ik - dA_it) is
# then (1 - A_it) |dA| while its rounding error is eps |dA|, and dQ = dE K, dK = dE^T Q, which
# are as small, inherit it: at X x 1e8 the error swamped dX (post-norm) by 1e7. So dE_it is
# remade from that sum, as s1 - s0 d_t with s0 = sum_{k != t} A_ik, s1 = sum_{k != t} A_ik
# (dA_ik - D_i) and d_t = dA_it - D_i, all three as small as the sum and exact to rounding:
# no digit is lost. The other entries keep D_i: their weights sum to 1 - A_it, and so does
# their error. Only a key holding over half the row's weight can be t, and then sum_j A_ij^2
# > 1/4: the pass that makes dE sums the squares on the way, and only the rows above 1/4 pay
# a second pass (_dominant). Measured, float32, T = 1024, d_k = 8: the tiled backward 3.5 %
# slower on unsaturated rows, 10 % where 80 % of the rows are saturated; stored, 1 % and 14 %.

@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz"})
def _softmax_backward_row(p, e, n, c, scale):
    # e[:n] = dE = scale p (e - c), e holding dA on entry; returns the float64 sums of p,
    # p (dA - c) and p^2
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for j in range(n):
        pj = np.float64(p[j])
        dj = pj * (e[j] - c)
        s0 += pj
        s1 += dj
        s2 += pj * pj
        e[j] = dj * scale
    return s0, s1, s2


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz"})
def _dominant(p, e, n, half, scale):
    # After _softmax_backward_row: the entry of p[:n] above half, if any (at most one is, half
    # being half the row's sum): (t, p_t, d_t = dA_t - c = e_t / (p_t scale), and the sums over
    # the other entries of p_j and p_j (dA_j - c) = e_j / scale), or p_t = 0. Selects, not
    # branches, so that the pass vectorises.
    t = 0
    p_t = 0.0
    e_t = 0.0
    s0 = 0.0
    s1 = 0.0
    for j in range(n):
        pj = np.float64(p[j])
        ej = np.float64(e[j])
        big = pj > half
        t += j if big else 0
        p_t += pj if big else 0.0
        e_t += ej if big else 0.0
        s0 += 0.0 if big else pj
        s1 += 0.0 if big else ej
    return t, p_t, e_t / (p_t * scale) if p_t > 0.0 else 0.0, s0, s1 / scale


# ------------------------------------------------------------ attention, stored

def _weights_size(T_q, T_k, causal):
    """Elements of one head's stored weights: causal blocks of CAUSAL_ROWS rows keep only
    the columns up to their last row."""
    if not causal:
        return T_q * T_k
    return sum((min(i0 + CAUSAL_ROWS, T_q) - i0) * min(i0 + CAUSAL_ROWS, T_q)
               for i0 in range(0, T_q, CAUSAL_ROWS))


# The softmax's shift. Any m_i >= max_j s_ij keeps exp(scale (s_ij - m_i)) from overflowing;
# the row maximum is the usual choice, and costs a pass over the scores. Cauchy-Schwarz gives
# one for free: m_i = |q_i| max_j |k_j|. It is exact whenever the weights it leaves do not
# underflow, which the row sum l_i tells: l_i <= T_k exp(scale (max_j s_ij - m_i)), so
# l_i >= T_k F means the largest weight is at least F. With F = e^-30 (float32; e^-300 in
# float64) every weight within 57 (408) of the largest in scale units is kept in full; a row
# below that, where q_i is long and points away from every long key, is redone with its
# maximum. Measured at T = 2048, float32: the maximum pass was 10 of the 72 ms of the forward.

@njit(cache=True, inline="always")
def _weight_floor(Q):
    return 9.357622968840175e-14 if Q.itemsize == 4 else 5.148200222412013e-131   # e^-30, e^-300


@njit(cache=True, inline="always")
def _bound_margin(Q):
    # 1 + 2 d_k eps: the computed q . k may exceed |q| |k| by d_k eps |q| |k| (rounding), and
    # an exp argument above 88 (float32) overflows
    return 1.0 + 2.0 * Q.shape[-1] * (2.0 ** -23 if Q.itemsize == 4 else 2.0 ** -52)


@njit(cache=True, error_model="numpy")
def _key_norm_max(K):
    # max_j |k_j| for K (T_k, d_k), in float64
    m = 0.0
    for j in range(K.shape[0]):
        m = max(m, row_dot(K[j], K[j], K.shape[1]))
    return math.sqrt(m)


@njit(cache=True, error_model="numpy")
def _row_block(P_g, off, i0, step, T_q, T_k, causal):
    # rows [i0, i1) of one head's kept weights: (i1, bq, w, the (bq, w) block at P_g[off:]),
    # w = i1 when causal (T_q = T_k), else all T_k columns
    i1 = min(i0 + step, T_q)
    bq = i1 - i0
    w = i1 if causal else T_k
    return i1, bq, w, P_g[off:off + bq * w].reshape(bq, w)


@njit(cache=True, error_model="numpy")
def _attend_forward(Q, K, V, scale, causal, rows, P_all, inv_l, O):
    # Q (G, T_q, d_k), K (G, T_k, d_k), V (G, T_k, d_v) -> O (G, T_q, d_v); G = B h heads.
    # Kept for the backward: P_all (G, _weights_size), the weights before normalisation,
    # P_ij = exp(scale (s_ij - m_i)) with m_i the bound above (or the row maximum), and inv_l
    # (G, T_q) float64 = 1 / sum_j P_ij, so that A = P / l (normalising O's d_v columns
    # instead of A's T_k saves a pass over A). Row block [i0, i1) of head g is a contiguous
    # (i1 - i0, w) matrix of P_all[g], w = i1 when causal (T_q = T_k), else all T_k columns
    # in one block.
    G, T_q, d_k = Q.shape
    T_k, d_v = K.shape[1], V.shape[2]
    floor = T_k * _weight_floor(Q)
    step = rows if causal else T_q
    for g in range(G):
        k_max = _key_norm_max(K[g]) * _bound_margin(Q)
        off = 0
        for i0 in range(0, T_q, step):
            i1, bq, w, S = _row_block(P_all[g], off, i0, step, T_q, T_k, causal)
            dot(Q[g, i0:i1], K[g, :w].T, S)                  # the block's scores: one GEMM
            for r in range(bq):
                row = S[r]
                i = i0 + r
                width = i + 1 if causal else w
                m = math.sqrt(row_dot(Q[g, i], Q[g, i], d_k)) * k_max
                _exp_shifted(row, width, m, scale)
                total = row_sum(row, width)
                if total < floor:                            # the bound is too far: redo the row
                    dot(K[g, :width], Q[g, i], row[:width])
                    _exp_shifted(row, width, row_max(row, width), scale)
                    total = row_sum(row, width)
                inv_l[g, i] = 1.0 / total
                for j in range(width, w):
                    row[j] = 0.0
            O_i = O[g, i0:i1]
            dot(S, V[g, :w], O_i)                            # the mix: a second GEMM
            for r in range(bq):
                c = inv_l[g, i0 + r]
                for k in range(d_v):
                    O_i[r, k] *= c
            off += bq * w


@njit(cache=True, error_model="numpy")
def _attend_backward(Q, K, V, P_all, inv_l, O, dO, scale, causal, rows, dQ, dK, dV,
                     dS_all, dOs_all, tmp):
    # Reverses O = A V, A = softmax(scale Q K^T) = P / l, block by block as the forward kept P:
    #   dV += A^T dO = P^T dO',   dO' = dO / l (row i divided by l_i)
    #   dA = dO V^T,  dE = scale A (dA - D),  D_i = sum_j A_ij dA_ij = dO_i . O_i
    #     so dE_ij = scale P_ij (dA'_ij - D_i / l_i)  with dA' = dO' V^T
    #   dQ = dE K,  dK += dE^T Q
    # with a saturated row's dominant entry of dE remade without cancellation (see
    # _softmax_backward_row). dS_all (rows-or-T_q times T_k,), dOs_all (rows-or-T_q times
    # d_v,) and tmp (T_k max(d_k, d_v),) scratch in Q's dtype.
    G, T_q, d_k = Q.shape
    T_k, d_v = V.shape[1], V.shape[2]
    step = rows if causal else T_q
    for g in range(G):
        if causal:
            dK[g] = 0.0
            dV[g] = 0.0
        off = 0
        for i0 in range(0, T_q, step):
            i1, bq, w, P = _row_block(P_all[g], off, i0, step, T_q, T_k, causal)
            dS = dS_all[:bq * w].reshape(bq, w)
            dOs = dOs_all[:bq * d_v].reshape(bq, d_v)
            for r in range(bq):
                i = i0 + r
                c = inv_l[g, i]
                for k in range(d_v):
                    dOs[r, k] = dO[g, i, k] * c
            dot(dOs, V[g, :w].T, dS)                         # dA' = dO' V^T
            for r in range(bq):
                i = i0 + r
                c = row_dot(dO[g, i], O[g, i], d_v) * inv_l[g, i]
                p, e = P[r], dS[r]                           # P = 0 past the diagonal: dE = 0
                _, _, s2 = _softmax_backward_row(p, e, w, c, scale)
                if s2 * inv_l[g, i] ** 2 > 0.25:             # maybe saturated: see above
                    t, p_t, d_t, s0, s1 = _dominant(p, e, w, 0.5 / inv_l[g, i], scale)
                    if p_t > 0.0:                            # sum_{k != t} P_k (dA'_k - dA'_t)
                        e[t] = -scale * p_t * inv_l[g, i] * (s1 - s0 * d_t)
            dot(dS, K[g, :w], dQ[g, i0:i1])                  # dQ = dE K
            if causal:                                       # earlier blocks also reach these keys
                t_v = tmp[:w * d_v].reshape(w, d_v)
                dot(P.T, dOs, t_v)
                dV[g, :w] += t_v
                t_k = tmp[:w * d_k].reshape(w, d_k)
                dot(dS.T, Q[g, i0:i1], t_k)
                dK[g, :w] += t_k
            else:
                dot(P.T, dOs, dV[g])                         # dV = P^T dO'
                dot(dS.T, Q[g], dK[g])                       # dK = dE^T Q
            off += bq * w


# ------------------------------------------------------------- attention, tiled

@njit(cache=True, error_model="numpy")
def _tile_bounded(Q, K, V, scale, causal, i0, tile_k, m, l, S_all, PV, acc):
    # One query tile, Q (bq, d_k) = rows i0.. of the head, against every key tile of K, V
    # with the fixed shift m (bq,) = the Cauchy-Schwarz bound: acc = sum_j P_ij v_j, l = sum_j P_ij.
    bq = Q.shape[0]
    d_v = V.shape[1]
    end = i0 + bq if causal else K.shape[0]
    l[:bq] = 0.0
    acc[:bq] = 0.0
    for j0 in range(0, end, tile_k):
        j1 = min(j0 + tile_k, end)
        bk = j1 - j0
        S = tiles.scores(Q, K[j0:j1], S_all)                  # (bq, bk)
        for r in range(bq):
            row = S[r]
            w = tiles.visible(bk, i0 + r, j0, causal)        # columns row i0 + r sees
            if w > 0:
                _exp_shifted(row, w, m[r], scale)
                l[r] += row_sum(row, w)
            row[max(w, 0):] = 0.0
        dot(S, V[j0:j1], PV[:bq])                             # (bq, d_v)
        for r in range(bq):
            for k in range(d_v):
                acc[r, k] += PV[r, k]


@njit(cache=True, error_model="numpy")
def _tile_online(Q, K, V, scale, causal, i0, tile_k, m, l, corr, S_all, PV, acc):
    # As _tile_bounded, with the running row maximum m for shift (the online softmax): when m
    # grows, what was summed so far is rescaled by exp(scale (m_old - m_new)).
    bq = Q.shape[0]
    d_v = V.shape[1]
    end = i0 + bq if causal else K.shape[0]
    m[:bq] = -np.inf
    l[:bq] = 0.0
    acc[:bq] = 0.0
    for j0 in range(0, end, tile_k):
        j1 = min(j0 + tile_k, end)
        bk = j1 - j0
        S = tiles.scores(Q, K[j0:j1], S_all)
        for r in range(bq):
            row = S[r]
            w = tiles.visible(bk, i0 + r, j0, causal)
            m_new = tiles.online_max(row, w, r, m, corr, scale)
            if w > 0:
                _exp_shifted(row, w, m_new, scale)
                tiles.online_add(row, w, r, m, l, corr, m_new)
        dot(S, V[j0:j1], PV[:bq])
        tiles.rescale_add(acc, PV, corr, bq)


@njit(cache=True, error_model="numpy")
def _attend_forward_tiled(Q, K, V, scale, causal, tile_q, tile_k, O, L, work, stats):
    # Q (G, T_q, d_k), K (G, T_k, d_k), V (G, T_k, d_v) -> O (G, T_q, d_v), L (2, G, T_q)
    # float64: the shift m_i (in score units) and log l_i = log sum_j exp(scale (q_i . k_j -
    # m_i)); log sum_j exp(scale q_i . k_j) = scale m_i + log l_i. Kept apart, as the forward
    # used them: their sum rounds at scale m_i's magnitude, which at large inputs (1e16 at X x
    # 1e8) left the backward's recomputed weights off by a factor e. A query tile meets each
    # key tile in turn (causal, T_q = T_k: key tiles past the query tile are never visited),
    # with the Cauchy-Schwarz shift; a tile where a row's weights would underflow is redone
    # with the online softmax.
    # work (tile_q tile_k + 2 tile_q d_v,) in Q's dtype; stats float64 (3 tile_q,).
    G, T_q, d_k = Q.shape
    T_k, d_v = K.shape[1], V.shape[2]
    floor = T_k * _weight_floor(Q)
    S_all, PV, acc, m, l, corr = tiles.forward_work(work, stats, tile_q, tile_k, d_v)
    for g in range(G):
        k_max = _key_norm_max(K[g]) * _bound_margin(Q)
        for i0 in range(0, T_q, tile_q):
            i1 = min(i0 + tile_q, T_q)
            bq = i1 - i0
            Q_i = Q[g, i0:i1]
            for r in range(bq):
                m[r] = math.sqrt(row_dot(Q_i[r], Q_i[r], d_k)) * k_max
            _tile_bounded(Q_i, K[g], V[g], scale, causal, i0, tile_k, m, l, S_all, PV, acc)
            for r in range(bq):
                if l[r] < floor:
                    _tile_online(Q_i, K[g], V[g], scale, causal, i0, tile_k, m, l, corr,
                                 S_all, PV, acc)
                    break
            for r in range(bq):
                inv = 1.0 / l[r]
                for k in range(d_v):
                    O[g, i0 + r, k] = acc[r, k] * inv
                L[0, g, i0 + r] = m[r]
                L[1, g, i0 + r] = math.log(l[r])


@njit(cache=True, error_model="numpy")
def _weights_from_L(P, L, i0, j0, causal, scale):
    # P (bq, bk): the scores of query rows i0.. against keys j0.. on entry, the forward's
    # weights exp(scale (s - m_i) - log l_i) on exit, 0 where causal hides the key; L (2, T_q)
    # float64, the forward's m and log l
    bq, bk = P.shape
    for r in range(bq):
        row = P[r]
        w = max(0, tiles.visible(bk, i0 + r, j0, causal))
        _exp_shifted_less(row, w, L[0, i0 + r], scale, L[1, i0 + r])
        row[w:] = 0.0


@njit(cache=True, error_model="numpy")
def _query_tile(Q, dO, K_j, P_all, dP_all, g, i0, tile_q, causal, j0):
    # tiles.query_tile with the keys cut where the forward cut them (causal: after the query
    # tile's last row): Q_i, dO_i, the scores P = Q_i K_j[:n]^T (bq, n), dP (bq, n) and n. A
    # GEMM of another width may round the scores differently (by 4 in 2e16 at X x 1e8), and
    # then the weights recomputed from them are not the forward's.
    i1 = min(i0 + tile_q, Q.shape[1])
    bq = i1 - i0
    n = min(K_j.shape[0], i1 - j0) if causal else K_j.shape[0]
    P = P_all[:bq * n].reshape(bq, n)
    dot(Q[g, i0:i1], K_j[:n].T, P)
    return Q[g, i0:i1], dO[g, i0:i1], P, dP_all[:bq * n].reshape(bq, n), n


@njit(cache=True, error_model="numpy")
def _attend_backward_tiled(Q, K, V, L, O, dO, scale, causal, tile_q, tile_k, dQ, dK, dV, D,
                           work, top, sums):
    # Reverses the tiled forward one key tile j at a time (its rows of dK, dV finished in
    # place) against every query tile i that sees it, recomputing the weights from L:
    #   P = exp(scale (Q_i K_j^T - m_i) - log l_i)   (the forward's A, tile by tile)
    #   dV_j += P^T dO_i                        (O = A V)
    #   dP = dO_i V_j^T,  dE = scale P (dP - D_i)   with D_i = dO_i . O_i = sum_j P_ij dP_ij
    #   dQ_i += dE K_j,  dK_j += dE^T Q_i
    # A saturated row's dominant key t (P_it > 1/2) is met in one tile only: its dE_it waits
    # for the row's sums over the other keys (s0 = sum P, s1 = sum P (dP - D_i), from every
    # tile) and is added at the end, dE_it = -scale P_it (s1 - s0 (dP_it - D_i)) (see
    # _softmax_backward_row). D float64 (G, T_q); work (2 tile_q tile_k + tile_q d_k + tile_k
    # max(d_k, d_v),) in Q's dtype; top int64 (G, T_q) and sums float64 (4, G, T_q) scratch:
    # t, and s0, s1, P_it, dP_it - D_i.
    # Returns the largest |sum_j P_ij - 1|: the recomputed weights' distance from the forward's.
    G, T_q, d_k = Q.shape
    T_k = K.shape[1]
    P_all, dP_all, tmp_q, tmp_k = tiles.backward_start(dO, O, work, tile_q, tile_k, D, dQ)
    top[:] = -1
    sums[:] = 0.0
    off = 0.0
    for g in range(G):
        for j0 in range(0, T_k, tile_k):
            K_j, V_j, dK_j, dV_j, tk_v, tk_k = tiles.key_tile(K, V, dK, dV, tmp_k, g, j0, tile_k)
            for i0 in range(tiles.first_query_tile(j0, tile_q, causal), T_q, tile_q):
                Q_i, dO_i, P, dP, n = _query_tile(Q, dO, K_j, P_all, dP_all, g, i0, tile_q,
                                                  causal, j0)
                _weights_from_L(P, L[:, g], i0, j0, causal, scale)
                tiles.add_dV_dP(P, dO_i, V_j[:n], tk_v[:n], dV_j[:n], dP)
                for r in range(P.shape[0]):
                    i = i0 + r
                    s0, s1, s2 = _softmax_backward_row(P[r], dP[r], n, D[g, i], scale)
                    if s2 > 0.25 and top[g, i] < 0:          # maybe saturated
                        t, p_t, d_t, s0_, s1_ = _dominant(P[r], dP[r], n, 0.5, scale)
                        if p_t > 0.0:                        # dE_it waits, at 0 in the GEMMs
                            dP[r, t] = 0.0
                            top[g, i] = j0 + t
                            sums[2, g, i] = p_t
                            sums[3, g, i] = d_t
                            s0, s1 = s0_, s1_
                    sums[0, g, i] += s0
                    sums[1, g, i] += s1
                tiles.add_dQ_dK(dP, Q_i, K_j[:n], tmp_q, tk_k[:n], dQ, dK_j[:n], g, i0)
        for i in range(T_q):
            t = top[g, i]
            if t >= 0:
                e = -scale * sums[2, g, i] * (sums[1, g, i] - sums[0, g, i] * sums[3, g, i])
                for k in range(d_k):
                    dQ[g, i, k] += e * K[g, t, k]
                    dK[g, t, k] += e * Q[g, i, k]
            off = max(off, abs(sums[0, g, i] + (sums[2, g, i] if t >= 0 else 0.0) - 1.0))
    return off


# ------------------------------------------------------------------ layer norm

@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz"})
def _norm_forward(X, Z, bias, add, gamma, beta, xhat, rstd, out):
    # out = LN(S) (N, d), S = X + Z + bias when add (post-norm's residual sum), else X; kept:
    # xhat = (S - mean) / sqrt(var + eps) (N, d), rstd (N,) float64 = 1 / sqrt(var + eps).
    # Moments in float64 (two passes: no cancellation), reassociated so that they vectorise;
    # S goes through xhat, each element read before it is overwritten.
    N, d = X.shape
    for i in range(N):
        x, h, o = X[i], xhat[i], out[i]
        mean = 0.0
        if add:
            z = Z[i]
            for j in range(d):
                s = x[j] + z[j] + bias[j]
                h[j] = s
                mean += np.float64(s)
        else:
            for j in range(d):
                h[j] = x[j]
                mean += np.float64(x[j])
        mean /= d
        var = 0.0
        for j in range(d):
            c = np.float64(h[j]) - mean
            var += c * c
        if not var < np.inf:                 # squares past float64 (|S| ~ 1e154): scaled, below
            rstd[i] = _norm_row_scaled(h, o, gamma, beta)
            continue
        r = 1.0 / math.sqrt(var / d + LN_EPS)
        rstd[i] = r
        for j in range(d):
            xh = (np.float64(h[j]) - mean) * r
            h[j] = xh
            o[j] = xh * gamma[j] + beta[j]


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz"})
def _norm_row_scaled(h, o, gamma, beta):
    # _norm_forward's row, S in h (d,), for a row whose moments overflow: S f, f = 2^-k exact
    # with max |S f| in [1/2, 1), has the same xhat = (S f - mean(S f)) / sqrt(var(S f) + eps
    # f^2). h -> xhat, o = xhat gamma + beta; returns rstd = f / sqrt(var(S f) + eps f^2).
    d = h.shape[0]
    big = 0.0
    for j in range(d):
        big = max(big, abs(np.float64(h[j])))
    f = 2.0 ** -(math.frexp(big)[1])
    mean = 0.0
    for j in range(d):
        mean += np.float64(h[j]) * f
    mean /= d
    var = 0.0
    for j in range(d):
        c = np.float64(h[j]) * f - mean
        var += c * c
    r = 1.0 / math.sqrt(var / d + LN_EPS * f * f)
    for j in range(d):
        xh = (np.float64(h[j]) * f - mean) * r
        h[j] = xh
        o[j] = xh * gamma[j] + beta[j]
    return r * f


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz"})
def _norm_backward(dout, xhat, rstd, gamma, residual, add_residual, dS, dgamma, dbeta):
    # Reverses out = xhat gamma + beta, xhat = (S - mean) rstd, row by row:
    #   dS = rstd (g - mean(g) - xhat mean(g xhat)),  g = dout gamma   [+ residual]
    # dgamma += sum_rows dout xhat, dbeta += sum_rows dout (float64 (d,) accumulators).
    N, d = dout.shape
    for i in range(N):
        a = 0.0
        c = 0.0
        for j in range(d):
            dy = np.float64(dout[i, j])
            xh = np.float64(xhat[i, j])
            g = dy * gamma[j]
            a += g
            c += g * xh
            dgamma[j] += dy * xh
            dbeta[j] += dy
        a /= d
        c /= d
        r = rstd[i]
        for j in range(d):
            v_ = r * (np.float64(dout[i, j]) * gamma[j] - a - np.float64(xhat[i, j]) * c)
            dS[i, j] = v_ + residual[i, j] if add_residual else v_


# ------------------------------------------------------------ sums and biases

@njit(cache=True, error_model="numpy")
def _add_bias(X, Z, bias, out):
    # out = X + Z + bias: a pre-norm stage's residual sum
    N, d = X.shape
    for i in range(N):
        for j in range(d):
            out[i, j] = X[i, j] + Z[i, j] + bias[j]


@njit(cache=True, error_model="numpy")
def _add_into(acc, X):
    # acc += X, both (N, d)
    N, d = acc.shape
    for i in range(N):
        for j in range(d):
            acc[i, j] += X[i, j]


@njit(cache=True, error_model="numpy")
def _col_sum(G, out):
    # out (k,) float64 += the column sums of G (N, k): a bias's gradient
    N, k = G.shape
    for i in range(N):
        for j in range(k):
            out[j] += G[i, j]


# ------------------------------------------------------------------ activations
# GELU(h) = h Phi(h), Phi(h) = (1 + erf(h / sqrt 2)) / 2, with erf as fdlibm's s_erf.c
# (Sun, 1993) computes it, region by region: on [0, 0.84375) erf(a) = a + a R(a^2); on
# [0.84375, 1.25) erf(a) = c + P(a - 1) / Q(a - 1); above, erfc(a) = exp(-a^2 - 0.5625 +
# R(1/a^2) / S(1/a^2)) / a, with one pair of R, S up to 1/0.35 and another beyond. Every
# region is evaluated for every element and one chosen (selects, no branches), so the loop
# vectorises: one exp, two divisions and about sixty multiply-adds per element.

_ERX = 8.45062911510467529297e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02, 0.0)
_SB = (3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01, 0.0)
_SQRT1_2 = 0.70710678118654752440
_INV_SQRT_2PI = 0.39894228040143267794
# exp(-0.5625 + R/S) above 1.25: its exponent stays in [-0.78, -0.58] (fdlibm's R/S there),
# so exp(C0) (1 + expm1(e - C0)) needs no range reduction
_C0 = -0.68
_EXP_C0 = math.exp(_C0)


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def _poly(z, c0, c1, c2, c3, c4, c5, c6, c7, c8):
    # c0 + c1 z + ... + c8 z^8, Horner
    return c0 + z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * (c6 + z * (c7 + z * c8)))))))


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def _erf_nonnegative(a, e):
    # erf(a) for a >= 0, given e = exp(-a^2)
    z = a * a                                                   # [0, 0.84375)
    r = _poly(z, _PP[0], _PP[1], _PP[2], _PP[3], _PP[4], 0.0, 0.0, 0.0, 0.0)
    s = _poly(z, 1.0, _QQ[0], _QQ[1], _QQ[2], _QQ[3], _QQ[4], 0.0, 0.0, 0.0)
    num_a, den_a = a * (s + r), s                               # a + a r / s
    t = a - 1.0                                                 # [0.84375, 1.25)
    p = _poly(t, _PA[0], _PA[1], _PA[2], _PA[3], _PA[4], _PA[5], _PA[6], 0.0, 0.0)
    q = _poly(t, 1.0, _QA[0], _QA[1], _QA[2], _QA[3], _QA[4], _QA[5], 0.0, 0.0)
    num_b, den_b = _ERX * q + p, q                              # c + p / q
    ac = min(max(a, 1.25), 6.0)                                 # [1.25, inf): erfc(6) < 3e-17
    far = ac >= 1.0 / 0.35
    w = 1.0 / (ac * ac)
    rr = _poly(w, _RB[0] if far else _RA[0], _RB[1] if far else _RA[1], _RB[2] if far else _RA[2],
               _RB[3] if far else _RA[3], _RB[4] if far else _RA[4], _RB[5] if far else _RA[5],
               _RB[6] if far else _RA[6], _RB[7] if far else _RA[7], 0.0)
    ss = _poly(w, 1.0, _SB[0] if far else _SA[0], _SB[1] if far else _SA[1],
               _SB[2] if far else _SA[2], _SB[3] if far else _SA[3], _SB[4] if far else _SA[4],
               _SB[5] if far else _SA[5], _SB[6] if far else _SA[6], _SB[7] if far else _SA[7])
    c = -0.5625 + rr / ss - _C0
    erfc_x = e * (_EXP_C0 * (1.0 + _expm1_reduced(c)))          # erfc(a) a
    num_c, den_c = ac - erfc_x, ac                              # 1 - erfc(a)
    num = num_a if a < 0.84375 else (num_b if a < 1.25 else num_c)
    den = den_a if a < 0.84375 else (den_b if a < 1.25 else den_c)
    return num / den


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _gelu_inplace(H, bias, deriv):
    # H (N, d_ff) holds x W1^T -> GELU(h), h = H + bias; deriv (N, d_ff) = GELU'(h) = Phi(h) +
    # h phi(h), kept for the backward. Evaluated in float64 whatever H's dtype.
    N, n = H.shape
    for i in range(N):
        row, drow = H[i], deriv[i]
        for j in range(n):
            h = np.float64(row[j]) + np.float64(bias[j])
            e = _exp64(-0.5 * h * h)                            # exp(-h^2 / 2) = exp(-a^2)
            erf_a = _erf_nonnegative(abs(h) * _SQRT1_2, e)
            cdf = 0.5 + 0.5 * (erf_a if h >= 0.0 else -erf_a)   # Phi(h)
            row[j] = h * cdf
            drow[j] = cdf + h * e * _INV_SQRT_2PI


@njit(cache=True, error_model="numpy")
def _relu_inplace(H, bias):
    # H (N, d_ff) holds x W1^T -> max(h, 0), h = H + bias
    N, n = H.shape
    for i in range(N):
        for j in range(n):
            H[i, j] = max(H[i, j] + bias[j], 0.0)


@njit(cache=True, error_model="numpy")
def _activation_backward(dH, H, deriv, gelu, db):
    # dH (N, d_ff): d act(h) -> dh in place: times GELU'(h) (deriv), or (relu) where act(h) =
    # H > 0. db float64 (d_ff,) += the column sums of dh (b1's gradient).
    N, n = dH.shape
    for i in range(N):
        g = dH[i]
        if gelu:
            dr = deriv[i]
            for j in range(n):
                g[j] *= dr[j]
        else:
            a = H[i]
            for j in range(n):
                g[j] = g[j] if a[j] > 0.0 else 0.0
        for j in range(n):
            db[j] += g[j]


# ------------------------------------------------------------------ the layer

class _Layer:
    """One call's shapes and options, and its workspace buffers (named by layer kind, so that
    an encoder's tape and a decoder's live side by side)."""

    def __init__(self, kind, X3, M3, p, heads, norm_first, activation, causal, tiled):
        self.kind = kind                                    # "encoder" or "decoder"
        self.stages = ENCODER_STAGES if kind == "encoder" else DECODER_STAGES
        self.B, self.T, self.d = X3.shape                   # (B, T, d_model)
        self.S = M3.shape[1] if M3 is not None else 0       # memory's length
        self.H, self.d_k = heads, self.d // heads
        self.d_ff = p["linear1.weight"].shape[0]
        self.norm_first, self.gelu, self.causal = norm_first, activation == "gelu", causal
        self.dtype = X3.dtype
        self.tiled = {0: _tiled(self.T, tiled)}             # stage -> tiled attention?
        if kind == "decoder":
            self.tiled[1] = _tiled(self.S, tiled)

    def buf(self, name, shape, dtype=None):
        return workspace.buffer(f"transformer.{self.kind}.{name}", shape,
                                self.dtype if dtype is None else dtype)

    def options(self):
        return (self.H, self.norm_first, self.gelu, self.causal, tuple(sorted(self.tiled.items())))


def _tiled(T_k, tiled):
    return (T_k >= TILED_FROM) if tiled is None else tiled


def _attention_forward(L, s, xq, xkv, W, b, Wo, causal, tape):
    """Z = concat_h(heads) Wo^T, the attention sublayer without its output bias (the residual
    pass adds it). xq (B T, d) gives the queries; xkv (B T_k, d), or None for self-attention,
    the keys and values."""
    B, H, d, d_k = L.B, L.H, L.d, L.d_k
    T_q = xq.shape[0] // B
    if xkv is None:                                          # self: one GEMM for Q, K and V
        T_k = T_q
        P = matmul(xq, W.T, L.buf(f"{s}.qkv", (B * T_q, 3 * d)))
        heads = L.buf(f"{s}.heads", (3, B * H, T_q, d_k))
        _split_heads(P, b, heads)
        Q, K, V = heads[0], heads[1], heads[2]
    else:                                                    # cross: queries and memory apart
        T_k = xkv.shape[0] // B
        Pq = matmul(xq, W[:d].T, L.buf(f"{s}.q", (B * T_q, d)))
        Pkv = matmul(xkv, W[d:].T, L.buf(f"{s}.kv", (B * T_k, 2 * d)))
        qh = L.buf(f"{s}.qh", (1, B * H, T_q, d_k))
        kvh = L.buf(f"{s}.kvh", (2, B * H, T_k, d_k))
        _split_heads(Pq, b[:d], qh)
        _split_heads(Pkv, b[d:], kvh)
        Q, K, V = qh[0], kvh[0], kvh[1]
    O = L.buf(f"{s}.oh", (1, B * H, T_q, d_k))
    scale = 1.0 / math.sqrt(d_k)
    if L.tiled[s]:
        tq, tk = min(TILE_Q, T_q), min(TILE_K, T_k)
        lse = L.buf(f"{s}.lse", (2, B * H, T_q), np.float64)
        _attend_forward_tiled(Q, K, V, scale, causal, tq, tk, O[0], lse,
                              L.buf("tiles", (tq * tk + 2 * tq * d_k,)),
                              L.buf("tile_stats", (3 * tq,), np.float64))
        tape[f"{s}.lse"] = lse
    else:
        P_all = L.buf(f"{s}.weights", (B * H, _weights_size(T_q, T_k, causal)))
        inv_l = L.buf(f"{s}.inv_l", (B * H, T_q), np.float64)
        _attend_forward(Q, K, V, scale, causal, CAUSAL_ROWS, P_all, inv_l, O[0])
        tape[f"{s}.weights"], tape[f"{s}.inv_l"] = P_all, inv_l
    Om = L.buf(f"{s}.o", (B * T_q, d))
    _merge_heads(O, Om)
    tape.update({f"{s}.q": Q, f"{s}.k": K, f"{s}.v": V, f"{s}.oh": O[0], f"{s}.o": Om})
    return matmul(Om, Wo.T, L.buf(f"{s}.z", (B * T_q, d)))


def _attention_backward(L, s, dZ, xq, xkv, W, Wo, causal, tape, grads, prefix, dx, dmemory):
    """Reverses _attention_forward given dZ (B T, d): dx = d xq (B T, d); dmemory = d xkv
    (cross-attention only); the weights' gradients into grads[prefix + ...]."""
    B, H, d, d_k = L.B, L.H, L.d, L.d_k
    T_q = xq.shape[0] // B
    Q, K, V, O, Om = (tape[f"{s}.{n}"] for n in ("q", "k", "v", "oh", "o"))
    T_k = K.shape[1]
    dt = L.dtype
    grads[prefix + ".out_proj.weight"] = matmul(dZ.T, Om)       # Z = O Wo^T
    dOm = matmul(dZ, Wo, L.buf("g.o", (B * T_q, d)))
    dO = L.buf("g.oh", (1, B * H, T_q, d_k))
    _split_heads(dOm, np.empty(0, dt), dO)
    scale = 1.0 / math.sqrt(d_k)
    if xkv is None:
        dheads = L.buf("g.heads", (3, B * H, T_q, d_k))
        dQ, dK, dV = dheads[0], dheads[1], dheads[2]
    else:
        dqh = L.buf("g.qh", (1, B * H, T_q, d_k))
        dkvh = L.buf("g.kvh", (2, B * H, T_k, d_k))
        dQ, dK, dV = dqh[0], dkvh[0], dkvh[1]
    if L.tiled[s]:
        tq, tk = min(TILE_Q, T_q), min(TILE_K, T_k)
        off = _attend_backward_tiled(Q, K, V, tape[f"{s}.lse"], O, dO[0], scale, causal, tq, tk,
                               dQ, dK, dV, L.buf("g.D", (B * H, T_q), np.float64),
                               L.buf("g.tiles", (2 * tq * tk + tq * d_k + tk * d_k,)),
                               L.buf("g.top", (B * H, T_q), np.int64),
                               L.buf("g.sums", (4, B * H, T_q), np.float64))
        _check_recomputed(off, dt, "X" if xkv is None else "X or memory")
    else:
        rows = min(CAUSAL_ROWS if causal else T_q, T_q)
        _attend_backward(Q, K, V, tape[f"{s}.weights"], tape[f"{s}.inv_l"], O, dO[0], scale,
                         causal, CAUSAL_ROWS, dQ, dK, dV, L.buf("g.scores", (rows * T_k,)),
                         L.buf("g.do_l", (rows * d_k,)), L.buf("g.tmp", (T_k * d_k,)))
    db = np.zeros(3 * d)
    dW = np.empty((3 * d, d), dt)
    if xkv is None:                                              # [Q|K|V] = x W^T + b
        dP = L.buf("g.qkv", (B * T_q, 3 * d))
        _merge_heads(dheads, dP)
        _col_sum(dP, db)
        matmul(dP.T, xq, dW)
        matmul(dP, W, dx)
    else:
        dPq = L.buf("g.q", (B * T_q, d))
        dPkv = L.buf("g.kv", (B * T_k, 2 * d))
        _merge_heads(dqh, dPq)
        _merge_heads(dkvh, dPkv)
        _col_sum(dPq, db[:d])
        _col_sum(dPkv, db[d:])
        matmul(dPq.T, xq, dW[:d])
        matmul(dPkv.T, xkv, dW[d:])
        matmul(dPq, W[:d], dx)
        matmul(dPkv, W[d:], dmemory)
    grads[prefix + ".in_proj_weight"] = dW
    grads[prefix + ".in_proj_bias"] = db.astype(dt)


def _check_recomputed(off, dtype, names):
    """FloatingPointError if the tiled backward's recomputed weights, off the forward's by
    ``off`` in a row's sum, lost more than half the dtype's digits: never a silently wrong
    gradient. They are the forward's bit for bit when the scores are (see _query_tile)."""
    eps = np.finfo(dtype).eps
    if off <= math.sqrt(eps):
        return
    digits = -math.log10(eps)
    lost = min(digits, math.log10(off / eps))
    raise FloatingPointError(
        f"{names} is too large for the tiled attention's backward: the weights it recomputes "
        f"are off the forward's by {off:.1e} (a row's sum), {lost:.0f} of {dtype}'s "
        f"{digits:.0f} digits lost; scale {names} down or pass tiled=False.")


def _feedforward_forward(L, s, x, p, tape):
    """F = act(x W1^T + b1) W2^T, without b2 (the residual pass adds it)."""
    N = x.shape[0]
    Hd = matmul(x, p["linear1.weight"].T, L.buf(f"{s}.hidden", (N, L.d_ff)))
    if L.gelu:
        deriv = L.buf(f"{s}.gelu_grad", (N, L.d_ff))
        _gelu_inplace(Hd, p["linear1.bias"], deriv)
        tape[f"{s}.gelu_grad"] = deriv
    else:
        _relu_inplace(Hd, p["linear1.bias"])
    tape[f"{s}.hidden"] = Hd
    return matmul(Hd, p["linear2.weight"].T, L.buf(f"{s}.f", (N, L.d)))


def _feedforward_backward(L, s, dF, x, p, tape, grads, dx):
    N = x.shape[0]
    Hd = tape[f"{s}.hidden"]
    grads["linear2.weight"] = matmul(dF.T, Hd)                   # F = act W2^T
    dH = matmul(dF, p["linear2.weight"], L.buf("g.hidden", (N, L.d_ff)))
    db1 = np.zeros(L.d_ff)
    _activation_backward(dH, Hd, tape.get(f"{s}.gelu_grad", Hd), L.gelu, db1)
    grads["linear1.bias"] = db1.astype(L.dtype)
    grads["linear1.weight"] = matmul(dH.T, x)                    # h = x W1^T + b1
    matmul(dH, p["linear1.weight"], dx)


def _sublayer_forward(L, s, name, x, M2, p, tape):
    if name == "linear":
        return _feedforward_forward(L, s, x, p, tape)
    cross = name == "multihead_attn"
    return _attention_forward(L, s, x, M2 if cross else None, p[name + ".in_proj_weight"],
                              p[name + ".in_proj_bias"], p[name + ".out_proj.weight"],
                              L.causal and not cross, tape)


def _sublayer_backward(L, s, name, dZ, x, M2, p, tape, grads, dx, dmemory):
    if name == "linear":
        return _feedforward_backward(L, s, dZ, x, p, tape, grads, dx)
    cross = name == "multihead_attn"
    _attention_backward(L, s, dZ, x, M2 if cross else None, p[name + ".in_proj_weight"],
                        p[name + ".out_proj.weight"], L.causal and not cross, tape, grads, name,
                        dx, dmemory)


def _out_bias_key(name):
    return "linear2.bias" if name == "linear" else name + ".out_proj.bias"


def _layer_forward(L, X2, M2, p):
    """Y (B T, d), fresh, and the tape: every stage's input, normalised rows and sublayer
    internals, in this thread's workspace."""
    N, d = X2.shape
    tape = {}
    x = X2
    Y = np.empty((N, d), L.dtype)
    for s, (name, norm) in enumerate(L.stages):
        out = Y if s == len(L.stages) - 1 else L.buf(f"{s}.out", (N, d))
        xhat, rstd = L.buf(f"{s}.xhat", (N, d)), L.buf(f"{s}.rstd", (N,), np.float64)
        gamma, beta, bias = p[norm + ".weight"], p[norm + ".bias"], p[_out_bias_key(name)]
        if L.norm_first:                                     # x + F(LN(x))
            xn = L.buf(f"{s}.xn", (N, d))
            _norm_forward(x, x, bias, False, gamma, beta, xhat, rstd, xn)
            Z = _sublayer_forward(L, s, name, xn, M2, p, tape)
            _add_bias(x, Z, bias, out)
            tape[f"{s}.in"] = xn
        else:                                                # LN(x + F(x))
            Z = _sublayer_forward(L, s, name, x, M2, p, tape)
            _norm_forward(x, Z, bias, True, gamma, beta, xhat, rstd, out)
            tape[f"{s}.in"] = x
        tape[f"{s}.xhat"], tape[f"{s}.rstd"] = xhat, rstd
        x = out
    return Y, tape


def _layer_backward(L, X2, M2, p, dY2, tape):
    """dX (B T, d) and dmemory (B S, d), fresh, and every parameter's gradient by key."""
    N, d = X2.shape
    grads = {}
    dmemory = np.empty_like(M2) if M2 is not None else None
    g = dY2
    for s in range(len(L.stages) - 1, -1, -1):
        name, norm = L.stages[s]
        x_in, xhat, rstd = tape[f"{s}.in"], tape[f"{s}.xhat"], tape[f"{s}.rstd"]
        gamma = p[norm + ".weight"]
        dgamma, dbeta, db_out = np.zeros(d), np.zeros(d), np.zeros(d)
        dx = np.empty((N, d), L.dtype) if s == 0 else L.buf(f"g.x{s % 2}", (N, d))
        if L.norm_first:                                     # x_out = x + F(LN(x)) + b
            _col_sum(g, db_out)
            dxn = L.buf("g.xn", (N, d))
            _sublayer_backward(L, s, name, g, x_in, M2, p, tape, grads, dxn, dmemory)
            _norm_backward(dxn, xhat, rstd, gamma, g, True, dx, dgamma, dbeta)
        else:                                                # x_out = LN(x + F(x) + b)
            dr = L.buf("g.r", (N, d))
            _norm_backward(g, xhat, rstd, gamma, g, False, dr, dgamma, dbeta)
            _col_sum(dr, db_out)
            _sublayer_backward(L, s, name, dr, x_in, M2, p, tape, grads, dx, dmemory)
            _add_into(dx, dr)                                # the residual path
        grads[norm + ".weight"] = dgamma.astype(L.dtype)
        grads[norm + ".bias"] = dbeta.astype(L.dtype)
        grads[_out_bias_key(name)] = db_out.astype(L.dtype)
        g = dx
    return g, dmemory, grads


# ----------------------------------------------------------- the forward's tape
# The last forward of each kind in this thread: copies of its inputs and options, and its
# tape. A backward whose inputs equal the copies bit for bit starts from the tape; the copies
# were checked finite, so the backward need not check its inputs again.

@njit(cache=True)
def _same_bits(a, b):
    # a, b 1-D int32 or int64 views of two arrays: True if every element is the same
    n = 0
    for i in range(a.shape[0]):
        n += a[i] != b[i]
    return n == 0


def _bits(a):
    return a.reshape(-1).view(np.int32 if a.itemsize == 4 else np.int64)


def _kept_tape(L, arrays):
    kept = workspace.kept(f"transformer.{L.kind}")
    if kept is None:
        return None
    inputs, options, tape = kept
    if tape is None or options != L.options() or len(inputs) != len(arrays):
        return None
    for a, b in zip(inputs, arrays):
        if a.shape != b.shape or a.dtype != b.dtype or not _same_bits(_bits(a), _bits(b)):
            return None
    return tape


def _copy_inputs(L, named):
    """Copies of the inputs a tape will be made from, into the buffers the last tape's copies
    used (forgetting that tape: they change); each checked finite as it is copied, with
    validate.as_float_array's message for the first that is not."""
    kept = workspace.kept(f"transformer.{L.kind}")
    copies = kept[0] if kept is not None else ()
    if len(copies) != len(named) or any(c.shape != a.shape or c.dtype != a.dtype
                                        for c, (_, a) in zip(copies, named)):
        copies = tuple(np.empty_like(a) for _, a in named)
    workspace.keep(f"transformer.{L.kind}", (copies, None, None))
    for c, (name, a) in zip(copies, named):
        if not _copy_finite(a.reshape(-1), c.reshape(-1)):
            v.as_float_array(name, a, a.ndim)            # raises, naming it
    return copies


def _keep_tape(L, copies, tape):
    workspace.keep(f"transformer.{L.kind}", (copies, L.options(), tape))


# ------------------------------------------------------------------- checks

def _keys(stages):
    keys = []
    for name, norm in stages:
        if name == "linear":
            keys += ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
        else:
            keys += [f"{name}.in_proj_weight", f"{name}.in_proj_bias",
                     f"{name}.out_proj.weight", f"{name}.out_proj.bias"]
        keys += [f"{norm}.weight", f"{norm}.bias"]
    return tuple(keys)


ENCODER_KEYS = _keys(ENCODER_STAGES)
DECODER_KEYS = _keys(DECODER_STAGES)


@njit(cache=True, fastmath={"reassoc"})
def _all_finite(arrays):
    # arrays: a tuple of 1-D arrays. x * 0 is NaN for an inf or NaN, and a NaN survives any
    # order of the sum (reassociated, so that it vectorises)
    for a in arrays:
        s = a[0] - a[0]
        for i in range(a.shape[0]):
            s += a[i] * 0
        if s != 0:
            return False
    return True


@njit(cache=True, fastmath={"reassoc"})
def _copy_finite(src, dst):
    # dst[:] = src (1-D, same size); True if every element is finite (one pass for both)
    s = src[0] - src[0]
    for i in range(src.shape[0]):
        x = src[i]
        dst[i] = x
        s += x * 0
    return s == 0


def _array(name, x, ndims, dtype=None):
    """validate.as_float_view, with the finiteness pass left to _check_finite: an input that
    is already a C-contiguous ndarray of the dtype and ndim is returned as it is; any other
    goes through validate.as_float_view, which converts it or names what is wrong. A strided
    one stays a view: _check copies it once its bytes are counted with the layer's."""
    if (type(x) is np.ndarray and x.dtype in v.FLOAT_DTYPES and (dtype is None or x.dtype == dtype)
            and x.ndim in ndims and x.size > 0 and x.flags.c_contiguous):
        return x
    return v.as_float_view(name, x, ndims, dtype)


def _check_finite(named):
    """validate.as_float_array's message for the first of (name, array) holding a NaN or inf."""
    for name, a in named:
        if not _all_finite((a.reshape(-1),)):
            v.as_float_array(name, a, a.ndim)


def _param_shape(key, d, d_ff):
    """The shape params[key] must have, for d_model = d and d_ff."""
    tail = key.split(".", 1)[1] if key.startswith(("self_attn.", "multihead_attn.")) else key
    return {"in_proj_weight": (3 * d, d), "in_proj_bias": (3 * d,),
            "out_proj.weight": (d, d), "out_proj.bias": (d,),
            "linear1.weight": (d_ff, d), "linear1.bias": (d_ff,),
            "linear2.weight": (d, d_ff), "linear2.bias": (d,)}.get(tail, (d,))   # norms: (d,)


def _check_params(params, keys, d, dtype):
    """params as a dict of C-contiguous arrays of X's dtype, every key present and shaped."""
    if not hasattr(params, "keys") or not hasattr(params, "__getitem__"):
        raise TypeError(f"params must be a dict of arrays keyed as the torch layer's state_dict "
                        f"(e.g. {{k: v.numpy() for k, v in layer.state_dict().items()}}), "
                        f"got {type(params).__name__}.")
    missing = [k for k in keys if k not in params]
    if missing:
        raise ValueError(f"params is missing the key(s) {missing}; a layer needs {list(keys)}.")
    w1 = _array("params['linear1.weight']", params["linear1.weight"], (2,), dtype)
    if w1.shape[1] != d:
        raise ValueError(f"params['linear1.weight'] must have shape (d_ff, {d}), d_model = {d} "
                         f"being X's last axis, got {w1.shape}.")
    d_ff = w1.shape[0]
    p = {}
    for k in keys:
        want = _param_shape(k, d, d_ff)
        name = f"params[{k!r}]"
        a = _array(name, params[k], (len(want),), dtype)
        if a.shape != want:
            raise ValueError(f"{name} must have shape {want} (d_model = {d}, X's last axis; "
                             f"d_ff = {d_ff}, params['linear1.weight'].shape[0]), got {a.shape}.")
        p[k] = v.contiguous(name, a)
    return p


def _check_flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


def _check(kind, X, memory, params, heads, norm_first, activation, causal, tiled, dY=None):
    """Every input's type, dtype and shape, checked once. Returns the layer, the inputs as
    (B, T, d) arrays (memory: None for an encoder; dY: None unless given) and p; finiteness
    is left to the caller (_check_finite), which a backward can skip for the forward's inputs."""
    dtype = v.common_dtype("X", X)
    X = _array("X", X, (2, 3), dtype)
    d = X.shape[-1]
    heads = v.check_int("heads", heads)
    if d % heads:
        raise ValueError(f"heads must divide d_model = {d} (X's last axis), got heads = {heads}.")
    norm_first = _check_flag("norm_first", norm_first)
    causal = _check_flag("causal", causal)
    v.check_choice("activation", activation, ACTIVATIONS)
    if tiled is not None:
        tiled = _check_flag("tiled", tiled)
    p = _check_params(params, ENCODER_KEYS if kind == "encoder" else DECODER_KEYS, d, dtype)
    M3 = None
    if kind == "decoder":
        memory = _array("memory", memory, (X.ndim,), dtype)
        if memory.shape[-1] != d or memory.shape[:-2] != X.shape[:-2]:
            want = f"(S, {d})" if X.ndim == 2 else f"({X.shape[0]}, S, {d})"
            raise ValueError(f"memory must have shape {want} to match X's {X.shape}, "
                             f"got {memory.shape}.")
        M3 = memory.reshape((-1,) + memory.shape[-2:])
    if dY is not None:
        dY = _array("dY", dY, (X.ndim,), dtype)
        v.check_shape("dY", dY, X.shape)
        dY = dY.reshape((-1,) + dY.shape[-2:])
    X3 = X.reshape((-1,) + X.shape[-2:])
    L = _Layer(kind, X3, M3, p, heads, norm_first, activation, causal, tiled)
    named = [(n, a) for n, a in (("X", X3), ("memory", M3), ("dY", dY)) if a is not None]
    _check_memory(L, named)
    X3, M3, dY = (None if a is None else v.contiguous(n, a)
                  for n, a in (("X", X3), ("memory", M3), ("dY", dY)))
    return L, X3, M3, dY, p


def _check_memory(L, inputs=()):
    """MemoryError, before anything is allocated, if the tape and the gradients (and the copies
    of the strided ``inputs``, (name, array) pairs) will not fit."""
    N, M, d, d_ff, G = L.B * L.T, L.B * L.S, L.d, L.d_ff, L.B * L.H
    rows = N * (12 * d + 3 * d_ff) * len(L.stages) + M * 6 * d
    grid = 0
    for s, tiled in L.tiled.items():
        T_k = L.T if s == 0 else L.S
        grid += 0 if tiled else G * _weights_size(L.T, T_k, L.causal and s == 0)
    nbytes = (rows + grid) * np.dtype(L.dtype).itemsize
    v.check_memory(nbytes, f"{'an' if L.kind == 'encoder' else 'a'} {L.kind} layer at T = {L.T}"
                           + (f", B = {L.B}" if L.B > 1 else "")
                           + (", its attention weights stored (pass tiled=True)" if grid else ""),
                   inputs=inputs)


def _check_outputs(named):
    """FloatingPointError naming the first of (name, array) that holds an inf or NaN: never a
    silent NaN. One compiled call for all of them."""
    if _all_finite(tuple(a.reshape(-1) for _, a in named)):
        return
    for name, a in named:
        if not _all_finite((a.reshape(-1),)):
            hint = ", or use float64" if a.dtype == np.float32 else ""
            raise FloatingPointError(f"{name} overflows {a.dtype}: the inputs (X, memory, params) "
                                     f"are finite but too large; scale them down{hint}.")


def _inputs(L, X3, M3, p):
    """(name, array) of every input a tape depends on, in a fixed order."""
    keys = ENCODER_KEYS if L.kind == "encoder" else DECODER_KEYS
    named = [("X", X3)] + ([("memory", M3)] if M3 is not None else [])
    return named + [(f"params[{k!r}]", p[k]) for k in keys]


def _run_forward(L, X3, M3, p):
    """Y (B T, d) and the tape, kept with checked copies of the inputs."""
    copies = _copy_inputs(L, _inputs(L, X3, M3, p))
    M2 = M3.reshape(-1, L.d) if M3 is not None else None
    Y, tape = _layer_forward(L, X3.reshape(-1, L.d), M2, p)
    _check_outputs([("the output Y", Y)])
    _keep_tape(L, copies, tape)
    return Y, tape


def _forward(kind, X, memory, params, heads, norm_first, activation, causal, tiled):
    L, X3, M3, _, p = _check(kind, X, memory, params, heads, norm_first, activation, causal, tiled)
    Y, _ = _run_forward(L, X3, M3, p)
    return Y.reshape(np.shape(X))


def _backward(kind, X, memory, params, heads, dY, norm_first, activation, causal, tiled):
    L, X3, M3, dY3, p = _check(kind, X, memory, params, heads, norm_first, activation, causal,
                               tiled, dY)
    _check_finite([("dY", dY3)])
    tape = _kept_tape(L, [a for _, a in _inputs(L, X3, M3, p)])
    if tape is None:                                 # checks the inputs as it copies them
        _, tape = _run_forward(L, X3, M3, p)
    M2 = M3.reshape(-1, L.d) if M3 is not None else None
    dX, dmemory, grads = _layer_backward(L, X3.reshape(-1, L.d), M2, p, dY3.reshape(-1, L.d), tape)
    keys = ENCODER_KEYS if kind == "encoder" else DECODER_KEYS
    out = {k: grads[k] for k in keys}
    out["X"] = dX.reshape(np.shape(X))
    if dmemory is not None:
        out["memory"] = dmemory.reshape(np.shape(memory))
    _check_outputs([(f"the gradient of {k}", g) for k, g in out.items()])
    return out


# ------------------------------------------------------------------- public

def encoder_layer(X, params, heads, norm_first=False, activation="relu", causal=False, tiled=None):
    """torch.nn.TransformerEncoderLayer's forward (batch_first, no dropout): Y like X.

    X is (T, d_model) or (B, T, d_model), float32 or float64; params holds the layer's
    state_dict arrays (self_attn.in_proj_weight (3 d_model, d_model), ..., linear1.weight
    (d_ff, d_model), ..., norm2.bias), all of X's dtype. heads must divide d_model.
    norm_first: pre-norm instead of the paper's post-norm. activation: "relu" or "gelu"
    (exact, with erf). causal: position i attends to j <= i only. tiled: None chooses by
    T (tiles from ``TILED_FROM`` on), True or False forces the tiled attention (never
    stores a head's T x T weights) or the stored one.
    """
    return _forward("encoder", X, None, params, heads, norm_first, activation, causal, tiled)


def encoder_layer_backward(X, params, heads, dY, norm_first=False, activation="relu", causal=False,
                           tiled=None):
    """The gradients of encoder_layer given dY (like X): a dict with params' keys (each like
    its parameter) and "X". Starts from the last forward's tape when X and params are the
    ones it saw, element for element, with the same options; recomputes the forward otherwise."""
    v.required("dY", dY, "the gradient of the loss with respect to Y, an array like X")
    return _backward("encoder", X, None, params, heads, dY, norm_first, activation, causal, tiled)


def decoder_layer(X, memory, params, heads, norm_first=False, activation="relu", causal=True,
                  tiled=None):
    """torch.nn.TransformerDecoderLayer's forward (batch_first, no dropout): Y like X.

    X (T, d_model) or (B, T, d_model); memory (S, d_model) or (B, S, d_model), the encoder's
    output, attended to without a mask. params adds to an encoder's multihead_attn.* (the
    cross-attention) and norm3.*. causal (default True, as tgt_is_causal with the square
    subsequent mask) masks the self-attention only. Options as ``encoder_layer``'s.
    """
    return _forward("decoder", X, memory, params, heads, norm_first, activation, causal, tiled)


def decoder_layer_backward(X, memory, params, heads, dY, norm_first=False, activation="relu",
                           causal=True, tiled=None):
    """The gradients of decoder_layer given dY: params' keys, "X" and "memory"."""
    v.required("dY", dY, "the gradient of the loss with respect to Y, an array like X")
    return _backward("decoder", X, memory, params, heads, dY, norm_first, activation, causal, tiled)
