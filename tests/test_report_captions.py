"""harness.report.captions: each caption on frames built by hand, edge cases included.

Each caption is given frames whose numbers are known, and must state those numbers. The
numbers are read out of the sentence whatever its wording; values that a wrong row, column
or window would give instead are chosen far apart, so that they cannot pass by rounding.
A few captions are also checked word for word.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from harness.models import ATTENTION, RECURRENCE
from harness.report import captions

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


def test_history_caption_without_the_pair_ends_at_the_source():
    from harness.report import captions
    h = pd.DataFrame([dict(commit="c", series="rnn forward", T=64, d=32, seconds=0.1)])
    assert captions.caption_history({"asv_history": h}).endswith(
        "across 1 commits, read from asv's results (batch 1, d = 32, float64, asv's median).")


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


def _schedule_rows(T, d, series):
    """``series``: {(model, grain): (span, {P: time})} -> a schedule frame, rows shuffled."""
    rows = [{"model": m, "T": T, "d": d, "grain": g, "P": P, "time": t, "span": span,
             "bounds_ok": True}
            for (m, g), (span, times) in series.items() for P, t in times.items()]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=3)


def test_schedule_caption_of_one_token_on_one_processor():
    # the smallest schedule: T = 1, so P = 1 is both "one processor" and "T processors",
    # and every (model, grain) has a single row
    s = _schedule_rows(1, 2, {(RECURRENCE, "scalar"): (6, {1: 14}),
                              (ATTENTION, "scalar"): (9, {1: 30}),
                              (RECURRENCE, "element"): (4, {1: 11}),
                              (ATTENTION, "element"): (5, {1: 25})})
    cap = captions.caption_schedule({"schedule": s})
    assert "for the lesson's T = 1 tokens (d = 2)" in cap
    assert "the RNN needs 14 steps against 14 on one processor: 1.0× faster" in cap
    assert "its span of 6 (reached at P = 1)" in cap
    assert "Attention needs 30 steps on 1 processors" in cap
    assert "only at none of the P scheduled; its span, 9, is not constant" in cap
    assert "stops improving at P = 1 (" in cap and "on a floor of 4 steps" in cap
    assert cap.endswith("hold on all 4 of 4 runs.")


def test_schedule_caption_compares_only_the_P_both_models_ran_at():
    # attention was also scheduled at P = 50, where the RNN was not: no comparison there,
    # so the first P where attention is faster is 100 (30 < 40), not 50
    s = _schedule_rows(20, 4, {
        (RECURRENCE, "scalar"): (40, {1: 500, 4: 130, 20: 60, 100: 40}),
        (ATTENTION, "scalar"): (10, {1: 900, 4: 230, 20: 70, 50: 35, 100: 30}),
        (RECURRENCE, "element"): (50, {1: 600, 4: 160, 20: 80, 100: 50})})
    cap = captions.caption_schedule({"schedule": s})
    assert "is faster than the RNN only from P = 100 on;" in cap
    assert "needs 60 steps against 500 on one processor: 8.3× faster" in cap   # 500 / 60


def test_wall_caption_gives_each_model_its_own_interval_and_the_step_in_microseconds():
    w = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "T": 64, "d": 32, "threads": 2,
                      "seconds_per_step": [0.0625, 0.5]})
    e = pd.DataFrame({"model": [RECURRENCE, ATTENTION], "exponent": [1.0312, 1.8765],
                      "exponent_lo": [0.9222, 1.7111], "exponent_hi": [1.1333, 1.9444]})
    cap = captions.caption_wall({"wall_times": w, "exponents": e})
    assert f"{RECURRENCE} 1.03 [0.92, 1.13], {ATTENTION} 1.88 [1.71, 1.94]." in cap
    assert "takes 62500.0 µs per step" in cap             # 0.0625 s = 62,500 µs exactly


def test_memory_caption_compares_the_largest_with_the_smallest_of_three():
    peaks = {"a": (2**20, 2**20), "b": (2**20, 10 * 2**20), "c": (2**20, 40 * 2**20)}
    f = pd.DataFrame([{"model": m, "T": T, "d": 8, "dtype": "float64", "peak_bytes": p,
                       "output_bytes": 0, "estimate_bytes": 0}
                      for m, pair in peaks.items() for T, p in zip((100, 1000), pair)])
    cap = captions.caption_memory({"peak_memory": f})
    assert "At T = 1000: a 1.0 MiB (T^0.00); b 10.0 MiB (T^1.00); c 40.0 MiB (T^" in cap
    assert cap.endswith("c needs 40 times what a needs.")


def test_clipping_caption_of_a_single_radius_states_its_threshold():
    # clipping_experiment(rhos=(1.5,)) gives one row: the caption still names the threshold
    c = pd.DataFrame({"rho": [1.5], "threshold": [2.0], "log10_total_before": [3.0],
                      "log10_total_after": [math.log10(2.0)],
                      "log10_far_over_near_before": [2.0], "log10_far_over_near_after": [2.0]})
    cap = captions.caption_clipping({"clipping": c})
    assert cap.startswith("Clipping the total gradient to 2 rescales every distance by ")


def test_memory_caption_of_one_measured_variant_at_one_T():
    # measure(variants=["a"]) at a single T: one row, no growth to read
    f = pd.DataFrame([{"model": "a", "T": 100, "d": 8, "dtype": "float32",
                       "peak_bytes": 3 * 2**20, "output_bytes": 0, "estimate_bytes": 0}])
    cap = captions.caption_memory({"peak_memory": f})
    assert cap.startswith("Peak resident memory of one forward call (float32, d = 8, ")
    assert "At T = 100: a 3.0 MiB" in cap
    assert cap.endswith("a needs 1 times what a needs.")


def test_memory_caption_when_only_one_variant_fits_at_the_largest_T():
    # b's call at T = 1000 was refused (MemoryError: NaN peak): a alone is compared there
    f = pd.DataFrame([{"model": m, "T": T, "d": 8, "dtype": "float64", "peak_bytes": p,
                       "output_bytes": 0, "estimate_bytes": 0}
                      for m, T, p in (("a", 100, 2**20), ("a", 1000, 10 * 2**20),
                                      ("b", 100, 4 * 2**20), ("b", 1000, math.nan))])
    cap = captions.caption_memory({"peak_memory": f})
    assert "At T = 1000: a 10.0 MiB (T^1.00); in brackets" in cap     # 10 = 10^1
    assert cap.endswith("a needs 1 times what a needs.")


def test_attention_path_caption_of_a_single_T_states_its_input_scale():
    lv = pd.DataFrame([{"T": 64, "input_scale": s, "log10_level": -s, "log10_min": -s - 1,
                        "log10_max": -s + 1, "log10_value": -2.0, "log10_score": -3.0}
                       for s in (0.5, 2.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # a line through one point: rank-deficient
        cap = captions.caption_attention_path({"attention_level": lv})
    assert "At input scale 0.5 its level (the mean of log10" in cap
    assert "falls from 10^-0.5 at T = 64 to 10^-0.5 at T = 64" in cap


def _clip_rows(*rows):
    # (rho, log10 before, log10 after, log10 far/near after), threshold 1
    return {"clipping": pd.DataFrame(
        [{"rho": r, "threshold": 1.0, "log10_total_before": b, "log10_total_after": a,
          "log10_far_over_near_before": fn, "log10_far_over_near_after": fn}
         for r, b, a, fn in rows])}


def test_clipping_caption_says_what_was_clipped_from_the_norms():
    lesson = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.5, -1.0, -1.0, -9.0)))
    assert "At ρ = 0.5 nothing is clipped" in lesson
    assert lesson.endswith(": clipping stops explosion, it does not rescue vanishing.")
    both = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.9, 2.0, 0.0, -9.0)))
    assert "At ρ = 0.9 the gradient is clipped too, from 10^+2.0 to 10^+0.0" in both
    assert "nothing is clipped" not in both and "does not rescue" not in both
    neither = captions.caption_clipping(_clip_rows((1.1, -0.5, -0.5, -1.0)))
    assert "At ρ = 1.1 the gradient's norm, 10^-0.5, is under the threshold: nothing is clipped" in neither
    assert "cut to" not in neither and "does not rescue" not in neither


def test_clipping_caption_whole_sentences_and_where_the_conclusion_holds():
    lesson = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.5, -1.0, -1.0, -9.0)))
    assert lesson.startswith("Clipping the total gradient to 1 rescales every distance by the same "
                             "factor. At ρ = 1.5 the gradient of norm 10^+6.0 is cut to 10^+0.0")
    assert lesson.endswith("At ρ = 0.5 nothing is clipped and the far contribution stays 10^-9.0 of "
                           "the near one: clipping stops explosion, it does not rescue vanishing.")
    mild = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.9, 0.5, 0.0, -9.0)))
    assert "At ρ = 0.9 the gradient is clipped too, from 10^+0.5 to 10^+0.0" in mild   # half a decade
    assert mild.startswith("Clipping the total gradient to 1 rescales")
    for far in (0.0, 0.5):            # the small radius does not vanish: no conclusion
        cap = captions.caption_clipping(_clip_rows((1.5, 6.0, 0.0, -2.0), (0.5, -1.0, -1.0, far)))
        assert cap.endswith("of the near one.") and "rescue" not in cap
    one = captions.caption_clipping(_clip_rows((1.1, -0.5, -0.5, -1.0)))
    assert one.startswith("Clipping the total gradient to 1 rescales") and one.count("At ρ") == 1


def test_transformer_caption_states_the_boxes_the_heads_and_the_crossover():
    import pandas as pd
    from harness.report import captions
    boxes = pd.DataFrame({"box": ["Input Embedding", "Multi-Head Attention", "Softmax"],
                          "mixes_positions": [False, True, False]})
    heads = pd.DataFrame({"heads": [2, 1], "d_k": [4, 8], "T": 16, "d": 8, "total": [900, 900]})
    work = pd.DataFrame([dict(model="transformer", T=64, d=8, quadratic=16 * 64 * 64,
                              linear=800 * 64, macs=16 * 64 * 64 + 800 * 64),
                         dict(model="lstm", T=64, d=8, quadratic=0, linear=1000, macs=1000)])
    cap = captions.caption_transformer({"figure1_boxes": boxes, "heads_cost": heads,
                                        "layer_work": work})
    assert "1 of Figure 1's 3 boxes let an output row depend on another input row: " \
           "Multi-Head Attention." in cap
    assert "does 900, 900 multiplications for h = 1, 2 (T = 16, d = 8)" in cap
    # q T^2 = l T at T = 800 / 16 = 50 = 6.25 d; at T = 64 the layer does 116,736 / 1,000
    assert "only at T = 50 (6.25·d); at T = 64 the layer does 116.7× the LSTM's" in cap


# ----------------------------------------------------------------------------- linear attention

_LIN = ("linear_attention", "linear_attention-parallel", "linear_attention-chunked")


def _linear_frames():
    """The linear section's frames, with another family's rows beside them that must be left out."""
    methods = pd.DataFrame([dict(T=T, d=16, decay=dec, dtype="float64", methods="recurrent/parallel",
                                 max_abs_diff=3e-15 if (T, dec) == (200, "constant") else 1e-16,
                                 max_abs_output=1.5)
                            for T in (1, 200, 1000) for dec in ("none", "constant", "selective")])
    depth = pd.DataFrame([dict(model=m, T=T, d=512, span=s)
                          for m, spans in (("rnn", (150, 6000)), (_LIN[0], (59, 2009)),
                                           (_LIN[1], (10, 10)), (_LIN[2], (10, 40)))
                          for T, s in zip((50, 2000), spans)])
    mib = 2.0 ** 20
    memory = pd.DataFrame([dict(model=m, T=T, d=64, dtype="float32", peak_bytes=p * mib,
                                output_bytes=0, estimate_bytes=0)
                           for m, peaks in (("attention", (70, 900)), (_LIN[0], (1, 4)),
                                            (_LIN[1], (16, 256)), (_LIN[2], (1.5, 6)))
                           for T, p in zip((1024, 4096), peaks)])
    wall = pd.DataFrame([dict(model=m, T=T, d=512, threads=1, seconds=s, seconds_lo=0.9 * s,
                              seconds_hi=1.2 * s, rounds=5)
                         for m, secs in (("rnn", (0.1, 9.0)), (_LIN[0], (0.25, 1.5)),
                                         (_LIN[1], (0.05, 0.2)), (_LIN[2], (0.01, 0.02)))
                         for T, s in zip((1024, 2048), secs)])
    return {"linear_methods": methods, "depth": depth, "peak_memory": memory, "wall_times": wall}


def test_linear_caption_states_agreement_spans_memory_and_time():
    cap = captions.caption_linear(_linear_frames())
    # 3e-15 / 1.5: the worst row, T = 200, constant decay
    assert "Their outputs agree to 2.0e-15 of max |y| (float64, T = 1 to 1,000, every decay)" in cap
    assert ("Traced at d = 512 and T = 2,000, the spans differ in kind: recurrent 2,009, "
            "parallel 10, chunked 40 operations (at T = 50: 59, 10, 10)") in cap
    # 4 MiB from 1 MiB over 4x T: T^1.00; 256 from 16: T^2.00; the attention row left out
    assert ("Peak memory of one forward at T = 4,096 (float32, d = 64): recurrent 4.0 MiB "
            "(T^1.00), parallel 256.0 MiB (T^2.00), chunked 6.0 MiB (T^1.00)") in cap
    assert ("Forward time at T = 2,048 (d = 512) (median of 5 interleaved rounds, 95 % intervals): "
            "recurrent 1,500.0 ms [1,350.0, 1,800.0], parallel 200.0 ms [180.0, 240.0], chunked "
            "20.0 ms [18.0, 24.0]: the chunked form is 75.0× faster than the recurrent one.") in cap
    _lacks(cap, 6000, 0)
    _lacks(cap, 900, 0)


def test_linear_caption_leaves_out_a_size_the_parallel_form_could_not_run():
    f = _linear_frames()
    f["peak_memory"] = pd.concat([f["peak_memory"], pd.DataFrame([dict(
        model=_LIN[1], T=16384, d=64, dtype="float32", peak_bytes=math.nan, output_bytes=0,
        estimate_bytes=0)])])
    cap = captions.caption_linear(f)
    assert "Peak memory of one forward at T = 4,096" in cap      # NaN: refused, not measured


def test_linear_figure_draws_three_measures_of_three_algorithms():
    from harness.report import figures
    f = _linear_frames()
    long = figures._linear_long(f)
    assert sorted(long.measure.unique()) == ["forward time (s)", "peak memory (MiB)",
                                             "span (operations, traced)"]
    assert set(long.algorithm) == {"recurrent", "parallel", "chunked"}
    assert len(long) == 3 * 3 * 2                              # no rnn or attention rows
    mem = long[(long.measure == "peak memory (MiB)") & (long.algorithm == "parallel")]
    assert mem.value.tolist() == [16.0, 256.0]
    fig = figures.figure_linear(f)
    assert len(fig.axes) == 3
    assert all(len(ax.get_lines()) >= 3 for ax in fig.axes)
    figures.encode(fig)


def _fitted(rows):
    """An exponents frame (walltime.fit_exponents' columns) from (model, T_max, share at
    T_min, share at T_max), p 1 with its interval, T_min 128."""
    return pd.DataFrame([dict(model=m, d=512, exponent=1.0, fixed_seconds=1e-3, fixed_share=s0,
                              fixed_share_T_max=s1, T_min=128, T_max=T, points=5,
                              exponent_lo=0.9, exponent_hi=1.1) for m, T, s0, s1 in rows])


def _wall_of(e):
    return pd.DataFrame({"model": e.model, "T": 128, "d": 512, "threads": 1,
                         "seconds_per_step": 1e-5})


def test_wall_caption_states_each_fitted_range_and_the_fixed_cost_at_both_ends():
    # the quick report times the recurrences to 4096, the rest to 2048 (#27): the caption
    # says which models were fitted how far, and how much of a call a is at each end
    e = _fitted([(ATTENTION, 2048, 0.05, 0.001), ("lru", 4096, 0.31, 0.0123),
                 (RECURRENCE, 4096, 0.09, 0.004)])
    cap = captions.caption_wall({"wall_times": _wall_of(e), "exponents": e})
    assert ("fitted for T = 128 to 4096 (lru and rnn; the others to 2048) with a ≥ 0 a call's "
            "fixed cost; a is 9% of the RNN's time at T = 128 and 0.4% at T = 4096, at most "
            "31% (lru) at T = 128 and 1.2% at its T = 4096, with 95 % intervals: "
            "attention 1.00 [0.90, 1.10], lru 1.00 [0.90, 1.10], rnn 1.00 [0.90, 1.10].") in cap


def test_wall_caption_names_the_largest_fixed_cost_only_where_it_is_not_the_rnns():
    # the RNN's share the largest: no "at most" clause; one range: no "the others"
    e = _fitted([(ATTENTION, 2048, 0.05, 0.001), (RECURRENCE, 2048, 0.09, 0.004)])
    cap = captions.caption_wall({"wall_times": _wall_of(e), "exponents": e})
    assert ("fitted for T = 128 to 2048 with a ≥ 0 a call's fixed cost; a is 9% of the RNN's "
            "time at T = 128 and 0.4% at T = 2048, with 95 % intervals:") in cap
    assert "at most" not in cap and "the others" not in cap
    # three ranges: each named, the shortest as "the others"
    e = _fitted([(ATTENTION, 1024, 0.05, 0.001), ("lru", 2048, 0.31, 0.0123),
                 (RECURRENCE, 4096, 0.09, 0.004)])
    cap = captions.caption_wall({"wall_times": _wall_of(e), "exponents": e})
    assert "fitted for T = 128 to 4096 (rnn; lru to 2048; the others to 1024) with a" in cap


def test_wall_caption_says_which_intervals_were_widened_for_lack_of_fit_and_by_how_much():
    e = _fitted([(ATTENTION, 2048, 0.05, 0.001), (RECURRENCE, 4096, 0.09, 0.004)])
    cap = captions.caption_wall({"wall_times": _wall_of(e), "exponents": e.assign(lack_of_fit=1.0)})
    assert "widened" not in cap
    cap = captions.caption_wall({"wall_times": _wall_of(e),
                                 "exponents": e.assign(lack_of_fit=[1.0, 2.154])})
    assert (f"{RECURRENCE} 1.00 [0.90, 1.10] (widened where the medians stray from the fitted "
            f"curve beyond the rounds' noise, by ×2.15 for {RECURRENCE}).") in cap


def test_linear_caption_at_three_lengths_without_rounds_and_with_a_single_measured_length():
    f = _linear_frames()
    f["depth"] = pd.DataFrame([dict(model=m, T=T, d=512, span=s)
                               for m, spans in ((_LIN[0], (59, 509, 2009)), (_LIN[1], (10, 10, 10)),
                                                (_LIN[2], (10, 25, 40)))
                               for T, s in zip((50, 500, 2000), spans)])
    mem = f["peak_memory"]
    mem = mem[~((mem.model == _LIN[2]) & (mem["T"] == 1024))].copy()   # chunked: one T only
    mem.loc[(mem.model == _LIN[0]) & (mem["T"] == 4096), "output_bytes"] = math.nan
    f["peak_memory"] = mem
    f["wall_times"] = f["wall_times"].drop(columns="rounds")
    cap = captions.caption_linear(f)
    assert ("Traced at d = 512 and T = 2,000, the spans differ in kind: recurrent 2,009, "
            "parallel 10, chunked 40 operations (at T = 50: 59, 10, 10)") in cap
    # a NaN outside peak_bytes keeps its row; one length measured: no growth exponent
    assert ("Peak memory of one forward at T = 4,096 (float32, d = 64): recurrent 4.0 MiB "
            "(T^1.00), parallel 256.0 MiB (T^2.00), chunked 6.0 MiB. ") in cap
    assert "Forward time at T = 2,048 (d = 512): recurrent 1,500.0 ms" in cap
    assert "XXXX" not in cap and "nan" not in cap


def test_transformer_caption_word_for_word_with_two_mixing_boxes_and_two_families():
    boxes = pd.DataFrame({"box": ["Input Embedding", "Multi-Head Attention",
                                  "Masked Multi-Head Attention", "Softmax"],
                          "mixes_positions": [False, True, True, False]})
    heads = pd.DataFrame({"heads": [2, 1], "d_k": [4, 8], "T": 16, "d": 8, "total": [900, 900]})
    work = pd.DataFrame([dict(model="transformer", T=64, d=8, quadratic=16 * 64 * 64,
                              linear=800 * 64, macs=16 * 64 * 64 + 800 * 64),
                         dict(model="lstm", T=64, d=8, quadratic=0, linear=1000, macs=1000),
                         dict(model="rnn", T=64, d=8, quadratic=0, linear=500, macs=500)])
    cap = captions.caption_transformer({"figure1_boxes": boxes, "heads_cost": heads,
                                        "layer_work": work})
    # 116,736 / 1,000 and / 500
    assert cap == (
        "Traced box by box, 2 of Figure 1's 4 boxes let an output row depend on another input "
        "row: Multi-Head Attention, Masked Multi-Head Attention. The rest (embeddings, positional "
        "encodings, add & norm, feed forward, the final linear and softmax) work one row at a "
        "time. Multi-head attention with d_k = d_model / h does 900, 900 multiplications for "
        "h = 1, 2 (T = 16, d = 8). Counting every product of a layer at d = 8, its T² terms pass "
        "its projections and feed-forward only at T = 50 (6.25·d); at T = 64 the layer does "
        "116.7× the LSTM's, 233.5× the RNN's multiplications.")


# ------------------------------------------------------------------ the wall caption's fit ranges

def test_names_are_listed_with_commas_and_a_final_and():
    assert captions._and(["rnn"]) == "rnn"
    assert captions._and(["lru", "rnn"]) == "lru and rnn"
    assert captions._and(["gru", "lru", "lstm", "rnn"]) == "gru, lru, lstm and rnn"


def test_fitted_ranges_name_each_T_max_from_the_largest_and_the_others_last():
    e = pd.DataFrame({"model": ["lru", "rnn", "gru", "lstm", ATTENTION, "unfitted"],
                      "T_max": [4096, 4096, 2048, 1536, 1024, np.nan],
                      "exponent_lo": [1.0, 1.0, np.nan, 1.0, 1.9, np.nan]})   # a gap elsewhere
    assert captions._fitted_ranges(e) == (
        "4096 (lru and rnn; gru to 2048; lstm to 1536; the others to 1024)")
    assert captions._fitted_ranges(e[e.model.isin(["lru", "rnn"])]) == "4096"


def _shares(**rnn):
    row = dict(model=RECURRENCE, fixed_share=0.2, fixed_share_T_max=0.015, T_min=64, T_max=4096)
    return {**row, **rnn}


def test_fixed_shares_give_the_rnns_share_at_both_ends_and_the_largest_other():
    other = dict(model="gru", fixed_share=0.35, fixed_share_T_max=0.021, T_min=64, T_max=2048)
    e = pd.DataFrame([_shares(), other])
    assert captions._fixed_shares(e) == (
        "; a is 20% of the RNN's time at T = 64 and 1.5% at T = 4096, at most 35% (gru) at "
        "T = 64 and 2.1% at its T = 2048")
    # an other model no larger than the RNN's share (a tie, listed first) is not named
    tie = pd.DataFrame([{**other, "fixed_share": 0.2}, _shares()])
    assert captions._fixed_shares(tie) == "; a is 20% of the RNN's time at T = 64 and 1.5% at T = 4096"
    # without the share at T_max, or with it unknown: the first part alone
    first = "; a is 20% of the RNN's time at T = 64"
    assert captions._fixed_shares(pd.DataFrame([_shares()]).drop(columns="fixed_share_T_max")) == first
    assert captions._fixed_shares(pd.DataFrame([_shares(fixed_share_T_max=np.nan)])) == first
    # no RNN, or its share unknown: nothing
    assert captions._fixed_shares(pd.DataFrame([other])) == ""
    assert captions._fixed_shares(pd.DataFrame([_shares(fixed_share=np.nan), other])) == ""


def test_wall_caption_names_every_widened_fit_and_only_those_beyond_the_noise():
    w = pd.DataFrame({"model": [RECURRENCE, ATTENTION, "lru"], "T": 64, "d": 32, "threads": 1,
                      "seconds_per_step": [1e-6, 2e-6, 3e-6]})
    e = pd.DataFrame({"model": [RECURRENCE, ATTENTION, "lru"], "exponent": [1.0, 2.0, 1.1],
                      "exponent_lo": [np.nan] * 3, "exponent_hi": [np.nan] * 3,
                      "lack_of_fit": [1.5, 1.0, 3.25]})
    cap = captions.caption_wall({"wall_times": w, "exponents": e})
    assert ("(widened where the medians stray from the fitted curve beyond the rounds' noise, by "
            f"×1.50 for {RECURRENCE}, ×3.25 for lru)") in cap
