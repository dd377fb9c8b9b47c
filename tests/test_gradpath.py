"""Tests of the gradient-path analyser (harness.analysis.gradpath, harness decay).

Each compiled measure is compared with an obvious NumPy twin written below as
loops (products of explicit Jacobians, BPTT step by step, the additive lesson's
formulas), and with central finite differences in float64.
"""

from __future__ import annotations

import dataclasses
import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from _helpers import LN10, _config
from harness.infra import config, stats
from harness.kernels import attention, rnn
from harness import cli, models
from harness.analysis import clipping, gradpath, lessons
from harness.models import ATTENTION, RECURRENCE, reference
from harness.models import attention as matt
from harness.models import rnn as mrnn
from harness.models import attention as att_family
from harness.models import rnn as rnn_family


# --------------------------------------------------------------------------- naive twins

def naive_jacobian_products(X, W_xh, W_hh, activation):
    """[dh_T/dh_{T-k} for k = 1..T-1] as explicit matrices, no rescaling (small T only)."""
    H = reference.rnn_forward(X, W_xh, W_hh, activation=activation)
    T, d = H.shape
    out = []
    P = np.eye(d)
    for k in range(1, T):
        t = T - k                                   # 0-based state whose Jacobian is appended
        dphi = 1.0 - H[t] ** 2 if activation == "tanh" else np.ones(d)
        P = P @ (np.diag(dphi) @ W_hh)              # J_t = diag(phi'(a_t)) W_hh
        out.append(P.copy())
    return out


def rollout(h_start, X_rest, W_xh, W_hh, activation):
    """h_T from a given state, by running the recurrence step by step."""
    h = h_start
    for x in X_rest:
        a = W_hh @ h + W_xh @ x
        h = np.tanh(a) if activation == "tanh" else a
    return h


def naive_bptt_dWxh(X, W_xh, W_hh, u, activation):
    """dl/dW_xh for l = u.h_T, one step at a time; also each step's term."""
    H = reference.rnn_forward(X, W_xh, W_hh, activation=activation)
    T, d = H.shape
    delta = u.copy()
    terms = [None] * T
    for t in range(T - 1, -1, -1):
        dphi = 1.0 - H[t] ** 2 if activation == "tanh" else np.ones(d)
        da = dphi * delta
        terms[t] = np.outer(da, X[t])
        delta = W_hh.T @ da
    return sum(terms), terms


def lesson_routes(S, H, Wsa, Wha, va, G):
    """The additive lesson's second cell, verbatim in substance: (value, score) routes."""
    def puntua(H):
        P = (S @ Wsa.T)[:, None, :] + (H @ Wha.T)[None, :, :]
        return np.tanh(P) @ va
    alfa = reference.softmax_rows(puntua(H))
    C = alfa @ H
    valor = alfa.T @ G
    dl_de = alfa * (G @ H.T - (G * C).sum(axis=1, keepdims=True))
    P = (S @ Wsa.T)[:, None, :] + (H @ Wha.T)[None, :, :]
    D = dl_de[:, :, None] * va * (1 - np.tanh(P) ** 2)
    return valor, np.einsum("ijk,kl->jl", D, Wha)


def small_rnn(T=7, d=4, rho=1.1, kind="gaussian", scale=1.0, seed=3):
    W_hh = mrnn.recurrent_matrix(d, rho, kind, seed)
    rng = np.random.default_rng(seed + 100)
    W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * scale
    u = rng.normal(size=d)
    return X, W_xh, W_hh, u / np.linalg.norm(u)


# --------------------------------------------------------------------------- W_hh

@pytest.mark.parametrize("kind", ["orthogonal", "gaussian"])
@pytest.mark.parametrize("rho", [0.5, 0.9, 1.0, 1.5])
def test_recurrent_matrix_has_the_requested_spectral_radius(kind, rho):
    W = mrnn.recurrent_matrix(24, rho, kind, seed=5)
    assert abs(np.abs(np.linalg.eigvals(W)).max() - rho) < 1e-12
    sigma = np.linalg.norm(W, 2)
    if kind == "orthogonal":                       # normal: sigma_max = rho
        assert abs(sigma - rho) < 1e-12
    else:                                          # non-normal: sigma_max well above rho
        assert sigma > 1.5 * rho


def test_recurrent_matrix_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rho"):
        mrnn.recurrent_matrix(4, 0.0)
    with pytest.raises(ValueError, match="kind"):
        mrnn.recurrent_matrix(4, 0.9, "unitary")
    with pytest.raises(ValueError, match="d must"):
        mrnn.recurrent_matrix(0, 0.9)


# --------------------------------------------------------------------------- RNN decay

@pytest.mark.parametrize("rho", [0.5, 0.9, 1.0, 1.1, 1.5])
def test_linear_orthogonal_decays_exactly_as_rho_to_the_k(rho):
    df = mrnn.rnn_decay(T=300, d=16, rho=rho, weight="orthogonal", activation="identity",
                            measure="both")
    k = df["distance"].to_numpy()
    np.testing.assert_array_equal(k, np.arange(1, 300))
    expected = k * math.log10(rho)
    assert np.abs(df["log10_spectral"] - expected).max() < 1e-9
    assert np.abs(df["log10_probe"] - expected).max() < 1e-9


def test_T20000_rho09_is_finite_and_correct():
    df = mrnn.rnn_decay(T=20000, d=8, rho=0.9, weight="orthogonal", activation="identity",
                            measure="probe")
    far = df["log10_norm"].iloc[-1]
    assert np.isfinite(df["log10_norm"]).all()
    assert abs(far - 19999 * math.log10(0.9)) < 1e-9       # about -915.1, i.e. 1e-915
    assert -916 < far < -915
    # and the exact product over the same 20000 steps, at a width it affords
    ex = mrnn.rnn_decay(T=20000, d=4, rho=0.9, weight="orthogonal", activation="identity",
                            measure="exact")
    assert abs(ex["log10_spectral"].iloc[-1] - 19999 * math.log10(0.9)) < 1e-9


