"""harness.kernels.rnn against its loop twin in tests/naive.py and against finite differences.

Tolerances (stated once): the naive twin runs in float64 on the same (possibly
float32) inputs. float64 kernels agree with it to 1e-12 relative to the
largest entry (measured: 4e-16), float32 kernels to 1e-5 (measured: 2e-7).
Gradients agree with central finite differences, in float64, to a relative
error of 1e-6 (measured: 9e-10).
"""

from __future__ import annotations

import numpy as np
import pytest

import naive
from harness.kernels import rnn

T, D_IN, D_H, B = 5, 3, 4, 2
FD_TOL = 1e-6


def close(got, want, dtype):
    """Compare an array from the kernel with the float64 twin at the stated tolerance."""
    assert got.dtype == np.dtype(dtype)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    err = naive.rel_err(got, want)
    assert err <= tol, f"relative error {err:.2e} > {tol:.0e}"


def make(seed, dtype=np.float64, batched=False, with_b=True, h0="none", t=T):
    """Random inputs of a stable RNN; h0 is 'none', 'full' ((B, d_h) or (d_h,)) or 'shared' ((d_h,) over a batch)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, t, D_IN) if batched else (t, D_IN))
    W_xh = rng.normal(size=(D_H, D_IN)) * 0.6
    W_hh = rng.normal(size=(D_H, D_H)) * 0.9 / np.sqrt(D_H)
    b = rng.normal(size=D_H) * 0.3 if with_b else None
    if h0 == "none":
        h = None
    elif h0 == "full":
        h = rng.normal(size=(B, D_H) if batched else D_H) * 0.5
    else:
        h = rng.normal(size=D_H) * 0.5
    cast = lambda a: None if a is None else a.astype(dtype)   # noqa: E731
    return cast(X), cast(W_xh), cast(W_hh), cast(b), cast(h)


CASES = [
    (batched, with_b, h0)
    for batched in (False, True)
    for with_b in (False, True)
    for h0 in (("none", "full", "shared") if batched else ("none", "full"))
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("batched,with_b,h0", CASES)
def test_forward_matches_naive(dtype, activation, batched, with_b, h0):
    X, W_xh, W_hh, b, h = make(1, dtype, batched, with_b, h0)
    H = rnn.forward(X, W_xh, W_hh, b, h, activation)
    assert H.shape == X.shape[:-1] + (D_H,)
    close(H, naive.rnn_forward(X, W_xh, W_hh, b, h, activation), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("batched,with_b,h0", CASES)
def test_backward_matches_naive(dtype, activation, batched, with_b, h0):
    X, W_xh, W_hh, b, h = make(2, dtype, batched, with_b, h0)
    H = rnn.forward(X, W_xh, W_hh, b, h, activation)
    dH = np.random.default_rng(3).normal(size=H.shape).astype(dtype)
    got = rnn.backward(X, H, W_xh, W_hh, dH, h, activation)
    want = naive.rnn_backward(X, H, W_xh, W_hh, dH, h, activation)
    for name, g, w in zip(rnn.RNNGrads._fields, got, want):
        assert g.shape == w.shape, name
        close(g, w, dtype)
    if h is not None:
        assert got.dh0.shape == h.shape
    else:
        assert got.dh0.shape == ((B, D_H) if batched else (D_H,))


@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("batched,h0", [(False, "none"), (False, "full"),
                                        (True, "none"), (True, "full"), (True, "shared")])
def test_gradients_match_finite_differences(activation, batched, h0):
    X, W_xh, W_hh, b, h = make(4, np.float64, batched, True, h0)
    if h is None:
        h = np.zeros((B, D_H) if batched else D_H)   # so that dh0 can be checked too
    G = np.random.default_rng(5).normal(size=X.shape[:-1] + (D_H,))

    def loss():
        return float((G * rnn.forward(X, W_xh, W_hh, b, h, activation)).sum())

    H = rnn.forward(X, W_xh, W_hh, b, h, activation)
    got = rnn.backward(X, H, W_xh, W_hh, G, h, activation)
    for name, arg in zip(rnn.RNNGrads._fields, (X, W_xh, W_hh, b, h)):
        err = naive.rel_err(getattr(got, name), naive.numeric_grad(loss, arg))
        assert err <= FD_TOL, f"{name}: relative error {err:.2e}"


def test_gradient_without_h0_matches_zero_h0():
    # h0=None must mean zeros, in the backward as in the forward.
    X, W_xh, W_hh, b, _ = make(6, np.float64, True)
    H = rnn.forward(X, W_xh, W_hh, b)
    dH = np.random.default_rng(7).normal(size=H.shape)
    a = rnn.backward(X, H, W_xh, W_hh, dH)
    z = rnn.backward(X, H, W_xh, W_hh, dH, np.zeros((B, D_H)))
    for g, w in zip(a, z):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("activation", ["tanh", "identity"])
def test_batch_is_a_stack_of_sequences(activation):
    X, W_xh, W_hh, b, h = make(8, np.float64, True, True, "full")
    H = rnn.forward(X, W_xh, W_hh, b, h, activation)
    for n in range(B):
        np.testing.assert_allclose(H[n], rnn.forward(X[n], W_xh, W_hh, b, h[n], activation),
                                   rtol=1e-13, atol=1e-14)


def test_identity_rnn_is_linear_in_x():
    # phi = identity, b = 0, h0 = 0: H is linear in X, so H(2X + X') = 2 H(X) + H(X').
    X, W_xh, W_hh, _, _ = make(9, np.float64)
    X2 = np.random.default_rng(10).normal(size=X.shape)
    f = lambda x: rnn.forward(x, W_xh, W_hh, activation="identity")   # noqa: E731
    np.testing.assert_allclose(f(2 * X + X2), 2 * f(X) + f(X2), rtol=1e-12, atol=1e-12)


def test_parameter_count_does_not_depend_on_T():
    # The same weights run on T = 3 and T = 9; their gradients have the weights' shapes.
    _, W_xh, W_hh, b, _ = make(11)
    sizes = set()
    for t in (3, 9):
        X = np.random.default_rng(t).normal(size=(t, D_IN))
        H = rnn.forward(X, W_xh, W_hh, b)
        assert H.shape == (t, D_H)
        g = rnn.backward(X, H, W_xh, W_hh, np.ones_like(H))
        assert (g.dW_xh.shape, g.dW_hh.shape, g.db.shape) == (W_xh.shape, W_hh.shape, b.shape)
        sizes.add(g.dW_xh.size + g.dW_hh.size + g.db.size)
    assert sizes == {D_H * D_IN + D_H * D_H + D_H}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (4, 1), (1, 1, 1), (1, 6, 2), (3, 1, 2)])
def test_smallest_sizes_match_naive(dtype, shape):
    # T = 1, one input feature, a batch of one: the edges of every loop.
    rng = np.random.default_rng(12)
    X = rng.normal(size=shape).astype(dtype)
    W_xh = rng.normal(size=(1, shape[-1])).astype(dtype)
    W_hh = np.array([[0.7]], dtype=dtype)                  # d_h = 1
    H = rnn.forward(X, W_xh, W_hh)
    close(H, naive.rnn_forward(X, W_xh, W_hh), dtype)
    dH = rng.normal(size=H.shape).astype(dtype)
    for g, w in zip(rnn.backward(X, H, W_xh, W_hh, dH), naive.rnn_backward(X, H, W_xh, W_hh, dH)):
        close(g, w, dtype)


def test_saturated_tanh_states_stay_finite():
    X, W_xh, W_hh, b, _ = make(13)
    H = rnn.forward(X * 1e3, W_xh * 1e3, W_hh, b)
    assert np.all(np.abs(H) <= 1.0) and np.isfinite(H).all()
    close(H, naive.rnn_forward(X * 1e3, W_xh * 1e3, W_hh, b), np.float64)


# --------------------------------------------------------------------------- no silent wrong numbers

def _draw(seed, T=12, d=6, batched=False, dtype=np.float64, scale=1.0):
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(3, T, d) if batched else (T, d)) * scale).astype(dtype)
    W_xh = (rng.normal(size=(d, d)) / np.sqrt(d)).astype(dtype)
    W_hh = (rng.normal(size=(d, d)) / np.sqrt(d)).astype(dtype)
    return rng, X, W_xh, W_hh


def test_backward_refuses_states_of_the_identity_forward():
    _, X, W_xh, W_hh = _draw(0, scale=3.0)
    H = rnn.forward(X, W_xh, W_hh, activation="identity")
    assert np.abs(H).max() > 1
    with pytest.raises(ValueError, match="activation"):
        rnn.backward(X, H, W_xh, W_hh, np.ones_like(H))          # tanh by default


def test_backward_refuses_a_forgotten_h0():
    rng, X, W_xh, W_hh = _draw(1)
    h0 = rng.normal(size=6)
    H = rnn.forward(X, W_xh, W_hh, h0=h0)
    with pytest.raises(ValueError, match="h0"):
        rnn.backward(X, H, W_xh, W_hh, np.ones_like(H))          # h0 left out
    rnn.backward(X, H, W_xh, W_hh, np.ones_like(H), h0=h0)       # with it: fine


def test_backward_refuses_states_of_another_X():
    rng, X, W_xh, W_hh = _draw(2)
    H = rnn.forward(X, W_xh, W_hh)
    with pytest.raises(ValueError, match="does not follow"):
        rnn.backward(X + rng.normal(size=X.shape), H, W_xh, W_hh, np.ones_like(H))


@pytest.mark.parametrize("activation", ["tanh", "identity"])
def test_backward_checks_every_sequence_of_a_batch(activation):
    # Sequences 1 and 2 of H swapped: before, only sequence 0 was checked, and dW_hh came
    # back 112 % off, silently.
    rng, X, W_xh, W_hh = _draw(4, batched=True)
    H = rnn.forward(X, W_xh, W_hh, activation=activation)
    H[[1, 2]] = H[[2, 1]]
    with pytest.raises(ValueError, match=r"^H does not follow from X and h0 of sequence 1:"):
        rnn.backward(X, H, W_xh, W_hh, rng.normal(size=H.shape), activation=activation)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("activation", ["tanh", "identity"])
def test_matching_forward_and_backward_are_never_refused(dtype, batched, activation):
    """The checks have no false alarms: with a bias, an h0, saturation, both dtypes."""
    for seed in range(20):
        rng, X, W_xh, W_hh = _draw(seed, batched=batched, dtype=dtype, scale=[0.1, 1, 5][seed % 3])
        b = (rng.normal(size=6) * 2).astype(dtype)
        h0 = rng.normal(size=(3, 6) if batched else 6).astype(dtype)
        H = rnn.forward(X, W_xh, W_hh, b=b, h0=h0, activation=activation)
        rnn.backward(X, H, W_xh, W_hh, np.ones_like(H), h0=h0, activation=activation)


def test_overflow_is_announced_with_its_step():
    _, X, W_xh, W_hh = _draw(3)
    with pytest.raises(FloatingPointError, match=r"h_t is not finite from step t=1 "):
        rnn.forward(X * 1e300, W_xh * 1e10, W_hh, activation="identity")
    # the identity RNN at rho = 1.5 grows like 1.5^t: float64 overflows near t = 1750
    d = 8
    Q = np.linalg.qr(np.random.default_rng(0).normal(size=(d, d)))[0]
    X = np.random.default_rng(1).normal(size=(2000, d))
    with pytest.raises(FloatingPointError, match=r"step t=1[67]\d\d of 2000"):
        rnn.forward(X, np.eye(d), 1.5 * Q, activation="identity")
    with pytest.raises(FloatingPointError, match="float64"):
        rnn.forward(X.astype(np.float32), np.eye(d, dtype=np.float32),
                    (1.5 * Q).astype(np.float32), activation="identity")


def _wide(d_h, dtype, t=9, seed=3, h0=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(t, 5)).astype(dtype)
    W_xh = (rng.normal(size=(d_h, 5)) * 0.6).astype(dtype)
    W_hh = (rng.normal(size=(d_h, d_h)) * 0.9 / np.sqrt(d_h)).astype(dtype)
    b = (rng.normal(size=d_h) * 0.3).astype(dtype)
    h = (rng.normal(size=d_h) * 0.5).astype(dtype) if h0 else None
    return X, W_xh, W_hh, b, h


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("side", ["loop", "gemv"])
@pytest.mark.parametrize("activation", ["tanh", "identity"])
def test_forward_on_both_sides_of_the_in_loop_product(dtype, side, activation):
    """The unbatched forward's two forms, the step product in the loop up to _AXPY_MAX[itemsize]
    and a gemv call past it, each against the twin at the widths around the switch, with a
    remainder after the loop's four columns at a time."""
    top = rnn._AXPY_MAX[np.dtype(dtype).itemsize]
    for d_h in ((1, 2, 3, 5, 6, 7, top - 1, top) if side == "loop" else (top + 1, top + 3)):
        X, W_xh, W_hh, b, h = _wide(d_h, dtype)
        close(rnn.forward(X, W_xh, W_hh, b, h, activation),
              naive.rnn_forward(X, W_xh, W_hh, b, h, activation), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d_h", [1, 4, 9, 64])
def test_the_two_compiled_step_forms_agree(dtype, d_h):
    """_forward_vec_axpy and _forward_vec on the same inputs: the same states, to the rounding
    of two summation orders (the forward dispatches by width, so each is also called here
    where it is not chosen)."""
    X, W_xh, W_hh, b, h = _wide(d_h, dtype, t=30)
    out = [np.empty((30, d_h), dtype) for _ in range(2)]
    rnn._forward_vec_axpy(X, W_xh, np.ascontiguousarray(W_hh.T), b, h, True, out[0])
    rnn._forward_vec(X, W_xh, W_hh, b, h, True, out[1])
    want = naive.rnn_forward(X, W_xh, W_hh, b, h)
    for H in out:
        close(H, want, dtype)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert naive.rel_err(out[0], out[1]) <= tol
