"""Figure 1 of "Attention Is All You Need", traced box by box: which boxes mix positions.

The "goodbye to recurrence" lesson reads one thing off the figure: of its boxes only the
attention ones look at other rows; the rest work on one row at a time. Here the figure is a
plain NumPy forward written with the tracer's operations (``harness.analysis.trace``):
input embedding, positional encoding, N encoder layers (multi-head attention, add & norm,
feed forward, add & norm), output embedding, positional encoding, N decoder layers (masked
multi-head attention, add & norm, multi-head attention over the encoder's output, add &
norm, feed forward, add & norm), the final linear and softmax, each box under its label in
the figure. The claim is then read off the trace, not typed beside it:

* ``box_table``: each box traced alone, on inputs whose ``source_row`` is one position
  (every position in turn, for each of its inputs): the output rows at a finite distance
  from it are the rows that read it. A box mixes positions when some source row reaches a
  row other than its own.
* ``trace_figure1`` / ``output_reach``: the whole figure traced at once, its operations
  labelled by box, and which output positions each input position reaches (every one from a
  source token; from a target token, itself and the positions after it: the mask).
* ``cost_over_heads``: multi-head attention's traced multiplications for h heads of
  d_k = d_model / h: the same at every h (the multi-head lesson's claim).
* ``layer_work``: a Transformer layer's traced multiplications against the RNN's, LSTM's and
  GRU's at equal width, and the T from which its T^2 terms (the grid and the mix) exceed
  everything else it multiplies (``layer_crossover``: T = 6 d_model + 2).

Two things the figure draws are not boxes here: "Outputs (shifted right)" is how the target
tokens are prepared (row i gets token i - 1), before the output embedding; and the N x stacks
are drawn once, so the table has one row per drawn box, whatever N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from harness.analysis import depth, trace
from harness.infra.validate import check_int
from harness.models import reference
from harness.models import transformer as layer


@dataclass(frozen=True)
class Sizes:
    """The traced figure's sizes: small, since the claim does not depend on them."""
    T: int = 6             # target positions (the decoder's rows)
    S: int = 6             # source positions (the encoder's rows, the decoder's memory)
    d: int = 8             # d_model
    heads: int = 2         # h, so d_k = 4
    vocab: int = 11        # tokens in and out
    layers: int = 2        # the figure's N (the paper's 6): each stack's layers

    @property
    def d_ff(self):
        return layer.FF_RATIO * self.d


SIZES = Sizes()


# ----------------------------------------------------------------------------- the boxes

def _embedding(w, sz, tokens):
    """One-hot tokens (T, vocab) -> (T, d_model): a row of the table each, times sqrt(d_model)."""
    return tokens @ w["embedding"] * math.sqrt(sz.d)


