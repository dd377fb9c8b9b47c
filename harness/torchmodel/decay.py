"""A user's PyTorch module's gradient path: ||dy_T/dx_(T-k)|| over k, by autograd.

``harness decay --torch pkg.mod:factory --shape X=1,T,d --T 64 --d 32``: for each (T, d, input
scale, seed) the module is built (``harness.torchmodel.load.build``: the factory under
``torch.manual_seed(seed)``, the inputs standard normal draws from the seed, the sequence input
times the input scale) and run once; y_T is its output at the last position (the output's
dimension -2 is T), x the sequence input (its dimension -2 is T). The block

    J_k = dy_T / dx_(T-k)          (m, n): m = y_T's size (batch x d_out), n = x_(T-k)'s

is measured for k = 1..T-1 two ways, chosen by its size:

* ``exact`` (m n <= ``TorchDecayConfig.exact_max``): one vector-Jacobian product per
  component of y_T (``torch.autograd.grad``, batched) gives every row of every J_k at once;
  the spectral norm of each block (an SVD), as the families' ``log10_spectral``;
* ``sketch`` (larger): ``probes`` = r vector-Jacobian products with the orthonormal columns
  of a seeded Gaussian m x r matrix Q = orth(Omega), so that Z_k = Q^T J_k (r, n) for every k.
  Then sigma_max(Z_k) <= ||J_k|| always (``log10_norm``, a lower bound, exact when the top
  left singular vector of J_k lies in span Q), and with the Gaussian columns omega_i = Q R_i,
  ||J_k|| <= alpha sqrt(2/pi) max_i ||J_k^T omega_i|| except with probability alpha^-r
  (Halko, Martinsson and Tropp 2011, Lemma 4.1, after Dixon 1983): ``log10_norm_hi``, with
  alpha = (T / FAILURE)^(1/r), so that the T - 1 intervals [lo, hi] of one draw all hold
  ||J_k|| except with probability FAILURE (1e-6): alpha = 1.83 at T = 256, r = 32.

Only reverse mode is used: PyTorch's CPU LSTM (mkldnn) and scaled-dot-product attention have
no forward-mode (jvp) or double-backward derivative, so a power iteration on J_k^T J_k,
which needs J_k v, cannot run on them.

``decay_frame`` is the families' gradient-path frame (``harness.models.PATH_COLUMNS``), one
row per (input scale, seed, distance), with ``log10_norm_lo`` / ``log10_norm_hi`` beside;
``over_seeds`` reduces it across seeds: the median and its 95 % bootstrap interval at every
(input scale, distance), never one draw.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pandas as pd

from harness.infra.config import DECAY
from harness.infra.files import UsageError
from harness.torchmodel import load

LN10 = math.log(10.0)
FAILURE = 1e-6               # the chance that a sketch's upper bound fails at some k of one draw


@dataclasses.dataclass(frozen=True)
class TorchDecayConfig:
    """``harness decay --torch``'s sweep: every default in one place."""
    Ts: tuple = DECAY.Ts                # sequence lengths; distances 1..T-1 (the families')
    ds: tuple = DECAY.ds                # the factory's d (and the --shape's d)
    input_scales: tuple = DECAY.input_scales   # the sequence input times this: as the families
    seeds: tuple = (0, 1, 2, 3, 4)      # module and inputs drawn from each: a distribution
    dtype: str = "float64"              # norms to 1e-308 (float32 underflows at 1e-38)
    exact_max: int = 65_536             # m n up to this (256 x 256 blocks): exact blocks
    exact_max_bytes: int = 2 ** 29      # ... and their T m n rows within this many bytes
    probes: int = 32                    # r of the sketch: more narrow its interval
    batch: int = 64                     # vector-Jacobian products run at once


DEFAULT = TorchDecayConfig()

# the columns added to the families' frame (documented in docs/data.md, decay.csv)
EXTRA = ("log10_norm_lo", "log10_norm_hi", "probes")
# the across-seeds frame's columns
SEEDS = ("model", "input_scale", "T", "d", "distance", "norm_measure", "seeds",
         "log10_median", "log10_median_lo", "log10_median_hi", "log10_min", "log10_max",
         "log10_hi_max")


def check_config(config):
    """A UsageError naming the flag of the first field the sweep cannot run."""
    def ints(flag, values, low):
        if not values:
            raise UsageError(f"{flag}: give at least one value")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise UsageError(f"{flag}: each must be an integer >= {low}, got {v!r}")
    ints("--T", config.Ts, 2)
    ints("--d", config.ds, 1)
    ints("--probes", (config.probes,), 1)
    if not config.seeds:
        raise UsageError("--seeds: give at least one seed")
    for s in config.seeds:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise UsageError(f"--seeds: each must be an integer >= 0, got {s!r}")
    if not config.input_scales:
        raise UsageError("--input-scale: give at least one value")
    for s in config.input_scales:
        if not (isinstance(s, (int, float, np.floating)) and math.isfinite(s)):
            raise UsageError(f"--input-scale: each must be a finite number, got {s!r}")
    if config.dtype not in load.DTYPES:
        raise UsageError(f"--dtype: must be one of {', '.join(load.DTYPES)}, got {config.dtype!r}")
    return config


