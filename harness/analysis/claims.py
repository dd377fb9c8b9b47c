"""The lessons' claims against the measurements: one row per claim, its verdict computed.

Each function takes the report's frames as they are read back from its CSVs and
returns one row: the claim in the lesson's words (translated), what was
measured, the figure with its interval where it has one, and a verdict, one of
``VERDICTS``, decided by a rule written beside it, never by hand. Where a
measurement disagrees with a lesson, the row says so, with the number.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.models import ATTENTION as ATT
from harness.models import PARALLEL_RECURRENCE as LRU
from harness.models import RECURRENCE as RNN

HOLDS, QUALIFIED, FAILS = "holds", "holds with a qualification", "does not hold"
VERDICTS = (HOLDS, QUALIFIED, FAILS)
COLUMNS = ["claim", "lesson", "measured", "value", "low", "high", "verdict"]


def _row(claim, lesson, measured, value, verdict, low=math.nan, high=math.nan):
    return {"claim": claim, "lesson": lesson, "measured": measured, "value": float(value),
            "low": float(low), "high": float(high), "verdict": verdict}


def depth_in_sequence(f):
    """The RNN's span grows in proportion to T (its steps run in order)."""
    r = f["depth"][f["depth"].model == RNN].sort_values("T")
    per_step = r.span / r["T"]
    steady = float(per_step.max() / per_step.min())
    return _row("An RNN's T steps run one after another", "goodbye to recurrence",
                f"the RNN's span is {per_step.iloc[0]:g}·T operations at every T "
                f"({int(r.span.iloc[0]):,} at T = {int(r['T'].iloc[0])}, {int(r.span.iloc[-1]):,} "
                f"at T = {int(r['T'].iloc[-1])})",
                per_step.iloc[-1], HOLDS if steady < 1.01 else FAILS)


def processors_change_nothing(f):
    """On P = T processors the RNN's schedule is (nearly) no faster than on one."""
    s = f["schedule"]
    T = int(s["T"].iloc[0])
    r = s[(s.model == RNN) & (s.grain == "scalar")].set_index("P")["time"]
    if T not in r.index:
        return None
    speedup = float(r.loc[1] / r.loc[T])
    verdict = HOLDS if speedup < 1.5 else FAILS
    return _row(f"A machine with {T} processors changes nothing for {T} tokens",
                "goodbye to recurrence",
                f"with every multiply and add a task, the RNN on {T} processors takes "
                f"{int(r.loc[T]):,} steps against {int(r.loc[1]):,} on one: {speedup:,.1f}× faster. "
                f"The steps stay in order, but each step's d² products spread over the processors",
                speedup, verdict)


def attention_constant_stages(f):
    """Attention's op-level span is the same at every T; its scalar span grows like log T."""
    a = f["depth"][f["depth"].model == ATT].sort_values("T")
    const = a.span.nunique() == 1
    grows = int(a.scalar_span.iloc[-1]) > int(a.scalar_span.iloc[0])
    verdict = (QUALIFIED if grows else HOLDS) if const else FAILS
    return _row("Attention is a constant number of stages", "goodbye to recurrence",
                f"{int(a.span.iloc[-1])} operations deep at every T; counted in multiplies and adds "
                f"(sums as trees) its span grows from {int(a.scalar_span.iloc[0])} to "
                f"{int(a.scalar_span.iloc[-1])} as T goes from {int(a['T'].iloc[0])} to "
                f"{int(a['T'].iloc[-1])}, like log T", int(a.span.iloc[-1]), verdict)


def counts_cross_at_d(f):
    """The traced multiplications cross where the closed forms say, T = d."""
    from harness.infra.stats import log_crossing
    w = f["work"]
    d = int(w.d.iloc[0])
    wide = w.pivot(index="T", columns="model", values="macs").sort_index()
    T = log_crossing(wide.index, np.log(wide[ATT] / wide[RNN]))
    ok = math.isfinite(T) and abs(T / d - 1) < 1e-9
    return _row("The RNN's 2·T·d² and attention's 2·T²·d multiplications cross at T = d",
                "goodbye to recurrence",
                f"traced from the running code at d = {d}: they cross at T = {T:,.0f}",
                T / d, HOLDS if ok else FAILS)


