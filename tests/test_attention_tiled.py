"""The tiled attention (``return_weights=False``): the same numbers as the materialised
kernel, without its T x T memory; and what the backward checks of what it is given.

Tolerances (stated once), relative to the largest entry of each array: tiled against
materialised, 1e-12 in float64 and 1e-5 in float32 (the issue's targets; measured
1.6e-14 and 4e-6). L against its loop twin in tests/naive.py (float64 scores): 1e-13
in float64 and 1e-6 in float32, relative to the largest |L| (L is float64, computed
from the dtype's scores).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import naive
from harness.kernels import attention as at

TQ, TK = at.TILE_Q, at.TILE_K
# lengths that are not multiples of either tile: 1, each tile's neighbours, primes
LENGTHS = [1, 3, TQ - 1, TQ + 1, TK - 1, TK + 1, 521]
D_MODEL, D_K, D_V, B = 6, 4, 3, 2
DTYPES = [np.float32, np.float64]


def tol(dtype):
    return 1e-12 if dtype == np.float64 else 1e-5


def inputs(seed, T, dtype=np.float64, proj=True, batched=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, T, D_MODEL) if batched else (T, D_MODEL)).astype(dtype)
    W = tuple(rng.normal(size=(D_MODEL, w)).astype(dtype) for w in (D_K, D_K, D_V)) if proj \
        else (None, None, None)
    return X, W


def close(got, want, dtype, scale=0.0):
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    err = naive.rel_err(got, want, scale)
    assert err <= tol(dtype), f"relative error {err:.2e} > {tol(dtype):.0e}"


def logsumexp_reference(X, W, scale, causal):
    """L from float64 scores with NumPy: the loop twin's formula, fast enough for T = 521."""
    X = X.astype(np.float64)
    Q, K = (X, X) if W[0] is None else (X @ W[0].astype(np.float64), X @ W[1].astype(np.float64))
    E = Q @ np.swapaxes(K, -1, -2) * (1 / math.sqrt(Q.shape[-1]) if scale else 1.0)
    if causal:
        E = np.where(np.tri(E.shape[-1], dtype=bool), E, -np.inf)
    m = E.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(E - m).sum(axis=-1, keepdims=True)))[..., 0]


