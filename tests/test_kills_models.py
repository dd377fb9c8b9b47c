"""The model families' gradient paths, their inputs and the sweep around them, checked another way.

Written against the mutants of harness/models/rnn.py, harness/models/attention.py,
harness/analysis/gradpath.py and harness/analysis/clipping.py that the other tests left alive. Each
expected value comes from somewhere else than the code under test: a closed form
(an orthogonal W_hh with no activation decays exactly as rho^k), a slow loop
twin (``tests/naive.py``), central finite differences, a frame built by hand, a
statistic of the draws, or a second place in the package that must agree.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings

import naive
import numpy as np
import pandas as pd
import pytest

from harness.analysis import clipping, gradpath
from harness.infra.config import DecayConfig
from harness import models
from harness.models import attention as att_family
from harness.models import rnn as rnn_family

LN10 = math.log(10.0)


def _config(**kw):
    """A one-point sweep grid, tiny: T = 6, d = 3, the RNN alone, identity, orthogonal W_hh."""
    base = {"rhos": (0.5,), "activations": ("identity",), "weights": ("orthogonal",),
            "input_scales": (1.0,), "Ts": (6,), "ds": (3,), "models": ("rnn",)}
    return dataclasses.replace(DecayConfig(), **{**base, **kw})


# ============================================================================ inputs

@pytest.mark.parametrize("family", [rnn_family, att_family])
def test_timed_inputs_keep_the_dtype_and_draw_x_unit_and_weights_of_variance_one_over_d(family):
    # X ~ N(0, 1) and every weight ~ N(0, 1/d); the grid variant feeds Q = K = V = X / sqrt(d).
    # d = 64 and 4096 draws per array: a sample std within 10% of the stated one.
    T = d = 64
    for v in family.TIMED:
        args = v.inputs(T, d, np.random.default_rng(7), np.float32)
        assert all(a.dtype == np.float32 for a in args), v.name
        if v.inputs is att_family._grid_inputs:
            (Q,) = args
            assert Q.shape == (T, d)
            assert np.std(Q) == pytest.approx(1 / math.sqrt(d), rel=0.1)
            continue
        X, *W = args
        assert X.shape == (T, d)
        assert np.std(X) == pytest.approx(1.0, rel=0.1), v.name
        for w in W:
            assert w.shape == (d, d)
            assert np.std(w) == pytest.approx(1 / math.sqrt(d), rel=0.1), v.name


def test_rnn_inputs_default_to_one_sequence_from_seed_zero_as_attentions_do():
    # batch 1 is (T, d), no batch axis; both families draw X first from default_rng(seed),
    # so the same seed gives both the same X, and the default seed is the same (0) in both
    X, (W_xh, W_hh) = rnn_family.inputs(5, 3)
    assert X.shape == (5, 3) and W_xh.shape == W_hh.shape == (3, 3)
    np.testing.assert_array_equal(X, np.random.default_rng(0).standard_normal((5, 3)))
    np.testing.assert_array_equal(X, att_family.inputs(5, 3)[0])
    np.testing.assert_array_equal(rnn_family.inputs(5, 3, seed=4)[0], att_family.inputs(5, 3, seed=4)[0])


# ============================================================================ RNN path

def _naive_derivatives(X, W_xh, W_hh):
    """phi'(a_t) of h_t = tanh(W_hh h_{t-1} + W_xh x_t), h_0 = 0, by the loop twin."""
    H = naive.rnn_forward(X, W_xh, W_hh)
    H_prev = np.vstack([np.zeros((1, W_hh.shape[0])), H[:-1]])
    A = H_prev @ W_hh.T + X @ W_xh.T
    return 1.0 - np.tanh(A) ** 2


