"""The linear attention family: one model, three algorithms.

Causal linear attention with its normaliser (Katharopoulos et al. 2020), feature map
phi = elu + 1, X (T, d_model), Wq, Wk, Wv (d, d) in the kernel's layout (q_t = Wq x_t):

    S_t = a_t S_{t-1} + phi(k_t) v_t^T,     z_t = a_t z_{t-1} + phi(k_t),
    y_t = S_t^T phi(q_t) / (z_t . phi(q_t))

The family's model has no decay (a_t = 1); its own forward is ``harness.linear_attention``'s
chunked method. The same outputs come from a recurrence over T dependent steps, from one
masked T x T product, or from chunks of both (``harness.models._linear`` holds the three
traced forms and the NumPy and PyTorch peers): ``method_agreement`` measures that they agree.

Its gradient path, from x_s (s = T-k) to y_T, with D[T, s] = prod_{s < r <= T} a_r:

    dy_T/dx_s = D[T, s] / n_T * M_s,
    M_s = w_s W_v + (v_s - y_T) (phi(q_T) ⊙ phi'(k_s))^T W_k - sigmoid(x_s . w_a + b_a) U_s w_a^T

(w_s = phi(q_T) . phi(k_s), n_T = sum_s D[T, s] w_s; the last term is the selective decay's
gate, U_s = sum_{s' < s} D[s, s'] w_{s'} (v_{s'} - y_T)). So the state carries position T-k
to T scaled by the decay's product over the k steps, ``log10_decay``, times a factor local to
T-k: none (a_t = 1) keeps every position, a constant gamma fades as gamma^k, and a selective
a_t = exp(-softplus(x_t . w_a + b_a)) makes the product depend on the input
(``selective_spread`` measures its spread over input draws). In the gradient-path frame
``weight`` names the decay ("none", "constant", "selective"), ``activation`` the feature map
("elu+1"), ``rho`` holds gamma (1 for none, NaN for selective), ``log10_linear`` the theory
k log10 gamma where there is one; the selective gate's bias b_a makes a_t = ``a_at_zero`` at
x_t = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis import trace
from harness.infra.stats import LN10, fit_rate
from harness.infra.validate import check_choice, check_int, check_memory, check_real, check_seed
from harness.kernels import linear_attention as la
from harness.models import (Compared, Family, Form, GradientPath, Kernels, Tracing, Variant,
                            _linear, path_frame, path_options, projection_weights)

NAME = "linear_attention"
METHODS = la.METHODS               # ("recurrent", "parallel", "chunked")
OWN_METHOD = "chunked"             # the family's own forward: GEMMs only, no T x T array
LABELS = {None: "none", "constant": "constant", "selective": "selective"}   # the frame's `weight`


@dataclass(frozen=True)
class LinearOptions:
    """The family's own knobs in the decay sweep (``GradientPath.options``)."""
    decays: tuple = la.DECAYS      # None, "constant", "selective": one job each per input scale
    gamma: float = 0.99            # the constant decay (RetNet's heads: 1 - 2^-5 ≈ 0.97 and up)
    a_at_zero: float = 0.99        # the selective a_t at x_t = 0: b_a = softplus^-1(-ln a), so
                                   # it differs from the constant decay by its input alone


LINEAR = LinearOptions()


# ------------------------------------------------------------------ counts and inputs

def trace_weights(d, d_k=None, d_v=None):
    return projection_weights(d, d_k, d_v, out_first=True)              # (d_k, d): q_t = Wq x_t


def _widths(d, d_k, d_v):
    return max(d, d if d_k is None else d_k, d if d_v is None else d_v)


def recurrent_trace_bytes(T, d, d_k=None, d_v=None):
    """Peak bytes of tracing the recurrence: a few (T, width) values, the weights, and T steps'
    ops and views (about three RNN steps' worth)."""
    w = _widths(d, d_k, d_v)
    return trace.BYTES_PER_ELEMENT * (8 * T * w + 4 * w * w) + 3 * trace.BYTES_PER_STEP * T


def parallel_trace_bytes(T, d, d_k=None, d_v=None):
    """Peak bytes of tracing the masked product: X twice, the weights, a few (T, width) values
    and five T x T grids as the tracer keeps them (``trace.field_bytes``), its twenty-odd ops."""
    w = _widths(d, d_k, d_v)
    return (trace.BYTES_PER_ELEMENT * (2 * T * w + 4 * w * w) + 6 * trace.field_bytes(T, w)
            + 5 * trace.field_bytes(T, T) + 10 * trace.BYTES_PER_STEP)


