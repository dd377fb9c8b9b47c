"""The LSTM family: c_t = f c_{t-1} + i g, h_t = o tanh(c_t), T dependent steps.

Kernels in ``harness.kernels.lstm`` (PyTorch's layout and gate order i, f, g, o); the plain
NumPy forward the tracer runs in ``harness.models.reference``; here, what the analysers need:
its counts (4 T d_h d_in input products, 4 T d_h^2 recurrent ones, 3 T d_h gate products),
its inputs, its timed variant, its peers (``torch.nn.LSTM`` with autograd, a NumPy step
loop), and its gradient path by route: the full dh_T/dh_{T-k} through the joint state (h, c)
beside the cell's additive route dc_T/dc_{T-k} = prod diag(f) (``harness.models._gated``).
"""

from __future__ import annotations

import functools

import numpy as np

from harness.kernels import lstm
from harness.models import rnn as rnn_family
from harness.models import Form, Variant, _gated, common_peers, reference

GATES = 4


# ------------------------------------------------------------------ counts and inputs

def macs(T, d, d_h=None):
    """Multiplications per part: input 4 T d_h d, recurrence 4 T d_h^2, the gates' products
    f c, i g and o tanh(c), 3 T d_h (the tracer's "mul")."""
    d_h = d if d_h is None else d_h
    return {"input": GATES * T * d_h * d, "recurrence": GATES * T * d_h * d_h, "mul": 3 * T * d_h}


trace_weights = functools.partial(_gated.trace_weights, GATES)


def traced_forward(X, W_ih, W_hh):
    return reference.lstm_forward(X, W_ih, W_hh)                        # (T, d_h) twice


