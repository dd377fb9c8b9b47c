"""``harness decay``: gradient decay over distance, every family side by side."""

from __future__ import annotations

from dataclasses import asdict, replace

from harness.infra import config as C
from harness.infra.files import UsageError
from harness.commands import numbers, validated

HELP = "measure gradient decay over distance: RNN Jacobian products against one attention weight"

DESCRIPTION = """\
Measure ||dh_T/dh_{T-k}|| for every distance k in an RNN (spectral norm of the
Jacobian product and probe-loss back-propagation, in log space) on orthogonal and
gaussian W_hh with a set spectral radius, beside ||dy_T/dx_{T-k}|| in
self-attention (value and score routes). Writes decay.csv (one row per model,
configuration and distance), decay_summary.csv (fitted rate per step against
log(rho) and Pascanu's bound), decay_clipping.csv and decay_additive.csv into
--out, and prints the summary.

With --torch pkg.mod:factory (or path/file.py:factory) and one --shape per input,
the sequence first: the module's ||dy_T/dx_(T-k)|| by autograd over --input-scale and
--seeds (exact blocks for small ones, a seeded sketch with its interval for large),
in the same frame (decay.csv), with decay_seeds.csv (the median over the seeds and its
interval at every k) and decay.png / decay.svg, the families' decay figure.

example:
  harness decay --rho 0.5 0.9 1.1 --activation tanh --T 1000 --d 64 --out reports/decay
  harness decay --torch examples/torch/lstm2.py:factory --shape X=1,T,d --T 256 --d 32
"""

FILES = ("decay.csv", "decay_summary.csv", "decay_clipping.csv", "decay_additive.csv")
TORCH_FILES = ("decay.csv", "decay_seeds.csv", "decay.png", "decay.svg")     # --torch

# DecayConfig field -> the flag that sets it
FLAGS = {"rhos": "--rho", "activations": "--activation", "weights": "--weight",
         "input_scales": "--input-scale", "Ts": "--T", "ds": "--d", "seed": "--seed",
         "measure": "--measure", "models": "--model", "threshold": "--clip-threshold"}

EXAMPLE = "harness decay --rho 0.5 0.9 1.1 --activation tanh --T 1000 --d 64 --out reports/decay"


def add_arguments(parser):
    D = C.DECAY
    parser.add_argument("--rho", type=float, nargs="+", default=list(D.rhos), metavar="RHO",
                        help=f"spectral radii of W_hh (default: {numbers(D.rhos)})")
    parser.add_argument("--activation", nargs="+", default=list(D.activations), metavar="ACT",
                        help=f"{' and/or '.join(C.ACTIVATIONS)} (default: {' '.join(D.activations)})")
    parser.add_argument("--weight", nargs="+", default=list(D.weights), metavar="KIND",
                        help=f"{' and/or '.join(C.WEIGHTS)} W_hh (default: {' '.join(D.weights)})")
    parser.add_argument("--input-scale", type=float, nargs="+", default=list(D.input_scales),
                        metavar="S", help="std of the inputs x_t; large saturates tanh "
                        f"(default: {numbers(D.input_scales)})")
    parser.add_argument("--T", "-T", type=int, nargs="+", default=list(D.Ts), metavar="T",
                        help=f"sequence lengths, >= 2 (default: {numbers(D.Ts)})")
    parser.add_argument("--d", "-d", type=int, nargs="+", default=list(D.ds), metavar="D",
                        help=f"widths d_h = d_in = d_model (default: {numbers(D.ds)})")
    parser.add_argument("--measure", default=D.measure, metavar="M",
                        help=f"{', '.join(C.MEASURES)}: probe is O(T d^2), exact O(T d^3) "
                        f"(default: {D.measure})")
    parser.add_argument("--model", nargs="+", default=list(D.models), metavar="NAME",
                        help=f"model families in the sweep (default: {' '.join(D.models)})")
    parser.add_argument("--seed", type=int, default=D.seed, help=f"random seed (default: {D.seed})")
    parser.add_argument("--clip-threshold", type=float, default=C.CLIPPING.threshold,
                        help=f"gradient-clipping threshold (default: {C.CLIPPING.threshold:g})")
    parser.add_argument("--no-attention", action="store_true",
                        help=f"leave the {C.ATTENTION_NAME} rows out (the same as --model without it)")
    parser.add_argument("--out", default="reports/decay", metavar="DIR",
                        help="output directory (default: reports/decay)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    torch = parser.add_argument_group("a PyTorch module (--torch)")
    torch.add_argument("--torch", default=None, metavar="SPEC",
                       help="pkg.mod:factory or path/file.py:factory: measure this module's "
                       "||dy_T/dx_(T-k)|| instead of the families'")
    torch.add_argument("--shape", action="append", default=None, metavar="NAME=DIMS",
                       help="one per input of the module, the sequence first, its dimension -2 "
                       "T (e.g. --shape X=1,T,d)")
    torch.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                       help="the module and its inputs drawn from each (default: 0 1 2 3 4)")
    torch.add_argument("--dtype", default=None, metavar="DTYPE",
                       help="float64 (default: norms to 1e-308) or float32")
    torch.add_argument("--probes", type=int, default=None, metavar="R",
                       help="vector-Jacobian products of the sketch for large blocks (default: 32)")


