"""The linear attention family (harness.models.linear_attention, harness.models._linear).

Registered in ``harness.models.NAMES``, the family runs tests/test_families.py's battery
there; here, that it is registered, and what the family adds: its traced forms at more
lengths and chunk lengths than the battery's, its gradient path
against the kernel's Jacobian and the decay's product against the loop twin's a_t
(tests/naive_linear.py), the spread of a selective decay over input draws, and the three
methods' agreement.

Tolerances: the path's logs agree with the kernel's Jacobian to 1e-10 (measured: 1e-15) and
the decay's product with the twin's a_t to 1e-12 (measured: 4e-16); the methods agree to
1e-12 of max |Y| in float64 and 1e-5 in float32; the peers at batch 3 as the battery's, 1e-9.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import naive_linear
import test_families as battery
from harness import models
from harness.analysis import depth, trace
from harness.infra.config import DecayConfig
from harness.kernels import linear_attention as la
from harness.models import _linear
from harness.models import linear_attention as fam

NAME = fam.NAME
FAMILY = fam.FAMILY
FORMS = [f.name for f in FAMILY.tracing.forms]


# ------------------------------------------------------------------ registered, and so tested

def test_the_family_is_registered_after_the_transformer():
    """tests/test_families.py's battery runs on every registered family, this one included."""
    assert models.NAMES[models.NAMES.index("transformer") + 1] == NAME == models.LINEAR_ATTENTION
    assert models.get(NAME) is FAMILY
    assert [f.name for f in FAMILY.tracing.forms] == [NAME, f"{NAME}-parallel", f"{NAME}-chunked"]
    assert list(models.traced_forms((NAME,))) == FORMS
    assert [v.name for v in FAMILY.timed] == FORMS        # a timed variant per traced form
    assert {n: f for n, (f, _) in models.variants().items() if f is FAMILY} == {
        n: FAMILY for n in FORMS}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("T, d", [(64, 3), (65, 3), (130, 4), (200, 2)])
def test_traced_counts_equal_the_closed_forms_past_a_chunk(form, T, d):
    battery.test_traced_counts_equal_the_closed_forms(form, T, d)


def test_only_the_parallel_variant_is_quadratic_in_T():
    for v in FAMILY.timed:
        ratio = v.macs(4096, 64) / v.macs(2048, 64)
        assert (ratio > 3.0) == v.name.endswith("-parallel"), (v.name, ratio)


# ------------------------------------------------------------------ the traced forms

def _trace(forward, T, d, d_k=None, d_v=None):
    """Counts per part, span and max_path of ``forward`` on recording arrays (as trace_model)."""
    weights = fam.trace_weights(d, d_k, d_v)
    g = trace.Graph(weight_parts={name: part for name, _, _, part in weights})
    X = trace.leaf(g, "X", (T, d), ("T", "d_model"), source_row=0)
    out = forward(X, *(trace.leaf(g, n, s, a) for n, s, a, _ in weights))
    tr = depth.Trace("", T, d, g, out)
    return tr.macs_by_part(), tr.span, tr.max_path


@pytest.mark.parametrize("T", [1, 4, 11, 12, 30])
def test_the_chunked_form_counts_and_computes_at_any_chunk_length(T):
    X, W = fam.inputs(T, 5, 1, "float64", 1)
    got = _linear.chunked_forward(X, *W, chunk=4)[0]
    np.testing.assert_allclose(got, fam.forward(X, *W), rtol=1e-10, atol=1e-12)
    parts, _, _ = _trace(lambda *a: _linear.chunked_forward(*a, chunk=4), T, 5)
    assert parts == {p: n for p, n in _linear.chunked_macs(T, 5, chunk=4).items() if n}


@pytest.mark.parametrize("form", FAMILY.tracing.forms, ids=lambda f: f.name)
def test_the_forms_count_with_their_own_widths(form):
    parts, _, _ = _trace(form.forward, 9, 4, d_k=3, d_v=2)
    assert parts == {p: n for p, n in form.macs(9, 4, d_k=3, d_v=2).items() if n}
    X, W = np.random.default_rng(0).normal(size=(9, 4)), fam.trace_weights(4, 3, 2)
    W = [np.random.default_rng(i).normal(size=s) for i, (_, s, _, _) in enumerate(W)]
    np.testing.assert_allclose(form.forward(X, *W)[0], la.forward(X, *W), rtol=1e-10, atol=1e-12)


