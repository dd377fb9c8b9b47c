"""The RNN family: h_t = phi(W_hh h_{t-1} + W_xh x_t), T dependent steps.

Kernels in ``harness.kernels.rnn``; the plain NumPy forward the tracer runs in
``harness.models.reference``; here, everything the analysers need to know about it:
the lessons' counts (T d_h d_in + T d_h^2 multiplications), its inputs, the
variant that is timed, and its gradient path,

    dh_T/dh_{T-k} = J_T J_{T-1} ... J_{T-k+1},   J_t = diag(phi'(a_t)) W_hh,

measured on real forward trajectories two ways: the spectral norm of the
accumulated Jacobian product (exact, O(T d^3)) and the norm of the
back-propagated gradient of a probe loss u.h_T at every position (O(T d^2),
scales to large T and d). Both accumulate in log space with renormalisation, so
T = 20000 at rho = 0.9 (about 1e-915) is finite.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.kernels import jacobian, rnn
from harness.models import reference
from harness.analysis import trace
from harness.infra.stats import LN10, fit_rate
from harness.infra.validate import (as_float_array, check_choice, check_int, check_memory,
                               check_positive, check_real, check_seed)
from harness.infra.config import ACTIVATIONS, DECAY, MEASURES, WEIGHTS
from harness.models import (Compared, Family, Form, GradientPath, Kernels, Tracing, Variant,
                            common_peers, path_frame)

PROBE_SEED = 12345      # the fixed random probe u of the loss u.h_T, the same in every measure


# ------------------------------------------------------------------ counts and inputs

def macs(T, d, d_h=None):
    """Multiplications per part: the input products T d_h d and the recurrence T d_h^2."""
    d_h = d if d_h is None else d_h
    return {"input": T * d_h * d, "recurrence": T * d_h * d_h}


def trace_weights(d, d_h=None):
    d_h = d if d_h is None else d_h
    return (("W_xh", (d_h, d), ("d_h", "d_model"), "input"),
            ("W_hh", (d_h, d_h), ("d_h", "d_h"), "recurrence"))


def traced_forward(X, W_xh, W_hh):
    return (reference.rnn_forward(X, W_xh, W_hh),)                   # (T, d_h)


def trace_memory_bytes(T, d, d_h=None):
    """Peak bytes of tracing the forward: a few (T, width) values, the weights, T steps' objects."""
    d_h = d if d_h is None else d_h
    e = trace.BYTES_PER_ELEMENT
    return e * (2 * T * max(d, d_h) + 2 * d_h * d + 2 * d_h * d_h) + trace.BYTES_PER_STEP * T


