"""``harness compare --torch``: a PyTorch module's wall time over T beside the families.

The shapes, the columns and the fit on a tiny case; no assertion on a time (this machine is
shared): the fit is checked on times made to follow a + b T^p exactly, and the ratios
against the medians they are made of.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from _deps import require_module
from harness import cli
from harness.infra import stats
from harness.infra.files import UsageError, UserCodeError
from harness.torchmodel import load, speed

torch = require_module("torch", "pip install -e '.[torch]'")

TINY = speed.TorchSpeedConfig(Ts=(8, 16, 32), d=4, families=("rnn", "attention"), rounds=3,
                              min_sample_s=0.0005)


def gru(d):
    return torch.nn.GRU(d, d, batch_first=True)


@pytest.fixture(scope="module")
def measured():
    return speed.measure(gru, "gru.py:make", ["X=2,T,d"], TINY)


def test_every_implementation_length_and_direction_is_a_row(measured):
    times, fit = measured
    assert list(times.columns) == list(speed.TIMES)
    assert len(times) == 3 * 3 * 2
    assert set(zip(times.model, times.impl)) == {("gru.py:make", "module"), ("rnn", "harness"),
                                                 ("attention", "harness")}
    assert (times.batch == 2).all() and (times.d == 4).all() and (times.rounds == 3).all()
    assert (times.torch_threads == 1).all() and (times.blas_threads == 1).all()
    assert list(times.model[:3]) == ["gru.py:make"] * 3 and list(times["T"][:3]) == [8, 16, 32]
    assert (times.seconds > 0).all()
    assert (times.seconds_lo <= times.seconds).all() and (times.seconds <= times.seconds_hi).all()


def test_the_ratios_are_the_medians_ratios(measured):
    times, _ = measured
    samples = times.attrs["samples"]
    assert len(samples) == len(times) * 3
    for r in times.itertuples():
        s = samples[(samples.model == r.model) & (samples.impl == r.impl) & (samples["T"] == r.T)
                    & (samples.direction == r.direction)].seconds
        m = samples[(samples.impl == "module") & (samples["T"] == r.T)
                    & (samples.direction == r.direction)].seconds
        assert r.seconds == pytest.approx(np.median(s), rel=1e-12)
        assert r.over_module == pytest.approx(np.median(s) / np.median(m), rel=1e-12)
        assert r.over_module_lo <= r.over_module <= r.over_module_hi


def test_one_fit_per_implementation_and_direction(measured):
    times, fit = measured
    assert list(fit.columns) == list(speed.FIT)
    assert len(fit) == 3 * 2
    assert (fit.T_min == 8).all() and (fit.T_max == 32).all() and (fit.points == 3).all()
    for r in fit.itertuples():               # the fit of the medians, NaN where none grows
        g = times[(times.model == r.model) & (times.direction == r.direction)]
        want = stats.offset_power_law(g["T"].to_numpy(float), g.seconds.to_numpy())
        np.testing.assert_allclose([r.exponent, r.fixed_seconds, r.per_T_p_seconds], want,
                                   rtol=1e-12)
        if np.isfinite(r.exponent):
            assert r.fixed_seconds >= 0 and r.per_T_p_seconds > 0


def law_times(rng, Ts, a, b, p, noise=0.01, rounds=9):
    rows, long = [], []
    for T in Ts:
        s = (a + b * T ** p) * (1 + noise * rng.standard_normal(rounds))
        rows.append(dict(model="law", impl="module", T=T, d=8, dtype="float32",
                         direction="forward", seconds=float(np.median(s))))
        long += [dict(model="law", impl="module", T=T, d=8, direction="forward", round=r,
                      seconds=float(x)) for r, x in enumerate(s)]
    times = pd.DataFrame(rows)
    times.attrs["samples"] = pd.DataFrame(long)
    return times


def test_the_fit_recovers_a_known_law():
    """Rounds made to follow seconds = a + b T^p with 1 % noise: the fit gives back (a, b, p),
    and over 8 draws each 95 % interval holds the law it came from at least 6 times."""
    Ts = np.array([64, 128, 256, 512, 1024, 2048])
    a, b, p = 2e-4, 3e-7, 1.5
    rng = np.random.default_rng(0)
    config = dataclasses.replace(speed.DEFAULT, d=8)
    fits = pd.DataFrame([speed.fit(law_times(rng, Ts, a, b, p), config).iloc[0]
                         for _ in range(8)])
    assert np.median(fits.exponent) == pytest.approx(p, abs=0.03)
    assert np.median(fits.fixed_seconds) == pytest.approx(a, rel=0.1)
    assert np.median(fits.per_T_p_seconds) == pytest.approx(b, rel=0.15)
    for name, true in (("exponent", p), ("fixed_seconds", a), ("per_T_p_seconds", b)):
        held = ((fits[f"{name}_lo"] <= true) & (true <= fits[f"{name}_hi"])).sum()
        assert held >= 6, f"{name}: the interval held {true} {held} times of 8"
    assert "p = 1.5" in speed.format_fit(fits.iloc[:1])


class BadBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("the user's backward failed")


def test_a_users_backward_error_is_theirs_before_any_timing():
    built = load.build(lambda: BadBackward.apply, "bad", ["X=1,T,d"], 8, 4)
    with pytest.raises(UserCodeError, match="test_torch_speed.py:.*backward failed"):
        speed.module_calls(built)


@pytest.mark.parametrize("field, value, flag", [
    ("Ts", (), "--T"), ("Ts", (1, 8), "--T"), ("Ts", (8, 8), "--T"), ("d", 0, "--d"),
    ("rounds", 0, "--repeats"), ("dtype", "half", "--dtype"), ("families", ("nope",), "--model")])
def test_a_bad_config_names_its_flag(field, value, flag):
    with pytest.raises(UsageError, match=f"^{flag}:"):
        speed.check_config(dataclasses.replace(TINY, **{field: value}))


FACTORY = """\
import torch
def make(d):
    return torch.nn.Linear(d, d)
