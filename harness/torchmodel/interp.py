"""An exported core-ATen graph run on the tracer's recording arrays (``harness.analysis.trace``).

Each node of ``torch.export``'s graph (``harness.torchmodel.export``) becomes the tracer's
operations, so that the depth tables read a user's PyTorch module as they read a family's
NumPy forward:

* the parameters and buffers are weight inputs named by their state_dict key: a product with
  one is counted under that name (``Graph.weight_parts``); the first ``--shape`` is the
  sequence, its row 0 on dimension -2 input position 1; further ``--shape`` inputs are
  counted under their names as ``--forward``'s are;
* a value computed from constants alone (``full``, ``arange``, a mask built from them) is
  computed by PyTorch and enters the trace as a constant, which waits for nothing;
* views (``view``, ``permute``, ``expand``, ``slice``, ``select``, ``cat`` ...) are free, as
  the tracer's are; ``addmm`` is a product and an add, ``linear`` too; ``_softmax`` is the
  lessons' max, subtract, exp, sum, divide; ``native_layer_norm`` is
  ``harness.models.reference.layer_norm``'s eleven operations; a 1-D ``convolution`` is one
  product of its weight with the stacked shifted inputs (inner length C_in k / groups);
* a scan (``cumsum``, ``cumprod``) is, with ``scan="chain"``, T - 1 dependent operations,
  what the code does serially; with ``scan="tree"``, a Hillis-Steele scan: ceil(log2 T)
  levels, each one operation over every element (T ceil(log2 T) work);
* a product is named "grid" when its output's last two axes are T wide and "mix" when it
  contracts over a T-wide axis (as the tracer names the families'): axes are told apart by
  their size, so give a T that differs from the module's widths.

An op the interpreter does not know stops the trace with ``UnsupportedOp``: one line naming
the op and the line of the user's source that called it (the node's ``stack_trace``).
"""

from __future__ import annotations

import math
import operator
import re
import time
from dataclasses import dataclass, field

import numpy as np

from harness.analysis import depth, trace
from harness.analysis.trace import Traced
from harness.infra.files import UsageError

SCANS = ("chain", "tree")


class UnsupportedOp(TypeError):
    """An ATen op the interpreter does not trace; the message is one line."""


@dataclass
class TorchTrace(depth.Trace):
    """A traced export: depth.Trace's graph and outputs, and the multiplications by ATen op."""
    macs_by_op: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- helpers

def _traced(*xs):
    return next((x for x in xs if isinstance(x, Traced)), None)


def _np(x):
    """A constant operand as the tracer takes it: a tensor as an ndarray, a number as is."""
    import torch
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bool:
            return x.numpy()
        return x.to(torch.float32).numpy() if x.is_floating_point() else x.numpy()
    return x


def _ew(kind, *xs):
    ref = _traced(*xs)
    return ref._elementwise(kind, *[x if isinstance(x, Traced) else _np(x) for x in xs])


def _dim(d, ndim):
    return int(d) % max(ndim, 1)


def _index(x, dim, idx):
    key = [slice(None)] * x.ndim
    key[_dim(dim, x.ndim)] = idx
    return x[tuple(key)]


def _shape(x):
    return tuple(x.shape)


def _like(node, value):
    """A constant of ``node``'s output shape filled with ``value``: a zero-stride ndarray."""
    val = node.meta.get("val")
    return np.broadcast_to(np.float32(value), tuple(int(s) for s in val.shape))


def _matmul(a, b):
    a = a if isinstance(a, Traced) else _np(a)
    b = b if isinstance(b, Traced) else _np(b)
    ref = _traced(a, b)
    return ref._matmul(a, b)


def _scaled(x, s):
    return x if s == 1 else _ew("mul", x, s)


# ----------------------------------------------------------------------------- the op table

def _add(n, x, y, alpha=1):
    return _ew("add", x, _scaled(y, alpha))


def _sub(n, x, y, alpha=1):
    return _ew("sub", x, _scaled(y, alpha))


def _rsub(n, x, y, alpha=1):
    return _ew("sub", y, _scaled(x, alpha))


