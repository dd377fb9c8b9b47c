"""Matrix products through the same BLAS that the compiled kernels call.

Numba's ``np.dot`` calls SciPy's OpenBLAS; NumPy's ``@`` calls NumPy's own copy.
Two OpenBLAS libraries keep two thread pools, and with more than one thread
each pool's workers spin after a call and steal the cores the other needs
(measured: attention at T = 128 went from 5.6 ms to 160 ms on 2 threads). Every
product of the kernels therefore goes through this one entry point.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _dot(A, B, out):
    np.dot(A, B, out)


def matmul(A, B, out=None):
    """A @ B for 2-D C- or F-contiguous A and B (transposed views are fine)."""
    if out is None:
        out = np.empty((A.shape[0], B.shape[1]), dtype=A.dtype)
    _dot(A if (A.flags.c_contiguous or A.flags.f_contiguous) else np.ascontiguousarray(A),
         B if (B.flags.c_contiguous or B.flags.f_contiguous) else np.ascontiguousarray(B), out)
    return out


@njit(cache=True)
def gemv_steps(W, h, out, steps):
    """``steps`` dependent matrix-vector products, h <- W h / ||W h||: the RNN's recurrence
    with nothing else, for its multiply rate (the normalisation keeps h finite)."""
    for _ in range(steps):
        np.dot(W, h, out)
        s = 0.0
        for i in range(out.shape[0]):
            s += out[i] * out[i]
        s = np.sqrt(s) + 1e-300
        for i in range(out.shape[0]):
            h[i] = out[i] / s
