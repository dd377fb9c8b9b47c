"""Causal linear attention and its decayed forms, forward and exact backward, three ways.

Linear attention (Katharopoulos et al., 2020, "Transformers are RNNs"), with X (T, d_model):

    q_t = W_q x_t,  k_t = W_k x_t,  v_t = W_v x_t     W_q, W_k (d_k, d_model), W_v (d_v, d_model)
    phi(u) = elu(u) + 1                                positive: the normaliser never changes sign
    S_t = a_t S_{t-1} + phi(k_t) v_t^T                 (d_k, d_v)
    z_t = a_t z_{t-1} + phi(k_t)                       (d_k,)
    y_t = S_t^T phi(q_t) / (z_t^T phi(q_t))            (normalize=False: the numerator alone)

The decay a_t is 1 (decay=None), gamma in (0, 1] (decay="constant", RetNet), or
exp(-softplus(x_t . w_a + b_a)) (decay="selective", Mamba-2's scalar A), where it depends on
the input and so does the gradient path.

The normaliser is one more column of V, a column of ones: with v'_t = [v_t, 1] the state
S'_t = [S_t, z_t] (d_k, w) carries both, w = d_v + 1 (w = d_v without normalisation), and
o'_t = S'_t^T phi(q_t) holds numerator and denominator. Their ratio does not change when
phi(q_t) is scaled, so with normalisation a row of q_t all below 0 enters as phi(q_t) over its
largest entry (``_phi_rows_inplace``): exp(q) is never subnormal (float32, q < -87). Unrolled,

    o'_t = sum_{s <= t} D[t, s] (phi(q_t) . phi(k_s)) v'_s,   D[t, s] = prod_{s < r <= t} a_r = exp(c_t - c_s)

with c the cumulative sum of log a_t. The three methods compute the same O':

* ``recurrent``: one step at a time over the (d_k, w) state, one pass over it per step;
* ``parallel``: O' = (phi(Q) phi(K)^T ⊙ D) V', two T x T GEMMs: T^2 memory, by design;
* ``chunked``: the parallel form inside chunks of ``chunk`` rows, the state carried from
  chunk to chunk (the chunk form of flash-linear-attention, Mamba-2's SSD): GEMMs only.

D comes from differences of c (in float64), exp(c_t - c_s) <= 1, so it neither overflows
nor underflows where the product of the a_r does not; a chunk uses cumulative sums local
to it. The backward of each method is its own algorithm, for

    do_t = dy_t / n_t,  dn_t = -(dy_t . y_t) / n_t        (n_t the denominator; do'_t = [do_t, dn_t])
    dphi(q_t) = S'_t do'_t
    R_s = sum_{t >= s} D[t, s] phi(q_t) do'_t^T = a_{s+1} R_{s+1} + phi(q_s) do'_s^T   (dL/dS'_s)
    dphi(k_s) = R_s v'_s,   dv'_s = R_s^T phi(k_s)
    dlog a_r = sum_{s < r <= t} D[t, s] (phi(q_t) . phi(k_s)) (do'_t . v'_s) = a_r <R_r, S'_{r-1}>

(D[t, s] holds a_r for exactly the pairs s < r <= t). The recurrent backward runs the state
forward again (for dphi(q)), then R backwards in time; for dlog a it keeps one state per
segment of SEGMENT steps and makes the segment's states again on the way back. The parallel
one builds the masked T x T matrices and sums dlog a's pairs in them. The chunked one goes
chunk by chunk, back to front, from the states kept at each chunk's start, and splits dlog
a's pairs four ways (inside the chunk, from before it, to after it, across it). Each of
these sums is local: the shorter running total over all T of phi(q_t) . dphi(q_t) -
phi(k_t) . dphi(k_t) (the same sum, as dL/dc_t) rounds in float32 by an amount that grows
with T (dw_a off by 1e-4 at T = 16,384).

A backward right after a forward of the same inputs reuses the forward's projections and,
chunked, its states, as autograd keeps a forward's activations (see ``backward``).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
from numba import njit

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels.blas import dot
from harness.kernels.vmath import exp_shifted_inplace, row_dot

METHODS = ("recurrent", "parallel", "chunked")
DECAYS = (None, "constant", "selective")
CHUNK = 64              # rows per chunk: GEMMs of 64 x 64 tiles, the chunk of flash-linear-attention
SEGMENT = 64            # steps per segment of the recurrent backward's dlog a: one state kept each
_PHI_BLOCK = 16384      # phi's exp goes through a scratch of this many entries (L2-sized)
_PROJ_ROWS = 1024       # rows projected, then phi'd, at a time: at T = 65,536, d = 64, 10-20 %
                        # faster than all the projections first (measured); the same at T = 4096


# ------------------------------------------------------------------ shared pieces

@njit(cache=True, error_model="numpy")
def _negative_part(x, e):
    # e = min(x, 0), what exp sees of phi's argument (so it never overflows)
    for i in range(x.shape[0]):
        e[i] = min(x[i], 0.0)


@njit(cache=True, error_model="numpy")
def _phi_combine(x, e):
    # x <- max(x, 0) + e, e = exp(min(x, 0)): x + 1 where x > 0, exp(x) elsewhere, with no branch
    for i in range(x.shape[0]):
        x[i] = max(x[i], 0.0) + e[i]


def _phi_inplace(a, tmp):
    """a (n,) projections -> phi(a) = elu(a) + 1 = max(a, 0) + exp(min(a, 0)) in place, a block
    of tmp's length at a time. The exp of a whole block goes to NumPy's SIMD exp: with the two
    compiled passes around it, 0.9 ns an entry in float32 and 2.0 ns in float64, against 2.1
    and 2.9 through vmath's (measured, one thread, 4096 x 64)."""
    m = tmp.shape[0]
    for i0 in range(0, a.shape[0], m):
        x = a[i0:i0 + m]
        e = tmp[:x.shape[0]]
        _negative_part(x, e)
        np.exp(e, out=e)
        _phi_combine(x, e)


@njit(cache=True, error_model="numpy")
def _negative_part_rows(x, e):
    # e = min(x, 0) - m_t row by row, m_t = min(max_i x[t, i], 0): a row of q_t all below 0 is
    # phi(q_t) / phi(max_i q_t,i), its largest entry 1, so that exp(q) below float32's normal
    # range (q < -87) is never made; rows with an entry >= 0 are as _negative_part leaves them
    n, d = x.shape
    for t in range(n):
        row, out = x[t], e[t]
        m = row[0]
        for i in range(1, d):
            m = max(m, row[i])
        m = min(m, 0.0)
        for i in range(d):
            out[i] = min(row[i], 0.0) - m


