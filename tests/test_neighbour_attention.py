"""The docs' SDPA-with-a-neighbour table and the sentence beside it (the measurements page,
docs/_ext/harness_docs.py), against the rows tools/neighbour_attention.py wrote
(docs/neighbour_attention.csv), recomputed here."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from _helpers import docs_table

ROOT = Path(__file__).resolve().parents[1]
WORDS = {"off": "none of ours", "compute": "compute-bound", "l3": "L3", "memory": "memory"}


def _rows():
    d = pd.read_csv(ROOT / "docs" / "neighbour_attention.csv", comment="#")
    return d[d.clock == "cpu"]


def _table():
    text = docs_table("neighbour")
    block = text.split("\n\n", 2)[1]
    return text, [ln for ln in block.splitlines() if ln.startswith("| ") and "---" not in ln][1:]


def _cell(value, lo, hi):
    return f"{value:.2f}× [{lo:.2f}, {hi:.2f}]"


def test_the_docs_table_is_the_csvs_rows():
    c = _rows()
    _, lines = _table()
    assert len(lines) == 4
    for n, line in zip(["off", "compute", "l3", "memory"], lines):
        assert line.startswith(f"| {WORDS[n]}"), line
        cells = [x.strip() for x in line.strip("|").split("|")][1:]
        want = []
        for ours, theirs in (("harness forward", "torch sdpa forward"),
                             ("harness forward+backward", "torch forward+backward")):
            h = c[(c.tiles == "256x512") & (c.neighbour == n) & (c.part == ours)].iloc[0]
            t = c[(c.neighbour == n) & (c.part == theirs)].iloc[0]
            assert h.speedup_lo <= h.speedup <= h.speedup_hi
            want.append(_cell(h.speedup, h.speedup_lo, h.speedup_hi))
            for x in (h, t):
                want.append("—" if n == "off" else _cell(x.slowdown, x.slowdown_lo, x.slowdown_hi))
        assert cells == want, (n, cells, want)


def test_the_sentences_beside_it_follow_the_rows():
    c = _rows()
    text, _ = _table()
    off = c[c.neighbour == "off"]

    def ms(part, tiles="256x512"):
        rows = off[(off.part == part) & ((off.tiles == tiles) if tiles else off.tiles.isna())]
        return 1e3 * rows.median_s.iloc[0]

    # slower than SDPA in every condition, forward and forward+backward
    ours = c[(c.tiles == "256x512") & c.part.isin(["harness forward", "harness forward+backward"])]
    assert (ours.speedup_hi < 1).all() and "slower than SDPA with or without a neighbour" in text
    said = (f"Of the forward's {ms('harness forward'):.1f} ms alone, the tile products take "
            f"{ms('harness tile gemms'):.1f} ms")
    assert said in re.sub(r"\s+", " ", text)
    assert f"torch's BLAS: {ms('torch tile gemms', None):.1f} ms" in re.sub(r"\s+", " ", text)
    assert (f"row maxima and sums {ms('harness exps'):.1f} ms (torch's: "
            f"{ms('torch exps', None):.1f} ms)") in re.sub(r"\s+", " ", text)
