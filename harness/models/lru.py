"""The linear recurrence family (LRU): h_t = lam * h_{t-1} + B x_t, lam diagonal.

Kernels in ``harness.kernels.lru``; here, what the analysers need: two plain NumPy
forwards for the tracer (the step loop, and the same recurrence as a parallel
scan written with array ops), their counts (the input products T d_h d_in; the
loop's T d_h products lam * h, the scan's about 2 T d_h), its inputs from the
ring initialisation, three timed variants (sequential, Blelloch, chunked), its
peers and its gradient path,

    dh_T/dh_{T-k} = diag(lam)^k,   ||dh_T/dh_{T-k}|| = max_i |lam_i|^k exactly,

measured through the kernel's backward in log space. Unlike the tanh RNN, whose
T steps must wait for each other, the recurrence is linear, so its steps compose
(an associative operator) and a scan computes all of h_1..h_T in O(log T) depth.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.kernels import lru
from harness.analysis import trace
from harness.infra.stats import LN10, fit_rate
from harness.infra.validate import check_int, check_real, check_seed
from harness.infra.config import LRU
from harness.models import (Compared, Family, Form, GradientPath, Kernels, Tracing, Variant,
                            common_peers, path_frame, path_options, reference)


# ------------------------------------------------------------------ the traced forwards

def loop_forward(X, lam, B):
    """h_t = lam * h_{t-1} + B x_t one step after another, as the lessons write a recurrence."""
    U = X @ B.T                                   # (..., T, d_h): the half that parallelises
    h = np.zeros(U.shape[:-2] + U.shape[-1:])     # h_0 = 0
    states = []
    for t in range(U.shape[-2]):
        h = lam * h + U[..., t, :]                # (..., d_h): waits for h_{t-1}
        states.append(h)
    return (np.stack(states, axis=-2),)           # (..., T, d_h)


def scan_forward(X, lam, B):
    """The same recurrence as a parallel scan with array ops (``pair_scan``)."""
    return (pair_scan(lam, X @ B.T),)             # (..., T, d_h)


def pair_scan(a, U):
    """h_t = a h_{t-1} + u_t (h_0 = 0) along axis -2, every level's combines in one array op.

    Combine neighbours: (u_{2i}, u_{2i+1}) -> a u_{2i} + u_{2i+1}, a recurrence of half
    the length with coefficient a^2; scan that, which gives h at the odd positions;
    then each even position is one more combine, h_{2i} = a h_{2i-1} + u_{2i}. This is
    the up-sweep and down-sweep of the work-efficient (Brent-Kung) scan: about 2T
    combines in 2 log2 T levels.
    """
    n = U.shape[-2]
    if n == 1:
        return U
    m = n // 2
    odd = a * U[..., 0:2 * m:2, :] + U[..., 1:2 * m:2, :]     # (..., m, d_h): pairs combined
    P = pair_scan(a * a, odd) if m > 1 else odd               # h_1, h_3, ... (0-based odd)
    evens = U[..., 0:1, :]                                    # h_0 = u_0
    if n > 2:                                                 # h_2, h_4, ...
        evens = np.concatenate([evens, a * P[..., :(n - 1) // 2, :] + U[..., 2:n:2, :]], axis=-2)
    H = np.stack([evens[..., :m, :], P], axis=-2)             # (..., m, 2, d_h): interleaved
    H = H.reshape(U.shape[:-2] + (2 * m, U.shape[-1]))
    if n % 2:
        H = np.concatenate([H, evens[..., m:, :]], axis=-2)   # the last, even, position
    return H


# ------------------------------------------------------------------ counts and inputs

def scan_multiplications(T):
    """lam-products of ``pair_scan`` per channel: 2T - 3 at T = 2^n (T - 1 pair combines,
    T - 1 - log2 T even combines, log2 T - 1 squarings of the coefficient)."""
    if T <= 1:
        return 0
    m = T // 2
    return m + (T - 1) // 2 + (1 + scan_multiplications(m) if m > 1 else 0)


def macs(T, d, d_h=None):
    """The loop's multiplications: input products T d_h d and the recurrence's T d_h lam * h."""
    d_h = d if d_h is None else d_h
    return {"input": T * d_h * d, "recurrence": T * d_h}


def scan_macs(T, d, d_h=None):
    """The scan's: the same input products, and about twice the recurrence's products."""
    d_h = d if d_h is None else d_h
    return {"input": T * d_h * d, "recurrence": d_h * scan_multiplications(T)}


def trace_weights(d, d_h=None):
    d_h = d if d_h is None else d_h
    return (("lam", (d_h,), ("d_h",), "recurrence"),
            ("B", (d_h, d), ("d_h", "d_model"), "input"))


def trace_memory_bytes(T, d, d_h=None):
    """Peak bytes of tracing the loop: a few (T, width) values, the weights, T steps' objects."""
    d_h = d if d_h is None else d_h
    e = trace.BYTES_PER_ELEMENT
    return e * (3 * T * max(d, d_h) + 2 * d_h * d) + trace.BYTES_PER_STEP * T


