"""The analysers' numbers, each computed another way.

Written against the mutants that ``make mutate`` found alive: every test here
computes its expected value independently of the code under test (a closed
form, a hand-built graph, a finite difference, a frame whose answer is known),
so that a changed operator, constant or column in the analyser makes it fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import os
import re
import stat
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from _fakes import Clock
from harness.infra import stats as _fit, files as _io, config, timing
from harness.analysis import walltime
from harness.models import ATTENTION, RECURRENCE
from harness.models import attention as att_family
from harness.models import rnn as rnn_family

LN10 = math.log(10.0)


# ============================================================================ _fit

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


# ============================================================================ timing



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


# ============================================================================ walltime

D = 100                         # counted crossover of the grid and mix against the RNN: T = d
TS = (10, 30, 100, 300, 1000, 3000)
GAP = (-3.0, -2.5, -2.0, -0.5, 1.5, 3.0)    # ln(t_attention / t_rnn): turns between 300 and 1000


def _times(gap=GAP, rounds=None):
    """The RNN at 1 us per step; attention exp(gap) times that; MAC rates that differ per T."""
    rows = []
    for T, g in zip(TS, gap):
        rows.append(dict(model=RECURRENCE, T=T, d=D, seconds=1e-6 * T, gmacs_per_s=1.0 + T / 1e4))
        rows.append(dict(model=ATTENTION, T=T, d=D, seconds=1e-6 * T * math.exp(g),
                         gmacs_per_s=2.0 + T / 100))
    frame = pd.DataFrame(rows)
    if rounds is not None:
        # attention's rounds in the reverse order: the ratio varies from round to round
        frame.attrs["samples"] = pd.DataFrame(
            [dict(model=r["model"], T=r["T"], d=D, round=i, seconds=r["seconds"] * f)
             for r in rows
             for i, f in enumerate(rounds if r["model"] == RECURRENCE else rounds[::-1])])
    return frame


def test_measured_crossover_between_two_samples_and_past_a_change_of_slope():
    cfg = dataclasses.replace(config.WALL, fit_min_T=100, extrapolate_max=100.0)
    row = walltime.measured_crossover(_times(), cfg).set_index("variant").loc[ATTENTION]
    # interpolated in log T between 300 and 1000, where the gap goes from -0.5 to 1.5
    measured = 300 * (1000 / 300) ** 0.25
    assert row.measured_T == pytest.approx(measured, rel=1e-12)
    # extrapolated from power laws fitted on T >= 100 only: the slope changes at T = 100
    fit = [t >= 100 for t in TS]
    logT = np.log(np.array(TS, float)[fit])
    rnn = np.polyfit(logT, np.log(1e-6 * np.array(TS, float)[fit]), 1)
    att = np.polyfit(logT, np.log(1e-6 * np.array(TS, float)[fit] * np.exp(np.array(GAP)[fit])), 1)
    assert att[0] > rnn[0]
    extrapolated = math.exp((rnn[1] - att[1]) / (att[0] - rnn[0]))
    assert row.extrapolated_T == pytest.approx(extrapolated, rel=1e-9)
    all_T = np.polyfit(np.log(TS), np.log(1e-6 * np.array(TS) * np.exp(GAP)), 1)
    assert math.exp((math.log(1e-6) - all_T[1]) / (all_T[0] - 1.0)) != pytest.approx(extrapolated,
                                                                                      rel=1e-3)
    assert row.counted_T == D
    assert row.measured_over_counted == pytest.approx(measured / D)
    # the rates at the sampled T nearest the crossover in log T (300, not 1000)
    assert row.rate_at_T == 300
    assert row.gemm_over_matvec == pytest.approx((2.0 + 3.0) / (1.0 + 0.03))
    assert math.isnan(row.predicted_T)


def test_crossover_already_past_at_the_first_T_and_never_reached():
    cfg = dataclasses.replace(config.WALL, fit_min_T=10)
    slower = walltime.measured_crossover(_times(gap=(0.5, 1, 1.5, 2, 2.5, 3)), cfg)
    row = slower.set_index("variant").loc[ATTENTION]
    assert row.measured_T == 10                          # already slower at the first T
    never = walltime.measured_crossover(_times(gap=(-3, -3, -3, -3, -3, -3)), cfg)
    row = never.set_index("variant").loc[ATTENTION]
    assert math.isnan(row.measured_T) and math.isnan(row.extrapolated_T)
    assert math.isnan(row.measured_over_counted)
    assert row.rate_at_T == 3000                         # no crossover: the largest T
    # the measured crossover missing, the ratio to d is the extrapolated one's
    ahead = walltime.measured_crossover(_times(gap=(-3, -2.6, -2.2, -1.8, -1.4, -1.0)), cfg)
    row = ahead.set_index("variant").loc[ATTENTION]
    assert math.isnan(row.measured_T) and math.isfinite(row.extrapolated_T)
    assert row.extrapolated_T > 3000
    assert row.measured_over_counted == pytest.approx(row.extrapolated_T / D)


def test_crossing_of_two_power_laws():
    # 2 T^2 = 50 T at T = 25; exp(log T) inside [1, 100 x 1000]
    pa, pr = (2.0, math.log(2.0)), (1.0, math.log(50.0))
    assert walltime._crossing(pa, pr, 1000, 100.0) == pytest.approx(25.0)
    assert math.isnan(walltime._crossing(pr, pa, 1000, 100.0))          # exponent not larger
    assert math.isnan(walltime._crossing((1.0, 0.0), (1.0, 1.0), 1000, 100.0))   # equal
    assert math.isnan(walltime._crossing(pa, pr, 0.2, 100.0))           # past 100 x T_max
    assert walltime._crossing(pa, pr, 0.25, 100.0) == pytest.approx(25.0)  # at the edge
    assert math.isnan(walltime._crossing((2.0, 1.0), (1.0, 0.5), 1000, 100.0))  # below T = 1
    assert walltime._crossing((2.0, 1.0), (1.0, 1.0), 1000, 100.0) == 1.0       # at T = 1
    assert math.isnan(walltime._crossing((math.nan, 0.0), pr, 1000, 100.0))
    assert math.isnan(walltime._crossing(pa, (math.nan, 0.0), 1000, 100.0))


def test_crossover_interval_from_identical_rounds_is_the_crossover_itself():
    cfg = dataclasses.replace(config.WALL, fit_min_T=100)
    row = walltime.measured_crossover(_times(rounds=[1.0, 1.0, 1.0]), cfg, resamples=50)
    row = row.set_index("variant").loc[ATTENTION]
    assert row.measured_T_lo == pytest.approx(row.measured_T) == row.measured_T_hi
    noisy = walltime.measured_crossover(_times(rounds=[0.8, 1.0, 1.25]), cfg, resamples=200)
    row = noisy.set_index("variant").loc[ATTENTION]
    assert row.measured_T_lo < row.measured_T_hi
    assert 300 <= row.measured_T_lo and row.measured_T_hi <= 1000
    no_rounds = walltime.measured_crossover(_times(), cfg).set_index("variant").loc[ATTENTION]
    assert math.isnan(no_rounds.measured_T_lo) and math.isnan(no_rounds.measured_T_hi)


def test_fit_exponents_fit_only_from_min_T():
    rows = [dict(model=m, T=T, d=8, seconds=c * (T if T < 100 else T ** p / 100 ** (p - 1)))
            for m, c, p in ((RECURRENCE, 1e-6, 1.0), (ATTENTION, 1e-8, 2.0))
            for T in (10, 30, 100, 300, 1000)]
    t = pd.DataFrame(rows)
    ex = walltime.fit_exponents(t, min_T=100).set_index("model")
    assert ex.loc[ATTENTION, "exponent"] == pytest.approx(2.0, abs=1e-12)
    assert ex.loc[RECURRENCE, "exponent"] == pytest.approx(1.0, abs=1e-12)
    assert (ex.T_min == 100).all() and (ex.T_max == 1000).all() and (ex.points == 3).all()
    assert ex.exponent_lo.isna().all() and ex.exponent_hi.isna().all()   # no rounds kept
    allT = walltime.fit_exponents(t, min_T=10).set_index("model")
    assert allT.loc[ATTENTION, "exponent"] < 1.9 and (allT.points == 5).all()
    t.attrs["samples"] = pd.DataFrame([dict(model=r["model"], T=r["T"], d=8, round=i,
                                            seconds=r["seconds"]) for r in rows for i in range(3)])
    same = walltime.fit_exponents(t, min_T=100, resamples=20).set_index("model")
    for m in (ATTENTION, RECURRENCE):
        assert same.loc[m, "exponent_lo"] == pytest.approx(same.loc[m, "exponent"], abs=1e-9)
        assert same.loc[m, "exponent_hi"] == pytest.approx(same.loc[m, "exponent"], abs=1e-9)


# ============================================================================ attention routes

def _attention_case(T=6, d=4, d_v=3, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, d))
    Wq, Wk = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    Wv = rng.normal(size=(d, d_v))
    return X, Wq, Wk, Wv


def _y_last(X, Wq, Wk, Wv, X_keys=None, X_values=None):
    """y_T with the keys and the values read from their own copies of X."""
    Xk = X if X_keys is None else X_keys
    Xv = X if X_values is None else X_values
    q = X[-1] @ Wq
    e = (Xk @ Wk) @ q / math.sqrt(Wq.shape[1])
    a = np.exp(e - e.max())
    a /= a.sum()
    return a @ (Xv @ Wv)


def _fd_route(X, Wq, Wk, Wv, j, route, h=1e-6):
    """d y_T / d x_j through one route only, by central differences (d_v, d_model)."""
    J = np.empty((Wv.shape[1], X.shape[1]))
    for c in range(X.shape[1]):
        P, M = X.copy(), X.copy()
        P[j, c] += h
        M[j, c] -= h
        if route == "value":                 # x_j moves inside v_j only
            yp, ym = _y_last(X, Wq, Wk, Wv, X_values=P), _y_last(X, Wq, Wk, Wv, X_values=M)
        else:                                # x_j moves inside k_j only
            yp, ym = _y_last(X, Wq, Wk, Wv, X_keys=P), _y_last(X, Wq, Wk, Wv, X_keys=M)
        J[:, c] = (yp - ym) / (2 * h)
    return J


def test_each_attention_route_matches_its_own_finite_difference():
    X, Wq, Wk, Wv = _attention_case()
    Jv, Js = att_family.path_jacobians(X, Wq, Wk, Wv)
    T = X.shape[0]
    assert Jv.shape == Js.shape == (T - 1, Wv.shape[1], X.shape[1])
    for j in range(T - 1):
        np.testing.assert_allclose(Jv[j], _fd_route(X, Wq, Wk, Wv, j, "value"), atol=1e-8)
        np.testing.assert_allclose(Js[j], _fd_route(X, Wq, Wk, Wv, j, "score"), atol=1e-8)


def test_attention_path_frame_reads_each_route_from_its_closed_form():
    X, Wq, Wk, Wv = _attention_case(T=7, d=4, d_v=4)
    f = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv, seed=5, input_scale=2.0)
    T = X.shape[0]
    q = X[-1] @ Wq
    e = (X @ Wk) @ q / 2.0                                   # sqrt(d_k) = 2
    a = np.exp(e - e.max())
    a /= a.sum()
    V = X @ Wv
    y = a @ V
    g = Wk @ q / 2.0
    sig_v = np.linalg.svd(Wv, compute_uv=False)[0]
    assert f.distance.tolist() == list(range(1, T))
    for _, r in f.iterrows():
        j = T - 1 - int(r.distance)                          # x_{T-k}, 0-based
        # value route alpha_Tj Wv^T: spectral norm alpha_Tj sigma_max(Wv)
        assert r.log10_value == pytest.approx(math.log10(a[j] * sig_v), abs=1e-12)
        # score route, rank one: alpha_Tj ||v_j - y_T|| ||Wk q_T|| / sqrt(d_k)
        score = a[j] * np.linalg.norm(V[j] - y) * np.linalg.norm(g)
        assert r.log10_score == pytest.approx(math.log10(score), abs=1e-12)
        total = np.linalg.svd(a[j] * Wv.T + a[j] * np.outer(V[j] - y, g), compute_uv=False)[0]
        assert r.log10_norm == pytest.approx(math.log10(total), abs=1e-12)
        assert r.log10_spectral == r.log10_norm
    assert (f.model == ATTENTION).all() and (f["T"] == T).all() and (f.d == 4).all()
    assert (f.seed == 5).all() and (f.input_scale == 2.0).all() and f.log10_linear.isna().all()
    assert f.rho.isna().all() and f.log10_probe.isna().all() and f.log10_bound.isna().all()


def test_attention_path_summary_fits_every_distance_against_a_flat_theory():
    k = np.arange(1, 9)
    g = pd.DataFrame({"distance": k, "log10_norm": 0.5 - 0.01 * k})
    s = att_family.path_summary(g, fit_from=0.9)          # no transient: fit_from is ignored
    assert s["fitted_rate"] == pytest.approx(-0.01 * LN10, abs=1e-12)
    assert s["theory_rate"] == 0.0
    assert all(math.isnan(s[c]) for c in ("fitted_rate_probe", "bound_rate", "bound_respected",
                                          "log10_transient"))


# ============================================================================ RNN path summary

def _rnn_rows(norm, rho=0.8, sigma=1.6, activation="identity", probe=None):
    k = np.arange(1, len(norm) + 1, dtype=float)
    return pd.DataFrame({"distance": k, "log10_norm": norm,
                         "log10_probe": norm if probe is None else probe,
                         "log10_linear": k * math.log10(rho), "log10_bound": k * math.log10(sigma),
                         "sigma_max": sigma, "rho": rho, "activation": activation})


def test_rnn_path_summary_closed_forms():
    k = np.arange(1, 11, dtype=float)
    # a transient above rho^k that peaks at k = 3, then the rate log(0.8) per step
    norm = k * math.log10(0.8) + np.array([0.1, 0.3, 0.4, 0.2, 0, 0, 0, 0, 0, 0])
    probe = norm - 1.0 + 0.001 * k
    s = rnn_family.path_summary(_rnn_rows(norm, probe=probe), fit_from=0.5)
    assert s["fitted_rate"] == pytest.approx(math.log(0.8), abs=1e-12)
    assert s["fitted_rate_probe"] == pytest.approx(math.log(0.8) + 0.001 * LN10, abs=1e-12)
    assert s["theory_rate"] == pytest.approx(math.log(0.8), abs=1e-15)
    assert s["bound_rate"] == pytest.approx(math.log(1.6), abs=1e-12)
    assert s["log10_transient"] == pytest.approx(0.4, abs=1e-12)
    assert s["bound_respected"] is True
    tanh = rnn_family.path_summary(_rnn_rows(norm, activation="tanh"), fit_from=0.5)
    assert math.isnan(tanh["theory_rate"]) and tanh["bound_rate"] == s["bound_rate"]


@pytest.mark.parametrize("excess,respected", [(0.5e-9, True), (2e-9, False), (-1.0, True)])
def test_rnn_bound_is_respected_within_one_part_in_a_billion(excess, respected):
    k = np.arange(1, 9, dtype=float)
    norm = k * math.log10(0.5)                   # well below the bound k log10 0.9 ...
    norm[2] = 3 * math.log10(0.9) + excess       # ... except at k = 3
    s = rnn_family.path_summary(_rnn_rows(norm, rho=0.5, sigma=0.9), fit_from=0.5)
    assert s["bound_respected"] is respected


def test_rnn_bound_fails_on_the_rate_alone():
    # every point under the bound, but the fitted rate above it: not respected
    k = np.arange(1, 11, dtype=float)
    norm = -5.0 + k * math.log10(1.5)
    s = rnn_family.path_summary(_rnn_rows(norm, rho=1.2, sigma=1.2), fit_from=0.5)
    assert s["fitted_rate"] > s["bound_rate"] and s["bound_respected"] is False


# ============================================================================ _io: atomic writes, by failure

class _HalfWriter:
    """A file whose write puts half the bytes down, then fails as a full disk would."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_atomic_write_failing_halfway_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "decay.csv"
    _io.atomic_write_text(target, "old,contents\n1,2\n")
    real_fdopen = os.fdopen
    with mock.patch.object(_io.os, "fdopen", lambda fd, mode: _HalfWriter(real_fdopen(fd, mode))):
        with pytest.raises(OSError, match="No space"):
            _io.atomic_write_text(target, "new,contents\n" * 1000)
    assert target.read_text() == "old,contents\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decay.csv"]


@pytest.mark.parametrize("step", ["fsync", "chmod", "replace"])
def test_atomic_write_failing_at_each_later_step_keeps_the_old_file(tmp_path, step):
    target = tmp_path / "f.txt"
    target.write_text("old")

    def fail(*a, **k):
        raise OSError(errno.EIO, f"{step} failed")
    with mock.patch.object(_io.os, step, fail):
        with pytest.raises(OSError, match=f"{step} failed"):
            _io.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_write_interrupted_leaves_no_temporary(tmp_path):
    target = tmp_path / "f.txt"

    def interrupt(*a):
        raise KeyboardInterrupt
    with mock.patch.object(_io.os, "fsync", interrupt):
        with pytest.raises(KeyboardInterrupt):
            _io.atomic_write_bytes(target, b"x")
    assert list(tmp_path.iterdir()) == []


def _with_umask(mask, fn, *args):
    old = os.umask(mask)
    try:
        return fn(*args)
    finally:
        os.umask(old)


def test_atomic_write_makes_a_readable_file_with_the_exact_bytes(tmp_path):
    path = _with_umask(0o027, _io.atomic_write_bytes, tmp_path / "b.bin", b"\x00\x01data\xff")
    assert path == tmp_path / "b.bin"
    assert path.read_bytes() == b"\x00\x01data\xff"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640           # 0o666 less the umask
    open_to_all = _with_umask(0, _io.atomic_write_bytes, tmp_path / "c.bin", b"c")
    assert stat.S_IMODE(open_to_all.stat().st_mode) == 0o666
    _io.atomic_write_text(tmp_path / "t.txt", "ρ = 0.9")
    assert (tmp_path / "t.txt").read_bytes() == "ρ = 0.9".encode("utf-8")


