"""The figures: one seaborn call per figure, on a section's tidy frames.

A figure takes the section's frames as read back from the CSVs and returns a
matplotlib figure; ``encode`` turns it into the PNG and SVG the report writes.
Every figure draws every registered family present in its frame (hue or column
by model): none selects a family by name.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness import models  # noqa: E402
from harness.analysis import lessons  # noqa: E402
from harness.report import numbers  # noqa: E402


def _data(line):
    x, y = (np.asarray(v, dtype=float) for v in line.get_data())
    return x, y


COINCIDE = 0.02         # lines whose points agree to 2 % lie on one another at a figure's size


def coincident(ax):
    """Groups (lists of two or more) of the lines of ``ax`` that draw the same points: the
    same x, and y within ``COINCIDE`` of each other, so that a line drawn later would hide
    the others."""
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
    groups, seen = [], set()
    for i, a in enumerate(lines):
        if i in seen:
            continue
        xa, ya = _data(a)
        group = [a]
        for j in range(i + 1, len(lines)):
            xb, yb = _data(lines[j])
            if j not in seen and xa.shape == xb.shape and np.allclose(xa, xb, rtol=1e-9) \
                    and np.allclose(ya, yb, rtol=COINCIDE, atol=0, equal_nan=True):
                group.append(lines[j])
                seen.add(j)
        if len(group) > 1:
            groups.append(group)
    return groups


def _label(fig, line):
    """The legend entry of ``line``: the entry drawn in its colour (and marker, where two
    entries share a colour); its own label when no legend names it."""
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if legend is None:
            continue
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            same = (matplotlib.colors.same_color(handle.get_color(), line.get_color())
                    if hasattr(handle, "get_color") else False)
            if same and (not hasattr(handle, "get_marker")
                         or handle.get_marker() in (line.get_marker(), "None", None, "")):
                return text.get_text()
    return line.get_label()


_APART = ((6, (0, (4, 2))), (4, (0, (1, 2))), (8, (0, (6, 2, 1, 2))))   # marker size, dashes


def reveal(fig):
    """Draw apart every line that another hides: within each group of ``coincident`` lines,
    the second and later get hollow, larger markers and their own dashes, and the panel says
    which lines coincide. Returns the groups' labels."""
    said = []
    for ax in fig.axes:
        notes = []
        for group in coincident(ax):
            for k, line in enumerate(group[1:]):
                size, dashes = _APART[k % len(_APART)]
                line.set_markersize(line.get_markersize() + size)
                line.set_markerfacecolor("none")
                line.set_linestyle(dashes)
            labels = [_label(fig, ln) for ln in group]
            said.append(labels)
            notes.append(" = ".join(labels))
        if notes:
            ax.text(0.99, 0.01, f"lines that coincide (within {COINCIDE:.0%}):\n"
                    + "\n".join(notes), transform=ax.transAxes, ha="right", va="bottom",
                    fontsize=7, color="0.3")
    return said


def hidden(fig):
    """The groups of coincident lines a reader cannot tell apart: drawn in one style (marker
    size, fill and dashes), or not named in their panel's note. None after ``reveal``."""
    out = []
    for ax in fig.axes:
        note = "\n".join(t.get_text() for t in ax.texts if t.get_text().startswith("lines that"))
        for group in coincident(ax):
            labels = [_label(fig, ln) for ln in group]
            styles = {(ln.get_markersize(), str(ln.get_markerfacecolor()),
                       str(ln.get_linestyle())) for ln in group}
            if len(styles) < len(group) or " = ".join(labels) not in note:
                out.append(labels)
    return out


def encode(fig):
    """{suffix: bytes} of ``fig`` as PNG (110 dpi) and SVG, everything drawn outside its edges
    included, every line another would hide drawn apart (``reveal``); the figure is closed."""
    reveal(fig)
    out = {}
    for suffix, kw in (("png", {"dpi": 110}), ("svg", {})):
        buf = io.BytesIO()
        fig.savefig(buf, format=suffix, bbox_inches="tight", **kw)
        out[suffix] = buf.getvalue()
    plt.close(fig)
    return out