def scan_trace_memory_bytes(T, d, d_h=None):
    """Peak bytes of tracing the scan: each level's halves, the weights, a few ops per level."""
    d_h = d if d_h is None else d_h
    e = trace.BYTES_PER_ELEMENT
    return e * (T * d + 4 * T * d_h + 2 * d_h * d) + 20 * trace.BYTES_PER_STEP * max(T.bit_length(), 1)


TRACING = Tracing(weights=trace_weights,
                  forms=(Form("lru", loop_forward, macs, trace_memory_bytes),
                         Form("lru-scan", scan_forward, scan_macs, scan_trace_memory_bytes)),
                  lesson_parts=("recurrence", "input"))


def inputs(T, d, batch=1, dtype="float64", seed=0):
    """X (T, d) or (B, T, d) ~ N(0, 1), real; lam, B from ``lru.ring_init`` (LruConfig's ring),
    complex64 for float32, complex128 for float64."""
    rng = np.random.default_rng(seed)
    return _draw(rng, T, d, batch, dtype, seed)


def _draw(rng, T, d, batch=1, dtype="float64", seed=0):
    shape = (T, d) if batch == 1 else (batch, T, d)
    X = rng.standard_normal(shape).astype(dtype)                       # (B, T, d)
    cdt = lru.COMPLEX[np.dtype(dtype)].name
    return X, lru.ring_init(d, LRU.r_min, LRU.r_max, LRU.max_phase, seed, dtype=cdt)


def primary(H):
    """What a loss reads: H itself, or for a complex H its real view (..., T, 2 d_h),
    [Re h_1, Im h_1, Re h_2, ...], so that real upstream gradients describe it."""
    return H.view(H.real.dtype) if H.dtype.kind == "c" else H


def _as_state(dY, H):
    """The upstream gradient of ``primary(H)`` as dH (PyTorch's convention: dRe + i dIm)."""
    if H.dtype.kind == "c" and dY.dtype.kind != "c":
        return np.ascontiguousarray(dY, dtype=H.real.dtype).view(H.dtype)
    return dY


def backward_from(X, W, H, dY):
    return lru.backward(X, H, W[0], W[1], _as_state(dY, H))


def _timed_inputs(T, d, rng, dtype=np.float64):
    X, W = _draw(rng, T, d, 1, dtype)
    return (X,) + W


def _timed_bytes(T, d):
    return (8 + 16 + 16) * T * d + 3 * 16 * d * d      # X, H, its page-faulted GEMM view, B


def _method(name):
    def call(X, lam, B):
        return lru.forward(X, lam, B, method=name)
    call.__name__ = f"forward_{name}"
    return call


TIMED = (
    Variant("lru", _timed_inputs, lru.forward, lambda T, d: sum(macs(T, d).values()), _timed_bytes),
    # about 2T combines each (the exact count is scan_macs'; these stay linear in T, as
    # harness.analysis.walltime's crossover expects of every count)
    Variant("lru-scan", _timed_inputs, _method("blelloch"), lambda T, d: T * d * d + 2 * T * d,
            _timed_bytes),
    Variant("lru-chunked", _timed_inputs, _method("chunked"), lambda T, d: T * d * d + 2 * T * d,
            _timed_bytes),
)


