"""Tiled attention against PyTorch's SDPA with and without a neighbour on the other CPU.

What it measures (issue #27, "Speed that does not survive a neighbour"): at T = 4096, d = 64,
float32, one thread, projections included on both sides and Y passed to the backward (as
``harness compare --long`` calls them), the harness's tiled attention (``forward(...,
return_weights=False)`` and ``backward`` from L) against ``torch.nn.functional.
scaled_dot_product_attention`` with autograd, for several tile sizes (the module constants
``TILE_Q, TILE_K``, set as ``benchmarks/bench_kernels.py``'s ``AttentionTiles`` sets them), while
a neighbour process pinned to the other CPU is switched on and off (SIGCONT / SIGSTOP) between
blocks of one round:

* ``off``: no neighbour of ours (whatever else the machine runs still runs: see ``load1``);
* ``compute``: a float64 192 x 192 matmul loop, 864 KiB, in the neighbour's own L2 (AVX-512 FMAs;
  it contends for the core's power/frequency budget and, if the host maps both vCPUs onto one
  physical core, for the core itself);
* ``l3``: a copy between two 16 MiB arrays: misses its L2, lives in the shared L3;
* ``memory``: a copy between two 256 MiB arrays: streams from DRAM, through the shared L3.

This process is pinned to CPU 0, the neighbour to CPU 1. In each round every condition gets one
block, in a shuffled order; in each block every timed item runs once, in a shuffled order: the
harness's forward and forward+backward for each tile size, torch's forward and forward+backward,
and the parts of the harness's forward at its default tiles (the tiled kernel alone on
projected Q, K, V; its two products per tile pair alone, on its BLAS; its exps alone, the same
T^2 of them, with the row maxima and sums, over one tile; the fingerprints of X and the weights
that the kept projections are checked by) beside torch's (SDPA alone on the same Q, K, V; the
same tile products through ``torch.mm``, i.e. torch's BLAS; the same exps through torch).
Each item's wall time (``perf_counter``) and CPU time (``thread_time``; this thread does all
the work at one thread) are kept: wall - CPU is time spent descheduled (the machine's other
load), CPU alone is what the caches and the memory bus cost.

Reported (``--csv``, one row per (tiles, neighbour, part, clock)): the median seconds; the
speed-up torch / harness (paired by block: the same block's torch sample) with its 95 %
bootstrap interval over rounds (``harness.infra.stats.bootstrap_interval``); and the slowdown
of each part under the neighbour, median(condition) / median(off), paired by round, with its
interval. ``load1`` is the mean 1-minute load average over the blocks of that condition.

Run (12 rounds: 6 min at load 9-14 on this 2-CPU machine; run nothing of yours beside it):

    .venv/bin/python tools/neighbour_attention.py --rounds 12 --csv docs/neighbour_attention.csv

``--raw FILE`` also writes every sample. Thread settings are made before NumPy is imported.
"""

from __future__ import annotations

import os

for _v in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse
import math
import re
import signal
import subprocess
import sys
import time

import numpy as np

NEIGHBOURS = {
    "compute": ("import numpy as np\n"
                "a = np.random.default_rng(0).standard_normal((192, 192))\n"
                "b = a.copy(); c = a.copy()\n"
                "while True:\n    np.dot(a, b, out=c)\n"),
    "l3": ("import numpy as np\n"
           "a = np.ones(16 << 17); b = np.empty_like(a)\n"          # 16 MiB each, float64
           "while True:\n    np.copyto(b, a); np.copyto(a, b)\n"),
    "memory": ("import numpy as np\n"
               "a = np.ones(256 << 17); b = np.empty_like(a)\n"      # 256 MiB each
               "while True:\n    np.copyto(b, a); np.copyto(a, b)\n"),
}
TILES = ("128x256", "256x256", "256x512", "512x512")
T, D, DTYPE = 4096, 64, "float32"


def _cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])          # utime + stime, clock ticks


