"""The three examples of examples/torch/ run from the command line as docs/guide/your-model.md
shows them, and print the tables the page shows, verbatim."""

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from _deps import require_module

torch = require_module("torch", "pip install 'harness[torch]'")

from harness import cli  # noqa: E402
from harness.analysis import depth  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "your-model.md"
BLOCK = re.compile(r"```bash\n(harness depth [^\n]+)\n```\s*\n<!-- harness depth output: (\w+) -->"
                   r"\n```text\n(.*?)\n```", re.S)


def _documented():
    found = BLOCK.findall(PAGE.read_text())
    return {name: (command, table) for command, name, table in found}


def test_the_page_shows_each_example_once():
    assert set(_documented()) == {"lstm2", "mamba_like", "mamba_like_tree", "causal_conv"}
    for name in ("lstm2", "mamba_like", "causal_conv"):
        assert (ROOT / "examples" / "torch" / f"{name}.py").is_file()


@pytest.mark.parametrize("name", ["lstm2", "mamba_like", "mamba_like_tree", "causal_conv"])
def test_an_example_prints_the_table_its_page_shows(name, tmp_path, monkeypatch, capsys):
    command, table = _documented()[name]
    monkeypatch.chdir(ROOT)                        # the page's paths are the repository's
    argv = shlex.split(command)[1:] + ["--quiet", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    head = max(i for i, line in enumerate(printed) if line.startswith("span and max_path"))
    assert printed[head + 1:head + 4] == table.splitlines()
    written = pd.read_csv(tmp_path / "depth.csv")
    assert list(written.columns) == list(depth.depth_table([2], 2, families=("rnn",)).columns)
    shown = pd.read_csv(pd.io.common.StringIO(re.sub(r" +", ",", "\n".join(
        line.strip() for line in table.splitlines()))))
    for col in ("T", "macs", "ops", "span", "max_path", "scalar_span"):
        assert written[col].astype(float).tolist() == shown[col].astype(float).tolist(), col


def test_the_examples_counts_against_their_closed_forms():
    """Independent of the tracer: the products each example must do at T = 16, d = 16."""
    T, d = 16, 16
    table = _documented()
    lstm = table["lstm2"][1].splitlines()[1].split()
    # two layers of W_ih (4d x d) and W_hh (4d x d) at every step, and 3 T d gate products
    # a layer (f c, i g, o tanh c)
    assert int(lstm[2]) == 2 * (2 * T * 4 * d * d + 3 * T * d)
    conv = table["causal_conv"][1].splitlines()[1].split()
    # two layers (4^2 >= 16) of k = 4 taps, d x d each, at every position
    assert int(conv[2]) == 2 * 4 * T * d * d and conv[5] == "5"
    mamba = table["mamba_like"][1].splitlines()[1].split()
    tree = table["mamba_like_tree"][1].splitlines()[1].split()
    assert mamba[2] == tree[2]                      # the scan changes the depth, not the work
    # the chain's span: two cumsums of T - 1 dependent adds each, plus the block's own ops
    assert int(mamba[5]) - int(tree[5]) == 2 * (T - 1) - 2 * 4
