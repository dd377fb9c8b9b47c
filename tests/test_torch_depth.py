"""harness depth --torch: PyTorch's own layers traced through torch.export give the counts,
span and path of the harness's families at the same width, but where PyTorch computes more
(its second bias, the scaled queries and keys), which each test names; the interpreter's ops
against the tracer's NumPy forwards; the one-line refusals."""

import math

import numpy as np
import pandas as pd
import pytest

from _deps import require_module

torch = require_module("torch", "pip install 'harness[torch]'")

from harness import cli  # noqa: E402
from harness.analysis import depth  # noqa: E402
from harness.infra.files import UsageError, UserCodeError  # noqa: E402
from harness.models import reference, transformer  # noqa: E402
from harness.torchmodel import export, interp, load  # noqa: E402

T, d = 12, 8          # T apart from every width (d, 3d, 4d, d_k), so that grid and mix are named
SEQ = {"X": ("1", "T", "d")}


def _torch_row(factory, T=T, d=d, shapes=SEQ, scan="chain"):
    parts, ops, rows = interp.tables(factory, "user", shapes, [T], d, scan=scan)
    return rows.iloc[0], dict(zip(parts.part, parts.macs)), dict(zip(ops.op, ops.macs))


def _family_row(name):
    row = depth.depth_table([T], d, families=(name,)).iloc[0]
    counts = depth.count_table([T], d, families=(name,))
    return row, dict(zip(counts.part, counts.macs))


def _rnn(d):
    return torch.nn.RNN(d, d, batch_first=True)


def _lstm(d):
    return torch.nn.LSTM(d, d, batch_first=True)


def _gru(d):
    return torch.nn.GRU(d, d, batch_first=True)


def _layer(d):
    return torch.nn.TransformerEncoderLayer(d, transformer.default_heads(d),
                                            dim_feedforward=transformer.FF_RATIO * d,
                                            batch_first=True, dropout=0.0)


@pytest.mark.parametrize("factory, family, path_extra", [
    # nn.RNN adds b_hh inside every step (h W_hh^T + b_hh, then + x W_ih^T + b_ih): one op a
    # step more than the family's traced form, which has no biases, and on the only path
    (_rnn, "rnn", T),
    # nn.LSTM / nn.GRU: the same b_hh add a step; the path from x_1 to h_T runs along the
    # cell (LSTM: f c + i g) or the gate route (GRU: (h - n) z + n), which the b_hh adds do
    # not lengthen, so it is one op longer only: b_ih's add on the way in
    (_lstm, "lstm", 1),
    (_gru, "gru", 1),
])
def test_pytorchs_recurrent_layers_count_as_the_families_but_their_biases(factory, family,
                                                                          path_extra):
    row, parts, ops = _torch_row(factory)
    fam, fam_parts = _family_row(family)
    # the products agree exactly, stacked gates and all: W_ih is the family's input part,
    # W_hh its recurrence, the gates' elementwise products its "mul"
    assert parts.pop("weight_ih_l0") == fam_parts.pop("input")
    assert parts.pop("weight_hh_l0") == fam_parts.pop("recurrence")
    assert parts == fam_parts
    assert row.macs_all == fam.macs_all and ops == {"harness.recurrent": fam.macs_all}
    # the two biases: b_ih once over the (T, G d) products, b_hh once a step
    gates = {"rnn": 1, "lstm": 4, "gru": 3}[family]
    assert row.ops == fam.ops + T + 1
    assert row.span == fam.span + T and row.scalar_span == fam.scalar_span + T
    assert row.max_path == fam.max_path + path_extra
    assert row.scalar_work == fam.scalar_work + 2 * T * gates * d


def test_the_encoder_layer_counts_as_the_transformer_family_but_its_scaled_queries():
    row, parts, ops = _torch_row(_layer)
    fam, fam_parts = _family_row("transformer")
    names = {"self_attn.in_proj_weight": "projections", "self_attn.out_proj.weight":
             "out_projection", "linear1.weight": "feedforward", "linear2.weight": "feedforward",
             "norm1.weight": "norm", "norm2.weight": "norm"}
    by_family = {}
    for part, m in parts.items():
        by_family[names.get(part, part)] = by_family.get(names.get(part, part), 0) + m
    # PyTorch scales q and k by d_k^(-1/4) each (two T d products) where the family divides
    # the scores by sqrt(d_k) (no product): "mul" is 2 T d more, every other part agrees
    assert by_family.pop("mul") == fam_parts.pop("mul") + 2 * T * d
    assert by_family == fam_parts
    assert ops["aten.bmm"] == fam_parts["grid"] + fam_parts["mix"]
    assert row.max_path == fam.max_path
    # PyTorch's softmax is its safe softmax: a where after it zeroes fully masked rows
    assert row.span == fam.span + 1 and row.scalar_span == fam.scalar_span + 1


