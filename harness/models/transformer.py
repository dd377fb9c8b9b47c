"""The Transformer layer family: one post-norm encoder layer of "Attention Is All You Need".

    x = LN1(X + MHA(X)),   Y = LN2(x + FF(x)),   FF(x) = relu(x W1^T + b1) W2^T + b2

MHA splits d_model into h heads of d_k = d_model / h (``default_heads``), each with its own
row softmax of Q_h K_h^T / sqrt(d_k), and projects their concatenation with W_o. Kernels in
``harness.kernels.transformer`` (public as ``harness.transformer``); here, what the analysers
need: the plain NumPy layer the tracer runs (``traced_forward``, from the sublayers in
``harness.models.reference``, written with the tracer's operations, one head at a time), its
closed-form counts (projections 3 T d^2, the grid and
the mix T^2 d each whatever h is, the output projection T d^2, the feed-forward 2 T d d_ff,
the norms' gains 2 T d and their squares 2 T d), its inputs at torch's initial scale, its
timed variant, its peers (``torch.nn.TransformerEncoderLayer`` with autograd, and
``reference.transformer_forward``, a NumPy layer with its backward written out) and its gradient path by route: dy_T/dx_(T-k) reaches
position T only through the attention, by the value route (x_j as a term of alpha.V) and
the score route (x_j inside alpha, through k_j), summed over the heads; the residual
carries position T alone, and its norm is given beside them (``log10_residual``).

The weights are passed positionally, as ``Kernels`` requires: the 12 arrays of the torch
layer's ``state_dict`` in ``harness.transformer.ENCODER_KEYS`` order (``params(W)`` turns
them into the dict the kernels take; ``weights(params)`` back).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analysis import trace
from harness.infra.stats import fit_rate
from harness.infra.validate import check_int, check_memory, check_real, check_seed
from harness.kernels import transformer
from harness.models import (Compared, Family, Form, GradientPath, Kernels, Tracing, Variant,
                            common_peers, path_frame, reference)

KEYS = transformer.ENCODER_KEYS        # the positional weights' order: torch's state_dict
HEAD_CHOICES = (8, 4, 2, 1)            # the heads a layer of width d_model gets: the largest ...
MIN_D_K = 2                            # ... that divides d_model and leaves d_k >= 2
FF_RATIO = 4                           # d_ff = 4 d_model, the paper's 2048 for 512
NORM_EPS = transformer.LN_EPS          # torch.nn.LayerNorm's eps, which the kernels use
MAX_HEADS = max(HEAD_CHOICES)
LN10 = math.log(10.0)


def default_heads(d):
    """h for d_model = d: the largest of ``HEAD_CHOICES`` that divides d with d / h >= MIN_D_K
    (1 where none does: d = 1, 3, 5 ...). d = 512 gets the paper's 8 heads of 64."""
    for h in HEAD_CHOICES:
        if d % h == 0 and d // h >= MIN_D_K:
            return h
    return 1


def params(W):
    """The kernels' params dict from the positional weights (``KEYS`` order)."""
    if len(W) != len(KEYS):
        raise ValueError(f"W must hold the {len(KEYS)} arrays {list(KEYS)} in this order, "
                         f"got {len(W)}.")
    return dict(zip(KEYS, W))


def weights(p):
    """The positional weights from a params dict (a torch layer's state_dict, as arrays)."""
    return tuple(p[k] for k in KEYS)


# ------------------------------------------------------------------ kernels

def forward(X, *W):
    """Y (T, d) or (B, T, d): ``encoder_layer`` with ``default_heads(d)`` heads, post-norm, ReLU."""
    return transformer.encoder_layer(X, params(W), default_heads(np.shape(X)[-1]))


@dataclass(frozen=True)
class LayerGrads:
    """The backward's result: dX like X, and the parameters' gradients by state_dict key."""
    dX: np.ndarray
    params: dict


