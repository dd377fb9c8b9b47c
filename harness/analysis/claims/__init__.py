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


README_START = "<!-- claims: generated by `make readme-figures` from docs/figures/claims.csv -->"


README_END = "<!-- claims: end -->"


def markdown(table):
    """The claims table as the README shows it: claim (lesson), the lesson's own words, verdict,
    what was measured."""
    lines = [README_START, "", "| claim (lesson) | the lesson's words | verdict | measured |",
             "|---|---|---|---|"]
    for r in table.itertuples():
        words = f"«{r.quote}»" if isinstance(r.quote, str) and r.quote else ""
        lines.append(f"| {r.claim} ({r.lesson}) | {words} | **{r.verdict}** | {r.measured} |")
    return "\n".join(lines + ["", README_END])


def update_readme(readme, table):
    """Replace the README's claims block with ``table``'s; returns the new text."""
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return head + markdown(table) + tail
