"""The RNN against self-attention, forward and backward, under the same parameters.

As in scipy's ``linalg_solve_toeplitz.py``, the two implementations are one
parameter (``model``) of the same benchmark, so asv draws them on one graph:
time and memory against T, one line per model. Attention's two variants (the
materialised T x T weights, and the tiled kernel that keeps one log-sum-exp per
row) are likewise one parameter of its long-T memory and throughput benchmarks.
"""

from __future__ import annotations

import numpy as np

from . import common
from .common import BATCHES, D_VALUES, DTYPES, MODELS, SIZES, T_VALUES


@common.suite("default")
class Kernels(common.Benchmark):
    """time_forward / time_backward of every family's compiled kernels at the two sizes of
    ``common.SIZES`` (small: T = 64, d = 64, a batch of 32, float64; large: T = 1024,
    d = 256, one sequence, float32). ``tools/bench_gate.py`` times these between two commits."""
    params = [MODELS, list(SIZES)]
    param_names = ["model", "size"]
    repeat = (3, 7, 1.0)            # at least 3 samples a round: a median, not one draw

    def setup(self, model, size):
        # asv runs setup again before every sample, on the same instance; the inputs never
        # change, so a second call keeps the first's (it cost a forward and a backward a sample)
        if getattr(self, "prepared", None) == (model, size):
            return
        T, d, batch, dtype = SIZES[size]
        common.skip_unless_fits(model, T, batch)
        common.apply_threads()
        self.X, self.Ws = common.inputs(model, T, d, batch, dtype)
        # one forward and backward at the timed size compile exactly the paths timed (a
        # kernel may choose its path by size) and touch the memory; out is backward's input
        self.out = common.run_forward(model, self.X, self.Ws)
        common.run_backward(model, self.X, self.Ws, self.out)
        self.prepared = (model, size)

    def time_forward(self, model, size):
        common.run_forward(model, self.X, self.Ws)

    def time_backward(self, model, size):
        common.run_backward(model, self.X, self.Ws, self.out)


@common.suite("long")
class KernelsSweep(common.Benchmark):
    """time_forward / time_backward of the compiled kernels over every parameter: B sequences
    of T steps, width d (the long suite's grid; ``Kernels`` is its two-size summary)."""
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


@common.suite("long")
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


# attention past the lengths its T x T weights allow: the tiled variant keeps L (T,) instead
ATTENTION_VARIANTS = ["materialised", "tiled"]
LONG_T = [1024, 4096, 16384, 32768]


def _attention_variant(variant):
    """(forward, backward_from) of the attention family's materialised or tiled variant."""
    fam = common.analyser("models.attention")
    tiled = getattr(fam, "tiled_forward", None)
    if tiled is None:
        raise NotImplementedError("no tiled attention in this commit")
    return (fam.attention.forward if variant == "materialised" else tiled), fam.backward_from


@common.suite("long")
class LongAttention(common.Benchmark):
    """peakmem_ of attention's forward, and of forward + backward, over T up to 32,768
    (d = 64, float32, one sequence, with projections).

    The materialised variant keeps A (T x T) for the backward and grows like T^2 (it is
    skipped past MAX_GRID_ELEMENTS); the tiled one keeps L (T,) and grows like T.
    """
    params = [ATTENTION_VARIANTS, LONG_T]
    param_names = ["variant", "T"]
    d, dtype = 64, "float32"
    timeout = 600                  # the tiled forward + backward at T = 32,768: about 15 s

    def setup(self, variant, T):
        if variant == "materialised":
            common.skip_unless_fits("attention", T, 1)
        common.apply_threads()
        self.forward, self.backward = _attention_variant(variant)
        common.warm_up("attention", self.dtype)
        X, Ws = common.inputs("attention", 8, 2, 1, self.dtype)
        self.backward(X, Ws, self.forward(X, *Ws), X)                     # compile the variant
        self.X, self.Ws = common.inputs("attention", T, self.d, 1, self.dtype)

    def peakmem_forward(self, variant, T):
        self.forward(self.X, *self.Ws)

    def peakmem_forward_backward(self, variant, T):
        out = self.forward(self.X, *self.Ws)
        self.backward(self.X, self.Ws, out, out[0])