def backward_from(X, W, Y, dY):
    """The gradients given dY; from the forward's tape when X and W are the ones it saw."""
    g = transformer.encoder_layer_backward(X, params(W), default_heads(np.shape(X)[-1]), dY)
    return LayerGrads(g.pop("X"), g)


# ------------------------------------------------------------------ inputs

def _param_shapes(d):
    d_ff = FF_RATIO * d
    return {k: transformer._param_shape(k, d, d_ff) for k in KEYS}


def _bound(key, d):
    """torch's initial scale of each parameter: U(-b, b). in_proj_weight is xavier-uniform
    (b = sqrt(6 / (d + 3 d))); a Linear's weight and bias are kaiming-uniform, b =
    1 / sqrt(fan_in). The biases torch zeroes (the attention's) and the norms (ones and
    zeros) are drawn too, at b = 1 / sqrt(d) and 1 +- 0.1, so that every parameter reaches
    the tests."""
    if key.endswith("in_proj_weight"):
        return math.sqrt(6.0 / (4 * d))
    if key.startswith("linear2"):
        return 1.0 / math.sqrt(FF_RATIO * d)
    if key.startswith("norm"):
        return 0.1
    return 1.0 / math.sqrt(d)


def draw(rng, T, d, batch=1, dtype="float64"):
    """X (T, d) or (B, T, d) ~ N(0, 1) and the 12 weights at torch's initial scale (``_bound``)."""
    shape = (T, d) if batch == 1 else (batch, T, d)
    X = rng.standard_normal(shape).astype(dtype)                       # (B, T, d)
    W = []
    for k, s in _param_shapes(d).items():
        w = rng.uniform(-_bound(k, d), _bound(k, d), size=s)
        if k.startswith("norm") and k.endswith("weight"):
            w += 1.0                                           # a gain: 1 +- 0.1
        W.append(w.astype(dtype))
    return X, tuple(W)


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X and W = the layer's 12 parameters (``KEYS`` order), from ``default_rng(seed)``."""
    return draw(np.random.default_rng(seed), T, d, batch, dtype)


def grid_elements(T, batch):
    """The attention grid the layer computes, B h T^2 (h <= 8): stored below ``TILED_FROM``
    keys, gone through tile by tile from there on. Counted either way: the asv suite skips a
    family's sizes whose grid passes one 4096 x 4096, and a tiled layer's time still grows
    with it (a batch of 32 at T = 4096 takes minutes per call here)."""
    return batch * MAX_HEADS * T * T


def layer_bytes(T, d, batch=1, itemsize=8):
    """Peak bytes of a forward and its inputs: the kernel's tape (its ``_check_memory``:
    12 d + 3 d_ff per row and sublayer), the stored weights below TILED_FROM, X, Y, W."""
    N, d_ff, h = batch * T, FF_RATIO * d, default_heads(d)
    rows = 2 * N * (12 * d + 3 * d_ff)
    grid = batch * h * T * T if T < transformer.TILED_FROM else 0
    params_ = 4 * d * d + 2 * d * d_ff + 9 * d + d_ff
    return itemsize * (rows + grid + 2 * N * d + params_)


# ------------------------------------------------------------------ the plain layer the tracer runs
# (its sublayers in harness.models.reference)

def traced_forward(X, W_in, b_in, W_o, b_o, g1, be1, W1, b1, W2, b2, g2, be2):
    """The post-norm encoder layer in plain NumPy with ``default_heads(d)`` heads: (Y,)."""
    heads, r = default_heads(X.shape[-1]), reference
    x = r.layer_norm(X + r.multi_head_attention(X, None, W_in, b_in, W_o, b_o, heads), g1, be1,
                     NORM_EPS)
    return (r.layer_norm(x + r.feed_forward(x, W1, b1, W2, b2), g2, be2, NORM_EPS),)    # (T, d_model)


