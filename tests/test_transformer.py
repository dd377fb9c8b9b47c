"""harness.kernels.transformer against torch.nn.TransformerEncoderLayer / DecoderLayer, its
NumPy twins in tests/naive_transformer.py and central finite differences; the tiled attention
against the stored one; the forward's tape; and every input check.

Tolerances (stated once), relative to the largest entry of each array (naive.rel_err):
float64 against torch and against the twins, 1e-11 (measured: 1.5e-15 and 1.8e-15); float32
against the float64 twins, 1e-5 for outputs and 1e-4 for gradients (measured: 1.7e-7 and
8.3e-7); tiled against stored, 1e-12 in float64 and 1e-5 in float32 (measured: 2.5e-15 and
7.8e-7); central differences in float64, 1e-6 (measured: 4.1e-9), and the same at X x 1e4 ...
1e150 (measured: 1.2e-9), where float32 is held to float64's dX within 1e-4 (measured:
3.4e-7) or names X. GELU and its derivative against scipy's erf, 1e-15 (measured: 4.6e-16).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import naive
import naive_transformer as nt
from _deps import require_module
from harness.infra import workspace
from harness.kernels import transformer as tr

D, H, D_FF, T, S, B = 12, 3, 20, 7, 5, 2       # odd shapes: d_k = 4, T != S
TOL64 = 1e-11
FD_TOL = 1e-6
KINDS = ("encoder", "decoder")
CASES = [(kind, norm_first, activation, causal, batched)
         for kind in KINDS for norm_first in (False, True) for activation in tr.ACTIVATIONS
         for causal in (False, True) for batched in (False, True)]


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.clear()
    yield
    workspace.clear()


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles and causal blocks smaller than T = 11 and S = 9, and none dividing them: every
    edge case of the loops (a last partial tile, a key tile past a query tile's diagonal)."""
    monkeypatch.setattr(tr, "TILE_Q", 3)
    monkeypatch.setattr(tr, "TILE_K", 4)
    monkeypatch.setattr(tr, "CAUSAL_ROWS", 3)


def make(kind, seed=0, dtype=np.float64, batched=False, d=D, d_ff=D_FF, t=T, s=S):
    """params (torch's state_dict keys), X, memory (None for an encoder) and dY."""
    rng = np.random.default_rng(seed)
    keys = tr.ENCODER_KEYS if kind == "encoder" else tr.DECODER_KEYS
    params = {}
    for k in keys:
        shape = tr._param_shape(k, d, d_ff)
        if k.startswith("norm") and k.endswith("weight"):
            params[k] = 1.0 + 0.3 * rng.normal(size=shape)
        else:
            params[k] = rng.normal(size=shape) / math.sqrt(shape[-1])
    lead = (B,) if batched else ()
    X = rng.normal(size=lead + (t, d))
    memory = rng.normal(size=lead + (s, d)) if kind == "decoder" else None
    dY = rng.normal(size=X.shape)
    cast = (lambda a: None if a is None else a.astype(dtype))
    return {k: cast(a) for k, a in params.items()}, cast(X), cast(memory), cast(dY)


def forward(kind, X, memory, params, **kw):
    if kind == "encoder":
        return tr.encoder_layer(X, params, H, **kw)
    return tr.decoder_layer(X, memory, params, H, **kw)


def backward(kind, X, memory, params, dY, **kw):
    if kind == "encoder":
        return tr.encoder_layer_backward(X, params, H, dY, **kw)
    return tr.decoder_layer_backward(X, memory, params, H, dY, **kw)


def twin(kind, X, memory, params, dY=None, **kw):
    if kind == "encoder":
        if dY is None:
            return nt.encoder_layer(X, params, H, **kw)
        return nt.encoder_layer_backward(X, params, H, dY, **kw)
    if dY is None:
        return nt.decoder_layer(X, memory, params, H, **kw)
    return nt.decoder_layer_backward(X, memory, params, H, dY, **kw)


