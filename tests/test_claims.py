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


def test_wall_time_claim_holds_only_when_the_interval_holds_d():
    assert claims.wall_time_crosses_at_d(_crossover(1058, 957, 1106))["verdict"] == FAILS
    assert claims.wall_time_crosses_at_d(_crossover(530, 480, 560))["verdict"] == HOLDS
    row = claims.wall_time_crosses_at_d(_crossover(1058, 957, 1106))
    assert (row["low"], row["high"]) == (957 / 512, 1106 / 512)
    assert claims.wall_time_crosses_at_d(_crossover(530, math.nan, math.nan))["verdict"] == FAILS


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