def test_umask_is_read_without_changing_it():
    old = os.umask(0o037)
    try:
        assert _io.umask() == 0o037
        assert _io.umask() == 0o037
    finally:
        os.umask(old)


# ============================================================================ report captions
# Each caption is given frames whose numbers are known, and must state those numbers. The
# numbers are read out of the sentence whatever its wording; values that a wrong row, column
# or window would give instead are chosen far apart, so that they cannot pass by rounding.

_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")


def _numbers(text):
    return [float(m.replace(",", "").replace("−", "-")) for m in _NUMBER.findall(text)]


def _states(text, value, places):
    """``text`` prints ``value`` to ``places`` decimals (10^x counts as x)."""
    tol = 0.5 * 10.0 ** -places + 1e-9
    assert any(abs(v - value) <= tol for v in _numbers(text)), (value, text)


def _lacks(text, value, places):
    tol = 0.5 * 10.0 ** -places + 1e-9
    assert not any(abs(v - value) <= tol for v in _numbers(text)), (value, text)


def _decay_frames(respected=(True, False, True)):
    K = 8
    rows = []
    far_value = {("orthogonal", 1.0, "identity", 0.9): -12.3, ("orthogonal", 1.0, "tanh", 0.9): -23.4,
                 ("orthogonal", 1.0, "identity", 1.0): -77.7, ("orthogonal", 1.0, "tanh", 1.0): -88.8}
    for i, (weight, scale, act, rho) in enumerate(
            [(w, s, a, r) for w in ("orthogonal", "gaussian") for s in (1.0, 4.0)
             for a in ("identity", "tanh") for r in (0.9, 1.0)]):
        M = far_value.get((weight, scale, act, rho), -31.0 - 4.1 * i)
        for k in range(1, K + 1):
            # k = K - 1 has a value of its own: a caption reading the wrong distance shows it
            rows.append(dict(model=RECURRENCE, weight=weight, input_scale=scale, activation=act,
                             rho=rho, distance=k, log10_norm=M * k / K if k != K - 1 else -55.5))
    att = [-1, -2, -6, -4, -4, -4, -4, -4, -1, -7, -8, -12]       # distances 1..12
    for scale, vals in ((1.0, att), (4.0, [-40.0] * 12)):
        for k, v in enumerate(vals, start=1):
            rows.append(dict(model=ATTENTION, weight="gaussian", input_scale=scale,
                             activation="softmax", rho=np.nan, distance=k, log10_norm=float(v)))
    summary = [dict(model=ATTENTION, activation="softmax", input_scale=4.0, ln_rate=0.0456,
                    bound_respected=np.nan),
               dict(model=ATTENTION, activation="softmax", input_scale=1.0, ln_rate=-0.0123,
                    bound_respected=np.nan)]
    summary += [dict(model=RECURRENCE, activation="tanh", input_scale=1.0, ln_rate=-0.1,
                     bound_respected=b) for b in respected]
    summary += [dict(model=RECURRENCE, activation="identity", input_scale=1.0, ln_rate=-0.1,
                     bound_respected=False)]
    rows = rows[::-1]                  # gaussian and input-scale-4 rows first: filters must hold
    return {"decay": pd.DataFrame(rows), "decay_summary": pd.DataFrame(summary)}


def test_decay_caption_states_the_rows_it_names():
    from harness.report import captions
    cap = captions.caption_decay(_decay_frames())
    _states(cap, 8, 0)                                   # the farthest distance
    _states(cap, -12.3, 1)                               # linear RNN, rho = 0.9, k = 8
    _states(cap, 8 * math.log10(0.9), 1)                 # its theory
    _states(cap, -23.4, 1)                               # tanh, rho = 0.9, k = 8
    for wrong in (-77.7, -88.8, -55.5):                  # rho = 1.0 rows, k = 7
        _lacks(cap, wrong, 1)
    # attention at input scale 1: mean over k <= 12/4 and over k > 3*12/4
    _states(cap, -3.0, 1)
    _states(cap, -9.0, 1)
    _lacks(cap, -40.0, 1)
    _states(cap, 10 ** 6, 1)                             # the factor between the two
    _states(cap, -0.0123, 4)
    _lacks(cap, 0.0456, 4)
    _states(cap, math.log(0.9), 4)
    _states(cap, 2, 0)
    _states(cap, 3, 0)                                   # 2 of the 3 tanh rows respect it
    every = captions.caption_decay(_decay_frames(respected=(True, True, True)))
    assert every != cap
    _states(every, 3, 0)


def test_clipping_caption_states_the_largest_and_the_smallest_radius():
    from harness.report import captions
    c = pd.DataFrame({"rho": [1.5, 0.5, 1.0], "threshold": 7.0,
                      "log10_total_before": [12.3, -2.1, 0.4],
                      "log10_total_after": [0.8451, -2.1, 0.4],
                      "log10_far_over_near_before": [-3.4, -7.6, 0.1],
                      "log10_far_over_near_after": [-3.6, -7.8, 0.2]})
    cap = captions.caption_clipping({"clipping": c})
    for value, places in ((7, 0), (1.5, 1), (12.3, 1), (0.8451, 1), (-3.4, 1), (-3.6, 1),
                          (0.5, 1), (-7.8, 1)):
        _states(cap, value, places)
    for wrong in (-7.6, 0.1, 0.2, -2.1):
        _lacks(cap, wrong, 1)


def test_depth_caption_states_first_and_last_T():
    from harness.report import captions
    rows = []
    for T, a_span, a_path, a_sc in ((50, 9, 2, 23), (10, 9, 2, 17), (100, 11, 3, 29)):
        rows.append(dict(model=RECURRENCE, T=T, d=16, span=3 * T, max_path=2 * T + 1,
                         scalar_span=7 * T))
        rows.append(dict(model=ATTENTION, T=T, d=16, span=a_span, max_path=a_path,
                         scalar_span=a_sc))
    cap = captions.caption_depth({"depth": pd.DataFrame(rows)})
    for value in (16, 30, 300, 10, 100, 21, 201, 11, 3, 17, 29):
        _states(cap, value, 0)
    for wrong in (150, 101, 23, 50):                    # the middle T, where the frame starts
        _lacks(cap, wrong, 0)


def _schedule_caption_frame():
    rows = []
    Ps = (1, 4, 20, 100, 1000)
    series = {(RECURRENCE, "scalar"): ([500, 130, 62, 60, 60], 60),
              (ATTENTION, "scalar"): ([900, 230, 51, 12, 9], 9),
              (RECURRENCE, "element"): ([600, 161, 84, 84, 84], 84),
              (ATTENTION, "element"): ([700, 181, 41, 19, 18], 18)}
    ok = iter([True] * 17 + [False] * 3)
    for (model, grain), (times, span) in series.items():
        for P, t in zip(Ps, times):
            rows.append(dict(model=model, T=20, d=4, grain=grain, P=P, time=t, span=span,
                             bounds_ok=next(ok)))
    return pd.DataFrame(rows).sample(frac=1.0, random_state=1)


def test_schedule_caption_states_steps_spans_and_plateaus():
    from harness.report import captions
    cap = captions.caption_schedule({"schedule": _schedule_caption_frame()})
    # T, d; the RNN at P = T; its span and the first P within 1 % of its floor; attention's
    # steps on one processor and at the largest P; the element grain's plateau, in units of d
    for value in (20, 4, 62, 60, 100, 9, 84, 5, 17):
        _states(cap, value, 0)
    for wrong in (130, 12, 600, 161, 18, 700):
        _lacks(cap, wrong, 0)


def test_plateau_is_the_first_P_within_the_tolerance_of_the_floor():
    from harness.analysis import schedule
    frame = pd.DataFrame(dict(model="m", T=1, grain="g", P=[1000, 1, 10, 100], span=7,
                              time=[100, 400, 101, 100.5]))
    pl = schedule.plateau_P(frame, tol=0.01).iloc[0]
    assert pl.plateau_P == 10 and pl.floor == 100 and pl.span == 7
    assert schedule.plateau_P(frame, tol=0.006).iloc[0].plateau_P == 100  # 100.5 <= 100.6
    assert schedule.plateau_P(frame, tol=0.004).iloc[0].plateau_P == 1000
    two = pd.concat([frame, frame.assign(grain="h", time=[50, 50, 50, 50])])
    pl = schedule.plateau_P(two, tol=0.01).set_index("grain")
    assert pl.loc["h", "plateau_P"] == 1 and pl.loc["g", "plateau_P"] == 10


@pytest.mark.parametrize("measured,extrapolated,T,ratio", [(200.0, 900.0, 200.0, 3.125),
                                                           (np.nan, 500.0, 500.0, 500 / 64)])
def test_work_caption_counted_and_measured_crossover(measured, extrapolated, T, ratio):
    from harness.report import captions, numbers
    d = 64
    w = pd.DataFrame([dict(model=m, T=t, d=d, macs=(2 * t * d * d if m == RECURRENCE else 2 * t * t * d))
                      for m in (RECURRENCE, ATTENTION) for t in (10, 30, 300, 1000)])
    assert numbers.counted_crossover(w) == pytest.approx(d)          # between 30 and 300
    x = pd.DataFrame([dict(d=d, variant=ATTENTION + "+proj", counted_T=np.nan, measured_T=11.0,
                           extrapolated_T=np.nan, gemm_over_matvec=0.5, measured_T_lo=np.nan,
                           measured_T_hi=np.nan, predicted_T=np.nan),
                      dict(d=d, variant=ATTENTION, counted_T=d, measured_T=measured,
                           extrapolated_T=extrapolated, gemm_over_matvec=7.4,
                           measured_T_lo=np.nan, measured_T_hi=np.nan, predicted_T=np.nan)])
    cap = captions.caption_work({"work": w, "crossover": x})
    for value, places in ((d, 0), (T, 0), (ratio, 1)):
        _states(cap, value, places)
    _lacks(cap, 11.0, 0)
    if not math.isnan(measured):
        _lacks(cap, extrapolated, 0)


def test_maps_caption_states_the_diagonal_counts_and_the_row_maxima():
    from harness.report import captions
    s = pd.DataFrame({"setting": ["length 1", "length 3", "projected"], "rows": [6, 6, 6],
                      "rows_max_on_diagonal": [5, 6, 2], "mean_self_weight": [0.411, 0.822, 0.133]})
    rm = pd.DataFrame([dict(d_k=dk, scaled=sc, row_max=v, draws=50) for dk, sc, v in
                       ((8, False, 0.611), (8, True, 0.322), (64, False, 0.744),
                        (64, True, 0.355), (512, False, 0.977), (512, True, 0.488))])
    cap = captions.caption_maps({"attention_diagonal": s, "row_max": rm})
    for value, places in ((5, 0), (6, 0), (2, 0), (0.411, 3), (0.822, 3), (0.611, 3), (0.977, 3),
                          (0.322, 3), (0.488, 3), (8, 0), (512, 0)):
        _states(cap, value, places)
    for wrong in (0.133, 0.744, 0.355):
        _lacks(cap, wrong, 3)
    assert cap.index("0.611") < cap.index("0.977") < cap.index("0.322") < cap.index("0.488")


def test_additive_caption_states_the_row_maxima_and_both_routes():
    from harness.report import captions
    rows = []
    for i in range(3):
        for j in range(3):
            rows.append(dict(setting="tanh", i=i, j=j, weight=[[0.3, 0.35, 0.35], [0.31, 0.38, 0.31],
                                                               [0.33, 0.33, 0.34]][i][j], uniform=1 / 3))
            rows.append(dict(setting="no tanh", i=i, j=j,
                             weight=[0.2, 0.3, 0.5][j] + [0.0, 0.003, 0.007][i], uniform=1 / 3))
    r = pd.DataFrame({"va_scale": [4.0, 0.5, 1.0], "value_norm": [1.1111, 2.8303, 2.2222],
                      "score_norm": [3.3333, 0.2556, 0.6666],
                      "value_over_score": [0.33, 11.07, 3.33]})
    cap = captions.caption_additive({"additive_maps": pd.DataFrame(rows), "additive_routes": r})
    for value, places in ((0.34, 3), (0.38, 3), (1 / 3, 3), (2.8303, 4), (0.2556, 4), (11.07, 1),
                          (4, 0), (1.1111, 4), (3.3333, 4), (0.33, 1), (0.007, 3)):
        _states(cap, value, places)
    for wrong in (2.2222, 0.6666):
        _lacks(cap, wrong, 4)


def test_wall_caption_states_threads_exponents_and_the_rnn_step():
    from harness.report import captions
    w = pd.DataFrame([dict(model=m, T=T, d=32, threads=3, seconds_per_step=sps)
                      for m, T, sps in ((RECURRENCE, 10, 1e-6), (RECURRENCE, 20, 4e-6),
                                        (RECURRENCE, 40, 2.5e-6), (ATTENTION, 10, 9e-6))])
    e = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "exponent": [1.0312, 1.8765],
                      "exponent_lo": np.nan, "exponent_hi": np.nan})
    cap = captions.caption_wall({"wall_times": w, "exponents": e})
    for value, places in ((3, 0), (32, 0), (1.03, 2), (1.88, 2), (2.5, 1)):
        _states(cap, value, places)
    one = captions.caption_wall({"wall_times": w.assign(threads=1), "exponents": e})
    assert one != cap.replace("3 threads", "1 thread") or "threads" not in one


def test_history_caption_states_the_newest_commit():
    from harness.report import captions
    h = pd.DataFrame([dict(commit=c, series=s, T=T, d=128, seconds=sec)
                      for c, s, T, sec in (("old", "rnn forward", 1024, 0.5),
                                           ("old", "attention forward", 1024, 0.6),
                                           ("new", "rnn forward", 64, 0.0071),
                                           ("new", "rnn forward", 1024, 0.00123),
                                           ("new", "attention forward", 1024, 0.00456),
                                           ("new", "attention backward", 1024, 0.00789))])
    cap = captions.caption_history({"asv_history": h})
    for value, places in ((2, 0), (128, 0), (1024, 0), (1.23, 2), (4.56, 2)):
        _states(cap, value, places)
    for wrong in (7.1, 7.89, 500.0, 600.0):
        _lacks(cap, wrong, 2)
    alone = captions.caption_history({"asv_history": h[h.series != "attention forward"]})
    _lacks(alone, 1.23, 2)                               # no pair at the newest commit: no tail
    single = pd.concat([h[h.commit == "old"], h[(h.commit == "new") & (h.series == "rnn forward")
                                                & (h["T"] == 64)]])
    solo = captions.caption_history({"asv_history": single})
    for wrong in (500.0, 600.0, 7.1):                    # the newest commit alone has no pair
        _lacks(solo, wrong, 2)


# ============================================================================ schedule, by hand

def _hand_graph():
    """Five ops whose task graph is known:

        op0 matmul (2, 3), k = 4 ──> op1 add (2, 3) ──> op2 row sum (2,), n = 3
                                              └──> op3 tanh (2, 3), read row by row ──row 0──> op4 mul (3,)
    """
    from harness.analysis import trace
    g = trace.Graph()
    Op = trace.Op
    g.ops = [Op(0, "matmul", "w", (2, 3), 4, []),
             Op(1, "add", "add", (2, 3), 1, [(0, -1)]),
             Op(2, "sum", "sum", (2,), 3, [(1, -1)]),
             Op(3, "tanh", "tanh", (2, 3), 1, [(1, -1)], split=True),
             Op(4, "mul", "mul", (3,), 1, [(3, 0)])]
    import types
    return types.SimpleNamespace(model="hand", T=2, d=3, graph=g)


def test_task_graph_of_a_hand_built_graph():
    from harness.analysis import schedule
    tr = _hand_graph()
    tg = schedule.task_graph(tr, "scalar")
    # tasks: op0, op1, op2, op3 row 0, op3 row 1, op4
    assert tg.level_ptr.tolist() == [0, 3, 4, 6, 7, 8, 9]
    # matmul: 24 products, then a tree over k = 4 (12, 6); the sum of 3: levels 2 and 2;
    # tanh's 6 elements split into two rows of 3
    assert tg.level_size.tolist() == [24, 12, 6, 6, 2, 2, 3, 3, 3]
    assert tg.succ_ptr.tolist() == [0, 1, 4, 4, 5, 5, 5]
    assert tg.succ_idx.tolist() == [1, 2, 3, 4, 5]
    assert tg.indeg.tolist() == [0, 1, 1, 1, 1, 1]
    assert tg.prio.tolist() == [6, 3, 2, 2, 1, 1]       # levels from the task to the end
    assert (tg.work, tg.span, tg.grain) == (61, 6, "scalar")
    el = schedule.task_graph(tr, "element")
    # one processor per element: k = 4 steps of the matmul, n - 1 = 2 of the sum
    assert el.level_size.tolist() == [6, 6, 6, 6, 6, 2, 2, 3, 3, 3]
    assert (el.work, el.span) == (43, 7)
    with pytest.raises(ValueError, match="grain"):
        schedule.task_graph(tr, "row")


def test_schedule_of_a_hand_built_graph():
    from harness.analysis import schedule
    tr = _hand_graph()
    with mock.patch.object(schedule.depth, "trace_model", side_effect=AssertionError):
        f = schedule.schedule("hand", 2, 3, (1, 7, 100), "scalar", tr=tr).set_index("P")
    # P = 7: 24 products take 4 steps (7+7+7+3), 12 take 2, then 6, the add 6: 8 steps;
    # then the sum's 2 with tanh's two rows 3 + 2 of 3 (step 9), and the rest in step 10
    assert f.time.tolist() == [61, 10, 6]
    assert (f.work == 61).all() and (f.span == 6).all() and (f.grain == "scalar").all()
    assert (f.model == "hand").all() and (f["T"] == 2).all() and (f.d == 3).all()
    assert f.lower.tolist() == [61.0, 61 / 7, 6.0]
    assert f.upper.tolist() == [67.0, 61 / 7 + 6, 0.61 + 6]
    assert f.speedup.tolist() == [1.0, 6.1, 61 / 6]
    assert f.efficiency.tolist() == pytest.approx([1.0, 6.1 / 7, 61 / 600])
    assert f.time_over_span.tolist() == pytest.approx([61 / 6, 10 / 6, 1.0])
    assert f.bounds_ok.all()
    with pytest.raises(ValueError, match="P"):
        schedule.schedule("hand", 2, 3, (0,), "scalar", tr=tr)


