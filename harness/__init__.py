"""harness: recurrence versus attention, measured.

Kernels: ``harness.kernels.rnn`` and ``harness.kernels.attention`` (Numba, exact gradients).
Analysers: ``harness.analysis.gradpath`` (gradient paths), ``harness.analysis.depth`` (sequential
depth, work, scheduling). Command line: ``harness --help``.
"""

__version__ = "0.1.0"
