"""Thread settings and the machine description that every measurement records.

BLAS and Numba thread counts are set together, deliberately, so that a timing
never depends on whichever library happened to pick its own default.
"""

from __future__ import annotations

import contextlib
import os
import platform

import numba
import numpy as np
# Numba's np.dot calls SciPy's OpenBLAS, a second library beside NumPy's. Load it
# now, so that threadpoolctl sees both and a thread limit reaches the kernels too
# (a limit set before it loads would leave it at its default thread count).
import scipy.linalg.cython_blas  # noqa: F401
from threadpoolctl import threadpool_info, threadpool_limits


def blas_threads():
    """Threads of the BLAS libraries loaded (NumPy's and SciPy's; the most of any)."""
    info = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return max((p["num_threads"] for p in info), default=None)


@contextlib.contextmanager
def threads(n):
    """Run the block with ``n`` BLAS threads and ``n`` Numba threads."""
    n = int(n)
    if n < 1:
        raise ValueError(f"threads must be at least 1, got {n}.")
    n_numba = min(n, numba.config.NUMBA_NUM_THREADS)
    old = numba.get_num_threads()
    with threadpool_limits(limits=n, user_api="blas"):
        numba.set_num_threads(n_numba)
        try:
            yield n
        finally:
            numba.set_num_threads(old)


def set_threads(n):
    """Set BLAS and Numba threads for the rest of the process (benchmarks)."""
    n = int(n)
    threadpool_limits(limits=n, user_api="blas")
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return n


def describe():
    """A flat dict of what produced a measurement: machine, versions, threads."""
    blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return {
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        # sorted: threadpoolctl lists the libraries in the order they were loaded, which
        # differs between two runs of the same command
        "blas": ",".join(sorted(f"{p.get('internal_api')} {p.get('version')} "
                                f"({p.get('architecture')})" for p in blas)),
        "blas_threads": blas_threads(),
        "numba_threads": numba.get_num_threads(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", ""),
    }


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
