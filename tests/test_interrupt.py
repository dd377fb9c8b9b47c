"""Outputs all new or all old; signals end in a clean exit; write failures in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.infra import signals as _interrupt, files as _io
from harness import cli, report
from harness.infra.config import QUICK_REPORT
from harness.report import build, history

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_signal_left_behind(monkeypatch):
    """A signal recorded by a test here is forgotten after it: else every later checkpoint()
    in this process (the report's, in other test files) raises KeyboardInterrupt."""
    monkeypatch.setattr(_interrupt, "_received", None)


DECAY = ["decay", "--T", "40", "--d", "6", "--rho", "0.9", "1.1", "--quiet"]


def _run_decay(out):
    assert cli.main([*DECAY, "--out", str(out)]) == 0


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def test_a_failed_move_leaves_the_old_set(tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    _run_decay(out)
    before = _snapshot(out)
    real = os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 4:                  # halfway through moving the new set in
            raise OSError(28, "No space left on device", str(dst))
        return real(src, dst)

    monkeypatch.setattr(_io.os, "replace", flaky)
    rc = cli.main(["decay", "--T", "30", "--d", "5", "--rho", "0.5", "--quiet", "--out", str(out)])
    monkeypatch.setattr(_io.os, "replace", real)
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "No space left on device" in err
    assert _snapshot(out) == before          # every old file back, no staging folder left


def test_a_failed_write_while_staging_leaves_the_old_set(tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    _run_decay(out)
    before = _snapshot(out)
    real = _io.OutputSet.write_bytes

    def full(self, name, data):
        if name == "decay_clipping.csv":
            raise OSError(28, "No space left on device", name)
        return real(self, name, data)

    monkeypatch.setattr(_io.OutputSet, "write_bytes", full)
    assert cli.main(["decay", "--T", "30", "--d", "5", "--quiet", "--out", str(out)]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert _snapshot(out) == before


def test_a_destination_that_is_a_directory_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    (out / "decay_summary.csv").mkdir(parents=True)
    from harness.analysis import gradpath
    monkeypatch.setattr(gradpath, "run_sweep", lambda *a, **k: pytest.fail("computed anyway"))
    assert cli.main([*DECAY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and err.count("\n") == 1


def test_leftover_staging_of_a_killed_run_is_removed(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / f"{_io.STAGING_PREFIX}{dead.pid}-abc").mkdir()
    mine = out / f"{_io.STAGING_PREFIX}{os.getpid()}-xyz"   # a live process's: kept
    mine.mkdir()
    _run_decay(out)
    names = {p.name for p in out.iterdir()}
    assert f"{_io.STAGING_PREFIX}{dead.pid}-abc" not in names and mine.name in names


def test_a_swallowed_signal_is_not_a_success(monkeypatch, capsys):
    """SIGTERM raised where Python cannot deliver it (a weakref callback): exit 143, not 0."""
    from harness.commands import decay

    def run(args):
        try:
            _interrupt._handler(signal.SIGTERM, None)
        except KeyboardInterrupt:
            pass                              # "Exception ignored in ..."
        return 0

    monkeypatch.setattr(decay, "run", run)
    assert cli.main(["decay"]) == 128 + signal.SIGTERM
    assert "interrupted (SIGTERM); no partial output was left" in capsys.readouterr().err


# ----------------------------------------------------------------------------- report's folder

def test_report_refuses_the_current_directory_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path), str(tmp_path.parent)):
        with pytest.raises(_io.UsageError, match="current directory"):
            report.check_out(out)


def test_report_into_a_symlink_to_an_empty_folder(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    assert report.check_out(link) == target.resolve()


def test_report_refuses_a_folder_another_live_run_is_writing(tmp_path):
    out = tmp_path / "rep"
    (tmp_path / ".rep.lock").write_text(str(os.getpid()))        # a live process holds it
    with pytest.raises(_io.UsageError, match="another harness report"):
        report.build_report(out, QUICK_REPORT)
    assert not out.exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".rep.lock").write_text(str(dead.pid))           # left by a kill -9
    with build._lock(out.resolve()):
        pass
    assert not (tmp_path / ".rep.lock").exists()
    out.mkdir()                                                  # the staging a kill -9 left
    (out / f"{_io.STAGING_PREFIX}{dead.pid}-abcd").mkdir()
    assert report.check_out(out) == out.resolve()                # as good as empty


def test_report_refuses_a_name_that_is_not_utf8(tmp_path):
    bad = os.fsdecode(bytes(tmp_path) + b"/r\xff")
    with pytest.raises(_io.UsageError, match="not UTF-8"):
        report.check_out(bad)


def test_asv_results_that_are_not_objects_are_ignored(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.json").write_text("[]")
    (tmp_path / "m" / "b.json").write_text(json.dumps({"results": []}))
    assert history.read_asv_results(str(tmp_path)).empty


# ----------------------------------------------------------------------------- real signals

COMMANDS = {
    "decay": ["decay", "--T", "400", "--d", "48"],
    "depth": ["depth", "--T", "50", "100", "200", "--d", "32", "--schedule-T", "100",
              "--measure-T", "32", "64", "128", "--scaling-T", "64"],
    "compare": ["compare", "--quick"],
    "report": ["report", "--quick"],
}


def kill_at(argv, out, when, sig):
    """Run ``harness argv --out out``; ``when`` seconds after its first progress line (its
    handlers are in place by then, whatever the machine's load), send ``sig``. (rc, stderr)."""
    import threading
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "harness", *argv, "--out", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=ROOT)
    lines, started = [], threading.Event()

    def read():
        for line in p.stderr:
            lines.append(line)
            started.set()
        started.set()

    reader = threading.Thread(target=read)
    reader.start()
    started.wait(timeout=120)
    time.sleep(when)
    if p.poll() is None:
        p.send_signal(sig)
    p.wait(timeout=120)
    reader.join()
    return p.returncode, "".join(lines)


def check_outcome(rc, err, out, sig, complete_files):
    """Finished (0), interrupted (128 + sig), or ended by the signal itself while Python was
    shutting down after the work (-sig: its handlers are gone by then); never a crash or a
    traceback; never a mixed folder or a staging folder left."""
    assert rc in (0, 128 + sig, -sig), (rc, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    left = sorted(p.name for p in out.parent.iterdir() if p.name.startswith("."))
    assert not left, left
    if out.exists():
        names = {p.name for p in out.iterdir()}
        assert not any(n.startswith(".") for n in names), names
        assert names in ({}, set(), complete_files) or names >= complete_files, names


EXPECTED = {"decay": {"decay.csv", "decay_summary.csv", "decay_clipping.csv", "decay_additive.csv"},
            "depth": {"depth.csv", "schedule.csv", "timings.csv", "scaling.csv", "machine.csv"},
            "compare": {"compare.csv", "compare_summary.csv"},
            "report": {"index.html"}}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_end_cleanly(tmp_path, command, sig):
    """One signal per (command, signal) here, at once or 1.5 s in; ``tests/stress_signals.py``
    sends hundreds at spread-out times."""
    out = tmp_path / "run" / "out"
    out.parent.mkdir()
    rc, err = kill_at(COMMANDS[command], out, 0.0 if sig == signal.SIGTERM else 1.5, sig)
    check_outcome(rc, err, out, sig, EXPECTED[command])


def test_a_signal_during_compilation_waits_for_its_end():
    """Numba's compiler calls back into Python from C, where a KeyboardInterrupt would be printed
    as "Exception ignored" and lost: inside quietly() it is recorded, and raised at the end."""
    with _interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            with _interrupt.quietly():
                _interrupt._handler(signal.SIGTERM, None)     # no raise here
                reached = True
        assert reached and _interrupt.received() == signal.SIGTERM
