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

With --forward, trace a plain NumPy forward of your own instead of the
families (written with the tracer's operations: @ + - * /, np.tanh, np.exp,
np.sqrt, np.maximum, scipy.special.expit, .sum/.max over the last axis,
indexing, .reshape, np.stack, np.concatenate, np.swapaxes, np.where, np.tril),
its inputs shaped by --shape, the sequence first; it writes depth.csv with the
same columns, and counts every product under the input it multiplies.

With --torch, trace a PyTorch module of your own: a factory (package.module:factory or
file.py:factory, called with the T and d it takes) returns an nn.Module or a function of
tensors; each --T exports it with torch.export, decomposes it to core ATen and runs the
graph on the tracer (nn.RNN/LSTM/GRU step by step; a scan as --scan says). It writes
depth.csv with the same columns and prints the multiplications by parameter and by ATen op.

example:
  harness depth --T 50 800 1000 2000 --d 512 --out reports/depth
  harness depth --T 50 100 --d 64 --no-measure
  harness depth --T 4096 16384 65536 --d 64 --no-measure
  harness depth --forward mymodels.py:rnn2 --shape X=T,d --shape W1=d,d --shape U1=d,d \
      --shape W2=d,d --shape U2=d,d --T 64 1024 --d 32
  harness depth --torch examples/torch/lstm2.py:factory --shape X=1,T,d --T 64 1024 --d 32
"""

EXAMPLE = "harness depth --T 50 800 1000 2000 --d 512 --out reports/depth"


FILES = ("depth.csv", "schedule.csv")
FORWARD_FILES = ("depth.csv",)          # --forward: the depth table alone
MEASURED = ("timings.csv", "scaling.csv", "machine.csv")
MAX_P = 2**63 - 1                       # the scheduler counts processors in an int64
# the schedule's task graphs are built op by op in Python (the loops' 3-11 ops a step, each
# cut into rows): past this they take many minutes, while depth.csv goes to any T that fits
MAX_SCHEDULE_T = 16384


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
    p.add_argument("--forward", default=None, metavar="MODULE:FUNCTION",
                   help="trace this plain NumPy forward instead of the families "
                        "(package.module:function or path/to/file.py:function)")
    p.add_argument("--torch", default=None, metavar="MODULE:FACTORY",
                   help="trace the PyTorch module this factory returns instead of the families "
                        "(package.module:factory or path/to/file.py:factory; it is called with "
                        "T and d as it takes them)")
    p.add_argument("--scan", choices=("chain", "tree"), default="chain",
                   help="with --torch: a cumsum/cumprod as T - 1 dependent steps (chain, what "
                        "the code does serially; default) or as a Hillis-Steele scan of "
                        "ceil(log2 T) levels (tree)")
    p.add_argument("--shape", action="append", default=None, metavar="NAME=DIMS",
                   help="with --forward or --torch: one input of the forward, by the name it "
                        "takes it under, the sequence first (X=T,d; X=1,T,d for a batch of "
                        "one); each dimension an integer, T (each --T), d (--d) or k*d; "
                        "repeat for each input")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def configs(args):
    """(DepthConfig, ScheduleConfig, WallConfig), checked once, before any work or directory."""
    import os

    from harness.analysis import depth, walltime
    from harness import models
    from harness.infra.validate import available_memory_bytes
    torch_spec = getattr(args, "torch", None)
    if torch_spec is not None and args.forward is not None:
        raise UsageError("--torch: give --forward or --torch, not both")
    if torch_spec is None and getattr(args, "scan", "chain") != "chain":
        raise UsageError("--scan: goes with --torch")
    if args.forward is None and torch_spec is None and args.shape:
        raise UsageError("--shape: goes with --forward or --torch (the families' inputs are "
                         "their own)")
    if torch_spec is not None:
        from harness.torchmodel import load
        load.import_torch()                          # one line on how to install it
        args.shapes = load.parse_shapes(args.shape)
        args.factory = load.load_factory(torch_spec)   # their import error before any work
    if args.forward is not None:
        if not args.shape:
            raise UsageError("--shape: --forward needs one --shape per input of the forward, "
                             "the sequence first (e.g. --shape X=T,d --shape W=d,d)")
        try:
            shapes = [depth.parse_shape(s) for s in args.shape]
        except ValueError as e:
            raise UsageError(str(e)) from None
        names = [n for n, _ in shapes]
        if len(set(names)) < len(names):
            raise UsageError(f"--shape: each input once, got {', '.join(names)}")
        if len(shapes[0][1]) < 2 or shapes[0][1][-2] != "T":
            raise UsageError(f"--shape: the first input is the sequence; its second-to-last "
                             f"dimension must be T, got {args.shape[0]}")
        args.shapes = dict(shapes)
        try:
            args.forward_fn = depth.load_forward(args.forward)   # an import error before any work
        except BaseException as e:
            module = args.forward.rpartition(":")[0]
            theirs = depth.user_error(e, args.forward, f"importing {module}")
            if theirs is not None:
                raise theirs from e
            if isinstance(e, ValueError):
                raise UsageError(str(e)) from None
            raise
        try:
            depth.check_inputs(args.forward_fn, names, args.forward, arg="--shape")
        except ValueError as e:
            raise UsageError(str(e)) from None
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
    if max(args.schedule_T) > MAX_SCHEDULE_T and args.forward is None and torch_spec is None:
        raise UsageError(f"--schedule-T: must be at most {MAX_SCHEDULE_T:,} (the task graphs "
                         f"of the loops are built op by op), got {max(args.schedule_T):,}; "
                         f"depth.csv takes any --T that fits in memory")
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
    if args.forward is not None or torch_spec is not None:
        try:
            depth.check_forward_memory(args.shapes, max(args.T), args.d, available=avail,
                                       arg="--shape")
        except MemoryError as e:
            raise UsageError(str(e)) from None
    user = args.forward is not None or torch_spec is not None
    for name, Ts in (() if user else (("--T", args.T), ("--schedule-T", args.schedule_T))):
        for model in models.NAMES:
            try:
                depth.check_trace_memory(model, max(Ts), args.d, available=avail)
            except MemoryError as e:
                raise UsageError(f"{name}/--d: {e}") from None
    if not args.no_measure and not user:
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

    user = args.forward or getattr(args, "torch", None)
    files = FORWARD_FILES if user else FILES if args.no_measure else FILES + MEASURED
    if args.out is not None:
        check_out(args.out, files=files)  # before anything loads: refused at once
    dcfg, scfg, wcfg = configs(args)     # every check first: a bad argument creates nothing
    run_ = _run_forward if args.forward else _run_torch if user else _run
    if args.out is None:
        return run_(args, dcfg, scfg, wcfg, None)
    with output_dir(args.out, files=files) as out_dir:
        return run_(args, dcfg, scfg, wcfg, out_dir)


def _run_forward(args, dcfg, scfg, wcfg, out_dir):
    """--forward: trace the user's forward at each --T, print its counts and depth table."""
    import time

    from harness.analysis import depth
    from harness.infra.progress import Progress

    t0 = time.perf_counter()
    progress = Progress("harness depth", args.quiet)
    progress.line(f"tracing {args.forward} at {len(dcfg.T_values)} lengths")
    try:
        counts, table = depth.forward_tables(args.forward_fn, args.shapes, dcfg.T_values, dcfg.d,
                                             name=args.forward)
    except BaseException as e:
        theirs = depth.user_error(e, args.forward, f"tracing {args.forward}")
        if theirs is None:
            raise
        raise theirs from e
    _print(f"multiplications of {args.forward} by part (d = {dcfg.d}; a product with an input "
           "is counted under its name; grid: every pair of positions, mix: a sum over "
           "positions; flops = 2 x macs)", counts)
    return _depth_table(table, out_dir, t0)