def wall_time_crosses_at_d(f):
    """Timed, the forwards cross where the counts do, within the measurement's interval."""
    x = f["crossover"]
    row = x[x.variant == ATT].iloc[0]
    d = float(row.d)
    T, lo, hi = float(row.measured_T), float(row.measured_T_lo), float(row.measured_T_hi)
    if not math.isfinite(T):
        T, how = float(row.extrapolated_T), "extrapolated"
    else:
        how = "measured"
    inside = math.isfinite(lo) and lo <= d <= hi
    interval = f" (95 % interval {lo / d:.2f}–{hi / d:.2f}·d)" if math.isfinite(lo) else ""
    return _row("…so in time too, attention costs more than the RNN from T = d on",
                "goodbye to recurrence (counts), timed here",
                f"timed on this machine, attention's forward (grid and mix) becomes the slower at "
                f"T ≈ {T:,.0f} ({how}), {T / d:.2f}·d{interval}; the rates measured apart predict "
                f"{float(row.predicted_T) / d:.2f}·d",
                T / d, HOLDS if inside else FAILS, lo / d, hi / d)


def vanishing_with_radius(f):
    """The linear RNN's fitted decay per step is log(rho), for every rho."""
    s = f["decay_summary"]
    lin = s[(s.model == RNN) & (s.activation == "identity") & (s.weight == "orthogonal")]
    err = float((lin.ln_rate - np.log(lin.rho)).abs().max())
    return _row("Through W_hh the signal vanishes or explodes with the spectral radius",
                "goodbye to recurrence",
                f"the linear RNN's norm falls by exactly ρ per step for ρ = "
                f"{', '.join(f'{r:g}' for r in sorted(lin.rho.unique()))} (largest error of the "
                f"fitted rate {err:.1e} per step)", err, HOLDS if err < 1e-6 else FAILS)


def tanh_makes_it_worse(f):
    """At every rho, the tanh RNN's far gradient is no larger than the linear one's."""
    s = f["decay_summary"]
    base = s[(s.model == RNN) & (s.weight == "orthogonal") & (s.input_scale == 1.0)]
    w = base.pivot(index="rho", columns="activation", values="log10_far")
    worse = int((w["tanh"] <= w["identity"] + 1e-9).sum())
    return _row("tanh saturation makes vanishing worse", "goodbye to recurrence",
                f"at distance {int(base['T'].iloc[0]) - 1}, tanh's gradient is at most the linear "
                f"RNN's for {worse} of {len(w)} radii", worse / len(w),
                HOLDS if worse == len(w) else FAILS)


def clipping_stops_explosion_only(f):
    c = f["clipping"].sort_values("rho")
    big, small = c.iloc[-1], c.iloc[0]
    capped = abs(big.log10_total_after - math.log10(big.threshold)) < 1e-9
    same = abs(big.log10_far_over_near_after - big.log10_far_over_near_before) < 1e-9
    vanish = small.log10_far_over_near_after < -3
    return _row("Clipping stops explosion but does not rescue vanishing", "goodbye to recurrence",
                f"at ρ = {big.rho:g} the total is cut from 10^{big.log10_total_before:+.1f} to "
                f"{big.threshold:g} with the far/near ratio unchanged; at ρ = {small.rho:g} far is "
                f"still 10^{small.log10_far_over_near_after:+.1f} of near",
                small.log10_far_over_near_after, HOLDS if capped and same and vanish else FAILS)


def attention_one_factor(f):
    """Attention's path is flat in distance; its level falls as 1/T and saturation breaks it."""
    s = f["decay_summary"]
    rate = float(s[(s.model == ATT) & (s.input_scale == s.input_scale.min())].ln_rate.iloc[0])
    flat = abs(rate) < 0.01
    lv = f.get("attention_level")
    extra = ""
    qualified = False
    if lv is not None and len(lv):
        base = lv[lv.input_scale == lv.input_scale.min()].sort_values("T")
        slope = float(np.polyfit(np.log10(base["T"]), base.log10_level, 1)[0])
        sat = lv[lv["T"] == lv["T"].max()].sort_values("input_scale").iloc[-1]
        spread = float(sat.log10_max - sat.log10_min)
        extra = (f"; but its level falls as T^{slope:.2f} (10^{base.log10_level.iloc[0]:+.2f} at "
                 f"T = {int(base['T'].iloc[0])}, 10^{base.log10_level.iloc[-1]:+.2f} at "
                 f"T = {int(base['T'].iloc[-1])}), and at input scale {sat.input_scale:g} the "
                 f"softmax saturates: the per-distance norm spans {spread:.0f} decades")
        qualified = slope < -0.5 or spread > 3
    verdict = (QUALIFIED if qualified else HOLDS) if flat else FAILS
    return _row("In attention, what position 1 tells position T crosses one α factor",
                "goodbye to recurrence",
                f"the norm is flat in distance (fitted rate {rate:+.4f} per step){extra}",
                rate, verdict)


