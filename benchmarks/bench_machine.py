"""What produced the numbers: thread counts, first-call compile time, and the GEMM ceiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    from harness.kernels.blas import matmul
except ModuleNotFoundError:             # a commit before the package's layers
    from harness._blas import matmul

from . import common

_BLAS, _NUMBA, _CORETYPE = common.apply_blas_threads()     # Numba's is set in setup


@common.suite("default")
class Threads(common.Benchmark):
    """The thread settings every other result in this run was measured under.

    They are the params, so they land in the results JSON beside the numbers;
    the track_ values make them a graph over commits.
    """
    params = [[_BLAS], [_NUMBA], [_CORETYPE]]
    param_names = ["blas_threads", "numba_threads", "OPENBLAS_CORETYPE"]
    rounds = 1                       # settings, not timings: nothing to interleave

    def setup(self, blas, numba_threads, coretype):
        self.blas, self.numba_threads, _ = common.apply_threads()

    def track_blas_threads(self, blas, numba_threads, coretype):
        return self.blas
    track_blas_threads.unit = "threads"

    def track_numba_threads(self, blas, numba_threads, coretype):
        return self.numba_threads
    track_numba_threads.unit = "threads"


_LIBRARIES = common.libraries_line()        # at import, BLAS's threads set: as every benchmark sees


@common.suite("default")
class Libraries(common.Benchmark):
    """The BLAS libraries every other result in this run was computed with: threadpoolctl's
    internal_api, version, architecture and threads of each (NumPy's and SciPy's OpenBLAS).

    The line is the param, so it lands in the results JSON beside the numbers (asv keeps a
    benchmark's params with its results, and machine.json has no word of the BLAS); the
    track_ value, how many BLAS libraries are loaded, makes it a graph over commits.
    """
    params = [[_LIBRARIES]]
    param_names = ["libraries"]
    rounds = 1                       # a record, not a timing: nothing to interleave

    def setup(self, libraries):
        from threadpoolctl import threadpool_info
        self.blas = sum(p.get("user_api") == "blas" for p in threadpool_info())

    def track_blas_libraries(self, libraries):
        return self.blas
    track_blas_libraries.unit = "libraries"


# Run in a fresh interpreter with an empty NUMBA_CACHE_DIR, so Numba's on-disk cache
# cannot hide the compile. Times import + first call, against a second call.
_FIRST_CALL = r"""
import json, sys, time
import numpy, numba, scipy                   # not counted: every run pays these
model, dtype = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
from harness import models
f = models.get(model)
f = f.kernels if hasattr(f, "tracing") else f
X, Ws = f.inputs(8, 4, 1, dtype, 0)
def once():
    out = f.forward(X, *Ws)
    f.backward(X, Ws, out, f.primary(out))
once()
t1 = time.perf_counter()
once()
t2 = time.perf_counter()
print(json.dumps({"first": t1 - t0, "second": t2 - t1}))
"""


@common.suite("long")
class CompileTime(common.Benchmark):
    """Seconds from import to the end of the first forward + backward, nothing cached."""
    params = [common.MODELS, ["float64"]]
    param_names = ["model", "dtype"]
    timeout = 300

    def setup(self, model, dtype):
        common.family(model)                             # skip at commits before the registry
        with tempfile.TemporaryDirectory(prefix="harness-numba-cache-") as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache,
                       NUMBA_NUM_THREADS=str(max(common.THREADS, 1)),
                       OMP_NUM_THREADS=str(common.THREADS),
                       OPENBLAS_NUM_THREADS=str(common.THREADS))
            out = subprocess.run([sys.executable, "-c", _FIRST_CALL, model, dtype], env=env,
                                 capture_output=True, text=True, timeout=self.timeout, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        self.first, self.second = r["first"], r["second"]

    def track_first_call(self, model, dtype):
        return self.first - self.second                  # compile (and import) beyond a warm call
    track_first_call.unit = "seconds"


def gemm_peak_gflops(dtype, n=2048):
    """This machine's GEMM rate: the best (n x n) @ (n x n) product of several, on the BLAS
    the kernels call, from compiled code (``harness.kernels.blas.dot``: NumPy's OpenBLAS)."""
    rng = np.random.default_rng(common.SEED)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    out = matmul(a, b)                                    # first call: BLAS buffers, page faults
    timing = common.analyser("timing")
    return 2 * n ** 3 / timing.median_seconds(lambda: matmul(a, b, out), rounds=3,
                                              min_sample_s=0.2) / 1e9


def attention_gflops(model, T, d, dtype):
    """Achieved GFLOP/s of the family ``model``'s forward on one sequence (T, d): 2 x its
    counted multiplications (projections, grid and mix) over the median of interleaved rounds.
    The softmax's O(T^2) exps and adds are not counted, as PyTorch's FlopCounterMode does not."""
    X, Ws = common.inputs(model, T, d, 1, dtype)
    timing = common.analyser("timing")
    seconds = timing.median_seconds(lambda: common.run_forward(model, X, Ws), rounds=3,
                                    min_sample_s=0.2)
    return 2 * sum(common.closed_form(model)(T, d).values()) / seconds / 1e9


@common.suite("default")
class GemmEfficiency(common.Benchmark):
    """Achieved GFLOP/s of attention's forward, and its fraction of this machine's GEMM peak.

    Every number is measured in ``setup_cache``, once per run and in one process (same
    threads): the peak per dtype, then the forward at every (T, dtype). The three track_
    methods only read them; measured in ``setup``, asv would time each forward three times,
    in a process per method and point. Higher is better here: asv's compare marks a rise
    with "+" as for any track_.
    """
    params = [[256, 1024, 4096], ["float32", "float64"]]
    param_names = ["T", "dtype"]
    d = 256
    rounds = 1                       # each value already the median of interleaved rounds
    model = "attention"       # the family whose forward is GEMM-bound

    def setup_cache(self):
        common.apply_threads()
        peaks = {dtype: gemm_peak_gflops(dtype) for dtype in common.DTYPES}
        achieved = {}
        for dtype in self.params[1]:
            common.warm_up(self.model, dtype)
            for T in self.params[0]:
                achieved[(T, dtype)] = attention_gflops(self.model, T, self.d, dtype)
        return {"peak": peaks, "achieved": achieved}

    def track_attention_gflops(self, rates, T, dtype):
        return rates["achieved"][(T, dtype)]
    track_attention_gflops.unit = "GFLOP/s"

    def track_gemm_peak_gflops(self, rates, T, dtype):
        return rates["peak"][dtype]
    track_gemm_peak_gflops.unit = "GFLOP/s"

    def track_attention_fraction_of_peak(self, rates, T, dtype):
        return rates["achieved"][(T, dtype)] / rates["peak"][dtype]
    track_attention_fraction_of_peak.unit = "fraction of GEMM peak"
