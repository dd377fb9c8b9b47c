"""The claims of the additive-attention lesson (Bahdanau's alignment model), in its order.
"""

from __future__ import annotations

import numpy as np

from harness.analysis.claims._rules import (HOLDS, QUALIFIED, FAILS, _row, _unmeasured, _claim, ADD,
                                            EXACT, FD_OK, _mean_round)
from harness.models import RECURRENCE as RNN
from harness.report import numbers


@_claim("The hand-set map: rows i and read take 0.74 and 0.81 from leí, row a leaves it 0.05", ADD)
def additive_hand_weights(f):
    """Weights the previous lesson set by hand and this one repeats: nothing computes them."""
    return _unmeasured("the lesson says it set these weights by hand (\"los pesos siguen siendo los "
                       "que puse yo a mano\"); no model or seed produces them")


@_claim("The score needs no bias: a constant added to a whole row does not survive the softmax",
        ADD, "additive_bias")
def additive_no_bias(f):
    """Adding one number to every score of a row changes no weight (to rounding); adding one per
    column does, so the measurement can tell."""
    b = f["additive_bias"]
    row = b[b.added == "per-row constant"].max_abs_change
    col = b[b.added == "per-column constant"].max_abs_change
    if not len(row) or not len(col):
        return _unmeasured("additive_bias.csv lacks the per-row or the per-column constant")
    ok = float(row.max()) < EXACT and float(col.min()) > 1e-6
    return _row(f"over {len(row):,} draws a per-row constant changes no weight by more than "
                f"{row.max():.1e}; a per-column one changes them by {col.min():.2f} to "
                f"{col.max():.2f}" + ("" if ok else ": the row constant does change the weights"),
                row.max(), HOLDS if ok else FAILS)


@_claim("The alignment model has 2·d_a·d_h + d_a weights, whatever T_x and T_y", ADD,
        "additive_widths", "additive_figures")
def additive_param_count(f):
    """The weights counted from the arrays the kernel's gradients fill equal the closed form at
    equal widths (44 in the lesson's example), and do not involve the lengths."""
    w = f["additive_widths"]
    eq = w[w.d_s == w.d_h]
    if not len(eq):
        return _unmeasured("additive_widths.csv has no row with d_s = d_h")
    closed = 2 * eq.d_a * eq.d_h + eq.d_a
    lesson = int(f["additive_figures"].params.iloc[0])
    ok = bool((eq.params == closed).all()) and lesson == 44
    r = eq.iloc[0]
    return _row(f"{lesson} weights in the lesson's example (d_h = 5, d_a = 4; it prints 44); "
                f"{int(r.params)} = 2·{int(r.d_a)}·{int(r.d_h)} + {int(r.d_a)} counted from the "
                f"gradients, the same at every T", lesson, HOLDS if ok else FAILS)


@_claim("The encoder's and the decoder's widths need not match", ADD, "additive_widths")
def additive_widths_differ(f):
    """The alignment and its backward run at d_s != d_h and agree with central differences."""
    w = f["additive_widths"]
    diff = w[w.d_s != w.d_h]
    if not len(diff):
        return _unmeasured("additive_widths.csv has no row with d_s ≠ d_h")
    err = float(diff.fd_rel_err.max())
    pairs = ", ".join(f"{int(r.d_s)}/{int(r.d_h)}" for r in diff.itertuples())
    return _row(f"at decoder/encoder widths {pairs} the backward agrees with central differences "
                f"to {err:.1e} (relative)", err, HOLDS if err < FD_OK else FAILS)


@_claim("Without tanh every step gets the same row of weights", ADD, "additive_figures")
def additive_no_tanh_same_rows(f):
    """Without tanh the rows of alpha differ by rounding only ("iguales hasta el último
    decimal")."""
    spread = float(f["additive_figures"].no_tanh_row_spread.iloc[0])
    return _row(f"in the lesson's example the 8 rows differ by at most {spread:.1e}", spread,
                HOLDS if spread < EXACT else FAILS)


