"""``harness compare``: the kernels against plain NumPy and PyTorch, as ratios."""

from __future__ import annotations

from harness.infra import config as C
from harness.infra.files import UsageError

HELP = "time the kernels against plain NumPy and PyTorch, as ratios"
DESCRIPTION = """\
Time the harness kernels against plain NumPy and PyTorch (when installed), in one
process, interleaved, with the same thread settings, and write the ratio
peer time / harness time for each case, forward and backward, with the targets
of the benchmark issue.

example:
  harness compare --threads 1 --out reports/compare
  harness compare --quick            # tiny sizes, seconds: a smoke test
  harness compare --long             # tiled attention, T = 4096 to 32,768: ~15 minutes
"""

EXAMPLE = "harness compare --threads 1 --out reports/compare"


FILES = ("compare.csv", "compare_summary.csv")


def add_arguments(p):
    p.add_argument("--out", default="reports/compare", help="directory for compare.csv and "
                   "compare_summary.csv (default: %(default)s)")
    p.add_argument("--threads", type=int, default=C.COMPARE.threads,
                   help="BLAS, Numba and torch threads, set together (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"samples per implementation, interleaved rounds (default: {C.COMPARE.repeats})")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes: checks the machinery only")
    size.add_argument("--long", action="store_true",
                      help="attention's tiled kernel at T = 4096 to 32,768 against PyTorch's SDPA "
                      "and NumPy by blocks, forward and forward+backward (about 15 minutes; "
                      f"{C.LONG_COMPARE.repeats} rounds unless --repeats)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args):
    import dataclasses
    import os

    ncpu = os.cpu_count() or 1
    if not 1 <= args.threads <= ncpu:
        raise UsageError(f"--threads: must be between 1 and {ncpu} (this machine's cores), "
                         f"got {args.threads}")
    if args.repeats is not None and args.repeats < 1:
        raise UsageError(f"--repeats: must be at least 1, got {args.repeats}")
    from harness.infra.files import check_out, output_dir
    check_out(args.out, files=FILES)      # before anything loads: refused at once
    base = C.QUICK_COMPARE if args.quick else C.LONG_COMPARE if args.long else C.COMPARE
    config = dataclasses.replace(base, threads=args.threads,
                                 repeats=base.repeats if args.repeats is None else args.repeats)
    with output_dir(args.out, files=FILES) as out:
        return _run(args, config, out)


def _run(args, config, out):
    import sys

    from harness.analysis import compare
    from harness.infra.files import output_set
    from harness.infra.progress import Progress, warm_up_kernels

    progress = Progress("harness compare", args.quiet)
    if compare._torch() is None:
        print("PyTorch is not installed: comparing against NumPy only "
              "(pip install torch==2.13.0 to add it).", file=sys.stderr)
    warm_up_kernels(progress)
    todo = compare.cases(config)
    with progress.steps(len(todo), "cases") as step:
        timings, summary = compare.run_comparison(config, progress=step)
    with output_set(out) as files:
        files.write_csv(FILES[0], timings)
        files.write_csv(FILES[1], summary)
    print(compare.format_summary(summary))
    print(f"\nwrote {out / 'compare.csv'} and {out / 'compare_summary.csv'}")
    return 0