def macs(T, d):
    """Multiplications per part: projections 3 T d^2, grid T^2 d and mix T^2 d (whatever the
    heads: h T^2 d_k), out_projection T d^2, feedforward 2 T d d_ff, the norms' gains 2 T d
    ("norm") and their squares (x - mean)^2, 2 T d (the tracer's "mul")."""
    d_ff = FF_RATIO * d
    return {"projections": 3 * T * d * d, "grid": T * T * d, "mix": T * T * d,
            "out_projection": T * d * d, "feedforward": 2 * T * d * d_ff,
            "norm": 2 * T * d, "mul": 2 * T * d}


PARTS = {"self_attn.in_proj_weight": "projections", "self_attn.in_proj_bias": "projections",
         "self_attn.out_proj.weight": "out_projection", "self_attn.out_proj.bias": "out_projection",
         "linear1.weight": "feedforward", "linear1.bias": "feedforward",
         "linear2.weight": "feedforward", "linear2.bias": "feedforward"}
_AXES = {"self_attn.in_proj_weight": ("3 d_model", "d_model"),
         "self_attn.out_proj.weight": ("d_model", "d_model"),
         "linear1.weight": ("d_ff", "d_model"), "linear2.weight": ("d_model", "d_ff"),
         "self_attn.in_proj_bias": ("3 d_model",), "linear1.bias": ("d_ff",)}


def trace_weights(d):
    """The 12 weights in ``KEYS`` order, each counted under its part (the norms' under "norm")."""
    return tuple((k, s, _AXES.get(k, ("d_model",)), PARTS.get(k, "norm"))
                 for k, s in _param_shapes(d).items())


def trace_memory_bytes(T, d):
    """Peak bytes of tracing the layer: ten (T, d) values (X, the heads' pieces and their
    concatenation), the weights, a few (T, d_ff) values and one head's T x T grids at a time
    (scores, scaled, shifted, exp, weights), each as the tracer keeps them
    (``trace.field_bytes``)."""
    e = trace.BYTES_PER_ELEMENT
    return (e * (10 * T * d + 13 * d * d + FF_RATIO * d * d * 2)
            + 12 * trace.field_bytes(T, FF_RATIO * d) + 6 * trace.field_bytes(T, T))


TRACING = Tracing(weights=trace_weights,
                  forms=(Form("transformer", traced_forward, macs, trace_memory_bytes),),
                  lesson_parts=("grid", "mix"))


# ------------------------------------------------------------------ timed

def _timed_inputs(T, d, rng, dtype=np.float64):
    X, W = draw(rng, T, d, 1, dtype)
    return (X,) + W


TIMED = (Variant("transformer", _timed_inputs, forward, lambda T, d: sum(macs(T, d).values()),
                 lambda T, d: layer_bytes(T, d)),)


# ------------------------------------------------------------------ gradient path

@dataclass(frozen=True)
class LastRow:
    """What every distance's Jacobian dy_T/dx_j (j < T) is built from, in float64.

    dy_T/dx_j = sum_h alpha_h,j (C_h + u_h,j g_h^T), with M = dy_T/da_T the layer past the
    attention at row T (a_T = x_T + MHA(X)_T; LN1, the feed-forward and its residual, LN2):
    value route C_h = M W_o[:, h] W_v,h (d, d); score route u_h,j = M W_o[:, h] (v_h,j - o_h)
    and g_h = W_k,h^T q_h / sqrt(d_k). ``ln_alpha`` (h, T): ln of the last row of each
    head's weights, never -inf; ``U`` (T, h, d); ``G`` (h, d); ``C`` (h, d, d); ``M`` (d, d).
    """
    ln_alpha: np.ndarray
    C: np.ndarray
    U: np.ndarray
    G: np.ndarray
    M: np.ndarray


def _norm_jacobian(a, gamma):
    """d LN(a) / da at one row a (d,): diag(gamma) (I - 1 1^T / d - xhat xhat^T / d) / sigma."""
    d = a.shape[0]
    xc = a - a.mean()
    rstd = 1.0 / math.sqrt(float(xc @ xc) / d + NORM_EPS)
    xhat = xc * rstd
    return gamma[:, None] * (np.eye(d) - 1.0 / d - np.outer(xhat, xhat) / d) * rstd


