"""The README's API example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})


def test_readme_quickstart_is_the_ci_command():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quickstart", 1)[1].split("##", 1)[0]
    assert "make report" in quick and "make test" in quick
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


# ----------------------------------------------------------------------------- the claims block

FIG = README.parent / "docs" / "figures"


def _csv(name):
    import pandas as pd
    return pd.read_csv(FIG / f"{name}.csv")


def test_readme_claims_block_is_the_data():
    from harness.analysis import claims
    text = README.read_text(encoding="utf-8")
    block = text[text.index(claims.README_START):text.index(claims.README_END) + len(claims.README_END)]
    assert block == claims.markdown(_csv("claims"))
    # ... and that data is the whole claims table: every registered claim, in its order
    t = _csv("claims")
    assert list(t.lesson) == [fn.lesson for fn in claims.CLAIMS]
    assert [c.split(" ")[:2] for c in t.claim] == [fn.text.split(" ")[:2] for fn in claims.CLAIMS]


def _claim(start):
    t = _csv("claims")
    return t[t.claim.str.startswith(start)].iloc[0]


def test_readme_depth_and_schedule_numbers_another_way():
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


def test_readme_wall_time_crossover_from_the_raw_rounds():
    """The timed crossover recomputed from wall_samples.csv with plain NumPy."""
    import math

    import numpy as np
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


def test_readme_lesson_figures_another_way():
    import numpy as np
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


# ----------------------------------------------------------------------------- mutation testing

def test_readme_mutation_score_and_survivors_are_the_last_runs():
    """The README's mutation figures are docs/mutation-score.json's (mutmut's own counts,
    kept from the last `make mutate`), and docs/mutation-survivors.tsv lists exactly its
    survivors, each with a reason: equivalent, or not worth a test."""
    import csv
    import json
    import tomllib

    docs = README.parent / "docs"
    s = json.loads((docs / "mutation-score.json").read_text())
    with open(docs / "mutation-survivors.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == s["survived"] == len({r["mutant"] for r in rows})
    kinds = [r["why it survives"].split(":", 1) for r in rows]
    assert all(len(k) == 2 and k[0] in ("equivalent", "not worth a test") and len(k[1].strip()) > 10
               for k in kinds), [k for k in kinds if k[0] not in ("equivalent", "not worth a test")][:3]
    # the modules that ran mutated, as they were named at its commit (pyproject's globs expanded)
    mutated = s.get("only_mutate") or tomllib.loads(
        (README.parent / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    modules = {m.removesuffix(".py").replace("/", ".") for m in mutated}
    assert all(r["mutant"].split(".x", 1)[0] in modules for r in rows)

    text = " ".join(README.read_text(encoding="utf-8").split("## Mutation testing", 1)[1]
                    .split("\n## ", 1)[0].split())
    caught = s["killed"] + s["timeout"] + s["segfault"]
    n = s["total"] - s["skipped"]
    equivalent = sum(k[0] == "equivalent" for k in kinds)
    assert f"took {s['minutes']} minutes for its {n:,} mutants ({s['date']})" in text
    assert (f"a score of {100 * caught / n:.1f} % ({caught:,} caught, {s['survived']:,} survived, "
            f"{s['no_tests']} unreached by a test)") in text
    assert (f"{equivalent} of the {s['survived']} survivors are equivalent and "
            f"{s['survived'] - equivalent} not worth a test") in text
