"""tools/gate_power.py: the processes' scatter from stored A/A runs, and the gate's rule
resampled on it."""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_gate  # noqa: E402
import gate_power  # noqa: E402
from _helpers import docs_table as _docs_table  # noqa: E402


def test_scatter_is_the_log_medians_about_their_mean_with_the_degrees_of_freedom():
    base = np.array([[1.0, 2.0, 9.0], [2.0, 2.0, 2.0]])          # medians 2, 2
    head = np.array([[4.0, 4.0, 0.5], [1.0, 1.0, 1.0]])          # medians 4, 1
    m = np.log([2.0, 2.0, 4.0, 1.0])
    got = gate_power.scatter(base, head)
    assert np.allclose(got, (m - m.mean()) * math.sqrt(4 / 3))
    assert math.isclose(float(np.sum(got ** 2)) / 4, float(np.var(m, ddof=1)))


def test_the_scatter_of_normal_processes_estimates_their_variance():
    rng = np.random.default_rng(3)
    dev = np.concatenate([gate_power.scatter(np.exp(rng.normal(0, 0.05, (4, 1))),
                                             np.exp(rng.normal(0, 0.05, (4, 1))))
                          for _ in range(4000)])
    assert math.sqrt(np.mean(dev ** 2)) == pytest.approx(0.05, rel=0.02)


def test_without_scatter_every_slowdown_past_the_floor_is_caught_and_none_below():
    dev = np.zeros(10)
    assert gate_power.detection(0.10, dev, draws=20) == 1.0
    assert gate_power.detection(0.02, dev, draws=20) == 0.0     # under the 3 % floor


def test_detection_follows_a_closed_form_for_normal_scatter():
    """With normal process medians of s.d. s and no floor in play, the rule flags when Welch's
    lower bound clears log 1.03: its rate, over many draws, is that of the t statistic, which
    a direct simulation of the same statistic gives independently."""
    s, slow, P = 0.04, 0.10, 4
    dev = np.random.default_rng(0).normal(0, s, 20000)
    got = gate_power.detection(slow, dev, P, draws=3000, seed=1)
    rng = np.random.default_rng(2)
    hits = 0
    n = 3000
    from scipy import stats
    for _ in range(n):
        a = rng.normal(0, s, P)
        b = rng.normal(math.log1p(slow), s, P)
        se = math.sqrt(a.var(ddof=1) / P + b.var(ddof=1) / P)
        df = se ** 4 / ((a.var(ddof=1) / P) ** 2 / (P - 1) + (b.var(ddof=1) / P) ** 2 / (P - 1))
        lo = b.mean() - a.mean() - stats.t.ppf(0.975, df) * se
        half = a[P // 2:].mean() - a[:P // 2].mean()
        floor = max(0.03, abs(math.exp(half) - 1))
        hits += lo > math.log1p(floor)
    assert got == pytest.approx(hits / n, abs=0.04)


def test_more_processes_catch_more_and_the_fewest_reaching_the_target_is_named():
    dev = np.random.default_rng(0).normal(0, 0.05, 5000)
    rates = [gate_power.detection(0.10, dev, p, draws=400) for p in (4, 8, 16)]
    assert rates[0] < rates[1] < rates[2]
    p, rate = gate_power.fewest_processes(dev, draws=400)
    assert rate >= 0.95 and rate == gate_power.detection(0.10, dev, p, draws=400) ** 2
    fewer = gate_power.PROCESSES[:gate_power.PROCESSES.index(p)]
    assert all(gate_power.detection(0.10, dev, q, draws=400) ** 2 < 0.95 for q in fewer)
    assert gate_power.fewest_processes(np.random.default_rng(0).normal(0, 1.0, 100),
                                       choices=(4, 6), draws=50) is None


def test_bad_deviations_are_refused_by_name():
    with pytest.raises(ValueError, match="deviations must hold at least 2 values, got 1"):
        gate_power.detection(0.1, [0.0])


def test_the_docs_gives_the_power_table_of_the_stored_runs():
    reports = gate_power.load(ROOT / "benchmarks" / "gate_rates.jsonl")
    assert gate_power.table(reports) in _docs_table("gate_power")


def test_pooling_keeps_the_gates_own_design_and_the_injected_point():
    s = {"base": [[1.0, 1.0], [2.0, 2.0]], "head": [[1.0, 1.0], [2.0, 2.0]]}
    point = {"id": gate_power.bench_gate_rates.INJECTED, "label": "head", "samples": s}
    other = dict(point, id="Kernels.time_forward(gru, large)")
    reports = [{"condition": "idle", "points": [point, other]},
               {"condition": "idle", "points": [point], "processes": 8},
               {"condition": "asv", "points": [point], "processes": gate_power.CALIBRATION}]
    got = gate_power.pooled(reports)
    assert sorted(got) == ["asv", "idle"]
    assert got["idle"][0] == 1 and got["idle"][1].size == 4


def test_the_table_sets_the_scatter_measured_with_more_processes_beside_the_prediction():
    rng = np.random.default_rng(0)

    def run(procs, sd):
        s = {"base": np.exp(rng.normal(0, sd, (procs, 1))).tolist(),
             "head": np.exp(rng.normal(0, sd, (procs, 1))).tolist()}
        return {"condition": "idle", "processes": procs,
                "points": [{"id": gate_power.bench_gate_rates.INJECTED, "label": "head",
                            "samples": s}]}
    reports = [run(4, 0.02) for _ in range(3)] + [run(8, 0.2)]
    lines = gate_power.table(reports, draws=50).splitlines()
    four, eight, sixteen = lines[2:5]
    assert four.startswith("| no load of ours | 3 | ") and four.endswith(" (3 runs) |")
    assert eight.split(" | ")[3] == "8" and eight.endswith(" (1 run) |")
    sd8 = float(eight.split(" | ")[-1].split(" %")[0])
    assert sd8 == pytest.approx(100 * math.sqrt(np.mean(gate_power.scatter(
        reports[-1]["points"][0]["samples"]["base"],
        reports[-1]["points"][0]["samples"]["head"]) ** 2)), abs=0.05)
    assert sixteen.endswith(" | — |")


def test_the_readmes_reading_of_the_eight_process_runs_holds():
    """The docs' reading: with 8 processes a process's median scattered more than with 4 (idle), and
    the 8-process runs caught 10 % slowdowns less often than predicted from the 4-process
    scatter."""
    import csv
    reports = gate_power.load(ROOT / "benchmarks" / "gate_rates.jsonl")
    four = gate_power.pooled(reports, processes=4)["idle"][1]
    eight = gate_power.pooled(reports, processes=8)["idle"][1]
    assert np.mean(eight ** 2) > np.mean(four ** 2)
    with open(ROOT / "benchmarks" / "gate_rates.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["processes"] == "8" and r["label"] == "slow10"]
    measured = sum(r["verdict"] == "slower" for r in rows) / len(rows)
    assert measured < gate_power.detection(0.10, four, 8)
