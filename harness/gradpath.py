"""Gradient-path analyser: T-1 Jacobians in an RNN against one alpha factor in attention.

What position T-k contributes to position T crosses k Jacobians in an RNN,

    dh_T/dh_{T-k} = J_T J_{T-1} ... J_{T-k+1},   J_t = diag(phi'(a_t)) W_hh,

and a single attention weight alpha_{T,T-k} in self-attention, whatever k is.
This module measures both on real forward trajectories and puts the theory
beside the measurement:

* ``rnn_decay`` / ``rnn_gradient_norms``: ||dh_T/dh_{T-k}|| for k = 1..T-1, two
  ways: the spectral norm of the accumulated Jacobian product (exact, O(T d^3))
  and the norm of the back-propagated gradient of a probe loss u.h_T at every
  position (O(T d^2), scales to large T and d). Both accumulate in log space
  with renormalisation, so T = 20000 at rho = 0.9 (about 1e-915) is finite.
* ``attention_paths``: ||dy_T/dx_{T-k}||, split into the value route (through
  alpha.V) and the score route (through alpha itself).
* ``additive_routes`` / ``lesson_additive_routes``: the two routes by which the
  gradient reaches an encoder state in Bahdanau's additive attention.
* ``clipping_experiment``: clipping the total gradient rescales every distance's
  contribution by one factor; the far/near ratio does not move.
* ``decay_sweep``: the grid of ``DecayConfig``, as tidy DataFrames.

Natural logs are used inside; the frames report log10 (``log10_norm``) and
rates per step in natural log (``fitted_rate`` against ``log(rho)``).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from numba import njit

from harness import attention, rnn
from harness._io import UsageError, atomic_write_csv, output_dir
from harness._validate import as_float_array, available_memory_bytes, check_choice, check_memory

ACTIVATIONS = ("identity", "tanh")
WEIGHTS = ("orthogonal", "gaussian")
MEASURES = ("both", "probe", "exact")
LN10 = math.log(10.0)
PROBE_SEED = 12345      # the fixed random probe u of the loss u.h_T, the same in every measure


@dataclass(frozen=True)
class DecayConfig:
    """Every default of the analyser, in one place."""

    rhos: tuple = (0.5, 0.9, 1.0, 1.1, 1.5)    # spectral radii of W_hh: vanish, edge, explode
    activations: tuple = ("identity", "tanh")  # identity: decay exactly rho^k on orthogonal W_hh
    weights: tuple = ("orthogonal", "gaussian")  # normal versus non-normal (transient growth)
    input_scales: tuple = (1.0, 4.0)           # std of x_t; 4.0 drives tanh into saturation
    Ts: tuple = (256,)                         # sequence lengths; distances run 1..T-1
    ds: tuple = (32,)                          # d_h = d_in = d_model
    seed: int = 0                              # one seed per configuration grid, fixed
    measure: str = "both"                      # "probe" (O(T d^2)), "exact" (O(T d^3)) or both
    exact_max_d: int = 128                     # above this the exact product is skipped
    fit_from: float = 0.5                      # fit the rate on k >= fit_from*(T-1): past transients
    attention: bool = True                     # add the self-attention rows to the sweep
    clip_threshold: float = 10.0               # ||g|| above this is rescaled to it
    clip_T: int = 50                           # length of the clipping experiment


DEFAULT = DecayConfig()


# ---------------------------------------------------------------------------
# Compiled kernels: they check nothing; the public functions below do.
# ---------------------------------------------------------------------------

@njit(cache=True)
def _probe_backward(WT, u, S, m):
    """Back-propagate the probe loss u.h_T to every state, renormalising each step.

    WT (d_h, d_h) = W_hh transposed, contiguous; u (d_h,) probe, unit norm;
    S (T, d_h) phi'(a_t) / exp(m_t) in [0, 1]; m (T,) log of that factor.
    Returns V (T, d_h) unit directions and L (T,) with
    dl/dh_t = exp(L[t]) V[t]   (L[T-1] = 0, V[T-1] = u).
    """
    T, d_h = S.shape
    V = np.empty((T, d_h))
    L = np.empty(T)
    v = u.copy()                              # (d_h,)
    V[T - 1] = v
    L[T - 1] = 0.0
    acc = 0.0
    w = np.empty(d_h)                         # (d_h,) phi'_i * dl/dh_i, reused every step
    for i in range(T - 1, 0, -1):
        # forward: h_i = phi(W_hh h_{i-1} + W_xh x_i)  =>  dl/dh_{i-1} = W_hh^T (phi'_i * dl/dh_i)
        for j in range(d_h):
            w[j] = S[i, j] * v[j]
        np.dot(WT, w, v)                      # (d_h,) into v: no allocation in the loop
        ss = 0.0
        for j in range(d_h):
            ss += v[j] * v[j]
        n = math.sqrt(ss)
        if n == 0.0:                          # an exactly singular path: the gradient is 0
            for r in range(i - 1, -1, -1):
                V[r] = 0.0
                L[r] = -np.inf
            return V, L
        # the scale leaves the vector and enters the log: no underflow, no overflow
        acc += m[i] + math.log(n)
        for j in range(d_h):
            v[j] /= n
        V[i - 1] = v
        L[i - 1] = acc
    return V, L


@njit(cache=True)
def _jacobian_products(W, S, m):
    """Accumulate P_k = dh_T/dh_{T-k} = P_{k-1} diag(phi'_{T-k+1}) W_hh, renormalised.

    W (d_h, d_h) = W_hh; S (T, d_h), m (T,) as in _probe_backward.
    Returns P (T-1, d_h, d_h) with unit Frobenius norm and logs (T-1,) so that
    dh_T/dh_{T-k} = exp(logs[k-1]) P[k-1].
    """
    T, d_h = S.shape
    P = np.empty((T - 1, d_h, d_h))
    logs = np.empty(T - 1)
    cur = np.eye(d_h)                         # (d_h, d_h): dh_T/dh_T
    Q = np.empty((d_h, d_h))
    acc = 0.0
    for k in range(1, T):
        i = T - k                             # the state whose Jacobian is appended
        for r in range(d_h):                  # cur @ diag(phi'_i): scale the columns
            for c in range(d_h):
                Q[r, c] = cur[r, c] * S[i, c]
        np.dot(Q, W, cur)                     # (d_h, d_h) into cur: no allocation in the loop
        ss = 0.0
        for r in range(d_h):
            for c in range(d_h):
                ss += cur[r, c] * cur[r, c]
        n = math.sqrt(ss)
        if n == 0.0:
            for r in range(k - 1, T - 1):
                P[r] = 0.0
                logs[r] = -np.inf
            return P, logs
        acc += m[i] + math.log(n)
        cur /= n
        P[k - 1] = cur
        logs[k - 1] = acc
    return P, logs


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------

def _log_dphi(A, activation):
    """log phi'(a), exactly even where tanh has rounded to +-1 (so no log(0))."""
    if activation == "identity":
        return np.zeros_like(A)
    a = np.abs(A)
    # 1 - tanh(a)^2 = 4 e^{-2a} / (1 + e^{-2a})^2
    return math.log(4.0) - 2.0 * a - 2.0 * np.log1p(np.exp(-2.0 * a))


def _scaled_derivatives(X, W_xh, W_hh, activation):
    """(S, m): phi'(a_t) = exp(m_t) S_t with max(S_t) = 1, on the real trajectory."""
    T, d_h = X.shape[0], W_hh.shape[0]
    if activation == "identity":
        # the Jacobian is W_hh whatever the trajectory, and h_t itself may overflow for rho > 1
        return np.ones((T, d_h)), np.zeros(T)
    H = rnn.forward(X, W_xh, W_hh, activation=activation)  # (T, d_h): the real trajectory
    H_prev = np.vstack([np.zeros((1, d_h)), H[:-1]])       # (T, d_h): h_0 = 0
    A = H_prev @ W_hh.T + X @ W_xh.T                       # (T, d_h) pre-activations
    lg = _log_dphi(A, activation)
    m = lg.max(axis=1)
    return np.exp(lg - m[:, None]), m


def recurrent_matrix(d, rho, kind="orthogonal", seed=0):
    """W_hh (d, d) with spectral radius exactly ``rho``.

    ``orthogonal``: rho Q with Q Haar-orthogonal. Normal, every singular value is
    rho, so ||W_hh^k|| = rho^k exactly. ``gaussian``: N(0, 1/d) entries rescaled
    by rho / (largest |eigenvalue|). Non-normal: sigma_max is about 2 rho, and
    ||W_hh^k|| rises above rho^k before the radius takes over.
    """
    _check_positive_int("d", d)
    _check_rho(rho)
    check_choice("kind", kind, WEIGHTS)
    _check_seed(seed)
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(d, d))
    if kind == "orthogonal":
        Q, R = np.linalg.qr(G)
        Q = Q * np.where(np.diag(R) < 0, -1.0, 1.0)      # sign fix: Haar, not QR-biased
        return rho * Q
    G /= math.sqrt(d)
    return G * (rho / np.abs(np.linalg.eigvals(G)).max())


