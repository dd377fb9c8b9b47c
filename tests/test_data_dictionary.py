"""Every column of every CSV the harness writes is in docs/data.md, with its unit."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from harness import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "data.md"


def dictionary():
    """{csv name: {column: unit}} from docs/data.md (a heading may name several files)."""
    out, names = {}, []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            names = re.findall(r"([\w-]+\.csv)", line)
            for n in names:
                out.setdefault(n, {})
            continue
        alias = re.fullmatch(r"As ([\w-]+\.csv)\.", line.strip())
        if alias and names:
            for n in names:
                out[n] = out[alias.group(1)]
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if names and line.startswith("|") and len(cells) == 3 and cells[0] not in ("column", "---"):
            assert cells[1], f"{names}: {cells[0]} has no unit"
            for col in cells[0].split(", "):
                for n in names:
                    out[n][col] = cells[1]
    return out


def check_folder(folder):
    doc = dictionary()
    written = sorted(Path(folder).glob("*.csv"))
    assert written
    for path in written:
        assert path.name in doc, f"{path.name} is not in docs/data.md"
        missing = [c for c in pd.read_csv(path, nrows=0).columns if c not in doc[path.name]]
        assert not missing, f"{path.name}: columns {missing} are not in docs/data.md"
    return {p.name for p in written}


def test_the_dictionary_parses():
    doc = dictionary()
    assert doc["decay.csv"]["log10_norm"] == "log10 of a norm"
    assert doc["additive_routes.csv"] is doc["decay_additive.csv"]
    assert "seconds_lo" in doc["wall_times.csv"] and "seconds_lo" in doc["timings.csv"]


@pytest.mark.parametrize("argv", [
    ["decay", "--T", "12", "--d", "4", "--rho", "0.9", "--quiet"],
    ["depth", "--T", "10", "20", "--d", "4", "--schedule-T", "10", "--P", "1", "4",
     "--measure-T", "8", "16", "--scaling-T", "16", "--repeats", "3", "--quiet"],
    ["compare", "--quick", "--repeats", "1", "--quiet"],
    ["roofline", "--quick", "--family", "rnn", "--quiet"],
])
def test_every_column_a_command_writes_is_documented(tmp_path, argv, capsys):
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    check_folder(tmp_path)


def test_a_missing_column_is_caught(tmp_path):
    pd.DataFrame({"model": ["rnn"], "undocumented_column": [1]}).to_csv(tmp_path / "decay.csv")
    with pytest.raises(AssertionError, match="undocumented_column"):
        check_folder(tmp_path)


def test_every_csv_kept_in_the_repository_is_documented():
    """The measurement CSVs committed under docs/ and benchmarks/ (the README's tables' rows)."""
    doc = dictionary()
    root = DOC.parents[1]
    kept = sorted([*root.glob("docs/*.csv"), *root.glob("benchmarks/*.csv")])
    assert kept
    for path in kept:
        assert path.name in doc, f"{path.name} is not in docs/data.md"
        missing = [c for c in pd.read_csv(path, nrows=0, comment="#").columns
                   if c not in doc[path.name]]
        assert not missing, f"{path.name}: columns {missing} are not in docs/data.md"
