"""The public import of ``harness.kernels.linear_attention``: ``from harness import linear_attention`` and ``import harness.linear_attention`` give that module itself."""

import sys

from harness.kernels import linear_attention as _kernels

sys.modules[__name__] = _kernels
