"""harness.kernels.lru and its family against the loop twin in tests/naive.py, finite differences,
PyTorch autograd, and the exact gradient path max|lam|^k.

Tolerances (stated once), each a relative error against the largest entry of the
reference: 64-bit kernels (float64, complex128) agree with the complex128 twin to
1e-12 and 32-bit kernels (float32, complex64) to 1e-5; every method agrees with the
sequential one to the same on long sequences; gradients agree with central finite
differences in float64 to 1e-6 and with PyTorch's autograd to 1e-10; the measured
decay agrees with k log10 max|lam| to 1e-9 (absolute, in log10) up to T = 20,000.
"""

from __future__ import annotations

import dataclasses
import math

import numba
import numpy as np
import pytest

import naive
from _deps import require_module
from harness.infra import validate, config
from harness.analysis import compare, gradpath
from harness.kernels import lru
from harness import models
from harness.models import lru as fam
from harness.models import reference

T, D_IN, D_H, NB = 7, 3, 4, 2
TOL = {np.float64: 1e-12, np.float32: 1e-5}
FD_TOL = 1e-6
KINDS = ("real", "complex", "real-lam", "complex-X")   # which of lam, B, X are complex
H0S = ("none", "full", "shared")


def make(seed, prec=np.float64, kind="complex", batched=False, h0="none", t=T, d_in=D_IN, d_h=D_H):
    """Inputs of a stable recurrence (|lam| <= 0.99) of one precision, some of them complex."""
    rng = np.random.default_rng(seed)
    cplx = lru.COMPLEX[np.dtype(prec)]
    shape = (NB, t, d_in) if batched else (t, d_in)
    X = rng.normal(size=shape).astype(prec)
    if kind == "complex-X":
        X = (X + 1j * rng.normal(size=shape)).astype(cplx)
    r = rng.uniform(0.3, 0.99, d_h)
    if kind in ("real", "real-lam"):
        lam = (r * rng.choice([-1.0, 1.0], d_h)).astype(prec)      # negative too
    else:
        lam = (r * np.exp(1j * rng.uniform(-math.pi, math.pi, d_h))).astype(cplx)
    B = rng.normal(size=(d_h, d_in)) * 0.5
    B = B.astype(prec) if kind == "real" else (B + 0.5j * rng.normal(size=(d_h, d_in))).astype(cplx)
    h = None
    if h0 == "full":
        h = rng.normal(size=(NB, d_h) if batched else d_h).astype(prec)
    elif h0 == "shared":
        h = (rng.normal(size=d_h) + 1j * rng.normal(size=d_h)).astype(cplx)
    return X, lam, B, h


def rel(got, want):
    got, want = np.asarray(got, dtype=np.complex128), np.asarray(want, dtype=np.complex128)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


def upstream(H, seed=9):
    rng = np.random.default_rng(seed)
    dH = rng.normal(size=H.shape)
    if H.dtype.kind == "c":
        dH = dH + 1j * rng.normal(size=H.shape)
    return dH.astype(H.dtype)


CASES = [(b, h) for b in (False, True) for h in H0S if b or h != "shared"]


# ----------------------------------------------------------------------------- forward

