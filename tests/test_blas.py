"""harness.kernels.blas: ``dot`` against NumPy's ``@`` in every layout the kernels hand it."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from numba import njit
from threadpoolctl import threadpool_info

from harness.kernels import blas
from harness.kernels.blas import dot

TOL = {np.float32: 2e-5, np.float64: 1e-13}


@njit(cache=True)
def _call(A, B, out):
    dot(A, B, out)


def _close(got, want, dtype):
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    assert float(np.abs(got - want).max(initial=0.0)) <= TOL[dtype] * scale


def _layouts(a, rng):
    """a as C-contiguous, F-contiguous, a column block of a wider matrix and a row block of a
    taller transposed one (neither contiguous as a whole), and with no contiguous axis."""
    m, n = a.shape
    wide = rng.normal(size=(m, n + 5)).astype(a.dtype)
    wide[:, 2:2 + n] = a
    tall = rng.normal(size=(n, m + 4)).astype(a.dtype)
    tall[:, 1:1 + m] = a.T
    every_other = np.empty((2 * m, 2 * n), a.dtype)
    every_other[::2, ::2] = a
    return {"C": a, "F": np.asfortranarray(a), "column block": wide[:, 2:2 + n],
            "transposed block": tall[:, 1:1 + m].T, "strided": every_other[::2, ::2]}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matrix_products_match_numpy_in_every_layout_of_each_operand_and_of_out(dtype):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(7, 5)).astype(dtype)
    B = rng.normal(size=(5, 3)).astype(dtype)
    want = A @ B
    outs = _layouts(np.zeros((7, 3), dtype), rng)
    del outs["strided"]                      # BLAS cannot write it: refused (below)
    # every pair of operand layouts into a C out, then C operands into every out (each
    # combination of Numba's layouts C, F and A compiles once: a few seconds each, cold)
    cases = [(a, b, outs["C"]) for a in _layouts(A, rng).values() for b in _layouts(B, rng).values()]
    cases += [(A, B, out) for out in outs.values()]
    for a, b, out in cases:
        out[...] = 0.0
        _call(a, b, out)
        _close(out, want, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matrix_vector_products_match_numpy_on_either_side_with_strided_vectors(dtype):
    rng = np.random.default_rng(1)
    M = rng.normal(size=(6, 4)).astype(dtype)
    x, z = rng.normal(size=4).astype(dtype), rng.normal(size=6).astype(dtype)
    for name, m in _layouts(M, rng).items():
        for xs, ys in ((x, np.empty(6, dtype)), (np.repeat(x, 2)[::2], np.empty(12, dtype)[::2])):
            _call(m, xs, ys)
            _close(ys, M @ x, dtype)
        w = np.empty(4, dtype)
        _call(z, m, w)                                   # z @ M = M^T z
        _close(w, z @ M, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mkn", [(0, 3, 2), (3, 0, 2), (3, 2, 0), (1, 1, 1), (1, 5, 1), (5, 1, 5),
                                 (1, 4, 6), (6, 4, 1)])
def test_empty_and_single_row_or_column_products_match_numpy(dtype, mkn):
    # a length-1 axis's stride means nothing to BLAS; k = 0 writes zeros over out
    m, k, n = mkn
    rng = np.random.default_rng(2)
    A, B = rng.normal(size=(m, k)).astype(dtype), rng.normal(size=(k, n)).astype(dtype)
    out = np.full((m, n), 7.0, dtype)
    _call(A, B, out)
    _close(out, A @ B, dtype)
    if m and k:
        y = np.full(m, 7.0, dtype)
        _call(A, B[:, 0] if n else np.zeros(k, dtype), y)
        _close(y, A @ (B[:, 0] if n else np.zeros(k, dtype)), dtype)


def test_mismatched_shapes_and_an_out_blas_cannot_write_are_refused_before_blas_sees_them():
    A, B = np.ones((3, 4)), np.ones((5, 2))
    with pytest.raises(ValueError, match="shapes do not match"):
        _call(A, B, np.empty((3, 2)))
    with pytest.raises(ValueError, match="shapes do not match"):
        _call(A, np.ones(5), np.empty(3))
    with pytest.raises(ValueError, match="neither contiguous rows nor contiguous columns"):
        _call(A, np.ones((4, 2)), np.empty((6, 4))[::2, ::2])


def test_the_kernels_call_numpys_own_openblas_where_numpy_ships_one():
    # NumPy's wheels for Linux ship an ILP64 OpenBLAS (libscipy_openblas64_); there ``dot`` must
    # find and call it, not fall back to SciPy's through Numba's np.dot
    numpy_blas = [p["filepath"] for p in threadpool_info()
                  if p.get("internal_api") == "openblas" and "openblas64_" in p.get("filepath", "")]
    if platform.system() == "Linux":
        assert numpy_blas, "NumPy's OpenBLAS was not found: dot would run on SciPy's"
    if numpy_blas:
        assert blas.LIBRARY in numpy_blas


def test_matmul_allocates_out_when_none_is_given_and_takes_transposed_views():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(5, 4)).astype(np.float32)
    B = rng.normal(size=(6, 4)).astype(np.float32)
    C = blas.matmul(A, B.T)
    assert C.shape == (5, 6) and C.dtype == np.float32
    _close(C, A @ B.T, np.float32)


_RUN = '''
import numpy as np
from harness.kernels import rnn
rng = np.random.default_rng(0)
X = rng.normal(size=(2, 5, 3))
W_xh, W_hh, b = rng.normal(size=(4, 3)), rng.normal(size=(4, 4)) * 0.3, rng.normal(size=4)
H = rnn.forward(X, W_xh, W_hh, b)
g = rnn.backward(X, H, W_xh, W_hh, np.ones_like(H))
print(repr(float(np.abs(H).sum())), repr(float(sum(np.abs(a).sum() for a in g))))
'''


def test_the_kernels_and_dots_helpers_load_from_the_cache_and_run(tmp_path):
    # two processes on one fresh Numba cache: the first compiles the batched float64 RNN, and
    # with it dot's helpers, the second loads them from the cache. A helper that called itself
    # (for a column-major out) came back from the cache calling address 0: the second process
    # died of SIGSEGV.
    import os
    import subprocess
    import sys
    (tmp_path / "run.py").write_text(_RUN)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    outs = []
    for stage in ("compile", "load"):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py")],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (stage, done.returncode, done.stderr[-2000:])
        outs.append(done.stdout)
    assert outs[0] == outs[1]
