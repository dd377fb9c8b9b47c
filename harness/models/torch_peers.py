"""The PyTorch peers that several families share: a torch recurrent module with autograd.

PyTorch is optional: the caller passes the imported module (or None, and no torch peer).
"""

from __future__ import annotations


def recurrent(module, X, W, dH, shape, torch):
    """(forward, backward, outputs, forward+backward) of a torch recurrent module (``nn.RNN``,
    ``nn.LSTM``, ``nn.GRU``) holding W = (W_ih, W_hh), no biases, batch first: the forward
    without autograd, the backward on one kept graph, both passes on a new graph each call."""
    W_ih, W_hh = W
    m = module(X.shape[-1], W_hh.shape[1], bias=False, batch_first=True)
    m = m.to(getattr(torch, X.dtype.name))
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.from_numpy(W_ih))
        m.weight_hh_l0.copy_(torch.from_numpy(W_hh))
    batched = X.ndim == 3
    Xt = torch.from_numpy(X if batched else X[None]).clone()

    def t_forward():
        with torch.no_grad():
            return m(Xt)[0]

    Xg = Xt.clone().requires_grad_(True)
    out = m(Xg)[0]
    g = torch.from_numpy(dH if batched else dH[None])

    def t_backward():
        out.backward(g, retain_graph=True)

    def t_outputs():
        Xg.grad = None
        out.backward(g, retain_graph=True)
        return t_forward().numpy().reshape(shape), Xg.grad.numpy().reshape(X.shape)

    def t_both():                                  # a training step: a new graph, both passes
        Xn = Xt.clone().requires_grad_(True)
        m(Xn)[0].backward(g)
        return Xn.grad.reshape(X.shape)

    return t_forward, t_backward, t_outputs, t_both