@pytest.mark.parametrize("method", lru.METHODS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prec", [np.float32, np.float64])
@pytest.mark.parametrize("batched,h0", CASES)
def test_forward_matches_naive(method, kind, prec, batched, h0):
    X, lam, B, h = make(1, prec, kind, batched, h0)
    H = lru.forward(X, lam, B, h, method=method, chunks=3)
    complex_out = kind != "real" or h0 == "shared"
    assert H.dtype == (lru.COMPLEX[np.dtype(prec)] if complex_out else np.dtype(prec))
    assert H.shape == X.shape[:-1] + (D_H,)
    assert rel(H, naive.lru_forward(X, lam, B, h)) <= TOL[prec]


@pytest.mark.parametrize("kind", ["real", "complex"])
@pytest.mark.parametrize("prec", [np.float32, np.float64])
def test_every_method_equals_the_sequential_one_on_long_sequences(kind, prec):
    """T = 5000 on the ring |lam| in [0.9, 0.999] (about 1000 steps of memory), 32 channels.
    Measured (3 seeds): float64 2.3e-15, complex128 3.9e-15, float32 5.3e-7, complex64 5.6e-7."""
    rng = np.random.default_rng(5)
    lam, B = lru.ring_init(32, 0.9, 0.999, math.pi / 10, 0, d_in=8,
                           dtype=lru.COMPLEX[np.dtype(prec)].name)
    if kind == "real":
        lam, B = np.abs(lam).astype(prec), B.real.astype(prec)
    X = rng.normal(size=(5000, 8)).astype(prec)
    ref = lru.forward(X, lam, B, method="sequential")
    for method, chunks in (("blelloch", None), ("chunked", None), ("chunked", 2), ("chunked", 7),
                           ("chunked", 64)):
        assert rel(lru.forward(X, lam, B, method=method, chunks=chunks), ref) <= TOL[prec], \
            (method, chunks)


@pytest.mark.parametrize("t", [1, 2, 3, 5, 8, 13, 16, 31, 64, 100])
def test_any_length_and_chunk_count(t):
    X, lam, B, h = make(2, kind="complex", batched=True, h0="full", t=t)
    ref = naive.lru_forward(X, lam, B, h)
    assert rel(lru.forward(X, lam, B, h, method="blelloch"), ref) <= 1e-12
    for chunks in sorted({1, 2, 3, t - 1, t, t + 5} - {0}):
        assert rel(lru.forward(X, lam, B, h, method="chunked", chunks=chunks), ref) <= 1e-12, chunks


def test_the_scan_reference_and_the_loop_reference_equal_the_kernel():
    """The plain NumPy forwards the tracer runs compute what the kernel computes."""
    for t in (1, 2, 3, 6, 17, 64, 99):
        X, (lam, B) = fam.inputs(t, 5, 1, "float64", t)
        H = lru.forward(X, lam, B)
        assert rel(fam.loop_forward(X, lam, B)[0], H) <= 1e-12
        assert rel(fam.scan_forward(X, lam, B)[0], H) <= 1e-12
        X3, (lam, B) = fam.inputs(t, 5, 3, "float64", t)
        assert rel(fam.scan_forward(X3, lam, B)[0], lru.forward(X3, lam, B)) <= 1e-12


@pytest.mark.parametrize("prec", [np.float32, np.float64])
def test_the_complex_scan_in_real_arithmetic_gives_the_complex_loops_bits(prec):
    X, lam, B, h = make(11, prec, "complex", True, "full", t=150, d_in=5, d_h=37)
    cplx = lru.COMPLEX[np.dtype(prec)]
    U = np.empty(X.shape[:-1] + (37,), dtype=cplx)
    lru._input_products(X, B, U)
    h03 = h.astype(cplx)
    want = U.copy()
    lru._scan_sequential(want, lam, h03, False)            # Numba's complex arithmetic
    got = U.copy()
    lru._scan_complex(got.view(prec), lam.real.copy(), lam.imag.copy(), h03.view(prec))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("prec", [np.float32, np.float64])
@pytest.mark.parametrize("t", [lru.BACK_BLOCK - 1, lru.BACK_BLOCK, 2 * lru.BACK_BLOCK + 5])
def test_the_one_pass_backward_matches_naive_over_several_blocks(prec, t):
    # the sequential complex backward reads its blocks upwards and scans them down: across
    # block edges, G and dlam as the naive loop's, and as the scan-then-sum of the other
    # methods (and dH itself never written)
    X, lam, B, h = make(12, prec, "complex", True, "full", t=t)
    H = lru.forward(X, lam, B, h)
    dH = upstream(H)
    keep = dH.copy()
    g = lru.backward(X, H, lam, B, dH, h)
    assert np.array_equal(dH, keep)
    _check_grads(g, naive.lru_backward(X, lam, B, dH, h), X, lam, B, h, TOL[prec])
    other = lru.backward(X, H, lam, B, dH, h, method="chunked", chunks=1)
    for a, b in zip(g, other):
        assert rel(a, b) <= TOL[prec]
    # a real dH for the complex H (its imaginary part zero) goes through a converted copy
    g = lru.backward(X, H, lam, B, dH.real.copy(), h)
    _check_grads(g, naive.lru_backward(X, lam, B, dH.real.astype(dH.dtype), h), X, lam, B, h,
                 TOL[prec])


def test_scan_multiplications_closed_form():
    for n in range(1, 14):
        assert fam.scan_multiplications(2 ** n) == 2 * 2 ** n - 3
    assert [fam.scan_multiplications(t) for t in (1, 2, 3, 5)] == [0, 1, 2, 6]   # 5: 2 + 2 + 1 + 1


# ---------------------------------------------------------------------------- backward

def _check_grads(g, want, X, lam, B, h, tol):
    dX, dlam, dB, dh0 = want
    for name, got, ref, like in (("dX", g.dX, dX, X), ("dlam", g.dlam, dlam, lam), ("dB", g.dB, dB, B)):
        assert got.shape == like.shape and got.dtype == like.dtype, name
        ref = ref if like.dtype.kind == "c" else ref.real    # a real input: the real part
        assert rel(got, ref) <= tol, name
    if h is not None:
        assert g.dh0.shape == h.shape and g.dh0.dtype == h.dtype
        assert rel(g.dh0, dh0 if h.dtype.kind == "c" else dh0.real) <= tol


@pytest.mark.parametrize("method", lru.METHODS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prec", [np.float32, np.float64])
@pytest.mark.parametrize("batched,h0", CASES)
def test_backward_matches_naive(method, kind, prec, batched, h0):
    X, lam, B, h = make(3, prec, kind, batched, h0)
    H = lru.forward(X, lam, B, h)
    dH = upstream(H)
    g = lru.backward(X, H, lam, B, dH, h, method=method, chunks=3)
    _check_grads(g, naive.lru_backward(X, lam, B, dH, h), X, lam, B, h, TOL[prec])
    if h is None:
        assert g.dh0.shape == ((NB, D_H) if batched else (D_H,)) and g.dh0.dtype == H.dtype


@pytest.mark.parametrize("method", lru.METHODS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batched,h0", [(False, "full"), (True, "shared"), (True, "full")])
def test_backward_matches_finite_differences(method, kind, batched, h0):
    """L = Re sum conj(dH) H, whose gradient in PyTorch's convention is what backward returns."""
    X, lam, B, h = make(4, np.float64, kind, batched, h0, t=5)
    X, lam, B, h = (a.astype(np.complex128) if a.dtype.kind == "c" else a.copy()
                    for a in (X, lam, B, h))
    H = lru.forward(X, lam, B, h)
    dH = upstream(H)

    def loss():
        return float(np.real(np.sum(np.conj(dH) * lru.forward(X, lam, B, h, method=method))))

    g = lru.backward(X, H, lam, B, dH, h, method=method, chunks=2)
    for got, a in ((g.dX, X), (g.dlam, lam), (g.dB, B), (g.dh0, h)):
        num = naive.complex_numeric_grad(loss, a) if a.dtype.kind == "c" else naive.numeric_grad(loss, a)
        assert rel(got, num) <= FD_TOL


@pytest.mark.parametrize("seed", range(6))
def test_backward_matches_torch_autograd_on_random_shapes(seed):
    """PyTorch's autograd on the same recurrence, complex included: torch's .grad for a
    complex leaf is dL/dRe + i dL/dIm, the convention the kernel follows."""
    torch = require_module("torch", "pip install -e '.[torch]'")
    rng = np.random.default_rng(seed)
    t, d_in, d_h = (int(v) for v in rng.integers(1, 40, 3))
    batched = bool(seed % 2)
    kind = KINDS[seed % len(KINDS)]
    X, lam, B, h = make(seed, np.float64, kind, batched, "shared" if batched else "full", t, d_in, d_h)
    H = lru.forward(X, lam, B, h)
    dH = upstream(H, seed)
    leaves = [torch.tensor(a, requires_grad=True) for a in (X, lam, B, h)]
    ct = torch.complex128 if H.dtype.kind == "c" else torch.float64
    Xt, lt, Bt, ht = leaves
    U = Xt.to(ct) @ Bt.to(ct).T
    state, states = ht.to(ct).expand(U.shape[:-2] + (d_h,)), []
    for s in range(t):
        state = lt.to(ct) * state + U[..., s, :]
        states.append(state)
    Ht = torch.stack(states, dim=-2)
    assert rel(H, Ht.detach().numpy()) <= 1e-12
    Ht.backward(torch.tensor(dH))
    for method in lru.METHODS:
        g = lru.backward(X, H, lam, B, dH, h, method=method)
        for got, leaf in zip(g, leaves):
            want = leaf.grad.numpy()
            assert got.shape == want.shape and got.dtype == want.dtype
            assert rel(got, want) <= 1e-10, method


# ------------------------------------------------------------------ inputs and errors

def test_inputs_are_never_written_and_read_only_inputs_work():
    X, lam, B, h = make(6, np.float64, "complex", True, "full")
    for a in (X, lam, B, h):
        a.flags.writeable = False
    copies = [a.copy() for a in (X, lam, B, h)]
    for method in lru.METHODS:
        H = lru.forward(X, lam, B, h, method=method)
        H.flags.writeable = False
        dH = upstream(H)
        dH.flags.writeable = False
        lru.backward(X, H, lam, B, dH, h, method=method)
        for a, c in zip((X, lam, B, h), copies):
            np.testing.assert_array_equal(a, c)


def test_strided_and_fortran_inputs_give_the_same_result():
    X, lam, B, h = make(7, np.float64, "complex", False, "full")
    H = lru.forward(X, lam, B, h)
    big = np.zeros((2 * T, 2 * D_IN))
    big[::2, ::2] = X
    assert rel(lru.forward(big[::2, ::2], lam, np.asfortranarray(B), h), H) == 0.0


def _call(which):
    X, lam, B, h = make(8, np.float64, "complex", False, "full")
    H = lru.forward(X, lam, B, h)
    if which == "forward":
        return lru.forward, dict(X=X, lam=lam, B=B, h0=h)
    return lru.backward, dict(X=X, H=H, lam=lam, B=B, dH=upstream(H), h0=h)


def raises(exc, fn, kw, *needles):
    with pytest.raises(exc) as e:
        fn(**kw)
    msg = str(e.value)
    assert not isinstance(e.value, numba.core.errors.NumbaError)
    for n in needles:
        assert n in msg, msg
    return msg


BAD = [  # argument, value, error, words the message must hold
    ("X", np.ones(5), ValueError, ("X", "2-D or 3-D", "(5,)")),
    ("lam", np.ones((4, 1)), ValueError, ("lam", "1-D", "(4, 1)")),
    ("B", np.ones((4, 5)), ValueError, ("B", "(4, 3)", "(4, 5)")),
    ("h0", np.ones(3), ValueError, ("h0", "(4,)", "(3,)")),
    ("X", np.ones((7, 3), dtype=np.int64), TypeError, ("X", "int64", "astype")),
    ("lam", np.ones(4, dtype=np.complex64), TypeError, ("lam", "complex64", "np.complex128")),
    ("B", np.ones((4, 3), dtype=np.float32), TypeError, ("B", "float32", "np.float64")),
    ("lam", np.array([1.0, np.nan, 0.0, 0.0]), ValueError, ("lam", "NaN or inf")),
    ("B", np.full((4, 3), complex(0, np.inf)), ValueError, ("B", "NaN or inf")),
    ("X", np.ones((0, 3)), ValueError, ("X", "zero-length")),
    ("lam", np.ones(0, dtype=np.complex128), ValueError, ("lam", "zero-length")),
    ("X", np.ma.masked_array(np.ones((7, 3))), TypeError, ("X", "masked")),
    ("B", {"not": "an array"}, TypeError, ("B", "dict")),
    ("method", "parallel", ValueError, ("method", "'parallel'", "sequential")),
    ("chunks", 0, ValueError, ("chunks", ">= 1")),
    ("chunks", 2.0, TypeError, ("chunks", "integer")),
]


@pytest.mark.parametrize("which", ["forward", "backward"])
@pytest.mark.parametrize("arg,value,exc,words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_errors_name_the_argument_and_what_came(which, arg, value, exc, words):
    fn, kw = _call(which)
    kw[arg] = value
    raises(exc, fn, kw, *words)


@pytest.mark.parametrize("arg,value,exc,words", [
    ("H", np.ones((T, D_H)), TypeError, ("H", "float64", "complex128")),
    ("H", np.ones((T + 1, D_H), dtype=np.complex128), ValueError, ("H", f"({T}, {D_H})")),
    ("dH", np.ones((T, D_H - 1), dtype=np.complex128), ValueError, ("dH", f"({T}, {D_H})")),
])
def test_backward_checks_H_and_dH(arg, value, exc, words):
    fn, kw = _call("backward")
    kw[arg] = value
    raises(exc, fn, kw, *words)


def test_complex_dH_for_a_real_H_is_refused():
    X, lam, B, _ = make(8, np.float64, "real")
    H = lru.forward(X, lam, B)
    raises(TypeError, lru.backward, dict(X=X, H=H, lam=lam, B=B, dH=H + 1j), "dH", "real")
    g = lru.backward(X, H, lam, B, H.astype(np.complex128).real)      # a real dH is fine
    assert g.dX.dtype == np.float64


@pytest.mark.parametrize("other", ["lam", "B", "h0", "X"])
def test_backward_refuses_states_of_another_forward_in_any_sequence(other):
    # Before: H from lru.forward(X, lam / 2, B) gave a dlam wrong in every entry, silently.
    X, lam, B, h = make(8, np.float64, "complex", True, "full", t=40)
    args = dict(X=X, lam=lam, B=B, h0=h)
    args[other] = {"lam": lam / 2, "B": 2 * B, "h0": h + 1, "X": X + 1}[other]
    H = lru.forward(**args)
    H[0] = lru.forward(X, lam, B, h)[0]                  # sequence 0 matches; sequence 1 does not
    with pytest.raises(ValueError, match=r"^H does not follow from X, lam, B and h0: at step "
                                         r"t=\d+ of sequence 1"):
        lru.backward(X, H, lam, B, upstream(H), h)


@pytest.mark.parametrize("method", lru.METHODS)
@pytest.mark.parametrize("prec", [np.float32, np.float64])
def test_matching_states_are_never_refused(method, prec):
    """No false alarm: the parallel scans' states too, 2^16 steps on the ring near 1."""
    for seed, (r_min, r_max) in enumerate([(0.3, 0.6), (0.9, 0.999), (0.999, 1.0)]):
        rng = np.random.default_rng(seed)
        cplx = lru.COMPLEX[np.dtype(prec)]
        lam = (rng.uniform(r_min, r_max, 16) * np.exp(1j * rng.uniform(-math.pi, math.pi, 16)))
        B = (rng.normal(size=(16, 8)) + 1j * rng.normal(size=(16, 8))) / 4
        X = rng.normal(size=(2, 2 ** 16, 8)).astype(prec)
        h0 = rng.normal(size=(2, 16)).astype(prec)
        H = lru.forward(X, lam.astype(cplx), B.astype(cplx), h0, method=method)
        lru.backward(X, H, lam.astype(cplx), B.astype(cplx), H, h0, method=method)


@pytest.mark.parametrize("method,lam", [("sequential", 1.5), ("blelloch", 1.5j), ("chunked", -1.5)])
def test_overflow_is_announced_with_lam_and_its_step(method, lam):
    # |lam| = 1.5 over T = 2000: float64 overflows near step 1750 (1.5^1750 ~ 1e308); before,
    # 747 infs (sequential) or 739 NaNs (blelloch) came back.
    X = np.random.default_rng(1).normal(size=(2000, 2))
    with pytest.raises(FloatingPointError, match=r"^the LRU overflowed: h_t is not finite from "
                                                 r"step t=17\d\d of 2000.*max \|lam\| = 1.5 > 1"):
        lru.forward(X, np.array([lam, 0.5]), np.eye(2), method=method)
    H = lru.forward(X[:500], np.array([lam, 0.5]), np.eye(2), method=method)   # 1.5^500: finite
    assert np.isfinite(H).all()
    lam1 = np.array([1.0, 0.5])                          # the reverse scan overflows on dH
    with pytest.raises(FloatingPointError, match=r"dl/dh_t is not finite from step t=\d+ of 2000 "
                                                 r"\(the reverse scan runs from t=T down\).*dH"):
        lru.backward(X, lru.forward(X, lam1, np.eye(2)), lam1, np.eye(2), np.full((2000, 2), 1e306),
                     method=method)


@pytest.mark.parametrize("value", [np.float64(2.0), [[1.0, 2.0]], np.ones((2, 2, 2, 2)), (1.0, 2.0),
                                   np.array([["a", "b"]]), 3.0, np.ones((3, 3), dtype=np.float32)])
@pytest.mark.parametrize("arg", ["X", "lam", "B", "h0", "H", "dH"])
def test_no_numba_error_ever_escapes(arg, value):
    fn, kw = _call("backward" if arg in ("H", "dH") else "forward")
    kw[arg] = value
    try:
        fn(**kw)
    except (ValueError, TypeError, MemoryError) as err:
        assert not isinstance(err, numba.core.errors.NumbaError), repr(err)
        assert "numba" not in str(err).lower(), str(err)


def test_too_big_is_a_memory_error_before_allocating(monkeypatch):
    X = np.ones((2, 2 ** 18, 1))
    lam, B = np.full(64, 0.5), np.ones((64, 1))
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 4096)
    raises(MemoryError, lru.forward, dict(X=X, lam=lam, B=B), "bytes", "LRU")


# -------------------------------------------------------------------------- ring_init

def test_ring_init_draws_on_the_ring_and_folds_gamma_into_B():
    lam, B = lru.ring_init(20000, 0.4, 0.9, 1.0, 3, d_in=6)
    r = np.abs(lam)
    assert lam.dtype == B.dtype == np.complex128 and B.shape == (20000, 6)
    assert r.min() >= 0.4 and r.max() <= 0.9
    assert np.angle(lam).min() >= 0 and np.angle(lam).max() <= 1.0
    # uniform in area: |lam|^2 uniform on [r_min^2, r_max^2]
    assert np.mean(r ** 2) == pytest.approx((0.4 ** 2 + 0.9 ** 2) / 2, abs=3e-3)
    # the rows of B / gamma are (N(0,1) + i N(0,1)) / sqrt(2 d_in): mean |.|^2 = 1 / d_in
    unit = B / np.sqrt(1 - r ** 2)[:, None]
    assert np.mean(np.abs(unit) ** 2) == pytest.approx(1 / 6, rel=0.02)
    # the normalisation: white-noise input gives E|h|^2 = ||B_i||^2 / (1 - |lam_i|^2) ~ 1
    assert np.mean(np.sum(np.abs(B) ** 2, axis=1) / (1 - r ** 2)) == pytest.approx(1.0, rel=0.02)
    same = lru.ring_init(20000, 0.4, 0.9, 1.0, 3, d_in=6)
    np.testing.assert_array_equal(same[0], lam)
    small = lru.ring_init(4, 0.4, 0.9, 1.0, 3, dtype="complex64")
    assert small[0].dtype == small[1].dtype == np.complex64 and small[1].shape == (4, 4)


@pytest.mark.parametrize("kw,exc,word", [
    (dict(r_min=0.5, r_max=0.4), ValueError, "r_min"),
    (dict(r_max=1.5), ValueError, "r_max"),
    (dict(r_min=-0.1), ValueError, "r_min"),
    (dict(max_phase=-1.0), ValueError, "max_phase"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(d_h=0), ValueError, "d_h"),
    (dict(d_in=2.5), TypeError, "d_in"),
    (dict(dtype="float64"), ValueError, "dtype"),
])
def test_ring_init_errors(kw, exc, word):
    args = dict(d_h=4, r_min=0.1, r_max=0.9, max_phase=1.0, seed=0) | kw
    with pytest.raises(exc, match=word):
        lru.ring_init(**args)


# ---------------------------------------------------------------------- gradient path

@pytest.mark.parametrize("r_min", [None, 0.5])              # a circle, and a wide ring
@pytest.mark.parametrize("r_max", config.LRU.decay_r_maxes)
def test_measured_decay_is_k_log10_max_lam_to_1e9_up_to_T20000(r_max, r_min):
    frame = fam.lru_decay(T=20000, d=16, r_max=r_max, r_min=r_min, seed=1)
    err = np.abs(frame.log10_norm - frame.log10_linear).max()
    assert err <= 1e-9, err
    assert frame.sigma_max.iloc[0] <= r_max * (1 + 1e-12) and np.isfinite(frame.log10_norm).all()
    assert (frame.norm_measure == "spectral").all()
    assert frame.distance.tolist() == list(range(1, 20000))


def test_the_ring_near_1_keeps_the_far_signal():
    """0.999^4095 ~ 0.017 against 0.99^4095 ~ 1e-18, measured through the backward."""
    far = {}
    for r in (0.99, 0.999):
        lam = np.full(8, r, dtype=np.complex128) * np.exp(1j * np.linspace(0, 1, 8))
        far[r] = fam.lru_gradient_norms(lam, 4096)[-1] / math.log(10)        # k = 4095
        assert far[r] == pytest.approx(4095 * math.log10(r), abs=1e-9)
    assert 10 ** far[0.999] == pytest.approx(0.0166, rel=0.01)
    assert far[0.99] == pytest.approx(-17.874, abs=1e-3)                 # about 1e-18


def test_gradient_norms_grow_and_vanish_exactly():
    k = np.arange(1, 3000)
    grow = fam.lru_gradient_norms(np.array([1.3, 0.2j, -1.1]), 3000)      # overflows past k = 2700
    assert np.allclose(grow, k * math.log(1.3), rtol=0, atol=1e-8)
    assert np.array_equal(fam.lru_gradient_norms(np.ones(3), 50), np.zeros(49))
    assert np.isneginf(fam.lru_gradient_norms(np.zeros(3), 5)).all()


def test_the_decay_sweep_runs_the_family_beside_the_others():
    cfg = dataclasses.replace(config.DECAY, Ts=(300,), ds=(8,), models=("lru",))
    frame, summary = gradpath.decay_sweep(cfg)
    assert set(frame.model) == {"lru"} and len(summary) == len(config.LRU.decay_r_maxes)
    assert (summary.ln_rate_theory == summary.ln_rate_bound).all() and summary.bound_respected.all()
    assert np.allclose(summary.ln_rate, summary.ln_rate_theory, rtol=0, atol=1e-12)
    assert np.allclose(summary.log10_transient, 0.0, atol=1e-10)
    assert list(summary.rho) == list(config.LRU.decay_r_maxes)


# --------------------------------------------------------------- peers, registry, timing

def test_the_family_is_registered_with_its_forms_and_variants():
    assert "lru" in models.NAMES and models.get("lru") is fam.FAMILY
    assert models.form("lru-scan") == (fam.FAMILY, fam.FAMILY.tracing.forms[1])
    variants = models.variants()
    X, (lam, B) = fam.inputs(50, 6, 1, "float32", 2)
    H = lru.forward(X, lam, B)
    for name in ("lru", "lru-scan", "lru-chunked"):
        _, v = variants[name]
        assert rel(v.call(X, lam, B), H) <= 1e-5
        assert v.macs(50, 6) >= 50 * 36


@pytest.mark.parametrize("kind", ["real", "complex", "real-lam"])
def test_heinsens_log_space_scan_computes_the_recurrence(kind):
    """Negative and complex lam and u go through complex logs; h0 = 0."""
    X, lam, B, _ = make(10, np.float64, kind, True, "none", t=40)
    H = lru.forward(X, lam, B)
    assert rel(reference.lru_heinsen_forward(X, lam, B), H) <= 1e-10
    dH = upstream(H)
    want = lru.backward(X, H, lam, B, dH)
    for got, ref in zip(reference.lru_heinsen_backward(X, H, lam, B, dH), want):
        assert rel(got, ref) <= 1e-10
    for got, ref in zip(reference.lru_backward(X, H, lam, B, dH), want):
        assert rel(got, ref) <= 1e-12
    assert rel(reference.lru_forward(X, lam, B), H) <= 1e-12


def test_compare_peers_include_heinsen_and_agree():
    case = compare.Case("lru", 2, 33, 6, "float64")
    impls = compare.implementations(case, seed=1)
    assert {"harness", "numpy", "heinsen"} <= set(impls)
    y, dx = impls["harness"][2]()
    assert y.dtype == np.float64 and y.shape == (2, 33, 12)       # the real view of H
    for name in ("numpy", "heinsen"):
        y2, dx2 = impls[name][2]()
        assert rel(y2, y) <= 1e-10 and rel(dx2, dx) <= 1e-10, name
    assert fam.compare_target(1, "forward", 2 ** 16, 64)[0] == 2.0


def test_chunked_scaling_is_tidy_with_its_noise_floor():
    cfg = dataclasses.replace(config.LRU, scaling_T=512, scaling_d=4, scaling_rounds=3,
                              scaling_threads=(1,))
    frame = fam.chunked_scaling(cfg)
    assert list(frame.noise_floor) == [False, True]
    assert (frame.seconds > 0).all() and (frame.speedup_low <= frame.speedup_high).all()
    assert frame.speedup.iloc[0] == frame.speedup_low.iloc[0] == 1.0          # the base itself


def test_chunked_scaling_interval_is_scipys_bootstrap_of_the_per_round_ratios(monkeypatch):
    """Each speed-up's interval: scipy's 95 % percentile bootstrap of the median of the per-round
    ratios, on the draws of ``stats.bootstrap_interval`` (2000 from default_rng(seed))."""
    from scipy import stats

    from harness.infra import timing
    load = np.random.default_rng(3).uniform(0.8, 1.25, size=(3, 7))    # 7 rounds per label

    def fake(fns, rounds, min_sample_s, seed=0):                       # 1 thread: 2 s, 2: 1 s
        assert rounds == 7 and min_sample_s == 0.0 and seed == 4
        secs = dict(zip((1, 2, "floor"), (2.0 * load[0], 1.0 * load[1], 2.0 * load[2])))
        return {k: secs[k] for k in fns}, {k: 1 for k in fns}
    monkeypatch.setattr(timing, "time_interleaved", fake)
    cfg = dataclasses.replace(config.LRU, scaling_T=8, scaling_d=2, scaling_rounds=7,
                              scaling_threads=(1, 2))
    frame = fam.chunked_scaling(cfg, seed=4).set_index(["threads", "noise_floor"])
    for (threads, floor), other in (((2, False), 1), ((1, True), 2)):
        ratio = 2.0 * load[0] / (load[other] * (2.0 if floor else 1.0))
        ci = stats.bootstrap((ratio,), np.median, n_resamples=2000, method="percentile",
                             random_state=np.random.default_rng(4)).confidence_interval
        row = frame.loc[(threads, floor)]
        assert row.speedup == np.median(ratio)
        assert (row.speedup_low, row.speedup_high) == pytest.approx((ci.low, ci.high), rel=1e-12)
        assert row.speedup_low < row.speedup_high
