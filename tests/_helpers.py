"""Helpers that several test files share: a stand-in for the timer's rounds and the interval
by scipy, file-system helpers, a trace built by hand, and the families' tiny configs, inputs,
variants and the peers' comparison."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
from scipy import stats

import naive
from harness.analysis import depth, trace
from harness.infra.config import DecayConfig


# ---------------------------------------------------------------- timing and its intervals

# eight rounds: with these the bootstrap's ends depend on its seed
ROUNDS8 = np.array([1.26, 1.3, 1.81, 1.09, 1.6, 1.73, 1.19, 1.06])


class _FakeRounds:
    """Stands in for ``timing.time_interleaved``: records its calls and returns the samples
    ``sample(name, call_number)`` gives, one per round."""

    def __init__(self, sample):
        self.sample, self.calls = sample, []

    def __call__(self, fns, rounds, min_sample_s, seed=0):
        self.calls.append((dict(fns), rounds, min_sample_s, seed))
        n = len(self.calls)
        return ({k: np.array([self.sample(k, n, r) for r in range(rounds)], float) for k in fns},
                {k: 1 for k in fns})


def _scipy_interval(x, seed, **kw):
    """The documented interval, by scipy: the 95 % percentile bootstrap of the median from
    2000 resamples, drawn by default_rng(seed) (the draws of ``stats.bootstrap_interval``)."""
    kw = {"n_resamples": 2000, "method": "percentile", **kw}
    ci = stats.bootstrap((np.asarray(x, np.float64),), np.median, confidence_level=0.95,
                         random_state=np.random.default_rng(seed), **kw).confidence_interval
    return float(ci.low), float(ci.high)


def _same(got, want):
    """Equal up to the rounding of the quantiles' interpolation (NumPy's against scipy's)."""
    return got == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------- files

def _with_umask(mask, fn, *args):
    old = os.umask(mask)
    try:
        return fn(*args)
    finally:
        os.umask(old)


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------- traces

def _toy_trace():
    """Five ops, worked out by hand below.

    op0 A = X @ W  (3, 2), k = 2, read by rows  -> tasks 0, 1, 2
    op1 s = A[1].sum()  () over 2 terms          -> task 3 (waits for row 1 only)
    op2 X[:, :1].sum()  (3,) over 1 term: no levels -> task 4
    op3 s + A  (3, 2)                            -> task 5 (waits for 3 and rows 0..2)
    op4 W * 2  (2, 2), from a leaf only          -> task 6 (no inputs: last and free)
    """
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (2, 2), ("d_model", "d_k"))
    A = X @ W
    s = A[1].sum()
    X[:, :1].sum()
    y = s + A
    W * 2.0
    return depth.Trace("toy", 3, 2, g, (y,))


# ---------------------------------------------------------------- the families

LN10 = math.log(10.0)


def _config(**kw):
    """A one-point sweep grid, tiny: T = 6, d = 3, the RNN alone, identity, orthogonal W_hh."""
    base = {"rhos": (0.5,), "activations": ("identity",), "weights": ("orthogonal",),
            "input_scales": (1.0,), "Ts": (6,), "ds": (3,), "models": ("rnn",)}
    return dataclasses.replace(DecayConfig(), **{**base, **kw})


def _rnn_inputs(T=4, d=3):
    rng = np.random.default_rng(0)
    return rng.normal(size=(T, d)), rng.normal(size=(d, d)), rng.normal(size=(d, d)) / 3


def _variant(name):
    from harness import models
    return models.variants()[name][1]


def models_get(name):
    from harness import models
    return models.get(name)


def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _close(a, b, dtype):
    a = np.asarray(a.detach() if hasattr(a, "detach") else a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=(2e-4 if dtype == "float32" else 1e-10)
                               * max(1.0, np.abs(b).max()))


# ---------------------------------------------------------------- the documentation's tables

def docs_table(name):
    """The documentation's generated table ``name``, as the site includes it
    (docs/_ext/harness_docs.py renders it from its committed CSV)."""
    import sys
    from pathlib import Path
    ext = str(Path(__file__).resolve().parents[1] / "docs" / "_ext")
    if ext not in sys.path:
        sys.path.insert(0, ext)
    import harness_docs
    return harness_docs.render(name)


# ---------------------------------------------------------------- the gated recurrences

def in_place_change_is_not_its_forward(forward, backward, X, fields, seed=17):
    """X, then H, changed in place from step 10 on (past the two steps the state check reads)
    after the forward: the same arrays handed to the backward must give the gradients that
    copies of their values give, bit for bit. Kept gates recognised by the arrays' identity
    gave others. ``forward(X)`` returns the forward's outputs as a tuple, H first;
    ``backward(X, outputs, dH)`` the gradients, named by ``fields``."""
    for changed in ("X", "H"):
        X_ = X.copy()
        outputs = forward(X_)
        dH = np.random.default_rng(seed).normal(size=outputs[0].shape)
        {"X": X_, "H": outputs[0]}[changed][..., 10:, :] *= 1.5
        same = backward(X_, outputs, dH)
        copies = backward(X_.copy(), tuple(o.copy() for o in outputs), dH)
        for name, a, b in zip(fields, same, copies):
            assert np.array_equal(a, b), (f"{changed} changed in place: d{name} differs from "
                                          f"the copies' by {naive.rel_err(a, b):.1e}")
