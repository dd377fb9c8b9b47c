"""What the two gated families (``lstm``, ``gru``) share: their inputs, their knobs, and the
gradient path by route measured from their step Jacobians.

The lesson's claim: the LSTM and the GRU "did not shorten that path, they opened an
additive route beside it so that it survived the trip". Each step's Jacobian J_t =
ds_t/ds_{t-1} (s the state: (h, c) for the LSTM, h for the GRU) is built from the real
trajectory, and the path from position T-k to T is the product J_T ... J_{T-k+1}. Beside it,
the additive route alone: the LSTM's dc_T/dc_{T-k} through the cell, prod diag(f); the GRU's
z h_{t-1} term, prod diag(z). Both are measured, in log space (renormalised at every step),
so that 0.95^1000 is as exact as 0.95.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analysis import trace
from harness.infra.stats import fit_rate
from harness.infra.validate import check_int, check_real, check_seed
from harness.models import (Compared, Family, GradientPath, Kernels, Tracing, path_frame,
                            path_options)

LN10 = math.log(10.0)


@dataclass(frozen=True)
class GatedOptions:
    """The gated families' own knobs in the decay sweep (``GradientPath.options``)."""
    # the bias of the gate that keeps the state (the LSTM's forget gate f, the GRU's update
    # gate z): 0, 1 (Jozefowicz et al. 2015's advice for f) and 3, common initialisations
    gate_biases: tuple = (0.0, 1.0, 3.0)


GATED = GatedOptions()


def draw(rng, T, d, gates, batch=1, dtype="float64"):
    """X (T, d) or (B, T, d) ~ N(0, 1); W_ih, W_hh (gates d, d) ~ N(0, 1/d)."""
    shape = (T, d) if batch == 1 else (batch, T, d)
    X = rng.standard_normal(shape).astype(dtype)                       # (B, T, d)
    s = 1.0 / math.sqrt(d)
    W = tuple((rng.standard_normal((gates * d, d)) * s).astype(dtype) for _ in range(2))
    return X, W


def trace_weights(gates, d, d_h=None):
    """The weights a traced forward takes: W_ih (gates d_h, d) and W_hh (gates d_h, d_h)."""
    d_h = d if d_h is None else d_h
    return (("W_ih", (gates * d_h, d), ("gates", "d_model"), "input"),
            ("W_hh", (gates * d_h, d_h), ("gates", "d_h"), "recurrence"))


def timed_inputs(gates, T, d, rng, dtype=np.float64):
    """(X, W_ih, W_hh) of one unbatched sequence, the arguments of a timed forward."""
    X, W = draw(rng, T, d, gates, 1, dtype)
    return (X,) + W


def trajectory_inputs(T, d, gates, gate_bias, input_scale, seed):
    """The sweep's inputs for one configuration: X ~ N(0, input_scale^2), W_ih, W_hh ~ N(0, 1/d),
    b_ih zero but ``gate_bias`` on the second gate block (LSTM's f, GRU's z), float64."""
    rng = np.random.default_rng([seed, 1])
    X, (W_ih, W_hh) = draw(rng, T, d, gates)
    b = np.zeros(gates * d)
    b[d:2 * d] = gate_bias
    return X * input_scale, W_ih, W_hh, b


def trace_memory_bytes(T, d, gates):
    """Peak bytes of tracing a gated forward: (T, gates d) products, the weights, and every
    step's gate views (about twice an RNN step's objects)."""
    e = trace.BYTES_PER_ELEMENT
    return e * (4 * T * gates * d + 4 * gates * d * d) + 2 * trace.BYTES_PER_STEP * T


CHUNK = 1024       # steps whose Jacobians are built at once: memory O(CHUNK (states d)^2)


def route_norms(jacobians, T, d, log_gate):
    """log10 ||ds_T/ds_{T-k}[:d, :d]|| and log10 max_i prod f_i (the additive route), k = 1..T-1.

    ``jacobians(lo, hi)`` -> (hi - lo, n, n): the step Jacobians ds_t/ds_{t-1} of steps lo..hi-1
    (0-based), built CHUNK steps at a time from the end; the path over distance k is
    J[T-1] J[T-2] ... J[T-k], renormalised by its largest entry at every k so that it neither
    under- nor overflows. ``log_gate`` (T, d): ln of the gate on the additive route.
    Returns (log10_full, log10_gated), each of length T-1.
    """
    full = np.empty(T - 1)
    P, acc, k = None, 0.0, 1
    for hi in range(T, 1, -CHUNK):
        lo = max(1, hi - CHUNK)                                   # J[0] is never on a path
        J = jacobians(lo, hi)
        blocks, logs = np.empty((hi - lo, d, d)), np.empty(hi - lo)
        for j in range(hi - lo):                                  # k = T - t for t = hi-1 .. lo
            P = J[hi - lo - 1 - j] if P is None else P @ J[hi - lo - 1 - j]
            s = float(np.abs(P).max())
            if s == 0.0 or not math.isfinite(s):                  # a path that ends: zero or inf
                blocks[j:], logs[j:] = 0.0, -np.inf if s == 0.0 else np.inf
                P = np.zeros_like(P) if s == 0.0 else P
                break
            P = P / s
            acc += math.log(s)
            blocks[j], logs[j] = P[:d, :d], acc
        with np.errstate(divide="ignore"):
            full[k - 1:k - 1 + hi - lo] = (logs + np.log(np.linalg.svd(blocks, compute_uv=False)[:, 0])) / LN10
        k += hi - lo
    route = np.cumsum(log_gate[:0:-1], axis=0)                     # rows T-1, T-2, ..., 1
    return full, route.max(axis=1) / LN10