def test_explosion_is_reported_as_a_log_norm_not_inf():
    df = mrnn.rnn_decay(T=20000, d=8, rho=1.5, weight="gaussian", activation="identity",
                            measure="probe")
    assert np.isfinite(df["log10_norm"]).all()
    # a non-normal W_hh reaches rho^k up to a bounded transient factor
    excess = df["log10_norm"] - df["log10_linear"]
    assert df["log10_norm"].iloc[-1] > 3500 and abs(excess.iloc[-1]) < 3


def test_saturated_tanh_stays_finite():
    # input_scale 100 drives tanh to exactly +-1 in float64; 1 - h^2 would be 0 there
    df = mrnn.rnn_decay(T=400, d=8, rho=0.9, weight="gaussian", activation="tanh",
                            input_scale=100.0)
    assert np.isfinite(df["log10_norm"]).all() and np.isfinite(df["log10_probe"]).all()
    assert df["log10_norm"].iloc[-1] < -1000              # saturation only adds to vanishing


@pytest.mark.parametrize("activation,kind,scale", [("tanh", "gaussian", 1.0), ("tanh", "orthogonal", 3.0),
                                                    ("identity", "gaussian", 1.0)])
def test_both_measures_match_the_explicit_jacobian_product(activation, kind, scale):
    X, W_xh, W_hh, u = small_rnn(T=12, d=5, kind=kind, scale=scale)
    r = mrnn.rnn_gradient_norms(X, W_xh, W_hh, activation, "both", probe=u)
    Ps = naive_jacobian_products(X, W_xh, W_hh, activation)
    spectral = np.log([np.linalg.norm(P, 2) for P in Ps])
    probe = np.log([np.linalg.norm(u @ P) for P in Ps])
    np.testing.assert_allclose(r["ln_spectral"], spectral, rtol=0, atol=1e-9)
    np.testing.assert_allclose(r["ln_probe"], probe, rtol=0, atol=1e-9)


def test_the_two_measures_agree_where_both_apply():
    # tanh, non-normal, moderate d: the probe loss back-propagated in O(T d^2) is the
    # product's u^T P_k, never above the spectral norm, and decays at the same rate
    X, W_xh, W_hh, u = small_rnn(T=400, d=24, rho=1.1, kind="gaussian", scale=1.5, seed=7)
    r = mrnn.rnn_gradient_norms(X, W_xh, W_hh, "tanh", "both", probe=u)
    np.testing.assert_allclose(r["ln_probe"], r["ln_probe_from_product"], rtol=0, atol=1e-8)
    assert (r["ln_probe"] <= r["ln_spectral"] + 1e-9).all()
    rate_p = stats.fit_rate(r["ln_probe"], 0.5)
    rate_s = stats.fit_rate(r["ln_spectral"], 0.5)
    assert rate_s < -0.05                                  # it does decay
    assert abs(rate_p - rate_s) < 0.01 * abs(rate_s)


def test_against_finite_difference_jacobian():
    T, d = 6, 3
    X, W_xh, W_hh, u = small_rnn(T=T, d=d, rho=1.2, kind="gaussian")
    H = reference.rnn_forward(X, W_xh, W_hh, activation="tanh")
    r = mrnn.rnn_gradient_norms(X, W_xh, W_hh, "tanh", "both", probe=u)
    eps = 1e-6
    for k in range(1, T):
        s = T - 1 - k                                      # 0-based index of h_{T-k}
        J = np.empty((d, d))
        for c in range(d):
            hp, hm = H[s].copy(), H[s].copy()
            hp[c] += eps
            hm[c] -= eps
            J[:, c] = (rollout(hp, X[s + 1:], W_xh, W_hh, "tanh")
                       - rollout(hm, X[s + 1:], W_xh, W_hh, "tanh")) / (2 * eps)
        assert abs(r["ln_spectral"][k - 1] - math.log(np.linalg.norm(J, 2))) < 1e-7
        assert abs(r["ln_probe"][k - 1] - math.log(np.linalg.norm(u @ J))) < 1e-7


def test_probe_gradient_matches_the_rnn_kernel_bptt():
    # the distance-T gradient reaches h_0: the kernel's full BPTT returns it as dh0
    X, W_xh, W_hh, u = small_rnn(T=40, d=6, rho=0.95, kind="gaussian")
    h0 = np.zeros(6)
    H = rnn.forward(X, W_xh, W_hh, h0=h0, activation="tanh")
    dH = np.zeros_like(H)
    dH[-1] = u
    g = rnn.backward(X, H, W_xh, W_hh, dH, h0=h0, activation="tanh")
    # dl/dh_0 = W_hh^T (phi'_1 * dl/dh_1); dl/dh_1 is our distance T-1
    r = mrnn.rnn_gradient_norms(X, W_xh, W_hh, "tanh", "probe", probe=u)
    S, m = mrnn.scaled_derivatives(X, W_xh, W_hh, "tanh")
    V, L = mrnn.probe_backward(W_hh, u, S, m)
    dh1 = math.exp(L[0]) * V[0]
    np.testing.assert_allclose(W_hh.T @ ((1 - H[0] ** 2) * dh1), g.dh0, rtol=1e-10, atol=1e-14)
    assert abs(r["ln_probe"][-1] - math.log(np.linalg.norm(dh1))) < 1e-12


def test_summary_rates_against_theory_and_the_bound():
    cfg = gradpath.DecayConfig(rhos=(0.5, 0.9, 1.1), Ts=(200,), ds=(16,), input_scales=(1.0, 4.0),
                               models=("rnn",))
    frame, summary = gradpath.decay_sweep(cfg)
    assert len(summary) == 3 * 2 * 2 * 2
    assert len(frame) == len(summary) * 199
    lin = summary[summary["activation"] == "identity"]
    orth = lin[lin["weight"] == "orthogonal"]
    np.testing.assert_allclose(orth["ln_rate"], np.log(orth["rho"]), atol=1e-12)
    gauss = lin[lin["weight"] == "gaussian"]
    np.testing.assert_allclose(gauss["ln_rate"], np.log(gauss["rho"]), atol=0.01)
    assert (gauss["log10_transient"] > 0.05).all()         # non-normal: growth beyond rho^k
    tanh = summary[summary["activation"] == "tanh"]
    assert tanh["ln_rate_theory"].isna().all()
    np.testing.assert_allclose(tanh["ln_rate_bound"], np.log(tanh["sigma_max"]), atol=1e-12)
    assert (tanh["ln_rate"] <= tanh["ln_rate_bound"]).all()
    assert summary["bound_respected"].all()
    # saturation (larger input scale) decays faster, all else equal
    t = tanh.set_index(["weight", "rho", "input_scale"])["ln_rate"]
    for w in ("orthogonal", "gaussian"):
        for rho in (0.5, 0.9, 1.1):
            assert t[(w, rho, 4.0)] < t[(w, rho, 1.0)]


