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
import threading

from harness._io import UsageError

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


def _terminate(signum, frame):
    raise KeyboardInterrupt    # so that SIGTERM unwinds like Ctrl-C: no half-written output


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        print_short_help(parser)
        return 2
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return int(args._run(args) or 0)
    except UsageError as e:
        print(f"harness {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, MemoryError) as e:
        # the analysers check their own arguments and say which one is wrong; the command
        # line shows that as one line. HARNESS_DEBUG=1 shows the traceback instead.
        if os.environ.get("HARNESS_DEBUG"):
            raise
        print(f"harness {args.command}: error: {type(e).__name__}: {e}".splitlines()[0]
              + " (HARNESS_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"harness {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
