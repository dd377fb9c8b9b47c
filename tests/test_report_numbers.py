"""harness.report.numbers: the figures that captions and claims share, on frames built here."""

from __future__ import annotations

import pandas as pd

from harness.report import numbers


def test_linear_spread_is_read_at_the_largest_distance_and_the_asked_input_scale():
    rows = [dict(decay=decay, input_scale=scale, distance=k, decades=100 * scale + 10 * k + i)
            for i, decay in enumerate(("none", "constant", "selective"))
            for scale in (numbers.UNIT_SCALE, 4.0) for k in (8, 2, 32)]
    s = pd.DataFrame(rows).sample(frac=1.0, random_state=0)    # stored in no particular order
    at = numbers.linear_spread_at(s)
    assert at.index.name == "decay"
    assert sorted(at.index) == ["constant", "none", "selective"]
    assert (at.distance == 32).all() and (at.input_scale == numbers.UNIT_SCALE).all()
    assert at.loc["selective"].decades == 100 * numbers.UNIT_SCALE + 320 + 2
    top = numbers.linear_spread_at(s, 4.0)
    assert (top.input_scale == 4.0).all() and top.loc["none"].decades == 400 + 320
