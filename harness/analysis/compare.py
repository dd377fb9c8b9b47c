"""The harness kernels against what a user would otherwise reach for.

Peers, timed in this process, interleaved, with the same thread settings; each
family declares its own (``Compared.peers``):

* ``numpy``: the plain NumPy models of ``harness.models.reference`` (a step loop for the
  RNN; matrix products and a vectorised softmax for attention);
* ``torch``: ``torch.nn.RNN`` and ``scaled_dot_product_attention`` with
  projections, and autograd for the backward (left out when PyTorch is missing);
* ``jax``: the same computation in ``jax.numpy`` (``lax.scan`` for the recurrences),
  ``jax.jit`` on the CPU, XLA on the run's threads (``_jax``), the backward by ``jax.vjp``
  from kept residuals (left out when JAX is missing);
* ``gemm``: the kernel's matrix products alone, in its shapes, on its BLAS, into
  preallocated buffers (attention's forward; the RNN's forward and backward): the
  floor that the kernel's own work is measured against. ``harness_over_gemm`` is
  the kernel's time over it; ``ceiling_vs_fastest`` (fastest peer / floor) is the
  largest speed-up the kernel could show here, when a peer makes the same calls.

A case may name a further kernel of its family (``Family.compared``): attention's
tiled kernel, at T = 4096 to 32,768 (``LONG_COMPARE``, ``harness compare --long``),
against PyTorch's tiled SDPA and a NumPy attention that goes through the queries in
blocks, neither of which stores the T x T weights either.

Every sample is the mean of ``number`` calls; each implementation gets
``repeats`` samples in interleaved rounds (``harness.infra.timing``), and the median is
reported. Speed is a ratio: peer time / harness time, measured side by side. Every row
names the libraries it ran on (``libraries``: each BLAS, torch's and XLA's, from
``harness.infra.machine.libraries``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from harness.infra import machine, timing
from harness import models
from harness.models import common_peers
from harness.infra.config import COMPARE as DEFAULT


@dataclasses.dataclass(frozen=True)
class Case:
    model: str          # a registered family
    batch: int
    T: int
    d: int
    dtype: str          # "float32" or "float64"
    kernel: str = "default"   # "default" (the family's own) or a further kernel (``Family.compared``)


SUITES = {"default": "cases", "quick": "quick_cases", "long": "long_cases"}


def registered_cases(suite="default"):
    """(family, batch, T, d, kernel) of every registered family's compared kernels for ``suite``
    (``Compared.cases``, ``.quick_cases`` or ``.long_cases``), in registration order."""
    field = SUITES[suite]
    return tuple((f.name, *c, k.name) for f in models.families() for k in f.compared
                 for c in getattr(k, field))


def cases(config=DEFAULT):
    """Every case of ``config``: each (family, batch, T, d[, kernel]) for each dtype."""
    todo = registered_cases(config.suite) if config.cases is None else config.cases
    return [Case(c[0], c[1], c[2], c[3], dt, *c[4:]) for dt in config.dtypes for c in todo]


def _torch():
    from harness.infra import signals
    try:
        # torch's C++ import code calls back into Python: a KeyboardInterrupt raised there
        # aborts the process (pybind11's "terminate called"), so a signal waits for its end
        with signals.quietly():
            import torch
    except ImportError:
        return None
    return torch


# XLA's CPU client sizes its thread pool, once, by the CPUs the thread that starts it may run
# on; its flags do not: with --xla_cpu_multi_thread_eigen=false alone, jax 0.10.2 still ran
# one 2000 x 2000 matmul on four busy threads (two Eigen, two YNNPACK); started from a thread
# pinned to one CPU, on one. ``_JAX``: the imported module (None: not installed), XLA's threads.
_JAX = {}
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"


def _jax(threads=1):
    """JAX on the CPU, float64 enabled, XLA on ``threads`` threads; None where JAX is not
    installed. The first call in a process decides: XLA's threads cannot change once its
    client has started (``jax_threads()`` says what they are)."""
    if "module" in _JAX:
        return _JAX["module"]
    import os
    from harness.infra import signals
    os.environ["JAX_PLATFORMS"] = "cpu"         # read at jax's import, XLA_FLAGS at its client's start
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {XLA_FLAGS}".strip()
    try:
        with signals.quietly():                 # jaxlib's import calls back into Python too
            import jax
    except ImportError:
        _JAX.update(module=None, threads=None)
        return None
    from jax._src import xla_bridge
    jax.config.update("jax_enable_x64", True)   # float64 arrays stay float64; float32 stay float32
    _JAX["threads"] = None                      # started elsewhere: its threads are not ours to say
    if not xla_bridge.backends_are_initialized() and hasattr(os, "sched_setaffinity"):
        jax.config.update("jax_platforms", "cpu")
        mask = os.sched_getaffinity(0)          # this thread's alone (pid 0), and what it starts
        before = _tasks()
        os.sched_setaffinity(0, sorted(mask)[:threads])
        try:
            with signals.quietly():
                jax.devices("cpu")              # the client starts, its pool sized by the mask
        finally:
            os.sched_setaffinity(0, mask)
            for tid in _tasks() - before:       # its threads may then run on any CPU, as ours
                try:
                    os.sched_setaffinity(tid, mask)
                except OSError:                 # ended meanwhile
                    pass
        _JAX["threads"] = min(threads, len(mask))
    _JAX["module"] = jax
    return jax


def _tasks():
    """This process's thread ids (Linux: /proc/self/task; elsewhere none)."""
    import os
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def jax_threads():
    """XLA's threads in this process (``_jax``), or None: JAX not imported by ``_jax`` or
    missing, or its client started by someone else."""
    return _JAX.get("threads")


