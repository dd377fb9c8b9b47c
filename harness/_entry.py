"""The ``harness`` executable: quiet on a signal even while the command line is still loading."""

from __future__ import annotations

import signal


def _early(signum, frame):
    # Ctrl-C or SIGTERM before the command has started: nothing was written; leave quietly
    raise SystemExit(128 + signum)


def main():
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _early)
    from harness.cli import main as cli_main
    return cli_main()
