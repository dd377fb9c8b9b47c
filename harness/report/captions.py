"""The captions: each section's sentence, its numbers computed from its frames.

A caption takes the section's frames exactly as they are read back from the CSVs
(``{csv stem: DataFrame}``) and returns plain text; ``CAPTIONS`` maps a section's
key to its caption. Numbers that a claim states too come from
``harness.report.numbers``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis import claims, peakmem, schedule
from harness.models import ATTENTION as ATT
from harness.models import PARALLEL_RECURRENCE as LRU
from harness.models import RECURRENCE as RNN
from harness.report import numbers


def _pow10(x):
    return f"10^{x:+.1f}"


def caption_decay(f):
    d, s = f["decay"], f["decay_summary"]
    rnn = d[(d.model == RNN) & (d.weight == "orthogonal") & (d.input_scale == numbers.UNIT_SCALE)]
    far = int(rnn.distance.max())
    lin = rnn[(rnn.activation == "identity") & (rnn.rho == 0.9) & (rnn.distance == far)]
    tanh = rnn[(rnn.activation == "tanh") & (rnn.rho == 0.9) & (rnn.distance == far)]
    att = d[(d.model == ATT) & (d.input_scale == numbers.UNIT_SCALE)]
    kmax = int(att.distance.max())
    near = att[att.distance <= kmax / 4].log10_norm.mean()
    far_q = att[att.distance > 3 * kmax / 4].log10_norm.mean()
    arate = numbers.attention_rate(s)
    srnn = s[(s.model == RNN) & (s.activation == "tanh")]
    return (f"At ρ = 0.9 the signal from {far} steps back is {_pow10(lin.log10_norm.iloc[0])} "
            f"through the linear RNN (theory {far}·log10 0.9 = {_pow10(far * math.log10(0.9))}) and "
            f"{_pow10(tanh.log10_norm.iloc[0])} through tanh, which only makes it smaller. "
            f"Attention's ‖∂y_T/∂x_(T−k)‖ averages {_pow10(near)} over the nearest quarter of "
            f"distances and {_pow10(far_q)} over the farthest: within a factor "
            f"{10 ** abs(far_q - near):.1f}, with a fitted rate of {arate:+.4f} per step against "
            f"the RNN's ln 0.9 = {math.log(0.9):.4f}, because every path crosses one α factor. "
            f"Sanity check, not a finding: Pascanu's bound (an inequality that always holds) is "
            f"respected by {int(srnn.bound_respected.sum())} of {len(srnn)} tanh configurations.")


def caption_clipping(f):
    c = f["clipping"]
    big, small = numbers.clipping_radii(c)

    def clipped(r):                          # the norm went down: the threshold acted
        return r.log10_total_after < r.log10_total_before - 1e-12

    text = f"Clipping the total gradient to {small.threshold:g} rescales every distance by the same factor. "
    if clipped(big):
        text += (f"At ρ = {big.rho:g} the gradient of norm {_pow10(big.log10_total_before)} is cut to "
                 f"{_pow10(big.log10_total_after)}, and the far/near ratio stays at "
                 f"{_pow10(big.log10_far_over_near_before)} before and "
                 f"{_pow10(big.log10_far_over_near_after)} after.")
    else:
        text += (f"At ρ = {big.rho:g} the gradient's norm, {_pow10(big.log10_total_before)}, is under "
                 f"the threshold: nothing is clipped, and the far contribution is "
                 f"{_pow10(big.log10_far_over_near_after)} of the near one.")
    if len(c) > 1:
        if clipped(small):
            text += (f" At ρ = {small.rho:g} the gradient is clipped too, from "
                     f"{_pow10(small.log10_total_before)} to {_pow10(small.log10_total_after)}, and "
                     f"the far contribution stays {_pow10(small.log10_far_over_near_after)} of the near one.")
        else:
            text += (f" At ρ = {small.rho:g} nothing is clipped and the far contribution stays "
                     f"{_pow10(small.log10_far_over_near_after)} of the near one.")
        # the lesson's conclusion, where these two radii show it
        if clipped(big) and not clipped(small) and small.log10_far_over_near_after < 0:
            text = text[:-1] + ": clipping stops explosion, it does not rescue vanishing."
    return text


def caption_depth(f):
    t = f["depth"]
    r, a = numbers.by_T(t, RNN), numbers.by_T(t, ATT)
    return (f"Traced from the running code at d = {int(t.d.iloc[0])}: the RNN's span grows from "
            f"{int(r.span.iloc[0])} to {int(r.span.iloc[-1])} operations as T goes from "
            f"{int(r['T'].iloc[0])} to {int(r['T'].iloc[-1])}, and its path from position 1 to T "
            f"from {int(r.max_path.iloc[0])} to {int(r.max_path.iloc[-1])}. Attention's span stays "
            f"{int(a.span.iloc[-1])} operations and its path {int(a.max_path.iloc[-1])} at every T; "
            f"counted in multiplies and adds (sums as trees) its span is not constant: it grows "
            f"from {int(a.scalar_span.iloc[0])} to {int(a.scalar_span.iloc[-1])}, as log T + log d.")


def caption_schedule(f):
    s = f["schedule"]
    T, d = int(s["T"].iloc[0]), int(s.d.iloc[0])

    def part(model, grain):
        return s[(s.model == model) & (s.grain == grain)].sort_values("P")

    plateaus = schedule.plateau_P(s).set_index(["model", "grain"])["plateau_P"]

    def plateau(g):      # the first P within 1 % of the floor: more processors buy nothing
        return int(plateaus[g.model.iloc[0], g.grain.iloc[0]])

    rs, asc, re_ = part(RNN, "scalar"), part(ATT, "scalar"), part(RNN, "element")
    rsP, asP = numbers.rnn_schedule(s), asc.set_index("P").time
    at_T = rsP.loc[T]
    wins = asP.index[(asP < rsP.reindex(asP.index)).to_numpy()]
    from_P = f"from P = {int(wins.min()):,} on" if len(wins) else "at none of the P scheduled"
    ok = int(s.bounds_ok.sum())
    return (f"Greedy list scheduling of the traced graphs for the lesson's T = {T} tokens (d = {d}). "
            f"With scalar tasks (each multiply or add; sums as trees) and {T} processors the RNN "
            f"needs {int(at_T):,} steps against {int(rsP.loc[1]):,} on one processor: "
            f"{rsP.loc[1] / at_T:,.1f}× faster, because each step's d² products spread over the "
            f"processors, though no number of them takes it below its span of "
            f"{int(rs.span.iloc[0]):,} (reached at P = {plateau(rs):,}). Attention needs "
            f"{int(asP.loc[T]):,} steps on {T} processors and is faster than the RNN only "
            f"{from_P}; its span, {int(asc.span.iloc[0])}, is not constant but grows as log T. "
            f"With one processor per output element the RNN stops improving at "
            f"P = {plateau(re_):,} (≈ {plateau(re_) / d:.0f}·d), on a floor of "
            f"{int(re_.span.iloc[0]):,} steps. Brent's bounds max(W/P, S) ≤ T_P ≤ W/P + S hold on "
            f"{'all ' if ok == len(s) else ''}{ok} of {len(s)} runs.")


def caption_work(f):
    w, x = f["work"], f["crossover"]
    d = int(w.d.iloc[0])
    cross = numbers.timed_crossover(x)
    row, T = cross.row, cross.T
    how = "measured" if cross.measured else "extrapolated from the fitted power laws"
    interval = (f" (95 % interval {row.measured_T_lo:,.0f}–{row.measured_T_hi:,.0f}, from "
                f"resampling the timing rounds)" if pd.notna(row.measured_T_lo) else "")
    rates = f.get("rates")
    why = ""
    if rates is not None and len(rates):
        r = rates.iloc[0]
        why = (f" Measured apart at d = {d}, a matrix-matrix product does {r.gemm_gmacs:.1f} GMAC/s "
               f"and the RNN's dependent matrix-vector steps {r.gemv_gmacs:.1f}: with those rates "
               f"the crossover is predicted at T ≈ {row.predicted_T:,.0f}.")
    return (f"Multiplications counted from the traced computation at d = {d}: the RNN's "
            f"2·T·d² against attention's 2·T²·d cross at T = {numbers.counted_crossover(w):,.0f} "
            f"(d = {d}). "
            f"Timed on this machine at d = {int(row.d)}, attention's forward (grid and mix) "
            f"becomes slower than the RNN's at T ≈ {T:,.0f} ({how}){interval}, {T / row.counted_T:.1f}× the "
            f"counted T = {int(row.counted_T)}.{why}")


def caption_maps(f):
    s = f["attention_diagonal"]
    rm = f["row_max"]
    plain = numbers.unprojected(s)
    r1, r3, pr = plain.iloc[0], plain.iloc[1], s.iloc[2]
    lo, hi, ends = numbers.row_max_ends(rm)

    def at(dk, scaled):
        return ends[dk, scaled].row_max

    return (f"Without projections each row's maximum is on the diagonal in "
            f"{int(r1.rows_max_on_diagonal)} of {int(r1.rows)} rows at token length 1 (mean "
            f"self-weight {r1.mean_self_weight:.3f}) and {int(r3.rows_max_on_diagonal)} of "
            f"{int(r3.rows)} at length 3 ({r3.mean_self_weight:.3f}). With projections "
            f"{int(pr.rows_max_on_diagonal)} of {int(pr.rows)} rows keep it there. The lesson's "
            f"d_k experiment over {int(rm.draws.iloc[0]):,} draws: the unscaled mean row maximum "
            f"goes from {at(lo, False):.3f} at d_k = {lo} to {at(hi, False):.3f} at d_k = {hi} "
            f"(the lesson's single draw: 0.558 to 0.983) while the scaled one stays flat, "
            f"{at(lo, True):.3f} to {at(hi, True):.3f} (the lesson's draw: 0.330 to 0.486, "
            f"one draw; the band shows where 95 % of single draws fall).")


def caption_additive(f):
    m, r = f["additive_maps"], f["additive_routes"]
    t = m[m.setting == "tanh"]
    nt = m[m.setting == "no tanh"].pivot(index="i", columns="j", values="weight").to_numpy()
    same = float(np.abs(nt - nt[0]).max())
    base = numbers.lesson_routes(r)
    top = r.sort_values("va_scale").iloc[-1]
    return (f"Untrained, the additive alignment is nearly uniform: the largest weight of each "
            f"row is between {t.groupby('i').weight.max().min():.3f} and "
            f"{t.groupby('i').weight.max().max():.3f} against uniform {t.uniform.iloc[0]:.3f}. "
            f"Without tanh every row is the same (largest difference {same:.1e}). The gradient "
            f"reaching H by the value route is {base.value_norm:.4f} against {base.score_norm:.4f} "
            f"by the score route at the lesson's va scale {numbers.LESSON_VA_SCALE:g} ({base.value_over_score:.1f}×); "
            f"at va scale {top.va_scale:g} it is {top.value_norm:.4f} against "
            f"{top.score_norm:.4f} ({top.value_over_score:.1f}×).")


def _fitted_ranges(e):
    """"2048", or where the recurrences were timed further (``WallConfig.linear_T_values``),
    "4096 (lru and rnn; the others to 2048)": the largest T fitted, and for which models."""
    tops = list(e.dropna(subset=["T_max"]).groupby("T_max").model.apply(list).items())[::-1]
    (T0, first), rest = tops[0], tops[1:]
    if not rest:
        return f"{int(T0)}"
    middle = "".join(f"; {_and(m)} to {int(T)}" for T, m in rest[:-1])
    return f"{int(T0)} ({_and(first)}{middle}; the others to {int(rest[-1][0])})"


def _and(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _fixed_shares(e):
    """The fixed cost's share of the RNN's time where the fit starts (and ends), and the
    largest share of any model where it is largest: how much of a call p is read off."""
    rnn = e[e.model == RNN]
    if not len(rnn) or pd.isna(rnn.fixed_share.iloc[0]):
        return ""
    r = rnn.iloc[0]
    text = f"; a is {r.fixed_share:.0%} of the RNN's time at T = {int(r.T_min)}"
    if "fixed_share_T_max" not in e or pd.isna(r.fixed_share_T_max):
        return text
    text += f" and {r.fixed_share_T_max:.1%} at T = {int(r.T_max)}"
    top = e.loc[e.fixed_share.idxmax()]            # the RNN's share is a number: one exists
    if top.model != RNN and top.fixed_share > r.fixed_share:
        text += (f", at most {top.fixed_share:.0%} ({top.model}) at T = {int(top.T_min)} and "
                 f"{top.fixed_share_T_max:.1%} at its T = {int(top.T_max)}")
    return text


def caption_wall(f):
    w, e = f["wall_times"], f["exponents"]

    def exp(model):
        return e[e.model == model].exponent.iloc[0]

    r = w[w.model == RNN]
    n = int(w.threads.iloc[0])
    def interval(m):
        row = e[e.model == m].iloc[0]
        return f" [{row.exponent_lo:.2f}, {row.exponent_hi:.2f}]" if pd.notna(row.exponent_lo) else ""

    fits = ", ".join(f"{m} {exp(m):.2f}{interval(m)}" for m in e.model.drop_duplicates())
    widened = e[e.lack_of_fit > 1.0] if "lack_of_fit" in e else e.iloc[:0]
    if len(widened):                                       # walltime._lack_of_fit
        fits += (" (widened where the medians stray from the fitted curve beyond the rounds' "
                 "noise, by " + ", ".join(f"×{r.lack_of_fit:.2f} for {r.model}"
                                          for r in widened.itertuples()) + ")")
    what = "Fitted exponents of time against T"
    if "fixed_seconds" in e and e.T_min.notna().any():     # walltime.fit_exponents: a + b T^p
        what = (f"Exponents p of time = a + b·T^p, fitted for T = {int(e.T_min.min())} "
                f"to {_fitted_ranges(e)} with a ≥ 0 a call's fixed cost{_fixed_shares(e)}")
    rounds = int(w["rounds"].iloc[0]) if "rounds" in w else 1
    floor = ""
    rates = f.get("rates")
    if rates is not None and "noise_floor" in rates:
        floor = (f" Noise floor: one kernel timed under two labels differs by up to "
                 f"{rates.noise_floor.iloc[0]:.1%}; differences inside it are not a ranking.")
    return (f"Forward wall time on this machine ({n} thread{'s' if n > 1 else ''}, d = "
            f"{int(w.d.iloc[0])}; the median of {rounds} interleaved rounds, bars its 95 % "
            f"interval). {what}, with 95 % intervals: {fits}. The RNN "
            f"takes {r.seconds_per_step.median() * 1e6:.1f} µs per step (median over T).{floor}")


def caption_memory(f):
    m = f["peak_memory"].dropna(subset=["peak_bytes"])
    top = m[m["T"] == m["T"].max()].sort_values("peak_bytes")
    growth = peakmem.growth_exponents(m)
    each = "; ".join(f"{r.model} {r.peak_bytes / 2**20:.1f} MiB"
                     + (f" (T^{growth[r.model]:.2f})" if math.isfinite(growth[r.model]) else "")
                     for r in top.itertuples())
    low, high = top.iloc[0], top.iloc[-1]
    return (f"Peak resident memory of one forward call ({m.dtype.iloc[0]}, d = {int(m.d.iloc[0])}, "
            f"outputs included, inputs not), each variant measured in a fresh process. At "
            f"T = {int(top['T'].iloc[0])}: {each}; in brackets, the growth from the two largest T. "
            f"{high.model} needs {high.peak_bytes / low.peak_bytes:.0f} times what {low.model} needs.")


def caption_attention_path(f):
    level = numbers.attention_level(f["attention_level"])
    base, slope, top = level.base, level.slope, level.saturated
    return (f"Attention's path is flat in distance, but not in T or in the size of its inputs. "
            f"At input scale {base.input_scale.iloc[0]:g} its level (the mean of log10 ‖∂y_T/∂x_(T−k)‖ "
            f"over k) falls from {_pow10(base.log10_level.iloc[0])} at T = {int(base['T'].iloc[0])} "
            f"to {_pow10(base.log10_level.iloc[-1])} at T = {int(base['T'].iloc[-1])}, as "
            f"T^{slope:.2f}: one α factor, but α_Tj ≈ 1/T. When the softmax saturates it collapses: "
            f"at input scale {top.input_scale:g} and T = {int(top['T'])} the per-distance norm spans "
            f"{_pow10(top.log10_min)} to {_pow10(top.log10_max)}. The value route carries "
            f"{_pow10(base.log10_value.iloc[-1])} and the score route "
            f"{_pow10(base.log10_score.iloc[-1])} on average at the largest T.")


def caption_history(f):
    h = f["asv_history"]
    last = h[h.commit == h.commit.iloc[-1]]
    rnn = last[(last.series == f"{RNN} forward") & (last["T"] == last["T"].max())].seconds
    att = last[(last.series == f"{ATT} forward") & (last["T"] == last["T"].max())].seconds
    tail = ""
    if len(rnn) and len(att):
        tail = (f" At the newest commit, T = {int(last['T'].max())}: the RNN's forward takes "
                f"{rnn.iloc[0] * 1e3:.2f} ms and attention's {att.iloc[0] * 1e3:.2f} ms.")
    return (f"The kernels' forward and backward across {h.commit.nunique()} commits, read from "
            f"asv's results (batch 1, d = {int(h.d.iloc[0])}, float64, asv's median)." + tail)


def caption_recurrence(f):
    d, lr = f["scan_depth"], f["lru_decay"]
    T0, T1 = int(d["T"].min()), int(d["T"].max())
    span = d.pivot(index="T", columns="model", values="span")
    work = d.pivot(index="T", columns="model", values="scalar_work")
    scan = numbers.scan_form()
    far = int(lr.distance.max())
    at = lr[lr.distance == far].set_index("rho").log10_norm
    return (f"A diagonal linear recurrence, h_t = λ ⊙ h_(t−1) + B x_t (LRU, S5, Mamba), is a "
            f"prefix scan: computed by a parallel scan ({scan}) its span goes from "
            f"{int(span.loc[T0, scan])} to {int(span.loc[T1, scan])} operations as T goes from "
            f"{T0} to {T1}, like log T, where its step loop's goes from {int(span.loc[T0, LRU]):,} "
            f"to {int(span.loc[T1, LRU]):,} and the tanh RNN's from {int(span.loc[T0, RNN]):,} to "
            f"{int(span.loc[T1, RNN]):,}. For that, the scan does {work.loc[T1, scan] / work.loc[T1, LRU]:.2f}× "
            f"the loop's scalar operations at T = {T1}. Its gradient path is max|λ|^k exactly: at "
            f"k = {far}, " + ", ".join(f"{_pow10(v)} for max|λ| = {r:g}" for r, v in at.items())
            + ".")


def caption_gated(f):
    """How far each gated recurrence's gradient survives against the tanh RNN's, and how fast
    its additive route alone decays (the product of its gates)."""
    d = f["gated_decay"]
    reach = numbers.survival_distances(d)
    unit = reach[reach.input_scale == numbers.UNIT_SCALE]
    rnn = unit[unit.gate_bias.isna()]
    T = int(d["T"].max())
    parts = []
    for m, g in unit[unit.gate_bias.notna()].groupby("model", sort=False):
        parts.append(f"the {m.upper()}'s out to " + ", ".join(
            f"k = {int(r.distance):,} at gate bias {r.gate_bias:g}" for r in g.itertuples()))
    rows = d[(d.gate_bias.notna()) & (d.input_scale == numbers.UNIT_SCALE) & (d.distance == T - 1)]
    ends = ", ".join(f"{r.model.upper()} at gate bias {r.gate_bias:g}: {_pow10(r.log10_norm)} "
                     f"(its additive route {_pow10(r.log10_gated)})" for r in rows.itertuples())
    return (f"With unit-scale inputs, the gradient stays within 10^-3 of its value at k = 1: "
            + "; ".join(parts) + f"; the tanh RNN's at best out to k = {int(rnn.distance.max()):,}. "
            f"At k = {T - 1:,}: {ends}. The gates open a route that survives, "
            f"but its norm still falls with distance: the trip is survivable, not short (the "
            f"span and path length in the depth section grow with T as the RNN's).")


def caption_transformer(f):
    """Figure 1's boxes that mix positions, the cost over h, and the layer's crossover."""
    t, h = f["figure1_boxes"], f["heads_cost"].sort_values("heads")
    mixing = t[t.mixes_positions.astype(bool)]
    d, T_eq, ratios = numbers.layer_crossover(f["layer_work"])
    T1 = int(f["layer_work"]["T"].max())
    return (f"Traced box by box, {len(mixing)} of Figure 1's {len(t)} boxes let an output row "
            f"depend on another input row: " + ", ".join(mixing.box) + ". The rest (embeddings, "
            f"positional encodings, add & norm, feed forward, the final linear and softmax) "
            f"work one row at a time. Multi-head attention with d_k = d_model / h does "
            + ", ".join(f"{int(r.total):,}" for r in h.itertuples())
            + f" multiplications for h = " + ", ".join(str(int(x)) for x in h.heads)
            + f" (T = {int(h['T'].iloc[0])}, d = {int(h.d.iloc[0])}). Counting every product of a "
            f"layer at d = {d}, its T² terms pass its projections and feed-forward only at "
            f"T = {T_eq:,.0f} ({T_eq / d:.2f}·d); at T = {T1:,} the layer does "
            + ", ".join(f"{r:.1f}× the {m.upper()}'s" for m, r in ratios.items())
            + " multiplications.")


def caption_linear(f):
    """Linear attention's three algorithms: how closely their outputs agree, and their span,
    peak memory and forward time at the largest T each was measured at."""
    names = dict(zip(numbers.linear_forms(), numbers.LINEAR_ALGORITHMS))
    worst = numbers.linear_agreement(f["linear_methods"])
    methods = f["linear_methods"]
    span = numbers.linear_spans(f["depth"]).rename(columns=names)
    T1, d = int(span.index[-1]), int(f["depth"].d.iloc[0])
    m = f["peak_memory"]
    m = m[m.model.isin(names)].dropna(subset=["peak_bytes"])
    Tm = int(m["T"].max())
    mem = m[m["T"] == Tm].set_index("model").peak_bytes.rename(index=names)
    growth = {names[k]: v for k, v in peakmem.growth_exponents(m).items()}
    w = f["wall_times"]
    w = w[w.model.isin(names)]
    Tw = int(w["T"].max())
    wt = w[w["T"] == Tw].set_index("model").rename(index=names)
    fast, slow = wt.seconds.idxmin(), wt.seconds.idxmax()
    rounds = f" (median of {int(wt['rounds'].iloc[0])} interleaved rounds, 95 % intervals)" \
        if "rounds" in wt else ""
    return (f"One model, three algorithms: causal linear attention (elu + 1 features, normalised) "
            f"computed as a recurrence over a d_k × d_v state, as one masked T × T product, and "
            f"in chunks that carry the state between them. Their outputs agree to "
            f"{worst.relative:.1e} of max |y| (float64, T = {int(methods['T'].min())} to "
            f"{int(methods['T'].max()):,}, every decay). Traced at d = {d} and T = {T1:,}, the "
            f"spans differ in kind: "
            + ", ".join(f"{a} {int(span[a].iloc[-1]):,}" for a in span.columns)
            + f" operations (at T = {int(span.index[0]):,}: "
            + ", ".join(f"{int(span[a].iloc[0]):,}" for a in span.columns)
            + f"). Peak memory of one forward at T = {Tm:,} ({m.dtype.iloc[0]}, "
            f"d = {int(m.d.iloc[0])}): "
            + ", ".join(f"{a} {mem[a] / 2**20:.1f} MiB"
                        + (f" (T^{growth[a]:.2f})" if math.isfinite(growth[a]) else "")
                        for a in mem.index)
            + f". Forward time at T = {Tw:,} (d = {int(wt.d.iloc[0])}){rounds}: "
            + ", ".join(f"{a} {r.seconds * 1e3:,.1f} ms [{r.seconds_lo * 1e3:,.1f}, "
                        f"{r.seconds_hi * 1e3:,.1f}]" for a, r in wt.iterrows())
            + f": the {fast} form is {wt.seconds[slow] / wt.seconds[fast]:.1f}× faster than "
            f"the {slow} one.")


def _kernel_name(r):
    return f"{r.family}{'' if r.kernel == 'default' else ' ' + r.kernel} {r.direction}"


def caption_roofline(f):
    """The ceilings' extremes, how many kernels each kind of bound holds, the median, highest
    and lowest fraction of its bound a kernel reaches, and the crossover predicted from the
    roofline beside the measured one."""
    c, k = f["ceilings"], f["roofline"]
    x = f.get("roofline_crossover")
    compute = c[c.level == "compute"]
    parts = []
    for dtype, g in compute.groupby("dtype"):
        top = g.loc[g.value.idxmax()]
        fma = g[g.ceiling.str.startswith("FMA")]
        gemm = g[g.ceiling.str.startswith("gemm")]
        vs = (f"; the FMA loop {fma.value.iloc[0]:.1f}, {fma.value.iloc[0] / gemm.value.max():.0%} "
              f"of the faster GEMM" if len(fma) and len(gemm) else "")
        parts.append(f"{dtype} peaks at {top.value:.1f} GFLOP/s ({top.ceiling}, 95 % interval "
                     f"{top.lo:.1f}–{top.hi:.1f}){vs}")
    bw = c[c.level != "compute"].groupby("level")["value"].max()
    levels = [lv for lv in ("L1", "L2", "L3", "memory") if lv in bw.index]
    text = ("On one thread, " + "; ".join(parts) + ". Bandwidth (the better of the read-only "
            "sum and the triad) is " + ", ".join(f"{bw[lv]:.1f} GB/s in {lv}" for lv in levels)
            + ".")
    n_compute = int(k.bound_kind.str.startswith("compute").sum())
    best, worst = k.loc[k.fraction.idxmax()], k.loc[k.fraction.idxmin()]
    text += (f" Of {len(k)} kernel timings, {n_compute} are bound by compute and "
             f"{len(k) - n_compute} by bandwidth; they reach a median {k.fraction.median():.0%} "
             f"of their bound, from {worst.fraction:.0%} ({_kernel_name(worst)}, T = {worst['T']}, "
             f"d = {worst.d}, {worst['dtype']}) to {best.fraction:.0%} ({_kernel_name(best)}, "
             f"T = {best['T']}, d = {best.d}, {best['dtype']}).")
    if x is not None:
        for _, r in x.iterrows():
            if not np.isfinite(r.rnn_step_s):
                continue
            measured = (f"measured at T ≈ {r.measured_T:,.0f}" if np.isfinite(r.measured_T)
                        else "not bracketed by the measured lengths")
            interval = (f" (95 % interval {r.measured_T_lo:,.0f}–{r.measured_T_hi:,.0f})"
                        if np.isfinite(r.measured_T_lo) else "")
            predicted = (f"T ≈ {r.predicted_T:,.0f}" if np.isfinite(r.predicted_T)
                         else "no crossing")
            text += (f" At d = {r.d} the RNN's step takes {r.rnn_step_s * 1e6:.2f} µs, "
                     f"{r.rnn_step_s / r.rnn_step_bound_s:.1f}× its roofline bound (each step "
                     f"waits for the last); from the two kernels' achieved rates attention's "
                     f"grid and mix overtake it at {predicted}, with both at their bounds at "
                     f"T ≈ {r.bound_T:,.0f} (counted: T = {r.counted_T:,.0f}); {measured}"
                     f"{interval}.")
    return text


CAPTIONS = {
    "decay": caption_decay, "clipping": caption_clipping, "depth": caption_depth,
    "schedule": caption_schedule, "work": caption_work, "maps": caption_maps,
    "additive": caption_additive, "wall": caption_wall, "history": caption_history,
    "attention_path": caption_attention_path, "memory": caption_memory,
    "recurrence": caption_recurrence, "gated": caption_gated, "transformer": caption_transformer,
    "linear": caption_linear, "roofline": caption_roofline,
}


def caption_claims(f):
    """The claims table's caption: how many claims, and how many of each verdict."""
    table = f["claims"]
    counts = table.verdict.value_counts()
    missing = int(counts.get(claims.NOT_MEASURED, 0))
    return (f"{len(table)} claims of the three lessons against this run's measurements: "
            + ", ".join(f"{int(counts.get(v, 0))} {v}" for v in claims.VERDICTS)
            + (f", {missing} {claims.NOT_MEASURED}" if missing else "")
            + ". Each verdict is computed from the data by a rule in harness/analysis/claims/; "
              "the columns of every CSV are described in docs/data.md.")
