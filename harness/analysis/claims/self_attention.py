"""The claims of the self-attention lesson.
"""

from __future__ import annotations

import numpy as np

from harness.analysis.claims._rules import (HOLDS, QUALIFIED, FAILS, _row, _unmeasured, _claim,
                                            SELF, EXACT)
from harness.report import numbers


@_claim("Without projections every row puts its maximum on its own diagonal", "self-attention",
        "attention_diagonal")
def diagonal_without_projections(f):
    """Every row of both unprojected settings has its maximum on the diagonal."""
    s = numbers.unprojected(f["attention_diagonal"])
    every = bool((s.rows_max_on_diagonal == s.rows).all())
    return _row(f"{int(s.rows_max_on_diagonal.sum())} of {int(s.rows.sum())} rows, at token lengths "
                f"1 and 3", s.rows_max_on_diagonal.sum() / s.rows.sum(), HOLDS if every else FAILS)


@_claim("With the projections on, the rows of the layer look at one another", SELF)
def projections_widget(f):
    """The widget's projections ("encendidas, la fila de están se va a buscar llaves")."""
    return _unmeasured("the widget's projection weights are trained and the lesson does not print "
                       "them (\"la fila de están se va a buscar llaves\")")


@_claim("The map is square, T × T, and each row sums to 1", SELF, "self_attention_shapes")
def map_square_rows_one(f):
    s = f["self_attention_shapes"]
    ok = bool(((s.map_rows == s["T"]) & (s.map_cols == s["T"])).all()
              and s.row_sum_err.max() < EXACT)
    return _row(f"at T = {', '.join(str(int(t)) for t in s['T'])}: maps "
                + ", ".join(f"{int(r.map_rows)} × {int(r.map_cols)}" for r in s.itertuples())
                + f", rows summing to 1 within {s.row_sum_err.max():.1e}",
                s.row_sum_err.max(), HOLDS if ok else FAILS)


@_claim("T does not appear in the count of the three matrices: at T = 9 the map is 9 × 9 and "
        "the parameters do not move", SELF, "self_attention_shapes")
def params_without_T(f):
    s = f["self_attention_shapes"]
    ok = s.params.nunique() == 1 and bool((s.output_rows == s["T"]).all())
    return _row("parameters " + ", ".join(f"{int(r.params)} at T = {int(r.T)}" for r in s.itertuples())
                + "; output rows " + ", ".join(str(int(o)) for o in s.output_rows),
                float(s.params.max() - s.params.min()), HOLDS if ok else FAILS)


@_claim("With d_k = d_model / h, the cost of multi-head attention does not depend on h",
        "self-attention", "heads_cost")
def heads_cost_is_flat(f):
    """The traced multiplications of multi-head attention with d_k = d/h are the same for
    every h."""
    h = f["heads_cost"].sort_values("heads")
    flat = h.total.nunique() == 1
    return _row(f"traced at T = {int(h['T'].iloc[0])}, d = {int(h.d.iloc[0])}: "
                + ", ".join(f"h = {int(r.heads)}: {int(r.total):,}" for r in h.itertuples())
                + (" multiplications, the same for every h" if flat else
                   f" multiplications: they change with h (max/min {h.total.max() / h.total.min():.3f})"),
                float(h.total.max() / h.total.min()), HOLDS if flat else FAILS)


@_claim("Without projections the score grid is symmetric; the weights are not", SELF,
        "unprojected_symmetry")
def scores_symmetric_weights_not(f):
    s = f["unprojected_symmetry"]
    ok = s.score_asymmetry.max() < EXACT and s.weight_asymmetry.min() > 1e-6
    return _row(f"over {len(s):,} draws: |E − Eᵀ| at most {s.score_asymmetry.max():.1e}; |A − Aᵀ| "
                f"from {s.weight_asymmetry.min():.3f} to {s.weight_asymmetry.max():.3f}",
                s.weight_asymmetry.min(), HOLDS if ok else FAILS)


@_claim("The longer the vectors, the more each row closes on its diagonal", SELF,
        "attention_diagonal")
def longer_closes_on_diagonal(f):
    s = numbers.unprojected(f["attention_diagonal"])
    w = s.mean_self_weight.to_numpy()
    ok = len(w) >= 2 and bool(np.all(np.diff(w) > 0))
    return _row("mean self-weight " + " → ".join(f"{x:.3f}" for x in w)
                + " as the token length goes 1 → 3", w[-1] - w[0], HOLDS if ok else FAILS)


@_claim("With tokens of unequal length, the longest vector takes the row", SELF, "unequal_lengths")
def longest_takes_the_row(f):
    """Share of the other rows whose largest weight is the longest token's: holds above 90 %,
    qualified above half."""
    u = f["unequal_lengths"]
    share = float(u.rows_max_on_longest.sum() / u.rows.sum())
    own = float(u.rows_max_on_diagonal.sum() / u.rows.sum())
    verdict = HOLDS if share > 0.9 else (QUALIFIED if share > 0.5 else FAILS)
    return _row(f"over {len(u):,} draws (lengths 1 to 3, random directions): the longest token takes "
                f"{100 * share:.0f} % of the other rows; {100 * own:.0f} % keep their maximum on "
                f"their own diagonal", share, verdict)


@_claim("At length 1 a row spreads almost evenly; stretching the same vectors sends the own weight "
        "up", SELF, "attention_diagonal")
