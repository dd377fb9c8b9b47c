"""A causal convolution: a stack of Conv1d layers, each padded on the left only, dilated so
that output position T sees input position 1 after ceil(log_k T) layers (WaveNet's trick).

    harness depth --torch examples/torch/causal_conv.py:factory --shape X=1,T,d \\
        --T 16 64 --d 16 --no-measure

The depth is that of the layers, not of T: max_path grows as log T where an RNN's grows as T.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

KERNEL = 4          # taps per layer


class CausalConv(nn.Module):
    """Conv1d layers of ``KERNEL`` taps, dilations 1, k, k^2, ...; ReLU between them."""

    def __init__(self, d, layers, k=KERNEL):
        super().__init__()
        self.k = k
        self.convs = nn.ModuleList(nn.Conv1d(d, d, k, dilation=k ** i) for i in range(layers))

    def forward(self, X):                          # (B, T, d)
        x = X.transpose(1, 2)                      # (B, d, T): Conv1d's channels first
        for i, conv in enumerate(self.convs):
            x = conv(F.pad(x, ((self.k - 1) * conv.dilation[0], 0)))   # left padding only
            if i + 1 < len(self.convs):
                x = torch.relu(x)
        return x.transpose(1, 2)                   # (B, T, d)


def factory(T, d):
    """Enough layers that position T sees position 1: k^layers >= T."""
    return CausalConv(d, max(1, math.ceil(math.log(T, KERNEL) - 1e-9)))