def method(m, n, T, config=DEFAULT):
    """"exact" or "sketch": the measure a block of m x n at length T gets."""
    exact = m * n <= config.exact_max and T * m * n * 8 <= config.exact_max_bytes
    return "exact" if exact else "sketch"


def _grad(y, x, vectors, built, torch):
    """dy.v / dx for each row of ``vectors`` (c, *y.shape) at once: (c, *x.shape). A user's
    exception in their backward is theirs."""
    try:
        try:
            return torch.autograd.grad(y, x, vectors, retain_graph=True, is_grads_batched=True)[0]
        except RuntimeError:
            # an operation without a batching rule: one product at a time
            return torch.stack([torch.autograd.grad(y, x, v, retain_graph=True)[0]
                                for v in vectors])
    except UsageError:
        raise
    except BaseException as e:
        theirs = load.backward_error(e, built)
        if theirs is not None:
            raise theirs from e
        raise


def _rows(y_T, x, vectors, built, torch, batch):
    """(c, T, n): (v_i^T dy_T/dx_t) for every row v_i of ``vectors`` (c, m) and position t."""
    out = []
    for lo in range(0, vectors.shape[0], batch):
        V = vectors[lo:lo + batch].reshape((-1,) + tuple(y_T.shape))
        g = _grad(y_T, x, V, built, torch)                             # (c, *batch, T, d_in)
        out.append(g.movedim(-2, 1).reshape(g.shape[0], x.shape[-2], -1))
    return torch.cat(out).to(torch.float64)


def _log10(v):
    """log10 of norms, NaN where exactly zero (the output does not depend on that position)."""
    with np.errstate(divide="ignore"):
        out = np.log10(np.asarray(v, dtype=np.float64))
    out[np.isneginf(out)] = np.nan
    return out


def block_norms(built, input_scale=1.0, config=DEFAULT, probe_seed=0):
    """||dy_T/dx_(T-k)|| for k = 1..T-1 of one built module, as a dict of float64 arrays
    (length T-1, k ascending): ``log10_norm`` (the exact spectral norm, or the sketch's lower
    bound), ``log10_norm_lo`` / ``_hi`` (its interval: the norm itself when exact), NaN where
    the block is exactly zero or holds inf or NaN (the module's gradient overflowed), and the
    scalars ``norm_measure``, ``probes`` (r, or m when exact), ``m``, ``n`` and
    ``not_finite`` (the distances whose block overflowed), ``output_finite`` (y_T's)."""
    torch = load.import_torch(built.arg)
    x0 = built.inputs[built.sequence]
    T = x0.shape[-2]
    x = (x0 * input_scale).detach().requires_grad_(True)
    y = load.call(built, **{built.sequence: x})
    if y.dim() < 2 or y.shape[-2] != T:
        raise UsageError(f"{built.arg}: the output of {built.spec} has shape {tuple(y.shape)}; "
                         f"its dimension -2 must be T = {T} (one output per position)")
    if not y.requires_grad:
        raise UsageError(f"{built.arg}: the output of {built.spec} does not depend on its "
                         f"input {built.sequence} through autograd (detached, or computed "
                         f"under no_grad): there is no gradient path to measure")
    y_T = y[..., T - 1, :]                                              # (*batch, d_out)
    m, n = y_T.numel(), x[..., 0, :].numel()
    how = method(m, n, T, config)
    dt = y_T.dtype
    if how == "exact":
        R = _rows(y_T, x, torch.eye(m, dtype=dt), built, torch, config.batch)   # (m, T, n)
        J = R.permute(1, 0, 2)                                          # (T, m, n): J_t
        bad = ~torch.isfinite(J).all(dim=2).all(dim=1)                  # (T,): overflowed
        norms = torch.linalg.matrix_norm(torch.where(bad[:, None, None], 0.0, J), ord=2).numpy()
        lo = hi = norms
        r = m
    else:
        r = min(config.probes, m)
        gen = np.random.default_rng([probe_seed, 7])
        Omega = gen.standard_normal((m, r))                             # (m, r) Gaussian
        Q, Rq = np.linalg.qr(Omega)                                     # Omega = Q Rq
        Z = _rows(y_T, x, torch.from_numpy(Q.T.copy()).to(dt), built, torch, config.batch)
        Z = Z.permute(1, 0, 2)                                          # (T, r, n): Q^T J_t
        bad = ~torch.isfinite(Z).all(dim=2).all(dim=1)                  # (T,): overflowed
        Z = torch.where(bad[:, None, None], 0.0, Z)
        lo = torch.linalg.matrix_norm(Z, ord=2).numpy()                 # <= ||J_t|| always
        # J_t^T omega_i = (Q^T J_t)^T Rq[:, i]: the Gaussian vectors' products, from the same Z
        G = torch.einsum("ri,trn->tin", torch.from_numpy(Rq), Z)       # (T, r, n)
        alpha = max(1.0, (T / FAILURE) ** (1.0 / r))
        top = torch.linalg.vector_norm(G, dim=-1).max(-1).values.numpy()   # max_i ||J^T omega_i||
        hi = alpha * math.sqrt(2.0 / math.pi) * top
        hi = np.maximum(hi, lo)
        norms = lo
    idx = T - 1 - np.arange(1, T)                                       # x_(T-k), 0-based
    bad = bad.numpy()[idx]
    out = {"log10_norm": _log10(norms[idx]), "log10_norm_lo": _log10(np.asarray(lo)[idx]),
           "log10_norm_hi": _log10(np.asarray(hi)[idx])}
    for v in out.values():
        v[bad] = np.nan                      # inf or NaN in the module's own gradient
    return {**out, "norm_measure": how, "probes": r, "m": m, "n": n,
            "not_finite": int(bad.sum()), "output_finite": bool(torch.isfinite(y_T).all())}


