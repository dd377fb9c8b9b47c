"""The lessons' claims against the measurements: one row per claim, its verdict computed.

Each function takes the report's frames as they are read back from its CSVs and
returns one row: the claim in the lesson's words (translated), what was
measured, the figure with its interval where it has one, and a verdict, one of
``VERDICTS``, decided by a rule written beside it, never by hand. Where a
measurement disagrees with a lesson, the row says so, with the number.

Each claim declares the frames it reads (``@_claim(text, lesson, *frames)``). A
claim whose frames this run did not produce is still a row, whose verdict is
``NOT_MEASURED`` and which names the missing CSVs; a claim that reads a column or
a row its frames lack raises ``MissingMeasurement``, naming the claim and the key.
The numbers a caption states too come from ``harness.report.numbers``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from harness.models import ATTENTION as ATT
from harness.models import GATED_RECURRENCES as GATED
from harness.models import PARALLEL_RECURRENCE as LRU
from harness.models import RECURRENCE as RNN
from harness.report import numbers

HOLDS, QUALIFIED, FAILS = "holds", "holds with a qualification", "does not hold"
VERDICTS = (HOLDS, QUALIFIED, FAILS)
NOT_MEASURED = "not measured"       # the verdict of a claim whose measurement is missing
COLUMNS = ["claim", "quote", "lesson", "measured", "value", "low", "high", "verdict"]


class MissingMeasurement(LookupError):
    """A claim read a measurement (a column, a row) that its frames do not hold."""


def _row(measured, value, verdict, low=math.nan, high=math.nan, **claim):
    """A judged claim's row, less the claim and the lesson that ``_claim`` adds (``claim=``
    replaces the declared text)."""
    return {"measured": measured, "value": float(value), "low": float(low), "high": float(high),
            "verdict": verdict, **claim}


def _unmeasured(why, **claim):
    return _row(f"not measured: {why}", math.nan, NOT_MEASURED, **claim)


def quote(fn):
    """The lesson's own words (Spanish) for a registered claim: ``QUOTES[fn.__name__]``, ''
    where none is written (``QUOTES`` sits after the claims it quotes)."""
    return QUOTES.get(fn.__name__, "")


def _claim(text, lesson, *frames):
    """Register a judge of the claim ``text`` of ``lesson``, which reads the report's ``frames``
    (CSV stems): the registered function returns the whole row (see ``COLUMNS``)."""
    def register(judge):
        @functools.wraps(judge)
        def row(f):
            return {"claim": text, "quote": quote(row), "lesson": lesson, **judge(f)}
        row.text, row.lesson, row.frames = text, lesson, frames
        return row
    return register


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


@_claim("Through W_hh the signal vanishes or explodes with the spectral radius",
        "goodbye to recurrence", "decay_summary")
def vanishing_with_radius(f):
    """The linear RNN's fitted decay per step is log(rho), for every rho."""
    s = f["decay_summary"]
    lin = s[(s.model == RNN) & (s.activation == "identity") & (s.weight == "orthogonal")]
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


@_claim("Dividing by √d_k keeps the softmax from saturating; the row maximum still grows, "
        "slowly", "self-attention", "row_max")
def sqrt_dk(f):
    """Scaled by 1/sqrt(d_k) the mean row maximum grows slowly (the lesson) or stays flat?"""
    lo_dk, hi_dk, ends = numbers.row_max_ends(f["row_max"])
    a, b = ends[lo_dk, True], ends[hi_dk, True]
    u0, u1 = ends[lo_dk, False], ends[hi_dk, False]
    grows = b.mean_lo > a.mean_hi + 0.02
    pct = f.get("row_max_lesson")
    where = ""
    if pct is not None and len(pct):
        p = pct.set_index(["d_k", "scaled"]).percentile
        where = (f"; the lesson's single draw (0.330 → 0.486) sits at the "
                 f"{p.loc[(lo_dk, True)]:.0f}th and {p.loc[(hi_dk, True)]:.0f}th percentiles")
    return _row(f"over {int(a.draws):,} draws the unscaled mean row maximum goes from {u0.row_max:.3f} "
                f"to {u1.row_max:.3f} (d_k = {lo_dk} → {hi_dk}); scaled, from {a.row_max:.3f} "
                f"[{a.mean_lo:.3f}, {a.mean_hi:.3f}] to {b.row_max:.3f} [{b.mean_lo:.3f}, "
                f"{b.mean_hi:.3f}]: {'it grows' if grows else 'flat, it does not grow'}{where}",
                b.row_max - a.row_max, QUALIFIED if not grows else HOLDS, b.mean_lo - a.mean_hi,
                b.mean_hi - a.mean_lo)


@_claim("Without projections every row puts its maximum on its own diagonal", "self-attention",
        "attention_diagonal")
def diagonal_without_projections(f):
    """Every row of both unprojected settings has its maximum on the diagonal."""
    s = numbers.unprojected(f["attention_diagonal"])
    every = bool((s.rows_max_on_diagonal == s.rows).all())
    return _row(f"{int(s.rows_max_on_diagonal.sum())} of {int(s.rows.sum())} rows, at token lengths "
                f"1 and 3", s.rows_max_on_diagonal.sum() / s.rows.sum(), HOLDS if every else FAILS)


@_claim("The gradient reaches h_j by two routes: 2.8303 by the value, 0.2556 by the score",
        "additive attention", "additive_routes")