def _phi_rows_inplace(a, tmp):
    """a (n, d) projections -> phi(a) row by row in place, each row whose entries are all below 0
    divided by its largest phi (``_negative_part_rows``), through tmp in blocks of whole rows.

    With normalize=True, y_t = S'^T phi(q_t) / z^T phi(q_t) does not change when phi(q_t) is
    scaled, and neither do its gradients by q_t: phi'(q) = phi(q) on that branch, so dq =
    dphi~ * phi~ (``_phi_grad_inplace``) whatever the scale. Unscaled, q_t around -88 to -103 made
    phi(q_t) subnormal in float32 and Y 23-77 % off, with no warning."""
    n, d = a.shape
    rows = max(1, tmp.shape[0] // d)
    for r0 in range(0, n, rows):
        x = a[r0:r0 + rows]
        e = tmp[:x.shape[0] * d].reshape(x.shape)
        _negative_part_rows(x, e)
        np.exp(e, out=e)
        _phi_combine(x.reshape(-1), e.reshape(-1))


@njit(cache=True, error_model="numpy")
def _phi_grad_inplace(dF, F):
    # dphi(u) -> du in place: phi'(u) = 1 where u > 0 (phi > 1), exp(u) = phi(u) elsewhere: min(phi, 1)
    for i in range(dF.shape[0]):
        dF[i] *= min(F[i], 1.0)


@njit(cache=True, error_model="numpy")
def _exp_into(src, n, out, bits):
    # out[:n] = exp(src[:n]) for src <= 0 (float64): vectorised, as Numba's scalar exp is not
    for j in range(n):
        out[j] = src[j]
    exp_shifted_inplace(out, n, 0.0, 1.0, bits)


@njit(cache=True, error_model="numpy")
def _output_grad_row(o, dy, normalize, do):
    # o'_t (w,), dy_t (d_v,) -> do'_t (w,). Reverses y = o / n:  do = dy / n,  dn = -(dy . y) / n
    d_v = dy.shape[0]
    if normalize:
        inv = 1.0 / o[d_v]
        r = 0.0
        for j in range(d_v):
            r += np.float64(dy[j]) * (o[j] * inv)
            do[j] = dy[j] * inv
        do[d_v] = -r * inv
    else:
        for j in range(d_v):
            do[j] = dy[j]


@njit(cache=True, error_model="numpy")
def _output_grad(O, dY, normalize, dO):
    # O (T, w), dY (T, d_v) -> dO (T, w), row by row
    for t in range(O.shape[0]):
        _output_grad_row(O[t], dY[t], normalize, dO[t])


@njit(cache=True, error_model="numpy")
def _normalise(O, Y):
    # O (B, T, d_v + 1) -> Y (B, T, d_v) = numerator / denominator
    B, T, d_v = Y.shape
    for b in range(B):
        for t in range(T):
            inv = 1.0 / O[b, t, d_v]
            for j in range(d_v):
                Y[b, t, j] = O[b, t, j] * inv


@njit(cache=True, error_model="numpy")
def _split_sums(A, dA, out):
    # A (n, n) masked (D inside), dA (n, n) = do' v'^T before the mask -> out (n,) float64, added
    # to: out[r] += sum_{t >= r} sum_{s < r} A[t, s] dA[t, s], the pairs (s, t) that step r lies
    # between. D[t, s] holds a_r for exactly those pairs, so this is their share of dL/dlog a_r.
    # Row by row, a running sum over s: the pairs of row t with s < r, for r = 1..t.
    n = A.shape[0]
    for t in range(n):
        run = 0.0
        for s in range(t):
            run += np.float64(A[t, s]) * np.float64(dA[t, s])
            out[s + 1] += run


# --------------------------------------------------------------------- recurrent

@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _recurrent_forward(FQ, FK, V1, ell, O):
    # FQ, FK (B, T, d_k) = phi(Q), phi(K); V1 (B, T, w) = V'; ell (B, T) float64 = log a_t
    # -> O (B, T, w) = o'_t. S'_t = a_t S'_{t-1} + phi(k_t) v'_t^T and o'_t = S'_t^T phi(q_t)
    # in one pass over the state per step.
    B, T, d_k = FQ.shape
    w = V1.shape[2]
    S = np.empty((d_k, w), dtype=FQ.dtype)
    a = np.empty(T, dtype=FQ.dtype)
    e, bits = np.empty(T), np.empty(T, dtype=np.int64)
    for b in range(B):
        _exp_into(ell[b], T, e, bits)
        a[:] = e
        S[:] = 0.0
        for t in range(T):
            at, fq, fk, vt, o = a[t], FQ[b, t], FK[b, t], V1[b, t], O[b, t]
            o[:] = 0.0
            for i in range(d_k):
                g, f, Si = fq[i], fk[i], S[i]
                for j in range(w):
                    s = at * Si[j] + f * vt[j]
                    Si[j] = s
                    o[j] += g * s


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _recurrent_backward(FQ, FK, V1, ell, dY, normalize, dO, dFQ, dFK, dV1, dell, want_dell, K):
    # Reverses _recurrent_forward given dY (B, T, d_v); writes dO (B, T, w) = do'_t,
    # dFQ, dFK (B, T, d_k) = dphi(q_t), dphi(k_t), dV1 (B, T, w) = dv'_t.
    # Pass 1, forward in time: S'_t again, o'_t, do'_t, then dphi(q_t) = S'_t do'_t.
    # Pass 2, backward in time: R_t = a_{t+1} R_{t+1} + phi(q_t) do'_t^T, the gradient at S'_t;
    # dphi(k_t) = R_t v'_t, dv'_t = R_t^T phi(k_t). Only pass 1 makes states.
    # With want_dell, dell (B, T) float64 = dL/dlog a_t = a_t <R_t, S'_{t-1}> (S'_t = a_t S'_{t-1}
    # + ...), one inner product per step, whose rounding does not grow with T. Pass 2 needs
    # S'_{t-1} going backwards: pass 1 keeps every K-th state, and pass 2 makes the K states of
    # each segment again from it before walking the segment back.
    B, T, d_k = FQ.shape
    w = V1.shape[2]
    dt = FQ.dtype
    S = np.empty((d_k, w), dtype=dt)
    o = np.empty(w, dtype=dt)
    a = np.zeros(T + 1, dtype=dt)                    # a[T] = 0: nothing comes after the last step
    e, bits = np.empty(T), np.empty(T, dtype=np.int64)
    n_seg = (T + K - 1) // K if want_dell else 1
    marks = np.empty((n_seg, d_k, w), dtype=dt)      # S'_{c K - 1}, entering segment c
    seg = np.empty((K if want_dell else 1, d_k, w), dtype=dt)   # S'_t for the segment's t
    for b in range(B):
        _exp_into(ell[b], T, e, bits)
        a[:T] = e
        S[:] = 0.0
        for t in range(T):
            if want_dell and t % K == 0:
                marks[t // K] = S
            at, fq, fk, vt = a[t], FQ[b, t], FK[b, t], V1[b, t]
            o[:] = 0.0
            for i in range(d_k):                     # S'_t = a_t S'_{t-1} + phi(k_t) v'_t^T
                g, f, Si = fq[i], fk[i], S[i]
                for j in range(w):
                    s = at * Si[j] + f * vt[j]
                    Si[j] = s
                    o[j] += g * s
            _output_grad_row(o, dY[b, t], normalize, dO[b, t])
            dot(S, dO[b, t], dFQ[b, t])              # o'_t = S'_t^T phi(q_t): a GEMV
        R = S                                        # now the gradient at the state
        R[:] = 0.0
        for c in range(n_seg - 1, -1, -1):
            c0 = c * K if want_dell else 0
            c1 = min(c0 + K, T) if want_dell else T
            if want_dell:                            # the segment's states again, from its mark
                for t in range(c0, c1):
                    prev = marks[c] if t == c0 else seg[t - c0 - 1]
                    cur, at, fk, vt = seg[t - c0], a[t], FK[b, t], V1[b, t]
                    for i in range(d_k):
                        f = fk[i]
                        for j in range(w):
                            cur[i, j] = at * prev[i, j] + f * vt[j]
            for t in range(c1 - 1, c0 - 1, -1):
                an, fq, fk, do, dv = a[t + 1], FQ[b, t], FK[b, t], dO[b, t], dV1[b, t]
                dv[:] = 0.0
                for i in range(d_k):                 # R_t = a_{t+1} R_{t+1} + phi(q_t) do'_t^T
                    g, f, Ri = fq[i], fk[i], R[i]
                    for j in range(w):
                        r = an * Ri[j] + g * do[j]
                        Ri[j] = r
                        dv[j] += f * r               # dv'_t = R_t^T phi(k_t)
                dot(R, V1[b, t], dFK[b, t])          # dphi(k_t) = R_t v'_t: a GEMV
                if want_dell:
                    prev = marks[c] if t == c0 else seg[t - c0 - 1]
                    acc = 0.0
                    for i in range(d_k):
                        acc += row_dot(R[i], prev[i], w)
                    dell[b, t] = a[t] * acc


# ---------------------------------------------------------------------- parallel

@njit(cache=True, error_model="numpy")
def _decay_row(c, t, crow, bits):
    # crow[:t+1] = D[t, s] = exp(c_t - c_s), s = 0..t (c float64, non-increasing: each <= 1)
    for s in range(t + 1):
        crow[s] = -c[s]
    exp_shifted_inplace(crow, t + 1, -c[t], 1.0, bits)


@njit(cache=True, error_model="numpy")
def _mask(A, c, decayed, crow, bits):
    # A (n, n) <- A ⊙ D: exp(c_t - c_s) on and below the diagonal, 0 above
    n = A.shape[0]
    for t in range(n):
        row = A[t]
        if decayed:
            _decay_row(c, t, crow, bits)
            for s in range(t + 1):
                row[s] *= crow[s]
        for s in range(t + 1, n):
            row[s] = 0.0


@njit(cache=True, error_model="numpy")
def _parallel_forward(FQ, FK, V1, ell, decayed, O, A):
    # FQ, FK (B, T, d_k), V1 (B, T, w), ell (B, T) -> O (B, T, w) = (phi(Q) phi(K)^T ⊙ D) V'.
    # A (T, T) scratch in FQ's dtype, reused for each sequence.
    B, T, _ = FQ.shape
    crow, bits = np.empty(T), np.empty(T, dtype=np.int64)
    for b in range(B):
        c = np.cumsum(ell[b])                        # c_t = sum_{r <= t} log a_r, float64
        dot(FQ[b], FK[b].T, A)                       # every pair at once: one GEMM
        _mask(A, c, decayed, crow, bits)             # causal, decayed
        dot(A, V1[b], O[b])                          # the mix: a second GEMM


@njit(cache=True, error_model="numpy")
def _parallel_backward(FQ, FK, V1, ell, decayed, dY, normalize, O, dO, dFQ, dFK, dV1, dell,
                       want_dell, A, dA):
    # Reverses O' = (P ⊙ D) V', P = phi(Q) phi(K)^T, given dY (B, T, d_v); A, dA (T, T) scratch.
    #   dV' = (P ⊙ D)^T dO',  dP = (dO' V'^T) ⊙ D,  dphi(Q) = dP phi(K),  dphi(K) = dP^T phi(Q)
    #   dlog a_r = sum over the pairs s < r <= t of (P ⊙ D ⊙ dO' V'^T)[t, s]   (with want_dell)
    B, T, _ = FQ.shape
    crow, bits = np.empty(T), np.empty(T, dtype=np.int64)
    for b in range(B):
        c = np.cumsum(ell[b])
        dot(FQ[b], FK[b].T, A)
        _mask(A, c, decayed, crow, bits)
        dot(A, V1[b], O[b])                          # the forward again: o'_t, for dn_t
        _output_grad(O[b], dY[b], normalize, dO[b])
        dot(A.T, dO[b], dV1[b])
        dot(dO[b], V1[b].T, dA)
        if want_dell:
            dell[b] = 0.0
            _split_sums(A, dA, dell[b])
        _mask(dA, c, decayed, crow, bits)
        dot(dA, FK[b], dFQ[b])
        dot(dA.T, FQ[b], dFK[b])


# ----------------------------------------------------------------------- chunked

# Inside a chunk whose decays sum to at least this, exp(b_t) and exp(-b_s) are both normal
# float64 numbers, and D[t, s] = exp(b_t) exp(-b_s) (to 2 ulp) costs 2n exps, not n^2 / 2.
_SEPARABLE = -600.0


@njit(cache=True, error_model="numpy")
def _chunk_decays(ell, decayed, Dm, eq, ek, e, bits):
    # ell (n,) log a_t of one chunk, with b_t = sum_{j0 <= r <= t} log a_r local to the chunk (so
    # never large) -> Dm (n, n) = exp(b_t - b_s) on and below the diagonal, 0 above (the causal
    # mask too); eq[t] = exp(b_t), what of the entering state reaches row t; ek[s] = exp(b_end - b_s),
    # what of row s reaches the chunk's end; all in the dtype. Returns exp(b_end). One exp call
    # for the chunk: exp(+-b) when b_end >= _SEPARABLE, else exp(b_t - b_s) over the lower
    # triangle packed row by row. e float64 and bits int64, both (n (n + 1) / 2 + 2 n,).
    n = ell.shape[0]
    if not decayed:
        for t in range(n):
            for s in range(n):
                Dm[t, s] = 1.0 if s <= t else 0.0
            eq[t] = 1.0
            ek[t] = 1.0
        return eq[0]
    m = n * (n + 1) // 2
    bl = e[m + n:m + 2 * n]                      # b_t, then overwritten by b_end - b_t
    acc = 0.0
    for t in range(n):
        acc += ell[t]
        bl[t] = acc
    if acc >= _SEPARABLE:
        E, Einv = e[:n], e[n:2 * n]
        _exp_into(bl, n, E, bits)
        for t in range(n):
            Einv[t] = 1.0 / E[t]                         # <= e^600: no overflow
        for t in range(n):
            Et = E[t]
            for s in range(t + 1):
                Dm[t, s] = Et * Einv[s]
            for s in range(t + 1, n):
                Dm[t, s] = 0.0
            eq[t] = Et
            ek[t] = E[n - 1] * Einv[t]
        return eq[n - 1]
    for t in range(n):
        r = t * (t + 1) // 2
        for s in range(t + 1):
            e[r + s] = bl[t] - bl[s]
        e[m + t] = bl[t]
    for t in range(n):
        bl[t] = acc - bl[t]
    exp_shifted_inplace(e, m + 2 * n, 0.0, 1.0, bits)
    for t in range(n):
        r = t * (t + 1) // 2
        for s in range(t + 1):
            Dm[t, s] = e[r + s]
        for s in range(t + 1, n):
            Dm[t, s] = 0.0
        eq[t] = e[m + t]
        ek[t] = e[m + n + t]
    return eq[n - 1]


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _hand_on(gend, S, St, e, x, y, buf):
    # S = gend S + (e ⊙ x)^T y, what a chunk hands on: forward, S' at its end (x = phi(k),
    # y = v'); backward, G for the chunk before (x = phi(q), y = do'). buf holds e ⊙ x, St the
    # product
    n, d = x.shape
    Xd = buf[:n * d].reshape(n, d)
    for s in range(n):
        es = e[s]
        for i in range(d):
            Xd[s, i] = es * x[s, i]
    dot(Xd.T, y, St)
    for i in range(d):
        for c in range(St.shape[1]):
            S[i, c] = gend * S[i, c] + St[i, c]


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _chunked_pass(FQ, FK, V1, ell, decayed, C, b, O, states):
    # One sequence b, chunk by chunk, front to back: O[b] (T, w) = o'_t and states[b, j] (d_k, w),
    # the S' entering chunk j (what the backward needs; one copy of the state per chunk). Inside a
    # chunk the masked product (two GEMMs); the entering state adds exp(b_t) phi(q_t)^T S'; the
    # state moves on as exp(b_end) S' + (ek ⊙ phi(K))^T V'.
    _, T, d_k = FQ.shape
    w = V1.shape[2]
    dt = FQ.dtype
    Ab = np.empty(C * C, dtype=dt)
    Pb = np.empty(C * w, dtype=dt)
    Kb = np.empty(C * d_k, dtype=dt)
    S, St = np.zeros((d_k, w), dtype=dt), np.empty((d_k, w), dtype=dt)
    Db = np.empty(C * C, dtype=dt)
    e, bits = np.empty(C * (C + 1) // 2 + 2 * C), np.empty(C * (C + 1) // 2 + 2 * C, dtype=np.int64)
    eq, ek = np.empty(C, dtype=dt), np.empty(C, dtype=dt)
    for j0 in range(0, T, C):
        j1 = min(j0 + C, T)
        n = j1 - j0
        q, k, vv, o = FQ[b, j0:j1], FK[b, j0:j1], V1[b, j0:j1], O[b, j0:j1]
        states[b, j0 // C] = S
        Dm = Db[:n * n].reshape(n, n)
        gend = _chunk_decays(ell[b, j0:j1], decayed, Dm, eq, ek, e, bits)
        A = Ab[:n * n].reshape(n, n)
        dot(q, k.T, A)                               # (n, n) pairs inside the chunk
        A *= Dm                                      # causal, decayed
        dot(A, vv, o)                                # (n, w)
        if j0 > 0:                                   # what came before the chunk, through S'
            P = Pb[:n * w].reshape(n, w)
            dot(q, S, P)
            for t in range(n):
                et = eq[t]
                for c in range(w):
                    o[t, c] += et * P[t, c]
        if j1 < T:                                   # S' at the chunk's end
            _hand_on(gend, S, St, ek, k, vv, Kb)


@njit(cache=True, error_model="numpy")
def _chunked_forward(FQ, FK, V1, ell, decayed, C, O, states):
    # FQ, FK (B, T, d_k), V1 (B, T, w), ell (B, T), C rows per chunk -> O (B, T, w), and
    # states (B, n_chunks, d_k, w) for a backward that follows
    for b in range(FQ.shape[0]):
        _chunked_pass(FQ, FK, V1, ell, decayed, C, b, O, states)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _chunked_backward(FQ, FK, V1, ell, decayed, C, dY, normalize, O, dO, dFQ, dFK, dV1, states,
                      recompute, dell, want_dell):
    # Reverses _chunked_forward given dY (B, T, d_v). O (B, T, w) and states (B, n_chunks, d_k, w)
    # are the forward's: S'_prev, the state entering each chunk, and o'_t for the normaliser's
    # gradient; with ``recompute`` the forward pass runs again to make them. Then back to front,
    # with G = dL/dS' at the chunk's end (from the chunks after it):
    #   inside:  A = (q k^T) ⊙ D, dP = (do' v'^T) ⊙ D;  dv' = A^T do', dq = dP k, dk = dP^T q
    #   o' += diag(eq) q S'_prev:  dq += diag(eq) do' S'_prev^T
    #   S'_end = gend S'_prev + (ek ⊙ k)^T v':  dk += diag(ek) v' G^T,  dv' += (ek ⊙ k) G
    #   G_prev = gend G + (eq ⊙ q)^T do'
    # With want_dell, dell (B, T) float64 = dL/dlog a_r, the pairs s < r <= t of the masked
    # product's gradient, chunk by chunk (never a sum over all T, whose rounding would grow with T):
    #   both in the chunk: _split_sums;  s before the chunk: sum_{t >= r} eq_t q_t . (S'_prev do'_t);
    #   t after it: sum_{s < r} ek_s k_s . (G v'_s);  s before and t after: gend <G, S'_prev>.
    B, T, d_k = FQ.shape
    w = V1.shape[2]
    dt = FQ.dtype
    Ab, dAb = np.empty(C * C, dtype=dt), np.empty(C * C, dtype=dt)
    Tb = np.empty(C * max(d_k, w), dtype=dt)
    Kb = np.empty(C * d_k, dtype=dt)
    G, Gt = np.empty((d_k, w), dtype=dt), np.empty((d_k, w), dtype=dt)
    Db = np.empty(C * C, dtype=dt)
    e, bits = np.empty(C * (C + 1) // 2 + 2 * C), np.empty(C * (C + 1) // 2 + 2 * C, dtype=np.int64)
    eq, ek = np.empty(C, dtype=dt), np.empty(C, dtype=dt)
    u = np.empty(C)
    n_chunks = (T + C - 1) // C
    for b in range(B):
        if recompute:
            _chunked_pass(FQ, FK, V1, ell, decayed, C, b, O, states)
        _output_grad(O[b], dY[b], normalize, dO[b])
        G[:] = 0.0
        for jc in range(n_chunks - 1, -1, -1):
            j0 = jc * C
            j1 = min(j0 + C, T)
            n = j1 - j0
            q, k, vv, do = FQ[b, j0:j1], FK[b, j0:j1], V1[b, j0:j1], dO[b, j0:j1]
            dq, dk, dv, dl = dFQ[b, j0:j1], dFK[b, j0:j1], dV1[b, j0:j1], dell[b, j0:j1]
            Dm = Db[:n * n].reshape(n, n)
            gend = _chunk_decays(ell[b, j0:j1], decayed, Dm, eq, ek, e, bits)
            A, dA = Ab[:n * n].reshape(n, n), dAb[:n * n].reshape(n, n)
            dot(q, k.T, A)
            dot(do, vv.T, dA)
            A *= Dm
            if want_dell:
                dl[:] = 0.0
                _split_sums(A, dA, dl)
            dA *= Dm
            dot(A.T, do, dv)                         # inside the chunk
            dot(dA, k, dq)
            dot(dA.T, q, dk)
            Tk = Tb[:n * d_k].reshape(n, d_k)
            if j0 > 0:                               # o' += diag(eq) q S'_prev
                dot(do, states[b, jc].T, Tk)
                for t in range(n):
                    et = eq[t]
                    for i in range(d_k):
                        dq[t, i] += et * Tk[t, i]
                if want_dell:                        # s before the chunk, t >= r in it
                    acc = 0.0
                    for t in range(n - 1, -1, -1):
                        acc += eq[t] * row_dot(q[t], Tk[t], d_k)
                        dl[t] += acc
            if j1 < T:                               # S'_end = gend S'_prev + (ek ⊙ k)^T v'
                dot(vv, G.T, Tk)
                Kd = Kb[:n * d_k].reshape(n, d_k)
                for s in range(n):
                    es = ek[s]
                    for i in range(d_k):
                        dk[s, i] += es * Tk[s, i]
                        Kd[s, i] = es * k[s, i]
                if want_dell:                        # t after the chunk, s < r in it
                    acc = 0.0
                    for r in range(1, n):
                        acc += ek[r - 1] * row_dot(k[r - 1], Tk[r - 1], d_k)
                        dl[r] += acc
                    if j0 > 0:                       # s before the chunk, t after it
                        Sp = states[b, jc]
                        both = 0.0
                        for i in range(d_k):
                            both += row_dot(G[i], Sp[i], w)
                        for r in range(n):
                            dl[r] += gend * both
                Tw = Tb[:n * w].reshape(n, w)
                dot(Kd, G, Tw)
                for s in range(n):
                    for c in range(w):
                        dv[s, c] += Tw[s, c]
            if j0 > 0:                               # the gradient at S'_prev, for the chunk before
                _hand_on(gend, G, Gt, eq, q, do, Kb)


# -------------------------------------------------------------------- projections

@njit(cache=True)
def _projections(X2, Wq, Wk, Wv1, Q, K, V1):
    # X2 (B T, d_model); q_t = W_q x_t for every t is Q = X W_q^T: one GEMM per weight
    dot(X2, Wq.T, Q)
    dot(X2, Wk.T, K)
    dot(X2, Wv1.T, V1)


_PART_ROWS = 1024       # dX's later terms go through a (1024, d_model) buffer, not (B T, d_model)


@njit(cache=True)
def _projection_grads(X2, Wq, Wk, Wv1, dQ, dK, dV1, dX, dWq, dWk, dWv1, part):
    # Reverses Q = X W_q^T, K = X W_k^T, V' = X W_v'^T: dX = dQ W_q + dK W_k + dV' W_v',
    # dW_q = dQ^T X, ... The zero row of W_v' (the normaliser's column) drops dV''s last column.
    dot(dQ, Wq, dX)
    rows = part.shape[0]
    for r0 in range(0, dX.shape[0], rows):
        r1 = min(r0 + rows, dX.shape[0])
        p = part[:r1 - r0]
        dot(dK[r0:r1], Wk, p)
        dX[r0:r1] += p
        dot(dV1[r0:r1], Wv1, p)
        dX[r0:r1] += p
    dot(dQ.T, X2, dWq)
    dot(dK.T, X2, dWk)
    dot(dV1.T, X2, dWv1)


@njit(cache=True, error_model="numpy")
def _scores(X2, w_a, b_a, s):
    # s (B T,) float64 = x_t . w_a + b_a, each product exact in float64 (float32 inputs): a
    # float32 dot rounds s_t by eps sum_m |x_tm w_am|, which moves every a_t
    for r in range(X2.shape[0]):
        s[r] = row_dot(X2[r], w_a, X2.shape[1]) + b_a


@njit(cache=True, error_model="numpy")
def _score_grads(X2, ds, dw_a):
    # dw_a (d_model,) float64 = X^T ds, ds (B T,) float64: reverses s_t = x_t . w_a + b_a
    dw_a[:] = 0.0
    for r in range(X2.shape[0]):
        x, g = X2[r], ds[r]
        for m in range(X2.shape[1]):
            dw_a[m] += np.float64(x[m]) * g


# ------------------------------------------------------------------------- public

class LinearAttentionGrads(NamedTuple):
    dX: np.ndarray                  # like X: (T, d_model) or (B, T, d_model)
    dWq: np.ndarray                 # (d_k, d_model)
    dWk: np.ndarray                 # (d_k, d_model)
    dWv: np.ndarray                 # (d_v, d_model)
    dw_a: Optional[np.ndarray]      # (d_model,), decay="selective" only
    db_a: Optional[np.floating]     # a scalar of X's dtype, decay="selective" only


class _Inputs(NamedTuple):
    X: np.ndarray                   # as given (2-D or 3-D), checked
    X3: np.ndarray                  # (B, T, d_model)
    Wq: np.ndarray
    Wk: np.ndarray
    Wv: np.ndarray
    decay: Optional[str]
    gamma: Optional[float]
    w_a: Optional[np.ndarray]
    b_a: Optional[float]
    normalize: bool
    method: str
    chunk: int


def _check(X, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize, method, chunk):
    v.check_choice("method", method, METHODS)
    if decay is not None and not isinstance(decay, str):
        raise TypeError(f"decay must be one of {list(DECAYS)!r}, got {type(decay).__name__} {decay!r}.")
    v.check_choice("decay", decay, DECAYS)
    if not isinstance(normalize, (bool, np.bool_)):
        raise TypeError(f"normalize must be True or False, got {normalize!r}.")
    chunk = v.check_int("chunk", chunk)
    dtype = v.common_dtype("X", X)
    X = v.as_float_view("X", X, (2, 3))           # copied (if strided) by _check_bytes, counted
    d_model = X.shape[-1]
    Wq, Wk, Wv = v.projections(Wq, Wk, Wv, d_model, dtype, axis=1)
    if decay == "constant":
        if gamma is None:
            raise ValueError("gamma is missing: decay='constant' needs gamma, a number in (0, 1].")
        gamma = v.check_real("gamma", gamma)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1] (a_t = gamma at every step), got {gamma!r}.")
    elif gamma is not None:
        raise ValueError(f"gamma is given but decay={decay!r}; gamma is the decay of "
                         f"decay='constant' only.")
    if decay == "selective":
        if w_a is None or b_a is None:
            missing = " and ".join(n for n, x in (("w_a", w_a), ("b_a", b_a)) if x is None)
            raise ValueError(f"{missing} missing: decay='selective' needs w_a ({d_model},) and b_a, "
                             f"a number (a_t = exp(-softplus(x_t . w_a + b_a))).")
        w_a = v.as_float_array("w_a", w_a, 1, dtype)
        v.check_shape("w_a", w_a, (d_model,))
        b_a = _check_scalar("b_a", b_a)
    elif w_a is not None or b_a is not None:
        given = " and ".join(n for n, x in (("w_a", w_a), ("b_a", b_a)) if x is not None)
        raise ValueError(f"{given} given but decay={decay!r}; w_a and b_a are the decay of "
                         f"decay='selective' only.")
    X3 = X if X.ndim == 3 else X[None]
    # a chunk of T rows or more is the whole sequence: its buffers are sized by the rows it holds
    chunk = min(chunk, X3.shape[1])
    return _Inputs(X, X3, Wq, Wk, Wv, decay, gamma, w_a, b_a, bool(normalize), method, chunk)


def _check_scalar(name, x):
    """A finite real number, or a 0-d / one-element float array of one; returned as a float."""
    if isinstance(x, np.ndarray) and x.size == 1 and x.ndim <= 1:
        x = x.reshape(())[()]
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}.")
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}.")
    return float(x)


class _Features(NamedTuple):
    FQ: np.ndarray                  # (B, T, d_k) phi(Q)
    FK: np.ndarray                  # (B, T, d_k) phi(K)
    V1: np.ndarray                  # (B, T, w) V' = [V, 1]
    Wv1: np.ndarray                 # (w, d_model) W_v' = [W_v; 0]
    ell: np.ndarray                 # (B, T) float64, log a_t
    s: Optional[np.ndarray]         # (B T,) float64, x_t . w_a + b_a (selective), else None


# The features made last in this thread, copies of the inputs they came from, and the chunk
# length whose states (and o') the chunked forward left in the workspace, if any. A backward
# whose inputs equal those copies, element for element, reuses the features instead of redoing
# the projections (and, chunked with that chunk length, the forward pass), as autograd keeps
# the forward's activations. Only the functions below write those buffers; workspace.clear
# drops them. At T = 4096, d = 64 the projections and phi are a third of the backward's time.
_KEPT = "linear_features"


class _Kept(NamedTuple):
    arrays: tuple                   # copies of X3, Wq, Wk, Wv, w_a (or None)
    scalars: tuple                  # decay, gamma, b_a, normalize
    features: _Features
    chunk: Optional[int]            # the chunk length of the states and o' in the workspace


def _inputs(p):
    return (p.X3, p.Wq, p.Wk, p.Wv, p.w_a), (p.decay, p.gamma, p.b_a, p.normalize)


def _kept_features(p):
    """(features, chunk) kept from exactly these inputs, or (None, None)."""
    kept = workspace.kept(_KEPT)
    if kept is None:
        return None, None
    arrays, scalars = _inputs(p)
    if kept.scalars != scalars:
        return None, None
    for a, b in zip(kept.arrays, arrays):
        if (a is None) != (b is None):
            return None, None
        if a is not None and (a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b)):
            return None, None
    return kept.features, kept.chunk


def _keep_features(p, features):
    old = workspace.kept(_KEPT)
    arrays, scalars = _inputs(p)
    copies = []
    for n, a in enumerate(arrays):                   # the last copies' memory, where it fits
        if a is None:
            copies.append(None)
            continue
        c = old.arrays[n] if old is not None else None
        if c is None or c.shape != a.shape or c.dtype != a.dtype:
            c = np.empty_like(a)
        np.copyto(c, a)
        copies.append(c)
    workspace.keep(_KEPT, _Kept(tuple(copies), scalars, features, None))


def _keep_chunk(chunk):
    """Record that the workspace's states and o' are the chunked forward's with ``chunk`` (or none)."""
    kept = workspace.kept(_KEPT)
    if kept is not None:
        workspace.keep(_KEPT, kept._replace(chunk=chunk))


def _log_decay(p, X2):
    """(ell (B, T) float64 = log a_t, s (B T,) float64 = x_t . w_a + b_a or None)."""
    B, T = p.X3.shape[:2]
    if p.decay is None:
        return np.zeros((B, T)), None
    if p.decay == "constant":
        return np.full((B, T), math.log(p.gamma)), None
    s = np.empty(B * T)
    _scores(X2, p.w_a, p.b_a, s)
    return (-np.logaddexp(0.0, s)).reshape(B, T), s            # log a_t = -softplus(s_t)


def _features(p, X2, reuse=False):
    """(features, chunk): phi(Q), phi(K), V' in workspace buffers, W_v', log a_t; with ``reuse``,
    the kept ones if they came from these very inputs, and the chunk length of the kept states."""
    if reuse:
        features, chunk = _kept_features(p)
        if features is not None:
            return features, chunk
    B, T, d_model = p.X3.shape
    d_k, d_v = p.Wq.shape[0], p.Wv.shape[0]
    w = d_v + p.normalize
    dt = p.X.dtype
    ell, s = _log_decay(p, X2)
    Wv1 = p.Wv
    if p.normalize:                                  # v'_t = [v_t, 1]: a zero row, then the ones
        Wv1 = np.zeros((w, d_model), dtype=dt)
        Wv1[:d_v] = p.Wv
    Q, K, V1 = (workspace.buffer(name, (B * T, n), dt)
                for name, n in (("linear_phiQ", d_k), ("linear_phiK", d_k), ("linear_V1", w)))
    tmp = workspace.buffer("linear_phi_tmp", (max(min(_PHI_BLOCK, B * T * d_k), d_k),), dt)
    for r0 in range(0, B * T, _PROJ_ROWS):           # phi while the block's Q and K are in cache
        r1 = min(r0 + _PROJ_ROWS, B * T)
        _projections(X2[r0:r1], p.Wq, p.Wk, Wv1, Q[r0:r1], K[r0:r1], V1[r0:r1])
        if p.normalize:                              # phi(q_t) up to a scale: never subnormal
            _phi_rows_inplace(Q[r0:r1], tmp)
        else:
            _phi_inplace(Q[r0:r1].reshape(-1), tmp)
        _phi_inplace(K[r0:r1].reshape(-1), tmp)
    if p.normalize:
        V1[:, d_v] = 1.0
    features = _Features(Q.reshape(B, T, d_k), K.reshape(B, T, d_k), V1.reshape(B, T, w), Wv1, ell, s)
    _keep_features(p, features)
    return features, None


def _n_chunks(p):
    return -(-p.X3.shape[1] // p.chunk)


def _chunk_bytes(C, d_k, w, item, backward):
    """Bytes of the chunked kernels' own buffers for chunks of C rows: the (C, C) products and
    decays in the dtype, the exps' packed triangle in float64 and int64; the backward adds its
    own to the forward pass it may run again (``_chunked_pass``, ``_chunked_backward``)."""
    tri = 16 * (C * (C + 1) // 2 + 2 * C)
    fwd = item * (2 * C * C + C * (w + d_k + 2) + 2 * d_k * w) + tri
    if not backward:
        return fwd
    return fwd + item * (3 * C * C + C * (max(d_k, w) + d_k + 2) + 2 * d_k * w) + tri + 8 * C


_SMALL_CHUNK_BYTES = 64 * 2**20     # below this, reading /proc/meminfo costs more than it saves


def _check_bytes(p, backward):
    """MemoryError, before allocating, if the method's buffers (and X's copy, if X is strided)
    would not fit; else p with X C-contiguous."""
    B, T, d_model = p.X3.shape
    d_k, d_v = p.Wq.shape[0], p.Wv.shape[0]
    w = d_v + p.normalize
    item = p.X.itemsize
    # features, O' and Y; the backward adds dO', the gradients of the features, dX, the copies
    rows = B * T * ((2 * d_k + w) + w + d_v + (2 * w + 2 * d_k + 2 * d_model if backward else d_model))
    if p.method == "parallel":
        n = 2 if backward else 1
        v.check_memory((n * T * T + rows) * item,
                       f"linear attention's parallel form at T = {T} ({n} T x T matri"
                       f"{'ces' if n > 1 else 'x'}; method='chunked' or 'recurrent' needs none)",
                       inputs=(("X", p.X),))
    elif p.method == "chunked":
        own = _chunk_bytes(p.chunk, d_k, w, item, backward)
        avail = v.available_memory_bytes() if own > _SMALL_CHUNK_BYTES else own
        if own > avail:
            raise MemoryError(
                f"chunk: chunks of {p.chunk} rows (min(chunk, T)) need {own:,} bytes "
                f"({own / 2**30:.2f} GiB) of chunk x chunk buffers in linear attention's chunked "
                f"form, but only {avail:,} bytes ({avail / 2**30:.2f} GiB) are available; pass "
                f"a smaller chunk (the default is {CHUNK}; the buffers grow as chunk**2).")
        v.check_memory((B * _n_chunks(p) * d_k * w + rows) * item + own,
                       f"linear attention's chunked form at T = {T}{f', B = {B}' if B > 1 else ''} "
                       f"(one state per chunk of chunk={p.chunk} rows, and chunk x chunk buffers)",
                       inputs=(("X", p.X),))
    else:
        v.check_memory(rows * item, f"linear attention at T = {T}{f', B = {B}' if B > 1 else ''}",
                       inputs=(("X", p.X),))
    X = v.contiguous("X", p.X)
    return p._replace(X=X, X3=X if X.ndim == 3 else X[None])


def _check_finite(name, a, what):
    """FloatingPointError naming ``name`` if ``a`` holds an inf or NaN: never a silent NaN."""
    total = a.sum(dtype=np.float64)                  # finite only if every entry is: one cheap pass
    if not math.isfinite(total) and not np.isfinite(a).all():
        hint = ", or use float64" if a.dtype == np.float32 else ""
        raise FloatingPointError(
            f"{what} {name} is not finite although the inputs are: a product overflows {a.dtype}, "
            f"or with normalize=True the denominator z_t . phi(q_t) underflows to 0 (k_t = W_k x_t "
            f"far below 0, so that z_t, a sum of phi(k_s) = exp(k_s), is 0); scale X or the weights "
            f"down{hint}, or use normalize=False.")


def forward(X, Wq, Wk, Wv, decay=None, gamma=None, w_a=None, b_a=None, normalize=True,
            method="recurrent", chunk=CHUNK):
    """Causal linear attention with feature map elu + 1: Y (T, d_v) or (B, T, d_v), in X's dtype.

    X is (T, d_model) or (B, T, d_model); Wq, Wk (d_k, d_model); Wv (d_v, d_model), so that
    q_t = Wq x_t. ``decay``: None (a_t = 1), "constant" (a_t = ``gamma``, in (0, 1]) or
    "selective" (a_t = exp(-softplus(x_t . w_a + b_a)), w_a (d_model,), b_a a number).
    ``normalize``: divide by z_t . phi(q_t), the sum of the weights, or not. ``method``:
    "recurrent", "parallel" (T x T memory) or "chunked" (``chunk`` rows per chunk); every
    method gives the same Y up to rounding.
    """
    p = _check(X, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize, method, chunk)
    p = _check_bytes(p, backward=False)
    B, T, d_model = p.X3.shape
    d_k, d_v = p.Wq.shape[0], p.Wv.shape[0]
    w = d_v + p.normalize
    dt = p.X.dtype
    f, _ = _features(p, p.X3.reshape(B * T, d_model))
    Y = np.empty((B, T, d_v), dtype=dt)
    O = workspace.buffer("linear_O", (B, T, w), dt) if p.normalize else Y   # unnormalised: O' = Y
    if p.method == "recurrent":
        _recurrent_forward(f.FQ, f.FK, f.V1, f.ell, O)
    elif p.method == "parallel":
        _parallel_forward(f.FQ, f.FK, f.V1, f.ell, p.decay is not None, O,
                          workspace.buffer("linear_A", (T, T), dt))
    else:
        _chunked_forward(f.FQ, f.FK, f.V1, f.ell, p.decay is not None, p.chunk, O,
                         workspace.buffer("linear_states", (B, _n_chunks(p), d_k, w), dt))
        _keep_chunk(p.chunk)                         # its states and o', for the backward
    if p.normalize:
        _normalise(O, Y)
    _check_finite("Y", Y, "the output")
    return Y if p.X.ndim == 3 else Y[0]


def backward(X, Wq, Wk, Wv, dY, decay=None, gamma=None, w_a=None, b_a=None, normalize=True,
             method="recurrent", chunk=CHUNK):
    """Gradients of linear attention given the upstream dY, shaped like forward's Y.

    The arguments are forward's. What each method's backward needs of the forward is
    recomputed, unless the last forward of this thread had these very inputs (compared
    element by element): then its projections (and, chunked with the same ``chunk``, its
    states) are reused. Returns ``LinearAttentionGrads(dX, dWq, dWk, dWv, dw_a, db_a)``,
    each like its input; dw_a and db_a are None unless decay="selective".
    """
    p = _check(X, Wq, Wk, Wv, decay, gamma, w_a, b_a, normalize, method, chunk)
    B, T, d_model = p.X3.shape
    d_k, d_v = p.Wq.shape[0], p.Wv.shape[0]
    w = d_v + p.normalize
    dt = p.X.dtype
    dY = v.as_float_array("dY", dY, p.X.ndim, dt)
    v.check_shape("dY", dY, p.X.shape[:-1] + (d_v,))
    p = _check_bytes(p, backward=True)
    dY3 = dY if dY.ndim == 3 else dY[None]
    X2 = p.X3.reshape(B * T, d_model)
    f, kept_chunk = _features(p, X2, reuse=True)
    O, dO, dV1 = (workspace.buffer(name, (B, T, w), dt)
                  for name in ("linear_O", "linear_dO", "linear_dV1"))
    dFQ, dFK = (workspace.buffer(name, (B, T, d_k), dt) for name in ("linear_dphiQ", "linear_dphiK"))
    decayed = p.decay is not None
    selective = p.decay == "selective"
    dell = np.empty((B, T) if selective else (1, 1))     # dL/dlog a_t, for the selective decay
    if p.method == "recurrent":
        _recurrent_backward(f.FQ, f.FK, f.V1, f.ell, dY3, p.normalize, dO, dFQ, dFK, dV1,
                            dell, selective, SEGMENT)
    elif p.method == "parallel":
        _parallel_backward(f.FQ, f.FK, f.V1, f.ell, decayed, dY3, p.normalize, O, dO, dFQ, dFK, dV1,
                           dell, selective, workspace.buffer("linear_A", (T, T), dt),
                           workspace.buffer("linear_dA", (T, T), dt))
        _keep_chunk(None)                            # it wrote O
    else:
        states = workspace.buffer("linear_states", (B, _n_chunks(p), d_k, w), dt)
        _chunked_backward(f.FQ, f.FK, f.V1, f.ell, decayed, p.chunk, dY3, p.normalize, O, dO,
                          dFQ, dFK, dV1, states, kept_chunk != p.chunk, dell, selective)
        _keep_chunk(p.chunk)
    dw_a = db_a = ds = None
    if selective:
        # log a_t = -softplus(s_t): dlog a / ds = -sigmoid(s_t) = -exp(-softplus(-s_t))
        ds = -np.exp(-np.logaddexp(0.0, -f.s)) * dell.ravel()            # float64 (B T,)
    _phi_grad_inplace(dFQ.reshape(-1), f.FQ.reshape(-1))
    _phi_grad_inplace(dFK.reshape(-1), f.FK.reshape(-1))
    dX = np.empty((B * T, d_model), dtype=dt)
    dWq, dWk, dWv1 = np.empty_like(p.Wq), np.empty_like(p.Wk), np.empty((w, d_model), dtype=dt)
    _projection_grads(X2, p.Wq, p.Wk, f.Wv1, dFQ.reshape(B * T, d_k), dFK.reshape(B * T, d_k),
                      dV1.reshape(B * T, w), dX, dWq, dWk, dWv1,
                      workspace.buffer("linear_dX_part", (min(_PART_ROWS, B * T), d_model), dt))
    if ds is not None:                               # s_t = x_t . w_a + b_a
        dX += ds.astype(dt)[:, None] * p.w_a[None, :]
        dw_a = np.empty(d_model)                     # sums over every step in float64, rounded
        _score_grads(X2, ds, dw_a)                   # once: float32 keeps its digits
        dw_a, db_a = dw_a.astype(dt), dt.type(ds.sum())
    grads = LinearAttentionGrads(dX.reshape(p.X.shape), dWq, dWk,
                                 np.ascontiguousarray(dWv1[:d_v]), dw_a, db_a)
    for name, g in zip(grads._fields, grads):
        if g is not None:
            _check_finite(name, np.asarray(g), "the gradient")
    return grads