def test_the_recurrent_op_gives_what_pytorchs_unrolled_export_gives():
    """harness::recurrent, lowered step by step, against torch.export's own unrolled graph of
    a two-layer LSTM and a GRU: the same row, op for op."""
    for factory in (lambda d: torch.nn.LSTM(d, d, num_layers=2, batch_first=True),
                    lambda d: torch.nn.GRU(d, d)):          # (T, B, d): seq first
        shapes = {"X": ("1", "T", "d")} if factory(2).batch_first else {"X": ("T", "d")}
        built = load.build(factory, "user", shapes, 4, 3)
        lowered = interp.interpret(export.export(built), built)
        unrolled = interp.interpret(export.export(built, lower=False), built)
        a, b = depth._depth_row("m", None, lowered), depth._depth_row("m", None, unrolled)
        a.pop("trace_seconds"), b.pop("trace_seconds")
        assert a == b
        assert lowered.macs_by_part() == unrolled.macs_by_part()
        assert any(str(n.target).startswith("harness.recurrent")
                   for n in export.export(built).graph.nodes)


def test_softmax_layer_norm_permute_and_reductions_trace_as_the_numpy_forward():
    """A forward in PyTorch and its twin in NumPy, traced by --forward's tracer: the same row
    and the same products under the same names (softmax: the lessons' five ops; layer norm:
    reference.layer_norm's eleven; a mean a sum and a divide)."""
    def torch_factory():
        def f(X, W, g, b):
            S = torch.softmax((X @ W) @ X.transpose(-1, -2), dim=-1)         # (B, T, T)
            Y = torch.nn.functional.layer_norm(S @ X, (X.shape[-1],), g, b, 1e-5)
            return Y * Y.mean(dim=-2, keepdim=True) + Y.amax(dim=0)        # (B, T, d)
        return f

    def numpy_forward(X, W, g, b):
        S = reference.softmax_rows((X @ W) @ np.swapaxes(X, -1, -2))
        Y = reference.layer_norm(S @ X, g, b, 1e-5)
        mean = Y.transpose(0, 2, 1).sum(axis=-1).reshape(2, 1, d) / T
        return Y * mean + Y.transpose(1, 2, 0).max(axis=-1)

    shapes = {"X": ("2", "T", "d"), "W": ("d", "d"), "g": ("d",), "b": ("d",)}
    row, parts, _ = _torch_row(torch_factory, shapes=shapes)
    twin = depth.trace_forward(numpy_forward, shapes, T, d)
    expected = depth._depth_row("twin", None, twin)
    for col in ("macs_all", "ops", "span", "max_path", "scalar_work", "scalar_span"):
        assert row[col] == expected[col], col
    assert parts == twin.macs_by_part()
    assert parts["grid"] == parts["mix"] == 2 * T * T * d and parts["W"] == 2 * T * d * d


@pytest.mark.parametrize("scan, span, ops", [
    ("chain", T - 1, T - 1),                               # one add a step, each waits for the last
    ("tree", math.ceil(math.log2(T)), math.ceil(math.log2(T))),    # Hillis-Steele levels
])
def test_a_cumsum_is_a_chain_or_a_tree_as_scan_says(scan, span, ops):
    def factory():
        return lambda X: torch.cumsum(X, dim=1)
    row, parts, _ = _torch_row(factory, scan=scan)
    assert row.span == span and row.ops == ops and row.max_path == span and row.macs == 0
    # work: a chain adds d numbers a step; the tree adds every one of T d at each level
    assert row.scalar_work == (T - 1) * d if scan == "chain" else row.scalar_work == ops * T * d