def agree(name, got, want, tol, scale=0.0):
    err = naive.rel_err(got, want, scale)
    assert err <= tol, f"{name}: relative error {err:.2e} > {tol:.0e}"


# -------------------------------------------------------------------- torch

@pytest.fixture(scope="module")
def torch():
    return require_module("torch", "pip install -e '.[torch]'")


def torch_layer(torch, kind, params, norm_first, activation):
    cls = torch.nn.TransformerEncoderLayer if kind == "encoder" else torch.nn.TransformerDecoderLayer
    layer = cls(D, H, D_FF, dropout=0.0, activation=activation, batch_first=True,
                norm_first=norm_first).double()
    layer.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()})
    return layer.eval()          # eval, but with inputs that require grad: torch's normal path


@pytest.mark.parametrize("kind,norm_first,activation,causal,batched", CASES)
def test_matches_torch(torch, kind, norm_first, activation, causal, batched):
    params, X, memory, dY = make(kind, 1, batched=batched)
    layer = torch_layer(torch, kind, params, norm_first, activation)
    Xt = torch.tensor(X, requires_grad=True)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64) if causal else None
    if kind == "encoder":
        Yt = layer(Xt, src_mask=mask, is_causal=causal)
    else:
        Mt = torch.tensor(memory, requires_grad=True)
        Yt = layer(Xt, Mt, tgt_mask=mask, tgt_is_causal=causal)
    Yt.backward(torch.from_numpy(dY))
    want = {k: p.grad.numpy() for k, p in layer.named_parameters()}
    want["X"] = Xt.grad.numpy()
    if kind == "decoder":
        want["memory"] = Mt.grad.numpy()

    kw = dict(norm_first=norm_first, activation=activation, causal=causal)
    Y = forward(kind, X, memory, params, **kw)
    assert Y.shape == X.shape and Y.dtype == np.float64
    agree("Y", Y, Yt.detach().numpy(), TOL64)
    got = backward(kind, X, memory, params, dY, **kw)
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape, k
        agree(k, got[k], want[k], TOL64)


# ------------------------------------------------------------------- twins

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind,norm_first,activation,causal,batched", CASES[::3])
def test_matches_naive(dtype, kind, norm_first, activation, causal, batched):
    params, X, memory, dY = make(kind, 2, dtype, batched)
    kw = dict(norm_first=norm_first, activation=activation, causal=causal)
    Y = forward(kind, X, memory, params, **kw)
    assert Y.dtype == np.dtype(dtype)
    agree("Y", Y, twin(kind, X, memory, params, **kw), TOL64 if dtype == np.float64 else 1e-5)
    got = backward(kind, X, memory, params, dY, **kw)
    want = twin(kind, X, memory, params, dY, **kw)
    for k in want:
        assert got[k].dtype == np.dtype(dtype), k
        agree(k, got[k], want[k], TOL64 if dtype == np.float64 else 1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_finite_differences(kind):
    # tiny: d_model 4, 2 heads, d_ff 6, T 3, memory 2; GELU (smooth), pre- and post-norm
    d, heads, d_ff, t, s = 4, 2, 6, 3, 2
    for norm_first in (False, True):
        params, X, memory, dY = make(kind, 3, d=d, d_ff=d_ff, t=t, s=s)

        def loss(X=X, memory=memory, params=params):
            f = tr.encoder_layer if kind == "encoder" else (
                lambda X_, p_, h, **kw: tr.decoder_layer(X_, memory, p_, h, **kw))
            return float(np.sum(f(X, params, heads, norm_first=norm_first, activation="gelu")
                                * dY))

        if kind == "encoder":
            got = tr.encoder_layer_backward(X, params, heads, dY, norm_first=norm_first,
                                            activation="gelu")
        else:
            got = tr.decoder_layer_backward(X, memory, params, heads, dY, norm_first=norm_first,
                                            activation="gelu")
        arrays = dict(params, X=X) if memory is None else dict(params, X=X, memory=memory)
        h = 1e-6
        for name, a in arrays.items():
            fd = np.zeros_like(a)
            for i in np.ndindex(a.shape):
                old = a[i]
                a[i] = old + h
                up = loss()
                a[i] = old - h
                down = loss()
                a[i] = old
                fd[i] = (up - down) / (2 * h)
            agree(f"{name} (norm_first={norm_first})", got[name], fd, FD_TOL)


# ------------------------------------------------------------ tiled and stored

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind,norm_first,activation,causal,batched",
                         [c for c in CASES if c[1] == c[4] and c[2] == "relu"]
                         + [("decoder", True, "gelu", True, False)])
