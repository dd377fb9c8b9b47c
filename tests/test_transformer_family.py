"""The Transformer layer family (``harness.models.transformer``): the contract battery of
tests/test_families.py run on it (registered for the test, as NAMES will hold it), its plain
NumPy layers against the kernel and torch, its closed-form counts, and its gradient path
against central finite differences.

Tolerances: float64 layers against the kernel and torch, 1e-10 relative to the largest entry
(measured: about 1e-15); path Jacobians against central differences (h = 1e-6), 1e-7 absolute
on entries of order 0.1 (measured: 4e-10).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import test_families as battery
from _deps import require_module
from harness import models
from harness.analysis import compare, figure1
from harness.models import reference
from harness.models import transformer as tf

NAME = "transformer"
TOL = 1e-10


@pytest.fixture
def registered(monkeypatch):
    """The family registered for one test, as its line in harness.models.NAMES will."""
    names = models.NAMES + (NAME,) if NAME not in models.NAMES else models.NAMES
    real = models.traced_forms
    monkeypatch.setattr(models, "NAMES", names)
    monkeypatch.setattr(models, "traced_forms", lambda names=names: real(names))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300))


# ----------------------------------------------------------------------------- the battery

@pytest.mark.parametrize("check, kwargs", [
    (battery.test_the_parts_have_their_types, {"name": NAME}),
    (battery.test_traced_counts_equal_the_closed_forms, {"form": NAME, "T": 1, "d": 3}),
    (battery.test_traced_counts_equal_the_closed_forms, {"form": NAME, "T": 7, "d": 4}),
    (battery.test_traced_counts_equal_the_closed_forms, {"form": NAME, "T": 16, "d": 5}),
    (battery.test_the_traced_forms_outputs_are_the_kernels, {"form": NAME}),
    (battery.test_backward_agrees_with_finite_differences, {"name": NAME, "batch": 1}),
    (battery.test_backward_agrees_with_finite_differences, {"name": NAME, "batch": 2}),
    (battery.test_inputs_are_never_written, {"name": NAME, "dtype": "float32"}),
    (battery.test_inputs_are_never_written, {"name": NAME, "dtype": "float64"}),
    (battery.test_inputs_are_seeded_and_shaped, {"name": NAME}),
    (battery.test_timed_variants_run_and_count, {"name": NAME}),
    (battery.test_the_gradient_path_has_the_declared_columns_and_summary, {"name": NAME}),
], ids=lambda x: x.__name__ if callable(x) else "-".join(map(str, x.values())))
def test_the_contract_battery(registered, check, kwargs):
    check(**kwargs)


@pytest.mark.parametrize("case", [c for k in tf.FAMILY.compared for c in k.quick_cases], ids=str)
def test_every_peer_computes_what_the_kernel_does(registered, case):
    battery.test_every_peer_computes_what_the_kernel_does(compare.Case(NAME, *case, "float64"))


def test_the_compared_cases_have_eight_heads():
    k = tf.FAMILY.kernel()
    assert k.cases == ((1, 512, 256), (1, 2048, 256))
    assert {tf.default_heads(d) for _, _, d in k.cases} == {8}
    assert "forward+backward" in k.directions


# ----------------------------------------------------------------------------- the heads

@pytest.mark.parametrize("d, h", [(1, 1), (2, 1), (3, 1), (4, 2), (6, 2), (8, 4), (12, 4),
                                  (16, 8), (24, 8), (256, 8), (512, 8), (5, 1), (10, 2)])
def test_default_heads_is_the_largest_of_8_4_2_1_leaving_d_k_at_least_2(d, h):
    assert tf.default_heads(d) == h
    assert d % h == 0 and (d // h >= 2 or h == 1)


# ----------------------------------------------------------------------------- the plain layers

@pytest.mark.parametrize("T, d, batch", [(9, 12, 1), (5, 8, 3), (4, 3, 1)])
def test_the_traced_layer_on_arrays_is_the_kernel(T, d, batch):
    X, W = tf.inputs(T, d, batch, "float64", 4)
    assert rel(tf.traced_forward(X, *W)[0], tf.forward(X, *W)) < TOL


@pytest.mark.parametrize("T, d, batch", [(9, 12, 1), (5, 8, 3)])
def test_the_numpy_layer_and_its_backward_are_the_kernels(T, d, batch):
    X, W = tf.inputs(T, d, batch, "float64", 5)
    dY = np.random.default_rng(6).normal(size=X.shape)
    Y, cache = reference.transformer_forward(X, W, tf.default_heads(d), tf.NORM_EPS)
    assert rel(Y, tf.forward(X, *W)) < TOL
    (dX, dW), want = reference.transformer_backward(cache, dY), tf.backward_from(X, W, Y, dY)
    assert rel(dX, want.dX) < TOL
    for k, g in zip(tf.KEYS, dW, strict=True):
        assert rel(g, want.params[k]) < TOL, k


def test_the_plain_layers_are_torchs_layer():
    torch = require_module("torch", "pip install -e '.[torch]'")
    X, W = tf.inputs(7, 12, 2, "float64", 7)                    # 4 heads of 3
    m = tf.torch_layer(W, torch, np.float64)
    with torch.no_grad():
        want = m(torch.from_numpy(X)).numpy()
    assert rel(tf.traced_forward(X, *W)[0], want) < TOL
    assert rel(reference.transformer_forward(X, W, 4, tf.NORM_EPS)[0], want) < TOL
    # and the weights are the module's, key for key
    assert set(m.state_dict()) == set(tf.KEYS)
    for k, w in tf.params(W).items():
        np.testing.assert_array_equal(m.state_dict()[k].numpy(), w)


def test_inputs_are_at_torchs_initial_scale():
    torch = require_module("torch", "pip install -e '.[torch]'")
    d = 64
    _, W = tf.inputs(4, d, 1, "float64", 0)
    m = torch.nn.TransformerEncoderLayer(d, 8, dim_feedforward=4 * d, batch_first=True)
    torch_params = m.state_dict()
    for k, w in tf.params(W).items():
        t = torch_params[k]
        assert w.shape == tuple(t.shape), k
        if k.endswith("weight") and not k.startswith("norm"):
            bound = float(t.abs().max())                          # torch's draw, near its bound
            assert 0.9 * bound < np.abs(w).max() <= bound * 1.1, k


def test_params_must_be_twelve():
    with pytest.raises(ValueError, match="W must hold the 12 arrays"):
        tf.params((np.zeros(3),))


# ----------------------------------------------------------------------------- counts

@pytest.mark.parametrize("T, d", [(1, 1), (3, 2), (5, 6), (2, 16), (3, 64)])
def test_the_traced_counts_are_the_closed_forms_at_any_heads(T, d):
    """d = 1, 2 (1 head), 6 (2 heads of 3), 16 (8 of 2), 64 (8 of 8): the same closed form."""
    assert figure1.trace_layer(T, d).macs_by_part() == tf.macs(T, d)


def test_the_closed_forms_sum_to_the_layers_products():
    T, d = 10, 8
    m = tf.macs(T, d)
    assert m["grid"] == m["mix"] == T * T * d
    assert m["projections"] + m["out_projection"] + m["feedforward"] == 12 * T * d * d
    assert tf.TIMED[0].macs(T, d) == sum(m.values())


# ----------------------------------------------------------------------------- the gradient path

def _fd_jacobians(X, W, h=1e-6):
    """dy_T/dx_j for j < T by central differences of the kernel's forward."""
    T, d = X.shape
    J = np.empty((T - 1, d, d))
    for j in range(T - 1):
        for c in range(d):
            Xp, Xm = X.copy(), X.copy()
            Xp[j, c] += h
            Xm[j, c] -= h
            J[j, :, c] = (tf.forward(Xp, *W)[T - 1] - tf.forward(Xm, *W)[T - 1]) / (2 * h)
    return J


