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


def _decay(model, log10, **keys):
    import numpy as np
    k = np.arange(1, len(log10) + 1)
    base = dict(model=model, weight="gaussian", activation="tanh", rho=np.nan, input_scale=1.0,
                T=len(k) + 1, d=4, seed=0, gate_bias=np.nan)
    return pd.DataFrame({**base, **keys, "distance": k, "log10_norm": log10})


def test_survival_distances_keep_the_frames_order_and_read_each_edge():
    import numpy as np
    d = pd.concat([_decay("rnn", [0.0, 0.0, 0.0, -5.0]),           # only the last falls: k = 3
                   _decay("attention", [np.nan, 0.0, 0.0]),        # no norm at k = 1: k = 0
                   _decay("gru", [0.0, -4.0, 0.0]),                # falls at k = 2: k = 1
                   _decay("lstm", [0.0, -1.0, -2.9])])             # never: the whole sequence
    got = numbers.survival_distances(d)
    assert got.model.tolist() == ["rnn", "attention", "gru", "lstm"]   # as given, not sorted
    assert got.distance.tolist() == [3, 0, 1, 3]
    assert list(got.columns) == [*numbers.models.PATH_KEYS, "distance"]
    empty = numbers.survival_distances(d.iloc[:0])
    assert list(empty.columns) == [*numbers.models.PATH_KEYS, "distance"] and empty.empty


def test_unprojected_rows_are_the_first_two_of_the_diagonal_frame():
    d = pd.DataFrame({"tokens": [1, 3, 1, 3], "projections": [False, False, True, True]})
    pd.testing.assert_frame_equal(numbers.unprojected(d), d.iloc[:2])
