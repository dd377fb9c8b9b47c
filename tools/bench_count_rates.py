"""The counting stage's error rates, measured: false alarms on A/A runs, and 2, 5, 10 and 25 %
more work planted in one kernel, caught or not.

One run is one ``bench_count.count`` of these trees, all exported from ``--base``, each in
fresh processes (a native one, then one under Valgrind):

* ``base``: the commit, counted on every ``Kernels`` point;
* ``head``: the same commit exported again to its own folder, counted on every point: each
  point whose count moves past ``bench_count.FLOOR`` is a false alarm (an A/A run);
* ``slow2`` ... ``slow25``: the commit with the RNN's unbatched forward made to do 2, 5, 10,
  25 % more steps (``bench_gate_rates.inject``: after its T steps it runs the first
  fraction of them again into a scratch array), counted on ``INJECTED``, the point that calls
  it, alone: flagged there is a detection. The planted trees are throwaway folders under
  ``--trees``, never committed.

``--load`` runs a process beside the counting for the whole run (``bench_gate_rates.LOAD``:
one thread multiplying 400 x 400 matrices without a pause). Each row records the load
average at its run's start and end. Appends one CSV row per (run, label, point) to
``--out`` (the docs keep ``docs/gate_counts.csv``) and prints ``summary``.

``--cpu-cost CSV`` measures instead what the counting stage's CPU costs in speed: the
gate's timing stage (``bench_gate.run``) on one tree, its ``base`` workers running the
kernels Numba compiles for this machine, its ``avx2`` workers those it compiles for
``bench_count.CPU`` (Haswell, AVX2: what the counts are of). One row a point: the AVX2 time
over the native time, with its 95 % interval, the BLAS kernel that ran (threadpoolctl) and
the load (``docs/gate_cpu_cost.csv``).
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_count  # noqa: E402
import bench_gate  # noqa: E402
import bench_gate_rates as timing_rates  # noqa: E402

INJECTED = timing_rates.INJECTED
LEVELS = {"slow2": 0.02, "slow5": 0.05, "slow10": 0.10, "slow25": 0.25}
CONDITIONS = {"idle": "no load of ours", "loaded": "a second process of ours"}
FIELDS = ["run", "condition", "load_start", "load_end", "label", "id", "base_ir", "head_ir",
          "ratio", "floor", "verdict", "seconds"]


def rows_of(counts, run, condition, load, seconds, floor=bench_count.FLOOR):
    """The CSV's rows of one run: every label against base, on the points it counted."""
    out = []
    for label in counts:
        if label == "base":
            continue
        mine = {pid: c for pid, c in counts["base"].items() if pid in counts[label]}
        for r in bench_count.compare(mine, counts[label], floor):
            if "ratio" not in r:
                continue
            out.append({"run": run, "condition": condition, "load_start": f"{load[0]:.2f}",
                        "load_end": f"{load[1]:.2f}", "label": label, "id": r["id"],
                        "base_ir": f"{r['base_ir']:.0f}", "head_ir": f"{r['head_ir']:.0f}",
                        "ratio": f"{r['ratio']:.6f}", "floor": f"{floor:g}",
                        "verdict": r["verdict"], "seconds": f"{seconds:.0f}"})
    return out


