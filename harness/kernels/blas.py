"""Matrix products through one BLAS: NumPy's own OpenBLAS, called from the compiled kernels.

Numba's ``np.dot`` calls SciPy's OpenBLAS, a second library beside NumPy's, and NumPy's is
the faster of the two here for float32 products with few rows: (32, 256) @ (256, 256), a
batch-32 recurrence's step, took 58 us on NumPy's OpenBLAS 0.3.31 against 86 on SciPy's 0.3.30,
(128, 256) @ (256, 256) 196 against 221 (AMD EPYC, AVX2, one thread, medians of 9 interleaved
rounds); float64 and large products ran level. ``dot`` is therefore ``np.dot(A, B, out)`` on
NumPy's library: its CBLAS entry points (``scipy_cblas_?gemm64_``, ``?gemv64_``: the ILP64
build that NumPy's wheels ship) are registered with LLVM under names of ours, so compiled
kernels call them directly and stay cacheable. Where NumPy has no such library (a NumPy built
on another BLAS), ``dot`` is Numba's ``np.dot``.

One library also means one thread pool: two OpenBLAS libraries keep two, and with more than
one thread each pool's workers spin after a call and steal the cores the other needs
(measured: attention at T = 128 went from 5.6 ms to 160 ms on 2 threads).

``dot`` takes what ``np.dot`` takes in the kernels, (m, k) @ (k, n), (m, n) @ (n,) and
(m,) @ (m, n) into a preallocated ``out``, and more: any operand whose rows or columns are
contiguous (a column block of a wider matrix, a transposed view) goes to BLAS as it is, with
its leading dimension, never copied.
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
from numba import njit, types
from numba.extending import overload

# CBLAS's enums
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_SYMBOLS = {"sgemm": "scipy_cblas_sgemm64_", "dgemm": "scipy_cblas_dgemm64_",
            "sgemv": "scipy_cblas_sgemv64_", "dgemv": "scipy_cblas_dgemv64_"}


def _numpy_openblas():
    """(path, ctypes library) of NumPy's ILP64 OpenBLAS with every entry point of ``_SYMBOLS``,
    or (None, None)."""
    from threadpoolctl import threadpool_info
    for p in threadpool_info():
        path = str(p.get("filepath", ""))
        if p.get("internal_api") != "openblas" or "openblas64_" not in path:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if all(hasattr(lib, s) for s in _SYMBOLS.values()):
            return path, lib
    return None, None


def _register():
    path, lib = _numpy_openblas()
    if lib is None:
        return None
    for name, symbol in _SYMBOLS.items():
        llvm.add_symbol(f"harness_cblas_{name}", ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    return path


LIBRARY = _register()     # the library ``dot`` calls; None: Numba's np.dot (SciPy's BLAS)

_i32, _i64, _ptr = types.int32, types.int64, types.voidptr


def _gemm_fn(name, real):
    # (order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
    return types.ExternalFunction(f"harness_cblas_{name}", types.void(
        _i32, _i32, _i32, _i64, _i64, _i64, real, _ptr, _i64, _ptr, _i64, real, _ptr, _i64))


def _gemv_fn(name, real):
    # (order, trans, M, N, alpha, A, lda, x, incx, beta, y, incy)
    return types.ExternalFunction(f"harness_cblas_{name}", types.void(
        _i32, _i32, _i64, _i64, real, _ptr, _i64, _ptr, _i64, real, _ptr, _i64))


_FNS = {types.float32: (_gemm_fn("sgemm", types.float32), _gemv_fn("sgemv", types.float32)),
        types.float64: (_gemm_fn("dgemm", types.float64), _gemv_fn("dgemv", types.float64))}


@njit(cache=True)
def _layout(M):
    # A 2-D operand as CBLAS sees it, row-major: (transposed, leading dimension), or (-1, 0)
    # when neither its rows nor its columns are contiguous. A dimension of length 1 has a stride
    # that means nothing, so it never decides.
    r, c = M.shape
    s0, s1 = M.strides[0] // M.itemsize, M.strides[1] // M.itemsize
    if c == 1 or s1 == 1:
        if r == 1:
            return _NO_TRANS, max(c, 1)
        if s0 >= max(c, 1):
            return _NO_TRANS, s0
    if r == 1 or s0 == 1:
        if c == 1:
            return _TRANS, max(r, 1)
        if s1 >= max(r, 1):
            return _TRANS, s1
    return -1, 0


def dot(A, B, out):
    """out[...] = A @ B, as ``np.dot(A, B, out)``: (m, k) @ (k, n), (m, n) @ (n,) or
    (m,) @ (m, n), float32 or float64, one dtype. Compiled code only (``numba.njit``)."""
    np.dot(A, B, out)


def _gemm_impl(gemm, real):
    @njit
    def call(A, B, out, m, n, k, ldc):
        # out (m, n), row-major with leading dimension ldc, = A (m, k) @ B (k, n)
        ta, lda = _layout(A)
        tb, ldb = _layout(B)
        if ta < 0 or tb < 0:               # neither rows nor columns contiguous: a copy
            Ac, Bc = np.ascontiguousarray(A), np.ascontiguousarray(B)
            gemm(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, real(1.0), Ac.ctypes, max(k, 1),
                 Bc.ctypes, max(n, 1), real(0.0), out.ctypes, ldc)
            return
        gemm(_ROW_MAJOR, ta, tb, m, n, k, real(1.0), A.ctypes, lda, B.ctypes, ldb,
             real(0.0), out.ctypes, ldc)

    def impl(A, B, out):
        m, k = A.shape
        n = B.shape[1]
        if B.shape[0] != k or out.shape[0] != m or out.shape[1] != n:
            raise ValueError("dot: the operands' shapes do not match")
        if m == 0 or n == 0:
            return
        if k == 0:
            out.fill(0)
            return
        tc, ldc = _layout(out)
        if tc == _NO_TRANS:
            call(A, B, out, m, n, k, ldc)
        elif tc == _TRANS:                 # a column-major out: out^T = B^T A^T, row-major
            call(B.T, A.T, out, n, m, k, ldc)
        else:
            raise ValueError("dot: out has neither contiguous rows nor contiguous columns")
    return impl


def _gemv_impl(gemv, real, left):
    @njit
    def call(M, x, out, n_in, n_out):
        r, c = M.shape
        tm, ldm = _layout(M)
        if tm < 0:
            Mc = np.ascontiguousarray(M)
            call_rows(Mc, x, out, r, c, _NO_TRANS, max(c, 1), n_in, n_out)
        else:
            call_rows(M, x, out, r, c, tm, ldm, n_in, n_out)

    @njit
    def call_rows(M, x, out, r, c, tm, ldm, n_in, n_out):
        # CBLAS sees M row-major as (r, c) when tm is NO_TRANS, else as its transpose (c, r);
        # y = M x, or M^T x when left (x @ M)
        rows, cols = (r, c) if tm == _NO_TRANS else (c, r)
        trans = _NO_TRANS if (tm == _NO_TRANS) != left else _TRANS
        incx, incy = x.strides[0] // x.itemsize, out.strides[0] // out.itemsize
        gemv(_ROW_MAJOR, trans, rows, cols, real(1.0), M.ctypes, ldm, x.ctypes,
             incx if n_in > 1 else 1, real(0.0), out.ctypes, incy if n_out > 1 else 1)

    def impl(A, B, out):
        M, x = (B, A) if left else (A, B)
        r, c = M.shape
        n_in, n_out = (r, c) if left else (c, r)
        if x.shape[0] != n_in or out.shape[0] != n_out:
            raise ValueError("dot: the operands' shapes do not match")
        if n_out == 0:
            return
        if n_in == 0:
            out.fill(0)
            return
        call(M, x, out, n_in, n_out)
    return impl


@overload(dot)
def _dot_overload(A, B, out):
    if LIBRARY is None or A.dtype not in _FNS or not (A.dtype == B.dtype == out.dtype):
        return lambda A, B, out: np.dot(A, B, out)
    gemm, gemv = _FNS[A.dtype]
    if A.ndim == 2 and B.ndim == 2 and out.ndim == 2:
        return _gemm_impl(gemm, A.dtype)
    if A.ndim + B.ndim == 3 and out.ndim == 1:
        return _gemv_impl(gemv, A.dtype, A.ndim == 1)
    return lambda A, B, out: np.dot(A, B, out)


@njit(cache=True)
def _dot(A, B, out):
    dot(A, B, out)


def matmul(A, B, out=None):
    """A @ B for 2-D arrays (``dot``: transposed views and column blocks go to BLAS uncopied)."""
    if out is None:
        out = np.empty((A.shape[0], B.shape[1]), dtype=A.dtype)
    _dot(A, B, out)
    return out


@njit(cache=True)
def gemv_steps(W, h, out, steps):
    """``steps`` dependent matrix-vector products, h <- W h / ||W h||: the RNN's recurrence
    with nothing else, for its multiply rate (the normalisation keeps h finite)."""
    for _ in range(steps):
        dot(W, h, out)
        s = 0.0
        for i in range(out.shape[0]):
            s += out[i] * out[i]
        s = np.sqrt(s) + 1e-300
        for i in range(out.shape[0]):
            h[i] = out[i] / s
