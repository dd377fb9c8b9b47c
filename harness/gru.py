"""The public import of ``harness.kernels.gru``: ``from harness import gru`` and ``import harness.gru`` give that module itself."""

import sys

from harness.kernels import gru as _kernels

sys.modules[__name__] = _kernels