TRACING = Tracing(weights=trace_weights,
                  forms=(Form("rnn", traced_forward, macs, trace_memory_bytes),),
                  lesson_parts=("recurrence", "input"))


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X (T, d) or (B, T, d) ~ N(0, 1); W_xh, W_hh ~ N(0, 1/d), which keeps tanh out of saturation."""
    rng = np.random.default_rng(seed)
    return _draw(rng, T, d, batch, dtype)


def _draw(rng, T, d, batch, dtype):
    shape = (T, d) if batch == 1 else (batch, T, d)
    X = rng.standard_normal(shape).astype(dtype)                       # (B, T, d)
    s = 1.0 / math.sqrt(d)
    W = tuple((rng.standard_normal((d, d)) * s).astype(dtype) for _ in range(2))  # W_xh, W_hh
    return X, W


def backward_from(X, W, H, dH):
    return rnn.backward(X, H, W[0], W[1], dH)


def _timed_bytes(T, d):
    return 4 * T * d * 8 + 2 * d * d * 8


def _timed_inputs(T, d, rng, dtype=np.float64):
    X, W = _draw(rng, T, d, 1, dtype)
    return (X,) + W


TIMED = (Variant("rnn", _timed_inputs, rnn.forward, lambda T, d: sum(macs(T, d).values()),
                 _timed_bytes),)


# ------------------------------------------------------------------ gradient path

def recurrent_matrix(d, rho, kind="orthogonal", seed=0):
    """W_hh (d, d) with spectral radius exactly ``rho``: rho times ``unit_recurrent_matrix``.

    ``orthogonal``: rho Q with Q Haar-orthogonal. Normal, every singular value is
    rho, so ||W_hh^k|| = rho^k exactly. ``gaussian``: N(0, 1/d) entries rescaled
    by rho / (largest |eigenvalue|). Non-normal: sigma_max is about 2 rho, and
    ||W_hh^k|| rises above rho^k before the radius takes over.
    """
    check_positive("rho", rho)
    return rho * unit_recurrent_matrix(d, kind, seed)


def unit_recurrent_matrix(d, kind="orthogonal", seed=0):
    """The radius-1 matrix behind ``recurrent_matrix``: the analyser keeps rho out of it and
    adds log(rho) per step instead, so that any finite rho > 0 is exact in log space."""
    check_int("d", d)
    check_choice("kind", kind, WEIGHTS)
    check_seed("seed", seed)
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(d, d))
    if kind == "orthogonal":
        Q, R = np.linalg.qr(G)
        return Q * np.where(np.diag(R) < 0, -1.0, 1.0)   # sign fix: Haar, not QR-biased
    G /= math.sqrt(d)
    return G * (1.0 / np.abs(np.linalg.eigvals(G)).max())


def log_dphi(A, activation):
    """log phi'(a), exactly even where tanh has rounded to +-1 (so no log(0))."""
    if activation == "identity":
        return np.zeros_like(A)
    a = np.abs(A)
    # 1 - tanh(a)^2 = 4 e^{-2a} / (1 + e^{-2a})^2
    return math.log(4.0) - 2.0 * a - 2.0 * np.log1p(np.exp(-2.0 * a))


def scaled_derivatives(X, W_xh, W_hh, activation, ln_scale=0.0):
    """(S, m): phi'(a_t) = exp(m_t) S_t with max(S_t) = 1, on the real trajectory of
    h_t = phi(exp(ln_scale) W_hh h_{t-1} + W_xh x_t). The Jacobian is then
    J_t = exp(m_t + ln_scale) diag(S_t) W_hh: the caller adds ln_scale where it multiplies."""
    T, d_h = X.shape[0], W_hh.shape[0]
    if activation == "identity":
        # the Jacobian is the matrix whatever the trajectory, and h_t itself may overflow
        return np.ones((T, d_h)), np.zeros(T)
    W = W_hh if ln_scale == 0.0 else math.exp(ln_scale) * W_hh
    if not np.isfinite(W).all():
        raise ValueError(f"rho = exp({ln_scale:.6g}) is too large for a tanh trajectory in float64: "
                         f"W_hh overflows; use rho < 1e300.")
    H = rnn.forward(X, W_xh, W, activation=activation)     # (T, d_h): the real trajectory
    H_prev = np.vstack([np.zeros((1, d_h)), H[:-1]])       # (T, d_h): h_0 = 0
    with np.errstate(over="ignore", invalid="ignore"):
        A = H_prev @ W.T + X @ W_xh.T                      # (T, d_h) pre-activations
    if not np.isfinite(A).all():
        raise ValueError(f"rho = exp({ln_scale:.6g}) is too large for a tanh trajectory in float64: "
                         f"the pre-activations overflow; use a smaller rho.")
    lg = log_dphi(A, activation)
    m = lg.max(axis=1)
    return np.exp(lg - m[:, None]), m


def probe_backward(W_hh, u, S, m):
    """(V, L): dl/dh_t = exp(L[t]) V[t] for the loss u.h_T (see ``jacobian.probe_backward``)."""
    T, d_h = S.shape
    V, L = np.empty((T, d_h)), np.empty(T)
    jacobian.probe_backward(np.ascontiguousarray(W_hh.T), u, S, m, V, L)
    return V, L


