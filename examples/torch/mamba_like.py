"""A selective state-space block in plain PyTorch (Mamba-like): input-dependent step size,
B and C, a diagonal decay, and the recurrence computed with cumulative sums over T.

    harness depth --torch examples/torch/mamba_like.py:factory --shape X=1,T,d \\
        --T 16 64 --d 16 --no-measure [--scan tree]

With dA_t = dt_t A (A < 0, per channel and state) the state h_t = exp(dA_t) h_{t-1} +
dt_t u_t B_t unrolls to h_t = exp(L_t) sum_{s<=t} exp(-L_s) dt_s u_s B_s, L_t = dA_1 + ... +
dA_t: two cumsums over T. --scan chain counts each as T - 1 dependent adds (what a loop does);
--scan tree as a parallel scan of ceil(log2 T) levels. (exp(-L_s) overflows for long T in
float32: Mamba's kernels scan in chunks; the counts are those of this plain form.)
"""

import torch
from torch import nn
from torch.nn import functional as F

STATE = 4           # N, the state size per channel


class SelectiveSSM(nn.Module):
    """y = out(sum_n C_t,n h_t,n) with h the selective recurrence above; d channels, N states."""

    def __init__(self, d, n=STATE):
        super().__init__()
        self.in_proj = nn.Linear(d, d)                 # u_t
        self.dt_proj = nn.Linear(d, d)                 # dt_t = softplus(...): the step size
        self.B_proj = nn.Linear(d, n, bias=False)      # B_t: what enters the state
        self.C_proj = nn.Linear(d, n, bias=False)      # C_t: what leaves it
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1.0)).repeat(d, 1))   # (d, N)
        self.out_proj = nn.Linear(d, d)

    def forward(self, X):                              # (B, T, d)
        u = self.in_proj(X)                            # (B, T, d)
        dt = F.softplus(self.dt_proj(X))               # (B, T, d)
        A = -torch.exp(self.A_log)                     # (d, N)
        B, C = self.B_proj(X), self.C_proj(X)          # (B, T, N) each
        L = torch.cumsum(dt.unsqueeze(-1) * A, dim=1)  # (B, T, d, N): the log decay from 1 to t
        drive = (dt * u).unsqueeze(-1) * B.unsqueeze(-2)                 # (B, T, d, N)
        H = torch.exp(L) * torch.cumsum(torch.exp(-L) * drive, dim=1)    # (B, T, d, N): h_t
        y = (H * C.unsqueeze(-2)).sum(-1)              # (B, T, d)
        return self.out_proj(y)


def factory(d):
    return SelectiveSSM(d)