@pytest.mark.parametrize("ln_scale", [0.0, 1.0, -0.5])
def test_scaled_derivatives_are_tanh_prime_on_the_trajectory_of_the_scaled_matrix(ln_scale):
    # ln_scale = 1.0 (rho = e) is where a test of "ln_scale == 0.0" could go wrong
    rng = np.random.default_rng(3)
    X, W_xh, W_hh = rng.normal(size=(6, 3)), rng.normal(size=(3, 3)) / 2, rng.normal(size=(3, 3)) / 2
    S, m = rnn_family.scaled_derivatives(X, W_xh, W_hh, "tanh", ln_scale)
    want = _naive_derivatives(X, W_xh, math.exp(ln_scale) * W_hh)
    np.testing.assert_allclose(S * np.exp(m)[:, None], want, rtol=1e-12)
    np.testing.assert_array_equal(S.max(axis=1), 1.0)


def test_scaled_derivatives_refuse_an_unknown_activation_instead_of_using_tanh():
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match="activation"):
        rnn_family.scaled_derivatives(rng.normal(size=(4, 2)), np.eye(2), np.eye(2), "relu")


def _orthogonal(d, seed):
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return Q


def test_gradient_norms_of_an_orthogonal_linear_rnn_are_rho_to_the_k():
    # identity activation, W_hh = rho Q: u^T W_hh^k has norm rho^k for a unit u, and so
    # does W_hh^k itself, whatever X and W_xh
    T, d, rho = 7, 3, 0.8
    rng = np.random.default_rng(1)
    X, W_xh = rng.normal(size=(T, d)), rng.normal(size=(d, d))
    W_hh = rho * _orthogonal(d, 2)
    k = np.arange(1, T)
    both = rnn_family.rnn_gradient_norms(X, W_xh, W_hh, "identity", "both")
    for key in ("ln_probe", "ln_spectral", "ln_probe_from_product"):
        np.testing.assert_allclose(both[key], k * math.log(rho), atol=1e-12)
    # measure="probe": the same keys, the ones not computed NaN
    probe = rnn_family.rnn_gradient_norms(X, W_xh, W_hh, "identity", "probe")
    assert set(probe) == {"distance", "ln_probe", "ln_spectral", "ln_probe_from_product"}
    np.testing.assert_array_equal(probe["distance"], k)
    np.testing.assert_allclose(probe["ln_probe"], k * math.log(rho), atol=1e-12)
    assert np.isnan(probe["ln_spectral"]).all() and np.isnan(probe["ln_probe_from_product"]).all()


def test_exact_measure_checks_the_memory_the_sweeps_estimate_names(monkeypatch):
    # the runtime check before the Jacobian product asks for the bytes that path_memory's
    # "exact Jacobian products" stage (checked before a sweep starts) counts: the two agree
    asked = {}
    monkeypatch.setattr(rnn_family, "check_memory", lambda nbytes, what: asked.setdefault(what, nbytes))
    T, d = 9, 4
    rng = np.random.default_rng(0)
    rnn_family.rnn_gradient_norms(rng.normal(size=(T, d)), np.eye(d), 0.5 * np.eye(d), measure="exact")
    (need,) = [n for what, n in asked.items() if "exact Jacobian product" in what]
    stage = rnn_family.path_memory(T, d, _config(measure="exact"))["exact Jacobian products"]
    assert need == stage == 2 * np.empty((T - 1, d, d)).nbytes


def test_rnn_decay_defaults_are_the_sweeps_first_configuration():
    f = rnn_family.rnn_decay()
    cfg = DecayConfig()
    row = f.iloc[0]
    assert (row["T"], row["d"], row["seed"]) == (cfg.Ts[0], cfg.ds[0], cfg.seed)
    assert row["input_scale"] == cfg.input_scales[0]
    assert row["rho"] == 0.9 and 0.9 in cfg.rhos
    assert len(f) == cfg.Ts[0] - 1


