"""The gate's counting stage: instructions per call of every kernel point, under Valgrind.

A time depends on the neighbours, the clock and where the scheduler puts a process; the
number of instructions a call executes does not. ``count(trees)`` runs each tree's
``Kernels`` points (the points ``tools/bench_gate.py`` times) in one process under
Callgrind, and compares their instructions per call (``Ir``), with the simulated cache's
references and misses beside them with ``count(cache_sim=True)`` (the gate leaves it off:
its cost under Valgrind is not measured yet):

1. Each tree is first run natively by the same worker (no Valgrind; the client requests
   below are then no-ops): it compiles the tree's Numba cache for the CPU that Valgrind
   presents. Valgrind's virtual CPU has no AVX-512, and Numba would otherwise compile
   every kernel again under it (minutes). ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES``
   (``CPU``) pin both runs to Haswell's AVX2, so the native run's cache is the one loaded
   under Valgrind. That is not the code that ships on an AVX-512 machine: the counts gate
   the work a commit asks for, the timing stage the speed it gets.
2. Under ``valgrind --tool=callgrind --instr-atstart=no`` the process starts, imports and
   sets every point up uninstrumented (Valgrind's cheapest mode). For each point it then
   calls the method ``WARM`` times, switches instrumentation on, and measures regions by
   client requests (``ClientRequest``: Valgrind's magic instruction sequence, run from an
   executable page; no compiler, no header): zero the counters, dump them at once (an empty
   region: the cost of the requests themselves), then one call and a dump, ``CALLS`` times.
   A point's count is its regions' median less the empty one's. The points run at
   ``COUNT_SIZES``: the large one is smaller than the timing stage's.
3. A point is flagged when head's count over base's moves by more than ``FLOOR``; the
   A/A runs in ``docs/gate_counts.csv`` (``tools/bench_count_rates.py``) calibrate it.

Both trees run side by side, one process each. ``PYTHONHASHSEED`` is fixed, so that dict
and set orders (and the interpreter's work) repeat from one process to the next.
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_gate  # noqa: E402

ROOT = bench_gate.ROOT
CALLS = 1               # measured regions a point, one call each (two agree to 1e-4)
WARM = 1                # uninstrumented calls before them, after the set-up's own (the interpreter's caches)
# A point is flagged when its count moves by more than this fraction. The A/A runs kept in
# docs/gate_counts.csv moved no point by more than FLOOR / 10 (tools/bench_count_rates.py
# writes them; tests/test_bench_count.py checks the margin against the file).
FLOOR = 0.01
HASH_SEED = "0"
# The sizes the counting stage runs the Kernels points at, smaller than the timing stage's and
# on the same paths (no kernel changes path between them): small, a batch of 8 instead of 32
# (T = 64, d = 64, float64: the batched float64 paths); large, T = 256, d = 64 instead of
# T = 1024, d = 256 (one sequence, float32: the unbatched float32 paths). Under Valgrind the
# BLAS's FMA kernels (OPENBLAS_CORETYPE=Haswell, which CI keeps) run slowly: one call of
# attention's backward at the timed large size took over 3 minutes, and every point at the
# small size with a batch of 32 and the large one at T = 256 took 5.3 minutes a tree, against
# the 8 minutes the whole gate may take.
COUNT_SIZES = {"small": (64, 64, 8, "float64"), "large": (256, 64, 1, "float32")}
# Haswell's features (AVX2, FMA, no AVX-512): what Valgrind 3.19's virtual CPU can run
CPU = {"NUMBA_CPU_NAME": "haswell",
       "NUMBA_CPU_FEATURES": ",".join(
           "+" + f for f in ("64bit avx avx2 bmi bmi2 cmov cx16 cx8 f16c fma fsgsbase fxsr lzcnt "
                             "mmx movbe pclmul popcnt rdrnd sahf sse sse2 sse3 sse4.1 sse4.2 "
                             "ssse3 xsave xsaveopt").split())}


class CountError(bench_gate.GateError):
    """The counting stage could not run (exit status 2 of the gate)."""


# --------------------------------------------------------------------------- client requests

class ClientRequest:
    """Valgrind's client requests from Python: the amd64 magic sequence of ``valgrind.h``
    (four rotations of rdi that cancel out, then ``xchg rbx, rbx``; rax points at the
    request's six words, rdx holds the default and receives the answer), written to an
    executable page and called through ctypes. Natively the sequence does nothing and the
    call returns the default, 0."""

    # mov rax, rdi; mov rdx, rsi; rol rdi 3, 13, 61, 51; xchg rbx, rbx; mov rax, rdx; ret
    CODE = bytes.fromhex("4889f8" "4889f2" "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"
                         "4887db" "4889d0" "c3")
    RUNNING_ON_VALGRIND = 0x1001
    _TOOL = (ord("C") << 24) | (ord("T") << 16)             # callgrind.h's VG_USERREQ_TOOL_BASE
    DUMP_STATS_AT, ZERO_STATS = _TOOL + 3, _TOOL + 1
    START, STOP = _TOOL + 4, _TOOL + 5

    def __init__(self):
        import platform
        if platform.machine() not in ("x86_64", "AMD64"):
            raise CountError(f"the counting stage's client requests are amd64 code; this "
                             f"machine is {platform.machine()}")
        self._page = mmap.mmap(-1, mmap.PAGESIZE,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._page.write(self.CODE)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        self._call = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64)(address)
        self._args = (ctypes.c_uint64 * 6)()
        self._labels = {}                                   # label -> its C string, kept alive

    def request(self, code, arg=0):
        self._args[0], self._args[1] = code, arg
        return self._call(self._args, 0)

    def on_valgrind(self):
        return self.request(self.RUNNING_ON_VALGRIND) > 0

    def prepare(self, labels):
        """Make the C strings of ``labels`` now: a dump inside a measured region must not
        build one (a new ctypes type costs some 100,000 instructions)."""
        for label in labels:
            if label not in self._labels:
                buf = ctypes.create_string_buffer(label.encode())
                self._labels[label] = (buf, ctypes.addressof(buf))

    def dump(self, label):
        """Write the counters since the last zero or dump to a file named ``label``
        (``prepare``d first)."""
        self.request(self.DUMP_STATS_AT, self._labels[label][1])

    def zero(self):
        self.request(self.ZERO_STATS)

    def start(self):
        self.request(self.START)

    def stop(self):
        self.request(self.STOP)


# --------------------------------------------------------------------------- the worker

def worker(tree, suite_root, bench=None, calls=CALLS, warm=WARM):
    """Set up and measure the ``Kernels`` points of ``tree`` (those ``bench`` matches); say on
    stdout, one JSON line a point, which dump labels hold its regions."""
    proto, sys.stdout = sys.stdout, sys.stderr
    sys.path.insert(0, str(tree))
    import harness
    where = pathlib.Path(harness.__file__).resolve()
    if pathlib.Path(tree).resolve() not in where.parents:
        raise SystemExit(f"bench_count worker: harness imported from {where}, not from {tree}")
    common = bench_gate._load_suite(suite_root)
    if set(common.SIZES) != set(COUNT_SIZES):
        raise SystemExit(f"bench_count worker: the suite's sizes {sorted(common.SIZES)} are not "
                         f"the counting stage's {sorted(COUNT_SIZES)}")
    common.SIZES.update(COUNT_SIZES)            # the dict bench_kernels' Kernels reads
    vg = ClientRequest()
    points = [p for p in bench_gate.suite_points(common) if p[1] == "time"
              and (bench is None or re.search(bench, p[0]))]
    instances = {}
    for n, (pid, _, cls, method, combo) in enumerate(points):
        key = (cls.__name__, combo)
        try:
            if key not in instances:
                inst = cls()
                inst.setup(*combo)
                instances[key] = inst
        except NotImplementedError as e:                    # asv's "skipped"
            proto.write(json.dumps({"id": pid, "skipped": str(e)}) + "\n")
            proto.flush()
            continue
        fn = getattr(instances[key], method)
        for _ in range(warm):
            fn(*combo)
        labels = [f"p{n}-empty"] + [f"p{n}-call{k}" for k in range(calls)]
        vg.prepare(labels)
        vg.start()
        vg.zero()
        vg.dump(labels[0])
        for label in labels[1:]:
            fn(*combo)
            vg.dump(label)
        vg.stop()
        proto.write(json.dumps({"id": pid, "labels": labels}) + "\n")
        proto.flush()
    return 0


# --------------------------------------------------------------------------- the driver

def valgrind():
    """Valgrind's path, or a CountError that says how to get it."""
    path = shutil.which("valgrind")
    if path is None:
        raise CountError("the counting stage needs Valgrind (apt-get install valgrind); "
                         "without it, pass --no-count to run the timing stage alone")
    return path


def worker_env(extra=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONHASHSEED=HASH_SEED, **CPU)
    env.pop("PYTHONPATH", None)
    env.update(extra or {})
    return env


def _command(tree, bench, suite_root):
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", str(tree),
           "--suite-root", str(suite_root)]
    return cmd + (["--bench", bench] if bench is not None else [])


