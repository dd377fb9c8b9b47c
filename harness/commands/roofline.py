"""``harness roofline``: the machine's ceilings, and every family's kernels placed on them."""

from __future__ import annotations

from harness.infra.files import UsageError

HELP = "measure the machine's ceilings (FLOP/s, bandwidth per cache level) and place every kernel"

DESCRIPTION = """\
Measure this machine's ceilings on one thread, as the Empirical Roofline Toolkit
does: peak FLOP/s per dtype through the kernels' own BLAS (a square GEMM by NumPy
and by the compiled kernels' dot) and in a compiled FMA loop, and the bandwidth of L1, L2, L3
and memory (a read-only sum and a STREAM triad at working sets sized from the
caches the OS reports). Then time every registered family's kernels, forward and
backward, at their benchmark sizes and place each on the roofline: flops (2 x the
traced multiplications), bytes (one model per kernel), intensity, bound, achieved
rate and the fraction of the bound it reaches. Last, predict from the roofline
where attention's T x T products overtake the RNN's T dependent steps, beside the
crossover measured. Every figure is the median of interleaved rounds with its 95 %
interval. Writes ceilings.csv, roofline.csv, roofline_crossover.csv and the
roofline figure (roofline.png, roofline.svg) into --out, all together.

example:
  harness roofline --out reports/roofline
  harness roofline --quick --family rnn attention --out reports/roofline-quick   # about 30 s
"""

EXAMPLE = "harness roofline --out reports/roofline"

FILES = ("ceilings.csv", "roofline.csv", "roofline_crossover.csv", "roofline.png", "roofline.svg")
DTYPES = ("float32", "float64")


def add_arguments(p):
    p.add_argument("--out", default="reports/roofline", metavar="DIR",
                   help="output directory (default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="3 rounds, float64, each kernel at its smallest benchmark size, the "
                   "crossover at d = 64 only: about 30 s")
    p.add_argument("--family", nargs="+", default=None, metavar="NAME",
                   help="the families whose kernels are placed (default: every registered one)")
    p.add_argument("--dtype", nargs="+", default=None, metavar="DTYPE",
                   help="float32 and/or float64 (default: both; --quick: float64)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds per figure, at least 3 (default: 7; --quick: 3)")
    p.add_argument("--d", "-d", type=int, nargs="+", default=None, metavar="D",
                   help="widths of the crossover's prediction and measurement "
                   "(default: 64 256; --quick: 64)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def check(args):
    """Refuse a bad argument at once, naming its flag, before anything heavy loads."""
    from harness import models                        # the registry: nothing heavy
    for flag, values, ok, expected in (
            ("--dtype", args.dtype, lambda x: x in DTYPES, "float32 and/or float64"),
            ("--family", args.family, lambda x: x in models.NAMES,
             f"among {' '.join(models.NAMES)}"),
            ("--d", args.d, lambda x: x >= 1, "widths of at least 1")):
        bad = [x for x in values or () if not ok(x)]
        if bad:
            raise UsageError(f"{flag}: must be {expected}, got {bad[0]!r}")
    if args.rounds is not None and args.rounds < 3:
        raise UsageError(f"--rounds: must be at least 3 (a 95 % interval needs them), "
                         f"got {args.rounds}")


def config(args):
    """The RooflineConfig of the (checked) arguments: --quick's or the default, replaced."""
    from dataclasses import replace

    from harness.analysis import roofline
    check(args)
    c = roofline.QUICK if args.quick else roofline.DEFAULT
    given = {"dtypes": args.dtype, "families": args.family, "crossover_ds": args.d}
    c = replace(c, **{k: tuple(dict.fromkeys(v)) for k, v in given.items() if v is not None})
    if args.rounds is not None:
        c = replace(c, rounds=args.rounds)
    return roofline.check_config(c)


def run(args):
    import time

    from harness.infra.files import check_out, output_dir

    check(args)
    check_out(args.out, files=FILES)      # before anything loads: refused at once
    import pandas as pd

    from harness.analysis import roofline
    from harness.infra.files import output_set
    from harness.infra.progress import Progress
    from harness.report import figures

    cfg = config(args)
    progress = Progress("harness roofline", args.quiet)
    with output_dir(args.out, files=FILES) as out:
        t0 = time.perf_counter()
        ceilings, kernels, cross = roofline.run(cfg, progress=progress.line)
        frames = {"ceilings": ceilings, "roofline": kernels, "roofline_crossover": cross}
        with output_set(out) as files:                 # every file moves in together
            for name, f in frames.items():
                files.write_csv(f"{name}.csv", f)
            for suffix, data in figures.encode(figures.figure_roofline(frames)).items():
                files.write_bytes(f"roofline.{suffix}", data)
        cols = ["family", "kernel", "direction", "batch", "T", "d", "dtype", "intensity",
                "bound_kind", "achieved", "fraction"]
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(ceilings[["ceiling", "dtype", "level", "value", "lo", "hi", "unit"]]
                  .to_string(index=False, float_format=lambda v: f"{v:.4g}"))
            print()
            print(kernels[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
            print()
            print(cross.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"\nwrote {', '.join(FILES)} to {out} in {time.perf_counter() - t0:.1f} s")
    return 0