def test_frame_has_the_tidy_columns():
    frame, summary = gradpath.decay_sweep(gradpath.DecayConfig(
        rhos=(0.9,), Ts=(20,), ds=(4,), input_scales=(1.0,)))
    for col in ["model", "T", "d", "rho", "activation", "weight", "input_scale", "distance",
                "log10_norm"]:
        assert col in frame.columns
    assert set(frame["model"]) == set(models.NAMES)               # every registered family
    assert not frame.duplicated([*models.PATH_KEYS, "distance"]).any()   # one row per configuration and k
    assert {"ln_rate", "ln_rate_theory", "ln_rate_bound"} <= set(summary.columns)


def test_rnn_gradient_norms_rejects_bad_input():
    X, W_xh, W_hh, u = small_rnn(T=5, d=3)
    with pytest.raises(ValueError, match="T >= 2"):
        mrnn.rnn_gradient_norms(X[:1], W_xh, W_hh)
    with pytest.raises(ValueError, match="W_hh"):
        mrnn.rnn_gradient_norms(X, W_xh, W_hh[:2])
    with pytest.raises(ValueError, match="activation"):
        mrnn.rnn_gradient_norms(X, W_xh, W_hh, activation="relu")
    with pytest.raises(ValueError, match="probe"):
        mrnn.rnn_gradient_norms(X, W_xh, W_hh, probe=np.zeros(3))
    with pytest.raises(ValueError, match="rhos"):
        gradpath.decay_sweep(gradpath.DecayConfig(rhos=(-1.0,)))


# --------------------------------------------------------------------------- attention

def test_attention_routes_match_finite_differences_and_the_kernel_backward():
    rng = np.random.default_rng(11)
    T, d = 7, 4
    X = rng.normal(size=(T, d))
    Wq, Wk, Wv = (rng.normal(size=(d, d)) / 2 for _ in range(3))
    Jv, Js = matt.path_jacobians(X, Wq, Wk, Wv)
    eps = 1e-6
    for j in range(T - 1):
        J = np.empty((d, d))
        for c in range(d):
            Xp, Xm = X.copy(), X.copy()
            Xp[j, c] += eps
            Xm[j, c] -= eps
            J[:, c] = (reference.attention_forward(Xp, Wq, Wk, Wv)[0][-1]
                       - reference.attention_forward(Xm, Wq, Wk, Wv)[0][-1]) / (2 * eps)
        np.testing.assert_allclose(Jv[j] + Js[j], J, atol=1e-8)
        assert np.abs(Jv[j] - J).max() > 1e-4 and np.abs(Js[j] - J).max() > 1e-4
    # the kernel's backward with dY nonzero only in row T gives w^T dy_T/dx_j
    w = rng.normal(size=d)
    Y, A = attention.forward(X, Wq, Wk, Wv)
    dY = np.zeros_like(Y)
    dY[-1] = w
    g = attention.backward(X, Wq, Wk, Wv, A, dY)
    np.testing.assert_allclose(np.einsum("v,jvm->jm", w, Jv + Js), g.dX[:T - 1], atol=1e-12)


def test_attention_norm_does_not_decay_with_distance():
    T = 400
    att = matt.attention_paths(T=T, d=16, seed=1)
    rnn_df = mrnn.rnn_decay(T=T, d=16, rho=0.9, weight="orthogonal", activation="tanh", seed=1)
    assert np.isfinite(att["log10_norm"]).all()
    near = att["log10_norm"].iloc[: T // 4].mean()
    far = att["log10_norm"].iloc[-T // 4:].mean()
    assert abs(far - near) < 0.5                            # flat on average, whatever k
    assert abs(stats.fit_rate(att["log10_norm"].to_numpy() * math.log(10), 0.0)) < 1e-3
    assert rnn_df["log10_norm"].iloc[-1] < rnn_df["log10_norm"].iloc[0] - 30
    # x_1 itself, across T-1 positions, is as reachable as its neighbours
    assert att["log10_norm"].iloc[-1] > near - 2


# --------------------------------------------------------------------------- additive

def test_lesson_route_norms():
    df = lessons.lesson_additive_routes((0.5, 2.0)).set_index("va_scale")
    assert round(df.loc[0.5, "value_norm"], 4) == 2.8303
    assert round(df.loc[0.5, "score_norm"], 4) == 0.2556
    assert 10 < df.loc[0.5, "value_over_score"] < 12       # "about 11 times"
    assert df.loc[2.0, "value_over_score"] < df.loc[0.5, "value_over_score"] / 2


def test_additive_routes_match_the_lesson_formulas():
    S, H, Wsa, Wha, va, G = lessons.lesson_additive_inputs(0.5)
    valor, puntuacion = lesson_routes(S, H, Wsa, Wha, va, G)
    r = lessons.additive_routes(S, H, Wsa, Wha, va, G)
    assert abs(r["value_norm"] - np.linalg.norm(valor)) < 1e-12
    assert abs(r["score_norm"] - np.linalg.norm(puntuacion)) < 1e-12


# --------------------------------------------------------------------------- clipping

def clipping_twin(T, d, rho, weight, activation):
    """The clipping experiment's RNN (same draws as gradpath), through the naive BPTT twin:
    (total dl/dW_xh, per-step terms)."""
    W_hh = mrnn.recurrent_matrix(d, rho, weight, 0)
    rng = np.random.default_rng([0, 1])
    W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d))
    u = np.random.default_rng(mrnn.PROBE_SEED).normal(size=d)
    return naive_bptt_dWxh(X, W_xh, W_hh, u / np.linalg.norm(u), activation)


