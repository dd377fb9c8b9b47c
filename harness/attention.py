"""The public import of ``harness.kernels.attention``: ``from harness import attention`` and ``import harness.attention`` give that module itself."""

import sys

from harness.kernels import attention as _kernels

sys.modules[__name__] = _kernels