def test_the_recurrence_waits_t_steps_and_the_other_forms_do_not():
    """The lessons' claim, on the three algorithms of one model: the recurrence's span grows
    one op per position; the masked product's stays; the chunked one's grows per chunk."""
    spans = {f.name: {T: _trace(f.forward, T, 4)[1:] for T in (64, 256, 512)}
             for f in FAMILY.tracing.forms}
    rec, par, chk = (spans[n] for n in FORMS)
    assert len({span - T for T, (span, _) in rec.items()}) == 1
    assert len({path - T for T, (_, path) in rec.items()}) == 1
    assert len(set(par.values())) == 1
    chunks = {T: -(-T // _linear.CHUNK) for T in chk}
    assert len({span - chunks[T] for T, (span, _) in chk.items() if chunks[T] > 1}) == 1
    assert chk[512][0] < rec[512][0] / 10


# ------------------------------------------------------------------ the gradient path

def _jacobian(X, W, kw):
    """dy_T/dx_s (T, d_v, d_model) from the kernel's backward, one output entry at a time."""
    T, d_v = X.shape[0], W[2].shape[0]
    J = np.empty((T, d_v, X.shape[1]))
    for j in range(d_v):
        dY = np.zeros((T, d_v))
        dY[-1, j] = 1.0
        J[:, j, :] = la.backward(X, *W, dY, **kw).dX
    return J


@pytest.mark.parametrize("decay", la.DECAYS)
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_the_path_is_the_kernels_jacobian_and_the_product_of_the_twins_decays(decay, scale):
    rng = np.random.default_rng(7)
    T, d = 33, 4
    X, W = fam._draw(rng, T, d)
    X = X * scale
    kw = fam.decay_arguments(decay, d, rng)
    ln_decay, ln_norm = fam.path_norms(X, *W, **kw)
    J = _jacobian(X, W, kw)
    want = np.log(np.linalg.norm(J[:-1], ord=2, axis=(1, 2)))[::-1]        # k = 1..T-1
    np.testing.assert_allclose(ln_norm, want, rtol=0, atol=1e-10)
    a, _ = naive_linear._decays(X, kw["decay"], kw.get("gamma"), kw.get("w_a"), kw.get("b_a"))
    prod = [math.log(math.prod(a[T - k:])) for k in range(1, T)]    # the twin's a_t, multiplied
    np.testing.assert_allclose(ln_decay, prod, rtol=0, atol=1e-12)


def test_a_path_far_below_float64_is_finite_and_decays_as_gamma():
    options = fam.LinearOptions(gamma=0.5)
    g = fam.linear_decay(T=2000, d=4, decay="constant", options=options)
    assert np.isfinite(g.log10_norm).all() and g.log10_norm.iloc[-1] < -590
    np.testing.assert_allclose(g.log10_decay, g.distance * math.log10(0.5), rtol=1e-12)
    np.testing.assert_allclose(g.log10_linear, g.log10_decay, rtol=1e-12)
    s = fam.path_summary(g, 0.5)
    assert s["theory_rate"] == pytest.approx(math.log(0.5), rel=1e-9)
    assert s["fitted_rate"] == pytest.approx(math.log(0.5), abs=0.01)


def test_the_frame_names_each_decay_and_only_the_selective_depends_on_the_input():
    frames = {(decay, s): fam.linear_decay(T=64, d=6, decay=decay, input_scale=s)
              for decay in la.DECAYS for s in (1.0, 4.0)}
    for (decay, s), g in frames.items():
        assert tuple(g.columns) == models.PATH_COLUMNS
        assert (g.weight == fam.LABELS[decay]).all() and (g.activation == "elu+1").all()
        assert (g.input_scale == s).all() and (g.norm_measure == "spectral").all()
        np.testing.assert_array_equal(g.log10_norm, g.log10_spectral)
    assert (frames[None, 1.0].log10_decay == 0.0).all() and (frames[None, 1.0].rho == 1.0).all()
    assert (frames["constant", 1.0].rho == fam.LINEAR.gamma).all()
    sel = frames["selective", 1.0]
    assert sel.rho.isna().all() and sel.log10_linear.isna().all()
    for decay in (None, "constant"):
        np.testing.assert_array_equal(frames[decay, 1.0].log10_decay, frames[decay, 4.0].log10_decay)
    # a larger input drives x . w_a + b_a past 0 more often: a_t falls, and the path with it
    assert frames["selective", 4.0].log10_decay.iloc[-1] < sel.log10_decay.iloc[-1] - 1
    # at x = 0 the selective decay is the constant one
    zero = fam.linear_decay(T=20, d=3, decay="selective", input_scale=0.0)
    np.testing.assert_allclose(zero.log10_decay, zero.distance * math.log10(fam.LINEAR.a_at_zero),
                               rtol=1e-12)


def test_the_sweep_runs_every_decay_at_every_input_scale():
    cfg = DecayConfig(Ts=(12,), ds=(3,), input_scales=(1.0, 2.0))
    jobs = FAMILY.path.jobs(cfg, 12, 3)
    assert [(j["decay"], j["input_scale"]) for j in jobs] == [
        (decay, s) for decay in la.DECAYS for s in (1.0, 2.0)]
    mine = dataclasses.replace(fam.LINEAR, decays=("constant",), gamma=0.9)
    cfg = dataclasses.replace(cfg, path_options=((NAME, mine),))
    jobs = FAMILY.path.jobs(cfg, 12, 3)
    assert [j["decay"] for j in jobs] == ["constant", "constant"]
    assert (FAMILY.path.measure(jobs[0], cfg).rho == 0.9).all()


@pytest.mark.parametrize("call, words", [
    (lambda: fam.linear_decay(T=8, d=2, decay="softmax"), "decay must be one of"),
    (lambda: fam.linear_decay(T=1, d=2), "T must be an integer >= 2"),
    (lambda: fam.linear_decay(T=8, d=2, input_scale=-1.0), "input_scale must be"),
    (lambda: fam.selective_bias(1.0), "a_at_zero must be in"),
    (lambda: fam.path_norms(np.full((4, 2), -1e3), np.eye(2), np.eye(2), np.eye(2)), "input_scale"),
])
def test_errors_name_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()


# ------------------------------------------------------------------ the lessons' claims

def test_a_selective_gate_spreads_the_product_over_input_draws():
    f = fam.selective_spread(distances=(8, 32), draws=50, input_scales=(1.0, 4.0), d=8, seed=3)
    assert len(f) == 2 * 3 * 2 * 50
    assert list(f.columns) == ["input_scale", "decay", "distance", "draw", "log10_product"]
    s = fam.spread_summary(f).set_index(["input_scale", "decay", "distance"])
    for scale in (1.0, 4.0):
        for k in (8, 32):
            assert s.loc[(scale, "none", k), "decades"] == 0.0
            assert s.loc[(scale, "constant", k), "log10_median"] == pytest.approx(
                k * math.log10(fam.LINEAR.gamma))
            assert s.loc[(scale, "constant", k), "decades"] == pytest.approx(0.0, abs=1e-12)
            assert s.loc[(scale, "selective", k), "decades"] > 0.01
    assert s.loc[(4.0, "selective", 32), "decades"] > s.loc[(1.0, "selective", 32), "decades"]
    np.testing.assert_array_equal(f, fam.selective_spread(distances=(8, 32), draws=50,
                                                          input_scales=(1.0, 4.0), d=8, seed=3))


def test_each_draws_product_is_its_inputs_decays_multiplied():
    """The frame's product, again from the twin's a_t on the same draws (the function's rngs)."""
    f = fam.selective_spread(distances=(5,), draws=3, input_scales=(2.0,), d=4, seed=1)
    kw = fam.decay_arguments("selective", 4, np.random.default_rng([1, 4, 0]))
    X = np.random.default_rng([1, 4, 1]).standard_normal((3, 5, 4)) * 2.0
    for i in range(3):
        a, _ = naive_linear._decays(X[i], "selective", None, kw["w_a"], kw["b_a"])
        got = f[(f.decay == "selective") & (f.draw == i)].log10_product.item()
        assert got == pytest.approx(math.log10(math.prod(a)), abs=1e-12)


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 1e-5)])
def test_the_three_methods_compute_the_same_outputs(dtype, tol):
    f = fam.method_agreement(Ts=(1, 7, 64, 65, 300), d=6, dtype=dtype)
    assert len(f) == 5 * 3 * 3
    assert set(f.methods) == {"recurrent/parallel", "recurrent/chunked", "parallel/chunked"}
    assert set(f.decay) == {"none", "constant", "selective"}
    bad = f[f.max_abs_diff > tol * f.max_abs_output]
    assert bad.empty, bad


