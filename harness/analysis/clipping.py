"""Clipping the total gradient: it stops explosion, it does not rescue vanishing.

Clipping g = dl/dW_xh to a threshold rescales every distance's contribution by
one factor, so the far/near ratio of the contributions does not move. Measured
here on the RNN family's trajectories, in log space, so exploding cases do not
overflow.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.infra.validate import (check_choice, check_int, check_positive, check_real, check_seed,
                               check_sequence)
from harness.infra.config import ClippingConfig
from harness.models.rnn import (ACTIVATIONS, LN10, PROBE_SEED, WEIGHTS, probe_backward,
                                scaled_derivatives, unit_recurrent_matrix)


DEFAULT = ClippingConfig()


def _wxh_terms(W_hh, S, m, X, ln_upstream, upstream_dir, ln_rho):
    """The per-step W_xh terms of dl/dW_xh for the upstream dl/dh_T = exp(ln_upstream) u, log-scaled.

    term_t = (phi'_t * dl/dh_t) x_t^T = exp(ln_a[t]) D[t] x_t^T, D (T, d_h) = S_t * V_t.
    Returns ln_a (T,), D (T, d_h) and ln_norm (T,) = ln ||term_t||_F.
    """
    V, L = probe_backward(W_hh, upstream_dir, S, m + ln_rho)   # W_hh = exp(ln_rho) x this matrix
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


def check_arguments(rhos, threshold, T, d, weight, activation, input_scale, seed):
    """Check the experiment's arguments, naming the one that is wrong; returns rhos as a tuple."""
    rhos = check_sequence("rhos", rhos, check_positive)
    check_positive("threshold", threshold)
    check_int("T", T, 3)
    check_int("d", d)
    check_choice("weight", weight, WEIGHTS)
    check_choice("activation", activation, ACTIVATIONS)
    check_real("input_scale", input_scale)
    check_seed("seed", seed)
    return rhos


def clipping_experiment(rhos=DEFAULT.rhos, threshold=DEFAULT.threshold, T=DEFAULT.T, d=DEFAULT.d,
                        weight=DEFAULT.weight, activation=DEFAULT.activation,
                        input_scale=DEFAULT.input_scale, seed=DEFAULT.seed):
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
    rhos = check_arguments(rhos, threshold, T, d, weight, activation, input_scale, seed)
    u = np.random.default_rng(PROBE_SEED).normal(size=d)
    u /= np.linalg.norm(u)                                      # dl/dh_T, unit
    near, far = T - 2, 0                                        # k = 1 and k = T-1, 0-based steps
    rows = []
    for rho in rhos:
        W_hh = unit_recurrent_matrix(d, weight, seed)   # rho enters as log(rho) per step: exact
                                                        # for any finite rho, as in the decay
        rng = np.random.default_rng([seed, 1])
        W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
        X = rng.normal(size=(T, d)) * input_scale
        ln_rho = math.log(rho)
        S, m = scaled_derivatives(X, W_xh, W_hh, activation, ln_rho)

        # before: the terms and their sum, g = exp(ln_g_unit) G
        ln_a, D, ln_c = _wxh_terms(W_hh, S, m, X, 0.0, u, ln_rho)
        ln_g_unit = float(np.max(ln_a))
        G = _sum_terms(ln_a, D, X, ln_g_unit)                  # (d_h, d_in)
        ln_g = ln_g_unit + _ln(np.linalg.norm(G))

        # clip the total, then read the factor off the clipped gradient itself
        Gc, ln_clip_unit = clip_by_norm(G, ln_g_unit, threshold)
        ln_clip = ln_clip_unit + _ln(np.linalg.norm(Gc))       # ln ||clip(g)||
        ln_factor = ln_clip - ln_g if math.isfinite(ln_g) else 0.0   # g = 0: nothing to clip

        # after: back-propagate the clipped upstream and split the clipped gradient by step
        ln_a2, D2, ln_c2 = _wxh_terms(W_hh, S, m, X, ln_factor, u, ln_rho)
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
