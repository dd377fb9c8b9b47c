"""The harness kernels against what a user would otherwise reach for.

Peers, timed in this process, interleaved, with the same thread settings:

* ``numpy``: the plain NumPy models of ``harness.reference`` (a step loop for the
  RNN; matrix products and a vectorised softmax for attention);
* ``torch``: ``torch.nn.RNN`` and ``scaled_dot_product_attention`` with
  projections, and autograd for the backward (skipped when PyTorch is missing);
* ``gemm``: for attention, its matrix products alone (BLAS into preallocated
  buffers), the floor that the kernel's softmax overhead is measured against.

Every sample is the mean of ``number`` calls; each implementation gets
``repeats`` samples, taken round-robin so that drift on a shared machine hits
every implementation alike, and the median is reported. Speed is a ratio:
peer time / harness time, measured side by side.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import numpy as np
import pandas as pd

from harness import attention, machine, reference, rnn
from harness._blas import matmul
from harness._io import UsageError, atomic_write_csv, output_dir

HELP = "time the kernels against plain NumPy and PyTorch, as ratios"
DESCRIPTION = """\
Time the harness kernels against plain NumPy and PyTorch (when installed), in one
process, interleaved, with the same thread settings, and write the ratio
peer time / harness time for each case, forward and backward, with the targets
of the benchmark issue.

example:
  harness compare --threads 1 --out reports/compare
  harness compare --quick            # tiny sizes, seconds: a smoke test