CLIP_DECADES = 60       # the decay figure draws |log10 norm| up to this; beyond, marked at the edge


def _title(model):
    """How a legend names a family: its registered title (a name not registered, as it is)."""
    return models.get(model).title if model in models.NAMES else model


# the gradient-path configuration keys a decay curve is labelled with (rho, a gate's bias...):
# every key but those the figure filters on, puts in panels, or holds fixed
_CURVE_KEYS = tuple(k for k in models.PATH_KEYS
                    if k not in ("model", "weight", "activation", "input_scale", "T", "d", "seed"))
_SYMBOL = {"rho": "ρ"}


def _series(d):
    """One label per curve: the family's title and its configuration (``RNN ρ=0.9``)."""
    keys = [k for k in _CURVE_KEYS if k in d]
    return [_title(row[0]) + "".join(f" {_SYMBOL.get(k, k)}={v:g}"
                                     for k, v in zip(keys, row[1:]) if pd.notna(v))
            for row in zip(d.model, *(d[k] for k in keys))]


def figure_decay(f):
    d = f["decay"]
    # each family at unit-scale inputs (or none), on orthogonal W where it has that choice:
    # there the linear RNN's theory line k·log10 σ_max is exact
    d = d[d.input_scale.isna() | (d.input_scale == numbers.UNIT_SCALE)]
    orthogonal = d.weight.eq("orthogonal")
    d = d[orthogonal | ~orthogonal.groupby(d.model).transform("any")]
    d = d.assign(series=_series(d))
    # k log10(sigma_max): exact for the linear RNN on orthogonal W_hh, Pascanu's bound for tanh
    theory = d[d.log10_bound.notna()].assign(log10_norm=lambda x: x.log10_bound,
                                            curve="theory / bound")
    long = pd.concat([d.assign(curve="measured"), theory], ignore_index=True)
    # a family with one activation has no such choice: it is drawn in every panel
    choices = long.groupby("model", sort=False).activation.nunique()
    fixed = long.model.isin(choices.index[choices <= 1])
    panels = long.activation[~fixed].unique()
    if len(panels):
        long = pd.concat([long[~fixed]] + [long[fixed].assign(activation=a) for a in panels],
                         ignore_index=True)
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


def figure_gated(f):
    """The gated recurrences' full path and additive route over distance, one panel per family,
    one colour per gate bias, beside the tanh RNN at each radius (unit-scale inputs)."""
    d = f["gated_decay"]
    d = d[d.input_scale == numbers.UNIT_SCALE]
    gated = d[d.gate_bias.notna()]
    rnn = d[d.gate_bias.isna()]
    long = pd.concat([
        gated.assign(route="full ∂h_T/∂h_(T−k)", config=gated.gate_bias.map("gate bias {:g}".format)),
        gated.assign(route="additive route alone", log10_norm=gated.log10_gated,
                     config=gated.gate_bias.map("gate bias {:g}".format)),
        rnn.assign(route="full ∂h_T/∂h_(T−k)", config=rnn.rho.map("ρ = {:g}".format))],
        ignore_index=True)
    clipped = int((long.log10_norm.abs() > CLIP_DECADES).sum())
    long["log10_norm"] = long.log10_norm.clip(-CLIP_DECADES, CLIP_DECADES)
    g = sns.relplot(data=long, x="distance", y="log10_norm", hue="config", style="route",
                    col="model", kind="line", height=3.4, aspect=1.1, facet_kws={"sharey": True})
    g.set_axis_labels("distance k", "log10 ‖∂h_T/∂h_(T−k)‖")
    if clipped:
        g.figure.suptitle(f"values beyond ±{CLIP_DECADES} decades drawn at the edge ({clipped} points)",
                          y=1.02, fontsize=8)
    return g.figure


