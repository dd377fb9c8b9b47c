"""The self-attention family: y_i = sum_j alpha_ij v_j, alpha_i = softmax(q_i K^T / sqrt(d_k)).

Kernels in ``harness.kernels.attention``; the plain NumPy forward the tracer runs in
``harness.models.reference``; here, what the analysers need: the lessons' counts (the
T x T grid T^2 d_k, the mix T^2 d_v, the projections T d (2 d_k + d_v)), its
inputs, its timed variants (the materialised kernel, with and without projections,
and the tiled one that never stores the T x T weights), and its gradient path:
dy_T/dx_{T-k} crosses one alpha factor whatever k is, split into the value route
(x_j as a term of alpha.V) and the score route (x_j inside alpha, through k_j).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.kernels import attention
from harness.models import reference, common_peers
from harness.analysis import trace
from harness.kernels.blas import matmul
from harness.infra.stats import fit_rate
from harness.infra.validate import as_float_array, check_int, check_memory, check_real, check_seed
from harness.models import (Compared, Family, Form, GradientPath, Kernels, Tracing, Variant,
                            path_frame, projection_weights)


# ------------------------------------------------------------------ counts and inputs

def macs(T, d, d_k=None, d_v=None):
    """Multiplications per part: projections T d (2 d_k + d_v), grid T^2 d_k, mix T^2 d_v."""
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    return {"projections": T * d * (2 * d_k + d_v), "grid": T * T * d_k, "mix": T * T * d_v}


def trace_weights(d, d_k=None, d_v=None):
    return projection_weights(d, d_k, d_v)


def traced_forward(X, Wq, Wk, Wv):
    return tuple(reference.attention_forward(X, Wq, Wk, Wv))          # (T, d_v), (T, T)


def trace_memory_bytes(T, d, d_k=None, d_v=None):
    """Peak bytes of tracing the forward: X twice, the weights twice, a few (T, width) values
    and five T x T grids, each as the tracer keeps them (``trace.field_bytes``: a row and a
    column term once they are large)."""
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    e, w = trace.BYTES_PER_ELEMENT, max(d, d_k, d_v)
    return (e * (2 * T * w + 2 * d * (2 * d_k + d_v)) + 6 * trace.field_bytes(T, w)
            + 5 * trace.field_bytes(T, T))


TRACING = Tracing(weights=trace_weights,
                  forms=(Form("attention", traced_forward, macs, trace_memory_bytes),),
                  lesson_parts=("grid", "mix"))


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X (T, d) or (B, T, d) ~ N(0, 1); Wq, Wk, Wv ~ N(0, 1/d), which keeps the softmax tame."""
    rng = np.random.default_rng(seed)
    shape = (T, d) if batch == 1 else (batch, T, d)
    X = rng.standard_normal(shape).astype(dtype)                       # (B, T, d)
    s = 1.0 / math.sqrt(d)
    W = tuple((rng.standard_normal((d, d)) * s).astype(dtype) for _ in range(3))  # Wq, Wk, Wv
    return X, W


def backward_from(X, W, out, dY):
    """The backward from forward's (Y, A) or (Y, L): Y is passed too, so that the L path
    needs no forward pass of its own, and both are checked against a few recomputed rows."""
    return attention.backward(X, *W, out[1], dY, Y=out[0])


def tiled_forward(X, Wq=None, Wk=None, Wv=None, scale=True, causal=False):
    """``attention.forward`` without the T x T weights: returns (Y, L)."""
    return attention.forward(X, Wq, Wk, Wv, scale=scale, causal=causal, return_weights=False)


def _grid_inputs(T, d, rng, dtype=np.float64):
    """Q = K = V = X / sqrt(d): the grid and the mix alone, the lessons' comparison."""
    X = rng.standard_normal((T, d)).astype(dtype)
    return (X * (1 / math.sqrt(d)),)


def _projected_inputs(T, d, rng, dtype=np.float64):
    X = rng.standard_normal((T, d)).astype(dtype)
    s = 1 / math.sqrt(d)
    return (X,) + tuple((rng.standard_normal((d, d)) * s).astype(dtype) for _ in range(3))


def _timed_bytes(T, d):
    """The largest timed call, with projections: its T x T buffers and inputs."""
    return 3 * T * T * 8 + 8 * T * d * 8 + 4 * d * d * 8


def _tiled_timed_bytes(T, d):
    """The tiled call: X, Y, L and the tiles; nothing T x T."""
    return 2 * T * d * 8 + T * 8 + attention.tiled_bytes(1, T, d, d, d, 8)


