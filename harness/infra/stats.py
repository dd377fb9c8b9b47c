"""Small fits shared by the analysers: a rate per step, a power law, a crossing in log T."""

from __future__ import annotations

import math

import numpy as np


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