# ------------------------------------------------------------------ peers

@pytest.mark.parametrize("kernel", [k.name for k in FAMILY.compared])
def test_the_peers_take_a_batch(kernel):
    """Every peer, on (3, 70, 5): more than one chunk, the last one partial."""
    torch = pytest.importorskip("torch")
    k = FAMILY.kernel(kernel)
    X, W = fam.inputs(70, 5, 3, "float64", 4)
    dY = np.random.default_rng(5).normal(size=X.shape)
    Y, dX = k.forward(X, *W), k.backward(X, W, None, dY).dX
    for impl, fs in k.peers(X, W, dY, torch).items():
        y, dx = fs[2]()
        np.testing.assert_allclose(np.asarray(y), Y, rtol=1e-9, atol=1e-12, err_msg=impl)
        np.testing.assert_allclose(np.asarray(dx), dX, rtol=1e-9, atol=1e-12, err_msg=impl)
        np.testing.assert_allclose(battery._dx(fs[3]()), dX, rtol=1e-9, atol=1e-12, err_msg=impl)


def test_the_numpy_peer_returns_every_weight_gradient():
    X, W = fam.inputs(19, 4, 1, "float64", 6)
    dY = np.random.default_rng(6).normal(size=X.shape)
    want = la.backward(X, *W, dY)
    got = _linear.numpy_backward(X, *W, _linear.numpy_forward(X, *W, chunk=8)[1], dY)
    for name, a, b in zip(("dX", "dWq", "dWk", "dWv"), got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)