def test_sigma_max_is_inf_past_the_largest_double_and_the_bound_stays_finite():
    # gaussian W_hh at radius 1 has sigma_max about 1.18; times rho = 1.7e308 it is past
    # the largest double, so sigma_max is inf, while log10_bound = k log10(sigma_max) is finite
    f = rnn_family.rnn_decay(T=4, d=3, rho=1.7e308, weight="gaussian", activation="identity")
    log10_sigma = f["log10_bound"].iloc[0]
    assert log10_sigma > math.log10(sys.float_info.max)
    assert f["sigma_max"].eq(math.inf).all()
    s = rnn_family.path_summary(f, 0.0)
    assert s["bound_rate"] == pytest.approx(log10_sigma * LN10, rel=1e-12)
    # below the overflow the value is rho * sigma_max(W_unit): 1.0 for orthogonal
    g = rnn_family.rnn_decay(T=4, d=3, rho=1e300, weight="orthogonal", activation="identity")
    assert g["sigma_max"].iloc[0] == pytest.approx(1e300, rel=1e-12)


def test_rnn_bound_rate_is_ln_sigma_max_whichever_distance_comes_first():
    # orthogonal W_hh: sigma_max = rho exactly, and with no activation the norm is rho^k
    rho = 0.7
    f = rnn_family.rnn_decay(T=12, d=4, rho=rho, weight="orthogonal", activation="identity")
    for part in (f, f.iloc[3:]):                 # from k = 1, and from k = 4
        s = rnn_family.path_summary(part, 0.0)
        assert s["bound_rate"] == pytest.approx(math.log(rho), abs=1e-12)
        assert s["fitted_rate"] == pytest.approx(math.log(rho), abs=1e-9)
        assert s["theory_rate"] == pytest.approx(math.log(rho))


def _hand_frame(log10_norm):
    """Rows of one RNN configuration with sigma_max = 1 (rho = 1, orthogonal): the bound is 0."""
    k = np.arange(1, len(log10_norm) + 1)
    return pd.DataFrame({"distance": k, "log10_norm": log10_norm, "log10_probe": log10_norm,
                         "log10_bound": 0.0 * k, "log10_linear": 0.0 * k,
                         "rho": 1.0, "activation": "identity"})


def test_bound_is_respected_up_to_and_including_the_tolerance():
    # a norm exactly 1e-9 (log10) above the bound at k = 1: still within it
    s = rnn_family.path_summary(_hand_frame(np.array([1e-9, 0.0, 0.0])), 0.0)
    assert s["bound_respected"] is True
    s = rnn_family.path_summary(_hand_frame(np.array([2e-9, 0.0, 0.0])), 0.0)
    assert s["bound_respected"] is False
    # a fitted rate exactly bound + 1e-9 = 1e-9 per step: found by stepping one ulp at a time
    step = 1e-9 / LN10
    for _ in range(200):
        norm = np.array([0.0, step, 2 * step])
        rate = rnn_family.path_summary(_hand_frame(norm), 0.0)["fitted_rate"]
        if rate == 1e-9:
            break
        step = np.nextafter(step, math.inf if rate < 1e-9 else -math.inf)
    assert rate == 1e-9
    assert rnn_family.path_summary(_hand_frame(norm), 0.0)["bound_respected"] is True
    over = np.nextafter(step, math.inf) * np.arange(3) * 1.01
    assert rnn_family.path_summary(_hand_frame(over), 0.0)["bound_respected"] is False


def test_torch_peer_gives_the_loop_twins_outputs_every_time_it_is_asked():
    torch = pytest.importorskip("torch")
    X, W = rnn_family.inputs(5, 3, seed=2)
    dH = np.random.default_rng(5).normal(size=(5, 3))
    _, backward, outputs, _ = rnn_family.peers(X, W, dH, torch)["torch"]
    H_want = naive.rnn_forward(X, *W)
    dX_want = naive.rnn_backward(X, H_want, *W, dH)[0]
    backward()
    backward()                                   # timed calls repeat: the graph is kept
    for _ in range(2):
        H, dX = outputs()
        np.testing.assert_allclose(H, H_want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dX, dX_want, rtol=1e-10, atol=1e-12)