def _grid_macs(T, d):
    return macs(T, d)["grid"] + macs(T, d)["mix"]


TIMED = (
    Variant("attention", _grid_inputs, attention.forward, _grid_macs, _timed_bytes),
    Variant("attention+proj", _projected_inputs, attention.forward,
            lambda T, d: sum(macs(T, d).values()), _timed_bytes),
    Variant("attention (tiled)", _grid_inputs, tiled_forward, _grid_macs, _tiled_timed_bytes),
)


# ------------------------------------------------------------------ gradient path

def path_jacobians(X, Wq, Wk, Wv):
    """dy_T/dx_j for j = 1..T-1 split into routes: (J_value, J_score), each (T-1, d_v, d_model).

    y_T = sum_j alpha_Tj v_j, v_j = x_j Wv, alpha_T = softmax(q_T K^T / sqrt(d_k)).
    Value route (x_j as a term of alpha.V):   alpha_Tj Wv^T.
    Score route (x_j inside alpha, via k_j):  alpha_Tj (v_j - y_T) (Wk q_T)^T / sqrt(d_k).
    Position T itself (distance 0) also has the query route and is left out. Only
    the last row of alpha is computed: O(T d) for the weights, never the T x T grid;
    the Jacobians themselves are O(T d^2) (``attention_paths`` holds a chunk at a time).
    """
    a, V, y, g, Wv = _last_row(X, Wq, Wk, Wv)
    n, d_v, d_model = a.shape[0], V.shape[1], Wv.shape[0]
    check_memory(2 * n * d_v * d_model * 8, f"the attention path Jacobians (T={n + 1}, d_model={d_model})")
    return _route_jacobians(a, V, y, g, Wv, 0, n)


def _last_row(X, Wq, Wk, Wv):
    """What every distance's Jacobian is built from, in float64: (a, V, y, g, Wv).

    a (T-1,) = alpha_Tj for j < T; V (T, d_v); y (d_v,) = y_T; g (d_model,) = de_Tj/dx_j."""
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
    check_memory(_row_bytes(T, d_model, Wq.shape[1], Wv.shape[1]),
                 f"the attention path's last row (T={T}, d_model={d_model})")
    X, Wq, Wk, Wv = (a.astype(np.float64) for a in (X, Wq, Wk, Wv))
    d_k = Wq.shape[1]
    q = X[T - 1] @ Wq                                      # (d_k,): the last query
    e = (X @ Wk) @ q / math.sqrt(d_k)                      # (T,): the last row of the scores
    alpha = np.exp(e - e.max())
    alpha /= alpha.sum()                                   # (T,): the last row of A
    V = X @ Wv                                             # (T, d_v)
    y = alpha @ V                                          # (d_v,)
    g = (Wk @ q) / math.sqrt(d_k)                          # (d_model,): de_Tj/dx_j
    return alpha[:T - 1], V, y, g, Wv


def _route_jacobians(a, V, y, g, Wv, lo, hi):
    """J_value, J_score (hi - lo, d_v, d_model) of x_j for j = lo..hi-1 (0-based)."""
    a = a[lo:hi]
    J_value = a[:, None, None] * Wv.T[None]                # (n, d_v, d_model)
    J_score = (a[:, None] * (V[lo:hi] - y))[:, :, None] * g[None, None, :]
    return J_value, J_score


# Distances whose Jacobians are held at once: memory O(PATH_CHUNK d^2), not O(T d^2),
# so the path runs to T = 20,000 and beyond at d = 32 (2048 x 32 x 32 x 8 B = 16 MiB a route).
PATH_CHUNK = 2048


def _row_bytes(T, d, d_k, d_v):
    """The last row's float64 arrays: X and its copy, X Wk, V, the scores and alpha."""
    return 8 * (2 * T * d + T * d_k + T * d_v + 3 * T)


def _jacobian_bytes(T, d, d_v=None):
    """One chunk of the path Jacobians (value, score, their sum, LAPACK's copy of one), beside
    the last row's arrays."""
    d_v = d if d_v is None else d_v
    return 4 * min(PATH_CHUNK, T - 1) * d_v * d * 8 + _row_bytes(T, d, d, d_v)


