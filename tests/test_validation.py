"""The public boundary of every kernel: bad input gets a clear error and nothing else,
good input is never written to, non-contiguous input works without a warning, and
the output dtype is the input dtype.

One registry, CALLS, builds valid arguments for each public function; every
bad-input case of issue 2's table is a parametrised test of its own, per
function and per argument. The analysers' errors name their argument too
(``_bad_calls``, at the end), and their smallest accepted values pass.
"""

from __future__ import annotations

import dataclasses
import re
import tracemalloc
import warnings

import numba.core.errors
import numpy as np
import pytest

from _helpers import _rnn_inputs
from harness.infra import config, validate
from harness.kernels import attention as at
from harness.kernels import rnn
from harness.models import RECURRENCE

T, D_IN, D_H, B = 5, 3, 4, 2          # RNN
D_MODEL, D_K, D_V = 4, 3, 2            # self-attention
T_Y, T_X, D_A = 4, 5, 2                # additive attention (d_h = D_H - 1 = 3)


def _rnn_fwd(dtype, batched):
    rng = np.random.default_rng(0)
    lead = (B, T) if batched else (T,)
    return dict(X=rng.normal(size=lead + (D_IN,)), W_xh=rng.normal(size=(D_H, D_IN)) * 0.5,
                W_hh=rng.normal(size=(D_H, D_H)) * 0.4, b=rng.normal(size=D_H),
                h0=rng.normal(size=(B, D_H) if batched else D_H))


def _rnn_bwd(dtype, batched):
    kw = _rnn_fwd(dtype, batched)
    H = rnn.forward(**kw)
    del kw["b"]
    return dict(kw, H=H, dH=np.random.default_rng(1).normal(size=H.shape))


def _att_fwd(dtype, batched):
    rng = np.random.default_rng(2)
    lead = (B, T) if batched else (T,)
    return dict(X=rng.normal(size=lead + (D_MODEL,)), Wq=rng.normal(size=(D_MODEL, D_K)),
                Wk=rng.normal(size=(D_MODEL, D_K)), Wv=rng.normal(size=(D_MODEL, D_V)))


def _att_bwd(dtype, batched):
    kw = _att_fwd(dtype, batched)
    Y, A = at.forward(**kw)
    return dict(kw, A=A, dY=np.random.default_rng(3).normal(size=Y.shape))


def _align(dtype, batched):
    rng = np.random.default_rng(4)
    d_h = D_H - 1
    return dict(S=rng.normal(size=(T_Y, d_h)), H=rng.normal(size=(T_X, d_h)),
                Wsa=rng.normal(size=(D_A, d_h)), Wha=rng.normal(size=(D_A, d_h)),
                va=rng.normal(size=D_A))


def _align_bwd(dtype, batched):
    return dict(_align(dtype, batched), dC=np.random.default_rng(5).normal(size=(T_Y, D_H - 1)))


# name -> (function, builder, its array arguments in the order the function checks them,
#          whether it takes a batch)
CALLS = {
    "rnn.forward": (rnn.forward, _rnn_fwd, ["X", "W_xh", "W_hh", "b", "h0"], True),
    "rnn.backward": (rnn.backward, _rnn_bwd, ["X", "H", "W_xh", "W_hh", "dH", "h0"], True),
    "attention.forward": (at.forward, _att_fwd, ["X", "Wq", "Wk", "Wv"], True),
    "attention.backward": (at.backward, _att_bwd, ["X", "Wq", "Wk", "Wv", "A", "dY"], True),
    "attention.alignment": (at.alignment, _align, ["S", "H", "Wsa", "Wha", "va"], False),
    "attention.alignment_backward": (at.alignment_backward, _align_bwd,
                                     ["S", "H", "Wsa", "Wha", "va", "dC"], False),
}


