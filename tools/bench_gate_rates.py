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
a pause. ``--condition asv`` labels runs made while the caller runs asv's long suite beside
them (``HARNESS_BENCH_SUITE=long asv run``: one benchmark process at a time). A point flagged
slower is timed again by fresh processes, as the gate does (``--no-confirm``: not);
``--processes`` sets the workers a tree (the gate's 4 by default). Each run's row records
the load average (``os.getloadavg``) at its start and end:
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

_ANCHOR = "        _forward_unbatched(X, W_xh, W_hh, b, h0, use_tanh, H)\n"
_EXTRA = ("        _extra = int(round({f} * X.shape[0]))            # injected: {f} more steps\n"
          "        _forward_unbatched(X[:_extra], W_xh, W_hh, b, h0, use_tanh,\n"
          "                           np.empty((_extra, d_h), X.dtype))\n")

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


def trees_for(base, root, levels=None):
    """Export the folders once (their Numba caches then serve every later run): base, head
    and one planted tree for each of ``levels`` ({label: fraction}; default ``LEVELS``)."""
    levels = LEVELS if levels is None else levels
    root = pathlib.Path(root)
    out = {}
    for label in ["base", "head", *levels]:
        folder = root / label
        if not folder.exists():
            folder.mkdir(parents=True)
            bench_gate.export(base, folder)
            if label in levels:
                inject(folder, levels[label])
        out[label] = folder
    return out


CONDITIONS = {"idle": "no load of ours", "loaded": "a second process of ours",
              "asv": "asv's long suite beside it"}


def summary(rows):
    """The README's table of error rates from the CSV's rows (dicts), one line per condition
    and gate design: runs with the confirmation step (a point flagged slower fails the gate
    only if fresh processes flag it again) and runs of the first stage alone (before the step
    existed; their 'failing' cells are '—'). Per line: the runs, their load averages at the
    start, the A/A points flagged at the first stage (either way) and failing the gate (slower,
    confirmed) of all A/A points, and per injected level the runs whose slowdown failed the gate
    (first stage only: flagged slower). Every count with its 95 % interval (``share``)."""
    lines = ["| condition | gate | runs | load average at the start | A/A points flagged "
             "(first stage) | A/A points failing the gate | 5 % caught | 10 % caught | "
             "25 % caught |", "|---|---|---|---|---|---|---|---|---|"]
    designs = sorted({int(r.get("processes") or bench_gate.PROCESSES) for r in rows})
    for cond, words in CONDITIONS.items():
        for procs, step in [(p, s) for p in designs for s in (True, False)]:
            mine = [r for r in rows if r["condition"] == cond
                    and (r.get("stages", "1") == "2") == step
                    and int(r.get("processes") or bench_gate.PROCESSES) == procs]
            if not mine:
                continue
            runs = sorted({r["run"] for r in mine})
            loads = [float(r["load_start"]) for r in mine]
            aa = [r for r in mine if r["label"] == "head"]
            first = sum(r["verdict"] in ("slower", "faster") for r in aa)
            failing = share(sum(_fails(r) for r in aa), len(aa)) if step else "—"
            cells = []
            for label in LEVELS:
                hit = [r for r in mine if r["label"] == label]
                cells.append(share(sum(_fails(r) if step else r["verdict"] == "slower"
                                       for r in hit), len(hit)))
            lines.append(f"| {words} | {procs} processes, "
                         f"{'with confirmation' if step else 'first stage only'} | "
                         f"{len(runs)} | {min(loads):.1f}–{max(loads):.1f} | "
                         f"{share(first, len(aa))} | {failing} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def against_targets(rows, processes=bench_gate.PROCESSES, runs_wanted=10, false_max=0.01,
                    caught_min=0.95):
    """One line per condition for the gate as it is (``processes`` a tree, both stages): its
    runs, its A/A points failing the gate and its 10 % slowdowns failing it, each with its 95 %
    interval against the issue's target (at most ``false_max`` of points per A/A run,
    ``caught_min`` of runs, at least ``runs_wanted`` runs): 'met' where the whole interval is
    on the target's side, 'not met' where it is all on the other, else 'not settled by these
    runs'."""
    out = []
    for cond, words in CONDITIONS.items():
        mine = [r for r in rows if r["condition"] == cond and r.get("stages") == "2"
                and int(r.get("processes") or bench_gate.PROCESSES) == processes]
        if not mine:
            continue
        runs = len({r["run"] for r in mine})
        aa = [r for r in mine if r["label"] == "head"]
        bad = sum(_fails(r) for r in aa)
        ten = [r for r in mine if r["label"] == "slow10"]
        hit = sum(_fails(r) for r in ten)
        out.append(f"- {words}, {processes} processes, both stages: {runs} runs "
                   f"(ten wanted: {'met' if runs >= runs_wanted else 'not met'}); A/A points "
                   f"failing the gate {share(bad, len(aa))} (at most {100 * false_max:.0f} %: "
                   f"{_judge(bad, len(aa), false_max, below=True)}); 10 % slowdowns caught "
                   f"{share(hit, len(ten))} (in {100 * caught_min:.0f} % of runs: "
                   f"{_judge(hit, len(ten), caught_min, below=False)}).")
    return "\n".join(out)


def _judge(k, n, target, below):
    """'met' / 'not met' / 'not settled by these runs': where the share's 95 % interval lies
    against ``target`` (``below``: the share must be at most the target, else at least)."""
    if n == 0:
        return "not settled by these runs"
    lo, hi = bounds(k, n)
    if below:
        return "met" if hi <= target else "not met" if lo > target else "not settled by these runs"
    return "met" if lo >= target else "not met" if hi < target else "not settled by these runs"


def bounds(k, n, confidence=0.95):
    """(low, high): the Clopper–Pearson interval of a share of k in n trials (exact for a
    binomial: 0 of 10 still allows up to 31 %)."""
    from scipy import stats as sps
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"k and n must satisfy 0 <= k <= n and n >= 1, got k={k}, n={n}")
    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(sps.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(sps.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def share(k, n):
    """'k of n (lo–hi %)', with the 95 % interval of ``bounds``; to a tenth of a per cent, and
    with the share itself, from 100 trials on."""
    if n == 0:
        return "0 of 0"
    lo, hi = bounds(k, n)
    if n < 100:
        return f"{k} of {n} ({100 * lo:.0f}–{100 * hi:.0f} %)"
    return f"{k} of {n} ({100 * k / n:.1f} %; {100 * lo:.1f}–{100 * hi:.1f} %)"


def _fails(row):
    """Whether a row's point fails the gate: flagged slower and flagged again."""
    return row["verdict"] == "slower" and row.get("confirmed") == "yes"


FIELDS = ["run", "clock", "condition", "load_start", "load_end", "label", "id", "ratio", "lo", "hi",
          "floor", "verdict", "stages", "confirmed", "processes", "seconds"]


def confirm_flagged(trees, report, **settings):
    """The gate's second stage, as ``bench_gate.main`` runs it: every (label, point) flagged
    slower timed again by fresh processes of its tree and of base; it stays flagged only if
    flagged again (``bench_gate.confirm``)."""
    flagged = [(p["label"], p["id"]) for p in report["points"] if p.get("verdict") == "slower"]
    if not flagged:
        return report
    labels = sorted({label for label, _ in flagged})
    sub = {"base": trees["base"], **{label: trees[label] for label in labels}}
    only = {label: bench_gate.exactly([pid for lab, pid in flagged if lab == label])
            for label in labels}
    again = bench_gate.run(sub, bench=bench_gate.exactly(sorted({pid for _, pid in flagged})),
                           only=only, say=lambda *_: None, **settings)
    return bench_gate.confirm(report, again)


def first_verdict(point):
    """The first stage's verdict (the confirmation step turns an unconfirmed 'slower' into
    'unconfirmed')."""
    return "slower" if point["verdict"] == "unconfirmed" else point["verdict"]


def confirmed(point, step_ran):
    """For a point flagged slower at the first stage of a run with the confirmation step:
    'yes' (flagged again by fresh processes: the gate fails) or 'no' (not: the gate passes);
    '' for every other point and for runs without the step."""
    if first_verdict(point) != "slower" or not step_ran:
        return ""
    return "yes" if point["verdict"] == "slower" else "no"


def w_cond(args):
    return args.condition or ("loaded" if args.load else "idle")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base")
    ap.add_argument("--summary", default=None, help="print the table of this CSV and stop")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", action="store_true", help="a second process busy beside the gate")
    ap.add_argument("--condition", choices=sorted(CONDITIONS), default=None,
                    help="what the row says ran beside the gate: 'asv' when the caller runs "
                         "asv's long suite (default: loaded with --load, else idle)")
    ap.add_argument("--trees", default="/tmp/bench-gate-rates")
    ap.add_argument("--out", default=None)
    ap.add_argument("--clock", choices=sorted(bench_gate.CLOCKS), default=bench_gate.CLOCK)
    ap.add_argument("--processes", type=int, default=bench_gate.PROCESSES,
                    help="worker processes a tree (the gate's --processes)")
    ap.add_argument("--no-confirm", dest="confirm", action="store_false",
                    help="skip the gate's second stage (points flagged slower timed again)")
    args = ap.parse_args(argv)
    if args.summary:
        with open(args.summary, newline="") as f:
            print(summary(list(csv.DictReader(f))))
        return
    if args.base is None or args.out is None:
        ap.error("--base and --out are required to measure (or --summary CSV to print)")
    base = bench_gate.resolve(args.base)
    trees = trees_for(base, args.trees)
    only = {label: "^" + INJECTED.replace("(", r"\(").replace(")", r"\)") + "$" for label in LEVELS}
    fields = FIELDS
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
                                        say=lambda *_: None, clock=args.clock,
                                        processes=args.processes)
                if args.confirm:
                    confirm_flagged(trees, report, log=log, clock=args.clock,
                                    processes=args.processes)
            finally:
                if loader is not None:
                    loader.terminate()
                    loader.wait()
            tag = f"{int(time.time())}-{run}"
            for p in report["points"]:
                if "ratio" not in p:
                    continue
                w.writerow({"run": tag, "clock": args.clock, "condition": w_cond(args),
                            "load_start": f"{report['load'][0][0]:.2f}",
                            "load_end": f"{report['load'][-1][0]:.2f}",
                            "label": p["label"], "id": p["id"], "ratio": f"{p['ratio']:.4f}",
                            "lo": f"{p['lo']:.4f}", "hi": f"{p['hi']:.4f}",
                            "floor": f"{p['floor']:.4f}", "verdict": first_verdict(p),
                            "stages": 2 if args.confirm else 1,
                            "confirmed": confirmed(p, args.confirm),
                            "processes": args.processes,
                            "seconds": f"{report['seconds']:.0f}"})
            f.flush()
            aa = [p for p in report["points"] if p.get("label") == "head" and "ratio" in p]
            caught = {p["label"]: p["verdict"] for p in report["points"] if p.get("label") in LEVELS}
            print(f"run {run + 1}/{args.runs}: load {report['load'][0][0]:.2f} -> "
                  f"{report['load'][-1][0]:.2f}, {report['seconds']:.0f} s; A/A flagged "
                  f"{sum(p['verdict'] == 'slower' for p in aa)} of {len(aa)} "
                  f"(faster {sum(p['verdict'] == 'faster' for p in aa)}); {caught}", flush=True)


if __name__ == "__main__":
    main()