def test_clipping_rescales_every_contribution_by_one_factor():
    T, d, thr = 30, 6, 2.0
    df = clipping.clipping_experiment(rhos=(0.5, 0.9, 1.5), threshold=thr, T=T, d=d,
                                      activation="tanh", weight="gaussian").set_index("rho")
    np.testing.assert_allclose(df["log10_far_over_near_after"], df["log10_far_over_near_before"],
                               atol=1e-12)
    assert (df["residual"] < 1e-12).all()
    # independent BPTT twin: the total gradient and the near/far terms it reports
    for rho in (0.5, 0.9, 1.5):
        total, terms = clipping_twin(T, d, rho, "gaussian", "tanh")
        n = np.linalg.norm(total)
        assert abs(df.loc[rho, "log10_total_before"] - math.log10(n)) < 1e-9
        assert abs(df.loc[rho, "log10_near_before"] - math.log10(np.linalg.norm(terms[T - 2]))) < 1e-9
        assert abs(df.loc[rho, "log10_far_before"] - math.log10(np.linalg.norm(terms[0]))) < 1e-9
        c = min(1.0, thr / n)
        assert abs(df.loc[rho, "log10_clip_factor"] - math.log10(c)) < 1e-9
        assert abs(df.loc[rho, "log10_total_after"] - math.log10(min(n, thr))) < 1e-9
        # after: the terms of the clipped total, from the twin clipped here
        assert abs(df.loc[rho, "log10_near_after"] - math.log10(c * np.linalg.norm(terms[T - 2]))) < 1e-9
        assert abs(df.loc[rho, "log10_far_after"] - math.log10(c * np.linalg.norm(terms[0]))) < 1e-9


def naive_clip_contributions(terms, threshold, per_contribution=False):
    """Norms of each step's term after clipping: the total (right) or each term alone (wrong)."""
    norms = np.array([np.linalg.norm(t) for t in terms])
    if per_contribution:
        return np.minimum(norms, threshold)
    return norms * min(1.0, threshold / np.linalg.norm(sum(terms)))


@pytest.mark.parametrize("rho", [0.5, 1.5])
def test_clipping_acts_on_the_total_not_on_each_contribution(rho):
    # a threshold between the near and the far term: clipping each term alone would move
    # the far/near ratio, clipping the total does not
    T, d = 30, 6
    _, terms = clipping_twin(T, d, rho, "orthogonal", "identity")
    near, far = np.linalg.norm(terms[T - 2]), np.linalg.norm(terms[0])
    thr = math.sqrt(near * far)                             # strictly between the two
    assert min(near, far) < thr < max(near, far)
    row = clipping.clipping_experiment(rhos=(rho,), threshold=thr, T=T, d=d).iloc[0]
    right = np.log10(naive_clip_contributions(terms, thr))
    wrong = np.log10(naive_clip_contributions(terms, thr, per_contribution=True))
    got = np.array([row.log10_far_after, row.log10_near_after])
    np.testing.assert_allclose(got, right[[0, T - 2]], atol=1e-9)
    assert np.abs(got - wrong[[0, T - 2]]).max() > 1.0      # the wrong clip is far off
    assert abs(row.log10_far_over_near_after - row.log10_far_over_near_before) < 1e-9
    assert abs((wrong[0] - wrong[T - 2]) - row.log10_far_over_near_before) > 1.0
    assert row.residual < 1e-12


def test_clip_by_norm_clips_a_plain_array_and_a_huge_one():
    g = np.array([[3.0, 4.0]])
    G, ln_unit = clipping.clip_by_norm(g, 0.0, 1.0)
    np.testing.assert_allclose(G * math.exp(ln_unit), g / 5.0, rtol=1e-15)
    G, ln_unit = clipping.clip_by_norm(g, 0.0, 10.0)        # under the threshold: unchanged
    assert ln_unit == 0.0
    G, ln_unit = clipping.clip_by_norm(g, 1000.0, 2.0)      # ||g|| = 5 e^1000: no overflow
    assert abs(ln_unit + math.log(5.0) - math.log(2.0)) < 1e-12


def test_clipping_experiment_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rhos"):
        clipping.clipping_experiment(rhos=())
    with pytest.raises(ValueError, match="rhos"):
        clipping.clipping_experiment(rhos=(0.9, -1.0))
    with pytest.raises(ValueError, match="input_scale"):
        clipping.clipping_experiment(rhos=(0.9,), input_scale=float("nan"))
    with pytest.raises(ValueError, match="threshold"):
        clipping.clipping_experiment(rhos=(0.9,), threshold=0.0)
    with pytest.raises(ValueError, match="seed"):
        clipping.clipping_experiment(rhos=(0.9,), seed=-1)
    with pytest.raises(ValueError, match="activation"):
        clipping.clipping_experiment(rhos=(0.9,), activation="relu")


