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
COLUMNS = ["claim", "lesson", "measured", "value", "low", "high", "verdict"]


class MissingMeasurement(LookupError):
    """A claim read a measurement (a column, a row) that its frames do not hold."""


def _row(measured, value, verdict, low=math.nan, high=math.nan, **claim):
    """A judged claim's row, less the claim and the lesson that ``_claim`` adds (``claim=``
    replaces the declared text)."""
    return {"measured": measured, "value": float(value), "low": float(low), "high": float(high),
            "verdict": verdict, **claim}


def _unmeasured(why, **claim):
    return _row(f"not measured: {why}", math.nan, NOT_MEASURED, **claim)


def _claim(text, lesson, *frames):
    """Register a judge of the claim ``text`` of ``lesson``, which reads the report's ``frames``
    (CSV stems): the registered function returns the whole row (see ``COLUMNS``)."""
    def register(judge):
        @functools.wraps(judge)
        def row(f):
            return {"claim": text, "lesson": lesson, **judge(f)}
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


@_claim("…so in time too, attention costs more than the RNN from T = d on",
        "goodbye to recurrence (counts), timed here", "crossover")
def wall_time_crosses_at_d(f):
    """Timed, the forwards cross where the counts do, within the measurement's interval."""
    cross = numbers.timed_crossover(f["crossover"])
    row, T = cross.row, cross.T
    how = "measured" if cross.measured else "extrapolated"
    d = float(row.d)
    lo, hi = float(row.measured_T_lo), float(row.measured_T_hi)
    inside = math.isfinite(lo) and lo <= d <= hi
    interval = f" (95 % interval {lo / d:.2f}–{hi / d:.2f}·d)" if math.isfinite(lo) else ""
    return _row(f"timed on this machine, attention's forward (grid and mix) becomes the slower at "
                f"T ≈ {T:,.0f} ({how}), {T / d:.2f}·d{interval}; the rates measured apart predict "
                f"{float(row.predicted_T) / d:.2f}·d",
                T / d, HOLDS if inside else FAILS, lo / d, hi / d)


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


CLAIMS = (depth_in_sequence, scan_parallelises, processors_change_nothing, attention_constant_stages,
          counts_cross_at_d, wall_time_crosses_at_d, vanishing_with_radius, tanh_makes_it_worse,
          clipping_stops_explosion_only, attention_one_factor, sqrt_dk,
          diagonal_without_projections, additive_routes, gates_did_not_shorten,
          gates_made_it_survivable, figure1_three_boxes_mix, heads_cost_is_flat,
          layer_quadratic_from_d)


def claims_table(frames):
    """Every claim, one row each (see ``COLUMNS``), in ``CLAIMS`` order: judged where its
    frames are present, else ``NOT_MEASURED`` with the CSVs that are missing. Raises
    ``MissingMeasurement`` naming the claim and the key where a claim reads a column or a row
    that its frames lack: never a row silently left out."""
    rows = []
    for fn in CLAIMS:
        absent = [k for k in fn.frames if k not in frames]
        if absent:
            rows.append({"claim": fn.text, "lesson": fn.lesson,
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
