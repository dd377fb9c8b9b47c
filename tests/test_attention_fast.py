"""The self-attention forward's plain-input path (``attention._fast_forward``) against the
checked path it stands in for: the same results bit for bit, the same errors, the same
projections kept for the backward, and the checked path wherever an input is not plain."""

import numpy as np
import pytest

from harness.infra import workspace
from harness.kernels import attention as at


def _inputs(shape, dtype, seed=0, w_scale=0.25):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(shape).astype(dtype)
    d = shape[-1]
    W = [(rng.standard_normal((d, w)) * w_scale).astype(dtype) for w in (d, d, d + 3)]
    W[1] = W[1][:, :d]                           # Wk shaped as Wq; Wv wider (d_v != d_k)
    return X, W


def _checked(X, W, scale=True, causal=False):
    """The checked path: a numpy bool is not a Python bool, so the plain path declines it."""
    return at.forward(X, *W, scale=np.bool_(scale), causal=np.bool_(causal))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(128, 64), (1, 7, 5), (3, 50, 16)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [False, True])
def test_plain_path_is_the_checked_path_bit_for_bit(dtype, shape, causal, scale):
    X, W = _inputs(shape, dtype)
    assert at._fast_forward(X, *W, scale, causal) is not None     # the plain path runs here
    Y1, A1 = at.forward(X, *W, scale=scale, causal=causal)
    Y2, A2 = _checked(X, W, scale, causal)
    assert Y1.shape == Y2.shape and A1.shape == A2.shape
    assert Y1.dtype == Y2.dtype == dtype
    np.testing.assert_array_equal(Y1, Y2)
    np.testing.assert_array_equal(A1, A2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_backward_reuses_the_plain_paths_projections(dtype):
    X, W = _inputs((2, 40, 12), dtype, seed=1)
    dY = np.random.default_rng(2).standard_normal((2, 40, 15)).astype(dtype)
    Y, A = at.forward(X, *W)
    kept = at._kept_projections(X, tuple(W))
    assert kept is not None                                       # what the backward will reuse
    Xq = X.astype(np.float64) @ W[0].astype(np.float64)
    bound = 4 * X.shape[-1] * np.finfo(dtype).eps * (np.abs(X) @ np.abs(W[0]))   # a dot's rounding
    assert np.all(np.abs(kept[0] - Xq) <= bound)
    g1 = at.backward(X, *W, A, dY)
    workspace.clear()                                             # nothing to reuse: the GEMMs redone
    g2 = at.backward(X, *W, A, dY)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)


def test_an_input_changed_in_place_is_not_reused():
    X, W = _inputs((30, 8), np.float64, seed=3)
    at.forward(X, *W)
    X[4, 2] += 1.0                                   # same object, other values
    assert at._kept_projections(X[None], tuple(W)) is None
    Y, A = at.forward(X, *W)
    Y2, A2 = _checked(X, W)
    np.testing.assert_array_equal(Y, Y2)


def test_a_checked_forward_after_a_plain_one_keeps_its_own_projections():
    X, W = _inputs((20, 6), np.float64, seed=4)
    X2, _ = _inputs((20, 6), np.float64, seed=5)
    at.forward(X, *W)                                # plain: its buffers kept
    _checked(X2, W)                                  # checked: the workspace's own Q, K, V
    assert at._kept_projections(X[None], tuple(W)) is None
    kept = at._kept_projections(X2[None], tuple(W))
    np.testing.assert_allclose(kept[2], (X2 @ W[2])[None], rtol=1e-13)


def _not_plain_cases():
    X, W = _inputs((16, 4), np.float64)
    Xs = np.asfortranarray(X)
    yield "strided X", (Xs, *W), {}
    yield "mixed dtypes", (X.astype(np.float32), *W), {}
    yield "a strided weight", (X, np.asfortranarray(W[0]), W[1], W[2]), {}
    yield "Wk not shaped as Wq", (X, W[0], W[2], W[2]), {}
    yield "a list, not an array", (X.tolist(), *W), {}
    yield "a numpy bool", (X, *W), {"scale": np.True_}
    yield "an int flag", (X, *W), {"causal": 0}
    yield "a zero-length axis", (X[:0], *W), {}
    yield "a 1-D X", (X[0], *W), {}


