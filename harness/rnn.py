"""The public import of ``harness.kernels.rnn``: ``from harness import rnn`` and ``import harness.rnn`` give that module itself."""

import sys

from harness.kernels import rnn as _kernels

sys.modules[__name__] = _kernels
