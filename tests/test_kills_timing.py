"""The timing policy, its intervals and the wall-time crossover, each checked another way.

Written against the mutants of ``harness/infra/timing.py``, ``harness/analysis/walltime.py`` and
``harness/infra/stats.py`` that the other tests left alive. The intervals are compared with
scipy's bootstrap called directly on the same draws, or with a plain loop twin of the
resampling; the
crossover's boundaries with frames whose answer is worked out by hand. No kernel is
compiled and no wall-clock time is asserted on: the timer is faked.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from _fakes import Clock
from harness.infra import config, timing
from harness.infra import stats as fit
from harness import models
from harness.analysis import walltime
from harness.models import ATTENTION, RECURRENCE

BASE = config.WALL.baseline                     # the RNN
assert BASE == RECURRENCE


# ============================================================================ helpers



class _FakeRounds:
    """Stands in for ``timing.time_interleaved``: records its arguments and returns
    ``sample(name, round)`` for each callable and round."""

    def __init__(self, sample):
        self.sample, self.calls = sample, []

    def __call__(self, fns, rounds, min_sample_s, seed=0):
        self.calls.append((dict(fns), rounds, min_sample_s, seed))
        return ({k: np.array([self.sample(k, r) for r in range(rounds)], float) for k in fns},
                {k: 1 for k in fns})


def _scipy_interval(x, seed, **kw):
    """The documented interval, by scipy: the 95 % percentile bootstrap of the median from
    2000 resamples, drawn by default_rng(seed) (the draws of ``stats.bootstrap_interval``)."""
    kw = {"n_resamples": 2000, "method": "percentile", **kw}
    ci = stats.bootstrap((np.asarray(x, np.float64),), np.median, confidence_level=0.95,
                         random_state=np.random.default_rng(seed), **kw).confidence_interval
    return float(ci.low), float(ci.high)


def _same(got, want):
    """Equal up to the rounding of the quantiles' interpolation (NumPy's against scipy's)."""
    return got == pytest.approx(want, rel=1e-12)


# eight rounds: with these the bootstrap's ends depend on its seed
ROUNDS8 = np.array([1.26, 1.3, 1.81, 1.09, 1.6, 1.73, 1.19, 1.06])


def test_the_eight_rounds_interval_depends_on_seed_count_and_method():
    """The premise of the tests below: seed, resample count and method each move the ends."""
    base = _scipy_interval(ROUNDS8, 0)
    assert not _same(base, _scipy_interval(ROUNDS8, 1))
    for kw in ({"n_resamples": 9999}, {"method": "BCa"}):
        assert not _same(base, _scipy_interval(ROUNDS8, 0, **kw))


