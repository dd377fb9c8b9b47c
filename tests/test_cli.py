"""The command line answers at once and shows its progress the way its stream wants."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from harness import cli
from harness.infra.progress import Progress
from harness.commands import COMMANDS

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