"""


@dataclasses.dataclass(frozen=True)
class Case:
    model: str          # "rnn" or "attention"
    batch: int
    T: int
    d: int
    dtype: str          # "float32" or "float64"


@dataclasses.dataclass(frozen=True)
class CompareConfig:
    rnn_d: tuple = (64, 256, 512)          # RNN, batch 1, T = 1000 (the targets)
    rnn_T: int = 1000
    rnn_batched_d: tuple = (64, 256)       # RNN, batch 32
    rnn_batch: int = 32
    attention_T: tuple = (128, 512, 2048)
    attention_d: tuple = (64, 256)
    dtypes: tuple = ("float32", "float64")
    repeats: int = 7                       # samples per implementation; the median is kept
    min_sample_s: float = 0.02             # each sample runs enough calls to last this long
    threads: int = 1                       # BLAS, Numba and torch threads, set together
    seed: int = 0

    def cases(self):
        for dt in self.dtypes:
            for d in self.rnn_d:
                yield Case("rnn", 1, self.rnn_T, d, dt)
            for d in self.rnn_batched_d:
                yield Case("rnn", self.rnn_batch, self.rnn_T, d, dt)
            for T in self.attention_T:
                for d in self.attention_d:
                    yield Case("attention", 1, T, d, dt)


QUICK = CompareConfig(rnn_d=(8,), rnn_T=16, rnn_batched_d=(8,), rnn_batch=3,
                      attention_T=(16,), attention_d=(8,), repeats=3, min_sample_s=0.001)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# --------------------------------------------------------------- implementations

def _rnn_impls(case, rng, torch):
    """(inputs, {impl: (forward, backward, outputs)}) for one RNN case."""
    dt = np.dtype(case.dtype)
    d, T, B = case.d, case.T, case.batch
    shape = (T, d) if B == 1 else (B, T, d)
    X = rng.normal(size=shape).astype(dt)
    W_xh = (rng.normal(size=(d, d)) / np.sqrt(d)).astype(dt)
    W_hh = (rng.normal(size=(d, d)) * (0.9 / np.sqrt(d))).astype(dt)
    b = (rng.normal(size=d) * 0.1).astype(dt)
    H = rnn.forward(X, W_xh, W_hh, b)
    dH = rng.normal(size=H.shape).astype(dt)
    impls = {
        "harness": (lambda: rnn.forward(X, W_xh, W_hh, b),
                    lambda: rnn.backward(X, H, W_xh, W_hh, dH),
                    lambda: (rnn.forward(X, W_xh, W_hh, b), rnn.backward(X, H, W_xh, W_hh, dH).dX)),
        "numpy": (lambda: reference.rnn_forward(X, W_xh, W_hh, b),
                  lambda: reference.rnn_backward(X, H, W_xh, W_hh, dH),
                  lambda: (reference.rnn_forward(X, W_xh, W_hh, b),
                           reference.rnn_backward(X, H, W_xh, W_hh, dH)[0])),
    }
    if torch is not None:
        tdt = getattr(torch, case.dtype)
        m = torch.nn.RNN(d, d, nonlinearity="tanh", bias=True, batch_first=True).to(tdt)
        with torch.no_grad():
            m.weight_ih_l0.copy_(torch.from_numpy(W_xh))
            m.weight_hh_l0.copy_(torch.from_numpy(W_hh))
            m.bias_ih_l0.copy_(torch.from_numpy(b))
            m.bias_hh_l0.zero_()
        Xt = torch.from_numpy(X if B > 1 else X[None]).clone()

        def t_forward():
            with torch.no_grad():
                return m(Xt)[0]

        Xg = Xt.clone().requires_grad_(True)
        out = m(Xg)[0]
        g = torch.from_numpy(dH if B > 1 else dH[None])

        def t_backward():
            out.backward(g, retain_graph=True)

        def t_outputs():
            Xg.grad = None
            out.backward(g, retain_graph=True)
            dX = Xg.grad.numpy()
            return t_forward().numpy().reshape(H.shape), dX.reshape(X.shape)

        impls["torch"] = (t_forward, t_backward, t_outputs)
    return impls


def _attention_impls(case, rng, torch):
    dt = np.dtype(case.dtype)
    d, T = case.d, case.T
    X = rng.normal(size=(T, d)).astype(dt)
    Wq, Wk, Wv = ((rng.normal(size=(d, d)) / np.sqrt(d)).astype(dt) for _ in range(3))
    Y, A = attention.forward(X, Wq, Wk, Wv)
    dY = rng.normal(size=Y.shape).astype(dt)
    impls = {
        "harness": (lambda: attention.forward(X, Wq, Wk, Wv),
                    lambda: attention.backward(X, Wq, Wk, Wv, A, dY),
                    lambda: (attention.forward(X, Wq, Wk, Wv)[0],
                             attention.backward(X, Wq, Wk, Wv, A, dY).dX)),
        "numpy": (lambda: reference.attention_forward(X, Wq, Wk, Wv),
                  lambda: reference.attention_backward(X, Wq, Wk, Wv, A, dY),
                  lambda: (reference.attention_forward(X, Wq, Wk, Wv)[0],
                           reference.attention_backward(X, Wq, Wk, Wv, A, dY)[0])),
    }
    # the floor: the five matrix products of the forward, nothing else
    Q, K, V, Yb = (np.empty((T, d), dtype=dt) for _ in range(4))
    S = np.empty((T, T), dtype=dt)

    def gemm_forward():      # on the BLAS the kernel uses (see harness._blas)
        matmul(X, Wq, Q)
        matmul(X, Wk, K)
        matmul(X, Wv, V)
        matmul(Q, K.T, S)
        matmul(S, V, Yb)

    impls["gemm"] = (gemm_forward, None, None)
    if torch is not None:
        F = torch.nn.functional
        Xt, Wqt, Wkt, Wvt = (torch.from_numpy(a) for a in (X, Wq, Wk, Wv))

        def t_forward():
            with torch.no_grad():
                return F.scaled_dot_product_attention((Xt @ Wqt)[None], (Xt @ Wkt)[None],
                                                      (Xt @ Wvt)[None])[0]

        Xg = Xt.clone().requires_grad_(True)
        out = F.scaled_dot_product_attention((Xg @ Wqt)[None], (Xg @ Wkt)[None], (Xg @ Wvt)[None])[0]
        g = torch.from_numpy(dY)

        def t_backward():
            out.backward(g, retain_graph=True)

        def t_outputs():
            Xg.grad = None
            out.backward(g, retain_graph=True)
            return t_forward().numpy(), Xg.grad.numpy()

        impls["torch"] = (t_forward, t_backward, t_outputs)
    return impls


def implementations(case, seed=0):
    """The callables for one case: {impl: (forward, backward or None, outputs or None)}.

    ``outputs()`` returns (forward output, dX) so that tests can check that every
    peer computes the same thing as the harness.
    """
    rng = np.random.default_rng(seed)
    build = _rnn_impls if case.model == "rnn" else _attention_impls
    return build(case, rng, _torch())


# ------------------------------------------------------------------------ timing

def _calibrate(fn, min_sample_s):
    """Calls per sample so that one sample lasts about min_sample_s (after a warm-up)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    return max(1, int(np.ceil(min_sample_s / max(once, 1e-9))))


