"""The attention experiments of the lessons, run on the harness kernels.

* Self-attention lesson: without projections every row puts its maximum on its
  own diagonal (for equal-norm tokens), more sharply as the tokens get longer;
  with projections positions look at each other; unscaled row maxima saturate
  as d_k grows while scaled ones grow slowly.
* Additive-attention lesson: an untrained alignment is nearly uniform; without
  tanh every row is the same; the gradient reaches an encoder state by two
  routes, the value route and the score route (``lesson_additive_routes``).

Each function returns a tidy DataFrame, one row per observation.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.kernels import attention
from harness.models import reference
from harness.infra.validate import check_positive
from harness.infra.config import LessonConfig

# The six tokens of the self-attention lesson's grid.
SENTENCE = ("las", "llaves", "del", "coche", "están", "ahí")


DEFAULT = LessonConfig()


def _tokens(config):
    rng = np.random.default_rng(config.seed)
    X = rng.normal(size=(len(SENTENCE), config.d_model))
    return X / np.linalg.norm(X, axis=1, keepdims=True)   # equal norms: the lesson's assumption


def self_attention_maps(config=DEFAULT):
    """Attention maps of the lesson's sentence: no projections at each token length, then projected.

    Columns: setting, length, query, key, i, j, weight.
    """
    X = _tokens(config)
    rng = np.random.default_rng(config.seed + 1)
    d = config.d_model
    Wq, Wk, Wv = (rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(3))
    runs = [(f"no projections, length {r:g}", r, None) for r in config.token_lengths]
    runs.append((f"with projections, length {config.token_lengths[0]:g}",
                 config.token_lengths[0], (Wq, Wk, Wv)))
    rows = []
    for setting, r, W in runs:
        # no projections is the bare dot product x_i . x_j, as the lesson writes it
        _, A = attention.forward(r * X, *(W or (None, None, None)), scale=W is not None)
        for i, q in enumerate(SENTENCE):
            for j, k in enumerate(SENTENCE):
                rows.append({"setting": setting, "length": r, "query": q, "key": k,
                             "i": i, "j": j, "weight": float(A[i, j])})
    return pd.DataFrame(rows)


def diagonal_share(maps):
    """Per setting: how many rows put their maximum on the diagonal, and the mean self-weight."""
    out = []
    for setting, g in maps.groupby("setting", sort=False):
        A = g.pivot(index="i", columns="j", values="weight").to_numpy()
        out.append({"setting": setting, "rows": A.shape[0],
                    "rows_max_on_diagonal": int((A.argmax(axis=1) == np.arange(A.shape[0])).sum()),
                    "mean_self_weight": float(np.diag(A).mean())})
    return pd.DataFrame(out)


# The self-attention lesson's printed single draw: the mean row maximum at d_k = 8 and 512
LESSON_ROW_MAX = {(8, False): 0.558, (512, False): 0.983, (8, True): 0.330, (512, True): 0.486}


def row_max_draws(config=DEFAULT):
    """The d_k experiment over ``config.draws`` independent draws: (d_k values, array).

    Each draw is a Q and a K of T = 6 rows with N(0, 1) entries, 512 wide; d_k takes
    their first d_k coordinates (the same vectors at every d_k, as in the lesson).
    Returns the array (draws, len(d_k_values), 2) of the mean row maximum of
    softmax(Q K^T) unscaled ([..., 0]) and divided by sqrt(d_k) ([..., 1]).
    """
    T = len(SENTENCE)
    rng = np.random.default_rng(config.seed)
    d_max = max(config.d_k_values)
    Q = rng.normal(size=(config.draws, T, d_max))
    K = rng.normal(size=(config.draws, T, d_max))
    out = np.empty((config.draws, len(config.d_k_values), 2))
    for j, d_k in enumerate(config.d_k_values):
        E = np.einsum("nik,njk->nij", Q[..., :d_k], K[..., :d_k])          # (draws, T, T)
        for s, div in enumerate((1.0, math.sqrt(d_k))):
            out[:, j, s] = reference.softmax_rows(E / div).max(axis=-1).mean(axis=-1)
    return out


def row_max_vs_dk(config=DEFAULT):
    """Mean row maximum of softmax(Q K^T) for random Q, K as d_k grows, scaled and unscaled,
    as a distribution over ``config.draws`` draws, never one draw.

    Columns: d_k, scaled, row_max (the mean over draws), mean_lo / mean_hi (its 95 %
    interval, mean +- 1.96 standard errors), band_lo / band_hi (2.5th and 97.5th
    percentiles of single draws: where one draw, like the lesson's, falls), draws.
    """
    x = row_max_draws(config)
    rows = []
    for j, d_k in enumerate(config.d_k_values):
        for s, scaled in enumerate((False, True)):
            v = x[:, j, s]
            half = 1.96 * v.std(ddof=1) / math.sqrt(v.size)
            lo, hi = np.quantile(v, [0.025, 0.975])
            rows.append({"d_k": d_k, "scaled": scaled, "row_max": float(v.mean()),
                         "mean_lo": float(v.mean() - half), "mean_hi": float(v.mean() + half),
                         "band_lo": float(lo), "band_hi": float(hi), "draws": int(v.size)})
    return pd.DataFrame(rows)


def lesson_draw_percentiles(config=DEFAULT):
    """Where the lesson's single-draw figures fall on the distribution of draws.

    Columns: d_k, scaled, lesson_row_max, percentile (share of draws below it, in %),
    mean_row_max (over the draws)."""
    x = row_max_draws(config)
    rows = []
    for (d_k, scaled), value in LESSON_ROW_MAX.items():
        if d_k not in config.d_k_values:
            continue
        v = x[:, list(config.d_k_values).index(d_k), int(scaled)]
        rows.append({"d_k": d_k, "scaled": scaled, "lesson_row_max": value,
                     "percentile": float(100.0 * (v < value).mean()),
                     "mean_row_max": float(v.mean())})
    return pd.DataFrame(rows)


def additive_maps():
    """The additive-attention lesson's untrained alignment (its own draws), with and without tanh.

    Columns: setting, i, j, weight, uniform.
    """
    S, H, Wsa, Wha, va, _ = lesson_additive_inputs()
    rows = []
    for setting, nl in (("tanh", "tanh"), ("no tanh", None)):
        alpha = attention.alignment(S, H, Wsa, Wha, va, nonlinearity=nl)
        for i in range(alpha.shape[0]):
            for j in range(alpha.shape[1]):
                rows.append({"setting": setting, "i": i, "j": j, "weight": float(alpha[i, j]),
                             "uniform": 1.0 / alpha.shape[1]})
    return pd.DataFrame(rows)


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
    ``harness.kernels.attention.alignment_backward``.
    """
    g = attention.alignment_backward(S, H, Wsa, Wha, va, dC, nonlinearity=nonlinearity)
    nv, ns = float(np.linalg.norm(g.dH_value)), float(np.linalg.norm(g.dH_score))
    return {"value_norm": nv, "score_norm": ns, "value_over_score": nv / ns if ns else math.inf}


def lesson_additive_routes(va_scales=DEFAULT.va_scales):
    """The lesson's route norms (2.8303 and 0.2556 at va scale 0.5), one row per va scale,
    with the mean of the rows' largest weights (``row_max``): "cambia la escala de va a 2.0:
    los pesos se afilan y las dos normas se acercan"."""
    rows = []
    for s in va_scales:
        check_positive("va_scales", s)
        S, H, Wsa, Wha, va, G = lesson_additive_inputs(s)
        rows.append({"va_scale": float(s), **additive_routes(S, H, Wsa, Wha, va, G),
                     "row_max": float(attention.alignment(S, H, Wsa, Wha, va).max(axis=1).mean())})
    return pd.DataFrame(rows)


def _lesson_loss(S, Wsa, Wha, va, G):
    """The lesson's own NumPy loss l(H) = sum_i G_i . c_i (its ``perdida``), not the kernels."""
    def perdida(H):
        P = (S @ Wsa.T)[:, None, :] + (H @ Wha.T)[None, :, :]
        E = np.tanh(P) @ va
        Z = np.exp(E - E.max(axis=1, keepdims=True))
        return float((G * ((Z / Z.sum(axis=1, keepdims=True)) @ H)).sum())
    return perdida


def lesson_additive_figures(step=1e-6):
    """The figures the additive-attention lesson's two cells print (its fixed seeds), one row.

    Columns: params ("pesos: 44"), mean_row_max and uniform ("ronda 0.18 cuando el reparto
    uniforme sería 0.167"), no_tanh_row_spread (largest difference between rows without tanh:
    "todas las filas iguales"), value_norm, score_norm, value_over_score ("once veces mayor"),
    fd_err_both, fd_err_value, fd_err_score (largest error against the lesson's central
    differences of the two routes summed, and of each alone: "hasta el orden de 10^-10, y por
    separado cada una se equivoca en la primera cifra").
    """
    S, H, Wsa, Wha, va, G = lesson_additive_inputs(0.5)
    alpha = attention.alignment(S, H, Wsa, Wha, va)
    lineal = attention.alignment(S, H, Wsa, Wha, va, nonlinearity=None)
    g = attention.alignment_backward(S, H, Wsa, Wha, va, G)
    perdida = _lesson_loss(S, Wsa, Wha, va, G)
    num = np.zeros_like(H)
    for j, k in np.ndindex(H.shape):
        Hp, Hm = H.copy(), H.copy()
        Hp[j, k] += step
        Hm[j, k] -= step
        num[j, k] = (perdida(Hp) - perdida(Hm)) / (2 * step)
    nv, ns = float(np.linalg.norm(g.dH_value)), float(np.linalg.norm(g.dH_score))
    return pd.DataFrame([{
        "params": int(Wsa.size + Wha.size + va.size),
        "mean_row_max": float(alpha.max(axis=1).mean()), "uniform": 1.0 / alpha.shape[1],
        "no_tanh_row_spread": float(np.ptp(lineal, axis=0).max()),
        "value_norm": nv, "score_norm": ns, "value_over_score": nv / ns,
        "fd_err_both": float(np.abs(g.dH_value + g.dH_score - num).max()),
        "fd_err_value": float(np.abs(g.dH_value - num).max()),
        "fd_err_score": float(np.abs(g.dH_score - num).max())}])
