"""harness compare: the peers compute what the harness computes; the machinery runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from _deps import require_module
from harness import cli, compare

TOL = {"float32": 2e-4, "float64": 1e-10}


@pytest.mark.parametrize("case", list(compare.QUICK.cases()), ids=str)
def test_every_peer_agrees_with_the_harness(case):
    impls = compare.implementations(case, seed=3)
    y_h, dx_h = impls["harness"][2]()
    assert "numpy" in impls
    checked = 0
    for name, (_, _, outputs) in impls.items():
        if name == "harness" or outputs is None:
            continue
        y, dx = outputs()
        scale_y = np.abs(y_h).max()
        scale_dx = np.abs(dx_h).max()
        assert np.abs(np.asarray(y, dtype=np.float64) - y_h).max() <= TOL[case.dtype] * scale_y, name
        assert np.abs(np.asarray(dx, dtype=np.float64) - dx_h).max() <= TOL[case.dtype] * scale_dx, name
        checked += 1
    assert checked >= 1


def test_torch_is_a_peer_when_installed():
    require_module("torch", "pip install -e '.[torch]'")
    case = next(iter(compare.QUICK.cases()))
    assert "torch" in compare.implementations(case)


def test_run_comparison_frames():
    cfg = dataclasses.replace(compare.QUICK, repeats=2, dtypes=("float64",))
    timings, summary = compare.run_comparison(cfg)
    assert {"model", "T", "d", "dtype", "direction", "impl", "median_s", "ratio_to_harness",
            "blas_threads", "numba_threads", "OPENBLAS_CORETYPE"} <= set(timings.columns)
    assert (timings[timings.impl == "harness"].ratio_to_harness == 1.0).all()
    assert (timings.median_s > 0).all()
    assert len(summary) == 2 * len(list(cfg.cases()))
    peers = summary[["speedup_vs_numpy", "speedup_vs_fastest"]]
    assert (peers.speedup_vs_fastest <= peers.speedup_vs_numpy + 1e-12).all()
    att = summary[summary.model == "attention"].set_index("direction")
    assert att.harness_over_gemm.notna().to_dict() == {"forward": True, "backward": False}


def test_cli_quick_writes_csvs(tmp_path, capsys):
    assert cli.main(["compare", "--quick", "--repeats", "1", "--out", str(tmp_path)]) == 0
    s = pd.read_csv(tmp_path / "compare_summary.csv")
    assert set(s.direction) == {"forward", "backward"}
    assert "speedup_vs_fastest" in capsys.readouterr().out


@pytest.mark.parametrize("argv, word", [(["--threads", "0"], "--threads"),
                                         (["--threads", "100000"], "--threads"),
                                         (["--repeats", "0"], "--repeats")])
def test_cli_errors(tmp_path, capsys, argv, word):
    assert cli.main(["compare", "--quick", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert word in err and err.count("\n") == 0