def test_clipping_a_zero_gradient_is_quiet(recwarn):
    row = clipping.clipping_experiment(rhos=(0.9,), input_scale=0.0).iloc[0]
    assert row.log10_total_before == -math.inf and row.log10_clip_factor == 0.0
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_public_functions_check_input_scale_and_seed():
    with pytest.raises(TypeError, match="input_scale"):
        mrnn.rnn_decay(T=5, d=2, input_scale="1")
    for f in (mrnn.rnn_decay, matt.attention_paths):
        with pytest.raises(ValueError, match="input_scale"):
            f(T=5, d=2, input_scale=-1.0)
        with pytest.raises(ValueError, match="input_scale"):
            f(T=5, d=2, input_scale=float("inf"))
        with pytest.raises(ValueError, match="seed"):
            f(T=5, d=2, seed=-1)
    with pytest.raises(TypeError, match="input_scale"):
        matt.attention_paths(T=5, d=2, input_scale="1")
    with pytest.raises(ValueError, match="seed"):
        mrnn.recurrent_matrix(3, 0.9, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        gradpath.validate_config(gradpath.DecayConfig(seed=-2))


def test_stage_memory_is_checked_before_any_work(monkeypatch):
    stages = gradpath.stage_memory_bytes(100_000, 4)
    # the attention path reads one row of alpha, in chunks of distances: no T x T stage
    assert not any("grid" in s for s in stages)
    assert stages["attention path Jacobians"] == matt._jacobian_bytes(100_000, 4)
    assert stages["exact Jacobian products"] == 2 * 99_999 * 4 * 4 * 8
    probe = gradpath.DecayConfig(measure="probe")
    assert "exact Jacobian products" not in gradpath.stage_memory_bytes(10, 4, probe)
    rnn_only = gradpath.DecayConfig(models=("rnn",))
    assert "attention path Jacobians" not in gradpath.stage_memory_bytes(10, 4, rnn_only)
    cfg = gradpath.DecayConfig(Ts=(100_000,), ds=(64,), measure="exact")
    with pytest.raises(MemoryError, match="exact Jacobian products"):
        gradpath.check_config_memory(cfg, available=2**30)
    gradpath.check_config_memory(gradpath.DecayConfig(Ts=(100_000,), ds=(64,), measure="probe"),
                                 available=2**30)
    # decay_sweep refuses before it runs a single configuration
    calls = []
    monkeypatch.setattr(gradpath, "available_memory_bytes", lambda: 2**30)
    with pytest.raises(MemoryError):
        gradpath.decay_sweep(cfg, progress=lambda *a: calls.append(a))
    assert calls == []


def test_clipping_stops_explosion_but_does_not_rescue_vanishing():
    df = clipping.clipping_experiment(rhos=(0.5, 1.5), threshold=1.0, T=50, d=8).set_index("rho")
    assert df.loc[1.5, "log10_total_before"] > 5 and abs(df.loc[1.5, "log10_total_after"]) < 1e-12
    assert df.loc[0.5, "log10_far_over_near_after"] < -10


# --------------------------------------------------------------------------- CLI

@pytest.fixture
def decay_only(monkeypatch):
    """cli.main with only this subcommand: build_parser imports every module it lists,
    and these tests should not depend on the other analysers being importable."""
    monkeypatch.setattr(cli, "COMMANDS", {"decay": "harness.commands.decay"})


@pytest.mark.parametrize("argv,needle", [
    (["--rho", "0"], "--rho: rhos must be a finite number > 0"),
    (["--rho", "0.9", "-0.5"], "--rho: rhos must be a finite number > 0"),
    (["--T", "1"], "--T: Ts must be an integer >= 2"),
    (["--activation", "relu"], "--activation"),
    (["--weight", "unitary"], "--weight"),
    (["--d", "0"], "--d: ds must be an integer >= 1"),
    (["--model", "gpt"], "--model: models must be one of"),
    (["--clip-threshold", "0"], "--clip-threshold: threshold must be a finite number > 0"),
    (["--measure", "fast"], "--measure"),
    (["--seed", "-1"], "--seed: seed must be an integer >= 0"),
])
def test_cli_bad_arguments_are_one_line_and_exit_2(argv, needle, tmp_path, capsys, decay_only):
    rc = cli.main(["decay", *argv, "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err
    assert err.count("\n") == 1 and err.startswith("harness decay: error:")
    assert not (tmp_path / "o" / "decay.csv").exists()


def test_cli_too_large_for_memory_fails_before_any_work(tmp_path, capsys, decay_only, monkeypatch):
    # T = 100000 at d = 64: the probe is small, the exact Jacobian products (6.5 GB) are not
    monkeypatch.setattr(gradpath, "available_memory_bytes", lambda: 4 * 2**30)
    ran = []
    monkeypatch.setattr(mrnn, "rnn_decay", lambda *a, **k: ran.append(a))
    out = tmp_path / "new" / "o"
    rc = cli.main(["decay", "--T", "100000", "--d", "64", "--measure", "exact", "--out", str(out),
                   "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("harness decay: error: --T/--d")
    assert "exact Jacobian products" in err
    assert ran == [] and not (tmp_path / "new").exists()


def test_cli_failure_leaves_no_empty_out_dir(tmp_path, capsys, decay_only, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(gradpath, "run_sweep", boom)
    out = tmp_path / "o"
    rc = cli.main(["decay", "--T", "5", "--d", "2", "--out", str(out), "--quiet"])
    assert rc == 130 and not out.exists()
    out.mkdir()                                             # a directory that was there stays
    cli.main(["decay", "--T", "5", "--d", "2", "--out", str(out), "--quiet"])
    assert out.is_dir()


def test_cli_unwritable_out_dir(tmp_path, capsys, decay_only):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = cli.main(["decay", "--T", "5", "--d", "2", "--out", str(blocker / "sub"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--out" in err and err.count("\n") == 1


def test_cli_non_numeric_rho_is_an_argparse_error(capsys, decay_only):
    with pytest.raises(SystemExit) as e:
        cli.main(["decay", "--rho", "abc"])
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_run_writes_the_csvs(tmp_path, capsys, decay_only):
    out = tmp_path / "decay"
    rc = cli.main(["decay", "--rho", "0.9", "1.5", "--T", "40", "--d", "6", "--activation", "tanh",
                   "--input-scale", "1", "--model", "rnn", "attention", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0
    frame = pd.read_csv(out / "decay.csv")
    summary = pd.read_csv(out / "decay_summary.csv")
    assert len(summary) == 2 * 2 + 1                       # 2 rho x 2 weights, + attention
    assert len(frame) == len(summary) * 39
    assert set(frame["distance"]) == set(range(1, 40))
    assert (out / "decay_clipping.csv").exists() and (out / "decay_additive.csv").exists()
    assert "ln_rate" in cap.out and "decay:" in cap.err
    assert not list(out.glob(".*.tmp"))                    # nothing half-written left behind


# --------------------------------------------------------------------------- extreme rho

@pytest.mark.parametrize("measure", ["probe", "exact"])
def test_linear_orthogonal_decay_is_exact_for_any_finite_rho(measure):
    """log10 ||dh_T/dh_{T-k}|| = k log10 rho for rho from 1e-300 to 1e300 (rho Q itself would
    under- or overflow: the analyser keeps rho out of the matrix)."""
    for e in np.linspace(-300, 300, 25):
        rho = 10.0 ** e
        f = mrnn.rnn_decay(T=6, d=4, rho=rho, weight="orthogonal", activation="identity",
                           input_scale=1.0, measure=measure)
        k = f.distance.to_numpy()
        np.testing.assert_allclose(f.log10_norm.to_numpy(), k * math.log10(rho),
                                   rtol=1e-12, atol=1e-9 * max(1.0, abs(e)))
        assert np.isfinite(f.log10_bound).all()


@pytest.mark.parametrize("rho", [1e300, 1.5e308, 1.79e308])
def test_sigma_max_is_finite_up_to_the_largest_double(rho):
    """An orthogonal W_hh at radius rho has sigma_max = rho: finite for every finite rho
    (float64 reaches 1.797e308, past 10^308)."""
    f = mrnn.rnn_decay(T=3, d=4, rho=rho, weight="orthogonal", activation="identity",
                       input_scale=1.0)
    assert f.sigma_max.iloc[0] == pytest.approx(rho, rel=1e-12)


def test_cli_extreme_rho_reproduction(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["decay", "--rho", "1e-200", "1e155", "--T", "5", "--d", "4", "--activation",
                     "identity", "--weight", "orthogonal", "--input-scale", "1", "--no-attention",
                     "--out", str(out), "--quiet"]) == 0
    f = pd.read_csv(out / "decay.csv")
    for rho, step in ((1e-200, -200.0), (1e155, 155.0)):
        g = f[f.rho == rho].sort_values("distance")
        np.testing.assert_allclose(g.log10_norm, step * g.distance, rtol=1e-12)


def test_tanh_trajectory_refuses_a_rho_it_cannot_represent():
    """Near the float64 limit: a clear ValueError or finite numbers, never a NaN."""
    raised = 0
    for rho in (1e300, 1e306, 1e307, 1.7e308):
        try:
            f = mrnn.rnn_decay(T=5, d=4, rho=rho, activation="tanh")
        except ValueError as e:
            assert "too large for a tanh trajectory" in str(e)
            raised += 1
            continue
        assert np.isfinite(f.log10_norm).all(), rho
    assert raised >= 1                                 # 1.7e308 * Q overflows its products
    f = mrnn.rnn_decay(T=5, d=4, rho=1e200, activation="tanh")   # saturated, but finite
    assert np.isfinite(f.log10_norm).all()


def test_a_long_sweep_says_so_before_it_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gradpath, "run_sweep", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert cli.main(["decay", "--d", "4000", "--T", "2", "--no-attention", "--out",
                     str(tmp_path / "o")]) == 130
    err = capsys.readouterr().err
    assert "GFLOP: expect" in err and "minutes" in err
    cfg = gradpath.DecayConfig(ds=(4000,), Ts=(2,), models=("rnn",))
    assert gradpath.stage_memory_bytes(2, 4000, cfg)["RNN weights"] == 6 * 4000 ** 2 * 8


def test_clipping_is_exact_for_any_finite_rho():
    """The linear orthogonal RNN's gradient falls by exactly rho per step, so far/near is
    (T-2) log10 rho + log10(|x_1| / |x_(T-1)|) before and after clipping, for rho far outside
    what rho Q itself can hold."""
    rng = np.random.default_rng([0, 1])
    rng.normal(size=(4, 4))                                       # W_xh, drawn first
    X = rng.normal(size=(6, 4))
    inputs = math.log10(np.linalg.norm(X[0]) / np.linalg.norm(X[4]))
    for rho in (1e-200, 1e-3, 1e3, 1e155):
        row = clipping.clipping_experiment(rhos=(rho,), T=6, d=4).iloc[0]
        for when in ("before", "after"):
            assert row[f"log10_far_over_near_{when}"] == pytest.approx(4 * math.log10(rho) + inputs,
                                                                    rel=1e-12, abs=1e-9)


def test_attention_rows_carry_no_rnn_theory():
    """Attention has no spectral radius: its rows leave rho, the linear RNN's k log10 rho and
    the bound empty (NaN), never a number a plot could draw as a theory line."""
    att = matt.attention_paths(T=6, d=3, seed=2)
    assert att[["rho", "log10_linear", "log10_bound", "log10_probe"]].isna().all().all()
    assert (att.log10_norm == att.log10_spectral).all()


def test_path_levels_of_every_family():
    """Any family's gradient path by T and input scale; an LRU's (linear, diagonal) does not
    depend on its input, and its level is the mean over k of k log10 max|lam| exactly."""
    for name in models.NAMES:
        lv = gradpath.path_levels(name, [9, 17], [0.5, 2.0], 4)
        assert list(lv.columns) == ["model", "T", "d", "input_scale", "log10_level", "log10_min",
                                    "log10_max", "log10_value", "log10_score"], name
        assert len(lv) == 4 and (lv.model == name).all()
        assert (lv.log10_min <= lv.log10_level).all() and (lv.log10_level <= lv.log10_max).all()
    lru = gradpath.path_levels("lru", [9], [0.5, 2.0], 4)
    assert lru.log10_level.iloc[0] == lru.log10_level.iloc[1]
    path = models.get("lru").path.measure(models.get("lru").path.jobs(gradpath.DEFAULT, 9, 4)[0],
                                           gradpath.DEFAULT)
    k = path.distance.to_numpy()
    slope = math.log10(float(path.sigma_max.iloc[0]))
    assert lru.log10_level.iloc[0] == pytest.approx(float(np.mean(k * slope)), abs=1e-9)


# ------------------------------------------------- summaries far out, and routes near zero

@pytest.mark.parametrize("family", ["rnn", "lru"])
@pytest.mark.parametrize("rho,drift", [(0.9, 3.9e-12), (1.1, 2.3e-11)])
def test_bound_respected_is_relative_to_the_size_compared(family, rho, drift):
    # harness decay --T 1000000 --d 2 --rho 0.9 1.1 --activation identity --weight orthogonal:
    # the orthogonal identity RNN's norm is its bound, rho^k; summed in logs over 10^6 steps
    # it comes out 1.8e-7 over -45,757 (3.9e-12 relative; 9.3e-7 over 41,393 at rho = 1.1).
    # An absolute 1e-9 called that a broken bound; 1e-9 relative to the size does not, and
    # still sees an excess of 1e-6 relative.
    from harness.models import lru as mlru
    k = np.arange(1, 10 ** 6, dtype=np.float64)
    bound = k * math.log10(rho)
    cols = dict(rho=rho, activation="identity", sigma_max=rho, log10_bound=bound,
                log10_linear=bound, log10_probe=bound)
    summary = {"rnn": mrnn.path_summary, "lru": mlru.path_summary}[family]
    for excess, respected in ((drift, True), (1e-6, False)):
        norm = bound + excess * np.abs(bound)               # a little over the bound, growing with k
        g = models.path_frame(family, k.astype(np.int64), **{**cols, "log10_norm": norm})
        assert summary(g, 0.5)["bound_respected"] is respected, excess


def test_attention_routes_are_logs_never_minus_infinity():
    # --input-scale 1e-300: the score route alpha_Tj (v_j - y_T) g^T is about 10^-600, past
    # float64: it was written as -inf. Taken in logs it is finite, and its closed form: rank
    # one, alpha_Tj ||v_j - y_T|| ||g||, with the scores (~1e-600) 0, so alpha uniform, and
    # v_j - y_T and g = Wk q_T / sqrt(d) each the unit-scale draws' times 1e-300.
    tiny, unit = (matt.attention_paths(T=40, d=4, input_scale=s, seed=3) for s in (1e-300, 1.0))
    rng = np.random.default_rng([3, 2])
    X = rng.normal(size=(40, 4))
    W = [rng.normal(size=(4, 4)) / 2 for _ in range(3)]
    V = X @ W[2]
    g = W[1] @ (X[-1] @ W[0]) / 2
    want = np.log10(np.linalg.norm(V[:-1] - V.mean(axis=0), axis=1) * np.linalg.norm(g) / 40) - 600
    np.testing.assert_allclose(tiny.log10_score, want[39 - tiny.distance], rtol=0, atol=1e-12)
    for f in (tiny, unit):
        assert np.isfinite(f[["log10_norm", "log10_value", "log10_score"]]).all().all()
    # input scale 100: alpha_Tj below 1e-308 for most j, every log norm was -inf; now finite
    big = matt.attention_paths(T=40, d=4, input_scale=100.0, seed=3)
    assert np.isfinite(big[["log10_norm", "log10_value", "log10_score"]]).all().all()
    assert big.log10_norm.min() < -400
    # input scale 0: q_T = 0 and every v_j = y_T: no score route at all, NaN (not -inf), the
    # value route alpha_Tj Wv^T with alpha uniform
    zero = matt.attention_paths(T=40, d=4, input_scale=0.0, seed=3)
    assert zero.log10_score.isna().all() and not np.isinf(zero.log10_score).any()
    np.testing.assert_allclose(zero.log10_value, math.log10(np.linalg.norm(W[2], 2) / 40), rtol=1e-12)
    np.testing.assert_allclose(zero.log10_norm, zero.log10_value, rtol=1e-12)
    with pytest.raises(ValueError, match=r"scores q_T \. k_j overflow float64 .* input_scale=1e\+160"):
        matt.attention_paths(T=40, d=4, input_scale=1e160, seed=3)


def test_summarise_reads_each_configuration_sorted_by_distance():
    from harness.analysis import gradpath
    rows = []
    for rho, M in ((0.5, 1.0), (0.9, 2.0)):
        for k in (3, 1, 4, 2):                                   # stored out of order
            rows.append(dict(model=RECURRENCE, weight="orthogonal", activation="identity",
                             rho=rho, input_scale=1.0, T=5, d=2, seed=0, gate_bias=np.nan,
                             sigma_max=rho * (5 - k),
                             distance=k, log10_norm=-M * k, log10_probe=-M * k,
                             log10_linear=k * math.log10(rho), log10_bound=k * math.log10(rho)))
    s = gradpath.summarise(pd.DataFrame(rows), fit_from=0.0)
    assert list(s.columns) == gradpath.SUMMARY and len(s) == 2
    for r, (rho, M) in zip(s.itertuples(), ((0.5, 1.0), (0.9, 2.0))):
        assert r.rho == rho
        assert r.sigma_max == rho * 4                            # the k = 1 row's
        assert r.log10_near == -M and r.log10_far == -4 * M
        assert r.ln_rate == pytest.approx(-M * LN10)
        assert r.ln_rate_theory == pytest.approx(math.log(rho))


def test_sweep_jobs_and_stage_memory():
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, rhos=(0.5, 2.0), activations=("tanh",),
                              weights=("gaussian",), input_scales=(1.0, 3.0), Ts=(5, 7), ds=(2,),
                              models=(RECURRENCE, ATTENTION), measure="probe")
    jobs = gradpath.sweep_configurations(cfg)
    rnn = [(j["T"], j["input_scale"], j["rho"]) for j in jobs if j["model"] == RECURRENCE]
    assert rnn == [(5, 1.0, 0.5), (5, 1.0, 2.0), (5, 3.0, 0.5), (5, 3.0, 2.0),
                   (7, 1.0, 0.5), (7, 1.0, 2.0), (7, 3.0, 0.5), (7, 3.0, 2.0)]
    assert [j["model"] for j in jobs[:6]] == [RECURRENCE] * 4 + [ATTENTION] * 2
    stages = gradpath.stage_memory_bytes(7, 2, cfg)
    assert set(stages) >= {"RNN trajectory", "attention path Jacobians"}
    need = max(stages.values())
    with mock.patch.object(gradpath, "stage_memory_bytes", lambda T, d, c: {"big stage": need}):
        gradpath.check_config_memory(cfg, available=need)
        with pytest.raises(MemoryError, match=r"T=5, d=2: stage 'big stage' needs [\d,]+ bytes"):
            gradpath.check_config_memory(cfg, available=need - 1)
    frame, summary = gradpath.decay_sweep(cfg)
    assert len(summary) == 12 and len(frame) == 4 * 4 + 4 * 6 + 2 * 4 + 2 * 6
    calls = []
    gradpath.decay_sweep(dataclasses.replace(cfg, Ts=(5,)), progress=lambda i, n, j: calls.append((i, n)))
    assert calls == [(i, 6) for i in range(6)]


@pytest.mark.parametrize("fit_from,ok", [(0.0, True), (0.99, True), (1.0, False), (-0.01, False)])
def test_fit_from_must_lie_in_zero_one(fit_from, ok):
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, Ts=(5,), ds=(2,), fit_from=fit_from)
    if ok:
        gradpath.validate_config(cfg)
    else:
        with pytest.raises(ValueError, match="fit_from"):
            gradpath.validate_config(cfg)


def test_path_levels_summarise_each_length_and_input_scale():
    from harness.analysis import gradpath
    from harness.models.attention import attention_paths
    from harness.models.rnn import rnn_decay
    cfg = dataclasses.replace(config.DECAY, seed=3, rhos=(0.7, 0.9), weights=("gaussian",),
                              activations=("tanh",), measure="probe")
    lv = gradpath.path_levels(ATTENTION, (4, 6), (1.0, 3.0), 2, cfg)
    assert list(zip(lv["T"], lv.input_scale)) == [(4, 1.0), (4, 3.0), (6, 1.0), (6, 3.0)]
    assert (lv.model == ATTENTION).all() and (lv.d == 2).all()
    for r in lv.itertuples():
        p = attention_paths(T=r.T, d=2, input_scale=r.input_scale, seed=3)
        assert r.log10_level == pytest.approx(p.log10_norm.mean(), abs=1e-12)
        assert r.log10_min == pytest.approx(p.log10_norm.min(), abs=1e-12)
        assert r.log10_max == pytest.approx(p.log10_norm.max(), abs=1e-12)
        assert r.log10_value == pytest.approx(p.log10_value.mean(), abs=1e-12)
        assert r.log10_score == pytest.approx(p.log10_score.mean(), abs=1e-12)
    lv = gradpath.path_levels(RECURRENCE, (5,), (2.0,), 3, cfg)
    p = rnn_decay(T=5, d=3, rho=0.7, weight="gaussian", activation="tanh", input_scale=2.0,
                  seed=3, measure="probe")
    r = lv.iloc[0]
    assert r.log10_level == pytest.approx(p.log10_norm.mean(), abs=1e-12)
    assert (r.log10_min, r.log10_max) == pytest.approx((p.log10_norm.min(), p.log10_norm.max()))
    assert math.isnan(r.log10_value) and math.isnan(r.log10_score)
    with pytest.raises(ValueError, match="model"):
        gradpath.path_levels("gpt", (4,), (1.0,), 2, cfg)


def test_sweep_frame_is_numbered_afresh_and_summarised_from_its_fit_window():
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, Ts=(12,), ds=(3,), models=("rnn",), rhos=(0.5, 0.9),
                              weights=("gaussian",), activations=("tanh",), input_scales=(1.0,),
                              measure="probe", fit_from=0.75)
    frame, summary = gradpath.decay_sweep(cfg)
    assert list(frame.index) == list(range(len(frame)))
    pd.testing.assert_frame_equal(summary, gradpath.summarise(frame, 0.75))
    assert not summary.ln_rate.equals(gradpath.summarise(frame, 0.0).ln_rate)


def test_config_memory_names_the_largest_stage_in_GiB():
    from harness.analysis import gradpath
    cfg = dataclasses.replace(config.DECAY, Ts=(100,), ds=(64,), models=("rnn", "attention"),
                              measure="both", exact_max_d=128)
    stages = gradpath.stage_memory_bytes(100, 64, cfg)
    stage, need = max(stages.items(), key=lambda kv: kv[1])
    assert stage != max(stages)                                 # not simply the last name
    with pytest.raises(MemoryError) as e:
        gradpath.check_config_memory(cfg, available=2**30 // 1024)
    assert str(e.value) == (f"T=100, d=64: stage {stage!r} needs {need:,} bytes "
                            f"({need / 2**30:.2f} GiB) but only 0.00 GiB are available; "
                            f"use a smaller T or d")
    long = dataclasses.replace(cfg, Ts=(300000,))
    need = max(gradpath.stage_memory_bytes(300000, 64, long).values())
    with pytest.raises(MemoryError) as e:
        gradpath.check_config_memory(long, available=2**29)
    assert f"({need / 2**30:.2f} GiB) but only 0.50 GiB are available" in str(e.value)
    with pytest.raises(ValueError, match="models"):
        gradpath.validate_config(dataclasses.replace(cfg, models=("nope",)))
    with pytest.raises(ValueError, match="model must be one of"):
        gradpath.path_levels("nope", (8,), (1.0,), 4)


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


def test_a_config_wrong_in_its_models_and_its_fit_from_names_the_models():
    # validate_config checks the sequences, models among them, before the scalar fields:
    # the refusal names the first faulty field, with the field's own name
    cfg = _config(models=("nope",), fit_from=1.5)
    with pytest.raises(ValueError, match=r"^models must be one of .*'nope'"):
        gradpath.validate_config(cfg)


def test_a_familys_path_frame_without_the_declared_columns_is_named_by_the_sweep(monkeypatch):
    import dataclasses
    from harness import models
    fam = models.get("rnn")
    bad = dataclasses.replace(fam.path, measure=lambda job, config: pd.DataFrame({"k": [1]}))
    monkeypatch.setattr(models, "get", lambda name, arg="model": dataclasses.replace(fam, path=bad))
    with pytest.raises(ValueError, match=r"^the gradient path of rnn must have column 'model' at "
                                         r"position 0, got 'k'"):
        gradpath.measure({"model": "rnn"}, gradpath.DecayConfig())