@pytest.mark.parametrize("d", [4, 6])                          # 2 heads of 2, 2 heads of 3
def test_the_routes_sum_to_the_jacobian_by_finite_differences(d):
    X, W = tf.draw(np.random.default_rng(8), 6, d)
    J_value, J_score, M = tf.path_jacobians(X, W)
    fd = _fd_jacobians(X, W)
    assert np.abs(J_value + J_score - fd).max() < 1e-7
    frame = tf.layer_paths(X=X, W=W)
    want = [np.linalg.norm(fd[len(fd) - k], 2) for k in frame.distance]
    np.testing.assert_allclose(10 ** frame.log10_norm, want, rtol=1e-6)
    np.testing.assert_allclose(10 ** frame.log10_value,
                               [np.linalg.norm(J_value[len(fd) - k], 2) for k in frame.distance], rtol=1e-10)
    np.testing.assert_allclose(10 ** frame.log10_score,
                               [np.linalg.norm(J_score[len(fd) - k], 2) for k in frame.distance], rtol=1e-10)


def test_the_residual_route_is_the_layer_past_the_attention():
    """M = dy_T/da_T, a_T = x_T + MHA(X)_T: by central differences of LN2(z + FF(z)), z = LN1(a)."""
    X, W = tf.draw(np.random.default_rng(9), 5, 6)
    p = tf.params(W)

    def past(a):
        z = reference.layer_norm(a, p["norm1.weight"], p["norm1.bias"], tf.NORM_EPS)
        ff = reference.feed_forward(z, p["linear1.weight"], p["linear1.bias"], p["linear2.weight"],
                                    p["linear2.bias"])
        return reference.layer_norm(z + ff, p["norm2.weight"], p["norm2.bias"], tf.NORM_EPS)

    heads = tf.default_heads(6)
    a = X + reference.multi_head_attention(X, None, p["self_attn.in_proj_weight"],
                                           p["self_attn.in_proj_bias"], p["self_attn.out_proj.weight"],
                                           p["self_attn.out_proj.bias"], heads)
    a = a[-1]
    fd = np.empty((6, 6))
    for c in range(6):
        e = np.zeros(6)
        e[c] = 1e-6
        fd[:, c] = (past(a + e) - past(a - e)) / 2e-6
    M = tf.path_jacobians(X, W)[2]
    assert np.abs(M - fd).max() < 1e-7
    frame = tf.layer_paths(X=X, W=W)
    assert (frame.log10_residual == math.log10(np.linalg.norm(M, 2))).all()


def test_far_positions_are_finite_logs_where_alpha_underflows():
    frame = tf.layer_paths(T=64, d=8, input_scale=300.0, seed=1)
    assert np.isfinite(frame.log10_norm).all() and np.isfinite(frame.log10_value).all()
    assert frame.log10_norm.min() < -300                        # below float64's smallest normal


def test_the_path_names_what_is_missing():
    with pytest.raises(ValueError, match="W must be given together with X"):
        tf.layer_paths(X=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="T >= 2"):
        tf.layer_paths(X=np.zeros((1, 2)), W=tf.inputs(1, 2)[1])
