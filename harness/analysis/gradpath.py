"""Gradient-path analyser: how much of position T-k reaches position T, per model family.

What position T-k contributes to position T crosses k Jacobians in an RNN and a
single attention weight in self-attention, whatever k is. Each registered family
(``harness.models``) measures its own path on real forward trajectories; this
module runs the grid of ``DecayConfig`` over every family and summarises it:

* ``decay_sweep``: one row per (family, configuration, distance) and one summary
  row per configuration, tidy DataFrames;
* ``summarise``: the fitted rate per step (ln) beside each family's theory;
* ``stage_memory_bytes`` / ``check_config_memory``: every stage's memory, checked
  before any work.

Natural logs are used inside; the frames report log10 (``log10_norm``) and
rates per step in natural log (``ln_rate`` against ``log(rho)``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness import models
from harness.infra.validate import (available_memory_bytes, check_choice, check_int, check_positive,
                               check_real, check_seed, check_sequence)
from harness.infra.config import ACTIVATIONS, MEASURES, WEIGHTS, DecayConfig


DEFAULT = DecayConfig()      # every default lives in harness.infra.config

# summary columns, in order: the configuration, then what is fitted and its theory
KEYS = list(models.PATH_KEYS)
SUMMARY = KEYS + ["ln_rate", "sigma_max", "ln_rate_probe", "ln_rate_theory", "ln_rate_bound",
                  "bound_respected", "log10_transient", "log10_near", "log10_far"]
# GradientPath.summary's keys -> the summary's columns, whose names say their log (ln per step)
RENAME = {"fitted_rate": "ln_rate", "fitted_rate_probe": "ln_rate_probe",
          "theory_rate": "ln_rate_theory", "bound_rate": "ln_rate_bound"}


def summarise(frame, fit_from=DEFAULT.fit_from):
    """One row per configuration: its family's fitted rate per step (ln) beside the theory.

    ``ln_rate``: slope of ln ||.|| against k (on k >= fit_from*(T-1) where the
    family has transients); ``ln_rate_theory``, ``ln_rate_bound``, ``bound_respected`` and
    ``log10_transient`` as the family defines them (``GradientPath.summary``);
    ``log10_near`` / ``log10_far``: the norm at k = 1 and k = T-1.
    """
    rows = []
    for key, g in frame.groupby(KEYS, sort=False, dropna=False):
        g = g.sort_values("distance")
        row = dict(zip(KEYS, key))
        row["sigma_max"] = float(g["sigma_max"].iloc[0])
        row.update({RENAME.get(k, k): v
                    for k, v in models.get(row["model"]).path.summary(g, fit_from).items()})
        row["log10_near"] = float(g["log10_norm"].iloc[0])
        row["log10_far"] = float(g["log10_norm"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY)


def sweep_configurations(config=DEFAULT):
    """The list of job dicts that ``decay_sweep`` runs, family by family at each (T, d)."""
    return [job for T in config.Ts for d in config.ds for name in config.models
            for job in models.get(name, "models").path.jobs(config, T, d)]


def decay_sweep(config=DEFAULT, progress=None):
    """Run the grid of ``config``: returns (frame, summary), tidy DataFrames.

    ``frame``: one row per (model, configuration, distance); ``summary``: one row
    per configuration (see ``summarise``). ``progress(i, n, job)`` is called
    before each configuration when given.
    """
    validate_config(config)
    return run_sweep(config, progress)


def measure(job, config):
    """One job's gradient-path frame, checked against the declared ``PATH_COLUMNS``."""
    name = job["model"]
    return models.check_path_frame(name, models.get(name).path.measure(job, config))


def run_sweep(config, progress=None):
    """``decay_sweep`` for a config that ``validate_config`` has already passed."""
    jobs = sweep_configurations(config)
    parts = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress(i, len(jobs), job)
        parts.append(measure(job, config))
    frame = pd.concat(parts, ignore_index=True)
    return frame, summarise(frame, config.fit_from)


FLOPS_PER_SECOND = 5e9          # a modest one-core rate: expected_seconds is a warning, not a promise


def expected_seconds(config):
    """Rough seconds of the sweep: every job's ``GradientPath.flops`` at FLOPS_PER_SECOND."""
    return sum(models.get(job["model"]).path.flops(job["T"], job["d"], config)
               for job in sweep_configurations(config)) / FLOPS_PER_SECOND


def stage_memory_bytes(T, d, config=DEFAULT):
    """Peak bytes of each stage of one (T, d) configuration of the sweep, as {stage: bytes}.

    The stages run one after another, so the sweep needs the largest of them.
    """
    stages = {}
    for name in config.models:
        stages.update(models.get(name, "models").path.memory(T, d, config))
    return stages


def check_config_memory(config, available=None):
    """Raise MemoryError naming T, d and the stage if any stage of the sweep cannot fit.

    Done before any work, so a sweep that would fail at its last stage fails at once.
    """
    avail = available_memory_bytes() if available is None else available
    for T in config.Ts:
        for d in config.ds:
            stage, need = max(stage_memory_bytes(T, d, config).items(), key=lambda kv: kv[1])
            if need > avail:
                raise MemoryError(
                    f"T={T}, d={d}: stage {stage!r} needs {need:,} bytes ({need / 2**30:.2f} GiB) but "
                    f"only {avail / 2**30:.2f} GiB are available; use a smaller T or d")


def validate_config(config):
    """Raise ValueError (TypeError for a wrong type) naming the field the sweep cannot run."""
    check_sequence("rhos", config.rhos, check_positive)
    check_sequence("activations", config.activations, lambda n, a: check_choice(n, a, ACTIVATIONS))
    check_sequence("weights", config.weights, lambda n, w: check_choice(n, w, WEIGHTS))
    check_sequence("input_scales", config.input_scales, check_real)
    check_sequence("Ts", config.Ts, lambda n, T: check_int(n, T, 2))
    check_sequence("ds", config.ds, check_int)
    check_sequence("models", config.models, lambda n, m: models.get(m, n))
    check_seed("seed", config.seed)
    check_choice("measure", config.measure, MEASURES)
    check_int("exact_max_d", config.exact_max_d, 0)
    if not 0.0 <= config.fit_from < 1.0:
        raise ValueError(f"fit_from must be in [0, 1), got {config.fit_from!r}.")
    check_config_memory(config)


def path_levels(model, Ts, input_scales, d, config=DEFAULT):
    """A family's gradient path over lengths and input scales, one row per (T, input scale):
    ``log10_level`` the mean over k of log10 ||.||, ``log10_min`` / ``log10_max`` its extremes
    over k (a spread of many decades is a saturated softmax or a vanishing chain), and the
    mean log10 of each route where the family splits its path (``log10_value``, ``log10_score``).
    """
    fam = models.get(model, "model")
    rows = []
    for T in Ts:
        for s in input_scales:
            # the family's first sweep job at this (T, d), at input scale s where it has one
            # (an LRU's path does not depend on its input: its rows repeat across scales)
            job = fam.path.jobs(config, T, d)[0]
            if "input_scale" in job:
                job = {**job, "input_scale": s}
            g = measure(job, config)
            g = g[np.isfinite(g.log10_norm)]
            rows.append({"model": model, "T": T, "d": d, "input_scale": float(s),
                         "log10_level": float(g.log10_norm.mean()),
                         "log10_min": float(g.log10_norm.min()),
                         "log10_max": float(g.log10_norm.max()),
                         "log10_value": float(g.log10_value.mean()),    # NaN where the
                         "log10_score": float(g.log10_score.mean())})   # family has no routes
    return pd.DataFrame(rows)
