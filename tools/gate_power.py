"""What the gate could catch, from its own noise: how far apart the processes of one commit
came out in the stored error-rate runs, and the gate's rule simulated on that scatter with
more processes.

The gate's draws are its processes' medians over their rounds (``bench_gate.process_ratio``).
In an A/A run base's and head's processes are all of one commit, so the spread of their log
medians about their mean is the noise the gate's interval has to see through, as measured
(each process's own speed, what its rounds left of a sample's scatter, and whatever one
tree shares). ``scatter`` takes it from one run's A/A pair of the injected point;
``detection`` draws runs of the gate from the measured values of a condition (resampled with
replacement), head's medians shifted by a slowdown, and applies the gate's rule itself
(``process_ratio``, ``aa_ratio``, ``floor_of``, ``verdict``) to them. The rounds stay the
gate's 5: their effect is inside the measured scatter and is not extrapolated.

    python tools/gate_power.py benchmarks/gate_rates.jsonl

prints, per condition, the processes' scatter in the runs of 4 processes a tree (the gate's
design when they were measured), the detection of 5, 10 and 25 % slowdowns it predicts with
4, 8 and 16 processes, first stage and both stages (a flagged point must be flagged again by
fresh processes: the square), and the fewest processes a tree at which a 10 % slowdown would
be caught in 95 % of runs. tools/bench_gate_rates.py measures what the prediction is
checked against.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_gate  # noqa: E402
import bench_gate_rates  # noqa: E402

PROCESSES = (4, 6, 8, 12, 16, 24, 32)
DRAWS = 2000
TARGET = 0.95


def scatter(base, head):
    """The log medians of one A/A pair's processes about their mean: ``base``, ``head``
    (processes, rounds) seconds of one commit's two trees, each process's median over its
    rounds, all of them together, scaled by sqrt(n / (n - 1)) so that their mean square
    estimates the variance of one process's log median."""
    m = np.log(np.concatenate([bench_gate.process_medians(base),
                               bench_gate.process_medians(head)]))
    return (m - m.mean()) * math.sqrt(m.size / (m.size - 1))


CALIBRATION = 4          # the runs the scatter is taken from: the gate's design when measured


def pooled(reports, point=bench_gate_rates.INJECTED, processes=CALIBRATION):
    """{condition: (runs, deviations)}: ``scatter`` of the A/A pair of ``point`` in every
    stored run with ``processes`` a tree, together; runs with other numbers of processes are
    left to check the prediction against."""
    out = {}
    for rep in reports:
        for p in rep["points"]:
            if (p["id"] == point and p.get("label") == "head" and "samples" in p
                    and rep.get("processes", CALIBRATION) == processes):
                out.setdefault(rep["condition"], []).append(
                    scatter(p["samples"]["base"], p["samples"]["head"]))
    return {c: (len(v), np.concatenate(v)) for c, v in out.items()}


def detection(slowdown, deviations, processes=bench_gate.PROCESSES, draws=DRAWS, seed=0):
    """The share of ``draws`` gate runs in which the rule flags head ``slowdown`` (0.10: 10 %
    more time) slower than base, each tree's ``processes`` log medians drawn with replacement
    from ``deviations``."""
    dev = np.asarray(deviations, float)
    if dev.size < 2:
        raise ValueError(f"deviations must hold at least 2 values, got {dev.size}.")
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        base = np.exp(rng.choice(dev, (processes, 1)))
        head = np.exp(rng.choice(dev, (processes, 1)) + math.log1p(slowdown))
        ratio, lo, hi = bench_gate.process_ratio(head, base)
        floor = bench_gate.floor_of(bench_gate.aa_ratio(base))
        hits += bench_gate.verdict(ratio, lo, hi, floor) == "slower"
    return hits / draws


def fewest_processes(deviations, slowdown=0.10, target=TARGET, choices=PROCESSES, draws=DRAWS):
    """(processes, detection): the fewest of ``choices`` at which the gate, both stages (a
    flagged point is timed again by fresh processes and must be flagged again: the square of
    the first stage's rate), catches ``slowdown`` in at least ``target`` of runs; None when
    none does."""
    for p in choices:
        rate = detection(slowdown, deviations, p, draws) ** 2
        if rate >= target:
            return p, rate
    return None


SHOWN = (4, 8, 16)


def table(reports, draws=DRAWS, shown=SHOWN):
    """The README's table of predictions: per condition, the s.d. of a process's log median
    (from the runs of ``CALIBRATION`` processes), and for each number of processes in
    ``shown`` the predicted detection of 5, 10 and 25 % slowdowns, first stage / both stages,
    beside the s.d. measured in runs with that many processes (what the prediction assumed
    unchanged), where there are any; then the fewest processes for 10 % in 95 % of runs,
    both stages."""
    lines = ["| condition | calibration runs | s.d. of a process's median | processes a tree | "
             "5 % caught | 10 % caught | 25 % caught | s.d. measured with these processes |",
             "|---|---|---|---|---|---|---|---|"]
    need = []
    comps = pooled(reports)
    for cond, words in bench_gate_rates.CONDITIONS.items():
        if cond not in comps:
            continue
        n, dev = comps[cond]
        for k, procs in enumerate(shown):
            cells = []
            for level in bench_gate_rates.LEVELS.values():
                rate = detection(level, dev, procs, draws)
                cells.append(f"{100 * rate:.0f} % / {100 * rate ** 2:.0f} %")
            other = pooled(reports, processes=procs).get(cond)
            seen = ("—" if other is None else
                    f"{_sd(other[1])} ({other[0]} run{'s' * (other[0] != 1)})")
            lines.append(f"| {words if k == 0 else ''} | {n if k == 0 else ''} | "
                         f"{_sd(dev) if k == 0 else ''} | {procs} | " + " | ".join(cells)
                         + f" | {seen} |")
        best = fewest_processes(dev, draws=draws)
        need.append(f"{words}: " + (f"more than {PROCESSES[-1]}" if best is None else
                                    f"{best[0]} ({100 * best[1]:.0f} %)"))
    return ("\n".join(lines) + "\n\nProcesses a tree for a 10 % slowdown caught in 95 % of "
            "runs, both stages: " + "; ".join(need) + ".")


def _sd(deviations):
    """The standard deviation the deviations estimate, in % (their root mean square)."""
    return f"{100 * math.sqrt(np.mean(np.asarray(deviations) ** 2)):.1f} %"


def load(path):
    """The stored reports of a .jsonl."""
    with open(path) as f:
        return [json.loads(line) for line in f]


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python tools/gate_power.py RUNS.jsonl")
    print(table(load(args[0])))


if __name__ == "__main__":
    main()
