"""The Linear Recurrent Unit's recurrence, forward and backward, compiled with Numba.

    h_t = lam * h_{t-1} + B x_t,      lam (d_h,) diagonal, real or complex

(Orvieto et al., 2023, "Resurrecting recurrent neural networks for long
sequences"). The input products B x_t for every t are one matrix product before
the scan, as in the RNN. What is left is a diagonal linear recurrence, a prefix
scan under the associative operator

    (a1, b1) then (a2, b2)  =  (a1 a2, a2 b1 + b2),

which is why it need not run one step after another. Three methods give the
same H:

* ``sequential``: one loop over t, vectorised over d_h (T combines, depth T);
* ``blelloch``: the work-efficient up-sweep / down-sweep (Brent-Kung) scan, each
  level's combines in parallel threads: about 2T combines, depth 2 log2 T. A
  segment of length s always combines with lam^s, so the powers lam^(2^l) are
  computed once and no (T, d_h) array of coefficients is kept;
* ``chunked``: P chunks scan locally in parallel threads, the P chunk-end states
  are scanned, and a fix-up pass adds lam^k times the incoming state: work about
  2T, depth about 2T/P + P.

The backward is the same scan run from t = T down to 1 with conj(lam), so it
parallelises the same way.

Complex gradients follow PyTorch's convention: for a real loss L and a complex
z = x + iy, the gradient is dL/dx + i dL/dy (twice the conjugate Wirtinger
derivative dL/dz*, what torch's ``.grad`` holds), and the upstream dH is read
the same way. A real input gets the real part of its complex gradient.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from harness.infra import validate as v
from harness.infra import workspace
from harness.kernels.blas import matmul
from harness.kernels.steps import of_sequence

METHODS = ("sequential", "blelloch", "chunked")
REAL = (np.dtype(np.float32), np.dtype(np.float64))
COMPLEX = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


# --------------------------------------------------------------------------- forward

@njit(cache=True, error_model="numpy")
def _scan_sequential(H, lam, h0, rev):
    # H (Bn, T, d_h): u_t on entry, h_t on exit; lam (d_h,); h0 (Bn, d_h).
    # h_t = lam * h_{t-1} + u_t in order of t, or from t = T-1 down to 0 when rev
    Bn, T, d_h = H.shape
    step = -1 if rev else 1
    for b in range(Bn):
        r = T - 1 if rev else 0
        for i in range(d_h):
            H[b, r, i] += lam[i] * h0[b, i]
        for _ in range(1, T):
            p = r
            r += step
            for i in range(d_h):
                H[b, r, i] += lam[i] * H[b, p, i]     # the one step that must wait


@njit(cache=True, error_model="numpy")
def _scan_complex(Hv, lr, li, h0v):
    # _scan_sequential forward on a complex H in real arithmetic: Hv (Bn, T, 2 d_h) its real
    # view ([Re, Im] pairs), lam = lr + i li (d_h,), h0v (Bn, 2 d_h) h0's real view. The
    # same operations in the same order as Numba's complex product and sum (the same bits),
    # but LLVM vectorises these over d_h, and not complex arithmetic: d_h = 64, T = 1000,
    # complex64, 37 us a scan against 83
    Bn, T, d2 = Hv.shape
    d_h = d2 // 2
    sr = np.empty(d_h, dtype=Hv.dtype)            # the state h_(t-1), Re and Im
    si = np.empty(d_h, dtype=Hv.dtype)
    for b in range(Bn):
        for i in range(d_h):
            sr[i] = h0v[b, 2 * i]
            si[i] = h0v[b, 2 * i + 1]
        for t in range(T):
            row = Hv[b, t]
            for i in range(d_h):
                a, c = sr[i], si[i]
                hr = (lr[i] * a - li[i] * c) + row[2 * i]
                hi = (lr[i] * c + li[i] * a) + row[2 * i + 1]
                row[2 * i] = hr
                row[2 * i + 1] = hi
                sr[i] = hr
                si[i] = hi


BACK_BLOCK = 64     # steps the reverse scan first reads in ascending order (see below)


@njit(cache=True, error_model="numpy")
def _scan_complex_back(Gv, Dv, Hv, lr, li, h0v, dr, di):
    # The backward's reverse scan G_t = dH_t + conj(lam) G_(t+1), from t = T-1 down, on real
    # views as _scan_complex (lr, li: conj(lam)'s parts; dH read from Dv, G written to Gv),
    # with dlam = sum_(b,t) conj(h_(t-1)) G_t (h_(-1) = h0) folded in as each G_t is made,
    # into dr + i di (d_h,): one pass over dH, G and H where a copy, the scan and _dlam made
    # three. Returns a sum of no meaning, which keeps the reads of each block's touch.
    # Three measured choices: Gv and Dv are two arrays (one array fails LLVM's runtime alias
    # checks, and the scalar loop runs: 2.4x slower at B = 1); the state and the sums live in
    # arrays of this function's own, which LLVM knows alias nothing (dr, di summed in place
    # vectorised nothing: 4x slower at B = 32); and a block of BACK_BLOCK steps is first read
    # in ascending order, one value a cache line, then scanned down: read only downwards,
    # rows beyond the caches came 3.3x slower (B = 32, T = 1000, d_h = 64, complex64: 185 us
    # a sequence against 56)
    Bn, T, d2 = Gv.shape
    d_h = d2 // 2
    sr = np.empty(d_h, dtype=Gv.dtype)            # G_(t+1): zero past the last step
    si = np.empty(d_h, dtype=Gv.dtype)
    ar = np.zeros(d_h, dtype=Gv.dtype)            # the sums
    ai = np.zeros(d_h, dtype=Gv.dtype)
    line = max(1, 64 // Gv.itemsize)
    touch = Gv.dtype.type(0)
    for b in range(Bn):
        for i in range(d_h):
            sr[i] = 0
            si[i] = 0
        hi_t = T
        while hi_t > 0:
            lo_t = max(0, hi_t - BACK_BLOCK)
            for t in range(lo_t, hi_t):
                for j in range(0, d2, line):
                    touch += Gv[b, t, j] + Dv[b, t, j] + Hv[b, max(t - 1, 0), j]
            for t in range(hi_t - 1, lo_t - 1, -1):
                row = Gv[b, t]
                up = Dv[b, t]
                prev = Hv[b, t - 1] if t > 0 else h0v[b]
                for i in range(d_h):
                    a, c = sr[i], si[i]
                    gr = (lr[i] * a - li[i] * c) + up[2 * i]
                    gi = (lr[i] * c + li[i] * a) + up[2 * i + 1]
                    row[2 * i] = gr
                    row[2 * i + 1] = gi
                    sr[i] = gr
                    si[i] = gi
                    hr, hi = prev[2 * i], prev[2 * i + 1]
                    ar[i] += hr * gr + hi * gi
                    ai[i] += hr * gi - hi * gr
            hi_t = lo_t
    dr[:] = ar
    di[:] = ai
    return touch


@njit(cache=True, error_model="numpy", parallel=True)
def _scan_blelloch(H, lam, h0, rev, pw):
    # H (Bn, T, d_h) in place, as _scan_sequential; pw (levels, d_h): lam^(2^l), one row
    # per up-sweep level (strides s = 2^l with 2s <= T). Row k (in scan order) holds,
    # after the up-sweep, the segment that ends at k and is as long as the largest power
    # of two dividing k + 1; the down-sweep turns every segment into a whole prefix.
    Bn, T, d_h = H.shape
    for b in range(Bn):
        r0 = T - 1 if rev else 0
        for i in range(d_h):
            H[b, r0, i] += lam[i] * h0[b, i]
        s, l = 1, 0
        while 2 * s <= T:                        # up-sweep: (k-2s, k-s] then (k-s, k]
            for j in prange(T // (2 * s)):
                k = 2 * s * (j + 1) - 1
                rk, rs = (T - 1 - k, T - 1 - k + s) if rev else (k, k - s)
                for i in range(d_h):
                    H[b, rk, i] += pw[l, i] * H[b, rs, i]
            s *= 2
            l += 1
        s //= 2
        l -= 1
        while s >= 1:                            # down-sweep: prefix up to k-s, then (k-s, k]
            for j in prange((T - s) // (2 * s)):
                k = (2 * j + 3) * s - 1
                rk, rs = (T - 1 - k, T - 1 - k + s) if rev else (k, k - s)
                for i in range(d_h):
                    H[b, rk, i] += pw[l, i] * H[b, rs, i]
            s //= 2
            l -= 1


@njit(cache=True, error_model="numpy")
def _ipow(z, k):
    # z^k for an integer k >= 0, by squaring: log2 k multiplications (the rounding still
    # grows like k eps, so the chunked scan passes a 64-bit z)
    out = z * 0 + 1
    while k > 0:
        if k & 1:
            out *= z
        z *= z
        k >>= 1
    return out


@njit(cache=True, error_model="numpy", parallel=True)
def _scan_chunked(H, lam, lam64, h0, rev, P, carry):
    # H (Bn, T, d_h) in place; lam (d_h,) in H's dtype, lam64 the same in 64 bits (for the
    # powers lam^k); P chunks, chunk p = scan steps [p T / P, (p+1) T / P);
    # carry (P, d_h) scratch: the true state at the end of each chunk
    Bn, T, d_h = H.shape
    lo0 = T // P
    for b in range(Bn):
        for p in prange(P):                      # 1. each chunk from zero (the first from h0)
            lo, hi = p * T // P, (p + 1) * T // P
            r = T - 1 - lo if rev else lo
            if p == 0:
                for i in range(d_h):
                    H[b, r, i] += lam[i] * h0[b, i]
            for t in range(lo + 1, hi):
                q = r
                r = T - 1 - t if rev else t
                for i in range(d_h):
                    H[b, r, i] += lam[i] * H[b, q, i]
        for i in range(d_h):                     # 2. the P chunk ends, one after another
            carry[0, i] = H[b, T - lo0 if rev else lo0 - 1, i]
        for p in range(1, P):
            lo, hi = p * T // P, (p + 1) * T // P
            r = T - hi if rev else hi - 1
            for i in range(d_h):
                carry[p, i] = _ipow(lam64[i], hi - lo) * carry[p - 1, i] + H[b, r, i]
        for q in prange(P):                      # 3. fix-up: + lam^(t - lo + 1) carry[p - 1]
            a = lo0 + q * (T - lo0) // P
            e = lo0 + (q + 1) * (T - lo0) // P
            w = np.empty(d_h, dtype=H.dtype)
            t = a
            while t < e:
                p = t * P // T                   # the chunk that holds step t
                while (p + 1) * T // P <= t:
                    p += 1
                while p * T // P > t:
                    p -= 1
                lo = p * T // P
                stop = min(e, (p + 1) * T // P)
                for i in range(d_h):
                    w[i] = _ipow(lam64[i], t - lo + 1) * carry[p - 1, i]
                for tt in range(t, stop):
                    r = T - 1 - tt if rev else tt
                    for i in range(d_h):
                        H[b, r, i] += w[i]
                        w[i] *= lam[i]
                t = stop


# -------------------------------------------------------------------------- backward

@njit(cache=True, error_model="numpy")
def _dlam(H, G, h0, out):
    # H, G (Bn, T, d_h), h0 (Bn, d_h) -> out (d_h,) = sum_{b,t} conj(h_{t-1}) G_t.
    # Reverses: h_t = lam * h_{t-1} + u_t  =>  dlam += conj(h_{t-1}) dl/dh_t
    Bn, T, d_h = H.shape
    for i in range(d_h):
        out[i] = 0
    for b in range(Bn):
        for i in range(d_h):
            out[i] += np.conj(h0[b, i]) * G[b, 0, i]
        for t in range(1, T):
            for i in range(d_h):
                out[i] += np.conj(H[b, t - 1, i]) * G[b, t, i]


# ---------------------------------------------------------------------------- public

def _scan(H3, lam, h03, method, chunks, rev):
    """Run ``method`` on H3 (Bn, T, d_h) in place; lam and h03 already in H3's dtype.

    The parallel methods combine with powers lam^k, whose rounding grows like k eps
    when they are built from lam: they are built in 64 bits, so that a 32-bit scan
    rounds each power once (Blelloch at T = 2^16, d_h = 64 on the ring [0.9, 0.999],
    complex64: 1.0e-5 relative to the sequential scan with 32-bit powers, 1.1e-6 with these).
    """
    T, d_h = H3.shape[1:]
    wide = lam.astype(np.complex128 if lam.dtype.kind == "c" else np.float64)
    if method == "sequential" and H3.dtype.kind == "c" and not rev:
        real = H3.real.dtype
        _scan_complex(H3.view(real), lam.real.copy(), lam.imag.copy(), h03.view(real))
    elif method == "sequential":
        _scan_sequential(H3, lam, h03, rev)
    elif method == "blelloch":
        pw = np.empty((max((T // 2).bit_length(), 1), d_h), dtype=wide.dtype)
        pw[0] = wide                                   # lam^(2^l), l = 0 .. levels - 1
        for l in range(1, len(pw)):
            np.multiply(pw[l - 1], pw[l - 1], out=pw[l])
        _scan_blelloch(H3, lam, h03, rev, pw.astype(H3.dtype))
    else:
        P = min(numba.get_num_threads() if chunks is None else chunks, T)
        _scan_chunked(H3, lam, wide, h03, rev, P, np.empty((P, d_h), dtype=H3.dtype))


def _as_array(name, x, ndims, precision=None, view=False):
    """``x`` as a C-contiguous float32/float64/complex64/complex128 array of an allowed ndim,
    of ``precision`` (float32 or float64: complex64 goes with float32) when given; with
    ``view``, as it came (its copy, if strided, left to ``v.contiguous`` once counted)."""
    if isinstance(x, np.ma.MaskedArray) or not isinstance(x, (np.ndarray, list, tuple)) \
            and not np.isscalar(x):
        return v.as_float_array(name, x, ndims)        # the shared refusal, named
    x = np.asarray(x)
    real = x.real.dtype if x.dtype in COMPLEX.values() else x.dtype
    if real not in REAL:
        raise TypeError(f"{name} must have dtype float32, float64, complex64 or complex128, got "
                        f"{x.dtype}. Please change your input dtype with {name}.astype(np.float64).")
    if precision is not None and real != precision:
        want = COMPLEX[precision] if x.dtype in COMPLEX.values() else precision
        raise TypeError(f"{name} has dtype {x.dtype} but X is {precision}; mixed precisions are "
                        f"not accepted. Please pass {name}.astype(np.{want}).")
    if x.dtype in REAL:
        x = v.as_float_view(name, x, ndims, x.dtype)
    else:                                             # ndim, empty axes, finite: on the distinct values
        u = v.distinct(x)
        # finite on the real view of a contiguous u, both parts in one contiguous pass (the
        # common case: no temporaries of u's shape; 2x faster than the strided parts), then
        # the rest of the checks on u's real part, a view; else on |Re| + |Im|, which counts
        # the values that are not finite in the error
        ok = np.isfinite(u.view(real) if u.flags.c_contiguous else u).all()
        v.as_float_view(name, u.real if ok else np.abs(u.real) + np.abs(u.imag), ndims,
                        finite_known=ok)
    return x if view else v.contiguous(name, x)


class LRUGrads(NamedTuple):
    dX: np.ndarray      # like X
    dlam: np.ndarray    # like lam: (d_h,)
    dB: np.ndarray      # like B: (d_h, d_in)
    dh0: np.ndarray     # like h0: (d_h,) unbatched or shared, (B, d_h) batched


def _check(X, lam, B, h0, method, chunks):
    v.check_choice("method", method, METHODS)
    if chunks is not None:
        v.check_int("chunks", chunks)
    X = _as_array("X", X, (2, 3), view=True)      # copied (if strided) once its bytes are counted
    prec = X.real.dtype
    batched = X.ndim == 3
    Bn = X.shape[0] if batched else 1
    T, d_in = X.shape[-2:]
    lam = _as_array("lam", lam, 1, prec)
    d_h = lam.shape[0]
    B = _as_array("B", B, 2, prec)
    v.check_shape("B", B, (d_h, d_in))
    if h0 is not None:
        h0 = _as_array("h0", h0, (1, 2) if batched else 1, prec)
        v.check_shape("h0", h0, (d_h,) if h0.ndim == 1 else (Bn, d_h))
    cplx = any(a is not None and a.dtype.kind == "c" for a in (X, lam, B, h0))
    dtype = COMPLEX[prec] if cplx else prec
    v.check_memory(3 * Bn * T * (d_h + d_in) * dtype.itemsize, "the LRU's state and input buffers",
                   inputs=(("X", X),))
    X = v.contiguous("X", X)
    h03 = np.zeros((Bn, d_h), dtype=dtype)
    if h0 is not None:
        h03[:] = h0                                   # a copy: h0 itself is never written
    return X, lam, B, h0, h03, dtype, batched


def _input_products(X, B, H):
    """H = X B^T, (..., T, d_h); X real with H complex as one real GEMM into H's real view."""
    d_h = B.shape[0]
    X2 = X.reshape(-1, X.shape[-1])
    H2 = H.reshape(-1, d_h)
    if H.dtype.kind != "c":
        matmul(X2, B.T, H2)
    elif X.dtype.kind == "c":
        matmul(X2, B.astype(H.dtype, copy=False).T, H2)
    else:
        # [Re u, Im u] interleaved is u's memory: X @ [Re b_1; Im b_1; Re b_2; ...]^T
        matmul(X2, _interleaved(B, X.dtype).T, H2.view(X.dtype))