def test_schedule_defaults_and_table():
    from harness.analysis import depth, schedule
    assert schedule.default_processors(3) == (1, 3, 6, 9, 10, 12, 100, 800, 1000, 10**4, 10**5,
                                              10**6, 10**7)
    assert schedule.default_processors(1000)[:6] == (1, 10, 100, 800, 1000, 2000)
    f = schedule.schedule("rnn", 3, 2)
    assert f.P.tolist() == list(schedule.default_processors(2))
    traces = {}
    table = schedule.schedule_table([3, 4], 2, (1, 5), grains=("scalar", "element"),
                                    families=("rnn",), traces=traces)
    assert sorted(traces) == [("rnn", 3, 2), ("rnn", 4, 2)]
    assert list(zip(table["T"], table.grain, table.P)) == [
        (3, "scalar", 1), (3, "scalar", 5), (3, "element", 1), (3, "element", 5),
        (4, "scalar", 1), (4, "scalar", 5), (4, "element", 1), (4, "element", 5)]
    one = schedule.schedule("rnn", 4, 2, (1, 5), "element", tr=depth.trace_model("rnn", 4, 2))
    pd.testing.assert_frame_equal(table.iloc[6:].reset_index(drop=True), one)


# ============================================================================ depth, closed forms

@pytest.mark.parametrize("T,d", [(3, 2), (5, 4), (2, 7)])
def test_rnn_depth_row_closed_forms(T, d):
    from harness.analysis import depth
    from harness.analysis.trace import clog2
    row = depth.depth_table([T], d, families=(RECURRENCE,)).iloc[0]
    # X W_xh^T, then per step h W_hh^T, + x_t, tanh
    assert row.ops == 1 + 3 * T
    assert row.macs == row.macs_all == 2 * T * d * d and row.flops == 4 * T * d * d
    assert row.span == row.max_path == 3 * T
    assert row.scalar_work == 4 * T * d * d     # (2d - 1) d per product, d adds, d tanh
    assert row.scalar_span == T * (clog2(d) + 3)
    assert row.parallelism == row.scalar_work / row.scalar_span
    assert (row.model, row["T"], row.d) == (RECURRENCE, T, d)


@pytest.mark.parametrize("T,d", [(3, 2), (6, 4)])
def test_attention_depth_row_closed_forms(T, d):
    from harness.analysis import depth
    from harness.analysis.trace import clog2
    row = depth.depth_table([T], d, families=(ATTENTION,)).iloc[0]
    assert row.ops == 11          # Q K V, Q K^T, / sqrt(d_k), max, -, exp, sum, /, A V
    assert row.macs == 2 * T * T * d and row.macs_all == 2 * T * T * d + 3 * T * d * d
    assert row.span == 9 and row.max_path == 2
    work = (3 * T * d * (2 * d - 1) + T * T * (2 * d - 1) + T * T + T * (T - 1) + T * T + T * T
            + T * (T - 1) + T * T + T * d * (2 * T - 1))
    assert row.scalar_work == work
    assert row.scalar_span == 7 + 2 * clog2(d) + 3 * clog2(T)


def test_count_table_marks_the_lessons_parts():
    from harness.analysis import depth
    c = depth.count_table([3], 2, families=(RECURRENCE, ATTENTION))
    got = {(r.model, r.part): (r.macs, r.flops, r.closed_form, r.in_lesson_comparison)
           for r in c.itertuples()}
    assert got[(RECURRENCE, "input")] == (12, 24, 12, True)
    assert got[(RECURRENCE, "recurrence")] == (12, 24, 12, True)
    assert got[(ATTENTION, "projections")] == (36, 72, 36, False)
    assert got[(ATTENTION, "grid")] == (18, 36, 18, True)
    assert got[(ATTENTION, "mix")] == (18, 36, 18, True)
    assert (c["T"] == 3).all() and (c.d == 2).all()


def test_traces_are_cached_by_model_T_and_d():
    from harness.analysis import depth
    traces = {}
    a = depth.traced(traces, RECURRENCE, 3, 2)
    assert depth.traced(traces, RECURRENCE, 3, 2) is a and list(traces) == [(RECURRENCE, 3, 2)]
    b = depth.traced(traces, RECURRENCE, 3, 3)
    assert b is not a and b.d == 3
    assert depth.traced(None, RECURRENCE, 3, 2) is not a


def test_trace_memory_check_names_the_form_T_and_d():
    from harness.analysis import depth
    from harness import models
    need = models.get(ATTENTION).tracing.forms[0].trace_memory_bytes(50, 8)
    depth.check_trace_memory(ATTENTION, 50, 8, available=need)        # exactly enough
    with pytest.raises(MemoryError, match=r"attention at T=50, d=8 needs about [\d,]+ bytes"):
        depth.check_trace_memory(ATTENTION, 50, 8, available=need - 1)
    with pytest.raises(ValueError, match="T=50, d=8"):
        with mock.patch.object(depth, "available_memory_bytes", lambda: need - 1):
            depth.trace_model(ATTENTION, 50, 8)


# ============================================================================ report: asv results

def _asv_file(folder, name, payload):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(payload if isinstance(payload, str) else __import__("json").dumps(payload))


def test_asv_results_are_read_into_one_row_per_timing(tmp_path):
    from harness.report import history
    box = tmp_path / "box"
    params = [["'rnn'", "'attention'"], ["64", "256"]]
    _asv_file(box, "machine.json", {"results": {"x.time_y": [[9.0], []]}})     # not results
    _asv_file(box, "a.json", {
        "commit_hash": "0123456789abcdef", "date": 1_700_000_000_000,
        "result_columns": ["result", "params", "version"],
        "results": {
            "k.Kernels.time_forward": [[1.0, 2.0, None, float("nan")], params, "v1"],
            "k.Kernels.track_bytes": [[5.0], [["1"]], "v1"],                  # not a timing
            "time_top_level": [[0.25], [], "v1"],                              # asv's bare form
            "k.Missing.time_none": [None, params, "v1"],
            "k.Old.time_scalar": [0.125, [], "v1"]}})                          # not a list
    _asv_file(box, "b.json", "{not json")
    _asv_file(box, "c.json", [1, 2, 3])
    _asv_file(box, "d.json", {"results": [1, 2]})
    _asv_file(tmp_path / "other", "e.json", {
        "commit_hash": "fedcba98", "date": 1_700_086_400_000,
        "results": {"k.Kernels.time_backward": [[3.0, 4.0], [["'rnn'"], ["64", "256"]]]}})
    h = history.read_asv_results(str(tmp_path))
    assert list(h.columns) == ["benchmark", "params", "commit", "date", "seconds"]
    got = [(r.benchmark, r.params, r.commit, r.seconds) for r in h.itertuples()]
    assert got == [("k.Kernels.time_forward", "'rnn', 64", "01234567", 1.0),
                   ("k.Kernels.time_forward", "'rnn', 256", "01234567", 2.0),
                   ("time_top_level", "", "01234567", 0.25),
                   ("k.Old.time_scalar", "", "01234567", 0.125),
                   ("k.Kernels.time_backward", "'rnn', 64", "fedcba98", 3.0),
                   ("k.Kernels.time_backward", "'rnn', 256", "fedcba98", 4.0)]
    assert h.date.iloc[0] == pd.Timestamp("2023-11-14 22:13:20")
    assert h.date.iloc[-1] == pd.Timestamp("2023-11-15 22:13:20")
    empty = history.read_asv_results(str(tmp_path / "nothing here"))
    assert len(empty) == 0 and list(empty.columns) == list(h.columns)


def test_kernel_history_keeps_one_width_batch_and_dtype_oldest_first():
    from harness.report import history
    rows = []
    for commit, day in (("new", 3), ("old", 1), ("mid", 2)):
        for bench, params, sec in (
                ("b.Kernels.time_forward", "'rnn', 64, 256, 1, 'float64'", 1.0 * day),
                ("b.Kernels.time_forward", "'attention', 64, 256, 1, 'float64'", 2.0 * day),
                ("b.Kernels.time_backward", "'rnn', 1024, 256, 1, 'float64'", 3.0 * day),
                ("b.Kernels.time_forward", "'rnn', 64, 128, 1, 'float64'", 99.0),     # other d
                ("b.Kernels.time_forward", "'rnn', 64, 256, 8, 'float64'", 99.0),     # batch
                ("b.Kernels.time_forward", "'rnn', 64, 256, 1, 'float32'", 99.0),     # dtype
                ("b.Kernels.time_forward", "'rnn', 64", 99.0),                        # too short
                ("b.Kernels.time_forward", "rnn, )(", 99.0),                          # unreadable
                ("b.Other.time_forward", "'rnn', 64, 256, 1, 'float64'", 99.0)):      # not Kernels
            rows.append(dict(benchmark=bench, params=params, commit=commit,
                             date=pd.Timestamp("2026-01-01") + pd.Timedelta(days=day),
                             seconds=sec))
    k = history.kernel_history(pd.DataFrame(rows))
    assert list(k.columns) == ["commit", "date", "series", "T", "d", "seconds"]
    assert list(k.commit) == ["old"] * 3 + ["mid"] * 3 + ["new"] * 3
    assert list(k.series[:3]) == ["attention forward", "rnn backward", "rnn forward"]
    assert list(k["T"][:3]) == [64, 1024, 64] and (k.d == 256).all()
    assert list(k.seconds) == [2.0, 3.0, 1.0, 4.0, 6.0, 2.0, 6.0, 9.0, 3.0]
    assert list(k.index) == list(range(9))
    other = history.kernel_history(pd.DataFrame(rows), d=128)
    assert list(other.seconds) == [99.0] * 3 and list(other.series) == ["rnn forward"] * 3
    assert len(history.kernel_history(pd.DataFrame(rows), batch=8)) == 3
    assert len(history.kernel_history(pd.DataFrame(rows), dtype="float32")) == 3


# ============================================================================ gradpath

def test_summarise_reads_each_configuration_sorted_by_distance():
    from harness.analysis import gradpath
    rows = []
    for rho, M in ((0.5, 1.0), (0.9, 2.0)):
        for k in (3, 1, 4, 2):                                   # stored out of order
            rows.append(dict(model=RECURRENCE, weight="orthogonal", activation="identity",
                             rho=rho, input_scale=1.0, T=5, d=2, seed=0, gate_bias=np.nan,
                             sigma_max=rho * (5 - k),
                             distance=k, log10_norm=-M * k, log10_probe=-M * k,
                             log10_linear=k * math.log10(rho), log10_bound=k * math.log10(rho)))
    s = gradpath.summarise(pd.DataFrame(rows), fit_from=0.0)
    assert list(s.columns) == gradpath.SUMMARY and len(s) == 2
    for r, (rho, M) in zip(s.itertuples(), ((0.5, 1.0), (0.9, 2.0))):
        assert r.rho == rho
        assert r.sigma_max == rho * 4                            # the k = 1 row's
        assert r.log10_near == -M and r.log10_far == -4 * M
        assert r.ln_rate == pytest.approx(-M * LN10)
        assert r.ln_rate_theory == pytest.approx(math.log(rho))


def test_sweep_jobs_and_stage_memory():
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, rhos=(0.5, 2.0), activations=("tanh",),
                              weights=("gaussian",), input_scales=(1.0, 3.0), Ts=(5, 7), ds=(2,),
                              models=(RECURRENCE, ATTENTION), measure="probe")
    jobs = gradpath.sweep_configurations(cfg)
    rnn = [(j["T"], j["input_scale"], j["rho"]) for j in jobs if j["model"] == RECURRENCE]
    assert rnn == [(5, 1.0, 0.5), (5, 1.0, 2.0), (5, 3.0, 0.5), (5, 3.0, 2.0),
                   (7, 1.0, 0.5), (7, 1.0, 2.0), (7, 3.0, 0.5), (7, 3.0, 2.0)]
    assert [j["model"] for j in jobs[:6]] == [RECURRENCE] * 4 + [ATTENTION] * 2
    stages = gradpath.stage_memory_bytes(7, 2, cfg)
    assert set(stages) >= {"RNN trajectory", "attention path Jacobians"}
    need = max(stages.values())
    with mock.patch.object(gradpath, "stage_memory_bytes", lambda T, d, c: {"big stage": need}):
        gradpath.check_config_memory(cfg, available=need)
        with pytest.raises(MemoryError, match=r"T=5, d=2: stage 'big stage' needs [\d,]+ bytes"):
            gradpath.check_config_memory(cfg, available=need - 1)
    frame, summary = gradpath.decay_sweep(cfg)
    assert len(summary) == 12 and len(frame) == 4 * 4 + 4 * 6 + 2 * 4 + 2 * 6
    calls = []
    gradpath.decay_sweep(dataclasses.replace(cfg, Ts=(5,)), progress=lambda i, n, j: calls.append((i, n)))
    assert calls == [(i, 6) for i in range(6)]


@pytest.mark.parametrize("fit_from,ok", [(0.0, True), (0.99, True), (1.0, False), (-0.01, False)])
def test_fit_from_must_lie_in_zero_one(fit_from, ok):
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, Ts=(5,), ds=(2,), fit_from=fit_from)
    if ok:
        gradpath.validate_config(cfg)
    else:
        with pytest.raises(ValueError, match="fit_from"):
            gradpath.validate_config(cfg)


# ============================================================================ trace

def test_tree_levels_and_clog2_closed_forms():
    from harness.analysis.trace import clog2, tree_levels
    assert [clog2(n) for n in (1, 2, 3, 4, 5, 1024, 1025)] == [0, 1, 2, 2, 3, 10, 11]
    assert tree_levels(1) == [] and tree_levels(2) == [1] and tree_levels(5) == [2, 1, 1]
    for n in range(1, 70):
        lv = tree_levels(n)
        assert sum(lv) == n - 1 and len(lv) == clog2(n)


@pytest.mark.parametrize("kind,shape,inner,scalar,element,macs", [
    ("matmul", (2, 3), 4, [24, 12, 6], [6, 6, 6, 6], 24),
    ("matmul", (5,), 1, [5], [5], 5),
    ("sum", (2,), 3, [2, 2], [2, 2], 0),
    ("max", (3, 1), 5, [6, 3, 3], [3, 3, 3, 3], 0),
    ("sum", (4,), 1, [], [], 0),
    ("mul", (2, 3), 1, [6], [6], 6),
    ("add", (), 1, [1], [1], 0),
])
def test_op_levels_and_multiplications(kind, shape, inner, scalar, element, macs):
    from harness.analysis.trace import Op
    op = Op(0, kind, kind, shape, inner, [])
    assert op.levels("scalar") == scalar and op.levels("element") == element
    assert op.macs == macs and op.numel == (math.prod(shape) if shape else 1)


def test_op_rows_only_when_split():
    from harness.analysis.trace import Op
    assert Op(0, "add", "add", (4, 3), 1, []).rows == 1
    assert Op(0, "add", "add", (4, 3), 1, [], split=True).rows == 4
    assert Op(0, "add", "add", (2, 4, 3), 1, [], split=True).rows == 4
    assert Op(0, "add", "add", (3,), 1, [], split=True).rows == 1


def test_recorded_ops_are_named_after_what_they_multiply():
    from harness.analysis import trace
    g = trace.Graph(weight_parts={"W": "weights"})
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (2, 2), ("d_model", "d_k"))
    Q = X @ W                                      # a named weight
    E = Q @ np.swapaxes(Q, -1, -2)                 # every pair of positions
    Y = (E / 2.0 - E.max(axis=-1, keepdims=True)) @ Q          # contracts over positions
    Z = np.tanh(X @ np.ones((2, 2))) * 3.0 + np.exp(-Y) - Y.sum(axis=-1, keepdims=True)
    kinds = [(op.kind, op.part, op.shape, op.inner) for op in g.ops]
    assert kinds == [("matmul", "weights", (3, 2), 2), ("matmul", "grid", (3, 3), 2),
                     ("div", "div", (3, 3), 1), ("max", "max", (3, 1), 3),
                     ("sub", "sub", (3, 3), 1), ("matmul", "mix", (3, 2), 3),
                     ("matmul", "product", (3, 2), 2), ("tanh", "tanh", (3, 2), 1),
                     ("mul", "mul", (3, 2), 1), ("neg", "neg", (3, 2), 1),
                     ("exp", "exp", (3, 2), 1), ("add", "add", (3, 2), 1),
                     ("sum", "sum", (3, 1), 2), ("sub", "sub", (3, 2), 1)]
    assert Z.axes == ("T", "d_k") and E.axes == ("T", "T") and Y.axes == ("T", "d_k")
    assert [op.op_depth for op in g.ops] == [1, 2, 3, 3, 4, 5, 1, 2, 3, 6, 7, 8, 6, 9]
    # position 1 (row 0 of X) is one op into Q's row 0, two into E's row and column 0
    inf = math.inf
    assert E.dist.tolist() == [[2, 2, 2], [2, inf, inf], [2, inf, inf]]
    # scalar depth: Q 1 + log2 2 = 2, E 4, E / 2 5, its max 4 + log2 3 = 6, the - 7, A V 7 + 1 + 2
    assert (E.sdepth == 4).all() and (Y.sdepth == 10).all()


def test_row_reads_split_the_op_and_wait_for_that_row_only():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (4, 3), ("T", "d_model"), source_row=1)
    H = np.tanh(X)
    r = H[-1]
    assert r.deps == [(0, 3)] and g.ops[0].split and r.shape == (3,) and r.axes == ("d_model",)
    assert H[np.int64(2)].deps == [(0, 2)]
    assert H[..., 1, :].deps == [(0, 1)]
    whole = H[1:3]
    assert whole.deps == [(0, -1)] and whole.shape == (2, 3)
    col = H[:, 0]
    assert col.deps == [(0, -1)] and col.shape == (4,)
    assert X[2].deps == [] and X.dist[1].tolist() == [0, 0, 0] and np.isinf(X.dist[0]).all()
    assert trace._single_row(2, 1) is None
    assert trace._single_row((slice(None), 1), 2) is None
    assert trace._single_row((1, 0), 2) is None
    assert trace._single_row((Ellipsis, 2, slice(None)), 3) == 2
    assert trace._single_row((0, 2), 3) is None
    assert trace._single_row((slice(None), 2, slice(None)), 3) == 2