def additive_routes(f):
    """The harness's route norms at the lesson's va scale are the lesson's, to 4 places."""
    r = numbers.lesson_routes(f["additive_routes"])
    same = round(r.value_norm, 4) == 2.8303 and round(r.score_norm, 4) == 0.2556
    return _row(f"{r.value_norm:.4f} and {r.score_norm:.4f} through the harness's kernels",
                r.value_norm, HOLDS if same else FAILS)


@_claim("…and so does every recurrence: its T steps run one after another",
        "goodbye to recurrence, asked of today's linear recurrences", "scan_depth")
def scan_parallelises(f):
    """The lessons' 'T steps one after another' is the tanh RNN's: a diagonal linear
    recurrence computed by a scan has a span that grows like log T."""
    d = f["scan_depth"]
    T = int(d["T"].max())
    last = d[d["T"] == T].set_index("model").span
    scan = numbers.scan_form()
    log_span = float(last[scan])
    verdict = FAILS if log_span < T / 10 else HOLDS
    return _row(f"at T = {T:,} the tanh RNN's span is {int(last[RNN]):,} operations and the linear "
                f"recurrence's step loop {int(last[LRU]):,}, but the same recurrence computed by a "
                f"parallel scan ({scan}) has a span of {int(log_span)}, about "
                f"{log_span / math.log2(T):.1f}·log2 T", log_span, verdict)


# ----------------------------------------------------------------------------- gated recurrences

SURVIVES = -3.0        # "survives": the gradient is still above 10^-3 of its value at k = 1


@_claim("The LSTM and the GRU did not shorten the path: their span and path length grow with "
        "T, as the RNN's", "goodbye to recurrence", "depth")
def gates_did_not_shorten(f):
    """The gated recurrences' span and position-1-to-T path are a constant number of
    operations per step at every T, as the tanh RNN's: linear in T, not shorter in kind."""
    d = f["depth"]
    absent = [m for m in (RNN, *GATED) if not (d.model == m).any()]
    if absent:
        return _unmeasured(f"the depth table has no {', '.join(absent)} rows")
    parts, linear = [], True
    for m in (RNN, *GATED):
        r = numbers.by_T(d, m)
        span, path = r.span / r["T"], r.max_path / r["T"]
        linear &= bool(span.max() / span.min() < 1.05 and path.iloc[-1] >= 1.0
                       and r.max_path.iloc[-1] > r.max_path.iloc[0])
        parts.append(f"{m.upper()} span {span.iloc[-1]:.1f}·T and path {path.iloc[-1]:.2f}·T")
    T0, T1 = int(d["T"].min()), int(d["T"].max())
    return _row(f"from T = {T0} to {T1:,}: " + "; ".join(parts)
                + (" operations: every one linear in T" if linear else
                   " operations: not every one grows linearly in T"),
                float(numbers.by_T(d, "lstm").max_path.iloc[-1]), HOLDS if linear else FAILS)


@_claim("…they opened an additive route beside it so that the signal survived the trip",
        "goodbye to recurrence", "decay")
def gates_made_it_survivable(f):
    """Over the gate biases, the gated recurrences' gradient stays above 10^-3 of its near value
    farther than the tanh RNN's does at any radius: survivable, though still decaying."""
    reach = numbers.survival_distances(f["decay"], SURVIVES)
    reach = reach[reach.model.isin((RNN, *GATED))]
    rnn = reach[(reach.model == RNN) & (reach.activation == "tanh")]
    gated = reach[reach.model.isin(GATED)]
    if not len(rnn) or not len(gated):
        return _unmeasured("the decay table has no tanh RNN or no gated recurrence rows")
    best_rnn = rnn.loc[rnn.distance.idxmax()]
    best = gated.loc[gated.distance.idxmax()]
    T = int(best["T"])
    far = "the whole sequence" if best.distance >= T - 1 else f"distance {int(best.distance):,}"
    survives = best.distance > best_rnn.distance
    low = gated[gated.gate_bias == gated.gate_bias.min()]
    return _row(f"the {best.model.upper()} with its gate bias at {best.gate_bias:g} (input scale "
                f"{best.input_scale:g}) keeps the gradient above 10^{SURVIVES:g} of its near value "
                f"out to {far}, the tanh RNN at best to distance {int(best_rnn.distance):,} "
                f"(ρ = {best_rnn.rho:g}, input scale {best_rnn.input_scale:g}); at gate bias "
                f"{low.gate_bias.min():g} the gated recurrences reach at most distance "
                f"{int(low.distance.max()):,}"
                + ("" if survives else ": the gates did not make the trip survivable here"),
                best.distance, HOLDS if survives else FAILS)


# ----------------------------------------------------------------------------- the Transformer layer

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


@_claim("With d_k = d_model / h, the cost of multi-head attention does not depend on h",
        "self-attention", "heads_cost")
def heads_cost_is_flat(f):
    """The traced multiplications of multi-head attention with d_k = d/h are the same for
    every h."""
    h = f["heads_cost"].sort_values("heads")
    flat = h.total.nunique() == 1
    return _row(f"traced at T = {int(h['T'].iloc[0])}, d = {int(h.d.iloc[0])}: "
                + ", ".join(f"h = {int(r.heads)}: {int(r.total):,}" for r in h.itertuples())
                + (" multiplications, the same for every h" if flat else
                   f" multiplications: they change with h (max/min {h.total.max() / h.total.min():.3f})"),
                float(h.total.max() / h.total.min()), HOLDS if flat else FAILS)


