"""The claims of the goodbye-to-recurrence lesson about its two models, the tanh RNN and
attention: sequential depth, work and the gradient path.
"""

from __future__ import annotations

import math

import numpy as np

from harness.analysis.claims._rules import (HOLDS, QUALIFIED, FAILS, _row, _unmeasured, _claim, BYE,
                                            EXACT)
from harness.models import ATTENTION as ATT
from harness.models import RECURRENCE as RNN
from harness.report import numbers


@_claim("An RNN's T steps run one after another", "goodbye to recurrence", "depth")
def depth_in_sequence(f):
    """The RNN's span grows in proportion to T (its steps run in order)."""
    r = numbers.by_T(f["depth"], RNN)
    per_step = r.span / r["T"]
    steady = float(per_step.max() / per_step.min())
    return _row(f"the RNN's span is {per_step.iloc[0]:g}·T operations at every T "
                f"({int(r.span.iloc[0]):,} at T = {int(r['T'].iloc[0])}, {int(r.span.iloc[-1]):,} "
                f"at T = {int(r['T'].iloc[-1])})",
                per_step.iloc[-1], HOLDS if steady < 1.01 else FAILS)


@_claim("A machine with T processors changes nothing for T tokens", "goodbye to recurrence",
        "schedule")
def processors_change_nothing(f):
    """On P = T processors the RNN's schedule is (nearly) no faster than on one."""
    s = f["schedule"]
    T = int(s["T"].iloc[0])
    claim = f"A machine with {T} processors changes nothing for {T} tokens"
    r = numbers.rnn_schedule(s)
    if T not in r.index or 1 not in r.index:
        return _unmeasured(f"the RNN was not scheduled on both 1 and {T} processors", claim=claim)
    speedup = float(r.loc[1] / r.loc[T])
    verdict = HOLDS if speedup < 1.5 else FAILS
    return _row(f"with every multiply and add a task, the RNN on {T} processors takes "
                f"{int(r.loc[T]):,} steps against {int(r.loc[1]):,} on one: {speedup:,.1f}× faster. "
                f"The steps stay in order, but each step's d² products spread over the processors",
                speedup, verdict, claim=claim)


LESSON_BOXES, LESSON_MIXING = 15, 3       # "of the fifteen boxes, three light up"


@_claim("Of Figure 1's fifteen boxes three mix positions; the other twelve work on one row at a "
        "time", "goodbye to recurrence", "figure1_boxes")
def figure1_three_boxes_mix(f):
    """The tracer's count of Figure 1's boxes in which an output row depends on another input
    row: three, as the lesson says (the count of boxes itself depends on how the two
    positional-encoding circles are counted)."""
    t = f["figure1_boxes"]
    mixing = t[t.mixes_positions.astype(bool)]
    n, total = len(mixing), len(t)
    names = ", ".join(f"{r.box} ({r.stack})" for r in mixing.itertuples())
    verdict = FAILS if n != LESSON_MIXING else (HOLDS if total == LESSON_BOXES else QUALIFIED)
    return _row(f"{n} of the {total} boxes traced mix positions: {names}; the other {total - n} "
                f"leave every output row on its own input row"
                + ("" if total == LESSON_BOXES else
                   f" (the figure has {int((t.drawn == 'rectangle').sum())} rectangles and "
                   f"{int((t.drawn != 'rectangle').sum())} positional-encoding circles: "
                   f"{total} boxes, not {LESSON_BOXES})"), n, verdict)


@_claim("The input products W_xh x_t can all run at once; the recurrent ones wait", BYE,
        "recurrence_halves")
def input_half_parallel(f):
    """Traced: the T input products are one product (a chain of 1) at every T; the recurrent
    ones a chain of T."""
    h = f["recurrence_halves"]
    inp = h[h.part == "input"].set_index("T")
    rec = h[h.part == "recurrence"].set_index("T")
    ok = bool((inp.chain == 1).all() and (inp.rows == inp.index).all()
              and (rec.chain == rec.index).all())
    T = int(h["T"].max())
    return _row(f"at T = {T:,}: the {int(inp.loc[T].rows):,} input products in a chain of "
                f"{int(inp.loc[T].chain)}, the {int(rec.loc[T].rows):,} recurrent ones in a chain of "
                f"{int(rec.loc[T].chain):,}", float(rec.loc[T].chain), HOLDS if ok else FAILS)


@_claim("Attention is a constant number of stages", "goodbye to recurrence", "depth")
def attention_constant_stages(f):
    """Attention's op-level span is the same at every T; its scalar span grows like log T."""
    a = numbers.by_T(f["depth"], ATT)
    const = a.span.nunique() == 1
    grows = int(a.scalar_span.iloc[-1]) > int(a.scalar_span.iloc[0])
    verdict = (QUALIFIED if grows else HOLDS) if const else FAILS
    return _row(f"{int(a.span.iloc[-1])} operations deep at every T; counted in multiplies and adds "
                f"(sums as trees) its span grows from {int(a.scalar_span.iloc[0])} to "
                f"{int(a.scalar_span.iloc[-1])} as T goes from {int(a['T'].iloc[0])} to "
                f"{int(a['T'].iloc[-1])}, like log T", int(a.span.iloc[-1]), verdict)


