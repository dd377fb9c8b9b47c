"""The numbers that a caption and a claim both state, computed once.

Each function takes a frame as the report reads it back from its CSV. The
captions (``harness.report.captions``) print these numbers and the claims
(``harness.analysis.claims``) judge them, so a caption and the verdict beside it
can never read two different rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness import models
from harness.infra.stats import log_crossing
from harness.models import ATTENTION as ATT
from harness.models import PARALLEL_RECURRENCE as LRU
from harness.models import RECURRENCE as RNN

UNIT_SCALE = 1.0            # the input scale the lessons' sentences are read at (no saturation)
LESSON_VA_SCALE = 0.5       # the additive-attention lesson's va scale, whose route norms it prints


def by_T(frame, model):
    """``model``'s rows of a depth-like frame, smallest T first."""
    return frame[frame.model == model].sort_values("T")


# ------------------------------------------------------------------ work and time

def counted_crossover(w):
    """T where the traced counts cross: log(attention / RNN) interpolated in log T."""
    wide = w.pivot(index="T", columns="model", values="macs").sort_index()
    return log_crossing(wide.index, np.log(wide[ATT] / wide[RNN]))


@dataclass(frozen=True)
class TimedCrossover:
    """Attention's (grid and mix) wall-time crossover with the RNN."""
    row: pd.Series          # attention's row of the crossover frame
    T: float                # where the timings cross: measured if they do, else extrapolated
    measured: bool          # False: T is extrapolated from the fitted power laws


def timed_crossover(x):
    """The crossover frame's attention row, and its T: measured, or extrapolated where the
    measured timings never cross."""
    row = x[x.variant == ATT].iloc[0]
    measured = math.isfinite(float(row.measured_T))
    return TimedCrossover(row, float(row.measured_T if measured else row.extrapolated_T), measured)


def rnn_schedule(s):
    """The RNN's greedy-schedule steps by P with scalar tasks (one multiply or add each)."""
    return s[(s.model == RNN) & (s.grain == "scalar")].sort_values("P").set_index("P").time


# ------------------------------------------------------------------ gradient paths

def attention_rate(summary):
    """Attention's fitted ln-decay per step of distance, at unit-scale inputs."""
    return float(summary[(summary.model == ATT)
                         & (summary.input_scale == UNIT_SCALE)].ln_rate.iloc[0])


@dataclass(frozen=True)
class AttentionLevel:
    """Attention's path level over T and input scale (the ``attention_level`` frame)."""
    base: pd.DataFrame      # the rows at the smallest input scale, smallest T first
    slope: float            # of log10 level against log10 T there: -1 when it falls as 1/T
    saturated: pd.Series    # the row at the largest T and the largest input scale


def attention_level(lv):
    base = lv[lv.input_scale == lv.input_scale.min()].sort_values("T")
    slope = float(np.polyfit(np.log10(base["T"]), base.log10_level, 1)[0])
    saturated = lv[lv["T"] == lv["T"].max()].sort_values("input_scale").iloc[-1]
    return AttentionLevel(base, slope, saturated)


def clipping_radii(c):
    """(the largest ρ's row, the smallest ρ's row) of the clipping frame."""
    c = c.sort_values("rho")
    return c.iloc[-1], c.iloc[0]


# ------------------------------------------------------------------ the linear recurrence

def survival_distances(decay, threshold=-3.0):
    """Per configuration of a decay frame: how far the path survives, the largest distance k
    such that log10_norm stays within ``threshold`` decades of its value at k = 1 at every
    distance up to k (T-1: the whole sequence). One row per configuration: ``PATH_KEYS`` and
    ``distance``."""
    rows = []
    for key, g in decay.groupby(list(models.PATH_KEYS), sort=False, dropna=False):
        g = g.sort_values("distance")
        rel = g.log10_norm.to_numpy() - g.log10_norm.iloc[0]
        below = np.flatnonzero(~(rel >= threshold))             # NaN counts as fallen
        k = int(g.distance.iloc[below[0] - 1]) if len(below) and below[0] > 0 else \
            (0 if len(below) else int(g.distance.iloc[-1]))
        rows.append({**dict(zip(models.PATH_KEYS, key)), "distance": k})
    return pd.DataFrame(rows, columns=[*models.PATH_KEYS, "distance"])


def layer_crossover(work, model="transformer"):
    """(d, T where the layer's T^2 terms equal its other products, {family: layer macs / family
    macs at the largest T}) from the layer-work frame: the quadratic part is q T^2 and the
    rest l T, so they meet at T = l / q (read off each row's counts)."""
    layer = work[work.model == model].sort_values("T")
    last = layer.iloc[-1]
    q = float(last.quadratic) / float(last["T"]) ** 2
    lin = float(last.linear) / float(last["T"])
    T1 = int(last["T"])
    at = work[work["T"] == T1].set_index("model").macs
    return int(last.d), lin / q, {m: float(at[model] / at[m]) for m in at.index if m != model}


def scan_form():
    """The traced form that computes the parallel recurrence by a scan: its family's second
    form (the first is its own step loop, named as the family)."""
    return models.get(LRU).tracing.forms[1].name


# ------------------------------------------------------------------ the attention lessons

def unprojected(diagonal):
    """The rows of the diagonal-share frame without projections (token lengths 1 and 3)."""
    return diagonal.iloc[:2]


def row_max_ends(rm):
    """(smallest d_k, largest d_k, {(d_k, scaled): row}) of the row-maximum frame."""
    lo, hi = int(rm.d_k.min()), int(rm.d_k.max())
    rows = rm.set_index(["d_k", "scaled"])
    return lo, hi, {(dk, sc): rows.loc[(dk, sc)] for dk in (lo, hi) for sc in (False, True)}


def lesson_routes(routes):
    """The additive-attention routes at the lesson's va scale."""
    return routes[routes.va_scale == LESSON_VA_SCALE].iloc[0]


# ------------------------------------------------------------------ linear attention

LINEAR_AGREE = 1e-10        # "equal to rounding": max |Y_a - Y_b| / max |Y| in float64


def linear_forms():
    """The linear attention family's traced forms, in its order: the recurrence (named as the
    family), the masked T x T product, the chunked form."""
    return [f.name for f in models.get(models.LINEAR_ATTENTION).tracing.forms]


def linear_spans(depth, column="span"):
    """(T x form) of a depth-like frame's ``column`` for the linear attention forms, smallest T
    first, the forms in the family's order (a form the frame lacks: a KeyError naming it)."""
    forms = linear_forms()
    d = depth[depth.model.isin(forms)]
    return d.pivot(index="T", columns="model", values=column).sort_index()[forms]


def linear_agreement(methods):
    """The worst row of the method-agreement frame (``linear_attention.method_agreement``):
    the largest max_abs_diff / max_abs_output over T, decay and pair of methods."""
    rel = methods.max_abs_diff / methods.max_abs_output
    return methods.assign(relative=rel).loc[rel.idxmax()]


def linear_spread_at(summary, scale=UNIT_SCALE):
    """The spread summary's rows (``linear_attention.spread_summary``) at the largest distance
    and input scale ``scale``, indexed by decay ("none", "constant", "selective")."""
    s = summary[summary.input_scale == scale]
    return s[s.distance == s.distance.max()].set_index("decay")


LINEAR_ALGORITHMS = ("recurrent", "parallel", "chunked")    # linear_forms(), as the kernel names them