# each direction's slot in an implementation's tuple (forward, backward, outputs, forward+backward)
SLOTS = {"forward": 0, "backward": 1, "forward+backward": 3}


def implementations(case, seed=0):
    """The callables for one case: {impl: (forward, backward, outputs, forward+backward)},
    any of them None where an implementation lacks it.

    ``harness`` is the case's compiled kernel; the others are its peers. ``backward``
    starts from a stored forward output; ``forward+backward`` runs both passes.
    ``outputs()`` returns (forward output, dX) so that tests can check that every peer
    computes the same thing as the harness.
    """
    fam = models.get(case.model)
    k = fam.kernel(case.kernel)
    X, W = fam.kernels.inputs(case.T, case.d, case.batch, case.dtype, seed)
    out = k.forward(X, *W)
    g = np.random.default_rng([seed, 1]).normal(size=fam.kernels.primary(out).shape).astype(case.dtype)
    impls = {"harness": common_peers.slots(lambda: k.forward(X, *W),
                                           lambda o: k.backward(X, W, o, g), out,
                                           primary=fam.kernels.primary, dx=lambda gr: gr.dX)}
    impls.update(k.peers(X, W, g, _torch(), jax=_jax()))
    return impls


def run_comparison(config=DEFAULT, progress=None):
    """Time every case; return (timings, summary) DataFrames.

    ``timings`` has one row per (case, direction, impl) with the median time and
    the ratio impl / harness. ``summary`` has one row per (case, direction) with
    the speed-up over each peer (peer time / harness time), the 95 % interval of the
    speed-up over the fastest (rounds resampled in pairs), the target and whether
    its median meets it.
    """
    torch = _torch()
    _jax(config.threads)                  # the first call sets XLA's threads (``_jax``)
    machine.set_threads(config.threads)
    if torch is not None:
        torch.set_num_threads(config.threads)
    env = machine.describe()
    libraries = machine.libraries_line(machine.libraries(jax_threads()))
    rows, summary = [], []
    todo = cases(config)
    for n, case in enumerate(todo, 1):
        if progress:
            progress(f"{case.model} B={case.batch} T={case.T} d={case.d} {case.dtype}")
        impls = implementations(case, config.seed)
        kernel = models.get(case.model).kernel(case.kernel)
        for direction in kernel.directions:
            slot = SLOTS[direction]
            fns = {k: fs[slot] for k, fs in impls.items() if len(fs) > slot and fs[slot] is not None}
            samples, numbers = timing.time_interleaved(fns, config.repeats, config.min_sample_s,
                                                       seed=n)
            med = {k: float(np.median(s)) for k, s in samples.items()}
            for k, s in samples.items():
                rows.append({**dataclasses.asdict(case), "direction": direction, "impl": k,
                             "median_s": med[k], "min_s": float(np.min(s)),
                             "repeats": len(s), "number": numbers[k],
                             "ratio_to_harness": med[k] / med["harness"]})
            peers = {k: t for k, t in med.items() if k not in ("harness", "gemm")}
            fastest = min(peers, key=peers.get)
            need, floor, words = kernel.target(case.batch, direction, case.T, case.d)
            speedup, lo, hi = timing.paired_ratio(samples[fastest], samples["harness"], seed=n)
            row = {**dataclasses.asdict(case), "direction": direction,
                   "harness_s": med["harness"], "fastest_peer": fastest,
                   "speedup_vs_fastest": speedup, "speedup_lo": lo, "speedup_hi": hi,
                   "speedup_vs_numpy": peers["numpy"] / med["harness"],
                   "speedup_vs_torch": peers["torch"] / med["harness"] if "torch" in peers else np.nan,
                   "speedup_vs_jax": peers["jax"] / med["harness"] if "jax" in peers else np.nan,
                   "target": words,
                   "met": bool(speedup >= need and peers["numpy"] >= med["harness"])}
            if "gemm" in med:
                row["harness_over_gemm"] = med["harness"] / med["gemm"]
                row["ceiling_vs_fastest"] = peers[fastest] / med["gemm"]
                if floor is not None:
                    row["met"] = row["met"] and bool(row["harness_over_gemm"] <= floor)
            summary.append(row)
    timings = pd.DataFrame(rows)
    summary = pd.DataFrame(summary)
    for k in ("blas_threads", "numba_threads", "OPENBLAS_CORETYPE"):
        timings[k] = env[k]
        summary[k] = env[k]
    timings["torch_threads"] = torch.get_num_threads() if torch is not None else np.nan
    for frame in (timings, summary):
        frame["jax_threads"] = np.nan if jax_threads() is None else jax_threads()
        frame["libraries"] = libraries
    return timings, summary


def format_summary(summary):
    cols = ["model", "kernel", "batch", "T", "d", "dtype", "direction", "harness_s", "fastest_peer",
            "speedup_vs_fastest", "speedup_lo", "speedup_hi", "speedup_vs_numpy", "speedup_vs_torch",
            "speedup_vs_jax", "met"]
    if "harness_over_gemm" in summary:
        cols[-1:-1] = ["harness_over_gemm", "ceiling_vs_fastest"]
    view = summary[cols].copy()
    view["harness_s"] = (view["harness_s"] * 1e3).map("{:.3f} ms".format)
    return view.to_string(index=False, float_format=lambda x: f"{x:.2f}")