def last_row(X, W):
    """The pieces of ``LastRow`` for X (T, d) and the layer's weights W (``KEYS`` order)."""
    X = np.asarray(X, dtype=np.float64)
    W_in, b_in, W_o, b_o, g1, be1, W1, b1, W2, b2, g2, be2 = (np.asarray(w, dtype=np.float64)
                                                             for w in W)
    T, d = X.shape
    h = default_heads(d)
    d_k = d // h
    P = X @ W_in.T + b_in                                      # (T, 3 d)
    Q, K, V = (P[:, i * d:(i + 1) * d].reshape(T, h, d_k).transpose(1, 0, 2) for i in range(3))
    q = Q[:, T - 1]                                            # (h, d_k): the last queries
    e = np.einsum("htk,hk->ht", K, q) / math.sqrt(d_k)        # (h, T): the last rows of the scores
    ln_alpha = e - e.max(axis=1, keepdims=True)
    ln_alpha -= np.log(np.exp(ln_alpha).sum(axis=1, keepdims=True))
    o = np.einsum("ht,htk->hk", np.exp(ln_alpha), V)          # (h, d_k): each head's y_T
    a = X[T - 1] + o.reshape(d) @ W_o.T + b_o                  # a_T = x_T + MHA(X)_T
    z = (a - a.mean()) / math.sqrt(((a - a.mean()) ** 2).mean() + NORM_EPS) * g1 + be1
    pre = W1 @ z + b1
    f = z + W2 @ np.maximum(pre, 0.0) + b2
    M = _norm_jacobian(f, g2) @ (np.eye(d) + (W2 * (pre > 0)) @ W1) @ _norm_jacobian(a, g1)
    MWo = (M @ W_o).reshape(d, h, d_k).transpose(1, 0, 2)     # (h, d, d_k): M W_o[:, h]
    Wv = W_in[2 * d:].reshape(h, d_k, d)                       # (h, d_k, d)
    Wk = W_in[d:2 * d].reshape(h, d_k, d)
    C = MWo @ Wv                                               # (h, d, d)
    U = np.einsum("hak,htk->tha", MWo, V - o[:, None, :])     # (T, h, d)
    G = np.einsum("hkb,hk->hb", Wk, q) / math.sqrt(d_k)        # (h, d)
    return LastRow(ln_alpha, C, U, G, M)


def path_jacobians(X, W):
    """(J_value, J_score, M): dy_T/dx_j by route for j = 1..T-1 (0-based 0..T-2), each
    (T-1, d, d), and M = dy_T/da_T, the residual's route for position T itself. Unscaled, in
    float64: for small T and tests (``layer_paths`` takes the same in logs, by chunks)."""
    r = last_row(X, W)
    a = np.exp(r.ln_alpha[:, :-1]).T                           # (T-1, h)
    J_value = np.einsum("jh,hab->jab", a, r.C)
    J_score = np.einsum("jh,jha,hb->jab", a, r.U[:-1], r.G)
    return J_value, J_score, r.M


PATH_CHUNK = 1024          # distances whose Jacobians are held at once: O(PATH_CHUNK d^2)


def _log10_norms(blocks, ln_scale):
    """log10 of the spectral norms of blocks (n, d, d) times exp(ln_scale) (n,); NaN where zero."""
    with np.errstate(divide="ignore"):
        out = (ln_scale + np.log(np.linalg.svd(blocks, compute_uv=False)[:, 0])) / LN10
    out[np.isneginf(out)] = np.nan                              # exactly zero: no logarithm
    return out