# ------------------------------------------------------------------ gradient path

def lru_gradient_norms(lam, T, log_range=LRU.log_range):
    """ln ||dh_T/dh_{T-k}|| for k = 1..T-1, measured through ``lru.backward``.

    dh_T/dh_{T-k} = diag(lam)^k, whose spectral norm is max_i |lam_i|^k. With B = I and
    a complex X, the backward's dX = G conj(I) is the gradient at every state, and
    seeded with dl/dh_T = (1, ..., 1) its channel i at distance k is conj(lam_i)^k: the
    norm is the largest channel. It runs in segments short enough that the largest
    channel stays within e^(+-log_range); each segment is seeded with the previous
    one's dh0 rescaled to a largest entry of 1, and the scale is kept in a log. So
    0.9^20000 (about 1e-915) is finite.
    """
    lam = np.asarray(lam, dtype=np.complex128)
    T = check_int("T", T, 2)
    d_h = lam.shape[0]
    ln_r = float(np.log(np.abs(lam).max())) if np.abs(lam).max() > 0 else -np.inf
    L = T if ln_r == 0.0 else max(1, min(T, int(log_range / abs(ln_r))))
    eye = np.eye(d_h, dtype=np.complex128)
    ln = np.full(T, -np.inf)                     # ln[k]: distance k = 0..T-1
    seed, acc, k0 = np.ones(d_h, dtype=np.complex128), 0.0, 0
    while k0 < T:
        n = min(L, T - k0)                       # this segment: distances k0 .. k0 + n - 1
        Z = np.zeros((n, d_h), dtype=np.complex128)
        dH = Z.copy()
        dH[-1] = seed
        g = lru.backward(Z, Z, lam, eye, dH)     # X = 0: forward's H is 0, and dX = G
        with np.errstate(divide="ignore"):
            ln[k0:k0 + n] = acc + np.log(np.abs(g.dX[::-1]).max(axis=1))
        s = float(np.abs(g.dh0).max())           # dh0 is the gradient at distance k0 + n
        if s == 0.0:
            break
        seed, acc, k0 = g.dh0 / s, acc + math.log(s), k0 + n
    return ln[1:]


def lru_decay(T=256, d=32, r_max=LRU.r_max, r_min=None, max_phase=LRU.max_phase, seed=0,
              log_range=LRU.log_range):
    """Gradient decay of one ring-initialised LRU, as a tidy frame: one row per distance k.

    lam from ``lru.ring_init(d, r_min, r_max, max_phase, seed)``; r_min defaults to r_max,
    a ring of width 0 whose max|lam|^k is r_max^k (0.999^4095 ~ 0.017). Columns as
    ``rnn_decay`` (weight="ring", activation="identity", rho = r_max, input_scale NaN: the
    path does not depend on the input), with sigma_max = max|lam| and log10_norm the
    measured spectral norm, beside log10_linear = log10_bound = k log10 max|lam|, the
    exact value.
    """
    check_int("T", T, 2)
    check_int("d", d)
    check_real("r_max", r_max)
    check_seed("seed", seed)
    lam, _ = lru.ring_init(d, r_max if r_min is None else r_min, r_max, max_phase, seed)
    sigma = float(np.abs(lam).max())
    k = np.arange(1, T)
    ln = lru_gradient_norms(lam, T, log_range)
    theory = k * math.log10(sigma)
    return path_frame("lru", k, weight="ring", activation="identity", rho=float(r_max),
                      T=T, d=d, seed=seed, sigma_max=sigma,
                      log10_norm=ln / LN10, log10_spectral=ln / LN10,
                      log10_linear=theory, log10_bound=theory,
                      norm_measure="spectral")   # max_i |G_i|: exact for a diagonal Jacobian


def decay_jobs(config, T, d):
    """One ring [r, r] per radius r of ``LruConfig.decay_r_maxes``."""
    return [dict(model="lru", T=T, d=d, r_max=r) for r in path_options(config, "lru").decay_r_maxes]