def _interleaved(B, real):
    """(2 d_h, d_in) real: rows Re B_1, Im B_1, Re B_2, ... (zeros for a real B)."""
    d_h, d_in = B.shape
    if B.dtype.kind == "c" and B.flags.c_contiguous:
        # B's memory is (d_h, d_in, [Re, Im]): one transposing copy, not zeros and two strided ones
        return np.ascontiguousarray(B.view(real).reshape(d_h, d_in, 2).transpose(0, 2, 1)
                                    ).reshape(2 * d_h, d_in)
    B2 = np.zeros((2 * d_h, d_in), dtype=real)
    B2[0::2] = B.real
    if B.dtype.kind == "c":
        B2[1::2] = B.imag
    return B2


def _sample_steps(T):
    """Steps 0, 1 and up to 8 spread over 0..T-1: where the backward checks H."""
    return np.unique(np.r_[np.linspace(0, T - 1, min(T, 8)).round().astype(np.int64), min(1, T - 1)])


def _check_states(X, H, lam, B, h03):
    """ValueError naming H unless, at a few sampled steps of every sequence, h_t = lam h_{t-1}
    + B x_t holds within rounding: states from another X, lam, B or h0 do not pass.

    O(Bn k d_h d_in) for k <= 9 steps. Tolerance: 1024 eps times the sequence's largest
    |h_t| + |lam| |h_{t-1}| + |B| |x_t| per unit over those steps (every method's states meet
    the recurrence within 1.1 eps of that, measured up to T = 65536 on |lam| in [0.3, 1],
    both precisions); lam / 2, say, misses it by a quarter of the state.
    """
    T = H.shape[-2]
    H3 = H.reshape(-1, T, H.shape[-1])                             # (Bn, T, d_h)
    X3 = X.reshape(-1, T, X.shape[-1])
    ts = _sample_steps(T)
    wide = np.complex128 if H.dtype.kind == "c" else np.float64
    h = H3[:, ts].astype(wide)                                     # (Bn, k, d_h)
    prev = np.where((ts > 0)[None, :, None], H3[:, np.maximum(ts - 1, 0)].astype(wide),
                    h03[:, None, :].astype(wide))
    x = X3[:, ts].astype(np.complex128 if X.dtype.kind == "c" else np.float64)
    lamw, Bw = lam.astype(np.complex128 if lam.dtype.kind == "c" else np.float64), \
        B.astype(np.complex128 if B.dtype.kind == "c" else np.float64)
    gap = np.abs(h - lamw * prev - x @ Bw.T)                        # (Bn, k, d_h)
    size = np.abs(h) + np.abs(lamw) * np.abs(prev) + np.abs(x) @ np.abs(Bw).T
    tol = 1024 * np.finfo(H.real.dtype).eps * size.max(axis=1, keepdims=True)
    bad = ~(gap <= tol)
    if bad.any():
        b, n, i = (int(a) for a in np.argwhere(bad)[0])
        where = of_sequence(b, X.ndim == 3)
        raise ValueError(
            f"H does not follow from X, lam, B and h0: at step t={ts[n] + 1}{where}, unit {i}, "
            f"h_t - lam h_(t-1) - B x_t is {gap[b, n, i]:.3g} where rounding allows "
            f"{tol[b, 0, i]:.3g}. Pass backward the lam, B and h0 that forward used (h0=None "
            f"means zeros), and the H it returned for this X.")


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _max_row_abs_sum(A):
    # A (d_h, n) real, C-contiguous: max_i sum_k |A_ik| in float64, without np.abs(A)'s
    # (d_h, n) temporary (4 MiB at d = 512, freshly page-faulted on every call); reassoc lets
    # the sum vectorise: a bound, whose last bits do not matter
    best = 0.0
    for i in range(A.shape[0]):
        s = 0.0
        for k in range(A.shape[1]):
            s += abs(A[i, k])
        best = max(best, s)
    return best


