"""tools/bench_gate.py: its decision rule, its git edges (a bad rev, a first commit, a shallow
clone, the Bench-Accept trailer), and one end-to-end run of its workers on one cheap point.

No timing is asserted: the end-to-end run checks the report's shape, never a speed.
"""

from __future__ import annotations

import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_gate  # noqa: E402
from _helpers import docs_table as _docs_table  # noqa: E402


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def repo(tmp_path):
    """A repository with one commit."""
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    (r / "a.txt").write_text("a\n")
    _git(r, "add", "a.txt")
    _git(r, "commit", "-q", "-m", "first")
    return r


# --------------------------------------------------------------------------- the rule

@pytest.mark.parametrize("lo, hi, floor, expected", [
    (1.06, 1.20, 0.05, "slower"),      # the whole interval above 1 + floor
    (1.04, 1.20, 0.05, "same"),        # reaches into the floor
    (0.90, 1.10, 0.03, "same"),
    (0.80, 0.94, 0.05, "faster"),
    (0.80, 0.96, 0.05, "same"),
    (math.nan, math.nan, 0.03, "same"),
])
def test_a_change_is_flagged_only_when_its_interval_clears_the_floor(lo, hi, floor, expected):
    assert bench_gate.verdict((lo + hi) / 2, lo, hi, floor) == expected


def test_the_floor_is_the_aa_ratios_distance_from_one_and_never_under_min_change():
    assert bench_gate.floor_of(1.08, 0.03) == pytest.approx(0.08)
    assert bench_gate.floor_of(1.01, 0.03) == 0.03
    assert bench_gate.floor_of(0.85, 0.0) == pytest.approx(0.15)
    assert bench_gate.floor_of(math.nan, 0.03) == 0.03


def test_the_aa_ratio_is_one_half_of_the_base_processes_over_the_other():
    base = np.array([[1.0, 1.1, 0.9], [1.0, 1.0, 1.0], [2.0, 2.0, 9.0], [2.0, 1.9, 2.1]])
    assert bench_gate.aa_ratio(base) == pytest.approx(2.0)       # medians 1, 1 | 2, 2
    # an odd count (--processes 3): the first half is the smaller one, 1 | 2, 2
    assert bench_gate.aa_ratio(np.array([[1.0], [2.0], [2.0]])) == pytest.approx(2.0)


def test_processes_are_the_units_of_the_interval():
    """Rounds only make a process's median precise: a process's own speed, kept over all its
    rounds, widens the interval; the same numbers spread over rounds alone do not."""
    from scipy import stats as sps
    rng = np.random.default_rng(0)
    base = np.exp(rng.normal(0, 0.01, (4, 5)))
    own = np.array([0.9, 1.0, 1.05, 1.12])[:, None]           # each process's own speed
    ratio, lo, hi = bench_gate.process_ratio(1.2 * base * own, base)
    lh = np.log(np.median(1.2 * base * own, axis=1))
    lb = np.log(np.median(base, axis=1))
    welch = sps.ttest_ind(lh, lb, equal_var=False).confidence_interval(0.95)
    assert ratio == pytest.approx(np.exp(lh.mean() - lb.mean()))
    assert (lo, hi) == pytest.approx((np.exp(welch.low), np.exp(welch.high)))
    assert lo < 1.2 < hi and hi / lo > 1.1
    # a load that slows one round of every process cancels in the medians
    slow = base.copy()
    slow[:, 2] *= 3
    assert bench_gate.process_ratio(slow, base)[0] == pytest.approx(1.0, abs=0.02)


def test_the_process_ratio_wants_two_processes_each():
    with pytest.raises(ValueError, match="at least 2 processes"):
        bench_gate.process_ratio(np.ones((1, 5)), np.ones((4, 5)))
    assert bench_gate.process_ratio(np.ones((2, 3)), np.ones((2, 3))) == (1.0, 1.0, 1.0)


