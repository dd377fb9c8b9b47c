"""The GRU family: h_t = (1 - z) n + z h_{t-1}, T dependent steps.

Kernels in ``harness.kernels.gru`` (PyTorch's layout and gate order r, z, n, with b_hn inside
the reset gate's product); the plain NumPy forward the tracer runs in
``harness.models.reference``; here: its counts (3 T d_h d_in input products, 3 T d_h^2
recurrent ones, 2 T d_h gate products), its inputs, its timed variant, its peers
(``torch.nn.GRU`` with autograd, a NumPy step loop), and its gradient path by route: the full
dh_T/dh_{T-k} beside the additive route z h_{t-1} alone, prod diag(z)
(``harness.models._gated``).
"""

from __future__ import annotations

import functools

import numpy as np

from harness.kernels import gru
from harness.models import Form, Variant, _gated, common_peers, reference
from harness.models.lstm import _sigmoid
from harness.models.rnn import compare_target

GATES = 3


# ------------------------------------------------------------------ counts and inputs

def macs(T, d, d_h=None):
    """Multiplications per part: input 3 T d_h d, recurrence 3 T d_h^2, the gates' products
    r (W_hn h) and z (h - n), 2 T d_h (the tracer's "mul")."""
    d_h = d if d_h is None else d_h
    return {"input": GATES * T * d_h * d, "recurrence": GATES * T * d_h * d_h, "mul": 2 * T * d_h}


trace_weights = functools.partial(_gated.trace_weights, GATES)


def traced_forward(X, W_ih, W_hh):
    return (reference.gru_forward(X, W_ih, W_hh),)                      # (T, d_h)


def trace_memory_bytes(T, d, d_h=None):
    return _gated.trace_memory_bytes(T, max(d, d if d_h is None else d_h), GATES)


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X (T, d) or (B, T, d) ~ N(0, 1); W_ih, W_hh (3 d, d) ~ N(0, 1/d)."""
    return _gated.draw(np.random.default_rng(seed), T, d, GATES, batch, dtype)


def backward_from(X, W, H, dH):
    return gru.backward(X, H, W[0], W[1], dH)


_timed_inputs = functools.partial(_gated.timed_inputs, GATES)


def _timed_bytes(T, d):
    return (2 + 2 * GATES) * T * d * 8 + 2 * GATES * d * d * 8       # X, H, the gates; weights


TIMED = (Variant("gru", _timed_inputs, gru.forward, lambda T, d: sum(macs(T, d).values()),
                 _timed_bytes),)


# ------------------------------------------------------------------ gradient path

def step_jacobians(X, H, W_ih, W_hh, b, lo=0, hi=None):
    """J (hi-lo, d_h, d_h): dh_t/dh_{t-1} at steps lo..hi-1 (0-based, h_{-1} = 0), and ln z there.

    With r, z from W_ih x_t + W_hh h_{t-1} + b, hn = W_hn h_{t-1} and n = tanh(W_in x_t +
    b_in + r hn): J = diag(z) + diag((h_{t-1} - n) z(1-z)) W_z
    + diag((1-z)(1-n^2)) (diag(r) W_n + diag(hn r(1-r)) W_r).
    """
    hi = H.shape[0] if hi is None else hi
    d = H.shape[1]
    H_prev = np.vstack([np.zeros((1, d)), H[:hi - 1]])[lo:]
    XW, HW = X[lo:hi] @ W_ih.T + b, H_prev @ W_hh.T                      # (T, 3 d) each
    r = _sigmoid(XW[:, :d] + HW[:, :d])
    z = _sigmoid(XW[:, d:2 * d] + HW[:, d:2 * d])
    hn = HW[:, 2 * d:]
    n = np.tanh(XW[:, 2 * d:] + r * hn)
    Wr, Wz, Wn = (W_hh[k * d:(k + 1) * d] for k in range(GATES))
    J = (((H_prev - n) * z * (1 - z))[:, :, None] * Wz
         + ((1 - z) * (1 - n * n))[:, :, None] * (r[:, :, None] * Wn
                                                  + (hn * r * (1 - r))[:, :, None] * Wr))
    idx = np.arange(d)
    J[:, idx, idx] += z
    with np.errstate(divide="ignore"):
        return J, np.log(z)


def gru_decay(T=256, d=32, gate_bias=1.0, input_scale=1.0, seed=0):
    """||dh_T/dh_{T-k}|| (the full path) and max_i prod z_i (the additive route) over
    k = 1..T-1 on one GRU trajectory, as a tidy frame (``PATH_COLUMNS``)."""
    _gated.check_job(T, d, input_scale, gate_bias, seed)
    X, W_ih, W_hh, b = _gated.trajectory_inputs(T, d, GATES, gate_bias, input_scale, seed)
    H = gru.forward(X, W_ih, W_hh, b_ih=b)                               # the real trajectory
    _, log_z = step_jacobians(X, H, W_ih, W_hh, b)                     # ln z: (T, d), cheap
    return _gated.decay_frame("gru", lambda lo, hi: step_jacobians(X, H, W_ih, W_hh, b, lo, hi)[0],
                              log_z, T, d, input_scale, gate_bias, seed)


# ------------------------------------------------------------------ peers

def peers(X, W, dH, torch=None, jax=None):
    """The NumPy step loop of ``harness.models.reference``; with PyTorch, ``torch.nn.GRU``
    + autograd (oneDNN's kernels on CPU); with JAX, ``jax_forward`` jitted, and its VJP."""
    W_ih, W_hh = W
    H = gru.forward(X, W_ih, W_hh)
    impls = {"numpy": common_peers.slots(
        lambda: reference.gru_forward(X, W_ih, W_hh),
        lambda H_: reference.gru_backward(X, H_, W_ih, W_hh, dH), H, primary=lambda out: out)}
    if torch is not None:
        impls["torch"] = common_peers.recurrent(torch.nn.GRU, X, W, dH, H.shape, torch)
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_forward(jax, x, *w), X, W, dH, jax)
    return impls


def jax_forward(jax, X, W_ih, W_hh):
    """PyTorch's GRU equations (gates r, z, n), no biases, by ``lax.scan`` over t:
    n = tanh(W_in x + r (W_hn h_{t-1})), h_t = (1 - z) n + z h_{t-1}. X (..., T, d) -> H."""
    jnp, sig = jax.numpy, jax.nn.sigmoid
    d_h = W_hh.shape[1]
    XW = jnp.moveaxis(X @ W_ih.T, -2, 0)            # (T, ..., 3 d_h)

    def step(h, x):
        a = h @ W_hh.T                              # (..., 3 d_h)
        r = sig(x[..., :d_h] + a[..., :d_h])
        z = sig(x[..., d_h:2 * d_h] + a[..., d_h:2 * d_h])
        n = jnp.tanh(x[..., 2 * d_h:] + r * a[..., 2 * d_h:])
        h = n + z * (h - n)
        return h, h
    _, H = jax.lax.scan(step, jnp.zeros(XW.shape[1:-1] + (d_h,), X.dtype), XW)
    return jnp.moveaxis(H, 0, -2)


FAMILY = _gated.family(
    "gru", "GRU", gru.forward, backward_from, lambda H: H, inputs, trace_weights,
    Form("gru", traced_forward, macs, trace_memory_bytes), TIMED, gru_decay, GATES, 1, peers,
    compare_target)
