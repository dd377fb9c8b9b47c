"""harness.infra.stats: the fits, the crossings and the bootstrap interval, each computed
another way: numpy's polyfit, closed forms, scipy's bootstrap called on the same draws, or a
loop twin of the resampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from _helpers import _same
from harness.infra import stats as _fit
from harness.infra import stats as fit


def test_fit_rate_fits_only_the_window_past_fit_from():
    # slope -0.3 from k = 6 on, an offset before: the window starts exactly at the kink
    K = 10
    k = np.arange(1, K + 1, dtype=float)
    y = -0.3 * k + np.where(k < 6, 5.0, 0.0)
    assert _fit.fit_rate(y, 0.5) == pytest.approx(-0.3, abs=1e-12)       # lo = int(5.0) = 5
    whole = np.polyfit(k, y, 1)[0]
    assert _fit.fit_rate(y, 0.0) == pytest.approx(whole, abs=1e-12)
    assert whole != pytest.approx(-0.3, abs=1e-3)
    # one point earlier (k = 5, off the line) would change the slope
    assert _fit.fit_rate(y, 0.4) == pytest.approx(np.polyfit(k[4:], y[4:], 1)[0], abs=1e-12)


def test_fit_rate_keeps_two_points_at_least_and_skips_non_finite_ones():
    k = np.arange(1, 11, dtype=float)
    y = 2.0 * k
    y[7] = 100.0                               # k = 8: off the line
    # fit_from = 0.95 would leave one point; the window keeps the last two (k = 9, 10)
    assert _fit.fit_rate(y, 0.95) == pytest.approx(2.0, abs=1e-12)
    z = np.array([np.nan, 1.0, -np.inf, 4.0, np.inf, 10.0])   # finite at k = 2, 4, 6
    assert _fit.fit_rate(z, 0.0) == pytest.approx(np.polyfit([2, 4, 6], [1, 4, 10], 1)[0])
    assert math.isnan(_fit.fit_rate(np.array([np.nan, 3.0, -np.inf]), 0.0))   # one finite point
    assert _fit.fit_rate(np.array([1.0, 3.0]), 0.0) == pytest.approx(2.0)    # exactly two
    assert math.isnan(_fit.fit_rate(np.array([7.0]), 0.0))


def test_power_law_is_the_least_squares_line_in_log_log():
    T = np.array([10.0, 20.0, 40.0, 80.0])
    p, lna = _fit.power_law(T, 3e-6 * T ** 1.7)
    assert p == pytest.approx(1.7, abs=1e-12) and lna == pytest.approx(math.log(3e-6), abs=1e-10)
    # noisy: the slope and intercept of the least-squares line, computed by polyfit
    y = 2e-3 * T ** 0.8 * np.array([1.1, 0.9, 1.05, 0.97])
    want = np.polyfit(np.log(T), np.log(y), 1)
    assert _fit.power_law(T, y) == pytest.approx(tuple(want), abs=1e-12)
    # T <= 0, non-positive and non-finite times are left out
    Tb = np.concatenate([T, [0.0, -5.0, 50.0, 60.0, 70.0]])
    yb = np.concatenate([3e-6 * T ** 1.7, [1.0, 1.0, 0.0, np.nan, -1.0]])
    assert _fit.power_law(Tb, yb) == pytest.approx((1.7, math.log(3e-6)), abs=1e-10)
    # fewer than two distinct T: undetermined
    assert all(math.isnan(v) for v in _fit.power_law([5.0, 5.0], [1.0, 2.0]))
    assert all(math.isnan(v) for v in _fit.power_law([5.0, 6.0], [1.0, 0.0]))
    p, _ = _fit.power_law([2.0, 2.0, 4.0], [1.0, 1.0, 4.0])                   # repeated T count
    assert p == pytest.approx(2.0)


def test_log_crossing_interpolates_linearly_in_log_T_between_the_bracketing_samples():
    Ts = [10.0, 100.0, 1000.0, 10000.0]
    # the gap turns from -0.5 to 1.5 between 100 and 1000: a quarter of the way in log T
    assert _fit.log_crossing(Ts, [-3.0, -0.5, 1.5, 3.0]) == pytest.approx(100 * 10 ** 0.25)
    assert _fit.log_crossing(Ts, [-2.0, 0.0, 1.0, 2.0]) == pytest.approx(100.0)   # 0 counts
    assert _fit.log_crossing([2.0, 8.0], [-1.0, 1.0]) == pytest.approx(4.0)       # the midpoint
    # the first turn, not a later one; never, or already at the first T: NaN
    assert _fit.log_crossing(Ts, [1.0, -1.0, 3.0, -1.0]) == pytest.approx(100 * 10 ** 0.25)
    assert math.isnan(_fit.log_crossing(Ts, [-3.0, -2.0, -1.0, -0.5]))
    assert math.isnan(_fit.log_crossing(Ts, [0.0, 1.0, 2.0, 3.0]))
    assert math.isnan(_fit.log_crossing([10.0], [-1.0]))


def test_quadratic_crossing_of_two_count_polynomials():
    # 3 T^2 + 5 T = T^2 + 25 T at T = 10
    assert _fit.quadratic_crossing(lambda T: 3 * T * T + 5 * T, lambda T: T * T + 25 * T) == 10.0
    # the lessons': 2 T^2 d against 2 T d^2 cross at T = d
    d = 37
    assert _fit.quadratic_crossing(lambda T: 2 * T * T * d, lambda T: 2 * T * d * d) == d
    # equal leading terms, or a crossing at T <= 0: none
    assert math.isnan(_fit.quadratic_crossing(lambda T: T * T + T, lambda T: T * T + 2 * T))
    assert math.isnan(_fit.quadratic_crossing(lambda T: 2 * T * T + 5 * T, lambda T: T * T + T))
    assert math.isnan(_fit.quadratic_crossing(lambda T: 2 * T * T + 5 * T, lambda T: T * T + 5 * T))


def test_quadratic_crossing_at_or_below_T_one_is_still_a_crossing():
    # 2 T^2 = T^2 + T at T = 1; 2 T^2 = T^2 + T/2 at T = 1/2: any T > 0 counts
    assert fit.quadratic_crossing(lambda T: 2 * T * T, lambda T: T * T + T) == 1.0
    assert fit.quadratic_crossing(lambda T: 2 * T * T, lambda T: T * T + 0.5 * T) == 0.5


def test_log_crossing_computes_in_float64_whatever_the_input():
    # float32 samples are widened exactly, then interpolated in float64: the same T either way
    Ts, gap = np.array([3, 10, 30], np.float32), np.array([-0.3, 0.7, 0.9], np.float32)
    want = fit.log_crossing(Ts.astype(np.float64), gap.astype(np.float64))
    f = 0.3 / (0.7 + 0.3)
    assert want == pytest.approx(3 * (10 / 3) ** f, rel=1e-6)
    assert fit.log_crossing(Ts, gap) == want
    assert fit.log_crossing(Ts, gap.astype(np.float64)) == want
    assert fit.log_crossing(Ts.astype(np.float64), gap) == want


def _median_ratio(a, b, axis=-1):
    return np.median(a, axis=axis) / np.median(b, axis=axis)


def test_bootstrap_interval_is_scipys_paired_percentile_bootstrap():
    """Two samples resampled with the same rounds, at any count, confidence and seed."""
    rng = np.random.default_rng(7)
    a, b = rng.uniform(1, 2, 9), rng.uniform(1, 2, 9)
    for seed, resamples, confidence in ((0, 2000, 0.95), (5, 500, 0.9)):
        ci = stats.bootstrap((a, b), _median_ratio, paired=True, n_resamples=resamples,
                             confidence_level=confidence, method="percentile",
                             random_state=np.random.default_rng(seed)).confidence_interval
        got = fit.bootstrap_interval(lambda x, y: _median_ratio(x, y, axis=1), a, b, seed=seed,
                                     resamples=resamples, confidence=confidence)
        assert _same(got, (ci.low, ci.high))
    # unpaired (each sample its own rounds) would be another interval
    ci = stats.bootstrap((a, b), _median_ratio, n_resamples=2000, method="percentile",
                         random_state=np.random.default_rng(0)).confidence_interval
    assert not _same(fit.bootstrap_interval(lambda x, y: _median_ratio(x, y, axis=1), a, b),
                     (ci.low, ci.high))


def test_bootstrap_interval_resamples_the_first_axis_of_a_rounds_by_T_grid():
    """A (rounds, T) sample: whole rounds are drawn, every T of a round together (a loop twin)."""
    grid = np.random.default_rng(3).uniform(1, 2, size=(6, 4))
    idx = np.random.default_rng(11).integers(0, 6, size=(300, 6))
    want = np.quantile([np.median(grid[i], axis=0).sum() for i in idx], [0.025, 0.975])
    got = fit.bootstrap_interval(lambda g: np.median(g, axis=1).sum(axis=1), grid, seed=11,
                                 resamples=300)
    assert _same(got, tuple(want))


def test_bootstrap_interval_needs_the_statistic_in_confidence_of_the_resamples():
    """A NaN statistic (a crossing a resample does not bracket) counts as none: the quantiles
    of the others when they are at least 95 % of the resamples, else no interval (a majority,
    or 93.5 % just under the bar, is not enough)."""
    x = np.arange(5.0)
    idx = np.random.default_rng(2).integers(0, 5, size=(400, 5))

    def mean_unless(times):                 # NaN when round 0 is drawn ``times`` times or more
        return lambda r: np.where((r == 0).sum(axis=1) >= times, np.nan, r.mean(axis=1))
    # 35 %, 75.5 %, 93.5 % and 98.75 % of these resamples have one
    for times, share in ((1, 0.35), (2, 0.755), (3, 0.935), (4, 0.9875)):
        defined = (idx == 0).sum(axis=1) < times
        assert defined.mean() == share
        got = fit.bootstrap_interval(mean_unless(times), x, seed=2, resamples=400)
        if times == 4:
            assert _same(got, tuple(np.quantile(x[idx[defined]].mean(axis=1), [0.025, 0.975])))
        else:
            assert all(math.isnan(v) for v in got), times


def test_bootstrap_interval_under_three_rounds_or_of_uneven_rounds():
    assert all(math.isnan(v) for v in fit.bootstrap_interval(lambda r: r.mean(axis=1), [1.0, 2.0]))
    assert fit.bootstrap_interval(lambda r: r.mean(axis=1), [1.0, 2.0, 4.0]) != (math.nan,) * 2
    with pytest.raises(ValueError, match="same rounds"):
        fit.bootstrap_interval(lambda a, b: a.mean(axis=1), [1.0, 2.0, 3.0], [1.0, 2.0])


def test_power_law_counts_T_equal_to_one():
    # seconds = T^2 at T = 1 and 2: two points, exponent 2, prefactor 1; without T = 1, one point
    p, loga = fit.power_law([1, 2], [1.0, 4.0])
    assert p == pytest.approx(2.0, rel=1e-12) and loga == pytest.approx(0.0, abs=1e-12)
    # with a third point off the line: log T = (0, l, 2l), log s = (0, 2l, 2l), l = ln 2;
    # centred, (-l, 0, l) . (-4l/3, 2l/3, 2l/3) / (2 l^2) = 1 (without T = 1 it would be 0)
    assert fit.power_law([1, 2, 4], [1.0, 4.0, 4.0])[0] == pytest.approx(1.0, rel=1e-12)


def test_power_law_computes_in_float64_whatever_the_input():
    T32 = np.array([3, 7, 50], np.float32)
    s32 = np.array([0.1, 0.3, 2.7], np.float32)
    want = fit.power_law(T32.astype(np.float64), s32.astype(np.float64))
    assert fit.power_law(T32, s32.astype(np.float64)) == want
    assert fit.power_law(T32.astype(np.float64), s32) == want
    assert fit.power_law(T32, s32) == want


def test_power_law_recovers_its_exponent_over_a_narrow_range_of_large_T():
    """T = 10^6 .. 10^6 + 4: log T varies by 4e-6 around 13.8. Centring both logs keeps the
    slope exact to about 1e-9; an uncentred sum would cancel to a few parts in a hundred."""
    T = np.array([1e6, 1e6 + 1, 1e6 + 2, 1e6 + 4])
    for c, p in ((1.0, 1), (1.0, 2), (1e-9, 1), (1e-9, 2), (1e6, 1), (1e6, 2)):
        slope, loga = fit.power_law(T, c * T ** p)
        assert slope == pytest.approx(p, rel=1e-7), (c, p)
        assert loga == pytest.approx(math.log(c), abs=1e-5), (c, p)


# ------------------------------------------------- a fixed cost plus a power of T

@pytest.mark.parametrize("a,b,p", [(1e-3, 2.6e-5, 1.0), (0.0, 1e-8, 2.0), (5e-4, 1e-6, 1.37),
                                   (1e-2, 1e-9, 2.5), (0.0, 1e-6, 0.6)])
def test_offset_power_law_recovers_the_fixed_cost_and_the_exponent(a, b, p):
    T = np.array([32, 64, 128, 256, 512, 1024, 2048])
    got = fit.offset_power_law(T, a + b * T.astype(float) ** p)
    assert got == pytest.approx((p, a, b), rel=1e-6, abs=1e-6 * max(a, 1e-12))


def test_offset_power_law_is_scipys_least_squares_on_the_relative_residuals():
    from scipy.optimize import least_squares
    T = np.array([128.0, 256, 512, 1024, 2048])
    rng = np.random.default_rng(3)
    ys = (3e-4 + 1e-6 * T) * np.exp(rng.normal(0, 0.05, size=(6, T.size)))   # six noisy curves
    p, a, b = fit.offset_power_law(T, ys)                                     # all at once
    assert p.shape == a.shape == (6,)
    for i, y in enumerate(ys):
        # a, b in units of the data; p free; a >= 0 as the fit's bound
        res = least_squares(lambda z: 1 - (z[0] * 1e-4 + z[1] * 1e-6 * T ** z[2]) / y,
                            x0=(1.0, 1.0, 1.0), bounds=([0, 0, 0.25], [np.inf, np.inf, 4]),
                            xtol=1e-14, ftol=1e-14, gtol=1e-14)
        assert (p[i], a[i], b[i]) == pytest.approx((res.x[2], res.x[0] * 1e-4, res.x[1] * 1e-6),
                                                   rel=1e-4, abs=1e-9)


def test_offset_power_law_is_nan_under_three_T_or_with_a_time_not_positive():
    p, a, b = fit.offset_power_law([10, 20], [[1.0, 2.0]])
    assert np.isnan(p).all() and np.isnan(a).all() and np.isnan(b).all()
    p, _, _ = fit.offset_power_law([10, 20, 40], [[1.0, 2.0, 4.0], [1.0, 0.0, 4.0], [1, np.nan, 4]])
    assert p[0] == pytest.approx(1.0, abs=1e-6) and np.isnan(p[1:]).all()


def test_offset_power_law_is_nan_for_a_negative_or_infinite_time_and_silent_about_it():
    import warnings
    T = [10, 20, 40, 80]
    rows = [[1.0, 2.0, 4.0, 8.0], [1.0, -2.0, 4.0, 8.0], [1.0, np.inf, 4.0, 8.0],
            [1.0, 0.0, 4.0, 8.0], [8.0, 4.0, 2.0, 1.0]]       # the last falls with T: no b > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # no RuntimeWarning reaches the user
        p, a, b = fit.offset_power_law(T, rows)
    assert p[0] == pytest.approx(1.0, abs=1e-6) and b[0] == pytest.approx(0.1, rel=1e-6)
    assert np.isnan(p[1:]).all() and np.isnan(a[1:]).all() and np.isnan(b[1:]).all()


def test_offset_power_law_fits_float32_times_in_float64():
    T = np.array([32, 64, 128, 256, 512])
    y = (1e-4 + 3e-7 * T ** 1.3).astype(np.float32)
    assert fit.offset_power_law(T, y) == fit.offset_power_law(T, y.astype(np.float64))


def test_offset_power_law_needs_every_T_positive_and_keeps_the_leading_shape():
    y = 1e-3 * np.arange(1, 5.0)
    assert np.isnan(fit.offset_power_law([0, 10, 20, 40], y)).all()       # T = 0: no power of it
    p, a, b = fit.offset_power_law([1, 2, 4, 8], 1e-3 + 2e-4 * np.array([1, 2, 4, 8.0]) ** 1.5)
    assert (p, a, b) == pytest.approx((1.5, 1e-3, 2e-4), rel=1e-6)          # T = 1 is a length
    for shape in ((4,), (3, 4), (2, 3, 4)):                                   # too few distinct T
        got = fit.offset_power_law([10, 10, 20, 20], np.ones(shape))
        assert all(z.shape == shape[:-1] and np.isnan(z).all() for z in got), shape


@pytest.mark.parametrize("p", [fit.P_GRID[0], fit.P_GRID[1], fit.P_GRID[-2], fit.P_GRID[-1]])
def test_offset_power_law_finds_an_exponent_at_either_end_of_its_grid(p):
    T = np.array([16, 32, 64, 128, 256, 512.0])
    q, a, b = fit.offset_power_law(T, 1e-6 + 1e-6 * T ** p)         # the two terms comparable
    assert q == pytest.approx(p, abs=1e-7) and b == pytest.approx(1e-6, rel=1e-6)
    assert a == pytest.approx(1e-6, rel=1e-3)            # at p = 4 the fixed cost is 1e-5 of a call


def test_bootstrap_interval_resamples_at_seed_0_unless_told():
    x = np.random.default_rng(2).lognormal(size=30)
    mean = lambda r: r.mean(axis=1)                                  # noqa: E731
    assert fit.bootstrap_interval(mean, x) == fit.bootstrap_interval(mean, x, seed=0)
    assert fit.bootstrap_interval(mean, x) != fit.bootstrap_interval(mean, x, seed=1)


def test_bootstrap_interval_resamples_float32_rounds_in_float64():
    x = np.random.default_rng(3).lognormal(size=20).astype(np.float32)
    med = lambda r: np.median(r, axis=1) / 3                         # noqa: E731
    assert fit.bootstrap_interval(med, x) == fit.bootstrap_interval(med, x.astype(np.float64))
