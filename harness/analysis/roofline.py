"""The roofline: the machine's ceilings measured, and every family's kernels placed on them.

As the Empirical Roofline Toolkit and likwid-bench do, on one thread
(``machine.threads(1)``), in interleaved rounds (``harness.infra.timing``), each figure the
median of the rounds with its 95 % bootstrap interval:

* ``measure_ceilings``: peak FLOP/s per dtype through the kernels' own BLAS (a square GEMM
  by NumPy's ``@`` and by the compiled kernels' ``blas.dot``, NumPy's OpenBLAS called from
  compiled code) and in a
  compiled FMA loop (``harness.kernels.roofline.fma_chains``); the bandwidth of each cache
  level and of memory by a read-only sum and a STREAM triad at working sets sized from the
  caches the OS reports (``cache_sizes``, L3 capped at the share one core counts on:
  ``usable_caches``): half of L1d, of L2 and of L3, and ``memory_multiple`` x L3;
* ``measure_kernels``: each registered family's compared kernels (``Compared``), forward
  and backward, at their benchmark sizes: flops from the traced forms' closed-form counts
  (``Form.macs``; 2 flops a real multiplication), bytes from ``BYTES`` (one model per kernel),
  the bound min(peak, intensity x bandwidth of the level the working set fits in), the
  achieved rate and the fraction of the bound it reaches;
* ``crossover``: where the RNN's T dependent steps and attention's T x T products take the
  same wall time, predicted from their places on the roofline, beside the crossover
  ``harness.analysis.walltime`` measures.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness import models
from harness.infra import stats, timing
from harness.infra.stats import log_crossing

# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class RooflineConfig:
    """``harness roofline`` and the report's roofline section."""
    dtypes: tuple = ("float32", "float64")   # the kernels' dtypes (the ceilings: FLOP/s in each)
    rounds: int = 7                     # interleaved rounds: the median and its 95 % interval
    min_sample_s: float = 0.02          # each sample lasts at least this (>= 1 ms, ERT's rule)
    gemm_n: int = 2048                  # the square GEMM of the BLAS peak: n x n times n x n
    memory_multiple: int = 8            # memory's working set: this many times L3
    cases: str = "default"              # "default": every Compared case; "quick": the smallest
    families: tuple = models.NAMES      # the families placed on the roofline
    crossover_ds: tuple = (64, 256)     # widths of the crossover prediction and measurement
    crossover_T: tuple = (16, 32, 64, 128, 256, 512, 1024, 2048)   # the measured crossover's T
    threads: int = 1                    # one thread: the ceilings of one core
    seed: int = 0


DEFAULT = RooflineConfig()
# the report's --quick and ``harness roofline --quick``: about 30 s on 2 loaded cores
QUICK = RooflineConfig(dtypes=("float64",), rounds=3, min_sample_s=0.002, gemm_n=768,
                       cases="quick", crossover_ds=(64,),
                       crossover_T=(16, 32, 64, 128, 256, 512, 1024))

BYTES_PER_PASS = 8 << 20    # a bandwidth call sweeps its array until about this many bytes moved
FMA_LEVEL = "L1"            # the FMA loop's 2 x FMA_LANES elements never leave L1
COMPUTE = "compute"         # the level of a FLOP/s ceiling
LEVELS = ("L1", "L2", "L3", "memory")
# the documented default where neither sysfs nor lscpu answers: the project machines' AMD
# EPYC (Zen 3) as its KVM guests report it, per core (L3 shared)
DEFAULT_CACHES = {"L1": 32 << 10, "L2": 512 << 10, "L3": 32 << 20}
SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"
L3_SHARE = 8                # the L3 one core counts on: at most this many times its L2


# ----------------------------------------------------------------------------- caches

