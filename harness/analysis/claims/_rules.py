"""The rules' vocabulary: the verdicts, the row a judge returns, and ``_claim``, which registers a
judge with its claim's text, its lesson and the report frames it reads.
"""

from __future__ import annotations

import functools
import math


from harness.analysis.claims.quotes import QUOTES


HOLDS, QUALIFIED, FAILS = "holds", "holds with a qualification", "does not hold"


VERDICTS = (HOLDS, QUALIFIED, FAILS)


NOT_MEASURED = "not measured"       # the verdict of a claim whose measurement is missing


COLUMNS = ["claim", "quote", "lesson", "measured", "value", "low", "high", "verdict"]


class MissingMeasurement(LookupError):
    """A claim read a measurement (a column, a row) that its frames do not hold."""


def _row(measured, value, verdict, low=math.nan, high=math.nan, **claim):
    """A judged claim's row, less the claim and the lesson that ``_claim`` adds (``claim=``
    replaces the declared text)."""
    return {"measured": measured, "value": float(value), "low": float(low), "high": float(high),
            "verdict": verdict, **claim}


def _unmeasured(why, **claim):
    return _row(f"not measured: {why}", math.nan, NOT_MEASURED, **claim)


def quote(fn):
    """The lesson's own words (Spanish) for a registered claim: ``QUOTES[fn.__name__]``, ''
    where none is written (``QUOTES`` sits after the claims it quotes)."""
    return QUOTES.get(fn.__name__, "")


def _claim(text, lesson, *frames):
    """Register a judge of the claim ``text`` of ``lesson``, which reads the report's ``frames``
    (CSV stems): the registered function returns the whole row (see ``COLUMNS``)."""
    def register(judge):
        @functools.wraps(judge)
        def row(f):
            # a frame read back with its header and no row measured nothing: no judge is asked
            # to rule on it (a max of nothing is NaN, an .iloc[0] of nothing an IndexError)
            empty = [k for k in frames if k in f and not len(f[k])]
            judged = (_unmeasured(", ".join(f"{k}.csv" for k in empty) + " has no rows")
                      if empty else judge(f))
            return {"claim": text, "quote": quote(row), "lesson": lesson, **judged}
        row.text, row.lesson, row.frames = text, lesson, frames
        return row
    return register


# (issue #24) The rows below and the ones above, in the order the three lessons make them:
# additive attention, then goodbye to recurrence, then self-attention (the course's order).
ADD, BYE, SELF = "additive attention", "goodbye to recurrence", "self-attention"


EXACT = 1e-12          # "no number changes": a difference within float64 rounding


FD_OK = 1e-6           # a gradient agrees with central differences to this relative error


def _mean_round(x, places):
    return round(float(x), places)
