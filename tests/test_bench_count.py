"""tools/bench_count.py, the gate's counting stage: its client requests (natively and under
Valgrind), the dumps it reads, its per-call arithmetic, its verdicts at the floor, and the
gate's handling of both stages' flags.

Under Valgrind only a small NumPy script runs (seconds); the kernel points' counts and the
stage's error rates are measured by tools/bench_count_rates.py (docs/gate_counts.csv).
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from _deps import require_executable

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_count  # noqa: E402
import bench_gate  # noqa: E402


def test_client_requests_do_nothing_natively():
    vg = bench_count.ClientRequest()
    assert vg.on_valgrind() is False
    for call in (vg.zero, vg.start, vg.stop):
        call()
    vg.prepare(["a label"])
    vg.dump("a label")                      # no file, no error: natively a no-op


SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tools!r})
    import numpy as np
    import bench_count
    vg = bench_count.ClientRequest()
    assert vg.on_valgrind(), "not under Valgrind"
    a = np.ones(1 << 16)
    for _ in range(3):
        a.sum()                             # warm: the interpreter's caches
    vg.prepare(["empty", "one", "three"])
    vg.start()
    vg.zero()
    vg.dump("empty")
    a.sum()
    vg.dump("one")
    a.sum(); a.sum(); a.sum()
    vg.dump("three")
    vg.stop()
""")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """{label: {event: count}} of the script above run under Callgrind, twice (two processes)."""
    valgrind = require_executable(["valgrind"], "apt-get install valgrind")
    out = []
    for k in range(2):
        folder = tmp_path_factory.mktemp(f"cg{k}")
        script = folder / "s.py"
        script.write_text(SCRIPT.format(tools=str(ROOT / "tools")))
        r = subprocess.run([valgrind, "--tool=callgrind", "--instr-atstart=no", "--quiet",
                            f"--callgrind-out-file={folder}/cg.%p", sys.executable, str(script)],
                           capture_output=True, text=True, timeout=300,
                           env=bench_count.worker_env())
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(dict(bench_count.read_dump(p) for p in folder.glob("cg.*.*")))
    return out


def test_under_valgrind_each_dump_holds_its_region_only(dumps):
    first = dumps[0]
    assert set(first) == {"empty", "one", "three"}
    empty, one, three = (first[k]["Ir"] for k in ("empty", "one", "three"))
    per_call = one - empty
    assert per_call > 16384                                  # a sum of 65,536 doubles
    # three calls cost three times one, to a few per cent (the same code each time)
    assert (three - empty) == pytest.approx(3 * per_call, rel=0.03)
    assert empty < per_call / 2                              # the requests cost less


def test_two_processes_count_the_same_instructions(dumps):
    a, b = dumps
    for label in ("one", "three"):
        assert abs(a[label]["Ir"] - b[label]["Ir"]) <= 1e-4 * a[label]["Ir"], label


def _dump(path, label, summary, events="Ir"):
    path.write_text(f"version: 1\ncreator: callgrind-3.19.0\ncmd: python x.py\n"
                    f"desc: Trigger: Client Request: {label}\n\nevents: {events}\n"
                    f"fn=(1) f\n0 5\n\nsummary: {summary}\ntotals: {summary}\n")
    return path


def test_read_dump_takes_the_label_and_the_summary(tmp_path):
    label, counts = bench_count.read_dump(_dump(tmp_path / "cg.1.1", "p3-call0", "1234 5 6",
                                                "Ir Dr Dw"))
    assert label == "p3-call0" and counts == {"Ir": 1234, "Dr": 5, "Dw": 6}
    (tmp_path / "bad").write_text("version: 1\nevents: Ir\n")
    with pytest.raises(bench_count.CountError, match="not a Callgrind dump"):
        bench_count.read_dump(tmp_path / "bad")


