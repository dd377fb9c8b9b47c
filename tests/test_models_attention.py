"""harness.models.attention, the attention family: its gradient routes against central finite
differences and the closed forms of each route; its summary, inputs, sweep jobs and defaults;
its peers and the tiled peers against the compiled kernels, the compare targets; and its
memory and FLOP estimates, counted from the arrays themselves."""

from __future__ import annotations

import dataclasses
import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest

import naive
from _helpers import LN10, _close, _torch_or_none, _variant, models_get
from harness import models
from harness.infra import config
from harness.infra.config import DecayConfig
from harness.models import ATTENTION
from harness.models import attention as att_family
from harness.models import rnn as rnn_family


def _attention_case(T=6, d=4, d_v=3, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, d))
    Wq, Wk = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    Wv = rng.normal(size=(d, d_v))
    return X, Wq, Wk, Wv


def _y_last(X, Wq, Wk, Wv, X_keys=None, X_values=None):
    """y_T with the keys and the values read from their own copies of X."""
    Xk = X if X_keys is None else X_keys
    Xv = X if X_values is None else X_values
    q = X[-1] @ Wq
    e = (Xk @ Wk) @ q / math.sqrt(Wq.shape[1])
    a = np.exp(e - e.max())
    a /= a.sum()
    return a @ (Xv @ Wv)


def _fd_route(X, Wq, Wk, Wv, j, route, h=1e-6):
    """d y_T / d x_j through one route only, by central differences (d_v, d_model)."""
    J = np.empty((Wv.shape[1], X.shape[1]))
    for c in range(X.shape[1]):
        P, M = X.copy(), X.copy()
        P[j, c] += h
        M[j, c] -= h
        if route == "value":                 # x_j moves inside v_j only
            yp, ym = _y_last(X, Wq, Wk, Wv, X_values=P), _y_last(X, Wq, Wk, Wv, X_values=M)
        else:                                # x_j moves inside k_j only
            yp, ym = _y_last(X, Wq, Wk, Wv, X_keys=P), _y_last(X, Wq, Wk, Wv, X_keys=M)
        J[:, c] = (yp - ym) / (2 * h)
    return J


def test_each_attention_route_matches_its_own_finite_difference():
    X, Wq, Wk, Wv = _attention_case()
    Jv, Js = att_family.path_jacobians(X, Wq, Wk, Wv)
    T = X.shape[0]
    assert Jv.shape == Js.shape == (T - 1, Wv.shape[1], X.shape[1])
    for j in range(T - 1):
        np.testing.assert_allclose(Jv[j], _fd_route(X, Wq, Wk, Wv, j, "value"), atol=1e-8)
        np.testing.assert_allclose(Js[j], _fd_route(X, Wq, Wk, Wv, j, "score"), atol=1e-8)


def test_attention_path_frame_reads_each_route_from_its_closed_form():
    X, Wq, Wk, Wv = _attention_case(T=7, d=4, d_v=4)
    f = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv, seed=5, input_scale=2.0)
    T = X.shape[0]
    q = X[-1] @ Wq
    e = (X @ Wk) @ q / 2.0                                   # sqrt(d_k) = 2
    a = np.exp(e - e.max())
    a /= a.sum()
    V = X @ Wv
    y = a @ V
    g = Wk @ q / 2.0
    sig_v = np.linalg.svd(Wv, compute_uv=False)[0]
    assert f.distance.tolist() == list(range(1, T))
    for _, r in f.iterrows():
        j = T - 1 - int(r.distance)                          # x_{T-k}, 0-based
        # value route alpha_Tj Wv^T: spectral norm alpha_Tj sigma_max(Wv)
        assert r.log10_value == pytest.approx(math.log10(a[j] * sig_v), abs=1e-12)
        # score route, rank one: alpha_Tj ||v_j - y_T|| ||Wk q_T|| / sqrt(d_k)
        score = a[j] * np.linalg.norm(V[j] - y) * np.linalg.norm(g)
        assert r.log10_score == pytest.approx(math.log10(score), abs=1e-12)
        total = np.linalg.svd(a[j] * Wv.T + a[j] * np.outer(V[j] - y, g), compute_uv=False)[0]
        assert r.log10_norm == pytest.approx(math.log10(total), abs=1e-12)
        assert r.log10_spectral == r.log10_norm
    assert (f.model == ATTENTION).all() and (f["T"] == T).all() and (f.d == 4).all()
    assert (f.seed == 5).all() and (f.input_scale == 2.0).all() and f.log10_linear.isna().all()
    assert f.rho.isna().all() and f.log10_probe.isna().all() and f.log10_bound.isna().all()


