"""Reused scratch buffers never leak into what the kernels return."""

import numpy as np

from harness.infra import workspace
from harness.kernels import attention, rnn


def test_buffer_reuses_memory_by_name_and_dtype():
    workspace.clear()
    a = workspace.buffer("x", (4, 4), np.float64)
    b = workspace.buffer("x", (2, 3), np.float64)
    assert np.shares_memory(a, b) and b.shape == (2, 3)
    assert not np.shares_memory(a, workspace.buffer("y", (4, 4), np.float64))
    assert not np.shares_memory(a, workspace.buffer("x", (4, 4), np.float32))
    c = workspace.buffer("x", (5, 5), np.float64)              # larger: a new buffer
    assert c.shape == (5, 5)


def _results_survive(run):
    rng = np.random.default_rng(0)
    first = run(rng)
    kept = [None if x is None else x.copy() for x in first]
    run(rng)                                                     # new inputs, same buffers
    for x, k in zip(first, kept):
        if x is not None:
            np.testing.assert_array_equal(x, k)


def test_attention_results_are_not_workspace():
    def run(rng):
        X = rng.normal(size=(2, 7, 4))
        W = [rng.normal(size=(4, 3)) for _ in range(3)]
        Y, A = attention.forward(X, *W)
        return (Y, A) + tuple(attention.backward(X, *W, A, rng.normal(size=Y.shape)))
    _results_survive(run)


def test_rnn_results_are_not_workspace():
    def run(rng):
        X = rng.normal(size=(3, 6, 4))
        W_xh, W_hh = rng.normal(size=(5, 4)), rng.normal(size=(5, 5)) * 0.3
        H = rnn.forward(X, W_xh, W_hh)
        return (H,) + tuple(rnn.backward(X, H, W_xh, W_hh, rng.normal(size=H.shape)))
    _results_survive(run)


def test_kept_values_are_per_name_and_dropped_by_clear():
    workspace.clear()
    assert workspace.kept("a") is None
    workspace.keep("a", (1, 2))
    workspace.keep("b", "x")
    assert workspace.kept("a") == (1, 2) and workspace.kept("b") == "x"
    workspace.clear()
    assert workspace.kept("a") is None and workspace.kept("b") is None
