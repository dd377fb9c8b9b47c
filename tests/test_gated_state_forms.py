"""The gated kernels' initial states in every form they take (#36): h0 and c0 each absent, one
per sequence ((B, d_h)) or shared by every sequence ((d_h,) over a batch), batched and not,
forward and backward, against PyTorch's autograd stepping nn.LSTMCell / nn.GRUCell with the
same weights. An absent state is zeros with no gradient; a shared one is expanded over the
batch, so its gradient is the sum over the sequences; an absent one's gradient is that of
the zeros it stands for, one per sequence. Float64, to 1e-12 of each array's
largest entry (measured: about 1e-15)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import naive
from _deps import require_module
from harness.kernels import gru, lstm

T, D_IN, D_H, B = 6, 3, 4, 3
TOL = 1e-12
FORMS = ("absent", "per-sequence", "shared")


def _state(rng, form, batched):
    if form == "absent":
        return None
    shape = (B, D_H) if batched and form == "per-sequence" else (D_H,)
    return rng.normal(size=shape) * 0.7


def _cases(n_states):
    for batched in (False, True):
        for forms in itertools.product(FORMS, repeat=n_states):
            if not batched and "shared" in forms:
                continue                     # unbatched, a shared state is the per-sequence one
            yield pytest.param(batched, forms, id=f"{'B' if batched else '1'}-" + "-".join(forms))


def _weights(rng, gates):
    return (rng.normal(size=(gates * D_H, D_IN)) * 0.6, rng.normal(size=(gates * D_H, D_H)) * 0.6,
            rng.normal(size=gates * D_H) * 0.4, rng.normal(size=gates * D_H) * 0.4)


def _torch_state(torch, s, batched):
    """(the leaf whose .grad is the state's gradient, the (B, d_h) state the cell takes)."""
    rows = B if batched else 1
    if s is None:
        leaf = torch.zeros(rows, D_H, dtype=torch.float64, requires_grad=True)
        return leaf, leaf
    leaf = torch.tensor(s, requires_grad=True)
    return leaf, (leaf if leaf.ndim == 2 else leaf.expand(rows, D_H))


def _cell(torch, kind, W_ih, W_hh, b_ih, b_hh):
    cell = (torch.nn.LSTMCell if kind == "lstm" else torch.nn.GRUCell)(D_IN, D_H).double()
    with torch.no_grad():
        for name, a in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"),
                           (W_ih, W_hh, b_ih, b_hh)):
            getattr(cell, name).copy_(torch.from_numpy(a))
    return cell


def _agree(got, want, what):
    assert np.shape(got) == np.shape(want), (what, np.shape(got), np.shape(want))
    err = naive.rel_err(got, want)
    assert err <= TOL, f"{what}: relative error {err:.2e} against torch"


@pytest.mark.parametrize("batched, forms", list(_cases(2)))
def test_lstm_state_forms_against_torch(batched, forms):
    torch = require_module("torch", "pip install -e '.[torch]'")
    rng = np.random.default_rng([FORMS.index(f) for f in forms] + [batched])
    X = rng.normal(size=(B, T, D_IN) if batched else (T, D_IN))
    W_ih, W_hh, b_ih, b_hh = _weights(rng, 4)
    h0, c0 = (_state(rng, f, batched) for f in forms)
    GH, GC = rng.normal(size=X.shape[:-1] + (D_H,)), rng.normal(size=X.shape[:-1] + (D_H,))

    cell = _cell(torch, "lstm", W_ih, W_hh, b_ih, b_hh)
    Xt = torch.tensor(X if batched else X[None], requires_grad=True)
    (hl, h), (cl, c) = _torch_state(torch, h0, batched), _torch_state(torch, c0, batched)
    Hs, Cs = [], []
    for t in range(T):
        h, c = cell(Xt[:, t], (h, c))
        Hs.append(h)
        Cs.append(c)
    Ht, Ct = torch.stack(Hs, 1), torch.stack(Cs, 1)
    shape = GH.shape if batched else (1,) + GH.shape
    loss = ((Ht * torch.from_numpy(GH.reshape(shape))).sum()
            + (Ct * torch.from_numpy(GC.reshape(shape))).sum())
    loss.backward()

    H, C = lstm.forward(X, W_ih, W_hh, b_ih, b_hh, h0, c0)
    _agree(H, Ht.detach().numpy().reshape(H.shape), "H")
    _agree(C, Ct.detach().numpy().reshape(C.shape), "C")
    g = lstm.backward(X, H, C, W_ih, W_hh, GH, b_ih, b_hh, h0, c0, GC)
    _agree(g.dX, Xt.grad.numpy().reshape(X.shape), "dX")
    for name, p in (("dW_ih", cell.weight_ih), ("dW_hh", cell.weight_hh),
                    ("db_ih", cell.bias_ih), ("db_hh", cell.bias_hh)):
        _agree(getattr(g, name), p.grad.numpy(), name)
    for name, s, leaf in (("dh0", h0, hl), ("dc0", c0, cl)):
        got = getattr(g, name)
        assert got.shape == (H.shape[:-2] + (D_H,) if s is None else s.shape), (name, got.shape)
        _agree(got, leaf.grad.numpy().reshape(got.shape), name)


@pytest.mark.parametrize("batched, forms", list(_cases(1)))
def test_gru_state_forms_against_torch(batched, forms):
    torch = require_module("torch", "pip install -e '.[torch]'")
    rng = np.random.default_rng([FORMS.index(forms[0]), batched, 1])
    X = rng.normal(size=(B, T, D_IN) if batched else (T, D_IN))
    W_ih, W_hh, b_ih, b_hh = _weights(rng, 3)
    h0 = _state(rng, forms[0], batched)
    GH = rng.normal(size=X.shape[:-1] + (D_H,))

    cell = _cell(torch, "gru", W_ih, W_hh, b_ih, b_hh)
    Xt = torch.tensor(X if batched else X[None], requires_grad=True)
    hl, h = _torch_state(torch, h0, batched)
    Hs = []
    for t in range(T):
        h = cell(Xt[:, t], h)
        Hs.append(h)
    Ht = torch.stack(Hs, 1)
    shape = GH.shape if batched else (1,) + GH.shape
    (Ht * torch.from_numpy(GH.reshape(shape))).sum().backward()

    H = gru.forward(X, W_ih, W_hh, b_ih, b_hh, h0)
    _agree(H, Ht.detach().numpy().reshape(H.shape), "H")
    g = gru.backward(X, H, W_ih, W_hh, GH, b_ih, b_hh, h0)
    _agree(g.dX, Xt.grad.numpy().reshape(X.shape), "dX")
    for name, p in (("dW_ih", cell.weight_ih), ("dW_hh", cell.weight_hh),
                    ("db_ih", cell.bias_ih), ("db_hh", cell.bias_hh)):
        _agree(getattr(g, name), p.grad.numpy(), name)
    assert g.dh0.shape == (H.shape[:-2] + (D_H,) if h0 is None else h0.shape), g.dh0.shape
    _agree(g.dh0, hl.grad.numpy().reshape(g.dh0.shape), "dh0")
