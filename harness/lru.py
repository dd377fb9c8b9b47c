"""The public import of ``harness.kernels.lru``: ``from harness import lru`` and ``import harness.lru`` give that module itself."""

import sys

from harness.kernels import lru as _kernels

sys.modules[__name__] = _kernels