def test_tiled_equals_stored(small_tiles, dtype, kind, norm_first, activation, causal, batched):
    params, X, memory, dY = make(kind, 4, dtype, batched, t=11, s=9)
    kw = dict(norm_first=norm_first, activation=activation, causal=causal)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    Y1 = forward(kind, X, memory, params, tiled=False, **kw)
    Y2 = forward(kind, X, memory, params, tiled=True, **kw)
    agree("Y", Y2, Y1, tol)
    g1 = backward(kind, X, memory, params, dY, tiled=False, **kw)
    g2 = backward(kind, X, memory, params, dY, tiled=True, **kw)
    for k in g1:
        agree(k, g2[k], g1[k], tol)
    if dtype == np.float64:                   # and both are right, blocks and tiles alike
        for k, want in twin(kind, X, memory, params, dY, **kw).items():
            agree(k, g2[k], want, TOL64)


def test_long_sequences_go_through_tiles_and_store_nothing_t_by_t():
    t = tr.TILED_FROM                           # the first T that takes tiles; a tile is < T^2
    params, X, memory, dY = make("decoder", 5, np.float32, t=t, s=t, d=8, d_ff=8)
    tr.decoder_layer(X, memory, params, 2)
    inputs, options, tape = workspace.kept("transformer.decoder")
    assert "0.lse" in tape and "1.lse" in tape
    assert not any(k.endswith("weights") for k in tape)
    tr.decoder_layer_backward(X, memory, params, 2, dY)
    for (name, _), buf in workspace._local.buffers.items():
        assert buf.size < t * t, f"buffer {name} holds {buf.size} elements, T^2 = {t * t}"


def test_short_sequences_store_the_weights():
    params, X, memory, dY = make("decoder", 5)
    tr.decoder_layer(X, memory, params, H)
    tape = workspace.kept("transformer.decoder")[2]
    assert "0.weights" in tape and "1.weights" in tape


# ------------------------------------------------------------------- large inputs
# X x s saturates the self-attention's softmax (scores ~ s^2): one weight per row near 1, and
# dE = scale A (dA - D) is a difference of two near-equal numbers. Computed as it reads, dX
# (post-norm, float64) was 7.6e-9 off at s = 1e4, 0.16 at 1e8 and 3.6e284 at 1e150, and in
# float32 at 1e8 max |dX| was 55 where the truth is 4.7e-8 (make's encoder, 3 heads). Here
# heads of d_k = 6 (scale = 1 / sqrt 6, not a power of 2, which hid a rounding of the tiled
# path's log-sum-exp) and tiles and blocks smaller than T: a row's largest weight then meets
# its backward in a tile other than the first.

LARGE = (1e4, 1e8, 1e16, 1e50, 1e150)
H_LARGE = 2                                      # d_k = 6
# each layer kind, post- and pre-norm, with the tiled attention and without
LAYERS = [(kind, norm_first, tiled) for kind in KINDS for norm_first in (False, True)
          for tiled in (False, True)]


def along(kind, X, memory, params, V, **kw):
    """<Y(X), V> (float64) by the public forward."""
    if kind == "encoder":
        Y = tr.encoder_layer(X, params, H_LARGE, **kw)
    else:
        Y = tr.decoder_layer(X, memory, params, H_LARGE, **kw)
    return float(np.sum(Y.astype(np.float64) * V))