@_claim("…and with every product counted, the T² terms dominate from T = d on",
        "goodbye to recurrence (counts), asked of the whole Transformer layer", "layer_work")
def layer_quadratic_from_d(f):
    """The lesson counts the RNN's 2 T d^2 against attention's 2 T^2 d. Counting the layer's
    projections and feed-forward too, its T^2 terms (grid and mix) pass its other products
    only at T = l / q; the claim holds where that is within 1.5 d."""
    d, T_eq, ratios = numbers.layer_crossover(f["layer_work"])
    T1 = int(f["layer_work"]["T"].max())
    verdict = HOLDS if T_eq <= 1.5 * d else QUALIFIED
    return _row(f"in a layer at d = {d}, the grid and mix (2·T²·d) pass the projections and "
                f"feed-forward only at T = {T_eq:,.0f} = {T_eq / d:.2f}·d; at T = {T1:,} the "
                f"layer does " + ", ".join(f"{r:.1f}× the {m.upper()}'s" for m, r in ratios.items())
                + " multiplications", T_eq / d, verdict)


# ----------------------------------------------------------------------------- every claim, in order
# (issue #24) The rows below and the ones above, in the order the three lessons make them:
# additive attention, then goodbye to recurrence, then self-attention (the course's order).
ADD, BYE, SELF = "additive attention", "goodbye to recurrence", "self-attention"
EXACT = 1e-12          # "no number changes": a difference within float64 rounding
FD_OK = 1e-6           # a gradient agrees with central differences to this relative error


def _mean_round(x, places):
    return round(float(x), places)


@_claim("The hand-set map: rows i and read take 0.74 and 0.81 from leí, row a leaves it 0.05", ADD)
def additive_hand_weights(f):
    """Weights the previous lesson set by hand and this one repeats: nothing computes them."""
    return _unmeasured("the lesson says it set these weights by hand (\"los pesos siguen siendo los "
                       "que puse yo a mano\"); no model or seed produces them")


@_claim("The score needs no bias: a constant added to a whole row does not survive the softmax",
        ADD, "additive_bias")
def additive_no_bias(f):
    """Adding one number to every score of a row changes no weight (to rounding); adding one per
    column does, so the measurement can tell."""
    b = f["additive_bias"]
    row = b[b.added == "per-row constant"].max_abs_change
    col = b[b.added == "per-column constant"].max_abs_change
    ok = float(row.max()) < EXACT and float(col.min()) > 1e-6
    return _row(f"over {len(row):,} draws a per-row constant changes no weight by more than "
                f"{row.max():.1e}; a per-column one changes them by {col.min():.2f} to "
                f"{col.max():.2f}" + ("" if ok else ": the row constant does change the weights"),
                row.max(), HOLDS if ok else FAILS)


@_claim("The alignment model has 2·d_a·d_h + d_a weights, whatever T_x and T_y", ADD,
        "additive_widths", "additive_figures")
def additive_param_count(f):
    """The weights counted from the arrays the kernel's gradients fill equal the closed form at
    equal widths (44 in the lesson's example), and do not involve the lengths."""
    w = f["additive_widths"]
    eq = w[w.d_s == w.d_h]
    closed = 2 * eq.d_a * eq.d_h + eq.d_a
    lesson = int(f["additive_figures"].params.iloc[0])
    ok = bool((eq.params == closed).all()) and lesson == 44 and len(eq) > 0
    r = eq.iloc[0]
    return _row(f"{lesson} weights in the lesson's example (d_h = 5, d_a = 4; it prints 44); "
                f"{int(r.params)} = 2·{int(r.d_a)}·{int(r.d_h)} + {int(r.d_a)} counted from the "
                f"gradients, the same at every T", lesson, HOLDS if ok else FAILS)


@_claim("The encoder's and the decoder's widths need not match", ADD, "additive_widths")
def additive_widths_differ(f):
    """The alignment and its backward run at d_s != d_h and agree with central differences."""
    w = f["additive_widths"]
    diff = w[w.d_s != w.d_h]
    if not len(diff):
        return _unmeasured("additive_widths.csv has no row with d_s ≠ d_h")
    err = float(diff.fd_rel_err.max())
    pairs = ", ".join(f"{int(r.d_s)}/{int(r.d_h)}" for r in diff.itertuples())
    return _row(f"at decoder/encoder widths {pairs} the backward agrees with central differences "
                f"to {err:.1e} (relative)", err, HOLDS if err < FD_OK else FAILS)


@_claim("Without tanh every step gets the same row of weights", ADD, "additive_figures")
def additive_no_tanh_same_rows(f):
    """Without tanh the rows of alpha differ by rounding only ("iguales hasta el último
    decimal")."""
    spread = float(f["additive_figures"].no_tanh_row_spread.iloc[0])
    return _row(f"in the lesson's example the 8 rows differ by at most {spread:.1e}", spread,
                HOLDS if spread < EXACT else FAILS)


@_claim("Each row of ∂ℓ/∂e sums to zero: raising one weight lowers the others", ADD,
        "score_gradient_rows")