def test_a_causal_conv1d_is_one_product_of_its_taps():
    k = 3

    def factory(d):
        conv = torch.nn.Conv1d(d, d, k)

        class Causal(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = conv

            def forward(self, X):
                x = torch.nn.functional.pad(X.transpose(1, 2), (k - 1, 0))
                return self.conv(x).transpose(1, 2)
        return Causal()

    row, parts, ops = _torch_row(factory)
    assert parts == {"conv.weight": T * d * d * k} and ops == {"aten.convolution": T * d * d * k}
    assert row.span == 2 and row.ops == 2                  # the product, the bias add
    assert row.max_path == math.inf                        # position T sees T-2..T only
    r2, _, _ = _torch_row(factory, T=2)
    assert r2.max_path == 2


def test_an_unsupported_op_stops_with_one_line_naming_it_and_the_users_line(tmp_path, capsys):
    path = tmp_path / "sorting.py"
    path.write_text("import torch\n\n\ndef factory():\n    def f(X):\n"
                    "        return torch.sort(X, dim=-1).values\n    return f\n")
    built = load.build(None, f"{path}:factory", SEQ, 4, 2)
    with pytest.raises(interp.UnsupportedOp) as e:
        interp.interpret(export.export(built), built)
    assert "aten.sort is not supported" in str(e.value) and f"{path}:6" in str(e.value)
    assert cli.main(["depth", "--torch", f"{path}:factory", "--shape", "X=1,T,d", "--T", "4",
                     "--d", "2", "--no-measure", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "aten.sort is not supported" in err and f"{path}:6" in err
    assert len(err.strip().splitlines()) == 1


def test_an_exception_in_the_forward_during_export_is_the_users(tmp_path, capsys):
    path = tmp_path / "failing.py"
    path.write_text("import torch\n\n\ndef factory(d):\n    def f(X):\n"
                    "        return X @ torch.ones(d + 1, d)\n    return f\n")
    built = load.build(None, f"{path}:factory", SEQ, 4, 2)
    with pytest.raises(UserCodeError) as e:
        export.export(built)
    assert f"{path}:6: RuntimeError" in str(e.value) and "exporting" in str(e.value)
    assert cli.main(["depth", "--torch", f"{path}:factory", "--shape", "X=1,T,d", "--T", "4",
                     "--d", "2", "--no-measure", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(f"harness depth: error: --torch: {path}:6: ") or \
        f"--torch: {path}:6: RuntimeError" in err.splitlines()[0]
    assert "harness/" not in err.replace(str(path), "")         # no frame of ours


@pytest.mark.parametrize("argv, needle", [
    (["--torch", "m:f", "--forward", "m:f", "--shape", "X=1,T,d"], "give --forward or --torch"),
    (["--scan", "tree"], "--scan: goes with --torch"),
    (["--torch", "nomodule_here_xyz:f", "--shape", "X=1,T,d"], "--torch: cannot import"),
    (["--torch", "m:f"], "--torch needs one --shape"),
    (["--torch", "m:f", "--shape", "X=B,T,d"], "a batch is an integer here"),
])
def test_cli_torch_bad_arguments(argv, needle, capsys):
    assert cli.main(["depth", "--T", "4", "--d", "2", "--no-measure"] + argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_cli_torch_without_pytorch_says_how_to_install_it(monkeypatch, capsys):
    import sys
    monkeypatch.setitem(sys.modules, "torch", None)
    assert cli.main(["depth", "--torch", "m:f", "--shape", "X=1,T,d", "--T", "4", "--d", "2",
                     "--no-measure"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'harness[torch]'" in err and len(err.strip().splitlines()) == 1


def test_interp_refuses_a_bad_scan_and_an_output_without_T_on_dimension_minus_2():
    with pytest.raises(ValueError, match="--scan: one of chain, tree"):
        interp.interpret(None, None, scan="parallel")
    built = load.build(lambda: (lambda X: X.sum(dim=1)), "user", SEQ, 4, 2)
    with pytest.raises(UsageError, match=r"the first output of user must be \(\.\.\., T, width\) "
                                         r"with T = 4 on dimension -2, got shape \(1, 2\)"):
        interp.interpret(export.export(built), built)


@pytest.mark.parametrize("factory", [_layer, _lstm, _gru])
def test_the_terms_path_of_a_torch_model_equals_its_dense_twin(factory, monkeypatch):
    """PyTorch's modules traced with the switch to terms moved down to 16 elements, so that
    their heads' reshapes, permutes, broadcasts and reductions run on terms (Traced.reshape_kept,
    transpose, broadcast_to, reduce_axes), against the same trace all dense: the same tables."""
    import _depth_baseline as B
    from harness.analysis import field
    monkeypatch.setattr(field, "DENSE_MAX", 16)
    seq = {"X": ("2", "T", "d")}           # two sequences: batch and heads regrouped, (B h, T, T)
    got = interp.tables(factory, "user", seq, [T], d)
    with B.all_dense():
        want = interp.tables(factory, "user", seq, [T], d)
    for g, w in zip(got, want, strict=True):
        timed = [c for c in g.columns if c.endswith(("_seconds", "_bytes"))]   # the trace's cost
        pd.testing.assert_frame_equal(g.drop(columns=timed), w.drop(columns=timed))