def test_tracked_numbers_must_be_equal_to_the_last_bit():
    out = bench_gate.compare_tracks(
        {"a": repr(0.1), "b": repr(0.30000000000000004), "c": repr(float("nan")), "d": "1.0"},
        {"a": repr(0.1), "b": repr(0.3), "c": repr(float("nan")), "e": "2.0"})
    assert out["a"][2] == "same"
    assert out["b"][2] == "changed"          # 0.30000000000000004 against 0.3
    assert out["c"][2] == "same"             # nan is nan
    assert out["d"][2] == "gone" and out["e"][2] == "new"


def test_trailers_accept_what_they_match_and_only_slower_or_changed_fails():
    report = {"points": [{"id": "Kernels.time_forward(rnn, large)", "verdict": "slower"},
                         {"id": "Kernels.time_forward(lstm, large)", "verdict": "slower"},
                         {"id": "Kernels.time_forward(gru, large)", "verdict": "faster"}],
              "tracks": {"Depth.track_span(rnn, 64)": {"verdict": "changed"},
                         "Depth.track_span(gru, 64)": {"verdict": "same"}}}
    assert bench_gate.flagged(report) == ["Kernels.time_forward(rnn, large)",
                                          "Kernels.time_forward(lstm, large)",
                                          "Depth.track_span(rnn, 64)"]
    bench_gate.apply_trailers(report, [re.compile(r"\(rnn, ")])
    assert bench_gate.flagged(report) == ["Kernels.time_forward(lstm, large)"]
    assert report["points"][0]["verdict"] == "accepted"
    assert report["tracks"]["Depth.track_span(rnn, 64)"]["verdict"] == "accepted"


# --------------------------------------------------------------------------- git

def test_a_bad_base_names_the_argument(repo):
    with pytest.raises(bench_gate.GateError, match="--base nosuch is not a commit"):
        bench_gate.resolve("nosuch", cwd=repo)
    with pytest.raises(bench_gate.GateError, match=r"--base must name a commit .*got ''"):
        bench_gate.resolve("", cwd=repo)
    with pytest.raises(bench_gate.GateError, match="--base must name a commit"):
        bench_gate.resolve("--all", cwd=repo)


def test_a_first_commit_has_nothing_before_it(repo):
    assert not bench_gate.has_parent("HEAD", cwd=repo)
    with pytest.raises(bench_gate.GateError, match="HEAD has no such ancestor .*first commit"):
        bench_gate.resolve("HEAD~1", cwd=repo)
    (repo / "a.txt").write_text("b\n")
    _git(repo, "commit", "-q", "-am", "second")
    assert bench_gate.has_parent("HEAD", cwd=repo)
    assert len(bench_gate.resolve("HEAD~1", cwd=repo)) == 40


def test_a_shallow_clone_says_how_to_fetch_the_base(repo, tmp_path):
    (repo / "a.txt").write_text("b\n")
    _git(repo, "commit", "-q", "-am", "second")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    with pytest.raises(bench_gate.GateError, match=r"HEAD~1 is not in this clone: it is shallow"
                                                   r".*git fetch --deepen=1"):
        bench_gate.resolve("HEAD~1", cwd=clone)


def test_the_bench_accept_trailer_is_read_from_the_commit_message(repo):
    (repo / "a.txt").write_text("c\n")
    _git(repo, "commit", "-q", "-am", "slower on purpose\n\nwhy\n\nBench-Accept: \\(rnn, large\\)")
    assert [p.pattern for p in bench_gate.accepted_patterns("HEAD", cwd=repo)] == [r"\(rnn, large\)"]
    assert bench_gate.accepted_patterns("HEAD~1", cwd=repo) == []
    (repo / "a.txt").write_text("d\n")
    _git(repo, "commit", "-q", "-am", "bad\n\nBench-Accept: (rnn")
    with pytest.raises(bench_gate.GateError, match="Bench-Accept trailer .* must be a regular "
                                                   "expression, got '\\(rnn'"):
        bench_gate.accepted_patterns("HEAD", cwd=repo)


