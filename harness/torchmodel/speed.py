"""A user's PyTorch module's wall time over T, beside the harness's own families.

``harness compare --torch pkg.mod:factory --shape X=1,T,d --T 128 256 512 1024 2048 --d 64``:

* the module is built at every T (``harness.torchmodel.load.build``, one seed) and timed in
  two directions: ``forward`` (under ``torch.no_grad``) and ``forward+backward`` (a new graph
  each call, then the gradient of a fixed random projection of the output with respect to
  the sequence input and every parameter, ``torch.autograd.grad``: a training step's two
  passes, with no optimiser);
* beside it, each registered family's own compiled kernels (``Family.kernels``: its forward,
  and its forward then its backward from a fixed random output gradient) at the same T, the
  same d, the sequence input's batch and the module's dtype, on the family's own inputs.
  That is the simplest honest comparison: the same width and length, the same work asked
  (outputs at every position, and the input's and weights' gradients), one thread each;
  the families are not the user's model, and a family's work at width d need not equal the
  module's;
* every (implementation, T, direction) is one callable of ``harness.infra.timing``'s
  interleaved rounds, all in the same rounds, one thread (``machine.threads``:
  threadpoolctl's BLAS limit and Numba's, then ``torch.set_num_threads``: in the other order
  torch's CPU LSTM ran 10-100 times slower here, 0.7 ms a forward at T = 16, d = 8 taking
  28 ms, once Numba's OpenMP pool started after torch's thread count was set);
* the fit: seconds = a + b T^p per (implementation, direction), ``stats.offset_power_law``
  (the fit ``walltime.fit_exponents`` makes of the families' wall times, with its interval of
  p, widened by the lack of fit), and bootstrap intervals of a and b over the same rounds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from harness.infra.files import UsageError
from harness.torchmodel import load

DIRECTIONS = ("forward", "forward+backward")
MODULE = "module"           # impl of the user's module's rows; the families' are "harness"


@dataclasses.dataclass(frozen=True)
class TorchSpeedConfig:
    """``harness compare --torch``'s timing: every default in one place."""
    Ts: tuple = (128, 256, 512, 1024, 2048)   # five lengths: p, a and b identified, with a check
    d: int = 64                               # the factory's d and the families' width
    families: tuple | None = None             # the families beside it (None: every registered)
    dtype: str = "float32"                    # what a module is trained in
    rounds: int = 7                           # interleaved rounds: the median and its interval
    min_sample_s: float = 0.02                # each sample calls until this much ran
    threads: int = 1                          # torch, BLAS and Numba threads
    seed: int = 0                             # the module, its inputs and the families' inputs


DEFAULT = TorchSpeedConfig()

TIMES = ("model", "impl", "batch", "T", "d", "dtype", "direction", "seconds", "seconds_lo",
         "seconds_hi", "rounds", "number", "over_module", "over_module_lo", "over_module_hi",
         "torch_threads", "blas_threads", "numba_threads")
FIT = ("model", "impl", "d", "dtype", "direction", "exponent", "exponent_lo", "exponent_hi",
       "fixed_seconds", "fixed_seconds_lo", "fixed_seconds_hi", "per_T_p_seconds",
       "per_T_p_seconds_lo", "per_T_p_seconds_hi", "fixed_share", "lack_of_fit", "T_min",
       "T_max", "points")


def check_config(config):
    """A UsageError naming the flag of the first field the timing cannot run."""
    from harness import models
    if not config.Ts:
        raise UsageError("--T: give at least one length")
    for T in config.Ts:
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 2:
            raise UsageError(f"--T: each must be an integer >= 2, got {T!r}")
    if len(set(config.Ts)) != len(config.Ts):
        raise UsageError(f"--T: each length once, got {' '.join(map(str, config.Ts))}")
    if isinstance(config.d, bool) or not isinstance(config.d, (int, np.integer)) or config.d < 1:
        raise UsageError(f"--d: must be an integer >= 1, got {config.d!r}")
    if config.rounds < 1:
        raise UsageError(f"--repeats: must be at least 1, got {config.rounds}")
    if config.dtype not in load.DTYPES:
        raise UsageError(f"--dtype: must be one of {', '.join(load.DTYPES)}, got {config.dtype!r}")
    for name in config.families or ():
        if name not in models.NAMES:
            raise UsageError(f"--model: each must be a registered family "
                             f"({', '.join(models.NAMES)}), got {name!r}")
    return config


