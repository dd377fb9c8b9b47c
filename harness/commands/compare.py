"""``harness compare``: the kernels against plain NumPy, PyTorch and JAX, as ratios."""

from __future__ import annotations

from harness.infra import config as C
from harness.infra.files import UsageError

HELP = "time the kernels against plain NumPy, PyTorch and JAX, as ratios"
DESCRIPTION = """\
Time the harness kernels against plain NumPy, PyTorch and JAX (jax.jit on the CPU;
each when installed), in one process, interleaved, with the same thread settings
(XLA's included), and write the ratio
peer time / harness time for each case, forward and backward, with the targets
of the benchmark issue.

example:
  harness compare --threads 1 --out reports/compare
  harness compare --quick            # tiny sizes, seconds: a smoke test
  harness compare --long             # tiled attention, T = 4096 to 32,768: ~15 minutes

With --torch pkg.mod:factory (or path/file.py:factory) and one --shape per input, the
sequence first: the module's forward and forward+backward over --T at width --d, beside
every family's own kernels at the same T and d (--model to choose), in the same
interleaved rounds on one thread; writes speed.csv (median and interval per T) and
speed_fit.csv (seconds = a + b T^p, with intervals):
  harness compare --torch examples/torch/lstm2.py:factory --shape X=1,T,d \\
      --T 128 256 512 1024 2048 --d 64
"""

EXAMPLE = "harness compare --threads 1 --out reports/compare"


FILES = ("compare.csv", "compare_summary.csv")
TORCH_FILES = ("speed.csv", "speed_fit.csv")          # --torch


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
    t = p.add_argument_group("a PyTorch module (--torch)")
    t.add_argument("--torch", default=None, metavar="SPEC",
                   help="pkg.mod:factory or path/file.py:factory: time this module over T "
                   "beside the families")
    t.add_argument("--shape", action="append", default=None, metavar="NAME=DIMS",
                   help="one per input of the module, the sequence first (e.g. X=1,T,d)")
    t.add_argument("--T", "-T", type=int, nargs="+", default=None, metavar="T",
                   help="lengths (default: 128 256 512 1024 2048)")
    t.add_argument("--d", "-d", type=int, default=None, metavar="D",
                   help="the factory's d and the families' width (default: 64)")
    t.add_argument("--model", nargs="*", default=None, metavar="NAME",
                   help="the families timed beside it (default: every one; none with no name)")
    t.add_argument("--dtype", default=None, metavar="DTYPE", help="float32 (default) or float64")
    t.add_argument("--seed", type=int, default=None, help="module and inputs (default: 0)")


TORCH_ONLY = ("shape", "T", "d", "model", "dtype", "seed")


def run(args):
    import dataclasses
    import os

    ncpu = os.cpu_count() or 1
    if not 1 <= args.threads <= ncpu:
        raise UsageError(f"--threads: must be between 1 and {ncpu} (this machine's cores), "
                         f"got {args.threads}")
    if args.repeats is not None and args.repeats < 1:
        raise UsageError(f"--repeats: must be at least 1, got {args.repeats}")
    if args.torch is not None:
        return run_torch(args)
    stray = next((a for a in TORCH_ONLY if getattr(args, a) is not None), None)
    if stray:
        raise UsageError(f"--{stray}: goes with --torch (the families' cases are their own)")
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
    if compare._jax(config.threads) is None:      # the first call: XLA on --threads threads
        print("JAX is not installed: comparing without it (pip install -e '.[jax]' to add it).",
              file=sys.stderr)
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


def run_torch(args):
    """``harness compare --torch``: the user's module's wall time over T beside the families."""
    import dataclasses

    from harness.infra.files import check_out, output_dir, output_set

    if args.quick or args.long:
        raise UsageError(f"--{'quick' if args.quick else 'long'}: not with --torch (give --T)")
    check_out(args.out, files=TORCH_FILES)
    from harness.torchmodel import load, speed
    D = speed.DEFAULT
    config = dataclasses.replace(
        D, Ts=D.Ts if args.T is None else tuple(args.T), d=D.d if args.d is None else args.d,
        families=None if args.model is None else tuple(args.model),
        dtype=args.dtype or D.dtype, threads=args.threads,
        rounds=D.rounds if args.repeats is None else args.repeats,
        seed=D.seed if args.seed is None else args.seed)
    speed.check_config(config)
    load.import_torch()
    shapes = load.parse_shapes(args.shape)
    factory = load.load_factory(args.torch)
    import pandas as pd

    from harness.infra.progress import Progress, warm_up_kernels

    progress = Progress("harness compare --torch", args.quiet)
    with output_dir(args.out, files=TORCH_FILES) as out:
        if config.families is None or config.families:
            warm_up_kernels(progress)
        times, fit = speed.measure(factory, args.torch, shapes, config, progress=progress.line)
        with output_set(out) as files:
            files.write_csv(TORCH_FILES[0], times)
            files.write_csv(TORCH_FILES[1], fit)
        cols = ["model", "impl", "T", "direction", "seconds", "seconds_lo", "seconds_hi",
                "over_module", "over_module_lo", "over_module_hi"]
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(times[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print()
        print(speed.format_fit(fit))
        print(f"\nwrote {out / TORCH_FILES[0]} and {out / TORCH_FILES[1]}")
    return 0