# ============================================================================ attention path

def _attention_y_last(X, Wq, Wk, Wv):
    return naive.attention_forward(X, Wq, Wk, Wv)[0][-1]


@pytest.mark.parametrize("chunk", [att_family.PATH_CHUNK, 2])
def test_attention_paths_match_finite_differences_in_any_chunking(monkeypatch, chunk):
    monkeypatch.setattr(att_family, "PATH_CHUNK", chunk)
    T, d = 5, 3
    rng = np.random.default_rng(11)
    X = rng.normal(size=(T, d))
    Wq, Wk, Wv = (rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(3))
    f = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv)
    A = naive.attention_forward(X, Wq, Wk, Wv)[1]
    np.testing.assert_array_equal(f["distance"], np.arange(1, T))
    for k in range(1, T):
        j = T - 1 - k                                           # x_{T-k}, 0-based
        J = np.empty((d, d))
        for c in range(d):                                      # column c: d y_T / d X[j, c]
            Xp, Xm = X.copy(), X.copy()
            Xp[j, c] += 1e-6
            Xm[j, c] -= 1e-6
            J[:, c] = (_attention_y_last(Xp, Wq, Wk, Wv) - _attention_y_last(Xm, Wq, Wk, Wv)) / 2e-6
        row = f[f["distance"] == k].iloc[0]
        assert row["log10_norm"] == pytest.approx(math.log10(np.linalg.norm(J, 2)), abs=1e-6)
        # the value route alone: alpha_Tj Wv^T
        assert row["log10_value"] == pytest.approx(math.log10(A[T - 1, j] * np.linalg.norm(Wv, 2)),
                                                   abs=1e-12)


def test_attention_paths_frame_has_rnn_decays_columns_with_its_own_constants():
    f = att_family.attention_paths(T=2, d=3)                   # the shortest path: one distance
    assert len(f) == 1 and f["distance"].iloc[0] == 1 and f["T"].iloc[0] == 2
    assert np.isfinite(f["log10_norm"]).all()
    r = rnn_family.rnn_decay(T=3, d=2)
    assert list(f.columns) == list(r.columns) == list(models.PATH_COLUMNS)
    assert f["norm_measure"].isna().all()                        # one measure: no choice to name
    assert (f["model"] == "attention").all()
    assert (f["weight"] == "gaussian").all() and (f["activation"] == "softmax").all()
    assert f["rho"].isna().all() and f["sigma_max"].isna().all()


def test_attention_rate_is_fitted_on_every_distance_whatever_fit_from():
    # ln-norm 0, 0, 0, ln 10 at k = 1..4: least squares slope 1.5 ln10 / 5 = 0.3 ln10,
    # while the last two points alone would give ln 10
    g = pd.DataFrame({"distance": [1, 2, 3, 4], "log10_norm": [0.0, 0.0, 0.0, 1.0]})
    for fit_from in (0.0, 0.5, 0.9):
        s = att_family.path_summary(g, fit_from)
        assert s["fitted_rate"] == pytest.approx(0.3 * LN10, rel=1e-12)
        assert s["theory_rate"] == 0.0


# ============================================================================ gradpath

def test_summary_keeps_the_sweeps_order_and_fits_log_rho():
    # rhos listed 1.5 then 0.5: the summary lists them so, not sorted; identity on orthogonal
    # W_hh decays (grows) exactly as rho^k
    frame, summary = gradpath.run_sweep(_config(rhos=(1.5, 0.5)))
    assert summary["rho"].tolist() == [1.5, 0.5]
    assert summary["ln_rate"].tolist() == pytest.approx([math.log(1.5), math.log(0.5)], abs=1e-9)
    again = gradpath.summarise(frame.iloc[::-1], 0.5)          # order of first appearance
    assert again["rho"].tolist() == [0.5, 1.5]