def _size_bytes(text):
    """'32K', '512K', '32768K', '1M', '64 KiB' -> bytes; None if unreadable."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.I)
    if not m:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def cache_sizes(root=SYSFS_CACHE, lscpu=None):
    """({"L1": bytes, "L2": bytes, "L3": bytes}, source): the data caches of cpu0 as the OS
    reports them (``root``/index*/level, type and size; the instruction cache left out),
    else ``lscpu``'s totals divided by their instances (``lscpu``: its output, for tests;
    None runs it), else ``DEFAULT_CACHES``. ``source``: "sysfs", "lscpu" or "default"."""
    found = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size and 1 <= level <= 3:
            found[f"L{level}"] = size
    if all(k in found for k in DEFAULT_CACHES):
        return found, "sysfs"
    if lscpu is None:
        try:
            lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                                   env={**os.environ, "LC_ALL": "C"}).stdout
        except (OSError, subprocess.SubprocessError):
            lscpu = ""
    for line in lscpu.splitlines():
        m = re.match(r"\s*(L1d|L2|L3) cache:\s*([\d.]+\s*[KMG]i?B?)\s*"
                     r"(?:\((\d+) instances?\))?", line)
        if m:
            size = _size_bytes(m.group(2))
            if size:
                found[{"L1d": "L1"}.get(m.group(1), m.group(1))] = size // int(m.group(3) or 1)
    if all(k in found for k in DEFAULT_CACHES):
        return {k: found[k] for k in DEFAULT_CACHES}, "lscpu"
    return dict(DEFAULT_CACHES), "default"


def usable_caches(caches):
    """``caches`` with L3 taken as at most ``L3_SHARE`` x L2: the share of a shared L3 that
    one core can count on. On the project machines (a KVM guest's 2 vCPUs on a 32 MiB L3
    that the host's other cores use too) a read-only sum ran at 50 GB/s up to 4 MiB, 20 GB/s
    at 8 MiB and memory's 7 GB/s from 16 MiB (half the L3) on."""
    return dict(caches, L3=min(caches["L3"], L3_SHARE * caches["L2"]))


def working_sets(caches, memory_multiple=DEFAULT.memory_multiple):
    """{level: bytes} of the bandwidth kernels, from the caches the OS reports: half of L1d,
    of L2 and of the usable L3 (``usable_caches``), and ``memory_multiple`` x the whole L3."""
    usable = usable_caches(caches)
    return {"L1": caches["L1"] // 2, "L2": caches["L2"] // 2, "L3": usable["L3"] // 2,
            "memory": memory_multiple * caches["L3"]}


def level_of(nbytes, caches):
    """The smallest level that holds ``nbytes``: "L1", "L2", "L3" or "memory"."""
    for level in ("L1", "L2", "L3"):
        if nbytes <= caches[level]:
            return level
    return "memory"


# ----------------------------------------------------------------------------- BLAS

def blas_libraries():
    """{"numpy": text, "scipy": text}: each OpenBLAS (or other BLAS) threadpoolctl sees, as
    "internal_api version architecture, N threads", keyed by the package that ships it (NumPy's
    ``@`` and the kernels' ``blas.dot`` call numpy's; Numba's ``np.dot`` scipy's);
    OPENBLAS_CORETYPE is read, never set."""
    from harness.infra import machine  # noqa: F401  (loads SciPy's BLAS, so that both are seen)
    from threadpoolctl import threadpool_info
    out = {}
    for p in threadpool_info():
        if p.get("user_api") != "blas":
            continue
        folder = Path(str(p.get("filepath", ""))).parent.name     # numpy.libs, scipy.libs
        owner = folder[:-len(".libs")] if folder.endswith(".libs") else folder
        out[owner] = (f"{p.get('internal_api')} {p.get('version')} {p.get('architecture')}, "
                      f"{p.get('num_threads')} threads")
    return out


# ----------------------------------------------------------------------------- ceilings

def ceiling_calls(config=DEFAULT, caches=None):
    """{ceiling key: (call, work, row)}: the no-argument calls the ceilings time, the work one
    call does (flops, or bytes), and the row's fixed columns. Compiles every kernel first."""
    from harness.kernels import roofline as rk
    from harness.kernels.blas import LIBRARY, matmul
    caches = caches if caches is not None else cache_sizes()[0]
    rng = np.random.default_rng(config.seed)
    blas = blas_libraries()
    out = {}
    n = config.gemm_n
    for dt in ("float32", "float64"):
        A = rng.standard_normal((n, n)).astype(dt)
        B = rng.standard_normal((n, n)).astype(dt)
        C1, C2 = np.empty((n, n), dt), np.empty((n, n), dt)
        flops = 2 * n ** 3
        out["gemm_numpy", dt] = ((lambda A=A, B=B, C=C1: np.matmul(A, B, out=C)), flops,
                                 dict(ceiling="gemm (NumPy)", dtype=dt, level=COMPUTE,
                                      working_set_bytes=3 * A.nbytes, unit="GFLOP/s",
                                      blas=blas.get("numpy", "")))
        matmul(A[:2, :2], B[:2, :2])                           # compile outside the clock
        out["gemm_numba", dt] = ((lambda A=A, B=B, C=C2: matmul(A, B, C)), flops,
                                 dict(ceiling="gemm (kernels' dot)", dtype=dt, level=COMPUTE,
                                      working_set_bytes=3 * A.nbytes, unit="GFLOP/s",
                                      blas=blas.get("numpy", "") if LIBRARY else blas.get("scipy", "")))
        x = rng.uniform(0.1, 0.9, rk.FMA_LANES).astype(dt)
        y = x.copy()
        beta = np.dtype(dt).type(0.5)
        passes = max(1, BYTES_PER_PASS // (8 * rk.FMA_LANES))
        rk.fma_chains(x, y, beta, 1)
        out["fma", dt] = ((lambda x=x, y=y, b=beta, p=passes: rk.fma_chains(x, y, b, p)),
                          2 * rk.FMA_DEPTH * rk.FMA_LANES * passes,
                          dict(ceiling="FMA loop (Numba)", dtype=dt, level=COMPUTE,
                               working_set_bytes=x.nbytes + y.nbytes, unit="GFLOP/s", blas=""))
    # The streams' arrays are filled with constants, every page written once here (so that a
    # timed call faults none in): their values do not change a bandwidth, and memory's set is
    # 8 x L3, 3.8 GB on a VM that reports the host's 480 MiB L3, where normal draws took ~15 s.
    for level, ws in working_sets(caches, config.memory_multiple).items():
        a = np.full(max(ws // 8, 64), 0.5)                        # float64: bandwidth is bytes
        passes = max(1, BYTES_PER_PASS // a.nbytes)
        rk.stream_sum(a[:64], 1)
        out["sum", level] = ((lambda a=a, p=passes: rk.stream_sum(a, p)), a.nbytes * passes,
                             dict(ceiling="sum (read)", dtype="float64", level=level,
                                  working_set_bytes=a.nbytes, unit="GB/s", blas=""))
        m = max(ws // 24, 64)                                      # three arrays share the set
        b, c, t = np.full(m, 0.25), np.full(m, 0.75), np.full(m, 0.0)
        passes = max(1, BYTES_PER_PASS // (3 * b.nbytes))
        rk.stream_triad(t[:64], b[:64], c[:64], 3.0, 1)
        out["triad", level] = ((lambda t=t, b=b, c=c, p=passes: rk.stream_triad(t, b, c, 3.0, p)),
                               3 * b.nbytes * passes,
                               dict(ceiling="triad (a = b + s c)", dtype="float64", level=level,
                                    working_set_bytes=3 * b.nbytes, unit="GB/s", blas=""))
    return out


def measure_ceilings(config=DEFAULT, caches=None):
    """The ceilings, one row each (``ceilings.csv``): ceiling, dtype, level, working_set_bytes,
    value (GFLOP/s or GB/s: work / median seconds of a call), lo, hi (its 95 % interval from
    the rounds), unit, blas, rounds, threads, cache_source, openblas_coretype."""
    from harness.infra import machine
    caches, source = (caches, "given") if caches is not None else cache_sizes()
    with machine.threads(config.threads):
        calls = ceiling_calls(config, caches)
        samples, _ = timing.time_interleaved({k: c[0] for k, c in calls.items()}, config.rounds,
                                             max(config.min_sample_s, 1e-3), seed=config.seed)
    rows = []
    for k, (_, work, row) in calls.items():
        med, lo, hi = timing.median_interval(samples[k], seed=config.seed)
        rows.append(dict(row, value=work / med / 1e9, lo=work / hi / 1e9, hi=work / lo / 1e9,
                         rounds=config.rounds, threads=config.threads, cache_source=source,
                         openblas_coretype=os.environ.get("OPENBLAS_CORETYPE", "")))
    cols = ["ceiling", "dtype", "level", "working_set_bytes", "value", "lo", "hi", "unit", "blas",
            "rounds", "threads", "cache_source", "openblas_coretype"]
    frame = pd.DataFrame(rows)[cols]
    frame.attrs["caches"] = usable_caches(caches)       # where a kernel's working set fits
    return frame


def peaks(ceilings):
    """{dtype: GFLOP/s}: the highest compute ceiling of each dtype (a GEMM's or the FMA loop's)."""
    c = ceilings[ceilings.level == COMPUTE]
    return c.groupby("dtype")["value"].max().to_dict()


def bandwidths(ceilings):
    """{level: GB/s}: the higher of the sum's and the triad's bandwidth at each level."""
    b = ceilings[ceilings.level != COMPUTE]
    return b.groupby("level")["value"].max().to_dict()


def bound(intensity, peak, bandwidth):
    """(GFLOP/s, kind): min(peak, intensity x bandwidth) and which binds, "compute" or
    "bandwidth" (a tie is compute's: the kernel is at the ridge point)."""
    roof = intensity * bandwidth
    return (float(peak), "compute") if peak <= roof else (float(roof), "bandwidth")


# ----------------------------------------------------------------------------- bytes models
#
# The minimum bytes a kernel must move between the core and the memory or cache its working
# set lives in: its inputs, weights and outputs once, what it keeps for the backward once,
# and a weight again at every step where it does not fit in the cache that would keep it
# (``resident``: the per-core L2, the largest private level). Intermediates a kernel could
# keep in registers or L1 (a step's pre-activation, a score tile) are not counted. Each model
# returns {"io": bytes read or written once, "reread": bytes of weights read again per step,
# "working_set": the bytes whose level sets the bandwidth: what is read again where there is
# a re-read (it is most of the traffic: the RNN's W_hh T times against X and H once), else
# every byte touched}; bytes = io + reread.
# s is the itemsize; the LRU's states are complex (2 s each).

def _parts(io, reread, working_set):
    return {"io": int(io), "reread": int(reread), "working_set": int(working_set)}


def rnn_bytes(direction, B, T, d, s, resident):
    """RNN, h_t = tanh(W_hh h_{t-1} + W_xh x_t). Forward: X (B, T, d) read, H written,
    W_xh and W_hh (d, d) read once; W_hh again at each of the T - 1 later steps when its
    d^2 s bytes exceed ``resident`` (a step's B x d times d x d reads all of it). Backward:
    X, H, dH read, dX written, the weights read and their gradients written once; W_hh
    again at each later step when it does not fit (dW_hh is one product over the steps)."""
    w = 2 * d * d * s
    again = (T - 1) * d * d * s if d * d * s > resident else 0
    if direction == "forward":
        io = 2 * B * T * d * s + w
    else:
        io = 4 * B * T * d * s + 2 * w
    return _parts(io, again, d * d * s if again else io)


def _gated_bytes(gates, states):
    def model(direction, B, T, d, s, resident):
        w = 2 * gates * d * d * s                    # W_ih, W_hh (gates d, d)
        again = (T - 1) * gates * d * d * s if gates * d * d * s > resident else 0
        if direction == "forward":
            io = (1 + states) * B * T * d * s + w
        else:
            io = (1 + 2 * states + 1) * B * T * d * s + 2 * w
        return _parts(io, again, gates * d * d * s if again else io)
    model.__doc__ = (f"{gates} gates of W_ih, W_hh ({gates} d, d), {states} state(s) of (B, T, d) "
                     f"kept for the backward. Forward: X read, the states written, the weights "
                     f"once; W_hh again at each later step when its {gates} d^2 s bytes exceed "
                     f"``resident``. Backward: X, the states and dH read, dX written, the "
                     f"weights read and their gradients written once; W_hh again likewise.")
    return model


lstm_bytes = _gated_bytes(4, 2)     # H and C kept
gru_bytes = _gated_bytes(3, 1)      # H kept


def lru_bytes(direction, B, T, d, s, resident):
    """LRU, h_t = lam * h_{t-1} + B x_t, complex lam (d,) and B (d, d) (2 s bytes an element).
    Forward: X read (real), H (B, T, d) written (complex), lam and B once (a diagonal
    recurrence: lam is d elements, always resident). Backward: X, H, dH read, dX written,
    lam, B read and their gradients written."""
    c = 2 * s
    w = (d + d * d) * c
    if direction == "forward":
        io = B * T * d * s + B * T * d * c + w
    else:
        io = 2 * B * T * d * s + 2 * B * T * d * c + 2 * w
    return _parts(io, 0, io)


def attention_bytes(direction, B, T, d, s, resident):
    """Attention with projections, the T x T weights materialised. Forward: X (B, T, d) read,
    Wq, Wk, Wv (d, d) once, Y (B, T, d) and A (B, T, T) written (A is kept for the
    backward). Backward: X, A, Y and dY read, the weights read, dX written and the weights'
    gradients written (dA, the same size as A, can be made a tile at a time)."""
    w = 3 * d * d * s
    if direction == "forward":
        io = 2 * B * T * d * s + w + B * T * T * s
    else:
        io = 4 * B * T * d * s + 2 * w + B * T * T * s
    return _parts(io, 0, io)


def tiled_attention_bytes(direction, B, T, d, s, resident):
    """Attention by tiles (``TILE_Q`` query rows at a time), never storing the T x T weights.
    Forward: X read, the weights once, Y and one log-sum-exp L (B, T, float64) written; K and V
    (B, T, d each) read again for every later query tile when they exceed ``resident``.
    Backward: X, Y, L, dY read, dX and the weights' gradients written, the same re-reads."""
    from harness.kernels.attention import TILE_Q
    w = 3 * d * d * s
    tiles = math.ceil(T / min(TILE_Q, T))
    kv = 2 * B * T * d * s
    again = (tiles - 1) * kv if kv > resident else 0
    lse = B * T * 8                                  # L is kept in float64 in either dtype
    if direction == "forward":
        io = 2 * B * T * d * s + w + lse
    else:
        io = 4 * B * T * d * s + 2 * w + lse
    return _parts(io, again, kv if again else io)


def transformer_bytes(direction, B, T, d, s, resident):
    """The post-norm encoder layer: W_in (3 d, d), W_o (d, d), W1 (4 d, d), W2 (d, 4 d) and
    the biases and norms (13 d elements). Forward: X read, Y written, the weights once, and
    the attention grid (``Kernels.grid_elements``: B h T^2) and the feed-forward's hidden
    (B, T, 4 d) written, kept for the backward. Backward: X, the grid, the hidden and dY
    read, the weights read, dX and the weights' gradients written."""
    w = (12 * d * d + 13 * d) * s
    grid = models.get("transformer").kernels.grid_elements(T, B) * s
    hidden = 4 * B * T * d * s
    if direction == "forward":
        io = 2 * B * T * d * s + w + grid + hidden
    else:
        io = 3 * B * T * d * s + 2 * w + grid + hidden
    return _parts(io, 0, io)


def _linear_bytes(own):
    def model(direction, B, T, d, s, resident):
        w = 3 * d * d * s
        extra = own(T, d) * B * s
        if direction == "forward":
            io = 2 * B * T * d * s + w + extra
        else:
            io = 3 * B * T * d * s + 2 * w + extra
        return _parts(io, 0, io)
    return model


la_chunked_bytes = _linear_bytes(lambda T, d: 0)
la_chunked_bytes.__doc__ = (
    "Linear attention by chunks: X read, Wq, Wk, Wv once, Y written; the (d, d + 1) state "
    "between chunks is small and stays resident. Backward: X and dY read, dX and the "
    "weights' gradients written (the forward's pieces recomputed or kept from its last call "
    "are intermediates).")
la_parallel_bytes = _linear_bytes(lambda T, d: T * T)
la_parallel_bytes.__doc__ = (
    "Linear attention in parallel: as the chunked form, and the T x T grid phi(Q) phi(K)^T "
    "written (B T^2 elements).")
la_recurrent_bytes = _linear_bytes(lambda T, d: 0)
la_recurrent_bytes.__doc__ = (
    "Linear attention as a recurrence: as the chunked form; its (d, d + 1) state stays "
    "resident.")

# (family, kernel) -> (bytes model, the traced form whose ``Form.macs`` counts its work)
KERNELS = {
    ("rnn", "default"): (rnn_bytes, "rnn"),
    ("attention", "default"): (attention_bytes, "attention"),
    ("attention", "tiled"): (tiled_attention_bytes, "attention"),
    ("lru", "default"): (lru_bytes, "lru"),
    ("lstm", "default"): (lstm_bytes, "lstm"),
    ("gru", "default"): (gru_bytes, "gru"),
    ("transformer", "default"): (transformer_bytes, "transformer"),
    ("linear_attention", "default"): (la_chunked_bytes, "linear_attention-chunked"),
    ("linear_attention", "parallel"): (la_parallel_bytes, "linear_attention-parallel"),
    ("linear_attention", "recurrent"): (la_recurrent_bytes, "linear_attention"),
}
BACKWARD_FACTOR = 2     # a backward's flops: 2 x its forward's (two products per forward product)
# real multiplications per traced multiplication, by part, where a kernel's operands are complex:
# the LRU's B and lam are (real X times complex B: 2; complex lam times complex h: 4, its
# two additions and + u_t's two then make 8 flops, 2 x 4). Every other part counts 1.
REAL_MULTIPLICATIONS = {
    ("lru", "default"): {"input": 2, "recurrence": 4},
}


def kernel_bytes(family, kernel, direction, batch, T, d, itemsize, resident):
    """The bytes model of one kernel (``KERNELS``): {"io", "reread", "working_set", "bytes"}."""
    model = KERNELS[family, kernel][0]
    parts = model(direction, batch, T, d, itemsize, resident)
    return dict(parts, bytes=parts["io"] + parts["reread"])


def kernel_flops(family, kernel, direction, batch, T, d):
    """2 x the traced form's multiplications (``Form.macs``, every part, each counted in real
    multiplications: ``REAL_MULTIPLICATIONS``) x batch; a backward ``BACKWARD_FACTOR`` x its
    forward (no family counts its backward apart)."""
    form = models.form(KERNELS[family, kernel][1])[1]
    real = REAL_MULTIPLICATIONS.get((family, kernel), {})
    flops = 2 * batch * sum(n * real.get(part, 1) for part, n in form.macs(T, d).items())
    return flops * (BACKWARD_FACTOR if direction == "backward" else 1)


# ----------------------------------------------------------------------------- kernels

def kernel_cases(config=DEFAULT):
    """[(family, kernel, batch, T, d)]: every kernel of ``config.families`` at its benchmark
    sizes (``Compared.cases``; a kernel with none, attention's tiled one, at its family's
    default kernel's), or with ``cases="quick"`` at the smallest of them (by B T d)."""
    out = []
    for name in config.families:
        fam = models.get(name, "families")
        for k in fam.compared:
            if (name, k.name) not in KERNELS:
                raise ValueError(f"no bytes model for the {name} kernel {k.name!r}: add one "
                                 f"to harness.analysis.roofline.KERNELS")
            cases = k.cases or fam.compared[0].cases
            if config.cases == "quick":
                cases = (min(cases, key=lambda c: (c[0] * c[1] * c[2], c)),)
            out.extend((name, k.name, *c) for c in cases)
    return out


def _kernel_calls(name, kname, batch, T, d, dtype, seed):
    fam = models.get(name)
    k = fam.kernel(kname)
    X, W = fam.kernels.inputs(T, d, batch, dtype, seed)
    out = k.forward(X, *W)
    g = (np.random.default_rng([seed, 1]).standard_normal(fam.kernels.primary(out).shape)
         .astype(dtype))
    return {"forward": lambda: k.forward(X, *W), "backward": lambda: k.backward(X, W, out, g)}


def place(family, kernel, direction, batch, T, d, dtype, seconds, lo, hi, ceilings, caches):
    """One row of ``roofline.csv``: the kernel's flops, bytes, intensity, bound and achieved
    rate (``seconds``: the median of its rounds, ``lo``/``hi`` their interval)."""
    s = np.dtype(dtype).itemsize
    b = kernel_bytes(family, kernel, direction, batch, T, d, s, caches["L2"])
    flops = kernel_flops(family, kernel, direction, batch, T, d)
    intensity = flops / b["bytes"]
    level = level_of(b["working_set"], caches)
    roof, kind = bound(intensity, peaks(ceilings)[dtype] * 1e9, bandwidths(ceilings)[level] * 1e9)
    achieved = flops / seconds
    return dict(family=family, kernel=kernel, direction=direction, batch=batch, T=T, d=d,
                dtype=dtype, flops=flops, bytes=b["bytes"], bytes_reread=b["reread"],
                working_set_bytes=b["working_set"], intensity=intensity, bound=roof,
                bound_kind=f"{kind} ({COMPUTE if kind == COMPUTE else level})",
                level=level, seconds=seconds, seconds_lo=lo, seconds_hi=hi,
                achieved=achieved, achieved_lo=flops / hi, achieved_hi=flops / lo,
                fraction=achieved / roof, fraction_lo=flops / hi / roof,
                fraction_hi=flops / lo / roof)


def replace_on(kernels, ceilings):
    """``kernels`` (a roofline.csv frame) placed again on ``ceilings`` from their own timings
    (``seconds``, ``seconds_lo``, ``seconds_hi``): a bytes model or a ceiling changed, the
    kernels were not timed again."""
    caches = ceilings.attrs.get("caches") or usable_caches(cache_sizes()[0])
    cols = ["family", "kernel", "direction", "batch", "T", "d", "dtype", "seconds",
            "seconds_lo", "seconds_hi"]
    rows = [place(*(getattr(r, c) for c in cols), ceilings, caches)
            for r in kernels.itertuples(index=False)]
    out = pd.DataFrame(rows)
    for c in ("rounds", "threads"):
        out[c] = kernels[c].to_numpy()
    return out


def measure_kernels(ceilings, config=DEFAULT, progress=None):
    """``roofline.csv``: one row per (kernel, case, dtype, direction) of ``kernel_cases``,
    each kernel's cases and directions timed in the same interleaved rounds."""
    from harness.infra import machine
    caches = ceilings.attrs.get("caches") or usable_caches(cache_sizes()[0])
    todo = kernel_cases(config)
    rows = []
    with machine.threads(config.threads):
        for n, (name, kname) in enumerate(dict.fromkeys((c[0], c[1]) for c in todo)):
            if progress:
                progress(f"{name} {kname}")
            calls, keys = {}, {}
            for c in todo:
                if (c[0], c[1]) != (name, kname):
                    continue
                for dt in config.dtypes:
                    for direction, f in _kernel_calls(*c, dt, config.seed).items():
                        calls[c, dt, direction] = f
            samples, _ = timing.time_interleaved(calls, config.rounds, config.min_sample_s,
                                                 seed=config.seed + n)
            for (c, dt, direction), x in samples.items():
                med, lo, hi = timing.median_interval(x, seed=config.seed)
                rows.append(place(*c[:2], direction, *c[2:], dt, med, lo, hi, ceilings, caches))
            del calls, samples
    frame = pd.DataFrame(rows)
    frame["rounds"], frame["threads"] = config.rounds, config.threads
    return frame


# ----------------------------------------------------------------------------- crossover

def _rate_at(rows, T):
    """Attention's achieved rate at T, interpolated linearly in log T between the rows'
    (T, achieved), held at the nearest sampled T outside them."""
    rows = rows.sort_values("T")
    return float(np.exp(np.interp(math.log(T), np.log(rows["T"].to_numpy(float)),
                                  np.log(rows["achieved"].to_numpy(float)))))


def predicted_crossover(kernels, ceilings, d, dtype="float64", T_grid=None):
    """Where T dependent RNN steps and attention's grid and mix take the same time at width d,
    from their places on the roofline; {} when the roofline lacks either at d.

    ``rnn_step_s``: the RNN forward's seconds per step at its benchmark size (its achieved rate
    at its intensity; each step waits for the last: the latency chain), against
    ``rnn_step_bound_s``, a step at its roofline bound, and ``rnn_step_read_s``, one read of
    W_hh (d^2 s bytes) at the bandwidth of the level it fits in (``w_hh_level``): the bytes
    model's claim that a step must at least read W_hh, checked against the time a step
    takes. Attention's time at T: the lessons'
    products (``Tracing.lesson_parts``: grid and mix) at the rate its forward achieves at T
    (interpolated in log T between its benchmark sizes), or at its bound (``bound_T``, both
    kernels at their bounds). Crossings by ``stats.log_crossing`` on ``T_grid``.
    """
    rnn = kernels[(kernels.family == models.RECURRENCE) & (kernels.kernel == "default")
                  & (kernels.direction == "forward") & (kernels.d == d) & (kernels.batch == 1)
                  & (kernels.dtype == dtype)]
    att = kernels[(kernels.family == models.ATTENTION) & (kernels.kernel == "default")
                  & (kernels.direction == "forward") & (kernels.d == d) & (kernels.batch == 1)
                  & (kernels.dtype == dtype)]
    if not len(rnn) or not len(att):
        return {}
    r = rnn.sort_values("T").iloc[-1]
    step = r.seconds / r["T"]
    step_bound = r.flops / r["bound"] / r["T"]
    fam = models.get(models.ATTENTION)
    form = fam.tracing.forms[0]
    caches = ceilings.attrs.get("caches") or usable_caches(cache_sizes()[0])
    peak, bw = peaks(ceilings)[dtype] * 1e9, bandwidths(ceilings)
    s = np.dtype(dtype).itemsize
    T_grid = np.unique(np.geomspace(2, 1 << 16, 400).astype(int)) if T_grid is None else T_grid

    def att_flops(T):
        m = form.macs(int(T), d)
        return 2 * sum(m[p] for p in fam.tracing.lesson_parts)

    def att_bound(T):
        b = attention_bytes("forward", 1, int(T), d, s, caches["L2"])
        b_grid = b["io"] - 3 * d * d * s             # no projections: no weights to read
        return bound(att_flops(T) / b_grid, peak, bw[level_of(b_grid, caches)] * 1e9)[0]
    t_rnn = T_grid * step
    t_att = np.array([att_flops(T) / _rate_at(att, T) for T in T_grid])
    t_rnn_b = T_grid * step_bound
    t_att_b = np.array([att_flops(T) / att_bound(T) for T in T_grid])
    w_hh = d * d * s                                 # the step's one read of W_hh ...
    read = w_hh / (bw[level_of(w_hh, caches)] * 1e9)   # ... at the bandwidth of its level
    return dict(rnn_T=int(r["T"]), rnn_step_s=step, rnn_step_bound_s=step_bound,
                rnn_step_read_s=read, w_hh_level=level_of(w_hh, caches),
                rnn_fraction=float(r.fraction),
                attention_T=" ".join(str(int(t)) for t in sorted(att["T"])),
                predicted_T=log_crossing(T_grid, np.log(t_att / t_rnn)),
                bound_T=log_crossing(T_grid, np.log(t_att_b / t_rnn_b)))


def measured_crossover(d, config=DEFAULT):
    """The crossover of attention's grid and mix over the RNN, as ``harness.analysis.walltime``
    measures it at width d over ``config.crossover_T`` (its row of ``measured_crossover``)."""
    from harness.analysis import walltime
    from harness.infra.config import WallConfig
    wc = WallConfig(T_values=tuple(config.crossover_T), d=d, threads=config.threads,
                    rounds=config.rounds, min_sample_s=config.min_sample_s, seed=config.seed)
    wall = walltime.measure_wall_times(wc)
    x = walltime.measured_crossover(wall, wc)
    return x[x.variant == models.ATTENTION].iloc[0]


def crossover(kernels, ceilings, config=DEFAULT):
    """``roofline_crossover.csv``: one row per d of ``config.crossover_ds``: the counted
    crossover (2 T d^2 = 2 T^2 d), the roofline's predictions (``predicted_crossover``) and
    the measured one with its 95 % interval (``measured_crossover``)."""
    rows = []
    for d in config.crossover_ds:
        dtype = "float64" if "float64" in config.dtypes else config.dtypes[0]
        p = predicted_crossover(kernels, ceilings, d, dtype)
        m = measured_crossover(d, config)
        rows.append(dict(d=d, dtype=dtype, counted_T=float(m.counted_T),
                         bound_T=p.get("bound_T", math.nan),
                         predicted_T=p.get("predicted_T", math.nan),
                         measured_T=float(m.measured_T), measured_T_lo=float(m.measured_T_lo),
                         measured_T_hi=float(m.measured_T_hi),
                         rnn_step_s=p.get("rnn_step_s", math.nan),
                         rnn_step_bound_s=p.get("rnn_step_bound_s", math.nan),
                         rnn_step_read_s=p.get("rnn_step_read_s", math.nan),
                         w_hh_level=p.get("w_hh_level", ""),
                         rnn_fraction=p.get("rnn_fraction", math.nan),
                         rnn_T=p.get("rnn_T", math.nan),
                         attention_T=p.get("attention_T", "")))
    return pd.DataFrame(rows)


def run(config=DEFAULT, progress=None):
    """(ceilings, kernels, crossover): the three frames ``harness roofline`` writes."""
    say = progress or (lambda msg: None)
    say("ceilings: GEMM, FMA loop, bandwidth per level")
    ceil = measure_ceilings(config)
    kern = measure_kernels(ceil, config, progress=say)
    say("crossover: predicted and measured")
    cross = crossover(kern, ceil, config)
    return ceil, kern, cross


def check_config(config):
    """ValueError naming the field of ``config`` that cannot be run."""
    if not config.dtypes or any(dt not in ("float32", "float64") for dt in config.dtypes):
        raise ValueError(f"dtypes must be float32 and/or float64, got {list(config.dtypes)!r}.")
    if not isinstance(config.rounds, int) or config.rounds < 3:
        raise ValueError(f"rounds must be at least {stats.MIN_ROUNDS} (an interval needs "
                         f"them), got {config.rounds!r}.")
    if not config.families:
        raise ValueError("families must name at least one registered family.")
    for name in config.families:
        models.get(name, "families")
    if not config.crossover_ds or any(not isinstance(d, int) or d < 1 for d in config.crossover_ds):
        raise ValueError(f"crossover_ds must be positive widths, "
                         f"got {list(config.crossover_ds)!r}.")
    return config