def rnn_gradient_norms(X, W_xh, W_hh, activation="tanh", measure="both", probe=None):
    """ln ||dh_T/dh_{T-k}|| for k = 1..T-1 on the trajectory of h_t = phi(W_hh h_{t-1} + W_xh x_t).

    X (T, d_in), W_xh (d_h, d_in), W_hh (d_h, d_h), h_0 = 0, no bias.
    ``measure``: "probe" back-propagates the loss u.h_T (u = ``probe`` or a fixed
    random unit vector) and returns ||dl/dh_{T-k}|| = ||u^T dh_T/dh_{T-k}||, a
    lower bound of the spectral norm, O(T d^2); "exact" accumulates the Jacobian
    product and takes its spectral norm, O(T d^3) and O(T d^2) memory; "both".
    Returns a dict of float64 arrays of length T-1 (natural logs): ``distance``,
    ``ln_probe``, ``ln_spectral`` and ``ln_probe_from_product`` (u^T P_k from the
    product, the second measure's view of the first), NaN where not computed.
    """
    X = as_float_array("X", X, 2)
    W_xh = as_float_array("W_xh", W_xh, 2)
    W_hh = as_float_array("W_hh", W_hh, 2)
    T, d_in = X.shape
    d_h = W_hh.shape[0]
    if T < 2:
        raise ValueError(f"X must have T >= 2 rows (there is no distance in one step), got T={T}.")
    if W_hh.shape != (d_h, d_h):
        raise ValueError(f"W_hh must be square (d_h, d_h), got shape {W_hh.shape}.")
    if W_xh.shape != (d_h, d_in):
        raise ValueError(f"W_xh must have shape (d_h, d_in) = {(d_h, d_in)}, got {W_xh.shape}.")
    check_choice("activation", activation, ACTIVATIONS)
    check_choice("measure", measure, MEASURES)
    if probe is None:
        probe = np.random.default_rng(PROBE_SEED).normal(size=d_h)
    probe = as_float_array("probe", probe, 1).astype(np.float64)
    if probe.shape != (d_h,):
        raise ValueError(f"probe must have shape ({d_h},), got {probe.shape}.")
    pn = np.linalg.norm(probe)
    if pn == 0:
        raise ValueError("probe must be a non-zero vector.")
    u = probe / pn
    X, W_xh, W_hh = (a.astype(np.float64) for a in (X, W_xh, W_hh))
    return _gradient_norms(X, W_xh, W_hh, 0.0, activation, measure, u)


def _gradient_norms(X, W_xh, W_unit, ln_rho, activation, measure, u):
    """``rnn_gradient_norms`` for W_hh = exp(ln_rho) W_unit, checked inputs, float64."""
    T, d_h = X.shape[0], W_unit.shape[0]
    W_hh = W_unit
    S, m = scaled_derivatives(X, W_xh, W_unit, activation, ln_rho)
    m = m + ln_rho                                       # each step's Jacobian carries rho
    nan = np.full(T - 1, np.nan)
    out = {"distance": np.arange(1, T), "ln_probe": nan, "ln_spectral": nan.copy(),
           "ln_probe_from_product": nan.copy()}
    if measure in ("both", "probe"):
        _, L = probe_backward(W_hh, u, S, m)
        out["ln_probe"] = L[T - 2::-1].copy()              # L[T-1-k] for k = 1..T-1
    if measure in ("both", "exact"):
        check_memory((T - 1) * d_h * d_h * 8 * 2, f"the exact Jacobian product (T={T}, d_h={d_h})")
        P, logs = np.empty((T - 1, d_h, d_h)), np.empty(T - 1)
        jacobian.jacobian_products(W_hh, S, m, P, logs)
        with np.errstate(divide="ignore"):
            out["ln_spectral"] = logs + np.log(np.linalg.svd(P, compute_uv=False)[:, 0])
            out["ln_probe_from_product"] = logs + np.log(np.linalg.norm(u @ P, axis=-1))
    return out