# ============================================================================ _fit

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
    of the others when they are at least 95 % of the resamples, else no interval."""
    x = np.arange(5.0)
    idx = np.random.default_rng(2).integers(0, 5, size=(400, 5))

    def mean_unless(times):                 # NaN when round 0 is drawn ``times`` times or more
        return lambda r: np.where((r == 0).sum(axis=1) >= times, np.nan, r.mean(axis=1))
    for times in (1, 4):                    # 35 % and 98.75 % of these resamples have one
        defined = (idx == 0).sum(axis=1) < times
        got = fit.bootstrap_interval(mean_unless(times), x, seed=2, resamples=400)
        if defined.mean() >= 0.95:
            assert times == 4
            assert _same(got, tuple(np.quantile(x[idx[defined]].mean(axis=1), [0.025, 0.975])))
        else:
            assert times == 1 and all(math.isnan(v) for v in got)


def test_bootstrap_interval_under_three_rounds_or_of_uneven_rounds():
    assert all(math.isnan(v) for v in fit.bootstrap_interval(lambda r: r.mean(axis=1), [1.0, 2.0]))
    assert fit.bootstrap_interval(lambda r: r.mean(axis=1), [1.0, 2.0, 4.0]) != (math.nan,) * 2
    with pytest.raises(ValueError, match="same rounds"):
        fit.bootstrap_interval(lambda a, b: a.mean(axis=1), [1.0, 2.0, 3.0], [1.0, 2.0])


# ============================================================================ timing

def test_calls_per_sample_zero_is_one_call_without_warm_up():
    clock = Clock()
    with mock.patch.object(timing.time, "perf_counter", clock):
        assert timing.calls_per_sample(clock.fn("long", 0.3), 0) == 1
        assert clock.calls == []                                  # not even a warm-up
        # one second of 0.3 s calls: 4 per sample, after a warm-up and one timed call
        assert timing.calls_per_sample(clock.fn("short", 0.3), 1.0) == 4
        assert clock.calls == ["short", "short"]


def test_time_interleaved_shuffles_from_seed_zero_by_default():
    def run(**kw):
        clock = Clock()
        fns = {k: clock.fn(k, 0.01) for k in "abc"}
        with mock.patch.object(timing.time, "perf_counter", clock):
            timing.time_interleaved(fns, 6, 0, **kw)
        return clock.calls
    order = np.random.default_rng(0)
    want = ["abc"[i] for _ in range(6) for i in order.permutation(3)]
    assert run() == want == run(seed=0)
    assert run(seed=1) != want                                    # the seed shows in the order


def test_median_interval_is_scipys_percentile_bootstrap_at_its_seed():
    med = float(np.median(ROUNDS8))
    assert _same(timing.median_interval(ROUNDS8), (med, *_scipy_interval(ROUNDS8, 0)))
    assert _same(timing.median_interval(ROUNDS8, seed=3), (med, *_scipy_interval(ROUNDS8, 3)))
    assert timing.median_interval(list(ROUNDS8), 3) == timing.median_interval(ROUNDS8, 3)


def test_median_interval_computes_in_float64_whatever_the_input():
    one_up = np.nextafter(np.float32(1), np.float32(2))           # 1 + 2^-23
    x32 = np.array([1, 1, one_up, one_up], np.float32)
    med, lo, hi = timing.median_interval(x32)
    assert med == 1.0 + 2.0 ** -24                                 # not representable in float32
    assert _same((lo, hi), _scipy_interval(x32.astype(np.float64), 0))


def test_median_interval_of_constant_rounds_is_that_constant_even_infinite():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert timing.median_interval([2.5] * 5) == (2.5, 2.5, 2.5)
        assert timing.median_interval([math.inf] * 3) == (math.inf, math.inf, math.inf)


def _paired_twin(a, b, seed):
    """paired_ratio as a loop: resample round indices, the same for a and b."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    idx = np.random.default_rng(seed).integers(0, a.size, size=(2000, a.size))
    boot = sorted(np.median(a[i]) / np.median(b[i]) for i in idx)
    def q(p):                                                     # linear between order statistics
        h = (len(boot) - 1) * p
        k = math.floor(h)
        return boot[k] + (h - k) * (boot[k + 1] - boot[k])
    return float(np.median(a) / np.median(b)), q(0.025), q(0.975)


def test_paired_ratio_is_the_loop_twin_at_seed_zero_and_in_float64():
    rng = np.random.default_rng(4)
    a, b = rng.uniform(1, 2, 12), rng.uniform(1, 2, 12)        # twelve rounds: quantiles apart
    assert timing.paired_ratio(a, b) == pytest.approx(_paired_twin(a, b, 0), rel=1e-12)
    assert timing.paired_ratio(a, b, 6) == pytest.approx(_paired_twin(a, b, 6), rel=1e-12)
    assert _paired_twin(a, b, 0) != pytest.approx(_paired_twin(a, b, 1), rel=1e-6)
    # float32 rounds are compared in float64: the median of 1 and 1 + 2^-23 is 1 + 2^-24
    one_up = np.nextafter(np.float32(1), np.float32(2))
    x32 = np.array([1, 1, one_up, one_up], np.float32)
    ones = np.ones(4)
    assert timing.paired_ratio(x32, ones)[0] == 1.0 + 2.0 ** -24
    assert timing.paired_ratio(ones, x32)[0] == 1.0 / (1.0 + 2.0 ** -24)
    x64 = x32.astype(np.float64)
    assert timing.paired_ratio(x32, ones) == timing.paired_ratio(x64, ones)
    assert timing.paired_ratio(ones, x32) == timing.paired_ratio(ones, x64)


# ============================================================================ walltime: calls

