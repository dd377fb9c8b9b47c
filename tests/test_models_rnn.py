"""harness.models.rnn, the RNN family: its gradient path against closed forms (an orthogonal
W_hh with no activation decays exactly as rho^k), explicit Jacobian products and the loop twin
in tests/naive.py; its summary and bound, its inputs, sweep jobs and defaults, its peers
against the compiled kernel, and its memory and FLOP estimates, counted from the arrays
themselves (the weights trace_weights declares, the timed call's inputs and outputs, the
working arrays each docstring names)."""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

import naive
from _helpers import LN10, _close, _config, _rnn_inputs, _torch_or_none, _variant, models_get
from harness.infra import config
from harness.infra.config import DecayConfig
from harness.models import RECURRENCE
from harness.models import attention as att_family
from harness.models import rnn as rnn_family


def _rnn_rows(norm, rho=0.8, sigma=1.6, activation="identity", probe=None):
    k = np.arange(1, len(norm) + 1, dtype=float)
    return pd.DataFrame({"distance": k, "log10_norm": norm,
                         "log10_probe": norm if probe is None else probe,
                         "log10_linear": k * math.log10(rho), "log10_bound": k * math.log10(sigma),
                         "sigma_max": sigma, "rho": rho, "activation": activation})


def test_rnn_path_summary_closed_forms():
    k = np.arange(1, 11, dtype=float)
    # a transient above rho^k that peaks at k = 3, then the rate log(0.8) per step
    norm = k * math.log10(0.8) + np.array([0.1, 0.3, 0.4, 0.2, 0, 0, 0, 0, 0, 0])
    probe = norm - 1.0 + 0.001 * k
    s = rnn_family.path_summary(_rnn_rows(norm, probe=probe), fit_from=0.5)
    assert s["fitted_rate"] == pytest.approx(math.log(0.8), abs=1e-12)
    assert s["fitted_rate_probe"] == pytest.approx(math.log(0.8) + 0.001 * LN10, abs=1e-12)
    assert s["theory_rate"] == pytest.approx(math.log(0.8), abs=1e-15)
    assert s["bound_rate"] == pytest.approx(math.log(1.6), abs=1e-12)
    assert s["log10_transient"] == pytest.approx(0.4, abs=1e-12)
    assert s["bound_respected"] is True
    tanh = rnn_family.path_summary(_rnn_rows(norm, activation="tanh"), fit_from=0.5)
    assert math.isnan(tanh["theory_rate"]) and tanh["bound_rate"] == s["bound_rate"]


@pytest.mark.parametrize("excess,respected", [(0.5e-9, True), (2e-9, False), (-1.0, True)])
def test_rnn_bound_is_respected_within_one_part_in_a_billion(excess, respected):
    k = np.arange(1, 9, dtype=float)
    norm = k * math.log10(0.5)                   # well below the bound k log10 0.9 ...
    norm[2] = 3 * math.log10(0.9) + excess       # ... except at k = 3
    s = rnn_family.path_summary(_rnn_rows(norm, rho=0.5, sigma=0.9), fit_from=0.5)
    assert s["bound_respected"] is respected


@pytest.mark.parametrize("over,respected", [(0.5e-9, True), (2e-9, False)])
def test_rnn_rate_is_within_its_bound_up_to_one_part_in_a_billion_of_the_bound(over, respected):
    # sigma_max = 1e-5: the bound rate ln sigma is -11.5, and the rate sits `over` x 11.5 above
    # it: within one part in a billion of the bound (1.15e-8 here), not 1e-9 absolute
    k = np.arange(1, 21, dtype=float)
    bound = math.log(1e-5)
    norm = k * (bound + over * abs(bound)) / LN10
    s = rnn_family.path_summary(_rnn_rows(norm, rho=1e-5, sigma=1e-5), fit_from=0.5)
    assert s["fitted_rate"] - s["bound_rate"] == pytest.approx(over * abs(bound), rel=1e-4)
    assert s["bound_respected"] is respected


def test_rnn_bound_fails_on_the_rate_alone():
    # every point under the bound, but the fitted rate above it: not respected
    k = np.arange(1, 11, dtype=float)
    norm = -5.0 + k * math.log10(1.5)
    s = rnn_family.path_summary(_rnn_rows(norm, rho=1.2, sigma=1.2), fit_from=0.5)
    assert s["fitted_rate"] > s["bound_rate"] and s["bound_respected"] is False


