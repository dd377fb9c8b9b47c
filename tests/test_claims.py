"""The claims table: each verdict follows its rule, in both directions, on frames built by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import claims
from harness.analysis.claims import FAILS, HOLDS, QUALIFIED


def _depth(rnn_span, att_span, att_scalar, Ts=(50, 100, 200)):
    rows = [dict(model="rnn", T=T, span=s, scalar_span=0) for T, s in zip(Ts, rnn_span)]
    rows += [dict(model="attention", T=T, span=s, scalar_span=c)
             for T, s, c in zip(Ts, att_span, att_scalar)]
    return {"depth": pd.DataFrame(rows)}


def test_depth_claims_follow_their_rules():
    f = _depth([150, 300, 600], [9, 9, 9], [40, 43, 46])
    assert claims.depth_in_sequence(f)["verdict"] == HOLDS
    assert claims.attention_constant_stages(f)["verdict"] == QUALIFIED     # scalar span grows
    assert claims.depth_in_sequence(_depth([150, 310, 600], [9] * 3, [1] * 3))["verdict"] == FAILS
    assert claims.attention_constant_stages(_depth([1] * 3, [9, 9, 9], [7, 7, 7]))["verdict"] == HOLDS
    assert claims.attention_constant_stages(_depth([1] * 3, [9, 10, 11], [7] * 3))["verdict"] == FAILS


def _schedule(t1, tT, T=800):
    return {"schedule": pd.DataFrame([dict(model="rnn", grain="scalar", T=T, P=1, time=t1),
                                      dict(model="rnn", grain="scalar", T=T, P=T, time=tT)])}


def test_processors_claim_reads_the_speedup():
    row = claims.processors_change_nothing(_schedule(13_107_200, 16_391))
    assert row["verdict"] == FAILS and row["value"] == 13_107_200 / 16_391
    assert "799.7×" in row["measured"]
    assert claims.processors_change_nothing(_schedule(1000, 900))["verdict"] == HOLDS


def _crossover(T, lo, hi, d=512):
    return {"crossover": pd.DataFrame([dict(variant="attention", d=d, measured_T=T, measured_T_lo=lo,
                                            measured_T_hi=hi, extrapolated_T=math.nan,
                                            predicted_T=2 * d)])}


def test_big_product_finishes_first_holds_when_the_timed_crossover_lies_above_d():
    big = claims.big_product_finishes_first
    assert big(_crossover(1058, 957, 1106))["verdict"] == HOLDS       # faster up to 2.07 d
    assert big(_crossover(530, 480, 560))["verdict"] == QUALIFIED      # the interval holds d
    assert big(_crossover(400, 380, 450))["verdict"] == FAILS          # slower before T = d
    row = big(_crossover(1058, 957, 1106))
    assert (row["low"], row["high"]) == (957 / 512, 1106 / 512)
    assert big(_crossover(530, math.nan, math.nan))["verdict"] == QUALIFIED


def test_counts_cross_at_d():
    d = 64
    rows = [dict(model=m, T=T, d=d, macs=2 * T * d * d if m == "rnn" else 2 * T * T * d)
            for m in ("rnn", "attention") for T in (16, 32, 128, 256)]
    row = claims.counts_cross_at_d({"work": pd.DataFrame(rows)})
    assert row["verdict"] == HOLDS and abs(row["value"] - 1.0) < 1e-12


def _row_max(scaled_lo, scaled_hi):
    rows = []
    for dk, (u, s) in ((8, (0.68, scaled_lo)), (512, (0.96, scaled_hi))):
        rows.append(dict(d_k=dk, scaled=False, row_max=u, mean_lo=u - .002, mean_hi=u + .002, draws=2000))
        rows.append(dict(d_k=dk, scaled=True, row_max=s, mean_lo=s - .002, mean_hi=s + .002, draws=2000))
    return {"row_max": pd.DataFrame(rows)}


def test_sqrt_dk_claim_tells_growth_from_a_flat_curve():
    assert claims.sqrt_dk(_row_max(0.410, 0.420))["verdict"] == QUALIFIED
    assert claims.sqrt_dk(_row_max(0.330, 0.486))["verdict"] == HOLDS


def test_decay_claims():
    rhos = (0.5, 0.9, 1.1)
    s = pd.DataFrame([dict(model="rnn", activation=a, weight="orthogonal", input_scale=1.0, T=100,
                           rho=r, ln_rate=math.log(r) - (0.1 if a == "tanh" else 0.0),
                           log10_far=99 * math.log10(r) - (5 if a == "tanh" else 0))
                      for r in rhos for a in ("identity", "tanh")]
                     + [dict(model="attention", activation="softmax", weight=np.nan, input_scale=1.0,
                             T=100, rho=np.nan, ln_rate=1e-4, log10_far=-2.0)])
    f = {"decay_summary": s}
    assert claims.vanishing_with_radius(f)["verdict"] == HOLDS
    assert claims.tanh_makes_it_worse(f)["verdict"] == HOLDS
    assert claims.attention_one_factor(f)["verdict"] == HOLDS          # no level frame: flat
    worse = s.copy()
    worse.loc[(worse.activation == "tanh") & (worse.rho == 0.9), "log10_far"] += 10
    assert claims.tanh_makes_it_worse({"decay_summary": worse})["verdict"] == FAILS
    level = pd.DataFrame([dict(T=T, input_scale=sc, log10_level=-math.log10(T),
                               log10_min=-30 if sc == 4 else -3, log10_max=0.3)
                          for T in (64, 256, 1024) for sc in (1.0, 4.0)])
    row = claims.attention_one_factor({"decay_summary": s, "attention_level": level})
    assert row["verdict"] == QUALIFIED and "T^-1.00" in row["measured"]


def test_lesson_figure_claims():
    diag = pd.DataFrame([dict(rows=6, rows_max_on_diagonal=6)] * 3)
    assert claims.diagonal_without_projections({"attention_diagonal": diag})["verdict"] == HOLDS
    diag.loc[1, "rows_max_on_diagonal"] = 5
    assert claims.diagonal_without_projections({"attention_diagonal": diag})["verdict"] == FAILS
    routes = pd.DataFrame([dict(va_scale=0.5, value_norm=2.83031, score_norm=0.25559)])
    assert claims.additive_routes({"additive_routes": routes})["verdict"] == HOLDS
    routes.loc[0, "score_norm"] = 0.26
    assert claims.additive_routes({"additive_routes": routes})["verdict"] == FAILS


def test_a_claim_whose_frames_are_missing_is_a_row_that_says_so():
    t = claims.claims_table(_depth([150, 300, 600], [9] * 3, [40, 43, 46]))
    assert list(t.columns) == claims.COLUMNS and len(t) == len(claims.CLAIMS)
    judged = t[t.verdict != claims.NOT_MEASURED]
    assert judged.claim.tolist() == ["An RNN's T steps run one after another",
                                     "Attention is a constant number of stages"]
    missing = t.set_index("claim").loc["tanh saturation makes vanishing worse"]
    assert missing.lesson == "goodbye to recurrence" and math.isnan(missing.value)
    assert missing.measured == "not measured: this run has no decay_summary.csv"
    assert t.claim.tolist() == [fn.text for fn in claims.CLAIMS]      # every claim, in order


def test_a_claim_that_reads_a_missing_column_names_the_claim_and_the_column():
    f = _depth([150, 300, 600], [9] * 3, [40, 43, 46])
    f["depth"] = f["depth"].drop(columns="scalar_span")
    with pytest.raises(claims.MissingMeasurement,
                       match=r"^claim attention_constant_stages \('Attention is a constant number "
                             r"of stages'\): its frames have no 'scalar_span'$"):
        claims.claims_table(f)


def test_a_schedule_without_P_equal_T_is_not_measured():
    s = _schedule(1000, 900)
    s["schedule"] = s["schedule"][s["schedule"].P == 1]
    row = claims.processors_change_nothing(s)
    assert row["verdict"] == claims.NOT_MEASURED
    assert row["claim"] == "A machine with 800 processors changes nothing for 800 tokens"
    assert row["measured"] == "not measured: the RNN was not scheduled on both 1 and 800 processors"


# ----------------------------------------------------------------------------- gated recurrences

def _gated_depth(lstm_path, Ts=(50, 100, 200)):
    rows = [dict(model="rnn", T=T, span=3 * T, max_path=3 * T) for T in Ts]
    rows += [dict(model="lstm", T=T, span=7 * T, max_path=p) for T, p in zip(Ts, lstm_path)]
    rows += [dict(model="gru", T=T, span=9 * T, max_path=3 * T + 1) for T in Ts]
    return {"depth": pd.DataFrame(rows)}


def test_gates_did_not_shorten_holds_for_paths_linear_in_T_and_fails_for_a_constant_one():
    row = claims.gates_did_not_shorten(_gated_depth([105, 205, 405]))
    assert row["verdict"] == HOLDS and row["value"] == 405
    assert "LSTM span 7.0·T and path 2.02·T" in row["measured"]
    assert "RNN span 3.0·T and path 3.00·T" in row["measured"]
    flat = claims.gates_did_not_shorten(_gated_depth([5, 5, 5]))    # an attention-like path
    assert flat["verdict"] == FAILS and "not every one grows linearly" in flat["measured"]
    alone = _gated_depth([105, 205, 405])["depth"].query("model != 'gru'")
    row = claims.gates_did_not_shorten({"depth": alone})
    assert row["verdict"] == claims.NOT_MEASURED and "no gru rows" in row["measured"]


def _path(model, k, log10, **keys):
    base = dict(model=model, weight="gaussian", activation="tanh", rho=np.nan, input_scale=1.0,
                T=len(k) + 1, d=4, seed=0, gate_bias=np.nan)
    return pd.DataFrame({**base, **keys, "distance": k, "log10_norm": log10})


def test_survival_distances_are_the_last_k_before_the_norm_falls_3_decades():
    from harness.report import numbers
    k = np.arange(1, 11)
    d = pd.concat([_path("rnn", k, -0.5 * k, weight="orthogonal", rho=0.9),     # -3 at k = 7
                   _path("lstm", k, -0.01 * k, gate_bias=3.0),                  # never: k = 10
                   _path("gru", k, np.r_[0.0, -4.0, np.zeros(8)], gate_bias=0.0)])
    got = numbers.survival_distances(d).set_index("model").distance
    # computed another way: the first k whose norm is more than 3 decades below k = 1, minus 1
    want = {}
    for m, g in d.groupby("model"):
        rel = g.log10_norm.to_numpy() - g.log10_norm.iloc[0]
        fallen = [kk for kk, r in zip(g.distance, rel) if r < -3]
        want[m] = (fallen[0] - 1) if fallen else int(g.distance.max())
    assert got.to_dict() == want == {"rnn": 7, "lstm": 10, "gru": 1}


def test_gates_made_it_survivable_holds_when_a_gated_path_outlives_the_rnn():
    k = np.arange(1, 101)
    rnn = pd.concat([_path("rnn", k, -0.07 * k, weight="orthogonal", rho=r) for r in (0.9, 1.1)])
    lstm = pd.concat([_path("lstm", k, -s * k, gate_bias=b) for b, s in ((0.0, 0.2), (3.0, 0.01))])
    row = claims.gates_made_it_survivable({"decay": pd.concat([rnn, lstm])})
    assert row["verdict"] == HOLDS and row["value"] == 100
    assert "LSTM with its gate bias at 3" in row["measured"] and "the whole sequence" in row["measured"]
    assert "the tanh RNN at best to distance 43" in row["measured"]     # -0.07 (k - 1) >= -3 to k = 43
    assert "at gate bias 0 the gated recurrences reach at most distance 16" in row["measured"]
    worse = pd.concat([_path("lstm", k, -0.2 * k, gate_bias=b) for b in (0.0, 3.0)])
    row = claims.gates_made_it_survivable({"decay": pd.concat([rnn, worse])})
    assert row["verdict"] == FAILS and "did not make the trip survivable" in row["measured"]
    row = claims.gates_made_it_survivable({"decay": rnn})                # a run without them
    assert row["verdict"] == claims.NOT_MEASURED and "no gated recurrence rows" in row["measured"]


# ----------------------------------------------------------------------------- the Transformer layer

def _boxes(mixing, circles=2, rectangles=14):
    n = circles + rectangles
    return {"figure1_boxes": pd.DataFrame({
        "box": [f"b{i}" for i in range(n)], "stack": "encoder",
        "drawn": ["circle"] * circles + ["rectangle"] * rectangles,
        "mixes_positions": [i < mixing for i in range(n)]})}


def test_three_mixing_boxes_hold_with_a_qualification_when_the_figure_has_16():
    row = claims.figure1_three_boxes_mix(_boxes(3))
    assert row["verdict"] == QUALIFIED and row["value"] == 3
    assert "3 of the 16 boxes traced mix positions" in row["measured"]
    assert "14 rectangles and 2 positional-encoding circles" in row["measured"]
    assert claims.figure1_three_boxes_mix(_boxes(3, 1, 14))["verdict"] == HOLDS   # 15 boxes
    assert claims.figure1_three_boxes_mix(_boxes(4))["verdict"] == FAILS


def test_heads_cost_holds_only_when_every_h_costs_the_same():
    h = pd.DataFrame({"heads": [1, 2, 4], "T": 8, "d": 4, "total": [100, 100, 100]})
    row = claims.heads_cost_is_flat({"heads_cost": h})
    assert row["verdict"] == HOLDS and "h = 4: 100 multiplications, the same for every h" in row["measured"]
    row = claims.heads_cost_is_flat({"heads_cost": h.assign(total=[100, 100, 120])})
    assert row["verdict"] == FAILS and row["value"] == 1.2


def _layer_work(q, lin, d=8, Ts=(16, 64)):
    rows = []
    for T in Ts:
        rows.append(dict(model="transformer", T=T, d=d, quadratic=q * T * T, linear=lin * T,
                         macs=q * T * T + lin * T))
        rows.append(dict(model="rnn", T=T, d=d, quadratic=0, linear=2 * d * d * T, macs=2 * d * d * T))
    return {"layer_work": pd.DataFrame(rows)}


def test_layer_crossover_is_where_the_quadratic_part_meets_the_rest():
    from harness.report import numbers
    d, T_eq, ratios = numbers.layer_crossover(_layer_work(q=16, lin=800)["layer_work"])
    # computed another way: q T^2 = l T at T = l / q; the ratio at T = 64 from the counts
    assert (d, T_eq) == (8, 50.0)
    assert ratios == {"rnn": (16 * 64 * 64 + 800 * 64) / (2 * 8 * 8 * 64)}
    row = claims.layer_quadratic_from_d(_layer_work(q=16, lin=800))
    assert row["verdict"] == QUALIFIED and row["value"] == 50 / 8
    assert "only at T = 50 = 6.25·d" in row["measured"]
    assert claims.layer_quadratic_from_d(_layer_work(q=16, lin=160))["verdict"] == HOLDS   # T = 10


# ----------------------------------------------------------------------------- every claim (#24)
# Each rule below on a frame where it holds and on one where it does not, frames built by hand.

def _v(fn, **frames):
    return fn({k: pd.DataFrame(v) for k, v in frames.items()})["verdict"]


def test_every_claim_has_the_lessons_words_and_a_row_in_lesson_order():
    lessons = [fn.lesson for fn in claims.CLAIMS]
    order = ["additive attention", "goodbye to recurrence", "self-attention"]
    firsts = [next(i for i, l in enumerate(lessons) if l.startswith(o)) for o in order]
    assert firsts == sorted(firsts) and firsts[0] == 0
    mine = [fn for fn in claims.CLAIMS if fn.lesson in order]
    assert all(claims.quote(fn) for fn in mine)
    assert len(claims.CLAIMS) >= 45


def test_unmeasured_rows_say_why():
    for fn in (claims.additive_hand_weights, claims.projections_widget):
        row = fn({})
        assert row["verdict"] == claims.NOT_MEASURED and "not measured: " in row["measured"]


def test_no_bias_rule():
    def f(row_change, col_change):
        return dict(additive_bias=[dict(draw=0, added="per-row constant", max_abs_change=row_change),
                                   dict(draw=0, added="per-column constant", max_abs_change=col_change)])
    assert _v(claims.additive_no_bias, **f(1e-16, 0.3)) == HOLDS
    assert _v(claims.additive_no_bias, **f(1e-3, 0.3)) == FAILS


def _widths(err, d_s=3, params=44):
    return dict(additive_widths=[dict(d_s=5, d_h=5, d_a=4, params=params, fd_rel_err=1e-10),
                                 dict(d_s=d_s, d_h=8, d_a=4, params=48, fd_rel_err=err)],
                additive_figures=[dict(params=44)])


def test_widths_and_param_count_rules():
    assert _v(claims.additive_widths_differ, **_widths(1e-10)) == HOLDS
    assert _v(claims.additive_widths_differ, **_widths(1e-3)) == FAILS
    assert claims.additive_widths_differ({"additive_widths": pd.DataFrame(_widths(0, d_s=8)[
        "additive_widths"][:1])})["verdict"] == claims.NOT_MEASURED
    assert _v(claims.additive_param_count, **_widths(0)) == HOLDS
    assert _v(claims.additive_param_count, **_widths(0, params=45)) == FAILS


def _figures(**kw):
    base = dict(params=44, mean_row_max=0.181, uniform=1 / 6, no_tanh_row_spread=5e-17,
                value_norm=2.8303, score_norm=0.2556, value_over_score=11.07, fd_err_both=3e-10,
                fd_err_value=0.16, fd_err_score=0.89)
    return dict(additive_figures=[{**base, **kw}])


def test_additive_figure_rules():
    for fn, bad in ((claims.additive_no_tanh_same_rows, dict(no_tanh_row_spread=1e-3)),
                    (claims.additive_untrained_uniform, dict(mean_row_max=0.25)),
                    (claims.additive_routes_sum, dict(fd_err_value=0.01)),
                    (claims.additive_routes_sum, dict(fd_err_both=1e-5)),
                    (claims.additive_eleven_times, dict(value_over_score=8.0))):
        assert _v(fn, **_figures()) == HOLDS
        assert _v(fn, **_figures(**bad)) == FAILS


def test_score_rows_rule():
    ok = dict(draw=0, max_abs_row_sum=1e-10, max_abs_entry=0.5, formula_err=1e-10)
    assert _v(claims.additive_score_rows_sum_to_zero, score_gradient_rows=[ok]) == HOLDS
    assert _v(claims.additive_score_rows_sum_to_zero,
              score_gradient_rows=[{**ok, "max_abs_row_sum": 0.1}]) == FAILS


def _routes(att_slope):
    rows = []
    for k in range(10):
        rows.append(dict(distance=k, route="attention", mean_log10_norm=-1 + att_slope * k,
                         w_hh_products=0, draws=50))
        rows.append(dict(distance=k, route="last state", mean_log10_norm=-0.2 * k,
                         w_hh_products=k, draws=50))
    return dict(encoder_routes=rows)


def test_routes_skip_whh_rule():
    assert _v(claims.additive_routes_skip_whh, **_routes(0.0)) == HOLDS
    assert _v(claims.additive_routes_skip_whh, **_routes(-0.1)) == FAILS      # 0.9 decades


def test_va_sharpens_rule():
    def f(rm2, ratio2):
        return dict(additive_routes=[dict(va_scale=0.5, row_max=0.18, value_over_score=11.0),
                                     dict(va_scale=2.0, row_max=rm2, value_over_score=ratio2)])
    assert _v(claims.additive_va_sharpens, **f(0.22, 2.6)) == HOLDS
    assert _v(claims.additive_va_sharpens, **f(0.15, 2.6)) == FAILS
    assert _v(claims.additive_va_sharpens, **f(0.22, 12.0)) == FAILS


def _cost(tanh=60 * 60 * 64, grid=0, lo=9.0):
    return dict(additive_cost=[dict(T_y=60, T_x=60, d=64, d_a=64, score="additive", projection_rows=120,
                                    tanh_evaluations=tanh, pair_vectors=3600,
                                    grid_matrix_products=grid, macs=0)],
                additive_timing=[dict(T_y=60, T_x=60, d=64, d_a=64, additive_s=1.0, dot_s=0.1,
                                      ratio=10.0, ratio_lo=lo, ratio_hi=12.0, rounds=9)])


def test_cost_rules():
    assert _v(claims.additive_cost_counts, **_cost()) == HOLDS
    assert _v(claims.additive_cost_counts, **_cost(tanh=3600)) == FAILS
    assert _v(claims.additive_no_big_product, **_cost()) == HOLDS
    assert _v(claims.additive_no_big_product, **_cost(lo=0.9)) == QUALIFIED
    assert _v(claims.additive_no_big_product, **_cost(grid=1)) == FAILS


def test_input_half_rule():
    def f(chain):
        return dict(recurrence_halves=[dict(T=T, d=8, part="input", products=1, rows=T, chain=chain)
                                       for T in (50, 100)]
                    + [dict(T=T, d=8, part="recurrence", products=T, rows=T, chain=T) for T in (50, 100)])
    assert _v(claims.input_half_parallel, **f(1)) == HOLDS
    assert _v(claims.input_half_parallel, **f(2)) == FAILS


def test_kv_shuffle_rule():
    def f(kv, k_alone=0.5, x=1e-16):
        return dict(kv_shuffle=[dict(draw=0, shuffled="K and V together", max_abs_change=kv),
                                dict(draw=0, shuffled="K alone", max_abs_change=k_alone),
                                dict(draw=0, shuffled="X, output unshuffled", max_abs_change=x)])
    assert _v(claims.kv_shuffle_invariance, **f(1e-15)) == QUALIFIED
    assert _v(claims.kv_shuffle_invariance, **f(1e-3)) == FAILS
    assert _v(claims.kv_shuffle_invariance, **f(1e-15, x=0.2)) == FAILS


def _work(att50=2_560_000, att_all50=41_881_600, att2000=4_096_000_000):
    d = 512
    rows = []
    for T, att, att_all in ((50, att50, att_all50), (1000, 1_024_000_000,
                                                      1_024_000_000 + 3 * 1000 * d * d),
                            (2000, att2000, att2000 + 3 * 2000 * d * d)):
        rows.append(dict(model="rnn", T=T, d=d, macs=2 * T * d * d, macs_all=2 * T * d * d))
        rows.append(dict(model="attention", T=T, d=d, macs=att, macs_all=att_all))
    return dict(depth=rows)


def test_work_at_the_lessons_T_rules():
    assert _v(claims.work_at_50, **_work()) == QUALIFIED                  # projections turn it
    assert _v(claims.work_at_50, **_work(att_all50=2_560_000)) == HOLDS
    assert _v(claims.work_at_50, **_work(att50=2_560_001)) == FAILS
    assert _v(claims.work_at_1000_2000, **_work()) == HOLDS
    assert _v(claims.work_at_1000_2000, **_work(att2000=3_000_000_000)) == FAILS


def _shapes(params=(176, 176), err=1e-16, cols=9):
    return dict(self_attention_shapes=[
        dict(T=6, map_rows=6, map_cols=6, output_rows=6, params=params[0], row_sum_err=err),
        dict(T=9, map_rows=9, map_cols=cols, output_rows=9, params=params[1], row_sum_err=err)])


def test_shape_rules():
    assert _v(claims.map_square_rows_one, **_shapes()) == HOLDS
    assert _v(claims.map_square_rows_one, **_shapes(err=1e-3)) == FAILS
    assert _v(claims.map_square_rows_one, **_shapes(cols=8)) == FAILS
    assert _v(claims.params_without_T, **_shapes()) == HOLDS
    assert _v(claims.params_without_T, **_shapes(params=(176, 200))) == FAILS


def test_symmetry_rule():
    ok = dict(draw=0, score_asymmetry=0.0, weight_asymmetry=0.2)
    assert _v(claims.scores_symmetric_weights_not, unprojected_symmetry=[ok]) == HOLDS
    assert _v(claims.scores_symmetric_weights_not,
              unprojected_symmetry=[{**ok, "weight_asymmetry": 0.0}]) == FAILS


def _diag(w1, w3, proj_rows=0):
    return dict(attention_diagonal=[
        dict(setting="no projections, length 1", rows=6, rows_max_on_diagonal=6, mean_self_weight=w1),
        dict(setting="no projections, length 3", rows=6, rows_max_on_diagonal=6, mean_self_weight=w3),
        dict(setting="with projections, length 1", rows=6, rows_max_on_diagonal=proj_rows,
             mean_self_weight=0.16)])


def test_diagonal_rules():
    assert _v(claims.longer_closes_on_diagonal, **_diag(0.35, 0.99)) == HOLDS
    assert _v(claims.longer_closes_on_diagonal, **_diag(0.35, 0.30)) == FAILS
    assert _v(claims.length_one_nearly_even, **_diag(0.2, 0.99)) == HOLDS
    assert _v(claims.length_one_nearly_even, **_diag(0.35, 0.99)) == QUALIFIED
    assert _v(claims.length_one_nearly_even, **_diag(0.6, 0.99)) == FAILS
    assert _v(claims.length_one_nearly_even, **_diag(0.2, 0.5)) == FAILS
    assert _v(claims.projections_look_elsewhere, **_diag(0.35, 0.99)) == HOLDS
    assert _v(claims.projections_look_elsewhere, **_diag(0.35, 0.99, proj_rows=6)) == FAILS


def test_longest_takes_the_row_rule():
    def f(longest):
        return dict(unequal_lengths=[dict(draw=0, rows=5, rows_max_on_longest=longest,
                                          rows_max_on_diagonal=5 - longest)])
    assert _v(claims.longest_takes_the_row, **f(5)) == HOLDS
    assert _v(claims.longest_takes_the_row, **f(3)) == QUALIFIED
    assert _v(claims.longest_takes_the_row, **f(0)) == FAILS


def test_unscaled_saturation_rule():
    def f(top, pct=50.0):
        return dict(row_max=[dict(d_k=8, scaled=False, row_max=0.68, draws=2000),
                             dict(d_k=512, scaled=False, row_max=top, draws=2000)],
                    row_max_lesson=[dict(d_k=8, scaled=False, percentile=7.0),
                                    dict(d_k=512, scaled=False, percentile=pct)])
    assert _v(claims.unscaled_saturates, **f(0.96)) == HOLDS
    assert _v(claims.unscaled_saturates, **f(0.96, pct=99.0)) == QUALIFIED
    assert _v(claims.unscaled_saturates, **f(0.90)) == FAILS


def test_saturation_gradient_rule():
    def f(u512, s512=-0.41):
        return dict(softmax_jacobian=[
            dict(d_k=8, scaled=False, median_norm=0.3, mean_log10_norm=-0.54, draws=2000),
            dict(d_k=512, scaled=False, median_norm=0.05, mean_log10_norm=u512, draws=2000),
            dict(d_k=8, scaled=True, median_norm=0.39, mean_log10_norm=-0.41, draws=2000),
            dict(d_k=512, scaled=True, median_norm=0.39, mean_log10_norm=s512, draws=2000)])
    assert _v(claims.saturation_gradient, **f(-1.88)) == HOLDS
    assert _v(claims.saturation_gradient, **f(-0.9)) == FAILS
    assert _v(claims.saturation_gradient, **f(-1.88, s512=-0.6)) == FAILS


def test_the_docs_table_groups_the_claims_by_lesson_with_their_counts():
    def row(lesson, verdict, quote="las palabras", claim="c"):
        return dict(claim=claim, quote=quote, lesson=lesson, measured="m | n", value=1.0,
                    low=math.nan, high=math.nan, verdict=verdict)
    t = pd.DataFrame([row("self-attention", HOLDS), row("additive attention", FAILS, quote=None),
                      row("self-attention", QUALIFIED),
                      row("goodbye to recurrence, asked of today's models", HOLDS, claim="d"),
                      row("self-attention", HOLDS)])
    got = claims.grouped(t)
    assert [g for g, _, _ in got] == ["additive attention", "self-attention", "today's models"]
    assert got[1][1] == {HOLDS: 2, QUALIFIED: 1} and list(got[1][2].index) == [0, 2, 4]
    md = claims.markdown(t)
    assert "## Self-attention\n\n3 claims: 2 hold, 1 holds with a qualification.\n" in md
    assert "## Additive attention\n\n1 claim: 1 does not hold.\n" in md
    assert "| c | «las palabras» | **holds** | m \\| n |" in md          # a | in a cell escaped
    assert "| c |  | **does not hold** |" in md                           # no quote: no «»
    assert "| d (goodbye to recurrence, asked of today's models) |" in md
    # a lesson no group names is a group of its own, after the lessons'
    other = claims.grouped(pd.concat([t, pd.DataFrame([row("bahdanau", HOLDS)])],
                                     ignore_index=True))
    assert [g for g, _, _ in other][-1] == "bahdanau" and claims.group("bahdanau") == "bahdanau"


# ----------------------------------------------------------------------------- linear attention

LIN = "linear_attention"


def _linear(diff=1e-15, rec=(59, 109, 209), par=(10, 10, 10), chk=(10, 11, 12), Ts=(50, 100, 200)):
    methods = pd.DataFrame([dict(T=T, d=16, decay=dec, dtype="float64", methods=pair,
                                 max_abs_diff=diff if (T, dec) == (65, "selective") else 1e-17,
                                 max_abs_output=2.0)
                            for T in (1, 65, 1000) for dec in ("none", "constant", "selective")
                            for pair in ("recurrent/parallel", "recurrent/chunked")])
    depth = pd.DataFrame([dict(model=m, T=T, d=512, span=s)
                          for m, spans in ((LIN, rec), (f"{LIN}-parallel", par),
                                           (f"{LIN}-chunked", chk)) for T, s in zip(Ts, spans)])
    return {"linear_methods": methods, "depth": depth}


def test_linear_recurrence_or_parallel_rule():
    judge = claims.linear_recurrence_or_parallel
    row = judge(_linear())
    assert row["verdict"] == HOLDS and row["value"] == 1e-15 / 2.0
    assert ("5.0e-16 of max |y| (recurrent/parallel, selective decay, T = 65)" in row["measured"]
            and "from 59 to 209 operations (1.00 per position)" in row["measured"]
            and "from 10 to 12 (0.0133 per position)" in row["measured"]
            and "product's from 10 to 10" in row["measured"] and "T = 1 to 1,000" in row["measured"])
    assert judge(_linear(diff=1e-9))["verdict"] == FAILS                   # not to rounding
    assert judge(_linear(par=(10, 11, 12), chk=(10, 12, 14)))["verdict"] == FAILS   # not constant
    assert judge(_linear(rec=(59, 80, 209)))["verdict"] == FAILS           # not steady per position
    assert judge(_linear(rec=(20, 20, 20), chk=(10, 11, 12)))["verdict"] == FAILS   # not growing
    assert judge(_linear(chk=(10, 60, 210)))["verdict"] == FAILS           # not shorter than the loop
    assert judge(_linear(chk=(9, 11, 12)))["verdict"] == FAILS             # shorter than the product
    with pytest.raises(KeyError):                                          # a form missing
        judge({**_linear(), "depth": _linear()["depth"].query("model != @LIN")})


def _spread(selective=0.53, constant=0.0, none=0.0, top=26.0):
    rows = []
    for s in (1.0, 4.0):
        for dec, dd in (("none", none), ("constant", constant),
                        ("selective", selective if s == 1.0 else top)):
            for k in (16, 256):
                rows.append(dict(input_scale=s, decay=dec, distance=k, log10_median=-1.9,
                                 log10_p05=-2.2, log10_p95=-2.2 + dd, decades=dd if k == 256 else 0.0))
    return {"linear_spread": pd.DataFrame(rows)}


def test_selective_gate_rule():
    judge = claims.selective_gate_depends_on_input
    row = judge(_spread())
    assert row["verdict"] == HOLDS and row["value"] == 0.53
    assert ("at distance 256" in row["measured"] and "spans 0.53 decades" in row["measured"]
            and "(10^-2.20 to 10^-1.67)" in row["measured"]
            and "26.0 at input scale 4" in row["measured"]
            and "none decay 0.00, constant decay 0.00" in row["measured"])
    assert judge(_spread(selective=0.05))["verdict"] == FAILS              # no spread
    assert "(one value for every input)" in row["measured"]
    spread = judge(_spread(constant=0.2))                                  # a constant that spreads
    assert spread["verdict"] == FAILS and "one value for every input" not in spread["measured"]
    assert "the spread is not the gate's alone" in spread["measured"]
    assert judge(_spread(none=1e-9))["verdict"] == FAILS
    assert claims.claims_table({})["claim"].tolist()[-2:] == [
        claims.linear_recurrence_or_parallel.text, claims.selective_gate_depends_on_input.text]


# ----------------------------------------------------------------------------- both sides of the last two rules

@pytest.mark.parametrize("scan_span, verdict", [(10, FAILS), (60, FAILS), (200, HOLDS), (2000, HOLDS)])
def test_scan_rule_fails_where_the_scan_span_is_short(scan_span, verdict):
    """'…and so does every recurrence' does not hold where the scan's span at the largest T is
    under T/10 (a log-depth scan), and holds where it is a sizeable share of T."""
    from harness.report import numbers
    scan = numbers.scan_form()
    d = pd.DataFrame({"model": ["rnn", "lru", scan] * 2, "T": [50] * 3 + [2000] * 3,
                      "span": [150, 100, 12, 6000, 4000, scan_span]})
    row = claims.scan_parallelises({"scan_depth": d})
    assert row["verdict"] == verdict and row["value"] == scan_span
    assert "T = 2,000" in row["measured"]
    if verdict == FAILS:
        assert f"but the same recurrence" in row["measured"]
        assert f"a span of only {scan_span}, about" in row["measured"]
    else:
        assert f"and the same recurrence" in row["measured"] and "but" not in row["measured"]
        assert f"a span of {scan_span:,} too, {scan_span / 2000:.2f}·T" in row["measured"]


def _clipping(total_after=0.0, far_after_big=-2.0, far_after_small=-14.5):
    return pd.DataFrame({"rho": [0.5, 1.5], "threshold": [1.0, 1.0],
                         "log10_total_before": [-0.3, 9.3], "log10_total_after": [-0.3, total_after],
                         "log10_far_over_near_before": [-14.5, -2.0],
                         "log10_far_over_near_after": [far_after_small, far_after_big]})


@pytest.mark.parametrize("kw, verdict", [
    ({}, HOLDS),                                   # capped at the threshold, ratio kept, far vanished
    ({"total_after": 9.3}, FAILS),                 # not capped: explosion not stopped
    ({"far_after_big": -1.0}, FAILS),              # the ratio changed by the clipping
    ({"far_after_small": -1.0}, FAILS),            # the small radius's far end did not vanish
])
def test_clipping_rule_needs_the_cap_the_kept_ratio_and_the_vanished_far_end(kw, verdict):
    row = claims.clipping_stops_explosion_only({"clipping": _clipping(**kw)})
    assert row["verdict"] == verdict
    small = kw.get("far_after_small", -14.5)
    assert row["value"] == small and f"far is still 10^{small:+.1f} of near" in row["measured"]