def test_reductions_over_the_last_axis_only():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (4, 3), ("T", "d_model"), source_row=0)
    s = X.sum(axis=1)
    assert s.shape == (4,) and s.axes == ("T",) and g.ops[-1].inner == 3
    k = X.max(keepdims=True)
    assert k.shape == (4, 1) and k.axes == ("T", "1")
    assert k.sdepth.ravel().tolist() == [2, 2, 2, 2] and k.dist.ravel()[0] == 1
    with pytest.raises(TypeError, match="last axis"):
        X.sum(axis=0)
    with pytest.raises(TypeError, match="last axis"):
        X.max(axis=0)
    # a kept axis takes the other operand's label when broadcast
    assert (X - k).axes == ("T", "d_model") and (k - X).axes == ("T", "d_model")


# ============================================================================ clipping

def _plain_clipping(rho, threshold, T, d, weight, activation, input_scale, seed):
    """The experiment by plain back-propagation in float64 (no log scaling): the same draws
    (W_hh from ``unit_recurrent_matrix``, W_xh and X from default_rng([seed, 1]), the
    probe u from PROBE_SEED), g = dl/dW_xh for l = u.h_T, and its terms per step."""
    from harness.models.rnn import PROBE_SEED, unit_recurrent_matrix
    W = rho * unit_recurrent_matrix(d, weight, seed)
    rng = np.random.default_rng([seed, 1])
    W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * input_scale
    u = np.random.default_rng(PROBE_SEED).normal(size=d)
    u /= np.linalg.norm(u)
    phi = np.tanh if activation == "tanh" else (lambda a: a)
    h, A = np.zeros(d), []
    for t in range(T):
        a = W @ h + W_xh @ X[t]
        A.append(a)
        h = phi(a)
    dh = u.copy()
    terms = [None] * T
    for t in range(T - 1, -1, -1):
        da = dh * ((1 - np.tanh(A[t]) ** 2) if activation == "tanh" else 1.0)
        terms[t] = np.outer(da, X[t])
        dh = W.T @ da
    g = sum(terms)
    c = min(1.0, threshold / np.linalg.norm(g))
    n = [np.linalg.norm(term) for term in terms]
    return np.linalg.norm(g), c, n[T - 2], n[0]


@pytest.mark.parametrize("weight,activation", [("orthogonal", "identity"), ("gaussian", "tanh")])
def test_clipping_experiment_against_plain_backpropagation(weight, activation):
    from harness.analysis import clipping
    T, d, scale, seed = 6, 3, 1.5, 4
    norms = [_plain_clipping(rho, 1.0, T, d, weight, activation, scale, seed)[0]
             for rho in (0.5, 1.5, 3.0)]
    tau = math.sqrt(min(norms) * max(norms))            # clips some radii and not others
    f = clipping.clipping_experiment(rhos=(0.5, 1.5, 3.0), threshold=tau, T=T, d=d, weight=weight,
                                     activation=activation, input_scale=scale, seed=seed)
    assert f.rho.tolist() == [0.5, 1.5, 3.0]
    for r in f.itertuples():
        norm, c, near, far = _plain_clipping(r.rho, tau, T, d, weight, activation, scale, seed)
        lg = math.log10
        assert r.log10_total_before == pytest.approx(lg(norm), abs=1e-10)
        assert r.log10_total_after == pytest.approx(lg(c * norm), abs=1e-10)
        assert r.log10_clip_factor == pytest.approx(lg(c), abs=1e-10)
        assert r.log10_near_before == pytest.approx(lg(near), abs=1e-10)
        assert r.log10_far_before == pytest.approx(lg(far), abs=1e-10)
        assert r.log10_near_after == pytest.approx(lg(c * near), abs=1e-10)
        assert r.log10_far_after == pytest.approx(lg(c * far), abs=1e-10)
        assert r.log10_far_over_near_before == pytest.approx(lg(far / near), abs=1e-10)
        assert r.log10_far_over_near_after == pytest.approx(lg(far / near), abs=1e-10)
        assert 0 <= r.residual < 1e-12
        assert (r.weight, r.activation, r.T, r.d, r.threshold) == (weight, activation, T, d, tau)
    assert (f.log10_clip_factor < 0).any() and (f.log10_clip_factor == 0).any()


def test_clip_by_norm_closed_forms():
    from harness.analysis import clipping
    G = np.array([[3.0, 0.0], [0.0, 4.0]])                  # norm 5
    same, ln = clipping.clip_by_norm(G, 2.0, 10.0)          # g = e^2 G, norm 5 e^2 > 10
    assert same is G and ln == pytest.approx(2.0 + math.log(10.0) - (2.0 + math.log(5.0)))
    assert clipping.clip_by_norm(G, 0.0, 10.0)[1] == 0.0    # norm 5 <= 10: unchanged
    assert clipping.clip_by_norm(G, 0.0, 5.0)[1] == 0.0     # exactly at the threshold
    assert clipping.clip_by_norm(np.zeros((2, 2)), 1.5, 1.0)[1] == 1.5   # zero: nothing to clip
    assert clipping._ln(0.0) == -math.inf and clipping._ln(math.e) == pytest.approx(1.0)
    ln_a = np.log(np.array([1.0, 2.0, 4.0]))
    D = np.arange(6.0).reshape(3, 2)
    X = np.arange(9.0).reshape(3, 3) - 4
    want = sum(np.exp(ln_a[t] - 1.0) * np.outer(D[t], X[t]) for t in range(3))
    np.testing.assert_allclose(clipping._sum_terms(ln_a, D, X, 1.0), want, rtol=1e-14)


def test_atomic_write_uses_a_hidden_temporary_beside_the_destination(tmp_path):
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((src, dst))
        return real(src, dst)
    with mock.patch.object(_io.os, "replace", spy):
        _io.atomic_write_text(tmp_path / "depth.csv", "x")
    (src, dst), = seen
    src = os.fspath(src)
    assert os.path.dirname(src) == str(tmp_path) and os.fspath(dst) == str(tmp_path / "depth.csv")
    assert os.path.basename(src).startswith(".depth.csv.") and src.endswith(".tmp")


# ============================================================================ _io: a set of files, by failure