def test_attention_path_summary_fits_every_distance_against_a_flat_theory():
    k = np.arange(1, 9)
    g = pd.DataFrame({"distance": k, "log10_norm": 0.5 - 0.01 * k})
    s = att_family.path_summary(g, fit_from=0.9)          # no transient: fit_from is ignored
    assert s["fitted_rate"] == pytest.approx(-0.01 * LN10, abs=1e-12)
    assert s["theory_rate"] == 0.0
    assert all(math.isnan(s[c]) for c in ("fitted_rate_probe", "bound_rate", "bound_respected",
                                          "log10_transient"))


def test_attention_path_in_chunks_is_the_path_in_one_piece():
    X, Wq, Wk, Wv = _attention_case(T=9, d=3, d_v=3)
    whole = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv)
    for chunk in (1, 3, 7):
        with mock.patch.object(att_family, "PATH_CHUNK", chunk):
            part = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv)
        pd.testing.assert_frame_equal(part, whole)
    assert att_family.path_memory(9, 3, config.DECAY) == {
        "attention path Jacobians": att_family._jacobian_bytes(9, 3)}


def test_attention_jobs_and_path_follow_the_config():
    cfg = dataclasses.replace(config.DECAY, input_scales=(1.0, 2.5), seed=7)
    jobs = att_family.decay_jobs(cfg, 5, 2)
    assert jobs == [dict(model=ATTENTION, T=5, d=2, input_scale=1.0),
                    dict(model=ATTENTION, T=5, d=2, input_scale=2.5)]
    pd.testing.assert_frame_equal(att_family.gradient_path(jobs[1], cfg),
                                  att_family.attention_paths(T=5, d=2, input_scale=2.5, seed=7))
    drawn = att_family.attention_paths(T=5, d=2, input_scale=2.5, seed=7)
    rng = np.random.default_rng([7, 2])                      # the documented draws
    X = rng.normal(size=(5, 2)) * 2.5
    W = [rng.normal(size=(2, 2)) / math.sqrt(2) for _ in range(3)]
    pd.testing.assert_frame_equal(drawn.drop(columns=["input_scale", "seed"]),
                                  att_family.attention_paths(X=X, Wq=W[0], Wk=W[1], Wv=W[2])
                                  .drop(columns=["input_scale", "seed"]))