def figure_layer_work(f):
    """A Transformer layer's traced multiplications against the recurrences' at equal width,
    and where the layer's T^2 terms pass its other products."""
    w = f["layer_work"]
    g = sns.relplot(data=w, x="T", y="macs", hue="model", style="model", markers=True,
                    dashes=False, kind="line", height=3.6, aspect=1.5)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("T", "multiplications (traced), every product")
    d, T_eq, _ = numbers.layer_crossover(w)
    _marks(g, [(T_eq, f"the layer's T² terms pass the rest: T = {T_eq / d:.1f}·d",
                dict(color="k", ls="--", lw=1))])
    return g.figure


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
    # the full report adds its long lengths (to T = 65,536) at their own d: a line per d
    t = pd.concat([f["depth"], f["depth_long"]]) if "depth_long" in f else f["depth"]
    long = t.melt(id_vars=["model", "T", "d"], value_vars=["span", "max_path", "scalar_span"],
                  var_name="measure", value_name="operations")
    g = sns.relplot(data=long, x="T", y="operations", hue="model", col="measure", kind="line",
                    style="d" if long.d.nunique() > 1 else None, marker="o", height=3.2,
                    aspect=1.1, facet_kws={"sharey": False})
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
    # a marker per model: the LRU's loop and its scan do nearly the same work, so their lines
    # overlap, and only their markers tell them apart
    g = sns.relplot(data=w, x="T", y="macs", hue="model", style="model", markers=True,
                    dashes=False, kind="line", height=3.6, aspect=1.5)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("T", "multiplications (traced)")
    cross = numbers.timed_crossover(x)
    ratio = cross.T / cross.row.counted_T
    d = int(w.d.iloc[0])
    marks = [(d, "counted crossover T = d", dict(color="k", ls="--", lw=1))]
    if np.isfinite(ratio):
        marks.append((ratio * d, f"measured wall-time crossover ({ratio:.1f} d)",
                      dict(color="tab:red", ls=":", lw=1.5)))
    _marks(g, marks)
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


def _marks(g, marks):
    """Vertical lines on every panel of ``g`` at ``marks``, (x, label, line style) each, and a
    legend of them alone: the models are in the figure's own legend already."""
    labels = {label for _, label, _ in marks}
    for ax in g.axes.flat:
        for x, label, style in marks:
            ax.axvline(x, label=label, **style)
        ax.legend(handles=[ln for ln in ax.get_lines() if ln.get_label() in labels],
                  loc="upper left", fontsize=8)


def _loglog(data, x, y, hue, labels, height=3.6, aspect=1.5):
    """A line per ``hue`` with markers, both axes logarithmic; ``labels``: (x's, y's)."""
    g = sns.relplot(data=data, x=x, y=y, hue=hue, kind="line", marker="o", height=height,
                    aspect=aspect)
    g.set(xscale="log", yscale="log")
    g.set_axis_labels(*labels)
    return g


def figure_routes(f):
    long = f["additive_routes"].melt(id_vars="va_scale", value_vars=["value_norm", "score_norm"],
                                     var_name="route", value_name="norm")
    return _loglog(long, "va_scale", "norm", "route", ("scale of va", "‖gradient reaching H‖"),
                   height=3.2, aspect=1.4).figure


def figure_wall(f):
    w = f["wall_times"]
    g = _loglog(w, "T", "seconds", "model",
                ("T", "forward wall time (s), median and 95 % interval"))
    if "seconds_lo" in w:
        for (model, part), color in zip(w.groupby("model", sort=False), sns.color_palette()):
            g.ax.vlines(part["T"], part.seconds_lo, part.seconds_hi, color=color, lw=2)
    return g.figure


def figure_memory(f):
    m = f["peak_memory"].assign(peak_mib=lambda x: x.peak_bytes / 2**20)
    return _loglog(m, "T", "peak_mib", "model", ("T", "peak memory of one forward (MiB)")).figure


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


