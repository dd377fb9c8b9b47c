"""``harness decay --torch``: a PyTorch module's ||dy_T/dx_(T-k)|| against the families' own.

The recurrent families measure ||dh_T/dh_(T-k)||, the module ||dh_T/dx_(T-k)||. With W_ih =
W_hh (and no second bias) x_t enters a_t exactly as h_(t-1) does, so dh_T/dx_(T-k) =
dh_T/dh_(T-k-1): the RNN's and the LSTM's own path at distance k + 1 (the LSTM's h block,
as the family takes it). The GRU's h_(t-1) also enters h_t directly, so there the family's
step Jacobians are multiplied by the input's Jacobian dh_t/dx_t, written out below. The
Transformer layer's own path is dy_T/dx_(T-k) itself. All in float64, to 1e-9 in log10.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from _deps import require_module
from harness import cli, models
from harness.infra.files import UsageError, UserCodeError
from harness.kernels import gru as gru_kernels
from harness.kernels import lstm as lstm_kernels
from harness.models import _gated, gru, lstm, rnn, transformer
from harness.torchmodel import decay, load

torch = require_module("torch", "pip install -e '.[torch]'")

TOL = 1e-9          # log10 of norms, float64
T, D = 12, 6
ONE_SEED = decay.TorchDecayConfig(Ts=(T,), ds=(D,), input_scales=(1.0,), seeds=(0,))


def measured(factory, shapes=("X=1,T,d",), config=ONE_SEED, seed=0, scale=1.0, d=D):
    """(block_norms of the module, its sequence input as a (T, d) float64 array)."""
    built = load.build(factory, "test", list(shapes), T, d, seed=seed, dtype="float64")
    r = decay.block_norms(built, scale, config, probe_seed=seed)
    X = built.inputs[built.sequence].detach().numpy()[0] * scale
    return r, X


def module_with(cls, W_ih, W_hh, b_ih, **kw):
    def factory():
        m = cls(W_ih.shape[1], W_hh.shape[1], batch_first=True, dtype=torch.float64, **kw)
        with torch.no_grad():
            m.weight_ih_l0.copy_(torch.from_numpy(W_ih))
            m.weight_hh_l0.copy_(torch.from_numpy(W_hh))
            m.bias_ih_l0.copy_(torch.from_numpy(b_ih))
            m.bias_hh_l0.zero_()
        return m
    return factory


# ------------------------------------------------------------------ against the families

def test_rnn_tanh_is_the_rnn_familys_path():
    W = rnn.recurrent_matrix(D, 0.95, "gaussian", seed=3)
    r, X = measured(module_with(torch.nn.RNN, W, W, np.zeros(D), nonlinearity="tanh"))
    own = rnn.rnn_gradient_norms(X, W, W, "tanh", "exact")["ln_spectral"] / math.log(10)
    assert r["norm_measure"] == "exact"
    np.testing.assert_allclose(r["log10_norm"][:-1], own[1:], atol=TOL, rtol=0)


@pytest.mark.parametrize("gate_bias", [0.0, 3.0])
def test_lstm_is_the_lstm_familys_path(gate_bias):
    X0, W_ih, W_hh, b = _gated.trajectory_inputs(T, D, lstm.GATES, gate_bias, 1.0, seed=2)
    r, X = measured(module_with(torch.nn.LSTM, W_hh, W_hh, b))
    H, C = lstm_kernels.forward(X, W_hh, W_hh, b_ih=b)
    _, log_f = lstm.step_jacobians(X, H, C, W_hh, W_hh, b)
    steps = lambda lo, hi: lstm.step_jacobians(X, H, C, W_hh, W_hh, b, lo, hi)[0]   # noqa: E731
    own, _ = _gated.route_norms(steps, T, D, log_f)
    np.testing.assert_allclose(r["log10_norm"][:-1], own[1:], atol=TOL, rtol=0)


def gru_input_jacobians(X, H, W_ih, W_hh, b):
    """dh_t/dx_t (T, d, d): h = (1 - z) n + z h_prev, n = tanh(W_in x + b_in + r hn)."""
    d = H.shape[1]
    H_prev = np.vstack([np.zeros((1, d)), H[:-1]])
    XW, HW = X @ W_ih.T + b, H_prev @ W_hh.T
    sig = lambda a: 1.0 / (1.0 + np.exp(-a))                       # noqa: E731
    r, z = sig(XW[:, :d] + HW[:, :d]), sig(XW[:, d:2 * d] + HW[:, d:2 * d])
    hn = HW[:, 2 * d:]
    n = np.tanh(XW[:, 2 * d:] + r * hn)
    Wr, Wz, Wn = (W_ih[i * d:(i + 1) * d] for i in range(3))
    dz = (z * (1 - z))[:, :, None] * Wz
    dn = (1 - n * n)[:, :, None] * (Wn + (hn * r * (1 - r))[:, :, None] * Wr)
    return (H_prev - n)[:, :, None] * dz + (1 - z)[:, :, None] * dn


def test_gru_is_the_gru_familys_step_jacobians_times_the_inputs():
    _, W_ih, W_hh, b = _gated.trajectory_inputs(T, D, gru.GATES, 1.0, 1.0, seed=4)
    r, X = measured(module_with(torch.nn.GRU, W_ih, W_hh, b))
    H = gru_kernels.forward(X, W_ih, W_hh, b_ih=b)
    J, _ = gru.step_jacobians(X, H, W_ih, W_hh, b)                  # J[t] = dh_t/dh_(t-1)
    B = gru_input_jacobians(X, H, W_ih, W_hh, b)
    own, P = [], np.eye(D)
    for k in range(1, T):                                           # x_(T-1-k), 0-based
        P = P @ J[T - k]                                            # dh_(T-1)/dh_(T-1-k)
        own.append(np.log10(np.linalg.norm(P @ B[T - 1 - k], 2)))
    np.testing.assert_allclose(r["log10_norm"], own, atol=TOL, rtol=0)


def test_transformer_layer_is_the_transformer_familys_path():
    d = 8
    _, W = transformer.draw(np.random.default_rng(5), T, d)
    r, X = measured(lambda: transformer.torch_layer(W, torch, np.float64), d=d)
    own = transformer.layer_paths(X=X, W=W)
    np.testing.assert_allclose(r["log10_norm"], own.log10_norm, atol=TOL, rtol=0)


# ------------------------------------------------------------------ exact against the sketch

def lstm_factory(d):
    return torch.nn.LSTM(d, d, batch_first=True)


def test_the_sketch_interval_holds_the_exact_norm():
    exact, _ = measured(lstm_factory, scale=2.0)
    sketch_cfg = decay.TorchDecayConfig(exact_max=1, probes=3)        # 3 of 6 directions
    for seed in range(4):
        exact, _ = measured(lstm_factory, seed=seed)
        sk, _ = measured(lstm_factory, config=sketch_cfg, seed=seed)
        assert sk["norm_measure"] == "sketch" and sk["probes"] == 3
        assert np.all(sk["log10_norm_lo"] <= exact["log10_norm"] + TOL)
        assert np.all(exact["log10_norm"] <= sk["log10_norm_hi"] + TOL)
        assert np.all(sk["log10_norm"] == sk["log10_norm_lo"])
        assert np.any(sk["log10_norm_lo"] < exact["log10_norm"] - 1e-6)   # a real sketch


def test_a_sketch_of_every_direction_is_exact():
    exact, _ = measured(lstm_factory, seed=1)
    full, _ = measured(lstm_factory, config=decay.TorchDecayConfig(exact_max=1, probes=D), seed=1)
    np.testing.assert_allclose(full["log10_norm"], exact["log10_norm"], atol=TOL, rtol=0)
    assert np.all(full["log10_norm_hi"] >= exact["log10_norm"])


def test_the_exact_blocks_are_the_jacobian():
    """Against torch.autograd.functional.jacobian of y_T, block by block (batch 2)."""
    built = load.build(lstm_factory, "lstm", ["X=2,T,d"], T, 4, seed=3, dtype="float64")
    r = decay.block_norms(built, 1.0, ONE_SEED)
    x = built.inputs["X"]
    J = torch.autograd.functional.jacobian(lambda x: built.module(x)[0][:, -1, :], x)  # (2,4,2,T,4)
    for k in range(1, T):
        block = J[:, :, :, T - 1 - k, :].reshape(8, 8).numpy()
        assert abs(r["log10_norm"][k - 1] - math.log10(np.linalg.norm(block, 2))) < TOL


def test_a_position_the_output_does_not_reach_is_empty():
    def conv(d):                                # causal, kernel 3: y_T sees x_T, x_(T-1), x_(T-2)
        c = torch.nn.Conv1d(d, d, 3, padding=2, dtype=torch.float64)
        return lambda X: c(X.transpose(1, 2))[..., :-2].transpose(1, 2)
    r, _ = measured(conv)
    assert np.isfinite(r["log10_norm"][:2]).all() and np.isnan(r["log10_norm"][2:]).all()


# ------------------------------------------------------------------ the frames

def test_the_frame_is_the_families_frame_and_the_seeds_reduce_it():
    cfg = decay.TorchDecayConfig(Ts=(T,), ds=(4,), input_scales=(1.0, 3.0), seeds=(0, 1, 2, 3))
    f = decay.decay_frame(lstm_factory, "lstm", ["X=1,T,d"], cfg)
    assert list(f.columns) == list(models.PATH_COLUMNS) + list(decay.EXTRA)
    assert len(f) == 2 * 4 * (T - 1) and set(f.distance) == set(range(1, T))
    one = f[(f.seed == 2) & (f.input_scale == 3.0)].log10_norm.to_numpy()
    built = load.build(lstm_factory, "lstm", ["X=1,T,d"], T, 4, seed=2, dtype="float64")
    np.testing.assert_allclose(one, decay.block_norms(built, 3.0, cfg)["log10_norm"], atol=TOL)
    s = decay.over_seeds(f)
    assert list(s.columns) == list(decay.SEEDS) and len(s) == 2 * (T - 1)
    for (scale, k), g in f.groupby(["input_scale", "distance"]):
        row = s[(s.input_scale == scale) & (s.distance == k)].iloc[0]
        assert row.seeds == 4
        assert row.log10_median == pytest.approx(np.median(g.log10_norm), abs=1e-12)
        assert row.log10_min == g.log10_norm.min() and row.log10_max == g.log10_norm.max()
        assert row.log10_min <= row.log10_median_lo <= row.log10_median <= row.log10_median_hi
    # the seeds draw different modules: a distribution, not one draw repeated
    assert (s.log10_max - s.log10_min).min() > 1e-3


# ------------------------------------------------------------------ errors

class Raises(torch.nn.Module):
    def forward(self, x):
        raise ValueError("the user's forward failed")


class BadBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("the user's backward failed")


def test_a_users_exception_in_forward_or_backward_is_theirs():
    with pytest.raises(UserCodeError, match="test_torch_decay.py:.*forward failed"):
        measured(lambda: Raises())
    with pytest.raises(UserCodeError, match="test_torch_decay.py:.*backward failed"):
        measured(lambda: BadBackward.apply)


def test_an_output_without_positions_is_refused():
    with pytest.raises(UsageError, match=r"dimension -2 must be T = 12"):
        measured(lambda: (lambda x: x.sum(-2)))
    with pytest.raises(UsageError, match="does not depend"):
        measured(lambda: (lambda x: x.detach() * 2))


@pytest.mark.parametrize("field, value, flag", [
    ("Ts", (1,), "--T"), ("ds", (0,), "--d"), ("seeds", (), "--seeds"), ("seeds", (-1,), "--seeds"),
    ("input_scales", (math.nan,), "--input-scale"), ("dtype", "float16", "--dtype"),
    ("probes", 0, "--probes")])
def test_a_bad_config_names_its_flag(field, value, flag):
    import dataclasses
    with pytest.raises(UsageError, match=f"^{flag}:"):
        decay.check_config(dataclasses.replace(decay.DEFAULT, **{field: value}))


FACTORY = """\
import torch
def make(d):
    return torch.nn.GRU(d, d, batch_first=True)
