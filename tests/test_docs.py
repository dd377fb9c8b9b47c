"""The documentation's generated tables (docs/_ext/harness_docs.py) against their committed
CSVs, each number recomputed here another way; every table the pages include exists and is
included; the offline check finds what a page would fetch from another host."""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FIG = DOCS / "figures"
sys.path.insert(0, str(DOCS / "_ext"))
import harness_docs  # noqa: E402

from harness.analysis import claims  # noqa: E402


def _csv(name):
    return pd.read_csv(FIG / f"{name}.csv")


def _pages():
    return [p for p in DOCS.rglob("*.md") if "_build" not in p.parts and "_generated" not in p.parts]


# ----------------------------------------------------------------------------- the site's wiring

def test_every_included_table_is_generated_and_every_generated_table_is_included():
    included = {m for p in _pages()
                for m in re.findall(r"```\{include\} (?:\.\./)?_generated/(\w+)\.md",
                                    p.read_text(encoding="utf-8"))}
    assert included == set(harness_docs.TABLES)


def test_every_table_names_a_committed_csv_with_its_machine_blas_and_load():
    with open(DOCS / "measurements.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len({r["csv"] for r in rows}) == len(rows)
    for r in rows:
        assert (ROOT / r["csv"]).is_file(), r["csv"]
        assert all(r[k] for k in ("date", "commit", "machine", "blas", "load", "command")), r
    for name in harness_docs.TABLES:
        text = harness_docs.render(name)
        assert "Data: `" in text.split("\n", 1)[0], name
    with pytest.raises(ValueError, match="expected one row for 'docs/nothing.csv', got 0"):
        harness_docs.provenance(ROOT, "docs/nothing.csv")
    with pytest.raises(ValueError, match="name: expected one of"):
        harness_docs.render("nothing")


def test_the_offline_check_finds_a_resource_from_another_host(tmp_path):
    page = ('<link rel="stylesheet" href="_static/a.css"><script src="https://cdn.x/m.js">'
            '</script><a href="https://example.org">a link</a><img src="//x.org/i.png">')
    assert harness_docs.external_loads(page) == ['<script src="https://cdn.x/m.js">',
                                                 '<img src="//x.org/i.png">']
    (tmp_path / "a.html").write_text(page)
    (tmp_path / "b.html").write_text('<script src="_static/m.js"></script>')
    assert list(harness_docs.check_offline(tmp_path)) == ["a.html"]
    assert harness_docs.main(["--check-offline", str(tmp_path)]) == 1
    (tmp_path / "a.html").unlink()
    assert harness_docs.main(["--check-offline", str(tmp_path)]) == 0
    assert harness_docs.main(["--check-offline", str(tmp_path / "none")]) == 2


# ----------------------------------------------------------------------------- the claims page

def test_the_claims_page_is_the_claims_csv_grouped_by_lesson():
    text = harness_docs.render("claims")
    t = _csv("claims")
    assert text.endswith(claims.markdown(t).rstrip("\n") + "\n")
    assert list(t.lesson) == [fn.lesson for fn in claims.CLAIMS]
    assert [c.split(" ")[:2] for c in t.claim] == [fn.text.split(" ")[:2] for fn in claims.CLAIMS]
    # each group's counts, from the lesson column by plain string tests
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) == 4
    today = t.lesson.str.contains("asked of")
    for section, mask in zip(sections, [~today & t.lesson.str.startswith(g)
                                        for g in ("additive", "goodbye", "self")] + [today]):
        rows = t[mask]
        assert sum(ln.startswith("| ") for ln in section.splitlines()) == len(rows) + 1
        for verdict, n in rows.verdict.value_counts().items():
            word = {"holds": ("holds", "hold"), "does not hold": ("does not hold", "do not hold"),
                    "holds with a qualification": ("holds with a qualification",
                                                   "hold with a qualification"),
                    "not measured": ("not measured", "not measured")}[verdict][n != 1]
            assert f"{n} {word}" in section.split("\n\n", 2)[1], (verdict, section[:200])


def _claim(start):
    t = _csv("claims")
    return t[t.claim.str.startswith(start)].iloc[0]