def _div(n, x, y, rounding_mode=None):
    return _ew("div" if rounding_mode is None else f"div_{rounding_mode}", x, y)


def _pow(n, x, e):
    if isinstance(e, (int, float)) and e == 2:
        return _ew("mul", x, x)                      # x ** 2: one product per element
    if isinstance(e, (int, float)) and e == 0.5:
        return _ew("sqrt", x)
    return _ew("pow", x, e)


def _clamp(n, x, lo=None, hi=None):
    if lo is not None:
        x = _ew("maximum", x, lo)
    if hi is not None:
        x = _ew("minimum", x, hi)
    return x


def _reduce(kind, x, dims, keepdim):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = range(x.ndim)
    elif isinstance(dims, int):
        dims = [dims]
    if x.ndim == 0:
        return x
    return x.reduce_axes(kind, [int(d) for d in dims], keepdim)


def _count(x, dims):
    dims = range(x.ndim) if not dims else ([dims] if isinstance(dims, int) else dims)
    return math.prod(x.shape[_dim(d, x.ndim)] for d in dims)


def _sum(n, x, dims=None, keepdim=False, dtype=None):
    return _reduce("sum", x, dims, keepdim)


def _mean(n, x, dims=None, keepdim=False, dtype=None):
    return _ew("div", _reduce("sum", x, dims, keepdim), float(_count(x, dims)))


def _amax(n, x, dims=(), keepdim=False):
    return _reduce("max", x, dims, keepdim)


def _max_dim(n, x, dim=None, keepdim=False):
    if isinstance(dim, Traced) or hasattr(dim, "shape"):
        return _ew("maximum", x, dim)                 # max.other: elementwise
    v = _reduce("max", x, dim, keepdim)
    return v if dim is None else (v, v)               # the indices wait for the same compares


def _var(n, x, dims=None, correction=None, keepdim=False, unbiased=None):
    xc = _ew("sub", x, _reduce_mean(x, dims))
    m = _count(x, dims) - (1 if correction is None else correction)
    return _ew("div", _reduce("sum", _ew("mul", xc, xc), dims, keepdim), float(max(m, 1)))


def _reduce_mean(x, dims):
    return _ew("div", _reduce("sum", x, dims, True), float(_count(x, dims)))


def _softmax(n, x, dim, *rest):
    # the lessons' softmax_rows: shift by the maximum, exp, sum, divide
    z = _ew("exp", _ew("sub", x, _reduce("max", x, dim, True)))
    return _ew("div", z, _reduce("sum", z, dim, True))


def _log_softmax(n, x, dim, *rest):
    s = _ew("sub", x, _reduce("max", x, dim, True))
    return _ew("sub", s, _ew("log", _reduce("sum", _ew("exp", s), dim, True)))


def _layer_norm(n, x, shape, w=None, b=None, eps=1e-5):
    # harness.models.reference.layer_norm, op for op, over the normalised (last) axes
    dims = list(range(x.ndim - len(shape), x.ndim))
    k = float(math.prod(shape))
    xc = _ew("sub", x, _ew("div", _reduce("sum", x, dims, True), k))
    var = _ew("div", _reduce("sum", _ew("mul", xc, xc), dims, True), k)
    std = _ew("sqrt", _ew("add", var, eps))
    y = _ew("div", xc, std)
    if w is not None:
        y = _ew("mul", y, w)
    if b is not None:
        y = _ew("add", y, b)
    used = {u.args[1] for u in n.users if u.target is operator.getitem}
    mean = xc if 1 not in used else _ew("div", _reduce("sum", x, dims, True), k)
    rstd = _ew("div", 1.0, std) if 2 in used else std
    return (y, mean, rstd)


def _batch_norm(n, x, w, b, mean, var, momentum, eps):
    # inference: (x - running_mean) / sqrt(running_var + eps) * w + b, per channel (dim 1)
    shape = (1, -1) + (1,) * (x.ndim - 2)

    def chan(v):
        if v is None:
            return None
        return v.reshape_kept(tuple(v.shape[0] if s == -1 else s for s in shape)) \
            if isinstance(v, Traced) else _np(v).reshape(shape)

    y = _ew("div", _ew("sub", x, chan(mean)), _ew("sqrt", _ew("add", chan(var), eps)))
    if w is not None:
        y = _ew("mul", y, chan(w))
    if b is not None:
        y = _ew("add", y, chan(b))
    return (y, y, y)


