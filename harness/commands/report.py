"""``harness report``: every analyser, one self-contained folder."""

from __future__ import annotations

from harness.infra import config as C

HELP = "write the HTML report: decay, clipping, depth, work, attention maps, benchmarks"
DESCRIPTION = """\
Run every analyser and write a self-contained report folder: index.html (opens
offline), each figure as PNG and SVG, and the CSV behind each figure. Captions
state the measured numbers. --quick runs smaller sweeps (under two minutes).

example:
  harness report --quick --out reports/first
  harness report                       # reports/<date-time>/, the full sweeps
"""

EXAMPLE = "harness report --quick --out reports/first"


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="smaller sweeps, under two minutes on 2 cores")
    p.add_argument("--out", default=None,
                   help="report folder (default: reports/<date-time>/); must not exist or be empty")
    p.add_argument("--asv-results", default=C.REPORT.asv_results,
                   help="asv results folder to plot across commits (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args):
    import dataclasses
    import datetime as dt
    import os
    import shlex
    import sys
    import time

    from harness.infra.files import check_out

    out = (args.out if args.out is not None
           else os.path.join("reports", dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")))
    check_out(out, whole=True)            # a folder that cannot be used: refused before any import
    config = dataclasses.replace(C.QUICK_REPORT if args.quick else C.REPORT,
                                 asv_results=args.asv_results)
    command = ("harness " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:]
               else "harness report")
    t0 = time.perf_counter()

    from harness import report
    from harness.infra.progress import Progress, warm_up_kernels

    progress = Progress("harness report", args.quiet)
    warm_up_kernels(progress)
    with progress.steps(report.STAGES, "report") as step:
        path = report.build_report(out, config, step, command)
    print(f"wrote {path / 'index.html'} in {time.perf_counter() - t0:.1f} s")
    return 0
