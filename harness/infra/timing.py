"""The one timing policy: warm-up, calibrated samples, interleaved rounds.

Every measured time in the harness (``harness depth``'s wall times, ``harness
compare``, the report, the asv suite's GEMM peak) goes through
``time_interleaved``:

1. each callable is called once (compiles, touches memory), then once more
   timed, to choose how many calls one sample holds (at least ``min_sample_s``);
2. ``rounds`` rounds follow; in each, every callable takes one sample, in an
   order shuffled from a fixed seed, so that a change of machine load between
   rounds hits every compared variant alike, never one of them;
3. a sample is the mean time of one call in it.

The caller reduces the samples (the median, usually) and keeps them beside
each other: compared figures come from the same rounds.
"""

from __future__ import annotations

import math
import time

import numpy as np


def calls_per_sample(fn, min_sample_s):
    """Calls per sample so that one sample lasts about ``min_sample_s`` (after a warm-up call).

    ``min_sample_s = 0``: one call per sample and no warm-up, for calls of seconds each
    (``harness compare --long``), whose kernels were compiled on a small input first.
    """
    if min_sample_s == 0:
        return 1
    fn()                                        # warm-up: compile, page in, fill caches
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    return max(1, int(math.ceil(min_sample_s / max(once, 1e-9))))


def time_interleaved(fns, rounds, min_sample_s, seed=0):
    """Seconds per call of each callable in ``fns`` ({name: fn}), one sample per round.

    Returns (samples, numbers): {name: float64 array of ``rounds`` samples} and
    {name: calls per sample}.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}.")
    names = list(fns)
    numbers = {k: calls_per_sample(fns[k], min_sample_s) for k in names}
    samples = {k: np.empty(rounds) for k in names}
    order = np.random.default_rng(seed)
    for r in range(rounds):
        for i in order.permutation(len(names)):
            k = names[i]
            f, n = fns[k], numbers[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[k][r] = (time.perf_counter() - t0) / n
    return samples, numbers


def median_seconds(fn, rounds=5, min_sample_s=0.1):
    """The median seconds per call of one callable (a single-variant ``time_interleaved``)."""
    samples, _ = time_interleaved({"fn": fn}, rounds, min_sample_s)
    return float(np.median(samples["fn"]))


CONFIDENCE = 0.95
RESAMPLES = 2000


def median_interval(samples, seed=0):
    """(median, low, high): the median of the rounds and its 95 % bootstrap interval
    (``scipy.stats.bootstrap``, percentile method); low = high = NaN under 3 rounds."""
    x = np.asarray(samples, dtype=float)
    med = float(np.median(x))
    if x.size < 3 or np.all(x == x[0]):
        return med, (med if x.size >= 3 else math.nan), (med if x.size >= 3 else math.nan)
    from scipy import stats
    ci = stats.bootstrap((x,), np.median, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                         method="percentile", random_state=seed).confidence_interval
    return med, float(ci.low), float(ci.high)


def paired_ratio(a, b, seed=0):
    """(median(a) / median(b), low, high): the ratio of two callables' medians, timed in the
    same rounds, and its 95 % interval from resampling the rounds in pairs (round r of a
    goes with round r of b, so a load that slowed both cancels); NaN bounds under 3 rounds."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"a and b must hold the same rounds, got {a.shape} and {b.shape}.")
    ratio = float(np.median(a) / np.median(b))
    if a.size < 3:
        return ratio, math.nan, math.nan
    idx = np.random.default_rng(seed).integers(0, a.size, size=(RESAMPLES, a.size))
    boot = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    lo, hi = np.quantile(boot, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return ratio, float(lo), float(hi)


def noise_floor(fn, rounds=9, min_sample_s=0.02, seed=0):
    """The same callable timed under two labels, interleaved: any ratio between them is noise.

    Returns {"noise_ratio": median(a) / median(b), "noise_ratio_lo"/"_hi": its 95 % interval
    from paired resampling of the rounds, "noise_floor": the relative difference below which
    two timings here are not told apart (the interval's larger distance from 1)}.
    """
    samples, _ = time_interleaved({"a": fn, "b": fn}, rounds, min_sample_s, seed=seed)
    ratio, lo, hi = paired_ratio(samples["a"], samples["b"], seed)
    return {"noise_ratio": ratio, "noise_ratio_lo": lo, "noise_ratio_hi": hi,
            "noise_floor": max(abs(hi - 1.0), abs(1.0 - lo), abs(ratio - 1.0))}


def compare_to_floor(ratio, lo, hi, floor):
    """Words for a ratio a/b with its interval, against the noise floor: a ranking only when
    the whole interval lies outside 1 +- floor."""
    if lo > 1.0 + floor:
        return "slower"
    if hi < 1.0 - floor:
        return "faster"
    return "no measurable difference"