# ------------------------------------------------------------------ the docs' speed table

def test_docs_speed_table_is_the_recorded_rounds():
    """The docs' linear-attention speed table, recomputed from the rounds it was measured in
    (docs/linear_attention_speed.csv) with plain medians: per (T, dtype, direction) the fastest
    of the harness's three methods against the fastest PyTorch and NumPy peers (peer median /
    ours, its printed 95 % interval around it), and the chunked forward's share of the GEMM
    peak timed in the same rounds (median over rounds of rate / peak)."""
    import re
    from pathlib import Path

    import pandas as pd
    root = Path(__file__).resolve().parents[1]
    rounds = pd.read_csv(root / "docs" / "linear_attention_speed.csv")
    from _helpers import docs_table
    text = docs_table("linear_speed")
    table = text.split("\n\n", 2)[2]
    lines = [ln for ln in table.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    keys = rounds.groupby(["T", "dtype", "direction"], sort=False).ngroups
    assert len(lines) == keys
    for (T, dtype, direction), g in rounds.groupby(["T", "dtype", "direction"], sort=False):
        med = g.groupby("impl").seconds.median()
        ours = med[med.index.str.startswith("harness-")].idxmin()
        line = next(ln for ln in lines if ln.startswith(f"| {T:,} | {dtype} | {direction} |"))
        assert f"| {ours.removeprefix('harness-')} {med[ours] * 1e3:,.1f} ms |" in line, line
        for peer in (med[med.index.str.startswith("torch")].idxmin(), "numpy"):
            ratio = med[peer] / med[ours]
            said = re.escape(f"| {peer} {med[peer] * 1e3:,.1f} ms: {ratio:.2f}× [")
            m = re.search(said + r"([\d.]+), ([\d.]+)\] \|", line)
            assert m and float(m[1]) <= ratio <= float(m[2]), (peer, ratio, line)
        if direction == "forward":
            wide = g.pivot(index="round", columns="impl", values="seconds")
            share = np.median(2 * fam.kernel_macs("chunked", T, 64) / wide["harness-chunked"]
                              / (2 * 2048 ** 3 / wide["gemm2048"]))
            assert f"{share:.2f} of the GEMM peak" in line, (share, line)
            assert f"({np.median(2 * 2048 ** 3 / wide['gemm2048']) / 1e9:.0f} GFLOP/s)" in line
        assert line.endswith(f"| {g.load.iloc[0]:.0f} |") and g["round"].nunique() == 5
    assert f"timed in the same {rounds['round'].nunique()} interleaved rounds" in text