def layer_paths(T=256, d=32, input_scale=1.0, seed=0, X=None, W=None):
    """||dy_T/dx_(T-k)|| for k = 1..T-1 through one encoder layer, tidy (``PATH_COLUMNS``).

    With no X and W given: X ~ N(0, input_scale^2) (T, d) and the weights of ``inputs``, at
    torch's initial scale. log10_norm is the spectral norm of the whole Jacobian; log10_value
    and log10_score its two routes through the heads; log10_residual the norm of what the
    residual carries to y_T from x_T itself (the same at every k: no other position takes it).
    Each distance's Jacobian is sum_h alpha_h,j (...), taken with the largest alpha_h,j out
    in logs, so that a weight below float64's range is a finite log, not -inf.
    """
    check_real("input_scale", input_scale)
    check_seed("seed", seed)
    if X is None:
        check_int("T", T, 2)
        check_int("d", d)
        X, W = draw(np.random.default_rng([seed, 3]), T, d)
        X = X * input_scale
    elif W is None:
        raise ValueError("W must be given together with X.")
    T, d = np.shape(X)
    if T < 2:
        raise ValueError(f"X must have T >= 2 rows, got T={T}.")
    check_memory(path_memory(T, d, None)["transformer path"],
                 f"the transformer path (T={T}, d={d})")
    with np.errstate(over="ignore", invalid="ignore"):
        r = last_row(X, W)
    if not all(np.isfinite(a).all() for a in (r.ln_alpha, r.C, r.U, r.G, r.M)):
        raise ValueError(f"the layer's last row overflows float64 at input_scale={input_scale!r}: "
                         f"use a smaller --input-scale.")
    total, value, score = (np.empty(T - 1) for _ in range(3))
    for lo in range(0, T - 1, PATH_CHUNK):
        hi = min(lo + PATH_CHUNK, T - 1)
        ln_a = r.ln_alpha[:, lo:hi].T                           # (n, h)
        top = ln_a.max(axis=1)                                  # the largest head's alpha, out
        w = np.exp(ln_a - top[:, None])                         # (n, h), each <= 1
        Jv = np.einsum("jh,hab->jab", w, r.C)
        Js = np.einsum("jh,jha,hb->jab", w, r.U[lo:hi], r.G)
        value[lo:hi], score[lo:hi] = _log10_norms(Jv, top), _log10_norms(Js, top)
        total[lo:hi] = _log10_norms(Jv + Js, top)
    residual = _log10_norms(r.M[None], np.zeros(1))[0]
    k = np.arange(1, T)
    idx = T - 1 - k                                             # x_(T-k), 0-based
    return path_frame("transformer", k, weight="uniform", activation="relu",
                      input_scale=float(input_scale), T=T, d=d, seed=seed,
                      log10_norm=total[idx], log10_spectral=total[idx], log10_value=value[idx],
                      log10_score=score[idx], norm_measure="spectral", log10_residual=residual)


def decay_jobs(config, T, d):
    return [dict(model="transformer", T=T, d=d, input_scale=s) for s in config.input_scales]


def gradient_path(job, config):
    return layer_paths(T=job["T"], d=job["d"], input_scale=job["input_scale"], seed=config.seed)


def path_summary(g, fit_from):
    """As attention's: one alpha factor at every k, so the rate is fitted on every k against
    the theory rate 0; no radius, no bound."""
    return {"fitted_rate": fit_rate(g["log10_norm"].to_numpy() * LN10, 0.0),
            "fitted_rate_probe": np.nan, "theory_rate": 0.0, "bound_rate": np.nan,
            "bound_respected": np.nan, "log10_transient": np.nan}


def path_memory(T, d, config):
    """Peak bytes of one (T, d) path: a chunk of Jacobians (value, score, their sum, LAPACK's
    copy), the score route's vectors U (T h d), the projections and X."""
    h, c = default_heads(d), min(PATH_CHUNK, max(T - 1, 1))
    return {"transformer path": 8 * (4 * c * d * d + T * h * d + 6 * T * d + h * d * d)}


