"""One battery of checks that every registered family must pass (as scikit-learn's
``check_estimator`` runs one battery over any estimator): a new family is tested by being
registered in ``harness.models.NAMES``.

Each check is parametrised over the registry, so its failure names the family.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from harness import models
from harness.analysis import compare, depth, gradpath
from harness.infra.config import DecayConfig

FAMILIES = models.NAMES
FORMS = list(models.traced_forms())


def _family(name):
    return models.get(name)


# ----------------------------------------------------------------------------- the parts

@pytest.mark.parametrize("name", FAMILIES)
def test_the_parts_have_their_types(name):
    f = _family(name)
    assert f.name == name and isinstance(f.title, str) and f.title
    assert isinstance(f.kernels, models.Kernels)
    assert isinstance(f.tracing, models.Tracing)
    assert isinstance(f.path, models.GradientPath)
    assert f.tracing.forms and all(isinstance(x, models.Form) for x in f.tracing.forms)
    assert f.tracing.forms[0].name == name                 # the family's own form first
    assert f.timed and all(isinstance(v, models.Variant) for v in f.timed)
    assert f.compared and all(isinstance(k, models.Compared) for k in f.compared)
    assert f.compared[0].name == "default"
    assert set(f.tracing.lesson_parts) <= set(f.tracing.forms[0].macs(8, 4))
    for k in f.compared:
        assert set(k.directions) <= set(compare.SLOTS), k.name
        if "forward+backward" in k.directions:               # every peer times both passes
            X, W = f.kernels.inputs(4, 3, 1, "float64", 0)
            out = k.forward(X, *W)
            g = np.ones(np.shape(f.kernels.primary(out)))
            for impl, fs in k.peers(X, W, g, None).items():
                assert impl == "gemm" or (len(fs) > 3 and fs[3] is not None), (k.name, impl)
        for suite in ("cases", "quick_cases", "long_cases"):
            for c in getattr(k, suite):
                assert len(c) == 3 and all(isinstance(v, int) and v >= 1 for v in c), (k.name, c)
    # every family is compared at least on the quick suite, so that CI runs its peers
    assert any(k.quick_cases for k in f.compared)


# ----------------------------------------------------------------------------- tracing

@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("T, d", [(1, 3), (7, 4), (16, 5)])
def test_traced_counts_equal_the_closed_forms(form, T, d):
    fam, f = models.form(form)
    tr = depth.trace_model(form, T, d)
    closed = {part: n for part, n in f.macs(T, d).items() if n}     # a part with none is not traced
    assert tr.macs_by_part() == closed, (form, T, d)


@pytest.mark.parametrize("form", FORMS)
def test_the_traced_forms_outputs_are_the_kernels(form):
    """A traced form run on plain arrays computes what the family's compiled forward does."""
    fam, f = models.form(form)
    X, W = fam.kernels.inputs(9, 4, 1, "float64", 2)
    want = np.asarray(fam.kernels.primary(fam.kernels.forward(X, *W)))
    got = np.asarray(f.forward(X, *W)[0])
    got = got.view(got.real.dtype) if got.dtype.kind == "c" else got
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- kernels