def additive_score_rows_sum_to_zero(f):
    """By central differences in the scores (not the lesson's formula), every row of dl/de sums
    to zero within the differences' error, and the lesson's formula matches them."""
    s = f["score_gradient_rows"]
    rel = float((s.max_abs_row_sum / s.max_abs_entry).max())
    formula = float(s.formula_err.max())
    ok = rel < FD_OK and formula < FD_OK
    return _row(f"over {len(s):,} draws the largest row sum is {rel:.1e} of the largest entry; the "
                f"lesson's α_ij ∇c_i·(h_j − c_i) matches the differences to {formula:.1e}",
                rel, HOLDS if ok else FAILS)


@_claim("The attention routes to h_j skip the encoder's W_hh: their length does not grow as j "
        "moves away", ADD, "encoder_routes")
def additive_routes_skip_whh(f):
    """With a tanh-RNN encoder under the alignment, dl/dx_j's attention route crosses no W_hh and
    its size is flat in T_x - j (fitted slope within 0.3 decades over the sequence), while the
    same gradient sent through the last state alone falls with the distance."""
    r = f["encoder_routes"]
    att = r[r.route == "attention"].sort_values("distance")
    last = r[r.route == "last state"].sort_values("distance")
    slope = float(np.polyfit(att.distance, att.mean_log10_norm, 1)[0])
    span = int(att.distance.max())
    drift = slope * span
    no_whh = int(att.w_hh_products.max()) == 0
    fall = float(last.mean_log10_norm.iloc[0] - last.mean_log10_norm.iloc[-1])
    ok = no_whh and abs(drift) < 0.3
    return _row(f"encoder of {span + 1} steps, {int(att.draws.iloc[0]):,} draws: the attention route "
                f"crosses {int(att.w_hh_products.max())} W_hh products and moves {drift:+.2f} "
                f"decades from distance 0 to {span}; sent through the last state alone the same "
                f"gradient falls {fall:.1f} decades", drift, HOLDS if ok else FAILS)


@_claim("The untrained map is nearly uniform: the largest weight of a row is about 0.18, "
        "uniform being 0.167", ADD, "additive_figures")
def additive_untrained_uniform(f):
    """The lesson's example's mean row maximum rounds to 0.18 and lies above uniform."""
    r = f["additive_figures"].iloc[0]
    ok = _mean_round(r.mean_row_max, 2) == 0.18 and r.mean_row_max > r.uniform
    return _row(f"mean of the rows' largest weights {r.mean_row_max:.3f}, uniform {r.uniform:.3f}",
                r.mean_row_max, HOLDS if ok else FAILS)


@_claim("The two routes summed match the numerical gradient to about 10^-10; each alone is "
        "wrong in the first digit", ADD, "additive_figures")
def additive_routes_sum(f):
    """Against the lesson's own central differences: both routes within 1e-8, each alone off
    by more than 0.1."""
    r = f["additive_figures"].iloc[0]
    ok = r.fd_err_both < 1e-8 and min(r.fd_err_value, r.fd_err_score) > 0.1
    return _row(f"summed: {r.fd_err_both:.1e}; the value route alone {r.fd_err_value:.2f}, the "
                f"score route alone {r.fd_err_score:.2f}", r.fd_err_both, HOLDS if ok else FAILS)


@_claim("Untrained, the value route is eleven times the score route", ADD, "additive_figures")
def additive_eleven_times(f):
    """value_norm / score_norm rounds to 11."""
    r = f["additive_figures"].iloc[0]
    return _row(f"{r.value_norm:.4f} / {r.score_norm:.4f} = {r.value_over_score:.2f}",
                r.value_over_score, HOLDS if round(r.value_over_score) == 11 else FAILS)


@_claim("With va scaled to 2.0 the weights sharpen and the two norms come closer", ADD,
        "additive_routes")
def additive_va_sharpens(f):
    """At va scale 2.0 against 0.5: a larger mean row maximum and a smaller value/score ratio."""
    r = f["additive_routes"].set_index("va_scale")
    if 0.5 not in r.index or 2.0 not in r.index:
        return _unmeasured("additive_routes.csv lacks va scale 0.5 or 2.0")
    a, b = r.loc[0.5], r.loc[2.0]
    ok = b.row_max > a.row_max and b.value_over_score < a.value_over_score
    return _row(f"va scale 0.5 → 2.0: mean row maximum {a.row_max:.3f} → {b.row_max:.3f}, value/score "
                f"{a.value_over_score:.1f} → {b.value_over_score:.1f}", b.value_over_score,
                HOLDS if ok else FAILS)


@_claim("Scoring costs T_x + T_y projections but T_x·T_y sums, tanh and reads", ADD,
        "additive_cost")
def additive_cost_counts(f):
    """Traced: the projection rows are T_x + T_y, the d_a-wide pair vectors T_x T_y and the
    tanh evaluations T_x T_y d_a, at every size."""
    c = f["additive_cost"]
    a = c[c.score == "additive"]
    ok = bool(((a.projection_rows == a.T_x + a.T_y) & (a.pair_vectors == a.T_x * a.T_y)
               & (a.tanh_evaluations == a.T_x * a.T_y * a.d_a)).all()) and len(a) > 0
    r = a.loc[a.T_x.idxmax()]
    return _row(f"traced at {int(r.T_y)} × {int(r.T_x)} (d_a = {int(r.d_a)}): {int(r.projection_rows)} "
                f"projections, {int(r.pair_vectors):,} pair vectors, {int(r.tanh_evaluations):,} "
                f"tanh evaluations", r.pair_vectors, HOLDS if ok else FAILS)