def test_family_inputs_are_seeded_and_shaped():
    for fam, n_w in ((att_family, 3), (rnn_family, 2)):
        X, W = fam.inputs(5, 4, batch=1, dtype="float32", seed=3)
        Xb, Wb = fam.inputs(5, 4, batch=2, dtype="float64", seed=3)
        assert X.shape == (5, 4) and Xb.shape == (2, 5, 4) and len(W) == len(Wb) == n_w
        assert X.dtype == np.float32 and Xb.dtype == np.float64
        assert all(w.shape == (4, 4) and w.dtype == np.float32 for w in W)
        X2, W2 = fam.inputs(5, 4, batch=1, dtype="float32", seed=3)
        assert np.array_equal(X, X2) and all(np.array_equal(a, b) for a, b in zip(W, W2))
        assert not np.array_equal(X, fam.inputs(5, 4, seed=4)[0].astype(np.float32))
        big = fam.inputs(400, 400, seed=0)[1][0]                   # N(0, 1/d)
        assert big.std() == pytest.approx(1 / 20, rel=0.02) and abs(big.mean()) < 0.01


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_attention_peers_compute_the_kernels_output_and_input_gradient(dtype, monkeypatch):
    fam = models_get(ATTENTION)
    X, W = fam.kernels.inputs(6, 4, 1, dtype, 2)
    out = fam.kernels.forward(X, *W)
    Y, A = out
    dY = np.random.default_rng(3).normal(size=Y.shape).astype(dtype)
    dX = fam.kernels.backward(X, W, out, dY).dX
    torch = _torch_or_none()
    impls = att_family.peers(X, W, dY, torch)
    fwd, bwd, outputs = impls["numpy"][:3]
    y, a = fwd()
    _close(y, Y, dtype)
    _close(a, A, dtype)
    _close(bwd()[0], dX, dtype)
    y, dx = outputs()
    _close(y, Y, dtype)
    _close(dx, dX, dtype)
    # the floor: the forward's five products, each into its own buffer, on the kernel's BLAS
    made = []
    real = att_family.matmul

    def recording(a, b, c):
        real(a, b, c)
        made.append((a.copy(), b.copy(), c))
    monkeypatch.setattr(att_family, "matmul", recording)
    gemm = impls["gemm"]
    assert gemm[1] is None and gemm[2] is None
    gemm[0]()
    Wq, Wk, Wv = (w.astype(np.float64) for w in W)
    X64 = X.astype(np.float64)
    Q, K, V = X64 @ Wq, X64 @ Wk, X64 @ Wv
    expected = [Q, K, V, Q @ K.T, (Q @ K.T) @ V]
    assert [c.shape for _, _, c in made] == [(6, 4)] * 3 + [(6, 6), (6, 4)]
    assert all(c.dtype == np.dtype(dtype) for _, _, c in made)
    for (_, _, c), e in zip(made, expected):
        _close(c, e, dtype)
    assert len({id(c) for _, _, c in made}) == 5
    if torch is None:
        return
    t_fwd, t_bwd, t_out, t_both = impls["torch"]
    y = t_fwd()
    assert y.dtype == getattr(torch, dtype)
    _close(y, Y, dtype)
    t_bwd()
    t_bwd()
    y, dx = t_out()
    _close(y, Y, dtype)
    _close(dx, dX, dtype)
    _close(t_both(), dX, dtype)
    _close(t_both(), dX, dtype)                    # a fresh graph each call


def test_tiled_attention_peers_compute_the_tiled_kernels_output_and_gradient():
    fam = models_get(ATTENTION)
    k = fam.kernel("tiled")
    X, W = fam.kernels.inputs(300, 4, 1, "float64", 6)        # past one block of 256 query rows
    Y, L = k.forward(X, *W)
    dY = np.random.default_rng(7).normal(size=Y.shape)
    dX = k.backward(X, W, (Y, L), dY).dX
    torch = _torch_or_none()
    impls = att_family.tiled_peers(X, W, dY, torch)
    fwd, bwd, outputs, both = impls["numpy"]
    y, l = fwd()
    _close(y, Y, "float64")
    _close(l, L, "float64")
    _close(bwd()[0], dX, "float64")
    y, dx = outputs()
    _close(y, Y, "float64")
    _close(dx, dX, "float64")
    _close(both()[0], dX, "float64")
    if torch is not None:
        t_fwd, _, t_out, t_both = impls["torch"]
        _close(t_fwd(), Y, "float64")
        _close(t_out()[1], dX, "float64")
        _close(t_both(), dX, "float64")
    with pytest.raises(ValueError, match=r"X must be \(T, d\) for the tiled kernel's peers, "
                                         r"got shape \(2, 300, 4\)"):
        att_family.tiled_peers(np.stack([X, X]), W, dY)


