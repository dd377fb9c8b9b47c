"""harness.infra.timing: the timing policy on a fake clock (calls per sample, rounds in a
seeded interleaved order, medians) and its intervals (median_interval, paired_ratio,
noise_floor) against scipy's bootstrap on the same draws or a loop twin of the resampling.
No kernel is compiled and no wall-clock time is asserted on: the timer is faked."""

from __future__ import annotations

import math
import warnings
from unittest import mock

import numpy as np
import pytest

from _fakes import Clock
from _helpers import ROUNDS8, _FakeRounds, _same, _scipy_interval
from harness.infra import timing
from harness.infra import stats as _fit


def test_time_interleaved_samples_are_seconds_per_call_in_shuffled_rounds():
    clock = Clock()
    fns = {"a": clock.fn("a", 0.003), "b": clock.fn("b", 0.05), "c": clock.fn("c", 0.4)}
    with mock.patch.object(timing.time, "perf_counter", clock):
        samples, numbers = timing.time_interleaved(fns, rounds=4, min_sample_s=0.1, seed=7)
    # calls per sample: enough to last min_sample_s, at least one
    assert numbers == {"a": math.ceil(0.1 / 0.003), "b": 2, "c": 1}
    for k, cost in (("a", 0.003), ("b", 0.05), ("c", 0.4)):
        assert samples[k].shape == (4,)
        np.testing.assert_allclose(samples[k], cost, rtol=1e-9)
    # two calibration calls each, then one sample of each per round, in a seeded order
    calib = clock.calls[:6]
    assert calib == ["a", "a", "b", "b", "c", "c"]
    order = np.random.default_rng(7)
    want = []
    for _ in range(4):
        for i in order.permutation(3):
            name = "abc"[i]
            want += [name] * numbers[name]
    assert clock.calls[6:] == want


def test_calls_per_sample_never_divides_by_a_zero_time():
    clock = Clock()
    with mock.patch.object(timing.time, "perf_counter", clock):
        assert timing.calls_per_sample(clock.fn("z", 0.0), 1e-6) == 1000
        assert timing.calls_per_sample(clock.fn("s", 2.0), 0.5) == 1


def test_time_interleaved_refuses_no_rounds():
    with pytest.raises(ValueError, match="rounds"):
        timing.time_interleaved({"f": lambda: None}, 0, 0.0)


def test_median_seconds_is_the_median_of_the_rounds():
    clock = Clock()
    costs = iter([0.5, 0.5] + [0.1, 0.9, 0.3, 0.7, 0.2])
    def f():
        clock.now += next(costs)
    with mock.patch.object(timing.time, "perf_counter", clock):
        assert timing.median_seconds(f, rounds=5, min_sample_s=0.1) == pytest.approx(0.3)


def test_median_interval_closed_forms():
    med, lo, hi = timing.median_interval([3.0, 1.0])
    assert med == 2.0 and math.isnan(lo) and math.isnan(hi)            # under 3 rounds
    assert timing.median_interval([4.0, 4.0, 4.0]) == (4.0, 4.0, 4.0)  # no spread
    x = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    med, lo, hi = timing.median_interval(x)
    assert med == 3.0 and 1.0 <= lo <= med <= hi <= 100.0 and lo < hi


def test_median_seconds_defaults_five_rounds_of_a_tenth_of_a_second():
    clock = Clock()
    f = clock.fn("f", 0.03)
    with mock.patch.object(timing.time, "perf_counter", clock):
        assert timing.median_seconds(f) == pytest.approx(0.03)
    assert len(clock.calls) == 2 + 5 * 4            # calibration, then 5 rounds of ceil(0.1/0.03)


def test_noise_floor_of_two_labels_a_constant_factor_apart():
    fake = _FakeRounds(lambda k, n, r: (1.0 + r) * (1.1 if k == "a" else 1.0))
    fn = object()
    with mock.patch.object(timing, "time_interleaved", fake):
        out = timing.noise_floor(fn, rounds=5, min_sample_s=0.3, seed=9)
    fns, rounds, min_s, seed = fake.calls[0]
    assert fns == {"a": fn, "b": fn} and (rounds, min_s, seed) == (5, 0.3, 9)
    # a = 1.1 b round by round: every paired resample has the same ratio
    assert out["noise_ratio"] == pytest.approx(1.1)
    assert out["noise_ratio_lo"] == pytest.approx(1.1) and out["noise_ratio_hi"] == pytest.approx(1.1)
    assert out["noise_floor"] == pytest.approx(0.1)
    fake = _FakeRounds(lambda k, n, r: (1.0 + r) * (0.8 if k == "a" else 1.0))
    with mock.patch.object(timing, "time_interleaved", fake):
        out = timing.noise_floor(fn, rounds=4)
    assert out["noise_ratio"] == pytest.approx(0.8) and out["noise_floor"] == pytest.approx(0.2)
    assert fake.calls[0][1:] == (4, 0.02, 0)                    # the defaults