def module_calls(built, seed=0):
    """{direction: a no-argument call} of the user's built module."""
    torch = load.import_torch(built.arg)
    x0 = built.inputs[built.sequence]
    with torch.no_grad():
        y = load.call(built)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=y.dtype)
    params = [p for p in getattr(built.module, "parameters", lambda: [])() if p.requires_grad]

    def forward():
        with torch.no_grad():
            return load.call(built)

    def forward_backward():
        x = x0.detach().requires_grad_(True)
        out = load.call(built, **{built.sequence: x})
        try:
            return torch.autograd.grad(out, [x] + params, g)
        except BaseException as e:
            theirs = load.backward_error(e, built)
            if theirs is not None:
                raise theirs from e
            raise
    forward_backward()                     # a backward that fails, fails here, not timed
    return {"forward": forward, "forward+backward": forward_backward}


def family_calls(name, T, d, batch, dtype, seed=0):
    """{direction: a no-argument call} of family ``name``'s own kernels at (batch, T, d)."""
    from harness import models
    fam = models.get(name)
    k = fam.kernels
    X, W = k.inputs(T, d, batch, dtype, seed)
    out = k.forward(X, *W)
    g = np.random.default_rng([seed, 1]).normal(size=k.primary(out).shape).astype(dtype)
    return {"forward": lambda: k.forward(X, *W),
            "forward+backward": lambda: k.backward(X, W, k.forward(X, *W), g)}


def _batch(built):
    x = built.inputs[built.sequence]
    return int(np.prod(x.shape[:-2])) if x.dim() > 2 else 1


def measure(factory, spec, shapes, config=DEFAULT, progress=None):
    """Time the module and the families over ``config.Ts``: returns (times, fit), tidy frames
    with the columns ``TIMES`` and ``FIT``; ``times.attrs["samples"]`` holds every round
    (model, impl, T, d, direction, round, seconds)."""
    from harness import models
    from harness.infra import machine, timing
    check_config(config)
    torch = load.import_torch()
    f = load.load_factory(factory if factory is not None else spec)
    families = models.NAMES if config.families is None else config.families
    old = torch.get_num_threads()
    try:
        with machine.threads(config.threads):
            # torch's threads after Numba's: Numba's OpenMP pool, started by machine.threads,
            # slows torch's CPU LSTM 10-100 times when torch's count was set before it
            torch.set_num_threads(config.threads)
            calls, batch = {}, 1
            for T in config.Ts:
                if progress is not None:
                    progress(f"building at T={T}")
                built = load.build(f, spec, shapes, T, config.d, seed=config.seed,
                                   dtype=config.dtype)
                batch = _batch(built)
                for direction, fn in module_calls(built, config.seed).items():
                    calls[spec, MODULE, T, direction] = fn
                for name in families:
                    for direction, fn in family_calls(name, T, config.d, batch, config.dtype,
                                                      config.seed).items():
                        calls[name, "harness", T, direction] = fn
            if progress is not None:
                progress(f"timing {len(calls)} calls in {config.rounds} rounds")
            samples, numbers = timing.time_interleaved(calls, config.rounds, config.min_sample_s,
                                                       seed=config.seed)
            env = machine.describe()                      # the settings the rounds ran under
            env["torch_threads"] = torch.get_num_threads()
    finally:
        torch.set_num_threads(old)
    rows, long = [], []
    for (model, impl, T, direction), s in samples.items():
        sec, lo, hi = timing.median_interval(s, seed=T)
        base = samples[spec, MODULE, T, direction]
        ratio, rlo, rhi = timing.paired_ratio(s, base, seed=T)
        rows.append(dict(model=model, impl=impl, batch=batch, T=T, d=config.d,
                         dtype=config.dtype, direction=direction, seconds=sec, seconds_lo=lo,
                         seconds_hi=hi, rounds=config.rounds,
                         number=numbers[model, impl, T, direction], over_module=ratio,
                         over_module_lo=rlo, over_module_hi=rhi,
                         torch_threads=env["torch_threads"], blas_threads=env["blas_threads"],
                         numba_threads=env["numba_threads"]))
        long.extend(dict(model=model, impl=impl, T=T, d=config.d, direction=direction,
                         round=r, seconds=float(x)) for r, x in enumerate(s))
    times = pd.DataFrame(rows, columns=list(TIMES))
    # the module first, then the families in registration order, each over T, per direction
    rank = {n: i for i, n in enumerate(families)}
    times["_rank"] = [-1 if i == MODULE else rank[m] for m, i in zip(times.model, times.impl)]
    times = times.sort_values(["direction", "_rank", "T"], kind="stable").drop(columns="_rank")
    times = times.reset_index(drop=True)
    times.attrs["samples"] = pd.DataFrame(long)
    return times, fit(times, config)