@_claim("None of the grid's operations is a large matrix product, which is what the hardware "
        "does best", ADD, "additive_cost", "additive_timing")
def additive_no_big_product(f):
    """Traced, the additive grid makes no product whose output is the grid (the dot-product one
    makes one); timed, it is slower than a dot-product grid of the same size, outside the
    interval's reach of 1."""
    c = f["additive_cost"]
    add = int(c[c.score == "additive"].grid_matrix_products.max())
    t = f["additive_timing"].iloc[0]
    slower = t.ratio_lo > 1
    verdict = (HOLDS if slower else QUALIFIED) if add == 0 else FAILS
    return _row(f"traced, the additive grid makes {add} matrix products with the grid as output "
                f"(the dot-product grid 1); timed at {int(t.T_y)} × {int(t.T_x)}, d = {int(t.d)}, "
                f"it takes {t.ratio:.1f}× the dot-product grid's time (95 % interval "
                f"{t.ratio_lo:.1f}–{t.ratio_hi:.1f}, {int(t.rounds)} interleaved rounds)",
                t.ratio, verdict, t.ratio_lo, t.ratio_hi)


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


@_claim("With the projections on, the rows of the layer look at one another", SELF)
def projections_widget(f):
    """The widget's projections ("encendidas, la fila de están se va a buscar llaves")."""
    return _unmeasured("the widget's projection weights are trained and the lesson does not print "
                       "them (\"la fila de están se va a buscar llaves\")")


@_claim("The map is square, T × T, and each row sums to 1", SELF, "self_attention_shapes")
def map_square_rows_one(f):
    s = f["self_attention_shapes"]
    ok = bool(((s.map_rows == s["T"]) & (s.map_cols == s["T"])).all()
              and s.row_sum_err.max() < EXACT)
    return _row(f"at T = {', '.join(str(int(t)) for t in s['T'])}: maps "
                + ", ".join(f"{int(r.map_rows)} × {int(r.map_cols)}" for r in s.itertuples())
                + f", rows summing to 1 within {s.row_sum_err.max():.1e}",
                s.row_sum_err.max(), HOLDS if ok else FAILS)


@_claim("T does not appear in the count of the three matrices: at T = 9 the map is 9 × 9 and "
        "the parameters do not move", SELF, "self_attention_shapes")
def params_without_T(f):
    s = f["self_attention_shapes"]
    ok = s.params.nunique() == 1 and bool((s.output_rows == s["T"]).all())
    return _row("parameters " + ", ".join(f"{int(r.params)} at T = {int(r.T)}" for r in s.itertuples())
                + "; output rows " + ", ".join(str(int(o)) for o in s.output_rows),
                float(s.params.max() - s.params.min()), HOLDS if ok else FAILS)


@_claim("Without projections the score grid is symmetric; the weights are not", SELF,
        "unprojected_symmetry")
def scores_symmetric_weights_not(f):
    s = f["unprojected_symmetry"]
    ok = s.score_asymmetry.max() < EXACT and s.weight_asymmetry.min() > 1e-6
    return _row(f"over {len(s):,} draws: |E − Eᵀ| at most {s.score_asymmetry.max():.1e}; |A − Aᵀ| "
                f"from {s.weight_asymmetry.min():.3f} to {s.weight_asymmetry.max():.3f}",
                s.weight_asymmetry.min(), HOLDS if ok else FAILS)


@_claim("The longer the vectors, the more each row closes on its diagonal", SELF,
        "attention_diagonal")
def longer_closes_on_diagonal(f):
    s = numbers.unprojected(f["attention_diagonal"])
    w = s.mean_self_weight.to_numpy()
    ok = len(w) >= 2 and bool(np.all(np.diff(w) > 0))
    return _row("mean self-weight " + " → ".join(f"{x:.3f}" for x in w)
                + " as the token length goes 1 → 3", w[-1] - w[0], HOLDS if ok else FAILS)


@_claim("With tokens of unequal length, the longest vector takes the row", SELF, "unequal_lengths")
def longest_takes_the_row(f):
    """Share of the other rows whose largest weight is the longest token's: holds above 90 %,
    qualified above half."""
    u = f["unequal_lengths"]
    share = float(u.rows_max_on_longest.sum() / u.rows.sum())
    own = float(u.rows_max_on_diagonal.sum() / u.rows.sum())
    verdict = HOLDS if share > 0.9 else (QUALIFIED if share > 0.5 else FAILS)
    return _row(f"over {len(u):,} draws (lengths 1 to 3, random directions): the longest token takes "
                f"{100 * share:.0f} % of the other rows; {100 * own:.0f} % keep their maximum on "
                f"their own diagonal", share, verdict)


@_claim("At length 1 a row spreads almost evenly; stretching the same vectors sends the own weight "
        "up", SELF, "attention_diagonal")
def length_one_nearly_even(f):
    """Self-weight at length 1 against uniform 1/T: holds within 1.5/T, qualified within 3/T
    (the diagonal still the largest), and the longer tokens' self-weight above 0.9."""
    s = numbers.unprojected(f["attention_diagonal"])
    T = int(s.rows.iloc[0])
    w1, w3 = float(s.mean_self_weight.iloc[0]), float(s.mean_self_weight.iloc[-1])
    if w3 <= 0.9:
        verdict = FAILS
    else:
        verdict = HOLDS if w1 <= 1.5 / T else (QUALIFIED if w1 <= 3 / T else FAILS)
    return _row(f"self-weight {w1:.3f} at length 1 (uniform {1 / T:.3f}: {w1 * T:.1f}× it), "
                f"{w3:.3f} at length 3", w1 * T, verdict)