def path(name, decay, gates, states):
    """The ``GradientPath`` of the gated family ``name``: one job per (input scale, gate bias)
    of the sweep, each measured by ``decay(T, d, gate_bias, input_scale, seed)``."""
    def jobs(config, T, d):
        return [dict(model=name, T=T, d=d, input_scale=s, gate_bias=b)
                for s in config.input_scales for b in path_options(config, name).gate_biases]

    def measure(job, config):
        return decay(T=job["T"], d=job["d"], gate_bias=job["gate_bias"],
                     input_scale=job["input_scale"], seed=config.seed)

    return GradientPath(jobs=jobs, measure=measure, summary=summary,
                        memory=lambda T, d, config: memory(name.upper(), T, d, gates, states),
                        flops=lambda T, d, config: flops(T, d, states), options=GATED)


def family(name, title, forward, backward, primary, inputs, trace_weights, form, timed, decay,
           gates, states, peers, compare_target):
    """The ``Family`` of a gated recurrence: the parts that differ between the LSTM and the
    GRU given, the rest (its lesson parts, its gradient path by ``path``, the comparison's
    directions and cases) the same for both. ``form``: its traced ``Form``; ``decay``: its
    gradient-path measurement; ``states``: 2 for (h, c), 1 for h."""
    return Family(
        name=name, title=title,
        kernels=Kernels(forward=forward, backward=backward, primary=primary, inputs=inputs),
        tracing=Tracing(weights=trace_weights, forms=(form,), lesson_parts=("recurrence", "input")),
        timed=timed,
        path=path(name, decay, gates, states),
        compared=(Compared("default", forward, backward, peers, compare_target,
                           directions=("forward", "forward+backward"),   # the targets
                           cases=((1, 1000, 256), (32, 1000, 256)),
                           quick_cases=((1, 16, 8), (3, 16, 8))),),
    )


def decay_frame(name, jacobians, log_gate, T, d, input_scale, gate_bias, seed):
    """The gradient-path frame of one gated configuration (``PATH_COLUMNS``)."""
    full, gated = route_norms(jacobians, T, d, log_gate)
    return path_frame(name, np.arange(1, T), weight="gaussian", activation="tanh",
                      input_scale=float(input_scale), T=T, d=d, seed=seed,
                      gate_bias=float(gate_bias), log10_norm=full, log10_spectral=full,
                      log10_gated=gated, norm_measure="spectral")


def check_job(T, d, input_scale, gate_bias, seed):
    check_int("T", T, 2)
    check_int("d", d)
    check_real("input_scale", input_scale)
    check_real("gate_bias", gate_bias)
    check_seed("seed", seed)


def summary(g, fit_from):
    """The full path's fitted rate beside the additive route's (the product of the measured
    gates: its theory), both ln per step on k >= fit_from (T-1); no radius, no bound."""
    return {"fitted_rate": fit_rate(g["log10_norm"].to_numpy() * LN10, fit_from),
            "fitted_rate_probe": np.nan,
            "theory_rate": fit_rate(g["log10_gated"].to_numpy() * LN10, fit_from),
            "bound_rate": np.nan, "bound_respected": np.nan, "log10_transient": np.nan}


def memory(name, T, d, gates, states):
    """Peak bytes of one configuration: the step Jacobians, the renormalised blocks, the
    trajectory and its gates."""
    n, c = states * d, min(CHUNK, T)
    return {f"{name} step Jacobians": (2 * c * n * n + c * d * d) * 8,
            f"{name} trajectory": (4 + 2 * gates) * T * d * 8}


def flops(T, d, states):
    """The product's T (states d)^3 and the SVDs' ~20 T d^3."""
    return 2 * T * (states * d) ** 3 + 20 * T * d ** 3
