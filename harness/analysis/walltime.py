"""Wall time of the compiled forwards over T: the measured crossover, exponents, scaling.

Every registered family's timed variants (``Family.timed``: the RNN; attention on
Q = K = V = X, grid and mix only, the lessons' comparison; attention with its
three projections) are timed at each T by ``harness.infra.timing``'s one policy, in
interleaved rounds, so that a change of machine load hits every variant alike.
The counted crossover comes from the families' closed-form counts; the measured
one from where a variant's time overtakes the baseline's.
"""

from __future__ import annotations

import math
import os
import numpy as np
import pandas as pd

from harness import models
from harness.infra import timing
from harness.infra import stats
from harness.infra.stats import log_crossing, power_law, quadratic_crossing
from harness.infra.config import WallConfig


DEFAULT = WallConfig()


def timed_bytes(T, d):
    """Memory of the largest timed call of any variant at (T, d)."""
    return max(v.bytes(T, d) for _, v in models.variants().values())


def _calls(T, d, seed, dtype=np.float64, names=None):
    """{variant: a no-argument call of it on inputs from default_rng(seed)}, compiled first;
    every variant, or those in ``names``."""
    rng = np.random.default_rng(seed)
    calls = {}
    for name, (_, v) in models.variants().items():
        if names is not None and name not in names:
            continue
        v.call(*v.inputs(2, 2, rng, dtype))                   # compile outside the clock
        args = v.inputs(T, d, rng, dtype)
        calls[name] = (lambda f, a: lambda: f(*a))(v.call, args)
    return calls


def linear_families(d=DEFAULT.d):
    """The timed variants of the families whose every timed variant counts work linear in T
    (the recurrences): ``WallConfig.linear_T_values`` times these further. A count is a T^2
    + b T (``quadratic_crossing``), linear where doubling T doubles it. Registration order."""
    def linear(v):
        return all(math.isclose(v.macs(2 * T, d), 2 * v.macs(T, d), rel_tol=1e-12)
                   for T in (64, 1024))
    return tuple(v.name for f in models.families() if all(linear(v) for v in f.timed)
                 for v in f.timed)


def measure_wall_times(config=DEFAULT, T_values=None):
    """Wall time of every timed variant over T, in interleaved rounds (``harness.infra.timing``).

    Each round times every (variant, T) once, in a shuffled order: a change of the machine's
    load during the run hits every T alike, and shows in the rounds (so in the intervals of
    what is fitted across T) instead of bending the curve unseen, as it did when each T's
    rounds were taken one T after the other. ``config.linear_T_values`` (not with ``T_values``
    given) are timed, in the same rounds, for the ``linear_families`` only: there a call's
    fixed cost is a few per cent of the time (the LRU's ~1 ms against ~80 ms at T = 4096,
    d = 512), where a quadratic variant would take seconds a call.

    One row per (model, T): threads, ``seconds`` (the median of ``config.rounds`` rounds) with
    ``seconds_lo`` / ``seconds_hi`` (its 95 % bootstrap interval), seconds per step and MAC
    rate; ``macs`` counts every product the call does. The rounds themselves are kept in
    ``frame.attrs["samples"]`` (model, T, d, round, seconds) for the intervals of what is
    derived from them (``measured_crossover``, ``fit_exponents``).
    """
    from harness.infra import machine
    extra = () if T_values is not None else tuple(
        T for T in config.linear_T_values if T not in config.T_values)
    T_values = config.T_values if T_values is None else T_values
    variants = models.variants()
    linear = linear_families(config.d) if extra else ()
    rows, long = {}, []
    with machine.threads(config.threads):
        calls = {(name, T): f for T in T_values
                 for name, f in _calls(T, config.d, config.seed).items()}
        calls.update({(name, T): f for T in extra
                      for name, f in _calls(T, config.d, config.seed, names=linear).items()})
        every, _ = timing.time_interleaved(calls, config.rounds, config.min_sample_s,
                                           seed=config.seed)
        for T in sorted(set(T_values) | set(extra)):
            samples = {name: every[name, T] for name in variants if (name, T) in every}
            for name in samples:
                sec, lo, hi = timing.median_interval(samples[name], seed=T)
                macs = variants[name][1].macs(T, config.d)
                rows[name, T] = dict(model=name, T=T, d=config.d, threads=config.threads,
                                     seconds=sec, seconds_per_step=sec / T, macs=macs,
                                     gmacs_per_s=macs / sec / 1e9, seconds_lo=lo, seconds_hi=hi,
                                     rounds=config.rounds)
                long.extend(dict(model=name, T=T, d=config.d, round=r, seconds=float(x))
                            for r, x in enumerate(samples[name]))
    # one block per variant, as the tables read
    frame = pd.DataFrame([rows[name, T] for name in variants
                          for T in sorted(set(T_values) | set(extra)) if (name, T) in rows])
    frame.attrs["samples"] = pd.DataFrame(long)
    return frame