def path_flops(T, d, config):
    """Roughly: the projections (6 T d^2), the routes' sums (4 h T d^2) and an SVD of a d x d
    block per distance and route (3 x ~20 d^3)."""
    return 6 * T * d * d + 4 * default_heads(d) * T * d * d + 60 * (T - 1) * d ** 3


PATH = GradientPath(jobs=decay_jobs, measure=gradient_path, summary=path_summary,
                    memory=path_memory, flops=path_flops)


# ------------------------------------------------------------------ peers

def peers(X, W, dY, torch=None, jax=None):
    """A NumPy layer (``reference.transformer_forward`` / ``transformer_backward``); with
    PyTorch, ``torch.nn.TransformerEncoderLayer`` (dropout 0, batch first) with autograd; with
    JAX, the NumPy layer in ``jax.numpy`` (``jax_forward``), jitted, and its VJP."""
    h = default_heads(X.shape[-1])
    fwd = (lambda: reference.transformer_forward(X, W, h, NORM_EPS))
    impls = {"numpy": common_peers.slots(
        fwd, lambda out: reference.transformer_backward(out[1], dY), fwd())}
    if torch is not None:
        m = torch_layer(W, torch, X.dtype)
        impls["torch"] = common_peers.autograd(m, X, dY, X.shape, torch)
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_forward(jax, x, w), X, W, dY, jax)
    return impls


def jax_forward(jax, X, W):
    """``reference.transformer_forward`` in JAX: the post-norm encoder layer, ReLU, every head
    at once, ``default_heads`` heads, layer norms with ``NORM_EPS``. X (..., T, d) -> Y like X."""
    jnp = jax.numpy
    W_in, b_in, W_o, b_o, g1, be1, W1, b1, W2, b2, g2, be2 = W
    *lead, T, d = X.shape
    h = default_heads(d)
    d_k = d // h

    def norm(a, gamma, beta):
        mu = a.mean(axis=-1, keepdims=True)
        return (a - mu) / jnp.sqrt(((a - mu) ** 2).mean(axis=-1, keepdims=True) + NORM_EPS) * gamma + beta

    P = (X @ W_in.T + b_in).reshape(*lead, T, 3, h, d_k)
    Q, K, V = (jnp.moveaxis(P[..., i, :, :], -2, -3) for i in range(3))    # (..., h, T, d_k)
    A = jax.nn.softmax((Q @ jnp.swapaxes(K, -1, -2)) * (1.0 / math.sqrt(d_k)), axis=-1)
    O = jnp.moveaxis(A @ V, -3, -2).reshape(*lead, T, d)                    # (..., T, d)
    x1 = norm(X + O @ W_o.T + b_o, g1, be1)
    return norm(x1 + jnp.maximum(x1 @ W1.T + b1, 0) @ W2.T + b2, g2, be2)


def torch_layer(W, torch, dtype):
    """``torch.nn.TransformerEncoderLayer`` holding W: d_ff from W, ``default_heads``, post-norm,
    ReLU, dropout 0, batch first, in ``dtype`` (a NumPy dtype)."""
    p = params(W)
    d_ff, d = p["linear1.weight"].shape
    m = torch.nn.TransformerEncoderLayer(d, default_heads(d), dim_feedforward=d_ff, dropout=0.0,
                                         activation="relu", batch_first=True,
                                         dtype=getattr(torch, np.dtype(dtype).name))
    m.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in p.items()})
    return m


def compare_target(batch, direction, T, d):
    return 1.0, None, "at least as fast as the fastest peer"


FAMILY = Family(
    name="transformer", title="Transformer layer",
    kernels=Kernels(forward=forward, backward=backward_from, primary=lambda out: out,
                    inputs=inputs, grid_elements=grid_elements),
    tracing=TRACING, timed=TIMED, path=PATH,
    compared=(Compared("default", forward, backward_from, peers, compare_target,
                       directions=("forward", "backward", "forward+backward"),
                       cases=((1, 512, 256), (1, 2048, 256)),       # 8 heads of 32
                       quick_cases=((1, 16, 8), (3, 16, 8))),),
)
