"""The attention experiments of the lessons, as the report shows them."""

import numpy as np

from harness import lessons


def test_without_projections_the_diagonal_wins_and_sharpens_with_length():
    share = lessons.diagonal_share(lessons.self_attention_maps()).set_index("setting")
    r1, r3 = share.loc["no projections, length 1"], share.loc["no projections, length 3"]
    assert r1.rows_max_on_diagonal == r1.rows == len(lessons.SENTENCE)
    assert r3.rows_max_on_diagonal == r3.rows
    assert r3.mean_self_weight > r1.mean_self_weight + 0.3     # longer tokens: a monopoly
    proj = share.loc["with projections, length 1"]
    assert proj.mean_self_weight < r1.mean_self_weight


def test_maps_are_row_stochastic():
    m = lessons.self_attention_maps()
    sums = m.groupby(["setting", "i"]).weight.sum()
    np.testing.assert_allclose(sums, 1.0, atol=1e-12)


def test_unscaled_row_maximum_saturates_and_scaling_holds_it_back():
    r = lessons.row_max_vs_dk().pivot(index="d_k", columns="scaled", values="row_max")
    assert r.loc[512, False] > 0.95                            # the lesson: 0.983
    assert (r[True] < r[False]).all()                          # dividing by sqrt(d_k) always tempers
    assert r.loc[512, True] < 0.75                             # the lesson: 0.486


def test_additive_maps_near_uniform_and_identical_rows_without_tanh():
    a = lessons.additive_maps()
    t = a[a.setting == "tanh"].groupby("i").weight.max()
    assert ((t > 1 / 6) & (t < 0.2)).all()                     # "ronda 0.18", uniform 0.167
    nt = a[a.setting == "no tanh"].pivot(index="i", columns="j", values="weight").to_numpy()
    np.testing.assert_allclose(nt, np.broadcast_to(nt[0], nt.shape), rtol=0, atol=1e-15)
