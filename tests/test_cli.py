"""The command line answers at once and shows its progress the way its stream wants."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.infra.progress import Progress
from harness.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("numpy", "pandas", "numba", "scipy", "seaborn", "matplotlib", "harness.models.rnn",
         "harness.analysis.gradpath", "harness.analysis.depth", "harness.report", "harness.analysis.compare", "tqdm")


def _imported_after(code):
    probe = (f"import sys\n{code}\n"
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_building_the_parser_imports_nothing_heavy():
    assert _imported_after("from harness import cli; cli.build_parser()") == ""


@pytest.mark.parametrize("argv", [["--help"], ["decay", "--help"], ["depth", "--help"],
                                  ["report", "--help"], ["compare", "--help"],
                                  ["decay", "--rho", "abc"], ["nosuchcommand"]])
def test_help_and_usage_errors_import_nothing_heavy(argv):
    code = ("import contextlib, io\nfrom harness import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n        cli.main(%r)\n    except SystemExit:\n        pass" % argv)
    assert _imported_after(code) == ""


def test_no_arguments_prints_one_example_per_command_and_exits_2(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: harness")
    for name in COMMANDS:
        assert f"\n           harness {name} " in err, name


def test_progress_in_a_pipe_is_plain_lines():
    stream = io.StringIO()                          # not a terminal
    p = Progress("harness x", stream=stream)
    with p.steps(3, "work") as step:
        for i in range(3):
            step(f"item {i}")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("harness x: [") and "work [1/3] item 0" in lines[0]
    assert "work [3/3] item 2" in lines[-1]          # the last step is always shown
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_is_a_bar_with_count_and_estimate():
    stream = _Terminal()
    p = Progress("harness x", stream=stream)
    with p.steps(4, "work") as step:
        for i in range(4):
            step(f"item {i}")
    frames = stream.getvalue()
    assert "\r" in frames                            # redrawn in place
    assert "harness x: work" in frames and "4/4" in frames and "item 3" in frames
    assert "<" in frames                             # elapsed<remaining


def test_quiet_prints_nothing():
    for stream in (io.StringIO(), _Terminal()):
        p = Progress("harness x", quiet=True, stream=stream)
        p.line("hello")
        with p.steps(2, "work") as step:
            step("a")
            step("b")
        assert stream.getvalue() == ""


# ----------------------------------------------------------------------------- --out, at once

def _main_in_a_fresh_process(argv, cwd):
    """(exit status, stderr, the heavy modules loaded) of ``cli.main(argv)`` in a new interpreter."""
    code = ("import sys\nfrom harness import cli\nrc = cli.main(%r)\n"
            "print(rc)\nprint(','.join(m for m in %r if m in sys.modules))" % (argv, HEAVY + ("torch",)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))          # this checkout's harness, from any cwd
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=300)
    rc, heavy = r.stdout.splitlines()[-2:] if r.stdout.count("\n") >= 2 else (r.returncode, "?")
    return int(rc), r.stderr, heavy


def _bad_outs(tmp_path):
    (tmp_path / "file").write_text("x")
    return {"empty": "", "/proc": "/proc", "under /proc": "/proc/harness-out",
            "under a file": "file/out", "300 characters": "o" * 300}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_an_unusable_out_at_once(tmp_path, command):
    """Exit 2, one line naming --out, before NumPy, pandas or Numba load (and so before any
    compilation): not 6 to 12 s later, not exit 1, not after the whole run."""
    for what, out in _bad_outs(tmp_path).items():
        rc, err, heavy = _main_in_a_fresh_process([command, "--out", out], tmp_path)
        assert rc == 2, (what, rc, err)
        assert err.count("\n") == 1 and err.startswith(f"harness {command}: error: --out:"), (what, err)
        assert heavy == "", (what, heavy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]      # nothing was created


def test_report_refuses_the_current_directory_at_once(tmp_path):
    rc, err, heavy = _main_in_a_fresh_process(["report", "--out", "."], tmp_path)
    assert rc == 2 and "current directory" in err and heavy == ""


@pytest.mark.parametrize("command", ["decay", "compare", "depth", "report"])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch, capsys,
                                                                   command):
    """A read-only mount point: the permission bits say yes (root, an empty folder), the first
    write says no. Tried at once, not found at the end of the run."""
    import errno
    import tempfile
    out = tmp_path / "mnt"
    out.mkdir()
    real = tempfile.mkdtemp

    def read_only(*a, dir=None, **k):
        if dir is not None and Path(dir) == out:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    from harness.infra import progress
    monkeypatch.setattr(progress, "warm_up_kernels", lambda *a: pytest.fail("went on to work"))
    argv = [command, "--out", str(out)] + (["--no-measure"] if command == "depth" else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"harness {command}: error: --out: cannot write in {str(out)!r}: "
                   f"Read-only file system\n")


# ----------------------------------------------------------------------------- one-line answers

@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("TRUE", True), ("Yes", True),
                                       ("on", True), (" 1 ", True), ("0", False), ("false", False),
                                       ("False", False), ("no", False), ("off", False),
                                       ("", False), ("2", False), ("debug", False)])
def test_harness_debug_is_on_for_yes_words_only(value, on):
    assert cli.debugging({"HARNESS_DEBUG": value}) is on
    assert cli.debugging({}) is False


@pytest.mark.parametrize("value", ["0", "false"])
def test_harness_debug_0_keeps_errors_to_one_line(monkeypatch, capsys, value):
    from harness.commands import decay

    def run(args):
        raise ValueError("rhos must be positive\nand more")

    monkeypatch.setattr(decay, "run", run)
    monkeypatch.setenv("HARNESS_DEBUG", value)
    assert cli.main(["decay"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ValueError: rhos must be positive" in err


def test_a_processor_count_past_int64_is_a_usage_error(capsys):
    assert cli.main(["depth", "--P", "1" + "0" * 30, "--no-measure", "--T", "50", "--d", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness depth: error: --P: must be at most "
                                                   "9223372036854775807")


def test_an_input_scale_that_overflows_is_named(tmp_path, capsys):
    rc = cli.main(["decay", "--T", "20", "--d", "4", "--rho", "0.9", "--quiet",
                   "--input-scale", "1e300", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--input-scale" in err, err
    assert "Warning" not in err
