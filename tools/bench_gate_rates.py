"""The gate's error rates, measured: false alarms on A/A runs, and slowdowns of 5, 10 and 25 %
injected into one kernel, caught or not.

One run is one ``bench_gate.run`` with the gate's own settings (``PROCESSES``, ``ROUNDS``,
``PLACEMENTS``, ``MIN_SAMPLE_S``, ``MIN_CHANGE``) and these trees, all exported from ``--base``:

* ``base``: the commit, as in every gate run (its processes in two halves give the A/A floor);
* ``head``: the same commit exported again to its own folder, timed on every point: each of
  its points flagged is a false alarm (an A/A run, as ``make bench-gate BASE=HEAD`` on a
  clean checkout);
* ``slow5``, ``slow10``, ``slow25``: the commit with the RNN's unbatched forward made to do
  5, 10, 25 % more work (after its T steps it runs the first 5, 10, 25 % of them again into
  a scratch array), timed on ``Kernels.time_forward(rnn, large)`` alone, the point that calls
  it: flagged there is a detection.

The patched folders are throwaway trees under /tmp, never committed. ``--load`` runs a second
process beside the gate for the whole run: one thread multiplying 400 x 400 matrices without
a pause. Each run's row records the load average (``os.getloadavg``) at its start and end:
the machine is shared, so "idle" means no load of ours, and the numbers say what there was.

Writes one CSV row per (run, label, point) to ``--out`` (appending), and prints a summary.
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_gate  # noqa: E402

INJECTED = "Kernels.time_forward(rnn, large)"
LEVELS = {"slow5": 0.05, "slow10": 0.10, "slow25": 0.25}

_ANCHOR = "        _forward_vec(X, W_xh, W_hh, b, h0, use_tanh, H)\n"
_EXTRA = ("        _extra = int(round({f} * X.shape[0]))            # injected: {f} more steps\n"
          "        _forward_vec(X[:_extra], W_xh, W_hh, b, h0, use_tanh, np.empty((_extra, d_h), X.dtype))\n")

LOAD = ("import os; os.environ['OPENBLAS_NUM_THREADS'] = '1'\n"
        "import numpy as np\n"
        "a = np.random.default_rng(0).standard_normal((400, 400))\n"
        "while True:\n    a = np.tanh(a @ a)\n")


def inject(tree, fraction):
    """Make the RNN's unbatched forward in ``tree`` do ``fraction`` more steps."""
    path = pathlib.Path(tree) / "harness" / "kernels" / "rnn.py"
    text = path.read_text()
    if text.count(_ANCHOR) != 1:
        raise SystemExit(f"{path}: the unbatched forward's call is not where the injection expects")
    path.write_text(text.replace(_ANCHOR, _ANCHOR + _EXTRA.format(f=fraction)))


def trees_for(base, root):
    """Export the folders once (their Numba caches then serve every later run)."""
    root = pathlib.Path(root)
    out = {}
    for label in ["base", "head", *LEVELS]:
        folder = root / label
        if not folder.exists():
            folder.mkdir(parents=True)
            bench_gate.export(base, folder)
            if label in LEVELS:
                inject(folder, LEVELS[label])
        out[label] = folder
    return out


CONDITIONS = {"idle": "no load of ours", "loaded": "a second process of ours"}