def _check_rho(rho, arg="rho"):
    if not (isinstance(rho, (int, float, np.floating, np.integer)) and math.isfinite(rho) and rho > 0):
        raise ValueError(f"{arg} must be a finite number > 0, got {rho!r}.")


def _check_positive_int(name, v, minimum=1):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}.")


def _check_seed(seed, arg="seed"):
    """A seed for np.random.default_rng: an integer >= 0 (SeedSequence rejects negatives)."""
    _check_positive_int(arg, seed, 0)


def _check_scale(v, arg="input_scale"):
    """The std of the inputs: a real number, finite and >= 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{arg} must be a real number >= 0, got {type(v).__name__} {v!r}.")
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{arg} must be a finite number >= 0, got {v!r}.")


def _fit_rate(log_norm, fit_from):
    """Slope of ln-norm against k over k >= fit_from*(K), and the k range used."""
    K = log_norm.shape[0]
    k = np.arange(1, K + 1, dtype=np.float64)
    lo = min(int(fit_from * K), max(K - 2, 0))
    kk, yy = k[lo:], log_norm[lo:]
    ok = np.isfinite(yy)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(kk[ok], yy[ok], 1)[0])


# ---------------------------------------------------------------------------
# RNN decay
# ---------------------------------------------------------------------------

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

    S, m = _scaled_derivatives(X, W_xh, W_hh, activation)
    nan = np.full(T - 1, np.nan)
    out = {"distance": np.arange(1, T), "ln_probe": nan, "ln_spectral": nan.copy(),
           "ln_probe_from_product": nan.copy()}
    if measure in ("both", "probe"):
        _, L = _probe_backward(np.ascontiguousarray(W_hh.T), u, S, m)
        out["ln_probe"] = L[T - 2::-1].copy()              # L[T-1-k] for k = 1..T-1
    if measure in ("both", "exact"):
        check_memory((T - 1) * d_h * d_h * 8 * 2, f"the exact Jacobian product (T={T}, d_h={d_h})")
        P, logs = _jacobian_products(W_hh, S, m)
        with np.errstate(divide="ignore"):
            out["ln_spectral"] = logs + np.log(np.linalg.svd(P, compute_uv=False)[:, 0])
            out["ln_probe_from_product"] = logs + np.log(np.linalg.norm(u @ P, axis=-1))
    return out


def rnn_decay(T=256, d=32, rho=0.9, weight="orthogonal", activation="tanh", input_scale=1.0,
              seed=0, measure="both", exact_max_d=DEFAULT.exact_max_d):
    """Gradient decay of one RNN configuration, as a tidy frame: one row per distance k.

    W_hh = ``recurrent_matrix(d, rho, weight, seed)``, W_xh ~ N(0, 1/d), X ~ N(0, input_scale^2),
    d_in = d_h = d. Columns: model, weight, activation, rho, input_scale, T, d, seed,
    sigma_max, distance, log10_norm (the spectral norm where computed, else the probe),
    log10_probe, log10_spectral, log10_linear (k log10 rho), log10_bound (Pascanu's
    k log10(sigma_max gamma), gamma = 1 for tanh and identity).
    """
    _check_positive_int("T", T, 2)
    _check_positive_int("d", d)
    _check_rho(rho)
    check_choice("weight", weight, WEIGHTS)
    check_choice("activation", activation, ACTIVATIONS)
    check_choice("measure", measure, MEASURES)
    _check_scale(input_scale)
    _check_seed(seed)
    if measure == "both" and d > exact_max_d:
        measure = "probe"                    # the O(T d^3) product is not worth it here
    W_hh = recurrent_matrix(d, rho, weight, seed)
    rng = np.random.default_rng([seed, 1])
    W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
    X = rng.normal(size=(T, d)) * input_scale
    r = rnn_gradient_norms(X, W_xh, W_hh, activation, measure)
    sigma_max = float(np.linalg.norm(W_hh, 2))
    k = r["distance"].astype(np.float64)
    ln_norm = r["ln_spectral"] if measure != "probe" else r["ln_probe"]
    return pd.DataFrame({
        "model": "rnn", "weight": weight, "activation": activation, "rho": float(rho),
        "input_scale": float(input_scale), "T": T, "d": d, "seed": seed,
        "sigma_max": sigma_max, "distance": r["distance"],
        "log10_norm": ln_norm / LN10,
        "log10_probe": r["ln_probe"] / LN10,
        "log10_spectral": r["ln_spectral"] / LN10,
        "log10_linear": k * math.log10(rho),
        "log10_bound": k * math.log10(sigma_max),    # gamma = 1: |tanh'| <= 1
        "log10_value": np.nan, "log10_score": np.nan,
    })


# ---------------------------------------------------------------------------
# Attention paths
# ---------------------------------------------------------------------------

def attention_path_jacobians(X, Wq, Wk, Wv):
    """dy_T/dx_j for j = 1..T-1 split into routes: (J_value, J_score), each (T-1, d_v, d_model).

    y_T = sum_j alpha_Tj v_j, v_j = x_j Wv, alpha_T = softmax(q_T K^T / sqrt(d_k)).
    Value route (x_j as a term of alpha.V):   alpha_Tj Wv^T.
    Score route (x_j inside alpha, via k_j):  alpha_Tj (v_j - y_T) (Wk q_T)^T / sqrt(d_k).
    Position T itself (distance 0) also has the query route and is left out.
    """
    X = as_float_array("X", X, 2)
    dt = X.dtype
    Wq, Wk, Wv = (as_float_array(n, w, 2, dtype=dt) for n, w in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv)))
    T, d_model = X.shape
    if T < 2:
        raise ValueError(f"X must have T >= 2 rows, got T={T}.")
    for n, w in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv)):
        if w.shape[0] != d_model:
            raise ValueError(f"{n} must have d_model={d_model} rows, got shape {w.shape}.")
    if Wq.shape != Wk.shape:
        raise ValueError(f"Wq and Wk must have the same shape (d_model, d_k), got {Wq.shape} and {Wk.shape}.")
    check_memory(max(_attention_stages(T, d_model, Wv.shape[1]).values()),
                 f"the attention paths (T={T}, d_model={d_model})")
    X, Wq, Wk, Wv = (a.astype(np.float64) for a in (X, Wq, Wk, Wv))
    d_k = Wq.shape[1]
    alpha = attention.forward(X, Wq, Wk, Wv)[1][T - 1]     # (T,): the last row only matters
    V = X @ Wv                                             # (T, d_v)
    y = alpha @ V                                          # (d_v,)
    g = (Wk @ (X[T - 1] @ Wq)) / math.sqrt(d_k)            # (d_model,): de_Tj/dx_j
    a = alpha[:T - 1]                                      # (T-1,)
    J_value = a[:, None, None] * Wv.T[None]                # (T-1, d_v, d_model)
    J_score = (a[:, None] * (V[:T - 1] - y))[:, :, None] * g[None, None, :]
    return J_value, J_score


def attention_paths(T=256, d=32, input_scale=1.0, seed=0, X=None, Wq=None, Wk=None, Wv=None):
    """||dy_T/dx_{T-k}|| for k = 1..T-1 in single-head self-attention, tidy, one row per k.

    With no weights given: X ~ N(0, input_scale^2) (T, d), Wq, Wk, Wv ~ N(0, 1/d) (d, d).
    Columns as ``rnn_decay`` (model="attention", rho=NaN, activation="softmax",
    weight="gaussian"), with log10_norm the spectral norm of the whole Jacobian and
    log10_value / log10_score its two routes. Every k crosses one alpha factor.
    """
    _check_scale(input_scale)
    _check_seed(seed)
    if X is None:
        _check_positive_int("T", T, 2)
        _check_positive_int("d", d)
        rng = np.random.default_rng([seed, 2])
        X = rng.normal(size=(T, d)) * input_scale
        Wq, Wk, Wv = (rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(3))
    elif any(w is None for w in (Wq, Wk, Wv)):
        raise ValueError("Wq, Wk and Wv must be given together with X.")
    Jv, Js = attention_path_jacobians(X, Wq, Wk, Wv)
    T, d = np.shape(X)
    with np.errstate(divide="ignore"):
        def lg(J):
            return np.log10(np.linalg.svd(J, compute_uv=False)[:, 0])
        total, value, score = lg(Jv + Js), lg(Jv), lg(Js)
    k = np.arange(1, T)
    idx = T - 1 - k                                        # x_{T-k}, 0-based
    return pd.DataFrame({
        "model": "attention", "weight": "gaussian", "activation": "softmax", "rho": np.nan,
        "input_scale": float(input_scale), "T": T, "d": d, "seed": seed, "sigma_max": np.nan,
        "distance": k, "log10_norm": total[idx], "log10_probe": np.nan, "log10_spectral": total[idx],
        "log10_linear": 0.0, "log10_bound": np.nan,
        "log10_value": value[idx], "log10_score": score[idx],
    })


# ---------------------------------------------------------------------------
# Additive (Bahdanau) attention: the two routes to an encoder state
# ---------------------------------------------------------------------------

def lesson_additive_inputs(va_scale=0.5):
    """The additive-attention lesson's example: (S, H, Wsa, Wha, va, G), same draws."""
    T_y, T_x, d_h, d_a = 8, 6, 5, 4
    rng = np.random.default_rng(4)
    S = rng.normal(size=(T_y, d_h)) * 0.6
    H = rng.normal(size=(T_x, d_h)) * 0.6
    Wsa = rng.normal(size=(d_a, d_h)) * 0.5
    Wha = rng.normal(size=(d_a, d_h)) * 0.5
    va = rng.normal(size=d_a) * va_scale                   # last draw: rescaling keeps the others
    G = np.random.default_rng(9).normal(size=(T_y, d_h))
    return S, H, Wsa, Wha, va, G


