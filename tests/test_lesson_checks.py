"""harness.analysis.lesson_checks: each measurement against a plain computation made another way."""

import math

import numpy as np

from harness.analysis import lesson_checks as lc
from harness.analysis import lessons
from harness.infra.config import LessonConfig


def test_additive_cost_is_the_closed_form():
    c = lc.additive_cost(sizes=((3, 4), (5, 2)), d=6, d_a=3).set_index(["T_y", "T_x", "score"])
    for T_y, T_x in ((3, 4), (5, 2)):
        a, g = c.loc[(T_y, T_x, "additive")], c.loc[(T_y, T_x, "dot product")]
        assert a.projection_rows == g.projection_rows == T_y + T_x
        assert a.pair_vectors == T_y * T_x and a.tanh_evaluations == T_y * T_x * 3
        assert a.grid_matrix_products == 0 and g.grid_matrix_products == 1 and g.tanh_evaluations == 0
        # (T_y + T_x) d d_a for the projections, then T_y T_x d_a for the read or the grid
        assert a.macs == g.macs == (T_y + T_x) * 6 * 3 + T_y * T_x * 3


def test_recurrence_halves_chains():
    h = lc.recurrence_halves(T_values=(5, 9), d=3).set_index(["T", "part"])
    for T in (5, 9):
        assert tuple(h.loc[(T, "input"), ["products", "rows", "chain"]]) == (1, T, 1)
        assert tuple(h.loc[(T, "recurrence"), ["products", "rows", "chain"]]) == (T, T, T)


def test_encoder_routes_split_the_whole_gradient_and_the_attention_route_is_flat():
    r = lc.encoder_routes(draws=20, T_x=12, d=4)
    att = r[r.route == "attention"]
    assert (att.w_hh_products == 0).all() and len(att) == 12
    assert len(r[r.route == "recurrence"]) == 11                    # the last position has none
    last = r[r.route == "last state"].sort_values("distance")
    assert last.mean_log10_norm.iloc[-1] < last.mean_log10_norm.iloc[0] - 1   # rho = 0.9, tanh
    assert abs(np.polyfit(att.distance, att.mean_log10_norm, 1)[0]) * 11 < 0.5


def test_softmax_jacobian_norm_is_the_explicit_jacobians():
    cfg = LessonConfig(draws=3, d_k_values=(4, 16))
    j = lc.softmax_jacobian(cfg).set_index(["d_k", "scaled"])
    rng = np.random.default_rng(cfg.seed)
    Q, K = rng.normal(size=(3, 6, 16)), rng.normal(size=(3, 6, 16))
    for dk in (4, 16):
        for scaled in (False, True):
            norms = []
            for n in range(3):
                E = Q[n, :, :dk] @ K[n, :, :dk].T / (math.sqrt(dk) if scaled else 1.0)
                per_row = []
                for e in E:
                    a = np.exp(e - e.max())
                    a /= a.sum()
                    per_row.append(np.linalg.norm(np.diag(a) - np.outer(a, a)))
                norms.append(np.mean(per_row))
            assert abs(j.loc[(dk, scaled)].median_norm - np.median(norms)) < 1e-12


def test_kv_shuffle_and_symmetry_and_lengths_in_small_draws():
    k = lc.kv_shuffle(draws=5).groupby("shuffled").max_abs_change
    assert k.max()["K and V together"] < 1e-12 and k.min()["K alone"] > 1e-3
    assert k.max()["X, output unshuffled"] < 1e-12
    s = lc.unprojected_symmetry(draws=5)
    assert (s.score_asymmetry == 0).all() and (s.weight_asymmetry > 0).all()
    u = lc.unequal_lengths(draws=5)
    assert (u.rows_max_on_longest + u.rows_max_on_diagonal <= u.rows).all()


def test_additive_bias_widths_and_score_rows():
    b = lc.additive_bias(draws=3).groupby("added").max_abs_change
    assert b.max()["per-row constant"] < 1e-12 < b.min()["per-column constant"]
    w = lc.additive_widths(widths=((2, 5),))
    assert w.params.iloc[0] == 4 * (2 + 5 + 1) and w.fd_rel_err.iloc[0] < 1e-6
    r = lc.score_gradient_rows(draws=2)
    assert (r.max_abs_row_sum < 1e-7).all() and (r.formula_err < 1e-7).all()


def test_self_attention_shapes():
    s = lc.self_attention_shapes(T_values=(3, 7), d_model=5, d_k=2, d_v=4)
    assert list(s.map_rows) == list(s.map_cols) == list(s.output_rows) == [3, 7]
    assert (s.params == 2 * 5 * 2 + 5 * 4).all()


def test_lesson_additive_figures_are_the_lessons():
    f = lessons.lesson_additive_figures().iloc[0]
    assert f.params == 44 and round(f.mean_row_max, 2) == 0.18
    assert (round(f.value_norm, 4), round(f.score_norm, 4)) == (2.8303, 0.2556)
    assert round(f.value_over_score) == 11 and f.fd_err_both < 1e-8
    assert min(f.fd_err_value, f.fd_err_score) > 0.1 and f.no_tanh_row_spread < 1e-12