def test_gradient_norms_probe_is_a_direction_and_defaults_to_the_fixed_one():
    from harness.models.rnn import PROBE_SEED, rnn_gradient_norms
    X, Wx, Wh = _rnn_inputs(T=5)
    u = np.random.default_rng(PROBE_SEED).normal(size=3)
    default = rnn_gradient_norms(X, Wx, Wh, measure="probe")
    scaled = rnn_gradient_norms(X, Wx, Wh, measure="probe", probe=7.0 * u)
    np.testing.assert_allclose(default["ln_probe"], scaled["ln_probe"], rtol=0, atol=1e-13)
    other = rnn_gradient_norms(X, Wx, Wh, measure="probe", probe=np.array([1.0, 0.0, 0.0]))
    assert not np.allclose(default["ln_probe"], other["ln_probe"])
    # T = 2 has one distance; float32 inputs are measured in float64
    two = rnn_gradient_norms(X[:2].astype(np.float32), Wx.astype(np.float32), Wh.astype(np.float32))
    assert two["distance"].tolist() == [1] and two["ln_spectral"].dtype == np.float64


def _tanh_trajectory(X, W_xh, W):
    h, A = np.zeros(W.shape[0]), []
    for x in X:
        a = W @ h + W_xh @ x
        A.append(a)
        h = np.tanh(a)
    return np.array(A)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # reported to the lead
def test_scaled_derivatives_are_the_trajectorys_tanh_slopes():
    X, Wx, Wu = _rnn_inputs(T=6, d=3)
    ln_rho = math.log(1.7)
    S, m = rnn_family.scaled_derivatives(X, Wx, Wu, "tanh", ln_rho)
    A = _tanh_trajectory(X, Wx, 1.7 * Wu)
    # phi'(a_t) on the trajectory of rho W; the caller adds log(rho) where the Jacobian needs it
    np.testing.assert_allclose(np.exp(m)[:, None] * S, 1 - np.tanh(A) ** 2, rtol=1e-12)
    assert (S.max(axis=1) == 1.0).all() and (S > 0).all()
    S, m = rnn_family.scaled_derivatives(X, Wx, Wu, "identity", ln_rho)
    assert (S == 1.0).all() and S.shape == (6, 3) and (m == 0).all() and m.shape == (6,)
    with pytest.raises(ValueError, match="too large"):
        rnn_family.scaled_derivatives(X, Wx, 100 * Wu, "tanh", 709.0)     # rho W overflows


def test_log_dphi_is_exact_where_tanh_rounds_to_one():
    a = np.array([[-3.0, -0.5, 0.0, 0.25, 2.0]])
    np.testing.assert_allclose(rnn_family.log_dphi(a, "tanh"), np.log(1 - np.tanh(a) ** 2),
                               rtol=1e-12, atol=1e-14)
    far = rnn_family.log_dphi(np.array([-40.0, 40.0, 400.0]), "tanh")
    np.testing.assert_allclose(far, [math.log(4) - 80, math.log(4) - 80, math.log(4) - 800],
                               rtol=1e-15)
    assert (rnn_family.log_dphi(a, "identity") == 0).all()


def _explicit_log10_norms(T, d, rho, weight, activation, scale, seed):
    """Spectral norms of dh_T/dh_{T-k}, the Jacobian product written out, on the same draws."""
    from harness.models.rnn import unit_recurrent_matrix
    W = rho * unit_recurrent_matrix(d, weight, seed)
    rng = np.random.default_rng([seed, 1])
    Wx = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * scale
    A = _tanh_trajectory(X, Wx, W)
    dphi = 1 - np.tanh(A) ** 2 if activation == "tanh" else np.ones_like(A)
    P, out = np.eye(d), []
    for k in range(1, T):
        P = P @ (dphi[T - k][:, None] * W)                 # ... J_{T-k+1}, J_t = diag(phi'_t) W
        out.append(math.log10(np.linalg.norm(P, 2)))
    return np.array(out), W


@pytest.mark.parametrize("measure,exact_max_d,used", [("both", 3, "spectral"), ("both", 2, "probe"),
                                                      ("exact", 0, "spectral"), ("probe", 9, "probe")])
