"""``harness depth``: work, span, path length, the P-processor schedule and wall time."""

from __future__ import annotations

from dataclasses import replace

from harness.infra import config as C
from harness.infra.files import UsageError
from harness.commands import numbers

HELP = "work, span, path length and the P-processor schedule of RNN vs attention"

DESCRIPTION = """\
Trace each model family's plain NumPy forward into a dependency graph and read
off, per model and T: the multiplications (macs: one per multiply-add, as in the
lessons; flops = 2 x macs, PyTorch's convention), the span (longest chain of
operations), the path length from position 1 to position T, and the
parallelism. Then schedule the graphs greedily on P = 1 .. 10^7 processors
(Brent/Graham bounds checked on every row) and time the compiled kernels on
this machine (wall time over T, crossover, strong scaling, fitted exponents).

example:
  harness depth --T 50 800 1000 2000 --d 512 --out reports/depth
  harness depth --T 50 100 --d 64 --no-measure
"""

EXAMPLE = "harness depth --T 50 800 1000 2000 --d 512 --out reports/depth"


FILES = ("depth.csv", "schedule.csv")
MEASURED = ("timings.csv", "scaling.csv", "machine.csv")
MAX_P = 2**63 - 1                       # the scheduler counts processors in an int64


def add_arguments(p):
    D, S, W = C.DEPTH, C.SCHEDULE, C.WALL
    p.add_argument("--T", type=int, nargs="+", default=list(D.T_values), metavar="T",
                   help=f"sequence lengths to trace (default {numbers(D.T_values)})")
    p.add_argument("--d", type=int, default=D.d,
                   help=f"model width, all widths equal as in the lessons (default {D.d})")
    p.add_argument("--P", type=int, nargs="+", default=None, metavar="P",
                   help="processor counts to schedule on (default 1, 10, ..., 10^7, d, d^2, 800)")
    p.add_argument("--schedule-T", type=int, nargs="+", default=list(S.T_values),
                   metavar="T", help=f"T values to schedule (default {numbers(S.T_values)}, the lesson's text)")
    p.add_argument("--measure-T", type=int, nargs="+", default=list(W.T_values),
                   metavar="T", help="T values to time the compiled kernels at")
    p.add_argument("--scaling-T", type=int, default=W.scaling_T, metavar="T",
                   help=f"T of the strong-scaling runs (default {W.scaling_T})")
    p.add_argument("--repeats", type=int, default=W.rounds,
                   help=f"interleaved timing rounds per T, the median kept (default {W.rounds})")
    p.add_argument("--threads", type=int, default=W.threads,
                   help=f"BLAS and Numba threads for the wall times (default {W.threads})")
    p.add_argument("--no-measure", action="store_true",
                   help="skip the wall-time measurements (counts, depth and schedule only)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write depth.csv (and schedule.csv, timings.csv, scaling.csv) here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def configs(args):
    """(DepthConfig, ScheduleConfig, WallConfig), checked once, before any work or directory."""
    import os

    from harness.analysis import depth, walltime
    from harness import models
    from harness.infra.validate import available_memory_bytes
    for name, vals in (("--T", args.T), ("--schedule-T", args.schedule_T),
                       ("--measure-T", args.measure_T), ("--P", args.P or [1]),
                       ("--scaling-T", [args.scaling_T]), ("--d", [args.d])):
        for v in vals:
            if v < 1:
                raise UsageError(f"{name}: must be a positive integer, got {v}")
    for P in args.P or ():
        if P > MAX_P:
            # past the work of the graph more processors change nothing
            raise UsageError(f"--P: must be at most {MAX_P} (2^63 - 1: the schedule counts in "
                             f"64-bit integers), got {P}")
    if args.repeats < 1:
        raise UsageError(f"--repeats: must be at least 1, got {args.repeats}")
    ncpu = os.cpu_count() or 1
    if not 1 <= args.threads <= ncpu:
        raise UsageError(f"--threads: must be between 1 and {ncpu} (this machine's cores), "
                         f"got {args.threads}")
    if not args.no_measure and len(set(args.measure_T)) < 2:
        raise UsageError(f"--measure-T: needs at least 2 distinct values to fit exponents and a "
                         f"crossover, got {numbers(args.measure_T)} (or use --no-measure)")
    avail = available_memory_bytes()
    for name, Ts in (("--T", args.T), ("--schedule-T", args.schedule_T)):
        for model in models.NAMES:
            try:
                depth.check_trace_memory(model, max(Ts), args.d, available=avail)
            except MemoryError as e:
                raise UsageError(f"{name}/--d: {e}") from None
    if not args.no_measure:
        T = max(max(args.measure_T), args.scaling_T)
        need = walltime.timed_bytes(T, args.d)
        if need > avail:
            raise UsageError(f"--measure-T/--scaling-T/--d: timing attention at T={T}, d={args.d} "
                             f"needs about {need / 2**30:.2f} GiB but only {avail / 2**30:.2f} GiB "
                             f"are available; use a smaller T or d (or --no-measure)")
    dcfg = replace(C.DEPTH, d=args.d, T_values=tuple(sorted(set(args.T))))
    scfg = replace(C.SCHEDULE, T_values=tuple(sorted(set(args.schedule_T))),
                   processors=tuple(args.P) if args.P else ())
    wcfg = replace(C.WALL, d=args.d, T_values=tuple(sorted(set(args.measure_T))),
                   scaling_T=args.scaling_T, rounds=args.repeats, threads=args.threads)
    return dcfg, scfg, wcfg


def _print(title, frame):
    print(f"\n{title}")
    print(frame.to_string(index=False))


def run(args):
    from harness.infra.files import check_out, output_dir

    files = FILES if args.no_measure else FILES + MEASURED
    if args.out is not None:
        check_out(args.out, files=files)  # before anything loads: refused at once
    dcfg, scfg, wcfg = configs(args)     # every check first: a bad argument creates nothing
    if args.out is None:
        return _run(args, dcfg, scfg, wcfg, None)
    with output_dir(args.out, files=files) as out_dir:
        return _run(args, dcfg, scfg, wcfg, out_dir)


def _run(args, dcfg, scfg, wcfg, out_dir):
    import sys
    import time

    import pandas as pd

    from harness.analysis import depth, schedule, walltime
    from harness.infra import machine
    from harness import models
    from harness.infra.files import output_set
    from harness.infra.progress import Progress, warm_up_kernels

    t0 = time.perf_counter()
    progress = Progress("harness depth", args.quiet)
    warm_up_kernels(progress)                # the scheduler's kernels too, before any signal can land
    d = dcfg.d
    traces = {}                                              # one trace per (model, T), shared
    progress.line(f"tracing {len(dcfg.T_values)} lengths per model")
    depth.count_table(dcfg.T_values, d, traces=traces)       # raises if trace != closed form
    table = depth.depth_table(dcfg.T_values, d, traces=traces)
    for key in [k for k in traces if k[1] not in set(scfg.T_values)]:
        del traces[key]                                      # keep only what the schedule reuses
    outputs = {"depth.csv": table}      # written together at the end: a run that fails
                                        # part-way leaves no partial set behind
    view = table[["model", "T", "macs", "flops", "span", "max_path", "scalar_span",
                  "parallelism"]].copy()
    view["parallelism"] = view["parallelism"].map(lambda v: f"{v:.4g}")
    parts = "; ".join(f"{f.name}: {' + '.join(f.tracing.lesson_parts)}" for f in models.families())
    _print(f"Table 1, measured on the traced forwards (d = {d}; macs: one per multiply-add of the "
           f"parts the lessons count ({parts}); flops = 2 x macs, PyTorch's convention;\n"
           f"span and max_path in operations; scalar_span exact with sums as ceil(log2 n) trees; "
           f"parallelism = scalar work / scalar span)", view)
    ratio = table.pivot(index="T", columns="model", values="macs")
    a, r = C.ATTENTION_NAME, C.RECURRENCE_NAME
    ratio[f"{a}/{r}"] = (ratio[a] / ratio[r]).round(3)
    ratio["T/d"] = (ratio.index / d).round(3)
    _print(f"counts cross at T = d = {d} (traced per-part counts equal the closed forms)",
           ratio.reset_index())

    processors = scfg.processors or schedule.default_processors(d)
    progress.line(f"scheduling T = {numbers(scfg.T_values)} on {len(processors)} processor counts")
    sched = schedule.schedule_table(scfg.T_values, d, processors, scfg.grains, traces=traces)
    traces.clear()
    outputs["schedule.csv"] = sched
    wide = sched.pivot_table(index="P", columns=["grain", "model", "T"], values="time")
    ok = int(sched["bounds_ok"].sum())
    _print(f"greedy list schedule, steps T_P (Brent/Graham max(W/P,S) <= T_P <= W/P+S held on "
           f"{ok} of {len(sched)} rows). grain=scalar: each multiply/add a unit task, sums as trees;\n"
           "grain=element: one processor per output element, a k-term dot product takes k steps",
           wide.reset_index())
    _print(f"where T_P stops falling (within {scfg.plateau_tol:.0%} of its floor)",
           schedule.plateau_P(sched, scfg.plateau_tol))
    lesson_T = C.SCHEDULE.T_values[0]
    if lesson_T in set(scfg.T_values) and lesson_T in processors:
        _print(f"the lesson's case: {lesson_T} tokens on {lesson_T} processors (time_over_span: "
               "the most that any number of further processors could still buy)",
               sched[(sched["T"] == lesson_T) & (sched["P"] == lesson_T)][
                   ["model", "grain", "P", "time", "span", "work", "speedup", "time_over_span"]])

    if not args.no_measure:
        progress.line(f"timing {len(wcfg.T_values)} lengths, {wcfg.rounds} interleaved rounds each")
        times = walltime.measure_wall_times(wcfg)
        cross = walltime.measured_crossover(times, wcfg)
        expo = walltime.fit_exponents(times, wcfg.fit_min_T)
        progress.line(f"strong scaling at T = {wcfg.scaling_T}")
        scaling = walltime.strong_scaling(wcfg)
        outputs.update({"timings.csv": times, "scaling.csv": scaling,
                        "machine.csv": pd.DataFrame([machine.describe()])})
        _print(f"wall time of the compiled forwards (median of {wcfg.rounds} interleaved rounds, "
               f"{wcfg.threads} thread(s); attention: Q = K = V = X, grid + mix only; "
               "attention+proj: with its three projections)", times)
        _print("crossover: counted T = d for the grid; measured where attention gets slower. "
               "GEMM does far more multiplications per second than the RNN's T dependent "
               "matrix-vector steps, so the measured crossover moves from d to about "
               "d x gemm_over_matvec (predicted_T); with projections attention does more "
               "multiplications than the RNN at every T, so no crossover is counted", cross)
        _print("fitted exponents of time against T", expo)
        _print("strong scaling (BLAS and Numba threads set together)", scaling)
    if out_dir is not None:
        with output_set(out_dir) as files:       # one run's files, moved in together
            for name, frame in outputs.items():
                files.write_csv(name, frame)
    print(f"\nharness depth: {time.perf_counter() - t0:.1f} s", file=sys.stdout)
    return 0