def test_the_depth_and_schedule_claims_another_way():
    """Closed forms, and the schedule's own columns, not the claim functions."""
    d = _csv("depth")
    r = d[d.model == "rnn"]
    assert (r.span == 3 * r["T"]).all()                         # three ops per step
    row = _claim("An RNN's T steps")
    assert row.verdict == "holds" and f"{int(r.span.max()):,}" in row.measured
    s = _csv("schedule")
    T = int(s["T"].iloc[0])
    rs = s[(s.model == "rnn") & (s.grain == "scalar")].set_index("P").time
    row = _claim(f"A machine with {T} processors")
    assert f"{rs.loc[1] / rs.loc[T]:,.1f}×" in row.measured and row.verdict == "does not hold"
    a = d[d.model == "attention"].sort_values("T")
    lg = [(int(T) - 1).bit_length() for T in a["T"]]            # ceil(log2 T)
    dl = (int(d.d.iloc[0]) - 1).bit_length()
    assert list(a.scalar_span) == [7 + 2 * dl + 3 * x for x in lg]


def test_the_wall_time_crossover_claim_from_the_raw_rounds():
    """The timed crossover recomputed from wall_samples.csv with plain NumPy."""
    w = _csv("wall_samples")
    med = w.groupby(["model", "T"]).seconds.median().unstack(0)
    gap = np.log(med["attention"] / med["rnn"]).to_numpy()
    Ts = med.index.to_numpy(float)
    i = next(i for i in range(1, len(Ts)) if gap[i - 1] < 0 <= gap[i])
    cross = math.exp(math.log(Ts[i - 1]) + (-gap[i - 1] / (gap[i] - gap[i - 1]))
                     * math.log(Ts[i] / Ts[i - 1]))
    d = int(w.d.iloc[0])
    row = _claim("A big count that fits in one matrix product")
    assert f"{cross / d:.2f}·d" in row.measured
    assert row.low <= cross / d <= row.high


def test_the_lesson_figures_another_way():
    r = _csv("additive_routes").set_index("va_scale").loc[0.5]
    assert (round(r.value_norm, 4), round(r.score_norm, 4)) == (2.8303, 0.2556)   # the lesson prints
    s = _csv("decay_summary")
    lin = s[(s.model == "rnn") & (s.activation == "identity") & (s.weight == "orthogonal")]
    assert np.abs(lin.ln_rate - np.log(lin.rho)).max() < 1e-9
    # the d_k experiment: the lesson's draw's percentiles, from fresh draws made here
    rng = np.random.default_rng(0)
    Q, K = rng.normal(size=(2000, 6, 512)), rng.normal(size=(2000, 6, 512))
    p = _csv("row_max_lesson").set_index(["d_k", "scaled"])
    for (dk, scaled), row in p.iterrows():
        E = Q[..., :dk] @ np.swapaxes(K[..., :dk], 1, 2) / (np.sqrt(dk) if scaled else 1.0)
        A = np.exp(E - E.max(axis=-1, keepdims=True))
        v = (A / A.sum(axis=-1, keepdims=True)).max(axis=-1).mean(axis=-1)
        assert abs(100 * np.mean(v < row.lesson_row_max) - row.percentile) < 1e-9


# ----------------------------------------------------------------------------- measurements

def test_the_tracing_cost_table_is_its_csv():
    text = harness_docs.render("trace_cost")
    d = pd.read_csv(DOCS / "trace_cost.csv")
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| form")]
    forms = [f for f in d.form.unique() if f != "all"]
    assert [ln.split(" | ")[0][2:] for ln in lines] == forms
    for form, line in zip(forms, lines):
        cells = line.strip("| ").split(" | ")[1:]
        g = d[d.form == form].sort_values("T")
        assert len(cells) == len(g)
        for cell, r in zip(cells, g.itertuples()):
            trace, process, peak = re.fullmatch(r"([\d.]+) s / (\d+) s, (\d+) MB", cell).groups()
            assert abs(float(trace) - r.trace_s) <= 0.05 and int(process) == round(r.process_s)
            assert int(peak) == round(r.peak_mb)
    whole = d[d.form == "all"].iloc[0]
    assert (f"took {int(whole.process_s) // 60} min {int(whole.process_s) % 60} s with a peak of "
            f"{whole.peak_mb:.0f} MB") in text