def additive_routes(S, H, Wsa, Wha, va, dC, nonlinearity="tanh"):
    """Norms of the two routes by which dl/dH arrives in additive attention, as a dict.

    S (T_y, d_h) decoder states, H (T_x, d_h) encoder states, Wsa, Wha (d_a, d_h),
    va (d_a,), dC (T_y, d_h) = dl/dc_i. Value route: h_j as a term of each
    c_i = sum_j alpha_ij h_j; score route: h_j as an argument of
    e_ij = va . tanh(Wsa s_i + Wha h_j). Frobenius norms over (T_x, d_h), from
    ``harness.attention.alignment_backward``.
    """
    g = attention.alignment_backward(S, H, Wsa, Wha, va, dC, nonlinearity=nonlinearity)
    nv, ns = float(np.linalg.norm(g.dH_value)), float(np.linalg.norm(g.dH_score))
    return {"value_norm": nv, "score_norm": ns, "value_over_score": nv / ns if ns else math.inf}


def lesson_additive_routes(va_scales=(0.5, 2.0)):
    """The lesson's route norms (2.8303 and 0.2556 at va scale 0.5), one row per va scale."""
    rows = []
    for s in va_scales:
        _check_rho(s, "va_scale")
        rows.append({"va_scale": float(s), **additive_routes(*lesson_additive_inputs(s))})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# Clipping