def _log_growth_bound(X, lam, B, h03, T):
    """ln of an upper bound on every |h_t| (and on what the parallel scans combine):
    max(1, max|lam|)^T (max|h0| + T max|x| max_i sum_k (|Re B_ik| + |Im B_ik|)), as
    |z| <= |Re z| + |Im z| (on B's real view: no complex abs). O(size of X + d_h d_in)."""
    r = float(np.abs(lam).max())
    x = float(np.abs(X).max()) if X.dtype.kind == "c" else max(float(X.max()), -float(X.min()))
    Bv = B.view(B.real.dtype) if B.dtype.kind == "c" else B      # (d_h, 2 d_in): [Re, Im] pairs
    with np.errstate(over="ignore"):
        size = float(np.abs(h03).max()) + T * x * _max_row_abs_sum(Bv)
    if size == 0.0:
        return -math.inf
    return T * math.log(max(1.0, r)) + math.log(size)       # inf where size overflows


def _check_overflow(G, lam, what, inputs, reverse=False):
    """FloatingPointError naming lam and the first step (of the scan's direction) where the
    scanned G (Bn, T, d_h) is not finite; ``inputs`` names what to scale down otherwise."""
    bad = ~np.isfinite(G).all(axis=2)                              # (Bn, T)
    if not bad.any():
        return
    Bn, T = bad.shape
    steps = np.flatnonzero(bad.any(axis=0))
    t = int(steps[-1] if reverse else steps[0])
    seq = int(np.flatnonzero(bad[:, t])[0])
    where = of_sequence(seq, Bn > 1)
    order = " (the reverse scan runs from t=T down)" if reverse else ""
    r = float(np.abs(lam).max())
    why = (f"max |lam| = {r:.6g} > 1, and the state grows like |lam|^t: use |lam| <= 1 "
           f"(lru.ring_init keeps it there), a shorter sequence, or smaller inputs"
           if r > 1.0 else f"the inputs are too large: scale {inputs} down")
    raise FloatingPointError(
        f"the LRU overflowed: {what} is not finite from step t={t + 1} of {T}{where}{order}, "
        f"although every input is finite ({G.dtype} holds at most "
        f"{np.finfo(G.dtype).max:.3g}); {why}.")