def attention_paths(T=256, d=32, input_scale=1.0, seed=0, X=None, Wq=None, Wk=None, Wv=None):
    """||dy_T/dx_{T-k}|| for k = 1..T-1 in single-head self-attention, tidy, one row per k.

    With no weights given: X ~ N(0, input_scale^2) (T, d), Wq, Wk, Wv ~ N(0, 1/d) (d, d).
    Columns as ``rnn_decay`` (model="attention", rho=NaN, activation="softmax",
    weight="gaussian"), with log10_norm the spectral norm of the whole Jacobian and
    log10_value / log10_score its two routes. Every k crosses one alpha factor. Only the
    last row of alpha is computed, and the Jacobians PATH_CHUNK distances at a time:
    memory O(T d + PATH_CHUNK d^2), time O(T d^3) for the spectral norms.

    Each norm is taken in logs, as ln alpha_Tj plus the log of the rest: the value route
    alpha_Tj Wv^T, the score route alpha_Tj (v_j - y_T) g^T (rank one: the product of two
    vector norms) and their sum alpha_Tj (Wv^T + (v_j - y_T) g^T), scaled to a largest
    term of 1 before its SVD. So an alpha_Tj below float64's range (input scale 100) or a
    score route of 1e-600 (input scale 1e-300) is a finite log, not -inf. A route that is
    exactly zero (input scale 0: q_T = 0 and every v_j = y_T, so no score route) has no
    logarithm: NaN. Scores q_T . k_j past float64 are a ValueError naming input_scale.
    """
    check_real("input_scale", input_scale)
    check_seed("seed", seed)
    scaled = f"input_scale={input_scale!r}: use a smaller --input-scale" if X is None else \
        "X: scale X down"
    if X is None:
        check_int("T", T, 2)
        check_int("d", d)
        rng = np.random.default_rng([seed, 2])
        X = rng.normal(size=(T, d)) * input_scale
        Wq, Wk, Wv = (rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(3))
    elif any(w is None for w in (Wq, Wk, Wv)):
        raise ValueError("Wq, Wk and Wv must be given together with X.")
    with np.errstate(over="ignore", invalid="ignore"):      # named below, not warned
        _, V, y, g, Wv = _last_row(X, Wq, Wk, Wv)
        T, d = np.shape(X)
        X64, Wq64, Wk64 = (np.asarray(m, dtype=np.float64) for m in (X, Wq, Wk))
        e = (X64 @ Wk64) @ (X64[T - 1] @ Wq64) / math.sqrt(Wq64.shape[1])   # _last_row's scores
    if not (np.isfinite(e).all() and np.isfinite(V).all() and np.isfinite(g).all()):
        raise ValueError(f"the scores q_T . k_j overflow float64 (they grow like the square of "
                         f"the inputs) at {scaled}.")

    def ln_norm_and_unit(A):                                  # rows of A, scaled: no underflow
        top = np.abs(A).max(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            B = np.where(top > 0, A / top, 0.0)
            n = np.linalg.norm(B, axis=-1, keepdims=True)
            return (np.log(top) + np.log(n))[..., 0], np.where(n > 0, B / n, 0.0)

    ln_a = e - e.max()
    ln_a -= math.log(np.exp(ln_a).sum())                      # ln alpha_T (T,): never -inf
    ln_r, U = ln_norm_and_unit(V[:T - 1] - y)                 # ln ||v_j - y_T||, its direction
    top = int(np.argmax(ln_a))
    if top < T - 1:      # y_T - v_top = sum_i alpha_i (v_i - v_top): no cancellation, no underflow
        rest = np.arange(T) != top
        m = ln_a[rest].max()
        ln_d, u = ln_norm_and_unit((np.exp(ln_a[rest] - m)[:, None] * (V[rest] - V[top])).sum(axis=0))
        ln_r[top], U[top] = m + ln_d, -u
    ln_a = ln_a[:T - 1]
    ln_g, w = ln_norm_and_unit(g)
    n_v = float(np.linalg.svd(Wv, compute_uv=False)[0])
    ln_v = math.log(n_v) if n_v > 0 else -math.inf            # ||Wv^T||
    ln_s = ln_r + ln_g                                        # ||(v_j - y_T) g^T||: rank one
    ln_t = np.empty(T - 1)
    if n_v == 0.0:                                            # Wv = 0: the score route alone
        ln_t[:] = ln_s
    else:
        big = np.maximum(ln_v, ln_s)                          # the larger term, taken out
        Wt = Wv.T / n_v
        for lo in range(0, T - 1, PATH_CHUNK):
            hi = min(lo + PATH_CHUNK, T - 1)
            cv = np.exp(ln_v - big[lo:hi])                    # (n,), each <= 1, one of cv, cs = 1
            cs = np.exp(ln_s[lo:hi] - big[lo:hi])
            M = cv[:, None, None] * Wt[None] + (cs[:, None] * U[lo:hi])[:, :, None] * w[None, None, :]
            ln_t[lo:hi] = big[lo:hi] + np.log(np.linalg.svd(M, compute_uv=False)[:, 0])
    total, value, score = ((ln_a + x) / math.log(10.0) for x in (ln_t, ln_v, ln_s))
    for route in (total, value, score):
        route[np.isneginf(route)] = np.nan                    # exactly zero: no logarithm
    k = np.arange(1, T)
    idx = T - 1 - k                                        # x_{T-k}, 0-based
    return path_frame("attention", k, weight="gaussian", activation="softmax",
                      input_scale=float(input_scale), T=T, d=d, seed=seed,
                      log10_norm=total[idx], log10_spectral=total[idx],
                      log10_value=value[idx], log10_score=score[idx])


def decay_jobs(config, T, d):
    return [dict(model="attention", T=T, d=d, input_scale=s) for s in config.input_scales]


def gradient_path(job, config):
    return attention_paths(T=job["T"], d=job["d"], input_scale=job["input_scale"], seed=config.seed)


def path_summary(g, fit_from):
    """One alpha factor at every k, so no transient to skip: the rate is fitted on every k,
    against the theory rate 0; there is no spectral radius and no bound."""
    return {"fitted_rate": fit_rate(g["log10_norm"].to_numpy() * math.log(10.0), 0.0),
            "fitted_rate_probe": np.nan, "theory_rate": 0.0, "bound_rate": np.nan,
            "bound_respected": np.nan, "log10_transient": np.nan}


def path_memory(T, d, config):
    """Peak bytes of one (T, d) attention path: one chunk of Jacobians and the last row."""
    return {"attention path Jacobians": _jacobian_bytes(T, d)}


def path_flops(T, d, config):
    """Roughly: the last row's products (4 T d^2) and a d x d SVD per distance (~20 d^3)."""
    return 4 * T * d * d + 20 * (T - 1) * d ** 3


PATH = GradientPath(jobs=decay_jobs, measure=gradient_path, summary=path_summary,
                    memory=path_memory, flops=path_flops)


# ------------------------------------------------------------------ peers

def _heads(*qkv):
    """(T, d) -> (1, 1, T, d): batch and head axes. PyTorch's CPU SDPA takes its tiled
    (flash) kernel only for 4-D input; for (1, T, d) it falls back to the math kernel,
    which builds the T x T weights and is 3 to 4 times slower (measured at T = 4096)."""
    return tuple(a[None, None] for a in qkv)


def peers(X, W, dY, torch=None, jax=None):
    """NumPy's matrix products and softmax; the GEMMs alone (the floor); PyTorch's SDPA + autograd;
    JAX's (``jax_forward``), jitted, and its VJP."""
    Wq, Wk, Wv = W
    Y, A = attention.forward(X, Wq, Wk, Wv)
    T, d = X.shape
    impls = {
        "numpy": common_peers.slots(
            lambda: reference.attention_forward(X, Wq, Wk, Wv),
            lambda out: reference.attention_backward(X, Wq, Wk, Wv, out[1], dY), (Y, A)),
    }
    # the floor: the five matrix products of the forward, nothing else
    Q, K, V, Yb = (np.empty((T, d), dtype=X.dtype) for _ in range(4))
    S = np.empty((T, T), dtype=X.dtype)

    def gemm_forward():      # on the BLAS the kernel uses (see harness.kernels.blas)
        matmul(X, Wq, Q)
        matmul(X, Wk, K)
        matmul(X, Wv, V)
        matmul(Q, K.T, S)
        matmul(S, V, Yb)

    impls["gemm"] = (gemm_forward, None, None)
    if torch is not None:
        impls["torch"] = _torch_peer(X, W, dY, torch)
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_forward(jax, x, *w), X, W, dY, jax)
    return impls


