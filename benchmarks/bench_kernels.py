"""The RNN against self-attention, forward and backward, under the same parameters.

As in scipy's ``linalg_solve_toeplitz.py``, the two implementations are one
parameter (``model``) of the same benchmark, so asv draws them on one graph:
time and memory against T, one line per model.
"""

from __future__ import annotations

from . import common
from .common import BATCHES, D_VALUES, DTYPES, MODELS, T_VALUES


class Kernels(common.Benchmark):
    """time_forward / time_backward of the compiled kernels: B sequences of T steps, width d."""
    params = [MODELS, T_VALUES, D_VALUES, BATCHES, DTYPES]
    param_names = ["model", "T", "d", "batch", "dtype"]

    def setup(self, model, T, d, batch, dtype):
        common.skip_unless_fits(model, T, batch)
        common.apply_threads()
        common.warm_up(model, dtype)
        self.X, self.Ws = common.inputs(model, T, d, batch, dtype)
        self.out = common.run_forward(model, self.X, self.Ws)     # touches memory; backward's input

    def time_forward(self, model, T, d, batch, dtype):
        common.run_forward(model, self.X, self.Ws)

    def time_backward(self, model, T, d, batch, dtype):
        common.run_backward(model, self.X, self.Ws, self.out)


class Memory(common.Benchmark):
    """peakmem_ of one forward, and of forward + backward, over T (d = 64, one sequence).

    The RNN's peak grows like T d; attention's like T^2 (A is T x T).
    """
    params = [MODELS, T_VALUES]
    param_names = ["model", "T"]
    d, batch, dtype = 64, 1, "float64"

    def setup(self, model, T):
        common.apply_threads()
        common.warm_up(model, self.dtype)
        self.X, self.Ws = common.inputs(model, T, self.d, self.batch, self.dtype)

    def peakmem_forward(self, model, T):
        common.run_forward(model, self.X, self.Ws)

    def peakmem_forward_backward(self, model, T):
        common.run_backward(model, self.X, self.Ws, common.run_forward(model, self.X, self.Ws))
