"""Small fits shared by the analysers: a rate per step, a power law, a crossing in log T,
and the one bootstrap interval of everything derived from timing rounds."""

from __future__ import annotations

import math

import numpy as np

LN10 = math.log(10.0)       # ln-norms are reported as log10: divide by this

CONFIDENCE = 0.95           # every interval in the harness is a 95 % one ...
RESAMPLES = 2000            # ... from this many bootstrap resamples
MIN_ROUNDS = 3              # fewer rounds than this: no interval (NaN)


def fit_rate(log_norm, fit_from):
    """Slope of ln-norm against k over k >= fit_from*(K), NaN with fewer than 2 finite points."""
    K = log_norm.shape[0]
    k = np.arange(1, K + 1, dtype=np.float64)
    lo = min(int(fit_from * K), max(K - 2, 0))
    kk, yy = k[lo:], log_norm[lo:]
    ok = np.isfinite(yy)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(kk[ok], yy[ok], 1)[0])


def power_law(T, seconds):
    """(exponent, log prefactor) of seconds = a T^p by least squares in log-log, NaN if underdetermined.

    Needs two distinct T with positive finite times; never warns.
    """
    T = np.asarray(T, dtype=float)
    y = np.asarray(seconds, dtype=float)
    ok = (T > 0) & np.isfinite(y) & (y > 0)
    if np.unique(T[ok]).size < 2:
        return math.nan, math.nan
    x, y = np.log(T[ok]), np.log(y[ok])
    xm, ym = x.mean(), y.mean()
    p = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    return p, float(ym - p * xm)


P_GRID = np.linspace(0.25, 4.0, 151)    # exponents tried by ``offset_power_law``: steps of 0.025
_REFINE = 30                            # golden-section steps about the best of the grid


