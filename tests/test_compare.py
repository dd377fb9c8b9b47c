"""harness compare: the peers compute what the harness computes; the machinery runs."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
import pytest

from _deps import require_module
from harness import cli, models
from harness.analysis import compare
from harness.infra import config, timing

TOL = {"float32": 2e-4, "float64": 1e-10}


@pytest.mark.parametrize("case", compare.cases(config.QUICK_COMPARE), ids=str)
def test_every_peer_agrees_with_the_harness(case):
    impls = compare.implementations(case, seed=3)
    y_h, dx_h = impls["harness"][2]()
    assert "numpy" in impls
    checked = 0
    for name, fs in impls.items():
        outputs = fs[2]
        if name == "harness" or outputs is None:
            continue
        y, dx = outputs()
        scale_y = np.abs(y_h).max()
        scale_dx = np.abs(dx_h).max()
        assert np.abs(np.asarray(y, dtype=np.float64) - y_h).max() <= TOL[case.dtype] * scale_y, name
        assert np.abs(np.asarray(dx, dtype=np.float64) - dx_h).max() <= TOL[case.dtype] * scale_dx, name
        checked += 1
    assert checked >= 1


def _dx(result):
    """dX out of what a forward+backward callable returns: a grads object, a tuple or a tensor."""
    dx = getattr(result, "dX", result[0] if isinstance(result, tuple) else result)
    return np.asarray(dx.detach() if hasattr(dx, "detach") else dx, dtype=np.float64)


@pytest.mark.parametrize("T", [1, 255, 257, 521])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_attention_peers_agree_forward_and_both_passes(T, dtype):
    """The --long case's implementations, at lengths around the peers' 256-row blocks and
    the kernel's tiles: every forward, every forward+backward and every backward from a
    kept output give the NumPy-by-blocks peer's Y and dX, which the full-grid reference gives."""
    from harness.models import reference
    case = compare.Case("attention", 1, T, 8, dtype, "tiled")
    impls = compare.implementations(case, seed=5)
    X, W = models.get("attention").kernels.inputs(T, 8, 1, dtype, 5)
    y_ref, _ = reference.attention_forward(*(a.astype(np.float64) for a in (X, *W)))
    tol = TOL[dtype] * np.abs(y_ref).max()
    assert {"harness", "numpy"} <= set(impls)
    y_h, dx_h = impls["harness"][2]()
    assert np.abs(y_h - y_ref).max() <= tol
    for name, (fwd, _, outputs, both) in impls.items():
        y, dx = outputs()
        assert np.abs(np.asarray(y, dtype=np.float64) - y_ref).max() <= tol, name
        assert np.abs(np.asarray(dx, dtype=np.float64) - dx_h).max() <= TOL[dtype] * np.abs(dx_h).max(), name
        assert np.abs(_dx(both()) - dx_h).max() <= TOL[dtype] * np.abs(dx_h).max(), name
        y_f = fwd()
        y_f = y_f[0] if isinstance(y_f, tuple) else y_f
        assert np.abs(np.asarray(y_f, dtype=np.float64) - y_ref).max() <= tol, name


def test_a_kernel_the_family_lacks_is_named():
    with pytest.raises(ValueError, match="kernel of rnn must be one of"):
        compare.implementations(compare.Case("rnn", 1, 8, 4, "float64", "tiled"))


def test_long_comparison_is_tiled_attention_at_long_lengths():
    cs = compare.cases(config.LONG_COMPARE)
    assert {(c.model, c.kernel) for c in cs} == {("attention", "tiled")}
    assert sorted({c.T for c in cs}) == [4096, 8192, 16384, 32768] and {c.d for c in cs} == {64, 256}
    assert models.get("attention").kernel("tiled").directions == ("forward", "forward+backward")


def test_torch_is_a_peer_when_installed():
    require_module("torch", "pip install -e '.[torch]'")
    case = compare.cases(config.QUICK_COMPARE)[0]
    assert "torch" in compare.implementations(case)