@_claim("With two different readings of the matrix, positions start to look at each other", SELF,
        "attention_diagonal")
def projections_look_elsewhere(f):
    s = f["attention_diagonal"]
    proj = s[s.setting.str.startswith("with projections")]
    if not len(proj):
        return _unmeasured("attention_diagonal.csv has no projected setting")
    p = proj.iloc[0]
    ok = p.rows_max_on_diagonal < p.rows
    return _row(f"with projections {int(p.rows_max_on_diagonal)} of {int(p.rows)} rows keep their "
                f"maximum on the diagonal (mean self-weight {p.mean_self_weight:.3f})",
                p.rows_max_on_diagonal / p.rows, HOLDS if ok else FAILS)


@_claim("Unscaled, the largest weight of a row goes from 0.558 at d_k = 8 to 0.983 at 512: "
        "saturated", SELF, "row_max", "row_max_lesson")
def unscaled_saturates(f):
    """Over the draws the unscaled mean row maximum passes 0.95 at the largest d_k, and the
    lesson's single draws fall inside the distribution (2.5th to 97.5th percentile)."""
    r = f["row_max"]
    u = r[~r.scaled.astype(bool)].sort_values("d_k")
    p = f["row_max_lesson"]
    pu = p[~p.scaled.astype(bool)].set_index("d_k").percentile
    top = float(u.row_max.iloc[-1])
    inside = bool(((pu > 2.5) & (pu < 97.5)).all())
    verdict = (HOLDS if inside else QUALIFIED) if top > 0.95 else FAILS
    return _row(f"over {int(u.draws.iloc[0]):,} draws the mean goes {u.row_max.iloc[0]:.3f} → {top:.3f} "
                f"(d_k = {int(u.d_k.iloc[0])} → {int(u.d_k.iloc[-1])}); the lesson's draws sit at the "
                + " and ".join(f"{v:.0f}th" for v in pu) + " percentiles", top, verdict)


@_claim("Saturation turns the gradient off, and dividing by √d_k keeps it", SELF, "softmax_jacobian")
def saturation_gradient(f):
    """The softmax's Jacobian (mean log10 of its norm over the draws): unscaled it falls by more
    than a decade from the smallest d_k to the largest; scaled it moves less than 0.05."""
    j = f["softmax_jacobian"]
    u = j[~j.scaled.astype(bool)].sort_values("d_k")
    s = j[j.scaled.astype(bool)].sort_values("d_k")
    fall = float(u.mean_log10_norm.iloc[0] - u.mean_log10_norm.iloc[-1])
    moved = float(abs(s.mean_log10_norm.iloc[-1] - s.mean_log10_norm.iloc[0]))
    ok = fall > 1 and moved < 0.05
    return _row(f"the softmax Jacobian's norm over {int(u.draws.iloc[0]):,} draws, d_k = "
                f"{int(u.d_k.iloc[0])} → {int(u.d_k.iloc[-1])}: unscaled, median "
                f"{u.median_norm.iloc[0]:.3f} → {u.median_norm.iloc[-1]:.3f} ({fall:.2f} decades "
                f"down on average); scaled, {s.median_norm.iloc[0]:.3f} → "
                f"{s.median_norm.iloc[-1]:.3f} ({moved:.3f} decades)", fall,
                HOLDS if ok else FAILS)