def test_peers_heads_and_compare_targets():
    a, b = np.zeros((5, 3)), np.ones((5, 3))
    ha, hb = att_family._heads(a, b)
    assert ha.shape == hb.shape == (1, 1, 5, 3) and hb[0, 0] is not None and hb.sum() == 15
    assert rnn_family.compare_target(1, "forward", 64, 8) == (
        1.5, None, "at least 1.5x faster than the fastest peer")
    for batch in (2, 32):
        assert rnn_family.compare_target(batch, "backward", 64, 8) == (
            1.0, None, "at least as fast as the fastest peer")
    T, d = att_family.GEMM_FLOOR_CASE
    assert (T, d) == (2048, 256) and att_family.GEMM_FLOOR_RATIO == 1.3
    assert att_family.compare_target(1, "forward", T, d) == (
        1.0, 1.3, "at least as fast as the fastest peer, and within 1.3x of its matrix products alone")
    plain = (1.0, None, "at least as fast as the fastest peer")
    for args in ((1, "backward", T, d), (1, "forward", T, 64), (1, "forward", 1024, d)):
        assert att_family.compare_target(*args) == plain


def test_attention_path_flops_and_expected_seconds():
    T, d = 30, 6
    assert att_family.path_flops(T, d, config.DECAY) == 4 * T * d * d + 20 * (T - 1) * d**3
    cfg = dataclasses.replace(config.DECAY, Ts=(30, 40), ds=(6,), models=("rnn", "attention"),
                              rhos=(0.5, 0.9), weights=("orthogonal",), activations=("tanh",),
                              input_scales=(1.0,), measure="probe")
    want = sum(2 * rnn_family.path_flops(T, 6, cfg) + att_family.path_flops(T, 6, cfg)
               for T in (30, 40))                               # two radii: two RNN jobs per T
    from harness.analysis import gradpath
    assert gradpath.expected_seconds(cfg) == pytest.approx(want / gradpath.FLOPS_PER_SECOND, rel=1e-12)
    assert gradpath.FLOPS_PER_SECOND == 5e9


def test_attention_path_asks_for_the_memory_its_arrays_take(monkeypatch):
    """check_memory is handed the bytes of what is then allocated: the Jacobians' nbytes, and
    the last row's arrays (X and its float64 copy, X Wk, V, the scores and alpha)."""
    asked = []
    monkeypatch.setattr(att_family, "check_memory", lambda n, what: asked.append((n, what)))
    T, d, d_k, d_v = 9, 4, 3, 5
    rng = np.random.default_rng(0)
    X = rng.normal(size=(T, d)).astype(np.float32)
    Wq, Wk, Wv = (rng.normal(size=s).astype(np.float32) for s in ((d, d_k), (d, d_k), (d, d_v)))
    Jv, Js = att_family.path_jacobians(X, Wq, Wk, Wv)
    assert Jv.shape == Js.shape == (T - 1, d_v, d)
    (row_bytes, row_what), (jac_bytes, jac_what) = asked
    assert jac_bytes == Jv.nbytes + Js.nbytes
    assert jac_what == f"the attention path Jacobians (T={T}, d_model={d})"
    x64, Wk64, Wv64 = (a.astype(np.float64) for a in (X, Wk, Wv))
    assert row_bytes == 2 * x64.nbytes + (x64 @ Wk64).nbytes + (x64 @ Wv64).nbytes + 3 * T * 8
    assert row_what == f"the attention path's last row (T={T}, d_model={d})"
    assert att_family._row_bytes(T, d, d_k, d_v) == row_bytes
    # one chunk of the path: value, score, their sum and LAPACK's copy, beside the last row
    chunk = min(att_family.PATH_CHUNK, T - 1)
    assert att_family._jacobian_bytes(T, d, d_v) == 4 * chunk * d_v * d * 8 + att_family._row_bytes(T, d, d, d_v)
    assert att_family._jacobian_bytes(T, d) == att_family._jacobian_bytes(T, d, d)
    big = att_family.PATH_CHUNK + 10
    assert att_family._jacobian_bytes(big, 2) - att_family._row_bytes(big, 2, 2, 2) == \
        4 * att_family.PATH_CHUNK * 2 * 2 * 8
    for name, i in (("Wq", 0), ("Wk", 1), ("Wv", 2)):           # every weight in X's dtype
        W = [Wq, Wk, Wv]
        W[i] = W[i].astype(np.float64)
        with pytest.raises(TypeError, match=f"{name} has dtype float64 but the other inputs are float32"):
            att_family.path_jacobians(X, *W)
    # the last row of a two-position sequence is enough; one position is refused
    att_family.path_jacobians(X[:2], Wq, Wk, Wv)
    with pytest.raises(ValueError, match="X must have T >= 2 rows, got T=1"):
        att_family.path_jacobians(X[:1], Wq, Wk, Wv)


