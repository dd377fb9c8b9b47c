"""harness.torchmodel.load: the user's factory imported, called, its inputs drawn, its forward
run; every mistake of theirs reported as theirs, one line."""

import sys

import pytest

from _deps import require_module

torch = require_module("torch", "pip install 'harness[torch]'")

from harness.infra.files import UsageError, UserCodeError  # noqa: E402
from harness.torchmodel import load  # noqa: E402

MODELS = '''\
import torch
from torch import nn


def lstm(d):
    return nn.LSTM(d, d, batch_first=True)


def both(T, d, scale=2.0):
    def f(X, W):
        return torch.tanh(X @ W) * scale
    f.given = (T, d)
    return f


def neither():
    return lambda X: X.cumsum(1)


def needs_more(d, heads):
    return nn.Identity()


def raises(d):
    return nn.Linear(d, undefined_name)


def not_a_module(d):
    return 3


class ByName(nn.Module):
    def forward(self, X, mask=None):
        return (X * 2, X)


def by_name():
    return ByName()


def broken_forward():
    return lambda X: X @ torch.zeros(1, 1, 7)

'''


def _line(text):
    """The line of MODELS that holds ``text``: where the user's error must be reported."""
    return next(i for i, line in enumerate(MODELS.splitlines(), 1) if text in line)


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "user_models.py"
    path.write_text(MODELS)
    return path


def test_import_torch_says_in_one_line_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)         # import torch raises ImportError
    with pytest.raises(UsageError) as e:
        load.import_torch()
    assert "pip install 'harness[torch]'" in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("--torch: needs PyTorch")


def test_a_factory_gets_the_T_and_d_it_takes_and_none_it_does_not(models):
    m = load.build(None, f"{models}:both", {"X": ("T", "d"), "W": ("d", "3")}, 5, 4)
    assert m.module.given == (5, 4)
    assert not m.by_position and list(m.inputs) == ["X", "W"] and m.sequence == "X"
    assert tuple(load.call(m).shape) == (5, 3)
    b = load.build(None, f"{models}:neither", {"X": ("1", "T", "d")}, 6, 2)
    assert tuple(b.inputs["X"].shape) == (1, 6, 2)
    torch.testing.assert_close(load.call(b), b.inputs["X"].cumsum(1))


def test_inputs_are_seeded_normal_draws_and_the_module_is_eval_float32(models):
    a = load.build(None, f"{models}:lstm", {"X": ("1", "T", "d")}, 7, 3, seed=1)
    b = load.build(None, f"{models}:lstm", {"X": ("1", "T", "d")}, 7, 3, seed=1)
    c = load.build(None, f"{models}:lstm", {"X": ("1", "T", "d")}, 7, 3, seed=2)
    torch.testing.assert_close(a.inputs["X"], b.inputs["X"])
    assert not torch.equal(a.inputs["X"], c.inputs["X"])
    torch.testing.assert_close(a.module.weight_hh_l0, b.module.weight_hh_l0)   # the seed rules
    assert not a.module.training and a.module.weight_hh_l0.dtype == torch.float32
    d = load.build(None, f"{models}:lstm", {"X": ("1", "T", "d")}, 7, 3, dtype="float64")
    assert d.inputs["X"].dtype == torch.float64 and d.module.weight_hh_l0.dtype == torch.float64


def test_nn_lstm_takes_its_input_by_position_and_returns_its_output_first(models):
    b = load.build(None, f"{models}:lstm", {"X": ("1", "T", "d")}, 7, 3)
    assert b.by_position
    out = load.call(b)
    expected, _ = b.module(b.inputs["X"])
    torch.testing.assert_close(out, expected)
    n = load.build(None, f"{models}:by_name", {"X": ("T", "d")}, 4, 2)
    assert not n.by_position
    torch.testing.assert_close(load.call(n), n.inputs["X"] * 2)       # the first of the tuple
    y = torch.ones(4, 2)
    torch.testing.assert_close(load.call(n, X=y), 2 * y)              # an input replaced
    with pytest.raises(ValueError, match="no input named 'Y'"):
        load.call(n, Y=y)


@pytest.mark.parametrize("fn, shapes, needle", [
    ("needs_more", {"X": ("T", "d")}, "needs its argument 'heads'"),
    ("not_a_module", {"X": ("T", "d")}, "must return an nn.Module or a function"),
    ("by_name", {"X": ("T", "d"), "Y": ("T", "d")}, "takes X by name but no input named 'Y'"),
    ("both", {"X": ("T", "d")}, "needs its input 'W' too"),
    ("no_such", {"X": ("T", "d")}, "has no factory 'no_such'"),
])
def test_a_factory_or_forward_that_does_not_fit_is_refused_in_one_line(models, fn, shapes,
                                                                        needle):
    with pytest.raises(UsageError) as e:
        load.build(None, f"{models}:{fn}", shapes, 4, 2)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not isinstance(e.value, UserCodeError)


def test_the_users_errors_are_theirs_with_their_file_and_line(models, tmp_path):
    with pytest.raises(UserCodeError) as e:
        load.build(None, f"{models}:raises", {"X": ("T", "d")}, 4, 2)
    assert f"{models}:{_line('undefined_name')}: NameError" in str(e.value) and "calling the factory" in str(e.value)
    b = load.build(None, f"{models}:broken_forward", {"X": ("T", "d")}, 4, 2)
    with pytest.raises(UserCodeError) as e:
        load.call(b)
    assert f"{models}:{_line('torch.zeros(1, 1, 7)')}: RuntimeError" in str(e.value) and "running the forward" in str(e.value)
    bad = tmp_path / "bad_syntax.py"
    bad.write_text("def factory(:\n    pass\n")
    with pytest.raises(UserCodeError) as e:
        load.load_factory(f"{bad}:factory")
    assert f"{bad}:1: SyntaxError" in str(e.value)
    failing = tmp_path / "failing_import.py"
    failing.write_text("import torch\nimport no_such_module_xyz\n")
    with pytest.raises(UserCodeError) as e:
        load.load_factory(f"{failing}:factory")
    assert f"{failing}:2: ModuleNotFoundError" in str(e.value)


@pytest.mark.parametrize("texts, needle", [
    (["X=B,T,d"], "a batch is an integer here (e.g. X=1,T,d)"),
    (["X=d,T"], "second-to-last dimension must be T"),
    (["X=1,T,d", "X=d,d"], "each input once"),
    (["X=T,q"], "each dimension of X must be"),
    ([], "--torch needs one --shape per input"),
])
def test_parse_shapes_refuses_by_name(texts, needle):
    with pytest.raises(UsageError) as e:
        load.parse_shapes(texts)
    assert needle in str(e.value) and str(e.value).startswith("--shape")


def test_parse_shapes_keeps_the_order_and_an_integer_batch():
    assert load.parse_shapes(["X=1,T,d", "W=d,2*d"]) == {"X": ("1", "T", "d"), "W": ("d", "2*d")}