def forward(X, lam, B, h0=None, method="sequential", chunks=None):
    """Run h_t = lam * h_{t-1} + B x_t over every position and return h_1..h_T.

    X is (T, d_in) or (B, T, d_in); lam (d_h,); B (d_h, d_in); h0 (d_h,) or
    (B, d_h), zeros when not given. Each may be real or complex, all of one
    precision (float32 with complex64, float64 with complex128). Returns H,
    (T, d_h) or (B, T, d_h), complex when any input is. ``method``: "sequential",
    "blelloch" or "chunked" (``chunks`` chunks, default one per Numba thread);
    every method gives the same H up to rounding. Where the states could overflow
    (|lam| > 1 over a long sequence, or huge inputs), H is checked: a FloatingPointError
    names lam and the first step that is not finite.
    """
    X, lam, B, h0, h03, dtype, batched = _check(X, lam, B, h0, method, chunks)
    H = np.empty(X.shape[:-1] + (lam.shape[0],), dtype=dtype)
    _input_products(X, B, H)                          # u_t = B x_t: the half that parallelises
    # a fresh lam (d_h values): a read-only one would compile the kernels again
    H3 = H if batched else H[None]
    _scan(H3, lam.astype(dtype), h03, method, chunks, False)
    if not _log_growth_bound(X, lam, B, h03, H3.shape[1]) < math.log(np.finfo(dtype).max / 16):
        _check_overflow(H3, lam, "h_t", "X, B or h0")        # only where it could overflow
    return H