# ---------------------------------------------------------------------------

def _wxh_terms(W_hh, S, m, X, ln_upstream, upstream_dir):
    """The per-step W_xh terms of dl/dW_xh for the upstream dl/dh_T = exp(ln_upstream) u, log-scaled.

    term_t = (phi'_t * dl/dh_t) x_t^T = exp(ln_a[t]) D[t] x_t^T, D (T, d_h) = S_t * V_t.
    Returns ln_a (T,), D (T, d_h) and ln_norm (T,) = ln ||term_t||_F.
    """
    V, L = _probe_backward(np.ascontiguousarray(W_hh.T), upstream_dir, S, m)
    ln_a = ln_upstream + L + m
    D = S * V                                                   # (T, d_h)
    with np.errstate(divide="ignore"):
        ln_norm = ln_a + np.log(np.linalg.norm(D, axis=1)) + np.log(np.linalg.norm(X, axis=1))
    return ln_a, D, ln_norm


def _sum_terms(ln_a, D, X, ln_unit):
    """sum_t term_t in units of exp(ln_unit): (d_h, d_in). ln_unit near max(ln_a) keeps it finite."""
    return (np.exp(ln_a - ln_unit)[:, None] * D).T @ X


def clip_by_norm(G, ln_unit, threshold):
    """clip(g) = g min(1, threshold/||g||) for g = exp(ln_unit) G, in the same log-scaled form.

    Returns (G, ln_unit'): the clip multiplies the scale, so a gradient of norm 1e400
    is clipped without ever being formed. ``clip_by_norm(g, 0, tau)`` clips a plain array.
    """
    ln_g = ln_unit + _ln(np.linalg.norm(G))
    return G, ln_unit + min(0.0, math.log(threshold) - ln_g)