def sqrt_dk(f):
    """Scaled by 1/sqrt(d_k) the mean row maximum grows slowly (the lesson) or stays flat?"""
    r = f["row_max"].set_index(["d_k", "scaled"])
    lo_dk, hi_dk = int(f["row_max"].d_k.min()), int(f["row_max"].d_k.max())
    a, b = r.loc[(lo_dk, True)], r.loc[(hi_dk, True)]
    u0, u1 = r.loc[(lo_dk, False)], r.loc[(hi_dk, False)]
    grows = b.mean_lo > a.mean_hi + 0.02
    pct = f.get("row_max_lesson")
    where = ""
    if pct is not None and len(pct):
        p = pct.set_index(["d_k", "scaled"]).percentile
        where = (f"; the lesson's single draw (0.330 → 0.486) sits at the "
                 f"{p.loc[(lo_dk, True)]:.0f}th and {p.loc[(hi_dk, True)]:.0f}th percentiles")
    return _row("Dividing by √d_k keeps the softmax from saturating; the row maximum still grows, "
                "slowly", "self-attention",
                f"over {int(a.draws):,} draws the unscaled mean row maximum goes from {u0.row_max:.3f} "
                f"to {u1.row_max:.3f} (d_k = {lo_dk} → {hi_dk}); scaled, from {a.row_max:.3f} "
                f"[{a.mean_lo:.3f}, {a.mean_hi:.3f}] to {b.row_max:.3f} [{b.mean_lo:.3f}, "
                f"{b.mean_hi:.3f}]: {'it grows' if grows else 'flat, it does not grow'}{where}",
                b.row_max - a.row_max, QUALIFIED if not grows else HOLDS, b.mean_lo - a.mean_hi,
                b.mean_hi - a.mean_lo)


def diagonal_without_projections(f):
    s = f["attention_diagonal"].iloc[:2]
    every = bool((s.rows_max_on_diagonal == s.rows).all())
    return _row("Without projections every row puts its maximum on its own diagonal",
                "self-attention",
                f"{int(s.rows_max_on_diagonal.sum())} of {int(s.rows.sum())} rows, at token lengths "
                f"1 and 3", s.rows_max_on_diagonal.sum() / s.rows.sum(), HOLDS if every else FAILS)


def additive_routes(f):
    r = f["additive_routes"].set_index("va_scale").loc[0.5]
    same = round(r.value_norm, 4) == 2.8303 and round(r.score_norm, 4) == 0.2556
    return _row("The gradient reaches h_j by two routes: 2.8303 by the value, 0.2556 by the score",
                "additive attention",
                f"{r.value_norm:.4f} and {r.score_norm:.4f} through the harness's kernels",
                r.value_norm, HOLDS if same else FAILS)


def scan_parallelises(f):
    """The lessons' 'T steps one after another' is the tanh RNN's: a diagonal linear
    recurrence computed by a scan has a span that grows like log T."""
    d = f["scan_depth"]
    T = int(d["T"].max())
    last = d[d["T"] == T].set_index("model").span
    scan = [m for m in last.index if m not in (RNN, LRU)][0]
    log_span = float(last[scan])
    verdict = FAILS if log_span < T / 10 else HOLDS
    return _row("…and so does every recurrence: its T steps run one after another",
                "goodbye to recurrence, asked of today's linear recurrences",
                f"at T = {T:,} the tanh RNN's span is {int(last[RNN]):,} operations and the linear "
                f"recurrence's step loop {int(last[LRU]):,}, but the same recurrence computed by a "
                f"parallel scan ({scan}) has a span of {int(log_span)}, about "
                f"{log_span / math.log2(T):.1f}·log2 T", log_span, verdict)


CLAIMS = (depth_in_sequence, scan_parallelises, processors_change_nothing, attention_constant_stages,
          counts_cross_at_d, wall_time_crosses_at_d, vanishing_with_radius, tanh_makes_it_worse,
          clipping_stops_explosion_only, attention_one_factor, sqrt_dk,
          diagonal_without_projections, additive_routes)


def claims_table(frames):
    """Every claim whose frames are present, one row each (see ``COLUMNS``)."""
    rows = []
    for fn in CLAIMS:
        try:
            row = fn(frames)
        except KeyError:          # a section the report did not run
            continue
        if row is not None:
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


README_START = "<!-- claims: generated by `make readme-figures` from docs/figures/claims.csv -->"
README_END = "<!-- claims: end -->"


def markdown(table):
    """The claims table as the README shows it: claim, verdict, what was measured."""
    lines = [README_START, "", "| claim (lesson) | verdict | measured |", "|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.claim} ({r.lesson}) | **{r.verdict}** | {r.measured} |")
    return "\n".join(lines + ["", README_END])


def update_readme(readme, table):
    """Replace the README's claims block with ``table``'s; returns the new text."""
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return head + markdown(table) + tail