def test_attention_last_row_is_exact_where_the_scores_are_large():
    """exp(e - max e): scores of 1000 give weights, not inf/inf."""
    X = np.array([[30.0, 0.0], [0.0, 30.0], [30.0, 30.0]])
    W = np.eye(2)
    a, V, y, g, Wv = att_family._last_row(X, W, W, W)
    e = (X @ X[2]) / math.sqrt(2)
    want = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
    assert np.isfinite(a).all()
    np.testing.assert_allclose(a, want[:2], rtol=1e-12)
    np.testing.assert_allclose(y, want @ X, rtol=1e-12)


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


def test_attention_paths_defaults_are_the_sweeps_first_configuration():
    f = att_family.attention_paths()
    cfg = DecayConfig()
    assert (f["T"].iloc[0], f["d"].iloc[0], f["seed"].iloc[0]) == (cfg.Ts[0], cfg.ds[0], cfg.seed)
    assert len(f) == cfg.Ts[0] - 1 and f["input_scale"].iloc[0] == 1.0


@pytest.mark.parametrize("d, d_k, d_v", [(5, 3, 2), (2, 5, 3), (3, 2, 5)])
def test_attention_trace_memory_is_eight_widest_rows_twice_the_weights_and_five_grids(d, d_k, d_v):
    """Small: every value dense, eight (T, width) rows and five T x T grids of 8 bytes each;
    at T = 65,536 a grid is its row and column terms, 2 T of them (issue #26)."""
    from harness.analysis import trace
    T, e = 7, trace.BYTES_PER_ELEMENT
    weights = sum(math.prod(shape) for _, shape, _, _ in att_family.trace_weights(d, d_k=d_k, d_v=d_v))
    assert weights == d * (2 * d_k + d_v)
    grid = np.empty((T, T)).nbytes
    want = e * (8 * T * max(d, d_k, d_v) + 2 * weights) + 5 * grid
    assert att_family.trace_memory_bytes(T, d, d_k=d_k, d_v=d_v) == want
    big = 65536
    assert att_family.trace_memory_bytes(big, 4) == e * (2 * big * 4 + 2 * 4 * 12 + 6 * (big + 4)
                                                          + 5 * 2 * big)
    assert att_family.trace_memory_bytes(T, d) == att_family.trace_memory_bytes(T, d, d_k=d, d_v=d)


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


def _closed_form_path(X, Wq, Wk, Wv):
    """log10 of (total, value, score) per distance k = 1..T-1, from the formulas in float64."""
    T = X.shape[0]
    q = X[-1] @ Wq
    e = (X @ Wk) @ q / math.sqrt(Wq.shape[1])
    a = np.exp(e - e.max())
    a /= a.sum()
    V, g = X @ Wv, Wk @ q / math.sqrt(Wq.shape[1])
    y = a @ V
    out = []
    for k in range(1, T):
        j = T - 1 - k
        total = np.linalg.svd(a[j] * Wv.T + a[j] * np.outer(V[j] - y, g), compute_uv=False)[0]
        value = a[j] * np.linalg.svd(Wv, compute_uv=False)[0]
        score = a[j] * np.linalg.norm(V[j] - y) * np.linalg.norm(g)
        out.append([math.log10(x) if x > 0 else math.nan for x in (total, value, score)])
    return np.array(out)