def test_timed_calls_warm_up_on_a_tiny_input_of_the_timed_dtype():
    """The warm-up call compiles the specialisation the clock then runs: same dtype, 2 x 2."""
    seen = []

    def spy(name):
        def call(*args):
            seen.append((name, [(a.shape, a.dtype) for a in args if isinstance(a, np.ndarray)]))
        return call
    spied = {k: (f, dataclasses.replace(v, call=spy(k))) for k, (f, v) in models.variants().items()}
    with mock.patch.object(walltime.models, "variants", lambda: spied):
        calls = walltime._calls(7, 5, seed=0, dtype=np.float32)
        warm = list(seen)
        for f in calls.values():
            f()
    timed = seen[len(warm):]
    assert [n for n, _ in warm] == [n for n, _ in timed] == list(spied)
    for (_, w), (_, t) in zip(warm, timed):
        assert t[0][1] == np.float32                               # X, as asked
        assert [dt for _, dt in w] == [dt for _, dt in t]          # the same specialisation
        assert w[0][0] == (2, 2) and t[0][0] == (7, 5)              # X: T x d, tiny, then timed
        # the weights at d = 2: at most a gated recurrence's 4 gates x d rows
        assert max(max(s) for s, _ in w) <= 4 * 2


# ============================================================================ walltime: rounds

def _fake_calls(T, d, seed, dtype=np.float64):
    return {name: None for name in models.variants()}


def test_measure_wall_times_intervals_at_seed_T_and_the_exact_mac_rate():
    cfg = dataclasses.replace(config.WALL, T_values=(5, 11), d=3, rounds=8, threads=1)
    names = list(models.variants())
    fake = _FakeRounds(lambda k, r: (names.index(k) + 1) * 1e-4 * ROUNDS8[r])
    with mock.patch.object(walltime.timing, "time_interleaved", fake), \
            mock.patch.object(walltime, "_calls", _fake_calls):
        t = walltime.measure_wall_times(cfg)
    assert not _same(_scipy_interval(ROUNDS8, 5), _scipy_interval(ROUNDS8, 0))
    for r in t.itertuples():
        x = (names.index(r.model) + 1) * 1e-4 * ROUNDS8
        assert r.seconds == float(np.median(x))
        assert _same((r.seconds_lo, r.seconds_hi), _scipy_interval(x, r.T))   # one seed per T
        macs = models.variants()[r.model][1].macs(r.T, 3)
        assert r.gmacs_per_s == pytest.approx(macs / r.seconds * 1e-9, rel=1e-12)


def test_matmul_rates_intervals_at_seed_d():
    cfg = dataclasses.replace(config.WALL, rounds=8, threads=1)
    fake = _FakeRounds(lambda k, r: 1e-3 * ROUNDS8[r])
    with mock.patch.object(walltime.timing, "time_interleaved", fake):
        res = walltime.matmul_rates(3, cfg, T=4)
    lo, hi = _scipy_interval(1e-3 * ROUNDS8, 3)
    assert not _same((lo, hi), _scipy_interval(1e-3 * ROUNDS8, 0))
    gemm = 4 * 4 * 3                                              # (T x d) @ (d x T)
    assert res["gemm_gmacs_lo"] == pytest.approx(gemm / hi / 1e9, rel=1e-12)
    assert res["gemm_gmacs_hi"] == pytest.approx(gemm / lo / 1e9, rel=1e-12)


def test_strong_scaling_on_an_unknown_core_count_and_its_sample_length():
    cfg = dataclasses.replace(config.WALL, scaling_T=6, d=3, rounds=2, min_sample_s=0.005)
    fake = _FakeRounds(lambda k, r: 1.0)
    with mock.patch.object(walltime.timing, "time_interleaved", fake), \
            mock.patch.object(walltime, "_calls", _fake_calls), \
            mock.patch.object(walltime.os, "cpu_count", lambda: None):
        f = walltime.strong_scaling(cfg)
    assert sorted(f.threads.unique()) == [1]                       # no count known: one thread
    assert [c[1:3] for c in fake.calls] == [(2, 0.005)]


# ============================================================================ walltime: crossings

def test_crossing_of_power_laws_with_an_infinite_exponent_is_nan():
    for pa, pr in (((math.inf, 0.0), (1.0, 1.0)), ((2.0, 0.0), (-math.inf, 0.0)),
                   ((math.inf, 0.0), (-math.inf, 1.0))):
        assert math.isnan(walltime._crossing(pa, pr, 1000, 100.0)), (pa, pr)


