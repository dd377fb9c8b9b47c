"""``harness report``: the three claims of the lessons, with this machine's numbers.

One command writes a self-contained folder: ``index.html`` (offline, no network
fetch), every figure as PNG and SVG, and the CSV behind each figure. Each
section is data (tidy frames, written as CSV), one seaborn figure drawn from
those frames, and a caption whose numbers are computed from the same frames;
the tests re-read the CSVs and check that the captions match.

The folder is built under a temporary name beside its destination and renamed
into place at the end, so an interrupted run never leaves a folder that looks
like a finished report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import glob
import html
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness import models  # noqa: E402
from harness.analysis import (claims, clipping, depth, gradpath, lessons, peakmem,  # noqa: E402
                              schedule, walltime)
from harness.infra import machine, timing  # noqa: E402
from harness.infra.stats import log_crossing  # noqa: E402
from harness.infra import signals  # noqa: E402
from harness.infra.files import UsageError, atomic_write_text, check_name, remove_stale, umask  # noqa: E402
from harness.infra.config import QUICK_REPORT as QUICK  # noqa: E402,F401
from harness.infra.config import REPORT as DEFAULT  # noqa: E402
from harness.models import ATTENTION as ATT  # noqa: E402
from harness.models import PARALLEL_RECURRENCE as LRU  # noqa: E402
from harness.models import RECURRENCE as RNN  # noqa: E402


@dataclasses.dataclass
class Section:
    key: str
    title: str
    frames: dict            # csv stem -> DataFrame
    caption: str
    figure: str | None      # file stem of the PNG/SVG, None for table-only sections
    table_html: str = ""


# ------------------------------------------------------------------- captions
# Each takes the frames exactly as they are read back from the CSVs.

def _pow10(x):
    return f"10^{x:+.1f}"


def caption_decay(f):
    d, s = f["decay"], f["decay_summary"]
    rnn = d[(d.model == RNN) & (d.weight == "orthogonal") & (d.input_scale == 1.0)]
    far = int(rnn.distance.max())
    lin = rnn[(rnn.activation == "identity") & (rnn.rho == 0.9) & (rnn.distance == far)]
    tanh = rnn[(rnn.activation == "tanh") & (rnn.rho == 0.9) & (rnn.distance == far)]
    att = d[(d.model == ATT) & (d.input_scale == 1.0)]
    kmax = int(att.distance.max())
    near = att[att.distance <= kmax / 4].log10_norm.mean()
    far_q = att[att.distance > 3 * kmax / 4].log10_norm.mean()
    arate = s[(s.model == ATT) & (s.input_scale == 1.0)].ln_rate.iloc[0]
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
    c = f["clipping"].sort_values("rho")
    big, small = c.iloc[-1], c.iloc[0]

    def clipped(r):                          # the norm went down: the threshold acted
        return r.log10_total_after < r.log10_total_before - 1e-12

    text = f"Clipping the total gradient to {c.threshold.iloc[0]:g} rescales every distance by the same factor. "
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
    r, a = t[t.model == RNN].sort_values("T"), t[t.model == ATT].sort_values("T")
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
    rsP, asP = rs.set_index("P").time, asc.set_index("P").time
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


def _measured_crossover(x):
    """(T, how, ratio to the counted T = d) of the grid-and-mix attention crossover."""
    row = x[x.variant == ATT].iloc[0]
    if not pd.isna(row.measured_T):
        T, how = row.measured_T, "measured"
    else:
        T, how = row.extrapolated_T, "extrapolated from the fitted power laws"
    return row, T, how, T / row.counted_T


def counted_crossover(w):
    """T where the traced counts cross: log(attention / RNN) interpolated in log T."""
    wide = w.pivot(index="T", columns="model", values="macs").sort_index()
    return log_crossing(wide.index, np.log(wide[ATT] / wide[RNN]))


def caption_work(f):
    w, x = f["work"], f["crossover"]
    d = int(w.d.iloc[0])
    row, T, how, ratio = _measured_crossover(x)
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
            f"2·T·d² against attention's 2·T²·d cross at T = {counted_crossover(w):,.0f} "
            f"(d = {d}). "
            f"Timed on this machine at d = {int(row.d)}, attention's forward (grid and mix) "
            f"becomes slower than the RNN's at T ≈ {T:,.0f} ({how}){interval}, {ratio:.1f}× the "
            f"counted T = {int(row.counted_T)}.{why}")


def caption_maps(f):
    s = f["attention_diagonal"]
    rm = f["row_max"]
    r1, r3, pr = s.iloc[0], s.iloc[1], s.iloc[2]
    lo, hi = rm.d_k.min(), rm.d_k.max()

    def at(dk, scaled):
        return rm[(rm.d_k == dk) & (rm.scaled == scaled)].row_max.iloc[0]

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
    base = r[r.va_scale == 0.5].iloc[0]
    top = r.sort_values("va_scale").iloc[-1]
    return (f"Untrained, the additive alignment is nearly uniform: the largest weight of each "
            f"row is between {t.groupby('i').weight.max().min():.3f} and "
            f"{t.groupby('i').weight.max().max():.3f} against uniform {t.uniform.iloc[0]:.3f}. "
            f"Without tanh every row is the same (largest difference {same:.1e}). The gradient "
            f"reaching H by the value route is {base.value_norm:.4f} against {base.score_norm:.4f} "
            f"by the score route at the lesson's va scale 0.5 ({base.value_over_score:.1f}×); "
            f"at va scale {top.va_scale:g} it is {top.value_norm:.4f} against "
            f"{top.score_norm:.4f} ({top.value_over_score:.1f}×).")


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
    rounds = int(w["rounds"].iloc[0]) if "rounds" in w else 1
    floor = ""
    rates = f.get("rates")
    if rates is not None and "noise_floor" in rates:
        floor = (f" Noise floor: one kernel timed under two labels differs by up to "
                 f"{rates.noise_floor.iloc[0]:.1%}; differences inside it are not a ranking.")
    return (f"Forward wall time on this machine ({n} thread{'s' if n > 1 else ''}, d = "
            f"{int(w.d.iloc[0])}; the median of {rounds} interleaved rounds, bars its 95 % "
            f"interval). Fitted exponents of time against T, with 95 % intervals: {fits}. The RNN "
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
    lv = f["attention_level"]
    base = lv[lv.input_scale == lv.input_scale.min()].sort_values("T")
    slope = float(np.polyfit(np.log10(base["T"]), base.log10_level, 1)[0])
    sat = lv[lv["T"] == lv["T"].max()].sort_values("input_scale")
    top = sat.iloc[-1]
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
    rnn = last[(last.series == "rnn forward") & (last["T"] == last["T"].max())].seconds
    att = last[(last.series == "attention forward") & (last["T"] == last["T"].max())].seconds
    tail = ""
    if len(rnn) and len(att):
        tail = (f" At the newest commit, T = {int(last['T'].max())}: the RNN's forward takes "
                f"{rnn.iloc[0] * 1e3:.2f} ms and attention's {att.iloc[0] * 1e3:.2f} ms.")
    return (f"The kernels' forward and backward across {h.commit.nunique()} commits, read from "
            f"asv's results (batch 1, d = {int(h.d.iloc[0])}, float64, asv's median)." + tail)


CAPTIONS = {
    "decay": caption_decay, "clipping": caption_clipping, "depth": caption_depth,
    "schedule": caption_schedule, "work": caption_work, "maps": caption_maps,
    "additive": caption_additive, "wall": caption_wall, "history": caption_history,
    "attention_path": caption_attention_path, "memory": caption_memory,
}


# -------------------------------------------------------------------- figures

def _save(fig, folder, stem):
    fig.savefig(folder / f"{stem}.png", dpi=110, bbox_inches="tight")
    fig.savefig(folder / f"{stem}.svg", bbox_inches="tight")
    plt.close(fig)


CLIP_DECADES = 60       # the decay figure draws |log10 norm| up to this; beyond, marked at the edge


def figure_decay(f):
    d = f["decay"]
    rnn = d[(d.model == RNN) & (d.weight == "orthogonal") & (d.input_scale == 1.0)]
    att = d[(d.model == ATT) & (d.input_scale == 1.0)]
    series = rnn.rho.map(lambda r: f"RNN ρ={r:g}")
    rows = [rnn.assign(curve="measured", series=series)]
    # k log10(sigma_max): exact for the linear RNN on orthogonal W_hh, Pascanu's bound for tanh
    theory = rnn.assign(log10_norm=rnn.log10_bound, curve="theory / bound", series=series)
    rows.append(theory)
    for act in ("identity", "tanh"):
        rows.append(att.assign(activation=act, curve="measured", series=ATT))
    long = pd.concat(rows, ignore_index=True)
    clipped = long.log10_norm.abs() > CLIP_DECADES
    long["log10_norm"] = long.log10_norm.clip(-CLIP_DECADES, CLIP_DECADES)
    g = sns.relplot(data=long, x="distance", y="log10_norm", hue="series", style="curve",
                    col="activation", kind="line", height=3.6, aspect=1.25,
                    facet_kws={"sharey": True})
    g.set_axis_labels("distance k", "log10 ‖∂(state or output at T) / ∂(position T−k)‖")
    for ax in g.axes.flat:
        if clipped.any():
            for edge in (-CLIP_DECADES, CLIP_DECADES):
                ax.axhline(edge, color="grey", ls=":", lw=0.8)
            ax.text(0.02, 0.02, f"values beyond ±{CLIP_DECADES} decades drawn on the dotted line "
                    f"({int(clipped.sum())} points)", transform=ax.transAxes, fontsize=7)
    g.figure.suptitle("RNN: ‖∂h_T/∂h_(T−k)‖;  attention: ‖∂y_T/∂x_(T−k)‖", y=1.02, fontsize=9)
    return g.figure


def figure_lru_decay(f):
    d = f["lru_decay"]
    long = pd.concat([d.assign(curve="measured"), d.assign(log10_norm=d.log10_linear, curve="k·log10 r")])
    long["r"] = long.rho.map(lambda r: f"max|λ| = {r:g}")
    g = sns.relplot(data=long, x="distance", y="log10_norm", hue="r", style="curve", kind="line",
                    height=3.6, aspect=1.4)
    g.set_axis_labels("distance k", "log10 ‖∂h_T/∂h_(T−k)‖, linear recurrence")
    return g.figure


def caption_recurrence(f):
    d, lr = f["scan_depth"], f["lru_decay"]
    T0, T1 = int(d["T"].min()), int(d["T"].max())
    span = d.pivot(index="T", columns="model", values="span")
    work = d.pivot(index="T", columns="model", values="scalar_work")
    scan = [m for m in span.columns if m not in (RNN, LRU)][0]
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


CAPTIONS["recurrence"] = caption_recurrence


def figure_attention_path(f):
    lv = f["attention_level"]
    g = sns.relplot(data=lv, x="T", y="log10_level", hue="input_scale", kind="line", marker="o",
                    height=3.6, aspect=1.4, palette="viridis")
    # each band in its line's colour: seaborn maps a numeric hue linearly onto the palette
    viridis = matplotlib.colormaps["viridis"]
    norm = matplotlib.colors.Normalize(lv.input_scale.min(), lv.input_scale.max())
    for ax in g.axes.flat:
        for scale, part in lv.groupby("input_scale"):
            ax.fill_between(part["T"], part.log10_min, part.log10_max, alpha=0.12,
                            color=viridis(norm(scale)))
    g.set(xscale="log")
    g.set_axis_labels("T", "log10 ‖∂y_T/∂x_(T−k)‖: mean over k, band min–max")
    return g.figure


def figure_clipping(f):
    c = f["clipping"]
    long = pd.concat([c.assign(when="before clipping", log10=c.log10_far_over_near_before),
                      c.assign(when="after clipping", log10=c.log10_far_over_near_after)])
    g = sns.catplot(data=long, x="rho", y="log10", hue="when", kind="bar", height=3.4, aspect=1.5)
    g.set_axis_labels("ρ", "log10 (far / near contribution)")
    return g.figure


def figure_depth(f):
    t = f["depth"]
    long = t.melt(id_vars=["model", "T"], value_vars=["span", "max_path", "scalar_span"],
                  var_name="measure", value_name="operations")
    g = sns.relplot(data=long, x="T", y="operations", hue="model", col="measure", kind="line",
                    marker="o", height=3.2, aspect=1.1, facet_kws={"sharey": False})
    g.set(xscale="log", yscale="log")
    return g.figure


def figure_schedule(f):
    s = f["schedule"]
    g = sns.relplot(data=s, x="P", y="time", hue="model", col="grain", kind="line", marker="o",
                    height=3.4, aspect=1.2)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("processors P", "steps T_P (greedy schedule)")
    for ax in g.axes.flat:
        ax.axvline(int(s["T"].iloc[0]), color="grey", ls=":", lw=1)
    return g.figure


def figure_work(f):
    w, x = f["work"], f["crossover"]
    g = sns.relplot(data=w, x="T", y="macs", hue="model", kind="line", marker="o",
                    height=3.6, aspect=1.5)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("T", "multiplications (traced)")
    _, _, _, ratio = _measured_crossover(x)
    d = int(w.d.iloc[0])
    for ax in g.axes.flat:
        ax.axvline(d, color="k", ls="--", lw=1, label="counted crossover T = d")
        if np.isfinite(ratio):
            ax.axvline(ratio * d, color="tab:red", ls=":", lw=1.5,
                       label=f"measured wall-time crossover ({ratio:.1f} d)")
        ax.legend(loc="upper left", fontsize=8)
    return g.figure


def figure_maps(f):
    m = f["attention_maps"]

    def heat(data, **kw):
        A = data.pivot(index="query", columns="key", values="weight")
        A = A.loc[list(lessons.SENTENCE), list(lessons.SENTENCE)]
        sns.heatmap(A, vmin=0, vmax=1, cmap="viridis", cbar=False, annot=True, fmt=".2f",
                    annot_kws={"size": 7}, ax=plt.gca())

    g = sns.FacetGrid(m, col="setting", height=3.4)
    g.map_dataframe(heat)
    g.set_titles("{col_name}")
    return g.figure


def figure_row_max(f):
    rm = f["row_max"]
    g = sns.relplot(data=rm, x="d_k", y="row_max", hue="scaled", kind="line", marker="o",
                    height=3.2, aspect=1.4)
    ax = g.ax
    for scaled, part in rm.groupby("scaled"):
        ax.fill_between(part.d_k, part.band_lo, part.band_hi, alpha=0.15)
    lesson = f.get("row_max_lesson")
    if lesson is not None and len(lesson):
        ax.scatter(lesson.d_k, lesson.lesson_row_max, marker="x", color="k", zorder=5,
                   label="the lesson's single draw")
        ax.legend(loc="center right", fontsize=8)
    g.set(xscale="log")
    g.set_axis_labels("d_k", "mean row maximum of A (band: 95 % of draws)")
    return g.figure


def figure_additive(f):
    m = f["additive_maps"]

    def heat(data, **kw):
        sns.heatmap(data.pivot(index="i", columns="j", values="weight"), vmin=0, vmax=0.4,
                    cmap="viridis", annot=True, fmt=".2f", annot_kws={"size": 7}, cbar=False,
                    ax=plt.gca())

    g = sns.FacetGrid(m, col="setting", height=3.2)
    g.map_dataframe(heat)
    g.set_titles("additive alignment, {col_name}")
    return g.figure


def figure_routes(f):
    r = f["additive_routes"]
    long = r.melt(id_vars="va_scale", value_vars=["value_norm", "score_norm"],
                  var_name="route", value_name="norm")
    g = sns.relplot(data=long, x="va_scale", y="norm", hue="route", kind="line", marker="o",
                    height=3.2, aspect=1.4)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("scale of va", "‖gradient reaching H‖")
    return g.figure


def figure_wall(f):
    w = f["wall_times"]
    g = sns.relplot(data=w, x="T", y="seconds", hue="model", kind="line", marker="o",
                    height=3.6, aspect=1.5)
    if "seconds_lo" in w:
        for (model, part), color in zip(w.groupby("model", sort=False), sns.color_palette()):
            g.ax.vlines(part["T"], part.seconds_lo, part.seconds_hi, color=color, lw=2)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("T", "forward wall time (s), median and 95 % interval")
    return g.figure


def figure_memory(f):
    m = f["peak_memory"].assign(peak_mib=lambda x: x.peak_bytes / 2**20)
    g = sns.relplot(data=m, x="T", y="peak_mib", hue="model", kind="line", marker="o",
                    height=3.6, aspect=1.5)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("T", "peak memory of one forward (MiB)")
    return g.figure


def figure_history(f):
    h = f["asv_history"]
    g = sns.relplot(data=h, x="commit", y="seconds", hue="series", col="T", kind="line",
                    marker="o", height=3.2, aspect=1.0, col_wrap=4,
                    facet_kws={"sharey": False})
    g.set(yscale="log")
    g.set_axis_labels("commit (oldest first)", "time (s)")
    for ax in g.axes.flat:
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    return g.figure


# ---------------------------------------------------------------- asv results

def read_asv_results(results_dir):
    """Every timing in asv's results JSON as a tidy frame: benchmark, params, commit, date, seconds."""
    rows = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*", "*.json"))):
        if os.path.basename(path) == "machine.json":
            continue
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
            continue                                  # not an asv results file
        columns = data.get("result_columns", ["result", "params"])
        for name, entry in data.get("results", {}).items():
            if ".time_" not in name and not name.startswith("time_"):
                continue
            rec = dict(zip(columns, entry))
            values, params = rec.get("result"), rec.get("params") or []
            if values is None:
                continue
            if not isinstance(values, list):          # a benchmark without params, older format
                values = [values]
            combos = list(itertools.product(*params)) if params else [()]
            for combo, val in zip(combos, values):
                if val is None or (isinstance(val, float) and not math.isfinite(val)):
                    continue
                rows.append({"benchmark": name, "params": ", ".join(map(str, combo)),
                             "commit": data.get("commit_hash", "")[:8],
                             "date": pd.to_datetime(data.get("date", 0), unit="ms"),
                             "seconds": float(val)})
    return pd.DataFrame(rows, columns=["benchmark", "params", "commit", "date", "seconds"])


