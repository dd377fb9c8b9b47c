"""harness.kernels.linear_attention against its loop twins in tests/naive_linear.py, PyTorch's
autograd, central finite differences, and its three methods against one another.

Tolerances (stated once), each a relative error against the largest entry of the reference:
float64 kernels agree with the loop twin (float64) to 1e-12 (measured: 4e-15) and with
PyTorch's autograd (float64) to 1e-11 (measured: 2e-14); float32 kernels agree with the twin
run in float64 on the same inputs to 1e-5 (measured: 2.2e-6); the three methods agree with
one another to 1e-12 in float64 and 1e-5 in float32 (measured: 2e-15 and 6e-7). db_a is one
number, a sum over every step: it is measured against the largest entry of dw_a too
(naive.rel_err's scale). Gradients agree with central finite differences in float64 to 1e-6
(measured: 8e-9). Long sequences have their own, stated in their tests.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
import pytest

import naive
import naive_linear
from _deps import require_module
from harness.infra import validate, workspace
from harness.kernels import linear_attention as la

T, D_MODEL, D_K, D_V, NB, CHUNK = 11, 4, 3, 2, 2, 4      # 11 rows: chunks of 4, the last of 3
TOL = {np.float64: 1e-12, np.float32: 1e-5}
TORCH_TOL = 1e-11
FD_TOL = 1e-6
DECAYS = la.DECAYS
FIELDS = la.LinearAttentionGrads._fields


def make(seed, dtype=np.float64, decay=None, batched=False, t=T, d_model=D_MODEL, d_k=D_K, d_v=D_V):
    """(X, Wq, Wk, Wv, dY, decay keywords): projections of both signs, so phi takes both branches;
    a selective decay with a_t spread over about (0.3, 0.9)."""
    rng = np.random.default_rng(seed)
    lead = (NB, t) if batched else (t,)
    X = rng.normal(size=lead + (d_model,)).astype(dtype)
    Wq, Wk = (rng.normal(size=(d_k, d_model)).astype(dtype) for _ in range(2))
    Wv = rng.normal(size=(d_v, d_model)).astype(dtype)
    dY = rng.normal(size=lead + (d_v,)).astype(dtype)
    kw = {}
    if decay == "constant":
        kw = dict(gamma=0.8)
    elif decay == "selective":
        kw = dict(w_a=(0.5 * rng.normal(size=d_model)).astype(dtype), b_a=float(rng.normal()) - 0.5)
    return X, Wq, Wk, Wv, dY, kw


def rel(got, want, scale=0.0):
    return naive.rel_err(got, want, scale)


def check_grads(g, want, dtype, tol, what=""):
    """Every gradient of ``g`` (a LinearAttentionGrads) against ``want`` (its fields in order)."""
    for name, got, ref in zip(FIELDS, g, want):
        if ref is None:
            assert got is None, (what, name)
            continue
        got = np.asarray(got)
        assert got.dtype == np.dtype(dtype) and got.shape == np.shape(ref), (what, name)
        scale = np.abs(want[4]).max() if name == "db_a" else 0.0
        assert rel(got, ref, scale) <= tol, (what, name, rel(got, ref, scale))


@functools.lru_cache(maxsize=None)
def twin(seed, dtype, decay, normalize, batched):
    """The loop twin's Y and gradients, once per case (the methods share them)."""
    X, Wq, Wk, Wv, dY, kw = make(seed, dtype, decay, batched)
    return (naive_linear.linear_forward(X, Wq, Wk, Wv, decay, normalize=normalize, **kw),
            naive_linear.linear_backward(X, Wq, Wk, Wv, dY, decay, normalize=normalize, **kw))


# ------------------------------------------------------------------ against the loop twin

