"""The regression gate between two commits: their kernels timed in interleaved, paired rounds.

``make bench-gate BASE=<rev>`` runs ``python tools/bench_gate.py --base <rev>``: the working
tree (HEAD, with any uncommitted change) against ``<rev>``, both through this checkout's asv
suite (``benchmarks/``), as asv would run them, but in one run of a few minutes:

1. ``<rev>`` is exported (``git archive``) twice, to two folders under /tmp. Three worker
   processes start, each importing the ``harness`` of one tree: ``base`` (``<rev>``),
   ``base2`` (``<rev>``'s second copy, compiled on its own: the A/A pair) and ``head``
   (this checkout). Each sets up every point
   of the default suite's ``Kernels`` (every family, forward and backward, small and large)
   and keeps it, compiled and with its inputs, for the whole run.
2. ``rounds`` rounds follow. In each, every point is timed once by every worker, the points
   and the workers in an order shuffled from a fixed seed, one worker at a time, every
   worker pinned to the same CPU; a sample is the mean CPU time of enough calls to last
   ``min_sample_s`` (``CLOCK``: other processes' load does not lengthen it). A load that comes and goes hits
   the three samples of a point within milliseconds of each other, so the ratio of a
   round's samples cancels it.
3. Each point's change is the median over rounds of head / base within the round (the
   paired ratio: load shared by a round cancels in it) with its 95 % bootstrap interval
   (``harness.infra.stats.bootstrap_interval``), beside the A/A floor of the same point in
   the same run: the larger distance from 1 of base2 / base's ratio and interval
   (``timing.noise_floor``'s definition), and never under ``MIN_CHANGE``. A point is
   flagged slower only when its whole interval lies above 1 + that floor (faster: below
   1 - floor; reported, not failed).
4. The default suite's deterministic ``track_`` numbers (``common.Tracked``: multiplications,
   spans, fitted decay rates) are computed by ``base`` and ``head`` and must be equal to the
   last bit; any difference is flagged.

Exit status: 0 nothing flagged, 1 something flagged, 2 the gate could not run (a bad
``--base``, a shallow clone without it, a worker that failed). A commit that slows a kernel
or changes a tracked number on purpose says so in its message with a trailer line
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
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]        # the checkout whose suite is run

ROUNDS = 15             # interleaved rounds; the interval needs at least 3 (stats.MIN_ROUNDS)
MIN_SAMPLE_S = 0.05     # one sample: calls enough to last this long
# The floor is never below 10 %: under it, no change is claimed. In A/A runs on the shared
# two-core machine, copies of one commit, each compiled and run in its own process, differed
# by 5-16 % on a few kernels now and then (the RNN's and LSTM's), more than a second A/A
# pair in the same run always showed (at 3 %, 3 of 24 points flagged in one of 3 A/A runs).
MIN_CHANGE = 0.10
SEED = 0                # the orders of points and workers in each round
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


def worker(tree, suite_root, cpu=None):
    """Serve one tree's points over stdin/stdout, one JSON object a line each way, on the
    one CPU ``cpu`` when given (every worker on the same one: see ``gate_cpu``)."""
    proto, sys.stdout = sys.stdout, sys.stderr          # anything the harness prints: stderr
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    sys.path.insert(0, str(tree))
    import harness
    where = pathlib.Path(harness.__file__).resolve()
    if pathlib.Path(tree).resolve() not in where.parents:
        raise SystemExit(f"bench_gate worker: harness imported from {where}, not from {tree}")
    common = _load_suite(suite_root)
    points = {pid: (kind, cls, method, combo)
              for pid, kind, cls, method, combo in suite_points(common)}
    instances = {}                          # (class, params) -> (set-up instance, its args)
    caches = {}                             # class -> its setup_cache's value, made once

    def answer(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    def bound(pid):
        kind, cls, method, combo = points[pid]
        inst, args = instances[(cls.__name__, combo)]
        return getattr(inst, method), args

    answer({"ready": True, "harness": str(where.parent)})
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "setup":
                status = {}
                for pid in req["points"]:
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
                            inst = cls()
                            if hasattr(inst, "setup"):
                                inst.setup(*args)
                            instances[key] = (inst, args)
                        except NotImplementedError as e:     # asv's "skipped"
                            instances[key] = e
                    got = instances[key]
                    status[pid] = (f"skipped: {got}" if isinstance(got, NotImplementedError)
                                   else "ok")
                answer({"status": status})
            elif op == "track":
                fn, args = bound(req["id"])
                answer({"value": repr(float(fn(*args)))})
            elif op == "calibrate":
                fn, args = bound(req["id"])
                fn(*args)
                t0 = time.perf_counter()
                fn(*args)
                once = time.perf_counter() - t0
                answer({"n": max(1, math.ceil(req["min_sample_s"] / max(once, 1e-9)))})
            elif op == "time":
                fn, args = bound(req["id"])
                n = req["n"]
                clock = CLOCKS[req.get("clock", CLOCK)]
                gc.disable()                            # as timeit: no collection mid-sample
                t0 = clock()
                for _ in range(n):
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
            answer({"error": f"{type(e).__name__}: {e}"})


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

    def __init__(self, label, tree, suite_root=ROOT, log=None, cpu=None):
        self.label, self.tree = label, pathlib.Path(tree)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)
        pin = [] if cpu is None else ["--cpu", str(cpu)]
        self.proc = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", str(tree),
             "--suite-root", str(suite_root), *pin],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL,
            text=True, env=env, cwd=str(tree))
        self.harness = self._read()["harness"]

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise GateError(f"the {self.label} worker ({self.tree}) exited "
                            f"(status {self.proc.wait()}); its stderr is in the gate's log")
        return json.loads(line)

    def ask(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        if "error" in out:
            raise GateError(f"the {self.label} worker failed on {req}: {out['error']}")
        return out

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


def paired_ratio(head, base, seed=SEED):
    """(ratio, low, high): the median over rounds of head[r] / base[r], and its 95 % bootstrap
    interval from resampling the rounds; NaN bounds under 3 rounds."""
    import numpy as np
    from harness.infra import stats

    head, base = np.asarray(head, dtype=float), np.asarray(base, dtype=float)
    if head.shape != base.shape or head.ndim != 1:
        raise ValueError(f"head and base must hold the same rounds, got {head.shape} "
                         f"and {base.shape}.")
    r = np.log(head / base)
    lo, hi = stats.bootstrap_interval(lambda x: np.median(x, axis=1), r, seed=seed)
    return float(np.exp(np.median(r))), float(np.exp(lo)), float(np.exp(hi))


def floor_of(aa_ratio, aa_lo, aa_hi, min_change=MIN_CHANGE):
    """The A/A floor: the larger distance from 1 of base2 / base's ratio and its interval
    (``timing.noise_floor``'s definition), at least ``min_change``."""
    spread = [abs(v - 1.0) for v in (aa_ratio, aa_lo, aa_hi) if not math.isnan(v)]
    return max([min_change] + spread)


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
        min_change=MIN_CHANGE, say=print, clock=CLOCK):
    """Time and compare. ``trees``: {label: folder} with ``base`` and ``base2`` (the same
    commit) and one or more others, each compared with ``base``. ``only``: {label: regex}
    to time a label on the matching points alone (the error-rate experiments).

    Returns the report: {"points": [...], "tracks": {...}, "load": [...], "seconds": ...}.
    """
    import numpy as np

    t_start = time.perf_counter()
    load = [os.getloadavg()]
    # the head's suite picks the points
    order = ["base", "base2"] + [k for k in trees if k not in ("base", "base2")]
    workers = {}
    cpu = gate_cpu()
    try:
        for label in order:
            say(f"  starting {label} ({trees[label]}) on CPU {cpu}")
            workers[label] = Worker(label, trees[label], log=log, cpu=cpu)
        sys.path.insert(0, str(ROOT))
        common = _load_suite(ROOT)
        all_points = suite_points(common)
        if bench is not None:
            all_points = [p for p in all_points if re.search(bench, p[0])]
        timed = [p[0] for p in all_points if p[1] == "time"]
        tracked = [p[0] for p in all_points if p[1] == "track"]
        wants = {label: [p for p in timed if label not in (only or {})
                         or re.search(only[label], p)] for label in order}
        status = {}
        for label in order:
            t0 = time.perf_counter()
            pts = wants[label] + (tracked if label in ("base", "head") else [])
            status[label] = workers[label].ask(op="setup", points=pts)["status"]
            say(f"  {label}: {len(pts)} points set up in {time.perf_counter() - t0:.0f} s")

        # tracks: exactly equal
        values = {label: {pid: workers[label].ask(op="track", id=pid)["value"]
                          for pid in tracked if status[label].get(pid) == "ok"}
                  for label in ("base", "head") if label in workers}
        tracks = compare_tracks(values.get("base", {}), values.get("head", {}))

        # timed points: set up everywhere they are wanted, or reported as skipped
        runnable = [pid for pid in timed
                    if status["base"].get(pid) == "ok" and status["base2"].get(pid) == "ok"]
        numbers = {pid: workers["base"].ask(op="calibrate", id=pid,
                                            min_sample_s=min_sample_s)["n"] for pid in runnable}
        samples = {(label, pid): np.empty(rounds) for label in order for pid in runnable
                   if pid in wants[label] and status[label].get(pid) == "ok"}
        rng = np.random.default_rng(SEED)
        for r in range(rounds):
            for i in rng.permutation(len(runnable)):
                pid = runnable[i]
                labels = [lab for lab in order if (lab, pid) in samples]
                for j in rng.permutation(len(labels)):
                    lab = labels[j]
                    samples[(lab, pid)][r] = workers[lab].ask(op="time", id=pid, n=numbers[pid],
                                                              clock=clock)["seconds"]
            load.append(os.getloadavg())
            say(f"  round {r + 1}/{rounds} done, {time.perf_counter() - t_start:.0f} s")
    finally:
        for w in workers.values():
            w.close()

    points = []
    for pid in timed:
        if pid not in runnable:
            points.append({"id": pid, "verdict": "skipped",
                           "why": status["base"].get(pid) or status["base2"].get(pid)})
            continue
        a = samples[("base", pid)]
        aa, aa_lo, aa_hi = paired_ratio(samples[("base2", pid)], a)
        floor = floor_of(aa, aa_lo, aa_hi, min_change)
        for label in order[2:]:
            if (label, pid) not in samples:
                if pid in wants[label]:
                    points.append({"id": pid, "label": label, "verdict": "skipped",
                                   "why": status[label].get(pid)})
                continue
            b = samples[(label, pid)]
            ratio, lo, hi = paired_ratio(b, a)
            points.append({"id": pid, "label": label, "calls_per_sample": numbers[pid],
                           "base_s": float(np.median(a)), "head_s": float(np.median(b)),
                           "ratio": ratio, "lo": lo, "hi": hi,
                           "aa_ratio": aa, "aa_lo": aa_lo, "aa_hi": aa_hi, "floor": floor,
                           "verdict": verdict(ratio, lo, hi, floor),
                           "samples": {"base": a.tolist(), "base2": samples[("base2", pid)].tolist(),
                                       label: b.tolist()}})
    return {"points": points,
            "tracks": {pid: {"base": b, "head": h, "verdict": v}
                       for pid, (b, h, v) in tracks.items()},
            "load": load, "cpu": cpu, "clock": clock, "rounds": rounds, "min_sample_s": min_sample_s,
            "min_change": min_change, "seconds": time.perf_counter() - t_start}