def summary(rows):
    """The docs' table, one line per condition: its runs and their load averages at the start,
    the A/A points flagged of all A/A points and the largest A/A change, and per planted level
    the runs that caught it and the count's ratio there (its smallest and largest over the
    runs). Every share with its 95 % Clopper-Pearson interval (``bench_gate_rates.share``)."""
    head = ("| condition | runs | load average at the start | A/A points flagged | "
            "largest A/A change | " + " | ".join(f"{100 * f:.0f} % caught (Ir ratio)"
                                                   for f in LEVELS.values()) + " |")
    lines = [head, "|" + "---|" * (5 + len(LEVELS))]
    for cond, words in CONDITIONS.items():
        mine = [r for r in rows if r["condition"] == cond]
        if not mine:
            continue
        runs = sorted({r["run"] for r in mine})
        loads = [float(r["load_start"]) for r in mine]
        aa = [r for r in mine if r["label"] == "head"]
        flagged = sum(r["verdict"] != "same" for r in aa)
        worst = max((abs(float(r["ratio"]) - 1) for r in aa), default=float("nan"))
        cells = []
        for label in LEVELS:
            hit = [r for r in mine if r["label"] == label]
            ratios = [float(r["ratio"]) for r in hit]
            spread = (f" ({min(ratios):.4f}–{max(ratios):.4f})" if ratios else "")
            cells.append(timing_rates.share(sum(r["verdict"] == "slower" for r in hit),
                                            len(hit)) + spread)
        lines.append(f"| {words} | {len(runs)} | {min(loads):.1f}–{max(loads):.1f} | "
                     f"{timing_rates.share(flagged, len(aa))} | {100 * worst:.4f} % | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def against_targets(rows, runs_wanted=10, false_max=0.01, caught_min=0.95):
    """One line per condition, and one for both together: the runs, the A/A points flagged and
    the 10 % levels caught, each with its interval, against the targets (at most ``false_max``
    of points per A/A run falsely flagged, ``caught_min`` of runs catching 10 %,
    ``runs_wanted`` runs a condition). Then the margin, which the binomial intervals of a few
    runs cannot show: how far the smallest count ratio of the 10 % level lies past the floor,
    in units of the largest A/A change."""
    out = []
    groups = [(words, [r for r in rows if r["condition"] == cond])
              for cond, words in CONDITIONS.items()]
    groups.append(("both conditions together", list(rows)))
    for words, mine in groups:
        if not mine:
            continue
        runs = len({r["run"] for r in mine})
        aa = [r for r in mine if r["label"] == "head"]
        bad = sum(r["verdict"] != "same" for r in aa)
        ten = [r for r in mine if r["label"] == "slow10"]
        hit = sum(r["verdict"] == "slower" for r in ten)
        wanted = ("" if words.startswith("both") else
                  f" (ten wanted: {'met' if runs >= runs_wanted else 'not met'})")
        out.append(f"- {words}: {runs} runs{wanted}; A/A points flagged "
                   f"{timing_rates.share(bad, len(aa))} (at most {100 * false_max:.0f} %: "
                   f"{timing_rates._judge(bad, len(aa), false_max, below=True)}); 10 % more "
                   f"work caught {timing_rates.share(hit, len(ten))} (in "
                   f"{100 * caught_min:.0f} % of runs: "
                   f"{timing_rates._judge(hit, len(ten), caught_min, below=False)}).")
    aa = [abs(float(r["ratio"]) - 1) for r in rows if r["label"] == "head"]
    ten = [float(r["ratio"]) for r in rows if r["label"] == "slow10"]
    if aa and ten:
        floor = float(rows[0]["floor"])
        worst = max(aa)
        gap = min(ten) - 1 - floor
        times = f"{gap / worst:,.0f} times" if worst > 0 else "infinitely many times"
        out.append(f"- margin: the 10 % level's smallest count ratio, {min(ten):.4f}, lies "
                   f"{100 * gap:.2f} % past the floor ({100 * floor:g} %), {times} the largest "
                   f"A/A change ({100 * worst:.4f} %).")
    return "\n".join(out)


COST_FIELDS = ["id", "native_s", "avx2_s", "ratio", "lo", "hi", "aa_ratio", "rounds",
               "processes", "blas_kernel", "load_start", "load_end"]


def cpu_cost(tree, out, rounds=bench_gate.ROUNDS, processes=bench_gate.PROCESSES):
    """Write ``out``: each ``Kernels`` point's time with the counting stage's CPU over its
    time with this machine's, measured side by side by the gate's timing stage."""
    from threadpoolctl import threadpool_info
    import numpy  # noqa: F401  (threadpoolctl reports the BLAS NumPy loaded)
    kernel = ";".join(sorted({str(i.get("architecture")) for i in threadpool_info()
                              if i.get("internal_api") == "openblas"})) or "unknown"
    report = bench_gate.run({"base": tree, "avx2": tree}, bench="^Kernels", rounds=rounds,
                            processes=processes, envs={"avx2": dict(bench_count.CPU)})
    rows = [{"id": p["id"], "native_s": f"{p['base_s']:.6g}", "avx2_s": f"{p['head_s']:.6g}",
             "ratio": f"{p['ratio']:.4f}", "lo": f"{p['lo']:.4f}", "hi": f"{p['hi']:.4f}",
             "aa_ratio": f"{p['aa_ratio']:.4f}", "rounds": rounds, "processes": processes,
             "blas_kernel": kernel, "load_start": f"{report['load'][0][0]:.2f}",
             "load_end": f"{report['load'][-1][0]:.2f}"}
            for p in report["points"] if "ratio" in p]
    tmp = pathlib.Path(out).with_suffix(".partial")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COST_FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(out)
    return rows


def cost_table(rows):
    """The docs' table of ``cpu_cost``'s rows: per family and size, forward and backward."""
    lines = ["| point | native ms | AVX2 ms | AVX2 / native [95 % interval] |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {1e3 * float(r['native_s']):.3f} | "
                     f"{1e3 * float(r['avx2_s']):.3f} | {float(r['ratio']):.3f} "
                     f"[{float(r['lo']):.3f}, {float(r['hi']):.3f}] |")
    ratios = sorted(float(r["ratio"]) for r in rows)
    if ratios:
        lines.append("")
        lines.append(f"Over the {len(ratios)} points the AVX2 build's time is "
                     f"{ratios[0]:.2f}–{ratios[-1]:.2f} times the native one's (median "
                     f"{statistics.median(ratios):.2f}).")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base")
    ap.add_argument("--summary", default=None, help="print the table of this CSV and stop")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", action="store_true", help="a second process busy beside it")
    ap.add_argument("--trees", default="/tmp/bench-count-rates")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cpu-cost", default=None,
                    help="a CSV to write: the AVX2 build's time over the native one's, per point")
    args = ap.parse_args(argv)
    if args.cpu_cost:
        rows = cpu_cost(bench_gate.ROOT, args.cpu_cost)
        print(cost_table(rows))
        return 0
    if args.summary:
        with open(args.summary, newline="") as f:
            rows = list(csv.DictReader(f))
        print(summary(rows) + "\n\n" + against_targets(rows))
        return 0
    if args.base is None or args.out is None:
        ap.error("--base and --out are required to measure (or --summary CSV to print)")
    if args.runs < 1:
        ap.error(f"--runs must be a positive whole number, got {args.runs}")
    trees = timing_rates.trees_for(bench_gate.resolve(args.base), args.trees, LEVELS)
    only = {label: bench_gate.exactly([INJECTED]) for label in LEVELS}
    condition = "loaded" if args.load else "idle"
    new = not pathlib.Path(args.out).exists()
    with open(args.out, "a", newline="") as f, \
            open(pathlib.Path(args.trees) / "workers.log", "a") as log:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        if new:
            w.writeheader()
        for run in range(args.runs):
            loader = subprocess.Popen([sys.executable, "-c", timing_rates.LOAD]) \
                if args.load else None
            try:
                time.sleep(1.0 if loader else 0)
                load0, t0 = bench_gate.os.getloadavg()[0], time.perf_counter()
                counts = bench_count.count(trees, bench="^Kernels", only=only, log=log,
                                           say=lambda *_: None)
                seconds = time.perf_counter() - t0
                load1 = bench_gate.os.getloadavg()[0]
            finally:
                if loader is not None:
                    loader.terminate()
                    loader.wait()
            tag = f"{int(time.time())}-{run}"
            rows = rows_of(counts, tag, condition, (load0, load1), seconds)
            w.writerows(rows)
            f.flush()
            aa = [r for r in rows if r["label"] == "head"]
            caught = {r["label"]: f"{r['ratio']} {r['verdict']}" for r in rows
                      if r["label"] in LEVELS}
            print(f"run {run + 1}/{args.runs}: load {load0:.2f} -> {load1:.2f}, {seconds:.0f} s; "
                  f"A/A flagged {sum(r['verdict'] != 'same' for r in aa)} of {len(aa)}, "
                  f"largest change {max(abs(float(r['ratio']) - 1) for r in aa):.2e}; {caught}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