def test_per_call_is_the_median_region_less_the_empty_one():
    regions = [{"Ir": 100}, {"Ir": 1100}, {"Ir": 1300}, {"Ir": 1120}]
    assert bench_count.per_call(regions) == {"Ir": 1020.0}      # median 1120 less 100


@pytest.mark.parametrize("head, verdict", [(1010.0, "same"), (1010.5, "slower"),
                                           (990.0, "same"), (989.5, "faster"), (1000.0, "same")])
def test_a_count_is_flagged_only_past_the_floor(head, verdict):
    rows = bench_count.compare({"p": {"Ir": 1000.0}}, {"p": {"Ir": head}}, floor=0.01)
    assert rows[0]["verdict"] == verdict
    assert rows[0]["ratio"] == pytest.approx(head / 1000.0)


def test_a_point_counted_on_one_side_only_is_skipped_not_compared():
    rows = bench_count.compare({"a": {"Ir": 5.0}, "b": {"skipped": "too large"}},
                               {"a": {"Ir": 5.0}, "c": {"Ir": 1.0}})
    got = {r["id"]: r for r in rows}
    assert got["a"]["verdict"] == "same"
    assert got["b"]["verdict"] == "skipped" and got["b"]["why"] == "too large"
    assert got["c"]["verdict"] == "skipped"


def test_the_cache_events_are_compared_beside_the_instructions():
    rows = bench_count.compare({"p": {"Ir": 100.0, "D1mr": 10.0, "DLmr": 0.0}},
                               {"p": {"Ir": 100.0, "D1mr": 15.0, "DLmr": 3.0}})
    assert rows[0]["D1mr_ratio"] == 1.5
    assert "DLmr_ratio" not in rows[0]                           # nothing to divide by


def test_the_worker_names_every_region_it_measures(tmp_path):
    """The worker natively on the cheapest point: one line, its empty and call regions."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_count.py"), "--worker",
                        str(ROOT), "--bench", re.escape("Kernels.time_forward(rnn, small)")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=bench_count.worker_env())
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines == [{"id": "Kernels.time_forward(rnn, small)",
                      "labels": ["p0-empty"] + [f"p0-call{k}" for k in range(bench_count.CALLS)]}]


def test_the_gate_fails_on_a_counted_slowdown_unless_a_trailer_accepts_it():
    report = {"points": [{"id": "Kernels.time_forward(rnn, large)", "verdict": "same"}],
              "tracks": {},
              "counts": bench_count.compare({"Kernels.time_forward(rnn, large)": {"Ir": 100.0},
                                             "Kernels.time_forward(gru, large)": {"Ir": 100.0}},
                                            {"Kernels.time_forward(rnn, large)": {"Ir": 110.0},
                                             "Kernels.time_forward(gru, large)": {"Ir": 100.0}}),
              "count_floor": 0.01}
    assert bench_gate.flagged(report) == ["Kernels.time_forward(rnn, large)"]
    assert "1.10000  slower" in bench_gate.render(report)
    bench_gate.apply_trailers(report, [re.compile(r"\(rnn, ")])
    assert bench_gate.flagged(report) == []
    assert report["counts"][0]["verdict"] == "same"              # gru's, sorted first
    assert report["counts"][1]["verdict"] == "accepted"


def test_a_point_both_stages_flag_is_named_once():
    pid = "Kernels.time_forward(rnn, large)"
    report = {"points": [{"id": pid, "verdict": "slower"}], "tracks": {},
              "counts": [{"id": pid, "verdict": "slower"}]}
    assert bench_gate.flagged(report) == [pid]


def test_the_gate_refuses_to_run_no_stage():
    with pytest.raises(SystemExit):
        bench_gate.parse_args(["--base", "HEAD", "--no-count", "--no-time"])
    with pytest.raises(SystemExit):
        bench_gate.parse_args(["--base", "HEAD", "--count-floor", "1.5"])


def test_without_valgrind_the_stage_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(bench_count.shutil, "which", lambda name: None)
    with pytest.raises(bench_count.CountError, match="apt-get install valgrind.*--no-count"):
        bench_count.valgrind()


def test_the_floor_is_above_every_a_a_change_measured():
    """docs/gate_counts.csv's A/A rows: no point moved by as much as a tenth of the floor."""
    rows = bench_count_rates_rows()
    aa = [r for r in rows if r["label"] == "head"]
    assert len({r["run"] for r in aa}) >= 10
    worst = max(abs(float(r["ratio"]) - 1) for r in aa)
    assert worst < bench_count.FLOOR / 10, worst
    assert not math.isnan(worst)


