"""tanh and exp that LLVM vectorises, for the hot loops of the kernels.

Numba lowers ``np.tanh`` and ``np.exp`` on scalars to libm calls, which are 5 to
80 times slower than NumPy's SIMD loops on these machines. Here both are written
as straight-line arithmetic: a range reduction y = k ln2 + r, a Taylor
polynomial for expm1(r) on |r| <= ln2/2, and 2**k assembled from its exponent
bits in an int64 scratch buffer (a separate pass, so that both passes vectorise).
Everything is evaluated in float64, so float32 results are correctly rounded and
float64 results are within 3 ulp of NumPy's (measured; see tests/test_vmath.py).
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


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def tanh_inplace(a, scratch):
    """a[:] = tanh(a[:]); a is 1-D contiguous float32/float64, scratch int64 of len >= a.size."""
    n = a.shape[0]
    scale = scratch[:n].view(np.float64)
    for i in range(n):    # pass 1: the exponent of 2**k, k = round(-2|x| / ln2)
        y = -2.0 * min(abs(np.float64(a[i])), _TANH_CLAMP)
        k = np.floor(y * _INV_LN2 + 0.5)
        scratch[i] = (np.int64(k) + 1023) << 52
    for i in range(n):    # pass 2: tanh|x| = -expm1(-2|x|) / (2 + expm1(-2|x|))
        x = np.float64(a[i])
        y = -2.0 * min(abs(x), _TANH_CLAMP)
        k = np.floor(y * _INV_LN2 + 0.5)
        r = (y - k * _LN2_HI) - k * _LN2_LO
        p = _expm1_reduced(r)
        s = scale[i]
        em1 = s * p + (s - 1.0)          # 2**k (1 + p) - 1 without losing p when k = 0
        a[i] = math.copysign(-em1 / (2.0 + em1), x)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def exp_nonpositive_inplace(a, scratch):
    """a[:] = exp(a[:]) for a <= 0 (shifted softmax scores); -inf gives 0."""
    n = a.shape[0]
    scale = scratch[:n].view(np.float64)
    for i in range(n):
        y = max(np.float64(a[i]), _EXP_FLOOR)
        k = np.floor(y * _INV_LN2 + 0.5)
        scratch[i] = (np.int64(k) + 1023) << 52
    for i in range(n):
        x = np.float64(a[i])
        y = max(x, _EXP_FLOOR)
        k = np.floor(y * _INV_LN2 + 0.5)
        r = (y - k * _LN2_HI) - k * _LN2_LO
        e = scale[i] * (1.0 + _expm1_reduced(r))
        a[i] = e if x >= _EXP_FLOOR else 0.0   # below 3e-308 next to a row maximum of 1