@_claim("Each row of ∂ℓ/∂e sums to zero: raising one weight lowers the others", ADD,
        "score_gradient_rows")
def additive_score_rows_sum_to_zero(f):
    """By central differences in the scores (not the lesson's formula), every row of dl/de sums
    to zero within the differences' error, and the lesson's formula matches them."""
    s = f["score_gradient_rows"]
    rel = float((s.max_abs_row_sum / s.max_abs_entry).max())
    formula = float(s.formula_err.max())
    ok = rel < FD_OK and formula < FD_OK
    return _row(f"over {len(s):,} draws the largest row sum is {rel:.1e} of the largest entry; the "
                f"lesson's α_ij ∇c_i·(h_j − c_i) matches the differences to {formula:.1e}",
                rel, HOLDS if ok else FAILS)


@_claim("The attention routes to h_j skip the encoder's W_hh: their length does not grow as j "
        "moves away", ADD, "encoder_routes")
def additive_routes_skip_whh(f):
    """With a tanh-RNN encoder under the alignment, dl/dx_j's attention route crosses no W_hh and
    its size is flat in T_x - j (fitted slope within 0.3 decades over the sequence), while the
    same gradient sent through the last state alone falls with the distance."""
    r = f["encoder_routes"]
    att = r[r.route == "attention"].sort_values("distance")
    last = r[r.route == "last state"].sort_values("distance")
    if not len(att) or not len(last):
        return _unmeasured("encoder_routes.csv lacks the attention or the last-state route")
    slope = float(np.polyfit(att.distance, att.mean_log10_norm, 1)[0])
    span = int(att.distance.max())
    drift = slope * span
    no_whh = int(att.w_hh_products.max()) == 0
    fall = float(last.mean_log10_norm.iloc[0] - last.mean_log10_norm.iloc[-1])
    ok = no_whh and abs(drift) < 0.3
    return _row(f"encoder of {span + 1} steps, {int(att.draws.iloc[0]):,} draws: the attention route "
                f"crosses {int(att.w_hh_products.max())} W_hh products and moves {drift:+.2f} "
                f"decades from distance 0 to {span}; sent through the last state alone the same "
                f"gradient falls {fall:.1f} decades", drift, HOLDS if ok else FAILS)


@_claim("The untrained map is nearly uniform: the largest weight of a row is about 0.18, "
        "uniform being 0.167", ADD, "additive_figures")
def additive_untrained_uniform(f):
    """The lesson's example's mean row maximum rounds to 0.18 and lies above uniform."""
    r = f["additive_figures"].iloc[0]
    ok = _mean_round(r.mean_row_max, 2) == 0.18 and r.mean_row_max > r.uniform
    return _row(f"mean of the rows' largest weights {r.mean_row_max:.3f}, uniform {r.uniform:.3f}",
                r.mean_row_max, HOLDS if ok else FAILS)


@_claim("The two routes summed match the numerical gradient to about 10^-10; each alone is "
        "wrong in the first digit", ADD, "additive_figures")
def additive_routes_sum(f):
    """Against the lesson's own central differences: both routes within 1e-8, each alone off
    by more than 0.1."""
    r = f["additive_figures"].iloc[0]
    ok = r.fd_err_both < 1e-8 and min(r.fd_err_value, r.fd_err_score) > 0.1
    return _row(f"summed: {r.fd_err_both:.1e}; the value route alone {r.fd_err_value:.2f}, the "
                f"score route alone {r.fd_err_score:.2f}", r.fd_err_both, HOLDS if ok else FAILS)


@_claim("The gradient reaches h_j by two routes: 2.8303 by the value, 0.2556 by the score",
        "additive attention", "additive_routes")
