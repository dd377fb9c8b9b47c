"""The model families, registered in one place, and the interface a family gives.

A family is one module, ``harness/models/<name>.py``, ending in ``FAMILY = Family(...)``,
and one line in ``NAMES`` below. ``Family`` groups what it gives into typed parts, each
with its contract in its docstring:

* ``Kernels``: its compiled forward and backward, what a loss reads of the output, its
  inputs from a fixed seed;
* ``Form``s (in ``Tracing``): its plain NumPy forwards that ``harness.analysis.depth``
  traces, with their closed-form multiplication counts;
* ``Variant``s: the calls whose wall time and peak memory are measured over T;
* ``GradientPath``: its sweep jobs, the measurement of one job as a frame with the
  columns ``PATH_COLUMNS`` declares, its summary, memory and cost;
* ``Compared`` kernels: what ``harness compare`` times against which peers, on which cases.

The analysers, ``harness compare``, the asv suite and the report loop over ``families()``;
none of them branches on a family's name, and ``tests/test_families.py`` runs one battery
of checks over every registered family. This package imports nothing heavy: a family's
module (and Numba with it) is loaded the first time the family is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

# The registration: one name per family (its module is harness/models/<name>.py),
# in the order the tables list them.
NAMES = (
    "rnn",
    "attention",
    "lru",
    "lstm",
    "gru",
    "transformer",
    "linear_attention",
)

# The lessons' two models, whose claims the report's captions state.
RECURRENCE = "rnn"
ATTENTION = "attention"
# ... and the recurrence that parallelises (a diagonal linear recurrence, by a scan)
PARALLEL_RECURRENCE = "lru"
# ... and the gated recurrences the goodbye-to-recurrence lesson names
GATED_RECURRENCES = ("lstm", "gru")
# ... and linear attention, one model computed as a recurrence, in parallel or in chunks
LINEAR_ATTENTION = "linear_attention"

# The gradient-path frame: one row per (family, configuration, distance), these columns in
# this order. The configuration's columns come first (the summary groups by them; a family
# leaves NaN those it has no notion of: attention has no rho); a family measures
# log10_norm and fills the other measured columns it has (NaN otherwise).
PATH_KEYS = ("model", "weight", "activation", "rho", "input_scale", "T", "d", "seed",
             "gate_bias")   # the gated recurrences' bias on the gate that keeps the state
PATH_COLUMNS = PATH_KEYS + (
    "sigma_max",        # the largest singular value of the step's matrix (NaN: none)
    "distance",         # k: from position T-k to position T
    "log10_norm",       # log10 of the path's norm at k: what every figure and fit reads
    "log10_probe",      # the same by back-propagating a probe loss (the RNN's second measure)
    "log10_spectral",   # the spectral norm of the whole Jacobian, where computed
    "log10_linear",     # the theory line: k log10 rho (the linear RNN's exact value)
    "log10_bound",      # an upper bound: k log10 sigma_max
    "log10_value",      # attention's value route (x_j as a term of alpha.V)
    "log10_score",      # attention's score route (x_j inside alpha)
    "norm_measure",     # which measure log10_norm is: "spectral" or "probe"
    "log10_gated",      # the gated recurrences' additive route alone: prod f (LSTM), prod z (GRU)
    "log10_residual",   # the Transformer layer's residual route: what x_T alone gives y_T (same every k)
    "log10_decay",      # linear attention's decay alone: log10 prod a_r over the k steps (0: no decay)
)
# Family.path.summary's keys, in this order (gradpath.summarise names them as its columns)
PATH_SUMMARY_KEYS = ("fitted_rate", "fitted_rate_probe", "theory_rate", "bound_rate",
                     "bound_respected", "log10_transient")


def _no_grid(T, batch):
    return 0


@dataclass(frozen=True)
class Kernels:
    """A family's compiled forward and backward: what is timed, compared and benchmarked.

    ``forward(X, *weights) -> output``; ``backward(X, weights, output, d_primary) -> grads``,
    a result whose ``dX`` is the input's gradient, from the stored ``output`` and the gradient
    of ``primary(output)``; ``primary(output)``: the (..., T, width) array a loss reads;
    ``inputs(T, d, batch, dtype, seed) -> (X, weights)``: X (T, d) for batch 1, else
    (batch, T, d), drawn from ``default_rng(seed)``, never written by the kernels;
    ``grid_elements(T, batch)``: elements of the largest (B, T, T) array ``forward``
    allocates (0 for a family with none).
    """
    forward: Callable[..., Any]
    backward: Callable[..., Any]
    primary: Callable[[Any], Any]
    inputs: Callable[..., tuple]
    grid_elements: Callable[[int, int], int] = _no_grid


@dataclass(frozen=True)
class Form:
    """One plain NumPy forward that ``harness.analysis.depth`` traces, under the name the
    depth tables use.

    ``forward(X, *weights) -> tuple of outputs``, written with the tracer's operations;
    ``macs(T, d) -> {part: multiplications}``: its closed-form counts, which the traced ones
    must equal; ``trace_memory_bytes(T, d)``: the peak bytes of tracing it, checked before.
    """
    name: str
    forward: Callable[..., tuple]
    macs: Callable[[int, int], Mapping[str, int]]
    trace_memory_bytes: Callable[[int, int], int]


@dataclass(frozen=True)
class Tracing:
    """What the tracer runs: ``forms[0]`` is the family's own forward, named as the family;
    further forms compute the same outputs another way (the LRU's scan beside its loop).

    ``weights(d) -> ((name, shape, axes, part), ...)`` in the forwards' argument order: the
    part a weight's products are counted under; ``lesson_parts``: the parts the lessons'
    work comparison counts (the RNN's recurrence and input; attention's grid and mix).
    """
    weights: Callable[[int], tuple]
    forms: tuple[Form, ...]
    lesson_parts: tuple[str, ...]


@dataclass(frozen=True)
class Variant:
    """One timed call of a family, under the name the wall-time tables use.

    ``inputs(T, d, rng, dtype) -> args`` of ``call``; ``macs(T, d)``: the multiplications the
    call does (linear or quadratic in T: the crossover solves for it); ``bytes(T, d)``: the
    peak bytes of the call and its inputs, checked before timing.
    """
    name: str
    inputs: Callable[..., tuple]
    call: Callable[..., Any]
    macs: Callable[[int, int], int]
    bytes: Callable[[int, int], int]


@dataclass(frozen=True)
class GradientPath:
    """How much of position T-k reaches position T in this family, over k.

    ``jobs(config, T, d) -> [job]``: one mapping per configuration of the sweep at (T, d),
    with at least ``model``, ``T`` and ``d``; ``measure(job, config)``: a frame with the
    columns ``PATH_COLUMNS`` (build it with ``path_frame``), one row per distance 1..T-1;
    ``summary(rows of one configuration, fit_from) -> {PATH_SUMMARY_KEYS: value}``;
    ``memory(T, d, config) -> {stage: peak bytes}``; ``flops(T, d, config)``: the rough
    floating-point work of one job, for the sweep's time estimate; ``options``: the family's
    own knobs (a frozen dataclass, the LRU's radii), which ``config.path_options`` may replace
    (read them with ``path_options(config, name)``, never from a module global).
    """
    jobs: Callable[..., list]
    measure: Callable[..., Any]
    summary: Callable[..., Mapping[str, Any]]
    memory: Callable[..., Mapping[str, int]]
    flops: Callable[..., float]
    options: Any = None


@dataclass(frozen=True)
class Compared:
    """A compiled forward and backward that ``harness compare`` times against its peers.

    ``forward(X, *weights) -> output`` and ``backward(X, weights, output, d_primary)`` as
    ``Kernels``; ``peers(X, weights, d_primary, torch or None, jax=None) -> {impl: (forward,
    backward, outputs, forward+backward)}`` (``outputs() -> (primary output, dX)``, so that a test can
    check every peer computes what the kernel does; ``gemm``: the kernel's own BLAS calls
    alone); ``target(batch, direction, T, d) -> (speed-up needed, GEMM floor or None,
    words)``; ``directions`` it is timed in; ``cases``, ``quick_cases`` and ``long_cases``:
    the (batch, T, d) it is compared at by ``harness compare``, ``--quick`` and ``--long``.
    """
    name: str
    forward: Callable[..., Any]
    backward: Callable[..., Any]
    peers: Callable[..., Mapping[str, tuple]]
    target: Callable[..., tuple]
    directions: tuple[str, ...] = ("forward", "backward")
    cases: tuple[tuple[int, int, int], ...] = ()
    quick_cases: tuple[tuple[int, int, int], ...] = ()
    long_cases: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class Family:
    """One model family: its name, how tables name it (``title``), and its parts.

    ``compared[0]`` is the family's own kernels, named "default"; ``scaling``: the family's
    own strong-scaling check (a tidy frame), or None.
    """
    name: str
    title: str
    kernels: Kernels
    tracing: Tracing
    timed: tuple[Variant, ...]
    path: GradientPath
    compared: tuple[Compared, ...]
    scaling: Callable[[], Any] | None = None

    def kernel(self, name="default", arg="kernel"):
        """The compared kernel called ``name`` ("default": the family's own forward and backward)."""
        for k in self.compared:
            if k.name == name:
                return k
        raise ValueError(f"{arg} of {self.name} must be one of "
                         f"{[k.name for k in self.compared]!r}, got {name!r}.")


def projection_weights(d, d_k=None, d_v=None, out_first=False):
    """``Tracing.weights`` of a model whose queries, keys and values are projections of X: Wq,
    Wk (d, d_k) and Wv (d, d_v), counted under "projections"; with ``out_first`` stored as
    (d_k, d) and (d_v, d), the layout of torch's Linear weights. d_k and d_v default to d."""
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v

    def weight(name, width, axis):
        if out_first:
            return name, (width, d), (axis, "d_model"), "projections"
        return name, (d, width), ("d_model", axis), "projections"
    return weight("Wq", d_k, "d_k"), weight("Wk", d_k, "d_k"), weight("Wv", d_v, "d_v")


def path_options(config, name):
    """The gradient-path knobs of family ``name`` in a ``DecayConfig``: its entry in
    ``config.path_options`` where there is one, else the family's own default."""
    for family, options in config.path_options:
        if family == name:
            return options
    return get(name).path.options


def path_frame(family, k, **columns):
    """The gradient-path frame of one configuration of ``family`` at distances ``k``, with
    ``PATH_COLUMNS`` in order: a column not given is NaN; one not declared is refused."""
    import numpy as np
    import pandas as pd
    extra = set(columns) - set(PATH_COLUMNS)
    if extra:
        raise ValueError(f"the gradient path of {family} has undeclared columns {sorted(extra)}; "
                         f"declare them in harness.models.PATH_COLUMNS")
    data = {c: columns.get(c, np.nan) for c in PATH_COLUMNS}
    data["model"], data["distance"] = family, k
    return pd.DataFrame(data)              # in PATH_COLUMNS order


def check_path_frame(name, frame):
    """Raise ValueError naming the family and the column where a gradient-path frame does not
    have ``PATH_COLUMNS`` in order."""
    got = list(frame.columns)
    for i, want in enumerate(PATH_COLUMNS):
        if i >= len(got) or got[i] != want:
            have = got[i] if i < len(got) else "nothing"
            raise ValueError(f"the gradient path of {name} must have column {want!r} at position "
                             f"{i}, got {have!r} (harness.models.PATH_COLUMNS)")
    if len(got) > len(PATH_COLUMNS):
        raise ValueError(f"the gradient path of {name} has undeclared column {got[len(PATH_COLUMNS)]!r}")
    return frame


def get(name, arg="model"):
    """The registered family called ``name``; a ValueError naming ``arg`` otherwise."""
    if not isinstance(name, str) or name not in NAMES:
        raise ValueError(f"{arg} must be one of {list(NAMES)!r}, got {name!r}.")
    return importlib.import_module(f"{__name__}.{name}").FAMILY


def families():
    """Every registered family, in registration order."""
    return [get(name) for name in NAMES]


def traced_forms(names=NAMES):
    """{form name: (family, Form)}: every traced form of the families ``names``, in
    registration order (each family's own first, under the family's name)."""
    out = {}
    for name in names:
        f = get(name, "models")
        out.update((form.name, (f, form)) for form in f.tracing.forms)
    return out


def form(name, arg="model"):
    """(family, Form) of the traced forward ``name`` (a family's name is its first form)."""
    forms = traced_forms()
    if name not in forms:
        raise ValueError(f"{arg} must be one of {list(forms)!r}, got {name!r}.")
    return forms[name]


def variants():
    """Every timed variant of every family, in registration order: {name: (family, variant)}."""
    return {v.name: (f, v) for f in families() for v in f.timed}
