"""The lessons' claims against the measurements: one row per claim, its verdict computed.

Each function takes the report's frames as they are read back from its CSVs and
returns one row: the claim in the lesson's words (translated), what was
measured, the figure with its interval where it has one, and a verdict, one of
``VERDICTS``, decided by a rule written beside it, never by hand. Where a
measurement disagrees with a lesson, the row says so, with the number.

Each claim declares the frames it reads (``@_claim(text, lesson, *frames)``). A
claim whose frames this run did not produce is still a row, whose verdict is
``NOT_MEASURED`` and which names the missing CSVs; a claim that reads a column or
a row its frames lack raises ``MissingMeasurement``, naming the claim and the key.
The numbers a caption states too come from ``harness.report.numbers``.

The judges live by lesson: ``additive``, ``goodbye``, ``self_attention``, and ``today`` for
the lesson's claims asked of today's models; ``_rules`` holds the verdicts and ``_claim``,
``quotes`` the lessons' words. ``CLAIMS`` puts every judge in the lessons' order.
"""

from __future__ import annotations

import pandas as pd

from harness.analysis.claims._rules import (COLUMNS, FAILS, HOLDS, NOT_MEASURED, QUALIFIED,
                                            VERDICTS, MissingMeasurement, _unmeasured, quote)
from harness.analysis.claims.quotes import QUOTES
from harness.analysis.claims.additive import (additive_hand_weights, additive_no_bias,
                                              additive_param_count, additive_widths_differ,
                                              additive_no_tanh_same_rows,
                                              additive_score_rows_sum_to_zero,
                                              additive_routes_skip_whh, additive_untrained_uniform,
                                              additive_routes_sum, additive_routes,
                                              additive_eleven_times, additive_va_sharpens,
                                              additive_cost_counts, additive_no_big_product)
from harness.analysis.claims.goodbye import (depth_in_sequence, processors_change_nothing,
                                             figure1_three_boxes_mix, input_half_parallel,
                                             attention_constant_stages, vanishing_with_radius,
                                             tanh_makes_it_worse, clipping_stops_explosion_only,
                                             attention_one_factor, counts_cross_at_d,
                                             big_product_finishes_first, kv_shuffle_invariance,
                                             work_at_50, work_at_1000_2000)
from harness.analysis.claims.self_attention import (diagonal_without_projections,
                                                    projections_widget, map_square_rows_one,
                                                    params_without_T, heads_cost_is_flat,
                                                    scores_symmetric_weights_not,
                                                    longer_closes_on_diagonal,
                                                    longest_takes_the_row, length_one_nearly_even,
                                                    projections_look_elsewhere, unscaled_saturates,
                                                    sqrt_dk, saturation_gradient)
from harness.analysis.claims.today import (scan_parallelises, gates_did_not_shorten,
                                           gates_made_it_survivable, layer_quadratic_from_d,
                                           linear_recurrence_or_parallel,
                                           selective_gate_depends_on_input)


# In the order the lessons make them: additive attention, goodbye to recurrence, self-attention
CLAIMS = (additive_hand_weights, additive_no_bias, additive_param_count, additive_widths_differ,
          additive_no_tanh_same_rows, additive_score_rows_sum_to_zero, additive_routes_skip_whh,
          additive_untrained_uniform, additive_routes_sum, additive_routes, additive_eleven_times,
          additive_va_sharpens, additive_cost_counts, additive_no_big_product,
          depth_in_sequence, scan_parallelises, processors_change_nothing,
          figure1_three_boxes_mix, input_half_parallel, attention_constant_stages,
          vanishing_with_radius, tanh_makes_it_worse, clipping_stops_explosion_only,
          gates_did_not_shorten, gates_made_it_survivable, attention_one_factor,
          counts_cross_at_d, layer_quadratic_from_d, big_product_finishes_first,
          kv_shuffle_invariance, work_at_50, work_at_1000_2000,
          diagonal_without_projections, projections_widget, map_square_rows_one, params_without_T,
          heads_cost_is_flat, scores_symmetric_weights_not, longer_closes_on_diagonal,
          longest_takes_the_row, length_one_nearly_even, projections_look_elsewhere,
          unscaled_saturates, sqrt_dk, saturation_gradient,
          linear_recurrence_or_parallel, selective_gate_depends_on_input)


