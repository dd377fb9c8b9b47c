"""The README's SDPA-with-a-neighbour table and the sentences beside it, against the rows
tools/neighbour_attention.py wrote (docs/neighbour_attention.csv)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
WORDS = {"off": "none of ours", "compute": "compute-bound", "l3": "L3", "memory": "memory"}


def _rows():
    d = pd.read_csv(ROOT / "docs" / "neighbour_attention.csv", comment="#")
    return d[d.clock == "cpu"]


def _table():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- neighbour: docs/neighbour_attention.csv -->", 1)[1].split("\n\n", 2)[1]
    return text, [ln for ln in block.splitlines() if ln.startswith("| ") and "---" not in ln][1:]


def _cell(value, lo, hi):
    return f"{value:.2f}× [{lo:.2f}, {hi:.2f}]"


def test_the_readme_table_is_the_csvs_rows():
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
    said = (f"of the forward's {ms('harness forward'):.1f} ms, the tile products take "
            f"{ms('harness tile gemms'):.1f} ms")
    assert said in re.sub(r"\s+", " ", text)
    assert f"torch's BLAS: {ms('torch tile gemms', None):.1f} ms" in re.sub(r"\s+", " ", text)
    assert (f"row maxima and sums {ms('harness exps'):.1f} ms (torch's: "
            f"{ms('torch exps', None):.1f} ms)") in re.sub(r"\s+", " ", text)
    mem = c[(c.neighbour == "memory")]
    h = mem[(mem.tiles == "256x512") & (mem.part == "harness forward")].iloc[0]
    t = mem[mem.part == "torch sdpa forward"].iloc[0]
    assert h.slowdown_lo > 1 and f"({h.slowdown:.2f}× against SDPA's {t.slowdown:.2f}×" in text
    # the other neighbours: every interval of ours and torch's overlaps
    for n in ("compute", "l3"):
        for part, other in (("harness forward", "torch sdpa forward"),
                            ("harness forward+backward", "torch forward+backward")):
            a = c[(c.neighbour == n) & (c.tiles == "256x512") & (c.part == part)].iloc[0]
            b = c[(c.neighbour == n) & (c.part == other)].iloc[0]
            assert a.slowdown_lo <= b.slowdown_hi and b.slowdown_lo <= a.slowdown_hi, (n, part)


def test_no_tile_size_is_better_under_a_neighbour_and_no_worse_alone():
    """The README's last sentence: no other tile size's speed-up interval lies wholly above
    256 x 512's under a neighbour while its own interval alone reaches 256 x 512's."""
    c = _rows()
    text, _ = _table()
    parts = ("harness forward", "harness forward+backward")
    sizes = sorted(set(c.tiles.dropna()) - {"256x512"})
    assert sizes == ["128x256", "256x256", "512x512"]
    for size in sizes:
        for part in parts:
            def row(n, tiles):
                return c[(c.tiles == tiles) & (c.neighbour == n) & (c.part == part)].iloc[0]
            alone_no_worse = row("off", size).speedup_hi >= row("off", "256x512").speedup
            better_loaded = any(row(n, size).speedup_lo > row(n, "256x512").speedup_hi
                                for n in ("compute", "l3", "memory"))
            assert not (alone_no_worse and better_loaded), (size, part)
    assert "No tile size" in text and "was better under a neighbour and no\nworse alone" in text