"""


def test_the_command_writes_the_frames_and_the_figure(tmp_path, capsys):
    (tmp_path / "mymodel.py").write_text(FACTORY)
    out = tmp_path / "out"
    rc = cli.main(["decay", "--torch", f"{tmp_path / 'mymodel.py'}:make", "--shape", "X=1,T,d",
                   "--T", "10", "--d", "4", "--seeds", "0", "1", "2", "--out", str(out),
                   "--quiet"])
    assert rc == 0
    assert {p.name for p in out.iterdir()} == set(__import__(
        "harness.commands.decay", fromlist=["x"]).TORCH_FILES)
    f = pd.read_csv(out / "decay.csv")
    assert len(f) == 2 * 3 * 9 and set(f.norm_measure) == {"spectral"}
    s = pd.read_csv(out / "decay_seeds.csv")
    assert len(s) == 2 * 9 and (s.seeds == 3).all()
    printed = capsys.readouterr().out
    assert "log10_median" in printed and "wrote 54 rows" in printed
    from test_data_dictionary import check_folder
    check_folder(out)


@pytest.mark.parametrize("argv, message", [
    (["--shape", "X=1,T,d"], "--shape: goes with --torch"),
    (["--torch", "nosuch.py:make", "--shape", "X=1,T,d"], "--torch"),
    (["--torch", "M:make", "--T", "1"], "--T: each must be an integer >= 2"),
    (["--torch", "M:make", "--shape", "X=1,T,d", "--rho", "0.5"], "--rho: the families' sweep"),
    (["--torch", "M:make", "--shape", "X=1,T,d", "--seed", "3"], "--seeds draws the module"),
])
def test_the_commands_errors_name_the_argument(tmp_path, capsys, argv, message):
    (tmp_path / "M.py").write_text(FACTORY)
    argv = [a.replace("M:", f"{tmp_path / 'M.py'}:") for a in argv]
    rc = cli.main(["decay", *argv, "--out", str(tmp_path / "out"), "--quiet"])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_an_overflowing_gradient_is_empty_and_said():
    """y_t = sum_(j<=t) exp(200 (T - j)) x_j: position j reaches y_T times exp(200 (T - j)),
    finite in float64 for T - j <= 3 (k <= 2), inf beyond."""
    def grows():
        def forward(X):                                            # (1, T, d)
            n = X.shape[-2]
            w = torch.exp(200.0 * (n - torch.arange(n, dtype=X.dtype)))      # (T,)
            return torch.cumsum(w[:, None] * X, dim=-2)
        return forward
    r, _ = measured(grows)
    assert r["not_finite"] == T - 3 and np.isnan(r["log10_norm"][-r["not_finite"]:]).all()
    assert np.isfinite(r["log10_norm"][:2]).all()
    lines = []
    cfg = decay.TorchDecayConfig(Ts=(T,), ds=(D,), input_scales=(1.0,), seeds=(0,))
    f = decay.decay_frame(grows, "grows", ["X=1,T,d"], cfg, warn=lines.append)
    assert len(lines) == 1 and "not finite" in lines[0] and "seed=0" in lines[0]
    assert f.log10_norm.isna().sum() == r["not_finite"]