@pytest.mark.parametrize("method", la.METHODS)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("batched", [False, True])
def test_matches_the_loop_twin(method, decay, normalize, dtype, batched):
    X, Wq, Wk, Wv, dY, kw = make(1, dtype, decay, batched)
    Y_ref, g_ref = twin(1, dtype, decay, normalize, batched)
    Y = la.forward(X, Wq, Wk, Wv, decay, normalize=normalize, method=method, chunk=CHUNK, **kw)
    assert Y.dtype == np.dtype(dtype) and Y.shape == X.shape[:-1] + (D_V,)
    assert rel(Y, Y_ref) <= TOL[dtype]
    g = la.backward(X, Wq, Wk, Wv, dY, decay, normalize=normalize, method=method, chunk=CHUNK, **kw)
    assert isinstance(g, la.LinearAttentionGrads)
    check_grads(g, g_ref, dtype, TOL[dtype])


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_three_methods_agree_for_every_chunk_length(decay, normalize, dtype):
    """T = 64, two sequences: chunks of 1, 5, 16, 64 and 100 rows (dividing T and not, one
    chunk longer than T) and the parallel form, against the recurrent one."""
    X, Wq, Wk, Wv, dY, kw = make(2, dtype, decay, batched=True, t=64, d_model=6, d_k=5, d_v=4)
    args = (X, Wq, Wk, Wv)
    Y = la.forward(*args, decay, normalize=normalize, **kw)
    g = la.backward(*args, dY, decay, normalize=normalize, **kw)
    runs = [("parallel", CHUNK)] + [("chunked", c) for c in (1, 5, 16, 64, 100)]
    for method, chunk in runs:
        what = (method, chunk)
        got = la.forward(*args, decay, normalize=normalize, method=method, chunk=chunk, **kw)
        assert rel(got, Y) <= TOL[dtype], what
        check_grads(la.backward(*args, dY, decay, normalize=normalize, method=method, chunk=chunk, **kw),
                    g, dtype, TOL[dtype], what)


def test_a_long_steep_selective_decay_neither_overflows_nor_underflows_wrongly():
    """T = 2000, a_t about e^-3: c_t, the cumulative log decay, falls to about -6000, so
    exp(c_t) and exp(-c_s) are 0 and inf in float64, while D[t, s] = exp(c_t - c_s) is not.
    The three methods agree to 1e-10 (measured: 1.3e-12, db_a, a sum over 2000 steps; the
    parallel form's c_t - c_s, differences of sums near -6000, 7e-14), everything finite,
    also where a chunk's decays sum below -600 (a_t about e^-40) and the chunked form takes
    exp(b_t - b_s) pair by pair; and a_t that underflows to exactly 0 (b_a = 800) leaves
    each step alone: y_t = v_t."""
    rng = np.random.default_rng(3)
    X, Wq, Wk, Wv, dY, _ = make(3, np.float64, batched=False, t=2000, d_model=5, d_k=4, d_v=3)
    kw = dict(w_a=0.3 * rng.normal(size=5), b_a=3.0)
    Y = la.forward(X, Wq, Wk, Wv, "selective", **kw)
    g = la.backward(X, Wq, Wk, Wv, dY, "selective", **kw)
    assert np.isfinite(Y).all() and all(np.isfinite(x).all() for x in g)
    for method in ("parallel", "chunked"):
        assert rel(la.forward(X, Wq, Wk, Wv, "selective", method=method, **kw), Y) <= 1e-10
        check_grads(la.backward(X, Wq, Wk, Wv, dY, "selective", method=method, **kw), g,
                    np.float64, 1e-10, method)
    kw["b_a"] = 40.0                                 # a chunk of 16 whose decays sum below -600:
    for method, chunk in (("parallel", 4), ("chunked", 16), ("chunked", 5)):   # D pair by pair
        args = (X[:300], Wq, Wk, Wv, dY[:300], "selective")           # unnormalised: y_t is not v_t
        got = la.backward(*args, normalize=False, method=method, chunk=chunk, **kw)
        check_grads(got, la.backward(*args, normalize=False, **kw), np.float64, 1e-10, (method, chunk))
    kw["b_a"] = 800.0                                # softplus(800) = 800: a_t = exp(-800) = 0
    for method in la.METHODS:
        Y0 = la.forward(X, Wq, Wk, Wv, "selective", method=method, chunk=7, **kw)
        assert rel(Y0, X @ Wv.T) <= 1e-13, method


def test_float32_decay_gradients_do_not_drift_on_long_sequences():
    """dL/dlog a_r sums the pairs s < r <= t: summed as a running total over all T steps its
    float32 rounding grows with T (dw_a off by 1e-4 at T = 16,384). Each method sums it
    locally instead; against float64 on the same inputs, dw_a and db_a stay within 2e-5
    (measured: 2.5e-6) at T = 16,384 (the parallel form at T = 2,048, its T x T memory)."""
    X, Wq, Wk, Wv, dY, _ = make(15, t=16384, d_model=16, d_k=16, d_v=16)
    rng = np.random.default_rng(15)
    Wq, Wk, Wv = Wq / 4, Wk / 4, Wv / 4
    kw = dict(w_a=rng.normal(size=16) / 4, b_a=-2.0)
    kw32 = dict(w_a=kw["w_a"].astype(np.float32), b_a=-2.0)
    for method, t in (("recurrent", 16384), ("chunked", 16384), ("parallel", 2048)):
        args = (X[:t], Wq, Wk, Wv, dY[:t])
        want = la.backward(*args, "selective", method="chunked", **kw)
        got = la.backward(*(a.astype(np.float32) for a in args), "selective", method=method, **kw32)
        assert rel(got.dw_a, want.dw_a) <= 2e-5, method
        assert rel(got.db_a, want.db_a, np.abs(want.dw_a).max()) <= 2e-5, method