def _time_round_robin(fns, repeats, min_sample_s):
    numbers = {k: _calibrate(f, min_sample_s) for k, f in fns.items()}
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():           # interleaved: drift hits every impl alike
            n = numbers[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[k].append((time.perf_counter() - t0) / n)
    return samples, numbers


GEMM_FLOOR_CASE = (2048, 256)     # attention (T, d) that must run within 1.3x of its GEMMs
GEMM_FLOOR_RATIO = 1.3


def _target(case, direction):
    """(speed-up over the fastest peer required, max harness/GEMM ratio or None, words)."""
    if case.model == "rnn" and case.batch == 1:
        return 1.5, None, "at least 1.5x faster than the fastest peer"
    if case.model == "attention" and direction == "forward" and (case.T, case.d) == GEMM_FLOOR_CASE:
        return 1.0, GEMM_FLOOR_RATIO, ("at least as fast as the fastest peer, and within "
                                       f"{GEMM_FLOOR_RATIO}x of its matrix products alone")
    return 1.0, None, "at least as fast as the fastest peer"


def run_comparison(config=CompareConfig(), progress=None):
    """Time every case; return (timings, summary) DataFrames.

    ``timings`` has one row per (case, direction, impl) with the median time and
    the ratio impl / harness. ``summary`` has one row per (case, direction) with
    the speed-up over each peer (peer time / harness time), the target and
    whether it is met.
    """
    torch = _torch()
    machine.set_threads(config.threads)
    if torch is not None:
        torch.set_num_threads(config.threads)
    env = machine.describe()
    rows, summary = [], []
    cases = list(config.cases())
    for n, case in enumerate(cases, 1):
        if progress:
            progress(f"[{n}/{len(cases)}] {case.model} B={case.batch} T={case.T} d={case.d} {case.dtype}")
        impls = implementations(case, config.seed)
        for direction, slot in (("forward", 0), ("backward", 1)):
            fns = {k: fs[slot] for k, fs in impls.items() if fs[slot] is not None}
            samples, numbers = _time_round_robin(fns, config.repeats, config.min_sample_s)
            med = {k: float(np.median(s)) for k, s in samples.items()}
            for k, s in samples.items():
                rows.append({**dataclasses.asdict(case), "direction": direction, "impl": k,
                             "median_s": med[k], "min_s": float(np.min(s)),
                             "repeats": len(s), "number": numbers[k],
                             "ratio_to_harness": med[k] / med["harness"]})
            peers = {k: t for k, t in med.items() if k in ("numpy", "torch")}
            fastest = min(peers, key=peers.get)
            need, floor, words = _target(case, direction)
            speedup = peers[fastest] / med["harness"]
            row = {**dataclasses.asdict(case), "direction": direction,
                   "harness_s": med["harness"], "fastest_peer": fastest,
                   "speedup_vs_fastest": speedup,
                   "speedup_vs_numpy": peers["numpy"] / med["harness"],
                   "speedup_vs_torch": peers["torch"] / med["harness"] if "torch" in peers else np.nan,
                   "target": words,
                   "met": bool(speedup >= need and peers["numpy"] >= med["harness"])}
            if "gemm" in med:
                row["harness_over_gemm"] = med["harness"] / med["gemm"]
                if floor is not None:
                    row["met"] = row["met"] and bool(row["harness_over_gemm"] <= floor)
            summary.append(row)
    timings = pd.DataFrame(rows)
    summary = pd.DataFrame(summary)
    for k in ("blas_threads", "numba_threads", "OPENBLAS_CORETYPE"):
        timings[k] = env[k]
        summary[k] = env[k]
    timings["torch_threads"] = torch.get_num_threads() if torch is not None else np.nan
    return timings, summary


def format_summary(summary):
    cols = ["model", "batch", "T", "d", "dtype", "direction", "harness_s", "fastest_peer",
            "speedup_vs_fastest", "speedup_vs_numpy", "speedup_vs_torch", "met"]
    if "harness_over_gemm" in summary:
        cols.insert(-1, "harness_over_gemm")
    view = summary[cols].copy()
    view["harness_s"] = (view["harness_s"] * 1e3).map("{:.3f} ms".format)
    return view.to_string(index=False, float_format=lambda x: f"{x:.2f}")


# ----------------------------------------------------------------------------- CLI

def add_arguments(p):
    p.add_argument("--out", default="reports/compare", help="directory for compare.csv and "
                   "compare_summary.csv (default: %(default)s)")
    p.add_argument("--threads", type=int, default=CompareConfig.threads,
                   help="BLAS, Numba and torch threads, set together (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=CompareConfig.repeats,
                   help="samples per implementation, round-robin (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the machinery only")


def run(args):
    ncpu = os.cpu_count() or 1
    if not 1 <= args.threads <= ncpu:
        raise UsageError(f"--threads: must be between 1 and {ncpu} (this machine's cores), "
                         f"got {args.threads}")
    if args.repeats < 1:
        raise UsageError(f"--repeats: must be at least 1, got {args.repeats}")
    with output_dir(args.out) as out:
        return _run(args, out)


def _run(args, out):
    base = QUICK if args.quick else CompareConfig()
    config = dataclasses.replace(base, threads=args.threads, repeats=args.repeats)
    if _torch() is None:
        print("PyTorch is not installed: comparing against NumPy only "
              "(pip install torch==2.13.0 to add it).", file=sys.stderr)
    timings, summary = run_comparison(config, progress=lambda m: print(m, file=sys.stderr))
    atomic_write_csv(timings, out / "compare.csv")
    atomic_write_csv(summary, out / "compare_summary.csv")
    print(format_summary(summary))
    print(f"\nwrote {out / 'compare.csv'} and {out / 'compare_summary.csv'}")
    return 0