class Neighbours:
    """The neighbour processes, started stopped and pinned to ``cpu``; ``switch(kind)`` lets one
    run (None: none). Only the processes started here are signalled, by their pids."""

    def __init__(self, kinds, cpu):
        env = dict(os.environ)
        self.procs = {}
        for k in kinds:
            p = subprocess.Popen([sys.executable, "-c", NEIGHBOURS[k]], env=env,
                                 preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
            self.procs[k] = p
        time.sleep(1.5)                               # imports done, arrays allocated
        for p in self.procs.values():
            p.send_signal(signal.SIGSTOP)
        self.on = None

    def switch(self, kind, settle=0.3):
        for k, p in self.procs.items():
            if k != kind:
                p.send_signal(signal.SIGSTOP)
        if kind is not None:
            self.procs[kind].send_signal(signal.SIGCONT)
            time.sleep(settle)                        # its working set back in the caches
        self.on = kind

    def ticks(self):
        return _cpu_ticks(self.procs[self.on].pid) if self.on else 0

    def close(self):
        for p in self.procs.values():
            p.send_signal(signal.SIGCONT)
            p.terminate()
        for p in self.procs.values():
            p.wait(timeout=10)


def items(at, torch, tiles):
    """{name: (tiles or None, callable)} of everything timed in one block."""
    import torch.nn.functional as F
    from harness.analysis import compare
    from harness.kernels import vmath
    from numba import njit

    case = compare.Case("attention", 1, T, D, DTYPE, "tiled")
    impls = compare.implementations(case)            # the very callables compare --long times
    h, t = impls["harness"], impls["torch"]
    fw, fb = compare.SLOTS["forward"], compare.SLOTS["forward+backward"]

    def with_tiles(shape, fn):
        tq, tk = (int(n) for n in shape.split("x"))

        def call():
            at.TILE_Q, at.TILE_K = tq, tk
            return fn()
        return call

    out = {}
    for s in tiles:
        out[f"harness forward {s}"] = (s, with_tiles(s, h[fw]))
        out[f"harness forward+backward {s}"] = (s, with_tiles(s, h[fb]))
    out["torch forward"] = (None, t[fw])
    out["torch forward+backward"] = (None, t[fb])

    # the parts of the harness's forward at its default tiles, and torch's SDPA alone
    from harness.models.attention import inputs
    X, W = inputs(T, D, 1, DTYPE, 0)
    tq, tk = at.TILE_Q, at.TILE_K
    default = f"{tq}x{tk}"
    Q, K, V = (X @ w for w in W)
    Q3, K3, V3 = (a[None].copy() for a in (Q, K, V))
    Y = np.empty((1, T, D), np.float32)
    L = np.empty((1, T))
    work = np.empty(tq * tk + 2 * tq * D, np.float32)
    stats_ = np.empty(3 * tq)
    bits = np.empty(tk, np.int64)
    scale = 1.0 / math.sqrt(D)

    def kernel():
        at._attend_forward_tiled(Q3, K3, V3, scale, False, tq, tk, Y, L, work, stats_, bits)

    @njit(cache=False, error_model="numpy")
    def exps(S, n_tiles, scale, bits):
        # the forward's exp pass, T^2 of them, on one (tq, tk) tile (row max, exp, row sum)
        tot = 0.0
        for _ in range(n_tiles):
            for r in range(S.shape[0]):
                row = S[r]
                m = vmath.row_max(row, row.shape[0])
                vmath.exp_shifted_inplace(row, row.shape[0], m, scale, bits)
                tot += vmath.row_sum(row, row.shape[0])
        return tot

    S0 = (Q[:tq] @ K[:tk].T).astype(np.float32)
    S = S0.copy()
    n_tiles = (T // tq) * (T // tk)

    def exp_pass():
        S[:] = S0
        exps(S, n_tiles, scale, bits)

    exp_pass()                                        # compile
    Xc = np.ascontiguousarray(X)

    def fingerprints():
        for a in (Xc, *W):
            at._fingerprint(a)

    tq4 = [torch.from_numpy(a).reshape(1, 1, T, D) for a in (Q, K, V)]

    def sdpa():
        with torch.no_grad():
            F.scaled_dot_product_attention(*tq4)

    @njit(cache=False)
    def tile_gemms(Q, K, V, S, PV, tq, tk):
        # the forward's two products per (query tile, key tile), on the harness's BLAS
        for i0 in range(0, Q.shape[0], tq):
            for j0 in range(0, K.shape[0], tk):
                np.dot(Q[i0:i0 + tq], K[j0:j0 + tk].T, S)
                np.dot(S, V[j0:j0 + tk], PV)

    S1, PV1 = np.empty((tq, tk), np.float32), np.empty((tq, D), np.float32)
    tile_gemms(Q, K, V, S1, PV1, tq, tk)             # compile
    Qt, Kt, Vt = (torch.from_numpy(a) for a in (Q, K, V))
    St, PVt, Et = torch.empty(tq, tk), torch.empty(tq, D), torch.empty(tq, tk)
    S0t = torch.from_numpy(S0)

    def torch_tile_gemms():                           # the same products on torch's BLAS
        for i0 in range(0, T, tq):
            for j0 in range(0, T, tk):
                torch.mm(Qt[i0:i0 + tq], Kt[j0:j0 + tk].t(), out=St)
                torch.mm(St, Vt[j0:j0 + tk], out=PVt)

    def torch_exps():                                 # the same T^2 exps (max, exp, sum) in torch
        for _ in range(n_tiles):
            torch.sub(S0t, S0t.amax(1, keepdim=True), out=Et)
            Et.mul_(scale).exp_()
            Et.sum(1)

    out[f"harness tile gemms {default}"] = (default, lambda: tile_gemms(Q, K, V, S1, PV1, tq, tk))
    out["torch tile gemms"] = (None, torch_tile_gemms)
    out["torch exps"] = (None, torch_exps)
    out[f"harness forward kernel {default}"] = (default, kernel)
    out[f"harness exps {default}"] = (default, exp_pass)
    out[f"harness fingerprints {default}"] = (default, fingerprints)
    out["torch sdpa forward"] = (None, sdpa)
    for _, fn in out.values():                        # compile and touch
        fn()
    return out


def run(rounds, kinds, tiles, seed=0, log=print):
    from harness.kernels import attention as at
    from harness.infra import machine
    import torch

    os.sched_setaffinity(0, {0})
    machine.set_threads(1)
    torch.set_num_threads(1)
    saved = at.TILE_Q, at.TILE_K
    todo = items(at, torch, tiles)
    at.TILE_Q, at.TILE_K = saved
    conds = ["off", *kinds]
    rows = []
    rng = np.random.default_rng(seed)
    nb = Neighbours(kinds, cpu=1)
    try:
        for r in range(rounds):
            for ci in rng.permutation(len(conds)):
                cond = conds[ci]
                nb.switch(None if cond == "off" else cond)
                load = os.getloadavg()[0]
                n0, w0 = nb.ticks(), time.perf_counter()
                names = list(todo)
                for i in rng.permutation(len(names)):
                    name = names[i]
                    fn = todo[name][1]
                    c0, t0 = time.thread_time(), time.perf_counter()
                    fn()
                    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
                    at.TILE_Q, at.TILE_K = saved
                    rows.append({"round": r, "neighbour": cond, "item": name, "wall_s": wall,
                                 "cpu_s": cpu, "load1": load})
                share = (nb.ticks() - n0) / os.sysconf("SC_CLK_TCK") / (time.perf_counter() - w0)
                for row in rows[-len(names):]:
                    row["neighbour_cpu_share"] = share if cond != "off" else 0.0
            last = [x for x in rows if x["round"] == r]
            log(f"round {r + 1}/{rounds}: load {os.getloadavg()[0]:.2f}, "
                f"{sum(x['wall_s'] for x in last):.1f} s timed")
    finally:
        nb.switch(None)
        nb.close()
        at.TILE_Q, at.TILE_K = saved
    return rows


def summarise(raw):
    """The tidy summary: one row per (tiles, neighbour, part, clock)."""
    import pandas as pd
    from harness.infra import stats

    df = pd.DataFrame(raw)
    rounds = sorted(df["round"].unique())
    conds = list(dict.fromkeys(["off", *df["neighbour"].unique()]))

    def samples(item, cond, clock):
        s = df[(df["item"] == item) & (df["neighbour"] == cond)].set_index("round")[clock]
        return s.reindex(rounds).to_numpy()

    def ratio(a, b, seed):
        lo, hi = stats.bootstrap_interval(
            lambda x, y: np.median(x, axis=1) / np.median(y, axis=1), a, b, seed=seed)
        return float(np.median(a) / np.median(b)), lo, hi

    out = []
    for item in dict.fromkeys(df["item"]):
        words = item.split()
        shape = words[-1] if re.fullmatch(r"\d+x\d+", words[-1]) else ""
        part = " ".join(words[:-1] if shape else words)
        torch_item = {"harness forward": "torch forward",
                      "harness forward+backward": "torch forward+backward"}.get(part)
        for cond in conds:
            for clock in ("wall_s", "cpu_s"):
                a = samples(item, cond, clock)
                row = {"tiles": shape, "neighbour": cond, "part": part, "clock": clock[:-2],
                       "median_s": float(np.median(a)), "rounds": len(a),
                       "load1": float(df[df["neighbour"] == cond]["load1"].mean()),
                       "neighbour_cpu_share": float(df[df["neighbour"] == cond]
                                                    ["neighbour_cpu_share"].mean())}
                row["slowdown"], row["slowdown_lo"], row["slowdown_hi"] = (
                    ratio(a, samples(item, "off", clock), 1) if cond != "off" else (1.0, 1.0, 1.0))
                if torch_item:
                    row["speedup"], row["speedup_lo"], row["speedup_hi"] = ratio(
                        samples(torch_item, cond, clock), a, 2)
                else:
                    row["speedup"] = row["speedup_lo"] = row["speedup_hi"] = math.nan
                out.append(row)
    return pd.DataFrame(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--neighbours", nargs="+", default=list(NEIGHBOURS), choices=list(NEIGHBOURS))
    p.add_argument("--tiles", nargs="+", default=list(TILES))
    p.add_argument("--csv", default="docs/neighbour_attention.csv")
    p.add_argument("--raw", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from-raw", default=None, help="summarise a --raw file again, timing nothing")
    a = p.parse_args(argv)
    import pandas as pd
    if a.from_raw:
        raw = pd.read_csv(a.from_raw).to_dict("records")
        a.rounds = 1 + max(x["round"] for x in raw)
        start = end = None
    else:
        start = os.getloadavg()
        raw = run(a.rounds, a.neighbours, a.tiles, a.seed, log=lambda m: print(m, file=sys.stderr))
        end = os.getloadavg()
    if a.raw:
        pd.DataFrame(raw).to_csv(a.raw, index=False)
    summary = summarise(raw)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "harness/kernels"],
                           capture_output=True, text=True).stdout.strip().replace("\n", ";")
    line = (f"# tools/neighbour_attention.py --rounds {a.rounds}: T = {T}, d = {D}, {DTYPE}, "
            f"one thread on CPU 0, neighbour on CPU 1; commit {head}"
            f"{' (working tree: ' + dirty + ')' if dirty else ''}; load average "
            f"{start[0]:.2f} {start[1]:.2f} {start[2]:.2f} at the start, "
            f"{end[0]:.2f} {end[1]:.2f} {end[2]:.2f} at the end\n") if start else None
    if line is None:                                  # --from-raw: the timed run's own line
        with open(a.csv) as f:
            line = f.readline()
    with open(a.csv, "w") as f:
        f.write(line)
        summary.to_csv(f, index=False, float_format="%.6g")
    print(summary.to_string(), file=sys.stderr)


if __name__ == "__main__":
    main()