# the lesson's own words, in its language, for every row (claims.csv's quote column)
QUOTES = {
    "additive_hand_weights": "con pesos de 0.74 y 0.81. La de a, la siguiente, deja esa misma "
                             "posición en 0.05",
    "additive_no_bias": "El sesgo sobra porque sumaría el mismo número a toda la fila, y una "
                        "constante por fila no sobrevive al softmax.",
    "additive_param_count": "Cuenta los pesos: 2 d_a d_h + d_a. No aparece T_x, no aparece T_y",
    "additive_widths_differ": "Nada de esto obliga además a que el encoder y el decoder midan lo "
                              "mismo",
    "additive_no_tanh_same_rows": "Los T_y pasos reciben la misma fila de pesos",
    "additive_score_rows_sum_to_zero": "los pesos suman 1, así que subir uno es bajar los demás",
    "additive_routes_skip_whh": "no multiplican por W^enc_hh ni una sola vez y su longitud no "
                                "crece cuando j se aleja",
    "additive_untrained_uniform": "el mayor peso de cada fila ronda 0.18 cuando el reparto "
                                  "uniforme sería 0.167",
    "additive_routes_sum": "sumadas, las dos rutas reproducen el gradiente numérico hasta el orden "
                           "de 10^-10, y por separado cada una se equivoca en la primera cifra",
    "additive_routes": "norma de la ruta del valor / de la puntuacion (2.8303, 0.2556)",
    "additive_eleven_times": "la ruta del valor es once veces mayor que la de la puntuación",
    "additive_va_sharpens": "Cambia la escala de va a 2.0 [...] los pesos se afilan y las dos "
                            "normas se acercan",
    "additive_cost_counts": "T_x + T_y productos—, pero la suma, el tanh y v_a hay que repetirlos "
                            "T_x · T_y veces",
    "additive_no_big_product": "ninguna de las operaciones que los producen es un producto de "
                               "matrices grande",
    "figure1_three_boxes_mix": "de las quince cajas, se iluminan tres",
    "depth_in_sequence": "leerla son 800 pasos que ocurren uno después de otro",
    "scan_parallelises": "la profundidad de la cadena [...] es T",
    "processors_change_nothing": "comprar una máquina con 800 procesadores no cambia nada",
    "input_half_parallel": "los T productos se pueden calcular a la vez [...] El primero sí espera",
    "attention_constant_stages": "Tres operaciones en fila, y ese tres no se mueve cuando el texto "
                                 "se alarga",
    "vanishing_with_radius": "apaga la señal si su radio espectral es menor que 1 y la dispara si "
                             "es mayor",
    "tanh_makes_it_worse": "la saturación del tanh solo agrava lo primero",
    "clipping_stops_explosion_only": "el recorte del gradiente frena la explosión pero no rescata "
                                     "lo desvanecido",
    "gates_did_not_shorten": "la LSTM [...] y la GRU [...] no acortaron ese camino",
    "gates_made_it_survivable": "le abrieron una vía aditiva al lado para que sobreviviera el viaje",
    "attention_one_factor": "delante lleva un solo factor: α_T1. Uno, no T−1",
    "counts_cross_at_d": "se cruzan cuando T = d, y no antes",
    "layer_quadratic_from_d": "La rejilla cuesta menos que la recurrencia mientras la frase mida "
                              "menos que el modelo",
    "big_product_finishes_first": "Una cuenta grande que cabe en un solo producto de matrices se "
                                  "resuelve antes que una cuenta pequeña partida en T esperas.",
    "kv_shuffle_invariance": "si barajas las filas de K y V, las salidas se barajan igual y ningún "
                             "número cambia",
    "work_at_50": "2 · 50 · 512² = 26 214 400 [...] 2 560 000 [...] Diez veces menos trabajo",
    "work_at_1000_2000": "La razón entre los dos es 1 000/512 ≈ 1.95 [...] comprueba que sale 3.9",
    "diagonal_without_projections": "Cada posición se daría a sí misma el peso más alto, en todas "
                                    "las filas a la vez",
    "projections_widget": "Encendidas, la fila de están se va a buscar llaves por encima de todo "
                          "lo demás",
    "map_square_rows_one": "A ∈ R^{T×T} es cuadrada [...] Cada fila sigue sumando 1",
    "params_without_T": "Cambia T a 9 [...] la línea de los parámetros no se mueve",
    "heads_cost_is_flat": "de repartir la anchura, d_k = d_model/h, sale que el coste no depende "
                          "de h",
    "scores_symmetric_weights_not": "la rejilla de puntuaciones es simétrica. Los pesos no lo son",
    "longer_closes_on_diagonal": "cuanto mayor es r, más se cierra la fila sobre su diagonal",
    "longest_takes_the_row": "la fila se la lleva entonces la posición cuyo vector sea más largo",
    "length_one_nearly_even": "con longitud 1 la fila reparte casi por igual, y estirando los "
                              "mismos vectores el peso propio se dispara",
    "projections_look_elsewhere": "Con dos lecturas distintas de la misma matriz eso se acaba",
    "unscaled_saturates": "con d_k = 8 el mayor peso de una fila se queda en 0.558, y [...] a "
                          "d_k = 512 sube a 0.983",
    "sqrt_dk": "Dividiendo entre √d_k el máximo también crece, pero despacio, de 0.330 a 0.486",
    "saturation_gradient": "la saturación que apaga un reparto y el gradiente que se desvanece "
                           "cuando lo atraviesa",
}


# ----------------------------------------------------------------------------- linear attention

SPREAD_MIN = 0.1       # decades of prod a_t between the 5th and 95th percentile: "depends on x"


@_claim("The same model can be computed as a recurrence or in parallel",
        "goodbye to recurrence, asked of today's linear attention", "linear_methods", "depth")
def linear_recurrence_or_parallel(f):
    """Linear attention's three algorithms give the same outputs to rounding (float64), while
    their spans differ in kind over T: the recurrence's grows by a steady number of operations
    per position, the masked T x T product's stays constant, the chunked form's lies between
    (no shorter than the product's, shorter than the recurrence's at the largest T) and grows
    more slowly than the recurrence's."""
    m = f["linear_methods"]
    worst = numbers.linear_agreement(m)
    span = numbers.linear_spans(f["depth"])
    rec, par, chk = span.columns
    T = span.index.to_series()
    slope = span.diff().div(T.diff(), axis=0).iloc[1:]          # operations per position
    same = bool(worst.relative < numbers.LINEAR_AGREE)
    linear = bool(len(slope) and slope[rec].min() >= 1.0
                  and slope[rec].max() / slope[rec].min() < 1.05)
    constant = span[par].nunique() == 1
    last = span.iloc[-1]
    between = bool((span[chk] >= span[par]).all() and last[par] < last[chk] < last[rec]
                   and slope[chk].mean() < slope[rec].mean())
    T0, T1 = int(T.iloc[0]), int(T.iloc[-1])
    per = (span.iloc[-1] - span.iloc[0]) / (T1 - T0)
    return _row(f"over T = {int(m['T'].min())} to {int(m['T'].max()):,} and the decays "
                f"{', '.join(m.decay.unique())}, the three algorithms' outputs differ by at most "
                f"{worst.relative:.1e} of max |y| ({worst.methods}, {worst.decay} decay, "
                f"T = {int(worst['T'])}); from T = {T0:,} to {T1:,} the recurrence's span goes "
                f"from {int(span[rec].iloc[0]):,} to {int(last[rec]):,} operations ({per[rec]:.2f} "
                f"per position), the chunked form's from {int(span[chk].iloc[0]):,} to "
                f"{int(last[chk]):,} ({per[chk]:.4f} per position) and the masked T × T product's "
                f"from {int(span[par].iloc[0])} to {int(last[par])}",
                worst.relative, HOLDS if same and linear and constant and between else FAILS)


