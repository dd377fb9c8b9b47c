"""harness: recurrence versus attention, measured.

Kernels: ``harness.rnn`` and ``harness.attention`` (Numba, exact gradients).
Analysers: ``harness.gradpath`` (gradient paths), ``harness.depth`` (sequential
depth, work, scheduling). Command line: ``harness --help``.
"""

__version__ = "0.1.0"
