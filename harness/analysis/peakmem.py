"""Peak memory of the compiled forwards over T, measured in fresh processes.

Every timed variant (``Family.timed``: the RNN, the materialised attention with
and without projections, the tiled attention, the linear recurrence's loop, scan
and chunked scan) runs at each T in a process of its own, started for it
(``python -m harness.analysis.peakmem``), so that nothing another variant allocated is
still resident. Before each call the process resets its resident high-water
mark (Linux: ``/proc/self/clear_refs``), reads its resident size, calls the
variant once and reads the high-water mark again: ``peak_bytes`` is what the call
added at its peak, outputs included, inputs not. glibc is told to map every
allocation past 64 KiB on its own (``MALLOC_MMAP_THRESHOLD_``), so that what a
call frees goes back to the system and the next, larger T starts from the same
floor.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd

from harness import models
from harness.infra.validate import check_int, check_sequence
from harness.infra.config import MemoryConfig

DEFAULT = MemoryConfig()
CLEAR_REFS = "/proc/self/clear_refs"
COLUMNS = ("model", "T", "d", "dtype", "peak_bytes", "output_bytes", "estimate_bytes")


def _status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def _arrays(out):
    return [a for a in (out if isinstance(out, tuple) else (out,)) if isinstance(a, np.ndarray)]


def measure_here(variant, T_values, d, dtype, seed):
    """Rows of ``peak_bytes`` for one variant over ``T_values``, measured in this process
    (``measure`` runs this in a fresh process per variant)."""
    _, v = models.variants()[variant]
    rng = np.random.default_rng(seed)
    v.call(*v.inputs(2, 2, rng, dtype))                         # compile or load, off the record
    rows = []
    for T in T_values:
        args = v.inputs(T, d, rng, dtype)
        with open(CLEAR_REFS, "w") as f:                        # VmHWM := VmRSS
            f.write("5")
        base = _status("VmRSS:")
        try:
            out = v.call(*args)
        except MemoryError:                     # the kernel's own check: it would not fit here
            out, peak = (), math.nan
        else:
            peak = _status("VmHWM:") - base
        rows.append({"model": variant, "T": T, "d": d, "dtype": dtype, "peak_bytes": peak,
                     "output_bytes": sum(a.nbytes for a in _arrays(out)),
                     "estimate_bytes": v.bytes(T, d)})
        del out, args
    return rows


def _child_argv(job):
    return [sys.executable, "-m", "harness.analysis.peakmem", job]


def measure(config=DEFAULT, variants=None):
    """Peak memory of every timed variant (or of ``variants``) at each of ``config.T_values``:
    one row per (model, T) with ``peak_bytes``, ``output_bytes`` and the variant's own
    estimate ``estimate_bytes`` (which the analysers use to refuse sizes that do not fit;
    it counts the inputs too, so it lies above the peak). A call the kernel refuses with
    a MemoryError (it would not fit in this machine's memory) has NaN for ``peak_bytes``."""
    if not os.path.exists(CLEAR_REFS):
        raise OSError(f"measuring peak memory needs Linux's {CLEAR_REFS}, which this system lacks.")
    known = models.variants()
    names = list(known) if variants is None else list(variants)
    for name in names:
        if name not in known:
            raise ValueError(f"variants must name timed variants, one of {list(known)!r}; "
                             f"got {name!r}.")
    check_sequence("T_values", config.T_values, check_int)
    check_int("d", config.d)
    if config.dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {config.dtype!r}.")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536",
               OPENBLAS_NUM_THREADS=str(config.threads), NUMBA_NUM_THREADS=str(config.threads),
               OMP_NUM_THREADS=str(config.threads))
    rows = []
    for name in names:
        arg = json.dumps({"variant": name, "T_values": list(config.T_values), "d": config.d,
                          "dtype": config.dtype, "seed": config.seed})
        r = subprocess.run(_child_argv(arg), env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"measuring the peak memory of {name!r} failed "
                               f"(exit {r.returncode}):\n{r.stderr.strip()[-2000:]}")
        rows.extend(json.loads(r.stdout.strip().splitlines()[-1]))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def growth_exponents(frame):
    """{model: the slope of log peak_bytes against log T between the two largest measured T}:
    2 for what stores a T x T grid, 1 for what stores a few (T, d) arrays (NaN with fewer
    than two measured T, or a peak of 0, below the counters' resolution)."""
    out = {}
    for model, g in frame.dropna(subset=["peak_bytes"]).groupby("model", sort=False):
        g = g.sort_values("T")
        if len(g) < 2:
            out[model] = math.nan
            continue
        (t0, p0), (t1, p1) = g[["T", "peak_bytes"]].to_numpy(float)[-2:]
        # a peak of 0 is below what the resident-size counters resolve: no growth to read
        out[model] = float(np.log(p1 / p0) / np.log(t1 / t0)) if min(p0, p1) > 0 else math.nan
    return out


if __name__ == "__main__":
    try:
        job = json.loads(sys.argv[1])
        print(json.dumps(measure_here(job["variant"], job["T_values"], job["d"], job["dtype"],
                                      job["seed"])))
    except KeyboardInterrupt:                    # the parent was interrupted too: go quietly
        sys.exit(130)