def additive_routes(f):
    """The harness's route norms at the lesson's va scale are the lesson's, to 4 places."""
    routes = f["additive_routes"]
    if not (routes.va_scale == numbers.LESSON_VA_SCALE).any():
        return _unmeasured(f"additive_routes.csv lacks the lesson's va scale "
                           f"{numbers.LESSON_VA_SCALE:g}")
    r = numbers.lesson_routes(routes)
    same = round(r.value_norm, 4) == 2.8303 and round(r.score_norm, 4) == 0.2556
    return _row(f"{r.value_norm:.4f} and {r.score_norm:.4f} through the harness's kernels",
                r.value_norm, HOLDS if same else FAILS)


@_claim("Untrained, the value route is eleven times the score route", ADD, "additive_figures")
def additive_eleven_times(f):
    """value_norm / score_norm rounds to 11."""
    r = f["additive_figures"].iloc[0]
    return _row(f"{r.value_norm:.4f} / {r.score_norm:.4f} = {r.value_over_score:.2f}",
                r.value_over_score, HOLDS if round(r.value_over_score) == 11 else FAILS)


@_claim("With va scaled to 2.0 the weights sharpen and the two norms come closer", ADD,
        "additive_routes")
def additive_va_sharpens(f):
    """At va scale 2.0 against 0.5: a larger mean row maximum and a smaller value/score ratio."""
    r = f["additive_routes"].set_index("va_scale")
    if 0.5 not in r.index or 2.0 not in r.index:
        return _unmeasured("additive_routes.csv lacks va scale 0.5 or 2.0")
    a, b = r.loc[0.5], r.loc[2.0]
    ok = b.row_max > a.row_max and b.value_over_score < a.value_over_score
    return _row(f"va scale 0.5 → 2.0: mean row maximum {a.row_max:.3f} → {b.row_max:.3f}, value/score "
                f"{a.value_over_score:.1f} → {b.value_over_score:.1f}", b.value_over_score,
                HOLDS if ok else FAILS)


@_claim("Scoring costs T_x + T_y projections but T_x·T_y sums, tanh and reads", ADD,
        "additive_cost")
def additive_cost_counts(f):
    """Traced: the projection rows are T_x + T_y, the d_a-wide pair vectors T_x T_y and the
    tanh evaluations T_x T_y d_a, at every size."""
    c = f["additive_cost"]
    a = c[c.score == "additive"]
    if not len(a):
        return _unmeasured("additive_cost.csv has no additive row")
    ok = bool(((a.projection_rows == a.T_x + a.T_y) & (a.pair_vectors == a.T_x * a.T_y)
               & (a.tanh_evaluations == a.T_x * a.T_y * a.d_a)).all())
    r = a.loc[a.T_x.idxmax()]
    return _row(f"traced at {int(r.T_y)} × {int(r.T_x)} (d_a = {int(r.d_a)}): {int(r.projection_rows)} "
                f"projections, {int(r.pair_vectors):,} pair vectors, {int(r.tanh_evaluations):,} "
                f"tanh evaluations", r.pair_vectors, HOLDS if ok else FAILS)


@_claim("None of the grid's operations is a large matrix product, which is what the hardware "
        "does best", ADD, "additive_cost", "additive_timing")
def additive_no_big_product(f):
    """Traced, the additive grid makes no product whose output is the grid (the dot-product one
    makes one); timed, it is slower than a dot-product grid of the same size, outside the
    interval's reach of 1."""
    c = f["additive_cost"]
    add = int(c[c.score == "additive"].grid_matrix_products.max())
    t = f["additive_timing"].iloc[0]
    slower = t.ratio_lo > 1
    verdict = (HOLDS if slower else QUALIFIED) if add == 0 else FAILS
    return _row(f"traced, the additive grid makes {add} matrix products with the grid as output "
                f"(the dot-product grid 1); timed at {int(t.T_y)} × {int(t.T_x)}, d = {int(t.d)}, "
                f"it takes {t.ratio:.1f}× the dot-product grid's time (95 % interval "
                f"{t.ratio_lo:.1f}–{t.ratio_hi:.1f}, {int(t.rounds)} interleaved rounds)",
                t.ratio, verdict, t.ratio_lo, t.ratio_hi)
