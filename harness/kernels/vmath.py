"""tanh and exp that LLVM vectorises, for the hot loops of the kernels.

Numba lowers ``np.tanh`` and ``np.exp`` on scalars to libm calls, which are 5 to
80 times slower than NumPy's SIMD loops on these machines. Here both are written
as straight-line arithmetic: a range reduction y = k ln2 + r, a Taylor
polynomial for expm1(r) on |r| <= ln2/2, and 2**k assembled from its exponent
bits in an int64 scratch buffer (a separate pass, so that both passes vectorise).
tanh is evaluated in float64, so float32 results are correctly rounded and float64
results are within 3 ulp of NumPy's; exp has a float32 path in float32 arithmetic
(twice the SIMD lanes) within 1 ulp, and so has tanh (``tanh32_inplace``, within 2 ulp,
for the LSTM's gates; ``tanh_fast_inplace`` picks it by dtype) (measured; see
tests/test_vmath.py).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_LN2_HI = 6.93147180369123816490e-01    # ln 2 split so that k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
# 1/n! for the Taylor polynomial of expm1 on |r| <= ln2/2: the n = 15 term is
# below 3e-19 relative, under half an ulp of float64.
_C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13, _C14 = (
    1.0 / math.factorial(n) for n in range(2, 15)
)
_TANH_CLAMP = 20.0      # tanh(20) rounds to 1.0 in float64
_EXP_FLOOR = -708.0     # exp(-708) ~ 3e-308, the last normal power of two we build


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def _expm1_reduced(r):
    """expm1(r) for |r| <= ln2/2, Horner form."""
    p = _C14
    p = p * r + _C13
    p = p * r + _C12
    p = p * r + _C11
    p = p * r + _C10
    p = p * r + _C9
    p = p * r + _C8
    p = p * r + _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    return r + r * r * p


@njit(cache=True, error_model="numpy", inline="always")
def _round_k(y):
    """k = round(y / ln 2), as a float64."""
    return np.floor(y * _INV_LN2 + 0.5)


@njit(cache=True, error_model="numpy", inline="always")
def _reduce(y, k):
    """r = y - k ln 2 in two steps (Cody-Waite), so that k * _LN2_HI is exact."""
    return (y - k * _LN2_HI) - k * _LN2_LO


@njit(cache=True, error_model="numpy", inline="always")
def _pow2_bits(k):
    """The float64 bit pattern of 2**k, for integer-valued k in [-1022, 1023]."""
    return (np.int64(k) + 1023) << 52


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def tanh_inplace(a, scratch):
    """a[:] = tanh(a[:]); a is 1-D contiguous float32/float64, scratch int64 of len >= a.size."""
    n = a.shape[0]
    scale = scratch[:n].view(np.float64)
    for i in range(n):    # pass 1: the exponent of 2**k, k = round(-2|x| / ln2)
        scratch[i] = _pow2_bits(_round_k(-2.0 * min(abs(np.float64(a[i])), _TANH_CLAMP)))
    for i in range(n):    # pass 2: tanh|x| = -expm1(-2|x|) / (2 + expm1(-2|x|))
        x = np.float64(a[i])
        y = -2.0 * min(abs(x), _TANH_CLAMP)
        p = _expm1_reduced(_reduce(y, _round_k(y)))
        s = scale[i]
        em1 = s * p + (s - 1.0)          # 2**k (1 + p) - 1 without losing p when k = 0
        a[i] = math.copysign(-em1 / (2.0 + em1), x)


# ------------------------------------------------------------------ row softmax parts
# float32 exp in float32 arithmetic (twice the SIMD lanes of float64): the same
# reduction with float32 constants, degree-7 Taylor (remainder < 6e-9 relative).
_F_LN2_HI = np.float32(0.693359375)      # few bits: k * _F_LN2_HI is exact for |k| <= 126
_F_LN2_LO = np.float32(-2.12194440e-4)
_F_INV_LN2 = np.float32(1.44269504)
_F_EXP_FLOOR = np.float32(-87.33)        # exp(-87.33) ~ 1.176e-38, float32's smallest normal
_F_HALF = np.float32(0.5)
_F_ONE = np.float32(1.0)
_F_C2, _F_C3, _F_C4, _F_C5, _F_C6, _F_C7 = (np.float32(1.0 / math.factorial(n)) for n in range(2, 8))


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def _expm1f_reduced(r):
    p = _F_C7
    p = p * r + _F_C6
    p = p * r + _F_C5
    p = p * r + _F_C4
    p = p * r + _F_C3
    p = p * r + _F_C2
    return r + r * r * p


_F_TANH_CLAMP = np.float32(10.0)         # tanh(10) = 1 - 4e-9 rounds to 1.0 in float32
_F_TWO = np.float32(2.0)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def tanh32_inplace(a, scratch):
    """a[:] = tanh(a[:]) for 1-D contiguous float32 a, in float32 arithmetic (twice the SIMD
    lanes of ``tanh_inplace``, whose float64 evaluation rounds correctly): within 3 ulp of the
    correctly rounded value (tests/test_vmath.py). scratch is int64 with at least a.size // 2 + 1
    elements (the bits of 2**k as int32)."""
    n = a.shape[0]
    bits = scratch.view(np.int32)
    pw = bits[:n].view(np.float32)
    for i in range(n):    # pass 1: the exponent of 2**k, k = round(-2|x| / ln2), in [-29, 0]
        y = -_F_TWO * min(abs(a[i]), _F_TANH_CLAMP)
        k = np.floor(y * _F_INV_LN2 + _F_HALF)
        bits[i] = (np.int32(k) + 127) << 23
    for i in range(n):    # pass 2: tanh|x| = -expm1(-2|x|) / (2 + expm1(-2|x|))
        x = a[i]
        y = -_F_TWO * min(abs(x), _F_TANH_CLAMP)
        k = np.floor(y * _F_INV_LN2 + _F_HALF)
        p = _expm1f_reduced((y - k * _F_LN2_HI) - k * _F_LN2_LO)
        s = pw[i]
        em1 = s * p + (s - _F_ONE)       # 2**k (1 + p) - 1; exact s - 1 for k in [-29, 0]
        a[i] = math.copysign(-em1 / (_F_TWO + em1), x)


@njit(cache=True, error_model="numpy")
def tanh_fast_inplace(a, scratch):
    """a[:] = tanh(a[:]) in a's own precision: ``tanh32_inplace`` for float32 (within 2 ulp),
    ``tanh_inplace`` for float64 (within 3 ulp); scratch int64 of len >= a.size."""
    if a.itemsize == 4:                    # resolved at compile time: one path per dtype
        tanh32_inplace(a, scratch)
    else:
        tanh_inplace(a, scratch)


@njit(cache=True, error_model="numpy")
def row_max(row, n):
    """max(row[:n]) with eight independent accumulators, so that the loop vectorises."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = row[0]
    j = 0
    while j + 8 <= n:
        a0 = max(a0, row[j])
        a1 = max(a1, row[j + 1])
        a2 = max(a2, row[j + 2])
        a3 = max(a3, row[j + 3])
        a4 = max(a4, row[j + 4])
        a5 = max(a5, row[j + 5])
        a6 = max(a6, row[j + 6])
        a7 = max(a7, row[j + 7])
        j += 8
    m = max(max(max(a0, a1), max(a2, a3)), max(max(a4, a5), max(a6, a7)))
    while j < n:
        m = max(m, row[j])
        j += 1
    return m