def test_noise_floor_is_the_intervals_larger_distance_from_one():
    # the ratio varies from round to round: the floor is the interval's farther end from 1
    a = np.array([1.0, 1.3, 0.9, 1.1, 1.0, 1.2, 0.95])
    fake = _FakeRounds(lambda k, n, r: a[r] if k == "a" else 1.0)
    with mock.patch.object(timing, "time_interleaved", fake):
        out = timing.noise_floor(None, rounds=7, seed=3)
    assert out["noise_ratio"] == pytest.approx(np.median(a))
    assert out["noise_ratio_lo"] <= np.median(a) <= out["noise_ratio_hi"]
    assert out["noise_ratio_lo"] < out["noise_ratio_hi"]
    assert out["noise_floor"] == pytest.approx(max(out["noise_ratio_hi"] - 1, 1 - out["noise_ratio_lo"],
                                                   abs(out["noise_ratio"] - 1)))


def test_noise_floor_resamples_every_round_from_its_seed():
    a = np.array([3.0, 1.0, 1.0])                 # round 0 alone is slow
    fake = _FakeRounds(lambda k, n, r: a[r] if k == "a" else 1.0)
    with mock.patch.object(timing, "time_interleaved", fake):
        out = timing.noise_floor(None, rounds=3, seed=5)
        again = timing.noise_floor(None, rounds=3, seed=5)
    # a resample that draws round 0 twice or more has median 3 (7 in 27): the upper end is 3
    assert out["noise_ratio"] == 1.0 and out["noise_ratio_lo"] == 1.0
    assert out["noise_ratio_hi"] == 3.0 and out["noise_floor"] == 2.0
    assert again == out
    assert fake.calls[0][1:] == (3, 0.02, 5)
    fake = _FakeRounds(lambda k, n, r: 1.0)
    with mock.patch.object(timing, "time_interleaved", fake):
        timing.noise_floor(None)
    assert fake.calls[0][1] == 9                  # nine rounds by default


def test_paired_ratio_resamples_rounds_in_pairs():
    # round 0 of both is slowed by the same load: paired, the ratio is 2 in every resample
    a, b = np.array([20.0, 2.0, 2.0, 2.0]), np.array([10.0, 1.0, 1.0, 1.0])
    assert timing.paired_ratio(a, b) == (2.0, 2.0, 2.0)
    assert timing.paired_ratio(a.tolist(), b.tolist(), seed=3) == (2.0, 2.0, 2.0)
    ratio, lo, hi = timing.paired_ratio([1.0, 3.0], [1.0, 1.0])      # under 3 rounds: no interval
    assert ratio == 2.0 and math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match=r"a and b must hold the same rounds, got \(3,\) and \(2,\)"):
        timing.paired_ratio([1, 2, 3], [1, 2])
    # the interval: the 2.5 % and 97.5 % quantiles of the paired bootstrap from default_rng(seed)
    rng = np.random.default_rng(11)
    a, b = rng.uniform(1, 2, 7), rng.uniform(1, 2, 7)
    for seed in (0, 5):
        idx = np.random.default_rng(seed).integers(0, 7, size=(_fit.RESAMPLES, 7))
        boot = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
        want = (np.median(a) / np.median(b), *np.quantile(boot, [0.025, 0.975]))
        got = timing.paired_ratio(a, b, seed)
        assert got == pytest.approx(want, rel=1e-12)
        assert got[1] != got[2]
    assert timing.paired_ratio(a, b) == timing.paired_ratio(a, b, 0)


def test_noise_floor_takes_the_largest_distance_from_one():
    for ratio, lo, hi, floor in ((1.0, 0.7, 1.1, 0.3), (1.0, 0.95, 1.2, 0.2), (1.4, 1.1, 1.2, 0.4)):
        with mock.patch.object(timing, "time_interleaved",
                               lambda fns, r, m, seed: ({"a": np.ones(3), "b": np.ones(3)}, {})), \
                mock.patch.object(timing, "paired_ratio", mock.Mock(return_value=(ratio, lo, hi))) as p:
            out = timing.noise_floor(None, rounds=3, seed=4)
        assert p.call_args.args[2] == 4
        assert out["noise_floor"] == pytest.approx(floor)


def test_median_interval_is_scipys_percentile_bootstrap_from_three_rounds():
    """scipy's bootstrap on the draws of ``stats.bootstrap_interval``: 2000 from default_rng(seed)."""
    from scipy import stats
    x = np.array([3.0, 1.0, 2.0])
    for seed in (0, 7):
        ci = stats.bootstrap((x,), np.median, confidence_level=0.95, n_resamples=2000,
                             method="percentile",
                             random_state=np.random.default_rng(seed)).confidence_interval
        assert timing.median_interval(x, seed) == pytest.approx((2.0, ci.low, ci.high), rel=1e-12)
    assert timing.median_interval(x) == timing.median_interval(x, 0)
    assert timing.median_interval([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)     # no spread to resample
    assert timing.median_interval([1, 2, 2]) != (2.0, 2.0, 2.0)


def test_the_eight_rounds_interval_depends_on_seed_count_and_method():
    """The premise of the tests below: seed, resample count and method each move the ends."""
    base = _scipy_interval(ROUNDS8, 0)
    assert not _same(base, _scipy_interval(ROUNDS8, 1))
    for kw in ({"n_resamples": 9999}, {"method": "BCa"}):
        assert not _same(base, _scipy_interval(ROUNDS8, 0, **kw))


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