@_claim("A selective gate makes the gradient path depend on the input",
        "goodbye to recurrence, asked of today's gated linear attention", "linear_spread")
def selective_gate_depends_on_input(f):
    """At the largest distance, prod a_t over input draws spreads over more than SPREAD_MIN
    decades (5th to 95th percentile) under the selective gate, and not at all under a
    constant gamma or no decay."""
    s = f["linear_spread"]
    at = numbers.linear_spread_at(s)
    top = numbers.linear_spread_at(s, float(s.input_scale.max()))
    sel, fixed = at.loc["selective"], at.drop(index="selective")
    k = int(sel.distance)
    spreads = bool(sel.decades > SPREAD_MIN)
    flat = bool((fixed.decades.abs() < 1e-12).all())
    return _row(f"at distance {k}, over the input draws, ∏ a_t under the selective gate spans "
                f"{sel.decades:.2f} decades between its 5th and 95th percentiles "
                f"(10^{sel.log10_p05:+.2f} to 10^{sel.log10_p95:+.2f}) at input scale "
                f"{numbers.UNIT_SCALE:g} and {top.loc['selective'].decades:.1f} at input scale "
                f"{top.loc['selective'].input_scale:g}; "
                + ", ".join(f"{dec} decay {r.decades:.2f}" for dec, r in fixed.iterrows())
                + " decades (one value for every input)",
                sel.decades, HOLDS if spreads and flat else FAILS)


# In the order the lessons make them: additive attention, goodbye to recurrence, self-attention
CLAIMS = (additive_hand_weights, additive_no_bias, additive_param_count, additive_widths_differ,
          additive_no_tanh_same_rows, additive_score_rows_sum_to_zero, additive_routes_skip_whh,
          additive_untrained_uniform, additive_routes_sum, additive_routes, additive_eleven_times,
          additive_va_sharpens, additive_cost_counts, additive_no_big_product,
          depth_in_sequence, scan_parallelises, processors_change_nothing,
          figure1_three_boxes_mix, input_half_parallel, attention_constant_stages,
          vanishing_with_radius, tanh_makes_it_worse, clipping_stops_explosion_only,
          gates_did_not_shorten, gates_made_it_survivable, attention_one_factor,
          counts_cross_at_d, layer_quadratic_from_d, big_product_finishes_first,
          kv_shuffle_invariance, work_at_50, work_at_1000_2000,
          diagonal_without_projections, projections_widget, map_square_rows_one, params_without_T,
          heads_cost_is_flat, scores_symmetric_weights_not, longer_closes_on_diagonal,
          longest_takes_the_row, length_one_nearly_even, projections_look_elsewhere,
          unscaled_saturates, sqrt_dk, saturation_gradient,
          linear_recurrence_or_parallel, selective_gate_depends_on_input)


def claims_table(frames):
    """Every claim, one row each (see ``COLUMNS``), in ``CLAIMS`` order: judged where its
    frames are present, else ``NOT_MEASURED`` with the CSVs that are missing. Raises
    ``MissingMeasurement`` naming the claim and the key where a claim reads a column or a row
    that its frames lack: never a row silently left out."""
    rows = []
    for fn in CLAIMS:
        absent = [k for k in fn.frames if k not in frames]
        if absent:
            rows.append({"claim": fn.text, "quote": quote(fn), "lesson": fn.lesson,
                         **_unmeasured("this run has no " + ", ".join(f"{k}.csv" for k in absent))})
            continue
        try:
            rows.append(fn(frames))
        except (KeyError, AttributeError) as e:
            # f["x"], frame["col"], frame.loc[row]: a KeyError; frame.col: an AttributeError
            if isinstance(e, AttributeError) and not isinstance(e.obj, (pd.DataFrame, pd.Series)):
                raise
            key = e.name if isinstance(e, AttributeError) else e.args[0]
            raise MissingMeasurement(f"claim {fn.__name__} ({fn.text!r}): its frames have no "
                                     f"{key!r}") from e
    return pd.DataFrame(rows, columns=COLUMNS)


README_START = "<!-- claims: generated by `make readme-figures` from docs/figures/claims.csv -->"
README_END = "<!-- claims: end -->"


def markdown(table):
    """The claims table as the README shows it: claim (lesson), the lesson's own words, verdict,
    what was measured."""
    lines = [README_START, "", "| claim (lesson) | the lesson's words | verdict | measured |",
             "|---|---|---|---|"]
    for r in table.itertuples():
        words = f"«{r.quote}»" if isinstance(r.quote, str) and r.quote else ""
        lines.append(f"| {r.claim} ({r.lesson}) | {words} | **{r.verdict}** | {r.measured} |")
    return "\n".join(lines + ["", README_END])


def update_readme(readme, table):
    """Replace the README's claims block with ``table``'s; returns the new text."""
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return head + markdown(table) + tail