def length_one_nearly_even(f):
    """Self-weight at length 1 against uniform 1/T: holds within 1.5/T, qualified within 3/T
    (the diagonal still the largest), and the longer tokens' self-weight above 0.9."""
    s = numbers.unprojected(f["attention_diagonal"])
    T = int(s.rows.iloc[0])
    w1, w3 = float(s.mean_self_weight.iloc[0]), float(s.mean_self_weight.iloc[-1])
    if w3 <= 0.9:
        verdict = FAILS
    else:
        verdict = HOLDS if w1 <= 1.5 / T else (QUALIFIED if w1 <= 3 / T else FAILS)
    return _row(f"self-weight {w1:.3f} at length 1 (uniform {1 / T:.3f}: {w1 * T:.1f}× it), "
                f"{w3:.3f} at length 3", w1 * T, verdict)


@_claim("With two different readings of the matrix, positions start to look at each other", SELF,
        "attention_diagonal")
def projections_look_elsewhere(f):
    s = f["attention_diagonal"]
    proj = s[s.setting.str.startswith("with projections")]
    if not len(proj):
        return _unmeasured("attention_diagonal.csv has no projected setting")
    p = proj.iloc[0]
    ok = p.rows_max_on_diagonal < p.rows
    return _row(f"with projections {int(p.rows_max_on_diagonal)} of {int(p.rows)} rows keep their "
                f"maximum on the diagonal (mean self-weight {p.mean_self_weight:.3f})",
                p.rows_max_on_diagonal / p.rows, HOLDS if ok else FAILS)


@_claim("Unscaled, the largest weight of a row goes from 0.558 at d_k = 8 to 0.983 at 512: "
        "saturated", SELF, "row_max", "row_max_lesson")
def unscaled_saturates(f):
    """Over the draws the unscaled mean row maximum passes 0.95 at the largest d_k, and the
    lesson's single draws fall inside the distribution (2.5th to 97.5th percentile)."""
    r = f["row_max"]
    u = r[~r.scaled.astype(bool)].sort_values("d_k")
    if not len(u):
        return _unmeasured("row_max.csv has no unscaled row")
    p = f["row_max_lesson"]
    pu = p[~p.scaled.astype(bool)].set_index("d_k").percentile
    top = float(u.row_max.iloc[-1])
    inside = bool(((pu > 2.5) & (pu < 97.5)).all())
    verdict = (HOLDS if inside else QUALIFIED) if top > 0.95 else FAILS
    return _row(f"over {int(u.draws.iloc[0]):,} draws the mean goes {u.row_max.iloc[0]:.3f} → {top:.3f} "
                f"(d_k = {int(u.d_k.iloc[0])} → {int(u.d_k.iloc[-1])}); the lesson's draws sit at the "
                + " and ".join(f"{v:.0f}th" for v in pu) + " percentiles", top, verdict)


@_claim("Dividing by √d_k keeps the softmax from saturating; the row maximum still grows, "
        "slowly", "self-attention", "row_max")
def sqrt_dk(f):
    """Scaled by 1/sqrt(d_k) the mean row maximum grows slowly (the lesson) or stays flat?"""
    lo_dk, hi_dk, ends = numbers.row_max_ends(f["row_max"])
    a, b = ends[lo_dk, True], ends[hi_dk, True]
    u0, u1 = ends[lo_dk, False], ends[hi_dk, False]
    grows = b.mean_lo > a.mean_hi + 0.02
    pct = f.get("row_max_lesson")
    where = ""
    if pct is not None and len(pct):
        p = pct.set_index(["d_k", "scaled"]).percentile
        where = (f"; the lesson's single draw (0.330 → 0.486) sits at the "
                 f"{p.loc[(lo_dk, True)]:.0f}th and {p.loc[(hi_dk, True)]:.0f}th percentiles")
    return _row(f"over {int(a.draws):,} draws the unscaled mean row maximum goes from {u0.row_max:.3f} "
                f"to {u1.row_max:.3f} (d_k = {lo_dk} → {hi_dk}); scaled, from {a.row_max:.3f} "
                f"[{a.mean_lo:.3f}, {a.mean_hi:.3f}] to {b.row_max:.3f} [{b.mean_lo:.3f}, "
                f"{b.mean_hi:.3f}]: {'it grows' if grows else 'flat, it does not grow'}{where}",
                b.row_max - a.row_max, QUALIFIED if not grows else HOLDS, b.mean_lo - a.mean_hi,
                b.mean_hi - a.mean_lo)


@_claim("Saturation turns the gradient off, and dividing by √d_k keeps it", SELF, "softmax_jacobian")
def saturation_gradient(f):
    """The softmax's Jacobian (mean log10 of its norm over the draws): unscaled it falls by more
    than a decade from the smallest d_k to the largest; scaled it moves less than 0.05."""
    j = f["softmax_jacobian"]
    u = j[~j.scaled.astype(bool)].sort_values("d_k")
    s = j[j.scaled.astype(bool)].sort_values("d_k")
    if not len(u) or not len(s):
        return _unmeasured("softmax_jacobian.csv lacks the scaled or the unscaled rows")
    fall = float(u.mean_log10_norm.iloc[0] - u.mean_log10_norm.iloc[-1])
    moved = float(abs(s.mean_log10_norm.iloc[-1] - s.mean_log10_norm.iloc[0]))
    ok = fall > 1 and moved < 0.05
    return _row(f"the softmax Jacobian's norm over {int(u.draws.iloc[0]):,} draws, d_k = "
                f"{int(u.d_k.iloc[0])} → {int(u.d_k.iloc[-1])}: unscaled, median "
                f"{u.median_norm.iloc[0]:.3f} → {u.median_norm.iloc[-1]:.3f} ({fall:.2f} decades "
                f"down on average); scaled, {s.median_norm.iloc[0]:.3f} → "
                f"{s.median_norm.iloc[-1]:.3f} ({moved:.3f} decades)", fall,
                HOLDS if ok else FAILS)