def noise_kernel(config=DEFAULT, T=256):
    """The callable the noise floor times under two labels: the baseline's forward at (T, d)."""
    calls = _calls(T, config.d, config.seed)
    return calls[config.baseline]


def matmul_rates(d, config=DEFAULT, T=None):
    """Multiply rates (GMAC/s) of the two products the families are made of, each timed by its
    own microbenchmark at width d: ``gemm`` the grid's (T x d) @ (d x T), ``gemv`` the
    recurrence's T dependent (d x d) @ (d,) steps. T defaults to 2d, past the counted crossover.
    Returns {"gemm_gmacs": ..., "gemv_gmacs": ...} with their 95 % intervals (``_lo``, ``_hi``)."""
    from harness.infra import machine
    from harness.kernels.blas import gemv_steps, matmul
    T = 2 * d if T is None else T
    rng = np.random.default_rng(config.seed)
    Q, K = rng.standard_normal((T, d)), rng.standard_normal((d, T))
    S = np.empty((T, T))
    W, h, out = rng.standard_normal((d, d)) / math.sqrt(d), rng.standard_normal(d), np.empty(d)
    fns = {"gemm": lambda: matmul(Q, K, S), "gemv": lambda: gemv_steps(W, h, out, T)}
    with machine.threads(config.threads):
        samples, _ = timing.time_interleaved(fns, max(config.rounds, 5), config.min_sample_s,
                                             seed=d)
    macs = {"gemm": T * T * d, "gemv": T * d * d}
    res = {}
    for k, s in samples.items():
        med, lo, hi = timing.median_interval(s, seed=d)
        res[f"{k}_gmacs"] = macs[k] / med / 1e9
        res[f"{k}_gmacs_lo"] = macs[k] / hi / 1e9          # slower time, lower rate
        res[f"{k}_gmacs_hi"] = macs[k] / lo / 1e9
    return res


def _crossing(pa, pr, T_max, extrapolate_max):
    """T where a_v T^pa[0] = a_base T^pr[0], or NaN when the fitted curves do not cross
    ahead (the variant's exponent not the larger) or cross outside [1, extrapolate_max x T_max]."""
    if not (math.isfinite(pa[0]) and math.isfinite(pr[0])) or pa[0] <= pr[0]:
        return math.nan
    # a T^p = b T^q  ->  log T = (log b - log a) / (p - q)
    logT = (pr[1] - pa[1]) / (pa[0] - pr[0])
    if not (0.0 <= logT <= math.log(extrapolate_max * T_max)):
        return math.nan
    return math.exp(logT)


def _crossings(w, rate, variant, base, config):
    """(measured_T, extrapolated_T, rate ratio, T_at) of one variant against the baseline."""
    Ts = w.index.to_numpy(dtype=float)
    r = np.log(w[variant] / w[base]).to_numpy()
    cross = log_crossing(Ts, r)
    if math.isnan(cross) and len(r) and r[0] >= 0:
        cross = Ts[0]          # already slower at the smallest T
    upper = Ts >= min(config.fit_min_T, Ts.max())
    pa = power_law(Ts[upper], w[variant].to_numpy()[upper])
    pr = power_law(Ts[upper], w[base].to_numpy()[upper])
    extra = _crossing(pa, pr, Ts.max(), config.extrapolate_max)
    # throughputs at the sampled T nearest the crossover (the largest T if none)
    at = cross if not math.isnan(cross) else extra
    T_at = int(Ts[np.argmin(np.abs(np.log(Ts) - math.log(at)))]
               if math.isfinite(at) and at > 0 else Ts.max())
    speed = float(rate.loc[T_at, variant] / rate.loc[T_at, base])
    return cross, extra, speed, T_at


def _rounds(samples, model):
    """One model's timing rounds (``times.attrs["samples"]`` at one d): (rounds, T), T ascending."""
    return samples[samples.model == model].pivot(index="round", columns="T", values="seconds")