def positional_encoding(T, d):
    """The sinusoids (T, d): PE(t, 2i) = sin(t / 10000^(2i/d)), PE(t, 2i+1) = cos(...)."""
    t = np.arange(T)[:, None]
    rate = 1.0 / 10000.0 ** (2 * (np.arange(d) // 2) / d)
    return np.where(np.arange(d) % 2 == 0, np.sin(t * rate), np.cos(t * rate))


def _positional(w, sz, x):
    return x + positional_encoding(x.shape[-2], x.shape[-1])      # a constant: row t gets PE(t)


def _attention(causal):
    def run(w, sz, x, memory=None):
        return reference.multi_head_attention(x, memory, w["in_proj_weight"], w["in_proj_bias"],
                                              w["out_proj.weight"], w["out_proj.bias"], sz.heads,
                                              causal=causal)
    return run


def _add_norm(w, sz, x, sublayer):
    return reference.layer_norm(x + sublayer, w["weight"], w["bias"], layer.NORM_EPS)


def _feed_forward(w, sz, x):
    return reference.feed_forward(x, w["linear1.weight"], w["linear1.bias"],
                                  w["linear2.weight"], w["linear2.bias"])


def _linear(w, sz, x):
    return x @ w["weight"].T + w["bias"]                           # (T, vocab): the logits


def _softmax(w, sz, logits):
    return reference.softmax_rows(logits)                         # over the vocabulary


def _embedding_weights(sz):
    return {"embedding": ((sz.vocab, sz.d), ("vocab", "d_model"), "embedding")}


def _attention_weights(sz):
    d = sz.d
    return {"in_proj_weight": ((3 * d, d), ("3 d_model", "d_model"), "projections"),
            "in_proj_bias": ((3 * d,), ("3 d_model",), "projections"),
            "out_proj.weight": ((d, d), ("d_model", "d_model"), "out_projection"),
            "out_proj.bias": ((d,), ("d_model",), "out_projection")}


def _norm_weights(sz):
    return {"weight": ((sz.d,), ("d_model",), "norm"), "bias": ((sz.d,), ("d_model",), "norm")}


def _feed_forward_weights(sz):
    d, f = sz.d, sz.d_ff
    return {"linear1.weight": ((f, d), ("d_ff", "d_model"), "feedforward"),
            "linear1.bias": ((f,), ("d_ff",), "feedforward"),
            "linear2.weight": ((d, f), ("d_model", "d_ff"), "feedforward"),
            "linear2.bias": ((d,), ("d_model",), "feedforward")}


def _linear_weights(sz):
    return {"weight": ((sz.vocab, sz.d), ("vocab", "d_model"), "linear"),
            "bias": ((sz.vocab,), ("vocab",), "linear")}


def _no_weights(sz):
    return {}


@dataclass(frozen=True)
class Box:
    """One box of the figure. ``run(w, sizes, *inputs)``: its forward, in the tracer's
    operations; ``weights(sizes) -> {name: (shape, axes, part)}``; ``inputs``: what it reads,
    in ``run``'s order ("x" the stream below it, "sublayer" an add & norm's other input,
    "memory" the encoder's output, "tokens" one-hot tokens); ``in_layer``: repeated in each
    of the stack's N layers; ``drawn``: a rectangle, or the figure's circle (the positional
    encodings)."""
    key: str
    label: str
    stack: str
    inputs: tuple
    run: Callable
    weights: Callable
    in_layer: bool = False
    drawn: str = "rectangle"


# As drawn, from the bottom of each stack up: the encoder, the decoder, the output.
BOXES = (
    Box("input_embedding", "Input Embedding", "encoder", ("tokens",), _embedding, _embedding_weights),
    Box("encoder_positions", "Positional Encoding", "encoder", ("x",), _positional, _no_weights,
        drawn="circle"),
    Box("encoder_attention", "Multi-Head Attention", "encoder", ("x",), _attention(False),
        _attention_weights, True),
    Box("encoder_norm1", "Add & Norm", "encoder", ("x", "sublayer"), _add_norm, _norm_weights, True),
    Box("encoder_feed_forward", "Feed Forward", "encoder", ("x",), _feed_forward,
        _feed_forward_weights, True),
    Box("encoder_norm2", "Add & Norm", "encoder", ("x", "sublayer"), _add_norm, _norm_weights, True),
    Box("output_embedding", "Output Embedding", "decoder", ("tokens",), _embedding,
        _embedding_weights),
    Box("decoder_positions", "Positional Encoding", "decoder", ("x",), _positional, _no_weights,
        drawn="circle"),
    Box("decoder_masked_attention", "Masked Multi-Head Attention", "decoder", ("x",),
        _attention(True), _attention_weights, True),
    Box("decoder_norm1", "Add & Norm", "decoder", ("x", "sublayer"), _add_norm, _norm_weights, True),
    Box("decoder_cross_attention", "Multi-Head Attention", "decoder", ("x", "memory"),
        _attention(False), _attention_weights, True),
    Box("decoder_norm2", "Add & Norm", "decoder", ("x", "sublayer"), _add_norm, _norm_weights, True),
    Box("decoder_feed_forward", "Feed Forward", "decoder", ("x",), _feed_forward,
        _feed_forward_weights, True),
    Box("decoder_norm3", "Add & Norm", "decoder", ("x", "sublayer"), _add_norm, _norm_weights, True),
    Box("linear", "Linear", "output", ("x",), _linear, _linear_weights),
    Box("softmax", "Softmax", "output", ("x",), _softmax, _no_weights),
)
BOX = {b.key: b for b in BOXES}


def input_shape(box, name, sz=SIZES):
    """The shape of a box's input ``name``: (rows, width), rows T (decoder, output) or S."""
    rows = sz.S if box.stack == "encoder" or name == "memory" else sz.T
    width = {"tokens": sz.vocab}.get(name, sz.vocab if box.key == "softmax" else sz.d)
    return rows, width


def box_weights(box, sz=SIZES, rng=None):
    """Plain arrays for a box's weights: N(0, 1/fan_in), the norms' gains 1 + N(0, 0.1^2)."""
    rng = np.random.default_rng(0) if rng is None else rng
    out = {}
    for name, (shape, _, _) in box.weights(sz).items():
        w = rng.normal(size=shape) / math.sqrt(shape[-1])
        out[name] = 1.0 + 0.1 * rng.normal(size=shape) if box.run is _add_norm and name == "weight" else w
    return out


# ----------------------------------------------------------------------------- tracing

def _leaves(g, box, sz, prefix):
    """The box's weights as leaves of ``g``, named ``prefix + name``, counted under their parts."""
    w = {}
    for name, (shape, axes, part) in box.weights(sz).items():
        g.weight_parts[prefix + name] = part
        w[name] = trace.leaf(g, prefix + name, shape, axes)
    return w


def reached_rows(y):
    """The rows of traced ``y`` (rows, width) at a finite distance from the source, in order."""
    return tuple(int(i) for i in np.flatnonzero(np.isfinite(y.dist).any(axis=-1)))


def trace_box(box, source_input, source_row, sz=SIZES):
    """Trace ``box`` alone with input ``source_input`` as position ``source_row``'s leaf (its
    other inputs and its weights reach nothing): (graph, output)."""
    g = trace.Graph()
    w = _leaves(g, box, sz, "")
    xs = [trace.leaf(g, name, input_shape(box, name, sz), ("T", "d_model"),
                     source_row=source_row if name == source_input else None)
          for name in box.inputs]
    return g, box.run(w, sz, *xs)


def box_table(sz=SIZES, source_rows=None):
    """One row per box as drawn: does any output row read an input row other than its own?

    Each box is traced alone, once per (input, source row) (``source_rows``: every row by
    default). Columns: order, box (the figure's label), key, stack, drawn, inputs,
    mixes_positions, mixing_inputs (the inputs whose rows reach other rows), rows_reached
    (the most output rows one source row reaches), sources_checked, and the box's traced
    multiplications and operations in the whole figure (``trace_figure1``), summed over
    its N layers.
    """
    whole = trace_figure1(sz)
    rows = []
    for order, box in enumerate(BOXES, 1):
        mixing, most, checked = [], 0, 0
        for name in box.inputs:
            n_rows = input_shape(box, name, sz)[0]
            for r in (range(n_rows) if source_rows is None else [r for r in source_rows if r < n_rows]):
                _, y = trace_box(box, name, r, sz)
                reached = reached_rows(y)
                checked += 1
                most = max(most, len(reached))
                if reached != (r,) and name not in mixing:
                    mixing.append(name)
        ops = [op for b, _, lo, hi in whole.spans if b == box.key for op in whole.graph.ops[lo:hi]]
        rows.append(dict(order=order, box=box.label, key=box.key, stack=box.stack, drawn=box.drawn,
                         inputs=", ".join(box.inputs), mixes_positions=bool(mixing),
                         mixing_inputs=", ".join(mixing), rows_reached=most,
                         sources_checked=checked,
                         layers=sz.layers if box.in_layer else 1,
                         macs=sum(op.macs for op in ops if op.kind in trace.MULTIPLYING),
                         ops=len(ops)))
    return pd.DataFrame(rows)


def count_mixing(table=None):
    """How many of the figure's boxes mix positions (``box_table``'s mixes_positions)."""
    table = box_table() if table is None else table
    return int(table["mixes_positions"].sum())


@dataclass
class FigureTrace:
    """The whole figure traced: its graph, the output probabilities (T, vocab), and each box's
    operations, ``spans`` = [(box key, layer, first op, end op)] in program order."""
    graph: trace.Graph
    probs: trace.Traced
    spans: list


def trace_figure1(sz=SIZES, source_row=None, target_row=None):
    """Trace the whole figure: source tokens (S, vocab) and target tokens (T, vocab), one-hot,
    the target already shifted right; ``source_row`` / ``target_row``: the position each
    input's distances are measured from (None: no source there)."""
    g = trace.Graph()
    spans = []

    def run(key, layer_no, *xs):
        box = BOX[key]
        prefix = f"{key}.{layer_no}." if box.in_layer else f"{key}."
        w = _leaves(g, box, sz, prefix)
        lo = len(g.ops)
        y = box.run(w, sz, *xs)
        spans.append((key, layer_no, lo, len(g.ops)))
        return y

    src = trace.leaf(g, "source tokens", (sz.S, sz.vocab), ("T", "vocab"), source_row=source_row)
    tgt = trace.leaf(g, "target tokens", (sz.T, sz.vocab), ("T", "vocab"), source_row=target_row)
    x = run("encoder_positions", 0, run("input_embedding", 0, src))
    for n in range(1, sz.layers + 1):
        x = run("encoder_norm1", n, x, run("encoder_attention", n, x))
        x = run("encoder_norm2", n, x, run("encoder_feed_forward", n, x))
    memory = x                                                   # (S, d_model)
    y = run("decoder_positions", 0, run("output_embedding", 0, tgt))
    for n in range(1, sz.layers + 1):
        y = run("decoder_norm1", n, y, run("decoder_masked_attention", n, y))
        y = run("decoder_norm2", n, y, run("decoder_cross_attention", n, y, memory))
        y = run("decoder_norm3", n, y, run("decoder_feed_forward", n, y))
    probs = run("softmax", 0, run("linear", 0, y))                # (T, vocab)
    return FigureTrace(g, probs, spans)


def output_reach(sz=SIZES):
    """Which output positions each input position reaches through the whole figure: one row
    per (input, position) with the positions reached, read off the traced distances."""
    rows = []
    for name, n in (("source", sz.S), ("target", sz.T)):
        for r in range(n):
            tr = trace_figure1(sz, **{f"{name}_row": r})
            reached = reached_rows(tr.probs)
            rows.append(dict(input=name, position=r, reached=reached, n_reached=len(reached)))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- counts

def _trace_attention(T, d, heads):
    box = BOX["encoder_attention"]
    sz = Sizes(T=T, S=T, d=d, heads=heads)
    g = trace.Graph()
    w = _leaves(g, box, sz, "")
    box.run(w, sz, trace.leaf(g, "X", (T, d), ("T", "d_model"), source_row=0))
    return g, sum(int(np.prod(s)) for s, _, _ in box.weights(sz).values())


def cost_over_heads(T, d, heads=(1, 2, 4, 8, 16)):
    """Multi-head self-attention's traced multiplications for each h, with d_k = d_model / h:
    one row per h (heads, d_k, parameters, projections, grid, mix, out_projection, total).
    The grid and the mix are h T^2 d_k = T^2 d_model whatever h is."""
    T, d = check_int("T", T), check_int("d", d)
    rows = []
    for h in heads:
        h = check_int("heads", h)
        if d % h:
            raise ValueError(f"heads must divide d = {d}, got {h}: choose d a multiple of every h.")
        g, n_params = _trace_attention(T, d, h)
        parts = {}
        for op in g.ops:
            if op.kind in trace.MULTIPLYING:
                parts[op.part] = parts.get(op.part, 0) + op.macs
        rows.append(dict(heads=h, d_k=d // h, T=T, d=d, parameters=n_params,
                         **{p: parts.get(p, 0) for p in ("projections", "grid", "mix", "out_projection")},
                         total=sum(parts.values())))
    return pd.DataFrame(rows)


def trace_layer(T, d):
    """The Transformer family's own traced form at (T, d), registered or not: a depth.Trace."""
    fam, form = layer.FAMILY, layer.FAMILY.tracing.forms[0]
    weights = fam.tracing.weights(d)
    g = trace.Graph(weight_parts={name: part for name, _, _, part in weights})
    X = trace.leaf(g, "X", (T, d), ("T", "d_model"), source_row=0)
    W = [trace.leaf(g, name, shape, axes) for name, shape, axes, _ in weights]
    return depth.Trace(form.name, T, d, g, form.forward(X, *W))


QUADRATIC = ("grid", "mix")        # the layer's products over every pair of positions
RECURRENCES = ("rnn", "lstm", "gru")


def layer_crossover(d):
    """Where the layer's T^2 terms overtake the rest: traced at T = 1, 2 and 3, its grid and
    mix are a T^2 and everything else b T (checked), so they are equal at T = b / a (6 d + 2
    for post-norm with d_ff = 4 d) and exceed from the next integer on."""
    d = check_int("d", d)
    split = []
    for T in (1, 2, 3):
        parts = trace_layer(T, d).macs_by_part()
        q = sum(parts.get(p, 0) for p in QUADRATIC)
        split.append((T, q, sum(parts.values()) - q))
    a, b = split[0][1], split[0][2]
    for T, q, o in split:
        if q != a * T * T or o != b * T:
            raise AssertionError(f"the layer's traced counts at T={T} are not a T^2 + b T: {split}")
    T_equal = b / a
    return {"d": d, "quadratic_per_T2": a, "linear_per_T": b, "T_equal": T_equal,
            "T_exceeds": math.floor(T_equal) + 1}


def layer_work(T_values, d):
    """A Transformer layer's traced multiplications against the RNN's, LSTM's and GRU's at
    equal width: one row per (model, T) with macs (every traced product), quadratic (the
    layer's grid and mix; 0 for a recurrence) and linear (the rest). ``frame.attrs``
    holds ``layer_crossover(d)``."""
    d = check_int("d", d)
    rows = []
    for T in T_values:
        T = check_int("T", T)
        parts = trace_layer(T, d).macs_by_part()
        q = sum(parts.get(p, 0) for p in QUADRATIC)
        rows.append(dict(model="transformer", T=T, d=d, macs=sum(parts.values()), quadratic=q,
                         linear=sum(parts.values()) - q))
        for name in RECURRENCES:
            m = sum(depth.trace_model(name, T, d).macs_by_part().values())
            rows.append(dict(model=name, T=T, d=d, macs=m, quadratic=0, linear=m))
    frame = pd.DataFrame(rows)
    frame.attrs["crossover"] = layer_crossover(d)
    return frame