def _gate_with_cancelling_terms(seed, c=1000.0):
    """(X, Wq, Wk, Wv, dY, w_a), exact in float32, B = 3, T = 33, d = 8: half of X's columns
    are c + N(0, 1) and seen by the gate alone (w_a's entries there sum to 0), so that s_t =
    x_t . w_a + b_a is O(1) while its terms are O(c)."""
    rng = np.random.default_rng(seed)
    B, t, d = 3, 33, 8
    h = d // 2
    X = rng.normal(size=(B, t, d))
    X[..., h:] += c
    Wq, Wk, Wv = (np.concatenate([rng.normal(size=(d, h)), np.zeros((d, h))], 1) for _ in range(3))
    w_a = 0.5 * rng.normal(size=d)
    w_a[h:] -= w_a[h:].mean()
    dY = rng.normal(size=(B, t, d))
    return [a.astype(np.float32).astype(np.float64) for a in (X, Wq, Wk, Wv, dY, w_a)]


@pytest.mark.parametrize("seed", range(6))
def test_float32_selective_gate_keeps_its_digits(seed):
    """s_t = x_t . w_a + b_a, and dw_a, db_a (sums over every step of ds_t), accumulated in
    float64 from the float32 inputs and rounded once. A float32 dot rounded s_t by eps times
    sum_m |x_tm w_am|, which moves every a_t, and ds_t was rounded to float32 before its sum:
    db_a was 3.7e-4 off float64 on the same inputs, Y 1.9e-5. Now all within 1e-5, the file's
    float32 tolerance (measured: db_a 1.4e-6, Y 1.7e-7)."""
    X, Wq, Wk, Wv, dY, w_a = _gate_with_cancelling_terms(seed)
    kw, kw32 = dict(w_a=w_a, b_a=-0.5), dict(w_a=w_a.astype(np.float32), b_a=-0.5)
    Y_ref = la.forward(X, Wq, Wk, Wv, "selective", **kw)
    g_ref = la.backward(X, Wq, Wk, Wv, dY, "selective", **kw)
    a32 = [a.astype(np.float32) for a in (X, Wq, Wk, Wv, dY)]
    for method in la.METHODS:
        assert rel(la.forward(*a32[:4], "selective", method=method, **kw32), Y_ref) <= TOL[np.float32]
        g = la.backward(*a32, "selective", method=method, **kw32)
        check_grads(g, g_ref, np.float32, TOL[np.float32], method)
        assert rel(g.db_a, g_ref.db_a) <= TOL[np.float32], (method, rel(g.db_a, g_ref.db_a))


def test_a_constant_decay_of_one_is_no_decay():
    X, Wq, Wk, Wv, dY, _ = make(4)
    for method in la.METHODS:
        np.testing.assert_allclose(la.forward(X, Wq, Wk, Wv, "constant", gamma=1.0, method=method),
                                   la.forward(X, Wq, Wk, Wv, method=method), rtol=1e-14, atol=0)


def test_one_normalized_step_is_its_value_and_leaves_q_and_k_without_gradient():
    """T = 1: y_1 = phi(q).phi(k) v_1 / phi(q).phi(k) = v_1, so dWq = dWk = 0 (to rounding)."""
    X, Wq, Wk, Wv, dY, kw = make(13, decay="selective", t=1, d_model=5, d_k=4, d_v=3)
    for method in la.METHODS:
        assert rel(la.forward(X, Wq, Wk, Wv, "selective", method=method, **kw), X @ Wv.T) <= 1e-15
        g = la.backward(X, Wq, Wk, Wv, dY, "selective", method=method, **kw)
        assert rel(g.dWv, dY.T @ X) <= 1e-15 and rel(g.dX, dY @ Wv) <= 1e-15
        for z in (g.dWq, g.dWk, g.dw_a, g.db_a):       # a_1 multiplies the zero state: no gradient
            assert np.abs(z).max() <= 1e-15 * np.abs(g.dWv).max()


