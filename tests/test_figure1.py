"""harness.analysis.figure1: Figure 1 of "Attention Is All You Need" traced box by box.

Which boxes mix positions is read off the tracer's distances; here it is checked another
way, by running each box on numbers and changing one input row: a row the box does not
read is bit for bit unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import models
from harness.analysis import figure1 as f1
from harness.kernels import transformer as kernels
from harness.models import transformer as tf

MIXING = {"encoder_attention", "decoder_masked_attention", "decoder_cross_attention"}


@pytest.fixture(scope="module")
def table():
    return f1.box_table()


# ----------------------------------------------------------------------------- the boxes

def test_the_table_has_the_figures_boxes_in_order(table):
    assert list(table.box) == [
        "Input Embedding", "Positional Encoding", "Multi-Head Attention", "Add & Norm",
        "Feed Forward", "Add & Norm",
        "Output Embedding", "Positional Encoding", "Masked Multi-Head Attention", "Add & Norm",
        "Multi-Head Attention", "Add & Norm", "Feed Forward", "Add & Norm",
        "Linear", "Softmax"]
    assert (table.drawn == "rectangle").sum() == 14 and (table.drawn == "circle").sum() == 2
    assert list(table["stack"].unique()) == ["encoder", "decoder", "output"]


def test_three_boxes_mix_positions_the_attention_ones(table):
    assert set(table.key[table.mixes_positions]) == MIXING
    assert f1.count_mixing(table) == 3
    mixing = dict(zip(table.key, table.mixing_inputs))
    # the cross-attention's queries stay in their rows; its keys and values (memory) do not
    assert mixing["decoder_cross_attention"] == "memory"
    assert mixing["encoder_attention"] == mixing["decoder_masked_attention"] == "x"
    assert mixing["softmax"] == ""                    # over the vocabulary: one row at a time
    row = table.set_index("key").loc
    assert row["encoder_attention", "rows_reached"] == f1.SIZES.S
    assert (table.rows_reached[~table.mixes_positions] == 1).all()


def test_every_input_row_of_every_box_was_checked(table):
    for box, checked in zip(f1.BOXES, table.sources_checked):
        assert checked == sum(f1.input_shape(box, name)[0] for name in box.inputs), box.key


def _numeric_mixing(box, sz=f1.SIZES, seed=0):
    """The box on numbers: does changing one input row change any other output row?"""
    rng = np.random.default_rng(seed)
    w = f1.box_weights(box, sz, rng)
    xs = {name: rng.normal(size=f1.input_shape(box, name, sz)) for name in box.inputs}
    y = box.run(w, sz, *xs.values())
    for name in box.inputs:
        for r in range(xs[name].shape[0]):
            moved = dict(xs)
            moved[name] = xs[name].copy()
            moved[name][r] += rng.normal(size=xs[name].shape[1])
            changed = np.flatnonzero((box.run(w, sz, *moved.values()) != y).any(axis=1))
            if set(changed) - {r}:
                return True
    return False


def test_the_count_is_the_same_by_changing_rows_of_numbers(table):
    numeric = {box.key for box in f1.BOXES if _numeric_mixing(box)}
    assert numeric == set(table.key[table.mixes_positions]) == MIXING
    assert len(numeric) == f1.count_mixing(table)


def test_the_masked_attention_is_the_kernels_causal_attention():
    """The masked box (row by row, keys 0..i) is what a causal layer computes."""
    X, W = tf.inputs(7, 8, 1, "float64", 3)
    p = tf.params(W)
    sz = f1.Sizes(T=7, d=8, heads=tf.default_heads(8))
    w = {k.split(".", 1)[1]: v for k, v in p.items() if k.startswith("self_attn.")}
    x = f1.BOX["decoder_norm1"].run({"weight": p["norm1.weight"], "bias": p["norm1.bias"]}, sz, X,
                                    f1.BOX["decoder_masked_attention"].run(w, sz, X))
    ff = {k: p[k] for k in ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias")}
    y = f1.BOX["decoder_norm3"].run({"weight": p["norm2.weight"], "bias": p["norm2.bias"]}, sz, x,
                                    f1.BOX["decoder_feed_forward"].run(ff, sz, x))
    want = kernels.encoder_layer(X, p, sz.heads, causal=True)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)


def test_positional_encoding_is_the_papers_sinusoids():
    pe = f1.positional_encoding(5, 6)
    t = np.arange(5)
    np.testing.assert_allclose(pe[:, 0], np.sin(t))
    np.testing.assert_allclose(pe[:, 1], np.cos(t))
    np.testing.assert_allclose(pe[:, 4], np.sin(t / 10000 ** (4 / 6)))


# ----------------------------------------------------------------------------- the whole figure

def test_the_whole_figure_reaches_every_output_from_a_source_and_the_later_ones_from_a_target():
    reach = f1.output_reach()
    T = f1.SIZES.T
    for r in reach.itertuples():
        want = tuple(range(T)) if r.input == "source" else tuple(range(r.position, T))
        assert r.reached == want, (r.input, r.position)


def test_the_whole_figures_operations_are_labelled_by_box(table):
    tr = f1.trace_figure1()
    ends = [lo for _, _, lo, _ in tr.spans[1:]] + [len(tr.graph.ops)]
    assert [hi for _, _, _, hi in tr.spans] == ends      # back to back: every op in one box
    assert tr.spans[0][2] == 0
    assert {key for key, *_ in tr.spans} == set(f1.BOX)
    assert tr.probs.shape == (f1.SIZES.T, f1.SIZES.vocab)
    # a box's multiplications in the figure: its layers times the box traced alone
    for box, layers, macs in zip(f1.BOXES, table.layers, table.macs):
        g, _ = f1.trace_box(box, box.inputs[0], 0)
        assert macs == layers * sum(op.macs for op in g.ops), box.key


# ----------------------------------------------------------------------------- the counts

def test_the_cost_does_not_depend_on_the_heads():
    T, d = 12, 32
    frame = f1.cost_over_heads(T, d)
    assert list(frame.heads) == [1, 2, 4, 8, 16] and list(frame.d_k) == [32, 16, 8, 4, 2]
    for col in ("parameters", "projections", "grid", "mix", "out_projection", "total"):
        assert frame[col].nunique() == 1, col
    assert frame.grid.iloc[0] == frame.mix.iloc[0] == T * T * d
    assert frame.total.iloc[0] == 4 * T * d * d + 2 * T * T * d
    with pytest.raises(ValueError, match="heads must divide d = 32, got 3"):
        f1.cost_over_heads(T, d, heads=(3,))


@pytest.mark.parametrize("d", [1, 4, 8, 12])
def test_the_layers_t_squared_terms_overtake_the_rest_at_6d_plus_2(d):
    c = f1.layer_crossover(d)
    assert c["T_equal"] == 6 * d + 2 and c["T_exceeds"] == 6 * d + 3
    assert c["quadratic_per_T2"] == 2 * d and c["linear_per_T"] == 12 * d * d + 4 * d


def test_layer_work_against_the_recurrences():
    d = 8
    Ts = (49, 50, 51)                                   # around 6 d + 2 = 50
    frame = f1.layer_work(Ts, d)
    layer = frame[frame.model == "transformer"].set_index("T")
    assert layer.loc[49, "quadratic"] < layer.loc[49, "linear"]
    assert layer.loc[50, "quadratic"] == layer.loc[50, "linear"]
    assert layer.loc[51, "quadratic"] > layer.loc[51, "linear"]
    assert frame.attrs["crossover"]["T_exceeds"] == 51
    for T in Ts:
        assert layer.loc[T, "macs"] == sum(tf.macs(T, d).values())
    for name in f1.RECURRENCES:
        rec = frame[frame.model == name].set_index("T")
        for T in Ts:
            assert rec.loc[T, "macs"] == sum(models.get(name).tracing.forms[0].macs(T, d).values())
            assert rec.loc[T, "quadratic"] == 0