def gradient_path(job, config):
    o = path_options(config, "lru")
    return lru_decay(T=job["T"], d=job["d"], r_max=job["r_max"], seed=config.seed,
                     max_phase=o.max_phase, log_range=o.log_range)


def path_summary(g, fit_from):
    """The fitted rate beside its exact value ln max|lam| (theory and bound alike: the
    Jacobian is diagonal, so its norm is exactly max|lam|^k and there is no transient).
    ``bound_respected``: every k's norm is within the bound, up to 1e-9 relative to the
    size compared (a log norm summed over 10^6 steps is rounded far past 1e-9 absolute)."""
    rate = fit_rate(g["log10_norm"].to_numpy() * LN10, fit_from)
    exact = math.log(float(g["sigma_max"].iloc[0]))
    log10_bound = g["log10_bound"].to_numpy()
    excess = g["log10_norm"].to_numpy() - log10_bound
    within = np.nanmax(excess - 1e-9 * np.maximum(1.0, np.abs(log10_bound))) <= 0.0
    return {"fitted_rate": rate, "fitted_rate_probe": np.nan, "theory_rate": exact,
            "bound_rate": exact, "bound_respected": bool(within),
            "log10_transient": float(np.nanmax(g["log10_norm"] - g["log10_linear"]))}


def path_memory(T, d, config):
    return {"LRU backward segments": 8 * T * d * 16 + 2 * d * d * 16}


def path_flops(T, d, config):
    """Roughly: the backward's complex products by B = I (8 T d^2 real multiply-adds) and the
    ring's draw."""
    return 8 * T * d * d + 10 * d


PATH = GradientPath(jobs=decay_jobs, measure=gradient_path, summary=path_summary,
                    memory=path_memory, flops=path_flops, options=LRU)


# ------------------------------------------------------------------ peers

def peers(X, W, dY, torch=None, jax=None):
    """NumPy's step loop; NumPy's log-space cumulative sums (Heinsen) where no lam is 0;
    with PyTorch, its step loop and autograd; with JAX, ``jax_forward`` jitted, and its VJP."""
    lam, B = W
    H = lru.forward(X, lam, B)
    dH = _as_state(dY, H)
    impls = {"numpy": common_peers.slots(
        lambda: reference.lru_forward(X, lam, B),
        lambda H_: reference.lru_backward(X, H_, lam, B, dH), H, primary=primary)}
    if np.all(lam != 0):
        impls["heinsen"] = common_peers.slots(
            lambda: reference.lru_heinsen_forward(X, lam, B),
            lambda H_: reference.lru_heinsen_backward(X, H_, lam, B, dH), H,
            primary=lambda out: primary(np.ascontiguousarray(out, dtype=H.dtype)))
    if jax is not None:
        impls["jax"] = common_peers.jitted(lambda x, *w: jax_forward(jax, x, *w), X, W, dY, jax)
    if torch is None:
        return impls
    ct = getattr(torch, H.dtype.name)
    lam_t = torch.from_numpy(lam).clone().requires_grad_(True)
    B_t = torch.from_numpy(B).clone().requires_grad_(True)

    def run(Xin):
        U = Xin.to(ct) @ B_t.T                                 # (..., T, d_h)
        h = torch.zeros(U.shape[:-2] + U.shape[-1:], dtype=ct)
        states = []
        # unbind, not U[..., t, :]: each indexing's backward writes a whole (T, d_h) zero
        # gradient, O(T^2) in all (23 s at T = 16384); unbind's is one stack
        for u in U.unbind(dim=-2):
            h = lam_t * h + u
            states.append(h)
        return torch.stack(states, dim=-2)

    Xt = torch.from_numpy(X)

    def t_forward():
        with torch.no_grad():
            return run(Xt)

    Xg = Xt.clone().requires_grad_(True)
    out = run(Xg)
    g = torch.from_numpy(np.ascontiguousarray(dH))

    def t_backward():
        out.backward(g, retain_graph=True)

    def t_outputs():
        Xg.grad = None
        out.backward(g, retain_graph=True)
        return primary(t_forward().numpy()), Xg.grad.numpy()

    impls["torch"] = (t_forward, t_backward, t_outputs)
    return impls