def test_normalized_rows_are_weighted_means_of_the_values():
    """With normalize=True y_t is a convex mix of v_1..v_t (positive weights summing to 1):
    y_1 = v_1, and every y_t inside the values' range."""
    X, Wq, Wk, Wv, _, kw = make(5, decay="selective")
    V = X @ Wv.T
    for method in la.METHODS:
        Y = la.forward(X, Wq, Wk, Wv, "selective", method=method, **kw)
        np.testing.assert_allclose(Y[0], V[0], rtol=1e-14)
        for t in range(T):
            lo, hi = V[:t + 1].min(axis=0), V[:t + 1].max(axis=0)
            assert (Y[t] >= lo - 1e-12).all() and (Y[t] <= hi + 1e-12).all()


# ------------------------------------------------------------------ PyTorch and differences

def torch_reference(torch, X, Wq, Wk, Wv, dY, decay, normalize, gamma=None, w_a=None, b_a=None):
    """Y and the gradients of every input from PyTorch's autograd, float64, through the
    recurrence as the lesson writes it (a loop over t, S and z apart)."""
    F = torch.nn.functional
    leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (X, Wq, Wk, Wv)]
    Xt, Wqt, Wkt, Wvt = leaves
    fq, fk, v = F.elu(Xt @ Wqt.T) + 1, F.elu(Xt @ Wkt.T) + 1, Xt @ Wvt.T
    if decay == "selective":
        leaves += [torch.tensor(w_a, dtype=torch.float64, requires_grad=True),
                   torch.tensor(b_a, dtype=torch.float64, requires_grad=True)]
        a = torch.exp(-F.softplus(Xt @ leaves[4] + leaves[5]))
    else:
        a = torch.full(Xt.shape[:-1], 1.0 if decay is None else gamma, dtype=torch.float64)
    S = torch.zeros(Xt.shape[:-2] + (Wqt.shape[0], Wvt.shape[0]), dtype=torch.float64)
    z = torch.zeros(Xt.shape[:-2] + (Wqt.shape[0],), dtype=torch.float64)
    ys = []
    for t in range(Xt.shape[-2]):
        S = a[..., t, None, None] * S + fk[..., t, :, None] * v[..., t, None, :]
        z = a[..., t, None] * z + fk[..., t, :]
        y = (S * fq[..., t, :, None]).sum(-2)
        ys.append(y / (z * fq[..., t, :]).sum(-1, keepdim=True) if normalize else y)
    Y = torch.stack(ys, dim=-2)
    Y.backward(torch.tensor(dY, dtype=torch.float64))
    grads = [leaf.grad.numpy() for leaf in leaves] + [None] * (6 - len(leaves))
    return Y.detach().numpy(), grads


@pytest.mark.parametrize("seed", range(6))
def test_matches_torch_autograd_on_odd_shapes(seed):
    torch = require_module("torch", "pip install -e '.[torch]'")
    rng = np.random.default_rng(100 + seed)
    t, d_model, d_k, d_v = (int(x) for x in rng.integers(2, 24, 4))
    decay, normalize, batched = DECAYS[seed % 3], seed % 2 == 0, seed >= 3
    X, Wq, Wk, Wv, dY, kw = make(seed, np.float64, decay, batched, t, d_model, d_k, d_v)
    Y_ref, g_ref = torch_reference(torch, X, Wq, Wk, Wv, dY, decay, normalize, **kw)
    for method, chunk in (("recurrent", CHUNK), ("parallel", CHUNK), ("chunked", 5), ("chunked", 64)):
        what = (method, chunk, t, d_model, d_k, d_v)
        assert rel(la.forward(X, Wq, Wk, Wv, decay, normalize=normalize, method=method, chunk=chunk, **kw),
                   Y_ref) <= TORCH_TOL, what
        g = la.backward(X, Wq, Wk, Wv, dY, decay, normalize=normalize, method=method, chunk=chunk, **kw)
        check_grads(g, g_ref, np.float64, TORCH_TOL, what)


@pytest.mark.parametrize("method", la.METHODS)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("normalize", [True, False])
def test_gradients_match_central_finite_differences(method, decay, normalize):
    """L = sum dY * Y, every input perturbed entry by entry (T = 5, chunks of 2)."""
    X, Wq, Wk, Wv, dY, kw = make(6, decay=decay, t=5, d_model=3, d_k=2, d_v=3)
    args = dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, **kw)
    if decay == "selective":
        args["b_a"] = np.array([kw["b_a"]])          # a one-element array, which numeric_grad can move

    def loss():
        return float(np.sum(dY * la.forward(decay=decay, normalize=normalize, method=method, chunk=2,
                                            **args)))

    g = la.backward(dY=dY, decay=decay, normalize=normalize, method=method, chunk=2, **args)
    for name in ("X", "Wq", "Wk", "Wv", "w_a", "b_a")[:6 if decay == "selective" else 4]:
        got = np.atleast_1d(getattr(g, "d" + name))
        assert rel(got, naive.numeric_grad(loss, args[name])) <= FD_TOL, name


