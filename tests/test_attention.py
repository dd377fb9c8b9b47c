"""harness.kernels.attention against its loop twins in tests/naive.py, finite differences,
the properties the lessons state, and the additive-attention lesson's own numbers.

Tolerances (stated once): the naive twins run in float64 on the same (possibly
float32) inputs. float64 kernels agree with them to 1e-12 relative to the
largest entry (measured: 5e-15); float32 kernels to 1e-6 (forwards, measured
1.3e-7) and 1e-5 (gradients, measured 1.2e-6).
Gradients agree with central finite differences, in float64, to a relative
error of 1e-6 (measured: 6e-9).
"""

from __future__ import annotations

import numpy as np
import pytest

import naive
from harness.infra import workspace
from harness.kernels import attention as at

T, D_MODEL, D_K, D_V, B = 5, 4, 3, 2, 2
T_Y, T_X, D_H, D_A = 4, 5, 3, 2
FD_TOL = 1e-6
DTYPES = [np.float32, np.float64]


def close(got, want, dtype, grad=False, scale=0.0):
    assert got.dtype == np.dtype(dtype)
    tol = 1e-12 if dtype == np.float64 else (1e-5 if grad else 1e-6)
    err = naive.rel_err(got, want, scale)
    assert err <= tol, f"relative error {err:.2e} > {tol:.0e}"


def make_self(seed, dtype=np.float64, proj=True, batched=False, t=T):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, t, D_MODEL) if batched else (t, D_MODEL)).astype(dtype)
    if not proj:
        return X, None, None, None
    Wq, Wk = (rng.normal(size=(D_MODEL, D_K)).astype(dtype) for _ in range(2))
    Wv = rng.normal(size=(D_MODEL, D_V)).astype(dtype)
    return X, Wq, Wk, Wv


def make_additive(seed, dtype=np.float64, t_y=T_Y, t_x=T_X):
    rng = np.random.default_rng(seed)
    S = rng.normal(size=(t_y, D_H)).astype(dtype)
    H = rng.normal(size=(t_x, D_H)).astype(dtype)
    Wsa = rng.normal(size=(D_A, D_H)).astype(dtype)
    Wha = rng.normal(size=(D_A, D_H)).astype(dtype)
    va = rng.normal(size=D_A).astype(dtype)
    return S, H, Wsa, Wha, va


SELF_CASES = [(proj, scale, causal, batched)
              for proj in (True, False) for scale in (True, False)
              for causal in (False, True) for batched in (False, True)]


