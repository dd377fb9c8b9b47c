"""The regression gate between two commits: their kernels timed in interleaved, paired rounds.

``make bench-gate BASE=<rev>`` runs ``python tools/bench_gate.py --base <rev>``: the working
tree (HEAD, with any uncommitted change) against ``<rev>``, both through this checkout's asv
suite (``benchmarks/``), as asv would run them, but in one run of a few minutes:

1. ``<rev>`` is exported (``git archive``) to a folder under /tmp. ``PROCESSES`` worker
   processes start for each tree, ``base`` (``<rev>``) and ``head`` (this checkout), each
   importing its tree's ``harness``. Each sets up every point of the default suite's
   ``Kernels`` (every family, forward and backward, small and large) ``PLACEMENTS`` times,
   each copy's arrays at other addresses, and keeps them, compiled, for the whole run.
   Each process starts with a layout of its own (``shuffle_layout``: random allocations
   first, an environment of a random size), so that processes of one tree do not share one.
   Before any of that, one base worker sets up one point of each class (``probe_points``):
   a base older than this suite, whose harness lacks what the suite uses, is said at once
   (``too_old``), not after every point's set-up.
2. ``rounds`` rounds follow. In each, every point is timed once by every process, the points
   and the processes in an order shuffled from a fixed seed, one at a time, every process
   pinned to the same CPU; a sample is the mean CPU time (``CLOCK``: other processes' load
   does not lengthen it) of enough calls, cycling through the copies, to last
   ``min_sample_s``.
3. Whatever stays fixed for a process's life (where its arrays and code lie) can give it a
   speed of its own, so the processes are the units: each process's median over its rounds is one draw, a
   point's change is head's geometric mean over base's, and its 95 % interval is Welch's t
   on their logarithms (``process_ratio``). Beside it, the A/A ratio of the same run and
   point: base's processes in two halves, one over the other (``aa_ratio``). The floor is
   its distance from 1, never under ``MIN_CHANGE`` (3 %). A point is flagged slower only
   when its whole interval lies above 1 + floor (faster: below 1 - floor; reported, not
   failed).
   A point flagged slower is timed again by fresh processes (step 1 and 2 for it alone), and
   fails the gate only if flagged again; otherwise it is reported as ``unconfirmed``
   (``--no-confirm``: the first run decides).
4. The default suite's deterministic ``track_`` numbers (``common.Tracked``: multiplications,
   spans, fitted decay rates) are computed by ``base`` and ``head`` and must be equal to the
   last bit; any difference is flagged.

Exit status: 0 nothing flagged, 1 something flagged, 2 the gate could not run (a bad
``--base``, a shallow clone without it, a base too old for the suite, a worker that failed).
A commit that slows a kernel or changes a tracked number on purpose says so in its message
with a trailer line
``Bench-Accept: <regular expression>``; flagged points whose name the expression matches
(``re.search``) are reported as accepted and do not fail the gate.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import json
import math
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]        # the checkout whose suite is run

# Worker processes per tree: the units of the interval (see process_ratio). Not 8: in the
# error-rate runs with 8 a tree, a process's median scattered more than with 4, and 10 %
# slowdowns were caught less often than with 4 (docs/gate_rates.csv)
PROCESSES = 4           # worker processes per tree: the units of the interval (see process_ratio)
ROUNDS = 5              # every process times every point once a round
MIN_SAMPLE_S = 0.03     # one sample: calls enough to last this long
# No change under 3 % is claimed, whatever the interval says.
MIN_CHANGE = 0.03
SEED = 0                # the orders of points and workers in each round
# Each worker sets a timed point up this many times, each copy's arrays at other addresses
# (a spacer of a random size allocated before each), and a sample cycles through the copies.
# Where its arrays lie can move a kernel's time; averaged over copies, a sample measures the
# kernel, not one placement of its inputs.
PLACEMENTS = 4
TRAILER = "Bench-Accept"
# What a sample measures. "cpu": the worker's CPU seconds (time.process_time, every thread of
# it), which a shared machine's other processes do not lengthen: time spent waiting for a
# core is not counted, only what the kernel's own work costs (caches and a busy sibling core
# still show). The kernels run on one thread (HARNESS_BENCH_THREADS=1), so their CPU time is
# their wall time on an idle core. "wall": time.perf_counter, as asv measures.
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
CLOCK = "cpu"
TIMED_CLASSES = ("Kernels",)                               # the gate's timed points


class GateError(Exception):
    """The gate could not run: the message says why and what to do (exit status 2)."""


# what the suite meets in a harness older than itself: a name, a module or an argument its
# code uses that the harness does not have yet
API_ERRORS = ("AttributeError", "ImportError", "ModuleNotFoundError", "NameError", "TypeError",
              "KeyError")


class BaseTooOld(GateError):
    """The base's harness cannot run this checkout's suite: found by the probe, before any
    point is set up for timing. ``point``: what failed (None: loading the suite)."""

    def __init__(self, point, error):
        super().__init__(f"{'setting up ' + point if point else 'loading the suite'} failed: "
                         f"{error}")
        self.point, self.error = point, error


# --------------------------------------------------------------------------- git

def _git(*args, cwd=ROOT, check=True):
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise GateError(f"git {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def resolve(rev, arg="--base", cwd=ROOT):
    """The full commit id of ``rev``, or a GateError that says why there is none: not a
    commit, a shallow clone that lacks it, or a first commit that has no parent."""
    if not isinstance(rev, str) or not rev.strip() or rev.startswith("-"):
        raise GateError(f"{arg} must name a commit (a hash, a branch, HEAD~1), got {rev!r}")
    r = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=cwd, check=False)
    if r.returncode == 0:
        return r.stdout.strip()
    shallow = _git("rev-parse", "--is-shallow-repository", cwd=cwd, check=False).stdout.strip()
    if shallow == "true":
        raise GateError(f"{arg} {rev} is not in this clone: it is shallow (fetched with --depth). "
                        f"Fetch the history first (git fetch --deepen=1, or clone with "
                        f"--depth 2 or more), or name a commit it has.")
    m = re.fullmatch(r"(.+?)(~\d*|\^\d*)+", rev)
    if m and _git("rev-parse", "--verify", "--quiet", f"{m.group(1)}^{{commit}}",
                  cwd=cwd, check=False).returncode == 0:
        raise GateError(f"{arg} {rev}: {m.group(1)} has no such ancestor (a first commit has "
                        f"no commit before it to compare with).")
    raise GateError(f"{arg} {rev} is not a commit in {cwd}.")


def has_parent(rev="HEAD", cwd=ROOT):
    """False for a first commit (nothing before it to compare with)."""
    return _git("rev-parse", "--verify", "--quiet", f"{rev}~1^{{commit}}", cwd=cwd,
                check=False).returncode == 0 or \
        _git("rev-parse", "--is-shallow-repository", cwd=cwd, check=False).stdout.strip() == "true"


def export(commit, dest, cwd=ROOT):
    """The tree of ``commit`` written to the folder ``dest`` (no .git, nothing else touched)."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=cwd,
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise GateError(f"git archive {commit} failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return pathlib.Path(dest)


def accepted_patterns(rev="HEAD", cwd=ROOT):
    """The regular expressions of the ``Bench-Accept:`` trailers in ``rev``'s message."""
    r = _git("log", "-1", f"--format=%(trailers:key={TRAILER},valueonly,unfold)", rev,
             cwd=cwd, check=False)
    out = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if line:
            try:
                out.append(re.compile(line))
            except re.error as e:
                raise GateError(f"the {TRAILER} trailer of {rev} must be a regular expression, "
                                f"got {line!r} ({e})") from None
    return out


# --------------------------------------------------------------------------- the worker

def _load_suite(suite_root):
    """Import ``benchmarks`` from ``suite_root`` whatever else is on sys.path."""
    init = pathlib.Path(suite_root) / "benchmarks" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "benchmarks", init, submodule_search_locations=[str(init.parent)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = pkg
    spec.loader.exec_module(pkg)
    for path in sorted(init.parent.glob("bench_*.py")):
        importlib.import_module(f"benchmarks.{path.stem}")
    return importlib.import_module("benchmarks.common")


def point_id(cls_name, method, params):
    return f"{cls_name}.{method}({', '.join(str(p) for p in params)})"


def suite_points(common, timed=TIMED_CLASSES):
    """[(id, kind, class, method, params)]: the timed points of the classes ``timed`` and
    every ``track_`` of the default suite's deterministic classes, in a fixed order."""
    out = []
    for name, (suite, cls) in sorted(common.CLASSES.items()):
        if suite != "default":
            continue
        kinds = []
        if name in timed:
            kinds.append(("time", "time_"))
        if getattr(cls, "deterministic", False):
            kinds.append(("track", "track_"))
        params = getattr(cls, "params", [])
        if params and not isinstance(params[0], (list, tuple)):
            params = [params]
        for combo in itertools.product(*params):
            for kind, prefix in kinds:
                for method in sorted(m for m in dir(cls) if m.startswith(prefix)):
                    out.append((point_id(name, method, combo), kind, cls, method, combo))
    return out


def worker(tree, suite_root, cpu=None, placements=1):
    """Serve one tree's points over stdin/stdout, one JSON object a line each way, on the
    one CPU ``cpu`` when given (every worker on the same one: see ``gate_cpu``)."""
    proto, sys.stdout = sys.stdout, sys.stderr          # anything the harness prints: stderr
    layout = shuffle_layout()                           # kept for the worker's whole life
    pinned = [False]

    def pin():          # from the first timing on: the set-up runs on every CPU
        if cpu is not None and not pinned[0]:
            os.sched_setaffinity(0, {cpu})
            pinned[0] = True
    sys.path.insert(0, str(tree))
    import harness
    where = pathlib.Path(harness.__file__).resolve()
    if pathlib.Path(tree).resolve() not in where.parents:
        raise SystemExit(f"bench_gate worker: harness imported from {where}, not from {tree}")
    try:
        common = _load_suite(suite_root)
    except Exception as e:                  # a harness the suite cannot even import with
        proto.write(json.dumps({"error": f"{type(e).__name__}: {e}", "loading": True}) + "\n")
        proto.flush()
        return 1
    points = {pid: (kind, cls, method, combo)
              for pid, kind, cls, method, combo in suite_points(common)}
    import numpy as np
    rng = np.random.default_rng()           # the spacers' sizes: each process its own
    spacers = []
    instances = {}                          # (class, params) -> ([set-up copies], their args)
    caches = {}                             # class -> its setup_cache's value, made once

    def answer(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    def bound(pid):
        """[the method of each copy], its arguments"""
        kind, cls, method, combo = points[pid]
        copies, args = instances[(cls.__name__, combo)]
        return [getattr(inst, method) for inst in copies], args

    answer({"ready": True, "harness": str(where.parent)})
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        current = req.get("id")             # the point an error is named by
        try:
            if op == "setup":
                status = {}
                for pid in req["points"]:
                    current = pid
                    if pid not in points:
                        status[pid] = "missing"
                        continue
                    kind, cls, method, combo = points[pid]
                    key = (cls.__name__, combo)
                    if key not in instances:
                        try:
                            args = combo
                            if hasattr(cls, "setup_cache"):          # as asv: once per class
                                if cls.__name__ not in caches:
                                    caches[cls.__name__] = cls().setup_cache()
                                args = (caches[cls.__name__],) + combo
                            n = 1 if getattr(cls, "deterministic", False) else placements
                            instances[key] = (set_up_copies(cls, args, n, rng, spacers), args)
                        except NotImplementedError as e:     # asv's "skipped"
                            instances[key] = e
                    got = instances[key]
                    status[pid] = (f"skipped: {got}" if isinstance(got, NotImplementedError)
                                   else "ok")
                answer({"status": status})
            elif op == "track":
                fns, args = bound(req["id"])
                answer({"value": repr(float(fns[0](*args)))})
            elif op == "calibrate":
                pin()
                fns, args = bound(req["id"])
                for fn in fns:
                    fn(*args)
                t0 = time.perf_counter()
                for fn in fns:
                    fn(*args)
                once = (time.perf_counter() - t0) / len(fns)
                answer({"n": calls_per_sample(once, req["min_sample_s"], len(fns))})
            elif op == "time":
                pin()
                fns, args = bound(req["id"])
                n = req["n"]
                clock = CLOCKS[req.get("clock", CLOCK)]
                cycle = [fns[i % len(fns)] for i in range(n)]
                gc.disable()                            # as timeit: no collection mid-sample
                t0 = clock()
                for fn in cycle:
                    fn(*args)
                seconds = (clock() - t0) / n
                gc.enable()
                answer({"seconds": seconds})
            elif op == "quit":
                answer({"bye": True})
                return
            else:
                answer({"error": f"unknown op {op!r}"})
        except Exception as e:                          # reported, and the driver decides
            answer({"error": f"{type(e).__name__}: {e}", "point": current})


def shuffle_layout(rng=None):
    """Small objects of random number and sizes, allocated before anything else of the
    worker's and returned to be kept: every later allocation of the process (the harness's
    modules, the kernels' own temporaries) lands at offsets of its own. Without it, the
    processes of one tree run the same allocations in the same order and could share one
    layout, which the interval (processes as the units) would then count as the tree's
    speed."""
    import random
    rng = rng or random.SystemRandom()
    return [bytearray(rng.randint(16, 4096)) for _ in range(rng.randint(1, 512))]


def set_up_copies(cls, args, placements, rng, spacers):
    """``placements`` instances of the benchmark class ``cls``, each set up with ``args``, a
    spacer of a random size (appended to ``spacers``, to be kept) allocated before each, so
    that each copy's arrays lie at other addresses."""
    import numpy as np
    copies = []
    for _ in range(placements):
        spacers.append(np.empty(int(rng.integers(1, 8192)), np.uint8))
        inst = cls()
        if hasattr(inst, "setup"):
            inst.setup(*args)
        copies.append(inst)
    return copies


def calls_per_sample(once, min_sample_s, copies):
    """Calls in one sample: enough to last ``min_sample_s`` at ``once`` seconds a call, and a
    whole number of passes over the ``copies`` (each copy as often as every other)."""
    n = max(1, math.ceil(min_sample_s / max(once, 1e-9)))
    return copies * math.ceil(n / copies)


def gate_cpu():
    """The CPU every worker is pinned to: the last one this process may use, or None where
    the platform cannot pin. On one CPU the three samples of a round see the same core's
    caches and the same neighbours; spread over two, one worker may sit on a crowded core
    for a whole run, a difference no pairing of rounds removes."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


class Worker:
    """One worker process: the harness of ``tree`` behind the suite of ``suite_root``."""

    def __init__(self, label, tree, suite_root=ROOT, log=None, cpu=None, placements=PLACEMENTS,
                 env=None):
        self.label, self.tree = label, pathlib.Path(tree)
        # an environment of a random size moves the process's stack (shuffle_layout, its heap)
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   BENCH_GATE_PAD="x" * random.SystemRandom().randint(0, 8192), **(env or {}))
        env.pop("PYTHONPATH", None)
        pin = [] if cpu is None else ["--cpu", str(cpu)]
        self.proc = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", str(tree),
             "--suite-root", str(suite_root), "--placements", str(placements), *pin],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL,
            text=True, env=env, cwd=str(tree))
        ready = self._read()
        if "error" in ready:
            self.close()
            raise BaseTooOld(None, ready["error"]) if label.startswith("base") else GateError(
                f"the {label} worker ({tree}) could not load the suite: {ready['error']}")
        self.harness = ready["harness"]

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise GateError(f"the {self.label} worker ({self.tree}) exited "
                            f"(status {self.proc.wait()}); its stderr is in the gate's log")
        return json.loads(line)

    def send(self, **req):
        self._last = req
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def receive(self):
        out = self._read()
        if "error" in out:
            what = (f"setting up {out['point']}" if self._last.get("op") == "setup" and
                    out.get("point") else f"{self._last.get('op')} {out.get('point') or ''}")
            raise GateError(f"the {self.label} worker failed {what.strip()}: {out['error']}")
        return out

    def ask(self, **req):
        self.send(**req)
        return self.receive()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.ask(op="quit")
            except (GateError, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# --------------------------------------------------------------------------- the decision

def verdict(ratio, lo, hi, floor, accepted=False):
    """'slower' / 'faster' when the whole interval clears 1 +/- floor, else 'same'; a slower
    point whose name a Bench-Accept trailer matches is 'accepted'."""
    if math.isnan(lo) or math.isnan(hi):
        return "same"
    if lo > 1 + floor:
        return "accepted" if accepted else "slower"
    if hi < 1 - floor:
        return "faster"
    return "same"


def process_medians(samples):
    """Each process's median over its rounds: ``samples`` is (processes, rounds) seconds."""
    import numpy as np
    samples = np.asarray(samples, dtype=float)
    if samples.ndim != 2 or samples.shape[0] < 2:
        raise ValueError(f"samples must be (processes, rounds) with at least 2 processes, "
                         f"got shape {samples.shape}.")
    return np.median(samples, axis=1)


def process_ratio(head, base, confidence=None):
    """(ratio, low, high): head's time over base's, and its Welch t interval, the processes the
    units. ``head``, ``base``: (processes, rounds) seconds.

    Whatever stays fixed for a process's life (where its arrays and its code lie) can give it
    a speed of its own, so rounds in one process are not independent draws of the commit's
    speed; processes are. Each process's median over
    its rounds is one draw, the ratio is that of the geometric means of head's and base's
    draws, and the interval is Welch's on their logarithms."""
    import numpy as np
    from scipy import stats as sps

    from harness.infra import stats
    lh, lb = np.log(process_medians(head)), np.log(process_medians(base))
    d = lh.mean() - lb.mean()
    vh, vb = lh.var(ddof=1) / lh.size, lb.var(ddof=1) / lb.size
    se = math.sqrt(vh + vb)
    if se == 0:
        return math.exp(d), math.exp(d), math.exp(d)
    df = (vh + vb) ** 2 / (vh ** 2 / (lh.size - 1) + vb ** 2 / (lb.size - 1))
    t = sps.t.ppf(0.5 + (confidence or stats.CONFIDENCE) / 2, df)
    return math.exp(d), math.exp(d - t * se), math.exp(d + t * se)


def point_row(pid, label, base, head, calls, min_change=MIN_CHANGE):
    """One timed point's row of the report, from its (processes, rounds) samples: the ratio,
    its interval, the A/A ratio and floor, the verdict, and base_s / head_s, each side's
    geometric mean of its processes' medians: the numbers the ratio is of, so that
    head_s / base_s is the ratio shown beside them (the median of all samples was not)."""
    import numpy as np
    ratio, lo, hi = process_ratio(head, base)
    aa = aa_ratio(base)
    floor = floor_of(aa, min_change)
    gm = {k: float(np.exp(np.log(process_medians(x)).mean())) for k, x in
          (("base", base), ("head", head))}
    return {"id": pid, "label": label, "calls_per_sample": calls,
            "base_s": gm["base"], "head_s": gm["head"],
            "ratio": ratio, "lo": lo, "hi": hi, "aa_ratio": aa, "floor": floor,
            "verdict": verdict(ratio, lo, hi, floor),
            "samples": {"base": np.asarray(base).tolist(), label: np.asarray(head).tolist()}}


def aa_ratio(base):
    """The A/A ratio of the same run: the base's processes in two halves (the first half and
    the rest, by start order), the geometric mean of one half's medians over the other's:
    how far apart two groups of processes of one commit came out."""
    import numpy as np
    lb = np.log(process_medians(base))
    half = lb.size // 2
    return math.exp(lb[half:].mean() - lb[:half].mean())


def floor_of(aa, min_change=MIN_CHANGE):
    """The A/A floor: the A/A ratio's distance from 1, at least ``min_change``."""
    return max(min_change, abs(aa - 1.0)) if not math.isnan(aa) else min_change


def compare_tracks(base_values, head_values):
    """{id: (base, head, verdict)}: 'changed' where both have a value and they differ at all
    (the values are ``repr`` of floats, so equal means equal to the last bit; nan equals
    nan), 'new'/'gone' where one side skipped it."""
    out = {}
    for pid in sorted(set(base_values) | set(head_values)):
        b, h = base_values.get(pid), head_values.get(pid)
        if b is None or h is None:
            out[pid] = (b, h, "new" if b is None else "gone")
        else:
            out[pid] = (b, h, "same" if b == h else "changed")
    return out


def run(trees, rounds=ROUNDS, min_sample_s=MIN_SAMPLE_S, bench=None, only=None, log=None,
        min_change=MIN_CHANGE, say=print, clock=CLOCK, placements=PLACEMENTS,
        processes=PROCESSES, envs=None):
    """Time and compare. ``trees``: {label: folder} with ``base`` and one or more others, each
    compared with ``base``; every label gets ``processes`` workers. ``only``: {label: regex}
    to time a label on the matching points alone (the error-rate experiments). ``envs``:
    {label: {variable: value}} set in that label's workers (the same tree compiled for
    another CPU: tools/bench_count_rates.py --cpu-cost).

    Returns the report: {"points": [...], "tracks": {...}, "load": [...], "seconds": ...}.
    """
    import numpy as np

    if processes < 2:
        raise GateError(f"processes must be at least 2 (an interval needs two), got {processes}")
    t_start = time.perf_counter()
    load = [os.getloadavg()]
    order = ["base"] + [k for k in trees if k != "base"]
    workers = {}                                        # (label, process) -> Worker
    cpu = gate_cpu()
    try:
        for label in order:
            say(f"  starting {processes} workers of {label} ({trees[label]}), timing on CPU {cpu}")
            for k in range(processes):
                workers[(label, k)] = Worker(f"{label}#{k}", trees[label], log=log, cpu=cpu,
                                             placements=placements,
                                             env=(envs or {}).get(label))
        sys.path.insert(0, str(ROOT))
        common = _load_suite(ROOT)                      # the head's suite picks the points
        all_points = suite_points(common)
        if bench is not None:
            all_points = [p for p in all_points if re.search(bench, p[0])]
        timed = [p[0] for p in all_points if p[1] == "time"]
        tracked = [p[0] for p in all_points if p[1] == "track"]
        wants = {label: [p for p in timed if label not in (only or {})
                         or re.search(only[label], p)] for label in order}
        t0 = time.perf_counter()
        status = {}
        # up front: can the base's harness run this suite at all? One point of each class,
        # set up by one base worker before any other work (kept: set up once)
        probe = probe_points(all_points)
        if probe:
            try:
                workers[("base", 0)].ask(op="setup", points=probe)
            except GateError as e:
                m = re.fullmatch(r"the \S+ worker failed setting up (.+?): (.*)", str(e), re.S)
                if m and m.group(2).startswith(API_ERRORS):
                    raise BaseTooOld(*m.groups()) from None
                raise
        # set up side by side, on every CPU: first one worker of each tree, which compiles
        # what its tree's Numba cache lacks, then the others, which load it from there
        for first in (True, False):
            batch = {(label, k): w for (label, k), w in workers.items() if (k == 0) == first}
            for (label, k), w in batch.items():
                w.send(op="setup", points=wants[label] + (tracked if k == 0 else []))
            status.update({key: w.receive()["status"] for key, w in batch.items()})
        say(f"  {len(workers)} workers set up in {time.perf_counter() - t0:.0f} s")

        # tracks: exactly equal, from the first worker of base and of head
        values = {label: {pid: workers[(label, 0)].ask(op="track", id=pid)["value"]
                          for pid in tracked if status[(label, 0)].get(pid) == "ok"}
                  for label in ("base", "head") if (label, 0) in workers}
        tracks = compare_tracks(values.get("base", {}), values.get("head", {}))

        def ready(label, pid):
            return all(status[(label, k)].get(pid) == "ok" for k in range(processes))

        runnable = [pid for pid in timed if ready("base", pid)]
        numbers = {pid: workers[("base", 0)].ask(op="calibrate", id=pid,
                                                 min_sample_s=min_sample_s)["n"]
                   for pid in runnable}
        samples = {(label, pid): np.empty((processes, rounds)) for label in order
                   for pid in runnable if pid in wants[label] and ready(label, pid)}
        rng = np.random.default_rng(SEED)
        for r in range(rounds):
            for i in rng.permutation(len(runnable)):
                pid = runnable[i]
                keys = [(lab, k) for lab in order if (lab, pid) in samples
                        for k in range(processes)]
                for j in rng.permutation(len(keys)):
                    lab, k = keys[j]
                    samples[(lab, pid)][k, r] = workers[(lab, k)].ask(
                        op="time", id=pid, n=numbers[pid], clock=clock)["seconds"]
            load.append(os.getloadavg())
            say(f"  round {r + 1}/{rounds} done, {time.perf_counter() - t_start:.0f} s")
    finally:
        for w in workers.values():
            w.close()

    points = []
    for pid in timed:
        if pid not in runnable:
            why = next((status[(label, k)].get(pid) for label, k in workers
                        if label == "base" and status[(label, k)].get(pid) != "ok"), None)
            points.append({"id": pid, "verdict": "skipped", "why": why})
            continue
        a = samples[("base", pid)]
        for label in order[1:]:
            if (label, pid) not in samples:
                if pid in wants[label]:
                    points.append({"id": pid, "label": label, "verdict": "skipped",
                                   "why": next((status[(label, k)].get(pid)
                                                for k in range(processes)
                                                if status[(label, k)].get(pid) != "ok"), None)})
                continue
            points.append(point_row(pid, label, a, samples[(label, pid)], numbers[pid],
                                    min_change))
    return {"points": points, "bench": bench,
            "tracks": {pid: {"base": b, "head": h, "verdict": v}
                       for pid, (b, h, v) in tracks.items()},
            "load": load, "cpu": cpu, "clock": clock, "rounds": rounds, "min_sample_s": min_sample_s,
            "placements": placements, "processes": processes,
            "min_change": min_change, "seconds": time.perf_counter() - t_start}


def probe_points(points):
    """The first point of each class, the deterministic (tracked) classes first: what the
    gate sets up in one base worker before anything else, to learn at once whether the
    base's harness can run this suite. ``points``: ``suite_points``'s."""
    first = {}
    for pid, kind, cls, method, combo in points:
        first.setdefault(cls.__name__, (kind != "track", pid))
    return [pid for _, pid in sorted(first.values())]


def too_old(rev, e, cwd=ROOT):
    """What the gate says when ``rev``'s harness cannot run this checkout's suite (``e``, a
    ``BaseTooOld``), before it has timed anything."""
    last = _git("log", "-1", "--format=%h %cs", "--", "benchmarks", cwd=cwd,
                check=False).stdout.split()
    since = (f"this suite was last changed in {last[0]} ({last[1]}): a base from there on runs "
             f"it; " if len(last) == 2 else "")
    return (f"--base {rev} is too old for this checkout's benchmark suite (benchmarks/): "
            f"{e}. Its harness lacks what the suite uses; {since}choose a later --base, or "
            f"time that commit with its own suite (asv run).")


def exactly(ids):
    """A --bench expression matching these point names and no other."""
    return "^(" + "|".join(re.escape(i) for i in ids) + ")$"


def confirm(report, again):
    """A point flagged slower stays so only if ``again``, a second run with fresh processes
    (each with its own layout), flags it too (the same point of the same label); otherwise it
    is 'unconfirmed' (reported, not failed). Each point keeps the second run's ratio and interval under "confirmation"."""
    second = {(p.get("label"), p["id"]): p for p in again["points"] if "ratio" in p}
    for p in report["points"]:
        if p["verdict"] != "slower":
            continue
        q = second.get((p.get("label"), p["id"]))
        p["confirmation"] = ({k: q[k] for k in ("ratio", "lo", "hi", "aa_ratio", "floor",
                                                 "verdict", "samples") if k in q} if q else None)
        if q is None or q["verdict"] != "slower":
            p["verdict"] = "unconfirmed"
    report["seconds"] += again["seconds"]
    return report


def apply_trailers(report, patterns):
    """Mark flagged points (slower, changed) whose name a Bench-Accept pattern matches."""
    for p in report["points"]:
        if p["verdict"] == "slower" and any(rx.search(p["id"]) for rx in patterns):
            p["verdict"] = "accepted"
    for pid, t in report["tracks"].items():
        if t["verdict"] == "changed" and any(rx.search(pid) for rx in patterns):
            t["verdict"] = "accepted"
    for p in report.get("counts", []):
        if p["verdict"] == "slower" and any(rx.search(p["id"]) for rx in patterns):
            p["verdict"] = "accepted"
    return report


def flagged(report):
    """The names of what fails the gate: points counted or timed slower (a point both stages
    flag is named once), and changed tracks."""
    slower = [p["id"] for p in report.get("counts", []) + report["points"]
              if p["verdict"] == "slower"]
    return (list(dict.fromkeys(slower))
            + [pid for pid, t in report["tracks"].items() if t["verdict"] == "changed"])


def render(report):
    """The gate's tables: the counting stage's, one line per point counted, then the timing
    stage's, one line per timed point and per track that is not unchanged."""
    parts = []
    if "counts" in report:
        import bench_count
        sizes = "; ".join(f"{k}: T = {T}, d = {d}, batch {b}, {dt}"
                          for k, (T, d, b, dt) in bench_count.COUNT_SIZES.items())
        parts.append(f"instructions per call (Callgrind's Ir, at the counting sizes: {sizes}; "
                     f"flagged past {report['count_floor']:.1%}):\n"
                     + bench_count.render(report["counts"]))
    if "rounds" in report or "counts" not in report:            # the timing stage ran
        parts.append(("times:\n" if parts else "") + render_times(report))
    return "\n".join(parts)


def render_times(report):
    """The timing stage's table: one line per timed point and per track that is not
    unchanged."""
    # base ms, head ms: each side's geometric mean of its processes' medians (head/base is
    # their ratio); A/A: base's processes, one half over the other
    lines = [f"{'point':<44} {'base ms':>9} {'head ms':>9} {'head/base [95 % interval]':>27} "
             f"{'A/A':>6} {'floor':>7}  verdict"]
    for p in report["points"]:
        if "ratio" not in p:
            lines.append(f"{p['id']:<44} {'':>9} {'':>9} {'':>27} {'':>6} {'':>7}  {p['verdict']}")
            continue
        lines.append(f"{p['id']:<44} {1e3 * p['base_s']:9.3f} {1e3 * p['head_s']:9.3f} "
                     f"{p['ratio']:9.3f} [{p['lo']:.3f}, {p['hi']:.3f}]   "
                     f"{p['aa_ratio']:6.3f} {100 * p['floor']:5.1f} %  {p['verdict']}")
        c = p.get("confirmation")
        if c:
            lines.append(f"{'  timed again, fresh processes':<64} {c['ratio']:9.3f} "
                         f"[{c['lo']:.3f}, {c['hi']:.3f}]   {c['aa_ratio']:6.3f} "
                         f"{100 * c['floor']:5.1f} %  {c['verdict']}")
    n_same = sum(t["verdict"] == "same" for t in report["tracks"].values())
    if report["tracks"]:
        lines.append(f"track_ numbers: {n_same} of {len(report['tracks'])} exactly equal")
    elif report.get("bench"):
        lines.append(f"track_ numbers: none compared (no track_ point matches --bench "
                     f"{report['bench']})")
    else:
        lines.append("track_ numbers: none compared (the suite has none)")
    for pid, t in report["tracks"].items():
        if t["verdict"] != "same":
            lines.append(f"  {pid}: base {t['base']}, head {t['head']}  {t['verdict']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="tools/bench_gate.py", description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="the commit to compare with (BASE of make bench-gate)")
    ap.add_argument("--head", default=None,
                    help="a commit to compare instead of this checkout's working tree")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--min-sample-s", type=float, default=MIN_SAMPLE_S)
    ap.add_argument("--bench", default=None, help="a regular expression: only matching points")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default=CLOCK,
                    help="what a sample measures: the workers' CPU time (default) or wall time")
    ap.add_argument("--json", default=None, help="write the whole report here")
    ap.add_argument("--min-change", type=float, default=MIN_CHANGE,
                    help=f"the smallest floor, a fraction (default {MIN_CHANGE})")
    ap.add_argument("--no-confirm", dest="confirm", action="store_false",
                    help="fail on the first run's flags, without timing them again")
    ap.add_argument("--processes", type=int, default=PROCESSES,
                    help=f"worker processes per commit (default {PROCESSES})")
    ap.add_argument("--placements", type=int, default=PLACEMENTS,
                    help=f"copies of each timed point's inputs a sample cycles through "
                         f"(default {PLACEMENTS})")
    ap.add_argument("--no-count", dest="count", action="store_false",
                    help="leave out the counting stage (instructions under Valgrind)")
    ap.add_argument("--no-time", dest="time", action="store_false",
                    help="leave out the timing stage (and the track_ numbers it compares)")
    ap.add_argument("--count-floor", type=float, default=None,
                    help="the counting stage's threshold, a fraction (default "
                         "bench_count.FLOOR)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--suite-root", default=str(ROOT), help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is None and args.base is None:
        ap.error("--base is required (make bench-gate BASE=<rev>)")
    if args.rounds < 1:
        ap.error(f"--rounds must be a positive whole number, got {args.rounds}")
    if args.processes < 2:
        ap.error(f"--processes must be at least 2 (an interval needs two), got {args.processes}")
    if args.placements < 1:
        ap.error(f"--placements must be a positive whole number, got {args.placements}")
    if not 0 <= args.min_change < 1:
        ap.error(f"--min-change must be a fraction in [0, 1), got {args.min_change}")
    if not args.min_sample_s > 0:
        ap.error(f"--min-sample-s must be a positive number of seconds, got {args.min_sample_s}")
    if not (args.count or args.time):
        ap.error("--no-count and --no-time together leave nothing to gate")
    if args.count_floor is not None and not 0 < args.count_floor < 1:
        ap.error(f"--count-floor must be a fraction in (0, 1), got {args.count_floor}")
    if args.bench is not None:
        try:
            re.compile(args.bench)
        except re.error as e:
            ap.error(f"--bench must be a regular expression, got {args.bench!r} ({e})")
    return args


def _count_floor(args):
    import bench_count
    return bench_count.FLOOR if args.count_floor is None else args.count_floor


def gate(trees, args, log):
    """Both stages on ``trees`` ({"base", "head"}) as ``args`` asks: the counting stage
    first (``bench_count``), then the timing stage with its confirmation. One report:
    the timing stage's keys, and "counts" (the counting stage's rows)."""
    t0 = time.perf_counter()
    report = {"points": [], "tracks": {}, "bench": args.bench, "load": [os.getloadavg()]}
    if args.count:
        import bench_count
        counted = bench_count.count(trees, bench=args.bench, log=log)
        report["counts"] = bench_count.compare(counted["base"], counted["head"],
                                               _count_floor(args))
        report["count_floor"] = _count_floor(args)
    if args.time:
        settings = dict(rounds=args.rounds, min_sample_s=args.min_sample_s, log=log,
                        clock=args.clock, min_change=args.min_change,
                        placements=args.placements, processes=args.processes)
        timed = run(trees, bench=args.bench, **settings)
        slower = [p["id"] for p in timed["points"] if p["verdict"] == "slower"]
        if slower and args.confirm:
            print(f"  confirming {len(slower)} point(s) flagged slower with fresh "
                  f"processes: {', '.join(slower)}")
            confirm(timed, run(trees, bench=exactly(slower), **settings))
        timed["load"] = report["load"] + timed["load"]
        report.update(timed)
    report["seconds"] = time.perf_counter() - t0
    return report


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker is not None:
        return worker(args.worker, args.suite_root, args.cpu, args.placements)
    try:
        if args.base == "HEAD~1" and args.head is None and not has_parent("HEAD"):
            print("bench-gate: HEAD is the first commit; there is no commit before it to "
                  "compare with, so nothing is gated.")
            return 0
        base = resolve(args.base, "--base")
        head = resolve(args.head, "--head") if args.head is not None else None
        patterns = accepted_patterns(head or "HEAD")
        with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
            trees = {"base": export(base, _mkdir(tmp, "base")),
                     "head": export(head, _mkdir(tmp, "head")) if head else ROOT}
            stages = " and ".join(
                ([f"counting instructions under Valgrind (floor {_count_floor(args):.1%})"]
                 if args.count else [])
                + ([f"timing {args.processes} processes each, {args.rounds} interleaved rounds"]
                   if args.time else []))
            print(f"bench-gate: {trees['head'] if head is None else head[:12]} (head) against "
                  f"{base[:12]} (base), {stages}; load {os.getloadavg()}")
            with open(pathlib.Path(tmp) / "workers.log", "w") as log:
                try:
                    report = gate(trees, args, log)
                except BaseTooOld as e:
                    raise GateError(too_old(args.base, e)) from None
                except GateError:
                    log.flush()
                    sys.stderr.write((pathlib.Path(tmp) / "workers.log").read_text()[-4000:])
                    raise
    except GateError as e:
        print(f"bench-gate: {e}", file=sys.stderr)
        return 2
    apply_trailers(report, patterns)
    report.update(base=base, head=head or "working tree")
    print(render(report))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    bad = flagged(report)
    print(f"bench-gate: {len(bad)} flagged in {report['seconds']:.0f} s "
          f"(load at the start and end: {report['load'][0]}, {report['load'][-1]})")
    for pid in bad:
        print(f"  flagged: {pid}")
    if bad:
        print(f"A change made on purpose says so in its commit message, a trailer line "
              f"'{TRAILER}: <regular expression matching the names above>'.")
    return 1 if bad else 0


def _mkdir(tmp, name):
    path = pathlib.Path(tmp) / name
    path.mkdir()
    return path


if __name__ == "__main__":
    sys.modules.setdefault("bench_gate", sys.modules[__name__])    # one module for bench_count
    sys.exit(main())
