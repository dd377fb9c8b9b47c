"""tools/torch_trace_cost.py: its child's peak memory and times against a child of known size;
examples/torch/encoder_layer.py traced through the CLI against its closed-form products; the
committed docs/torch_trace_cost.csv (every module under the 2 GB bound) and the table
docs/_ext/harness_docs.py makes of it, its medians and ranges recomputed here another way."""

from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CSV = DOCS / "torch_trace_cost.csv"
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(DOCS / "_ext"))
import torch_trace_cost as ttc  # noqa: E402

BOUND_BYTES = 2_000_000_000      # the bound: 2 GB, decimal (10^9 bytes), about 1.86 GiB


# ----------------------------------------------------------------------------- the tool

def test_a_child_that_touches_200_MB_peaks_at_200_MB_and_its_times_add_up():
    # b"x" * n writes every byte, so every page of the 200 MB is resident at once
    argv = [sys.executable, "-c", "import time; b = b'x' * 200_000_000; t = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass"]
    # Measured from a fresh, small Python, as the tool runs: Linux folds the forking process's
    # high-water mark into a child's ru_maxrss at exec, so from a large pytest worker (2 GB
    # under xdist) the child would read as that worker.
    import json
    import subprocess
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'tools')!r}); "
            f"import torch_trace_cost as t; print(json.dumps(t.measure({argv!r})))")
    rss, wall, cpu = json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                               capture_output=True, text=True).stdout)
    assert 200e6 <= rss < 200e6 + 60e6            # Python itself: about 10 MB
    assert 0.3 <= cpu <= wall + 0.05 * wall       # one thread: CPU time cannot pass wall time


