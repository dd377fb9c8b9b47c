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
# The kernels call NumPy's OpenBLAS (harness.kernels.blas.dot), but where NumPy ships none
# they fall back to Numba's np.dot, which calls SciPy's OpenBLAS. Load it now, so that
# threadpoolctl sees both and a thread limit reaches the kernels either way (a limit set
# before it loads would leave it at its default thread count).
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


# libraries(): one row per library, these keys, in this order
LIBRARY_KEYS = ("library", "user_api", "internal_api", "version", "architecture", "num_threads",
                "threading_layer", "detail")


def libraries(xla_threads=None):
    """The numerical libraries this process computes with: a list of dicts with
    ``LIBRARY_KEYS``, sorted, the same for two runs of one command.

    * every BLAS that threadpoolctl sees loaded (NumPy's and SciPy's OpenBLAS here), with its
      internal_api, version, architecture, num_threads and threading_layer; ``library``
      names the package that ships it (``numpy`` for ``.../site-packages/numpy.libs/...``);
    * PyTorch's, where torch is imported: the BLAS it was built with (``BLAS_INFO`` of
      ``torch.__config__.show()``, MKL's version), its CPU capability, torch's threads, and in
      ``detail`` torch's version and whether MKL and oneDNN (mkldnn) are available;
    * XLA's, where jax is imported: jax's and jaxlib's versions, the default backend and its
      device kind, and ``xla_threads`` (None: not known to the caller).

    Torch and jax are read from ``sys.modules``, never imported here: what is recorded is what
    the measurement ran with.
    """
    import sys
    rows = []
    for p in threadpool_info():
        if p.get("user_api") != "blas":
            continue
        rows.append(_row(library=_owner(p.get("filepath", "")), user_api="blas",
                         internal_api=p.get("internal_api"), version=p.get("version"),
                         architecture=p.get("architecture"), num_threads=p.get("num_threads"),
                         threading_layer=p.get("threading_layer")))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__config__"):
        rows.append(_torch_row(torch))
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "default_backend"):
        rows.append(_jax_row(jax, xla_threads))
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in LIBRARY_KEYS))


def libraries_line(rows):
    """``libraries()`` in one line, for a CSV column or a caption: "numpy: openblas 0.3.31
    Haswell, 1 thread; torch: mkl 2024.2 AVX2, 1 thread (...)"; "" for no rows."""
    def one(r):
        threads = "" if r["num_threads"] is None else (
            f", {r['num_threads']} thread{'' if r['num_threads'] == 1 else 's'}")
        arch = f" {r['architecture']}" if r["architecture"] else ""
        detail = f" ({r['detail']})" if r["detail"] else ""
        return f"{r['library']}: {r['internal_api']} {r['version']}{arch}{threads}{detail}"
    return "; ".join(one(r) for r in rows)


def _row(**fields):
    return {k: fields.get(k) for k in LIBRARY_KEYS}


def _owner(filepath):
    """The package a shared library ships in: the folder under site-packages, ".libs" cut."""
    parts = filepath.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages") and i + 1 < len(parts) - 1:
            return parts[i + 1].removesuffix(".libs")
    return parts[-1].split(".so")[0] if parts[-1] else "unknown"


def _torch_row(torch):
    import re
    show = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", show)
    mkl = re.search(r"Math Kernel Library Version ([0-9.]+)", show)
    onednn = re.search(r"MKL-DNN (v[0-9.]+)", show)
    backends = getattr(torch, "backends", None)
    has = (lambda name: bool(getattr(getattr(backends, name, None), "is_available", lambda: False)()))
    capability = getattr(getattr(backends, "cpu", None), "get_cpu_capability", lambda: None)()
    detail = (f"torch {torch.__version__}, MKL {'yes' if has('mkl') else 'no'}, oneDNN "
              f"{onednn.group(1) if onednn and has('mkldnn') else 'yes' if has('mkldnn') else 'no'}")
    return _row(library="torch", user_api="blas", internal_api=blas.group(1) if blas else "unknown",
                version=mkl.group(1) if mkl and blas and blas.group(1) == "mkl" else None,
                architecture=capability, num_threads=torch.get_num_threads(), detail=detail)


def _jax_row(jax, xla_threads):
    try:
        import jaxlib
        jaxlib_version = jaxlib.__version__
    except (ImportError, AttributeError):
        jaxlib_version = "unknown"
    try:                                            # never start XLA's client here
        from jax._src import xla_bridge
        started = xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):
        started = True
    backend = jax.default_backend() if started else "not started"
    kind = jax.devices()[0].device_kind if started else None
    return _row(library="jax", user_api="xla", internal_api="xla", version=jax.__version__,
                architecture=f"{backend} ({kind})" if kind and kind != backend else backend,
                num_threads=xla_threads, detail=f"jaxlib {jaxlib_version}")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