@pytest.mark.parametrize("what, args, kw", list(_not_plain_cases()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_the_plain_path_declines_what_is_not_plain(what, args, kw):
    kw = {"scale": True, "causal": False, **kw}
    assert at._fast_forward(*args, kw["scale"], kw["causal"]) is None


def test_errors_are_the_checked_paths():
    X, W = _inputs((16, 4), np.float32)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="X holds 1 NaN or inf"):
        at.forward(bad, *W)
    Wbad = [w.copy() for w in W]
    Wbad[1][0, 0] = np.inf
    with pytest.raises(ValueError, match="Wk holds 1 NaN or inf"):
        at.forward(X, *Wbad)
    big = [w * np.float32(1e30) for w in W]          # finite weights, projections past float32
    with pytest.raises(FloatingPointError, match="Q = X Wq overflows float32"):
        at.forward(X * np.float32(1e10), *big)
    assert at._kept_projections(X[None], tuple(W)) is None


@pytest.mark.parametrize("dtype, factor", [(np.float32, 1e19), (np.float64, 1e154)])
def test_scores_that_need_rescaling_go_the_checked_way(dtype, factor):
    X, W = _inputs((12, 4), dtype, seed=6)
    Xb = X * dtype(factor)                           # Q K^T would overflow: _score_range rescales
    assert at._fast_forward(Xb, *W, True, False) is None
    Y, A = at.forward(Xb, *W)
    assert np.isfinite(Y).all() and np.isfinite(A).all()
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, rtol=1e-5)
    Y2, A2 = _checked(Xb, W)
    np.testing.assert_array_equal(Y, Y2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_abs_bits_is_the_largest_magnitude(dtype):
    U, mask, inf = at._U[np.dtype(dtype).itemsize]
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(1001) * 3).astype(dtype)
    m = at._abs_bits(x.view(U), U(mask))
    assert np.array(m, dtype=U).view(dtype) == np.abs(x).max()
    for bad in (np.inf, -np.inf, np.nan):
        y = x.copy()
        y[500] = bad
        assert at._abs_bits(y.view(U), U(mask)) >= U(inf)
    assert at._abs_bits(np.zeros(3, dtype).view(U), U(mask)) == 0


@pytest.mark.parametrize("n", [0, 1, at._SAME_CHUNK - 1, at._SAME_CHUNK, at._SAME_CHUNK + 1,
                               2 * at._SAME_CHUNK + 5])