def central(f, X, V, s):
    """d/dh f(X + h V) at 0: central differences with steps relative to s (1e-5 s and twice
    that), Richardson-extrapolated. At s = 1e150, a step of 1e-6 would be lost in X."""
    h = 1e-5 * s
    d1 = (f(X + h * V) - f(X - h * V)) / (2 * h)
    d2 = (f(X + 2 * h * V) - f(X - 2 * h * V)) / (4 * h)
    return (4 * d1 - d2) / 3


@pytest.mark.parametrize("kind, norm_first, tiled", LAYERS)
def test_gradients_at_large_inputs_match_central_differences(small_tiles, kind, norm_first, tiled):
    params, X0, memory, dY = make(kind, 20, t=11, s=9)
    V = np.random.default_rng(21).normal(size=X0.shape)
    kw = dict(norm_first=norm_first, tiled=tiled)
    backward_ = (tr.encoder_layer_backward if kind == "encoder" else
                 lambda X, p, h, dY, **kw: tr.decoder_layer_backward(X, memory, p, h, dY, **kw))
    for s in LARGE:
        X = X0 * s
        with warnings.catch_warnings():
            warnings.simplefilter("error")               # none expected: the digits survive
            dX = backward_(X, params, H_LARGE, dY, **kw)["X"]
        want = central(lambda X_: along(kind, X_, memory, params, dY, **kw), X, V, s)
        err = abs(float(np.sum(dX * V)) - want) / abs(want)
        assert err <= FD_TOL, f"X x {s:.0e}: <dX, V> relative error {err:.1e} > {FD_TOL:.0e}"


@pytest.mark.parametrize("kind, norm_first, tiled", LAYERS)
def test_float32_gradients_at_large_inputs_or_an_error_naming_x(small_tiles, kind, norm_first,
                                                                tiled):
    # against float64's (checked above); where X x s or the layer is beyond float32, an error
    # that names X
    params, X0, memory, dY = make(kind, 22, t=11, s=9)
    p32 = {k: v.astype(np.float32) for k, v in params.items()}
    m32 = None if memory is None else memory.astype(np.float32)
    kw = dict(norm_first=norm_first, tiled=tiled)

    def backward_(X, p, dY, m):
        if kind == "encoder":
            return tr.encoder_layer_backward(X, p, H_LARGE, dY, **kw)["X"]
        return tr.decoder_layer_backward(X, m, p, H_LARGE, dY, **kw)["X"]

    for s in LARGE:
        with np.errstate(over="ignore"):
            X32 = (X0 * s).astype(np.float32)             # inf past 3.4e38: X names itself
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if s > 1e19:                                  # the scores ~ s^2 past float32
                with pytest.raises((ValueError, FloatingPointError), match=r"\bX\b"):
                    backward_(X32, p32, dY.astype(np.float32), m32)
                continue
            got = backward_(X32, p32, dY.astype(np.float32), m32)
        want = backward_(X32.astype(np.float64), params, dY, memory)
        agree(f"dX at X x {s:.0e}", got, want, 1e-4)


def test_a_backward_whose_recomputed_weights_are_not_the_forwards_names_x():
    # the tiled backward recomputes the weights from the forward's shift and log-sum; should
    # they ever differ (scores rounded otherwise), it says so instead of returning them
    params, X, _, dY = make("encoder", 23)
    tr.encoder_layer(X, params, H, tiled=True)
    workspace.kept("transformer.encoder")[2]["0.lse"][1] += 1.0      # log l: weights / e
    with pytest.raises(FloatingPointError, match=r"X is too large for the tiled attention's "
                                                 r"backward: .* digits lost; scale X down or "
                                                 r"pass tiled=False"):
        tr.encoder_layer_backward(X, params, H, dY, tiled=True)


def test_layer_norm_of_rows_past_float64s_squares():
    # pre-norm at X x 1e300: the norm's sum of squares overflows float64 (it did, and the
    # normed rows came out as beta); scaled first, every gradient is X x 1e100's
    params, X, _, dY = make("encoder", 24)
    small = tr.encoder_layer_backward(X * 1e100, params, H, dY, norm_first=True)
    large = tr.encoder_layer_backward(X * 1e300, params, H, dY, norm_first=True)
    for k in small:
        agree(k, large[k], small[k], TOL64)