def decay_frame(factory, spec, shapes, config=DEFAULT, progress=None, warn=None):
    """The gradient path of the user's module over the sweep of ``config``: the families'
    frame (``PATH_COLUMNS``, ``model`` = ``spec``) plus ``EXTRA``, one row per (T, d, input
    scale, seed, distance). ``progress(i, n, job)`` before each build when given;
    ``warn(line)`` for a draw whose gradient overflowed (its rows at those k are empty)."""
    from harness import models
    check_config(config)
    f = load.load_factory(factory if factory is not None else spec)
    jobs = [(T, d, s, seed) for T in config.Ts for d in config.ds
            for s in config.input_scales for seed in config.seeds]
    parts = []
    for i, (T, d, s, seed) in enumerate(jobs):
        if progress is not None:
            progress(i, len(jobs), dict(T=T, d=d, input_scale=s, seed=seed))
        built = load.build(f, spec, shapes, T, d, seed=seed, dtype=config.dtype)
        r = block_norms(built, s, config, probe_seed=seed)
        if r["not_finite"] and warn is not None:
            warn(f"T={T} d={d} input_scale={s:g} seed={seed}: the gradient of {spec} is not "
                 f"finite (inf or NaN) at {r['not_finite']} of {T - 1} distances; their rows "
                 f"are empty (the module overflows in {config.dtype}"
                 f"{'' if r['output_finite'] else ': y_T itself is not finite'})")
        g = models.path_frame(
            spec, np.arange(1, T), weight="factory", activation="module",
            input_scale=float(s), T=T, d=d, seed=seed, log10_norm=r["log10_norm"],
            log10_spectral=r["log10_norm"] if r["norm_measure"] == "exact" else np.nan,
            norm_measure="spectral" if r["norm_measure"] == "exact" else "sketch")
        g["log10_norm_lo"], g["log10_norm_hi"] = r["log10_norm_lo"], r["log10_norm_hi"]
        g["probes"] = r["probes"]
        parts.append(g)
    return pd.concat(parts, ignore_index=True)


def over_seeds(frame, seed=0):
    """One row per (model, input scale, T, d, distance): the seeds' distribution of
    ``log10_norm``: its median with a 95 % bootstrap interval over the seeds
    (``stats.bootstrap_interval``, NaN under 3 seeds), its least and largest values, and the
    largest upper end of the sketch's interval (``log10_norm_hi``). ``seeds``: the draws with
    a finite, non-zero block."""
    from harness.infra import stats
    keys = ["model", "input_scale", "T", "d"]
    rows = []
    for key, g in frame.groupby(keys, sort=False):
        wide = g.pivot(index="seed", columns="distance", values="log10_norm")    # (seeds, k)
        hi = g.pivot(index="seed", columns="distance", values="log10_norm_hi")
        V = wide.to_numpy()
        finite = np.isfinite(V)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)         # a k no seed reaches: NaN
            med = np.nanmedian(V, axis=0)
            vmin, vmax = np.nanmin(V, axis=0), np.nanmax(V, axis=0)
            hmax = np.nanmax(hi.to_numpy(), axis=0)
        measure = g.groupby("distance").norm_measure.first()
        for j, k in enumerate(wide.columns):
            col = V[finite[:, j], j]
            lo_, hi_ = (stats.bootstrap_interval(lambda r: np.median(r, axis=1), col, seed=seed)
                        if col.size else (math.nan, math.nan))
            rows.append(dict(zip(keys, key), distance=int(k), norm_measure=measure[k],
                             seeds=int(col.size), log10_median=med[j], log10_median_lo=lo_,
                             log10_median_hi=hi_, log10_min=vmin[j], log10_max=vmax[j],
                             log10_hi_max=hmax[j]))
    return pd.DataFrame(rows, columns=list(SEEDS))


def table(seeds_frame, points=12):
    """The across-seeds frame at about ``points`` distances spaced evenly in log k (k = 1 and
    T-1 always), as a user reads it."""
    out = []
    for _, g in seeds_frame.groupby(["model", "input_scale", "T", "d"], sort=False):
        T = int(g["T"].iloc[0])
        ks = np.unique(np.round(np.geomspace(1, T - 1, min(points, T - 1))).astype(int))
        out.append(g[g.distance.isin(ks)])
    return pd.concat(out, ignore_index=True) if out else seeds_frame