def _times(Ts, gap, d=100, rounds=None):
    """The RNN at 1 us per (T + 1) step; attention exp(gap) times that; rates that differ per T.
    ``rounds``: (rnn, attention) factors per (T, round) for the samples; seconds their medians."""
    rows, long = [], []
    for i, (T, g) in enumerate(zip(Ts, gap)):
        base = 1e-6 * (T + 1)
        for m, sec, rate in ((RECURRENCE, base, 1.0 + T), (ATTENTION, base * math.exp(g), 7.0 + T)):
            if rounds is not None:
                f = np.asarray(rounds[m][i], float)
                long += [{"model": m, "T": T, "d": d, "round": r, "seconds": sec * x}
                         for r, x in enumerate(f)]
                sec = float(np.median(sec * f))
            rows.append({"model": m, "T": T, "d": d, "seconds": sec, "gmacs_per_s": rate})
    frame = pd.DataFrame(rows)
    if rounds is not None:
        frame.attrs["samples"] = pd.DataFrame(long)
    return frame


def _row(times, fit_min_T):
    cfg = dataclasses.replace(config.WALL, fit_min_T=fit_min_T, extrapolate_max=100.0)
    frame = walltime.measured_crossover(times, cfg)
    return frame, frame.set_index("variant").loc[ATTENTION]


def test_crossover_equal_at_the_first_T_counts_as_already_there():
    frame, row = _row(_times((10, 100, 1000), (0.0, 0.5, 1.0)), 10)
    assert row.measured_T == 10.0 and frame.measured_T.dtype == np.float64


def test_rates_are_read_at_the_measured_crossover_when_nothing_is_extrapolated():
    # turns between 10 and 100, two thirds of the way in log T; past 100 the gap falls,
    # so the power laws fitted there do not cross ahead
    _, row = _row(_times((10, 100, 1000, 10000), (-1.0, 0.5, 0.4, 0.3)), 100)
    assert row.measured_T == pytest.approx(10 * 10 ** (2 / 3)) and math.isnan(row.extrapolated_T)
    assert row.rate_at_T == 100                                    # 46 is nearer 100 than 10 in log
    assert row.gemm_over_matvec == pytest.approx((7.0 + 100) / (1.0 + 100))


def test_rates_are_read_at_the_extrapolated_crossover_when_none_is_measured():
    # never slower at a sampled T, but the least-squares line of the gap turns positive at 10^3.4
    Ts, gap = (10, 100, 1000, 10000), (-5.0, -0.1, -0.1, -0.1)
    _, row = _row(_times(Ts, gap), 10)
    # the two power laws' difference is the least-squares line of the gap against log T
    slope, icpt = np.polyfit(np.log(Ts), gap, 1)
    assert math.isnan(row.measured_T)
    assert row.extrapolated_T == pytest.approx(math.exp(-icpt / slope), rel=1e-9)
    assert 10 ** 3.3 < row.extrapolated_T < 10 ** 3.5
    assert row.rate_at_T == 1000                                   # nearer 10^3 than 10^4 in log


def test_already_slower_at_T_one_reads_the_rates_there():
    _, row = _row(_times((1, 10, 100), (0.5, 1.0, 1.5)), 1)
    assert row.measured_T == 1.0 and row.rate_at_T == 1
    assert row.gemm_over_matvec == pytest.approx((7.0 + 1) / (1.0 + 1))


def test_already_slower_at_T_zero_reads_the_rates_at_the_largest_T():
    # a crossing at T = 0 has no logarithm: the rates come from the largest T, without error
    _, row = _row(_times((0, 10, 100), (0.5, 1.0, 1.5)), 10)
    assert row.measured_T == 0.0 and row.rate_at_T == 100


def _crossover_twin(times, d, resamples):
    """measured_T_lo / _hi as loops: resample round indices (the same for every T and model),
    take each T's medians, find where log(t_att / t_rnn) turns in log T, keep the 95 % range."""
    s = times.attrs["samples"]
    s = s[s.d == d]
    Ts = sorted(s["T"].unique())
    n = s["round"].nunique()
    boot = np.random.default_rng(d).integers(0, n, size=(resamples, n))
    found = []
    for rows in boot:
        gap = []
        for T in Ts:
            med = {m: np.median([s[(s.model == m) & (s["T"] == T) & (s["round"] == r)]
                                 .seconds.item() for r in rows]) for m in (ATTENTION, BASE)}
            gap.append(math.log(med[ATTENTION] / med[BASE]))
        cross = math.nan
        for i in range(1, len(Ts)):
            if gap[i - 1] < 0 <= gap[i]:
                f = gap[i - 1] / (gap[i - 1] - gap[i])
                cross = Ts[i - 1] * (Ts[i] / Ts[i - 1]) ** f
                break
        found.append(cross)
    found = np.array(found)
    if np.isfinite(found).mean() < 0.95:
        return math.nan, math.nan
    return tuple(np.quantile(found[np.isfinite(found)], [0.025, 0.975]))