def _mm(n, a, b):
    return _matmul(a, b)


def _addmm(n, bias, a, b, beta=1, alpha=1):
    return _ew("add", _scaled(_matmul(a, b), alpha), _scaled(bias, beta))


def _linear(n, x, w, b=None):
    y = _matmul(x, w.T if isinstance(w, Traced) else _np(w).T)
    return y if b is None else _ew("add", y, b)


def _conv(n, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    """A 1-D convolution as its products: per group, the weight (C_out/g, C_in/g k) times
    the k shifted, strided views of the padded input stacked (C_in/g k, L_out)."""
    if transposed or len(stride) != 1 or not isinstance(x, Traced):
        raise UnsupportedOp("convolution other than a 1-D, not transposed one of a traced "
                            "input")
    (s,), (p,), (dil,) = stride, padding, dilation
    C_out, C_g, k = _shape(w)
    if p:
        x = _pad(n, x, [p, p], 0.0)
    L = x.shape[-1]
    L_out = (L - dil * (k - 1) - 1) // s + 1
    outs = []
    for g in range(groups):
        xg = x[..., g * C_g:(g + 1) * C_g, :]
        taps = [xg[..., j * dil:j * dil + s * (L_out - 1) + 1:s] for j in range(k)]
        cols = trace._stack(taps, axis=-2)                        # (..., C_g, k, L_out)
        cols = cols.reshape_kept(cols.shape[:-3] + (C_g * k, L_out))
        rows = C_out // groups
        wg = w[g * rows:(g + 1) * rows] if isinstance(w, Traced) else _np(w)[g * rows:(g + 1) * rows]
        wg = wg.reshape_kept((rows, C_g * k)) if isinstance(wg, Traced) else wg.reshape(rows, C_g * k)
        if isinstance(wg, Traced):
            wg.leaf = w.leaf
        outs.append(_matmul(wg, cols))                            # (..., C_out/g, L_out)
    y = outs[0] if groups == 1 else trace._concatenate(outs, axis=-2)
    if b is not None:
        bb = b.reshape_kept((C_out, 1)) if isinstance(b, Traced) else _np(b).reshape(C_out, 1)
        y = _ew("add", y, bb)
    return y


def _pad(n, x, pad, value=0.0):
    """constant_pad_nd: constant blocks concatenated on each side (free, as the tracer's
    concatenate); a negative pad slices."""
    for i in range(len(pad) // 2):
        axis = x.ndim - 1 - i
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        if lo < 0 or hi < 0:
            x = _index(x, axis, slice(max(-lo, 0), x.shape[axis] - max(-hi, 0)))
            lo, hi = max(lo, 0), max(hi, 0)
        parts = []
        for w in (lo, hi):
            shape = list(x.shape)
            shape[axis] = w
            parts.append(np.full(shape, value, np.float32) if w else None)
        pieces = [q for q in (parts[0], x, parts[1]) if q is not None]
        if len(pieces) > 1:
            x = trace._concatenate(pieces, axis=axis)
    return x


def _scan(kind):
    def scan(n, x, dim, dtype=None):
        return _SCAN_MODE[0](kind, x, _dim(dim, x.ndim))
    return scan


def _scan_chain(kind, x, dim):
    """T - 1 dependent ops: y_t = y_{t-1} (+ or *) x_t, what a loop does."""
    rows = [_index(x, dim, 0)]
    for t in range(1, x.shape[dim]):
        rows.append(_ew(kind, rows[-1], _index(x, dim, t)))
    return trace._stack(rows, axis=dim)


def _scan_tree(kind, x, dim):
    """Hillis-Steele: at level j every element combines with the one 2^j before it (the
    identity shifted in), ceil(log2 T) ops of every element each."""
    n, step = x.shape[dim], 1
    ident = 0.0 if kind == "add" else 1.0
    while step < n:
        shape = list(x.shape)
        shape[dim] = step
        shifted = trace._concatenate([np.full(shape, ident, np.float32),
                                      _index(x, dim, slice(0, n - step))], axis=dim)
        x = _ew(kind, x, shifted)
        step *= 2
    return x


_SCAN_MODE = [_scan_chain]


def _recurrent(n, x, weights, mode, num_layers, hidden, batch_first, has_bias):
    """``harness::recurrent`` step by step, op for op as torch.export unrolls nn.RNN, nn.LSTM
    and nn.GRU: the input product of all steps at once (addmm: product, + b_ih), then per
    step h @ W_hh^T + b_hh and the gates, PyTorch's equations in its gate order."""
    per = 4 if has_bias else 2
    seq = x if (batch_first or x.ndim == 2) else x.transpose([1, 0, 2])    # (..., T, d_in)
    hs_n, cs_n = [], []
    for layer in range(num_layers):
        W_ih, W_hh, *b = weights[per * layer:per * (layer + 1)]
        b_ih, b_hh = b if b else (None, None)
        XW = _linear(n, seq, W_ih, b_ih)                          # (..., T, G d_h)
        h = c = np.zeros(seq.shape[:-2] + (hidden,), np.float32)
        states = []
        for t in range(seq.shape[-2]):
            a = _linear(n, h, W_hh, b_hh)                         # (..., G d_h)
            x_t = XW[..., t, :]
            if mode == "LSTM":
                a = _ew("add", a, x_t)
                i, f, g, o = (a[..., k * hidden:(k + 1) * hidden] for k in range(4))
                i, f, g, o = _ew("sigmoid", i), _ew("sigmoid", f), _ew("tanh", g), _ew("sigmoid", o)
                c = _ew("add", _ew("mul", f, c), _ew("mul", i, g))
                h = _ew("mul", o, _ew("tanh", c))
            elif mode == "GRU":
                r = _ew("sigmoid", _ew("add", a[..., :hidden], x_t[..., :hidden]))
                z = _ew("sigmoid", _ew("add", a[..., hidden:2 * hidden],
                                       x_t[..., hidden:2 * hidden]))
                m = _ew("tanh", _ew("add", x_t[..., 2 * hidden:],
                                    _ew("mul", a[..., 2 * hidden:], r)))
                h = _ew("add", _ew("mul", _ew("sub", h, m), z), m)
            else:
                a = _ew("add", a, x_t)
                h = _ew("tanh", a) if mode == "RNN_TANH" else _ew("maximum", a, 0.0)
            states.append(h)
        seq = trace._stack(states, axis=-2)                        # (..., T, d_h)
        hs_n.append(h)
        cs_n.append(c if mode == "LSTM" else h)
    out = seq if (batch_first or x.ndim == 2) else seq.transpose([1, 0, 2])
    return out, trace._stack(hs_n, axis=0), trace._stack(cs_n, axis=0)


def _view(n, x, shape, *rest):
    shape = tuple(int(s) for s in shape)
    return x.reshape_kept(shape)


def _permute(n, x, dims):
    return x.transpose([int(d) for d in dims])


def _transpose(n, x, d0, d1):
    perm = list(range(x.ndim))
    a, b = _dim(d0, x.ndim), _dim(d1, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return x.transpose(perm)


def _t(n, x):
    return x if x.ndim < 2 else x.transpose([1, 0])


def _expand(n, x, sizes, implicit=False):
    sizes = list(sizes)
    lead = len(sizes) - x.ndim
    shape = tuple(x.shape[i - lead] if int(s) == -1 else int(s) for i, s in enumerate(sizes))
    return x if shape == x.shape else x.broadcast_to(shape)


def _unsqueeze(n, x, dim):
    dim = int(dim) % (x.ndim + 1)
    return x.reshape_kept(x.shape[:dim] + (1,) + x.shape[dim:])


def _squeeze(n, x, dims=None):
    if dims is None:
        dims = [i for i, s in enumerate(x.shape) if s == 1]
    elif isinstance(dims, int):
        dims = [dims]
    drop = {_dim(d, x.ndim) for d in dims if x.shape[_dim(d, x.ndim)] == 1}
    return x.reshape_kept(tuple(s for i, s in enumerate(x.shape) if i not in drop))


def _same(n, x, *rest, **kwargs):
    return x


def _slice(n, x, dim=0, start=None, end=None, step=1):
    return _index(x, dim, slice(start, end, step))


def _select(n, x, dim, i):
    return _index(x, dim, int(i))


def _narrow(n, x, dim, start, length):
    return _index(x, dim, slice(int(start), int(start) + int(length)))


def _index_tensor(n, x, indices):
    key = tuple(slice(None) if i is None else _np(i) for i in indices)
    return x[key]


def _cat(n, xs, dim=0):
    xs = [x for x in xs if not (hasattr(x, "shape") and tuple(x.shape) == (0,))]
    if not any(isinstance(x, Traced) for x in xs):
        raise UnsupportedOp("cat of constants")
    return trace._concatenate([x if isinstance(x, Traced) else _np(x) for x in xs],
                              axis=_dim(dim, _traced(*xs).ndim))


def _stack(n, xs, dim=0):
    return trace._stack([x if isinstance(x, Traced) else _np(x) for x in xs],
                        axis=int(dim) % (_traced(*xs).ndim + 1))


def _split(n, x, size, dim=0):
    dim = _dim(dim, x.ndim)
    L = x.shape[dim]
    bounds = range(0, L, int(size))
    return [_index(x, dim, slice(a, min(a + int(size), L))) for a in bounds]


def _split_sizes(n, x, sizes, dim=0):
    dim, out, a = _dim(dim, x.ndim), [], 0
    for s in sizes:
        out.append(_index(x, dim, slice(a, a + int(s))))
        a += int(s)
    return out


def _chunk(n, x, chunks, dim=0):
    dim = _dim(dim, x.ndim)
    return _split(n, x, -(-x.shape[dim] // int(chunks)), dim)


def _unbind(n, x, dim=0):
    dim = _dim(dim, x.ndim)
    return [_index(x, dim, i) for i in range(x.shape[dim])]


def _flip(n, x, dims):
    for d in dims:
        x = _index(x, d, slice(None, None, -1))
    return x


def _where(n, cond, a, b):
    return _ew("where", cond, a, b)


def _masked_fill(n, x, mask, value):
    return _ew("where", mask, value, x)


def _triangle(n, x, diagonal=0):
    return _ew("where", x, 0.0)                     # the mask is constant: one select per element


def _getitem(n, xs, i):
    return xs[i]


def _const_like(value):
    def like(n, x, *rest, **kwargs):
        return _like(n, value(rest) if callable(value) else value)
    return like


def _unary(kind):
    def f(n, x, *rest, **kwargs):
        return _ew(kind, x)
    return f


def _binary(kind):
    def f(n, x, y, *rest, **kwargs):
        return _ew(kind, x, y)
    return f


def _relu(n, x):
    return _ew("maximum", x, 0.0)


def _silu(n, x):
    return _ew("mul", x, _ew("sigmoid", x))


OPS = {
    # elementwise
    "add": _add, "sub": _sub, "rsub": _rsub, "mul": _binary("mul"), "div": _div,
    "maximum": _binary("maximum"), "minimum": _binary("minimum"), "pow": _pow,
    "eq": _binary("compare"), "ne": _binary("compare"), "lt": _binary("compare"),
    "le": _binary("compare"), "gt": _binary("compare"), "ge": _binary("compare"),
    "logical_and": _binary("logical"), "logical_or": _binary("logical"),
    "logical_not": _unary("logical"), "bitwise_not": _unary("logical"),
    "neg": _unary("neg"), "tanh": _unary("tanh"), "sigmoid": _unary("sigmoid"),
    "exp": _unary("exp"), "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"),
    "log": _unary("log"), "log1p": _unary("log1p"), "expm1": _unary("expm1"),
    "abs": _unary("abs"), "reciprocal": _unary("reciprocal"), "sign": _unary("sign"),
    "sin": _unary("sin"), "cos": _unary("cos"), "erf": _unary("erf"),
    "gelu": _unary("gelu"), "softplus": _unary("softplus"), "elu": _unary("elu"),
    "leaky_relu": _unary("leaky_relu"), "hardtanh": _unary("hardtanh"),
    "relu": _relu, "silu": _silu, "clamp": _clamp,
    "clamp_min": lambda n, x, lo: _clamp(n, x, lo, None),
    "clamp_max": lambda n, x, hi: _clamp(n, x, None, hi),
    "where": _where, "masked_fill": _masked_fill, "tril": _triangle, "triu": _triangle,
    # reductions
    "sum": _sum, "mean": _mean, "amax": _amax, "amin": _amax, "any": _amax, "all": _amax,
    "max": _max_dim, "min": _max_dim, "argmax": _amax, "argmin": _amax, "var": _var,
    "_softmax": _softmax, "softmax": _softmax, "_log_softmax": _log_softmax,
    "log_softmax": _log_softmax, "native_layer_norm": _layer_norm,
    "_native_batch_norm_legit_no_training": _batch_norm,
    "cumsum": _scan("add"), "cumprod": _scan("mul"),
    # products
    "mm": _mm, "bmm": _mm, "matmul": _mm, "mv": _mm, "dot": _mm, "addmm": _addmm,
    "baddbmm": _addmm, "addmv": _addmm, "linear": _linear, "convolution": _conv,
    # views: free
    "view": _view, "_unsafe_view": _view, "reshape": _view, "permute": _permute,
    "transpose": _transpose, "t": _t, "expand": _expand, "unsqueeze": _unsqueeze,
    "squeeze": _squeeze, "clone": _same, "contiguous": _same, "alias": _same,
    "detach": _same, "lift_fresh_copy": _same, "_to_copy": _same, "to": _same,
    "type_as": _same, "slice": _slice, "select": _select, "narrow": _narrow,
    "index": _index_tensor, "cat": _cat, "stack": _stack, "split": _split,
    "split_with_sizes": _split_sizes, "chunk": _chunk, "unbind": _unbind, "flip": _flip,
    "constant_pad_nd": lambda n, x, pad, value=0.0: _pad(n, x, pad, value),
    "getitem": _getitem, "recurrent": _recurrent,
    # constants shaped like a traced value
    "full_like": lambda n, x, v, *rest, **kw: _like(n, v),
    "zeros_like": _const_like(0.0), "ones_like": _const_like(1.0),
    "empty_like": _const_like(0.0), "new_zeros": _const_like(0.0),
    "new_ones": _const_like(1.0), "new_empty": _const_like(0.0),
    "new_full": lambda n, x, size, v, *rest, **kw: _like(n, v),
}
VIEWS = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand",
         "unsqueeze", "squeeze", "clone", "contiguous", "alias", "detach", "_to_copy", "to",
         "slice", "select", "narrow", "lift_fresh_copy"}


def supported():
    """The ATen op names the interpreter traces, sorted (the docs list them)."""
    return sorted(OPS)


# ----------------------------------------------------------------------------- running a graph

_HARNESS = __file__.rsplit("/harness/", 1)[0] + "/harness/"
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n\s*([^\n]*)')


def source_line(node, skip=()):
    """'FILE:LINE' (and the code) of the user's line that made ``node``, from its
    ``stack_trace`` meta: the innermost frame outside ``skip`` (PyTorch's folders), else the
    innermost frame; '' when the node has none."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    theirs = [f for f in frames if not f[0].startswith(tuple(skip))]
    file, line, _, code = (theirs or frames)[-1]
    return f"{file}:{line}" + (f" ({code.strip()})" if code.strip() else "")


def op_name(node):
    t = node.target
    if t is operator.getitem:
        return "getitem"
    packet = getattr(t, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(t, "__name__", str(t))


def _label(value, T):
    """Axes told apart by size: T wide is the sequence ("T"), others unnamed."""
    if isinstance(value, Traced):
        value.axes = tuple("T" if s == T else "?" for s in value.shape)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _label(v, T)
    return value


def interpret(program, built, scan="chain"):
    """Run ``program`` (an ExportedProgram of ``built``, in core ATen) on traced arrays: a
    ``TorchTrace`` whose outputs are the program's user outputs (the first one traced must
    be (..., T, width)). Raises UnsupportedOp (one line: the op and the user's line)."""
    import torch
    from torch.fx.node import map_arg
    from torch.export.graph_signature import InputKind

    from harness.torchmodel import load
    if scan not in SCANS:
        raise ValueError(f"--scan: one of {', '.join(SCANS)}, got {scan!r}")
    _SCAN_MODE[0] = _scan_chain if scan == "chain" else _scan_tree
    t0 = time.perf_counter()
    T = built.T
    sig = program.graph_signature
    user = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    names = list(built.inputs)
    if len(user) != len(names):
        raise UsageError(f"{built.arg}: the exported program takes {len(user)} inputs, "
                         f"{len(names)} --shape were given")
    state = {**dict(program.named_parameters()), **dict(program.named_buffers()),
             **dict(program.constants)}
    weights = {}
    placeholders = {}
    for s in sig.input_specs:
        if s.kind == InputKind.USER_INPUT:
            placeholders[s.arg.name] = (True, names[user.index(s)])
        else:
            placeholders[s.arg.name] = (False, s.target)
            weights[s.target] = s.target
    for k in names[1:]:
        weights[k] = k
    g = trace.Graph(weight_parts=weights)
    nodes = list(program.graph.nodes)
    last = {}
    for i, nd in enumerate(nodes):
        for a in nd.all_input_nodes:
            last[a] = i
    env, macs_by_op = {}, {}
    skip = load._torch_dirs()
    outputs = ()
    for i, nd in enumerate(nodes):
        if nd.op == "placeholder":
            is_input, name = placeholders[nd.name]
            if is_input:
                shape = tuple(built.inputs[name].shape)
                env[nd] = trace.leaf(g, name, shape, ("?",) * len(shape),
                                     source_row=0 if name == built.sequence else None)
            else:
                value = state.get(name)
                if value is None or not isinstance(value, torch.Tensor):
                    env[nd] = value
                else:
                    env[nd] = trace.leaf(g, name, tuple(value.shape), ("?",) * value.ndim)
            _label(env[nd], T)
        elif nd.op == "call_function":
            args = map_arg(nd.args, lambda a: env[a])
            kwargs = map_arg(nd.kwargs, lambda a: env[a])
            name = op_name(nd)
            flat = list(args) + list(kwargs.values())
            flat += [v for a in flat if isinstance(a, (list, tuple)) for v in a]
            if not any(isinstance(a, Traced) for a in flat):
                env[nd] = nd.target(*args, **kwargs)          # constants: PyTorch computes them
            else:
                f = OPS.get(name)
                if f is None:
                    raise UnsupportedOp(_refusal(nd, name, built, skip))
                before = len(g.ops)
                kwargs = {k: v for k, v in kwargs.items()
                          if k not in ("dtype", "layout", "device", "pin_memory",
                                       "memory_format", "non_blocking", "copy")}
                try:
                    value = f(nd, *args, **kwargs)
                except UnsupportedOp as e:
                    raise UnsupportedOp(_refusal(nd, name, built, skip, str(e))) from None
                except (TypeError, ValueError, IndexError) as e:
                    raise UnsupportedOp(_refusal(nd, name, built, skip,
                                                 f"{type(e).__name__}: {e}")) from None
                if name in VIEWS and isinstance(value, Traced) and value.leaf is None:
                    value.leaf = args[0].leaf if isinstance(args[0], Traced) else None
                m = sum(op.macs for op in g.ops[before:] if op.kind in trace.MULTIPLYING)
                if m:
                    label = f"{getattr(nd.target, 'namespace', 'aten')}.{name}"
                    macs_by_op[label] = macs_by_op.get(label, 0) + m
                env[nd] = _label(value, T)
        elif nd.op == "output":
            outs = map_arg(nd.args[0], lambda a: env[a])
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            outputs = tuple(_flatten(outs))
        else:
            raise UnsupportedOp(f"{built.arg}: a graph node of kind {nd.op!r} is not traced")
        for a in nd.all_input_nodes:
            if last.get(a) == i:
                env.pop(a, None)                              # nothing reads it any more
    traced = tuple(o for o in outputs if isinstance(o, Traced))
    if not traced:
        raise UsageError(f"{built.arg}: the forward of {built.spec} returns no value computed "
                         f"from its inputs")
    y = traced[0]
    if y.ndim < 2 or y.shape[-2] != T:
        raise UsageError(f"{built.arg}: the first output of {built.spec} must be (..., T, "
                         f"width) with T = {T} on dimension -2, got shape {y.shape}")
    return TorchTrace(built.spec, T, built.d, g, traced, time.perf_counter() - t0,
                      macs_by_op=macs_by_op)


def _flatten(xs):
    for x in xs:
        if isinstance(x, (tuple, list)):
            yield from _flatten(x)
        else:
            yield x


class _Found(Exception):
    pass


def _eager_line(built, name, skip):
    """'FILE:LINE (code)' of the user's line that first calls aten ``name`` when ``built``
    runs eagerly (a function's frames are not in the export's stack_trace), or ''."""
    import traceback

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from harness.analysis import depth

    class Spot(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if getattr(getattr(func, "_overloadpacket", None), "__name__", None) == name:
                for f in reversed(traceback.extract_stack()[:-1]):
                    if depth._theirs(f.filename, skip):
                        raise _Found(f"{f.filename}:{f.lineno} ({(f.line or '').strip()})")
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Spot():
            module = built.module
            values = built.inputs
            module(*values.values()) if built.by_position else module(**values)
    except _Found as e:
        return str(e)
    except Exception:
        return ""
    return ""


def _refusal(node, name, built, skip, why=""):
    where = source_line(node, skip)
    if not where or where.startswith(_HARNESS):
        where = _eager_line(built, name, skip) or where or "no source line recorded"
    extra = f" ({why})" if why else ""
    return (f"{built.arg}: aten.{name} is not supported by the depth tracer{extra}, at "
            f"{where}; the supported ops are listed in docs/guide/your-model.md")


# ----------------------------------------------------------------------------- tables

def trace_torch(built, scan="chain"):
    """``built`` exported and interpreted: its TorchTrace, seconds including the export."""
    from harness.torchmodel import export
    t0 = time.perf_counter()
    program = export.export(built)
    tr = interpret(program, built, scan)
    del program
    tr.seconds = time.perf_counter() - t0
    return tr


def tables(factory, spec, shapes, T_values, d, scan="chain", seed=0, progress=None):
    """(by part, by op, depth) of a user's module over ``T_values``: one row per (T,
    parameter) with its multiplications, one per (T, ATen op), and one per T with depth.csv's
    columns (``macs`` counts every part, as ``--forward``'s)."""
    import pandas as pd

    from harness.torchmodel import load
    parts, ops, rows = [], [], []
    for T in T_values:
        built = load.build(factory, spec, shapes, T, d, seed=seed)
        tr = trace_torch(built, scan)
        if progress is not None and tr.seconds >= 1.0:
            progress(f"traced {spec} at T = {T:,} in {tr.seconds:.1f} s")
        for part, m in sorted(tr.macs_by_part().items()):
            parts.append(dict(model=spec, T=T, d=d, part=part, macs=m, flops=2 * m))
        for op, m in sorted(tr.macs_by_op.items()):
            ops.append(dict(model=spec, T=T, d=d, op=op, macs=m, flops=2 * m))
        rows.append(depth._depth_row(spec, None, tr))
        del tr, built
    return (pd.DataFrame(parts, columns=["model", "T", "d", "part", "macs", "flops"]),
            pd.DataFrame(ops, columns=["model", "T", "d", "op", "macs", "flops"]),
            pd.DataFrame(rows))