# ------------------------------------------------------------------- the tape

@pytest.mark.parametrize("kind", KINDS)
def test_backward_from_the_tape_equals_backward_alone(kind):
    params, X, memory, dY = make(kind, 6)
    alone = backward(kind, X, memory, params, dY)
    workspace.clear()
    forward(kind, X, memory, params)
    from_tape = backward(kind, X, memory, params, dY)
    for k in alone:
        np.testing.assert_array_equal(from_tape[k], alone[k])


@pytest.mark.parametrize("change", ["X in place", "a weight in place", "memory in place", "causal",
                                    "activation", "dtype"])
def test_backward_recomputes_when_anything_changed(change):
    params, X, memory, dY = make("decoder", 7)
    kw = dict(causal=True, activation="relu")
    tr.decoder_layer(X, memory, params, H, **kw)
    if change == "X in place":
        X[0, 0] += 1.0
    elif change == "a weight in place":
        params["linear2.weight"][1, 2] *= -1.0
    elif change == "memory in place":
        memory[-1, -1] -= 0.5
    elif change == "causal":
        kw["causal"] = False
    elif change == "activation":
        kw["activation"] = "gelu"
    else:
        X, memory, dY = (a.astype(np.float32) for a in (X, memory, dY))
        params = {k: a.astype(np.float32) for k, a in params.items()}
    got = tr.decoder_layer_backward(X, memory, params, H, dY, **kw)
    want = nt.decoder_layer_backward(X, memory, params, H, dY, **kw)
    for k in want:
        agree(k, got[k], want[k], TOL64 if X.dtype == np.float64 else 1e-4)


def test_an_encoder_between_a_decoder_forward_and_backward_changes_nothing():
    pd, X, memory, dY = make("decoder", 8)
    pe, Xe, _, _ = make("encoder", 9)
    tr.decoder_layer(X, memory, pd, H)
    tr.encoder_layer(Xe, pe, H)
    got = tr.decoder_layer_backward(X, memory, pd, H, dY)
    for k, want in nt.decoder_layer_backward(X, memory, pd, H, dY).items():
        agree(k, got[k], want, TOL64)


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_are_never_written(kind):
    params, X, memory, dY = make(kind, 10, batched=True)
    copies = {k: a.copy() for k, a in params.items()}
    X0, dY0 = X.copy(), dY.copy()
    M0 = None if memory is None else memory.copy()
    for tiled in (False, True):
        for act in tr.ACTIVATIONS:
            forward(kind, X, memory, params, activation=act, tiled=tiled)
            backward(kind, X, memory, params, dY, activation=act, tiled=tiled)
    for k in params:
        np.testing.assert_array_equal(params[k], copies[k])
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(dY, dY0)
    if memory is not None:
        np.testing.assert_array_equal(memory, M0)


def test_outputs_are_fresh_arrays():
    params, X, memory, dY = make("decoder", 11)
    Y1 = tr.decoder_layer(X, memory, params, H)
    g1 = tr.decoder_layer_backward(X, memory, params, H, dY)
    Y1c, g1c = Y1.copy(), {k: g.copy() for k, g in g1.items()}
    tr.decoder_layer(X + 1.0, memory, params, H)
    tr.decoder_layer_backward(X + 1.0, memory, params, H, dY)
    np.testing.assert_array_equal(Y1, Y1c)
    for k in g1:
        np.testing.assert_array_equal(g1[k], g1c[k])


def test_public_alias_is_the_kernel_module():
    from harness import transformer
    import harness.transformer
    assert transformer is tr and harness.transformer is tr