def test_a_failing_child_raises_with_what_it_printed():
    argv = [sys.executable, "-c", "import sys; print('no module here'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"exited with 3:\nno module here"):
        ttc.measure(argv)


def test_rounds_are_interleaved_and_rotated(monkeypatch):
    calls = []

    def fake(argv, cwd=ttc.ROOT):
        calls.append(argv[argv.index("--torch") + 1])
        return 1000 * len(calls), 1.0, 0.5

    monkeypatch.setattr(ttc, "measure", fake)
    mods = {"a": "a.py:factory", "b": "b.py:factory", "c": "c.py:factory"}
    rows = ttc.run(mods, 3, 8, 4, log=lambda m: None)
    assert calls == ["a.py:factory", "b.py:factory", "c.py:factory",
                     "b.py:factory", "c.py:factory", "a.py:factory",
                     "c.py:factory", "a.py:factory", "b.py:factory"]
    assert [(r["module"], r["run"]) for r in rows[:4]] == [("a", 0), ("b", 0), ("c", 0), ("b", 1)]
    assert all(r["T"] == 8 and r["d"] == 4 and r["load"] >= 0 for r in rows)
    assert list(rows[0]) == list(ttc.COLUMNS)


def test_bad_arguments_name_the_argument(capsys, tmp_path):
    for argv, what in ((["--runs", "0"], "--runs: expected a positive integer, got 0"),
                       (["--T", "-1"], "--T: expected a positive integer, got -1"),
                       (["--out", str(tmp_path / "no" / "x.csv")], "--out: the folder")):
        with pytest.raises(SystemExit) as e:
            ttc.main(argv)
        assert e.value.code == 2 and what in capsys.readouterr().err


# ----------------------------------------------------------------------------- the example

def test_the_encoder_layer_example_traces_from_the_cli(tmp_path, monkeypatch):
    from _deps import require_module
    require_module("torch", "pip install 'harness[torch]'")
    from harness import cli

    T, d = 16, 16
    monkeypatch.chdir(ROOT)
    argv = ["depth", "--torch", ttc.MODULES["encoder_layer"], "--shape", "X=1,T,d", "--T",
            str(T), "--d", str(d), "--no-measure", "--quiet", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    row = pd.read_csv(tmp_path / "depth.csv").iloc[0]
    # the products, by hand: Q, K, V and the output projection (4 T d^2), the two
    # feed-forward layers of 4 d (8 T d^2), the scores and the mix over every pair (2 T^2 d),
    # the two layer norms (2 T d for (x - mean) * rstd, 2 T d for their weights) and the
    # scaled q and k (2 T d: d_k^(-1/4) each)
    assert row["T"] == T and row["d"] == d
    assert row["macs"] == 12 * T * d * d + 2 * T * T * d + 4 * T * d + 2 * T * d


# ----------------------------------------------------------------------------- the committed data

def _rows():
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_the_committed_runs_are_interleaved_rounds_of_every_module_at_T_4096():
    rows = _rows()
    assert [k for k in rows[0]] == list(ttc.COLUMNS)
    mods = sorted({r["module"] for r in rows})
    assert mods == sorted(ttc.MODULES)
    runs = sorted({int(r["run"]) for r in rows})
    assert len(runs) >= 3
    for r in runs:                                # every round ran every module once
        assert sorted(x["module"] for x in rows if int(x["run"]) == r) == mods
    assert {(int(r["T"]), int(r["d"])) for r in rows} == {(4096, 64)}


def test_every_modules_peak_rss_is_under_2_GB():
    for r in _rows():
        assert 0 < int(r["peak_rss_bytes"]) < BOUND_BYTES, r


def _cell(text):
    """(median, lo, hi) of a 'v unit (lo–hi)' cell."""
    v, lo, hi = re.fullmatch(r"([\d,.]+) \w+ \(([\d,.]+)–([\d,.]+)\)", text).groups()
    return tuple(float(x.replace(",", "")) for x in (v, lo, hi))


def test_the_table_is_the_csvs_medians_and_ranges():
    import harness_docs
    text = harness_docs.render("torch_trace_cost")
    assert "Data: `docs/torch_trace_cost.csv`" in text.split("\n", 1)[0]
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and "peak RSS" not in ln]
    rows = _rows()
    mods = list(dict.fromkeys(r["module"] for r in rows))
    assert len(lines) == len(mods)
    for mod, line in zip(mods, lines):
        cells = line.strip("| ").split(" | ")
        assert f"examples/torch/{mod}.py" in cells[0]
        mine = [r for r in rows if r["module"] == mod]
        assert cells[1] == str(len(mine))
        for cell, column, scale in ((cells[2], "peak_rss_bytes", 1e6), (cells[3], "wall_s", 1),
                                    (cells[4], "cpu_s", 1)):
            tol = 0.051                           # shown to one decimal
            values = sorted(float(r[column]) / scale for r in mine)
            # the median by hand: the middle one of an odd count, the mean of the two middle
            n = len(values)
            mid = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
            assert mid == statistics.median(values)
            shown = _cell(cell)
            assert abs(shown[0] - mid) <= tol, (mod, column)
            assert abs(shown[1] - values[0]) <= tol and abs(shown[2] - values[-1]) <= tol
    loads = [float(r["load"]) for r in rows]
    assert f"{min(loads):.1f} to {max(loads):.1f}" in text
    top = max(int(r["peak_rss_bytes"]) for r in rows)
    assert f"{top / 1e6:,.0f} MB" in text and "2,000,000,000 bytes" in text


def test_the_guides_prose_holds_for_the_committed_runs():
    """docs/guide/your-model.md: the encoder layer's peak below the LSTM's, the LSTM the longer."""
    page = (DOCS / "guide" / "your-model.md").read_text(encoding="utf-8")
    section = page[page.index("## Memory and time at T = 4096"):]
    assert "```{include} ../_generated/torch_trace_cost.md" in section
    assert "encoder layer's peak stays below the LSTM's" in " ".join(section.split())
    assert "The LSTM, traced step by step, takes the longer" in " ".join(section.split())
    by = pd.read_csv(CSV).groupby("module")[["peak_rss_bytes", "wall_s", "cpu_s"]].median()
    assert by.peak_rss_bytes["encoder_layer"] < by.peak_rss_bytes["lstm2"]
    assert by.wall_s["lstm2"] > by.wall_s["encoder_layer"]
    assert by.cpu_s["lstm2"] > by.cpu_s["encoder_layer"]