def _solve_ab(suu, su, suv, sv, svv):
    """(a, b, sse) minimising sum (1 - a u - b v)^2 from its sums, a clipped at 0."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = suu * svv - suv * suv
        a = (su * svv - sv * suv) / det
        b = (suu * sv - suv * su) / det
        clip = ~(a >= 0)                                          # fixed cost 0: b alone
        a, b = np.where(clip, 0.0, a), np.where(clip, sv / svv, b)
        sse = a * a * suu + 2 * a * b * suv + b * b * svv - 2 * (a * su + b * sv)
    return a, b, np.where(np.isfinite(sse) & (b > 0), sse, np.inf)


def offset_power_law(T, seconds):
    """(p, a, b): seconds = a + b T^p with a >= 0 (a call's fixed cost) and b > 0, fitted by
    least squares on the relative residuals (seconds - fit) / seconds.

    ``seconds`` is (..., n), one fit per leading index (the bootstrap's resamples at once),
    over the n values of ``T``. For a given p the best (a, b) is a 2 x 2 linear solve (a
    clipped at 0); p is the best of ``P_GRID``, refined by golden-section search between
    its two neighbours. Each result is (...,); NaN where a row holds a time that is not
    positive and finite, or T has fewer than 3 distinct values (``power_law`` then).
    """
    T = np.asarray(T, dtype=float)
    y = np.asarray(seconds, dtype=float)
    ok = np.all(np.isfinite(y) & (y > 0), axis=-1)
    if np.unique(T).size < 3 or not (T > 0).all():
        nan = np.full(y.shape[:-1], np.nan)
        return nan, nan.copy(), nan.copy()
    u = 1.0 / np.where(ok[..., None], y, 1.0)                     # (..., n): 1 / seconds
    uu = u * u
    suu, su = uu.sum(axis=-1), u.sum(axis=-1)                     # (...,)
    Tp = T[None, :] ** P_GRID[:, None]                            # (m, n)
    _, _, sse = _solve_ab(suu[..., None], su[..., None], uu @ Tp.T, u @ Tp.T, uu @ (Tp * Tp).T)
    k = np.argmin(sse, axis=-1)                                   # (...,): the grid's best

    def fit_at(p):                                                # p (...,) -> a, b, sse
        Tq = T ** p[..., None]
        return _solve_ab(suu, su, (uu * Tq).sum(-1), (u * Tq).sum(-1), (uu * Tq * Tq).sum(-1))
    lo = P_GRID[np.maximum(k - 1, 0)]
    hi = P_GRID[np.minimum(k + 1, P_GRID.size - 1)]
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = fit_at(x1)[2], fit_at(x2)[2]
    for _ in range(_REFINE):
        left = f1 <= f2                                           # the minimum is in [lo, x2]
        hi, lo = np.where(left, x2, hi), np.where(left, lo, x1)
        x1n, x2n = hi - g * (hi - lo), lo + g * (hi - lo)
        fn = fit_at(np.where(left, x1n, x2n))[2]
        x1, x2 = np.where(left, x1n, x2), np.where(left, x1, x2n)
        f1, f2 = np.where(left, fn, f2), np.where(left, f1, fn)
    p = (lo + hi) / 2
    a, b, s = fit_at(p)
    good = ok & np.isfinite(s) & np.isfinite(np.take_along_axis(sse, k[..., None], -1)[..., 0])
    return tuple(np.where(good, z, np.nan) for z in (p, a, b))


def log_crossing(Ts, gap):
    """The first T where ``gap`` turns from negative to >= 0, linear in log T between the two
    samples that bracket it; NaN when it never does, or is already >= 0 at the first T."""
    Ts = np.asarray(Ts, dtype=float)
    gap = np.asarray(gap, dtype=float)
    for i in range(1, len(Ts)):
        if gap[i - 1] < 0 <= gap[i]:
            f = -gap[i - 1] / (gap[i] - gap[i - 1])
            return math.exp(math.log(Ts[i - 1]) + f * math.log(Ts[i] / Ts[i - 1]))
    return math.nan


def quadratic_crossing(f, g):
    """T > 0 where two counts f(T), g(T) of the form a T^2 + b T are equal, NaN if never.

    Every family's multiplications are such polynomials in T (the recurrences' are
    linear, attention's grid quadratic), so two evaluations give a and b exactly.
    """
    def coeffs(h):
        h1, h2 = h(1), h(2)
        a = (h2 - 2 * h1) / 2
        return a, h1 - a
    (a1, b1), (a2, b2) = coeffs(f), coeffs(g)
    if a1 == a2:
        return math.nan
    T = (b2 - b1) / (a1 - a2)
    return float(T) if T > 0 else math.nan


def bootstrap_interval(statistic, *samples, seed=0, resamples=RESAMPLES, confidence=CONFIDENCE):
    """(low, high): the percentile bootstrap interval of ``statistic`` over timing rounds.

    ``samples``: arrays whose first axis is the rounds (n of them, the same n in every one;
    computed in float64). Each resample draws n rounds with replacement, all resamples at
    once from ``default_rng(seed)``, and takes the same rounds of every sample: rounds timed
    together stay together (paired), so a load that slowed one round slows every sample in
    it alike. ``statistic(*resampled)`` gets each sample with a leading axis of resamples,
    (resamples, n, ...), and returns one value per resample, (resamples,). The same as
    ``scipy.stats.bootstrap(samples, ..., paired=True, method="percentile",
    random_state=np.random.default_rng(seed))``, up to the rounding of the quantiles.

    A resample whose statistic is NaN has none (a crossing that it does not bracket): the
    interval is NaN unless at least ``confidence`` of the resamples have one, and then the
    quantiles of those. NaN under ``MIN_ROUNDS`` rounds; a constant statistic is its own interval.
    """
    samples = [np.asarray(x, dtype=np.float64) for x in samples]
    n = samples[0].shape[0]
    if any(x.shape[0] != n for x in samples):
        raise ValueError(f"every sample must hold the same rounds, got "
                         f"{[x.shape[0] for x in samples]} rounds.")
    if n < MIN_ROUNDS:
        return math.nan, math.nan
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))   # (resamples, n)
    boot = np.asarray(statistic(*(x[idx] for x in samples)), dtype=np.float64)
    boot = boot[~np.isnan(boot)]
    if boot.size / resamples < confidence:
        return math.nan, math.nan
    if np.all(boot == boot[0]):              # no spread (even infinite): no quantile to take
        return float(boot[0]), float(boot[0])
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return float(lo), float(hi)