def _ln(x):
    """Natural log, -inf at 0 (a zero gradient) instead of an error."""
    return math.log(x) if x > 0 else -math.inf


def clipping_experiment(rhos=DEFAULT.rhos, threshold=DEFAULT.clip_threshold, T=DEFAULT.clip_T,
                        d=16, weight="orthogonal", activation="identity", input_scale=1.0, seed=0):
    """Clip the total gradient g = dl/dW_xh (l = u.h_T) and measure each distance's contribution.

    The contribution of distance k is the W_xh term of step T-k,
    C_k = (phi'_{T-k} * dl/dh_{T-k}) x_{T-k}^T, and g = sum_k C_k. The experiment
    computes g, clips it (g min(1, threshold/||g||)), and measures the clipped
    gradient's contributions by back-propagating again from the upstream that
    produces it: g is linear in dl/dh_T, so clip(g) is the gradient for the upstream
    dl/dh_T scaled by ||clip(g)|| / ||g||. The far/near ratio (k = T-1 over k = 1)
    before and after comes from the two passes; ``residual`` is
    max |clip(g) - sum_k C_k^after| / max |clip(g)|. Log-scaled throughout, so
    exploding cases do not overflow. One row per rho, log10 throughout.
    """
    try:
        rhos = tuple(rhos)
    except TypeError:
        raise TypeError(f"rhos must be a sequence of numbers > 0, got {rhos!r}.") from None
    if len(rhos) == 0:
        raise ValueError("rhos must hold at least one spectral radius, got an empty sequence.")
    for rho in rhos:
        _check_rho(rho, "rhos")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a finite number > 0, got {threshold!r}.")
    _check_positive_int("T", T, 3)
    _check_positive_int("d", d)
    check_choice("weight", weight, WEIGHTS)
    check_choice("activation", activation, ACTIVATIONS)
    _check_scale(input_scale)
    _check_seed(seed)
    u = np.random.default_rng(PROBE_SEED).normal(size=d)
    u /= np.linalg.norm(u)                                      # dl/dh_T, unit
    near, far = T - 2, 0                                        # k = 1 and k = T-1, 0-based steps
    rows = []
    for rho in rhos:
        W_hh = recurrent_matrix(d, rho, weight, seed)
        rng = np.random.default_rng([seed, 1])
        W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
        X = rng.normal(size=(T, d)) * input_scale
        S, m = _scaled_derivatives(X, W_xh, W_hh, activation)

        # before: the terms and their sum, g = exp(ln_g_unit) G
        ln_a, D, ln_c = _wxh_terms(W_hh, S, m, X, 0.0, u)
        ln_g_unit = float(np.max(ln_a))
        G = _sum_terms(ln_a, D, X, ln_g_unit)                  # (d_h, d_in)
        ln_g = ln_g_unit + _ln(np.linalg.norm(G))

        # clip the total, then read the factor off the clipped gradient itself
        Gc, ln_clip_unit = clip_by_norm(G, ln_g_unit, threshold)
        ln_clip = ln_clip_unit + _ln(np.linalg.norm(Gc))       # ln ||clip(g)||
        ln_factor = ln_clip - ln_g if math.isfinite(ln_g) else 0.0   # g = 0: nothing to clip

        # after: back-propagate the clipped upstream and split the clipped gradient by step
        ln_a2, D2, ln_c2 = _wxh_terms(W_hh, S, m, X, ln_factor, u)
        rebuilt = _sum_terms(ln_a2, D2, X, ln_clip_unit)       # sum_k C_k^after, same units as Gc
        top = np.abs(Gc).max()
        c_near, c_far, c2_near, c2_far = (float(v) for v in (ln_c[near], ln_c[far], ln_c2[near], ln_c2[far]))
        rows.append({
            "rho": float(rho), "weight": weight, "activation": activation, "T": T, "d": d,
            "threshold": threshold,
            "log10_total_before": ln_g / LN10,
            "log10_total_after": ln_clip / LN10,
            "log10_clip_factor": ln_factor / LN10,
            "log10_near_before": c_near / LN10, "log10_near_after": c2_near / LN10,
            "log10_far_before": c_far / LN10, "log10_far_after": c2_far / LN10,
            # NaN, not a warning, when both are 0 (zero inputs)
            "log10_far_over_near_before": (c_far - c_near) / LN10,
            "log10_far_over_near_after": (c2_far - c2_near) / LN10,
            "residual": float(np.abs(Gc - rebuilt).max() / top) if top > 0 else 0.0,
        })
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# Sweep and summary
# ---------------------------------------------------------------------------