@pytest.mark.parametrize("call", [
    lambda cfg: gradpath.sweep_configurations(cfg),
    lambda cfg: gradpath.stage_memory_bytes(6, 3, cfg),
])
def test_an_unknown_family_in_the_config_is_named_as_the_models_field(call):
    with pytest.raises(ValueError, match=r"^models must be one of .*'nope'"):
        call(_config(models=("rnn", "nope")))


@pytest.mark.parametrize("model", ["rnn", "attention"])
def test_path_levels_run_on_a_config_with_one_job_per_T_and_d(model):
    cfg = _config(rhos=(0.5,))
    lv = gradpath.path_levels(model, Ts=(6,), input_scales=(1.0,), d=3, config=cfg)
    assert len(lv) == 1
    path = {"rnn": lambda: rnn_family.rnn_decay(T=6, d=3, rho=0.5, activation="identity"),
            "attention": lambda: att_family.attention_paths(T=6, d=3)}[model]()
    assert lv["log10_level"].iloc[0] == pytest.approx(path["log10_norm"].mean(), abs=1e-12)
    assert lv["log10_max"].iloc[0] == pytest.approx(path["log10_norm"].max(), abs=1e-12)


# ============================================================================ clipping

def test_residual_reports_a_faulty_rebuild_relative_to_the_clipped_gradient(monkeypatch):
    # the rebuild (the second sum of terms for each rho) made 1.5 times too large:
    # residual = max |Gc - 1.5 Gc| / max |Gc| = 0.5 whatever the gradient's scale,
    # here from max |Gc| about 2 (input_scale 1) down to about 2e-3 (input_scale 1e-3)
    calls = []
    real = clipping._sum_terms

    def faulty(*args):
        calls.append(None)
        return real(*args) * (1.5 if len(calls) % 2 == 0 else 1.0)

    monkeypatch.setattr(clipping, "_sum_terms", faulty)
    for scale in (1.0, 1e-3):
        f = clipping.clipping_experiment(rhos=(0.5, 1.5), T=6, d=3, input_scale=scale)
        assert f["residual"].tolist() == pytest.approx([0.5, 0.5], rel=1e-9)
    monkeypatch.setattr(clipping, "_sum_terms", real)
    f = clipping.clipping_experiment(rhos=(0.5, 1.5), T=6, d=3)
    assert (f["residual"] < 1e-12).all()
    zero = clipping.clipping_experiment(rhos=(0.5,), T=6, d=3, input_scale=0.0)
    assert zero["residual"].tolist() == [0.0]                  # g = 0: nothing to compare



# ============================================================================ second pass

def test_a_config_wrong_in_its_models_and_its_fit_from_names_the_models():
    # validate_config checks the sequences, models among them, before the scalar fields:
    # the refusal names the first faulty field, with the field's own name
    cfg = _config(models=("nope",), fit_from=1.5)
    with pytest.raises(ValueError, match=r"^models must be one of .*'nope'"):
        gradpath.validate_config(cfg)


def test_unit_recurrent_matrix_defaults_to_orthogonal_seed_zero_with_a_positive_r_diagonal():
    # the default is the sweep's: orthogonal, seed 0; Q is QR's Q with each column's sign
    # chosen so that R = Q^T G has a positive diagonal (the unique such QR, Haar-distributed)
    d = 4
    np.testing.assert_array_equal(rnn_family.unit_recurrent_matrix(d),
                                  rnn_family.unit_recurrent_matrix(d, "orthogonal", 0))
    for seed in range(4):          # diagonals of QR's R of either sign, some in (0, 1)
        Q = rnn_family.unit_recurrent_matrix(d, "orthogonal", seed)
        G = np.random.default_rng(seed).normal(size=(d, d))
        np.testing.assert_allclose(Q.T @ Q, np.eye(d), atol=1e-12)
        R = Q.T @ G
        np.testing.assert_allclose(np.tril(R, -1), 0.0, atol=1e-12)
        assert (np.diag(R) > 0).all(), seed