def configs(args):
    """(DecayConfig, ClippingConfig) from the arguments, each checked once, errors naming flags."""
    from harness.analysis import clipping, gradpath
    models = tuple(m for m in args.model if not (args.no_attention and m == C.ATTENTION_NAME))
    decay = replace(C.DECAY, rhos=tuple(args.rho), activations=tuple(args.activation),
                    weights=tuple(args.weight), input_scales=tuple(args.input_scale),
                    Ts=tuple(args.T), ds=tuple(args.d), seed=args.seed, measure=args.measure,
                    models=models)
    validated(gradpath.validate_config, decay, FLAGS, memory_flag="--T/--d")
    # the clipping experiment at the sweep's radii, no longer than the sweep, no wider than 16
    clip = replace(C.CLIPPING, rhos=decay.rhos, threshold=args.clip_threshold, seed=decay.seed,
                   T=max(min(C.CLIPPING.T, max(decay.Ts)), 3), d=min(C.CLIPPING.d, max(decay.ds)))
    validated(lambda c: clipping.check_arguments(**asdict(c)), clip, FLAGS)
    return decay, clip


def run(args):
    if args.torch is not None:
        return run_torch(args)
    if args.shape or args.seeds or args.dtype or args.probes:
        flag = next(f for f, v in (("--shape", args.shape), ("--seeds", args.seeds),
                                   ("--dtype", args.dtype), ("--probes", args.probes)) if v)
        raise UsageError(f"{flag}: goes with --torch (the families' sweep has its own inputs)")
    import time

    from harness.infra.files import check_out, output_dir, output_set

    check_out(args.out, files=FILES)      # before anything loads: refused at once
    import pandas as pd

    from harness.analysis import clipping, gradpath, lessons
    from harness.infra.progress import Progress, warm_up_kernels

    decay, clip = configs(args)           # every check first: a bad argument creates nothing
    progress = Progress("harness decay", args.quiet)
    with output_dir(args.out, files=FILES) as out:
        t0 = time.perf_counter()
        warm_up_kernels(progress)
        jobs = gradpath.sweep_configurations(decay)
        seconds = gradpath.expected_seconds(decay)
        if seconds > 60:
            progress.line(f"this sweep does about {seconds * gradpath.FLOPS_PER_SECOND / 1e9:,.0f} "
                          f"GFLOP: expect {seconds / 60:.0f} minutes or more (LAPACK calls are not "
                          f"interrupted at once by Ctrl-C)")
        with progress.steps(len(jobs), "gradient paths") as step:
            frame, summary = gradpath.run_sweep(
                decay, progress=lambda i, n, job: step(" ".join(f"{k}={v}" for k, v in job.items())))
        clip_frame = clipping.clipping_experiment(**asdict(clip))
        additive = lessons.lesson_additive_routes()
        with output_set(out) as files:             # the four files move in together
            for name, f in zip(FILES, (frame, summary, clip_frame, additive)):
                files.write_csv(name, f)
        cols = ["model", "weight", "activation", "rho", "input_scale", "T", "d", "ln_rate",
                "ln_rate_theory", "ln_rate_bound", "bound_respected", "log10_far"]
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"\nwrote {len(frame)} rows to {out / 'decay.csv'} and {len(summary)} to "
              f"{out / 'decay_summary.csv'} in {time.perf_counter() - t0:.1f} s")
    return 0