def read_dump(path):
    """(label, {event: count}) of one Callgrind dump: its client request's label and its
    ``summary:`` line (the counts since the zero or dump before)."""
    label, events, totals = None, None, None
    with open(path) as f:
        for line in f:
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.split(": ", 3)[3].strip()
            elif line.startswith("events: "):
                events = line.split()[1:]
            elif line.startswith("summary: "):
                totals = [int(x) for x in line.split()[1:]]
    if label is None or events is None or totals is None:
        raise CountError(f"{path} is not a Callgrind dump of a client request (no label, "
                         f"events or summary line)")
    return label, dict(zip(events, totals + [0] * (len(events) - len(totals))))


def per_call(regions):
    """{event: count per call}: the median of the call regions less the empty one."""
    import numpy as np
    empty, calls = regions[0], regions[1:]
    return {e: float(np.median([c[e] for c in calls])) - empty[e] for e in empty}


def _native(label, tree, bench, suite_root, log):
    """Start the native run of one tree's worker (it compiles the tree's Numba cache for
    ``CPU``; its client requests do nothing)."""
    return subprocess.Popen(_command(tree, bench, suite_root), cwd=str(tree), env=worker_env(),
                            stdout=subprocess.DEVNULL, stderr=log or subprocess.DEVNULL)