def test_non_contiguous_and_list_inputs_are_accepted():
    params, X, memory, dY = make("encoder", 12)
    want = tr.encoder_layer(X, params, H)
    Xf = np.asfortranarray(X)
    p = dict(params, **{"linear1.weight": np.asfortranarray(params["linear1.weight"])})
    np.testing.assert_array_equal(tr.encoder_layer(Xf, p, H), want)
    np.testing.assert_array_equal(tr.encoder_layer(X.tolist(), params, H), want)


# ------------------------------------------------------------------- GELU

def test_gelu_matches_scipy_erf_everywhere():
    # dense on [-10, 10], every region boundary of erf (|h| / sqrt 2 = 0.84375, 1.25, 1/0.35,
    # 6) from both sides, and far out
    edges = np.array([0.84375, 1.25, 1 / 0.35, 6.0]) * math.sqrt(2.0)
    h = np.concatenate([np.linspace(-10, 10, 20001), edges, -edges,
                        np.nextafter(edges, 0), np.nextafter(edges, 20), [0.0, 1e-300, -40, 40, 1e4, -1e4]])
    H_ = h[None].copy()
    deriv = np.empty_like(H_)
    tr._gelu_inplace(H_, np.zeros(h.size), deriv)
    want, want_grad = nt.gelu(h)
    assert np.max(np.abs(H_[0] - want) / np.maximum(1.0, np.abs(want))) <= 1e-15
    assert np.max(np.abs(deriv[0] - want_grad)) <= 1e-15


# ------------------------------------------------------------------- checks

def _call(kind, X, memory, params, dY=None, **kw):
    heads = kw.pop("heads", H)
    if kind == "encoder":
        if dY is None:
            return tr.encoder_layer(X, params, heads, **kw)
        return tr.encoder_layer_backward(X, params, heads, dY, **kw)
    if dY is None:
        return tr.decoder_layer(X, memory, params, heads, **kw)
    return tr.decoder_layer_backward(X, memory, params, heads, dY, **kw)


def _bad(kind, what):
    """(exception, a piece of its message, inputs) for one wrong input."""
    params, X, memory, dY = make(kind, 13)
    kw = {}
    if what == "params not a dict":
        params, err = [1, 2], (TypeError, "params must be a dict")
    elif what == "missing key":
        del params["norm2.bias"]
        err = ValueError, "params is missing the key(s) ['norm2.bias']"
    elif what == "wrongly shaped key":
        params["self_attn.out_proj.weight"] = params["self_attn.out_proj.weight"][:, :-1].copy()
        err = ValueError, "params['self_attn.out_proj.weight'] must have shape (12, 12)"
    elif what == "d_ff mismatch":
        params["linear2.weight"] = params["linear2.weight"][:, :-1].copy()
        err = ValueError, "params['linear2.weight'] must have shape (12, 20)"
    elif what == "linear1 of another d_model":
        params["linear1.weight"] = params["linear1.weight"][:, :-1].copy()
        err = ValueError, "params['linear1.weight'] must have shape (d_ff, 12)"
    elif what == "heads not dividing":
        kw["heads"], err = 5, (ValueError, "heads must divide d_model = 12")
    elif what == "heads not an int":
        kw["heads"], err = 3.0, (TypeError, "heads must be an integer")
    elif what == "activation unknown":
        kw["activation"], err = "tanh", (ValueError, "activation must be one of ['relu', 'gelu']")
    elif what == "causal not a bool":
        kw["causal"], err = 1, (TypeError, "causal must be True or False")
    elif what == "norm_first not a bool":
        kw["norm_first"], err = "yes", (TypeError, "norm_first must be True or False")
    elif what == "tiled not a bool":
        kw["tiled"], err = 0, (TypeError, "tiled must be True or False")
    elif what == "param dtype mismatch":
        params["norm1.weight"] = params["norm1.weight"].astype(np.float32)
        err = TypeError, "params['norm1.weight'] has dtype float32 but the other inputs are float64"
    elif what == "X integer":
        X, err = np.ones((T, D), dtype=np.int64), (TypeError, "X must have dtype float32 or float64")
    elif what == "X 1-D":
        X, err = X[0], (ValueError, "X must be 2-D or 3-D")
    elif what == "X NaN":
        X[2, 3] = np.nan
        err = ValueError, "X holds 1 NaN or inf value(s)"
    elif what == "param inf":
        params["linear1.bias"][4] = np.inf
        err = ValueError, "params['linear1.bias'] holds 1 NaN or inf value(s)"
    elif what == "memory dtype mismatch":
        memory = None if memory is None else memory.astype(np.float32)
        err = TypeError, "memory has dtype float32 but the other inputs are float64"
    elif what == "memory NaN":
        if memory is not None:
            memory[0, 0] = np.nan
        err = ValueError, "memory holds 1 NaN or inf value(s)"
    elif what == "memory of another width":
        memory = None if memory is None else memory[:, :-1].copy()
        err = ValueError, "memory must have shape (S, 12) to match X's (7, 12)"
    elif what == "memory unbatched for batched X":
        X = X[None]
        err = ValueError, "memory must be 3-D"
    else:
        raise AssertionError(what)
    return err, (X, memory, params, kw)