def test_attention_paths_defaults_are_the_sweeps_first_configuration():
    f = att_family.attention_paths()
    cfg = DecayConfig()
    assert (f["T"].iloc[0], f["d"].iloc[0], f["seed"].iloc[0]) == (cfg.Ts[0], cfg.ds[0], cfg.seed)
    assert len(f) == cfg.Ts[0] - 1 and f["input_scale"].iloc[0] == 1.0


def test_overflowing_pre_activations_raise_the_valueerror_alone_with_no_numpy_warning():
    # weights of 1.5e308: tanh saturates (h_t = 1, finite), but W_hh h + W_xh x = 3e308 is
    # past the largest double. The refusal is the ValueError, with no RuntimeWarning before it.
    big = 1.5e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="pre-activations overflow"):
            rnn_family.scaled_derivatives(np.ones((3, 2)), np.full((2, 2), big), np.full((2, 2), big),
                                          "tanh")


def test_a_zero_norm_is_minus_infinity_with_no_numpy_warning():
    # W_hh = diag(0, 1), no activation: every product W_hh^k is diag(0, 1), of spectral norm 1,
    # and the probe e_1 has u^T W_hh^k = 0: ln 0 = -inf, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = rnn_family.rnn_gradient_norms(np.ones((4, 2)), np.eye(2), np.diag([0.0, 1.0]),
                                          "identity", "exact", probe=[1.0, 0.0])
        # X = 0: every score is 0, alpha uniform (1/3), V = y = 0, so the score route is 0
        f = att_family.attention_paths(T=3, d=2, input_scale=0.0)
    np.testing.assert_allclose(r["ln_spectral"], 0.0, atol=1e-12)
    assert np.isneginf(r["ln_probe_from_product"]).all()
    assert f["log10_score"].isna().all()                  # an exactly zero route: NaN, never -inf
    rng = np.random.default_rng([0, 2])
    rng.normal(size=(3, 2))                                             # X, times 0
    Wv = [rng.normal(size=(2, 2)) / math.sqrt(2) for _ in range(3)][2]
    np.testing.assert_allclose(f["log10_value"], math.log10(np.linalg.norm(Wv, 2) / 3), rtol=1e-12)


# ---------------------------------------------------------------- memory estimates
# Each estimate is stated in a MemoryError's message and decides whether a run is refused;
# peakmem's table reports the timed ones (estimate_bytes). The expected values are counted
# from the arrays themselves: the weights trace_weights declares, the timed call's inputs
# and outputs (their nbytes), and the working (T, width) arrays each docstring names.

@pytest.mark.parametrize("d, d_h", [(3, 5), (5, 3)])
def test_rnn_trace_memory_is_two_widest_rows_per_step_twice_the_weights_and_the_step_objects(d, d_h):
    from harness.analysis import trace
    T = 7
    weights = sum(math.prod(shape) for _, shape, _, _ in rnn_family.trace_weights(d, d_h=d_h))
    assert weights == d_h * d + d_h * d_h
    want = trace.BYTES_PER_ELEMENT * (2 * T * max(d, d_h) + 2 * weights) + trace.BYTES_PER_STEP * T
    assert rnn_family.trace_memory_bytes(T, d, d_h=d_h) == want
    assert rnn_family.trace_memory_bytes(T, d) == rnn_family.trace_memory_bytes(T, d, d_h=d)


@pytest.mark.parametrize("d, d_k, d_v", [(5, 3, 2), (2, 5, 3), (3, 2, 5)])
def test_attention_trace_memory_is_four_widest_rows_twice_the_weights_and_five_grids(d, d_k, d_v):
    from harness.analysis import trace
    T, e = 7, trace.BYTES_PER_ELEMENT
    weights = sum(math.prod(shape) for _, shape, _, _ in att_family.trace_weights(d, d_k=d_k, d_v=d_v))
    assert weights == d * (2 * d_k + d_v)
    grid = np.empty((T, T)).nbytes
    want = e * (4 * T * max(d, d_k, d_v) + 2 * weights) + 5 * grid
    assert att_family.trace_memory_bytes(T, d, d_k=d_k, d_v=d_v) == want
    assert att_family.trace_memory_bytes(T, d) == att_family.trace_memory_bytes(T, d, d_k=d, d_v=d)


