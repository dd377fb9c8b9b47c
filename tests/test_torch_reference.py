"""The kernels against PyTorch (a reference from another framework), in float64.

Forward values and autograd gradients of the same models with the same
weights must agree to 1e-12, relative to the largest entry of each array.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import naive
from _deps import require_module
from harness.kernels import attention as at
from harness.kernels import rnn

torch = require_module("torch", "pip install -e '.[torch]'")
F = torch.nn.functional

TOL = 1e-12
B, T, D_IN, D_H = 3, 7, 4, 5
D_MODEL, D_K, D_V = 6, 4, 3


def t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True)


def agree(name, got, want):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else want
    err = naive.rel_err(got, want)
    assert err <= TOL, f"{name}: relative error {err:.2e} against torch"


# -------------------------------------------------------------------------- RNN

def rnn_inputs(seed, batched):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, T, D_IN) if batched else (T, D_IN))
    W_xh = rng.normal(size=(D_H, D_IN)) * 0.5
    W_hh = rng.normal(size=(D_H, D_H)) * 0.8 / math.sqrt(D_H)
    b = rng.normal(size=D_H) * 0.2
    h0 = rng.normal(size=(B, D_H) if batched else D_H) * 0.5
    G = rng.normal(size=X.shape[:-1] + (D_H,))
    return X, W_xh, W_hh, b, h0, G


@pytest.mark.parametrize("batched", [False, True])
def test_rnn_tanh_against_torch_nn_rnn(batched):
    X, W_xh, W_hh, b, h0, G = rnn_inputs(1, batched)
    net = torch.nn.RNN(D_IN, D_H, nonlinearity="tanh", batch_first=True, dtype=torch.float64)
    with torch.no_grad():                       # nn.RNN has two biases: ours is b_ih, b_hh = 0
        net.weight_ih_l0.copy_(torch.from_numpy(W_xh))
        net.weight_hh_l0.copy_(torch.from_numpy(W_hh))
        net.bias_ih_l0.copy_(torch.from_numpy(b))
        net.bias_hh_l0.zero_()
    Xt, h0t = t(X), t(h0)
    out, _ = net(Xt, h0t[None])                 # h0 is (num_layers, [B,] d_h)
    (out * torch.from_numpy(G)).sum().backward()

    H = rnn.forward(X, W_xh, W_hh, b, h0)
    agree("H", H, out)
    g = rnn.backward(X, H, W_xh, W_hh, G, h0)
    agree("dX", g.dX, Xt.grad)
    agree("dW_xh", g.dW_xh, net.weight_ih_l0.grad)
    agree("dW_hh", g.dW_hh, net.weight_hh_l0.grad)
    agree("db", g.db, net.bias_ih_l0.grad)
    agree("dh0", g.dh0, h0t.grad)


def torch_rnn(X, W_xh, W_hh, b, h0, activation):
    """The recurrence in explicit torch ops, for the identity activation nn.RNN lacks."""
    h = h0
    states = []
    for step in range(X.shape[-2]):
        a = h @ W_hh.T + X[..., step, :] @ W_xh.T + b
        h = torch.tanh(a) if activation == "tanh" else a
        states.append(h)
    return torch.stack(states, dim=-2)


@pytest.mark.parametrize("activation", ["tanh", "identity"])
@pytest.mark.parametrize("h0_kind", ["single", "batch", "shared"])
def test_rnn_against_explicit_torch(activation, h0_kind):
    X, W_xh, W_hh, b, h0, G = rnn_inputs(2, h0_kind != "single")
    if h0_kind == "shared":
        h0 = h0[0]                              # (d_h,) broadcast over the batch
    args = [t(a) for a in (X, W_xh, W_hh, b, h0)]
    out = torch_rnn(*args, activation)
    (out * torch.from_numpy(G)).sum().backward()

    H = rnn.forward(X, W_xh, W_hh, b, h0, activation)
    agree("H", H, out)
    g = rnn.backward(X, H, W_xh, W_hh, G, h0, activation)
    for name, a in zip(("dX", "dW_xh", "dW_hh", "db", "dh0"), args):
        assert getattr(g, name).shape == tuple(a.shape), name
        agree(name, getattr(g, name), a.grad)


# ---------------------------------------------------------------- self-attention

def attention_inputs(seed, batched):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, T, D_MODEL) if batched else (T, D_MODEL))
    Wq, Wk = rng.normal(size=(D_MODEL, D_K)), rng.normal(size=(D_MODEL, D_K))
    Wv = rng.normal(size=(D_MODEL, D_V))
    return X, Wq, Wk, Wv


CASES = [(s, c, b) for s in (True, False) for c in (False, True) for b in (False, True)]


@pytest.mark.parametrize("proj", [True, False])
@pytest.mark.parametrize("scale,causal,batched", CASES)
def test_attention_against_explicit_torch(proj, scale, causal, batched):
    X, Wq, Wk, Wv = attention_inputs(3, batched)
    if not proj:
        Wq = Wk = Wv = None
    Xt = t(X)
    Ws = [t(w) for w in (Wq, Wk, Wv)] if proj else None
    Q, K, V = (Xt @ w for w in Ws) if proj else (Xt, Xt, Xt)
    E = Q @ K.transpose(-1, -2)
    if scale:
        E = E / math.sqrt(Q.shape[-1])
    if causal:
        E = E.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    A_t = torch.softmax(E, dim=-1)
    Y_t = A_t @ V
    G = np.random.default_rng(4).normal(size=tuple(Y_t.shape))
    (Y_t * torch.from_numpy(G)).sum().backward()

    Y, A = at.forward(X, Wq, Wk, Wv, scale=scale, causal=causal)
    agree("A", A, A_t)
    agree("Y", Y, Y_t)
    g = at.backward(X, Wq, Wk, Wv, A, G, scale=scale, causal=causal)
    agree("dX", g.dX, Xt.grad)
    if proj:
        for name, w in zip(("dWq", "dWk", "dWv"), Ws):
            agree(name, getattr(g, name), w.grad)


@pytest.mark.parametrize("scale,causal,batched", CASES)
def test_attention_against_torch_sdpa(scale, causal, batched):
    X, Wq, Wk, Wv = attention_inputs(5, batched)
    Xt, Wqt, Wkt, Wvt = (t(a) for a in (X, Wq, Wk, Wv))
    Y_t = F.scaled_dot_product_attention(Xt @ Wqt, Xt @ Wkt, Xt @ Wvt, is_causal=causal,
                                         scale=None if scale else 1.0)
    G = np.random.default_rng(6).normal(size=tuple(Y_t.shape))
    (Y_t * torch.from_numpy(G)).sum().backward()

    Y, A = at.forward(X, Wq, Wk, Wv, scale=scale, causal=causal)
    agree("Y", Y, Y_t)
    g = at.backward(X, Wq, Wk, Wv, A, G, scale=scale, causal=causal)
    for name, a in zip(at.AttentionGrads._fields, (Xt, Wqt, Wkt, Wvt)):
        agree(name, getattr(g, name), a.grad)


@pytest.mark.parametrize("proj", [True, False])
@pytest.mark.parametrize("scale,causal,batched", CASES)
def test_tiled_attention_against_torch(proj, scale, causal, batched):
    # The tiled path's L is torch.logsumexp of the scaled, masked scores; its backward from
    # L (with and without Y) gives autograd's gradients. T spans two query tiles.
    rng = np.random.default_rng(8)
    T_long = at.TILE_Q + 3
    X = rng.normal(size=(B, T_long, D_MODEL) if batched else (T_long, D_MODEL))
    Ws = [rng.normal(size=(D_MODEL, w)) for w in (D_K, D_K, D_V)] if proj else [None] * 3
    Xt = t(X)
    Wt = [t(w) for w in Ws] if proj else None
    Q, K, V = (Xt @ w for w in Wt) if proj else (Xt, Xt, Xt)
    E = Q @ K.transpose(-1, -2)
    if scale:
        E = E / math.sqrt(Q.shape[-1])
    if causal:
        E = E.masked_fill(~torch.ones(T_long, T_long, dtype=torch.bool).tril(), float("-inf"))
    L_t = torch.logsumexp(E, dim=-1)
    Y_t = torch.softmax(E, dim=-1) @ V
    G = rng.normal(size=tuple(Y_t.shape))
    (Y_t * torch.from_numpy(G)).sum().backward()

    Y, L = at.forward(X, *Ws, scale=scale, causal=causal, return_weights=False)
    agree("Y", Y, Y_t)
    agree("L", L, L_t)
    for Y_given in (Y, None):
        g = at.backward(X, *Ws, L, G, scale=scale, causal=causal, Y=Y_given)
        agree("dX", g.dX, Xt.grad)
        if proj:
            for name, w in zip(("dWq", "dWk", "dWv"), Wt):
                agree(name, getattr(g, name), w.grad)


# ------------------------------------------------------------- additive attention

@pytest.mark.parametrize("nonlinearity", ["tanh", None])
def test_alignment_against_torch(nonlinearity):
    rng = np.random.default_rng(7)
    T_y, T_x, d_s, d_h, d_a = 6, 5, 2, 4, 3       # the decoder narrower than the encoder
    arrays = [rng.normal(size=s) for s in ((T_y, d_s), (T_x, d_h), (d_a, d_s), (d_a, d_h), (d_a,))]
    dC = rng.normal(size=(T_y, d_h))
    S, H, Wsa, Wha, va = args = [t(a) for a in arrays]
    P = (S @ Wsa.T)[:, None, :] + (H @ Wha.T)[None, :, :]       # (T_y, T_x, d_a)
    E = (torch.tanh(P) if nonlinearity == "tanh" else P) @ va
    alpha_t = torch.softmax(E, dim=1)
    C = alpha_t @ H
    (C * torch.from_numpy(dC)).sum().backward()

    agree("alpha", at.alignment(*arrays, nonlinearity=nonlinearity), alpha_t)
    g = at.alignment_backward(*arrays, dC, nonlinearity=nonlinearity)
    scale = max(float(a.grad.abs().max()) for a in args)
    for name, a in zip(("dS", "dH", "dWsa", "dWha", "dva"), args):
        err = naive.rel_err(getattr(g, name), a.grad.numpy(), scale)   # dS is 0 without tanh
        assert err <= TOL, f"{name}: relative error {err:.2e} against torch"
    # the value route is the gradient through C = alpha H with alpha held fixed
    H2 = torch.tensor(arrays[1], requires_grad=True)
    (alpha_t.detach() @ H2 * torch.from_numpy(dC)).sum().backward()
    agree("dH_value", g.dH_value, H2.grad)