def test_rnn_decay_reports_the_norm_it_measured(measure, exact_max_d, used):
    T, d, rho = 6, 3, 1.3
    f = rnn_family.rnn_decay(T=T, d=d, rho=rho, weight="gaussian", activation="tanh",
                             input_scale=2.0, seed=5, measure=measure, exact_max_d=exact_max_d)
    want, W = _explicit_log10_norms(T, d, rho, "gaussian", "tanh", 2.0, 5)
    assert (f.norm_measure == used).all()
    if used == "spectral":
        np.testing.assert_allclose(f.log10_spectral, want, atol=1e-10)
        np.testing.assert_allclose(f.log10_norm, f.log10_spectral)
    else:
        assert f.log10_spectral.isna().all()
        np.testing.assert_allclose(f.log10_norm, f.log10_probe)
    if measure == "exact":
        assert f.log10_probe.isna().all()
    else:
        assert (f.log10_probe <= want + 1e-10).all()           # the probe is a lower bound
    sigma = np.linalg.norm(W, 2)
    assert f.sigma_max.iloc[0] == pytest.approx(sigma, rel=1e-12)
    k = np.arange(1, T)
    np.testing.assert_allclose(f.log10_bound, k * math.log10(sigma), rtol=1e-12)
    np.testing.assert_allclose(f.log10_linear, k * math.log10(rho), rtol=1e-12)
    assert (f.input_scale == 2.0).all() and (f.seed == 5).all() and (f.rho == rho).all()
    assert f.log10_value.isna().all() and f.log10_score.isna().all()


def test_rnn_jobs_path_and_memory_follow_the_config():
    cfg = dataclasses.replace(config.DECAY, rhos=(0.5, 2.0), weights=("gaussian", "orthogonal"),
                              activations=("tanh",), input_scales=(1.0, 3.0), seed=4,
                              measure="both", exact_max_d=2)
    jobs = rnn_family.decay_jobs(cfg, 5, 3)
    assert [(j["weight"], j["input_scale"], j["rho"]) for j in jobs] == [
        ("gaussian", 1.0, 0.5), ("gaussian", 1.0, 2.0), ("gaussian", 3.0, 0.5), ("gaussian", 3.0, 2.0),
        ("orthogonal", 1.0, 0.5), ("orthogonal", 1.0, 2.0), ("orthogonal", 3.0, 0.5),
        ("orthogonal", 3.0, 2.0)]
    assert all(j["model"] == RECURRENCE and j["T"] == 5 and j["d"] == 3
               and j["activation"] == "tanh" for j in jobs)
    got = rnn_family.gradient_path(jobs[3], cfg)
    want = rnn_family.rnn_decay(T=5, d=3, rho=2.0, weight="gaussian", activation="tanh",
                                input_scale=3.0, seed=4, measure="both", exact_max_d=2)
    pd.testing.assert_frame_equal(got, want)
    assert (got.norm_measure == "probe").all()
    assert "exact Jacobian products" not in rnn_family.path_memory(5, 3, cfg)   # d > exact_max_d
    for measure, max_d, exact in (("both", 3, True), ("exact", 0, True), ("probe", 9, False)):
        stages = rnn_family.path_memory(5, 3, dataclasses.replace(cfg, measure=measure,
                                                                  exact_max_d=max_d))
        assert ("exact Jacobian products" in stages) is exact


@pytest.mark.parametrize("batch, dtype", [(1, "float64"), (3, "float64"), (1, "float32")])
def test_rnn_peers_compute_the_kernels_states_and_input_gradient(batch, dtype):
    """Every RNN peer against the compiled kernel: H = forward(X) and dX of the loss <dH, H>."""
    fam = models_get(RECURRENCE)
    X, W = fam.kernels.inputs(5, 3, batch, dtype, 4)
    H = fam.kernels.forward(X, *W)
    dH = np.random.default_rng(1).normal(size=H.shape).astype(dtype)
    dX = fam.kernels.backward(X, W, H, dH).dX
    torch = _torch_or_none()
    impls = rnn_family.peers(X, W, dH, torch)
    fwd, bwd, outputs, both = impls["numpy"]
    _close(fwd(), H, dtype)
    _close(bwd()[0], dX, dtype)
    _close(both()[0], dX, dtype)
    y, dx = outputs()
    _close(y, H, dtype)
    _close(dx, dX, dtype)
    gemm = impls["gemm"]
    assert gemm[2] is None and gemm[0]() is None and gemm[1]() is None
    if torch is None:
        return
    t_fwd, t_bwd, t_out, t_both = impls["torch"]
    y = t_fwd()
    assert y.dtype == getattr(torch, dtype)
    _close(y.reshape(H.shape), H, dtype)
    t_bwd()
    t_bwd()                                        # the graph is kept: a second pass works
    y, dx = t_out()                                # and the gradient starts afresh
    _close(y, H, dtype)
    _close(dx, dX, dtype)
    _close(t_both().detach().numpy().reshape(X.shape), dX, dtype)   # a new graph, both passes


