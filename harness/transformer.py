"""The public import of ``harness.kernels.transformer``: ``from harness import transformer`` and ``import harness.transformer`` give that module itself."""

import sys

from harness.kernels import transformer as _kernels

sys.modules[__name__] = _kernels
