"""The gated families' gradient path (``harness.models.lstm``, ``harness.models.gru``,
``harness.models._gated``): the step Jacobians against finite differences of one step, the
renormalised product against the plain one, the full path against the compiled backward,
and the additive route against the gates computed another way."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.special import expit

from harness import gru, lstm
from harness.infra.config import DecayConfig
from harness.models import PATH_COLUMNS, _gated, reference
from harness.models import gru as gru_family
from harness.models import lstm as lstm_family


def _lstm_case(T=7, d=3, bias=1.0, scale=1.0, seed=4):
    X, W_ih, W_hh, b = _gated.trajectory_inputs(T, d, 4, bias, scale, seed)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih=b)
    return X, W_ih, W_hh, b, H, C


def _gru_case(T=7, d=3, bias=1.0, scale=1.0, seed=4):
    X, W_ih, W_hh, b = _gated.trajectory_inputs(T, d, 3, bias, scale, seed)
    return X, W_ih, W_hh, b, gru.forward(X, W_ih, W_hh, b_ih=b)


def _lstm_step(x, h, c, W_ih, W_hh, b):
    """One step of the NumPy reference: (h_t, c_t) from (h_{t-1}, c_{t-1})."""
    H, C = reference.lstm_forward(x[None], W_ih, W_hh, b, np.zeros_like(b), h, c)
    return np.concatenate([H[0], C[0]])


def _gru_step(x, h, W_ih, W_hh, b):
    return reference.gru_forward(x[None], W_ih, W_hh, b, np.zeros_like(b), h)[0]


def test_lstm_step_jacobians_are_finite_differences_of_one_step():
    X, W_ih, W_hh, b, H, C = _lstm_case()
    J, log_f = lstm_family.step_jacobians(X, H, C, W_ih, W_hh, b)
    d, eps = 3, 1e-6
    for t in (1, 4, 6):
        s = np.concatenate([H[t - 1], C[t - 1]])
        fd = np.empty((2 * d, 2 * d))
        for j in range(2 * d):
            e = np.zeros(2 * d)
            e[j] = eps
            fd[:, j] = (_lstm_step(X[t], *np.split(s + e, 2), W_ih, W_hh, b)
                        - _lstm_step(X[t], *np.split(s - e, 2), W_ih, W_hh, b)) / (2 * eps)
        np.testing.assert_allclose(J[t], fd, rtol=1e-6, atol=1e-9)
        a = X[t] @ W_ih.T + H[t - 1] @ W_hh.T + b
        np.testing.assert_allclose(log_f[t], np.log(expit(a[d:2 * d])), rtol=1e-12)


def test_gru_step_jacobians_are_finite_differences_of_one_step():
    X, W_ih, W_hh, b, H = _gru_case()
    J, log_z = gru_family.step_jacobians(X, H, W_ih, W_hh, b)
    d, eps = 3, 1e-6
    for t in (1, 4, 6):
        fd = np.empty((d, d))
        for j in range(d):
            e = np.zeros(d)
            e[j] = eps
            fd[:, j] = (_gru_step(X[t], H[t - 1] + e, W_ih, W_hh, b)
                        - _gru_step(X[t], H[t - 1] - e, W_ih, W_hh, b)) / (2 * eps)
        np.testing.assert_allclose(J[t], fd, rtol=1e-6, atol=1e-9)
        a = X[t] @ W_ih.T + H[t - 1] @ W_hh.T + b
        np.testing.assert_allclose(log_z[t], np.log(expit(a[d:2 * d])), rtol=1e-12)


def test_route_norms_are_the_plain_product_and_the_gates_product():
    rng = np.random.default_rng(0)
    T, d = 9, 2
    J = rng.normal(size=(T, 2 * d, 2 * d)) * 0.6
    gate = rng.uniform(0.2, 0.9, size=(T, d))
    full, route = _gated.route_norms(lambda lo, hi: J[lo:hi], T, d, np.log(gate))
    for k in range(1, T):
        P = np.eye(2 * d)
        for t in range(T - 1, T - 1 - k, -1):               # J[T-1] ... J[T-k]
            P = P @ J[t]
        np.testing.assert_allclose(full[k - 1], np.log10(np.linalg.norm(P[:d, :d], 2)), atol=1e-12)
        np.testing.assert_allclose(route[k - 1], np.log10(gate[T - k:].prod(axis=0).max()),
                                   atol=1e-12)


def test_route_norms_in_chunks_are_the_whole_product(monkeypatch):
    rng = np.random.default_rng(3)
    T, d = 23, 2
    J = rng.normal(size=(T, 2 * d, 2 * d)) * 0.7
    gate = np.log(rng.uniform(0.2, 0.9, size=(T, d)))
    whole = _gated.route_norms(lambda lo, hi: J[lo:hi], T, d, gate)
    asked = []
    monkeypatch.setattr(_gated, "CHUNK", 5)
    parts = _gated.route_norms(lambda lo, hi: asked.append((lo, hi)) or J[lo:hi], T, d, gate)
    assert asked == [(18, 23), (13, 18), (8, 13), (3, 8), (1, 3)]   # from the end, J[0] never
    np.testing.assert_allclose(parts[0], whole[0], rtol=1e-12)
    np.testing.assert_allclose(parts[1], whole[1], rtol=1e-12)


def test_step_jacobians_of_a_range_are_the_rows_of_the_whole():
    X, W_ih, W_hh, b, H, C = _lstm_case(T=9)
    J = lstm_family.step_jacobians(X, H, C, W_ih, W_hh, b)[0]
    np.testing.assert_allclose(lstm_family.step_jacobians(X, H, C, W_ih, W_hh, b, 3, 7)[0], J[3:7],
                               rtol=1e-13)
    X, W_ih, W_hh, b, H = _gru_case(T=9)
    J = gru_family.step_jacobians(X, H, W_ih, W_hh, b)[0]
    np.testing.assert_allclose(gru_family.step_jacobians(X, H, W_ih, W_hh, b, 0, 4)[0], J[:4],
                               rtol=1e-13)


def test_route_norms_stay_finite_far_below_float64():
    T, d = 3000, 2
    J = np.tile(np.eye(2 * d) * 0.5, (T, 1, 1))              # 0.5^k: 10^-903 at k = 2999
    full, route = _gated.route_norms(lambda lo, hi: J[lo:hi], T, d, np.full((T, d), np.log(0.5)))
    np.testing.assert_allclose(full, np.arange(1, T) * np.log10(0.5), rtol=1e-12)
    np.testing.assert_allclose(route, np.arange(1, T) * np.log10(0.5), rtol=1e-12)


def test_lstm_full_path_is_the_compiled_backwards_dh0():
    """u^T dh_T/dh_1 from the kernel's backward (the sequence from step 2 on, h0 = h_1,
    c0 = c_1, dl/dh_T = u) against the product the path measures, unrenormalised."""
    X, W_ih, W_hh, b, H, C = _lstm_case(T=8, d=3)
    J, _ = lstm_family.step_jacobians(X, H, C, W_ih, W_hh, b)
    P = np.eye(6)
    for t in range(7, 0, -1):                                # J[7] ... J[1]: distance T-1
        P = P @ J[t]
    u = np.array([0.3, -1.0, 0.7])
    dH = np.zeros((7, 3))
    dH[-1] = u
    g = lstm.backward(X[1:], H[1:], C[1:], W_ih, W_hh, dH, b_ih=b, h0=H[0], c0=C[0])
    np.testing.assert_allclose(g.dh0, u @ P[:3, :3], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(g.dc0, u @ P[:3, 3:], rtol=1e-10, atol=1e-13)


def test_gru_full_path_is_the_compiled_backwards_dh0():
    X, W_ih, W_hh, b, H = _gru_case(T=8, d=3)
    J, _ = gru_family.step_jacobians(X, H, W_ih, W_hh, b)
    P = np.eye(3)
    for t in range(7, 0, -1):
        P = P @ J[t]
    u = np.array([0.3, -1.0, 0.7])
    dH = np.zeros((7, 3))
    dH[-1] = u
    g = gru.backward(X[1:], H[1:], W_ih, W_hh, dH, b_ih=b, h0=H[0])
    np.testing.assert_allclose(g.dh0, u @ P, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("family, decay", [(lstm_family, lstm_family.lstm_decay),
                                           (gru_family, gru_family.gru_decay)])
def test_decay_frames_and_jobs(family, decay):
    f = decay(T=40, d=4, gate_bias=3.0, input_scale=2.0, seed=1)
    assert tuple(f.columns) == PATH_COLUMNS and len(f) == 39
    assert (f.gate_bias == 3.0).all() and (f.input_scale == 2.0).all() and f.rho.isna().all()
    # the additive route alone decays by the product of gates below 1: it never rises
    assert (np.diff(f.log10_gated) <= 0).all()
    cfg = DecayConfig(input_scales=(1.0, 4.0))
    jobs = family.FAMILY.path.jobs(cfg, 40, 4)
    assert [(j["input_scale"], j["gate_bias"]) for j in jobs] == [
        (s, b) for s in (1.0, 4.0) for b in _gated.GATED.gate_biases]
    mine = dataclasses.replace(cfg, path_options=((family.FAMILY.name, _gated.GatedOptions((5.0,))),))
    assert [j["gate_bias"] for j in family.FAMILY.path.jobs(mine, 40, 4)] == [5.0, 5.0]


def test_a_larger_gate_bias_keeps_more_of_the_signal():
    """The lesson's 'survivable': with the forget gate biased open, the far gradient is larger."""
    far = [lstm_family.lstm_decay(T=200, d=8, gate_bias=b).log10_norm.iloc[-1] for b in (0.0, 3.0)]
    assert far[1] > far[0] + 10


@pytest.mark.parametrize("decay", [lstm_family.lstm_decay, gru_family.gru_decay])
def test_bad_arguments_are_named(decay):
    for kw, word in (({"T": 1}, "T"), ({"d": 0}, "d"), ({"gate_bias": float("nan")}, "gate_bias"),
                     ({"input_scale": "x"}, "input_scale"), ({"seed": -1}, "seed")):
        with pytest.raises((ValueError, TypeError), match=word):
            decay(**kw)