def measured_crossover(times, config=DEFAULT, rates=None, resamples=stats.RESAMPLES):
    """Where each variant's measured time overtakes the baseline's, against the counted crossover.

    One row per (d, variant other than the baseline). ``measured_T``: log(t_v / t_base)
    interpolated linearly in log T between the two sampled T that bracket the
    sign change (NaN if the sweep does not bracket it; the first T if the variant
    is already slower there); ``measured_T_lo`` / ``_hi``: its 95 % interval, from
    resampling the timing rounds (the same rounds for every variant and T, as they
    were taken together; ``stats.bootstrap_interval``, NaN unless 95 % of the resamples
    bracket the crossing), when ``times.attrs["samples"]`` holds them.
    ``extrapolated_T``: the same from power laws fitted for T >= ``fit_min_T`` (used
    when the sweep ends first); NaN when fewer than two T are fitted, when the fitted
    curves do not cross, or when they cross below T = 1 or past ``extrapolate_max`` x
    the largest T sampled. ``counted_T``: where the closed-form counts cross (d for the
    grid, 2 T^2 d = 2 T d^2; none with the projections, which alone already cost 1.5 x
    the RNN). ``gemm_over_matvec``: the two calls' MAC rates at the sampled T nearest
    the crossover (``rate_at_T``), read off these same timings. ``predicted_T``: a
    prediction from rates measured apart (``matmul_rates``): the baseline's
    recurrence at the GEMV rate and its input products at the GEMM rate, the variant
    at the GEMM rate, so T = counted_T (1 + gemm / gemv) / 2; NaN without ``rates``.
    ``measured_over_counted`` is the crossover in units of d.
    """
    variants = models.variants()
    base = config.baseline
    samples = times.attrs.get("samples")
    rows = []
    for d, g in times.groupby("d"):
        wide = g.pivot(index="T", columns="model", values="seconds").sort_index()
        per_T = g.pivot(index="T", columns="model", values="gmacs_per_s").sort_index()
        s = samples[samples.d == d] if samples is not None and len(samples) else None
        for variant in [m for m in variants if m in wide.columns and m != base]:
            # the T both were timed at (``linear_T_values`` time the recurrences further)
            both = wide[[variant, base]].notna().all(axis=1)
            w, rate = wide[both], per_T[both]
            cross, extra, speed, T_at = _crossings(w, rate, variant, base, config)
            lo = hi = math.nan
            if s is not None:                         # the same rounds for every variant and T
                v, b = _rounds(s, variant), _rounds(s, base)
                Ts_both = v.columns.intersection(b.columns)
                v, b = v[Ts_both], b[Ts_both]
                Ts = v.columns.to_numpy(dtype=float)

                def crossing(rv, rb):                 # (resamples, rounds, T) each -> (resamples,)
                    gap = np.log(np.median(rv, axis=1) / np.median(rb, axis=1))
                    return np.array([log_crossing(Ts, row) for row in gap])
                lo, hi = stats.bootstrap_interval(crossing, v, b, seed=int(d),
                                                  resamples=resamples)
            counted = quadratic_crossing(lambda T: variants[variant][1].macs(T, d),
                                         lambda T: variants[base][1].macs(T, d))
            predicted = math.nan
            if rates is not None and math.isfinite(counted):
                predicted = counted * (1 + rates["gemm_gmacs"] / rates["gemv_gmacs"]) / 2
            rows.append(dict(
                d=d, variant=variant, counted_T=counted, measured_T=cross,
                extrapolated_T=extra,
                measured_over_counted=(cross if not math.isnan(cross) else extra) / d,
                gemm_over_matvec=speed, predicted_T=predicted, rate_at_T=T_at,
                measured_T_lo=lo, measured_T_hi=hi))
    return pd.DataFrame(rows)


