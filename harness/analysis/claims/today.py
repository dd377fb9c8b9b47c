"""The goodbye-to-recurrence lesson's claims asked of today's models: the recurrence that
parallelises (a diagonal linear recurrence by a scan), the gated recurrences, the whole
Transformer layer and linear attention.
"""

from __future__ import annotations

import math

from harness.analysis.claims._rules import HOLDS, QUALIFIED, FAILS, _row, _unmeasured, _claim
from harness.models import GATED_RECURRENCES as GATED
from harness.models import PARALLEL_RECURRENCE as LRU
from harness.models import RECURRENCE as RNN
from harness.report import numbers


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
    # the scan's span beside T: "but ... only" where it is short (the claim fails), "and ...
    # too" where it is a sizeable share of T (the claim holds for the scan as well)
    link, tail = (("but", f"only {int(log_span)}, about {log_span / math.log2(T):.1f}·log2 T")
                  if verdict == FAILS else
                  ("and", f"{int(log_span):,} too, {log_span / T:.2f}·T: it waits as the loops do"))
    return _row(f"at T = {T:,} the tanh RNN's span is {int(last[RNN]):,} operations and the linear "
                f"recurrence's step loop {int(last[LRU]):,}, {link} the same recurrence computed by "
                f"a parallel scan ({scan}) has a span of {tail}", log_span, verdict)


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
                + " decades" + (" (one value for every input)" if flat else
                                " (they spread too: the spread is not the gate's alone)"),
                sel.decades, HOLDS if spreads and flat else FAILS)
