"""The documentation's tables, generated from the committed CSVs when the site is built.

Every number the site shows comes from here: ``TABLES`` maps a name to a function of the
repository's root that returns the MyST text of one table (with the sentence on where and
how it was measured above it, from ``docs/measurements.csv``); the build writes each to
``docs/_generated/<name>.md``, which the pages include. ``tests/test_docs.py`` checks every
table against its CSV, recomputing its numbers another way.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FAMILIES = ("rnn", "attention", "lru", "lstm", "gru", "transformer", "linear_attention")


def _pd():
    import pandas as pd
    return pd


def _tools(root):
    """tools/ on the path: the gate's own summaries (bench_gate_rates, bench_count_rates)."""
    path = str(root / "tools")
    if path not in sys.path:
        sys.path.insert(0, path)


# ----------------------------------------------------------------------------- provenance

def provenance(root, csv_path):
    """The sentence above a table: the machine, the BLAS kernel, the load, the date and the
    commit it was measured at, from ``docs/measurements.csv``'s row for ``csv_path``."""
    with open(root / "docs" / "measurements.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["csv"] == csv_path]
    if len(rows) != 1:
        raise ValueError(f"docs/measurements.csv: expected one row for {csv_path!r}, "
                         f"got {len(rows)}")
    r = rows[0]
    note = f" {r['note']}" if r["note"] else ""
    return (f"*Measured on {r['date']} at commit `{r['commit']}` on {r['machine']}; BLAS kernel: "
            f"{r['blas']}; load average {r['load']}; command: `{r['command']}`. Data: "
            f"`{csv_path}`.*{note}")


# ----------------------------------------------------------------------------- the claims

def claims(root):
    """The claims table, grouped by lesson with each group's verdict counts above its rows,
    from the claims CSV of the last committed quick report."""
    from harness.analysis import claims as c
    t = _pd().read_csv(root / "docs" / "figures" / "claims.csv")
    return provenance(root, "docs/figures/claims.csv") + "\n\n" + c.markdown(t)


# ----------------------------------------------------------------------------- tracing cost

def trace_cost(root):
    """Tracing one form in a fresh process, per T: the trace's own seconds / the process's,
    and its peak resident memory."""
    d = _pd().read_csv(root / "docs" / "trace_cost.csv")
    one = d[d.form != "all"]
    Ts = sorted(int(T) for T in one["T"].unique())
    lines = ["| form | " + " | ".join(f"T = {T:,}" for T in Ts) + " |",
             "|:--|" + ":--|" * len(Ts)]
    for form, g in one.groupby("form", sort=False):
        g = g.set_index("T")
        lines.append(f"| {form} | " + " | ".join(
            f"{g.trace_s[T]:.1f} s / {g.process_s[T]:.0f} s, {g.peak_mb[T]:.0f} MB" for T in Ts)
            + " |")
    whole = d[d.form == "all"].iloc[0]
    minutes, seconds = divmod(int(round(whole.process_s)), 60)
    return (provenance(root, "docs/trace_cost.csv") + "\n\n" + "\n".join(lines) + "\n\n"
            f"The whole command (every form at the {len(Ts)} lengths, then the schedule) took "
            f"{minutes} min {seconds} s with a peak of {whole.peak_mb:.0f} MB.")


# ----------------------------------------------------------------------------- SDPA's neighbour

NEIGHBOURS = {"off": "none of ours", "compute": "compute-bound (192² matmuls)",
              "l3": "L3 (16 MiB copies)", "memory": "memory (256 MiB copies)"}
TILES = "256x512"


def _cell(value, lo, hi):
    return f"{value:.2f}× [{lo:.2f}, {hi:.2f}]"


def neighbour(root):
    """The tiled attention kernel against SDPA with and without a neighbour on the other CPU
    (CPU time): speed-ups (SDPA / ours) and slowdowns (with / without), with intervals."""
    d = _pd().read_csv(root / "docs" / "neighbour_attention.csv", comment="#")
    c = d[d.clock == "cpu"]
    lines = ["| neighbour on the other CPU | forward: SDPA / tiled | forward: ours slowed | "
             "SDPA slowed | forward+backward: SDPA / tiled | ours slowed | torch slowed |",
             "|---|---|---|---|---|---|---|"]
    for n, words in NEIGHBOURS.items():
        cells = [words]
        for ours, theirs in (("harness forward", "torch sdpa forward"),
                             ("harness forward+backward", "torch forward+backward")):
            h = c[(c.tiles == TILES) & (c.neighbour == n) & (c.part == ours)].iloc[0]
            t = c[(c.neighbour == n) & (c.part == theirs)].iloc[0]
            cells.append(_cell(h.speedup, h.speedup_lo, h.speedup_hi))
            for x in (h, t):
                cells.append("—" if n == "off" else _cell(x.slowdown, x.slowdown_lo,
                                                          x.slowdown_hi))
        lines.append("| " + " | ".join(cells) + " |")
    off = c[c.neighbour == "off"]

    def ms(part, tiles=TILES):
        rows = off[(off.part == part) & ((off.tiles == tiles) if tiles else off.tiles.isna())]
        return 1e3 * rows.median_s.iloc[0]

    ours = c[(c.tiles == TILES) & c.part.isin(["harness forward", "harness forward+backward"])]
    verdict = ("slower than SDPA with or without a neighbour" if (ours.speedup_hi < 1).all()
               else "not slower than SDPA in every condition")
    text = (f"With tiles of {TILES.replace('x', ' × ')}, the tiled kernel is {verdict}. Of the "
            f"forward's {ms('harness forward'):.1f} ms alone, the tile products take "
            f"{ms('harness tile gemms'):.1f} ms (the same products through torch's BLAS: "
            f"{ms('torch tile gemms', None):.1f} ms) and the exps with their row maxima and sums "
            f"{ms('harness exps'):.1f} ms (torch's: {ms('torch exps', None):.1f} ms).")
    return (provenance(root, "docs/neighbour_attention.csv") + "\n\n" + "\n".join(lines)
            + "\n\n" + text)


# ----------------------------------------------------------------------------- linear attention

def linear_speed(root, gemm=2048, d=64):
    """Linear attention's fastest algorithm against its fastest PyTorch peer and NumPy's
    chunked form, from the interleaved rounds: medians, speed-ups (peer / ours) with their
    95 % intervals (the rounds resampled in pairs), and the chunked forward's share of the
    GEMM peak timed in the same rounds."""
    import numpy as np

    from harness.infra import stats, timing
    from harness.models import linear_attention as fam
    rounds = _pd().read_csv(root / "docs" / "linear_attention_speed.csv")
    lines = ["| T | dtype | direction | fastest algorithm | fastest PyTorch peer: speed-up | "
             "NumPy: speed-up | chunked forward | load |", "|---|---|---|---|---|---|---|---|"]
    for (T, dtype, direction), g in rounds.groupby(["T", "dtype", "direction"], sort=False):
        wide = g.pivot(index="round", columns="impl", values="seconds")
        med = wide.median()
        ours = med[med.index.str.startswith("harness-")].idxmin()
        cells = [f"{T:,}", dtype, direction, f"{ours.removeprefix('harness-')} "
                 f"{med[ours] * 1e3:,.1f} ms"]
        for peer in (med[med.index.str.startswith("torch")].idxmin(), "numpy"):
            ratio, lo, hi = timing.paired_ratio(wide[peer].to_numpy(), wide[ours].to_numpy())
            cells.append(f"{peer} {med[peer] * 1e3:,.1f} ms: {ratio:.2f}× [{lo:.2f}, {hi:.2f}]")
        if direction == "forward":
            share = 2 * fam.kernel_macs("chunked", T, d) / wide["harness-chunked"] / (
                2 * gemm ** 3 / wide[f"gemm{gemm}"])
            lo, hi = stats.bootstrap_interval(lambda r: np.median(r, axis=1), share.to_numpy())
            cells.append(f"{np.median(share):.2f} of the GEMM peak [{lo:.2f}, {hi:.2f}] "
                         f"({np.median(2 * gemm ** 3 / wide[f'gemm{gemm}']) / 1e9:.0f} GFLOP/s)")
        else:
            cells.append("—")
        cells.append(f"{g.load.iloc[0]:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    n = rounds["round"].nunique()
    return (provenance(root, "docs/linear_attention_speed.csv") + "\n\n"
            f"Batch 1, d_model = d_k = d_v = {d}, one thread; every implementation of a row "
            f"timed in the same {n} interleaved rounds. The last column is the 1-minute load "
            f"average at the row's start (2 cores).\n\n" + "\n".join(lines))


# ----------------------------------------------------------------------------- the gate

def gate_counts(root):
    """The counting stage's measured error rates, and the stage against its targets."""
    _tools(root)
    import bench_count_rates
    with open(root / "docs" / "gate_counts.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return (provenance(root, "docs/gate_counts.csv") + "\n\n" + bench_count_rates.summary(rows)
            + "\n\nThe counting stage against its targets (at most 1 % of points falsely "
            "flagged per A/A run, 10 % more work caught in 95 % of runs, ten runs of each "
            "condition):\n\n" + bench_count_rates.against_targets(rows))


def gate_cpu_cost(root):
    """What the counting stage's CPU costs in speed: each point's AVX2 build over the native."""
    _tools(root)
    import bench_count_rates
    with open(root / "docs" / "gate_cpu_cost.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return (provenance(root, "docs/gate_cpu_cost.csv") + "\n\n"
            + bench_count_rates.cost_table(rows))


def gate_rates(root):
    """The timing stage's measured error rates, and the stage against its targets."""
    _tools(root)
    import bench_gate_rates
    with open(root / "docs" / "gate_rates.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return (provenance(root, "docs/gate_rates.csv") + "\n\n"
            + bench_gate_rates.summary(rows) + "\n\nThe gate against its targets (at most 1 % "
            "of points falsely flagged per A/A run, a 10 % slowdown caught in 95 % of runs, "
            "ten runs of each condition):\n\n" + bench_gate_rates.against_targets(rows))


# ----------------------------------------------------------------------------- mutation testing

def mutation(root):
    """The last mutation run's counts (mutmut's own, docs/mutation-score.json) and its
    survivors by reason (docs/mutation-survivors.tsv)."""
    s = json.loads((root / "docs" / "mutation-score.json").read_text())
    with open(root / "docs" / "mutation-survivors.tsv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    kinds = [r["why it survives"].split(":", 1)[0] for r in rows]
    caught = s["killed"] + s["timeout"] + s["segfault"]
    n = s["total"] - s["skipped"]
    equivalent = kinds.count("equivalent")
    return (f"*The last run: {s['date']}, the code of commit `{s['commit']}`, "
            f"{s['minutes']} minutes on the 2-core development machine. Data: "
            "`docs/mutation-score.json`, `docs/mutation-survivors.tsv`.*\n\n"
            "| mutants | caught | of which killed | timeouts | crashed | survived | suspicious "
            "| unreached by a test | score |\n|---|---|---|---|---|---|---|---|---|\n"
            f"| {n:,} | {caught:,} | {s['killed']:,} | {s['timeout']} | {s['segfault']} | "
            f"{s['survived']} | {s['suspicious']} | {s['no_tests']} | "
            f"{100 * caught / n:.1f} % |\n\n"
            f"Of the {s['survived']} survivors, {equivalent} are equivalent and "
            f"{s['survived'] - equivalent} not worth a test; each is listed with its reason "
            "in `docs/mutation-survivors.tsv`." + _mutation_partial(s) + _mutation_recorded(s))


def _mutation_recorded(s):
    """The sentence of a run whose unchanged functions are counted as an earlier run recorded
    them (mutation-score.json's ``recorded``): what ran here and what is the record's."""
    if "recorded" not in s:
        return ""
    r = s["recorded"]
    return (f"\n\nThe {s['total'] - r['mutants']:,} mutants of the functions changed since "
            f"`{r['since']}` ran here (`tools/mutmut_changed.py {r['since']}`); the "
            f"{r['mutants']:,} of the functions unchanged since are counted as that run recorded "
            f"them, and {r['reran']:,} of them ran again here, {r['same']:,} with the verdict "
            f"recorded.")


def _mutation_partial(s):
    """The sentences of a partial run (mutation-score.json's ``changed_functions``, ``sample``
    and ``estimate_all``): what ran, and the estimate for every mutant; nothing for a whole run."""
    if "estimate_all" not in s:
        return ""
    c, m, e = s["changed_functions"], s["sample"], s["estimate_all"]
    return (f"\n\nThe run was partial. Of the {c['mutants']:,} mutants of the functions changed "
            f"since `{c['since']}`, {c['ran']:,} ran, in a seeded random order: {c['caught']:,} "
            f"caught ({100 * c['caught'] / c['ran']:.1f} %, 95 % interval "
            f"{c['score_interval_95'][0]} to {c['score_interval_95'][1]} %). A seeded sample of "
            f"{m['size']:,} unchanged mutants ran whole: {m['caught']:,} caught, "
            f"{m['recorded_caught']:,} as recorded before. The counts above leave out the "
            f"{c['mutants'] - c['ran']:,} changed mutants that did not run; for all "
            f"{e['mutants']:,} the estimate is {e['score']} % ({e['interval_95'][0]} to "
            f"{e['interval_95'][1]} %).")


# ----------------------------------------------------------------------------- semantic mutations

def _mutated_module(file):
    """The module a semantic mutation's file belongs to: the claims' and the kernels' folders
    are one module each, any other file its own."""
    for folder in ("harness/analysis/claims/", "harness/kernels/"):
        if file.startswith(folder):
            return folder
    return file


def semantic_mutations(root):
    """The semantic mutation campaign's catch rate by module (docs/semantic-mutations.csv)."""
    d = _pd().read_csv(root / "docs" / "semantic-mutations.csv", keep_default_na=False)
    d["module"] = d.file.map(_mutated_module)
    lines = ["| module | bugs | caught | survived | catch rate |", "|---|---|---|---|---|"]
    for module, g in d.groupby("module", sort=False):
        n, c = len(g), int((g.caught == "yes").sum())
        lines.append(f"| `{module}` | {n} | {c} | {n - c} | {100 * c / n:.0f} % |")
    n, c = len(d), int((d.caught == "yes").sum())
    lines.append(f"| all | {n} | {c} | {n - c} | {100 * c / n:.1f} % |")
    survivors = d[d.caught != "yes"]
    tail = ("" if not len(survivors) else
            " Survived: " + "; ".join(f"`{r.id}` ({r.note})" for r in survivors.itertuples()) + ".")
    return (f"*Data: `docs/semantic-mutations.csv`, written by `make mutate-semantic` on the 2-core "
            f"development machine: {n} hand-written bugs, {float(d.seconds.sum()) / 60:.0f} "
            f"minutes of test runs in all.*\n\n" + "\n".join(lines) + "\n\n"
            + f"{c} of the {n} bugs were caught by a test of their module.{tail}")


# ----------------------------------------------------------------------------- timings

def timings(root):
    """How long the make targets and commands take, each with its conditions."""
    d = _pd().read_csv(root / "docs" / "timings.csv")
    lines = ["| what | from | time | load average | date | commit | conditions |",
             "|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        m, s = divmod(int(round(r.seconds)), 60)
        cond = r.conditions if isinstance(r.conditions, str) else ""
        lines.append(f"| {r.command} | {r.start} | {m} min {s:02d} s | {r.load} | {r.date} | "
                     f"`{r.commit}` | {cond} |")
    return ("*On the 2-core development machine (AMD EPYC, 2 vCPUs, 24 GiB). Data: "
            "`docs/timings.csv`.*\n\n" + "\n".join(lines))


# ----------------------------------------------------------------------------- speed per family

def speed(root, family):
    """One family's rows of the committed ``harness compare``: the harness's median, the
    fastest peer's speed-up with its interval, per case and direction."""
    d = _pd().read_csv(root / "docs" / "compare_summary.csv")
    rows = d[d.model == family]
    if not len(rows):
        raise ValueError(f"docs/compare_summary.csv has no row of family {family!r}")
    lines = ["| batch | T | d | dtype | kernel | direction | harness | fastest peer | "
             "speed-up (peer / harness) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        interval = ("" if r.speedup_lo != r.speedup_lo
                    else f" [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]")
        lines.append(f"| {r.batch} | {r.T:,} | {r.d} | {r.dtype} | {r.kernel} | {r.direction} | "
                     f"{r.harness_s * 1e3:,.3f} ms | {r.fastest_peer} | "
                     f"{r.speedup_vs_fastest:.2f}×{interval} |")
    return (provenance(root, "docs/compare_summary.csv") + libraries_caption(rows) + "\n\n"
            + "\n".join(lines))


def _verdict(lo, hi):
    """'ahead' (the speed-up's interval above 1), 'behind' (below 1) or 'level' (it holds 1)."""
    return "ahead" if lo > 1 else "behind" if hi < 1 else "level"


def compare_overview(root):
    """Every family's rows of the committed ``harness compare`` counted by their interval
    against the fastest peer (ahead, level, behind), with the median speed-up; then every row
    behind, with its fastest peer and its harness time over the GEMM floor where it has one."""
    d = _pd().read_csv(root / "docs" / "compare_summary.csv")
    d = d.assign(verdict=[_verdict(lo, hi) for lo, hi in zip(d.speedup_lo, d.speedup_hi)])
    lines = ["| family | rows | ahead | level | behind | median speed-up | lowest |",
             "|---|---|---|---|---|---|---|"]
    for fam, g in list(d.groupby("model", sort=False)) + [("all", d)]:
        counts = g.verdict.value_counts()
        lines.append(f"| {fam} | {len(g)} | {counts.get('ahead', 0)} | {counts.get('level', 0)} | "
                     f"{counts.get('behind', 0)} | {g.speedup_vs_fastest.median():.2f}× | "
                     f"{g.speedup_vs_fastest.min():.2f}× |")
    behind = d[d.verdict == "behind"]
    text = (f"A row is ahead when the 95 % interval of its speed-up (the fastest peer's time over "
            f"the harness's) lies above 1, behind when it lies below, level when it holds 1. "
            f"{len(behind)} of the {len(d)} rows are behind:")
    rows = ["| family | kernel | batch | T | d | dtype | direction | fastest peer | "
            "speed-up [95 %] | harness / its GEMMs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in behind.itertuples():
        gemm = getattr(r, "harness_over_gemm", float("nan"))
        rows.append(f"| {r.model} | {r.kernel} | {r.batch} | {r.T:,} | {r.d} | {r.dtype} | "
                    f"{r.direction} | {r.fastest_peer} | {r.speedup_vs_fastest:.2f}× "
                    f"[{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] | "
                    f"{'—' if gemm != gemm else f'{gemm:.2f}'} |")
    return (provenance(root, "docs/compare_summary.csv") + libraries_caption(d) + "\n\n"
            + "\n".join(lines) + "\n\n" + text + ("\n\n" + "\n".join(rows) if len(behind) else ""))


def libraries_caption(rows):
    """The libraries the rows ran on (compare_summary.csv's ``libraries`` column: each BLAS
    with its version, kernel architecture and threads, torch's and XLA's), one sentence;
    nothing for a CSV from before the column."""
    if "libraries" not in rows:
        return ""
    libs = sorted(rows.libraries.dropna().unique())
    return f"\n\n*Libraries, as the run recorded them: {' / '.join(libs)}.*" if libs else ""


# ----------------------------------------------------------------------------- the roofline

def _interval(v, lo, hi, fmt):
    return f"{v:{fmt}}" + ("" if lo != lo else f" [{lo:{fmt}}, {hi:{fmt}}]")


def _size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"


def roofline_ceilings(root):
    """The machine's ceilings (docs/ceilings.csv): each with its working set, its median and
    95 % interval, and the BLAS that ran."""
    d = _pd().read_csv(root / "docs" / "ceilings.csv", keep_default_na=False)
    lines = ["| ceiling | dtype | level | working set | value [95 % interval] | BLAS |",
             "|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append(f"| {r.ceiling} | {r.dtype} | {r.level} | {_size(int(r.working_set_bytes))} | "
                     f"{_interval(r.value, r.lo, r.hi, '.1f')} {r.unit} | {r.blas or '—'} |")
    return provenance(root, "docs/ceilings.csv") + "\n\n" + "\n".join(lines)


def roofline_kernels(root):
    """Every kernel on the roofline (docs/roofline.csv): intensity, the bound and what binds,
    the achieved GFLOP/s with its interval, and the fraction of the bound."""
    d = _pd().read_csv(root / "docs" / "roofline.csv")
    lines = ["| family | kernel | direction | batch | T | d | dtype | intensity (flop/B) | "
             "bound (GFLOP/s) | bound by | achieved (GFLOP/s) [95 %] | fraction |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append(f"| {r.family} | {r.kernel} | {r.direction} | {r.batch} | {r.T:,} | {r.d} | "
                     f"{r.dtype} | {r.intensity:.2f} | {r.bound / 1e9:.1f} | {r.bound_kind} | "
                     f"{_interval(r.achieved / 1e9, r.achieved_lo / 1e9, r.achieved_hi / 1e9, '.2f')} | "
                     f"{r.fraction:.0%} |")
    half, above = int((d.fraction >= 0.5).sum()), int((d.fraction > 1).sum())
    text = (f"{half} of the {len(d)} kernels reach at least half of their bound; the median "
            f"fraction is {d.fraction.median():.0%}"
            + (f", and {above} run above their bound (a bytes model that counts bytes the kernel "
               f"does not move, or ceilings taken at a busier moment than the kernel)" if above
               else "") + ".")
    return provenance(root, "docs/roofline.csv") + "\n\n" + "\n".join(lines) + "\n\n" + text


def roofline_crossover(root):
    """The RNN/attention crossover per d (docs/roofline_crossover.csv): counted, both kernels
    at their bounds, predicted from their achieved rates, and measured with its interval;
    the RNN's step beside its bound and one read of W_hh."""
    d = _pd().read_csv(root / "docs" / "roofline_crossover.csv")
    lines = ["| d | counted T | both at their bounds | predicted from the achieved rates | "
             "measured [95 %] | RNN step | step at its bound | one read of W_hh (level) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append(f"| {r.d} | {r.counted_T:,.0f} | {r.bound_T:,.0f} | {r.predicted_T:,.0f} | "
                     f"{_interval(r.measured_T, r.measured_T_lo, r.measured_T_hi, ',.0f')} | "
                     f"{r.rnn_step_s * 1e6:.2f} µs | {r.rnn_step_bound_s * 1e6:.2f} µs | "
                     f"{r.rnn_step_read_s * 1e6:.2f} µs ({r.w_hh_level}) |")
    said = []
    for r in d.itertuples():
        step = f"the RNN's step takes {r.rnn_step_s / r.rnn_step_bound_s:.1f} × its bound"
        if r.measured_T_lo != r.measured_T_lo:          # no interval: too few crossings
            said.append(f"at d = {r.d} the prediction is {r.predicted_T:,.0f} against "
                        f"{r.measured_T:,.0f} measured, with no interval, and {step}")
            continue
        side = ("inside" if r.measured_T_lo <= r.predicted_T <= r.measured_T_hi
                else "below" if r.predicted_T < r.measured_T_lo else "above")
        said.append(f"at d = {r.d} the prediction, {r.predicted_T:,.0f}, falls {side} the "
                    f"measured interval ({r.measured_T:,.0f}, {r.measured_T_lo:,.0f}–"
                    f"{r.measured_T_hi:,.0f}), and {step}")
    text = "In this run " + "; ".join(said) + "."
    return (provenance(root, "docs/roofline_crossover.csv") + "\n\n" + "\n".join(lines) + "\n\n"
            + text)


# ----------------------------------------------------------------------------- --torch's cost

TORCH_MODULES = {"encoder_layer": "`nn.TransformerEncoderLayer({d}, 8, dim_feedforward={ff}, "
                                  "batch_first=True)`",
                 "lstm2": "two-layer `nn.LSTM({d}, {d}, batch_first=True)`"}
TORCH_BOUND_BYTES = 2_000_000_000


def _spread(values, unit, scale=1.0):
    v = sorted(x / scale for x in values)
    return f"{_pd().Series(v).median():,.1f} {unit} ({v[0]:,.1f}–{v[-1]:,.1f})"


def torch_trace_cost(root):
    """``harness depth --torch`` at T = 4096, one fresh process per run
    (docs/torch_trace_cost.csv, tools/torch_trace_cost.py): per module the median peak
    resident memory, wall and CPU time, each with its range over the interleaved runs."""
    d = _pd().read_csv(root / "docs" / "torch_trace_cost.csv")
    lines = ["| module | runs | peak RSS, median (min–max) | wall time, median (min–max) | "
             "CPU time (user + system), median (min–max) |", "|---|---|---|---|---|"]
    for m, g in d.groupby("module", sort=False):
        label = TORCH_MODULES[m].format(d=int(g.d.iloc[0]), ff=4 * int(g.d.iloc[0]))
        lines.append(f"| {label} (`examples/torch/{m}.py`) | {len(g)} | "
                     f"{_spread(g.peak_rss_bytes, 'MB', 1e6)} | {_spread(g.wall_s, 's')} | "
                     f"{_spread(g.cpu_s, 's')} |")
    top = int(d.peak_rss_bytes.max())
    sizes = set(zip(d["T"], d["d"]))
    if len(sizes) != 1:
        raise ValueError(f"docs/torch_trace_cost.csv: expected one (T, d), got {sorted(sizes)}")
    (T, width), = sizes
    text = (f"T = {T:,}, d = {width}; MB are 10^6 bytes. The load average at the runs' starts "
            f"was {d.load.min():.1f} to {d.load.max():.1f}. The largest peak, {top / 1e6:,.0f} MB, "
            f"is {top / TORCH_BOUND_BYTES:.0%} of the 2 GB bound (2,000,000,000 bytes).")
    return (provenance(root, "docs/torch_trace_cost.csv") + "\n\n" + "\n".join(lines) + "\n\n"
            + text)


TABLES = {"claims": claims, "trace_cost": trace_cost, "neighbour": neighbour,
          "linear_speed": linear_speed, "gate_rates": gate_rates, "gate_counts": gate_counts,
          "gate_cpu_cost": gate_cpu_cost,
          "mutation": mutation, "semantic_mutations": semantic_mutations, "timings": timings,
          "roofline_ceilings": roofline_ceilings, "roofline_kernels": roofline_kernels,
          "roofline_crossover": roofline_crossover, "torch_trace_cost": torch_trace_cost,
          "compare_overview": compare_overview,
          **{f"speed_{f}": (lambda root, f=f: speed(root, f)) for f in FAMILIES}}


def render(name, root=ROOT):
    """The MyST text of table ``name`` (a key of ``TABLES``)."""
    if name not in TABLES:
        raise ValueError(f"name: expected one of {sorted(TABLES)}, got {name!r}")
    return TABLES[name](root).rstrip("\n") + "\n"


def write_all(out, root=ROOT):
    """Write every table to ``out/<name>.md``; a file whose text is unchanged is left alone
    (Sphinx rebuilds only what changed)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        path = out / f"{name}.md"
        text = render(name, root)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


_LINK = re.compile(r"""(?:src|href)=["'](https?:)?//""")


def external_loads(html):
    """The resources a page would fetch from another host (scripts, styles, images, fonts):
    a site that works offline has none. Plain links a reader may follow are not loads."""
    tags = re.findall(r"<(?:script|link|img|source|iframe)\b[^>]*>", html)
    return [t for t in tags if _LINK.search(t) and not (t.startswith("<link") and
                                                        'rel="canonical"' in t)]


_LITERAL = re.compile(r"(``.+?``)")


def plain_docstring_line(line):
    """A docstring line as reStructuredText reads what the docstrings mean: |x| is an absolute
    value, not a substitution, and ``Form``s is a literal then a plural. Literals are kept."""
    parts = _LITERAL.split(line)
    for i in range(0, len(parts), 2):                       # the text between literals
        text = parts[i].replace("|", "\\|")
        if i and text[:1].isalnum():                          # ``Form``s: end the literal
            text = "\\ " + text
        parts[i] = text
    return "".join(parts)


def _docstring(app, what, name, obj, options, lines):
    lines[:] = [plain_docstring_line(ln) for ln in lines]


def _builder_inited(app):
    write_all(Path(app.srcdir) / "_generated")


def setup(app):
    app.connect("builder-inited", _builder_inited)
    app.connect("autodoc-process-docstring", _docstring, priority=400)   # before numpydoc
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def check_offline(site):
    """Every page of the built ``site`` folder: the resources it would fetch from another
    host. Returns {page: [tags]} for the pages that have any."""
    bad = {}
    for page in sorted(Path(site).rglob("*.html")):
        found = external_loads(page.read_text(encoding="utf-8"))
        if found:
            bad[str(page.relative_to(site))] = found
    return bad


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description="the documentation's generated tables")
    parser.add_argument("--check-offline", metavar="SITE",
                        help="fail if a built page loads a resource from another host")
    args = parser.parse_args(argv)
    if args.check_offline:
        site = Path(args.check_offline)
        if not any(site.rglob("*.html")):
            print(f"--check-offline: no HTML page under {str(site)!r}", file=sys.stderr)
            return 2
        bad = check_offline(site)
        for page, tags in bad.items():
            print(f"{page}: loads {tags[0]}" + (f" and {len(tags) - 1} more" if len(tags) > 1
                                                 else ""), file=sys.stderr)
        return 1 if bad else 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
