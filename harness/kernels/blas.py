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

_i32, _i64 = types.int32, types.int64


def _gemm_fn(name, real):
    # (order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); the pointers as
    # 64-bit integers (the same registers in the x86-64 and AArch64 C calling conventions),
    # so that the helpers below take scalars only: one compiled version each per dtype
    return types.ExternalFunction(f"harness_cblas_{name}", types.void(
        _i32, _i32, _i32, _i64, _i64, _i64, real, _i64, _i64, _i64, _i64, real, _i64, _i64))


def _gemv_fn(name, real):
    # (order, trans, M, N, alpha, A, lda, x, incx, beta, y, incy)
    return types.ExternalFunction(f"harness_cblas_{name}", types.void(
        _i32, _i32, _i64, _i64, real, _i64, _i64, _i64, _i64, real, _i64, _i64))


_sgemm, _dgemm = _gemm_fn("sgemm", types.float32), _gemm_fn("dgemm", types.float64)
_sgemv, _dgemv = _gemv_fn("sgemv", types.float32), _gemv_fn("dgemv", types.float64)


@njit(cache=True)
def _layout(r, c, s0, s1):
    # An (r, c) operand with element strides (s0, s1) as CBLAS sees it, row-major:
    # (transposed, leading dimension), or (-1, 0) when neither its rows nor its columns are
    # contiguous. A dimension of length 1 has a stride that means nothing, so it never decides.
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


# The products themselves, on pointers and element strides: scalars only, so each is compiled
# once per dtype however many array types call ``dot`` (compiling a copy per array type, and
# a copying branch for operands that never need one, made the RNN's and GRU's first
# compilation 78 s against 39). Return False where an operand has neither contiguous rows nor
# contiguous columns (the caller copies it; out is never copied). None calls itself: a
# self-recursive helper, compiled with a cached kernel, came back from Numba's cache calling
# address 0 (tests/test_blas.py).

@njit(cache=True)
def _gemm_f32(m, n, k, a, ar, ac, a0, a1, b, br, bc, b0, b1, c, c0, c1):
    tc, ldc = _layout(m, n, c0, c1)
    if tc == _TRANS:                       # a column-major out: out^T = B^T A^T, row-major
        m, n, a, ar, ac, a0, a1, b, br, bc, b0, b1 = n, m, b, bc, br, b1, b0, a, ac, ar, a1, a0
        tc, ldc = _layout(m, n, c1, c0)
    ta, lda = _layout(ar, ac, a0, a1)
    tb, ldb = _layout(br, bc, b0, b1)
    if ta < 0 or tb < 0 or tc < 0:
        return False
    _sgemm(_ROW_MAJOR, ta, tb, m, n, k, np.float32(1.0), a, lda, b, ldb, np.float32(0.0), c, ldc)
    return True


@njit(cache=True)
def _gemm_f64(m, n, k, a, ar, ac, a0, a1, b, br, bc, b0, b1, c, c0, c1):
    tc, ldc = _layout(m, n, c0, c1)
    if tc == _TRANS:
        m, n, a, ar, ac, a0, a1, b, br, bc, b0, b1 = n, m, b, bc, br, b1, b0, a, ac, ar, a1, a0
        tc, ldc = _layout(m, n, c1, c0)
    ta, lda = _layout(ar, ac, a0, a1)
    tb, ldb = _layout(br, bc, b0, b1)
    if ta < 0 or tb < 0 or tc < 0:
        return False
    _dgemm(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc)
    return True


@njit(cache=True)
def _gemv_f32(left, m, mr, mc, m0, m1, x, incx, y, incy, n_in, n_out):
    # y = M x, or M^T x when left (x @ M); CBLAS sees M row-major as (r, c) when tm is
    # NO_TRANS, else as its transpose (c, r)
    tm, ldm = _layout(mr, mc, m0, m1)
    if tm < 0:
        return False
    rows, cols = (mr, mc) if tm == _NO_TRANS else (mc, mr)
    trans = _NO_TRANS if (tm == _NO_TRANS) != left else _TRANS
    _sgemv(_ROW_MAJOR, trans, rows, cols, np.float32(1.0), m, ldm, x,
           incx if n_in > 1 else 1, np.float32(0.0), y, incy if n_out > 1 else 1)
    return True


@njit(cache=True)
def _gemv_f64(left, m, mr, mc, m0, m1, x, incx, y, incy, n_in, n_out):
    tm, ldm = _layout(mr, mc, m0, m1)
    if tm < 0:
        return False
    rows, cols = (mr, mc) if tm == _NO_TRANS else (mc, mr)
    trans = _NO_TRANS if (tm == _NO_TRANS) != left else _TRANS
    _dgemv(_ROW_MAJOR, trans, rows, cols, 1.0, m, ldm, x,
           incx if n_in > 1 else 1, 0.0, y, incy if n_out > 1 else 1)
    return True


_FNS = {types.float32: (_gemm_f32, _gemv_f32), types.float64: (_gemm_f64, _gemv_f64)}


def dot(A, B, out):
    """out[...] = A @ B, as ``np.dot(A, B, out)``: (m, k) @ (k, n), (m, n) @ (n,) or
    (m,) @ (m, n), float32 or float64, one dtype. Compiled code only (``numba.njit``)."""
    np.dot(A, B, out)


def _gemm_impl(gemm, copies):
    # copies: whether A or B may have neither contiguous rows nor columns (an 'A' layout);
    # the copying branch is left out where neither can, as it took 2/3 of the compile time
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
        i = A.itemsize
        c = out.ctypes.data
        c0, c1 = out.strides[0] // i, out.strides[1] // i
        if gemm(m, n, k, A.ctypes.data, m, k, A.strides[0] // i, A.strides[1] // i,
                B.ctypes.data, k, n, B.strides[0] // i, B.strides[1] // i, c, c0, c1):
            return
        if copies and _layout(m, n, c0, c1)[0] >= 0:
            Ac, Bc = np.ascontiguousarray(A), np.ascontiguousarray(B)     # a copy of each
            gemm(m, n, k, Ac.ctypes.data, m, k, k, 1, Bc.ctypes.data, k, n, n, 1, c, c0, c1)
            return
        raise ValueError("dot: out has neither contiguous rows nor contiguous columns")
    return impl


def _gemv_impl(gemv, left, copies):
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
        i = M.itemsize
        incx, incy = x.strides[0] // i, out.strides[0] // i
        if gemv(left, M.ctypes.data, r, c, M.strides[0] // i, M.strides[1] // i,
                x.ctypes.data, incx, out.ctypes.data, incy, n_in, n_out):
            return
        if copies:
            Mc = np.ascontiguousarray(M)
            gemv(left, Mc.ctypes.data, r, c, c, 1, x.ctypes.data, incx, out.ctypes.data, incy,
                 n_in, n_out)
            return
        raise ValueError("dot: the matrix has neither contiguous rows nor contiguous columns")
    return impl


@overload(dot)
def _dot_overload(A, B, out):
    if LIBRARY is None or A.dtype not in _FNS or not (A.dtype == B.dtype == out.dtype):
        return lambda A, B, out: np.dot(A, B, out)
    gemm, gemv = _FNS[A.dtype]
    if A.ndim == 2 and B.ndim == 2 and out.ndim == 2:
        return _gemm_impl(gemm, A.layout == "A" or B.layout == "A")
    if A.ndim + B.ndim == 3 and out.ndim == 1:
        return _gemv_impl(gemv, A.ndim == 1, (B if A.ndim == 1 else A).layout == "A")
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