# ------------------------------------------------------------------------ inputs and errors

def test_the_public_alias_is_the_kernel_module():
    from harness import linear_attention
    import harness.linear_attention as alias
    assert linear_attention is la and alias is la


def test_inputs_are_never_written_and_read_only_inputs_work():
    X, Wq, Wk, Wv, dY, kw = make(7, decay="selective", batched=True)
    arrays = (X, Wq, Wk, Wv, dY, kw["w_a"])
    copies = [a.copy() for a in arrays]
    for a in arrays:
        a.flags.writeable = False
    for method in la.METHODS:
        Y = la.forward(X, Wq, Wk, Wv, "selective", method=method, **kw)
        g = la.backward(X, Wq, Wk, Wv, dY, "selective", method=method, **kw)
        assert Y.flags.writeable and g.dX.flags.writeable
        for a, c in zip(arrays, copies):
            np.testing.assert_array_equal(a, c)


def test_strided_and_fortran_inputs_give_the_same_result():
    X, Wq, Wk, Wv, dY, _ = make(8)
    big = np.zeros((2 * T, 2 * D_MODEL))
    big[::2, ::2] = X
    Y = la.forward(X, Wq, Wk, Wv, method="chunked")
    assert rel(la.forward(big[::2, ::2], np.asfortranarray(Wq), Wk, Wv, method="chunked"), Y) == 0.0


def _fresh_backward(*args, **kw):
    workspace.clear()                                # nothing kept: everything recomputed
    return la.backward(*args, **kw)


@pytest.mark.parametrize("method", la.METHODS)
def test_a_backward_reuses_its_forward_only_when_the_inputs_are_the_same(method):
    """The backward after a forward of the same inputs reuses its projections (chunked: its
    states) and gives the same gradients, bit for bit; any change in between (values, a
    scalar, the chunk length, another call) is seen, and the gradients are those of the new inputs."""
    X, Wq, Wk, Wv, dY, kw = make(14, decay="selective", batched=True, t=13)
    args, opts = (X, Wq, Wk, Wv, dY, "selective"), dict(method=method, chunk=CHUNK, **kw)
    want = _fresh_backward(*args, **opts)

    def same(g, ref):
        return all(np.array_equal(a, b) for a, b in zip(g, ref))

    la.forward(X, Wq, Wk, Wv, "selective", **opts)
    assert same(la.backward(*args, **opts), want)
    assert same(la.backward(*args, **opts), want)            # twice: nothing was spent
    X2 = X.copy()
    X2[1, 5, 2] += 0.5                                        # one entry
    la.forward(X, Wq, Wk, Wv, "selective", **opts)
    assert same(la.backward(X2, *args[1:], **opts), _fresh_backward(X2, *args[1:], **opts))
    Wv2 = Wv * 2.0
    la.forward(X, Wq, Wk, Wv, "selective", **opts)
    assert same(la.backward(X, Wq, Wk, Wv2, *args[4:], **opts),
                _fresh_backward(X, Wq, Wk, Wv2, *args[4:], **opts))
    for change in (dict(b_a=kw["b_a"] + 0.25), dict(normalize=False), dict(chunk=CHUNK + 1),
                   dict(method="parallel")):
        la.forward(X, Wq, Wk, Wv, "selective", **opts)
        got = la.backward(*args, **{**opts, **change})
        assert same(got, _fresh_backward(*args, **{**opts, **change})), change
    la.forward(X, Wq, Wk, Wv, "selective", **opts)
    la.backward(*args, **{**opts, "method": "parallel"})     # another method in between
    la.forward(2 * X, Wq, Wk, Wv, "selective", **opts)        # and another forward
    assert same(la.backward(*args, **opts), want)


def test_outputs_are_fresh_arrays_each_call():
    X, Wq, Wk, Wv, dY, kw = make(9, decay="selective")
    Y1 = la.forward(X, Wq, Wk, Wv, normalize=False)
    Y2 = la.forward(2 * X, Wq, Wk, Wv, normalize=False)
    assert not np.shares_memory(Y1, Y2)
    g1 = la.backward(X, Wq, Wk, Wv, dY, "selective", **kw)
    g2 = la.backward(X, Wq, Wk, Wv, dY, "selective", **kw)
    for a, b in zip(g1[:5], g2[:5]):
        assert not np.shares_memory(a, b)
    assert isinstance(g1.db_a, np.float64)


