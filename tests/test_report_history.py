"""harness.report.history: asv's result files read into one row per timing, and the kernel
series kept across commits."""

from __future__ import annotations

import pandas as pd


def _asv_file(folder, name, payload):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(payload if isinstance(payload, str) else __import__("json").dumps(payload))


def test_asv_results_are_read_into_one_row_per_timing(tmp_path):
    from harness.report import history
    box = tmp_path / "box"
    params = [["'rnn'", "'attention'"], ["64", "256"]]
    _asv_file(box, "machine.json", {"results": {"x.time_y": [[9.0], []]}})     # not results
    _asv_file(box, "a.json", {
        "commit_hash": "0123456789abcdef", "date": 1_700_000_000_000,
        "result_columns": ["result", "params", "version"],
        "results": {
            "k.Kernels.time_forward": [[1.0, 2.0, None, float("nan")], params, "v1"],
            "k.Kernels.track_bytes": [[5.0], [["1"]], "v1"],                  # not a timing
            "time_top_level": [[0.25], [], "v1"],                              # asv's bare form
            "k.Missing.time_none": [None, params, "v1"],
            "k.Old.time_scalar": [0.125, [], "v1"]}})                          # not a list
    _asv_file(box, "b.json", "{not json")
    _asv_file(box, "c.json", [1, 2, 3])
    _asv_file(box, "d.json", {"results": [1, 2]})
    _asv_file(tmp_path / "other", "e.json", {
        "commit_hash": "fedcba98", "date": 1_700_086_400_000,
        "results": {"k.Kernels.time_backward": [[3.0, 4.0], [["'rnn'"], ["64", "256"]]]}})
    h = history.read_asv_results(str(tmp_path))
    assert list(h.columns) == ["benchmark", "params", "commit", "date", "seconds"]
    got = [(r.benchmark, r.params, r.commit, r.seconds) for r in h.itertuples()]
    assert got == [("k.Kernels.time_forward", "'rnn', 64", "01234567", 1.0),
                   ("k.Kernels.time_forward", "'rnn', 256", "01234567", 2.0),
                   ("time_top_level", "", "01234567", 0.25),
                   ("k.Old.time_scalar", "", "01234567", 0.125),
                   ("k.Kernels.time_backward", "'rnn', 64", "fedcba98", 3.0),
                   ("k.Kernels.time_backward", "'rnn', 256", "fedcba98", 4.0)]
    assert h.date.iloc[0] == pd.Timestamp("2023-11-14 22:13:20")
    assert h.date.iloc[-1] == pd.Timestamp("2023-11-15 22:13:20")
    empty = history.read_asv_results(str(tmp_path / "nothing here"))
    assert len(empty) == 0 and list(empty.columns) == list(h.columns)


def test_kernel_history_keeps_one_width_batch_and_dtype_oldest_first():
    from harness.report import history
    rows = []
    for commit, day in (("new", 3), ("old", 1), ("mid", 2)):
        for bench, params, sec in (
                ("b.Kernels.time_forward", "'rnn', 64, 256, 1, 'float64'", 1.0 * day),
                ("b.Kernels.time_forward", "'attention', 64, 256, 1, 'float64'", 2.0 * day),
                ("b.Kernels.time_backward", "'rnn', 1024, 256, 1, 'float64'", 3.0 * day),
                ("b.Kernels.time_forward", "'rnn', 64, 128, 1, 'float64'", 99.0),     # other d
                ("b.Kernels.time_forward", "'rnn', 64, 256, 8, 'float64'", 99.0),     # batch
                ("b.Kernels.time_forward", "'rnn', 64, 256, 1, 'float32'", 99.0),     # dtype
                ("b.Kernels.time_forward", "'rnn', 64", 99.0),                        # too short
                ("b.Kernels.time_forward", "rnn, )(", 99.0),                          # unreadable
                ("b.Other.time_forward", "'rnn', 64, 256, 1, 'float64'", 99.0)):      # not Kernels
            rows.append(dict(benchmark=bench, params=params, commit=commit,
                             date=pd.Timestamp("2026-01-01") + pd.Timedelta(days=day),
                             seconds=sec))
    k = history.kernel_history(pd.DataFrame(rows))
    assert list(k.columns) == ["commit", "date", "series", "T", "d", "seconds"]
    assert list(k.commit) == ["old"] * 3 + ["mid"] * 3 + ["new"] * 3
    assert list(k.series[:3]) == ["attention forward", "rnn backward", "rnn forward"]
    assert list(k["T"][:3]) == [64, 1024, 64] and (k.d == 256).all()
    assert list(k.seconds) == [2.0, 3.0, 1.0, 4.0, 6.0, 2.0, 6.0, 9.0, 3.0]
    assert list(k.index) == list(range(9))
    other = history.kernel_history(pd.DataFrame(rows), d=128)
    assert list(other.seconds) == [99.0] * 3 and list(other.series) == ["rnn forward"] * 3
    assert len(history.kernel_history(pd.DataFrame(rows), batch=8)) == 3
    assert len(history.kernel_history(pd.DataFrame(rows), dtype="float32")) == 3


def test_asv_results_follow_the_files_own_columns_and_defaults(tmp_path):
    """A file that lists its columns in another order is read by its names; a missing commit
    or date reads as "" and the epoch; a missing value skips that value, not the rest; a
    file without results is skipped."""
    from harness.report import history
    box = tmp_path / "box"
    _asv_file(box, "a.json", {
        "result_columns": ["params", "version", "result"],
        "results": {"k.Kernels.time_forward": [[["'rnn'"], ["8", "16", "32"]], "v1",
                                               [None, 0.5, 0.75]]}})
    _asv_file(box, "b.json", {"commit_hash": "abc", "date": 5})          # no results at all
    h = history.read_asv_results(str(tmp_path))
    assert [(r.params, r.commit, r.seconds) for r in h.itertuples()] == [
        ("'rnn', 16", "", 0.5), ("'rnn', 32", "", 0.75)]
    assert (h.date == pd.Timestamp("1970-01-01")).all()


def test_kernel_history_reads_the_direction_after_the_last_time_():
    from harness.report import history
    h = pd.DataFrame([dict(benchmark="time_suite.Kernels.time_forward",
                           params="'rnn', 64, 256, 1, 'float64'", commit="c",
                           date=pd.Timestamp("2026-01-01"), seconds=1.0)])
    assert list(history.kernel_history(h).series) == ["rnn forward"]