def torch_config(args):
    """The ``TorchDecayConfig`` of the arguments, checked (a UsageError naming the flag)."""
    from harness.torchmodel import decay
    D = decay.DEFAULT
    config = replace(D, Ts=tuple(args.T), ds=tuple(args.d),
                     input_scales=tuple(args.input_scale),
                     seeds=D.seeds if args.seeds is None else tuple(args.seeds),
                     dtype=args.dtype or D.dtype,
                     probes=D.probes if args.probes is None else args.probes)
    return decay.check_config(config)


# the families' own flags, which --torch does not read: (flag, attribute, its default)
FAMILY_ONLY = (("--rho", "rho", list(C.DECAY.rhos)), ("--activation", "activation",
               list(C.DECAY.activations)), ("--weight", "weight", list(C.DECAY.weights)),
               ("--measure", "measure", C.DECAY.measure), ("--model", "model",
               list(C.DECAY.models)), ("--seed", "seed", C.DECAY.seed),
               ("--clip-threshold", "clip_threshold", C.CLIPPING.threshold),
               ("--no-attention", "no_attention", False))


def run_torch(args):
    """``harness decay --torch``: the user's module's gradient path over input scales and seeds."""
    import sys
    import time

    from harness.infra.files import check_out, output_dir, output_set

    for flag, attr, default in FAMILY_ONLY:
        if getattr(args, attr) != default:
            hint = " (--seeds draws the module)" if flag == "--seed" else ""
            raise UsageError(f"{flag}: the families' sweep only, not with --torch{hint}")
    check_out(args.out, files=TORCH_FILES)
    config = torch_config(args)
    from harness.torchmodel import load
    load.import_torch()
    shapes = load.parse_shapes(args.shape)
    factory = load.load_factory(args.torch)
    import pandas as pd

    from harness.infra.progress import Progress
    from harness.report import figures
    from harness.torchmodel import decay

    progress = Progress("harness decay --torch", args.quiet)
    n = len(config.Ts) * len(config.ds) * len(config.input_scales) * len(config.seeds)
    with output_dir(args.out, files=TORCH_FILES) as out:
        t0 = time.perf_counter()
        with progress.steps(n, "draws") as step:
            frame = decay.decay_frame(
                factory, args.torch, shapes, config,
                progress=lambda i, n, job: step(" ".join(f"{k}={v}" for k, v in job.items())),
                warn=lambda line: print(f"harness decay --torch: {line}", file=sys.stderr))
        seeds = decay.over_seeds(frame)
        # the families' figure, which draws unit-scale inputs: none without them
        unit = frame.input_scale == figures.numbers.UNIT_SCALE
        with output_set(out) as files:
            files.write_csv(TORCH_FILES[0], frame)
            files.write_csv(TORCH_FILES[1], seeds)
            if unit.any():
                for suffix, data in figures.encode(figures.figure_decay({"decay": frame})).items():
                    files.write_bytes(f"decay.{suffix}", data)
            else:
                progress.line(f"no figure: it draws --input-scale {figures.numbers.UNIT_SCALE:g}, "
                              f"which this run leaves out")
        cols = ["input_scale", "T", "d", "distance", "norm_measure", "seeds", "log10_median",
                "log10_median_lo", "log10_median_hi", "log10_min", "log10_max"]
        if (seeds.norm_measure == "sketch").any():
            cols.append("log10_hi_max")           # the sketch's upper bound: no seed above it
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(decay.table(seeds)[cols].to_string(index=False,
                                                     float_format=lambda v: f"{v:.4g}"))
        print(f"\nwrote {len(frame)} rows to {out / 'decay.csv'} and {len(seeds)} to "
              f"{out / 'decay_seeds.csv'} in {time.perf_counter() - t0:.1f} s")
    return 0