def _call(which, **changes):
    X, Wq, Wk, Wv, dY, kw = make(10, decay="selective")
    args = dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, decay="selective", **kw)
    if which == "backward":
        args["dY"] = dY
    args.update(changes)
    return (la.forward if which == "forward" else la.backward), args


def raises(exc, fn, kw, *needles):
    with pytest.raises(exc) as e:
        fn(**kw)
    msg = str(e.value)
    assert not isinstance(e.value, numba.core.errors.NumbaError)
    for n in needles:
        assert n in msg, msg
    return msg


BAD = [  # the changed arguments, error, words the message must hold
    (dict(decay="linear"), ValueError, ("decay", "'linear'", "'constant'", "'selective'")),
    (dict(decay=1), TypeError, ("decay", "int")),
    (dict(decay="constant", w_a=None, b_a=None), ValueError, ("gamma", "missing", "(0, 1]")),
    (dict(decay="constant", w_a=None, b_a=None, gamma=0.0), ValueError, ("gamma", "(0, 1]", "0.0")),
    (dict(decay="constant", w_a=None, b_a=None, gamma=1.5), ValueError, ("gamma", "(0, 1]", "1.5")),
    (dict(decay="constant", w_a=None, b_a=None, gamma="0.9"), TypeError, ("gamma", "str")),
    (dict(decay="constant", w_a=None, b_a=None, gamma=np.nan), ValueError, ("gamma", "nan")),
    (dict(decay="constant", gamma=0.9), ValueError, ("w_a and b_a", "given", "'selective'")),
    (dict(gamma=0.9), ValueError, ("gamma", "given", "'constant'")),
    (dict(decay=None, w_a=None), ValueError, ("b_a", "given", "'selective'")),
    (dict(w_a=None), ValueError, ("w_a", "missing", f"({D_MODEL},)")),
    (dict(b_a=None), ValueError, ("b_a", "missing")),
    (dict(w_a=np.ones(D_MODEL + 1)), ValueError, ("w_a", f"({D_MODEL},)", f"({D_MODEL + 1},)")),
    (dict(w_a=np.ones((D_MODEL, 1))), ValueError, ("w_a", "1-D", "2-D")),
    (dict(w_a=np.ones(D_MODEL, dtype=np.float32)), TypeError, ("w_a", "float32", "np.float64")),
    (dict(b_a=np.ones(2)), TypeError, ("b_a", "real number")),
    (dict(b_a=np.inf), ValueError, ("b_a", "finite", "inf")),
    (dict(b_a=True), TypeError, ("b_a", "real number")),
    (dict(method="scan"), ValueError, ("method", "'scan'", "'recurrent'", "'parallel'", "'chunked'")),
    (dict(chunk=0), ValueError, ("chunk", ">= 1", "0")),
    (dict(chunk=4.0), TypeError, ("chunk", "integer", "float")),
    (dict(normalize=1), TypeError, ("normalize", "True or False")),
    (dict(X=np.ones(5)), ValueError, ("X", "2-D or 3-D", "(5,)")),
    (dict(X=np.ones((T, D_MODEL), dtype=np.int64)), TypeError, ("X", "int64", "astype")),
    (dict(X=np.full((T, D_MODEL), np.nan)), ValueError, ("X", "NaN or inf")),
    (dict(X=np.ones((0, D_MODEL))), ValueError, ("X", "zero-length")),
    (dict(X=np.ma.masked_array(np.ones((T, D_MODEL)))), TypeError, ("X", "masked")),
    (dict(Wq=np.ones((D_K, D_MODEL + 1))), ValueError, ("Wq", f"(d_k, {D_MODEL})", f"({D_K}, {D_MODEL + 1})")),
    (dict(Wk=np.ones((D_K + 1, D_MODEL))), ValueError, ("Wk", f"({D_K}, {D_MODEL})", f"({D_K + 1}, {D_MODEL})")),
    (dict(Wv=np.ones((D_V, D_MODEL - 1))), ValueError, ("Wv", f"(d_v, {D_MODEL})", f"({D_V}, {D_MODEL - 1})")),
    (dict(Wv=np.ones((D_V, D_MODEL), dtype=np.float32)), TypeError, ("Wv", "float32", "np.float64")),
    (dict(Wq=np.ones(3)), ValueError, ("Wq", "2-D", "1-D")),
    (dict(Wk={"not": "an array"}), TypeError, ("Wk", "dict")),
    (dict(Wv=np.full((D_V, D_MODEL), np.inf)), ValueError, ("Wv", "NaN or inf")),
]