def _folder_with(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


def test_output_set_replaces_the_old_files_together_and_leaves_no_stage(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a", "b.csv": "old b", "keep.txt": "k"})

    def run():
        with _io.output_set(folder) as files:
            assert files.stage.parent == folder
            assert files.stage.name.startswith(f"{_io.STAGING_PREFIX}{os.getpid()}-")
            files.write_text("a.csv", "new a")
            files.write_csv("b.csv", pd.DataFrame({"x": [1, 2], "y": ["p", "q"]}))
            files.write_bytes("c.bin", b"\x00c")
            assert [n for n in _listing(folder) if not n.startswith(_io.STAGING_PREFIX)] == \
                ["a.csv", "b.csv", "keep.txt"]                                  # nothing moved yet
    _with_umask(0, run)
    assert _listing(folder) == ["a.csv", "b.csv", "c.bin", "keep.txt"]
    assert (folder / "a.csv").read_text() == "new a"
    assert (folder / "b.csv").read_text() == "x,y\n1,p\n2,q\n"
    assert (folder / "c.bin").read_bytes() == b"\x00c" and (folder / "keep.txt").read_text() == "k"
    for name in ("a.csv", "b.csv", "c.bin"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o666
    files = _io.OutputSet(folder)
    _with_umask(0o077, files.write_text, "d.txt", "d")
    assert stat.S_IMODE((files.stage / "d.txt").stat().st_mode) == 0o600
    files.discard()
    assert _listing(folder) == ["a.csv", "b.csv", "c.bin", "keep.txt"]


def test_output_set_failing_halfway_puts_the_old_set_back(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a", "b.csv": "old b"})
    real = os.replace

    def fail_on_b(src, dst):
        if os.fspath(dst) == str(folder / "b.csv") and _io.STAGING_PREFIX in os.fspath(src) \
                and ".old" not in os.fspath(src):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)
    with mock.patch.object(_io.os, "replace", fail_on_b):
        with pytest.raises(OSError, match="No space"):
            with _io.output_set(folder) as files:
                files.write_text("a.csv", "new a")
                files.write_text("b.csv", "new b")
                files.write_text("c.csv", "new c")
    assert _listing(folder) == ["a.csv", "b.csv"]
    assert (folder / "a.csv").read_text() == "old a" and (folder / "b.csv").read_text() == "old b"


def test_output_set_failing_on_a_new_name_removes_what_it_moved(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a"})
    real = os.replace

    def fail_on_c(src, dst):
        if os.fspath(dst) == str(folder / "c.csv"):
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst)
    with mock.patch.object(_io.os, "replace", fail_on_c):
        with pytest.raises(OSError, match="I/O"):
            with _io.output_set(folder) as files:
                files.write_text("a.csv", "new a")
                files.write_text("b.csv", "new b")
                files.write_text("c.csv", "new c")
    assert _listing(folder) == ["a.csv"] and (folder / "a.csv").read_text() == "old a"


def test_output_set_interrupted_before_commit_changes_nothing(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a"})
    with pytest.raises(KeyboardInterrupt):
        with _io.output_set(folder) as files:
            files.write_text("a.csv", "new a")
            raise KeyboardInterrupt
    assert _listing(folder) == ["a.csv"] and (folder / "a.csv").read_text() == "old a"


def test_output_set_removes_the_stages_of_dead_runs_only(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(proc.stdout)
    for name in (f"{_io.STAGING_PREFIX}{dead}-x1", f"{_io.STAGING_PREFIX}{os.getpid()}-x2",
                 f"{_io.STAGING_PREFIX}{dead}", "other-123-x"):
        (tmp_path / name).mkdir()
    with _io.output_set(tmp_path) as files:
        files.write_text("a.csv", "a")
    assert _listing(tmp_path) == sorted([f"{_io.STAGING_PREFIX}{os.getpid()}-x2",
                                         f"{_io.STAGING_PREFIX}{dead}", "a.csv", "other-123-x"])


def test_median_seconds_defaults_five_rounds_of_a_tenth_of_a_second():
    clock = Clock()
    f = clock.fn("f", 0.03)
    with mock.patch.object(timing.time, "perf_counter", clock):
        assert timing.median_seconds(f) == pytest.approx(0.03)
    assert len(clock.calls) == 2 + 5 * 4            # calibration, then 5 rounds of ceil(0.1/0.03)


# ============================================================================ walltime on a fake timer

class _FakeRounds:
    """Stands in for ``timing.time_interleaved``: records its calls and returns the samples
    ``sample(name, call_number)`` gives, one per round."""

    def __init__(self, sample):
        self.sample, self.calls = sample, []

    def __call__(self, fns, rounds, min_sample_s, seed=0):
        self.calls.append((dict(fns), rounds, min_sample_s, seed))
        n = len(self.calls)
        return ({k: np.array([self.sample(k, n, r) for r in range(rounds)], float) for k in fns},
                {k: 1 for k in fns})


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


def test_matmul_rates_from_their_own_timings():
    cfg = dataclasses.replace(config.WALL, rounds=3, min_sample_s=0.01, seed=2, threads=1)
    fake = _FakeRounds(lambda k, n, r: 2e-3 if k == "gemm" else 5e-3)
    with mock.patch.object(walltime.timing, "time_interleaved", fake):
        res = walltime.matmul_rates(8, cfg)
    fns, rounds, min_s, seed = fake.calls[0]
    assert sorted(fns) == ["gemm", "gemv"] and (rounds, min_s, seed) == (5, 0.01, 8)  # 5 at least
    T, d = 16, 8                                                # T = 2d by default
    assert res["gemm_gmacs"] == pytest.approx(T * T * d / 2e-3 / 1e9)
    assert res["gemv_gmacs"] == pytest.approx(T * d * d / 5e-3 / 1e9)
    for k in ("gemm", "gemv"):                                   # identical rounds: no spread
        assert res[f"{k}_gmacs_lo"] == pytest.approx(res[f"{k}_gmacs"])
        assert res[f"{k}_gmacs_hi"] == pytest.approx(res[f"{k}_gmacs"])
    fake = _FakeRounds(lambda k, n, r: [1e-3, 2e-3, 4e-3, 3e-3, 5e-3, 6e-3][r])
    with mock.patch.object(walltime.timing, "time_interleaved", fake):
        res = walltime.matmul_rates(4, dataclasses.replace(cfg, rounds=6), T=10)
    assert fake.calls[0][1] == 6
    assert res["gemm_gmacs"] == pytest.approx(10 * 10 * 4 / 3.5e-3 / 1e9)
    assert res["gemv_gmacs"] == pytest.approx(10 * 4 * 4 / 3.5e-3 / 1e9)
    assert res["gemm_gmacs_lo"] < res["gemm_gmacs"] < res["gemm_gmacs_hi"]
    # exactly: GMAC/s = MACs / seconds / 1e9, the interval's ends from the rounds' bootstrap at seed d
    med, lo, hi = timing.median_interval([1e-3, 2e-3, 4e-3, 3e-3, 5e-3, 6e-3], seed=4)
    assert (res["gemm_gmacs"], res["gemm_gmacs_lo"], res["gemm_gmacs_hi"]) == (
        400 / med / 1e9, 400 / hi / 1e9, 400 / lo / 1e9)
    # the timed calls are the two products: a (T x d)(d x T) GEMM and T normalised GEMV steps
    gemm, gemv = fake.calls[0][0]["gemm"], fake.calls[0][0]["gemv"]
    gemm()
    gemv()


def test_measure_wall_times_from_the_rounds():
    from harness import models
    cfg = dataclasses.replace(config.WALL, T_values=(4, 8), d=3, rounds=3, threads=1)
    names = list(models.variants())
    fake = _FakeRounds(lambda k, n, r: (names.index(k) + 1) * 1e-3 * n * (1 + 0.5 * r))
    with mock.patch.object(walltime.timing, "time_interleaved", fake):
        t = walltime.measure_wall_times(cfg)
    assert [c[1:] for c in fake.calls] == [(3, cfg.min_sample_s, 4), (3, cfg.min_sample_s, 8)]
    assert list(zip(t.model, t["T"])) == [(m, T) for m in names for T in (4, 8)]
    for r in t.itertuples():
        n = 1 if r.T == 4 else 2
        med = (names.index(r.model) + 1) * 1e-3 * n * 1.5
        macs = models.variants()[r.model][1].macs(r.T, 3)
        assert r.seconds == pytest.approx(med) and r.seconds_per_step == pytest.approx(med / r.T)
        assert r.macs == macs and r.gmacs_per_s == pytest.approx(macs / med / 1e9)
        assert (r.d, r.threads, r.rounds) == (3, 1, 3)
        assert r.seconds_lo <= r.seconds <= r.seconds_hi
    s = t.attrs["samples"]
    assert len(s) == len(names) * 2 * 3 and sorted(s["round"].unique()) == [0, 1, 2]
    one = s[(s.model == names[0]) & (s["T"] == 8)].sort_values("round").seconds.tolist()
    assert one == pytest.approx([2e-3, 3e-3, 4e-3])


def test_strong_scaling_speedup_and_efficiency():
    cfg = dataclasses.replace(config.WALL, scaling_T=6, d=3, rounds=2)
    fake = _FakeRounds(lambda k, n, r: 1.0 / n * (2 if "+" in k else 1))      # n: the call
    with mock.patch.object(walltime.timing, "time_interleaved", fake):
        f = walltime.strong_scaling(cfg, thread_counts=(1, 4))
    assert [c[3] for c in fake.calls] == [1, 4]                  # one seed per thread count
    assert (f["T"] == 6).all() and (f.d == 3).all()
    for r in f.itertuples():
        assert r.seconds == pytest.approx((2 if "+" in r.model else 1) / (1 if r.threads == 1 else 2))
        assert r.speedup == pytest.approx(1.0 if r.threads == 1 else 2.0)
        assert r.efficiency == pytest.approx(r.speedup / r.threads)


def test_timed_calls_run_each_variant_on_its_own_inputs():
    from harness import models
    a = walltime._calls(5, 3, seed=1)
    b = walltime._calls(5, 3, seed=1)
    c = walltime._calls(5, 3, seed=2)
    assert list(a) == list(models.variants())
    def first(f):
        out = f()
        return np.asarray(out[0] if isinstance(out, tuple) else out)

    for name in a:
        x, y, z = first(a[name]), first(b[name]), first(c[name])
        assert x.shape[0] == 5 and np.array_equal(x, y) and not np.array_equal(x, z), name
    rnn = walltime.noise_kernel(dataclasses.replace(config.WALL, d=3, seed=1), T=5)
    np.testing.assert_array_equal(rnn(), a[config.WALL.baseline]())
    assert walltime.noise_kernel(dataclasses.replace(config.WALL, d=2))().shape == (256, 2)
    assert walltime.timed_bytes(5, 3) == max(v.bytes(5, 3) for _, v in models.variants().values())


# ============================================================================ errors name their argument

def _rnn_inputs(T=4, d=3):
    rng = np.random.default_rng(0)
    return rng.normal(size=(T, d)), rng.normal(size=(d, d)), rng.normal(size=(d, d)) / 3


def _bad_calls():
    from harness.analysis import clipping, gradpath, schedule
    from harness.models.attention import attention_paths, path_jacobians
    from harness.models.rnn import recurrent_matrix, rnn_decay, rnn_gradient_norms
    X, Wx, Wh = _rnn_inputs()
    A = np.random.default_rng(1).normal(size=(4, 3))
    W3 = np.eye(3)

    def decay(**kw):
        return lambda: rnn_decay(**{**dict(T=3, d=2, rho=0.9), **kw})

    def norms(**kw):
        return lambda: rnn_gradient_norms(**{**dict(X=X, W_xh=Wx, W_hh=Wh), **kw})

    def clip(**kw):
        return lambda: clipping.clipping_experiment(**{**dict(rhos=(0.5,), T=4, d=2), **kw})

    def cfg(**kw):
        return lambda: gradpath.validate_config(
            dataclasses.replace(config.DECAY, **{**dict(Ts=(5,), ds=(2,)), **kw}))

    return [
        ("T", decay(T=1)), ("d", decay(d=0)), ("rho", decay(rho=0.0)), ("rho", decay(rho=-1.0)),
        ("weight", decay(weight="unitary")), ("activation", decay(activation="relu")),
        ("measure", decay(measure="all")), ("input_scale", decay(input_scale=-1.0)),
        ("seed", decay(seed=-1)), ("seed", decay(seed=1.5)),
        ("X", norms(X=X[0])), ("W_xh", norms(W_xh=Wx[0])), ("W_hh", norms(W_hh=Wh[0])),
        ("X", norms(X=X[:1])), ("W_hh", norms(W_hh=Wh[:, :2])), ("W_xh", norms(W_xh=Wx[:, :2])),
        ("activation", norms(activation="relu")), ("measure", norms(measure="all")),
        ("probe", norms(probe=np.ones(2))), ("probe", norms(probe=np.zeros(3))),
        ("probe", norms(probe=np.ones((3, 1)))),
        ("d", lambda: recurrent_matrix(0, 0.9)), ("rho", lambda: recurrent_matrix(2, 0.0)),
        ("kind", lambda: recurrent_matrix(2, 0.9, "unitary")),
        ("seed", lambda: recurrent_matrix(2, 0.9, "orthogonal", -1)),
        ("T", lambda: attention_paths(T=1, d=2)), ("d", lambda: attention_paths(T=3, d=0)),
        ("input_scale", lambda: attention_paths(T=3, d=2, input_scale=-1.0)),
        ("seed", lambda: attention_paths(T=3, d=2, seed=-1)),
        ("Wq, Wk and Wv", lambda: attention_paths(X=A)),
        ("X", lambda: path_jacobians(A[0], W3, W3, W3)),
        ("X", lambda: path_jacobians(A[:1], W3, W3, W3)),
        ("Wq", lambda: path_jacobians(A, np.eye(2), W3, W3)),
        ("Wk", lambda: path_jacobians(A, W3, np.eye(2), W3)),
        ("Wv", lambda: path_jacobians(A, W3, W3, np.eye(2))),
        ("Wq and Wk", lambda: path_jacobians(A, W3, W3[:, :2], W3)),
        ("rhos", clip(rhos=())), ("rhos", clip(rhos=(0.5, -1.0))), ("threshold", clip(threshold=0.0)),
        ("T", clip(T=2)), ("d", clip(d=0)), ("weight", clip(weight="unitary")),
        ("activation", clip(activation="relu")), ("input_scale", clip(input_scale=-1.0)),
        ("seed", clip(seed=-1)),
        ("rhos", cfg(rhos=(0.0,))), ("activations", cfg(activations=("relu",))),
        ("weights", cfg(weights=("unitary",))), ("input_scales", cfg(input_scales=(-1.0,))),
        ("Ts", cfg(Ts=(1,))), ("ds", cfg(ds=(0,))), ("models", cfg(models=("gpt",))),
        ("seed", cfg(seed=-1)), ("measure", cfg(measure="all")), ("exact_max_d", cfg(exact_max_d=-1)),
        ("P", lambda: schedule.schedule(RECURRENCE, 2, 2, (0,))),
    ]


@pytest.mark.parametrize("i", range(len(_bad_calls())))
def test_each_analyser_error_names_its_argument(i):
    name, call = _bad_calls()[i]
    with pytest.raises((TypeError, ValueError)) as e:
        call()
    assert re.match(rf"{re.escape(name)} (must|is|has)\b", str(e.value)), (name, str(e.value))


def test_smallest_accepted_values():
    from harness.analysis import clipping, gradpath
    from harness.models.rnn import rnn_decay
    assert len(rnn_decay(T=2, d=1, rho=0.9, seed=0, input_scale=0.0)) == 1
    assert len(clipping.clipping_experiment(rhos=(0.5,), T=3, d=1, seed=0, input_scale=0.0)) == 1
    gradpath.validate_config(dataclasses.replace(config.DECAY, Ts=(2,), ds=(1,), exact_max_d=0,
                                                 input_scales=(0.0,)))


def test_gradient_norms_probe_is_a_direction_and_defaults_to_the_fixed_one():
    from harness.models.rnn import PROBE_SEED, rnn_gradient_norms
    X, Wx, Wh = _rnn_inputs(T=5)
    u = np.random.default_rng(PROBE_SEED).normal(size=3)
    default = rnn_gradient_norms(X, Wx, Wh, measure="probe")
    scaled = rnn_gradient_norms(X, Wx, Wh, measure="probe", probe=7.0 * u)
    np.testing.assert_allclose(default["ln_probe"], scaled["ln_probe"], rtol=0, atol=1e-13)
    other = rnn_gradient_norms(X, Wx, Wh, measure="probe", probe=np.array([1.0, 0.0, 0.0]))
    assert not np.allclose(default["ln_probe"], other["ln_probe"])
    # T = 2 has one distance; float32 inputs are measured in float64
    two = rnn_gradient_norms(X[:2].astype(np.float32), Wx.astype(np.float32), Wh.astype(np.float32))
    assert two["distance"].tolist() == [1] and two["ln_spectral"].dtype == np.float64


def test_path_levels_summarise_each_length_and_input_scale():
    from harness.analysis import gradpath
    from harness.models.attention import attention_paths
    from harness.models.rnn import rnn_decay
    cfg = dataclasses.replace(config.DECAY, seed=3, rhos=(0.7, 0.9), weights=("gaussian",),
                              activations=("tanh",), measure="probe")
    lv = gradpath.path_levels(ATTENTION, (4, 6), (1.0, 3.0), 2, cfg)
    assert list(zip(lv["T"], lv.input_scale)) == [(4, 1.0), (4, 3.0), (6, 1.0), (6, 3.0)]
    assert (lv.model == ATTENTION).all() and (lv.d == 2).all()
    for r in lv.itertuples():
        p = attention_paths(T=r.T, d=2, input_scale=r.input_scale, seed=3)
        assert r.log10_level == pytest.approx(p.log10_norm.mean(), abs=1e-12)
        assert r.log10_min == pytest.approx(p.log10_norm.min(), abs=1e-12)
        assert r.log10_max == pytest.approx(p.log10_norm.max(), abs=1e-12)
        assert r.log10_value == pytest.approx(p.log10_value.mean(), abs=1e-12)
        assert r.log10_score == pytest.approx(p.log10_score.mean(), abs=1e-12)
    lv = gradpath.path_levels(RECURRENCE, (5,), (2.0,), 3, cfg)
    p = rnn_decay(T=5, d=3, rho=0.7, weight="gaussian", activation="tanh", input_scale=2.0,
                  seed=3, measure="probe")
    r = lv.iloc[0]
    assert r.log10_level == pytest.approx(p.log10_norm.mean(), abs=1e-12)
    assert (r.log10_min, r.log10_max) == pytest.approx((p.log10_norm.min(), p.log10_norm.max()))
    assert math.isnan(r.log10_value) and math.isnan(r.log10_score)
    with pytest.raises(ValueError, match="model"):
        gradpath.path_levels("gpt", (4,), (1.0,), 2, cfg)


# ============================================================================ report: the folder and its page

def test_render_html_escapes_and_links_every_file():
    from harness.report import html as report_html
    sec = report_html.Section("k<1>", "T & d", {"a&b": None, "c": None}, "x < y & 'z'",
                              ["fig<1>", "g"], "<table>T1</table>")
    plain = report_html.Section("n", "No figure", {"d": None}, "cap")
    page = report_html.render_html([sec, plain], {"cpu<": "x86 & co", "n": 3},
                                   "harness report --out <o>")
    assert '<section id="k&lt;1&gt;"><h2>T &amp; d</h2>' in page
    assert '<img src="fig&lt;1&gt;.png" alt="T &amp; d">' in page and '<img src="g.png"' in page
    assert '<p class="caption" data-section="k&lt;1&gt;">x &lt; y &amp; &#x27;z&#x27;</p>' in page
    assert '<a href="a&amp;b.csv">a&amp;b.csv</a> · <a href="c.csv">c.csv</a>' in page
    assert '<a href="fig&lt;1&gt;.svg">fig&lt;1&gt;.svg</a> · <a href="g.svg">g.svg</a>' in page
    assert "<table>T1</table>" in page
    body = page.split('<section id="n">')[1].split("</section>")[0]
    assert "<img" not in body and "figures:" not in body and '<a href="d.csv">d.csv</a>' in body
    assert "<tr><th>cpu&lt;</th><td>x86 &amp; co</td></tr>" in page and "<tr><th>n</th><td>3</td></tr>" in page
    assert "<code>harness report --out &lt;o&gt;</code>" in page
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert page.count("<section") == page.count("</section>") == 2


def test_table1_formats_counts_with_separators():
    from harness.report import html as report_html
    dt = pd.DataFrame([dict(model=RECURRENCE, T=1000, d=512, macs=524288000, flops=1048576000,
                            span=3000, max_path=3000, parallelism=1234.56, ops=1, scalar_work=2)])
    html = report_html.depth_table_html(dt.assign(model="<b>rnn</b>"))
    for cell in ("524,288,000", "1,048,576,000", "1,234.6", "&lt;b&gt;rnn&lt;/b&gt;"):
        assert f"<td>{cell}</td>" in html
    heads = re.findall(r"<th>(.*?)</th>", html)
    assert heads == ["model", "T", "d", "macs", "flops", "span", "max_path", "parallelism"]
    claims = report_html.claims_table_html(pd.DataFrame({"claim": ["a < b"], "lesson": ["l"],
                                                         "measured": ["m"], "verdict": ["holds"],
                                                         "value": [1.0]}))
    assert re.findall(r"<th>(.*?)</th>", claims) == ["claim", "lesson", "verdict", "measured"]
    assert "<td>a &lt; b</td>" in claims


def test_check_out_refuses_what_it_cannot_use(tmp_path, monkeypatch):
    from harness import report
    from harness.infra.files import UsageError
    assert report.check_out(tmp_path / "new") == (tmp_path / "new").resolve()
    (tmp_path / "empty").mkdir()
    assert report.check_out(tmp_path / "empty") == (tmp_path / "empty").resolve()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for bad in ("full", "file"):
        with pytest.raises(UsageError, match="exists and is not an empty directory"):
            report.check_out(tmp_path / bad)
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert report.check_out(tmp_path / "link") == (tmp_path / "empty").resolve()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for bad in (work, tmp_path, "."):
        with pytest.raises(UsageError, match="current directory"):
            report.check_out(bad)


def test_report_lock_refuses_a_live_writer_and_takes_over_a_dead_ones(tmp_path):
    import subprocess
    import sys
    from harness.report import build
    from harness.infra.files import UsageError
    out = tmp_path / "rep"
    lock = tmp_path / ".rep.lock"
    with build._lock(out):
        assert lock.read_text() == str(os.getpid())
        with pytest.raises(UsageError, match=rf"pid {os.getpid()}"):
            with build._lock(out):
                pass
    assert not lock.exists()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)
    for left in (str(dead), "", "garbage"):
        lock.write_text(left)                   # left by a run killed with -9
        with build._lock(out):
            assert lock.read_text() == str(os.getpid())
        assert not lock.exists()
    with pytest.raises(RuntimeError):
        with build._lock(out):
            raise RuntimeError("the run failed")
    assert not lock.exists()


# ============================================================================ the families' gradient paths

def test_attention_path_in_chunks_is_the_path_in_one_piece():
    X, Wq, Wk, Wv = _attention_case(T=9, d=3, d_v=3)
    whole = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv)
    for chunk in (1, 3, 7):
        with mock.patch.object(att_family, "PATH_CHUNK", chunk):
            part = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv)
        pd.testing.assert_frame_equal(part, whole)
    assert att_family.path_memory(9, 3, config.DECAY) == {
        "attention path Jacobians": att_family._jacobian_bytes(9, 3)}


def test_attention_jobs_and_path_follow_the_config():
    cfg = dataclasses.replace(config.DECAY, input_scales=(1.0, 2.5), seed=7)
    jobs = att_family.decay_jobs(cfg, 5, 2)
    assert jobs == [dict(model=ATTENTION, T=5, d=2, input_scale=1.0),
                    dict(model=ATTENTION, T=5, d=2, input_scale=2.5)]
    pd.testing.assert_frame_equal(att_family.gradient_path(jobs[1], cfg),
                                  att_family.attention_paths(T=5, d=2, input_scale=2.5, seed=7))
    drawn = att_family.attention_paths(T=5, d=2, input_scale=2.5, seed=7)
    rng = np.random.default_rng([7, 2])                      # the documented draws
    X = rng.normal(size=(5, 2)) * 2.5
    W = [rng.normal(size=(2, 2)) / math.sqrt(2) for _ in range(3)]
    pd.testing.assert_frame_equal(drawn.drop(columns=["input_scale", "seed"]),
                                  att_family.attention_paths(X=X, Wq=W[0], Wk=W[1], Wv=W[2])
                                  .drop(columns=["input_scale", "seed"]))


def test_family_inputs_are_seeded_and_shaped():
    for fam, n_w in ((att_family, 3), (rnn_family, 2)):
        X, W = fam.inputs(5, 4, batch=1, dtype="float32", seed=3)
        Xb, Wb = fam.inputs(5, 4, batch=2, dtype="float64", seed=3)
        assert X.shape == (5, 4) and Xb.shape == (2, 5, 4) and len(W) == len(Wb) == n_w
        assert X.dtype == np.float32 and Xb.dtype == np.float64
        assert all(w.shape == (4, 4) and w.dtype == np.float32 for w in W)
        X2, W2 = fam.inputs(5, 4, batch=1, dtype="float32", seed=3)
        assert np.array_equal(X, X2) and all(np.array_equal(a, b) for a, b in zip(W, W2))
        assert not np.array_equal(X, fam.inputs(5, 4, seed=4)[0].astype(np.float32))
        big = fam.inputs(400, 400, seed=0)[1][0]                   # N(0, 1/d)
        assert big.std() == pytest.approx(1 / 20, rel=0.02) and abs(big.mean()) < 0.01


def _tanh_trajectory(X, W_xh, W):
    h, A = np.zeros(W.shape[0]), []
    for x in X:
        a = W @ h + W_xh @ x
        A.append(a)
        h = np.tanh(a)
    return np.array(A)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # reported to the lead
def test_scaled_derivatives_are_the_trajectorys_tanh_slopes():
    X, Wx, Wu = _rnn_inputs(T=6, d=3)
    ln_rho = math.log(1.7)
    S, m = rnn_family.scaled_derivatives(X, Wx, Wu, "tanh", ln_rho)
    A = _tanh_trajectory(X, Wx, 1.7 * Wu)
    # phi'(a_t) on the trajectory of rho W; the caller adds log(rho) where the Jacobian needs it
    np.testing.assert_allclose(np.exp(m)[:, None] * S, 1 - np.tanh(A) ** 2, rtol=1e-12)
    assert (S.max(axis=1) == 1.0).all() and (S > 0).all()
    S, m = rnn_family.scaled_derivatives(X, Wx, Wu, "identity", ln_rho)
    assert (S == 1.0).all() and S.shape == (6, 3) and (m == 0).all() and m.shape == (6,)
    with pytest.raises(ValueError, match="too large"):
        rnn_family.scaled_derivatives(X, Wx, 100 * Wu, "tanh", 709.0)     # rho W overflows


def test_log_dphi_is_exact_where_tanh_rounds_to_one():
    a = np.array([[-3.0, -0.5, 0.0, 0.25, 2.0]])
    np.testing.assert_allclose(rnn_family.log_dphi(a, "tanh"), np.log(1 - np.tanh(a) ** 2),
                               rtol=1e-12, atol=1e-14)
    far = rnn_family.log_dphi(np.array([-40.0, 40.0, 400.0]), "tanh")
    np.testing.assert_allclose(far, [math.log(4) - 80, math.log(4) - 80, math.log(4) - 800],
                               rtol=1e-15)
    assert (rnn_family.log_dphi(a, "identity") == 0).all()


def _explicit_log10_norms(T, d, rho, weight, activation, scale, seed):
    """Spectral norms of dh_T/dh_{T-k}, the Jacobian product written out, on the same draws."""
    from harness.models.rnn import unit_recurrent_matrix
    W = rho * unit_recurrent_matrix(d, weight, seed)
    rng = np.random.default_rng([seed, 1])
    Wx = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * scale
    A = _tanh_trajectory(X, Wx, W)
    dphi = 1 - np.tanh(A) ** 2 if activation == "tanh" else np.ones_like(A)
    P, out = np.eye(d), []
    for k in range(1, T):
        P = P @ (dphi[T - k][:, None] * W)                 # ... J_{T-k+1}, J_t = diag(phi'_t) W
        out.append(math.log10(np.linalg.norm(P, 2)))
    return np.array(out), W


@pytest.mark.parametrize("measure,exact_max_d,used", [("both", 3, "spectral"), ("both", 2, "probe"),
                                                      ("exact", 0, "spectral"), ("probe", 9, "probe")])
def test_rnn_decay_reports_the_norm_it_measured(measure, exact_max_d, used):
    T, d, rho = 6, 3, 1.3
    f = rnn_family.rnn_decay(T=T, d=d, rho=rho, weight="gaussian", activation="tanh",
                             input_scale=2.0, seed=5, measure=measure, exact_max_d=exact_max_d)
    want, W = _explicit_log10_norms(T, d, rho, "gaussian", "tanh", 2.0, 5)
    assert (f.norm_measure == used).all()
    if used == "spectral":
        np.testing.assert_allclose(f.log10_spectral, want, atol=1e-10)
        np.testing.assert_allclose(f.log10_norm, f.log10_spectral)
    else:
        assert f.log10_spectral.isna().all()
        np.testing.assert_allclose(f.log10_norm, f.log10_probe)
    if measure == "exact":
        assert f.log10_probe.isna().all()
    else:
        assert (f.log10_probe <= want + 1e-10).all()           # the probe is a lower bound
    sigma = np.linalg.norm(W, 2)
    assert f.sigma_max.iloc[0] == pytest.approx(sigma, rel=1e-12)
    k = np.arange(1, T)
    np.testing.assert_allclose(f.log10_bound, k * math.log10(sigma), rtol=1e-12)
    np.testing.assert_allclose(f.log10_linear, k * math.log10(rho), rtol=1e-12)
    assert (f.input_scale == 2.0).all() and (f.seed == 5).all() and (f.rho == rho).all()
    assert f.log10_value.isna().all() and f.log10_score.isna().all()


def test_rnn_jobs_path_and_memory_follow_the_config():
    cfg = dataclasses.replace(config.DECAY, rhos=(0.5, 2.0), weights=("gaussian", "orthogonal"),
                              activations=("tanh",), input_scales=(1.0, 3.0), seed=4,
                              measure="both", exact_max_d=2)
    jobs = rnn_family.decay_jobs(cfg, 5, 3)
    assert [(j["weight"], j["input_scale"], j["rho"]) for j in jobs] == [
        ("gaussian", 1.0, 0.5), ("gaussian", 1.0, 2.0), ("gaussian", 3.0, 0.5), ("gaussian", 3.0, 2.0),
        ("orthogonal", 1.0, 0.5), ("orthogonal", 1.0, 2.0), ("orthogonal", 3.0, 0.5),
        ("orthogonal", 3.0, 2.0)]
    assert all(j["model"] == RECURRENCE and j["T"] == 5 and j["d"] == 3
               and j["activation"] == "tanh" for j in jobs)
    got = rnn_family.gradient_path(jobs[3], cfg)
    want = rnn_family.rnn_decay(T=5, d=3, rho=2.0, weight="gaussian", activation="tanh",
                                input_scale=3.0, seed=4, measure="both", exact_max_d=2)
    pd.testing.assert_frame_equal(got, want)
    assert (got.norm_measure == "probe").all()
    assert "exact Jacobian products" not in rnn_family.path_memory(5, 3, cfg)   # d > exact_max_d
    for measure, max_d, exact in (("both", 3, True), ("exact", 0, True), ("probe", 9, False)):
        stages = rnn_family.path_memory(5, 3, dataclasses.replace(cfg, measure=measure,
                                                                  exact_max_d=max_d))
        assert ("exact Jacobian products" in stages) is exact


def _one_section(config, progress):
    from harness.report import figures
    progress("clipping")
    c = pd.DataFrame({"rho": [0.5, 1.5], "threshold": 4.0, "log10_total_before": [-1.0, 3.0],
                      "log10_total_after": [-1.0, 0.6], "log10_far_over_near_before": [-2.0, 2.0],
                      "log10_far_over_near_after": [-2.0, 2.0]})
    yield ("clipping", "Clipping & co", {"clipping": c}, [("clipping", figures.figure_clipping)])


def _claims(frames):
    return pd.DataFrame({"claim": ["c1", "c2"], "lesson": ["l", "l"], "measured": ["m", "m"],
                         "value": [1.0, 2.0], "low": np.nan, "high": np.nan,
                         "verdict": ["holds", "does not hold"]})


def test_build_report_writes_a_complete_folder_in_one_move(tmp_path):
    from harness import report
    from harness.report import build
    out = tmp_path / "reports" / "r1"
    seen = []
    with mock.patch.object(build, "_sections", _one_section), \
            mock.patch.object(build.claims, "claims_table", _claims):
        got = _with_umask(0o022, report.build_report, out, None, seen.append, "harness report <x>")
    assert got == out.resolve() and seen == ["clipping"]
    names = _listing(out)
    assert {"clipping.csv", "clipping.png", "clipping.svg", "claims.csv", "machine.json",
            "index.html"} <= set(names)
    assert not [n for n in names if n.endswith((".tmp", ".partial", ".lock"))]
    assert _listing(out.parent) == ["r1"]                       # no stage, no lock left beside it
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert all(stat.S_IMODE((out / n).stat().st_mode) == 0o644 for n in names)
    page = (out / "index.html").read_text()
    assert "Clipping &amp; co" in page and "harness report &lt;x&gt;" in page
    assert page.index('id="claims"') < page.index('id="clipping"')          # the claims first
    assert pd.read_csv(out / "clipping.csv").rho.tolist() == [0.5, 1.5]
    assert "seconds" in __import__("json").loads((out / "machine.json").read_text())
    assert (out / "clipping.png").read_bytes().startswith(b"\x89PNG")


def test_build_report_failing_leaves_nothing(tmp_path):
    from harness import report
    from harness.report import build

    def broken(config, progress):
        yield from _one_section(config, progress)
        raise RuntimeError("the analyser failed")
    out = tmp_path / "r2"
    with mock.patch.object(build, "_sections", broken), \
            mock.patch.object(build.claims, "claims_table", _claims):
        with pytest.raises(RuntimeError, match="analyser failed"):
            report.build_report(out)
    assert list(tmp_path.iterdir()) == []


def test_traced_views_stack_concatenate_reshape_and_where():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    H = np.tanh(X)
    rows = [H[t] for t in range(3)]
    S = np.stack(rows, axis=0)
    assert S.shape == (3, 2) and S.axes == ("T", "d_model") and S.deps == [(0, 0), (0, 1), (0, 2)]
    S2 = np.stack(rows, axis=-1)
    assert S2.shape == (2, 3) and S2.axes == ("d_model", "T")
    np.testing.assert_array_equal(S2.dist, S.dist.T)
    C = np.concatenate([H, X], axis=0)
    assert C.shape == (6, 2) and C.deps == [(0, -1)] and C.axes == ("T", "d_model")
    assert C.dist[:3].tolist() == H.dist.tolist() and C.dist[3:].tolist() == X.dist.tolist()
    R = H.reshape(6)
    assert R.shape == (6,) and R.axes == ("T",) and R.deps == [(0, -1)]
    R3 = H.reshape((3, 1, 2))
    assert R3.axes == ("T", "T", "d_model") and R3.shape == (3, 1, 2)
    assert len(g.ops) == 1                                   # views add no op
    W = np.where(np.ones((3, 2), bool), H, X)
    assert g.ops[-1].kind == "where" and W.axes == ("T", "d_model") and W.dist[0].tolist() == [1, 1]
    assert np.where(np.ones((3, 2), bool), 0.0, H).axes == ("T", "d_model")
    for bad in (lambda: np.add.reduce(X), lambda: np.add(X, X, out=np.empty((3, 2))),
                lambda: np.sort(X), lambda: np.sin(X)):
        with pytest.raises(TypeError, match="trace"):
            bad()
    with pytest.raises(ValueError, match="do not align"):
        X @ X
    assert repr(X) == "Traced(shape=(3, 2), axes=('T', 'd_model'))"
    assert X.ndim == 2 and X.size == 6 and X.T.leaf == "X" and X.T.shape == (2, 3)


def _levels_frame():
    rows = []
    for s, base in ((1.0, -1.5), (8.0, -3.0), (2.0, -2.2)):
        for T in (1000, 10, 100):                        # stored out of order
            lvl = base - math.log10(T) * (1.0 if s == 1.0 else 2.0)
            rows.append(dict(model=ATTENTION, T=T, d=4, input_scale=s, log10_level=lvl,
                             log10_min=lvl - (7.7 if s == 8.0 and T == 1000 else 0.3),
                             log10_max=lvl + 0.2, log10_value=lvl + 0.11, log10_score=lvl - 1.33))
    return pd.DataFrame(rows)


def test_attention_path_caption_states_the_fall_with_T_and_the_saturated_spread():
    from harness.report import captions
    cap = captions.caption_attention_path({"attention_level": _levels_frame()})
    # at the smallest input scale: level -2.5 at T = 10, -4.5 at T = 1000, slope -1 in log-log
    for value, places in ((1, 0), (-2.5, 1), (10, 0), (-4.5, 1), (1000, 0), (-1.0, 2),
                          (8, 0), (-9.0 - 7.7, 1), (-9.0 + 0.2, 1), (-4.5 + 0.11, 1),
                          (-4.5 - 1.33, 1)):
        _states(cap, value, places)
    for wrong in (-5.0, -7.0, -3.0):                      # the saturated scale's level, T = 10
        _lacks(cap, wrong, 1)
    _lacks(cap, -1.5, 2)                                  # the fit's intercept, not its slope
    _lacks(cap, 100, 0)                                   # the first and the last T only
    _lacks(cap, 2, 0)                                     # the largest scale, not the middle one


class _Recorder:
    """Stands in for an analyser: records its arguments, returns a frame that says who made it."""

    def __init__(self, name, returns=None):
        self.name, self.calls, self.returns = name, [], returns

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.returns is not None:
            return self.returns(*args, **kwargs)
        out = pd.DataFrame({"made_by": [self.name]})
        if self.name == "wall":                          # wall times keep their rounds
            out.attrs["samples"] = pd.DataFrame({"made_by": [self.name + " samples"]})
        return out


def _stubbed_sections(tmp_path, depth_frame=None, history=None):
    """``build._sections`` with every analyser stubbed by a ``_Recorder``: returns
    (cfg, sections, progress messages, {recorder: calls}, (decay frame, depth frame))."""
    from harness.report import build
    from harness.report import history as asv
    cfg = dataclasses.replace(
        config.QUICK_REPORT, asv_results=str(tmp_path), schedule_d=5,
        schedule=dataclasses.replace(config.QUICK_REPORT.schedule, T_values=(7, 9),
                                     grains=("element",), processors=(1, 3)))
    if depth_frame is None:
        depth_frame = pd.DataFrame({"model": ["m"], "T": [1], "d": [2], "macs": [3], "flops": [6],
                                    "span": [4]})
    decay_frame = pd.DataFrame({"model": ["rnn", "lru", "attention"], "distance": [1, 2, 3]})
    fakes = {
        (build.gradpath, "decay_sweep"): _Recorder("decay", lambda c: (decay_frame, "summary")),
        (build.gradpath, "path_levels"): _Recorder("levels"),
        (build.clipping, "clipping_experiment"): _Recorder("clipping"),
        (build.depth, "depth_table"): _Recorder("depth", lambda *a: depth_frame),
        (build.depth, "traced"): _Recorder("traced", lambda traces, m, T, d: (m, T, d)),
        (build.schedule, "schedule"): _Recorder("schedule"),
        (build.walltime, "measure_wall_times"): _Recorder("wall"),
        (build.walltime, "matmul_rates"): _Recorder("rates", lambda *a: {"gemm_gmacs": 2.0}),
        (build.walltime, "noise_kernel"): _Recorder("kernel", lambda c: "the kernel"),
        (build.timing, "noise_floor"): _Recorder("noise", lambda *a: {"noise_floor": 0.01}),
        (build.walltime, "measured_crossover"): _Recorder("crossover"),
        (build.walltime, "fit_exponents"): _Recorder("exponents"),
        (build.peakmem, "measure"): _Recorder("memory"),
        (build.lessons, "self_attention_maps"): _Recorder("maps"),
        (build.lessons, "diagonal_share"): _Recorder("diagonal"),
        (build.lessons, "row_max_vs_dk"): _Recorder("row_max"),
        (build.lessons, "lesson_draw_percentiles"): _Recorder("lesson_draw"),
        (build.lessons, "additive_maps"): _Recorder("additive_maps"),
        (build.lessons, "lesson_additive_routes"): _Recorder("routes"),
    }
    if history is not None:
        fakes[(asv, "kernel_history")] = _Recorder("history", lambda h: history)
    stages = []
    with contextlib.ExitStack() as stack:
        for (module, name), fake in fakes.items():
            stack.enter_context(mock.patch.object(module, name, fake))
        sections = list(build._sections(cfg, stages.append))
    return cfg, sections, stages, {f.name: f.calls for f in fakes.values()}, (decay_frame,
                                                                              depth_frame)


def test_report_sections_run_each_analyser_on_the_report_configs_values(tmp_path):
    """Every analyser stubbed: the sections hand each one its own part of the report's config
    and put what it returns, untouched, in the frames of its section."""
    from harness.report import build, captions
    cfg, sections, stages, calls, (decay_frame, depth_frame) = _stubbed_sections(tmp_path)
    assert len(stages) == build.STAGES
    assert calls["decay"] == [((cfg.decay,), {})]
    assert calls["levels"] == [((ATTENTION, cfg.path_T, cfg.path_input_scales, cfg.decay.ds[0],
                                 cfg.decay), {})]
    assert calls["clipping"] == [((), dataclasses.asdict(cfg.clipping))]
    assert calls["depth"] == [((cfg.depth.T_values, cfg.depth.d), {})]
    from harness import models
    forms = list(models.traced_forms())                 # every traced form is scheduled
    assert [c[0][:5] for c in calls["schedule"]] == [(m, 7, 5, (1, 3), "element") for m in forms]
    assert [c[1]["tr"] for c in calls["schedule"]] == [(m, 7, 5) for m in forms]
    assert calls["wall"] == [((cfg.wall,), {})]
    assert calls["rates"] == [((cfg.wall.d, cfg.wall), {})]
    assert calls["noise"] == [(("the kernel", cfg.wall.rounds, cfg.wall.min_sample_s), {})]
    (cross_args, _), = calls["crossover"]
    assert cross_args[1] == cfg.wall and cross_args[2] == {"gemm_gmacs": 2.0, "noise_floor": 0.01}
    assert calls["exponents"][0][0][1] == cfg.wall.fit_min_T
    assert calls["memory"] == [((cfg.memory,), {})]
    assert calls["row_max"] == [((cfg.lessons,), {})] and calls["maps"] == [((cfg.lessons,), {})]
    assert calls["routes"] == [((cfg.lessons.va_scales,), {})]
    by_key = {key: (frames, figs) for key, _, frames, figs in sections}
    assert set(by_key) <= set(captions.CAPTIONS)
    assert by_key["decay"][0]["decay"] is decay_frame
    assert by_key["decay"][0]["decay_summary"] == "summary"
    assert list(by_key["recurrence"][0]["lru_decay"].distance) == [2]     # the LRU's rows only
    assert by_key["clipping"][0]["clipping"].made_by[0] == "clipping"
    assert by_key["depth"][0]["depth"] is depth_frame
    sched = by_key["schedule"][0]["schedule"]
    assert list(sched.made_by) == ["schedule"] * len(forms)
    work = by_key["work"][0]
    assert list(work["work"].columns) == ["model", "T", "d", "macs", "flops"]
    assert work["crossover"].made_by[0] == "crossover"
    assert work["rates"].to_dict("records") == [{"d": cfg.wall.d, "threads": cfg.wall.threads,
                                                 "gemm_gmacs": 2.0, "noise_floor": 0.01}]
    wall = by_key["wall"][0]
    assert wall["wall_times"].made_by[0] == "wall" and wall["exponents"].made_by[0] == "exponents"
    assert wall["wall_samples"].made_by[0] == "wall samples"
    assert by_key["memory"][0]["peak_memory"].made_by[0] == "memory"
    assert by_key["maps"][0]["row_max_lesson"].made_by[0] == "lesson_draw"
    assert by_key["additive"][0]["additive_routes"].made_by[0] == "routes"
    assert "history" not in by_key                       # no asv results: no section
    for frames, figs in by_key.values():
        assert all(callable(fn) and fn.__name__.startswith("figure_") for _, fn in figs)
    # the figures `make readme-figures` copies out of a report are among those it draws
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    wanted = re.search(r"^README_FIGURES := (.+)$", makefile, re.M).group(1).split()
    stems = {stem for _, figs in by_key.values() for stem, _ in figs}
    assert set(wanted) <= stems, (wanted, stems)
    assert {"decay", "clipping", "depth", "schedule", "work", "wall_times"} <= stems


def test_wall_caption_states_rounds_intervals_and_the_noise_floor():
    from harness.report import captions
    # one T per model: a caption that read a second row would fail on it
    w = pd.DataFrame([dict(model=RECURRENCE, T=64, d=32, threads=1, seconds_per_step=3.3e-6,
                           rounds=7),
                      dict(model=ATTENTION, T=64, d=32, threads=1, seconds_per_step=9e-6, rounds=7)])
    e = pd.DataFrame({"model": [ATTENTION, RECURRENCE], "exponent": [1.8765, 1.0312],
                      "exponent_lo": [1.7111, 0.9222], "exponent_hi": [1.9444, 1.1333]})
    rates = pd.DataFrame({"noise_floor": [0.0234]})
    cap = captions.caption_wall({"wall_times": w, "exponents": e, "rates": rates})
    for value, places in ((1, 0), (32, 0), (7, 0), (1.03, 2), (0.92, 2), (1.13, 2), (1.88, 2),
                          (1.71, 2), (1.94, 2), (3.3, 1), (2.3, 1)):
        _states(cap, value, places)
    assert cap.index("1.88") < cap.index("1.03")            # in the exponents' order
    bare = captions.caption_wall({"wall_times": w.drop(columns="rounds"),
                                "exponents": e.assign(exponent_lo=np.nan, exponent_hi=np.nan)})
    _lacks(bare, 7, 0)
    _lacks(bare, 2.3, 1)
    for wrong in (0.92, 1.13, 1.71, 1.94):
        _lacks(bare, wrong, 2)
    _states(bare, 1, 0)                                       # one round when none is recorded
    one = captions.caption_wall({"wall_times": w, "exponents": e})
    many = captions.caption_wall({"wall_times": w.assign(threads=2), "exponents": e})
    assert "threads" not in one and "threads" in many        # the plural follows the count
    _lacks(captions.caption_wall({"wall_times": w, "exponents": e, "rates": pd.DataFrame({"x": [1]})}),
           2.3, 1)


def test_work_caption_states_the_interval_and_the_prediction_from_rates():
    from harness.report import captions
    d = 64
    w = pd.DataFrame([dict(model=m, T=t, d=d, macs=(2 * t * d * d if m == RECURRENCE else 2 * t * t * d))
                      for m in (RECURRENCE, ATTENTION) for t in (10, 300)])
    x = pd.DataFrame([dict(d=d, variant=ATTENTION, counted_T=d, measured_T=200.0,
                           extrapolated_T=np.nan, gemm_over_matvec=7.4, measured_T_lo=150.0,
                           measured_T_hi=260.0, predicted_T=321.0)])
    rates = pd.DataFrame({"gemm_gmacs": [12.34], "gemv_gmacs": [1.56]})
    cap = captions.caption_work({"work": w, "crossover": x, "rates": rates})
    for value, places in ((150, 0), (260, 0), (12.3, 1), (1.6, 1), (321, 0), (200, 0)):
        _states(cap, value, places)
    bare = captions.caption_work({"work": w, "crossover": x.assign(measured_T_lo=np.nan)})
    for wrong in (150, 260, 321):
        _lacks(bare, wrong, 0)
    _lacks(bare, 12.3, 1)


def test_schedule_caption_names_the_first_P_where_attention_is_faster():
    from harness.report import captions
    s = _schedule_caption_frame()
    s["bounds_ok"] = True
    cap = captions.caption_schedule({"schedule": s})
    _states(cap, 20, 0)                          # attention 51 < RNN 62 first at P = 20
    _states(cap, 500 / 62, 1)                    # one processor against T processors
    _states(cap, 20, 0)
    _states(cap, 20, 0)                          # all 20 runs within Brent's bounds
    assert "all" in cap.split("Brent")[-1]
    tie = s.copy()
    tie.loc[(tie.model == ATTENTION) & (tie.grain == "scalar") & (tie.P == 20), "time"] = 62
    later = captions.caption_schedule({"schedule": tie})
    _states(later, 100, 0)                       # a tie is not faster: from P = 100 on
    never = s.copy()
    never.loc[(never.model == ATTENTION) & (never.grain == "scalar"), "time"] = 10**6
    assert captions.caption_schedule({"schedule": never}) != cap
    some = s.copy()
    some.loc[some.index[:2], "bounds_ok"] = False
    assert "all" not in captions.caption_schedule({"schedule": some}).split("Brent")[-1]
    # word for word: the first P where attention is faster, none, and how many runs are bounded
    n = len(s)
    assert "is faster than the RNN only from P = 20 on;" in cap
    assert "is faster than the RNN only from P = 100 on;" in later
    assert ("is faster than the RNN only at none of the P scheduled;"
            in captions.caption_schedule({"schedule": never}))
    assert cap.endswith(f"hold on all {n} of {n} runs.")
    assert captions.caption_schedule({"schedule": some}).endswith(f"hold on {n - 2} of {n} runs.")


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


def test_matmul_rates_time_the_two_products_they_name():
    from harness.kernels import blas as _blas
    calls = []
    real_mm, real_gemv = _blas.matmul, _blas.gemv_steps

    def mm(a, b, out):
        calls.append(("gemm", a.shape, b.shape, out.shape))
        return real_mm(a, b, out)

    def gemv(W, h, out, steps):
        calls.append(("gemv", W.shape, h.shape, steps, abs(np.linalg.eigvals(W)).max() < 5))
        return real_gemv(W, h, out, steps)
    fake = _FakeRounds(lambda k, n, r: 1e-3)
    with mock.patch.object(walltime.timing, "time_interleaved", fake), \
            mock.patch.object(_blas, "matmul", mm), mock.patch.object(_blas, "gemv_steps", gemv):
        walltime.matmul_rates(6, dataclasses.replace(config.WALL, rounds=3), T=10)
        fns = fake.calls[0][0]
        fns["gemm"]()
        fns["gemv"]()
    assert calls == [("gemm", (10, 6), (6, 10), (10, 10)), ("gemv", (6, 6), (6,), 10, True)]


def test_reflected_operators_are_recorded_like_the_others():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (2, 2), ("T", "d_model"), source_row=0)
    outs = [1.0 + X, 1.0 - X, 2.0 * X, 1.0 / X, [[1.0, 0.0], [0.0, 1.0]] @ X]
    assert [op.kind for op in g.ops] == ["add", "sub", "mul", "div", "matmul"]
    assert all(o.shape == (2, 2) for o in outs) and g.ops[-1].inner == 2
    assert [o.dist[0, 0] for o in outs] == [1, 1, 1, 1, 1]
    assert outs[0].axes == ("T", "d_model") and outs[4].axes == ("?", "d_model")


# ============================================================================ peers

def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _close(a, b, dtype):
    a = np.asarray(a.detach() if hasattr(a, "detach") else a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=(2e-4 if dtype == "float32" else 1e-10)
                               * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("batch, dtype", [(1, "float64"), (3, "float64"), (1, "float32")])
def test_rnn_peers_compute_the_kernels_states_and_input_gradient(batch, dtype):
    """Every RNN peer against the compiled kernel: H = forward(X) and dX of the loss <dH, H>."""
    fam = models_get(RECURRENCE)
    X, W = fam.kernels.inputs(5, 3, batch, dtype, 4)
    H = fam.kernels.forward(X, *W)
    dH = np.random.default_rng(1).normal(size=H.shape).astype(dtype)
    dX = fam.kernels.backward(X, W, H, dH).dX
    torch = _torch_or_none()
    impls = rnn_family.peers(X, W, dH, torch)
    fwd, bwd, outputs = impls["numpy"]
    _close(fwd(), H, dtype)
    _close(bwd()[0], dX, dtype)
    y, dx = outputs()
    _close(y, H, dtype)
    _close(dx, dX, dtype)
    gemm = impls["gemm"]
    assert gemm[2] is None and gemm[0]() is None and gemm[1]() is None
    if torch is None:
        return
    t_fwd, t_bwd, t_out, t_both = impls["torch"]
    y = t_fwd()
    assert y.dtype == getattr(torch, dtype)
    _close(y.reshape(H.shape), H, dtype)
    t_bwd()
    t_bwd()                                        # the graph is kept: a second pass works
    y, dx = t_out()                                # and the gradient starts afresh
    _close(y, H, dtype)
    _close(dx, dX, dtype)
    _close(t_both().detach().numpy().reshape(X.shape), dX, dtype)   # a new graph, both passes


def models_get(name):
    from harness import models
    return models.get(name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_attention_peers_compute_the_kernels_output_and_input_gradient(dtype, monkeypatch):
    fam = models_get(ATTENTION)
    X, W = fam.kernels.inputs(6, 4, 1, dtype, 2)
    out = fam.kernels.forward(X, *W)
    Y, A = out
    dY = np.random.default_rng(3).normal(size=Y.shape).astype(dtype)
    dX = fam.kernels.backward(X, W, out, dY).dX
    torch = _torch_or_none()
    impls = att_family.peers(X, W, dY, torch)
    fwd, bwd, outputs = impls["numpy"][:3]
    y, a = fwd()
    _close(y, Y, dtype)
    _close(a, A, dtype)
    _close(bwd()[0], dX, dtype)
    y, dx = outputs()
    _close(y, Y, dtype)
    _close(dx, dX, dtype)
    # the floor: the forward's five products, each into its own buffer, on the kernel's BLAS
    made = []
    real = att_family.matmul

    def recording(a, b, c):
        real(a, b, c)
        made.append((a.copy(), b.copy(), c))
    monkeypatch.setattr(att_family, "matmul", recording)
    gemm = impls["gemm"]
    assert gemm[1] is None and gemm[2] is None
    gemm[0]()
    Wq, Wk, Wv = (w.astype(np.float64) for w in W)
    X64 = X.astype(np.float64)
    Q, K, V = X64 @ Wq, X64 @ Wk, X64 @ Wv
    expected = [Q, K, V, Q @ K.T, (Q @ K.T) @ V]
    assert [c.shape for _, _, c in made] == [(6, 4)] * 3 + [(6, 6), (6, 4)]
    assert all(c.dtype == np.dtype(dtype) for _, _, c in made)
    for (_, _, c), e in zip(made, expected):
        _close(c, e, dtype)
    assert len({id(c) for _, _, c in made}) == 5
    if torch is None:
        return
    t_fwd, t_bwd, t_out, t_both = impls["torch"]
    y = t_fwd()
    assert y.dtype == getattr(torch, dtype)
    _close(y, Y, dtype)
    t_bwd()
    t_bwd()
    y, dx = t_out()
    _close(y, Y, dtype)
    _close(dx, dX, dtype)
    _close(t_both(), dX, dtype)
    _close(t_both(), dX, dtype)                    # a fresh graph each call


def test_tiled_attention_peers_compute_the_tiled_kernels_output_and_gradient():
    fam = models_get(ATTENTION)
    k = fam.kernel("tiled")
    X, W = fam.kernels.inputs(300, 4, 1, "float64", 6)        # past one block of 256 query rows
    Y, L = k.forward(X, *W)
    dY = np.random.default_rng(7).normal(size=Y.shape)
    dX = k.backward(X, W, (Y, L), dY).dX
    torch = _torch_or_none()
    impls = att_family.tiled_peers(X, W, dY, torch)
    fwd, bwd, outputs, both = impls["numpy"]
    y, l = fwd()
    _close(y, Y, "float64")
    _close(l, L, "float64")
    _close(bwd()[0], dX, "float64")
    y, dx = outputs()
    _close(y, Y, "float64")
    _close(dx, dX, "float64")
    _close(both()[0], dX, "float64")
    if torch is not None:
        t_fwd, _, t_out, t_both = impls["torch"]
        _close(t_fwd(), Y, "float64")
        _close(t_out()[1], dX, "float64")
        _close(t_both(), dX, "float64")
    with pytest.raises(ValueError, match=r"X must be \(T, d\) for the tiled kernel's peers, "
                                         r"got shape \(2, 300, 4\)"):
        att_family.tiled_peers(np.stack([X, X]), W, dY)


def test_peers_heads_and_compare_targets():
    a, b = np.zeros((5, 3)), np.ones((5, 3))
    ha, hb = att_family._heads(a, b)
    assert ha.shape == hb.shape == (1, 1, 5, 3) and hb[0, 0] is not None and hb.sum() == 15
    assert rnn_family.compare_target(1, "forward", 64, 8) == (
        1.5, None, "at least 1.5x faster than the fastest peer")
    for batch in (2, 32):
        assert rnn_family.compare_target(batch, "backward", 64, 8) == (
            1.0, None, "at least as fast as the fastest peer")
    T, d = att_family.GEMM_FLOOR_CASE
    assert (T, d) == (2048, 256) and att_family.GEMM_FLOOR_RATIO == 1.3
    assert att_family.compare_target(1, "forward", T, d) == (
        1.0, 1.3, "at least as fast as the fastest peer, and within 1.3x of its matrix products alone")
    plain = (1.0, None, "at least as fast as the fastest peer")
    for args in ((1, "backward", T, d), (1, "forward", T, 64), (1, "forward", 1024, d)):
        assert att_family.compare_target(*args) == plain


def test_report_sections_are_announced_titled_and_filed_in_order(tmp_path):
    """The report's table of contents, as a reader sees it: each stage's progress line, each
    section's key, title, CSV stems and figures; the schedule shares one trace cache and
    numbers its rows afresh; the recurrence section holds the RNN's and the LRU's forms only."""
    from harness import models
    forms = list(models.traced_forms())
    recurrent = [m for m, (fam, _) in models.traced_forms().items()
                 if fam.name in (RECURRENCE, "lru")]
    assert ATTENTION in forms and set(recurrent) < set(forms) and "lru-scan" in recurrent
    dt = pd.DataFrame({"model": forms, "T": 1, "d": 2, "macs": 3, "flops": 6, "span": 4})
    history = pd.DataFrame({"made_by": ["history"]})
    cfg, sections, stages, calls, _ = _stubbed_sections(tmp_path, dt, history)
    assert stages == ["gradient decay (RNN and attention)",
                      "attention's path over T and input scale", "clipping",
                      "depth: tracing the forwards", "schedule on P processors (T = 7)",
                      "wall times over T, in interleaved rounds",
                      "peak memory over T, a fresh process per variant",
                      "attention experiments of the lessons"]
    toc = [(key, title, list(frames), [(stem, fn.__name__) for stem, fn in figs])
           for key, title, frames, figs in sections]
    assert toc == [
        ("decay", "Gradient path: T−1 Jacobians against one α", ["decay", "decay_summary"],
         [("decay", "figure_decay")]),
        ("attention_path", "Attention's one α: flat in distance, not in T or input scale",
         ["attention_level"], [("attention_level", "figure_attention_path")]),
        ("clipping", "Clipping stops explosion, not vanishing", ["clipping"],
         [("clipping", "figure_clipping")]),
        ("depth", "Sequential depth: span and path length", ["depth"], [("depth", "figure_depth")]),
        ("recurrence", "The recurrence that parallelises", ["scan_depth", "lru_decay"],
         [("lru_decay", "figure_lru_decay")]),
        ("schedule", "The 7-token text on P processors", ["schedule"],
         [("schedule", "figure_schedule")]),
        ("work", "Work: multiplications cross at T = d", ["work", "crossover", "rates"],
         [("work", "figure_work")]),
        ("wall", "Measured: forward time against T",
         ["wall_times", "wall_samples", "exponents", "rates"], [("wall_times", "figure_wall")]),
        ("memory", "Measured: peak memory against T", ["peak_memory"],
         [("peak_memory", "figure_memory")]),
        ("maps", "Self-attention: the diagonal, projections and √d_k",
         ["attention_maps", "attention_diagonal", "row_max", "row_max_lesson"],
         [("attention_maps", "figure_maps"), ("row_max", "figure_row_max")]),
        ("additive", "Additive attention: untrained map, no tanh, two gradient routes",
         ["additive_maps", "additive_routes"],
         [("additive_maps", "figure_additive"), ("additive_routes", "figure_routes")]),
        ("history", "Benchmarks across commits (asv)", ["asv_history"],
         [("asv_history", "figure_history")]),
    ]
    frames = {key: fr for key, _, fr, _ in sections}
    assert list(frames["recurrence"]["scan_depth"].model) == recurrent
    assert frames["history"]["asv_history"] is history
    sched = frames["schedule"]["schedule"]
    assert list(sched.index) == list(range(len(forms)))         # one row per form, renumbered
    caches = [args[0] for args, _ in calls["traced"]]
    assert len(caches) == len(forms) and all(c is caches[0] for c in caches)
    assert isinstance(caches[0], dict)                           # one cache, shared
    wall = frames["wall"]["wall_times"]
    assert calls["kernel"] == [((cfg.wall,), {})]
    assert calls["crossover"][0][0][0] is wall
    assert calls["exponents"][0][0][0] is wall
    assert calls["diagonal"] == [((frames["maps"]["attention_maps"],), {})]
    assert calls["lesson_draw"] == [((cfg.lessons,), {})]


# ============================================================================ paired ratio

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


# ============================================================================ estimates

def test_rnn_path_flops_count_the_exact_product_only_where_the_sweep_computes_it():
    """path_flops' docstring: ~10 d^3 (QR or eigenvalues), 4 T d^2 (the probe), 2 T d^3 (the
    exact product) where the sweep computes it, which rnn_decay's norm_measure says."""
    for measure, d, exact_max_d in (("both", 4, 8), ("both", 16, 8), ("probe", 4, 8),
                                    ("exact", 16, 8), ("both", 8, 8)):
        cfg = dataclasses.replace(config.DECAY, measure=measure, exact_max_d=exact_max_d)
        used = rnn_family.rnn_decay(T=5, d=d, measure=measure, exact_max_d=exact_max_d).norm_measure[0]
        exact = used == "spectral"
        T = 50
        assert rnn_family.path_flops(T, d, cfg) == 10 * d**3 + 4 * T * d * d + (2 * T * d**3 if exact else 0)
        assert ("exact Jacobian products" in rnn_family.path_memory(T, d, cfg)) == exact


def test_attention_path_flops_and_expected_seconds():
    T, d = 30, 6
    assert att_family.path_flops(T, d, config.DECAY) == 4 * T * d * d + 20 * (T - 1) * d**3
    cfg = dataclasses.replace(config.DECAY, Ts=(30, 40), ds=(6,), models=("rnn", "attention"),
                              rhos=(0.5, 0.9), weights=("orthogonal",), activations=("tanh",),
                              input_scales=(1.0,), measure="probe")
    want = sum(2 * rnn_family.path_flops(T, 6, cfg) + att_family.path_flops(T, 6, cfg)
               for T in (30, 40))                               # two radii: two RNN jobs per T
    from harness.analysis import gradpath
    assert gradpath.expected_seconds(cfg) == pytest.approx(want / gradpath.FLOPS_PER_SECOND, rel=1e-12)
    assert gradpath.FLOPS_PER_SECOND == 5e9


def test_attention_path_asks_for_the_memory_its_arrays_take(monkeypatch):
    """check_memory is handed the bytes of what is then allocated: the Jacobians' nbytes, and
    the last row's arrays (X and its float64 copy, X Wk, V, the scores and alpha)."""
    asked = []
    monkeypatch.setattr(att_family, "check_memory", lambda n, what: asked.append((n, what)))
    T, d, d_k, d_v = 9, 4, 3, 5
    rng = np.random.default_rng(0)
    X = rng.normal(size=(T, d)).astype(np.float32)
    Wq, Wk, Wv = (rng.normal(size=s).astype(np.float32) for s in ((d, d_k), (d, d_k), (d, d_v)))
    Jv, Js = att_family.path_jacobians(X, Wq, Wk, Wv)
    assert Jv.shape == Js.shape == (T - 1, d_v, d)
    (row_bytes, row_what), (jac_bytes, jac_what) = asked
    assert jac_bytes == Jv.nbytes + Js.nbytes
    assert jac_what == f"the attention path Jacobians (T={T}, d_model={d})"
    x64, Wk64, Wv64 = (a.astype(np.float64) for a in (X, Wk, Wv))
    assert row_bytes == 2 * x64.nbytes + (x64 @ Wk64).nbytes + (x64 @ Wv64).nbytes + 3 * T * 8
    assert row_what == f"the attention path's last row (T={T}, d_model={d})"
    assert att_family._row_bytes(T, d, d_k, d_v) == row_bytes
    # one chunk of the path: value, score, their sum and LAPACK's copy, beside the last row
    chunk = min(att_family.PATH_CHUNK, T - 1)
    assert att_family._jacobian_bytes(T, d, d_v) == 4 * chunk * d_v * d * 8 + att_family._row_bytes(T, d, d, d_v)
    assert att_family._jacobian_bytes(T, d) == att_family._jacobian_bytes(T, d, d)
    big = att_family.PATH_CHUNK + 10
    assert att_family._jacobian_bytes(big, 2) - att_family._row_bytes(big, 2, 2, 2) == \
        4 * att_family.PATH_CHUNK * 2 * 2 * 8
    for name, i in (("Wq", 0), ("Wk", 1), ("Wv", 2)):           # every weight in X's dtype
        W = [Wq, Wk, Wv]
        W[i] = W[i].astype(np.float64)
        with pytest.raises(TypeError, match=f"{name} has dtype float64 but the other inputs are float32"):
            att_family.path_jacobians(X, *W)
    # the last row of a two-position sequence is enough; one position is refused
    att_family.path_jacobians(X[:2], Wq, Wk, Wv)
    with pytest.raises(ValueError, match="X must have T >= 2 rows, got T=1"):
        att_family.path_jacobians(X[:1], Wq, Wk, Wv)


def test_attention_last_row_is_exact_where_the_scores_are_large():
    """exp(e - max e): scores of 1000 give weights, not inf/inf."""
    X = np.array([[30.0, 0.0], [0.0, 30.0], [30.0, 30.0]])
    W = np.eye(2)
    a, V, y, g, Wv = att_family._last_row(X, W, W, W)
    e = (X @ X[2]) / math.sqrt(2)
    want = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
    assert np.isfinite(a).all()
    np.testing.assert_allclose(a, want[:2], rtol=1e-12)
    np.testing.assert_allclose(y, want @ X, rtol=1e-12)


# ============================================================================ the report page

def test_render_html_frames_the_page_and_counts_broken_images():
    from harness.report import html as report_html
    sec = report_html.Section("s", "S", {"a": None}, "cap", ["f"])
    page = report_html.render_html([sec], {}, "cmd")
    assert "\n<h1>What attention buys over recurrence, and what it costs</h1>\n" in page
    assert ("<p>Every number below was measured on this machine by the command at the end of the "
            "page. Each figure links its data (CSV) and an SVG version; "
            '<a href="data.md">data.md</a> describes every column, with its unit.</p>') in page
    assert '<p><small>data: <a href="a.csv">a.csv</a> · figures: <a href="f.svg">f.svg</a></small></p>' in page
    assert "\n</section>\n<h2>Machine, versions and command</h2><table class=meta>\n" in page
    assert ("<script>window.addEventListener('load',function(){var n=0;"
            "for(var i of document.images){if(!i.complete||i.naturalWidth===0)n++;}"
            "document.body.setAttribute('data-broken-images',String(n));});</script>") in page
    no_fig = report_html.render_html([report_html.Section("s", "S", {"a": None}, "cap")], {}, "cmd")
    assert '<p><small>data: <a href="a.csv">a.csv</a></small></p>' in no_fig


def test_report_tables_carry_their_css_classes_and_no_index():
    from harness.report import html as report_html
    claims = report_html.claims_table_html(pd.DataFrame({"claim": ["c"], "lesson": ["l"],
                                                         "verdict": ["v"], "measured": ["m"]}))
    assert '<table border="1" class="dataframe table claims">' in claims
    assert re.findall(r"<th>(.*?)</th>", claims) == ["claim", "lesson", "verdict", "measured"]
    dt = pd.DataFrame([dict(model="m", T=1, d=2, macs=3, flops=6, span=4, max_path=5,
                            parallelism=1.5)])
    t1 = report_html.depth_table_html(dt)
    assert '<table border="1" class="dataframe table">' in t1
    assert re.findall(r"<th>(.*?)</th>", t1)[0] == "model"


# ============================================================================ output folders

def test_ensure_writable_dir_names_the_argument_and_the_path(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c"
    assert _io.ensure_writable_dir(deep) == deep and deep.is_dir()      # parents made too
    assert _io.ensure_writable_dir(deep, "--x") == deep                 # and an existing one kept
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(_io.UsageError) as e:
        _io.ensure_writable_dir(blocker / "sub", "--x")
    assert str(e.value) == f"--x: cannot create directory {str(blocker / 'sub')!r}: Not a directory"
    with pytest.raises(_io.UsageError, match=r"^--out: cannot create directory"):
        _io.ensure_writable_dir(blocker / "sub")
    with pytest.raises(_io.UsageError, match=r"^--x: the name .* holds bytes that are not UTF-8"):
        _io.ensure_writable_dir(str(tmp_path / "bad\udcff"), "--x")
    (deep / "x.csv").mkdir()
    with pytest.raises(_io.UsageError) as e:
        _io.ensure_writable_dir(deep, "--x", files=("y.csv", "x.csv"))
    assert str(e.value) == (f"--x: {str(deep / 'x.csv')!r} is a directory, where the file x.csv "
                            f"goes; move it away")
    modes = []

    def refuse(path, mode):
        modes.append(mode)
        return False
    monkeypatch.setattr(_io.os, "access", refuse)
    with pytest.raises(_io.UsageError) as e:
        _io.ensure_writable_dir(deep, "--x")
    assert str(e.value) == f"--x: directory {str(deep)!r} is not writable"
    assert modes == [os.W_OK | os.X_OK]


def test_output_set_writes_utf8_csv_without_the_index(tmp_path):
    frame = pd.DataFrame({"é": [1, 2]}, index=[7, 8])
    with _io.output_set(tmp_path) as files:
        files.write_csv("f.csv", frame)
        files.write_text("t.txt", "ρ")
    assert (tmp_path / "f.csv").read_bytes() == "é\n1\n2\n".encode("utf-8")
    assert (tmp_path / "t.txt").read_bytes() == "ρ".encode("utf-8")
    _io.atomic_write_text(tmp_path / "h.txt", "ρ")
    assert (tmp_path / "h.txt").read_bytes() == "ρ".encode("utf-8")


# ============================================================================ asv's results

def test_asv_results_follow_the_files_own_columns_and_defaults(tmp_path):
    """A file that lists its columns in another order is read by its names; a missing commit
    or date reads as "" and the epoch; a missing value skips that value, not the rest; a
    file without results is skipped."""
    from harness.report import history
    box = tmp_path / "box"
    _asv_file(box, "a.json", {
        "result_columns": ["params", "version", "result"],
        "results": {"k.Kernels.time_forward": [[["'rnn'"], ["8", "16", "32"]], "v1",
                                               [None, 0.5, 0.75]]}})
    _asv_file(box, "b.json", {"commit_hash": "abc", "date": 5})          # no results at all
    h = history.read_asv_results(str(tmp_path))
    assert [(r.params, r.commit, r.seconds) for r in h.itertuples()] == [
        ("'rnn', 16", "", 0.5), ("'rnn', 32", "", 0.75)]
    assert (h.date == pd.Timestamp("1970-01-01")).all()


def test_history_caption_without_the_pair_ends_at_the_source():
    from harness.report import captions
    h = pd.DataFrame([dict(commit="c", series="rnn forward", T=64, d=32, seconds=0.1)])
    assert captions.caption_history({"asv_history": h}).endswith(
        "across 1 commits, read from asv's results (batch 1, d = 32, float64, asv's median).")


def test_kernel_history_reads_the_direction_after_the_last_time_():
    from harness.report import history
    h = pd.DataFrame([dict(benchmark="time_suite.Kernels.time_forward",
                           params="'rnn', 64, 256, 1, 'float64'", commit="c",
                           date=pd.Timestamp("2026-01-01"), seconds=1.0)])
    assert list(history.kernel_history(h).series) == ["rnn forward"]


# ============================================================================ captions, word for word

def test_work_caption_word_for_word_without_rates_or_interval():
    """2·T·d² = 2·T²·d at T = d = 64; the fitted curves cross at 500, 500 / 64 = 7.8 d."""
    from harness.report import captions
    d = 64
    w = pd.DataFrame([dict(model=m, T=t, d=d, macs=(2 * t * d * d if m == RECURRENCE else 2 * t * t * d))
                      for m in (RECURRENCE, ATTENTION) for t in (10, 30, 300, 1000)])
    x = pd.DataFrame([dict(d=d, variant=ATTENTION, counted_T=d, measured_T=np.nan,
                           extrapolated_T=500.0, gemm_over_matvec=7.4, measured_T_lo=np.nan,
                           measured_T_hi=np.nan, predicted_T=np.nan)])
    assert captions.caption_work({"work": w, "crossover": x}) == (
        "Multiplications counted from the traced computation at d = 64: the RNN's 2·T·d² against "
        "attention's 2·T²·d cross at T = 64 (d = 64). Timed on this machine at d = 64, attention's "
        "forward (grid and mix) becomes slower than the RNN's at T ≈ 500 (extrapolated from the "
        "fitted power laws), 7.8× the counted T = 64.")
    measured = captions.caption_work({"work": w, "crossover": x.assign(measured_T=320.0)})
    assert "at T ≈ 320 (measured), 5.0× the counted T = 64." in measured


def test_wall_caption_word_for_word_one_thread_no_rounds_no_floor():
    """Without a rounds column a time is one round; the RNN's step is the median over T of
    3.3 and 5.1 µs, 4.2 µs; exponents without an interval are printed bare."""
    from harness.report import captions
    w = pd.DataFrame([dict(model=RECURRENCE, T=64, d=32, threads=1, seconds_per_step=3.3e-6),
                      dict(model=RECURRENCE, T=128, d=32, threads=1, seconds_per_step=5.1e-6),
                      dict(model=ATTENTION, T=64, d=32, threads=1, seconds_per_step=9e-6)])
    e = pd.DataFrame({"model": [ATTENTION, RECURRENCE], "exponent": [1.8765, 1.0312],
                      "exponent_lo": [np.nan, np.nan], "exponent_hi": [np.nan, np.nan]})
    assert captions.caption_wall({"wall_times": w, "exponents": e}) == (
        "Forward wall time on this machine (1 thread, d = 32; the median of 1 interleaved rounds, "
        "bars its 95 % interval). Fitted exponents of time against T, with 95 % intervals: "
        "attention 1.88, rnn 1.03. The RNN takes 4.2 µs per step (median over T).")


# ============================================================================ small laws

def test_clip_by_norm_clips_a_gradient_smaller_than_one():
    G = np.array([[0.3, 0.4]])                                  # norm 0.5
    out, ln_unit = _clip().clip_by_norm(G, 0.0, 0.25)
    assert out is G and ln_unit == pytest.approx(math.log(0.5))    # halved
    assert _clip().clip_by_norm(G, 0.0, 1.0)[1] == 0.0              # under the threshold: kept
    assert _clip()._ln(0.5) == math.log(0.5) and _clip()._ln(0.0) == -math.inf


def _clip():
    from harness.analysis import clipping
    return clipping


def test_clipping_zero_inputs_have_no_residual():
    row = _clip().clipping_experiment(rhos=(0.9,), T=4, d=3, input_scale=0.0).iloc[0]
    assert row.residual == 0.0


def test_rnn_defaults_are_the_documented_ones():
    A = np.arange(6.0).reshape(2, 3)
    assert rnn_family.log_dphi(A, "identity").shape == (2, 3)
    assert not rnn_family.log_dphi(A, "identity").any()
    np.testing.assert_array_equal(rnn_family.recurrent_matrix(4, 0.5),
                                  rnn_family.recurrent_matrix(4, 0.5, "orthogonal", 0))


def test_reflected_operators_broadcast_a_larger_constant():
    from harness.analysis import trace
    g = trace.Graph()
    x = trace.leaf(g, "x", (2,), ("d_model",))
    big = [[1.0, 2.0]] * 3                                      # (3, 2): a list, so Python reflects
    for out in (big + x, big - x, big * x, big / x):
        assert out.shape == (3, 2)
        assert g.ops[-1].shape == (3, 2)


def test_sweep_frame_is_numbered_afresh_and_summarised_from_its_fit_window():
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, Ts=(12,), ds=(3,), models=("rnn",), rhos=(0.5, 0.9),
                              weights=("gaussian",), activations=("tanh",), input_scales=(1.0,),
                              measure="probe", fit_from=0.75)
    frame, summary = gradpath.decay_sweep(cfg)
    assert list(frame.index) == list(range(len(frame)))
    pd.testing.assert_frame_equal(summary, gradpath.summarise(frame, 0.75))
    assert not summary.ln_rate.equals(gradpath.summarise(frame, 0.0).ln_rate)


def test_config_memory_names_the_largest_stage_in_GiB():
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, Ts=(100,), ds=(64,), models=("rnn", "attention"),
                              measure="both", exact_max_d=128)
    stages = gradpath.stage_memory_bytes(100, 64, cfg)
    stage, need = max(stages.items(), key=lambda kv: kv[1])
    assert stage != max(stages)                                 # not simply the last name
    with pytest.raises(MemoryError) as e:
        gradpath.check_config_memory(cfg, available=2**30 // 1024)
    assert str(e.value) == (f"T=100, d=64: stage {stage!r} needs {need:,} bytes "
                            f"({need / 2**30:.2f} GiB) but only 0.00 GiB are available; "
                            f"use a smaller T or d")
    long = dataclasses.replace(cfg, Ts=(300000,))
    need = max(gradpath.stage_memory_bytes(300000, 64, long).values())
    with pytest.raises(MemoryError) as e:
        gradpath.check_config_memory(long, available=2**29)
    assert f"({need / 2**30:.2f} GiB) but only 0.50 GiB are available" in str(e.value)
    with pytest.raises(ValueError, match="models"):
        gradpath.validate_config(dataclasses.replace(cfg, models=("nope",)))
    with pytest.raises(ValueError, match="model must be one of"):
        gradpath.path_levels("nope", (8,), (1.0,), 4)


def test_build_report_stages_in_the_folder_and_files_every_part(tmp_path):
    """The files are staged in a hidden ``OutputSet`` folder inside the destination (a dead
    run's is removed) and moved out of it together; the CSVs carry no index; the claims section
    comes first with its counts; machine.json is indented and times the run; the data
    dictionary is copied beside."""
    import json
    from harness import report
    from harness.analysis import claims
    from harness.infra.files import STAGING_PREFIX
    from harness.report import build
    out = tmp_path / "a" / "b" / "r1"                            # parents made as needed
    out.mkdir(parents=True)
    dead = out / f"{STAGING_PREFIX}999999999-x"                  # a run killed with -9
    dead.mkdir()
    stages = []
    real_build = build._build

    def spy(files, *args):
        stages.append(files.stage)
        return real_build(files, *args)
    with mock.patch.object(build, "_sections", _one_section), \
            mock.patch.object(build.claims, "claims_table", _claims), \
            mock.patch.object(build, "_build", spy):
        report.build_report(out)
    (stage,) = stages
    assert stage.parent == out.resolve()
    assert re.fullmatch(rf"{re.escape(STAGING_PREFIX)}{os.getpid()}-.+", stage.name), stage.name
    assert not stage.exists() and not dead.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["r1"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert (out / "clipping.csv").read_text().splitlines()[0].startswith("rho,threshold,")
    assert (out / "claims.csv").read_text().splitlines()[0].startswith("claim,lesson,")
    page = (out / "index.html").read_text()
    assert "<code>harness report</code>" in page                 # the default command
    assert '<img src="clipping.png"' in page
    counts = ", ".join(f"{(['holds', 'does not hold'].count(v))} {v}" for v in claims.VERDICTS)
    assert (f'<section id="claims"><h2>The lessons&#x27; claims, measured</h2>\n<p class="caption" '
            f'data-section="claims">2 claims of the three lessons against this run&#x27;s '
            f"measurements: {counts}. Each verdict is computed from the data by a rule in "
            f"harness/analysis/claims.py; the columns of every CSV are described in "
            f"docs/data.md.</p>") in page
    assert '<a href="claims.csv">claims.csv</a>' in page and 'class="dataframe table claims"' in page
    text = (out / "machine.json").read_text()
    assert text.startswith('{\n "date": ')
    assert 0.0 <= float(json.loads(text)["seconds"]) < 600.0
    if build.DATA_DICTIONARY.exists():                           # a checkout, not a wheel
        assert (out / "data.md").read_text() == build.DATA_DICTIONARY.read_text()


def test_crossover_prediction_from_rates_and_each_rows_width():
    """predicted_T = counted_T (1 + gemm / gemv) / 2: the RNN's recurrence at the GEMV rate and
    its input products at the GEMM rate against attention's grid at the GEMM rate."""
    cfg = dataclasses.replace(config.WALL, fit_min_T=100, extrapolate_max=100.0)
    rows = walltime.measured_crossover(_times(), cfg, rates={"gemm_gmacs": 12.0, "gemv_gmacs": 4.0})
    row = rows.set_index("variant").loc[ATTENTION]
    assert row.predicted_T == D * (1 + 12.0 / 4.0) / 2
    assert (rows.d == D).all()
    assert (walltime.fit_exponents(_times()).d == D).all()


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


def test_strong_scaling_defaults_to_one_thread_up_to_every_core():
    cfg = dataclasses.replace(config.WALL, scaling_T=6, d=3, rounds=2)
    fake = _FakeRounds(lambda k, n, r: 1.0)
    with mock.patch.object(walltime.timing, "time_interleaved", fake):
        f = walltime.strong_scaling(cfg)
    assert sorted(f.threads.unique()) == list(range(1, (os.cpu_count() or 1) + 1))


def test_task_graph_is_scalar_by_default():
    from harness.analysis import depth, schedule
    tr = depth.trace_model(ATTENTION, 4, 2)
    a, b = schedule.task_graph(tr), schedule.task_graph(tr, "scalar")
    assert (a.grain, a.work, a.span) == (b.grain, b.work, b.span) == ("scalar", b.work, b.span)
    assert a.level_size.dtype == np.int64 and a.indeg.dtype == np.int64