def _valgrind(tree, folder, bench, cache_sim, suite_root, log):
    """Start the Valgrind run of one tree's worker, its dumps written to ``folder``."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [valgrind(), "--tool=callgrind", "--instr-atstart=no",
           f"--cache-sim={'yes' if cache_sim else 'no'}",
           f"--callgrind-out-file={folder}/cg.%p", "--quiet"]
    return subprocess.Popen(cmd + _command(tree, bench, suite_root), cwd=str(tree),
                            env=worker_env(), stdout=subprocess.PIPE,
                            stderr=log or subprocess.DEVNULL, text=True)


def collect(label, proc, folder):
    """{point: {"Ir": ..., ...}} (or {"skipped": why}) from a Valgrind worker."""
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise CountError(f"the {label} worker failed under Valgrind (status {proc.returncode}); "
                         f"its stderr is in the gate's log")
    dumps = dict(read_dump(p) for p in sorted(pathlib.Path(folder).glob("cg.*.*")))
    counts = {}
    for line in out.splitlines():
        rec = json.loads(line)
        if "skipped" in rec:
            counts[rec["id"]] = {"skipped": rec["skipped"]}
            continue
        missing = [x for x in rec["labels"] if x not in dumps]
        if missing:
            raise CountError(f"the {label} worker's dumps {missing} of {rec['id']} are missing")
        counts[rec["id"]] = per_call([dumps[x] for x in rec["labels"]])
    return counts


def _two_at_a_time(labels, start, finish):
    """``start(label)`` then ``finish(label, proc)`` for every label, two processes at once
    (the machine's two cores); {label: finish's value}."""
    out = {}
    for i in range(0, len(labels), 2):
        procs = {label: start(label) for label in labels[i:i + 2]}
        for label, proc in procs.items():
            out[label] = finish(label, proc)
    return out


def count(trees, bench=None, cache_sim=False, say=print, log=None, suite_root=ROOT, only=None):
    """{label: {point: {event: count per call}}} for ``trees`` ({label: folder}): every tree
    run natively first (``_native``), then under Valgrind, each in one process, two at a time.
    ``only``: {label: regex} to count a label on the matching points alone (instead of
    ``bench``; the error-rate runs)."""
    valgrind()
    t0 = time.perf_counter()
    labels = list(trees)
    benches = {lab: (only or {}).get(lab, bench) for lab in labels}

    def native_done(label, proc):
        if proc.wait() != 0:
            raise CountError(f"the {label} worker ({trees[label]}) failed natively (status "
                             f"{proc.returncode}); its stderr is in the gate's log")
    say(f"  compiling {', '.join(labels)} for the counting stage's CPU ({CPU['NUMBA_CPU_NAME']})")
    _two_at_a_time(labels, lambda lab: _native(lab, trees[lab], benches[lab], suite_root, log),
                   native_done)
    with tempfile.TemporaryDirectory(prefix="bench-count-") as tmp:
        say(f"  counting {', '.join(labels)} under Valgrind, "
            f"{time.perf_counter() - t0:.0f} s")
        out = _two_at_a_time(
            labels, lambda lab: _valgrind(trees[lab], pathlib.Path(tmp) / lab, benches[lab],
                                          cache_sim, suite_root, log),
            lambda lab, proc: collect(lab, proc, pathlib.Path(tmp) / lab))
    say(f"  counted in {time.perf_counter() - t0:.0f} s")
    return out


def compare(base, head, floor=FLOOR):
    """Rows {id, base_ir, head_ir, ratio, verdict, and the cache events' ratios} of every
    point both counted: 'slower' / 'faster' when head's Ir over base's moves past ``floor``."""
    rows = []
    for pid in sorted(set(base) | set(head)):
        b, h = base.get(pid), head.get(pid)
        if b is None or h is None or "skipped" in b or "skipped" in h:
            rows.append({"id": pid, "verdict": "skipped",
                         "why": (b or h or {}).get("skipped", "counted on one side only")})
            continue
        ratio = h["Ir"] / b["Ir"] if b["Ir"] > 0 else math.nan
        verdict = ("slower" if ratio > 1 + floor else "faster" if ratio < 1 - floor
                   else "same")
        row = {"id": pid, "base_ir": b["Ir"], "head_ir": h["Ir"], "ratio": ratio,
               "floor": floor, "verdict": verdict}
        for e in b:
            if e != "Ir" and b[e] > 0:
                row[f"{e}_ratio"] = h.get(e, math.nan) / b[e]
        rows.append(row)
    return rows


def render(rows):
    lines = [f"{'point':<44} {'base Ir':>13} {'head Ir':>13} {'head/base':>10}  verdict"]
    for r in rows:
        if "ratio" not in r:
            lines.append(f"{r['id']:<44} {'':>13} {'':>13} {'':>10}  {r['verdict']}")
            continue
        lines.append(f"{r['id']:<44} {r['base_ir']:13,.0f} {r['head_ir']:13,.0f} "
                     f"{r['ratio']:10.5f}  {r['verdict']}")
    return "\n".join(lines)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="tools/bench_count.py", description=__doc__.split("\n")[0])
    ap.add_argument("--worker", required=True, help="the tree whose points to count")
    ap.add_argument("--suite-root", default=str(ROOT))
    ap.add_argument("--bench", default=None)
    args = ap.parse_args(argv)
    return worker(args.worker, args.suite_root, args.bench)


if __name__ == "__main__":
    sys.exit(main())