def _variant(name):
    from harness import models
    return models.variants()[name][1]


def test_rnn_timed_bytes_are_its_inputs_its_output_and_two_more_sequences():
    T, d = 5, 3
    v = _variant("rnn")
    args = v.inputs(T, d, np.random.default_rng(0), np.float64)         # X, W_xh, W_hh
    H = v.call(*args)                                                   # (T, d)
    assert v.bytes(T, d) == sum(a.nbytes for a in args) + 3 * H.nbytes
    assert v.bytes(T, d) == 4 * 5 * 3 * 8 + 2 * 3 * 3 * 8              # 624


def test_attention_timed_bytes_are_three_grids_eight_sequences_and_four_matrices():
    # the call with projections: X and three (d, d) weights in; Y (T, d) and A (T, T) out
    T, d = 5, 3
    for name in ("attention", "attention+proj"):
        v = _variant(name)
        X, Wq, Wk, Wv = _variant("attention+proj").inputs(T, d, np.random.default_rng(0), np.float64)
        Y, A = att_family.attention.forward(X, Wq, Wk, Wv)
        assert v.bytes(T, d) == 3 * A.nbytes + 8 * Y.nbytes + 4 * Wq.nbytes, name
        assert v.bytes(T, d) == 3 * 25 * 8 + 8 * 15 * 8 + 4 * 9 * 8     # 1848


def test_tiled_timed_bytes_are_x_y_l_and_the_tiles():
    T, d = 5, 3
    v = _variant("attention (tiled)")
    (Q,) = v.inputs(T, d, np.random.default_rng(0), np.float64)
    Y, L = v.call(Q)                                                    # (T, d), (T,)
    tiles = att_family.attention.tiled_bytes(1, T, d, d, d, 8)          # one sequence, float64
    assert tiles != att_family.attention.tiled_bytes(2, T, d, d, d, 8)
    assert v.bytes(T, d) == Q.nbytes + Y.nbytes + L.nbytes + tiles


def test_rnn_path_memory_counts_eight_trajectories_and_six_matrices():
    T, d = 5, 3
    cfg = _config(measure="probe")
    stages = rnn_family.path_memory(T, d, cfg)
    assert stages == {"RNN trajectory": 8 * np.empty((T, d)).nbytes,
                      "RNN weights": 6 * np.empty((d, d)).nbytes}


def test_attention_torch_peer_backward_and_outputs_repeat_on_one_graph():
    torch = pytest.importorskip("torch")
    fam = att_family.FAMILY
    X, W = fam.kernels.inputs(40, 4, 1, "float64", 3)
    k = fam.kernel("tiled")
    Y, L = k.forward(X, *W)
    dY = np.random.default_rng(4).normal(size=Y.shape)
    dX = k.backward(X, W, (Y, L), dY).dX
    _, backward, outputs, _ = att_family.tiled_peers(X, W, dY, torch)["torch"]
    backward()
    backward()                                   # timed calls repeat: the graph is kept
    for _ in range(2):
        y, dx = outputs()
        np.testing.assert_allclose(y, Y, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dx, dX, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("scale, causal", [(False, False), (True, True), (False, True)])
def test_tiled_forward_passes_scale_and_causal_on(scale, causal):
    from harness.kernels import attention
    X, W = att_family.FAMILY.kernels.inputs(20, 4, 1, "float64", 5)
    Y, _ = att_family.tiled_forward(X, *W, scale=scale, causal=causal)
    want = attention.forward(X, *W, scale=scale, causal=causal)[0]
    np.testing.assert_allclose(Y, want, rtol=1e-12, atol=1e-14)
    assert not np.allclose(Y, attention.forward(X, *W)[0])     # not the default's answer