# ---------------------------------------------------------------- tiled = materialised

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("T", LENGTHS)
def test_tiled_forward_and_backward_equal_the_materialised_kernel(dtype, causal, batched, T):
    X, W = inputs(T, T, dtype, proj=T % 2 == 1, batched=batched)
    Y, A = at.forward(X, *W, causal=causal)
    Yt, L = at.forward(X, *W, causal=causal, return_weights=False)
    assert Yt.shape == Y.shape and L.shape == X.shape[:-1] and L.dtype == np.float64
    close(Yt, Y, dtype)
    assert naive.rel_err(L, logsumexp_reference(X, W, True, causal)) <= tol(dtype) / 10
    dY = np.random.default_rng(T + 1).normal(size=Y.shape).astype(dtype)
    want = at.backward(X, *W, A, dY, causal=causal)
    scale = max(np.abs(w).max() for w in want if w is not None)   # at T = 1, dQ = dK = 0
    for got in (at.backward(X, *W, L, dY, causal=causal, Y=Yt),  # Y given: D_i = dY_i . Y_i
                at.backward(X, *W, L, dY, causal=causal)):      # Y recomputed
        for name, g, w in zip(at.AttentionGrads._fields, got, want):
            if w is None:
                assert g is None, name
            else:
                assert g.shape == w.shape, name
                close(g, w, dtype, scale)


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_logsumexp_matches_its_loop_twin(scale, causal):
    X, W = inputs(3, 9, batched=True)
    _, L = at.forward(X, *W, scale=scale, causal=causal, return_weights=False)
    np.testing.assert_allclose(L, naive.attention_logsumexp(X, *W, scale, causal), rtol=1e-12)
    np.testing.assert_allclose(logsumexp_reference(X, W, scale, causal),
                               naive.attention_logsumexp(X, *W, scale, causal), rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_small_tiles_match_the_loop_twins(dtype, causal):
    # Tiles of 3 x 5 on T = 17: many tiles, ragged edges and diagonal tiles, at a tiny cost.
    rng = np.random.default_rng(5)
    T, d = 17, 4
    X = rng.normal(size=(2, T, d)).astype(dtype)
    Y, L = np.empty_like(X), np.empty((2, T))
    c = 1 / math.sqrt(d)
    at._attend_forward_tiled(X, X, X, c, causal, 3, 5, Y, L, np.empty(3 * 5 + 2 * 3 * d, dtype),
                             np.empty(9), np.empty(5, dtype=np.int64))
    Yn, _ = naive.attention_forward(X, causal=causal)
    close(Y, Yn, dtype)
    assert naive.rel_err(L, naive.attention_logsumexp(X, causal=causal)) <= tol(dtype) / 10
    dY = rng.normal(size=X.shape).astype(dtype)
    dQ, dK, dV = (np.empty_like(X) for _ in range(3))
    at._attend_backward_tiled(X, X, X, L, Y, dY, c, c, causal, 3, 5, dQ, dK, dV, np.empty((2, T)),
                              np.empty((3, 2, T)), np.empty((2, T), dtype=np.int64),
                              np.empty(2 * 15 + 3 * d + 5 * d, dtype), np.empty(5, dtype=np.int64))
    close(dQ + dK + dV, naive.attention_backward(X, None, None, None, dY, True, causal)[0], dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_with_L_match_finite_differences(causal):
    X, W = inputs(7, 6)
    G = np.random.default_rng(8).normal(size=(6, D_V))
    Y, L = at.forward(X, *W, causal=causal, return_weights=False)
    got = at.backward(X, *W, L, G, causal=causal, Y=Y)

    def loss():
        return float((G * at.forward(X, *W, causal=causal, return_weights=False)[0]).sum())

    for name, arg in zip(at.AttentionGrads._fields, (X,) + W):
        err = naive.rel_err(getattr(got, name), naive.numeric_grad(loss, arg))
        assert err <= 1e-6, f"{name}: relative error {err:.2e}"


def test_causal_tiles_above_the_diagonal_are_never_read():
    # Keys and values of the second key tile are NaN. A query tile that visited it would
    # carry the NaN into Y (0 * NaN = NaN in the mix, masked or not); the first query tile
    # must come out finite, and in the backward the first rows of dQ too.
    T, d, tq, tk = 8, 3, 4, 4
    X = np.random.default_rng(9).normal(size=(1, T, d))
    K, V = X.copy(), X.copy()
    K[0, tk:] = V[0, tk:] = np.nan
    Y, L = np.empty_like(X), np.empty((1, T))
    at._attend_forward_tiled(X, K, V, 0.5, True, tq, tk, Y, L, np.empty(tq * tk + 2 * tq * d),
                             np.empty(3 * tq), np.empty(tk, dtype=np.int64))
    assert np.isfinite(Y[0, :tq]).all() and np.isfinite(L[0, :tq]).all()
    assert np.isnan(Y[0, tk:]).all()                     # the test can fail: later rows do read it
    dQ, dK, dV = (np.empty_like(X) for _ in range(3))
    at._attend_backward_tiled(X, K, V, L, Y, np.ones_like(X), 0.5, 0.5, True, tq, tk, dQ, dK, dV,
                              np.empty((1, T)), np.empty((3, 1, T)), np.empty((1, T), dtype=np.int64),
                              np.empty(2 * tq * tk + tq * d + tk * d),
                              np.empty(tk, dtype=np.int64))
    assert np.isfinite(dQ[0, :tq]).all()


def test_the_family_passes_y_and_l_between_its_forward_and_backward():
    from harness.models import attention as fam
    X, W = fam.inputs(40, 8, 1, "float64", 0)
    out = fam.tiled_forward(X, *W)
    g = fam.backward_from(X, W, out, out[0])
    want = fam.backward_from(X, W, fam.FAMILY.kernels.forward(X, *W), out[0])
    for a, b in zip(g, want):
        close(a, b, np.float64)
    assert "attention (tiled)" in [v.name for v in fam.TIMED]


# ------------------------------------------------------------- what backward checks

def _case(causal=False, T=12):
    X, W = inputs(11, T)
    Y, A = at.forward(X, *W, causal=causal)
    Yt, L = at.forward(X, *W, causal=causal, return_weights=False)
    dY = np.random.default_rng(12).normal(size=Y.shape)
    return X, W, Y, A, L, dY


@pytest.mark.parametrize("with_y", [True, False])
@pytest.mark.parametrize("other", ["X", "scale", "double", "causal"])
def test_L_from_another_forward_is_refused(other, with_y):
    X, W, Y, A, L, dY = _case()
    if other == "X":
        L = at.forward(X + 0.5, *W, return_weights=False)[1]
    elif other == "scale":
        L = at.forward(X, *W, scale=False, return_weights=False)[1]
    elif other == "causal":
        L = at.forward(X, *W, causal=True, return_weights=False)[1]
    else:
        L = 2 * L
    with pytest.raises(ValueError, match=r"^A \(here L, the row log-sum-exp\) does not match"):
        at.backward(X, *W, L, dY, Y=Y if with_y else None)


@pytest.mark.parametrize("kind", ["weights", "L"])
def test_y_from_another_forward_is_refused(kind):
    X, W, Y, A, L, dY = _case()
    Y_other = at.forward(X + 0.5, *W)[0]
    with pytest.raises(ValueError, match=r"^Y does not match this forward"):
        at.backward(X, *W, A if kind == "weights" else L, dY, Y=Y_other)


def test_L_with_a_wrong_shape_names_both_shapes():
    X, W, Y, A, L, dY = _case()
    with pytest.raises(ValueError, match=r"A must have shape \(12, 12\) \(the weights\) or \(12,\)"):
        at.backward(X, *W, L[:-1], dY, Y=Y)


def test_return_weights_must_be_a_bool():
    with pytest.raises(TypeError, match="return_weights must be True or False"):
        at.forward(np.ones((3, 2)), return_weights="no")


# ------------------------------------------------------- a saturated softmax, from L

def _longdouble_grads(X, W, dY, causal):
    """dX and dWv of self-attention in np.longdouble from X's own values (the softmax's
    backward written out): the reference where the weights are one-hot to the last bit."""
    X, dY = X.astype(np.longdouble), dY.astype(np.longdouble)
    Wq, Wk, Wv = W if W[0] is None else (w.astype(np.longdouble) for w in W)
    Q, K, V = (X, X, X) if Wq is None else (X @ Wq, X @ Wk, X @ Wv)
    c = 1 / np.sqrt(np.longdouble(Q.shape[1]))
    E = Q @ K.T * c
    if causal:
        E = np.where(np.tri(E.shape[0], dtype=bool), E, -np.inf)
    A = np.exp(E - E.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    dA = dY @ V.T
    dE = A * (dA - (A * dA).sum(axis=1, keepdims=True))
    dQ, dK, dV = c * dE @ K, c * dE.T @ Q, A.T @ dY
    if Wq is None:
        return dQ + dK + dV, None
    return dQ @ Wq.T + dK @ Wk.T + dV @ Wv.T, X.T @ dV


@pytest.mark.parametrize("dtype,scale,T,proj,causal", [
    (np.float32, 1e3, 64, False, False), (np.float32, 1e5, 64, False, False),
    (np.float64, 1e8, 64, False, False),
    (np.float32, 1e3, TK + 7, True, True), (np.float64, 1e6, TK + 7, True, True),   # 2 x 3 tiles
])
def test_the_backward_from_L_is_right_where_the_softmax_saturates(dtype, scale, T, proj, causal):
    # X ~ N(0, 1) times 1e3 (float32) or 1e8 (float64): every row of A is one-hot. From L,
    # dX was 28 % (float32, 1e3) and 545 times (float64, 1e8) off the long-double twin, which
    # the path from A meets to 3e-8 and 1e-16: exp(S - L) rounded away log l (float32), L's
    # own rounding is 8 at 7e16 (float64), and D = dY . Y is not the rounded dP's sum.
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((T, 8)) * scale).astype(dtype)
    W = tuple(rng.standard_normal((8, 8)).astype(dtype) for _ in range(3)) if proj else (None,) * 3
    dY = rng.standard_normal((T, 8)).astype(dtype)
    want_dX, want_dWv = _longdouble_grads(X, W, dY, causal)
    Y, A = at.forward(X, *W, causal=causal)
    Yt, L = at.forward(X, *W, causal=causal, return_weights=False)
    for got in (at.backward(X, *W, A, dY, causal=causal, Y=Y),         # the weights: right before
                at.backward(X, *W, L, dY, causal=causal, Y=Yt),
                at.backward(X, *W, L, dY, causal=causal)):               # Y recomputed
        assert naive.rel_err(got.dX, want_dX) <= tol(dtype)
        if proj:
            assert naive.rel_err(got.dWv, want_dWv) <= tol(dtype)


def test_L_too_coarse_for_weights_that_are_not_saturated_is_refused():
    # Every query ties 8 keys (the rows are +-v): 8 weights of 1/8 a row. At X * 1e8 in
    # float64, L ~ 1.2e16 is held to +-2, so exp(S - L) sums to 0.47, and no largest
    # weight can take the error out; before, dX came back 3.6 times off, silently.
    rng = np.random.default_rng(0)
    X = np.tile(rng.standard_normal(8), (16, 1)) * 1e8
    X[::2] *= -1
    dY = rng.standard_normal((16, 8))
    Y, L = at.forward(X, return_weights=False)
    with pytest.raises(ValueError, match=r"^A \(here L, the row log-sum-exp\) is too coarse .* "
                                         r"sum to 0.47\d+, not 1, in a row that is not saturated"):
        at.backward(X, None, None, None, L, dY, Y=Y)
    A = at.forward(X)[1]                                   # the weights themselves: fine
    want, _ = _longdouble_grads(X, (None,) * 3, dY, False)
    assert naive.rel_err(at.backward(X, None, None, None, A, dY).dX, want) <= tol(np.float64)


# ------------------------------------------------------------------------- memory

_PEAK = r"""
import json, sys
import numpy as np
from harness.kernels import attention as at

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))

T, d = int(sys.argv[1]), int(sys.argv[2])
X0, W0 = np.ones((300, d), np.float32), [np.eye(d, dtype=np.float32)] * 3
at.backward(X0, *W0, at.forward(X0, *W0, return_weights=False)[1], X0)   # compile, cache load
rng = np.random.default_rng(0)
X = rng.standard_normal((T, d)).astype(np.float32)
W = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for _ in range(3)]
dY = rng.standard_normal((T, d)).astype(np.float32)
with open("/proc/self/clear_refs", "w") as f:   # VmHWM := VmRSS now (Linux >= 4.0): the
    f.write("5")                                 # warm-up's own peak cannot hide the kernels'
base = rss("VmRSS:")
Y, L = at.forward(X, *W, return_weights=False)
g = at.backward(X, *W, L, dY, Y=Y if sys.argv[3] == "Y" else None)
out = Y.nbytes + L.nbytes + sum(a.nbytes for a in g)
print(json.dumps({"extra": rss("VmHWM:") - base - out, "grid": T * T * 4}))
"""


def test_tiled_forward_backward_memory_grows_like_T():
    # The long-attention issue's bound: 64 MiB beyond inputs and outputs at T = 32,768, d = 64,
    # float32, forward and backward, as peak resident memory in a fresh process. Every part
    # grows like T, so here, at T = 16,384 (a float32 T x T grid would be 1 GiB), 32 MiB.
    # Where the bytes go at T = 32,768 (8 MiB a (T, d) array): Q, K, V kept for the backward
    # 24 MiB, dQ, dK, dV 24 MiB, Y recomputed when the backward is not given it 8 MiB, the
    # per-row statistics (D, the row fix-ups, float64) 1.25 MiB, the tiles ~2 MiB, and the
    # NaN checks' masks 2 MiB for a moment. A copy of X, kept to recognise the forward's X,
    # was 8 MiB more: 68 MiB (issue 27 measured 67) with Y recomputed and every allocation
    # mapped on its own (MALLOC_MMAP_THRESHOLD_); a digest of X replaces it. Both allocator
    # settings are measured: glibc's default reuses freed heap memory, and reads lower.
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    runs = [(env, "Y"), (dict(env, MALLOC_MMAP_THRESHOLD_="65536"), "none")]
    children = [subprocess.Popen([sys.executable, "-c", _PEAK, "16384", "64", y], cwd=root,
                                 env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for e, y in runs]                      # two at once: the machine's two cores
    for (e, y), p in zip(runs, children):
        stdout, stderr = p.communicate(timeout=600)      # minutes under a load of 15
        assert p.returncode == 0, stderr
        got = json.loads(stdout.strip().splitlines()[-1])
        how = f"Y={y}, MALLOC_MMAP_THRESHOLD_={e.get('MALLOC_MMAP_THRESHOLD_', 'unset')}"
        assert got["extra"] <= 32 * 2**20, f"{got['extra'] / 2**20:.1f} MiB beyond inputs and outputs ({how})"
        assert got["extra"] < got["grid"] / 16


# ------------------------------------------------------- the gradient path at long T

def test_attention_path_in_chunks_equals_it_whole(monkeypatch):
    from harness.models import attention as fam
    whole = fam.attention_paths(T=40, d=5, seed=3, input_scale=2.0)
    monkeypatch.setattr(fam, "PATH_CHUNK", 7)                # 39 distances in 6 chunks
    chunked = fam.attention_paths(T=40, d=5, seed=3, input_scale=2.0)
    assert chunked.equals(whole)


def test_attention_path_memory_is_linear_in_T_and_covers_the_peak():
    import tracemalloc
    from harness.models import attention as fam
    T, d = 6000, 8                                           # 3 chunks
    tracemalloc.start()
    try:
        frame = fam.attention_paths(T=T, d=d, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.isfinite(frame.log10_norm).all() and len(frame) == T - 1
    (est,) = fam.path_memory(T, d, None).values()
    assert peak <= est, f"peak {peak:,} B over the estimate {est:,} B"
    # the length: tens of MiB, where all T - 1 Jacobians at once would be 3 x 164 MB
    (at_20k,) = fam.path_memory(20_000, 32, None).values()
    assert at_20k < 100 * 2**20 < 3 * 19_999 * 32 * 32 * 8