@common.suite("long")
class TiledThroughput(common.Benchmark):
    """The tiled attention's rate as a fraction of this machine's GEMM peak (Q = K = V = X).

    FLOPs counted as the FlashAttention benchmarks count them: 4 T^2 d for the forward (the
    two products; the softmax's exps are not counted) and 2.5 times that for the backward,
    which recomputes the scores. The peak is measured once per run (``setup_cache``).
    """
    params = [[1024, 4096, 8192], [64, 256], common.DTYPES]
    param_names = ["T", "d", "dtype"]
    timeout = 300

    def setup_cache(self):
        from .bench_machine import gemm_peak_gflops
        common.apply_threads()
        return {dtype: gemm_peak_gflops(dtype) for dtype in common.DTYPES}

    def setup(self, peaks, T, d, dtype):
        common.apply_threads()
        forward, backward = _attention_variant("tiled")
        X = np.random.default_rng(common.SEED).standard_normal((T, d)).astype(dtype)
        W = (None, None, None)
        out = forward(X, *W)

        def forward_backward():
            o = forward(X, *W)
            backward(X, W, o, X)

        timing = common.analyser("timing")
        flops = 4 * T * T * d
        self.peak = peaks[dtype]
        self.forward_gflops = flops / timing.median_seconds(lambda: forward(X, *W), 3, 0.2) / 1e9
        del out
        self.fb_gflops = 3.5 * flops / timing.median_seconds(forward_backward, 3, 0.2) / 1e9

    def track_forward_fraction_of_peak(self, peaks, T, d, dtype):
        return self.forward_gflops / self.peak
    track_forward_fraction_of_peak.unit = "fraction of GEMM peak"

    def track_forward_backward_fraction_of_peak(self, peaks, T, d, dtype):
        return self.fb_gflops / self.peak
    track_forward_backward_fraction_of_peak.unit = "fraction of GEMM peak"

    def track_forward_gflops(self, peaks, T, d, dtype):
        return self.forward_gflops
    track_forward_gflops.unit = "GFLOP/s"


@common.suite("long")
class AttentionTiles(common.Benchmark):
    """The tiled attention's forward and backward at T = 4096 for several tile sizes, the
    measurement behind ``harness.kernels.attention.TILE_Q, TILE_K`` (Q = K = V = X, one sequence).

    The tile sizes are the kernel module's constants, set in ``setup`` and restored in
    ``teardown``; compare the rows of one run (asv's own ratios), not runs across machines.
    """
    params = [["64x512", "128x256", "128x512", "256x256", "256x512", "512x512"], [64, 256],
              common.DTYPES]
    param_names = ["tiles", "d", "dtype"]
    T = 4096

    def setup(self, tiles, d, dtype):
        common.apply_threads()
        self.at = common.analyser("attention")
        if not hasattr(self.at, "TILE_Q"):
            raise NotImplementedError("no tiled attention in this commit")
        self.saved = self.at.TILE_Q, self.at.TILE_K
        self.at.TILE_Q, self.at.TILE_K = (int(n) for n in tiles.split("x"))
        self.X = np.random.default_rng(common.SEED).standard_normal((self.T, d)).astype(dtype)
        self.Y, self.L = self.at.forward(self.X, return_weights=False)       # compile, touch

    def teardown(self, tiles, d, dtype):
        self.at.TILE_Q, self.at.TILE_K = self.saved

    def time_forward(self, tiles, d, dtype):
        self.at.forward(self.X, return_weights=False)

    def time_backward(self, tiles, d, dtype):
        self.at.backward(self.X, None, None, None, self.L, self.X, Y=self.Y)
