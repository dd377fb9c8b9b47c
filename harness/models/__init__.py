"""The model families, registered in one place.

A family is one module in this package that builds a ``Family``: its compiled
forward and backward (from its kernel module), its plain NumPy forward (the one
``harness.depth`` traces) and any further traced forms of it (``Form``: the
linear recurrence's parallel scan beside its loop), its closed-form
multiplication counts, its input factory, the variants that are timed, its
gradient path, its memory estimates and its peers for ``harness compare``. The analysers, ``harness compare``, the
asv suite and the report loop over ``FAMILIES``; none of them branches on a
family's name.

Adding a family: write ``harness/models/<name>.py`` ending in
``FAMILY = Family(...)``, and add its name to ``NAMES`` below. This package
imports nothing heavy: a family's module (and Numba with it) is loaded the
first time the family is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

# The registration: one name per family (its module is harness/models/<name>.py),
# in the order the tables list them.
NAMES = (
    "rnn",
    "attention",
    "lru",
)

# The lessons' two models, whose claims the report's captions state.
RECURRENCE = "rnn"
ATTENTION = "attention"
# ... and the recurrence that parallelises (a diagonal linear recurrence, by a scan)
PARALLEL_RECURRENCE = "lru"


@dataclass(frozen=True)
class Variant:
    """One timed call of a family, under the name the wall-time tables use."""
    name: str
    inputs: Callable        # (T, d, rng, dtype) -> args of ``call``
    call: Callable          # (*args) -> output
    macs: Callable          # (T, d) -> multiplications the call does
    bytes: Callable         # (T, d) -> peak bytes of the call and its inputs


@dataclass(frozen=True)
class Form:
    """One plain NumPy forward that ``harness.depth`` traces, under the name the depth tables use.

    A family's own ``reference_forward`` is its first form, named as the family; a
    family may add others (``Family.forms``) that compute the same outputs another way.
    """
    name: str
    forward: Callable               # plain NumPy forward(X, *weights) -> tuple of outputs
    macs: Callable                  # (T, d) -> {part: multiplications} of this forward
    trace_memory_bytes: Callable    # (T, d) -> peak bytes of tracing it


@dataclass(frozen=True)
class Kernel:
    """A compiled forward and backward of a family that ``harness compare`` times.

    A family's own ``forward`` and ``backward`` are its kernel "default"; a
    family may add others (``Family.kernels``: attention's tiled kernel, which never
    stores the T x T weights), each with the peers it is measured against and the
    directions it is timed in: "forward", "backward" (from a stored forward output)
    and "forward+backward" (a training step's two passes together).
    """
    name: str
    forward: Callable               # forward(X, *weights) -> output
    backward: Callable              # backward_from(X, weights, output, d_output) -> grads
    peers: Callable                 # (X, weights, d_output, torch or None) -> {impl: (fwd, bwd, outputs, fwd+bwd)}
    compare_target: Callable        # (batch, direction, T, d) -> (speed-up needed, GEMM floor or None, words)
    directions: tuple = ("forward", "backward")


@dataclass(frozen=True)
class Family:
    name: str
    title: str                      # how captions and tables name it
    forward: Callable               # compiled: forward(X, *weights) -> output
    backward: Callable              # compiled: backward_from(X, weights, output, d_output) -> grads
    primary: Callable               # output -> the (..., T, width) array a loss reads
    reference_forward: Callable     # plain NumPy forward(X, *weights) -> tuple of outputs (traced)
    trace_weights: Callable         # d -> ((name, shape, axes, part), ...) in forward's order
    macs: Callable                  # (T, d) -> {part: multiplications}, the lessons' formulas
    lesson_parts: tuple             # the parts the lessons' comparison counts
    inputs: Callable                # (T, d, batch, dtype, seed) -> (X, weights)
    trace_memory_bytes: Callable    # (T, d) -> peak bytes of tracing the reference forward
    timed: tuple                    # Variants whose wall time ``harness depth`` measures
    decay_jobs: Callable            # (DecayConfig, T, d) -> [job dict], one per configuration
    gradient_path: Callable         # (job dict, DecayConfig) -> tidy frame, one row per distance
    path_summary: Callable          # (rows of one configuration, fit_from) -> {summary column: value}
    path_memory: Callable           # (T, d, DecayConfig) -> {stage: peak bytes}
    peers: Callable                 # (X, weights, d_output, torch or None) -> {impl: (fwd, bwd, outputs)}
    compare_target: Callable        # (batch, direction, T, d) -> (speed-up needed, GEMM floor or None, words)
    grid_elements: Callable = lambda T, batch: 0   # elements of the largest (B, T, T) array it allocates
    forms: tuple = ()               # further traced Forms beside reference_forward (a scan beside a loop)
    scaling: Callable | None = None  # () -> tidy frame: the family's own strong-scaling check, or None
    kernels: tuple = ()             # further Kernels that ``harness compare`` times (by name)

    def kernel(self, name="default", arg="kernel"):
        """The compared Kernel called ``name`` ("default": the family's own forward and backward)."""
        if name == "default":
            return Kernel("default", self.forward, self.backward, self.peers, self.compare_target)
        for k in self.kernels:
            if k.name == name:
                return k
        raise ValueError(f"{arg} of {self.name} must be one of "
                         f"{['default', *(k.name for k in self.kernels)]!r}, got {name!r}.")


def get(name, arg="model"):
    """The registered family called ``name``; a ValueError naming ``arg`` otherwise."""
    if not isinstance(name, str) or name not in NAMES:
        raise ValueError(f"{arg} must be one of {list(NAMES)!r}, got {name!r}.")
    return importlib.import_module(f"{__name__}.{name}").FAMILY


def families():
    """Every registered family, in registration order."""
    return [get(name) for name in NAMES]


def traced_forms(names=NAMES):
    """{form name: (family, Form)}: each family of ``names`` under its own name (its
    ``reference_forward``), then its further ``forms``, in registration order."""
    out = {}
    for name in names:
        f = get(name, "models")
        out[f.name] = (f, Form(f.name, f.reference_forward, f.macs, f.trace_memory_bytes))
        out.update((form.name, (f, form)) for form in f.forms)
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