def summarise(frame, fit_from=DEFAULT.fit_from):
    """One row per configuration: fitted rate per step (ln) beside the theory.

    ``fitted_rate`` is the slope of ln ||.|| against k on k >= fit_from*(T-1) (on
    every k for attention);
    ``theory_rate`` is log(rho) for identity (exact on orthogonal W_hh, the asymptote
    on gaussian), 0 for attention (one alpha factor at every k), NaN for tanh, whose
    theory is the bound: ``bound_rate`` = log(sigma_max * gamma), gamma = 1.
    ``bound_respected``: the fitted rate and every k's norm are within the bound.
    ``log10_transient``: max_k (log10 norm - k log10 rho), the non-normal growth.
    """
    keys = ["model", "weight", "activation", "rho", "input_scale", "T", "d", "seed"]
    rows = []
    for key, g in frame.groupby(keys, sort=False, dropna=False):
        g = g.sort_values("distance")
        ln = g["log10_norm"].to_numpy() * LN10
        # attention has no transient to skip: one alpha factor at every k, so fit all of them
        rate = _fit_rate(ln, fit_from if key[0] == "rnn" else 0.0)
        row = dict(zip(keys, key))
        row["fitted_rate"] = rate
        row["sigma_max"] = float(g["sigma_max"].iloc[0])
        if row["model"] == "rnn":
            bound = math.log(row["sigma_max"])
            row["fitted_rate_probe"] = _fit_rate(g["log10_probe"].to_numpy() * LN10, fit_from)
            row["theory_rate"] = math.log(row["rho"]) if row["activation"] == "identity" else np.nan
            row["bound_rate"] = bound
            excess = g["log10_norm"].to_numpy() - g["log10_bound"].to_numpy()
            row["bound_respected"] = bool(rate <= bound + 1e-9 and np.nanmax(excess) <= 1e-9)
            row["log10_transient"] = float(np.nanmax(g["log10_norm"] - g["log10_linear"]))
        else:
            row["fitted_rate_probe"] = np.nan
            row["theory_rate"] = 0.0
            row["bound_rate"] = np.nan
            row["bound_respected"] = np.nan
            row["log10_transient"] = np.nan
        row["log10_near"] = float(g["log10_norm"].iloc[0])
        row["log10_far"] = float(g["log10_norm"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def sweep_configurations(config=DEFAULT):
    """The list of keyword dicts that ``decay_sweep`` runs, RNN first, attention last."""
    jobs = []
    for T in config.Ts:
        for d in config.ds:
            for weight in config.weights:
                for activation in config.activations:
                    for s in config.input_scales:
                        for rho in config.rhos:
                            jobs.append(dict(model="rnn", T=T, d=d, rho=rho, weight=weight,
                                             activation=activation, input_scale=s))
            if config.attention:
                for s in config.input_scales:
                    jobs.append(dict(model="attention", T=T, d=d, input_scale=s))
    return jobs


def decay_sweep(config=DEFAULT, progress=None):
    """Run the grid of ``config``: returns (frame, summary), tidy DataFrames.

    ``frame``: one row per (model, configuration, distance); ``summary``: one row
    per configuration (see ``summarise``). ``progress(i, n, job)`` is called
    before each configuration when given.
    """
    validate_config(config)
    jobs = sweep_configurations(config)
    parts = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress(i, len(jobs), job)
        job = dict(job)
        if job.pop("model") == "rnn":
            parts.append(rnn_decay(seed=config.seed, measure=config.measure,
                                   exact_max_d=config.exact_max_d, **job))
        else:
            parts.append(attention_paths(seed=config.seed, **job))
    frame = pd.concat(parts, ignore_index=True)
    return frame, summarise(frame, config.fit_from)


def _attention_stages(T, d, d_v=None):
    """Peak bytes of the attention stages: the T x T grid, then the (T-1) path Jacobians."""
    d_v = d if d_v is None else d_v
    return {"attention grid": 2 * T * T * 8 + 4 * T * d * 8,            # scores and weights
            "attention path Jacobians": 3 * (T - 1) * d_v * d * 8}      # value, score, their sum


def stage_memory_bytes(T, d, measure=DEFAULT.measure, exact_max_d=DEFAULT.exact_max_d,
                       attention=True):
    """Peak bytes of each stage of one (T, d) configuration of the sweep, as {stage: bytes}.

    The stages run one after another, so the sweep needs the largest of them.
    """
    stages = {"RNN trajectory": 8 * T * d * 8}                       # X, H, A, S, V, ... (T, d)
    if measure == "exact" or (measure == "both" and d <= exact_max_d):
        stages["exact Jacobian products"] = 2 * (T - 1) * d * d * 8   # P and its normalised copy
    if attention:
        stages.update(_attention_stages(T, d))
    return stages


def check_config_memory(config, available=None):
    """Raise MemoryError naming T, d and the stage if any stage of the sweep cannot fit.

    Done before any work, so a sweep that would fail at its last stage fails at once.
    """
    avail = available_memory_bytes() if available is None else available
    for T in config.Ts:
        for d in config.ds:
            stages = stage_memory_bytes(T, d, config.measure, config.exact_max_d, config.attention)
            stage, need = max(stages.items(), key=lambda kv: kv[1])
            if need > avail:
                raise MemoryError(
                    f"T={T}, d={d}: stage {stage!r} needs {need:,} bytes ({need / 2**30:.2f} GiB) but "
                    f"only {avail / 2**30:.2f} GiB are available; use a smaller T or d"
                    + (" (or --no-attention)" if stage.startswith("attention") else ""))


def validate_config(config):
    """Raise ValueError naming the field for a config the sweep cannot run."""
    for name in ("rhos", "activations", "weights", "input_scales", "Ts", "ds"):
        if len(getattr(config, name)) == 0:
            raise ValueError(f"{name} must not be empty.")
    for r in config.rhos:
        _check_rho(r, "rhos")
    for a in config.activations:
        check_choice("activations", a, ACTIVATIONS)
    for w in config.weights:
        check_choice("weights", w, WEIGHTS)
    for s in config.input_scales:
        _check_scale(s, "input_scales")
    _check_seed(config.seed)
    for T in config.Ts:
        _check_positive_int("Ts", T, 2)
    for d in config.ds:
        _check_positive_int("ds", d)
    check_choice("measure", config.measure, MEASURES)
    if not 0.0 <= config.fit_from < 1.0:
        raise ValueError(f"fit_from must be in [0, 1), got {config.fit_from!r}.")
    check_config_memory(config)


# ---------------------------------------------------------------------------
# Command line: harness decay
# ---------------------------------------------------------------------------

HELP = "measure gradient decay over distance: RNN Jacobian products against one attention weight"

DESCRIPTION = """\
Measure ||dh_T/dh_{T-k}|| for every distance k in an RNN (spectral norm of the
Jacobian product and probe-loss back-propagation, in log space) on orthogonal and
gaussian W_hh with a set spectral radius, beside ||dy_T/dx_{T-k}|| in
self-attention (value and score routes). Writes decay.csv (one row per model,
configuration and distance), decay_summary.csv (fitted rate per step against
log(rho) and Pascanu's bound), decay_clipping.csv and decay_additive.csv into
--out, and prints the summary.

example:
  harness decay --rho 0.5 0.9 1.1 --activation tanh --T 1000 --d 64 --out reports/decay
"""


def add_arguments(parser):
    D = DEFAULT
    parser.add_argument("--rho", type=float, nargs="+", default=list(D.rhos), metavar="RHO",
                        help=f"spectral radii of W_hh (default: {' '.join(map(str, D.rhos))})")
    parser.add_argument("--activation", nargs="+", default=list(D.activations), metavar="ACT",
                        help="identity and/or tanh (default: both)")
    parser.add_argument("--weight", nargs="+", default=list(D.weights), metavar="KIND",
                        help="orthogonal and/or gaussian W_hh (default: both)")
    parser.add_argument("--input-scale", type=float, nargs="+", default=list(D.input_scales),
                        metavar="S", help="std of the inputs x_t; large saturates tanh "
                        f"(default: {' '.join(map(str, D.input_scales))})")
    parser.add_argument("--T", "-T", type=int, nargs="+", default=list(D.Ts), metavar="T",
                        help=f"sequence lengths, >= 2 (default: {' '.join(map(str, D.Ts))})")
    parser.add_argument("--d", "-d", type=int, nargs="+", default=list(D.ds), metavar="D",
                        help=f"widths d_h = d_in = d_model (default: {' '.join(map(str, D.ds))})")
    parser.add_argument("--measure", default=D.measure, metavar="M",
                        help="both, probe (O(T d^2)) or exact (O(T d^3)) (default: both)")
    parser.add_argument("--seed", type=int, default=D.seed, help=f"random seed (default: {D.seed})")
    parser.add_argument("--clip-threshold", type=float, default=D.clip_threshold,
                        help=f"gradient-clipping threshold (default: {D.clip_threshold})")
    parser.add_argument("--no-attention", action="store_true", help="RNN rows only")
    parser.add_argument("--out", default="reports/decay", metavar="DIR",
                        help="output directory (default: reports/decay)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _config_from_args(args):
    """Check every argument, naming it as the user typed it."""
    for r in args.rho:
        if not (math.isfinite(r) and r > 0):
            raise UsageError(f"--rho: must be > 0, got {r:g}")
    for a in args.activation:
        if a not in ACTIVATIONS:
            raise UsageError(f"--activation: must be one of {', '.join(ACTIVATIONS)}; got {a!r}")
    for w in args.weight:
        if w not in WEIGHTS:
            raise UsageError(f"--weight: must be one of {', '.join(WEIGHTS)}; got {w!r}")
    for s in args.input_scale:
        if not (math.isfinite(s) and s >= 0):
            raise UsageError(f"--input-scale: must be >= 0, got {s:g}")
    for T in args.T:
        if T < 2:
            raise UsageError(f"--T: must be >= 2 (distances run 1..T-1), got {T}")
    for d in args.d:
        if d < 1:
            raise UsageError(f"--d: must be >= 1, got {d}")
    if args.measure not in MEASURES:
        raise UsageError(f"--measure: must be one of {', '.join(MEASURES)}; got {args.measure!r}")
    if not (math.isfinite(args.clip_threshold) and args.clip_threshold > 0):
        raise UsageError(f"--clip-threshold: must be > 0, got {args.clip_threshold:g}")
    if args.seed < 0:
        raise UsageError(f"--seed: must be an integer >= 0, got {args.seed}")
    config = replace(DEFAULT, rhos=tuple(args.rho), activations=tuple(args.activation),
                     weights=tuple(args.weight), input_scales=tuple(args.input_scale),
                     Ts=tuple(args.T), ds=tuple(args.d), seed=args.seed, measure=args.measure,
                     attention=not args.no_attention, clip_threshold=args.clip_threshold)
    try:                                   # every stage's memory, before any work is done
        check_config_memory(config)
    except MemoryError as e:
        raise UsageError(f"--T/--d: {e}") from None
    return config


def _progress_printer(stream):
    """Progress on stderr: one rewritten line on a terminal, a line every few seconds otherwise."""
    tty = stream.isatty()
    state = {"t0": time.perf_counter(), "last": -1e9}

    def show(i, n, job):
        now = time.perf_counter()
        if not tty and now - state["last"] < 2.0 and i + 1 < n:
            return
        state["last"] = now
        desc = " ".join(f"{k}={v}" for k, v in job.items())
        msg = f"decay: [{i + 1}/{n}] {desc} ({now - state['t0']:.1f} s)"
        print(("\r\033[K" + msg) if tty else msg, end="" if tty else "\n", file=stream, flush=True)

    return show


def run(args):
    config = _config_from_args(args)          # every check first: a bad argument creates nothing
    with output_dir(args.out) as out:
        return _run(args, config, out)


def _run(args, config, out):
    t0 = time.perf_counter()
    progress = None if args.quiet else _progress_printer(sys.stderr)
    frame, summary = decay_sweep(config, progress=progress)
    T_clip = min(config.clip_T, max(config.Ts))
    clip = clipping_experiment(config.rhos, config.clip_threshold, T=max(T_clip, 3),
                               d=min(16, max(config.ds)), seed=config.seed)
    additive = lesson_additive_routes()
    if progress is not None and sys.stderr.isatty():
        print(file=sys.stderr)
    atomic_write_csv(frame, out / "decay.csv")
    atomic_write_csv(summary, out / "decay_summary.csv")
    atomic_write_csv(clip, out / "decay_clipping.csv")
    atomic_write_csv(additive, out / "decay_additive.csv")
    cols = ["model", "weight", "activation", "rho", "input_scale", "T", "d", "fitted_rate",
            "theory_rate", "bound_rate", "bound_respected", "log10_far"]
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\nwrote {len(frame)} rows to {out / 'decay.csv'} and {len(summary)} to "
          f"{out / 'decay_summary.csv'} in {time.perf_counter() - t0:.1f} s")
    return 0
