"""The ``harness`` executable: every SIGINT or SIGTERM, from its first line to its exit, ends in
the command's one-line "interrupted" message and exit status 128 + the signal's number.

Python's own handling would not: a signal while the command line loads prints a traceback
(SIGINT) or kills the process (SIGTERM); one while the interpreter shuts down, after the
command has answered, kills it (Python puts the default handlers back first); and a
KeyboardInterrupt that passed through ``exec`` of a string (every ``@dataclass``, while a
module such as PyTorch loads) makes ``python -m harness`` end by SIGINT, even though the
command caught it and said so. So our handler stays in place from the first line, and the
process leaves with ``os._exit`` once the command has answered and its output is flushed:
every file of the command is closed and moved into place by then, and nothing is left
for the interpreter's shutdown to do.
"""

from __future__ import annotations

import signal

_early = []


def _record(signum, frame):
    _early.append(signum)          # before harness.infra.signals is loaded: said at the start


# The executable's first lines, run as this module loads (before main() is even looked up):
# from here on a signal is recorded. Only the executable imports this module. Before it,
# while Python starts (site, the package's __init__), a signal is still Python's own.
for _s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_s, _record)

import os  # noqa: E402
import sys  # noqa: E402


def _exit_status(code):
    """What ``sys.exit(code)`` would exit with (argparse's --help and usage errors)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def main():
    from harness.infra import signals
    signals.hold_for_process(_early)
    from harness import cli
    try:
        code = cli.main()
    except SystemExit as e:
        code = _exit_status(e.code)
    except BaseException:
        # a bug: its traceback, as Python would print it; but with a signal received it is
        # the signal's interruption (a KeyboardInterrupt that came back as another
        # exception, or one that landed as the command was answering), said below
        if signals.received() is None:
            sys.excepthook(*sys.exc_info())
        code = 1
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        code = code or 120                  # what Python says when stdout could not be flushed
    sig = signals.received()
    if sig is not None and code != 128 + sig:
        # it came after the command had answered (or before it started): still said, once
        command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in cli.COMMANDS else None
        code = cli.interrupted(f"harness {command}" if command else "harness")
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
