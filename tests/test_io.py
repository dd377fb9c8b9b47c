"""Command output: atomic files, and no empty directory left by a failed run."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from harness.kernels import rnn
from harness.infra.files import atomic_write_text, output_dir


def test_output_dir_removes_what_a_failed_run_created(tmp_path):
    target = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with output_dir(target):
            raise RuntimeError("boom")
    assert not target.exists()


def test_output_dir_keeps_a_directory_that_existed(tmp_path):
    with pytest.raises(RuntimeError):
        with output_dir(tmp_path):
            raise RuntimeError("boom")
    assert tmp_path.is_dir()


def test_output_dir_keeps_what_was_written(tmp_path):
    target = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with output_dir(target) as out:
            atomic_write_text(out / "a.csv", "x\n1\n")
            raise RuntimeError("boom")
    assert (target / "a.csv").read_text() == "x\n1\n"


def test_atomic_write_leaves_no_temporary(tmp_path):
    atomic_write_text(tmp_path / "f.txt", "hello")
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_masked_arrays_are_refused():
    X = np.ma.masked_array(np.ones((3, 2)), mask=[[0, 1]] * 3)
    with pytest.raises(TypeError, match="X is a masked array"):
        rnn.forward(X, np.ones((2, 2)), np.eye(2))


def test_sigterm_during_report_leaves_nothing(tmp_path):
    out = tmp_path / "rep"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "report", "--quick", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(tmp_path.iterdir()):
        time.sleep(0.05)                      # wait until the staging folder exists
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    left = os.listdir(tmp_path)
    assert not [n for n in left if n.endswith(".partial")], left   # no staging folder left
    if proc.returncode != 0:                  # interrupted: nothing that looks like a report
        assert left == [], left
    else:                                     # the signal came too late: a complete report
        assert (out / "index.html").exists()


def test_main_restores_the_sigterm_handler(tmp_path):
    from harness import cli
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["decay", "--T", "8", "--d", "2", "--rho", "0.9", "--quiet",
                     "--out", str(tmp_path)]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_depth_writes_its_files_only_when_the_run_completes(tmp_path, monkeypatch):
    from harness import cli
    from harness.analysis import schedule

    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(schedule, "schedule_table", boom)
    out = tmp_path / "d"
    with pytest.raises(RuntimeError):
        cli.main(["depth", "--T", "8", "16", "--d", "4", "--schedule-T", "8", "--no-measure",
                  "--out", str(out)])
    assert not out.exists()                    # depth.csv was not written ahead of the rest


def test_analyser_errors_are_one_line_unless_debugging(monkeypatch, capsys):
    from harness import cli
    from harness.commands import decay

    def bad(args):
        raise ValueError("rho must be > 0\nsecond line")

    monkeypatch.setattr(decay, "run", bad)
    assert cli.main(["decay"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "rho must be > 0" in err and "HARNESS_DEBUG=1" in err
    monkeypatch.setenv("HARNESS_DEBUG", "1")
    with pytest.raises(ValueError, match="rho must be"):
        cli.main(["decay"])
