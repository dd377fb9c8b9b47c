"""harness.kernels.lstm against torch.nn.LSTM, its loop twin in tests/naive_gated.py, and finite
differences.

Tolerances (stated once), relative to the largest entry of each array:
- torch.nn.LSTM and autograd, float64: 1e-12 (measured: 2e-15);
- the naive twin, which runs in float64 on the same (possibly float32) inputs: float64 kernels
  to 1e-12 (measured: 1e-15), float32 kernels to 2e-5 (measured: 4e-7);
- central finite differences, float64: 1e-6 (measured: 2e-9).
"""

from __future__ import annotations

import numpy as np
import pytest

import naive
import naive_gated as ng
from _deps import require_module
from _helpers import in_place_change_is_not_its_forward
from harness.kernels import lstm

T, D_IN, D_H, B = 5, 3, 4, 2
TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 2e-5}
TORCH_TOL = 1e-12
FD_TOL = 1e-6


def close(got, want, dtype, what=""):
    """Compare an array from the kernel with a float64 reference at the stated tolerance."""
    assert got.dtype == np.dtype(dtype), what
    assert got.shape == np.shape(want), what
    err = naive.rel_err(got, want)
    assert err <= TOL[np.dtype(dtype)], f"{what}: relative error {err:.2e}"


def make(seed, dtype=np.float64, batched=False, bias=True, states="none", t=T, scale=1.0):
    """Random inputs; states is 'none', 'full' ((B, d_h) or (d_h,)) or 'shared' ((d_h,) over a batch)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, t, D_IN) if batched else (t, D_IN)) * scale
    W_ih = rng.normal(size=(4 * D_H, D_IN)) * 0.6
    W_hh = rng.normal(size=(4 * D_H, D_H)) * 0.6
    b_ih, b_hh = (rng.normal(size=4 * D_H) * 0.4 for _ in range(2)) if bias else (None, None)
    if states == "none":
        h0 = c0 = None
    else:
        shape = (B, D_H) if batched and states == "full" else (D_H,)
        h0, c0 = rng.normal(size=shape) * 0.5, rng.normal(size=shape)
    cast = lambda a: None if a is None else a.astype(dtype)   # noqa: E731
    return tuple(cast(a) for a in (X, W_ih, W_hh, b_ih, b_hh, h0, c0))


CASES = [(batched, bias, states)
         for batched in (False, True)
         for bias in (False, True)
         for states in (("none", "full", "shared") if batched else ("none", "full"))]


# ------------------------------------------------------------------ against the loop twin

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batched,bias,states", CASES)
def test_forward_matches_naive(dtype, batched, bias, states):
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(1, dtype, batched, bias, states)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    Hn, Cn = ng.lstm_forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    close(H, Hn, dtype, "H")
    close(C, Cn, dtype, "C")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_dC", [False, True])
@pytest.mark.parametrize("batched,bias,states", CASES)
def test_backward_matches_naive(dtype, with_dC, batched, bias, states):
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(2, dtype, batched, bias, states)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    rng = np.random.default_rng(3)
    dH = rng.normal(size=H.shape).astype(dtype)
    dC = rng.normal(size=H.shape).astype(dtype) if with_dC else None
    got = lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh, h0, c0, dC)
    want = ng.lstm_backward(X, W_ih, W_hh, dH, b_ih, b_hh, h0, c0, dC)
    for name, g, w in zip(lstm.LSTMGrads._fields, got, want):
        close(g, w, dtype, name)
    state_shape = (B, D_H) if batched else (D_H,)
    assert got.dh0.shape == (state_shape if h0 is None else h0.shape)
    assert got.dc0.shape == (state_shape if c0 is None else c0.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [None, 3, 16])
def test_wider_layers_match_naive(dtype, batch):
    # d_h = 24, d_in = 7: every loop runs over more than a vector register's width; B = 16 takes
    # the float32 step copies' blocks of 8 sequences (steps.add_columns, to_columns)
    rng = np.random.default_rng(4)
    d_in, d_h, t = 7, 24, 9
    X = rng.normal(size=(batch, t, d_in) if batch else (t, d_in)).astype(dtype)
    W_ih = (rng.normal(size=(4 * d_h, d_in)) / np.sqrt(d_in)).astype(dtype)
    W_hh = (rng.normal(size=(4 * d_h, d_h)) / np.sqrt(d_h)).astype(dtype)
    b_ih, b_hh = (rng.normal(size=4 * d_h).astype(dtype) for _ in range(2))
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh)
    Hn, Cn = ng.lstm_forward(X, W_ih, W_hh, b_ih, b_hh)
    close(H, Hn, dtype, "H")
    close(C, Cn, dtype, "C")
    dH = rng.normal(size=H.shape).astype(dtype)
    got = lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh)
    for name, g, w in zip(lstm.LSTMGrads._fields, got, ng.lstm_backward(X, W_ih, W_hh, dH, b_ih, b_hh)):
        close(g, w, dtype, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (4, 1), (1, 1, 1), (1, 6, 2), (3, 1, 2)])
def test_smallest_sizes_match_naive(dtype, shape):
    # T = 1, one input feature, a batch of one, d_h = 1: the edges of every loop
    rng = np.random.default_rng(5)
    X = rng.normal(size=shape).astype(dtype)
    W_ih = rng.normal(size=(4, shape[-1])).astype(dtype)
    W_hh = rng.normal(size=(4, 1)).astype(dtype)
    H, C = lstm.forward(X, W_ih, W_hh)
    Hn, Cn = ng.lstm_forward(X, W_ih, W_hh)
    close(H, Hn, dtype, "H")
    close(C, Cn, dtype, "C")
    dH = rng.normal(size=H.shape).astype(dtype)
    for name, g, w in zip(lstm.LSTMGrads._fields, lstm.backward(X, H, C, W_ih, W_hh, dH),
                          ng.lstm_backward(X, W_ih, W_hh, dH)):
        close(g, w, dtype, name)


def test_batch_is_a_stack_of_sequences():
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(6, np.float64, True, True, "full")
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    for n in range(B):
        Hn, Cn = lstm.forward(X[n], W_ih, W_hh, b_ih, b_hh, h0[n], c0[n])
        np.testing.assert_allclose(H[n], Hn, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(C[n], Cn, rtol=1e-13, atol=1e-14)


def test_saturated_gates_stay_finite_and_exact():
    X, W_ih, W_hh, b_ih, b_hh, _, _ = make(7)
    X = X * 1e3                                   # every gate at 0 or 1
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh)
    Hn, Cn = ng.lstm_forward(X, W_ih, W_hh, b_ih, b_hh)
    close(H, Hn, np.float64, "H")
    close(C, Cn, np.float64, "C")
    dH = np.ones_like(H)
    for g in lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh):
        assert np.isfinite(g).all()


# ------------------------------------------------ the forward's gates, kept or recomputed

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batched", [False, True])
def test_kept_and_recomputed_gates_give_the_same_gradients(dtype, batched, monkeypatch):
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(8, dtype, batched, True, "full")
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    dH = np.random.default_rng(9).normal(size=H.shape).astype(dtype)
    calls = []
    real = lstm._gates_from_products
    monkeypatch.setattr(lstm, "_gates_from_products", lambda *a: (calls.append(1), real(*a)))
    # refused before it touched the kept gates
    with pytest.raises(ValueError, match="dH must have shape"):
        lstm.backward(X, H, C, W_ih, W_hh, dH[..., :1], b_ih, b_hh, h0, c0)
    kept = lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh, h0, c0)
    assert calls == []                            # right after its forward: the kept gates
    again = lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh, h0, c0)
    assert calls == [1]                           # the backward wrote over them: recomputed
    lstm.forward(X[..., :2, :], W_ih, W_hh)       # another forward in between
    other = lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh, h0, c0)
    assert calls == [1, 1]
    H2, C2 = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    copy = lstm.backward(X.copy(), H2.copy(), C2, W_ih, W_hh.copy(), dH, b_ih, b_hh, h0, c0)
    assert calls == [1, 1]                        # copies of the same values: the kept gates
    H3, C3 = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    W_hh2 = W_hh.copy()
    W_hh2[0, 0] = np.nextafter(W_hh2[0, 0], np.inf)
    lstm.backward(X, H3, C3, W_ih, W_hh2, dH, b_ih, b_hh, h0, c0)
    assert calls == [1, 1, 1]                     # one weight one ulp off: recomputed
    for name, *gs in zip(lstm.LSTMGrads._fields, kept, again, other, copy):
        for g in gs[1:]:
            close(g, gs[0].astype(np.float64), dtype, name)


@pytest.mark.parametrize("batched", [False, True])
def test_an_input_changed_in_place_after_the_forward_is_not_its_forward(batched):
    """By their values the same arrays and their copies are one computation (dX was off by
    0.47 when the kept gates were recognised by the arrays' identity)."""
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(16, np.float64, batched, True, "full", t=20)
    in_place_change_is_not_its_forward(
        lambda X_: lstm.forward(X_, W_ih, W_hh, b_ih, b_hh, h0, c0),
        lambda X_, out, dH: lstm.backward(X_, *out, W_ih, W_hh, dH, b_ih, b_hh, h0, c0),
        X, lstm.LSTMGrads._fields)


# --------------------------------------------------------------------------- PyTorch

def _torch_lstm(torch, X, W_ih, W_hh, b_ih, b_hh, h0, c0, GH, gc):
    """torch.nn.LSTM's (H, C_T, grads) with the same weights, for loss sum(GH * H) + sum(gc * c_T)."""
    net = torch.nn.LSTM(D_IN, D_H, bias=b_ih is not None, batch_first=True).double()
    with torch.no_grad():
        net.weight_ih_l0.copy_(torch.from_numpy(W_ih))
        net.weight_hh_l0.copy_(torch.from_numpy(W_hh))
        if b_ih is not None:
            net.bias_ih_l0.copy_(torch.from_numpy(b_ih))
            net.bias_hh_l0.copy_(torch.from_numpy(b_hh))
    Xt = torch.tensor(X, requires_grad=True)
    state = None
    if h0 is not None:
        state = tuple(torch.tensor(s[None], requires_grad=True) for s in (h0, c0))   # (1, [B,] d_h)
    out, (_, c_T) = net(Xt, state)
    loss = (out * torch.from_numpy(GH)).sum() + (c_T[0] * torch.from_numpy(gc)).sum()
    loss.backward()
    grads = {"dX": Xt.grad, "dW_ih": net.weight_ih_l0.grad, "dW_hh": net.weight_hh_l0.grad}
    if b_ih is not None:
        grads.update(db_ih=net.bias_ih_l0.grad, db_hh=net.bias_hh_l0.grad)
    if h0 is not None:
        grads.update(dh0=state[0].grad[0], dc0=state[1].grad[0])
    return out.detach().numpy(), c_T[0].detach().numpy(), {k: g.numpy() for k, g in grads.items()}


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("states", ["none", "full"])
def test_against_torch_nn_lstm(batched, bias, states):
    torch = require_module("torch", "pip install -e '.[torch]'")
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(10, np.float64, batched, bias, states)
    rng = np.random.default_rng(11)
    GH = rng.normal(size=X.shape[:-1] + (D_H,))
    gc = rng.normal(size=GH.shape[:-2] + (D_H,))
    H_t, cT_t, grads_t = _torch_lstm(torch, X, W_ih, W_hh, b_ih, b_hh, h0, c0, GH, gc)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    dC = np.zeros_like(C)
    dC[..., -1, :] = gc                          # torch returns c_T only: its gradient is dC's last step
    got = lstm.backward(X, H, C, W_ih, W_hh, GH, b_ih, b_hh, h0, c0, dC)
    checks = {"H": (H, H_t), "c_T": (C[..., -1, :], cT_t)}
    checks.update({name: (getattr(got, name), want) for name, want in grads_t.items()})
    assert len(checks) == 5 + 2 * bias + 2 * (states == "full")
    for name, (g, w) in checks.items():
        err = naive.rel_err(g, w)
        assert err <= TORCH_TOL, f"{name}: relative error {err:.2e} against torch"


# ------------------------------------------------------------------ finite differences

@pytest.mark.parametrize("batched,states", [(False, "full"), (True, "full"), (True, "shared")])
def test_gradients_match_finite_differences(batched, states):
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(12, np.float64, batched, True, states, t=3)
    rng = np.random.default_rng(13)
    GH = rng.normal(size=X.shape[:-1] + (D_H,))
    GC = rng.normal(size=GH.shape)

    def loss():
        H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
        return float((GH * H).sum() + (GC * C).sum())

    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    got = lstm.backward(X, H, C, W_ih, W_hh, GH, b_ih, b_hh, h0, c0, GC)
    for name, arg in zip(lstm.LSTMGrads._fields, (X, W_ih, W_hh, b_ih, b_hh, h0, c0)):
        err = naive.rel_err(getattr(got, name), naive.numeric_grad(loss, arg))
        assert err <= FD_TOL, f"{name}: relative error {err:.2e}"


# ------------------------------------------------------------- no silent wrong numbers

def _all_inputs(seed, dtype, batched):
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(seed, dtype, batched, True, "full")
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    rng = np.random.default_rng(seed + 1)
    dH, dC = (rng.normal(size=H.shape).astype(dtype) for _ in range(2))
    return dict(X=X, H=H, C=C, W_ih=W_ih, W_hh=W_hh, dH=dH, b_ih=b_ih, b_hh=b_hh, h0=h0, c0=c0, dC=dC)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batched", [False, True])
def test_inputs_are_never_written(dtype, batched):
    kw = _all_inputs(14, dtype, batched)
    before = {k: a.copy() for k, a in kw.items()}
    fw = {k: kw[k] for k in ("X", "W_ih", "W_hh", "b_ih", "b_hh", "h0", "c0")}
    lstm.forward(**fw)
    lstm.backward(**kw)                           # with the kept gates
    lstm.backward(**kw)                           # with recomputed ones
    for k, a in kw.items():
        np.testing.assert_array_equal(a, before[k], err_msg=k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batched", [False, True])
def test_backward_refuses_states_of_another_W_hh(dtype, batched):
    kw = _all_inputs(15, dtype, batched)
    kw["H"], kw["C"] = lstm.forward(kw["X"], kw["W_ih"], kw["W_hh"] / 2, kw["b_ih"], kw["b_hh"],
                                    kw["h0"], kw["c0"])
    with pytest.raises(ValueError, match="does not follow from X"):
        lstm.backward(**kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("states", ["none", "full"])
def test_backward_refuses_a_batch_with_two_sequences_swapped(dtype, states):
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(16, dtype, True, True, states)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    dH = np.ones_like(H)
    lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh, h0, c0)      # as they came: fine
    with pytest.raises(ValueError, match="of sequence 0"):
        lstm.backward(X, H[::-1], C[::-1], W_ih, W_hh, dH, b_ih, b_hh, h0, c0)
    with pytest.raises(ValueError, match="C does not follow"):
        lstm.backward(X, H, C[::-1], W_ih, W_hh, dH, b_ih, b_hh, h0, c0)


def test_backward_refuses_forgotten_states_and_biases():
    kw = _all_inputs(17, np.float64, False)
    for name in ("h0", "c0", "b_ih", "b_hh"):
        with pytest.raises(ValueError, match="does not follow"):
            lstm.backward(**{**kw, name: None})


def test_backward_refuses_states_of_another_X():
    kw = _all_inputs(18, np.float64, True)
    X = kw["X"].copy()
    X[1, 1] += 1.0                                # the second step of the second sequence only
    with pytest.raises(ValueError, match=r"step t=2 of sequence 1"):
        lstm.backward(**{**kw, "X": X})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batched", [False, True])
def test_matching_forward_and_backward_are_never_refused(dtype, batched):
    """The checks have no false alarms: with biases, states, saturation, both dtypes."""
    for seed in range(20):
        rng = np.random.default_rng(seed)
        d_in, d_h = 6, 5
        scale = [0.1, 1.0, 5.0][seed % 3]
        X = (rng.normal(size=(3, 12, d_in) if batched else (12, d_in)) * scale).astype(dtype)
        W_ih = (rng.normal(size=(4 * d_h, d_in)) * scale).astype(dtype)
        W_hh = (rng.normal(size=(4 * d_h, d_h)) * scale).astype(dtype)
        b_ih, b_hh = ((rng.normal(size=4 * d_h) * 2).astype(dtype) for _ in range(2))
        h0, c0 = ((rng.normal(size=(3, d_h) if batched else d_h) * 3).astype(dtype) for _ in range(2))
        H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
        lstm.backward(X, H, C, W_ih, W_hh, np.ones_like(H), b_ih, b_hh, h0, c0)


def test_overflow_is_announced_with_its_step():
    X = np.zeros((4, 2), dtype=np.float32)
    X[2] = 1e30                                   # x W_ih^T = 1e40 - 1e40 = inf - inf in float32
    W_ih = np.zeros((4, 2), dtype=np.float32)
    W_ih[:, 0], W_ih[:, 1] = 1e10, -1e10
    W_hh = np.zeros((4, 1), dtype=np.float32)
    # tanh(inf) = 1 would hide it: the pre-activations themselves are watched
    words = r"pre-activations .* not finite from step t=3 of 4,.*float64"
    with pytest.raises(FloatingPointError, match=words):
        lstm.forward(X, W_ih, W_hh)
    for dtype in (np.float32, np.float64):        # the columns form (float32) and the rows form
        X2 = np.stack([np.zeros_like(X), X]).astype(dtype)
        if dtype == np.float64:
            X2[1, 2] = 1e300
            W = W_ih.astype(dtype) * 1e290         # 1e300 x 1e300 overflows float64
        else:
            W = W_ih
        with pytest.raises(FloatingPointError, match=r"step t=3 of 4 of sequence 1"):
            lstm.forward(X2, W, W_hh.astype(dtype))


def test_overflow_in_the_backward_is_announced():
    X, W_ih, W_hh, b_ih, b_hh, h0, c0 = make(20, np.float32)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    dH = np.full_like(H, 3e38)
    with pytest.raises(FloatingPointError, match=r"backward overflowed: dl/dx_t is not finite"):
        lstm.backward(X, H, C, W_ih, W_hh, dH, b_ih, b_hh, h0, c0)


def test_public_import_is_the_kernel_module():
    from harness import lstm as public
    assert public is lstm


# ------------------------------------------------------------------ every error message

def _bad(kw, **changes):
    return {**kw, **changes}


ERRORS = [
    # (what to change, exception, words the message must hold)
    (lambda kw: _bad(kw, X=kw["X"].astype(np.int64)),
     TypeError, r"X must have dtype float32 or float64, got int64"),
    (lambda kw: _bad(kw, X=kw["X"][0, 0]),
     ValueError, r"X must be 2-D or 3-D, got 1-D"),
    (lambda kw: _bad(kw, X=kw["X"][:0]),
     ValueError, r"X has a zero-length axis"),
    (lambda kw: _bad(kw, X={"x": 1}),
     TypeError, r"X must have dtype float32 or float64, got object"),
    (lambda kw: _bad(kw, W_ih=kw["W_ih"].astype(np.float32)),
     TypeError, r"W_ih has dtype float32 but the other inputs are float64"),
    (lambda kw: _bad(kw, W_ih=kw["W_ih"][:, :-1]),
     ValueError, r"W_ih must have shape \(16, 3\), got \(16, 2\)"),
    (lambda kw: _bad(kw, W_hh=kw["W_hh"][:-1]),
     ValueError, r"W_hh must have shape \(4\*d_h, d_h\).*got \(15, 4\)"),
    (lambda kw: _bad(kw, W_hh=kw["W_hh"][0]),
     ValueError, r"W_hh must be 2-D, got 1-D"),
    (lambda kw: _bad(kw, W_hh=np.full_like(kw["W_hh"], np.nan)),
     ValueError, r"W_hh holds 64 NaN or inf"),
    (lambda kw: _bad(kw, b_ih=kw["b_ih"][:-1]),
     ValueError, r"b_ih must have shape \(16,\), got \(15,\)"),
    (lambda kw: _bad(kw, b_hh=kw["b_hh"][None]),
     ValueError, r"b_hh must be 1-D, got 2-D"),
    (lambda kw: _bad(kw, h0=kw["h0"][:, :-1]),
     ValueError, r"h0 must have shape \(2, 4\), got \(2, 3\)"),
    (lambda kw: _bad(kw, c0=kw["c0"][:1]),
     ValueError, r"c0 must have shape \(2, 4\), got \(1, 4\)"),
    (lambda kw: _bad(kw, c0=[[np.inf] * 4] * 2),
     ValueError, r"c0 holds 8 NaN or inf"),
    (lambda kw: _bad(kw, H=kw["H"][:, :-1]),
     ValueError, r"H must have shape \(2, 5, 4\), got \(2, 4, 4\)"),
    (lambda kw: _bad(kw, C=kw["C"][0]),
     ValueError, r"C must be 3-D, got 2-D"),
    (lambda kw: _bad(kw, H=kw["H"].astype(np.float32)),
     TypeError, r"H has dtype float32"),
    (lambda kw: _bad(kw, dH=kw["dH"][..., :-1]),
     ValueError, r"dH must have shape \(2, 5, 4\), got \(2, 5, 3\)"),
    (lambda kw: _bad(kw, dC=kw["dC"].astype(np.int32)),
     TypeError, r"dC must have dtype float32 or float64, got int32"),
    (lambda kw: _bad(kw, dC=kw["dC"][:1]),
     ValueError, r"dC must have shape \(2, 5, 4\), got \(1, 5, 4\)"),
]


@pytest.mark.parametrize("change,exc,words", ERRORS)
def test_every_bad_input_is_named(change, exc, words):
    kw = change(_all_inputs(19, np.float64, True))
    with pytest.raises(exc, match=words):
        lstm.backward(**kw)
    fw = {k: kw[k] for k in ("X", "W_ih", "W_hh", "b_ih", "b_hh", "h0", "c0")}
    if words.split()[0] in fw:                    # an argument of the forward too
        with pytest.raises(exc, match=words):
            lstm.forward(**fw)
