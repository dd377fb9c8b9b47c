"""harness.kernels.steps: the checks the gated recurrences share, with the advice they give."""

from __future__ import annotations

import numpy as np
import pytest

from harness.kernels import steps


def test_gradients_overflowing_name_the_model_the_sum_and_what_to_scale():
    dX = np.zeros((2, 3, 4), np.float32)
    W = np.zeros((8, 4), np.float32)
    steps.check_gradients("the LSTM", dX, W, W, ("dH", "dC"))           # all finite: silent
    bad = W.copy()
    bad[1, 2] = np.inf
    with pytest.raises(FloatingPointError) as e:
        steps.check_gradients("the LSTM", dX, W, bad, ("dH", "dC"))
    assert str(e.value) == ("the LSTM's backward overflowed: dW_ih or dW_hh, a sum over every "
                            "step, is not finite (float32 holds at most 3.4e+38). Scale dH or dC "
                            "down, or use float64.")
    with pytest.raises(FloatingPointError, match=r"^the GRU's backward overflowed: dW_ih or dW_hh"):
        steps.check_gradients("the GRU", dX.astype(np.float64), bad.astype(np.float64), W, ("dH",))
    dX[1, 2, 0] = np.nan
    with pytest.raises(FloatingPointError) as e:
        steps.check_gradients("the GRU", dX, W, W, ("dH",))
    assert str(e.value).endswith("Scale dH or the weights down, or use float64.")
    assert "from step t=3 of 3 of sequence 1" in str(e.value)


def test_an_overflowing_forward_names_its_step_and_sequence_only_when_batched():
    X = np.zeros((4, 5, 2))
    steps.raise_if_overflowed((-1, -1), X, "the GRU", "W x")               # none: silent
    with pytest.raises(FloatingPointError) as e:
        steps.raise_if_overflowed((2, 3), X, "the GRU", "W x")
    assert str(e.value) == ("the GRU overflowed: the gates' pre-activations W x are not finite "
                            "from step t=3 of 5 of sequence 3, although every input is finite "
                            "(float64 holds at most 1.8e+308). Scale X, W_ih or W_hh down, or "
                            "use float64.")
    with pytest.raises(FloatingPointError, match=r"from step t=1 of 5, although"):
        steps.raise_if_overflowed((0, 0), X[0], "the GRU", "W x")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_batched_loops_buffers_hold_its_state_apart_from_h0(dtype):
    h0 = np.arange(6, dtype=dtype).reshape(2, 3)                  # B = 2 sequences, d_h = 3
    a, h, scratch = steps.row_buffers(h0, 12, 7)
    assert (a.shape, a.dtype, scratch.shape, scratch.dtype) == ((2, 12), dtype, (7,), np.int64)
    np.testing.assert_array_equal(h, h0)
    h[0, 0] = 99.0                                                  # the loop's state, not h0
    assert h0[0, 0] == 0.0


@pytest.mark.parametrize("cols", [False, True])
def test_a_batched_backwards_carry_starts_at_zero_and_its_scratch_fits_carry_back(cols):
    H = np.zeros((2, 4, 3), np.float32)
    carry, dh, da, cc = steps.carry_buffers(2, 12, 3, cols, H)
    np.testing.assert_array_equal(carry, np.zeros((2, 3), np.float32))
    assert (dh.shape, dh.dtype) == ((3,), np.float32)
    assert da.shape == ((12, 2) if cols else (2, 12))
    assert cc.shape == ((3, 2) if cols else (0, 0))
    rng = np.random.default_rng(0)
    G = rng.normal(size=(2, 4, 12)).astype(np.float32)
    W_hh = rng.normal(size=(12, 3)).astype(np.float32)
    steps.carry_back(G, 1, np.ascontiguousarray(W_hh.T) if cols else W_hh, cols, da, cc, carry)
    np.testing.assert_allclose(carry, G[:, 1] @ W_hh, rtol=1e-5)   # W_hh^T dl/da_t, per sequence


@pytest.mark.parametrize("B", [8, 16, 13, 5])    # blocks of 8 sequences, or one at a time
def test_add_columns_adds_each_column_into_its_sequences_row_at_step_t_only(B):
    rng = np.random.default_rng(3)
    n, T, t = 37, 3, 1
    A = rng.normal(size=(B, T, n)).astype(np.float32)
    a = rng.normal(size=(n, B)).astype(np.float32)
    want = A.copy()
    for r in range(B):                      # the plain loop: row r of step t gains column r
        for j in range(n):
            want[r, t, j] += a[j, r]
    steps.add_columns(A, t, a)
    np.testing.assert_array_equal(A, want)