@pytest.mark.parametrize("which", ["forward", "backward"])
@pytest.mark.parametrize("changes,exc,words", BAD, ids=[f"{i}-{next(iter(b[0]))}" for i, b in enumerate(BAD)])
def test_errors_name_the_argument_and_what_came(which, changes, exc, words):
    fn, kw = _call(which, **changes)
    raises(exc, fn, kw, *words)


@pytest.mark.parametrize("changes,exc,words", [
    (dict(dY=np.ones((T, D_V + 1))), ValueError, ("dY", f"({T}, {D_V})", f"({T}, {D_V + 1})")),
    (dict(dY=np.ones((NB, T, D_V))), ValueError, ("dY", "2-D", "3-D")),
    (dict(dY=np.ones((T, D_V), dtype=np.float32)), TypeError, ("dY", "float32", "np.float64")),
    (dict(dY=np.full((T, D_V), np.nan)), ValueError, ("dY", "NaN or inf")),
])
def test_backward_checks_dY(changes, exc, words):
    fn, kw = _call("backward", **changes)
    raises(exc, fn, kw, *words)


@pytest.mark.parametrize("value", [np.float64(2.0), [[1.0, 2.0]], np.ones((2, 2, 2, 2)), (1.0, 2.0),
                                   np.array([["a", "b"]]), 3.0, np.ones((3, 3), dtype=np.float32), None])
@pytest.mark.parametrize("arg", ["X", "Wq", "Wk", "Wv", "w_a", "dY"])
def test_no_numba_error_ever_escapes(arg, value):
    fn, kw = _call("backward" if arg == "dY" else "forward", **{arg: value})
    try:
        fn(**kw)
    except (ValueError, TypeError, MemoryError) as err:
        assert not isinstance(err, numba.core.errors.NumbaError), repr(err)
        assert "numba" not in str(err).lower(), str(err)


@pytest.mark.parametrize("which", ["forward", "backward"])
def test_the_parallel_form_refuses_a_T_by_T_matrix_that_does_not_fit(which, monkeypatch):
    t = 2 ** 13                                      # one T x T float64 matrix: 512 MiB
    X, Wq, Wk, Wv, dY, _ = make(11, t=t, d_model=1, d_k=1, d_v=1)
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 2 ** 28)
    kw = dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, method="parallel")
    if which == "backward":
        kw["dY"] = dY
    raises(MemoryError, getattr(la, which), kw, f"T = {t}", "T x T", "bytes", "'chunked'")


def test_a_chunk_longer_than_the_sequence_is_one_chunk_of_T_rows():
    """chunk=10**12 or 20,000 with T = 7 is one chunk of 7 rows, bit for bit (its buffers were
    sized by chunk: NumPy's "array is too big", then "Allocation failed")."""
    X, Wq, Wk, Wv, dY, kw = make(16, decay="selective", batched=True, t=7)
    args = (X, Wq, Wk, Wv)
    Y = la.forward(*args, "selective", method="chunked", chunk=7, **kw)
    g = la.backward(*args, dY, "selective", method="chunked", chunk=7, **kw)
    for chunk in (10 ** 12, 20000, 8):
        assert np.array_equal(la.forward(*args, "selective", method="chunked", chunk=chunk, **kw), Y)
        got = la.backward(*args, dY, "selective", method="chunked", chunk=chunk, **kw)
        assert all(np.array_equal(a, b) for a, b in zip(got, g)), chunk


@pytest.mark.parametrize("which", ["forward", "backward"])
def test_the_chunked_form_counts_its_chunk_buffers_and_refuses_by_name(which, monkeypatch):
    """chunk=4096 at T = 4096: chunk x chunk buffers of 400 MiB (float64) are refused before
    they are made, naming chunk; buffers that fit alone but not with the rest are counted by the
    memory check, whose message names chunk too."""
    t = 4096
    X, Wq, Wk, Wv, dY, _ = make(17, t=t, d_model=1, d_k=1, d_v=1)
    kw = dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, method="chunked", chunk=t)
    if which == "backward":
        kw["dY"] = dY
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 2 ** 28)
    raises(MemoryError, getattr(la, which), kw, "chunk", f"{t} rows", "bytes", "smaller chunk")
    own = la._chunk_bytes(t, 1, 2, 8, which == "backward")
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: own + 1000)
    raises(MemoryError, getattr(la, which), kw, f"chunk={t}", "chunk x chunk buffers", "bytes")