def _depth_table(table, out_dir, t0):
    """--forward's and --torch's last table, printed, and depth.csv written: exit status 0."""
    import sys
    import time

    from harness.infra.files import output_set
    view = table[["model", "T", "macs", "flops", "ops", "span", "max_path", "scalar_span",
                  "parallelism"]].copy()
    view["parallelism"] = view["parallelism"].map(lambda v: f"{v:.4g}")
    _print("span and max_path in operations (max_path: from input position 1 to output "
           "position T); scalar_span exact with sums as ceil(log2 n) trees; parallelism = "
           "scalar work / scalar span", view)
    if out_dir is not None:
        with output_set(out_dir) as files:
            files.write_csv("depth.csv", table)
    print(f"\nharness depth: {time.perf_counter() - t0:.1f} s", file=sys.stdout)
    return 0


def _run_torch(args, dcfg, scfg, wcfg, out_dir):
    """--torch: export and trace the user's module at each --T, print its counts by parameter
    and by ATen op and its depth table."""
    import time

    from harness.infra.progress import Progress
    from harness.torchmodel import interp

    t0 = time.perf_counter()
    progress = Progress("harness depth", args.quiet)
    spec = args.torch
    progress.line(f"exporting and tracing {spec} at {len(dcfg.T_values)} lengths "
                  f"(scan: {args.scan})")
    try:
        parts, ops, table = interp.tables(args.factory, spec, args.shapes, dcfg.T_values,
                                          dcfg.d, scan=args.scan,
                                          progress=None if args.quiet else progress.line)
    except interp.UnsupportedOp as e:
        raise UsageError(str(e)) from None
    _print(f"multiplications of {spec} by parameter (d = {dcfg.d}; a product with a parameter "
           "is counted under its name; grid: every pair of positions, mix: a sum over "
           "positions, mul: an elementwise product of values; flops = 2 x macs)", parts)
    _print(f"multiplications of {spec} by op (aten.*: core ATen; harness.recurrent: an "
           "nn.RNN/LSTM/GRU lowered step by step)", ops)
    return _depth_table(table, out_dir, t0)


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
    progress.line(f"tracing {len(dcfg.T_values)} lengths per model")
    # each (model, T) traced once, its rows read and the trace dropped, but for the lengths the
    # schedule reuses; count_table's check raises if a trace differs from its closed form
    _, table, traces = depth.tables(dcfg.T_values, d, keep=scfg.T_values,
                                    progress=None if args.quiet else progress.line)
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