def test_crossover_interval_is_the_loop_twin_of_resampled_rounds():
    d, Ts = 37, (10, 100, 1000, 10000)
    noise = np.random.default_rng(2).uniform(-0.3, 0.3, size=(2, len(Ts), 5))
    rounds = {RECURRENCE: np.exp(noise[0]), ATTENTION: np.exp(noise[1])}
    t = _times(Ts, (-2.0, -0.5, 0.5, 2.0), d=d, rounds=rounds)
    cfg = dataclasses.replace(config.WALL, fit_min_T=10)
    row = walltime.measured_crossover(t, cfg, resamples=60).set_index("variant").loc[ATTENTION]
    lo, hi = _crossover_twin(t, d, 60)
    assert 100 < lo < hi < 1000
    assert (row.measured_T_lo, row.measured_T_hi) == pytest.approx((lo, hi), rel=1e-9)


def test_crossover_interval_kept_when_exactly_95_percent_of_resamples_bracket_it():
    """At T = 1000 round 0 of attention is 20 x faster than the others: a resample holding it
    three times or more out of five never turns; otherwise every resample turns at 100 sqrt(10)."""
    d, Ts = 5, (10, 100, 1000)
    ones = np.ones((3, 5))
    att = np.array([[1.0] * 5, [1.0] * 5, [0.05, 1, 1, 1, 1]])
    t = _times(Ts, (math.log(0.2), math.log(0.5), math.log(2.0)), d=d,
               rounds={RECURRENCE: ones, ATTENTION: att})
    boot = np.random.default_rng(d).integers(0, 5, size=(20, 5))
    assert ((boot == 0).sum(axis=1) >= 3).sum() == 1              # 19 of 20 resamples bracket it
    row = walltime.measured_crossover(t, dataclasses.replace(config.WALL, fit_min_T=10),
                                      resamples=20).set_index("variant").loc[ATTENTION]
    assert row.measured_T == pytest.approx(100 * math.sqrt(10))
    assert row.measured_T_lo == pytest.approx(100 * math.sqrt(10))
    assert row.measured_T_hi == pytest.approx(100 * math.sqrt(10))


# ============================================================================ walltime: exponents

def _exponent_twin(samples, model, d, min_T, resamples):
    """exponent_lo / _hi as loops: resample the rounds, fit a line to log median against log T."""
    s = samples[(samples.model == model) & (samples.d == d) & (samples["T"] >= min_T)]
    Ts = sorted(s["T"].unique())
    n = s["round"].nunique()
    rng = np.random.default_rng(d)
    slopes = []
    for rows in rng.integers(0, n, size=(resamples, n)):
        meds = [np.median([s[(s["T"] == T) & (s["round"] == r)].seconds.item() for r in rows])
                for T in Ts]
        slopes.append(np.polyfit(np.log(Ts), np.log(meds), 1)[0])
    return tuple(np.quantile(slopes, [0.025, 0.975]))


def test_exponent_interval_is_the_loop_twin_from_min_T_on():
    """Five rounds at T = 10, 20, 40 with min_T = 20: two T fitted, one of them min_T itself."""
    d, Ts, min_T = 8, (10, 20, 40), 20
    noise = np.random.default_rng(1).uniform(-0.2, 0.2, size=(2, len(Ts), 5))
    rounds = {RECURRENCE: np.exp(noise[0]), ATTENTION: np.exp(noise[1])}
    t = _times(Ts, (0.0, 0.7, 1.5), d=d, rounds=rounds)
    ex = walltime.fit_exponents(t, min_T=min_T, resamples=40).set_index("model")
    assert (ex.points == 2).all()
    for m in (RECURRENCE, ATTENTION):
        lo, hi = _exponent_twin(t.attrs["samples"], m, d, min_T, 40)
        assert lo < hi
        assert (ex.loc[m, "exponent_lo"], ex.loc[m, "exponent_hi"]) == pytest.approx((lo, hi),
                                                                                       rel=1e-9)