def apply_trailers(report, patterns):
    """Mark flagged points (slower, changed) whose name a Bench-Accept pattern matches."""
    for p in report["points"]:
        if p["verdict"] == "slower" and any(rx.search(p["id"]) for rx in patterns):
            p["verdict"] = "accepted"
    for pid, t in report["tracks"].items():
        if t["verdict"] == "changed" and any(rx.search(pid) for rx in patterns):
            t["verdict"] = "accepted"
    return report


def flagged(report):
    """The names of what fails the gate: slower points and changed tracks."""
    return ([p["id"] for p in report["points"] if p["verdict"] == "slower"]
            + [pid for pid, t in report["tracks"].items() if t["verdict"] == "changed"])


def render(report):
    """The gate's table: one line per timed point and per track that is not unchanged."""
    lines = [f"{'point':<44} {'base ms':>9} {'head ms':>9} {'head/base [95 % interval]':>27} "
             f"{'A/A floor':>9}  verdict"]
    for p in report["points"]:
        if "ratio" not in p:
            lines.append(f"{p['id']:<44} {'':>9} {'':>9} {'':>27} {'':>9}  {p['verdict']}")
            continue
        lines.append(f"{p['id']:<44} {1e3 * p['base_s']:9.3f} {1e3 * p['head_s']:9.3f} "
                     f"{p['ratio']:9.3f} [{p['lo']:.3f}, {p['hi']:.3f}]   "
                     f"{100 * p['floor']:7.1f} %  {p['verdict']}")
    n_same = sum(t["verdict"] == "same" for t in report["tracks"].values())
    lines.append(f"track_ numbers: {n_same} of {len(report['tracks'])} exactly equal")
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
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--suite-root", default=str(ROOT), help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is None and args.base is None:
        ap.error("--base is required (make bench-gate BASE=<rev>)")
    if args.rounds < 3:
        ap.error(f"--rounds must be at least 3 (an interval needs 3 rounds), got {args.rounds}")
    if not 0 <= args.min_change < 1:
        ap.error(f"--min-change must be a fraction in [0, 1), got {args.min_change}")
    if not args.min_sample_s > 0:
        ap.error(f"--min-sample-s must be a positive number of seconds, got {args.min_sample_s}")
    if args.bench is not None:
        try:
            re.compile(args.bench)
        except re.error as e:
            ap.error(f"--bench must be a regular expression, got {args.bench!r} ({e})")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker is not None:
        return worker(args.worker, args.suite_root, args.cpu)
    try:
        if args.base == "HEAD~1" and args.head is None and not has_parent("HEAD"):
            print("bench-gate: HEAD is the first commit; there is no commit before it to "
                  "compare with, so nothing is gated.")
            return 0
        base = resolve(args.base, "--base")
        head = resolve(args.head, "--head") if args.head is not None else None
        patterns = accepted_patterns(head or "HEAD")
        with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
            # base2 is its own export, compiled apart: a tree compiled on its own can run a
            # kernel a few per cent faster or slower than another copy of the same source,
            # and the A/A floor must hold that difference too, not only the rounds' noise
            trees = {"base": export(base, _mkdir(tmp, "base")),
                     "base2": export(base, _mkdir(tmp, "base2"))}
            trees["head"] = (export(head, _mkdir(tmp, "head")) if head else ROOT)
            print(f"bench-gate: {trees['head'] if head is None else head[:12]} (head) against "
                  f"{base[:12]} (base), {args.rounds} interleaved rounds; load {os.getloadavg()}")
            with open(pathlib.Path(tmp) / "workers.log", "w") as log:
                try:
                    report = run(trees, rounds=args.rounds, min_sample_s=args.min_sample_s,
                                 bench=args.bench, log=log, clock=args.clock,
                                 min_change=args.min_change)
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
    sys.exit(main())