def test_rnn_path_flops_count_the_exact_product_only_where_the_sweep_computes_it():
    """path_flops' docstring: ~10 d^3 (QR or eigenvalues), 4 T d^2 (the probe), 2 T d^3 (the
    exact product) where the sweep computes it, which rnn_decay's norm_measure says."""
    for measure, d, exact_max_d in (("both", 4, 8), ("both", 16, 8), ("probe", 4, 8),
                                    ("exact", 16, 8), ("both", 8, 8)):
        cfg = dataclasses.replace(config.DECAY, measure=measure, exact_max_d=exact_max_d)
        used = rnn_family.rnn_decay(T=5, d=d, measure=measure, exact_max_d=exact_max_d).norm_measure[0]
        exact = used == "spectral"
        T = 50
        assert rnn_family.path_flops(T, d, cfg) == 10 * d**3 + 4 * T * d * d + (2 * T * d**3 if exact else 0)
        assert ("exact Jacobian products" in rnn_family.path_memory(T, d, cfg)) == exact


def test_rnn_defaults_are_the_documented_ones():
    A = np.arange(6.0).reshape(2, 3)
    assert rnn_family.log_dphi(A, "identity").shape == (2, 3)
    assert not rnn_family.log_dphi(A, "identity").any()
    np.testing.assert_array_equal(rnn_family.recurrent_matrix(4, 0.5),
                                  rnn_family.recurrent_matrix(4, 0.5, "orthogonal", 0))


def test_rnn_inputs_default_to_one_sequence_from_seed_zero_as_attentions_do():
    # batch 1 is (T, d), no batch axis; both families draw X first from default_rng(seed),
    # so the same seed gives both the same X, and the default seed is the same (0) in both
    X, (W_xh, W_hh) = rnn_family.inputs(5, 3)
    assert X.shape == (5, 3) and W_xh.shape == W_hh.shape == (3, 3)
    np.testing.assert_array_equal(X, np.random.default_rng(0).standard_normal((5, 3)))
    np.testing.assert_array_equal(X, att_family.inputs(5, 3)[0])
    np.testing.assert_array_equal(rnn_family.inputs(5, 3, seed=4)[0], att_family.inputs(5, 3, seed=4)[0])


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


@pytest.mark.parametrize("d, d_h", [(3, 5), (5, 3)])
def test_rnn_trace_memory_is_two_widest_rows_per_step_twice_the_weights_and_the_step_objects(d, d_h):
    from harness.analysis import trace
    T = 7
    weights = sum(math.prod(shape) for _, shape, _, _ in rnn_family.trace_weights(d, d_h=d_h))
    assert weights == d_h * d + d_h * d_h
    want = trace.BYTES_PER_ELEMENT * (2 * T * max(d, d_h) + 2 * weights) + trace.BYTES_PER_STEP * T
    assert rnn_family.trace_memory_bytes(T, d, d_h=d_h) == want
    assert rnn_family.trace_memory_bytes(T, d) == rnn_family.trace_memory_bytes(T, d, d_h=d)


def test_rnn_timed_bytes_are_its_inputs_its_output_and_two_more_sequences():
    T, d = 5, 3
    v = _variant("rnn")
    args = v.inputs(T, d, np.random.default_rng(0), np.float64)         # X, W_xh, W_hh
    H = v.call(*args)                                                   # (T, d)
    assert v.bytes(T, d) == sum(a.nbytes for a in args) + 3 * H.nbytes
    assert v.bytes(T, d) == 4 * 5 * 3 * 8 + 2 * 3 * 3 * 8              # 624


def test_rnn_path_memory_counts_eight_trajectories_and_six_matrices():
    T, d = 5, 3
    cfg = _config(measure="probe")
    stages = rnn_family.path_memory(T, d, cfg)
    assert stages == {"RNN trajectory": 8 * np.empty((T, d)).nbytes,
                      "RNN weights": 6 * np.empty((d, d)).nbytes}