def backward(X, H, lam, B, dH, h0=None, method="sequential", chunks=None):
    """Backpropagation through the recurrence from an upstream gradient dH (shaped like H).

    H must be what ``forward`` returned for these inputs: checked, cheaply, at a few
    sampled steps of every sequence (h_t = lam h_{t-1} + B x_t within rounding); a
    ValueError names the first that does not follow. The gradient at every
    state, G_t = dH_t + conj(lam) G_{t+1}, is a reverse scan (``method`` as in
    ``forward``); then dX = G conj(B), dB = G^T conj(X), dlam = sum conj(h_{t-1}) G_t
    and dh0 = conj(lam) G_1, in PyTorch's convention for complex gradients (see the
    module's docstring). Returns an ``LRUGrads``, each gradient shaped and typed
    like its input.
    """
    shared_h0 = h0 is not None and np.ndim(h0) == 1 and np.ndim(X) == 3
    X, lam, B, h0, h03, dtype, batched = _check(X, lam, B, h0, method, chunks)
    d_h = lam.shape[0]
    H = _as_array("H", H, X.ndim, X.real.dtype)
    v.check_shape("H", H, X.shape[:-1] + (d_h,))
    if H.dtype != dtype:
        raise TypeError(f"H has dtype {H.dtype} but forward returns {dtype} for these inputs; "
                        f"please pass the H that forward returned.")
    dH = _as_array("dH", dH, X.ndim, X.real.dtype)
    v.check_shape("dH", dH, H.shape)
    if dH.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(f"dH is {dH.dtype} but H is real ({dtype}); please pass dH.real.")
    _check_states(X, H, lam, B, h03)
    G = workspace.buffer("lru_G", H.shape, dtype)    # dl/dh_t, shaped like H (internal)
    lamc = lam.astype(dtype)                          # fresh: never read-only (see forward)
    H3, G3 = (H, G) if batched else (H[None], G[None])
    dlam = np.empty(d_h, dtype=dtype)
    if method == "sequential" and dtype.kind == "c":  # dH read, the scan and dlam: one pass
        real = X.real.dtype
        D = dH if dH.dtype == dtype else dH.astype(dtype)
        dr, di = np.empty(d_h, dtype=real), np.empty(d_h, dtype=real)
        _scan_complex_back(G3.view(real), D.reshape(G3.shape).view(real), H3.view(real),
                           lamc.real.copy(), -lamc.imag, h03.view(real), dr, di)
        dlam.real, dlam.imag = dr, di
    else:
        G[...] = dH
        _scan(G3, np.conj(lamc), np.zeros_like(h03), method, chunks, True)
        _dlam(H3, G3, h03, dlam)
    dh0 = np.conj(lamc) * G3[:, 0]                     # (Bn, d_h)
    # the parameter gradients are sums over steps: GEMMs after the scan
    G2 = G.reshape(-1, d_h)
    X2 = X.reshape(-1, X.shape[-1])
    if dtype.kind != "c":
        dX, dB = matmul(G2, B), matmul(G2.T, X2)
    elif X.dtype.kind == "c":
        dX = matmul(G2, np.conj(B.astype(dtype, copy=False)))
        dB = matmul(G2.T, np.conj(X2))
    else:                                              # real X, complex G: one real GEMM each
        R = G2.view(X.dtype)                           # (BT, 2 d_h): Re g_1, Im g_1, ...
        dX = matmul(R, _interleaved(B, X.dtype))       # Re(G conj(B))
        dB2 = matmul(R.T, X2)                          # (2 d_h, d_in): Re, Im rows of G^T X
        dB = dB2[0::2] + 1j * dB2[1::2] if B.dtype.kind == "c" else dB2[0::2].copy()
    if not (np.isfinite(dlam).all() and np.isfinite(dB).all()):   # each sums every G_t
        _check_overflow(G3, lam, "dl/dh_t", "dH", reverse=True)
    if shared_h0:
        dh0 = dh0.sum(axis=0)
    elif not batched:
        dh0 = dh0[0]
    return LRUGrads(dX.reshape(X.shape), _like(dlam, lam), _like(dB, B), _like(dh0, h0))