def test_run_comparison_frames():
    cfg = dataclasses.replace(config.QUICK_COMPARE, repeats=3, dtypes=("float64",))
    timings, summary = compare.run_comparison(cfg)
    assert {"model", "T", "d", "dtype", "direction", "impl", "median_s", "ratio_to_harness",
            "blas_threads", "numba_threads", "OPENBLAS_CORETYPE"} <= set(timings.columns)
    assert (timings.median_s > 0).all()
    # one row per case and direction its kernel is timed in (two or three)
    assert len(summary) == sum(len(models.get(c.model).kernel(c.kernel).directions)
                               for c in compare.cases(cfg))
    peers = summary[["speedup_vs_numpy", "speedup_vs_fastest"]]
    assert (peers.speedup_vs_fastest <= peers.speedup_vs_numpy + 1e-12).all()
    assert (summary.speedup_lo <= summary.speedup_vs_fastest).all()
    assert (summary.speedup_vs_fastest <= summary.speedup_hi).all()
    tiled = summary[summary.kernel == "tiled"]
    assert list(tiled.direction) == ["forward", "forward+backward"]
    both = timings[(timings.kernel == "tiled") & (timings.direction == "forward+backward")]
    assert set(both.impl) >= {"harness", "numpy"}
    att = summary[(summary.model == "attention") & (summary.kernel == "default")].set_index("direction")
    assert att.harness_over_gemm.notna().to_dict() == {"forward": True, "backward": False}


def test_ratios_are_computed_from_the_samples(monkeypatch):
    """Known samples in, the medians, ratios, speed-ups and targets out, computed by hand."""
    fake = {"harness": [3.0, 1.0, 2.0], "numpy": [8.0, 4.0, 6.0], "torch": [1.0, 9.0, 5.0],
            "gemm": [1.5, 1.5, 1.5]}

    def time_interleaved(fns, rounds, min_sample_s, seed=0):
        return {k: np.array(fake[k]) for k in fns}, {k: 7 for k in fns}

    monkeypatch.setattr(timing, "time_interleaved", time_interleaved)
    cfg = dataclasses.replace(config.QUICK_COMPARE, dtypes=("float64",),
                              cases=(("rnn", 1, 16, 8), ("attention", 1, 2048, 256)))
    monkeypatch.setattr(compare, "implementations", lambda case, seed=0: {
        k: (lambda: None, None if k == "gemm" else (lambda: None), None) for k in fake})
    timings, summary = compare.run_comparison(cfg)
    t = timings[(timings.model == "rnn") & (timings.direction == "forward")].set_index("impl")
    assert t.median_s.to_dict() == {"harness": 2.0, "numpy": 6.0, "torch": 5.0, "gemm": 1.5}
    assert t.ratio_to_harness.to_dict() == {"harness": 1.0, "numpy": 3.0, "torch": 2.5, "gemm": 0.75}
    assert (t.number == 7).all() and (t.min_s.to_dict() == {"harness": 1.0, "numpy": 4.0,
                                                            "torch": 1.0, "gemm": 1.5})
    s = summary.set_index(["model", "direction"])
    rnn = s.loc[("rnn", "forward")]
    assert rnn.fastest_peer == "torch" and rnn.speedup_vs_fastest == 2.5
    assert rnn.speedup_vs_numpy == 3.0 and rnn.speedup_vs_torch == 2.5
    assert bool(rnn.met)                              # 2.5 >= the RNN's 1.5
    att = s.loc[("attention", "forward")]             # the GEMM-floor case: 2 / 1.5 > 1.3
    assert att.harness_over_gemm == 2.0 / 1.5 and not bool(att.met)
    assert pd.isna(s.loc[("attention", "backward")].harness_over_gemm)