def chunked_trace_bytes(T, d, d_k=None, d_v=None):
    """Peak bytes of tracing the chunked form: a few (T, width) values, one chunk's grids at a
    time, a chunk's ops."""
    w = _widths(d, d_k, d_v)
    c = min(T, _linear.CHUNK)
    return (trace.BYTES_PER_ELEMENT * (8 * T * w + 4 * w * w + 5 * c * c) + c * c
            + 5 * trace.BYTES_PER_STEP * (T // _linear.CHUNK + 1))


FORMS = (
    Form(NAME, _linear.recurrent_forward, _linear.recurrent_macs, recurrent_trace_bytes),
    Form(f"{NAME}-parallel", _linear.parallel_forward, _linear.parallel_macs, parallel_trace_bytes),
    Form(f"{NAME}-chunked", _linear.chunked_forward, _linear.chunked_macs, chunked_trace_bytes),
)


TRACING = Tracing(weights=trace_weights, forms=FORMS,
                  # the products that mix positions, in every form (each form's others are 0)
                  lesson_parts=("mul", "product", "grid", "mix"))


def _draw(rng, T, d, batch=1, dtype="float64"):
    shape = (T, d) if batch == 1 else (batch, T, d)
    X = rng.standard_normal(shape).astype(dtype)                       # (B, T, d)
    s = 1.0 / math.sqrt(d)
    return X, tuple((rng.standard_normal((d, d)) * s).astype(dtype) for _ in range(3))


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X (T, d) or (B, T, d) ~ N(0, 1); Wq, Wk, Wv (d, d) ~ N(0, 1/d)."""
    return _draw(np.random.default_rng(seed), T, d, batch, dtype)


def _method(method):
    """(forward, backward) of ``la`` with ``method``: the model's decay None, normalised."""
    def forward(X, Wq, Wk, Wv):
        return la.forward(X, Wq, Wk, Wv, method=method)

    def backward(X, W, Y, dY):
        return la.backward(X, *W, dY, method=method)

    forward.__name__, backward.__name__ = f"forward_{method}", f"backward_{method}"
    return forward, backward


KERNELS = {m: _method(m) for m in METHODS}
forward, backward_from = KERNELS[OWN_METHOD]


def _timed_inputs(T, d, rng, dtype=np.float64):
    X, W = _draw(rng, T, d, 1, dtype)
    return (X,) + W


def _projection_macs(T, d):
    return T * d * (3 * d + 1)                       # Q, K and V' = [V, 1] (a zero row of W_v')


def kernel_macs(method, T, d):
    """Multiplications of ``la.forward(method=...)`` at d_k = d_v = d (w = d + 1 columns of V'):
    recurrent 3 T d w (a_t S', phi(k) v'^T, the read); parallel T^2 (d + w); chunked, as if
    every chunk were full, T C (d + w) inside chunks and 2 T d w for the state."""
    w = d + 1
    inner = {"recurrent": 3 * T * d * w, "parallel": T * T * (d + w),
             "chunked": T * _linear.CHUNK * (d + w) + 2 * T * d * w}[method]
    return _projection_macs(T, d) + inner


def kernel_bytes(method, T, d):
    """Peak bytes of one forward and its inputs: X, phi(Q), phi(K), V', O', Y (float64), the
    weights, and the method's own: T x T (parallel), a state per chunk (chunked)."""
    own = {"recurrent": 0, "parallel": T * T,
           "chunked": (T // _linear.CHUNK + 1) * d * (d + 1)}[method]
    return 8 * (T * (6 * d + 2) + 4 * d * d + own)


TIMED = tuple(Variant(form.name, _timed_inputs, KERNELS[m][0],
                      lambda T, d, m=m: kernel_macs(m, T, d),
                      lambda T, d, m=m: kernel_bytes(m, T, d))
              for form, m in zip(FORMS, METHODS))


# ------------------------------------------------------------------ gradient path

def selective_bias(a_at_zero):
    """b_a with exp(-softplus(b_a)) = a_at_zero: the selective a_t at x_t = 0."""
    a = check_real("a_at_zero", a_at_zero, 0.0, strict=True)
    if a >= 1.0:
        raise ValueError(f"a_at_zero must be in (0, 1) (a_t = exp(-softplus(b_a)) < 1), got {a!r}.")
    return math.log(math.expm1(-math.log(a)))


def decay_arguments(decay, d, rng, options=LINEAR):
    """``la.forward``'s decay keywords for ``decay``: gamma = options.gamma; w_a ~ N(0, 1/d)
    drawn from ``rng`` (whatever the decay, so that every decay sees the same X after it) and
    b_a from options.a_at_zero."""
    check_choice("decay", decay, la.DECAYS)
    w_a = rng.standard_normal(d) / math.sqrt(d)
    if decay == "constant":
        return {"decay": decay, "gamma": float(options.gamma)}
    if decay == "selective":
        return {"decay": decay, "w_a": w_a, "b_a": selective_bias(options.a_at_zero)}
    return {"decay": None}


def log_decay(X, decay=None, gamma=None, w_a=None, b_a=None):
    """ln a_t (..., T) in float64: 0, ln gamma, or -softplus(x_t . w_a + b_a)."""
    X = np.asarray(X, dtype=np.float64)
    if decay is None:
        return np.zeros(X.shape[:-1])
    if decay == "constant":
        return np.full(X.shape[:-1], math.log(gamma))
    return -np.logaddexp(0.0, X @ np.asarray(w_a, dtype=np.float64) + b_a)


PATH_CHUNK = 2048       # distances whose (d_v, d_model) factors M_s are held at once


def path_norms(X, Wq, Wk, Wv, decay=None, gamma=None, w_a=None, b_a=None):
    """(ln_decay, ln_norm), each (T-1,) at k = 1..T-1: ln prod_{T-k < r <= T} a_r and
    ln ||dy_T/dx_{T-k}||_2 (spectral), of one sequence X (T, d_model), in float64.

    dy_T/dx_s = D[T, s] / n_T * M_s (the module's docstring): the product is taken in logs,
    so a path of 10^-1000 is finite, and M_s, whose terms are bounded (D[s, s'] <= 1 inside
    U_s), goes through one SVD per distance, PATH_CHUNK distances at a time: O(T d^3).
    """
    X, Wq, Wk, Wv = (np.asarray(a, dtype=np.float64) for a in (X, Wq, Wk, Wv))
    T = check_int("T", X.shape[0], 2)
    FQ, FK, V = _linear.features(X, Wq, Wk, Wv)               # (T, d_k), (T, d_k), (T, d_v)
    ln_a = log_decay(X, decay, gamma, w_a, b_a)               # (T,)
    ln_D = np.append(np.cumsum(ln_a[:0:-1])[::-1], 0.0)       # ln D[T, s], s = 0..T-1
    fq = FQ[-1]
    w = FK @ fq                                               # (T,) phi(q_T) . phi(k_s)
    D = np.exp(ln_D)
    n = float(D @ w)
    if not (n > 0.0 and math.isfinite(n)):
        raise ValueError(f"the normaliser z_T . phi(q_T) is {n!r}: scale X down (input_scale).")
    y = (D * w) @ V / n                                       # (d_v,) y_T
    R = V - y                                                 # (T, d_v)
    u = (fq * np.minimum(FK, 1.0)) @ Wk             # (T, d_model): phi'(k) = min(phi(k), 1)
    gate = np.zeros((T, R.shape[1]))                          # sigmoid(x_s . w_a + b_a) U_s
    if decay == "selective":
        a = np.exp(ln_a)
        U = np.zeros(R.shape[1])
        for s in range(1, T):                       # U_s = a_s (U_{s-1} + w_{s-1} R_{s-1})
            U = a[s] * (U + w[s - 1] * R[s - 1])
            gate[s] = U
        gate *= np.exp(-np.logaddexp(0.0, -(X @ w_a + b_a)))[:, None]
    w_a = np.zeros(X.shape[1]) if w_a is None else np.asarray(w_a, dtype=np.float64)
    ln_M = np.empty(T - 1)
    for lo in range(0, T - 1, PATH_CHUNK):
        hi = min(lo + PATH_CHUNK, T - 1)
        M = (w[lo:hi, None, None] * Wv[None] + R[lo:hi, :, None] * u[lo:hi, None, :]
             - gate[lo:hi, :, None] * w_a[None, None, :])     # (n, d_v, d_model)
        with np.errstate(divide="ignore"):
            ln_M[lo:hi] = np.log(np.linalg.svd(M, compute_uv=False)[:, 0])
    ln_J = ln_D[:T - 1] + ln_M - math.log(n)                  # s = 0..T-2
    return ln_D[:T - 1][::-1].copy(), ln_J[::-1].copy()       # k = T-1-s = 1..T-1


def linear_decay(T=256, d=32, decay=None, input_scale=1.0, seed=0, options=LINEAR):
    """The gradient path of one linear attention (``decay``) on one real input, as a tidy frame
    with ``PATH_COLUMNS``, one row per distance k = 1..T-1.

    X ~ N(0, input_scale^2) (T, d), Wq, Wk, Wv ~ N(0, 1/d) and the selective gate's w_a, from
    ``default_rng([seed, 3])``: the same X for every decay. ``log10_decay``: the decay's product
    over the k steps; ``log10_norm`` = ``log10_spectral``: ||dy_T/dx_{T-k}||, exact;
    ``log10_linear``: k log10 gamma (0 for none; NaN for selective, which has no constant).
    """
    T = check_int("T", T, 2)
    d = check_int("d", d)
    input_scale = check_real("input_scale", input_scale)
    check_seed("seed", seed)
    rng = np.random.default_rng([seed, 3])
    X, W = _draw(rng, T, d)
    kw = decay_arguments(decay, d, rng, options)
    ln_decay, ln_norm = path_norms(X * input_scale, *W, **kw)
    k = np.arange(1, T)
    rho = {None: 1.0, "constant": float(options.gamma), "selective": np.nan}[decay]
    return path_frame(NAME, k, weight=LABELS[decay], activation="elu+1", rho=rho,
                      input_scale=input_scale, T=T, d=d, seed=seed,
                      log10_norm=ln_norm / LN10, log10_spectral=ln_norm / LN10,
                      log10_linear=k * math.log10(rho), log10_decay=ln_decay / LN10,
                      norm_measure="spectral")


def decay_jobs(config, T, d):
    """One job per (decay of the family's options, input scale of the sweep)."""
    return [dict(model=NAME, T=T, d=d, decay=decay, input_scale=s)
            for decay in path_options(config, NAME).decays for s in config.input_scales]


def gradient_path(job, config):
    return linear_decay(T=job["T"], d=job["d"], decay=job["decay"], input_scale=job["input_scale"],
                        seed=config.seed, options=path_options(config, NAME))


def path_summary(g, fit_from):
    """The state path's fitted rate beside the decay product's (its theory: ln gamma for a
    constant decay, 0 for none, the product's own slope for a selective one); no bound."""
    return {"fitted_rate": fit_rate(g["log10_norm"].to_numpy() * LN10, fit_from),
            "fitted_rate_probe": np.nan,
            "theory_rate": fit_rate(g["log10_decay"].to_numpy() * LN10, fit_from),
            "bound_rate": np.nan, "bound_respected": np.nan, "log10_transient": np.nan}


def path_memory(T, d, config):
    """Peak bytes of one path: X, phi(Q), phi(K), V and their like (T, d) each, and one chunk of
    the factors M_s with NumPy's and LAPACK's copies."""
    return {"linear attention path": 8 * (10 * T * d + 4 * min(PATH_CHUNK, T) * d * d)}


def path_flops(T, d, config):
    """Roughly: the projections (3 T d^2), the factors (3 T d^2), an SVD per distance (~20 d^3)."""
    return 6 * T * d * d + 20 * T * d ** 3


PATH = GradientPath(jobs=decay_jobs, measure=gradient_path, summary=path_summary,
                    memory=path_memory, flops=path_flops, options=LINEAR)


# ------------------------------------------------------------------ what the lessons claim

def selective_spread(distances=(16, 64, 256), draws=200, input_scales=(1.0, 4.0), d=32, seed=0,
                     options=LINEAR):
    """A selective gate makes the gradient path depend on the input: prod a_r over the last k
    steps, over ``draws`` input draws, for each decay, at each distance and input scale.

    One model (w_a and b_a fixed, from ``default_rng([seed, 4, 0])``); each draw is a new X ~
    N(0, input_scale^2) of max(distances) positions, of which the product over distance k
    reads the last k. Tidy: one row per (input_scale, decay, distance, draw), the column
    ``log10_product``. None and a constant gamma give one value at every draw; the selective
    decay a spread (``spread_summary``).
    """
    distances = tuple(check_int("distance", k) for k in distances)
    draws = check_int("draws", draws)
    d = check_int("d", d)
    check_seed("seed", seed)
    K = max(distances)
    rng = np.random.default_rng([seed, 4, 1])                           # the draws of X
    models = {decay: decay_arguments(decay, d, np.random.default_rng([seed, 4, 0]), options)
              for decay in la.DECAYS}                                   # one w_a for all
    rows = []
    for s in input_scales:
        s = check_real("input_scale", s)
        X = rng.standard_normal((draws, K, d)) * s                    # (draws, K, d)
        for decay, kw in models.items():
            suffix = np.cumsum(log_decay(X, **kw)[:, ::-1], axis=1) / LN10   # (draws, K): last k
            for k in distances:
                rows.append(pd.DataFrame({"input_scale": s, "decay": LABELS[decay], "distance": k,
                                          "draw": np.arange(draws),
                                          "log10_product": suffix[:, k - 1]}))
    return pd.concat(rows, ignore_index=True)


def spread_summary(frame):
    """One row per (input_scale, decay, distance) of ``selective_spread``: the median log10
    product, its 5th and 95th percentiles, and ``decades`` between them (the spread)."""
    g = frame.groupby(["input_scale", "decay", "distance"], sort=False)["log10_product"]
    out = g.quantile(0.5).rename("log10_median").to_frame()
    out["log10_p05"], out["log10_p95"] = g.quantile(0.05), g.quantile(0.95)
    out["decades"] = out["log10_p95"] - out["log10_p05"]
    return out.reset_index()


def method_agreement(Ts=(1, 7, 64, 65, 200, 1000), d=16, decays=la.DECAYS, dtype="float64",
                     seed=0, options=LINEAR):
    """The same model computed as a recurrence, in parallel and in chunks gives the same
    outputs: one row per (T, decay, pair of methods), ``max_abs_diff`` between the two
    methods' Y beside ``max_abs_output``, max |Y|. Inputs as ``inputs`` (seed), the decays'
    weights as ``decay_arguments``."""
    rows = []
    for T in Ts:
        T = check_int("T", T)
        X, W = inputs(T, d, 1, dtype, seed)
        for decay in decays:
            kw = decay_arguments(decay, d, np.random.default_rng([seed, 5]), options)
            if decay == "selective":
                kw["w_a"] = kw["w_a"].astype(dtype)
            check_memory(8 * T * T, f"the parallel method at T = {T}")
            Y = {m: la.forward(X, *W, method=m, **kw) for m in METHODS}
            for i, a in enumerate(METHODS):
                for b in METHODS[i + 1:]:
                    rows.append(dict(T=T, d=d, decay=LABELS[decay], dtype=dtype, methods=f"{a}/{b}",
                                     max_abs_diff=float(np.abs(Y[a] - Y[b]).max()),
                                     max_abs_output=float(np.abs(Y[a]).max())))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ peers

def peers(X, W, dY, torch=None, jax=None):
    """NumPy by chunks, every chunk at once (``_linear.numpy_forward``); with PyTorch, the step
    loop a user writes (``torch``) and the chunked form (``torch-chunked``), with autograd;
    with JAX, the chunked form jitted, and its VJP (``_linear.jax_chunked``)."""
    impls = {"numpy": _linear.numpy_peer(X, W, dY)}
    if torch is not None:
        impls["torch"] = _linear.torch_peer(_linear.torch_loop, X, W, dY, torch)
        impls["torch-chunked"] = _linear.torch_peer(_linear.torch_chunked, X, W, dY, torch)
    if jax is not None:
        impls["jax"] = _linear.jax_peer(X, W, dY, jax)
    return impls


def parallel_peers(X, W, dY, torch=None, jax=None):
    """The masked T x T product in NumPy and, with PyTorch and JAX, with autograd and a VJP."""
    impls = {"numpy": _linear.numpy_peer(X, W, dY, chunk=None)}
    if torch is not None:
        impls["torch"] = _linear.torch_peer(
            lambda t, *a: _linear.torch_chunked(t, *a, chunk=None), X, W, dY, torch)
    if jax is not None:
        impls["jax"] = _linear.jax_peer(X, W, dY, jax, chunk=None)
    return impls


def compare_target(batch, direction, T, d):
    return 1.0, None, "at least as fast as the fastest peer"


DIRECTIONS = ("forward", "forward+backward")

FAMILY = Family(
    name=NAME, title="linear attention",
    kernels=Kernels(forward=forward, backward=backward_from, primary=lambda Y: Y, inputs=inputs),
    tracing=TRACING, timed=TIMED, path=PATH,
    compared=(
        Compared("default", forward, backward_from, peers, compare_target, directions=DIRECTIONS,
                 cases=((1, 4096, 64), (1, 65536, 64)),
                 quick_cases=((1, 16, 8), (1, 37, 8))),
        Compared("parallel", *KERNELS["parallel"], parallel_peers, compare_target,
                 directions=DIRECTIONS, cases=((1, 1024, 64), (1, 4096, 64)),
                 quick_cases=((1, 16, 8),)),
        Compared("recurrent", *KERNELS["recurrent"], peers, compare_target,
                 directions=DIRECTIONS, cases=((1, 4096, 64),), quick_cases=((1, 37, 8),)),
    ),
)
