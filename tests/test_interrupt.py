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
    "roofline": ["roofline", "--quick", "--family", "rnn", "attention"],
}
# the line each command ends its standard output with: its output is complete by then
LAST_LINE = {"decay": "wrote ", "depth": "harness depth: ", "compare": "wrote ", "report": "wrote "}


HARNESS = [sys.executable, "-m", "harness"]
SCRIPT = [str(Path(sys.executable).with_name("harness"))]      # the console script pip made


def kill_at(argv, out, when, sig, after="progress", env=None, entry=HARNESS):
    """Run ``harness argv --out out`` and send ``sig`` ``when`` seconds after a moment: the
    process's start (``after="start"``: while the command line and its libraries load), its
    first progress line (``"progress"``: its handlers are in place by then, whatever the
    machine's load) or the last line of its output (``"output"``: every file is in place,
    the process is on its way out). ``sig`` None: send nothing (the process signals itself).
    ``entry``: how the executable is started (``python -m harness``, or ``SCRIPT``).
    (rc, stderr)."""
    import threading
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([*entry, *argv, "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=ROOT)
    lines, started, done = [], threading.Event(), threading.Event()
    last = LAST_LINE.get(argv[0], "wrote ")

    def read_err():
        for line in p.stderr:
            lines.append(line)
            started.set()
        started.set()

    def read_out():
        for line in p.stdout:
            if line.startswith(last):
                done.set()
        done.set()

    readers = [threading.Thread(target=read_err), threading.Thread(target=read_out)]
    for r in readers:
        r.start()
    if after == "progress":
        started.wait(timeout=120)
    elif after == "output":
        done.wait(timeout=600)
    time.sleep(when)
    if sig is not None and p.poll() is None:
        p.send_signal(sig)
    p.wait(timeout=600)
    for r in readers:
        r.join()
    return p.returncode, "".join(lines)


def check_outcome(rc, err, out, sig, complete_files, command=None):
    """Finished (0: the signal came after the process had gone) or interrupted (128 + sig, its
    last line the command's one-line message); never a death by the signal, a crash or a
    traceback; never a mixed folder or a staging folder left."""
    assert rc in (0, 128 + sig), (rc, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "terminate called" not in err, err
    if rc == 128 + sig:
        name = f"harness {command}" if command else "harness"
        assert err.splitlines()[-1] == (f"{name}: interrupted ({signal.Signals(sig).name}); "
                                        f"no partial output was left"), err
    left = sorted(p.name for p in out.parent.iterdir() if p.name.startswith("."))
    assert not left, left
    if out.exists():
        names = {p.name for p in out.iterdir()}
        assert not any(n.startswith(".") for n in names), names
        assert names in ({}, set(), complete_files) or names >= complete_files, names
    if rc == 0:
        assert out.exists() and {p.name for p in out.iterdir()} >= complete_files


EXPECTED = {"decay": {"decay.csv", "decay_summary.csv", "decay_clipping.csv", "decay_additive.csv"},
            "depth": {"depth.csv", "schedule.csv", "timings.csv", "scaling.csv", "machine.csv"},
            "compare": {"compare.csv", "compare_summary.csv"},
            "report": {"index.html"},
            "roofline": {'ceilings.csv', 'roofline.csv', 'roofline.png', 'roofline.svg', 'roofline_crossover.csv'}}


def test_signals_end_cleanly(tmp_path):
    """One signal per (command, signal) here, at once or 1.5 s after the first progress line,
    eight processes two at a time; ``tests/stress_signals.py`` sends hundreds at spread-out
    times."""
    runs = [(COMMANDS[c], s, 0.0 if s == signal.SIGTERM else 1.5, "progress", None, HARNESS)
            for c in sorted(COMMANDS) for s in (signal.SIGTERM, signal.SIGINT)]
    for (argv, sig, *_), rc, err, out in _in_pairs(tmp_path, runs):
        command = argv[0]
        check_outcome(rc, err, out, sig, EXPECTED[command], command)


SMALL = {"decay": ["decay", "--T", "30", "--d", "5", "--rho", "0.9"],
         "depth": ["depth", "--T", "50", "--d", "8", "--schedule-T", "50", "--no-measure"]}


def _in_pairs(tmp_path, runs):
    """Each of ``runs`` (argv, sig, when, after, env, entry: ``kill_at``'s) in a process of its
    own, two at a time (the machine's two cores); [(run, rc, stderr, out)] in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        argv, sig, when, after, env, entry = runs[i]
        out = tmp_path / f"run{i}" / "out"
        out.parent.mkdir()
        rc, err = kill_at(argv, out, when, sig, after=after, env=env, entry=entry)
        return runs[i], rc, err, out

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, range(len(runs))))


def test_a_signal_after_the_output_is_complete_still_ends_in_the_message(tmp_path):
    """Once the output is in place the process still has to exit; Python's shutdown puts the
    default handlers back and would die by the signal (-15, -2), with no message. Each command
    and signal once, at 0, 20 or 50 ms after the last line (six processes, two at a time)."""
    runs = [(SMALL[c], s, when, "output", None, HARNESS)
            for c, s, when in (("decay", signal.SIGTERM, 0.0), ("decay", signal.SIGINT, 0.02),
                               ("decay", signal.SIGTERM, 0.05), ("depth", signal.SIGINT, 0.0),
                               ("depth", signal.SIGTERM, 0.02), ("depth", signal.SIGINT, 0.05))]
    for (argv, sig, *_), rc, err, out in _in_pairs(tmp_path, runs):
        command = argv[0]
        check_outcome(rc, err, out, sig, {"decay": EXPECTED["decay"],
                                          "depth": {"depth.csv", "schedule.csv"}}[command],
                      command)


# Sends the signal HARNESS_TEST_SIGNAL_AFTER seconds after the executable's module
# (harness._entry) has loaded; 0: at once, before its main() runs, the earliest moment the
# harness's own code can answer for. Timed from there, not from the process's start, so that
# a loaded machine's slower start-up (site takes ~0.4 s at a load of 12) is never hit. A test
# hook, loaded by Python at start-up from PYTHONPATH; the harness knows nothing of it.
_AT_ENTRY = """\
import importlib.util, os, signal, sys, threading
_sig = int(os.environ["HARNESS_TEST_SIGNAL"])
_after = float(os.environ.get("HARNESS_TEST_SIGNAL_AFTER", "0"))


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name != "harness._entry":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if _after:
                threading.Timer(_after, os.kill, (os.getpid(), _sig)).start()
            else:
                os.kill(os.getpid(), _sig)    # handled on the next line Python runs

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
"""


def test_a_signal_from_the_first_moment_to_the_command_ends_in_the_message(tmp_path):
    """Before the command runs: as the executable's module has just loaded (before main()
    runs: the handler is in place from that module's first lines), and while NumPy, pandas
    and Numba load (0.05 to 1 s later). The message each time, never a traceback (SIGINT) or
    a death by the signal (SIGTERM); through ``python -m harness`` and through the console
    script, six processes two at a time. Before harness._entry's first line (Python's
    start-up and site, ~30 ms idle) a signal is Python's own: no harness code has run yet."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_AT_ENTRY)
    runs = []
    for i, (after, entry) in enumerate(((0, HARNESS), (0, SCRIPT), (0.05, SCRIPT),
                                        (0.3, HARNESS), (0.6, HARNESS), (1.0, SCRIPT))):
        sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
        env = dict(os.environ, PYTHONPATH=str(hook), HARNESS_TEST_SIGNAL=str(int(sig)),
                   HARNESS_TEST_SIGNAL_AFTER=str(after))
        runs.append((SMALL["decay"], None, 0.0, "none", env, entry))
    for (*_, env, entry), rc, err, out in _in_pairs(tmp_path, runs):
        sig = int(env["HARNESS_TEST_SIGNAL"])
        check_outcome(rc, err, out, sig, EXPECTED["decay"], "decay")
        if float(env["HARNESS_TEST_SIGNAL_AFTER"]) < 0.3:    # before decay can have finished
            assert rc == 128 + sig, (env["HARNESS_TEST_SIGNAL_AFTER"], entry, rc, err)


# Sends the signal while ``import torch`` runs in the command's own process: a set time after
# it begins, or as it ``exec``s its n-th string of code (each ``@dataclass`` does). A test
# hook, loaded by Python at start-up from PYTHONPATH; the harness knows nothing of it.
_AT_TORCH = """\
import os, signal, sys, threading
_sig = int(os.environ["HARNESS_TEST_SIGNAL"])
_at = os.environ.get("HARNESS_TEST_SIGNAL_AT")
_nth = int(os.environ.get("HARNESS_TEST_SIGNAL_NTH", "0"))
_seen = [0]


def _profile(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_filename == "<string>" and code.co_name == "<module>":
        _seen[0] += 1
        if _seen[0] == _nth:
            sys.setprofile(None)
            os.kill(os.getpid(), _sig)        # handled on the exec'd code's first line


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            if _at is not None:
                threading.Timer(float(_at), os.kill, (os.getpid(), _sig)).start()
            else:
                sys.setprofile(_profile)
        return None


sys.meta_path.insert(0, _Finder())
"""


def _torch_import_seconds():
    code = ("import time; import harness.analysis.compare; t = time.perf_counter(); "
            "import torch; print(time.perf_counter() - t)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    return float(r.stdout)


def test_signals_while_pytorch_loads_end_in_the_message(tmp_path):
    """``import torch`` runs C++ that calls back into Python (pybind11) and ``exec``s many
    dataclasses: a KeyboardInterrupt raised in there aborted the process ("terminate called
    after throwing an instance of 'pybind11::error_already_set'", -6) or, having passed
    through ``exec``, made ``python -m harness`` end by SIGINT after printing its message.
    12 signals, each in a process of its own: 6 as the import ``exec``s a string of code (the
    1st, 20th, ... of about 1,100), 6 spread evenly over the import's length
    (``tests/stress_signals.py --torch`` sends many more)."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e .[torch])")
    from concurrent.futures import ThreadPoolExecutor
    span = _torch_import_seconds()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_AT_TORCH)
    moments = ([{"HARNESS_TEST_SIGNAL_NTH": str(n)} for n in (1, 20, 100, 300, 600, 900)]
               + [{"HARNESS_TEST_SIGNAL_AT": f"{span * (i + 0.5) / 6:.4f}"} for i in range(6)])

    def one(i):
        sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
        out = tmp_path / f"run{i}" / "out"
        out.parent.mkdir()
        env = dict(os.environ, PYTHONPATH=str(hook), HARNESS_TEST_SIGNAL=str(int(sig)),
                   **moments[i])
        rc, err = kill_at(["compare", "--quick"], out, 0.0, None, after="none", env=env)
        return moments[i], sig, rc, err, out

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(len(moments))))
    for moment, sig, rc, err, out in results:
        assert rc == 128 + sig, (moment, rc, err)    # the signal always lands: sent in-process
        check_outcome(rc, err, out, sig, EXPECTED["compare"], "compare")


# Sends the signal as NumPy's compiled core, while it initialises, imports the datetime
# module: NumPy's C code calls PyCapsule_Import, which turns the KeyboardInterrupt into
# 'ImportError: PyCapsule_Import could not import module "datetime"', and NumPy adds its
# "IMPORTANT: PLEASE READ THIS" text (at 0.5 s into harness compare --quick, 1 in 20 random
# signals). A test hook, loaded by Python at start-up from PYTHONPATH.
_AT_NUMPY = """\
import os, signal, sys
_sig = int(os.environ["HARNESS_TEST_SIGNAL"])


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "datetime" and "numpy" in sys.modules:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), _sig)        # handled on the next line Python runs
        return None


sys.meta_path.insert(0, _Finder())
"""


def test_a_signal_while_numpys_core_loads_is_the_interruption_not_an_import_error(tmp_path):
    """Each signal once, as NumPy's core imports datetime from C: one line and 128 + the
    signal's number, not a 55-line ImportError traceback with NumPy's advice before it."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_AT_NUMPY)
    runs = [(["compare", "--quick"], None, 0.0, "none",
             dict(os.environ, PYTHONPATH=str(hook), HARNESS_TEST_SIGNAL=str(int(sig))), HARNESS)
            for sig in (signal.SIGINT, signal.SIGTERM)]
    for (*_, env, _), rc, err, out in _in_pairs(tmp_path, runs):
        sig = int(env["HARNESS_TEST_SIGNAL"])
        assert rc == 128 + sig, (rc, err)             # sent in-process: it always lands
        assert err == (f"harness compare: interrupted ({signal.Signals(sig).name}); no partial "
                       f"output was left\n"), err
        check_outcome(rc, err, out, sig, EXPECTED["compare"], "compare")


@pytest.mark.parametrize("error", [
    ImportError('PyCapsule_Import could not import module "datetime"'),   # NumPy's import
    RuntimeError("generator raised StopIteration"),
    ValueError("a check that ran as the signal came"),
    _io.UsageError("--out: cannot write in '/x': Interrupted system call"),
])
def test_an_interruption_that_comes_back_as_another_exception_is_still_the_interruption(
        error, monkeypatch, capsys):
    """A KeyboardInterrupt raised in C code that called back into Python comes back as some
    other exception, its cause lost: with a signal received, the command says the
    interruption, in one line, and exits 128 + the signal's number."""
    from harness.commands import decay

    def run(args):
        try:
            _interrupt._handler(signal.SIGINT, None)         # raises, as the handler would
        except KeyboardInterrupt:
            raise error from None

    monkeypatch.setattr(decay, "run", run)
    assert cli.main(["decay"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == ("harness decay: interrupted (SIGINT); no partial output "
                                       "was left\n")


def test_the_torch_import_holds_a_signal_until_it_ends(monkeypatch):
    """The handler runs inside the import (as it would from torch's C++), records, and does
    not raise there; the interrupt comes when the import has ended."""
    import importlib.abc
    import importlib.util
    from harness.analysis import compare
    inside = []

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            _interrupt._handler(signal.SIGTERM, None)        # must not raise here
            inside.append(_interrupt.received())

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            return importlib.util.spec_from_loader(name, Loader()) if name == "torch" else None

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    with _interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            compare._torch()
    assert inside == [signal.SIGTERM]


def test_a_signal_in_a_weakref_callback_is_raised_again_not_printed():
    """A KeyboardInterrupt raised in a weakref callback (matplotlib closing a figure) is one
    Python cannot raise: it printed "Exception ignored" and the work went on. Now it is
    raised again at the next line the work runs."""
    import weakref

    class Figure:
        pass

    with _interrupt.installed():
        fig = Figure()
        ref = weakref.ref(fig, lambda r: _interrupt._handler(signal.SIGTERM, None))
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            del fig                                  # the callback raises: unraisable
            while time.perf_counter() < t0 + 10:     # the work goes on ... until the re-sent one
                pass
        assert ref() is None and time.perf_counter() < t0 + 10


def test_a_signal_during_compilation_waits_for_its_end():
    """Numba's compiler calls back into Python from C, where a KeyboardInterrupt would be printed
    as "Exception ignored" and lost: inside quietly() it is recorded, and raised at the end."""
    with _interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            with _interrupt.quietly():
                _interrupt._handler(signal.SIGTERM, None)     # no raise here
                reached = True
        assert reached and _interrupt.received() == signal.SIGTERM


def test_a_signal_during_any_numba_compilation_waits_for_its_end():
    """A kernel compiles the first time it meets a type, wherever that is (harness compare's
    first case of a fresh clone, after the warm-up): a signal then is held until Numba's
    compiler lock is released, and raised after. Raised inside the compiler, it left a
    half-built llvmlite OutputString whose __del__ printed "Exception ignored ... '_ptr'"
    at exit (a fresh clone's test run, 1 December 2026)."""
    import harness.kernels  # noqa: F401  (turns on signals.watch_numba)
    from numba import njit
    from numba.core import event

    @njit                                  # no cache: it compiles on its first call below
    def twice(x):
        return 2 * x

    class Send(event.Listener):
        def on_start(self, ev):           # the signal arrives while the compiler runs
            os.kill(os.getpid(), signal.SIGTERM)

        def on_end(self, ev):
            pass

    with _interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            with event.install_listener("numba:compile", Send()):
                twice(3)
            time.sleep(2)                  # the held signal is raised by here at the latest
        assert _interrupt.received() == signal.SIGTERM
    assert len(twice.overloads) == 1       # the compilation ran to its end first


def test_an_interrupt_wrapped_by_c_code_is_still_the_interruption(monkeypatch, capsys):
    """A SIGINT whose KeyboardInterrupt was raised inside a callback from C (Numba unpickling a
    compiled function's constants on its first call, seen in a fresh clone's make test) comes
    back as a SystemError: one line and 130, no traceback. A SystemError with no signal, or
    not caused by one, is still a bug."""
    from harness.commands import decay

    def wrapped(args):
        try:
            _interrupt._handler(signal.SIGINT, None)         # raises, as the handler would
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise SystemError("<function _numba_unpickle> returned a result with an exception "
                              "set") from e

    monkeypatch.setattr(decay, "run", wrapped)
    assert cli.main(["decay"]) == 128 + signal.SIGINT
    err = capsys.readouterr().err
    assert err.strip() == "harness decay: interrupted (SIGINT); no partial output was left"

    def plain(args):
        raise SystemError("a bug")

    monkeypatch.setattr(decay, "run", plain)
    with pytest.raises(SystemError, match="a bug"):
        cli.main(["decay"])


def test_a_command_forgets_its_signal_when_it_ends(monkeypatch, capsys):
    """cli.main in a process that goes on (a test, a notebook): the next command, and every
    checkpoint() after, starts with no signal recorded."""
    from harness.commands import decay

    def run(args):
        _interrupt._handler(signal.SIGINT, None)
        return 0

    monkeypatch.setattr(decay, "run", run)
    before = signal.getsignal(signal.SIGINT)     # Python's, or SIG_IGN under a background job
    assert cli.main(["decay"]) == 128 + signal.SIGINT
    assert _interrupt.received() is None
    _interrupt.checkpoint()                                  # does not raise
    assert signal.getsignal(signal.SIGINT) is before and before is not _interrupt._handler