def test_the_timings_table_is_its_csv():
    text = harness_docs.render("timings")
    d = pd.read_csv(DOCS / "timings.csv")
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(lines) == len(d)
    for line, r in zip(lines, d.itertuples()):
        cells = line.strip("| ").split(" | ")
        m, s = re.fullmatch(r"(\d+) min (\d+) s", cells[2]).groups()
        assert 60 * int(m) + int(s) == round(r.seconds)
        assert cells[0] == r.command and cells[3] == str(r.load) and cells[5] == f"`{r.commit}`"


@pytest.mark.parametrize("family", harness_docs.FAMILIES)
def test_a_family_speed_table_is_its_rows_of_the_committed_comparison(family):
    from harness import models
    assert family in models.NAMES
    d = pd.read_csv(DOCS / "compare_summary.csv")
    rows = d[d.model == family]
    lines = [ln for ln in harness_docs.render(f"speed_{family}").splitlines()
             if ln.startswith("| ") and ln[2].isdigit()]
    assert len(lines) == len(rows) > 0
    for line, r in zip(lines, rows.itertuples()):
        cells = line.strip("| ").split(" | ")
        assert cells[:6] == [str(r.batch), f"{r.T:,}", str(r.d), r.dtype, r.kernel, r.direction]
        assert cells[6] == f"{r.harness_s * 1e3:,.3f} ms" and cells[7] == r.fastest_peer
        m = re.fullmatch(r"([\d.]+)×(?: \[([\d.]+), ([\d.]+)\])?", cells[8])
        assert float(m[1]) == round(r.speedup_vs_fastest, 2)
        # the fastest peer is at least as fast as NumPy and torch (medians over the harness's;
        # linear attention has a third peer, torch's chunked form), and one of them where
        # it is named so
        peers = {"numpy": r.speedup_vs_numpy, "torch": r.speedup_vs_torch,
                 "jax": getattr(r, "speedup_vs_jax", float("nan"))}
        assert all(r.speedup_vs_fastest <= x * (1 + 1e-9) for x in peers.values() if x == x)
        if r.fastest_peer in peers:
            assert math.isclose(peers[r.fastest_peer], r.speedup_vs_fastest, rel_tol=1e-9)
        if m[2]:
            assert float(m[2]) <= round(r.speedup_vs_fastest, 2) <= float(m[3])
    text = harness_docs.render(f"speed_{family}")
    if "libraries" in rows:                          # the BLAS each table ran on, said above it
        for lib in rows.libraries.dropna().unique():
            assert lib in text.split("Libraries, as the run recorded them: ")[1]