def fit(times, config=DEFAULT):
    """One row per (model, impl, direction): seconds = a + b T^p over every T timed, p's
    interval as ``walltime.fit_exponents`` gives it, a's and b's 95 % bootstrap intervals over
    the rounds (``stats.bootstrap_interval``; NaN under 3 rounds or 3 lengths). NaN where no
    a >= 0, b > 0 fits: times that do not grow with T (the fixed cost of a tiny case)."""
    from harness.analysis import walltime
    from harness.infra import stats
    samples = times.attrs["samples"]
    rows = []
    for (model, impl, direction), g in times.groupby(["model", "impl", "direction"], sort=False):
        s = samples[(samples.model == model) & (samples.impl == impl)
                    & (samples.direction == direction)]
        one = g.copy()
        one.attrs["samples"] = s
        e = walltime.fit_exponents(one, min_T=int(g["T"].min())).iloc[0]
        grid = s.pivot(index="round", columns="T", values="seconds")          # (rounds, T)
        Ts = grid.columns.to_numpy(dtype=float)
        medians = g.sort_values("T").seconds.to_numpy()
        p, a, b = (float(z) for z in stats.offset_power_law(Ts, medians))
        if Ts.size < 3:
            p, a, b = float(e.exponent), float(e.fixed_seconds), math.nan
        ab = {}
        for i, name in ((1, "fixed_seconds"), (2, "per_T_p_seconds")):
            lo, hi = (stats.bootstrap_interval(
                lambda r, i=i: stats.offset_power_law(Ts, np.median(r, axis=1))[i], grid,
                seed=int(config.d)) if Ts.size >= 3 else (math.nan, math.nan))
            ab[name], ab[f"{name}_lo"], ab[f"{name}_hi"] = (a, b)[i - 1], lo, hi
        rows.append(dict(model=model, impl=impl, d=int(g.d.iloc[0]),
                         dtype=g.dtype.iloc[0], direction=direction, exponent=p,
                         exponent_lo=e.exponent_lo, exponent_hi=e.exponent_hi,
                         fixed_share=e.fixed_share, lack_of_fit=e.lack_of_fit,
                         T_min=e.T_min, T_max=e.T_max, points=e.points, **ab))
    return pd.DataFrame(rows, columns=list(FIT))


def format_fit(fit_frame):
    """The fit as a user reads it: p [lo, hi], a and b with their intervals."""
    def iv(v, lo, hi, fmt):
        if not math.isfinite(v):
            return "n/a"
        band = f" [{lo:{fmt}}, {hi:{fmt}}]" if math.isfinite(lo) else ""
        return f"{v:{fmt}}{band}"
    lines = []
    for r in fit_frame.itertuples():
        p = iv(r.exponent, r.exponent_lo, r.exponent_hi, ".3f")
        a = iv(r.fixed_seconds, r.fixed_seconds_lo, r.fixed_seconds_hi, ".3g")
        b = iv(r.per_T_p_seconds, r.per_T_p_seconds_lo, r.per_T_p_seconds_hi, ".3g")
        lines.append(f"{r.model:>24} {r.impl:>7} {r.direction:>16}  p = {p}  a = {a} s  b = {b} s")
    return "\n".join(lines)