# ---------------------------------------------------------------- self-attention

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("proj,scale,causal,batched", SELF_CASES)
def test_forward_matches_naive(dtype, proj, scale, causal, batched):
    X, Wq, Wk, Wv = make_self(1, dtype, proj, batched)
    Y, A = at.forward(X, Wq, Wk, Wv, scale=scale, causal=causal)
    Yn, An = naive.attention_forward(X, Wq, Wk, Wv, scale, causal)
    assert Y.shape == Yn.shape and A.shape == An.shape
    close(A, An, dtype)
    close(Y, Yn, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("proj,scale,causal,batched", SELF_CASES)
def test_backward_matches_naive(dtype, proj, scale, causal, batched):
    X, Wq, Wk, Wv = make_self(2, dtype, proj, batched)
    Y, A = at.forward(X, Wq, Wk, Wv, scale=scale, causal=causal)
    dY = np.random.default_rng(3).normal(size=Y.shape).astype(dtype)
    got = at.backward(X, Wq, Wk, Wv, A, dY, scale=scale, causal=causal)
    want = naive.attention_backward(X, Wq, Wk, Wv, dY, scale, causal)
    for name, g, w in zip(at.AttentionGrads._fields, got, want):
        if w is None:
            assert g is None, name
        else:
            assert g.shape == w.shape, name
            close(g, w, dtype, grad=True)


@pytest.mark.parametrize("proj,scale,causal,batched", SELF_CASES)
def test_gradients_match_finite_differences(proj, scale, causal, batched):
    X, Wq, Wk, Wv = make_self(4, np.float64, proj, batched)
    G = np.random.default_rng(5).normal(size=X.shape[:-1] + ((D_V,) if proj else (D_MODEL,)))

    def loss():
        return float((G * at.forward(X, Wq, Wk, Wv, scale=scale, causal=causal)[0]).sum())

    _, A = at.forward(X, Wq, Wk, Wv, scale=scale, causal=causal)
    got = at.backward(X, Wq, Wk, Wv, A, G, scale=scale, causal=causal)
    for name, arg in zip(at.AttentionGrads._fields, (X, Wq, Wk, Wv)):
        if arg is None:
            assert getattr(got, name) is None
            continue
        err = naive.rel_err(getattr(got, name), naive.numeric_grad(loss, arg))
        assert err <= FD_TOL, f"{name}: relative error {err:.2e}"


# ------------------------------------------------------------- row softmax kernel

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [1.0, 0.37])
def test_softmax_rows_matches_naive(dtype, causal, scale):
    E = (np.random.default_rng(6).normal(size=(6, 6)) * 5).astype(dtype)
    got = E.copy()
    at._softmax_rows_inplace(got, scale, causal, np.empty(6, dtype=np.int64))
    want = np.zeros((6, 6))
    for i in range(6):
        w = i + 1 if causal else 6
        want[i, :w] = naive.softmax_row([scale * float(e) for e in E[i, :w]])
    close(got, want, dtype)
    if causal:
        assert np.all(np.triu(got, 1) == 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rows_ignore_a_constant_per_row(dtype):
    E = np.random.default_rng(7).normal(size=(5, 7)).astype(dtype)
    shift = np.array([0.0, 3.0, -250.0, 1e3, 40.0])[:, None].astype(dtype)
    a, b = E.copy(), (E + shift).astype(dtype)
    scratch = np.empty(7, dtype=np.int64)
    at._softmax_rows_inplace(a, 1.0, False, scratch)
    at._softmax_rows_inplace(b, 1.0, False, scratch)
    # E + shift is rounded in dtype; the row maximum is subtracted, so only that rounding shows.
    tol = 1e-12 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(b, a, rtol=tol, atol=tol)


@pytest.mark.parametrize("scale", [True, False])
def test_attention_ignores_a_constant_added_to_a_row_of_scores(scale):
    # A constant-1 feature that only Wk reads shifts every key by u, so the score
    # q_i . (k_j + u) gains q_i . u: the same for every j of row i. A and Y must not move.
    X, Wq, Wk, Wv = make_self(8)
    u = np.random.default_rng(9).normal(size=D_K) * 3
    X1 = np.hstack([X, np.ones((T, 1))])
    Wq1, Wv1 = np.vstack([Wq, np.zeros(D_K)]), np.vstack([Wv, np.zeros(D_V)])
    Wk1 = np.vstack([Wk, u])
    Y, A = at.forward(X, Wq, Wk, Wv, scale=scale)
    Y1, A1 = at.forward(X1, Wq1, Wk1, Wv1, scale=scale)
    assert np.ptp(X1 @ Wq1 @ (X1 @ Wk1).T - X @ Wq @ (X @ Wk).T, axis=1).max() < 1e-12
    assert np.abs(X1 @ Wq1 @ u).max() > 1.0          # the shift is not trivially zero
    np.testing.assert_allclose(A1, A, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Y1, Y, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------- properties

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("proj,causal,batched", [(p, c, b) for p in (True, False)
                                                 for c in (False, True) for b in (False, True)])
def test_rows_sum_to_one(dtype, proj, causal, batched):
    X, Wq, Wk, Wv = make_self(10, dtype, proj, batched)
    _, A = at.forward(X * 4, Wq, Wk, Wv, causal=causal)
    tol = 1e-14 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, rtol=0, atol=tol)
    assert A.min() >= 0.0


@pytest.mark.parametrize("proj", [True, False])
def test_permuting_rows_of_x_permutes_rows_of_y(proj):
    X, Wq, Wk, Wv = make_self(11, np.float64, proj, t=7)
    perm = np.random.default_rng(12).permutation(7)
    Y, A = at.forward(X, Wq, Wk, Wv)
    Yp, Ap = at.forward(X[perm], Wq, Wk, Wv)
    np.testing.assert_allclose(Yp, Y[perm], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Ap, A[perm][:, perm], rtol=1e-12, atol=1e-14)


def test_causal_attention_does_depend_on_order():
    # The contrast that makes the permutation test mean something: the mask knows order.
    X, Wq, Wk, Wv = make_self(11, np.float64, True, t=7)
    perm = np.random.default_rng(12).permutation(7)
    Y = at.forward(X, Wq, Wk, Wv, causal=True)[0]
    Yp = at.forward(X[perm], Wq, Wk, Wv, causal=True)[0]
    assert not np.allclose(Yp, Y[perm])


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("scale", [True, False])
def test_equal_norm_tokens_attend_most_to_themselves(batched, scale):
    # Without projections the score is x_i . x_j <= |x_i| |x_j| = |x_i|^2, equality only at j = i.
    X = make_self(13, np.float64, False, batched, t=8)[0]
    X = 1.5 * X / np.linalg.norm(X, axis=-1, keepdims=True)
    _, A = at.forward(X, scale=scale)
    assert np.all(A.argmax(axis=-1) == np.arange(8))


def test_no_projections_is_q_k_v_equal_x():
    X = make_self(14)[0]
    eye = np.eye(D_MODEL)
    for s in (True, False):
        Y, A = at.forward(X, scale=s)
        Yi, Ai = at.forward(X, eye, eye, eye, scale=s)
        np.testing.assert_allclose(Y, Yi, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(A, Ai, rtol=1e-13, atol=1e-15)


def test_batch_is_a_stack_of_sequences():
    X, Wq, Wk, Wv = make_self(15, np.float64, True, True)
    Y, A = at.forward(X, Wq, Wk, Wv, causal=True)
    dY = np.random.default_rng(16).normal(size=Y.shape)
    g = at.backward(X, Wq, Wk, Wv, A, dY, causal=True)
    dW = [np.zeros_like(w) for w in (Wq, Wk, Wv)]
    for n in range(B):
        Yn, An = at.forward(X[n], Wq, Wk, Wv, causal=True)
        np.testing.assert_allclose(Y[n], Yn, rtol=1e-13, atol=1e-15)
        gn = at.backward(X[n], Wq, Wk, Wv, An, dY[n], causal=True)
        np.testing.assert_allclose(g.dX[n], gn.dX, rtol=1e-12, atol=1e-14)
        for acc, w in zip(dW, gn[1:]):
            acc += w
    for got, want in zip(g[1:], dW):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_parameter_count_does_not_depend_on_T():
    _, Wq, Wk, Wv = make_self(17)
    S0, H0, Wsa, Wha, va = make_additive(18)
    counts = set()
    for t in (3, 9):
        X = np.random.default_rng(t).normal(size=(t, D_MODEL))
        Y, A = at.forward(X, Wq, Wk, Wv)
        assert Y.shape == (t, D_V) and A.shape == (t, t)
        g = at.backward(X, Wq, Wk, Wv, A, np.ones_like(Y))
        assert [w.shape for w in g[1:]] == [Wq.shape, Wk.shape, Wv.shape]
        S, H = (np.random.default_rng(t + k).normal(size=(t, D_H)) for k in (1, 2))
        assert at.alignment(S, H, Wsa, Wha, va).shape == (t, t)
        ga = at.alignment_backward(S, H, Wsa, Wha, va, np.ones((t, D_H)))
        assert [w.shape for w in (ga.dWsa, ga.dWha, ga.dva)] == [Wsa.shape, Wha.shape, va.shape]
        counts.add((sum(w.size for w in g[1:]), ga.dWsa.size + ga.dWha.size + ga.dva.size))
    assert counts == {(2 * D_MODEL * D_K + D_MODEL * D_V, 2 * D_A * D_H + D_A)}


# ------------------------------------------------------------- additive attention

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nonlinearity", ["tanh", None])
def test_alignment_matches_naive(dtype, nonlinearity):
    args = make_additive(20, dtype)
    alpha = at.alignment(*args, nonlinearity=nonlinearity)
    assert alpha.shape == (T_Y, T_X)
    close(alpha, naive.alignment(*args, nonlinearity), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nonlinearity", ["tanh", None])
def test_alignment_backward_matches_naive(dtype, nonlinearity):
    args = make_additive(21, dtype)
    dC = np.random.default_rng(22).normal(size=(T_Y, D_H)).astype(dtype)
    got = at.alignment_backward(*args, dC, nonlinearity=nonlinearity)
    want = naive.alignment_backward(*args, dC, nonlinearity)
    scale = max(np.abs(w).max() for w in want)   # dS, dWsa are 0 without tanh: judge them on this
    for name, g, w in zip(at.AlignmentGrads._fields, got, want):
        assert g.shape == w.shape, name
        close(g, w, dtype, grad=True, scale=scale)


@pytest.mark.parametrize("nonlinearity", ["tanh", None])
def test_alignment_gradients_match_finite_differences(nonlinearity):
    S, H, Wsa, Wha, va = args = make_additive(23)
    dC = np.random.default_rng(24).normal(size=(T_Y, D_H))

    def loss():     # l = sum_i dC_i . c_i, so dl/dc_i = dC_i
        return float((dC * (at.alignment(S, H, Wsa, Wha, va, nonlinearity) @ H)).sum())

    got = at.alignment_backward(*args, dC, nonlinearity=nonlinearity)
    num = [naive.numeric_grad(loss, arg) for arg in args]
    scale = max(np.abs(n).max() for n in num)   # dS, dWsa are 0 without tanh: judge them on this
    for name, n in zip(("dS", "dH", "dWsa", "dWha", "dva"), num):
        err = naive.rel_err(getattr(got, name), n, scale)
        assert err <= FD_TOL, f"{name}: relative error {err:.2e}"
    if nonlinearity is None:    # s_i adds the same to every score of row i: it cannot matter
        assert np.abs(got.dS).max() <= 1e-12 * scale and np.abs(got.dWsa).max() <= 1e-12 * scale


def make_additive_widths(seed, d_s, d_h, d_a=D_A, t_y=T_Y, t_x=T_X):
    """Decoder states of width d_s, encoder states of width d_h: the lesson allows d_s != d_h."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(t_y, d_s)), rng.normal(size=(t_x, d_h)),
            rng.normal(size=(d_a, d_s)), rng.normal(size=(d_a, d_h)), rng.normal(size=d_a))


@pytest.mark.parametrize("d_s,d_h", [(2, 5), (6, 3), (1, 4)])
@pytest.mark.parametrize("nonlinearity", ["tanh", None])
def test_alignment_with_different_widths_matches_naive_and_finite_differences(d_s, d_h,
                                                                               nonlinearity):
    S, H, Wsa, Wha, va = args = make_additive_widths(40 + d_s, d_s, d_h)
    dC = np.random.default_rng(41).normal(size=(T_Y, d_h))
    close(at.alignment(*args, nonlinearity=nonlinearity), naive.alignment(*args, nonlinearity),
          np.float64)
    got = at.alignment_backward(*args, dC, nonlinearity=nonlinearity)
    assert got.dS.shape == (T_Y, d_s) and got.dWsa.shape == (D_A, d_s)
    assert got.dH.shape == (T_X, d_h) and got.dWha.shape == (D_A, d_h)

    def loss():     # l = sum_i dC_i . c_i
        return float((dC * (at.alignment(S, H, Wsa, Wha, va, nonlinearity) @ H)).sum())

    num = [naive.numeric_grad(loss, arg) for arg in args]
    scale = max(np.abs(n).max() for n in num)
    for name, n in zip(("dS", "dH", "dWsa", "dWha", "dva"), num):
        err = naive.rel_err(getattr(got, name), n, scale)
        assert err <= FD_TOL, f"{name}: relative error {err:.2e}"


def test_alignment_with_different_widths_names_the_width_that_does_not_fit():
    S, H, Wsa, Wha, va = make_additive_widths(42, 2, 5)
    with pytest.raises(ValueError, match=r"^Wha must have shape \(2, 5\).*got \(2, 2\)"):
        at.alignment(S, H, Wsa, Wsa, va)                     # Wsa's d_s columns where H has d_h
    with pytest.raises(ValueError, match=r"^Wsa must have shape \(d_a, 2\).*got \(2, 5\)"):
        at.alignment(S, H, Wha, Wha, va)
    with pytest.raises(ValueError, match=r"dC"):
        at.alignment_backward(S, H, Wsa, Wha, va, np.ones((T_Y, 2)))   # dC is (T_y, d_h)


@pytest.mark.parametrize("dtype", DTYPES)
def test_alignment_routes_sum_to_the_gradient(dtype):
    S, H, Wsa, Wha, va = make_additive(25, dtype)
    dC = np.random.default_rng(26).normal(size=(T_Y, D_H)).astype(dtype)
    g = at.alignment_backward(S, H, Wsa, Wha, va, dC)
    tol = 1e-15 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(g.dH_value + g.dH_score, g.dH, rtol=tol, atol=tol)
    alpha = at.alignment(S, H, Wsa, Wha, va).astype(np.float64)
    close(g.dH_value, alpha.T @ dC.astype(np.float64), dtype, grad=True)   # c_i = sum_j alpha_ij h_j


@pytest.mark.parametrize("dtype", DTYPES)
def test_alignment_without_tanh_gives_identical_rows(dtype):
    args = make_additive(27, dtype, t_y=6)
    alpha = at.alignment(*args, nonlinearity=None)
    tol = 1e-13 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(alpha, np.broadcast_to(alpha[0], alpha.shape), rtol=tol, atol=tol)
    with_tanh = at.alignment(*args)
    assert np.ptp(with_tanh, axis=0).max() > 1e-2   # with tanh the rows do differ


@pytest.mark.parametrize("nonlinearity", ["tanh", None])
def test_alignment_rows_sum_to_one(nonlinearity):
    S, H, Wsa, Wha, va = make_additive(28)
    alpha = at.alignment(S * 3, H * 3, Wsa, Wha, va * 5, nonlinearity)
    np.testing.assert_allclose(alpha.sum(axis=1), 1.0, rtol=0, atol=1e-14)


def test_alignment_overflow_is_named_never_a_nan():
    # Encoder states times 1e200 without tanh: the scores are finite (~1e200) and alpha too,
    # but dva = sum dE p and dWha = dPh^T H grow like |H|^2. Before: NaN and inf, silently.
    S, H, Wsa, Wha, va = make_additive(29)
    dC = np.random.default_rng(30).normal(size=(S.shape[0], H.shape[1]))
    assert np.isfinite(at.alignment(S, H * 1e200, Wsa, Wha, va, nonlinearity=None)).all()
    with pytest.raises(FloatingPointError, match=r"^the gradient dWha overflows float64"):
        at.alignment_backward(S, H * 1e200, Wsa, Wha, va, dC, nonlinearity=None)
    g = at.alignment_backward(S, H * 1e200, Wsa, Wha, va, dC)          # tanh: bounded, finite
    assert all(np.isfinite(a).all() for a in g)
    with pytest.raises(FloatingPointError, match=r"^the projection Wha h_j overflows float64"):
        at.alignment(S, H * 1e307, Wsa, Wha * 100, va)


# ------------------------------------------------------------ the lesson's example

def _lesson():
    from harness.analysis.lessons import lesson_additive_inputs    # the one copy of the lesson's draws
    return lesson_additive_inputs(0.5)


def test_lesson_alignment_numbers():
    S, H, Wsa, Wha, va, _ = _lesson()
    alpha = at.alignment(S, H, Wsa, Wha, va)
    assert alpha.shape == (8, 6)
    assert Wsa.size + Wha.size + va.size == 44                  # "pesos: 44"
    top = alpha.max(axis=1)                                    # "ronda 0.18", uniform 0.167
    assert np.all((top > 1 / 6) & (top < 0.19)) and abs(top.mean() - 0.18) < 0.005
    lineal = at.alignment(S, H, Wsa, Wha, va, nonlinearity=None)
    assert np.allclose(lineal, lineal[0])                       # "todas las filas iguales: True"


def test_lesson_gradient_routes():
    S, H, Wsa, Wha, va, G = _lesson()
    g = at.alignment_backward(S, H, Wsa, Wha, va, G)
    assert round(float(np.linalg.norm(g.dH_value)), 4) == 2.8303
    assert round(float(np.linalg.norm(g.dH_score)), 4) == 0.2556

    def perdida(H):     # the lesson's own NumPy loss, independent of the kernels
        P = (S @ Wsa.T)[:, None, :] + (H @ Wha.T)[None, :, :]
        E = np.tanh(P) @ va
        Z = np.exp(E - E.max(axis=1, keepdims=True))
        alfa = Z / Z.sum(axis=1, keepdims=True)
        return float((G * (alfa @ H)).sum())

    num = np.zeros_like(H)
    for j in range(H.shape[0]):
        for k in range(H.shape[1]):
            Hp, Hm = H.copy(), H.copy()
            Hp[j, k] += 1e-6
            Hm[j, k] -= 1e-6
            num[j, k] = (perdida(Hp) - perdida(Hm)) / 2e-6
    assert np.abs(g.dH_value - num).max() > 0.1                # each route alone: wrong in the first digit
    assert np.abs(g.dH_score - num).max() > 0.1
    assert np.abs(g.dH_value + g.dH_score - num).max() < 1e-8  # both: ~1e-10


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (4, 1), (1, 1, 1), (3, 1, 2)])
def test_smallest_sizes_match_naive(dtype, causal, shape):
    X = np.random.default_rng(30).normal(size=shape).astype(dtype)
    Y, A = at.forward(X, causal=causal)
    Yn, An = naive.attention_forward(X, causal=causal)
    close(Y, Yn, dtype)
    close(A, An, dtype)
    dY = np.random.default_rng(31).normal(size=Y.shape).astype(dtype)
    close(at.backward(X, None, None, None, A, dY, causal=causal).dX,
          naive.attention_backward(X, None, None, None, dY, causal=causal)[0], dtype, grad=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_huge_scores_do_not_overflow(dtype, causal):
    # Scores near 1e4 would overflow exp without the row-maximum shift.
    X = (np.random.default_rng(32).normal(size=(6, D_MODEL)) * 60).astype(dtype)
    Y, A = at.forward(X, scale=False, causal=causal)
    assert np.isfinite(Y).all() and np.isfinite(A).all()
    Yn, An = naive.attention_forward(X, scale=False, causal=causal)
    close(A, An, dtype)
    close(Y, Yn, dtype)
    S, H, Wsa, Wha, va = make_additive(33, dtype)
    big = (va * 1e4).astype(dtype)
    alpha = at.alignment(S, H, Wsa, Wha, big)
    assert np.isfinite(alpha).all()
    close(alpha, naive.alignment(S, H, Wsa, Wha, big), dtype)


# ------------------------------------------- what backward checks of the A it is given

def _given(causal=False, t=12):
    X, Wq, Wk, Wv = make_self(40, np.float64, True, t=t)
    Y, A = at.forward(X, Wq, Wk, Wv, causal=causal)
    return X, (Wq, Wk, Wv), A, np.random.default_rng(41).normal(size=Y.shape)


@pytest.mark.parametrize("bad", ["double", "negative"])
def test_weights_that_are_not_softmax_rows_are_refused(bad):
    X, W, A, dY = _given()
    A = 2 * A if bad == "double" else A - A[:, ::-1]        # rows summing to 2; to 0 with negatives
    want = "sums to 2" if bad == "double" else "has a negative weight"
    with pytest.raises(ValueError, match=rf"^A must hold attention weights.*{want}"):
        at.backward(X, *W, A, dY)


def test_non_causal_weights_are_refused_with_causal():
    X, W, A, dY = _given(causal=False)
    with pytest.raises(ValueError, match=r"^A has weights above the diagonal in row 0"):
        at.backward(X, *W, A, dY, causal=True)


@pytest.mark.parametrize("other", ["X", "scale", "weights"])
def test_weights_from_another_forward_are_refused(other):
    # Rows that do sum to 1: only the 8 rows recomputed from X and the weights tell.
    X, W, A, dY = _given()
    if other == "X":
        A = at.forward(X + 0.5, *W)[1]
    elif other == "scale":
        A = at.forward(X, *W, scale=False)[1]
    else:
        A = at.forward(X, W[1], W[0], W[2])[1]              # Wq and Wk swapped
    with pytest.raises(ValueError, match=r"^A does not match this forward"):
        at.backward(X, *W, A, dY)


# ----------------------------------------------- finite inputs that overflow the scores

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("proj", [True, False])
@pytest.mark.parametrize("dtype,big", [(np.float64, 1e154), (np.float32, 1e19)])
def test_huge_finite_inputs_give_finite_weights_or_a_named_error(dtype, big, proj, causal):
    # Scores past the dtype's range (q . k ~ 1e308 d, 1e38 d): the scores' GEMM is rescaled
    # by a power of two, and the max-subtracted softmax is one-hot at each row's largest
    # score, which is what must come out; never a NaN.
    X, Wq, Wk, Wv = make_self(42, dtype, proj, t=6)
    W = (Wq, Wk, Wv)
    Xb = (X * big).astype(dtype)
    Y, A = at.forward(Xb, *W, causal=causal)
    assert np.isfinite(Y).all() and np.isfinite(A).all()
    X64 = X.astype(np.float64)
    Q, K = (X64, X64) if Wq is None else (X64 @ Wq, X64 @ Wk)
    E = Q @ K.T
    if causal:
        E = np.where(np.tri(6, dtype=bool), E, -np.inf)
    np.testing.assert_array_equal(A, np.eye(6, dtype=dtype)[E.argmax(axis=1)])
    try:
        Yt, L = at.forward(Xb, *W, causal=causal, return_weights=False)
    except FloatingPointError as e:                          # L itself past float64's range
        assert str(e).startswith("the row log-sum-exp L overflows float64")
    else:
        close(Yt, Y, dtype)
        A = L                                                # the tiled backward too
    try:
        grads = at.backward(Xb, *W, A, np.ones_like(Y), causal=causal, Y=Y)
    except FloatingPointError as e:
        assert "overflows" in str(e)
    except ValueError as e:                                  # L ~ 1e307, held to +-1e292
        assert A.ndim == 1 and str(e).startswith("A (here L, the row log-sum-exp) is too coarse")
    else:
        assert all(np.isfinite(g).all() for g in grads if g is not None)


def test_a_projection_that_overflows_is_named():
    X, Wq, Wk, Wv = make_self(43)
    with pytest.raises(FloatingPointError, match=r"^the projection Q = X Wq overflows float64"):
        at.forward(X * 1e306, Wq * 1e10, Wk * 1e10, Wv * 1e10)


# ------------------------------------------- the forward's projections, kept for the backward

def _counting_projections(monkeypatch):
    """The shapes of X in every projection made, by the checked path or the plain one."""
    calls = []
    for name in ("_projections", "_project_bits"):
        def counted(*args, real=getattr(at, name)):
            calls.append(args[0].shape)
            return real(*args)
        monkeypatch.setattr(at, name, counted)
    return calls


@pytest.mark.parametrize("return_weights", [True, False])
def test_backward_reuses_the_forwards_projections_of_the_same_inputs(monkeypatch, return_weights):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 9, 4))
    W = [rng.standard_normal((4, 3)) for _ in range(3)]
    dY = rng.standard_normal((2, 9, 3))
    workspace.clear()
    fresh = at.backward(X, *W, at.forward(X, *W, return_weights=return_weights)[1], dY)
    calls = _counting_projections(monkeypatch)
    Y, A = at.forward(X, *W, return_weights=return_weights)
    g = at.backward(X.copy(), *(w.copy() for w in W), A, dY, Y=Y)   # equal values, other arrays
    assert calls == [(18, 4)]                                       # the forward's only
    for a, b in zip(g, fresh):
        np.testing.assert_array_equal(a, b)


def test_backward_recomputes_after_x_changed_in_place(monkeypatch):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((7, 4))
    W = [rng.standard_normal((4, 4)) for _ in range(3)]
    dY = rng.standard_normal((7, 4))
    calls = _counting_projections(monkeypatch)
    Y, A = at.forward(X, *W)
    X[3, 1] += 0.5                                   # one element, in place, after the forward
    with pytest.raises(ValueError, match="does not match this forward"):
        at.backward(X, *W, A, dY, Y=Y)               # A no longer follows from X: said so
    assert len(calls) == 2                           # and the projections were made again
    Y2, A2 = at.forward(X, *W)
    assert len(calls) == 3
    g = at.backward(X, *W, A2, dY, Y=Y2)
    assert len(calls) == 3
    ref = naive.attention_backward(X, *W, dY)        # the loop twin, from the changed X
    np.testing.assert_allclose(g.dX, ref[0], rtol=1e-10, atol=1e-12)


def test_other_weights_or_another_thread_never_see_the_kept_projections(monkeypatch):
    import threading
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 3))
    W = [rng.standard_normal((3, 3)) for _ in range(3)]
    dY = rng.standard_normal((6, 3))
    Y, A = at.forward(X, *W)
    calls = _counting_projections(monkeypatch)
    W2 = [w.copy() for w in W]
    W2[2][0, 0] = -W2[2][0, 0]                       # Wv differs: Q and K alone would match
    at.backward(X, *W2, A, dY)
    assert len(calls) == 1
    at.forward(X, *W)
    seen = []
    t = threading.Thread(target=lambda: seen.append(at._kept_projections(X[None], tuple(W))))
    t.start()
    t.join()
    assert seen == [None]                             # kept per thread
    assert at._kept_projections(X[None], tuple(W)) is not None
    workspace.clear()                                # dropped with the buffers
    assert at._kept_projections(X[None], tuple(W)) is None