ERRORS = ["params not a dict", "missing key", "wrongly shaped key", "d_ff mismatch",
          "linear1 of another d_model", "heads not dividing", "heads not an int",
          "activation unknown", "causal not a bool", "norm_first not a bool", "tiled not a bool",
          "param dtype mismatch", "X integer", "X 1-D", "X NaN", "param inf"]
MEMORY_ERRORS = ["memory dtype mismatch", "memory NaN", "memory of another width",
                 "memory unbatched for batched X"]


@pytest.mark.parametrize("backward_", [False, True])
@pytest.mark.parametrize("kind,what", [(k, w) for k in KINDS for w in ERRORS]
                         + [("decoder", w) for w in MEMORY_ERRORS])
def test_each_wrong_input_is_named(kind, what, backward_):
    (exc, message), (X, memory, params, kw) = _bad(kind, what)
    dY = np.ones(np.shape(X)) if backward_ else None
    with pytest.raises(exc) as info:
        _call(kind, X, memory, params, dY, **kw)
    assert message in str(info.value)


@pytest.mark.parametrize("what", ["dY NaN", "dY shape", "dY dtype"])
@pytest.mark.parametrize("after_forward", [False, True])
def test_a_wrong_dy_is_named_even_after_a_forward(what, after_forward):
    params, X, memory, dY = make("decoder", 14)
    if after_forward:
        tr.decoder_layer(X, memory, params, H)
    if what == "dY NaN":
        dY[1, 1] = np.inf
        exc, message = ValueError, "dY holds 1 NaN or inf value(s)"
    elif what == "dY shape":
        dY = dY[:-1]
        exc, message = ValueError, "dY must have shape (7, 12), got (6, 12)"
    else:
        dY = dY.astype(np.float32)
        exc, message = TypeError, "dY has dtype float32 but the other inputs are float64"
    with pytest.raises(exc, match=None) as info:
        tr.decoder_layer_backward(X, memory, params, H, dY)
    assert message in str(info.value)


def test_a_weight_made_nan_after_the_forward_is_named():
    params, X, memory, dY = make("encoder", 15)
    tr.encoder_layer(X, params, H)
    params["linear2.weight"][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"params\['linear2.weight'\] holds 1 NaN"):
        tr.encoder_layer_backward(X, params, H, dY)


def test_an_overflow_is_named_not_returned_as_nan():
    params, X, memory, dY = make("encoder", 16, np.float32)
    params["linear2.weight"][:] = np.float32(3e38)     # sum_j relu(h_j) 3e38: beyond float32
    with pytest.raises(FloatingPointError, match="the output Y overflows float32"):
        tr.encoder_layer(X, params, H, norm_first=True)


# ------------------------------------------------ the softmax's shift, and its fallback

