"""The attention experiments of the lessons, as the report shows them."""

import numpy as np
import pytest

from harness.analysis import lessons


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
    r = lessons.row_max_vs_dk().set_index(["d_k", "scaled"])
    assert (r.draws == 2000).all()
    m = r.row_max.unstack()
    assert m.loc[512, False] > 0.95                            # the lesson's draw: 0.983
    assert (m[True] < m[False]).all()                          # dividing by sqrt(d_k) always tempers
    assert m[False].is_monotonic_increasing                    # the mean saturates; one draw need not
    # scaled, the scores are N(0, 1) whatever d_k: the mean stays inside every d_k's interval
    assert abs(m.loc[512, True] - m.loc[8, True]) < (r.band_hi - r.band_lo).min() / 4
    assert (r.mean_lo < r.row_max).all() and (r.row_max < r.mean_hi).all()
    assert (r.band_lo < r.mean_lo).all() and (r.mean_hi < r.band_hi).all()


def test_scaled_row_maximum_matches_iid_standard_normal_scores():
    """Another way: at d_k = 512 the scaled scores q_i.k_j / sqrt(d_k) are nearly iid N(0, 1),
    so the mean row maximum is that of softmax over a 6 x 6 standard normal grid."""
    Z = np.random.default_rng(99).normal(size=(20000, 6, 6))
    A = np.exp(Z - Z.max(axis=-1, keepdims=True))
    A /= A.sum(axis=-1, keepdims=True)
    iid = A.max(axis=-1).mean()
    r = lessons.row_max_vs_dk().set_index(["d_k", "scaled"]).loc[(512, True)]
    assert abs(r.row_max - iid) < 0.01


def test_one_draw_is_the_loop_twin():
    cfg = lessons.LessonConfig(draws=3, d_k_values=(8, 64))
    x = lessons.row_max_draws(cfg)
    rng = np.random.default_rng(cfg.seed)
    Q, K = rng.normal(size=(3, 6, 64)), rng.normal(size=(3, 6, 64))
    for n in range(3):
        for j, dk in enumerate((8, 64)):
            for s, div in enumerate((1.0, np.sqrt(dk))):
                rows = []
                for i in range(6):
                    e = [sum(Q[n, i, c] * K[n, k, c] for c in range(dk)) / div for k in range(6)]
                    w = np.exp(np.array(e) - max(e))
                    rows.append((w / w.sum()).max())
                assert abs(np.mean(rows) - x[n, j, s]) < 1e-12


def test_the_lessons_single_draw_on_the_distribution():
    p = lessons.lesson_draw_percentiles().set_index(["d_k", "scaled"])
    x = lessons.row_max_draws()
    for (dk, scaled), row in p.iterrows():
        v = x[:, lessons.DEFAULT.d_k_values.index(dk), int(scaled)]
        assert row.percentile == pytest.approx(100 * np.mean(v < row.lesson_row_max))
    assert 0 < p.percentile.min() and p.percentile.max() < 100   # inside the distribution


def test_additive_maps_near_uniform_and_identical_rows_without_tanh():
    a = lessons.additive_maps()
    t = a[a.setting == "tanh"].groupby("i").weight.max()
    assert ((t > 1 / 6) & (t < 0.2)).all()                     # "ronda 0.18", uniform 0.167
    nt = a[a.setting == "no tanh"].pivot(index="i", columns="j", values="weight").to_numpy()
    np.testing.assert_allclose(nt, np.broadcast_to(nt[0], nt.shape), rtol=0, atol=1e-15)
