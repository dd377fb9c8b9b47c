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
    """Calls per sample so that one sample lasts about ``min_sample_s`` (after a warm-up call)."""
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