def rnn_decay(T=256, d=32, rho=0.9, weight="orthogonal", activation="tanh", input_scale=1.0,
              seed=0, measure="both", exact_max_d=DECAY.exact_max_d):
    """Gradient decay of one RNN configuration, as a tidy frame: one row per distance k.

    W_hh = ``recurrent_matrix(d, rho, weight, seed)``, W_xh ~ N(0, 1/d), X ~ N(0, input_scale^2),
    d_in = d_h = d. Columns: model, weight, activation, rho, input_scale, T, d, seed,
    sigma_max, distance, log10_norm (the spectral norm where computed, else the probe),
    log10_probe, log10_spectral, log10_linear (k log10 rho), log10_bound (Pascanu's
    k log10(sigma_max gamma), gamma = 1 for tanh and identity).
    """
    check_int("T", T, 2)
    check_int("d", d)
    check_positive("rho", rho)
    check_choice("weight", weight, WEIGHTS)
    check_choice("activation", activation, ACTIVATIONS)
    check_choice("measure", measure, MEASURES)
    check_real("input_scale", input_scale)
    check_seed("seed", seed)
    if measure == "both" and d > exact_max_d:
        measure = "probe"                    # the O(T d^3) product is not worth it here
    # rho stays out of the matrix: log(rho) enters every step's factor, so any finite rho > 0
    # is exact (rho Q itself under- or overflows for rho < 1e-162 or > 1e154)
    W_unit = unit_recurrent_matrix(d, weight, seed)
    ln_rho = math.log(rho)
    rng = np.random.default_rng([seed, 1])
    W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * input_scale
    u = np.random.default_rng(PROBE_SEED).normal(size=d)
    r = _gradient_norms(X, W_xh, W_unit, ln_rho, activation, measure, u / np.linalg.norm(u))
    log10_sigma = math.log10(rho) + math.log10(float(np.linalg.norm(W_unit, 2)))
    try:
        sigma_max = 10.0 ** log10_sigma
    except OverflowError:                    # past float64's largest, about 1.8e308
        sigma_max = math.inf
    k = r["distance"].astype(np.float64)
    ln_norm = r["ln_spectral"] if measure != "probe" else r["ln_probe"]
    return path_frame(
        "rnn", r["distance"], weight=weight, activation=activation, rho=float(rho),
        input_scale=float(input_scale), T=T, d=d, seed=seed, sigma_max=sigma_max,
        log10_norm=ln_norm / LN10,
        log10_probe=r["ln_probe"] / LN10,
        log10_spectral=r["ln_spectral"] / LN10,
        log10_linear=k * math.log10(rho),
        log10_bound=k * log10_sigma,                 # gamma = 1: |tanh'| <= 1
        # which norm log10_norm is: the exact spectral norm, or the probe (a lower bound) where
        # the O(T d^3) product was skipped (d > exact_max_d, or measure="probe")
        norm_measure="spectral" if measure != "probe" else "probe",
    )


def decay_jobs(config, T, d):
    """Every (weight, activation, input scale, rho) of the sweep at one (T, d)."""
    return [dict(model="rnn", T=T, d=d, rho=rho, weight=weight, activation=activation,
                 input_scale=s)
            for weight in config.weights for activation in config.activations
            for s in config.input_scales for rho in config.rhos]


def gradient_path(job, config):
    job = {k: v for k, v in job.items() if k != "model"}
    return rnn_decay(seed=config.seed, measure=config.measure, exact_max_d=config.exact_max_d, **job)


def path_summary(g, fit_from):
    """The fitted rate on k >= fit_from (T-1), past transients, beside log(rho) and Pascanu's bound.

    ``theory_rate`` is log(rho) for identity (exact on orthogonal W_hh, the asymptote
    on gaussian) and NaN for tanh, whose theory is the bound: ``bound_rate`` =
    log(sigma_max * gamma), gamma = 1. ``bound_respected``: the fitted rate and every
    k's norm are within the bound, up to 1e-9 relative to the size compared (a log norm
    is a sum of k logs: at k = 10^6 an orthogonal identity RNN's -45,757 is 1.8e-7 over
    its equal bound). ``log10_transient``: max_k (log10 norm - k log10 rho).
    """
    rate = fit_rate(g["log10_norm"].to_numpy() * LN10, fit_from)
    bound = float(g["log10_bound"].iloc[0] / g["distance"].iloc[0]) * LN10   # ln sigma_max, also
                                                                             # where sigma_max overflows
    first = g.iloc[0]
    log10_bound = g["log10_bound"].to_numpy()
    excess = g["log10_norm"].to_numpy() - log10_bound
    with np.errstate(invalid="ignore"):                  # inf - inf where sigma_max overflows
        within = np.nanmax(excess - 1e-9 * np.maximum(1.0, np.abs(log10_bound))) <= 0.0
    return {
        "fitted_rate": rate,
        "fitted_rate_probe": fit_rate(g["log10_probe"].to_numpy() * LN10, fit_from),
        "theory_rate": math.log(first["rho"]) if first["activation"] == "identity" else np.nan,
        "bound_rate": bound,
        "bound_respected": bool(rate <= bound + 1e-9 * max(1.0, abs(bound)) and within),
        "log10_transient": float(np.nanmax(g["log10_norm"] - g["log10_linear"])),
    }