def test_export_writes_the_commits_tree(repo, tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    bench_gate.export("HEAD", dest, cwd=repo)
    assert (dest / "a.txt").read_text() == "a\n" and not (dest / ".git").exists()


@pytest.mark.parametrize("argv, message", [
    ([], "--base is required"),
    (["--base", "HEAD", "--rounds", "0"], "--rounds must be a positive whole number"),
    (["--base", "HEAD", "--processes", "1"], "--processes must be at least 2"),
    (["--base", "HEAD", "--min-sample-s", "0"], "--min-sample-s must be a positive number"),
    (["--base", "HEAD", "--bench", "("], "--bench must be a regular expression"),
    (["--base", "HEAD", "--min-change", "1.5"], "--min-change must be a fraction in [0, 1)"),
    (["--base", "HEAD", "--placements", "0"], "--placements must be a positive whole number"),
])
def test_bad_arguments_say_what_was_expected(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench_gate.parse_args(argv)
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------- the suite's points

def test_the_gate_times_every_family_at_both_sizes_and_tracks_only_deterministic_numbers():
    from benchmarks import bench_analysers, bench_kernels, bench_machine, common  # noqa: F401
    from harness import models
    points = bench_gate.suite_points(common)
    timed = {p[0] for p in points if p[1] == "time"}
    assert timed == {f"Kernels.{m}({model}, {size})" for model in models.NAMES
                     for size in common.SIZES for m in ("time_backward", "time_forward")}
    tracked = [p for p in points if p[1] == "track"]
    assert tracked and all(p[2].deterministic and p[2].suite == "default" for p in tracked)
    assert {p[2].__name__ for p in tracked} == {"Depth", "DecayRate", "AttentionDecayRate"}


def test_one_run_of_the_workers_reports_every_asked_point(tmp_path):
    """Two workers for each of base and head on this checkout, one cheap timed point and one
    track, two rounds."""
    with open(tmp_path / "log", "w") as log:
        report = bench_gate.run({"base": ROOT, "head": ROOT}, rounds=2, processes=2,
                                placements=2, min_sample_s=0.001, say=lambda *_: None, log=log,
                                bench=r"^Kernels\.time_forward\(rnn, small\)$|"
                                      r"^AttentionDecayRate\.track_fitted_rate\(\)$")
    (p,) = report["points"]
    assert p["id"] == "Kernels.time_forward(rnn, small)" and p["label"] == "head"
    assert p["lo"] <= p["ratio"] <= p["hi"] and p["floor"] >= bench_gate.MIN_CHANGE
    assert p["floor"] == bench_gate.floor_of(p["aa_ratio"])
    assert p["verdict"] in {"same", "slower", "faster"}
    assert {k: np.shape(v) for k, v in p["samples"].items()} == {"base": (2, 2), "head": (2, 2)}
    assert p["calls_per_sample"] % 2 == 0
    assert (report["processes"], report["placements"], report["rounds"]) == (2, 2, 2)
    (track,) = report["tracks"].values()
    assert list(report["tracks"]) == ["AttentionDecayRate.track_fitted_rate()"]
    assert track["base"] == track["head"] and track["verdict"] == "same"
    assert math.isfinite(float(track["base"]))
    assert len(report["load"]) == 3                              # the start and each round


def test_each_copy_of_a_timed_point_has_its_own_arrays_at_other_addresses():
    from benchmarks import bench_kernels
    spacers = []
    copies = bench_gate.set_up_copies(bench_kernels.Kernels, ("rnn", "small"), 3,
                                      np.random.default_rng(1), spacers)
    assert len(copies) == 3 and len(spacers) == 3
    addresses = {c.X.ctypes.data for c in copies}
    assert len(addresses) == 3
    for c in copies[1:]:                                    # the same inputs, elsewhere
        np.testing.assert_array_equal(c.X, copies[0].X)
        assert not np.shares_memory(c.X, copies[0].X)


@pytest.mark.parametrize("once, min_s, copies, expected", [
    (0.01, 0.05, 1, 5), (0.01, 0.05, 4, 8), (0.01, 0.001, 4, 4), (1.0, 0.05, 3, 3),
    (0.0, 0.05, 2, 50_000_000)])
def test_a_sample_lasts_min_sample_s_and_cycles_whole_passes_over_the_copies(
        once, min_s, copies, expected):
    n = bench_gate.calls_per_sample(once, min_s, copies)
    assert n == expected and n % copies == 0


def test_a_slower_point_fails_only_when_a_second_run_flags_it_too():
    def pt(pid, verdict, ratio=1.2):
        return {"id": pid, "verdict": verdict, "ratio": ratio, "lo": ratio - 0.05,
                "hi": ratio + 0.05, "aa_ratio": 1.0, "floor": 0.03, "base_s": 1e-3,
                "head_s": 1.2e-3}
    report = {"points": [pt("a", "slower"), pt("b", "slower"), pt("c", "same", 1.0),
                         {"id": "d", "verdict": "skipped"}], "seconds": 10.0}
    again = {"points": [pt("a", "slower", 1.22), pt("b", "same", 1.01)], "seconds": 4.0}
    bench_gate.confirm(report, again)
    verdicts = {p["id"]: p["verdict"] for p in report["points"]}
    assert verdicts == {"a": "slower", "b": "unconfirmed", "c": "same", "d": "skipped"}
    assert report["points"][0]["confirmation"]["ratio"] == 1.22
    assert report["seconds"] == 14.0
    assert bench_gate.flagged({"points": report["points"], "tracks": {}}) == ["a"]
    assert "timed again, fresh processes" in bench_gate.render(dict(report, tracks={}))
    rx = re.compile(bench_gate.exactly(["Kernels.time_forward(rnn, large)", "x.y(1)"]))
    assert rx.search("Kernels.time_forward(rnn, large)") and rx.search("x.y(1)")
    assert not rx.search("Kernels.time_forward(rnn, large)x") and not rx.search("x.y(10)")


def test_each_worker_starts_with_a_layout_of_its_own():
    import random
    a = bench_gate.shuffle_layout(random.Random(1))
    b = bench_gate.shuffle_layout(random.Random(2))
    for layout in (a, b):
        assert 1 <= len(layout) <= 512 and all(16 <= len(x) <= 4096 for x in layout)
    assert [len(x) for x in a] != [len(x) for x in b]
    assert len({len(bench_gate.shuffle_layout()) for _ in range(20)}) > 1     # SystemRandom


def test_every_worker_is_pinned_to_one_cpu_this_process_may_use():
    cpu = bench_gate.gate_cpu()
    if cpu is not None:
        import os
        assert cpu in os.sched_getaffinity(0)


def test_a_sample_is_cpu_time_unless_wall_time_is_asked_for(capsys):
    """CPU time by default (a shared machine's other processes do not lengthen it)."""
    import time
    assert bench_gate.CLOCK == "cpu" and bench_gate.CLOCKS["cpu"] is time.process_time
    assert bench_gate.parse_args(["--base", "HEAD"]).clock == "cpu"
    assert bench_gate.parse_args(["--base", "HEAD", "--clock", "wall"]).clock == "wall"
    with pytest.raises(SystemExit):
        bench_gate.parse_args(["--base", "HEAD", "--clock", "tsc"])
    assert "--clock: invalid choice: 'tsc'" in capsys.readouterr().err


def test_a_confirmation_is_matched_by_label_as_well_as_point():
    def pt(label, verdict, ratio):
        return {"id": "p", "label": label, "verdict": verdict, "ratio": ratio,
                "lo": ratio - 0.02, "hi": ratio + 0.02, "aa_ratio": 1.0, "floor": 0.03}
    report = {"points": [pt("head", "slower", 1.2), pt("slow10", "slower", 1.1)],
              "seconds": 1.0}
    again = {"points": [pt("head", "same", 1.0), pt("slow10", "slower", 1.12)], "seconds": 1.0}
    bench_gate.confirm(report, again)
    assert [p["verdict"] for p in report["points"]] == ["unconfirmed", "slower"]
    assert report["points"][1]["confirmation"]["ratio"] == 1.12


def _row(run, cond, label, verdict, load="1.0", stages="1", confirmed=""):
    return {"run": run, "condition": cond, "load_start": load, "label": label,
            "verdict": verdict, "stages": stages, "confirmed": confirmed}


def test_the_error_rate_table_counts_false_alarms_and_detections():
    import bench_gate_rates
    rows = ([_row("r1", "idle", "head", v, "0.5") for v in ["same"] * 23 + ["faster"]]
            + [_row("r2", "idle", "head", "same", "2.5")] * 24
            + [_row(r, "idle", "slow5", v) for r, v in (("r1", "same"), ("r2", "slower"))]
            + [_row(r, "idle", "slow10", "slower") for r in ("r1", "r2")]
            + [_row(r, "idle", "slow25", "slower") for r in ("r1", "r2")])
    lines = bench_gate_rates.summary(rows).splitlines()
    assert len(lines) == 3                                   # no loaded rows: no loaded line
    assert lines[2] == ("| no load of ours | 4 processes, first stage only | 2 | 0.5–2.5 | "
                        "1 of 48 (0–11 %) | — | 1 of 2 (1–99 %) | 2 of 2 (16–100 %) | "
                        "2 of 2 (16–100 %) |")


def test_with_the_confirmation_step_a_point_fails_only_when_flagged_twice():
    import bench_gate_rates
    two = {"stages": "2"}
    rows = ([_row("r3", "loaded", "head", "same", "3.0", **two)] * 26
            + [_row("r3", "loaded", "head", "slower", "3.0", confirmed="no", **two),
               _row("r3", "loaded", "head", "slower", "3.0", confirmed="yes", **two),
               _row("r3", "loaded", "slow5", "slower", "3.0", confirmed="no", **two),
               _row("r3", "loaded", "slow10", "slower", "3.0", confirmed="yes", **two),
               _row("r3", "loaded", "slow25", "same", "3.0", **two)]
            + [_row("r4", "loaded", "head", "same", "4.0")] * 28
            + [_row("r4", "loaded", lab, "slower", "4.0") for lab in ("slow5", "slow10")])
    lines = bench_gate_rates.summary(rows).splitlines()
    assert lines[2:] == [
        "| a second process of ours | 4 processes, with confirmation | 1 | 3.0–3.0 | "
        "2 of 28 (1–24 %) | 1 of 28 (0–18 %) | 0 of 1 (0–98 %) | 1 of 1 (3–100 %) | "
        "0 of 1 (0–98 %) |",
        "| a second process of ours | 4 processes, first stage only | 1 | 4.0–4.0 | "
        "0 of 28 (0–12 %) | — | 1 of 1 (3–100 %) | 1 of 1 (3–100 %) | 0 of 0 |"]


def test_a_row_says_whether_its_slower_point_was_confirmed():
    import bench_gate_rates as rates
    slower, unconfirmed, same = ({"verdict": v} for v in ("slower", "unconfirmed", "same"))
    assert [rates.first_verdict(p) for p in (slower, unconfirmed, same)] == [
        "slower", "slower", "same"]
    assert [rates.confirmed(p, True) for p in (slower, unconfirmed, same)] == ["yes", "no", ""]
    assert [rates.confirmed(p, False) for p in (slower, unconfirmed, same)] == ["", "", ""]


def test_the_docs_gives_the_measured_error_rates():
    """The docs' table is the summary of the measurements kept in docs/gate_rates.csv
    (written by tools/bench_gate_rates.py)."""
    import csv

    import bench_gate_rates
    with open(ROOT / "docs" / "gate_rates.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    assert bench_gate_rates.summary(rows) in _docs_table("gate_rates")


def test_a_run_wants_two_processes_a_tree_before_starting_any():
    with pytest.raises(bench_gate.GateError, match="processes must be at least 2"):
        bench_gate.run({"base": ROOT, "head": ROOT}, processes=1, say=lambda *_: None)


def test_the_gate_is_held_against_the_issues_targets_per_condition():
    import bench_gate_rates
    two = {"stages": "2"}
    rows = ([dict(_row(f"r{i}", "idle", "head", "same", **two), processes="8")
             for i in range(10) for _ in range(28)]
            + [dict(_row("r0", "idle", "head", "slower", confirmed="yes", **two), processes="8")]
            + [dict(_row(f"r{i}", "idle", "slow10", "slower", confirmed="yes" if i < 9 else "no",
                         **two), processes="8") for i in range(10)]
            + [dict(_row("q", "loaded", "slow10", "slower", confirmed="yes", **two),
                    processes="4")])
    got = bench_gate_rates.against_targets(rows, processes=8)
    assert got == ("- no load of ours, 8 processes, both stages: 10 runs (ten wanted: met); A/A "
                   "points failing the gate 1 of 281 (0.4 %; 0.0–2.0 %) (at most 1 %: not settled "
                   "by these runs); 10 % slowdowns caught 9 of 10 (55–100 %) (in 95 % of runs: "
                   "not settled by these runs).")


@pytest.mark.parametrize("k, n, target, below, verdict", [
    (0, 1000, 0.01, True, "met"),                       # at most 0.37 %
    (0, 280, 0.01, True, "not settled by these runs"),  # up to 1.3 %
    (30, 1000, 0.01, True, "not met"),                  # at least 2.0 %
    (200, 200, 0.95, False, "met"),                     # at least 98.2 %
    (10, 10, 0.95, False, "not settled by these runs"),  # from 69 %
    (1, 10, 0.95, False, "not met"),                    # at most 45 %
])
def test_a_target_is_judged_by_the_whole_interval_on_either_side(k, n, target, below, verdict):
    import bench_gate_rates
    assert bench_gate_rates._judge(k, n, target, below) == verdict


def test_the_share_interval_is_clopper_pearsons():
    """Computed another way: with no successes the upper bound solves (1 - p)^n = 0.025, with
    all of them the lower bound solves p^n = 0.025."""
    import bench_gate_rates
    for n in (3, 10, 280):
        assert bench_gate_rates.bounds(0, n) == (0.0, pytest.approx(1 - 0.025 ** (1 / n)))
        assert bench_gate_rates.bounds(n, n) == (pytest.approx(0.025 ** (1 / n)), 1.0)
    lo, hi = bench_gate_rates.bounds(1, 10)                 # tables: 0.0025, 0.4450
    assert (round(lo, 4), round(hi, 4)) == (0.0025, 0.445)
    with pytest.raises(ValueError, match="0 <= k <= n and n >= 1, got k=3, n=2"):
        bench_gate_rates.bounds(3, 2)


def test_the_docs_holds_the_gate_against_its_targets():
    import csv

    import bench_gate_rates
    with open(ROOT / "docs" / "gate_rates.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lines = bench_gate_rates.against_targets(rows)
    assert lines.count("\n") >= 1                     # idle and loaded, both measured
    assert lines in _docs_table("gate_rates")


# --------------------------------------------------------------------------- an old base

def _old_tree(tmp_path, lacks):
    """A tree whose harness is this checkout's but for ``harness.<lacks>``, which it does not
    have yet (an empty module in its place). Without ``models`` the suite meets an error
    setting a point up; without ``infra`` it cannot even be imported."""
    pkg = tmp_path / "old" / "harness"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__path__.append({str(ROOT / 'harness')!r})\n")
    (pkg / f"{lacks}.py").write_text('"""Not yet what the suite uses."""\n')
    return pkg.parent


@pytest.mark.parametrize("lacks", ["models", "infra"])
def test_a_base_too_old_for_the_suite_is_said_before_any_point_is_set_up(tmp_path, lacks):
    """A base older than the suite failed after every point's set-up (82 s) with one line
    listing every point, then an AttributeError (#39): the probe finds it first."""
    said = []
    with open(tmp_path / "log", "w") as log:
        with pytest.raises(bench_gate.BaseTooOld) as e:
            bench_gate.run({"base": _old_tree(tmp_path, lacks), "head": ROOT}, rounds=1,
                           processes=2, placements=1, min_sample_s=0.001, say=said.append,
                           log=log)
    assert not [line for line in said if "set up" in line], said      # nothing was timed
    if lacks == "models":
        assert e.value.point == "AttentionDecayRate.track_fitted_factor()"    # tracks first
    else:
        assert e.value.point is None and str(e.value).startswith("loading the suite failed: ")
    assert e.value.error.startswith("ImportError: cannot import name ") and \
        f"harness.{lacks}" in e.value.error, e.value.error
    message = bench_gate.too_old("abc123", e.value)
    last = subprocess.run(["git", "log", "-1", "--format=%h %cs", "--", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True).stdout.split()
    assert message == (f"--base abc123 is too old for this checkout's benchmark suite "
                       f"(benchmarks/): {e.value}. Its harness lacks what the suite uses; this "
                       f"suite was last changed in {last[0]} ({last[1]}): a base from there on "
                       f"runs it; choose a later --base, or time that commit with its own suite "
                       f"(asv run).")
    assert len(message) < 600                      # not a list of every point


def test_the_probe_sets_up_one_point_of_each_class_the_tracked_first():
    import importlib

    from benchmarks import common
    for module in ("bench_analysers", "bench_kernels", "bench_machine"):   # they fill CLASSES
        importlib.import_module(f"benchmarks.{module}")
    probe = bench_gate.probe_points(bench_gate.suite_points(common))
    assert probe == ["AttentionDecayRate.track_fitted_factor()",
                     "DecayRate.track_fitted_factor(identity, 0.5)",
                     f"Depth.track_multiplications({common.MODELS[0]}, 64)",
                     f"Kernels.time_backward({common.MODELS[0]}, small)"]


def test_a_rows_base_and_head_times_are_those_the_ratio_is_of():
    """base ms 39.1 and head ms 44.3 (1.13 x) were shown beside head/base 1.012 (#39): the
    times were the medians of all samples, the ratio that of the processes' medians'
    geometric means. Now the times are those geometric means."""
    base = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [4.0, 4.0, 4.0]])
    head = np.array([[1.0, 1.1, 0.9], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0]])
    row = bench_gate.point_row("p", "head", base, head, 8)
    assert row["base_s"] == pytest.approx(8 ** 0.25, rel=1e-12)             # (1 1 2 4)^(1/4)
    assert row["head_s"] == pytest.approx(27 ** 0.25, rel=1e-12)
    assert row["head_s"] / row["base_s"] == pytest.approx(row["ratio"], rel=1e-12)
    assert np.median(head) / np.median(base) == 2.0 != pytest.approx(row["ratio"])  # the old way
    assert row["aa_ratio"] == pytest.approx(math.sqrt(8)) and row["floor"] == row["aa_ratio"] - 1
    assert row["verdict"] == bench_gate.verdict(row["ratio"], row["lo"], row["hi"], row["floor"])
    shown = bench_gate.render({"points": [row], "tracks": {}}).splitlines()[1].split()
    assert float(shown[2]) / float(shown[1]) == pytest.approx(float(shown[3]), abs=2e-3)


def test_a_run_without_track_points_says_so_rather_than_0_of_0():
    assert bench_gate.render({"points": [], "tracks": {}, "bench": "rnn"}).splitlines()[-1] == \
        "track_ numbers: none compared (no track_ point matches --bench rnn)"
    assert bench_gate.render({"points": [], "tracks": {}}).splitlines()[-1] == \
        "track_ numbers: none compared (the suite has none)"
    tracks = {"a": {"base": "1.0", "head": "1.0", "verdict": "same"}}
    assert bench_gate.render({"points": [], "tracks": tracks, "bench": "a"}).splitlines()[-1] == \
        "track_ numbers: 1 of 1 exactly equal"