def test_a_denominator_that_underflows_is_a_floating_point_error():
    """k_t = W_k x_t far below 0: phi(k_t) = exp(k_t) is 0, so are z_t and z_t . phi(q_t)."""
    X, Wq, Wk, Wv, dY, _ = make(12)
    X = np.abs(X)
    Wk = -1e3 * np.ones_like(Wk)
    for method in la.METHODS:
        raises(FloatingPointError, la.forward, dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, method=method),
               "output Y", "not finite", "denominator", "normalize=False")
        raises(FloatingPointError, la.backward, dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, dY=dY, method=method),
               "gradient", "not finite")
        Y = la.forward(X, Wq, Wk, Wv, normalize=False, method=method)
        assert np.isfinite(Y).all() and np.abs(Y).max() == 0.0


def _far_below_zero(level, seed=18):
    """(X, Wq, Wk, Wv, dY, w_a), exact in float32: q_t = W_q x_t about ``level`` (+- 4), k_t and
    v_t of both signs; a column of ones in X carries the level."""
    rng = np.random.default_rng(seed)
    B, t, d_model, d_k, d_v = NB, T, D_MODEL, D_K, D_V
    one = np.ones((B, t, 1))
    X = np.concatenate([rng.normal(size=(B, t, d_model)), one], -1)
    Wq = np.concatenate([rng.normal(size=(d_k, d_model)), np.full((d_k, 1), level)], 1)
    Wk, Wv = (np.concatenate([rng.normal(size=(n, d_model)), np.zeros((n, 1))], 1) for n in (d_k, d_v))
    dY = rng.normal(size=(B, t, d_v))
    w_a = np.append(0.5 * rng.normal(size=d_model), 0.0)
    return [a.astype(np.float32).astype(np.float64) for a in (X, Wq, Wk, Wv, dY, w_a)]


@pytest.mark.parametrize("level", [-88.0, -95.0, -103.0])
@pytest.mark.parametrize("decay", [None, "selective"])
def test_float32_keeps_its_digits_where_phi_of_q_is_subnormal(level, decay):
    """q_t around -88 to -103: exp(q_t) is subnormal in float32 (below 1.2e-38), and Y was 23-77 %
    off with no warning (the gradients not finite). With normalize=True y_t does not change when
    phi(q_t) is scaled, so each row of phi(q) is divided by its largest entry (which is 1 then).
    Against float64 on the same inputs, Y and every gradient within 8 eps max|q_t| (float32's
    own rounding of q_t, which moves phi(q_t) by that much relative): 5e-5 at -103 (measured:
    2.1e-5, dX; Y 1.2e-6)."""
    X, Wq, Wk, Wv, dY, w_a = _far_below_zero(level)
    kw = dict(w_a=w_a, b_a=-0.5) if decay else {}
    kw32 = dict(w_a=w_a.astype(np.float32), b_a=-0.5) if decay else {}
    Y_ref = la.forward(X, Wq, Wk, Wv, decay, **kw)
    g_ref = la.backward(X, Wq, Wk, Wv, dY, decay, **kw)
    q = np.einsum("btm,km->btk", X, Wq)
    assert q.max() < -80.0
    tol = 8 * np.finfo(np.float32).eps * np.abs(q).max()
    a32 = [a.astype(np.float32) for a in (X, Wq, Wk, Wv, dY)]
    for method in la.METHODS:
        Y = la.forward(*a32[:4], decay, method=method, chunk=CHUNK, **kw32)
        assert rel(Y, Y_ref) <= tol, (method, rel(Y, Y_ref))
        g = la.backward(*a32, decay, method=method, chunk=CHUNK, **kw32)
        check_grads(g, g_ref, np.float32, tol, method)


def test_a_row_of_q_far_below_zero_is_its_direction():
    """q_t = W_q x_t = -1e3 * (sum of x_t) in every entry: phi(q_t) = exp(q_t) is 0 in float64
    too, yet y_t, unchanged by phi(q_t)'s scale, is what phi(q_t) = (1, ..., 1) gives (Wq = 0),
    in every method."""
    X, Wq, Wk, Wv, dY, _ = make(12)
    X = np.abs(X)
    for method in la.METHODS:
        Y = la.forward(X, -1e3 * np.ones_like(Wq), Wk, Wv, method=method)
        assert rel(Y, la.forward(X, np.zeros_like(Wq), Wk, Wv, method=method)) <= 1e-14, method