def kernel_history(h, d=256, batch=1, dtype="float64"):
    """The main benchmarks across commits: Kernels.time_forward/backward at one (d, batch, dtype).

    Columns: commit (oldest first), date, series ("rnn forward", ...), T, d, seconds.
    """
    import ast
    rows = []
    for r in h.itertuples():
        if ".Kernels.time_" not in r.benchmark:
            continue
        try:
            model, T, dd, b, dt = ast.literal_eval(f"({r.params},)")
        except (ValueError, SyntaxError, TypeError):
            continue
        if (int(dd), int(b), dt) != (d, batch, dtype):
            continue
        direction = r.benchmark.rsplit("time_", 1)[1]
        rows.append({"commit": r.commit, "date": r.date, "series": f"{model} {direction}",
                     "T": int(T), "d": int(dd), "seconds": r.seconds})
    out = pd.DataFrame(rows, columns=["commit", "date", "series", "T", "d", "seconds"])
    return out.sort_values(["date", "series", "T"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------- build

STAGES = 8          # the progress calls of _sections, for a bar with a count


def _sections(config, progress):
    """Run the analysers: yields (key, title, frames, figure fns). Calls ``progress(stage)``
    ``STAGES`` times."""
    progress("gradient decay (RNN and attention)")
    frame, summary = gradpath.decay_sweep(config.decay)
    yield ("decay", "Gradient path: T−1 Jacobians against one α",
           {"decay": frame, "decay_summary": summary}, [("decay", figure_decay)])

    progress("attention's path over T and input scale")
    level = gradpath.path_levels(ATT, config.path_T, config.path_input_scales,
                                 config.decay.ds[0], config.decay)
    yield ("attention_path", "Attention's one α: flat in distance, not in T or input scale",
           {"attention_level": level}, [("attention_level", figure_attention_path)])

    progress("clipping")
    clip = clipping.clipping_experiment(**dataclasses.asdict(config.clipping))
    yield ("clipping", "Clipping stops explosion, not vanishing", {"clipping": clip},
           [("clipping", figure_clipping)])

    progress("depth: tracing the forwards")
    dt = depth.depth_table(config.depth.T_values, config.depth.d)
    yield ("depth", "Sequential depth: span and path length", {"depth": dt},
           [("depth", figure_depth)])

    recurrences = [m for m, (fam, _) in models.traced_forms().items() if fam.name in (RNN, LRU)]
    lru_rows = frame[frame.model == LRU]
    yield ("recurrence", "The recurrence that parallelises",
           {"scan_depth": dt[dt.model.isin(recurrences)], "lru_decay": lru_rows},
           [("lru_decay", figure_lru_decay)])

    T, d = config.schedule.T_values[0], config.schedule_d
    progress(f"schedule on P processors (T = {T})")
    traces = {}
    sched = pd.concat([schedule.schedule(m, T, d, config.schedule.processors, grain,
                                         tr=depth.traced(traces, m, T, d))
                       for grain in config.schedule.grains for m in models.traced_forms()],
                      ignore_index=True)
    yield ("schedule", f"The {T}-token text on P processors", {"schedule": sched},
           [("schedule", figure_schedule)])

    progress("wall times over T, in interleaved rounds")
    wall = walltime.measure_wall_times(config.wall)
    rates = walltime.matmul_rates(config.wall.d, config.wall)
    kernel = walltime.noise_kernel(config.wall)
    rates.update(timing.noise_floor(kernel, config.wall.rounds, config.wall.min_sample_s))
    cross = walltime.measured_crossover(wall, config.wall, rates)
    expo = walltime.fit_exponents(wall, config.wall.fit_min_T)
    work = dt[["model", "T", "d", "macs", "flops"]]
    rates_frame = pd.DataFrame([{"d": config.wall.d, "threads": config.wall.threads, **rates}])
    yield ("work", "Work: multiplications cross at T = d",
           {"work": work, "crossover": cross, "rates": rates_frame}, [("work", figure_work)])
    yield ("wall", "Measured: forward time against T",
           {"wall_times": wall, "wall_samples": wall.attrs["samples"], "exponents": expo,
            "rates": rates_frame}, [("wall_times", figure_wall)])

    progress("peak memory over T, a fresh process per variant")
    mem = peakmem.measure(config.memory)
    yield ("memory", "Measured: peak memory against T", {"peak_memory": mem},
           [("peak_memory", figure_memory)])

    progress("attention experiments of the lessons")
    maps = lessons.self_attention_maps(config.lessons)
    yield ("maps", "Self-attention: the diagonal, projections and √d_k",
           {"attention_maps": maps, "attention_diagonal": lessons.diagonal_share(maps),
            "row_max": lessons.row_max_vs_dk(config.lessons),
            "row_max_lesson": lessons.lesson_draw_percentiles(config.lessons)},
           [("attention_maps", figure_maps), ("row_max", figure_row_max)])
    yield ("additive", "Additive attention: untrained map, no tanh, two gradient routes",
           {"additive_maps": lessons.additive_maps(),
            "additive_routes": lessons.lesson_additive_routes(config.lessons.va_scales)},
           [("additive_maps", figure_additive), ("additive_routes", figure_routes)])

    hist = kernel_history(read_asv_results(config.asv_results))
    if len(hist):
        yield ("history", "Benchmarks across commits (asv)", {"asv_history": hist},
               [("asv_history", figure_history)])


def _claims_html(table):
    view = table[["claim", "lesson", "verdict", "measured"]]
    return view.to_html(index=False, escape=True, classes="table claims")


def _table1(dt):
    view = dt[["model", "T", "d", "macs", "flops", "span", "max_path", "parallelism"]].copy()
    return view.to_html(index=False, escape=True, float_format=lambda x: f"{x:,.1f}",
                        formatters={"macs": "{:,}".format, "flops": "{:,}".format},
                        classes="table")


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.95em;color:#333;margin-top:.4em}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}.meta td{text-align:left}code{background:#f4f4f4;padding:1px 3px}
"""


def render_html(sections, meta, command):
    esc = html.escape
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8>"
             f"<title>harness report</title><style>{_CSS}</style></head><body>",
             "<h1>What attention buys over recurrence, and what it costs</h1>",
             "<p>Every number below was measured on this machine by the command at the end "
             "of the page. Each figure links its data (CSV) and an SVG version; "
             '<a href="data.md">data.md</a> describes every column, with its unit.</p>']
    for s in sections:
        parts.append(f'<section id="{esc(s.key)}"><h2>{esc(s.title)}</h2>')
        for stem in s.figure or []:
            parts.append(f'<figure><img src="{esc(stem)}.png" alt="{esc(s.title)}">'
                         f'</figure>')
        parts.append(f'<p class="caption" data-section="{esc(s.key)}">{esc(s.caption)}</p>')
        links = " · ".join(f'<a href="{esc(n)}.csv">{esc(n)}.csv</a>' for n in s.frames)
        svgs = " · ".join(f'<a href="{esc(n)}.svg">{esc(n)}.svg</a>' for n in (s.figure or []))
        parts.append(f"<p><small>data: {links}{' · figures: ' + svgs if svgs else ''}"
                     f"</small></p>")
        if s.table_html:
            parts.append(s.table_html)
        parts.append("</section>")
    parts.append("<h2>Machine, versions and command</h2><table class=meta>")
    for k, val in meta.items():
        parts.append(f"<tr><th>{esc(str(k))}</th><td>{esc(str(val))}</td></tr>")
    parts.append(f"<tr><th>command</th><td><code>{esc(command)}</code></td></tr></table>")
    # a browser marks how many images failed to load (read by the headless-Chromium test)
    parts.append("<script>window.addEventListener('load',function(){var n=0;"
                 "for(var i of document.images){if(!i.complete||i.naturalWidth===0)n++;}"
                 "document.body.setAttribute('data-broken-images',String(n));});</script>")
    parts.append("</body></html>")
    return "\n".join(parts)


def check_out(out):
    """The report folder, resolved; a UsageError at once for one that cannot be used."""
    check_name(out)
    path = Path(out).resolve()                     # a symlink to a folder: that folder
    cwd = Path.cwd().resolve()
    if path == cwd or path in cwd.parents:
        raise UsageError(f"--out: {str(out)!r} is the current directory or holds it; the report "
                         f"replaces its folder whole, so give it a folder of its own")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"--out: {str(out)!r} exists and is not an empty directory")
    return path


@contextlib.contextmanager
def _lock(path):
    """One report at a time per folder: a second run with the same --out refuses at once."""
    lock = path.parent / f".{path.name}.lock"
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            try:
                pid = int(lock.read_text() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and signals.pid_alive(pid):
                raise UsageError(f"--out: another harness report (pid {pid}) is writing "
                                 f"{str(path)!r}; wait for it or choose another folder") from None
            lock.unlink(missing_ok=True)           # left by a run killed with -9
        except OSError as e:                       # a parent we may not write in (not root)
            raise UsageError(f"--out: cannot write in {str(path.parent)!r}: {e.strerror}") from None
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        yield
    finally:
        lock.unlink(missing_ok=True)


def build_report(out, config=DEFAULT, progress=None, command="harness report"):
    """Write the report folder ``out`` (must not exist or be empty). Returns its path."""
    out = check_out(out)
    progress = progress or (lambda msg: None)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out: cannot write in {str(parent)!r}: {e.strerror}") from None
    with _lock(out):
        remove_stale(parent, re.escape(f".{out.name}.") + r"(\d+)\..*\.partial")
        try:
            stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", suffix=".partial",
                                          dir=parent))
        except OSError as e:
            raise UsageError(f"--out: cannot write in {str(parent)!r}: {e.strerror}") from None
        try:
            _build(stage, config, progress, command)
            check_out(out)                         # still free: nothing appeared meanwhile
            with signals.deferred():            # a signal now waits for the rename
                if out.exists():
                    out.rmdir()
                os.replace(stage, out)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    return out


def _build(stage, config, progress, command):
    started = time.perf_counter()
    sections, read = [], {}
    for key, title, frames, figs in _sections(config, progress):
        signals.checkpoint()
        for name, frame in frames.items():
            frame.to_csv(stage / f"{name}.csv", index=False)
        # captions and figures are drawn from the frames as the CSVs hold them
        back = {name: pd.read_csv(stage / f"{name}.csv") for name in frames}
        for stem, fn in figs:
            _save(fn(back), stage, stem)
        sec = Section(key, title, frames, CAPTIONS[key](back), [s for s, _ in figs])
        if key == "depth":
            sec.table_html = _table1(back["depth"])
        sections.append(sec)
        read.update(back)
    table = claims.claims_table(read)
    table.to_csv(stage / "claims.csv", index=False)
    table = pd.read_csv(stage / "claims.csv")
    counts = table.verdict.value_counts()
    sections.insert(0, Section(
        "claims", "The lessons' claims, measured", {"claims": table},
        f"{len(table)} claims of the three lessons against this run's measurements: "
        + ", ".join(f"{int(counts.get(v, 0))} {v}" for v in claims.VERDICTS)
        + ". Each verdict is computed from the data by a rule in harness/claims.py; the columns "
          "of every CSV are described in docs/data.md.", None, _claims_html(table)))
    rates = read.get("rates")
    noise = {k: float(rates[k].iloc[0]) for k in ("noise_ratio", "noise_ratio_lo",
                                                   "noise_ratio_hi", "noise_floor")
             if rates is not None and k in rates}
    meta = {"date": _dt.datetime.now().isoformat(timespec="seconds"), **machine.describe(),
            **noise, "seconds": f"{time.perf_counter() - started:.1f}"}
    (stage / "machine.json").write_text(json.dumps(meta, indent=1, default=str))
    # the data dictionary beside the CSVs it describes (from a checkout; a wheel has no docs/)
    dictionary = Path(__file__).resolve().parents[1] / "docs" / "data.md"
    if dictionary.exists():
        shutil.copyfile(dictionary, stage / "data.md")
    # index.html last: its presence marks a complete report
    atomic_write_text(stage / "index.html", render_html(sections, meta, command))
    os.chmod(stage, 0o777 & ~umask())           # mkdtemp makes 0700
    for path in stage.iterdir():
        os.chmod(path, 0o666 & ~umask())
    signals.checkpoint()                     # a swallowed signal stops before the rename