def trace_memory_bytes(T, d, d_h=None):
    return _gated.trace_memory_bytes(T, max(d, d if d_h is None else d_h), GATES)


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X (T, d) or (B, T, d) ~ N(0, 1); W_ih, W_hh (4 d, d) ~ N(0, 1/d)."""
    return _gated.draw(np.random.default_rng(seed), T, d, GATES, batch, dtype)


def backward_from(X, W, out, dH):
    return lstm.backward(X, out[0], out[1], W[0], W[1], dH)


_timed_inputs = functools.partial(_gated.timed_inputs, GATES)


def _timed_bytes(T, d):
    return (3 + GATES) * T * d * 8 + 2 * GATES * d * d * 8          # X, H, C, the gates; weights


TIMED = (Variant("lstm", _timed_inputs, lstm.forward, lambda T, d: sum(macs(T, d).values()),
                 _timed_bytes),)


# ------------------------------------------------------------------ gradient path

def step_jacobians(X, H, C, W_ih, W_hh, b, lo=0, hi=None):
    """J (hi-lo, 2 d_h, 2 d_h): d(h_t, c_t)/d(h_{t-1}, c_{t-1}) at steps lo..hi-1 (0-based, h_{-1}
    = c_{-1} = 0), and ln f there (hi-lo, d_h).

    With a_t = W_ih x_t + W_hh h_{t-1} + b and the gates i, f, g, o of a_t:
    dc/dh = diag(g i(1-i)) W_i + diag(c_{t-1} f(1-f)) W_f + diag(i (1-g^2)) W_g, dc/dc = diag(f),
    dh/dh = diag(tanh(c_t) o(1-o)) W_o + diag(o (1-tanh^2 c_t)) dc/dh, dh/dc = diag(o (1-tanh^2 c_t) f).
    """
    hi = H.shape[0] if hi is None else hi
    d = H.shape[1]
    H_prev, C_prev = (np.vstack([np.zeros((1, d)), S[:hi - 1]])[lo:] for S in (H, C))
    X, C = X[lo:hi], C[lo:hi]
    T = hi - lo
    A = X @ W_ih.T + H_prev @ W_hh.T + b                                 # (T, 4 d)
    i, f, o = (_sigmoid(A[:, k * d:(k + 1) * d]) for k in (0, 1, 3))
    g = np.tanh(A[:, 2 * d:3 * d])
    tc = np.tanh(C)
    Wi, Wf, Wg, Wo = (W_hh[k * d:(k + 1) * d] for k in range(GATES))
    dc_dh = ((g * i * (1 - i))[:, :, None] * Wi + (C_prev * f * (1 - f))[:, :, None] * Wf
             + (i * (1 - g * g))[:, :, None] * Wg)                       # (T, d, d)
    dh_dc = o * (1 - tc * tc)                                            # (T, d): dh_t/dc_t
    J = np.zeros((T, 2 * d, 2 * d))
    J[:, :d, :d] = (tc * o * (1 - o))[:, :, None] * Wo + dh_dc[:, :, None] * dc_dh
    J[:, :d, d:] = _diag(dh_dc * f)
    J[:, d:, :d] = dc_dh
    J[:, d:, d:] = _diag(f)
    with np.errstate(divide="ignore"):
        return J, np.log(f)


def _sigmoid(a):
    return 0.5 + 0.5 * np.tanh(0.5 * a)              # exact where exp(-a) would overflow


def _diag(v):
    """(T, d) -> (T, d, d) diagonal matrices."""
    out = np.zeros(v.shape + v.shape[-1:])
    idx = np.arange(v.shape[-1])
    out[:, idx, idx] = v
    return out


def lstm_decay(T=256, d=32, gate_bias=1.0, input_scale=1.0, seed=0):
    """||dh_T/dh_{T-k}|| (the full path) and max_i prod f_i (the cell's additive route) over
    k = 1..T-1 on one LSTM trajectory, as a tidy frame (``PATH_COLUMNS``)."""
    _gated.check_job(T, d, input_scale, gate_bias, seed)
    X, W_ih, W_hh, b = _gated.trajectory_inputs(T, d, GATES, gate_bias, input_scale, seed)
    H, C = lstm.forward(X, W_ih, W_hh, b_ih=b)                           # the real trajectory
    _, log_f = step_jacobians(X, H, C, W_ih, W_hh, b)                  # ln f: (T, d), cheap
    return _gated.decay_frame("lstm", lambda lo, hi: step_jacobians(X, H, C, W_ih, W_hh, b, lo, hi)[0],
                              log_f, T, d, input_scale, gate_bias, seed)


# ------------------------------------------------------------------ peers

def peers(X, W, dH, torch=None, jax=None):
    """The NumPy step loop of ``harness.models.reference``; with PyTorch, ``torch.nn.LSTM``
    + autograd (oneDNN's kernels on CPU); with JAX, ``jax_forward`` jitted, and its VJP."""
    W_ih, W_hh = W
    H, C = lstm.forward(X, W_ih, W_hh)
    impls = {"numpy": common_peers.slots(
        lambda: reference.lstm_forward(X, W_ih, W_hh),
        lambda out: reference.lstm_backward(X, *out, W_ih, W_hh, dH), (H, C))}
    if torch is not None:
        impls["torch"] = common_peers.recurrent(torch.nn.LSTM, X, W, dH, H.shape, torch)
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_forward(jax, x, *w), X, W, dH, jax)
    return impls


def jax_forward(jax, X, W_ih, W_hh):
    """PyTorch's LSTM equations (gates i, f, g, o), no biases, by ``lax.scan`` over t:
    c_t = f c_{t-1} + i g, h_t = o tanh(c_t). X (..., T, d) -> H (..., T, d_h)."""
    jnp, sig = jax.numpy, jax.nn.sigmoid
    d_h = W_hh.shape[1]
    XW = jnp.moveaxis(X @ W_ih.T, -2, 0)            # (T, ..., 4 d_h)

    def step(hc, xw):
        h, c = hc
        a = h @ W_hh.T + xw                         # (..., 4 d_h)
        i, f = sig(a[..., :d_h]), sig(a[..., d_h:2 * d_h])
        g, o = jnp.tanh(a[..., 2 * d_h:3 * d_h]), sig(a[..., 3 * d_h:])
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), h
    zero = jnp.zeros(XW.shape[1:-1] + (d_h,), X.dtype)
    _, H = jax.lax.scan(step, (zero, zero), XW)
    return jnp.moveaxis(H, 0, -2)


compare_target = rnn_family.compare_target     # the RNN's targets: 1.5x at batch 1, else 1x


FAMILY = _gated.family(
    "lstm", "LSTM", lstm.forward, backward_from, lambda out: out[0], inputs, trace_weights,
    Form("lstm", traced_forward, macs, trace_memory_bytes), TIMED, lstm_decay, GATES, 2, peers,
    compare_target)