@_claim("Through W_hh the signal vanishes or explodes with the spectral radius",
        "goodbye to recurrence", "decay_summary")
def vanishing_with_radius(f):
    """The linear RNN's fitted decay per step is log(rho), for every rho."""
    s = f["decay_summary"]
    lin = s[(s.model == RNN) & (s.activation == "identity") & (s.weight == "orthogonal")]
    if not len(lin):
        return _unmeasured("decay_summary.csv has no linear RNN with orthogonal weights")
    err = float((lin.ln_rate - np.log(lin.rho)).abs().max())
    return _row(f"the linear RNN's norm falls by exactly ρ per step for ρ = "
                f"{', '.join(f'{r:g}' for r in sorted(lin.rho.unique()))} (largest error of the "
                f"fitted rate {err:.1e} per step)", err, HOLDS if err < 1e-6 else FAILS)


@_claim("tanh saturation makes vanishing worse", "goodbye to recurrence", "decay_summary")
def tanh_makes_it_worse(f):
    """At every rho, the tanh RNN's far gradient is no larger than the linear one's."""
    s = f["decay_summary"]
    base = s[(s.model == RNN) & (s.weight == "orthogonal") & (s.input_scale == numbers.UNIT_SCALE)]
    w = base.pivot(index="rho", columns="activation", values="log10_far")
    if not {"tanh", "identity"} <= set(w.columns):
        return _unmeasured(f"decay_summary.csv lacks the tanh or the linear RNN with orthogonal "
                           f"weights at input scale {numbers.UNIT_SCALE:g}")
    worse = int((w["tanh"] <= w["identity"] + 1e-9).sum())
    return _row(f"at distance {int(base['T'].iloc[0]) - 1}, tanh's gradient is at most the linear "
                f"RNN's for {worse} of {len(w)} radii", worse / len(w),
                HOLDS if worse == len(w) else FAILS)


@_claim("Clipping stops explosion but does not rescue vanishing", "goodbye to recurrence",
        "clipping")
def clipping_stops_explosion_only(f):
    """At the largest rho the total is cut to the threshold with far/near unchanged; at the
    smallest, far stays more than three decades below near."""
    big, small = numbers.clipping_radii(f["clipping"])
    capped = abs(big.log10_total_after - math.log10(big.threshold)) < 1e-9
    same = abs(big.log10_far_over_near_after - big.log10_far_over_near_before) < 1e-9
    vanish = small.log10_far_over_near_after < -3
    return _row(f"at ρ = {big.rho:g} the total is cut from 10^{big.log10_total_before:+.1f} to "
                f"{big.threshold:g} with the far/near ratio unchanged; at ρ = {small.rho:g} far is "
                f"still 10^{small.log10_far_over_near_after:+.1f} of near",
                small.log10_far_over_near_after, HOLDS if capped and same and vanish else FAILS)


@_claim("In attention, what position 1 tells position T crosses one α factor",
        "goodbye to recurrence", "decay_summary")
def attention_one_factor(f):
    """Attention's path is flat in distance; its level falls as 1/T and saturation breaks it."""
    rate = numbers.attention_rate(f["decay_summary"])
    flat = abs(rate) < 0.01
    lv = f.get("attention_level")
    extra = ""
    qualified = False
    if lv is not None and len(lv):
        level = numbers.attention_level(lv)
        base, slope, sat = level.base, level.slope, level.saturated
        spread = float(sat.log10_max - sat.log10_min)
        extra = (f"; but its level falls as T^{slope:.2f} (10^{base.log10_level.iloc[0]:+.2f} at "
                 f"T = {int(base['T'].iloc[0])}, 10^{base.log10_level.iloc[-1]:+.2f} at "
                 f"T = {int(base['T'].iloc[-1])}), and at input scale {sat.input_scale:g} the "
                 f"softmax saturates: the per-distance norm spans {spread:.0f} decades")
        qualified = slope < -0.5 or spread > 3
    verdict = (QUALIFIED if qualified else HOLDS) if flat else FAILS
    return _row(f"the norm is flat in distance (fitted rate {rate:+.4f} per step){extra}",
                rate, verdict)


@_claim("The RNN's 2·T·d² and attention's 2·T²·d multiplications cross at T = d",
        "goodbye to recurrence", "work")
def counts_cross_at_d(f):
    """The traced multiplications cross where the closed forms say, T = d."""
    w = f["work"]
    d = int(w.d.iloc[0])
    T = numbers.counted_crossover(w)
    ok = math.isfinite(T) and abs(T / d - 1) < 1e-9
    return _row(f"traced from the running code at d = {d}: they cross at T = {T:,.0f}",
                T / d, HOLDS if ok else FAILS)