def _like(g, a):
    """The gradient of input ``a``: its real part when ``a`` is real and ``g`` complex."""
    if a is not None and a.dtype.kind != "c" and g.dtype.kind == "c":
        return np.ascontiguousarray(g.real)
    return g


def ring_init(d_h, r_min, r_max, max_phase, seed, d_in=None, dtype="complex128"):
    """The LRU initialisation of Orvieto et al. (2023): (lam (d_h,), B (d_h, d_in)), complex.

    |lam| is uniform on the ring r_min <= |lam| <= r_max (uniform in area, as in the
    paper: |lam|^2 uniform in [r_min^2, r_max^2]), its phase uniform in [0, max_phase].
    B has entries (N(0, 1) + i N(0, 1)) / sqrt(2 d_in), each row scaled by
    gamma = sqrt(1 - |lam|^2), the normalisation that keeps E|h_t|^2 the same for
    every |lam| under white-noise input. ``d_in`` defaults to d_h.
    """
    d_h = v.check_int("d_h", d_h)
    d_in = d_h if d_in is None else v.check_int("d_in", d_in)
    r_min = v.check_real("r_min", r_min)
    r_max = v.check_real("r_max", r_max)
    if not r_min <= r_max <= 1.0:
        raise ValueError(f"r_min and r_max must satisfy 0 <= r_min <= r_max <= 1, "
                         f"got r_min={r_min!r}, r_max={r_max!r}.")
    max_phase = v.check_real("max_phase", max_phase)
    v.check_seed("seed", seed)
    dtype = v.check_choice("dtype", np.dtype(dtype).name, ("complex64", "complex128"))
    rng = np.random.default_rng(seed)
    u1, u2 = rng.random(d_h), rng.random(d_h)
    r = np.sqrt(u1 * (r_max ** 2 - r_min ** 2) + r_min ** 2)      # (d_h,): uniform in area
    lam = r * np.exp(1j * max_phase * u2)
    B = (rng.standard_normal((d_h, d_in)) + 1j * rng.standard_normal((d_h, d_in))) / np.sqrt(2 * d_in)
    B *= np.sqrt(1.0 - r ** 2)[:, None]                            # gamma, folded in
    return lam.astype(dtype), B.astype(dtype)