def _fake_run(monkeypatch, fake, jax=True):
    """run_comparison on two cases whose implementations' samples are ``fake``; without
    ``jax``, as where JAX is not installed."""
    def time_interleaved(fns, rounds, min_sample_s, seed=0):
        return {k: np.array(fake[k]) for k in fns}, {k: 7 for k in fns}

    monkeypatch.setattr(timing, "time_interleaved", time_interleaved)
    if not jax:
        monkeypatch.setattr(compare, "_jax", lambda threads=1: None)
        monkeypatch.setattr(compare, "jax_threads", lambda: None)
    cfg = dataclasses.replace(config.QUICK_COMPARE, dtypes=("float64",),
                              cases=(("rnn", 1, 16, 8), ("attention", 1, 2048, 256)))
    monkeypatch.setattr(compare, "implementations", lambda case, seed=0: {
        k: (lambda: None, (lambda: None), None) for k in fake})
    return compare.run_comparison(cfg)


def test_jax_is_a_peer_like_the_others_and_can_be_the_fastest(monkeypatch):
    fake = {"harness": [3.0, 1.0, 2.0], "numpy": [8.0, 4.0, 6.0], "torch": [1.0, 9.0, 5.0],
            "jax": [1.0, 0.5, 4.0]}
    timings, summary = _fake_run(monkeypatch, fake)
    s = summary.set_index(["model", "direction"]).loc[("rnn", "forward")]
    assert s.fastest_peer == "jax" and s.speedup_vs_fastest == 0.5 and s.speedup_vs_jax == 0.5
    assert s.speedup_vs_torch == 2.5 and s.speedup_vs_numpy == 3.0
    assert not bool(s.met)                            # 0.5 < the RNN's 1.5
    t = timings[(timings.model == "rnn") & (timings.direction == "forward")].set_index("impl")
    assert t.ratio_to_harness["jax"] == 0.5


def test_without_jax_its_columns_are_nan(monkeypatch):
    fake = {"harness": [3.0, 1.0, 2.0], "numpy": [8.0, 4.0, 6.0]}
    timings, summary = _fake_run(monkeypatch, fake, jax=False)
    assert summary.speedup_vs_jax.isna().all() and summary.speedup_vs_torch.isna().all()
    assert summary.jax_threads.isna().all() and timings.jax_threads.isna().all()
    assert (summary.fastest_peer == "numpy").all()
    assert "speedup_vs_jax" in compare.format_summary(summary)


def test_every_row_names_the_libraries_it_ran_on(monkeypatch):
    """The BLAS libraries loaded (NumPy's and SciPy's OpenBLAS), as threadpoolctl reports
    them, each at the run's thread count, in every row of both frames."""
    from threadpoolctl import threadpool_info
    fake = {"harness": [3.0, 1.0, 2.0], "numpy": [8.0, 4.0, 6.0]}
    timings, summary = _fake_run(monkeypatch, fake, jax=False)
    line = summary.libraries.iloc[0]
    assert (summary.libraries == line).all() and (timings.libraries == line).all()
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas
    for p in blas:
        assert f"{p['internal_api']} {p['version']} {p['architecture']}, 1 thread" in line
    assert line.count("openblas") >= 2                # NumPy's and SciPy's


def test_cli_quick_writes_csvs(tmp_path, capsys):
    assert cli.main(["compare", "--quick", "--repeats", "1", "--out", str(tmp_path)]) == 0
    s = pd.read_csv(tmp_path / "compare_summary.csv")
    assert set(s.direction) == {"forward", "backward", "forward+backward"}
    # every compared kernel with quick cases: attention's tiled one, linear attention's other two
    assert set(s.kernel) == {k.name for f in models.families() for k in f.compared if k.quick_cases}
    assert set(s[s.model == "linear_attention"].kernel) == {"default", "parallel", "recurrent"}
    assert "speedup_vs_fastest" in capsys.readouterr().out
    t = pd.read_csv(tmp_path / "compare.csv")
    assert "speedup_vs_jax" in s.columns
    for frame in (s, t):                              # the columns docs/data.md lists
        assert {"jax_threads", "libraries"} <= set(frame.columns)
        assert frame.libraries.str.contains("openblas").all()