@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def row_sum(row, n):
    """sum(row[:n]) in float64; reassociated (as NumPy's pairwise sum is) so it vectorises."""
    s = 0.0
    for j in range(n):
        s += np.float64(row[j])
    return s


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def exp_shifted_inplace(row, n, m, scale, scratch):
    """row[:n] = exp((row[:n] - m) * scale) for m >= max(row[:n]), scale > 0.

    scratch is int64 with at least n elements (the bits of 2**k; a float32 row uses
    it as int32).
    """
    if row.itemsize == 4:                    # resolved at compile time: one path per dtype
        mf, sf = np.float32(m), np.float32(scale)
        bits = scratch.view(np.int32)
        pw = bits[:n].view(np.float32)
        for j in range(n):
            y = max((row[j] - mf) * sf, _F_EXP_FLOOR)
            k = np.floor(y * _F_INV_LN2 + _F_HALF)
            bits[j] = (np.int32(k) + 127) << 23
        for j in range(n):
            x = (row[j] - mf) * sf
            y = max(x, _F_EXP_FLOOR)
            k = np.floor(y * _F_INV_LN2 + _F_HALF)
            r = (y - k * _F_LN2_HI) - k * _F_LN2_LO
            e = pw[j] * (_F_ONE + _expm1f_reduced(r))
            row[j] = e if x >= _F_EXP_FLOOR else np.float32(0.0)
    else:
        pw = scratch[:n].view(np.float64)
        for j in range(n):
            scratch[j] = _pow2_bits(_round_k(max((row[j] - m) * scale, _EXP_FLOOR)))
        for j in range(n):
            x = (row[j] - m) * scale
            y = max(x, _EXP_FLOOR)
            e = pw[j] * (1.0 + _expm1_reduced(_reduce(y, _round_k(y))))
            row[j] = e if x >= _EXP_FLOOR else 0.0


@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def row_dot(a, b, n):
    """sum(a[:n] * b[:n]) in float64, reassociated so that it vectorises."""
    s = 0.0
    for j in range(n):
        s += np.float64(a[j]) * np.float64(b[j])
    return s
