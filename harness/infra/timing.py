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

from harness.infra import stats


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


def median_interval(samples, seed=0):
    """(median, low, high): the median of the rounds and its 95 % bootstrap interval
    (``stats.bootstrap_interval``); low = high = NaN under 3 rounds."""
    x = np.asarray(samples, dtype=float)
    low, high = stats.bootstrap_interval(lambda r: np.median(r, axis=1), x, seed=seed)
    return float(np.median(x)), low, high


def paired_ratio(a, b, seed=0):
    """(median(a) / median(b), low, high): the ratio of two callables' medians, timed in the
    same rounds, and its 95 % interval from resampling the rounds in pairs (round r of a
    goes with round r of b, so a load that slowed both cancels); NaN bounds under 3 rounds."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"a and b must hold the same rounds, got {a.shape} and {b.shape}.")
    low, high = stats.bootstrap_interval(
        lambda ra, rb: np.median(ra, axis=1) / np.median(rb, axis=1), a, b, seed=seed)
    return float(np.median(a) / np.median(b)), low, high


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