def bench_count_rates_rows():
    import csv
    with open(ROOT / "docs" / "gate_counts.csv", newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- the error rates

def _rate_rows():
    import bench_count_rates as rates
    base = {"Kernels.time_forward(rnn, large)": {"Ir": 1000.0},
            "Kernels.time_forward(gru, large)": {"Ir": 500.0}}
    runs = []
    for run, (aa_gru, slow2, slow10) in enumerate([(500.0, 1015.0, 1090.0),
                                                    (506.0, 1009.0, 1095.0)]):
        counts = {"base": base,
                  "head": {"Kernels.time_forward(rnn, large)": {"Ir": 1000.0},
                           "Kernels.time_forward(gru, large)": {"Ir": aa_gru}},
                  "slow2": {"Kernels.time_forward(rnn, large)": {"Ir": slow2}},
                  "slow10": {"Kernels.time_forward(rnn, large)": {"Ir": slow10}}}
        runs += rates.rows_of(counts, f"r{run}", "idle", (0.5, 0.7), 60.0, floor=0.01)
    return runs


def test_rate_rows_compare_each_label_with_base_on_its_own_points():
    rows = _rate_rows()
    assert len(rows) == 2 * (2 + 1 + 1)
    slow2 = [r for r in rows if r["label"] == "slow2"]
    assert [r["verdict"] for r in slow2] == ["slower", "same"]        # 1.5 % and 0.9 %
    assert [r["ratio"] for r in slow2] == ["1.015000", "1.009000"]
    gru = [r for r in rows if r["label"] == "head" and "gru" in r["id"]]
    assert [r["verdict"] for r in gru] == ["same", "slower"]          # 1.2 % in the second run


def test_the_rate_summary_counts_what_the_rows_say():
    import bench_count_rates as rates
    rows = _rate_rows()
    line = rates.summary(rows).splitlines()[2]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "no load of ours" and cells[1] == "2" and cells[2] == "0.5–0.5"
    assert cells[3].startswith("1 of 4 (")                            # the gru run's A/A point
    assert cells[4] == "1.2000 %"
    assert cells[5].startswith("1 of 2 (") and cells[5].endswith("(1.0090–1.0150)")
    assert cells[6] == "0 of 0"                                       # slow5: not in these rows
    assert cells[7].startswith("2 of 2 (") and cells[7].endswith("(1.0900–1.0950)")
    targets = rates.against_targets(rows)
    assert "2 runs (ten wanted: not met)" in targets
    assert "10 % more work caught 2 of 2" in targets
    # 1.09 less 1.01, over the gru point's 1.2 % A/A change: 6.7
    assert targets.splitlines()[-1] == ("- margin: the 10 % level's smallest count ratio, "
                                        "1.0900, lies 8.00 % past the floor (1 %), 7 times the "
                                        "largest A/A change (1.2000 %).")


def test_the_docs_show_the_stored_count_rates():
    import csv

    import bench_count_rates as rates
    from _helpers import docs_table
    with open(ROOT / "docs" / "gate_counts.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rates.summary(rows) in docs_table("gate_counts")
    assert rates.against_targets(rows) in docs_table("gate_counts")


def test_the_cpu_cost_table_shows_each_row_and_their_range():
    import bench_count_rates as rates
    rows = [{"id": "a", "native_s": "0.001", "avx2_s": "0.0012", "ratio": "1.2", "lo": "1.1",
             "hi": "1.3"},
            {"id": "b", "native_s": "0.002", "avx2_s": "0.002", "ratio": "1.0", "lo": "0.9",
             "hi": "1.1"},
            {"id": "c", "native_s": "0.004", "avx2_s": "0.006", "ratio": "1.5", "lo": "1.4",
             "hi": "1.6"}]
    table = rates.cost_table(rows)
    assert "| a | 1.000 | 1.200 | 1.200 [1.100, 1.300] |" in table
    assert table.splitlines()[-1] == ("Over the 3 points the AVX2 build's time is 1.00–1.50 "
                                      "times the native one's (median 1.20).")


def test_the_docs_show_the_stored_cpu_cost():
    import csv

    import bench_count_rates as rates
    from _helpers import docs_table
    with open(ROOT / "docs" / "gate_cpu_cost.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 28 and {r["blas_kernel"] for r in rows} == {"SkylakeX"}
    assert rates.cost_table(rows) in docs_table("gate_cpu_cost")
    for r in rows:                                    # each ratio is its two times' quotient
        assert float(r["ratio"]) == pytest.approx(float(r["avx2_s"]) / float(r["native_s"]),
                                                  rel=2e-4)
        assert float(r["lo"]) <= float(r["ratio"]) <= float(r["hi"])


def test_the_rate_trees_are_the_commit_and_its_planted_copies(tmp_path, monkeypatch):
    import bench_count_rates as rates
    import bench_gate_rates as timing_rates
    repo = tmp_path / "repo"
    (repo / "harness" / "kernels").mkdir(parents=True)
    (repo / "harness" / "kernels" / "rnn.py").write_text("def f():\n" + timing_rates._ANCHOR)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)
    commit = bench_gate.resolve("HEAD", cwd=repo)
    export = bench_gate.export
    monkeypatch.setattr(bench_gate, "export", lambda c, dest: export(c, dest, cwd=repo))
    trees = timing_rates.trees_for(commit, tmp_path / "trees", rates.LEVELS)
    assert set(trees) == {"base", "head", *rates.LEVELS}
    text = {label: (path / "harness" / "kernels" / "rnn.py").read_text()
            for label, path in trees.items()}
    assert text["base"] == text["head"] == "def f():\n" + timing_rates._ANCHOR
    for label, fraction in rates.LEVELS.items():
        assert f"injected: {fraction} more steps" in text[label], label
    # the real kernel holds the anchor once: the planted steps land in the forward that runs
    real = (ROOT / "harness" / "kernels" / "rnn.py").read_text()
    assert real.count(timing_rates._ANCHOR) == 1


class _Finished:
    """What ``collect`` reads of a finished worker: its stdout and its status."""

    def __init__(self, out, returncode=0):
        self.out, self.returncode = out, returncode

    def communicate(self):
        return self.out, ""


def test_collect_refuses_a_failed_worker_and_a_missing_dump(tmp_path):
    with pytest.raises(bench_count.CountError, match="the head worker failed under Valgrind "
                                                     r"\(status 3\)"):
        bench_count.collect("head", _Finished("", 3), tmp_path)
    _dump(tmp_path / "cg.1.1", "p0-empty", "10")
    line = json.dumps({"id": "p", "labels": ["p0-empty", "p0-call0"]})
    with pytest.raises(bench_count.CountError, match=r"dumps \['p0-call0'\] of p are missing"):
        bench_count.collect("base", _Finished(line + "\n"), tmp_path)
    _dump(tmp_path / "cg.1.2", "p0-call0", "1010")
    skipped = json.dumps({"id": "q", "skipped": "too large"})
    got = bench_count.collect("base", _Finished(line + "\n" + skipped + "\n"), tmp_path)
    assert got == {"p": {"Ir": 1000.0}, "q": {"skipped": "too large"}}