@_claim("A big count that fits in one matrix product finishes before a small one split into T "
        "waits", BYE, "crossover")
def big_product_finishes_first(f):
    """Attention does more multiplications than the RNN from T = d on; timed, it stays the
    faster beyond T = d, up to the measured crossover: the claim holds where that crossover's
    interval lies above d."""
    cross = numbers.timed_crossover(f["crossover"])
    row, T = cross.row, cross.T
    how = "measured" if cross.measured else "extrapolated"
    d = float(row.d)
    lo, hi = float(row.measured_T_lo), float(row.measured_T_hi)
    verdict = FAILS if not math.isfinite(T) or T <= d else (
        HOLDS if math.isfinite(lo) and lo > d else QUALIFIED)
    interval = f" (95 % interval {lo / d:.2f}–{hi / d:.2f}·d)" if math.isfinite(lo) else ""
    return _row(f"timed on this machine, attention's forward (grid and mix) stays the faster until "
                f"T ≈ {T:,.0f} ({how}), {T / d:.2f}·d{interval}, though from T = d on it does more "
                f"multiplications; the rates measured apart predict "
                f"{float(row.predicted_T) / d:.2f}·d", T / d, verdict, lo / d, hi / d)


@_claim("Shuffle the rows of K and V and no number of the output changes", BYE, "kv_shuffle")
def kv_shuffle_invariance(f):
    """Shuffling K and V together changes no output (to rounding) while K alone does; shuffling X
    shuffles the output the same way. The lesson also says the outputs 'shuffle the same':
    with K and V alone nothing shuffles, so the row is qualified when both hold."""
    s = f["kv_shuffle"].groupby("shuffled").max_abs_change
    kv, k_alone, x = s.max()["K and V together"], s.min()["K alone"], s.max()["X, output unshuffled"]
    ok = kv < EXACT and x < EXACT and k_alone > 1e-6
    return _row(f"over {int(f['kv_shuffle'].draw.nunique()):,} draws: K and V shuffled together change "
                f"the output by at most {kv:.1e} (nothing shuffles: the queries stay); K alone by at "
                f"least {k_alone:.2f}; shuffling X shuffles the output the same way (error {x:.1e})",
                kv, QUALIFIED if ok else FAILS)


def _has_counts(d, Ts, width=512):
    """The depth table counts the lesson's case: macs and macs_all at every T of ``Ts``, d = 512
    (a depth table traced at other sizes, or without counts, cannot judge the printed figures)."""
    return ({"d", "macs", "macs_all"} <= set(d.columns) and set(Ts) <= set(d["T"])
            and bool((d.d == width).all()))


def _work_at(d, T):
    r = d[d["T"] == T].set_index("model")
    return r.loc[RNN], r.loc[ATT]


@_claim("At T = 50, d = 512: 26,214,400 multiplications against 2,560,000: ten times less work",
        BYE, "depth")
def work_at_50(f):
    """Traced at T = 50: the RNN's 2 T d^2 against the grid and mix's 2 T^2 d, as the lesson
    prints them; with attention's projections (3 T d^2) counted the ratio turns."""
    d = f["depth"]
    if not _has_counts(d, (50,)):
        return _unmeasured("the depth table has no multiplication counts at T = 50, d = 512")
    rnn, att = _work_at(d, 50)
    ok = int(rnn.macs) == 26_214_400 and int(att.macs) == 2_560_000
    verdict = (QUALIFIED if att.macs_all > rnn.macs_all else HOLDS) if ok else FAILS
    return _row(f"traced: {int(rnn.macs):,} and {int(att.macs):,} ({rnn.macs / att.macs:.2f}× less); "
                f"with the projections Q, K, V counted attention does {int(att.macs_all):,}, "
                f"{att.macs_all / rnn.macs_all:.2f}× the RNN's {int(rnn.macs_all):,}",
                rnn.macs / att.macs, verdict)


@_claim("At T = 1,000 the grid costs 1.95 times the recurrence; at T = 2,000, 3.9", BYE, "depth")
def work_at_1000_2000(f):
    """Traced ratios attention/RNN of the lesson's parts at T = 1000 and 2000."""
    d = f["depth"]
    if not _has_counts(d, (1000, 2000)):
        return _unmeasured("the depth table has no multiplication counts at T = 1,000 and 2,000, "
                           "d = 512")
    r1 = _work_at(d, 1000)
    r2 = _work_at(d, 2000)
    q1, q2 = r1[1].macs / r1[0].macs, r2[1].macs / r2[0].macs
    a2 = r2[1].macs_all / r2[0].macs_all
    ok = round(q1, 2) == 1.95 and round(q2, 1) == 3.9
    return _row(f"traced: {int(r1[1].macs):,} against {int(r1[0].macs):,} ({q1:.2f}×), and {q2:.2f}× "
                f"at T = 2,000 ({a2:.2f}× with attention's projections counted)", q2,
                HOLDS if ok else FAILS)