def test_same_bits_finds_one_flipped_bit_anywhere(n):
    """Every element of a chunk, of the last full chunk and of the tail is looked at: one bit
    flipped at the first, a middle and the last element of each is found; -0.0 is not 0.0."""
    U = np.uint32
    a = np.random.default_rng(n).standard_normal(n).astype(np.float32).view(U)
    assert at._same_bits(a, a.copy())
    where = {0, n // 2, n - 1} | {c for c in (at._SAME_CHUNK - 1, at._SAME_CHUNK) if c < n}
    for i in sorted(w for w in where if 0 <= w < n):
        for bit in (0, 31):
            b = a.copy()
            b[i] ^= U(1 << bit)
            assert not at._same_bits(a, b), (i, bit)
    assert not at._same_bits(a, a[:-1].copy()) if n else at._same_bits(a, a)
    z = np.zeros(3, np.float32)
    assert not at._same_bits(z.view(U), (-z).view(U))


@pytest.mark.parametrize("shape", [(0,), (5,), (3, 7), (2, 9, 4)])
def test_copy_flat_copies_every_bit(shape):
    src = np.random.default_rng(1).standard_normal(shape)
    if src.size:
        src.reshape(-1)[0] = -0.0
    dst = np.full(shape, np.nan)
    at._copy_flat(dst, src)
    assert dst.tobytes() == src.tobytes()


# ---------------------------------------------------------------- the plain backward

def _checked_backward(X, W, A, dY, scale=True, causal=False, Y=None):
    return at.backward(X, *W, A, dY, scale=np.bool_(scale), causal=np.bool_(causal), Y=Y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(128, 64), (3, 50, 16)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_Y", [False, True])
def test_plain_backward_is_the_checked_backward_bit_for_bit(dtype, shape, causal, with_Y):
    X, W = _inputs(shape, dtype, seed=8)
    dY = np.random.default_rng(9).standard_normal(shape[:-1] + (shape[-1] + 3,)).astype(dtype)
    Y, A = at.forward(X, *W, causal=causal)
    fast = at._fast_backward(X, *W, A, dY, True, causal, Y if with_Y else None)
    assert fast is not None                                      # the plain path runs here
    checked = _checked_backward(X, W, A, dY, causal=causal, Y=Y if with_Y else None)
    for a, b in zip(fast, checked):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    g = at.backward(X, *W, A, dY, causal=causal)                 # the public path gives it too
    np.testing.assert_array_equal(g.dX, checked.dX)


def test_plain_backward_declines_what_the_forward_did_not_return():
    X, W = _inputs((40, 6), np.float64, seed=10)
    dY = np.random.default_rng(11).standard_normal((40, 9))
    Y, A = at.forward(X, *W)
    assert at._fast_backward(X, *W, A.copy(), dY, True, False, Y.copy()) is not None  # same values
    A2 = A.copy()
    A2[6] = np.roll(A2[6], 1)                    # still softmax rows (row 6 is sampled)
    assert at._fast_backward(X, *W, A2, dY, True, False, None) is None
    with pytest.raises(ValueError, match="does not match this forward"):
        at.backward(X, *W, A2, dY)               # the checked path names it, as before
    Y2 = Y.copy()
    Y2[6, 2] += 1e-3                             # row 6: one the checked path samples
    assert at._fast_backward(X, *W, A, dY, True, False, Y2) is None
    with pytest.raises(ValueError, match="Y does not match this forward"):
        at.backward(X, *W, A, dY, Y=Y2)
    assert at._fast_backward(X, *W, A, dY, False, False, None) is None        # another scale
    assert at._fast_backward(X, *W, A, dY, True, True, None) is None          # another causal
    X2 = X.copy()
    X2[0, 0] += 1.0
    assert at._fast_backward(X2, *W, A, dY, True, False, None) is None        # another X
    bad = dY.copy()
    bad[1, 1] = np.nan
    assert at._fast_backward(X, *W, A, bad, True, False, None) is None
    with pytest.raises(ValueError, match="dY holds 1 NaN or inf"):
        at.backward(X, *W, A, bad)


def test_plain_backward_after_a_checked_forward_is_declined():
    X, W = _inputs((20, 5), np.float64, seed=12)
    dY = np.random.default_rng(13).standard_normal((20, 8))
    Y, A = at.forward(X, *W)
    _checked(X, W)                               # the kept projections are now the checked path's
    assert at._fast_backward(X, *W, A, dY, True, False, None) is None
    big = _inputs((300, 5), np.float32, seed=14)  # A of 352 KiB: past OUTPUTS_MAX, no copies kept
    Yb, Ab = at.forward(big[0], *big[1])
    assert Ab.nbytes > at.OUTPUTS_MAX
    assert at._fast_backward(big[0], *big[1], Ab, np.ones((300, 8), np.float32), True, False, None) is None


def test_plain_backward_names_a_gradient_that_overflows():
    X, W = _inputs((16, 4), np.float32, seed=15)
    Y, A = at.forward(X, *W)
    dY = np.full((16, 7), 3e38, dtype=np.float32)
    with pytest.raises(FloatingPointError, match="the gradient .* overflows float32"):
        at.backward(X, *W, A, dY)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_copy_made_while_scanning_is_exact_and_finds_what_abs_bits_finds(dtype):
    U, mask, inf = at._U[np.dtype(dtype).itemsize]
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((7, 11)) * 3).astype(dtype)
    x[0, 0] = -0.0
    for bad in (None, np.inf, -np.inf, np.nan):
        src = x.copy()
        if bad is not None:
            src[3, 4] = bad
        dst = np.full_like(src, 5.0)
        m = at._copy_abs_bits(dst, src, U(mask))
        np.testing.assert_array_equal(dst.view(U), src.view(U))       # bit for bit, -0.0 and NaN
        assert m == at._abs_bits(src.reshape(-1).view(U), U(mask))
        assert (m >= U(inf)) == (bad is not None)
    assert at._value_of(at._abs_bits(x.reshape(-1).view(U), U(mask)), x) == np.abs(x).max()
