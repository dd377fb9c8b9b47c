"""harness.kernels.vmath: the vectorisable tanh and exp against NumPy's.

Tolerances (stated once): float64 tanh within 3 ulp of np.tanh; float32 tanh
within 1 ulp of np.tanh evaluated in float64 and rounded (it is computed in
float64, so it should be the correctly rounded value or its neighbour); tanh32 (float32
arithmetic) within 2 ulp of that correctly rounded value (measured: 2, on 3e6 random points
in [-12, 12] and down to 1e-45, 5 % of them more than 1 ulp off); exp on
[-708, 0] within 3 ulp of np.exp, and below -708 (results under 3e-308) at
most exp(-708) ~ 3.3e-308 away from it, with exp(-inf) = 0 exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.kernels.vmath import (exp_shifted_inplace, tanh32_inplace, tanh_fast_inplace,
                                   tanh_inplace)


def ulps(got, want):
    """Distance in units in the last place of ``want``'s dtype."""
    got, want = np.asarray(got), np.asarray(want)
    spacing = np.spacing(np.abs(want).astype(want.dtype))
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing.astype(np.float64)


def tanh(x):
    a = np.array(x, copy=True)
    tanh_inplace(a, np.empty(a.size, dtype=np.int64))
    return a


def exp(x):
    """exp of x <= 0: the softmax's exp with no shift (m = 0) and no scale."""
    a = np.array(x, copy=True)
    exp_shifted_inplace(a, a.size, 0.0, 1.0, np.empty(a.size, dtype=np.int64))
    return a


def tanh_points(dtype):
    rng = np.random.default_rng(0)
    info = np.finfo(dtype)
    special = [0.0, info.tiny, info.smallest_subnormal, 1e-300, 1e-30, 1e-8, 1e-4, 0.1, 0.5,
               np.log(3) / 2, 0.6, 1.0, 2.0, 5.0, 9.0, 10.0, 19.0, 19.99, 20.0, 20.01, 40.0,
               1e3, 1e30, float(info.max)]
    special = [s for s in special if s <= float(info.max)]
    pts = np.concatenate([
        special,
        rng.uniform(0, 1, 3000), rng.uniform(0, 25, 3000), rng.uniform(20, 45, 500),
        10.0 ** rng.uniform(-40, 0, 2000), 10.0 ** rng.uniform(0, 300, 500),
        np.linspace(0, 0.35, 2000),    # where the reduction switches k = 0 -> 1 (|2x| = ln2/2)
    ])
    pts = pts[pts <= float(info.max)]
    return np.concatenate([pts, -pts]).astype(dtype)


def test_tanh_float64_within_3_ulp():
    x = tanh_points(np.float64)
    got = tanh(x)
    want = np.tanh(x)
    assert got.dtype == np.float64
    worst = ulps(got, want).max()
    assert worst <= 3, f"{worst} ulp at x = {x[ulps(got, want).argmax()]!r}"