def test_attention_paths_of_width_one_keep_the_score_routes_direction():
    # d = 1: every v_j - y_T has one component, so its unit vector is that component's sign
    X, Wq, Wk, Wv = _attention_case(T=6, d=1, d_v=1, seed=4)
    f = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=Wv)
    np.testing.assert_allclose(f[["log10_norm", "log10_value", "log10_score"]].to_numpy(),
                               _closed_form_path(X, Wq, Wk, Wv), atol=1e-12)


def test_attention_paths_without_values_have_no_route_to_take_a_logarithm_of():
    X, Wq, Wk, _ = _attention_case(T=6, d=3, d_v=3, seed=6)
    # Wv = 0: V = 0, so y_T = v_j and the score route is exactly 0 as well
    f = att_family.attention_paths(X=X, Wq=Wq, Wk=Wk, Wv=np.zeros((3, 3)))
    assert f.log10_value.isna().all() and f.log10_score.isna().all() and f.log10_norm.isna().all()


def test_attention_paths_that_overflow_say_which_input_to_scale_and_warn_nothing():
    import warnings
    X, Wq, Wk, Wv = _attention_case(T=4, d=2, d_v=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"overflow float64 .* at X: scale X down\.$"):
            att_family.attention_paths(X=X * 1e160, Wq=Wq, Wk=Wk, Wv=Wv)
        with pytest.raises(ValueError, match=r"at input_scale=1e\+160: use a smaller --input-scale"):
            att_family.attention_paths(T=4, d=2, input_scale=1e160)


def test_attention_paths_of_float32_inputs_are_computed_in_float64():
    # scores of ~1e40: past float32's range, well inside float64's
    X, Wq, Wk, Wv = _attention_case(T=5, d=2, d_v=2, seed=8)
    m32 = [(X * 1e20).astype(np.float32)] + [w.astype(np.float32) for w in (Wq, Wk, Wv)]
    f32 = att_family.attention_paths(X=m32[0], Wq=m32[1], Wk=m32[2], Wv=m32[3])
    X64, Wq64, Wk64, Wv64 = (m.astype(np.float64) for m in m32)
    f64 = att_family.attention_paths(X=X64, Wq=Wq64, Wk=Wk64, Wv=Wv64)
    cols = ["log10_norm", "log10_value", "log10_score"]
    assert np.isfinite(f32[cols].to_numpy()).all()
    np.testing.assert_allclose(f32[cols].to_numpy(), f64[cols].to_numpy(), rtol=1e-6)


@pytest.mark.parametrize("top", [1, 2])
def test_attention_paths_score_route_of_a_dominant_key_has_no_cancellation(top):
    """T = 4, the dominant key two before the query (top = 1) or one before it (top = 2, T - 2).
    alpha_top = 1 - O(e^-39): y_T rounds to v_top in float64, so v_top - y_T taken directly
    would be 0. The path takes it as sum_i alpha_i (v_i - v_top); here against 50 digits."""
    import mpmath
    x = [0.5, -0.25, 0.75, 1.0]
    x[top] = 40.0
    W = np.ones((1, 1))
    f = att_family.attention_paths(X=np.array(x)[:, None], Wq=W, Wk=W, Wv=W)
    with mpmath.workdps(50):
        a = [mpmath.exp(mpmath.mpf(xi) * x[-1]) for xi in x]      # e_j = x_j x_T
        a = [ai / sum(a) for ai in a]
        y = sum(ai * xi for ai, xi in zip(a, x))
        want = float(mpmath.log10(a[top] * abs(x[top] - y)))      # g = de_Tj/dx_j = x_T = 1
    assert float(np.float64(40.0) - np.float64(float(y))) == 0.0   # the direct difference
    assert f.set_index("distance").log10_score[3 - top] == pytest.approx(want, abs=1e-9)
