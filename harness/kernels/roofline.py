"""The micro-kernels that measure the machine's ceilings (``harness.analysis.roofline``).

As the Empirical Roofline Toolkit's: a compute kernel whose every element does ``FMA_DEPTH``
dependent fused multiply-adds on data that never leaves L1, so that the arithmetic and not
the memory binds; and STREAM-like bandwidth kernels (a read-only sum, and the triad
a = b + s c) whose arithmetic is one operation per element, so that the memory binds.
Each takes ``passes``: the same array swept that many times in one call, so that a call at
an L1-sized working set lasts long enough to time.
"""

from __future__ import annotations

from numba import njit

# FMAs per element per pass: a chain of this many dependent u <- u x + beta. The elements are
# independent, so the vectorised loop over them gives the out-of-order core many chains at
# once (latency does not bind); one load and one store per FMA_DEPTH FMAs, so L1 does not
# either. Measured on the AMD EPYC (Zen 3) of the project machines: 8 reaches the GEMM's rate,
# 32 (more work per load) falls to a third of it, LLVM no longer unrolling the chain.
FMA_DEPTH = 8
FMA_LANES = 256         # elements of x and y (float64: 4 KiB): L1-resident, many vector chains


@njit(cache=True, fastmath=True)
def fma_chains(x, y, beta, passes):
    """``passes`` sweeps of y_j <- (((y_j x_j + beta) x_j + beta) ...), FMA_DEPTH times:
    2 FMA_DEPTH flops per element per pass. x, y (n,), x in (0, 1) keeps y finite
    (y tends to beta / (1 - x)). fastmath lets LLVM fuse each u x + beta into one FMA."""
    for _ in range(passes):
        for j in range(x.shape[0]):               # independent chains: vectorised by LLVM
            v = x[j]
            u = y[j]
            for _k in range(FMA_DEPTH):           # the dependent chain, unrolled
                u = u * v + beta
            y[j] = u


@njit(cache=True, fastmath=True)
def stream_sum(a, passes):
    """``passes`` read-only sweeps of a (n,): sum(a) each; a.nbytes read per pass.
    fastmath lets LLVM keep several vector partial sums (the adds are reassociated)."""
    s = 0.0
    for _ in range(passes):
        t = 0.0
        for i in range(a.shape[0]):
            t += a[i]
        s += t
    return s


@njit(cache=True, fastmath=True)
def stream_triad(a, b, c, s, passes):
    """``passes`` sweeps of a = b + s c, a, b, c (n,): 3 n itemsize bytes a pass as STREAM
    counts them (b and c read, a written; the write-allocate read of a is not counted)."""
    for _ in range(passes):
        for i in range(a.shape[0]):
            a[i] = b[i] + s * c[i]