def summary(rows):
    """The README's table of error rates from the CSV's rows (dicts): per condition, the
    runs, their load averages at the start, the A/A points flagged (either way) of all A/A
    points, and per injected level the runs whose slowdown was flagged slower."""
    lines = ["| condition | runs | load average at the start | A/A points flagged | "
             "5 % caught | 10 % caught | 25 % caught |", "|---|---|---|---|---|---|---|"]
    for cond, words in CONDITIONS.items():
        mine = [r for r in rows if r["condition"] == cond]
        if not mine:
            continue
        runs = sorted({r["run"] for r in mine})
        loads = [float(r["load_start"]) for r in mine]
        aa = [r for r in mine if r["label"] == "head"]
        bad = sum(r["verdict"] in ("slower", "faster") for r in aa)
        cells = []
        for label in LEVELS:
            hit = [r for r in mine if r["label"] == label]
            cells.append(f"{sum(r['verdict'] == 'slower' for r in hit)} of {len(hit)}")
        lines.append(f"| {words} | {len(runs)} | {min(loads):.1f}–{max(loads):.1f} | "
                     f"{bad} of {len(aa)} ({100 * bad / max(len(aa), 1):.1f} %) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def rescore(reports, min_change=bench_gate.MIN_CHANGE):
    """The CSV's rows of stored reports (the .jsonl beside it, every sample kept) under the
    gate's rule as it stands: ``min_change`` and ``floor_of``/``verdict`` applied again."""
    rows = []
    for rep in reports:
        for p in rep["points"]:
            if "samples" not in p:
                continue
            s = p["samples"]
            floor = bench_gate.floor_of(bench_gate.aa_ratio(s["base"]), min_change)
            ratio, lo, hi = bench_gate.process_ratio(s[p["label"]], s["base"])
            rows.append({"run": rep["run"], "clock": rep.get("clock", "wall"),
                         "condition": rep["condition"], "load_start": f"{rep['load'][0][0]:.2f}",
                         "load_end": f"{rep['load'][-1][0]:.2f}", "label": p["label"],
                         "id": p["id"], "ratio": f"{ratio:.4f}", "lo": f"{lo:.4f}",
                         "hi": f"{hi:.4f}", "floor": f"{floor:.4f}",
                         "verdict": bench_gate.verdict(ratio, lo, hi, floor),
                         "seconds": f"{rep['seconds']:.0f}"})
    return rows


def w_cond(args):
    return "loaded" if args.load else "idle"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base")
    ap.add_argument("--summary", default=None, help="print the table of this CSV and stop")
    ap.add_argument("--rescore", default=None,
                    help="a .jsonl of stored runs: write --out anew under the gate's rule")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", action="store_true", help="a second process busy beside the gate")
    ap.add_argument("--trees", default="/tmp/bench-gate-rates")
    ap.add_argument("--out", default=None)
    ap.add_argument("--clock", choices=sorted(bench_gate.CLOCKS), default=bench_gate.CLOCK)
    args = ap.parse_args(argv)
    if args.rescore:
        with open(args.rescore) as f:
            rows = rescore([bench_gate.json.loads(line) for line in f])
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(summary(rows))
        return
    if args.summary:
        with open(args.summary, newline="") as f:
            print(summary(list(csv.DictReader(f))))
        return
    if args.base is None or args.out is None:
        ap.error("--base and --out are required to measure (or --summary CSV to print)")
    base = bench_gate.resolve(args.base)
    trees = trees_for(base, args.trees)
    only = {label: "^" + INJECTED.replace("(", r"\(").replace(")", r"\)") + "$" for label in LEVELS}
    fields = ["run", "clock", "condition", "load_start", "load_end", "label", "id", "ratio", "lo", "hi",
              "floor", "verdict", "seconds"]
    new = not pathlib.Path(args.out).exists()
    with open(args.out, "a", newline="") as f, open(pathlib.Path(args.trees) / "workers.log", "a") as log:
        w = csv.DictWriter(f, fieldnames=fields)
        if new:
            w.writeheader()
        for run in range(args.runs):
            loader = (subprocess.Popen([sys.executable, "-c", LOAD]) if args.load else None)
            try:
                time.sleep(1.0 if loader else 0)
                report = bench_gate.run(trees, bench="^Kernels", only=only, log=log,
                                        say=lambda *_: None, clock=args.clock)
            finally:
                if loader is not None:
                    loader.terminate()
                    loader.wait()
            tag = f"{int(time.time())}-{run}"
            for p in report["points"]:
                if "ratio" not in p:
                    continue
                w.writerow({"run": tag, "clock": args.clock, "condition": "loaded" if args.load else "idle",
                            "load_start": f"{report['load'][0][0]:.2f}",
                            "load_end": f"{report['load'][-1][0]:.2f}",
                            "label": p["label"], "id": p["id"], "ratio": f"{p['ratio']:.4f}",
                            "lo": f"{p['lo']:.4f}", "hi": f"{p['hi']:.4f}",
                            "floor": f"{p['floor']:.4f}", "verdict": p["verdict"],
                            "seconds": f"{report['seconds']:.0f}"})
            f.flush()
            with open(pathlib.Path(args.out).with_suffix(".jsonl"), "a") as raw:   # the samples
                raw.write(bench_gate.json.dumps(dict(report, run=tag, condition=w_cond(args))) + "\n")
            aa = [p for p in report["points"] if p.get("label") == "head" and "ratio" in p]
            caught = {p["label"]: p["verdict"] for p in report["points"] if p.get("label") in LEVELS}
            print(f"run {run + 1}/{args.runs}: load {report['load'][0][0]:.2f} -> "
                  f"{report['load'][-1][0]:.2f}, {report['seconds']:.0f} s; A/A flagged "
                  f"{sum(p['verdict'] == 'slower' for p in aa)} of {len(aa)} "
                  f"(faster {sum(p['verdict'] == 'faster' for p in aa)}); {caught}", flush=True)


if __name__ == "__main__":
    main()
