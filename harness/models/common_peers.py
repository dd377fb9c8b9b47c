"""What the families' peers share: compare's four slots of any implementation, a torch
module with autograd, and a JAX function, jitted, with its VJP.

PyTorch and JAX are optional: the caller passes the imported module (or None, and no peer
of that library). ``harness.analysis.compare._jax`` imports JAX on the CPU, float64
enabled, with its threads set.
"""

from __future__ import annotations

import numpy as np


def slots(forward, backward_of, kept, primary=lambda out: out[0], dx=lambda grads: grads[0]):
    """compare's (forward, backward, outputs, forward+backward) of one implementation.

    ``forward() -> out``; ``backward_of(out) -> grads`` starts from a forward's output: the
    backward slot from ``kept``, an output computed beforehand (as a kernel keeps its own),
    forward+backward from a new one; ``outputs() -> (primary(out), dx(grads))``, what a test
    checks every implementation against."""
    return (forward,
            lambda: backward_of(kept),
            lambda: (primary(forward()), dx(backward_of(kept))),
            lambda: backward_of(forward()))


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
    return autograd(lambda x: m(x)[0], X, dH, shape, torch)


def autograd(call, X, dY, shape, torch):
    """(forward, backward, outputs, forward+backward) of ``call`` (a torch module, or a function
    of one batch-first tensor) on X, unbatched or batched: the forward without autograd, the
    backward of dY on one kept graph, both passes on a new graph each call; the forward's Y
    is reshaped to ``shape``, and ``outputs`` gives (Y, dX) as NumPy arrays."""
    batched = X.ndim == 3
    Xt = torch.from_numpy(X if batched else X[None]).clone()

    def t_forward():
        with torch.no_grad():
            return call(Xt).reshape(shape)          # a view: unbatched X gives unbatched Y

    Xg = Xt.clone().requires_grad_(True)
    out = call(Xg)
    g = torch.from_numpy(dY if batched else dY[None])

    def t_backward():
        out.backward(g, retain_graph=True)

    def t_outputs():
        Xg.grad = None
        out.backward(g, retain_graph=True)
        return t_forward().numpy(), Xg.grad.numpy().reshape(X.shape)

    def t_both():                                  # a training step: a new graph, both passes
        Xn = Xt.clone().requires_grad_(True)
        call(Xn).backward(g)
        return Xn.grad.reshape(X.shape)

    return t_forward, t_backward, t_outputs, t_both


def jitted(fn, X, W, dY, jax, shape=None):
    """(forward, backward, outputs, forward+backward) of ``fn(X, *W) -> Y`` in JAX, every slot
    jitted and blocking until its result is ready: the backward is the VJP of dY with respect
    to X and every weight (as the kernels' backwards give them all), from the residuals one
    jitted forward kept (as a kernel keeps its own); forward+backward runs both in one jitted
    call. ``outputs`` gives (Y reshaped to ``shape``, default dY's, and dX) as NumPy arrays."""
    jnp = jax.numpy
    args = tuple(jnp.asarray(a) for a in (X, *W))
    g = jnp.asarray(dY)
    f = jax.jit(fn)
    _, kept = jax.vjp(f, *args)                 # a Partial: it passes through jit as data
    back = jax.jit(lambda vjp, g: vjp(g))
    both = jax.jit(lambda g, *a: jax.vjp(fn, *a)[1](g))

    def j_forward():
        return f(*args).block_until_ready()

    def j_backward():
        return jax.block_until_ready(back(kept, g))

    def j_outputs():
        return (np.asarray(j_forward()).reshape(dY.shape if shape is None else shape),
                np.asarray(j_backward()[0]))

    def j_both():
        return jax.block_until_ready(both(g, *args))

    return j_forward, j_backward, j_outputs, j_both