@pytest.mark.parametrize("argv, word", [(["--threads", "0"], "--threads"),
                                         (["--threads", "100000"], "--threads"),
                                         (["--repeats", "0"], "--repeats")])
def test_cli_errors(tmp_path, capsys, argv, word):
    assert cli.main(["compare", "--quick", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert word in err and err.count("\n") == 0


@pytest.mark.parametrize("case", [c for c in compare.cases(config.QUICK_COMPARE)
                                  if "gemm" in compare.implementations(c)], ids=str)
def test_the_blas_floors_run_in_every_layout(case):
    """The floors (the kernels' products alone) run for every family and layout that has one:
    unbatched and batched, float32 (the RNN's column form) and float64."""
    fwd, bwd = compare.implementations(case)["gemm"][:2]
    assert fwd() is None
    assert bwd is None or bwd() is None


def test_the_rnn_floor_is_timed_in_both_directions():
    case = compare.Case("rnn", 3, 16, 8, "float32")
    fwd, bwd, outputs = compare.implementations(case)["gemm"][:3]
    assert fwd is not None and bwd is not None and outputs is None


def test_quick_and_long_are_one_or_the_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["compare", "--quick", "--long", "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--long: not allowed with argument --quick" in err and err.count("\n") == 0


def test_cli_long_runs_the_long_config(tmp_path, monkeypatch, capsys):
    """--long takes LONG_COMPARE (made tiny here) with its own rounds, unless --repeats."""
    tiny = dataclasses.replace(config.LONG_COMPARE, cases=(("attention", 1, 300, 8, "tiled"),),
                               repeats=3)
    monkeypatch.setattr(config, "LONG_COMPARE", tiny)
    assert cli.main(["compare", "--long", "--quiet", "--out", str(tmp_path)]) == 0
    t = pd.read_csv(tmp_path / "compare.csv")
    assert set(t.kernel) == {"tiled"} and set(t["T"]) == {300}
    assert set(t.direction) == {"forward", "forward+backward"} and (t.repeats == 3).all()
    assert (t.number == 1).all()                      # min_sample_s = 0: one call a sample
    assert "forward+backward" in capsys.readouterr().out


def test_tiled_peers_name_a_batched_x():
    from harness.models import attention as matt
    X = np.ones((2, 5, 3))
    W = [np.eye(3)] * 3
    with pytest.raises(ValueError, match=r"X must be \(T, d\) for the tiled kernel's peers, got shape \(2, 5, 3\)"):
        matt.tiled_peers(X, W, np.ones((2, 5, 3)))


def test_the_jax_import_holds_a_signal_until_it_ends(monkeypatch):
    """As torch's (tests/test_interrupt.py): a signal inside jax's import is recorded, not
    raised there, and comes when the import has ended."""
    import importlib.abc
    import importlib.util
    import signal
    import sys
    from harness.infra import signals
    inside = []

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            signals._handler(signal.SIGTERM, None)           # must not raise here
            inside.append(signals.received())

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            return importlib.util.spec_from_loader(name, Loader()) if name == "jax" else None

    monkeypatch.setattr(compare, "_JAX", {})                 # not yet imported in this process
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")              # restored after: _jax sets both
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    try:
        with signals.installed():
            with pytest.raises(KeyboardInterrupt):
                compare._jax()
    finally:
        sys.modules.pop("jax", None)                         # the stand-in; monkeypatch restores jax
    assert inside == [signal.SIGTERM]
    assert os.environ["XLA_FLAGS"] == compare.XLA_FLAGS


def test_a_missing_jax_is_none_and_its_threads_unknown(monkeypatch):
    import sys

    class Finder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "jax":
                raise ImportError("No module named 'jax'")
    monkeypatch.setattr(compare, "_JAX", {})
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    assert compare._jax() is None and compare.jax_threads() is None
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=true"   # the user's, kept