def jax_forward(jax, X, lam, B, method="scan"):
    """h_t = lam * h_{t-1} + B x_t in JAX, returned as ``primary`` gives it: (..., T, 2 d_h),
    real and imaginary parts side by side, so that a real dY is its gradient. ``method``:
    "scan", ``lax.scan`` step by step (the peer: the faster on one core), or "associative",
    ``lax.associative_scan`` of the pairs (lam^k, h)."""
    jnp = jax.numpy
    U = X @ B.T                                     # (..., T, d_h), complex
    if method == "scan":
        def step(h, u):
            h = lam * h + u
            return h, h
        _, H = jax.lax.scan(step, jnp.zeros(U.shape[:-2] + U.shape[-1:], U.dtype),
                            jnp.moveaxis(U, -2, 0))
        H = jnp.moveaxis(H, 0, -2)
    elif method == "associative":                   # (a1, b1) then (a2, b2): (a1 a2, a2 b1 + b2)
        A = jnp.broadcast_to(lam, U.shape)
        _, H = jax.lax.associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (A, U),
                                        axis=U.ndim - 2)
    else:
        raise ValueError(f"method must be 'scan' or 'associative', got {method!r}.")
    return jnp.stack([H.real, H.imag], axis=-1).reshape(H.shape[:-1] + (2 * H.shape[-1],))


SPEED_T = 2 ** 16          # from here on the sequential kernel must be 2x the fastest peer


def compare_target(batch, direction, T, d):
    if T >= SPEED_T:
        return 2.0, None, "at least 2x faster than the fastest peer"
    return 1.0, None, "at least as fast as the fastest peer"


# ------------------------------------------------------------------ strong scaling

def chunked_scaling(config=LRU, seed=0):
    """The chunked scan's forward on each of ``config.scaling_threads``, interleaved rounds.

    One row per thread count: median seconds, the speed-up over the first thread count
    (a median of per-round ratios, with its 95 % bootstrap interval over the rounds,
    ``stats.bootstrap_interval``), and the noise floor: the same ratio between two identical
    1-thread calls timed in the same rounds.
    """
    from harness.infra import machine, stats, timing
    X, (lam, B) = inputs(config.scaling_T, config.scaling_d, 1, config.scaling_dtype, seed)

    def call(n):
        def run():
            with machine.threads(n):
                lru.forward(X, lam, B, method="chunked", chunks=n)
        return run

    base = config.scaling_threads[0]
    fns = {n: call(n) for n in config.scaling_threads}
    fns["floor"] = call(base)
    samples, _ = timing.time_interleaved(fns, config.scaling_rounds, 0.0, seed=seed)
    rows = []
    for n in fns:
        ratio = samples[base] / samples[n]                 # per round: paired, same load
        low = high = 1.0                                   # the base against itself
        if n != base:
            low, high = stats.bootstrap_interval(lambda r: np.median(r, axis=1), ratio, seed=seed)
        rows.append(dict(T=config.scaling_T, d=config.scaling_d, dtype=config.scaling_dtype,
                         threads=base if n == "floor" else n, noise_floor=n == "floor",
                         seconds=float(np.median(samples[n])), speedup=float(np.median(ratio)),
                         speedup_low=low, speedup_high=high, rounds=len(ratio)))
    return pd.DataFrame(rows)


FAMILY = Family(
    name="lru", title="linear recurrence (LRU)",
    kernels=Kernels(forward=lru.forward, backward=backward_from, primary=primary, inputs=inputs),
    tracing=TRACING, timed=TIMED, path=PATH,
    compared=(Compared("default", lru.forward, backward_from, peers, compare_target,
                       cases=((1, 1000, 64), (32, 1000, 64), (1, 2 ** 16, 64)),
                       quick_cases=((1, 16, 8), (3, 16, 8))),),
    scaling=chunked_scaling,
)
