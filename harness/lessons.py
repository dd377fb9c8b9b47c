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

from harness import attention, reference
from harness._validate import check_positive
from harness.config import LessonConfig

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


def row_max_vs_dk(config=DEFAULT):
    """Mean row maximum of softmax(Q K^T) for random Q, K as d_k grows, scaled and unscaled.

    The same random vectors throughout: d_k = 8 uses the first 8 coordinates of
    the d_k = 512 draw. Columns: d_k, scaled, row_max.
    """
    T = len(SENTENCE)
    rng = np.random.default_rng(config.seed)
    d_max = max(config.d_k_values)
    Q_all, K_all = rng.normal(size=(T, d_max)), rng.normal(size=(T, d_max))
    rows = []
    for d_k in config.d_k_values:
        Q, K = Q_all[:, :d_k], K_all[:, :d_k]
        for scaled in (False, True):
            # Q = K-side inputs with identity "projections" would square them, so score directly
            A = reference.softmax_rows(Q @ K.T / (np.sqrt(d_k) if scaled else 1.0))
            rows.append({"d_k": d_k, "scaled": scaled, "row_max": float(A.max(axis=1).mean())})
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
    ``harness.attention.alignment_backward``.
    """
    g = attention.alignment_backward(S, H, Wsa, Wha, va, dC, nonlinearity=nonlinearity)
    nv, ns = float(np.linalg.norm(g.dH_value)), float(np.linalg.norm(g.dH_score))
    return {"value_norm": nv, "score_norm": ns, "value_over_score": nv / ns if ns else math.inf}


def lesson_additive_routes(va_scales=DEFAULT.va_scales):
    """The lesson's route norms (2.8303 and 0.2556 at va scale 0.5), one row per va scale."""
    rows = []
    for s in va_scales:
        check_positive("va_scales", s)
        rows.append({"va_scale": float(s), **additive_routes(*lesson_additive_inputs(s))})
    return pd.DataFrame(rows)