def build(call, dtype=np.float64, batched=False):
    fn, make, _, _ = CALLS[call]
    kw = make(dtype, batched)
    return fn, {k: v.astype(dtype) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


def raises(exc, fn, kw, *fragments):
    """fn(**kw) raises exactly ``exc`` (never a Numba error) whose message holds every fragment."""
    with pytest.raises(Exception) as info:
        fn(**kw)
    err = info.value
    assert not isinstance(err, numba.core.errors.NumbaError), repr(err)
    assert type(err) is exc, repr(err)
    msg = str(err)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


ARGS = [(call, arg) for call, (_, _, args, _) in CALLS.items() for arg in args]
ARG_IDS = [f"{c}-{a}" for c, a in ARGS]


# ------------------------------------------------------------------- wrong ndim

@pytest.mark.parametrize("call,arg", ARGS, ids=ARG_IDS)
def test_wrong_ndim_names_the_argument_and_its_shape(call, arg):
    fn, kw = build(call)
    bad = kw[arg][None, None]                 # two extra axes: never an accepted ndim
    kw[arg] = bad
    raises(ValueError, fn, kw, arg, str(bad.shape))


@pytest.mark.parametrize("call", ["rnn.forward", "attention.forward", "attention.alignment"])
def test_zero_dimensional_input_is_a_value_error(call):
    fn, kw = build(call)
    first = CALLS[call][2][0]
    kw[first] = np.float64(1.0)
    raises(ValueError, fn, kw, first)


# ------------------------------------------------------------- mismatched shapes

# (call, argument, batched, new shape as a function of the valid one, expected shape in the message)
MISMATCH = [
    ("rnn.forward", "W_xh", False, lambda s: (s[0], s[1] + 1), f"({D_H}, {D_IN})"),
    ("rnn.forward", "W_hh", False, lambda s: (s[0], s[1] + 1), f"({D_H}, {D_H})"),
    ("rnn.forward", "b", False, lambda s: (s[0] + 1,), f"({D_H},)"),
    ("rnn.forward", "h0", False, lambda s: (s[0] + 1,), f"({D_H},)"),
    ("rnn.forward", "h0", True, lambda s: (s[0] + 1, s[1]), f"({B}, {D_H})"),
    ("rnn.forward", "h0", True, lambda s: (s[1] + 1,), f"({D_H},)"),
    ("rnn.backward", "H", False, lambda s: (s[0] + 1, s[1]), f"({T}, {D_H})"),
    ("rnn.backward", "H", True, lambda s: (s[0], s[1], s[2] + 1), f"({B}, {T}, {D_H})"),
    ("rnn.backward", "dH", False, lambda s: (s[0], s[1] + 1), f"({T}, {D_H})"),
    ("rnn.backward", "W_xh", False, lambda s: (s[0], s[1] + 1), f"({D_H}, {D_IN})"),
    ("rnn.backward", "h0", True, lambda s: (s[0] + 1, s[1]), f"({B}, {D_H})"),
    ("attention.forward", "Wq", False, lambda s: (s[0] + 1, s[1]), f"({D_MODEL}, "),
    ("attention.forward", "Wk", False, lambda s: (s[0], s[1] + 1), f"({D_MODEL}, {D_K})"),
    ("attention.forward", "Wv", False, lambda s: (s[0] + 1, s[1]), f"({D_MODEL}, "),
    ("attention.backward", "Wk", True, lambda s: (s[0] + 1, s[1]), f"({D_MODEL}, {D_K})"),
    ("attention.backward", "A", False, lambda s: (s[0], s[1] + 1), f"({T}, {T})"),
    ("attention.backward", "A", True, lambda s: (s[0], s[1], s[2] + 1), f"({B}, {T}, {T})"),
    ("attention.backward", "dY", False, lambda s: (s[0], s[1] + 1), f"({T}, {D_V})"),
    ("attention.backward", "dY", True, lambda s: (s[0] + 1, s[1], s[2]), f"({B}, {T}, {D_V})"),
    # H may be wider than S (d_h != d_s): then Wha's columns must follow H's width
    ("attention.alignment", "Wha", False, lambda s: (s[0], s[1] + 1), f"({D_A}, {D_H - 1})"),
    ("attention.alignment", "Wsa", False, lambda s: (s[0], s[1] + 1), f"(d_a, {D_H - 1})"),
    ("attention.alignment", "Wha", False, lambda s: (s[0] + 1, s[1]), f"({D_A}, {D_H - 1})"),
    ("attention.alignment", "va", False, lambda s: (s[0] + 1,), f"({D_A},)"),
    ("attention.alignment_backward", "dC", False, lambda s: (s[0] + 1, s[1]), f"({T_Y}, {D_H - 1})"),
]


@pytest.mark.parametrize("call,arg,batched,reshape,expected", MISMATCH,
                         ids=[f"{c}-{a}-{'batched' if b else 'single'}-{i}"
                              for i, (c, a, b, _, _) in enumerate(MISMATCH)])
def test_mismatched_shape_names_the_argument_and_both_shapes(call, arg, batched, reshape, expected):
    fn, kw = build(call, batched=batched)
    shape = reshape(kw[arg].shape)
    kw[arg] = np.random.default_rng(6).normal(size=shape)
    # the shape the user passed, not an internal reshaping of it
    raises(ValueError, fn, kw, arg, expected, str(shape))


def test_projections_all_or_none():
    fn, kw = build("attention.forward")
    kw["Wk"] = None
    raises(ValueError, fn, kw, "Wq, Wk and Wv")


# ----------------------------------------------------------------------- dtypes

def _as(dtype_name, x):
    if dtype_name == "object":
        return x.astype(object)
    return (x * 3).astype(dtype_name)


@pytest.mark.parametrize("dtype", ["int64", "int32", "complex128", "object", "float16", "bool"])
@pytest.mark.parametrize("call,arg", ARGS, ids=ARG_IDS)
def test_non_float_dtype_is_a_type_error_saying_what_to_pass(call, arg, dtype):
    fn, kw = build(call)
    kw[arg] = _as(dtype, kw[arg])
    raises(TypeError, fn, kw, arg, "float32 or float64", "astype")


@pytest.mark.parametrize("odd", [np.float32, np.float64])
@pytest.mark.parametrize("call,arg", ARGS, ids=ARG_IDS)
def test_mixed_dtypes_are_a_type_error(call, arg, odd):
    rest = np.float32 if odd == np.float64 else np.float64
    fn, kw = build(call, rest)
    kw[arg] = kw[arg].astype(odd)
    # the first argument sets the dtype: when it is the odd one, another argument is named
    named = [arg] if arg != CALLS[call][2][0] else []
    raises(TypeError, fn, kw, *named, "astype", "mixed")


@pytest.mark.parametrize("call", list(CALLS))
def test_something_that_is_not_an_array_is_a_type_error(call):
    fn, kw = build(call)
    first = CALLS[call][2][0]
    kw[first] = {"not": "an array"}
    raises(TypeError, fn, kw, first)


# ------------------------------------------------------------------ NaN and inf

@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("call,arg", ARGS, ids=ARG_IDS)
def test_non_finite_input_names_the_argument(call, arg, value):
    fn, kw = build(call)
    bad = kw[arg].copy()
    bad.flat[bad.size // 2] = value
    kw[arg] = bad
    raises(ValueError, fn, kw, arg, "NaN or inf")


# ------------------------------------------------------------ T = 0, zero widths

ZERO = [(call, arg, axis, batched)
        for call, (_, make, args, takes_batch) in CALLS.items()
        for batched in ((False, True) if takes_batch else (False,))
        for arg in args
        for axis in range(make(np.float64, batched)[arg].ndim)]


@pytest.mark.parametrize("call,arg,axis,batched", ZERO,
                         ids=[f"{c}-{a}-axis{x}-{'batched' if b else 'single'}" for c, a, x, b in ZERO])
def test_zero_length_axis_names_the_argument(call, arg, axis, batched):
    fn, kw = build(call, batched=batched)
    shape = list(kw[arg].shape)
    shape[axis] = 0
    kw[arg] = np.zeros(shape)
    raises(ValueError, fn, kw, arg, "zero-length")


# ---------------------------------------------------------------------- memory

def _needed(msg):
    m = re.search(r"needs ([\d,]+) bytes", msg)
    assert m, msg
    return int(m.group(1).replace(",", ""))


N = 4096      # one float64 T x T grid at T = N is 128 MiB: past any "too small to check" shortcut
MEMORY = [   # call, arguments, the bytes at least one T x T (or T_y x T_x) grid takes
    ("attention.forward", lambda: dict(X=np.ones((N, 1))), N * N * 8),
    ("attention.forward-batched", lambda: dict(X=np.ones((3, N // 2, 1))), 3 * (N // 2) ** 2 * 8),
    ("attention.backward", lambda: dict(X=np.ones((N, 1)), Wq=None, Wk=None, Wv=None,
                                        A=np.full((N, N), 1.0 / N), dY=np.ones((N, 1))),
     N * N * 8),
    ("attention.alignment", lambda: dict(S=np.ones((N, 1)), H=np.ones((N, 1)),
                                         Wsa=np.ones((1, 1)), Wha=np.ones((1, 1)), va=np.ones(1)),
     N * N * 8),
    ("attention.alignment_backward", lambda: dict(S=np.ones((N, 1)), H=np.ones((N, 1)),
                                                  Wsa=np.ones((1, 1)), Wha=np.ones((1, 1)),
                                                  va=np.ones(1), dC=np.ones((N, 1))),
     N * N * 8),
    ("rnn.forward", lambda: dict(X=np.ones((2, 2 ** 18, 1)), W_xh=np.ones((64, 1)),
                                 W_hh=np.eye(64) * 0.5), 2 * 2 ** 18 * 64 * 8),
]


@pytest.mark.parametrize("call,make,at_least", MEMORY, ids=[m[0] for m in MEMORY])
def test_too_big_is_a_memory_error_before_allocating(monkeypatch, call, make, at_least):
    fn = CALLS[call.replace("-batched", "")][0]
    kw = make()
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 4096)
    tracemalloc.start()
    try:
        msg = raises(MemoryError, fn, kw, "bytes")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _needed(msg) >= at_least
    # nothing the size of the grid was allocated before the error: numpy reports to tracemalloc
    assert peak < at_least / 2, f"{peak:,} bytes allocated before the MemoryError"


def test_memory_check_sees_the_real_machine():
    # Without the patch, T = 2**17 asks for 128 GiB per T x T float64 grid, more than any CI box has.
    avail = validate.available_memory_bytes()
    if avail > 2 ** 37:
        pytest.skip(f"this machine has {avail:,} bytes available")
    X = np.ones((2 ** 17, 1))
    msg = raises(MemoryError, at.forward, dict(X=X), "bytes")
    assert _needed(msg) >= 2 ** 34 * 8


# --------------------------------------------------------------- choice arguments

@pytest.mark.parametrize("bad", ["relu", "Tanh", "", None, "linear"])
@pytest.mark.parametrize("call", ["rnn.forward", "rnn.backward"])
def test_bad_activation_name(call, bad):
    fn, kw = build(call)
    kw["activation"] = bad
    raises(ValueError, fn, kw, "activation", repr(bad))


@pytest.mark.parametrize("bad", ["relu", "TANH", "identity", "none", 0])
@pytest.mark.parametrize("call", ["attention.alignment", "attention.alignment_backward"])
def test_bad_nonlinearity_name(call, bad):
    fn, kw = build(call)
    kw["nonlinearity"] = bad
    raises(ValueError, fn, kw, "nonlinearity", repr(bad))


@pytest.mark.parametrize("flag", ["scale", "causal"])
@pytest.mark.parametrize("bad", ["yes", 1, None, np.float64(1.0)])
@pytest.mark.parametrize("call", ["attention.forward", "attention.backward"])
def test_scale_and_causal_must_be_booleans(call, flag, bad):
    fn, kw = build(call)
    kw[flag] = bad
    raises(TypeError, fn, kw, flag)


# ---------------------------------------------------------- nothing from Numba escapes

GARBAGE = [np.float64(2.0), [[1.0, 2.0]], np.ones((2, 2, 2, 2)), np.ones((1, 1)), np.ones(7),
           np.ones((3, 3), dtype=np.float32), np.array([["a", "b"]]), (1.0, 2.0), 3.0]


@pytest.mark.parametrize("g", range(len(GARBAGE)))
@pytest.mark.parametrize("call,arg", ARGS, ids=ARG_IDS)
def test_no_numba_error_ever_escapes(call, arg, g):
    fn, kw = build(call)
    kw[arg] = GARBAGE[g]
    try:
        fn(**kw)
    except (ValueError, TypeError, MemoryError) as err:
        assert not isinstance(err, numba.core.errors.NumbaError), repr(err)
        assert "numba" not in str(err).lower(), str(err)


# --------------------------------------------------- inputs untouched, layouts, dtypes

def _fortran(x):
    return np.asfortranarray(x)


def _strided(x):
    big = np.zeros(tuple(2 * n for n in x.shape), dtype=x.dtype)
    view = big[tuple(slice(None, None, 2) for _ in x.shape)]
    view[...] = x
    return view


def _reversed(x):
    return np.ascontiguousarray(x[::-1])[::-1]


def _transposed(x):
    return np.ascontiguousarray(x.T).T


LAYOUTS = {"C": lambda x: x, "F": _fortran, "strided": _strided, "negative": _reversed,
           "transposed": _transposed}


def _arrays(out):
    if isinstance(out, np.ndarray):
        return [out]
    return [a for a in out if isinstance(a, np.ndarray)]


CALL_BATCH = [(call, batched) for call, (_, _, _, takes_batch) in CALLS.items()
              for batched in ((False, True) if takes_batch else (False,))]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("call,batched", CALL_BATCH)
def test_inputs_unchanged_any_layout_no_warning_same_dtype(call, batched, dtype, layout):
    fn, kw = build(call, dtype, batched)
    want = [a.copy() for a in _arrays(fn(**kw))]
    kw = {k: LAYOUTS[layout](v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    if layout != "C":
        assert any(not v.flags.c_contiguous for v in kw.values() if isinstance(v, np.ndarray) and v.ndim > 1)
    before = {k: v.copy() for k, v in kw.items() if isinstance(v, np.ndarray)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _arrays(fn(**kw))
    for k, v in before.items():
        np.testing.assert_array_equal(kw[k], v, err_msg=f"{call} wrote to {k}")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(dtype)
        tol = 1e-13 if dtype == np.float64 else 1e-6
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("call,batched", CALL_BATCH)
def test_read_only_inputs_work(call, batched):
    # A kernel that wrote to an argument would fail here (or be refused by Numba).
    fn, kw = build(call, np.float64, batched)
    want = _arrays(fn(**kw))
    for v in kw.values():
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _arrays(fn(**kw))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_without_projections_keeps_dtype_and_inputs(dtype):
    X = np.asfortranarray(np.random.default_rng(7).normal(size=(B, T, D_MODEL)).astype(dtype))
    X0 = X.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Y, A = at.forward(X, causal=True)
        g = at.backward(X, None, None, None, A, np.ones_like(Y), causal=True)
    np.testing.assert_array_equal(X, X0)
    assert Y.dtype == A.dtype == g.dX.dtype == np.dtype(dtype)
    assert g.dWq is None and g.dWk is None and g.dWv is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rnn_shared_h0_keeps_dtype_and_inputs(dtype):
    kw = {k: v.astype(dtype) for k, v in _rnn_fwd(dtype, True).items()}
    kw["h0"] = kw["h0"][0][::-1]                      # (d_h,), negative stride, shared by the batch
    before = {k: v.copy() for k, v in kw.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        H = rnn.forward(**kw)
        g = rnn.backward(kw["X"], H, kw["W_xh"], kw["W_hh"], np.ones_like(H), kw["h0"])
    for k, v in before.items():
        np.testing.assert_array_equal(kw[k], v)
    assert g.dh0.shape == (D_H,)
    assert all(a.dtype == np.dtype(dtype) for a in (H,) + tuple(g))


def _bad_calls():
    from harness.analysis import clipping, gradpath, schedule
    from harness.models.attention import attention_paths, path_jacobians
    from harness.models.rnn import recurrent_matrix, rnn_decay, rnn_gradient_norms
    X, Wx, Wh = _rnn_inputs()
    A = np.random.default_rng(1).normal(size=(4, 3))
    W3 = np.eye(3)

    def decay(**kw):
        return lambda: rnn_decay(**{**dict(T=3, d=2, rho=0.9), **kw})

    def norms(**kw):
        return lambda: rnn_gradient_norms(**{**dict(X=X, W_xh=Wx, W_hh=Wh), **kw})

    def clip(**kw):
        return lambda: clipping.clipping_experiment(**{**dict(rhos=(0.5,), T=4, d=2), **kw})

    def cfg(**kw):
        return lambda: gradpath.validate_config(
            dataclasses.replace(config.DECAY, **{**dict(Ts=(5,), ds=(2,)), **kw}))

    return [
        ("T", decay(T=1)), ("d", decay(d=0)), ("rho", decay(rho=0.0)), ("rho", decay(rho=-1.0)),
        ("weight", decay(weight="unitary")), ("activation", decay(activation="relu")),
        ("measure", decay(measure="all")), ("input_scale", decay(input_scale=-1.0)),
        ("seed", decay(seed=-1)), ("seed", decay(seed=1.5)),
        ("X", norms(X=X[0])), ("W_xh", norms(W_xh=Wx[0])), ("W_hh", norms(W_hh=Wh[0])),
        ("X", norms(X=X[:1])), ("W_hh", norms(W_hh=Wh[:, :2])), ("W_xh", norms(W_xh=Wx[:, :2])),
        ("activation", norms(activation="relu")), ("measure", norms(measure="all")),
        ("probe", norms(probe=np.ones(2))), ("probe", norms(probe=np.zeros(3))),
        ("probe", norms(probe=np.ones((3, 1)))),
        ("d", lambda: recurrent_matrix(0, 0.9)), ("rho", lambda: recurrent_matrix(2, 0.0)),
        ("kind", lambda: recurrent_matrix(2, 0.9, "unitary")),
        ("seed", lambda: recurrent_matrix(2, 0.9, "orthogonal", -1)),
        ("T", lambda: attention_paths(T=1, d=2)), ("d", lambda: attention_paths(T=3, d=0)),
        ("input_scale", lambda: attention_paths(T=3, d=2, input_scale=-1.0)),
        ("seed", lambda: attention_paths(T=3, d=2, seed=-1)),
        ("Wq, Wk and Wv", lambda: attention_paths(X=A)),
        ("X", lambda: path_jacobians(A[0], W3, W3, W3)),
        ("X", lambda: path_jacobians(A[:1], W3, W3, W3)),
        ("Wq", lambda: path_jacobians(A, np.eye(2), W3, W3)),
        ("Wk", lambda: path_jacobians(A, W3, np.eye(2), W3)),
        ("Wv", lambda: path_jacobians(A, W3, W3, np.eye(2))),
        ("Wq and Wk", lambda: path_jacobians(A, W3, W3[:, :2], W3)),
        ("rhos", clip(rhos=())), ("rhos", clip(rhos=(0.5, -1.0))), ("threshold", clip(threshold=0.0)),
        ("T", clip(T=2)), ("d", clip(d=0)), ("weight", clip(weight="unitary")),
        ("activation", clip(activation="relu")), ("input_scale", clip(input_scale=-1.0)),
        ("seed", clip(seed=-1)),
        ("rhos", cfg(rhos=(0.0,))), ("activations", cfg(activations=("relu",))),
        ("weights", cfg(weights=("unitary",))), ("input_scales", cfg(input_scales=(-1.0,))),
        ("Ts", cfg(Ts=(1,))), ("ds", cfg(ds=(0,))), ("models", cfg(models=("gpt",))),
        ("seed", cfg(seed=-1)), ("measure", cfg(measure="all")), ("exact_max_d", cfg(exact_max_d=-1)),
        ("P", lambda: schedule.schedule(RECURRENCE, 2, 2, (0,))),
    ]


@pytest.mark.parametrize("i", range(len(_bad_calls())))
def test_each_analyser_error_names_its_argument(i):
    name, call = _bad_calls()[i]
    with pytest.raises((TypeError, ValueError)) as e:
        call()
    assert re.match(rf"{re.escape(name)} (must|is|has)\b", str(e.value)), (name, str(e.value))


def test_smallest_accepted_values():
    from harness.analysis import clipping, gradpath
    from harness.models.rnn import rnn_decay
    assert len(rnn_decay(T=2, d=1, rho=0.9, seed=0, input_scale=0.0)) == 1
    assert len(clipping.clipping_experiment(rhos=(0.5,), T=3, d=1, seed=0, input_scale=0.0)) == 1
    gradpath.validate_config(dataclasses.replace(config.DECAY, Ts=(2,), ds=(1,), exact_max_d=0,
                                                 input_scales=(0.0,)))


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_a_transformer_backward_without_dy_names_dy(kind):
    """dY None read as "no dY given" and reached None.reshape: AttributeError (#39)."""
    from harness.kernels import transformer as tr
    X = np.random.default_rng(0).normal(size=(3, 2))
    p = _tr_params(kind, 2)
    with pytest.raises(TypeError) as e:
        if kind == "encoder":
            tr.encoder_layer_backward(X, p, 2, None)
        else:
            tr.decoder_layer_backward(X, X, p, 2, None)
    assert str(e.value) == ("dY must be the gradient of the loss with respect to Y, an array "
                            "like X, got None.")


def test_required_returns_what_it_is_given_and_names_none():
    from harness.infra import validate
    x = np.ones(2)
    assert validate.required("x", x, "an array") is x
    assert validate.required("n", 0, "a number") == 0            # only None is refused
    with pytest.raises(TypeError, match=r"^h must be an array \(T, d\), got None\.$"):
        validate.required("h", None, "an array (T, d)")


# ------------------------------------------------------ zero-stride (broadcast) inputs

def _tr_params(kind, d, d_ff=4):
    from harness.kernels import transformer as tr
    rng = np.random.default_rng(6)
    keys = tr.ENCODER_KEYS if kind == "encoder" else tr.DECODER_KEYS
    return {k: rng.normal(size=tr._param_shape(k, d, d_ff)) * 0.3 for k in keys}


def _wide(lead, d, factor=1.0):
    """A (lead..., d) broadcast of d values: zero strides on every leading axis."""
    return np.broadcast_to(np.linspace(-0.5, 0.5, d) * factor, lead + (d,))


def _broadcast_calls(lead):
    """name -> (function, kwargs) with X (and what is shaped like it) broadcast to ``lead``."""
    from harness.kernels import gru, linear_attention as la, lru, lstm, transformer as tr
    d = 2
    Hs = lambda n: _wide(lead, n)      # noqa: E731  (states, gradients: broadcast likewise)
    rnn_w = dict(W_xh=np.ones((2, d)) * 0.1, W_hh=np.eye(2) * 0.5)
    lstm_w = dict(W_ih=np.ones((8, d)) * 0.1, W_hh=np.ones((8, 2)) * 0.1)
    gru_w = dict(W_ih=np.ones((6, d)) * 0.1, W_hh=np.ones((6, 2)) * 0.1)
    la_w = dict(Wq=np.eye(d), Wk=np.eye(d), Wv=np.eye(d))
    at_w = dict(Wq=np.eye(d), Wk=np.eye(d), Wv=np.eye(d))
    lam, Bm = np.full(2, 0.5), np.ones((2, d)) * 0.1
    return {
        "rnn.forward": (rnn.forward, dict(X=_wide(lead, d), **rnn_w)),
        "rnn.backward": (rnn.backward, dict(X=_wide(lead, d), H=Hs(2), dH=Hs(2), **rnn_w)),
        "lru.forward": (lru.forward, dict(X=_wide(lead, d), lam=lam, B=Bm)),
        "lru.forward-complex": (lru.forward, dict(X=_wide(lead, d, 1 + 1j), lam=lam, B=Bm)),
        "lru.backward": (lru.backward, dict(X=_wide(lead, d), H=Hs(2), lam=lam, B=Bm, dH=Hs(2))),
        "lstm.forward": (lstm.forward, dict(X=_wide(lead, d), **lstm_w)),
        "lstm.backward": (lstm.backward, dict(X=_wide(lead, d), H=Hs(2), C=Hs(2), dH=Hs(2), **lstm_w)),
        "gru.forward": (gru.forward, dict(X=_wide(lead, d), **gru_w)),
        "gru.backward": (gru.backward, dict(X=_wide(lead, d), H=Hs(2), dH=Hs(2), **gru_w)),
        "attention.forward": (at.forward, dict(X=_wide(lead, d), **at_w)),
        "attention.forward-tiled": (at.forward, dict(X=_wide(lead, d), return_weights=False, **at_w)),
        "attention.backward": (at.backward, dict(X=_wide(lead, d), A=_wide(lead[:-1], lead[-1]),
                                                 dY=Hs(d), **at_w)),
        "attention.backward-tiled": (at.backward, dict(X=_wide(lead, d), A=_wide(lead[:-1], 1)[..., 0],
                                                       dY=Hs(d), **at_w)),
        "linear_attention.forward": (la.forward, dict(X=_wide(lead, d), **la_w)),
        "linear_attention.backward": (la.backward, dict(X=_wide(lead, d), dY=Hs(d), **la_w)),
        "transformer.encoder_layer": (tr.encoder_layer, dict(X=_wide(lead, d), heads=1,
                                                            params=_tr_params("encoder", d))),
        "transformer.decoder_layer_backward": (
            tr.decoder_layer_backward, dict(X=_wide(lead, d), memory=_wide(lead, d), dY=Hs(d),
                                            heads=1, params=_tr_params("decoder", d))),
    }


BROADCAST = list(_broadcast_calls((1, 1)))


def _peak(fn, kw, exc=MemoryError):
    """(message, bytes traced at the peak) of fn(**kw), which raises ``exc``."""
    tracemalloc.start()
    try:
        msg = raises(exc, fn, kw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return msg, peak


@pytest.mark.parametrize("call", BROADCAST)
def test_a_broadcast_input_too_big_to_copy_is_refused_by_name_before_any_copy(call):
    # issue 27: a (1e5, 1e6, d) np.broadcast_to X gave numpy's unnamed MemoryError (from
    # np.isfinite's temporary or the contiguous copy), or was copied before the check
    fn, kw = _broadcast_calls((10 ** 5, 10 ** 6))[call]
    msg, peak = _peak(fn, kw)
    m = re.match(r"a contiguous copy of (\w+) \(shape \(100000, 1000000, 2\), a broadcast of 2 "
                 r"value\(s\), zero strides on axis 0, 1\)", msg)
    assert m and m.group(1) in kw, msg                    # X, or dY checked before X's buffers
    assert _needed(msg) >= 10 ** 11 * 2 * kw[m.group(1)].itemsize
    # h0's zeros (B rows) at most: nothing the size of the copy (1.6 TB)
    assert peak < 2 ** 24, f"{peak:,} bytes allocated before the MemoryError"


@pytest.mark.parametrize("call", ["rnn.forward", "lru.forward", "lstm.forward", "gru.forward",
                                  "attention.forward-tiled", "linear_attention.forward",
                                  "transformer.encoder_layer"])
def test_a_broadcast_copy_is_counted_with_the_buffers_before_it_is_made(monkeypatch, call):
    # X's copy alone fits; with the kernel's buffers it does not: refused before the copy
    lead = (64, 2 ** 16)                                  # 64 MiB as a float64 copy (d = 2)
    fn, kw = _broadcast_calls(lead)[call]
    copy = kw["X"].size * kw["X"].itemsize
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: copy + 2 ** 20)
    msg, peak = _peak(fn, kw)
    assert msg.startswith("a contiguous copy of X (shape (64, 65536, 2)") and " with " in msg, msg
    assert _needed(msg) > copy
    assert peak < copy / 8, f"{peak:,} bytes allocated before the MemoryError"


def test_a_strided_argument_too_big_to_copy_is_named(monkeypatch):
    big = np.broadcast_to(np.ones(3), (10 ** 6, 10 ** 6, 3))
    with pytest.raises(MemoryError, match=r"^a contiguous copy of H \(shape \(1000000, 1000000, 3\), "
                                          r"a broadcast of 3 value\(s\), zero strides on axis 0, 1\)"):
        validate.as_float_array("H", big, 3)
    # overlapping rows (a sliding window): strides not zero, yet a copy of 80 MB from 8 MB
    window = np.lib.stride_tricks.as_strided(np.ones(10 ** 6 + 9), (10 ** 6, 10), (8, 8))
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 2 ** 26)
    with pytest.raises(MemoryError, match=r"^a contiguous copy of W \(shape \(1000000, 10\), "
                                          r"not C-contiguous\) needs 80,000,000 bytes"):
        validate.as_float_array("W", window, 2)


def test_broadcast_inputs_that_fit_give_the_numbers_of_their_copies():
    # the finiteness check reads the distinct values only; the result is the copy's
    for call, (fn, kw) in _broadcast_calls((2, 5)).items():
        if "backward" in call:                            # a broadcast H is no forward's H
            continue
        got = fn(**kw)
        want = fn(**{k: np.array(a) if isinstance(a, np.ndarray) else a for k, a in kw.items()})
        for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
            if isinstance(g, dict):
                for k in g:
                    np.testing.assert_array_equal(g[k], w[k], err_msg=f"{call}: {k}")
            elif g is not None:
                np.testing.assert_array_equal(g, w, err_msg=call)
    bad = np.broadcast_to(np.array([1.0, np.inf]), (3, 4, 2))
    with pytest.raises(ValueError, match=r"X holds 12 NaN or inf value\(s\)"):
        rnn.forward(bad, np.ones((2, 2)), np.eye(2))
