"""A user's module at one T exported to core ATen: ``torch.export.export`` then
``run_decompositions()``.

What PyTorch 2.13 gives (checked by tests/test_torch_depth.py): nn.RNN, nn.LSTM and nn.GRU
come out unrolled, one ``addmm`` and its gate ops per step (LSTM's gates i, f, g, o and GRU's
r, z, n as ``split_with_sizes`` of the stacked products), so that no ``aten.lstm`` op is left
to lower; a Python loop over T in the forward is unrolled the same way; nn.Linear is
``permute`` + ``addmm``; attention is ``bmm`` + ``_softmax``; nn.LayerNorm is
``native_layer_norm``; nn.Conv1d is ``convolution``.

Unrolled, a recurrent layer costs torch.export tens of milliseconds per node (T = 256 of a
two-layer nn.LSTM, 10,796 nodes: 67 s to export and 189 s to decompose on a loaded machine),
so ``export`` swaps each nn.RNN, nn.LSTM and nn.GRU (unidirectional, no projection, called
without an initial state) for ``harness::recurrent``, one custom op whose parameters keep
their names; ``harness.torchmodel.interp`` lowers it step by step into the ops the unrolled
export gives, in PyTorch's documented equations and gate order (LSTM i, f, g, o; GRU r, z, n),
and tests/test_torch_depth.py holds the two to the same counts, span and path.

An exception raised in the user's forward while it is exported is theirs (UserCodeError with
their file and line); what ``torch.export`` refuses (data-dependent control flow, an
unsupported Python construct) is a one-line UsageError with PyTorch's first line of why.
"""

from __future__ import annotations

import warnings

from harness.infra.files import UsageError
from harness.torchmodel import load


_OP = []


def recurrent_op():
    """``torch.ops.harness.recurrent``, defined once: (output, h_n, c_n) of a stacked
    recurrent layer. Its real kernel is PyTorch's own (``torch._VF``); under export only its
    shapes are used, and the interpreter lowers it into steps."""
    if _OP:
        return _OP[0]
    import torch

    @torch.library.custom_op("harness::recurrent", mutates_args=(), schema=(
        "(Tensor x, Tensor[] weights, str mode, int num_layers, int hidden, bool batch_first, "
        "bool has_bias) -> (Tensor, Tensor, Tensor)"))
    def recurrent(x, weights, mode, num_layers, hidden, batch_first, has_bias):
        unbatched = x.dim() == 2
        xb = x.unsqueeze(0 if batch_first else 1) if unbatched else x
        B = xb.shape[0] if batch_first else xb.shape[1]
        h0 = xb.new_zeros(num_layers, B, hidden)
        if mode == "LSTM":
            out, h, c = torch._VF.lstm(xb, (h0, h0), weights, has_bias, num_layers, 0.0, False,
                                       False, batch_first)
        else:
            f = {"GRU": torch._VF.gru, "RNN_TANH": torch._VF.rnn_tanh,
                 "RNN_RELU": torch._VF.rnn_relu}[mode]
            out, h = f(xb, h0, weights, has_bias, num_layers, 0.0, False, False, batch_first)
            c = h.clone()
        if unbatched:
            out, h, c = out.squeeze(0 if batch_first else 1), h.squeeze(1), c.squeeze(1)
        return out, h, c

    @recurrent.register_fake
    def _(x, weights, mode, num_layers, hidden, batch_first, has_bias):
        out = x.new_empty(x.shape[:-1] + (hidden,))
        if x.dim() == 2:
            state = (num_layers, hidden)
        else:
            state = (num_layers, x.shape[0] if batch_first else x.shape[1], hidden)
        return out, x.new_empty(state), x.new_empty(state)

    _OP.append(torch.ops.harness.recurrent.default)
    return _OP[0]


def _lowerable(m):
    """Whether ``m`` is an nn.RNN / LSTM / GRU that ``harness::recurrent`` stands for."""
    import torch
    return (isinstance(m, (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU))
            and not m.bidirectional and not getattr(m, "proj_size", 0))


def _recurrent(m):
    """A module with ``m``'s parameters under their names whose forward is one
    ``harness::recurrent`` (or ``m``'s own when called with an initial state)."""
    import torch
    op = recurrent_op()
    mode = (("RNN_TANH" if m.nonlinearity == "tanh" else "RNN_RELU")
            if isinstance(m, torch.nn.RNN) else m.mode)
    names = [n for layer in m._all_weights for n in layer]

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for n in names:
                self.register_parameter(n, m._parameters[n])
            object.__setattr__(self, "original", m)

        def forward(self, input, hx=None):
            if hx is not None:
                return self.original(input, hx)
            w = [getattr(self, n) for n in names]
            out, h, c = op(input, w, mode, m.num_layers, m.hidden_size, m.batch_first, m.bias)
            return (out, (h, c)) if mode == "LSTM" else (out, h)

    return Recurrent()


class _swapped:
    """Each lowerable submodule of ``module`` replaced by its ``_recurrent`` while the block
    runs, and put back after: the user's module is left as it was."""

    def __init__(self, module):
        self.module, self.undo = module, []

    def __enter__(self):
        if _lowerable(self.module):
            return _recurrent(self.module)
        for parent in list(self.module.modules()):
            for name, child in list(parent.named_children()):
                if _lowerable(child):
                    setattr(parent, name, _recurrent(child))
                    self.undo.append((parent, name, child))
        return self.module

    def __exit__(self, *exc):
        for parent, name, child in reversed(self.undo):
            setattr(parent, name, child)
        return False


def _as_module(built):
    """(module, args, kwargs) for torch.export: an nn.Module as it is, a function wrapped in
    one whose forward takes the inputs by position and passes them on as ``built`` says."""
    torch = load.import_torch(built.arg)
    names = list(built.inputs)
    values = tuple(built.inputs.values())
    if isinstance(built.module, torch.nn.Module):
        if built.by_position:
            return built.module, values, {}
        return built.module, (), dict(built.inputs)
    fn, by_position = built.module, built.by_position

    class Function(torch.nn.Module):
        def forward(self, *args):
            return fn(*args) if by_position else fn(**dict(zip(names, args)))

    return Function(), values, {}


def export(built, lower=True):
    """The ``torch.export.ExportedProgram`` of ``built`` (a ``load.Built``) in core ATen;
    ``lower``: recurrent layers as ``harness::recurrent`` (False: unrolled by PyTorch)."""
    torch = load.import_torch(built.arg)
    module, args, kwargs = _as_module(built)
    doing = f"exporting {built.spec} at T = {built.T} with torch.export"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # PyTorch's notes on RNN weights, pytree
            with torch.no_grad():
                if lower and isinstance(module, torch.nn.Module):
                    with _swapped(module) as m:
                        program = torch.export.export(m, args, kwargs)
                else:
                    program = torch.export.export(module, args, kwargs)
            return program.run_decompositions()
    except BaseException as e:
        theirs = load._theirs_or(e, built.spec, doing, built.arg)
        if theirs is not None:
            raise theirs from e
        if isinstance(e, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        first = next((line.strip() for line in str(e).splitlines() if line.strip()),
                     type(e).__name__)
        raise UsageError(f"{built.arg}: torch.export could not export {built.spec} at "
                         f"T = {built.T}: {type(e).__name__}: {first}") from None
