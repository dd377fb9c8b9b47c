"""harness.analysis.clipping against plain back-propagation in float64, and clip_by_norm's
closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis import clipping


def _plain_clipping(rho, threshold, T, d, weight, activation, input_scale, seed):
    """The experiment by plain back-propagation in float64 (no log scaling): the same draws
    (W_hh from ``unit_recurrent_matrix``, W_xh and X from default_rng([seed, 1]), the
    probe u from PROBE_SEED), g = dl/dW_xh for l = u.h_T, and its terms per step."""
    from harness.models.rnn import PROBE_SEED, unit_recurrent_matrix
    W = rho * unit_recurrent_matrix(d, weight, seed)
    rng = np.random.default_rng([seed, 1])
    W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * input_scale
    u = np.random.default_rng(PROBE_SEED).normal(size=d)
    u /= np.linalg.norm(u)
    phi = np.tanh if activation == "tanh" else (lambda a: a)
    h, A = np.zeros(d), []
    for t in range(T):
        a = W @ h + W_xh @ X[t]
        A.append(a)
        h = phi(a)
    dh = u.copy()
    terms = [None] * T
    for t in range(T - 1, -1, -1):
        da = dh * ((1 - np.tanh(A[t]) ** 2) if activation == "tanh" else 1.0)
        terms[t] = np.outer(da, X[t])
        dh = W.T @ da
    g = sum(terms)
    c = min(1.0, threshold / np.linalg.norm(g))
    n = [np.linalg.norm(term) for term in terms]
    return np.linalg.norm(g), c, n[T - 2], n[0]


@pytest.mark.parametrize("weight,activation", [("orthogonal", "identity"), ("gaussian", "tanh")])
def test_clipping_experiment_against_plain_backpropagation(weight, activation):
    from harness.analysis import clipping
    T, d, scale, seed = 6, 3, 1.5, 4
    norms = [_plain_clipping(rho, 1.0, T, d, weight, activation, scale, seed)[0]
             for rho in (0.5, 1.5, 3.0)]
    tau = math.sqrt(min(norms) * max(norms))            # clips some radii and not others
    f = clipping.clipping_experiment(rhos=(0.5, 1.5, 3.0), threshold=tau, T=T, d=d, weight=weight,
                                     activation=activation, input_scale=scale, seed=seed)
    assert f.rho.tolist() == [0.5, 1.5, 3.0]
    for r in f.itertuples():
        norm, c, near, far = _plain_clipping(r.rho, tau, T, d, weight, activation, scale, seed)
        lg = math.log10
        assert r.log10_total_before == pytest.approx(lg(norm), abs=1e-10)
        assert r.log10_total_after == pytest.approx(lg(c * norm), abs=1e-10)
        assert r.log10_clip_factor == pytest.approx(lg(c), abs=1e-10)
        assert r.log10_near_before == pytest.approx(lg(near), abs=1e-10)
        assert r.log10_far_before == pytest.approx(lg(far), abs=1e-10)
        assert r.log10_near_after == pytest.approx(lg(c * near), abs=1e-10)
        assert r.log10_far_after == pytest.approx(lg(c * far), abs=1e-10)
        assert r.log10_far_over_near_before == pytest.approx(lg(far / near), abs=1e-10)
        assert r.log10_far_over_near_after == pytest.approx(lg(far / near), abs=1e-10)
        assert 0 <= r.residual < 1e-12
        assert (r.weight, r.activation, r.T, r.d, r.threshold) == (weight, activation, T, d, tau)
    assert (f.log10_clip_factor < 0).any() and (f.log10_clip_factor == 0).any()


def test_clip_by_norm_closed_forms():
    from harness.analysis import clipping
    G = np.array([[3.0, 0.0], [0.0, 4.0]])                  # norm 5
    same, ln = clipping.clip_by_norm(G, 2.0, 10.0)          # g = e^2 G, norm 5 e^2 > 10
    assert same is G and ln == pytest.approx(2.0 + math.log(10.0) - (2.0 + math.log(5.0)))
    assert clipping.clip_by_norm(G, 0.0, 10.0)[1] == 0.0    # norm 5 <= 10: unchanged
    assert clipping.clip_by_norm(G, 0.0, 5.0)[1] == 0.0     # exactly at the threshold
    assert clipping.clip_by_norm(np.zeros((2, 2)), 1.5, 1.0)[1] == 1.5   # zero: nothing to clip
    assert clipping._ln(0.0) == -math.inf and clipping._ln(math.e) == pytest.approx(1.0)
    ln_a = np.log(np.array([1.0, 2.0, 4.0]))
    D = np.arange(6.0).reshape(3, 2)
    X = np.arange(9.0).reshape(3, 3) - 4
    want = sum(np.exp(ln_a[t] - 1.0) * np.outer(D[t], X[t]) for t in range(3))
    np.testing.assert_allclose(clipping._sum_terms(ln_a, D, X, 1.0), want, rtol=1e-14)


def test_clip_by_norm_clips_a_gradient_smaller_than_one():
    G = np.array([[0.3, 0.4]])                                  # norm 0.5
    out, ln_unit = _clip().clip_by_norm(G, 0.0, 0.25)
    assert out is G and ln_unit == pytest.approx(math.log(0.5))    # halved
    assert _clip().clip_by_norm(G, 0.0, 1.0)[1] == 0.0              # under the threshold: kept
    assert _clip()._ln(0.5) == math.log(0.5) and _clip()._ln(0.0) == -math.inf


def _clip():
    from harness.analysis import clipping
    return clipping


def test_clipping_zero_inputs_have_no_residual():
    row = _clip().clipping_experiment(rhos=(0.9,), T=4, d=3, input_scale=0.0).iloc[0]
    assert row.residual == 0.0


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