def jax_forward(jax, X, Wq, Wk, Wv):
    """softmax(Q K^T / sqrt(d_k)) V with Q, K, V = X Wq, X Wk, X Wv, in JAX: the T x T weights
    whole, as ``reference.attention_forward``. X (..., T, d) -> Y (..., T, d_v)."""
    jnp = jax.numpy
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    E = (Q @ jnp.swapaxes(K, -1, -2)) * (1.0 / math.sqrt(Q.shape[-1]))     # (..., T, T)
    return jax.nn.softmax(E, axis=-1) @ V


def jax_blocked(jax, X, Wq, Wk, Wv, block=256):
    """``reference.attention_forward_blocked`` in JAX: ``lax.map`` over blocks of ``block``
    query rows, each block's (block, T) scores under ``jax.checkpoint``, so that the backward
    recomputes them and no T x T array is kept. (``jax.nn.dot_product_attention`` on the
    CPU is its "xla" implementation, which builds the whole (T, T) logits.) X (T, d)."""
    jnp = jax.numpy
    T = X.shape[0]
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    n = -(-T // block)
    Qb = jnp.pad(Q, ((0, n * block - T), (0, 0))).reshape(n, block, Q.shape[1])   # zero rows: sliced off

    @jax.checkpoint
    def rows(q):                                    # (block, d_k) -> (block, d_v)
        return jax.nn.softmax((q @ K.T) * (1.0 / math.sqrt(Q.shape[1])), axis=-1) @ V
    return jax.lax.map(rows, Qb).reshape(n * block, V.shape[1])[:T]


def _torch_peer(X, W, dY, torch):
    """PyTorch: projections, then SDPA (its tiled kernel), autograd for the backward.
    (forward, backward from a kept graph, outputs, forward+backward)."""
    F = torch.nn.functional
    Wt = [torch.from_numpy(w) for w in W]

    def call(x):                             # x: (1, T, d), as common_peers.autograd gives
        return F.scaled_dot_product_attention(*_heads(*(x[0] @ w for w in Wt)))[0]

    return common_peers.autograd(call, X, dY, X.shape, torch)


def tiled_peers(X, W, dY, torch=None, jax=None):
    """At long T, the peers that keep no T x T array either: NumPy by blocks of 256 query
    rows (``reference.attention_forward_blocked``), PyTorch's SDPA, which is tiled, and JAX
    by the same blocks (``jax_blocked``)."""
    if X.ndim != 2:
        raise ValueError(f"X must be (T, d) for the tiled kernel's peers, got shape {X.shape}: "
                         f"compare one sequence (batch 1).")
    Y, L = reference.attention_forward_blocked(X, *W)

    def n_forward_backward():
        return reference.attention_backward_blocked(X, *W, *reference.attention_forward_blocked(X, *W), dY)

    impls = {"numpy": (lambda: reference.attention_forward_blocked(X, *W),
                       lambda: reference.attention_backward_blocked(X, *W, Y, L, dY),
                       lambda: (reference.attention_forward_blocked(X, *W)[0],
                                reference.attention_backward_blocked(X, *W, Y, L, dY)[0]),
                       n_forward_backward)}
    if torch is not None:
        impls["torch"] = _torch_peer(X, W, dY, torch)
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_blocked(jax, x, *w), X, W, dY, jax)
    return impls