def test_tanh_float32_rounds_correctly():
    x = tanh_points(np.float32)
    got = tanh(x)
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    assert got.dtype == np.float32
    worst = ulps(got, want).max()
    assert worst <= 1, f"{worst} ulp at x = {x[ulps(got, want).argmax()]!r}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_keeps_the_sign_of_zero_and_saturates(dtype):
    got = tanh(np.array([0.0, -0.0, 40.0, -40.0, 1e30, -1e30], dtype=dtype))
    assert got[0] == 0 and not np.signbit(got[0])
    assert got[1] == 0 and np.signbit(got[1])
    np.testing.assert_array_equal(got[2:], np.array([1, -1, 1, -1], dtype=dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_is_odd_and_tiny_x_returns_x(dtype):
    x = tanh_points(dtype)
    x = x[x > 0]
    np.testing.assert_array_equal(tanh(-x), -tanh(x))
    tiny = np.array([1e-30, 1e-20, 1e-12], dtype=dtype)
    np.testing.assert_allclose(tanh(tiny), tiny, rtol=np.finfo(dtype).eps, atol=0)


def test_tanh_touches_only_its_slice():
    a = np.linspace(-3, 3, 10)
    b = a.copy()
    tanh_inplace(b[2:7], np.empty(5, dtype=np.int64))
    np.testing.assert_array_equal(b[:2], a[:2])
    np.testing.assert_array_equal(b[7:], a[7:])
    assert ulps(b[2:7], np.tanh(a[2:7])).max() <= 3


def tanh32(x):
    a = np.array(x, dtype=np.float32, copy=True)
    tanh32_inplace(a, np.empty(a.size, dtype=np.int64))
    return a


def test_tanh32_within_2_ulp_of_the_rounded_value():
    rng = np.random.default_rng(2)
    x = np.concatenate([tanh_points(np.float32), rng.uniform(-12, 12, 200_000),
                        10.0 ** rng.uniform(-45, 1.1, 100_000)]).astype(np.float32)
    got = tanh32(x)
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    assert got.dtype == np.float32
    u = ulps(got, want)
    assert u.max() <= 2, f"{u.max()} ulp at x = {x[u.argmax()]!r}"
    assert u.mean() < 0.5           # mostly the rounded value: not merely close


def test_tanh32_keeps_the_sign_of_zero_saturates_and_is_odd():
    got = tanh32([0.0, -0.0, 10.0, -10.0, 40.0, -40.0, 1e30, -1e30, np.inf, -np.inf])
    assert got[0] == 0 and not np.signbit(got[0])
    assert got[1] == 0 and np.signbit(got[1])
    np.testing.assert_array_equal(got[2:], np.array([1, -1] * 4, dtype=np.float32))
    x = tanh_points(np.float32)
    x = x[x > 0]
    np.testing.assert_array_equal(tanh32(-x), -tanh32(x))
    tiny = np.array([1e-30, 1e-20, 1e-12], dtype=np.float32)
    np.testing.assert_allclose(tanh32(tiny), tiny, rtol=np.finfo(np.float32).eps, atol=0)


def test_tanh32_touches_only_its_slice():
    a = np.linspace(-3, 3, 10, dtype=np.float32)
    b = a.copy()
    tanh32_inplace(b[2:7], np.empty(5, dtype=np.int64))
    np.testing.assert_array_equal(b[:2], a[:2])
    np.testing.assert_array_equal(b[7:], a[7:])
    assert ulps(b[2:7], np.tanh(a[2:7].astype(np.float64)).astype(np.float32)).max() <= 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_fast_is_tanh32_for_float32_and_tanh_for_float64(dtype):
    x = tanh_points(dtype)
    got = x.copy()
    tanh_fast_inplace(got, np.empty(x.size, dtype=np.int64))
    np.testing.assert_array_equal(got, tanh32(x) if dtype == np.float32 else tanh(x))


def test_exp_float64_on_nonpositive_range():
    rng = np.random.default_rng(1)
    x = np.concatenate([[0.0, -0.0, -1e-300, -1e-16, -np.log(2) / 2, -np.log(2), -1.0,
                         -700.0, -707.9, -708.0],
                        -rng.uniform(0, 1, 2000), -rng.uniform(0, 708, 5000),
                        -(10.0 ** rng.uniform(-20, np.log10(708), 2000))])
    got = exp(x)
    worst = ulps(got, np.exp(x)).max()
    assert worst <= 3, f"{worst} ulp at x = {x[ulps(got, np.exp(x)).argmax()]!r}"
    assert exp(np.array([0.0]))[0] == 1.0


def test_exp_float64_underflow_and_minus_inf():
    x = np.concatenate([np.linspace(-800, -708.0001, 3000), [-745.2, -1e300, -np.inf]])
    got = exp(x)
    assert np.all(got >= 0)
    assert np.abs(got - np.exp(x)).max() <= np.exp(-708.0)     # ~3.3e-308: flushed to 0 below it
    assert got[-1] == 0.0 and got[-2] == 0.0


def test_exp_float32():
    x = -np.random.default_rng(2).uniform(0, 110, 5000).astype(np.float32)
    x = np.concatenate([x, np.array([0, -1e-10, -87.0, -103.0, -np.inf], dtype=np.float32)])
    got = exp(x)
    want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert got.dtype == np.float32
    normal = want >= np.finfo(np.float32).tiny
    assert ulps(got[normal], want[normal]).max() <= 1
    # below float32's smallest normal the result flushes to 0: next to a row maximum
    # of 1 such terms are far below one ulp of the row sum
    assert np.abs(got[~normal].astype(np.float64) - want[~normal]).max() <= np.finfo(np.float32).tiny
    assert got[-1] == 0.0