def claims_table(frames):
    """Every claim, one row each (see ``COLUMNS``), in ``CLAIMS`` order: judged where its
    frames are present, else ``NOT_MEASURED`` with the CSVs that are missing. Raises
    ``MissingMeasurement`` naming the claim and the key where a claim reads a column or a row
    that its frames lack: never a row silently left out."""
    rows = []
    for fn in CLAIMS:
        absent = [k for k in fn.frames if k not in frames]
        if absent:
            rows.append({"claim": fn.text, "quote": quote(fn), "lesson": fn.lesson,
                         **_unmeasured("this run has no " + ", ".join(f"{k}.csv" for k in absent))})
            continue
        try:
            rows.append(fn(frames))
        except (KeyError, AttributeError) as e:
            # f["x"], frame["col"], frame.loc[row]: a KeyError; frame.col: an AttributeError
            if isinstance(e, AttributeError) and not isinstance(e.obj, (pd.DataFrame, pd.Series)):
                raise
            key = e.name if isinstance(e, AttributeError) else e.args[0]
            raise MissingMeasurement(f"claim {fn.__name__} ({fn.text!r}): its frames have no "
                                     f"{key!r}") from e
    return pd.DataFrame(rows, columns=COLUMNS)


# The claims' groups, in the lessons' order: a lesson's own claims, then the lessons' questions
# asked of today's models (a lesson column that says "asked of ...")
GROUPS = ("additive attention", "goodbye to recurrence", "self-attention", "today's models")


def group(lesson):
    """The group of a claim's ``lesson`` column: its lesson, "today's models" for a lesson's
    question asked of a model the lessons do not cover, or a lesson no group names as it is."""
    if "asked of" in lesson:
        return GROUPS[3]
    return next((g for g in GROUPS[:3] if lesson.startswith(g)), lesson)


def grouped(table):
    """The claims table by group, ``GROUPS`` first in their order and any other lesson after
    them in the order it comes, each group's rows in the table's order: a list of (group,
    verdict counts as {verdict: n} in ``VERDICTS`` order and then not measured, rows). A
    group with no row is left out."""
    groups = table.lesson.map(group)
    out = []
    for g in [*GROUPS, *(g for g in dict.fromkeys(groups) if g not in GROUPS)]:
        rows = table[groups == g]
        if len(rows):
            counts = {v: int((rows.verdict == v).sum()) for v in (*VERDICTS, NOT_MEASURED)}
            out.append((g, {v: n for v, n in counts.items() if n}, rows))
    return out


def counts_line(counts):
    """'12 hold, 2 hold with a qualification, 1 does not hold' from ``grouped``'s counts."""
    plural = {HOLDS: "hold", QUALIFIED: "hold with a qualification", FAILS: "do not hold",
              NOT_MEASURED: "not measured"}
    return ", ".join(f"{n} {(v if n == 1 else plural[v])}" for v, n in counts.items())


def markdown(table):
    """The claims table as the documentation shows it: a section per group with its verdict
    counts, then its rows (the claim, the lesson's own words, the verdict, what was measured)."""
    lines = []
    for g, counts, rows in grouped(table):
        n = f"{len(rows)} claim{'' if len(rows) == 1 else 's'}"
        lines += [f"## {g[0].upper()}{g[1:]}", "", f"{n}: {counts_line(counts)}.", "",
                  "| claim | the lesson's words | verdict | measured |", "|---|---|---|---|"]
        for r in rows.itertuples():
            words = f"«{r.quote}»" if isinstance(r.quote, str) and r.quote else ""
            claim = r.claim if g != GROUPS[3] else f"{r.claim} ({r.lesson})"
            cells = [c.replace("|", "\\|") for c in (claim, words, f"**{r.verdict}**", r.measured)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