GEMM_FLOOR_CASE = (2048, 256)     # attention (T, d) that must run within 1.3x of its GEMMs
GEMM_FLOOR_RATIO = 1.3


def compare_target(batch, direction, T, d):
    if direction == "forward" and (T, d) == GEMM_FLOOR_CASE:
        return 1.0, GEMM_FLOOR_RATIO, ("at least as fast as the fastest peer, and within "
                                       f"{GEMM_FLOOR_RATIO}x of its matrix products alone")
    return 1.0, None, "at least as fast as the fastest peer"


FAMILY = Family(
    name="attention", title="attention",
    kernels=Kernels(forward=attention.forward, backward=backward_from, primary=lambda out: out[0],
                    inputs=inputs,
                    grid_elements=lambda T, batch: batch * T * T),   # A, (B, T, T): kept for the backward
    tracing=TRACING, timed=TIMED, path=PATH,
    compared=(
        Compared("default", attention.forward, backward_from, peers, compare_target,
                 cases=tuple((1, T, d) for T in (128, 512, 2048) for d in (64, 256)),
                 quick_cases=((1, 16, 8),)),
        Compared("tiled", tiled_forward, backward_from, tiled_peers,
                 lambda batch, direction, T, d: (1.0, None, "at least as fast as the fastest peer"),
                 directions=("forward", "forward+backward"),
                 quick_cases=((1, 37, 8),),
                 # where the question is asked today: T x T would not fit, or barely
                 long_cases=tuple((1, T, d) for T in (4096, 8192, 16384, 32768) for d in (64, 256))),
    ),
)