"""


def test_the_command_writes_both_files(tmp_path, capsys):
    (tmp_path / "lin.py").write_text(FACTORY)
    out = tmp_path / "out"
    rc = cli.main(["compare", "--torch", f"{tmp_path / 'lin.py'}:make", "--shape", "X=1,T,d",
                   "--T", "8", "16", "32", "--d", "4", "--model", "--repeats", "3",
                   "--out", str(out), "--quiet"])
    assert rc == 0
    times = pd.read_csv(out / "speed.csv")
    fit = pd.read_csv(out / "speed_fit.csv")
    assert len(times) == 3 * 2 and set(times.impl) == {"module"} and len(fit) == 2
    printed = capsys.readouterr().out
    assert "forward+backward" in printed and "p = " in printed
    from test_data_dictionary import check_folder
    check_folder(out)


@pytest.mark.parametrize("argv, message", [
    (["--T", "8", "16"], "--T: goes with --torch"),
    (["--torch", "M:make", "--shape", "X=1,T,d", "--quick"], "--quick: not with --torch"),
    (["--torch", "M:make", "--shape", "X=1,T,d", "--T", "1", "8"], "--T: each must be"),
    (["--torch", "M:make", "--shape", "X=1,T,d", "--model", "nope"], "--model: each must be"),
    (["--torch", "M:make"], "--shape"),
])
def test_the_commands_errors_name_the_argument(tmp_path, capsys, argv, message):
    (tmp_path / "M.py").write_text(FACTORY)
    argv = [a.replace("M:", f"{tmp_path / 'M.py'}:") for a in argv]
    rc = cli.main(["compare", *argv, "--out", str(tmp_path / "out"), "--quiet"])
    assert rc == 2
    assert message in capsys.readouterr().err
