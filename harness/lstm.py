"""The public import of ``harness.kernels.lstm``: ``from harness import lstm`` and ``import harness.lstm`` give that module itself."""

import sys

from harness.kernels import lstm as _kernels

sys.modules[__name__] = _kernels