def fit_exponents(times, min_T=DEFAULT.fit_min_T, resamples=stats.RESAMPLES):
    """The exponent p of time against T, per model, fitted for T >= min_T as what a kernel
    does: seconds = a + b T^p, a >= 0 the fixed cost of a call (its checks, its
    allocations), b T^p the work (``stats.offset_power_law``). A pure power law fitted where
    a is not negligible bends p below the work's own: the RNN at d = 512 and T = 128 spends
    ~10 % of a call on its fixed cost on an idle machine, the LRU loop 53-84 % in five quick
    reports of #27 (before its B-sized temporaries were cut), so that a fit ending at T = 2048
    identified p weakly; the quick report times the recurrences to 4096 for it.

    One row per (model, d) always: ``exponent`` (p), ``fixed_seconds`` (a),
    ``fixed_share`` and ``fixed_share_T_max`` (a over the time at T_min and at T_max: where
    the fit's range starts, and where the fixed cost has become negligible, p then read off
    the work alone); with two distinct T only, the straight line in log-log (a = 0); NaN
    with fewer. Each model over the T it was timed at from min_T (the recurrences further
    than the rest in the quick report: ``WallConfig.linear_T_values``). ``exponent_lo`` /
    ``_hi``: p's 95 % interval from resampling the rounds (``times.attrs["samples"]``, the
    same rounds at every T; ``stats.bootstrap_interval``), NaN without them, widened about p
    by ``lack_of_fit`` (``_lack_of_fit``: 1 where the medians scatter about the fitted curve
    no more than the rounds' noise allows, more where they do), so that it covers the
    model's misfit as well as the rounds' noise.
    """
    samples = times.attrs.get("samples")
    rows = []
    for (model, d), g in times.groupby(["model", "d"]):
        g = g[g["T"] >= min_T].sort_values("T")
        Ts = g["T"].to_numpy(dtype=float)
        three = np.unique(Ts).size >= 3
        if three:
            slope, a, _ = (float(z) for z in stats.offset_power_law(Ts, g["seconds"].to_numpy()))
        else:
            (slope, _), a = power_law(Ts, g["seconds"]), 0.0 if len(g) >= 2 else math.nan
        lo = hi = math.nan
        scale = 1.0
        if samples is not None and len(samples) and len(g) >= 2:
            s = samples[(samples.model == model) & (samples.d == d) & (samples["T"] >= min_T)]
            grid = _rounds(s, model)                                                 # (rounds, T)
            T_grid = grid.columns.to_numpy(dtype=float)
            x = np.log(T_grid)
            x = x - x.mean()
            medians = []

            def slopes(r):                                  # (resamples, rounds, T) -> (resamples,)
                med = np.median(r, axis=1)
                medians.append(med)
                if three:
                    return stats.offset_power_law(T_grid, med)[0]
                y = np.log(med)
                return (y - y.mean(axis=1, keepdims=True)) @ x / (x @ x)
            lo, hi = stats.bootstrap_interval(slopes, grid, seed=int(d), resamples=resamples)
            if three and medians and math.isfinite(lo):
                scale = _lack_of_fit(T_grid, np.median(grid.to_numpy(), axis=0), medians[0])
                lo, hi = slope - scale * (slope - lo), slope + scale * (hi - slope)
        rows.append(dict(model=model, d=d, exponent=slope, fixed_seconds=a,
                         fixed_share=a / float(g["seconds"].iloc[0]) if len(g) else math.nan,
                         fixed_share_T_max=a / float(g["seconds"].iloc[-1]) if len(g)
                         else math.nan,
                         T_min=int(g["T"].min()) if len(g) else math.nan,
                         T_max=int(g["T"].max()) if len(g) else math.nan, points=len(g),
                         exponent_lo=lo, exponent_hi=hi, lack_of_fit=scale))
    return pd.DataFrame(rows)


def _lack_of_fit(Ts, medians, resampled):
    """sqrt(chi^2 / (n - 3)), at least 1: the Birge ratio of a + b T^p fitted to the n
    ``medians`` (one per T), each residual ln(median / fit) in units of that median's
    bootstrap error (the spread of ln ``resampled`` (resamples, n) over the resamples); 1
    with n <= 3 or a median without spread. Where the model holds within the rounds' noise
    chi^2 / (n - 3) is about 1 (a kernel exactly a + b T: the median of 40 draws is 1.0);
    where the medians stray from the curve further than their noise (one round slowed by a
    neighbour at one T, a per-step cost that changes with T), the interval widens by it,
    as the PDG's scale factor does for measurements that disagree beyond their errors."""
    n = len(Ts)
    p, a, b = (float(z) for z in stats.offset_power_law(Ts, medians))
    se = np.log(resampled).std(axis=0)                                    # (n,)
    # a spread below 1e-12 is the rounding of identical logs (their mean is off by an ulp),
    # not a timing's noise: no unit to measure residuals in
    if n <= 3 or not (math.isfinite(p) and np.all(se > 1e-12)):
        return 1.0
    resid = np.log(medians / (a + b * Ts ** p))
    return max(1.0, math.sqrt(float(np.sum((resid / se) ** 2)) / (n - 3)))


def strong_scaling(config=DEFAULT, thread_counts=None):
    """Every variant at fixed (scaling_T, d) on 1..nproc threads (BLAS and Numba set together)."""
    from harness.infra import machine
    thread_counts = thread_counts or tuple(range(1, (os.cpu_count() or 1) + 1))
    T, d = config.scaling_T, config.d
    rows = []
    for n in thread_counts:
        with machine.threads(n):
            samples, _ = timing.time_interleaved(_calls(T, d, config.seed), config.rounds,
                                                 config.min_sample_s, seed=n)
        rows.extend(dict(model=name, T=T, d=d, threads=n, seconds=float(np.median(s)))
                    for name, s in samples.items())
    frame = pd.DataFrame(rows)
    one = frame[frame.threads == frame.threads.min()].set_index("model")["seconds"]
    frame["speedup"] = frame["model"].map(one) / frame["seconds"]
    frame["efficiency"] = frame["speedup"] / frame["threads"]
    return frame
