"""The ``harness`` command: one subcommand per analyser.

Each subcommand lives in its own module of ``harness.commands``, which provides
``HELP`` (one line), ``DESCRIPTION`` (with an example), ``add_arguments(parser)``
and ``run(args) -> int``, and imports nothing heavy until ``run``: building the
parser loads neither NumPy nor the analysers. Bad arguments print one line and
exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from harness.infra import signals
from harness.infra.files import UsageError

from harness.commands import COMMANDS


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (prog: error: ...) and exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser():
    parser = _Parser(
        prog="harness",
        description=(
            "Recurrence versus attention, measured: sequential depth, work and "
            "gradient paths on real Numba kernels.\n\n"
            "example:\n  harness report --quick --out reports/first"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def print_short_help(parser, stream=None):
    """Usage, then one example per command: what ``harness`` alone prints."""
    stream = sys.stderr if stream is None else stream
    parser.print_usage(stream)
    print("\ncommands, with an example each (harness COMMAND --help for more):", file=stream)
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname)
        print(f"  {name:8s} {mod.HELP}\n           {mod.EXAMPLE}", file=stream)


DEBUG_ON = ("1", "true", "yes", "on")


def debugging(environ=None):
    """``HARNESS_DEBUG`` set to 1, true, yes or on (any case): show tracebacks; anything else
    (unset, 0, false, no, off, ...) keeps each error to one line."""
    environ = os.environ if environ is None else environ
    return environ.get("HARNESS_DEBUG", "").strip().lower() in DEBUG_ON


def interrupted(name):
    """Say that ``name`` was interrupted, in one line; the exit status 128 + the signal's number."""
    sig = signals.received() or signal.SIGINT
    # the signal may come before the output moved into place or just after it did
    # (held back by signals.deferred): either way no part of a run was left
    print(f"{name}: interrupted ({signal.Signals(sig).name}); no partial output was left",
          file=sys.stderr, flush=True)
    return 128 + int(sig)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        print_short_help(parser)
        return 2
    name = f"harness {args.command}"
    debug = debugging()
    with signals.installed():
        try:
            signals.checkpoint()            # a signal that came while the command line loaded
            rc = int(args._run(args) or 0)
            signals.checkpoint()            # a signal whose exception was swallowed: not a success
            return rc
        except BaseException as e:
            # A signal's KeyboardInterrupt can come back as another exception: raised inside
            # C code that calls back into Python, it is an ImportError when NumPy's import
            # was interrupted ('PyCapsule_Import could not import module "datetime"'), a
            # SystemError when Numba was unpickling. With a signal received, whatever the
            # command raised is that signal's interruption.
            if isinstance(e, KeyboardInterrupt) or signals.received() is not None:
                return interrupted(name)
            return _failed(name, e, debug)


def _failed(name, e, debug):
    """The exit status of a command that raised ``e``, said in one line; a bug (any exception
    not named below) is raised again, its traceback Python's."""
    frames = getattr(e, "frames", "")               # the user's own code raised it: theirs
    if isinstance(e, UsageError) and not (frames and debug):
        print(f"{name}: error: {e}", file=sys.stderr)
        if frames:
            print(frames.rstrip("\n"), file=sys.stderr)
        return 2
    if debug:
        raise e
    if isinstance(e, (ValueError, TypeError, MemoryError, ArithmeticError)):
        # the analysers check their own arguments and say which one is wrong; the command
        # line shows that as one line. HARNESS_DEBUG=1 shows the traceback instead.
        print(f"{name}: error: {type(e).__name__}: {e}".splitlines()[0]
              + " (HARNESS_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    if isinstance(e, OSError):
        # a write that failed after the checks (a full disk, a file turned read-only)
        where = f": {e.filename}" if e.filename else ""
        print(f"{name}: error: cannot write{where}: {e.strerror or e}; the previous files, "
              f"if any, are untouched", file=sys.stderr)
        return 1
    raise e


if __name__ == "__main__":
    sys.exit(main())
