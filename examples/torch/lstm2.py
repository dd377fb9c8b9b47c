"""A two-layer LSTM, the recurrence ``harness depth --torch`` reads step by step.

    harness depth --torch examples/torch/lstm2.py:factory --shape X=1,T,d --T 16 64 --d 16 \\
        --no-measure

nn.LSTM takes its input by position (``forward(input, hx=None)``), so the one --shape, X, is
passed by position; batch_first puts T on dimension -2 of X (1, T, d).
"""

from torch import nn


def factory(d):
    """nn.LSTM of two layers, d wide throughout: (1, T, d) -> (output (1, T, d), (h_n, c_n))."""
    return nn.LSTM(d, d, num_layers=2, batch_first=True)