def softmax_attention(Q, K, V, scale, causal):
    """Q (G, T_q, d_k) ... -> O, L (float64), one head at a time."""
    O, L = [], []
    for q, k, v in zip(*(np.asarray(a, dtype=np.float64) for a in (Q, K, V))):
        S = scale * q @ k.T
        if causal:
            S = np.where(np.tri(*S.shape, dtype=bool), S, -np.inf)
        m = S.max(axis=1, keepdims=True)
        E = np.exp(S - m)
        O.append(E @ v / E.sum(axis=1, keepdims=True))
        L.append(m[:, 0] + np.log(E.sum(axis=1)))
    return np.array(O), np.array(L)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("far", [False, True])
def test_attention_kernels_with_a_loose_shift(dtype, causal, far):
    # far: one long key points away from every query, so |q| max|k| is far above every score
    # and the shifted weights underflow: the rows are redone with their maximum
    rng = np.random.default_rng(17)
    G, t, d_k, scale = 2, 13, 4, 0.5
    Q, K, V = (rng.normal(size=(G, t, d_k)) for _ in range(3))
    if far:
        Q[..., 0] = np.abs(Q[..., 0]) + 1.0
        K[:, 5] = 0.0
        K[:, 5, 0] = -1e3 if dtype == np.float32 else -1e4
    Q, K, V = (a.astype(dtype) for a in (Q, K, V))
    want_O, want_L = softmax_attention(Q, K, V, scale, causal)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    O = np.empty_like(Q)
    rows = 3
    size = sum((min(i + rows, t) - i) * min(i + rows, t) for i in range(0, t, rows)) if causal else t * t
    tr._attend_forward(Q, K, V, scale, causal, rows, np.empty((G, size), dtype), np.empty((G, t)), O)
    agree("O stored", O, want_O, tol)
    L = np.empty((2, G, t))                     # the shift m and log l: L = scale m + log l
    tq, tk = 3, 4
    tr._attend_forward_tiled(Q, K, V, scale, causal, tq, tk, O, L,
                             np.empty(tq * tk + 2 * tq * d_k, dtype), np.empty(3 * tq))
    agree("O tiled", O, want_O, tol)
    agree("L tiled", scale * L[0] + L[1], want_L, tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernels_keep_huge_scores_finite(dtype, causal):
    # scores near 1e9 (float32) and 1e150 (float64): the computed q . k may exceed the bound
    # |q| max|k| by its rounding, which must not overflow exp; the weights become one-hot-like,
    # so O is a convex combination of V's rows
    rng = np.random.default_rng(18)
    G, t, d_k = 2, 9, 4
    big = 3e4 if dtype == np.float32 else 1e75
    Q, K = (rng.normal(size=(G, t, d_k)) * big for _ in range(2))
    V = rng.normal(size=(G, t, d_k))
    Q, K, V = (a.astype(dtype) for a in (Q, K, V))
    O = np.empty_like(Q)
    rows, tq, tk = 3, 3, 4
    size = sum((min(i + rows, t) - i) * min(i + rows, t) for i in range(0, t, rows)) if causal else t * t
    tr._attend_forward(Q, K, V, 0.5, causal, rows, np.empty((G, size), dtype), np.empty((G, t)), O)
    outs = [O.copy()]
    tr._attend_forward_tiled(Q, K, V, 0.5, causal, tq, tk, O, np.empty((2, G, t)),
                             np.empty(tq * tk + 2 * tq * d_k, dtype), np.empty(3 * tq))
    outs.append(O)
    for out in outs:
        assert np.isfinite(out).all()
        assert (out <= V.max(axis=1, keepdims=True) + 1e-5).all()
        assert (out >= V.min(axis=1, keepdims=True) - 1e-5).all()


def test_stored_weights_that_will_not_fit_are_refused_before_allocating(monkeypatch):
    from harness.infra import validate
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 2**20)
    params, X, _, _ = make("encoder", 19, t=1500, d=8, d_ff=8)        # 8 heads: 144 MB of weights
    with pytest.raises(MemoryError, match=r"an encoder layer at T = 1500, its attention weights "
                                          r"stored \(pass tiled=True\)"):
        tr.encoder_layer(X, params, 8, tiled=False)