def test_exponent_interval_does_not_depend_on_the_dtype_of_T():
    """T stored as float32 (integers, exactly representable) gives the same fit as int T."""
    noise = np.random.default_rng(1).uniform(-0.2, 0.2, size=(2, 3, 5))
    rounds = {RECURRENCE: np.exp(noise[0]), ATTENTION: np.exp(noise[1])}
    t = _times((10, 20, 40), (0.0, 0.7, 1.5), d=8, rounds=rounds)
    t32 = pd.DataFrame(t).assign(T=t["T"].astype(np.float32))
    t32.attrs = {"samples": t.attrs["samples"].assign(T=t.attrs["samples"]["T"].astype(np.float32))}
    assert t32["T"].dtype == t32.attrs["samples"]["T"].dtype == np.float32
    want = walltime.fit_exponents(t, min_T=10, resamples=40)
    got = walltime.fit_exponents(t32, min_T=10, resamples=40)
    assert (want.exponent_lo < want.exponent_hi).all()
    for c in ("exponent", "exponent_lo", "exponent_hi"):
        np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy())


def test_exponent_interval_without_rounds_is_a_float_nan():
    ex = walltime.fit_exponents(_times((10, 20, 40), (0.0, 0.7, 1.5)), min_T=10)
    assert ex.exponent_lo.dtype == np.float64 and ex.exponent_hi.dtype == np.float64
    assert ex.exponent_lo.isna().all() and ex.exponent_hi.isna().all()


# ============================================================================ walltime: seeds and T

def _calls_spy(seen):
    def fake(T, d, seed, dtype=np.float64):
        seen.append((T, d, seed))
        return _fake_calls(T, d, seed, dtype)
    return fake


def test_measure_wall_times_takes_the_given_T_and_seeded_inputs_and_keeps_the_rounds_at_d():
    cfg = dataclasses.replace(config.WALL, T_values=(5, 11), d=3, rounds=2, threads=1, seed=7)
    seen = []
    fake = _FakeRounds(lambda k, r: 1e-4 * (r + 1))
    with mock.patch.object(walltime.timing, "time_interleaved", fake), \
            mock.patch.object(walltime, "_calls", _calls_spy(seen)):
        t = walltime.measure_wall_times(cfg, T_values=(4, 6, 9))
    assert seen == [(4, 3, 7), (6, 3, 7), (9, 3, 7)]               # the T asked, inputs at seed 7
    assert sorted(t["T"].unique()) == [4, 6, 9]
    s = t.attrs["samples"]
    assert len(s) == 3 * len(models.variants()) * 2
    assert (s["d"] == 3).all() and s["d"].dtype.kind == "i"        # the rounds say their width


def test_strong_scaling_times_inputs_drawn_at_the_config_seed():
    cfg = dataclasses.replace(config.WALL, scaling_T=6, d=3, rounds=2, seed=7)
    seen = []
    with mock.patch.object(walltime.timing, "time_interleaved", _FakeRounds(lambda k, r: 1.0)), \
            mock.patch.object(walltime, "_calls", _calls_spy(seen)):
        walltime.strong_scaling(cfg, thread_counts=(1, 2))
    assert seen == [(6, 3, 7), (6, 3, 7)]


def test_matmul_rates_multiplies_inputs_drawn_at_the_config_seed():
    from harness.kernels import blas
    cfg = dataclasses.replace(config.WALL, rounds=5, threads=1, seed=7)
    got = {}

    def run_each_once(fns, rounds, min_sample_s, seed=0):
        for f in fns.values():
            f()
        return {k: np.full(rounds, 1e-3) for k in fns}, {k: 1 for k in fns}

    def matmul(A, B, out):
        got["Q"], got["K"] = A.copy(), B.copy()

    def gemv_steps(W, h, out, T):
        got["W"], got["h"], got["T"] = W.copy(), h.copy(), T
    with mock.patch.object(walltime.timing, "time_interleaved", run_each_once), \
            mock.patch.object(blas, "matmul", matmul), \
            mock.patch.object(blas, "gemv_steps", gemv_steps):
        walltime.matmul_rates(3, cfg, T=4)
    rng = np.random.default_rng(7)
    Q, K = rng.standard_normal((4, 3)), rng.standard_normal((3, 4))
    W, h = rng.standard_normal((3, 3)) / math.sqrt(3), rng.standard_normal(3)
    np.testing.assert_array_equal(got["Q"], Q)
    np.testing.assert_array_equal(got["K"], K)
    np.testing.assert_array_equal(got["W"], W)
    np.testing.assert_array_equal(got["h"], h)
    assert got["T"] == 4


# ============================================================================ _fit: power law

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