def _loss_and_grad(fam, X, W, G):
    k = fam.kernels
    out = k.forward(X, *W)
    return float(np.sum(np.asarray(k.primary(out)) * G)), k.backward(X, W, out, G).dX


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("batch", [1, 2])
def test_backward_agrees_with_finite_differences(name, batch):
    fam = _family(name)
    X, W = fam.kernels.inputs(5, 3, batch, "float64", 11)
    out = fam.kernels.forward(X, *W)
    G = np.random.default_rng(12).normal(size=np.shape(fam.kernels.primary(out)))
    _, dX = _loss_and_grad(fam, X, W, G)
    h = 1e-6
    fd = np.empty_like(X)
    for i in np.ndindex(X.shape):
        Xp, Xm = X.copy(), X.copy()
        Xp[i] += h
        Xm[i] -= h
        fd[i] = (_loss_and_grad(fam, Xp, W, G)[0] - _loss_and_grad(fam, Xm, W, G)[0]) / (2 * h)
    np.testing.assert_allclose(np.real(dX), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inputs_are_never_written(name, dtype):
    fam = _family(name)
    for k in fam.compared:
        X, W = fam.kernels.inputs(6, 4, 2 if k.name == "default" else 1, dtype, 3)
        before = [a.copy() for a in (X, *W)]
        out = k.forward(X, *W)
        G = np.ones(np.shape(fam.kernels.primary(out)), dtype=X.dtype)
        k.backward(X, W, out, G)
        for a, b in zip((X, *W), before):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", FAMILIES)
def test_inputs_are_seeded_and_shaped(name):
    fam = _family(name)
    X, W = fam.kernels.inputs(5, 4, 1, "float32", 3)
    X2, W2 = fam.kernels.inputs(5, 4, 1, "float32", 3)
    Xb, _ = fam.kernels.inputs(5, 4, 3, "float64", 3)
    assert X.shape == (5, 4) and X.dtype == np.float32 and Xb.shape == (3, 5, 4)
    np.testing.assert_array_equal(X, X2)
    for a, b in zip(W, W2):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(X, fam.kernels.inputs(5, 4, 1, "float32", 4)[0])
    assert fam.kernels.grid_elements(64, 2) >= 0


@pytest.mark.parametrize("name", FAMILIES)
def test_timed_variants_run_and_count(name):
    rng = np.random.default_rng(0)
    for v in _family(name).timed:
        v.call(*v.inputs(8, 4, rng, np.float64))
        assert v.macs(64, 8) > v.macs(32, 8) > 0, v.name
        assert v.bytes(64, 8) > 0, v.name


# ----------------------------------------------------------------------------- peers

def _dx(result):
    """dX out of what a forward+backward callable returns: a grads object, a tuple or a tensor."""
    dx = getattr(result, "dX", result[0] if isinstance(result, tuple) else result)
    return np.asarray(dx.detach() if hasattr(dx, "detach") else dx, dtype=np.float64)


@pytest.mark.parametrize("case", [c for c in compare.cases(dataclasses.replace(
    compare.DEFAULT, suite="quick", dtypes=("float64",)))], ids=str)
def test_every_peer_computes_what_the_kernel_does(case):
    impls = compare.implementations(case, seed=5)
    y_h, dx_h = impls["harness"][2]()
    checked = 0
    for impl, fs in impls.items():
        if impl == "harness" or len(fs) < 3 or fs[2] is None:
            continue
        y, dx = fs[2]()
        np.testing.assert_allclose(np.asarray(y, dtype=np.float64), y_h, rtol=1e-9,
                                   atol=1e-10 * np.abs(y_h).max(), err_msg=impl)
        np.testing.assert_allclose(np.asarray(dx, dtype=np.float64), dx_h, rtol=1e-9,
                                   atol=1e-10 * np.abs(dx_h).max(), err_msg=impl)
        if len(fs) > 3 and fs[3] is not None:             # a training step's both passes
            np.testing.assert_allclose(_dx(fs[3]()), dx_h, rtol=1e-9,
                                       atol=1e-10 * np.abs(dx_h).max(), err_msg=f"{impl} both")
        checked += 1
    assert checked >= 1, f"{case}: no peer computes outputs"


# ----------------------------------------------------------------------------- gradient path

SMALL = DecayConfig(Ts=(12,), ds=(3,), rhos=(0.9,), input_scales=(1.0,))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_gradient_path_has_the_declared_columns_and_summary(name):
    fam = _family(name)
    jobs = fam.path.jobs(SMALL, 12, 3)
    assert jobs and all(j["model"] == name and j["T"] == 12 and j["d"] == 3 for j in jobs)
    frame = gradpath.measure(jobs[0], SMALL)
    assert tuple(frame.columns) == models.PATH_COLUMNS
    assert list(frame.distance) == list(range(1, 12))
    assert (frame.model == name).all()
    assert np.isfinite(frame.log10_norm).all()
    summary = fam.path.summary(frame, SMALL.fit_from)
    assert tuple(summary) == models.PATH_SUMMARY_KEYS
    assert math.isfinite(summary["fitted_rate"])
    mem = fam.path.memory(12, 3, SMALL)
    assert mem and all(isinstance(b, int) and b > 0 for b in mem.values())
    assert fam.path.flops(12, 3, SMALL) > 0


def test_a_frame_without_a_declared_column_is_named():
    frame = models.path_frame("rnn", np.arange(1, 4), log10_norm=np.zeros(3)).drop(columns="rho")
    with pytest.raises(ValueError, match=r"gradient path of rnn must have column 'rho'"):
        models.check_path_frame("rnn", frame)
    extra = models.path_frame("rnn", np.arange(1, 4)).assign(extra=1.0)
    with pytest.raises(ValueError, match="undeclared column 'extra'"):
        models.check_path_frame("rnn", extra)
    with pytest.raises(ValueError, match=r"undeclared columns \['nope'\]"):
        models.path_frame("rnn", np.arange(1, 4), nope=1.0)


def test_a_family_that_breaks_the_frame_contract_is_named_by_the_sweep(monkeypatch):
    real_get = models.get
    fam = real_get("lru")
    bad = dataclasses.replace(fam.path, measure=lambda job, config: pd.DataFrame({"model": ["lru"]}))
    broken = dataclasses.replace(fam, path=bad)
    monkeypatch.setattr(models, "get", lambda name, arg="model": broken if name == "lru"
                        else real_get(name, arg))
    with pytest.raises(ValueError, match="gradient path of lru must have column 'weight'"):
        gradpath.measure({"model": "lru", "T": 5, "d": 2, "r_max": 0.9}, SMALL)


def test_path_options_replace_a_familys_own_knobs():
    lru = models.get("lru")
    own = lru.path.options
    assert models.path_options(SMALL, "lru") is own
    mine = dataclasses.replace(own, decay_r_maxes=(0.5,))
    cfg = dataclasses.replace(SMALL, path_options=(("lru", mine),))
    assert [j["r_max"] for j in lru.path.jobs(cfg, 12, 3)] == [0.5]
