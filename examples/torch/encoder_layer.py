"""PyTorch's own attention layer, the one docs/guide/your-model.md measures at T = 4096.

    harness depth --torch examples/torch/encoder_layer.py:factory --shape X=1,T,d \\
        --T 16 64 --d 16 --no-measure

nn.TransformerEncoderLayer takes its input by position (``forward(src, ...)``), so the one
--shape, X, is passed by position; batch_first puts T on dimension -2 of X (1, T, d). The
loader puts the module in eval mode, so its dropout is not traced.
"""

from torch import nn

HEADS = 8           # d_k = d / 8: 8 at the page's d = 64
FF_RATIO = 4        # dim_feedforward = 4 d: 256 at d = 64


def factory(d):
    """nn.TransformerEncoderLayer(d, 8, dim_feedforward=4 d, batch_first=True), post-norm:
    (1, T, d) -> (1, T, d)."""
    return nn.TransformerEncoderLayer(d, HEADS, dim_feedforward=FF_RATIO * d, batch_first=True)