def test_the_mutation_table_is_the_last_runs_counts():
    """mutmut's own counts (docs/mutation-score.json) and the survivors' list, each survivor
    with a reason: equivalent, or not worth a test."""
    import tomllib
    s = json.loads((DOCS / "mutation-score.json").read_text())
    with open(DOCS / "mutation-survivors.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == s["survived"] == len({r["mutant"] for r in rows})
    kinds = [r["why it survives"].split(":", 1) for r in rows]
    assert all(len(k) == 2 and k[0] in ("equivalent", "not worth a test") and len(k[1].strip()) > 10
               for k in kinds)
    mutated = s.get("only_mutate") or tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    modules = {m.removesuffix(".py").replace("/", ".") for m in mutated}
    assert all(r["mutant"].split(".x", 1)[0] in modules for r in rows)
    text = harness_docs.render("mutation")
    caught = s["killed"] + s["timeout"] + s["segfault"]
    n = s["total"] - s["skipped"]
    equivalent = sum(k[0] == "equivalent" for k in kinds)
    assert (f"| {n:,} | {caught:,} | {s['killed']:,} | {s['timeout']} | {s['segfault']} | "
            f"{s['survived']} | {s['suspicious']} | {s['no_tests']} | {100 * caught / n:.1f} % |") in text
    assert (f"Of the {s['survived']} survivors, {equivalent} are equivalent and "
            f"{s['survived'] - equivalent} not worth a test") in text
    if "recorded" in s:                              # unchanged functions as recorded
        r = s["recorded"]
        assert r["same"] <= r["reran"] <= r["mutants"] < s["total"]
        assert (f"The {s['total'] - r['mutants']:,} mutants of the functions changed since "
                f"`{r['since']}` ran here") in text
        assert f"{r['reran']:,} of them ran again here, {r['same']:,} with the verdict" in text
    if "estimate_all" in s:                          # a partial run says what ran
        from scipy.stats import beta
        c, m = s["changed_functions"], s["sample"]
        for part, k, n_ in ((c, c["caught"], c["ran"]), (m, m["caught"], m["ran"])):
            lo = beta.ppf(0.025, k, n_ - k + 1) * 100 if k else 0.0     # Clopper-Pearson
            hi = beta.ppf(0.975, k + 1, n_ - k) * 100 if k < n_ else 100.0
            assert part["score_interval_95"] == [round(lo, 1), round(hi, 1)]
        assert f"{c['ran']:,} ran" in text and f"{100 * c['caught'] / c['ran']:.1f} %" in text
        assert f"{c['mutants'] - c['ran']:,} changed mutants that did not run" in text
        assert s["total"] == s["estimate_all"]["mutants"] - (c["mutants"] - c["ran"])
        lo, hi = s["estimate_all"]["interval_95"]
        assert lo <= s["estimate_all"]["score"] <= hi


def test_the_semantic_mutation_table_is_its_csvs_counts():
    """Per module (the claims' and kernels' folders one each), the bugs and those caught,
    counted from docs/semantic-mutations.csv with the csv module; the total and each survivor."""
    from collections import Counter
    with open(DOCS / "semantic-mutations.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))

    def module(path):
        folder, _ = path.rsplit("/", 1)
        return folder + "/" if folder.endswith(("/claims", "/kernels")) else path
    bugs = Counter(module(r["file"]) for r in rows)
    caught = Counter(module(r["file"]) for r in rows if r["caught"] == "yes")
    text = harness_docs.render("semantic_mutations")
    for m, n in bugs.items():
        c = caught[m]
        assert f"| `{m}` | {n} | {c} | {n - c} | {round(100 * c / n)} % |" in text
    c = sum(caught.values())
    assert f"| all | {len(rows)} | {c} | {len(rows) - c} | {100 * c / len(rows):.1f} % |" in text
    assert len(text.split("\n| `")) - 1 == len(bugs)
    for r in rows:
        if r["caught"] != "yes":
            assert f"`{r['id']}` ({r['note']})" in text


# ------------------------------------------------- the generated summaries of the speed tables

def _floats(row, *keys):
    return [float(row[k]) for k in keys]


def test_the_compare_overview_counts_each_familys_rows_by_their_interval():
    """Counted again with the csv module: ahead when the interval lies above 1, behind when
    below, level when it holds 1; every row behind is listed with its speed-up."""
    with open(DOCS / "compare_summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    text = harness_docs.render("compare_overview")
    families = list(dict.fromkeys(r["model"] for r in rows))
    behind = []
    for fam in families + ["all"]:
        mine = [r for r in rows if fam in ("all", r["model"])]
        n = {"ahead": 0, "level": 0, "behind": 0}
        for r in mine:
            lo, hi = _floats(r, "speedup_lo", "speedup_hi")
            n["ahead" if lo > 1 else "behind" if hi < 1 else "level"] += 1
            if hi < 1 and fam != "all":
                behind.append(r)
        speed = sorted(float(r["speedup_vs_fastest"]) for r in mine)
        median = float(np.median(speed))
        assert (f"| {fam} | {len(mine)} | {n['ahead']} | {n['level']} | {n['behind']} | "
                f"{median:.2f}× | {speed[0]:.2f}× |") in text
    assert f"{len(behind)} of the {len(rows)} rows are behind" in text
    for r in behind:
        s, lo, hi = _floats(r, "speedup_vs_fastest", "speedup_lo", "speedup_hi")
        assert (f"| {r['model']} | {r['kernel']} | {r['batch']} | {int(r['T']):,} | {r['d']} | "
                f"{r['dtype']} | {r['direction']} | {r['fastest_peer']} | {s:.2f}× "
                f"[{lo:.2f}, {hi:.2f}] |") in text
    listed = [ln for ln in text.splitlines() if ln.count("|") == 11 and ln[2:3].isalpha()
              and "family" not in ln]
    assert len(listed) == len(behind)


def test_a_row_whose_interval_touches_1_is_level_not_behind_or_ahead():
    assert harness_docs._verdict(1.0, 1.2) == "level" and harness_docs._verdict(0.8, 1.0) == "level"
    assert harness_docs._verdict(1.0001, 1.2) == "ahead" and harness_docs._verdict(0.8, 0.9999) == "behind"


def test_the_roofline_summary_counts_the_kernels_at_half_their_bound_and_above_it(tmp_path):
    with open(DOCS / "roofline.csv", newline="") as f:
        fr = [float(r["fraction"]) for r in csv.DictReader(f)]
    text = harness_docs.render("roofline_kernels")
    half = sum(x >= 0.5 for x in fr)
    assert f"{half} of the {len(fr)} kernels reach at least half of their bound" in text
    assert f"the median fraction is {np.median(fr):.0%}" in text
    assert ("run above their bound" in text) == any(x > 1 for x in fr)
    # both sides of each rule, on a table of four kernels
    (tmp_path / "docs").mkdir()
    for name in ("measurements.csv",):
        (tmp_path / "docs" / name).write_text((DOCS / name).read_text())
    d = pd.read_csv(DOCS / "roofline.csv").head(4).copy()
    d["fraction"] = [0.49, 0.5, 1.0, 1.01]
    d.to_csv(tmp_path / "docs" / "roofline.csv", index=False)
    text = harness_docs.render("roofline_kernels", root=tmp_path)
    assert "3 of the 4 kernels reach at least half" in text and "and 1 run above" in text
    d["fraction"] = [0.2, 0.3, 0.4, 1.0]
    d.to_csv(tmp_path / "docs" / "roofline.csv", index=False)
    text = harness_docs.render("roofline_kernels", root=tmp_path)
    assert "1 of the 4 kernels reach at least half" in text and "above their bound" not in text


def test_the_crossover_sentence_places_each_prediction_against_its_measured_interval(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "measurements.csv").write_text((DOCS / "measurements.csv").read_text())
    d = pd.read_csv(DOCS / "roofline_crossover.csv")
    row = d.iloc[0].copy()
    cases = [(100, 90, 110, "falls inside"), (80, 90, 110, "falls below"),
             (120, 90, 110, "falls above"), (90, 90, 110, "falls inside")]
    for predicted, lo, hi, words in cases:
        t = pd.DataFrame([row]).assign(predicted_T=predicted, measured_T=100, measured_T_lo=lo,
                                       measured_T_hi=hi, rnn_step_s=3e-6, rnn_step_bound_s=1e-6)
        t.to_csv(tmp_path / "docs" / "roofline_crossover.csv", index=False)
        text = harness_docs.render("roofline_crossover", root=tmp_path)
        assert (f"the prediction, {predicted:,}, {words} the measured interval (100, "
                f"{lo}–{hi}), and the RNN's step takes 3.0 × its bound") in text
    t = t.assign(measured_T_lo=np.nan, measured_T_hi=np.nan)
    t.to_csv(tmp_path / "docs" / "roofline_crossover.csv", index=False)
    assert "against 100 measured, with no interval" in harness_docs.render("roofline_crossover",
                                                                           root=tmp_path)
    # the committed run, read with the csv module
    text = harness_docs.render("roofline_crossover")
    with open(DOCS / "roofline_crossover.csv", newline="") as f:
        for r in csv.DictReader(f):
            p = float(r["predicted_T"])
            assert f"at d = {r['d']} the prediction" in text and f"{p:,.0f}" in text