def _linear_long(f):
    """The linear attention section's three measures over T as one long frame: span (traced),
    peak memory of one forward (MiB) and forward time (s), a row per (measure, algorithm, T)."""
    names = dict(zip(numbers.linear_forms(), numbers.LINEAR_ALGORITHMS))
    parts = []
    for frame, column, measure in ((f["depth"], "span", "span (operations, traced)"),
                                   (f["peak_memory"], "peak_bytes", "peak memory (MiB)"),
                                   (f["wall_times"], "seconds", "forward time (s)")):
        d = frame[frame.model.isin(names)].dropna(subset=[column])
        scale = 2.0 ** -20 if column == "peak_bytes" else 1.0
        parts.append(pd.DataFrame({"measure": measure, "algorithm": d.model.map(names),
                                   "T": d["T"], "value": d[column] * scale}))
    return pd.concat(parts, ignore_index=True)


def figure_linear(f):
    """Linear attention's three algorithms (one model): span, peak memory and forward time
    against T, one panel each."""
    g = sns.relplot(data=_linear_long(f), x="T", y="value", hue="algorithm", style="algorithm",
                    col="measure", kind="line", markers=True, dashes=False, height=3.2, aspect=1.1,
                    facet_kws={"sharey": False, "sharex": False})
    g.set(xscale="log", yscale="log")
    g.set_titles("{col_name}")
    g.set_axis_labels("T", "")
    for ax in g.axes.flat:            # the panels' own T ranges: powers of ten, no minor labels
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    return g.figure


def figure_roofline(f):
    """The classic roofline, one panel per dtype: intensity (flop/byte) against GFLOP/s in
    log-log, the compute ceilings as flat lines, each level's bandwidth as a diagonal (its
    GB/s times the intensity, up to the highest peak), every kernel a point (hue: family,
    marker: direction) with its achieved rate's 95 % interval as a bar."""
    k, c = f["roofline"].copy(), f["ceilings"]
    k["GFLOP/s"] = k["achieved"] / 1e9
    g = sns.relplot(data=k, x="intensity", y="GFLOP/s", hue="family", style="direction",
                    col="dtype", kind="scatter", s=45, height=4.0, aspect=1.25,
                    facet_kws={"sharey": True})
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("arithmetic intensity (flop / byte)", "GFLOP/s")
    lo_x = max(min(k["intensity"].min() / 4, 0.05), 1e-3)
    hi_x = k["intensity"].max() * 4
    xs = np.geomspace(lo_x, hi_x, 200)
    compute = c[c.level == "compute"]
    bw = c[c.level != "compute"].groupby("level")["value"].max()
    for dtype, ax in g.axes_dict.items():
        rows = k[k.dtype == dtype]
        ax.errorbar(rows["intensity"], rows["GFLOP/s"],
                    yerr=[(rows["achieved"] - rows["achieved_lo"]).clip(lower=0) / 1e9,
                          (rows["achieved_hi"] - rows["achieved"]).clip(lower=0) / 1e9],
                    fmt="none", ecolor="0.45", elinewidth=0.8, capsize=2, zorder=1)
        peaks = compute[compute.dtype == dtype]
        top = float(peaks["value"].max()) if len(peaks) else np.nan
        # the faster GEMM and the FMA loop: the two GEMMs draw the same line, to a few per cent
        gemm = peaks[peaks.ceiling.str.startswith("gemm")]
        others = [r for _, r in peaks[~peaks.ceiling.str.startswith("gemm")].iterrows()]
        shown = ([gemm.loc[gemm.value.idxmax()]] if len(gemm) else []) + others
        lines = [ax.axhline(p.value, color="k", lw=0.9, ls=ls,
                            label=f"{p.ceiling}: {p.value:.1f} GFLOP/s")
                 for p, ls in zip(shown, ("--", "-", ":"))]
        lines += [ax.plot(xs, np.minimum(v * xs, top), color=color, lw=1.0,
                          label=f"{level}: {v:.1f} GB/s")[0]
                  for (level, v), color in zip(bw.items(), sns.color_palette("crest", len(bw)))]
        ax.legend(handles=lines, fontsize=6.5, loc="upper left", bbox_to_anchor=(0, -0.16),
                  ncol=2, title="ceilings", title_fontsize=7, frameon=False)
    return g.figure