def path_flops(T, d, config):
    """Floating-point operations of one configuration, roughly: the QR or eigenvalues of the
    d x d matrix (~10 d^3, the gaussian's), the probe's T d^2, the exact product's 2 T d^3."""
    exact = config.measure == "exact" or (config.measure == "both" and d <= config.exact_max_d)
    return 10 * d ** 3 + 4 * T * d * d + (2 * T * d ** 3 if exact else 0)


def path_memory(T, d, config):
    """Peak bytes of each stage of one (T, d) configuration of the sweep."""
    stages = {"RNN trajectory": 8 * T * d * 8,                       # X, H, A, S, V, ... (T, d)
              "RNN weights": 6 * d * d * 8}                          # G, Q, R, W_xh, LAPACK's work
    if config.measure == "exact" or (config.measure == "both" and d <= config.exact_max_d):
        stages["exact Jacobian products"] = 2 * (T - 1) * d * d * 8   # P and its normalised copy
    return stages


PATH = GradientPath(jobs=decay_jobs, measure=gradient_path, summary=path_summary,
                    memory=path_memory, flops=path_flops)


# ------------------------------------------------------------------ peers

def peers(X, W, dH, torch=None, jax=None):
    """The NumPy step loop of ``harness.models.reference``; with PyTorch, ``torch.nn.RNN`` + autograd;
    with JAX, ``jax_forward`` jitted, and its VJP; and the kernels' BLAS calls alone (``gemm``),
    the floor their overhead is measured against."""
    W_xh, W_hh = W
    H = rnn.forward(X, W_xh, W_hh)
    impls = {
        "numpy": common_peers.slots(lambda: reference.rnn_forward(X, W_xh, W_hh),
                                    lambda H_: reference.rnn_backward(X, H_, W_xh, W_hh, dH), H,
                                    primary=lambda out: out),
        # the floor: the kernels' own BLAS calls, in their shapes, and nothing else
        "gemm": (rnn.forward_blas_only(X, W_xh, W_hh), rnn.backward_blas_only(X, H, W_xh, W_hh),
                 None),
    }
    if torch is not None:                    # nn.RNN's default nonlinearity is tanh
        impls["torch"] = common_peers.recurrent(torch.nn.RNN, X, W, dH, H.shape, torch)
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_forward(jax, x, *w), X, W, dH, jax)
    return impls


def jax_forward(jax, X, W_xh, W_hh):
    """h_t = tanh(W_hh h_{t-1} + W_xh x_t) in JAX: one input product, then ``lax.scan`` over t.
    X (..., T, d) -> H (..., T, d_h)."""
    jnp = jax.numpy
    XW = jnp.moveaxis(X @ W_xh.T, -2, 0)            # (T, ..., d_h): the scan runs over axis 0

    def step(h, xw):
        h = jnp.tanh(h @ W_hh.T + xw)
        return h, h
    _, H = jax.lax.scan(step, jnp.zeros(XW.shape[1:], X.dtype), XW)
    return jnp.moveaxis(H, 0, -2)


def compare_target(batch, direction, T, d):
    if batch == 1:
        return 1.5, None, "at least 1.5x faster than the fastest peer"
    return 1.0, None, "at least as fast as the fastest peer"


FAMILY = Family(
    name="rnn", title="RNN",
    kernels=Kernels(forward=rnn.forward, backward=backward_from, primary=lambda H: H, inputs=inputs),
    tracing=TRACING, timed=TIMED, path=PATH,
    compared=(Compared("default", rnn.forward, backward_from, peers, compare_target,
                       cases=((1, 1000, 64), (1, 1000, 256), (1, 1000, 512),
                              (32, 1000, 64), (32, 1000, 256)),
                       quick_cases=((1, 16, 8), (3, 16, 8))),),
)
