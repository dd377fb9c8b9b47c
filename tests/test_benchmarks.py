"""The asv suite runs: every benchmark's setup and method once, at the smallest sizes.

No timing is asserted; ``track_`` values must be finite numbers with a unit.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import math
import numbers
import os
import pathlib
import subprocess
import sys

import numba
import pytest
from threadpoolctl import threadpool_limits

from harness.infra import machine

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
PREFIXES = ("time_", "peakmem_", "mem_", "track_", "timeraw_")
# every value of these params is cheap at the smallest sizes: both models, both dtypes
ALL_VALUES = {"model", "dtype"}


def _thread_state():
    return machine.blas_threads(), numba.get_num_threads()


def _restore(state):
    blas, numba_threads = state
    if blas is not None:
        threadpool_limits(limits=blas, user_api="blas")
    numba.set_num_threads(numba_threads)


@pytest.fixture(autouse=True)
def _keep_threads():
    """The suite sets BLAS and Numba threads for its process; give other tests theirs back."""
    state = _thread_state()
    yield
    _restore(state)


def _classes():
    for name in MODULES:
        mod = importlib.import_module(f"benchmarks.{name}")
        for cname, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and any(
                    m.startswith(PREFIXES) for m in dir(cls)):
                yield pytest.param(cls, id=f"{name}.{cname}")


def _smallest(cls):
    """Param combinations to run: the first (smallest) value of each, every model and dtype."""
    params = getattr(cls, "params", [])
    if params and not isinstance(params[0], (list, tuple)):
        params = [params]
    names = getattr(cls, "param_names", [f"p{i}" for i in range(len(params))])
    choices = [list(v) if n in ALL_VALUES else [v[0]] for n, v in zip(names, params)]
    return list(itertools.product(*choices))


def test_every_module_is_found():
    assert {"bench_kernels", "bench_analysers", "bench_machine"} <= set(MODULES)


_before = _thread_state()
CLASSES = list(_classes())          # importing benchmarks.common applies its thread settings
_restore(_before)


@pytest.mark.parametrize("cls", CLASSES)
def test_benchmark_runs_once(cls):
    methods = sorted(m for m in dir(cls) if m.startswith(PREFIXES))
    cache = cls().setup_cache() if hasattr(cls, "setup_cache") else None
    ran = 0
    for combo in _smallest(cls):
        args = ((cache,) if cache is not None else ()) + combo
        for m in methods:
            bench = cls()
            try:
                if hasattr(bench, "setup"):
                    bench.setup(*args)
            except NotImplementedError:                   # asv's "skipped"
                continue
            try:
                value = getattr(bench, m)(*args)
            finally:
                if hasattr(bench, "teardown"):
                    bench.teardown(*args)
            ran += 1
            if m.startswith("track_"):
                unit = getattr(getattr(cls, m), "unit", None)
                assert isinstance(unit, str) and unit, f"{cls.__name__}.{m} has no unit"
                assert isinstance(value, numbers.Real) and not isinstance(value, bool), \
                    f"{cls.__name__}.{m}{combo} returned {value!r}"
                assert math.isfinite(value), f"{cls.__name__}.{m}{combo} returned {value!r}"
    assert ran > 0, f"every combination of {cls.__name__} was skipped"


def test_params_match_param_names():
    for p in CLASSES:
        cls = p.values[0]
        if hasattr(cls, "params"):
            assert len(cls.param_names) == len(cls.params), cls.__name__


def test_rnn_and_attention_share_parameters():
    from benchmarks import bench_kernels
    assert bench_kernels.Kernels.param_names[0] == "model"
    from harness import models
    assert bench_kernels.Kernels.params[0] == list(models.NAMES)   # every family, one graph


def test_attention_skips_only_what_does_not_fit():
    from benchmarks import common
    assert common.grid_fits("attention", 4096, 1)
    assert not common.grid_fits("attention", 4096, 32)
    assert all(common.grid_fits("rnn", T, 32) for T in common.T_VALUES)
    with pytest.raises(NotImplementedError, match="T=4096, batch=32"):
        common.skip_unless_fits("attention", 4096, 32)


def test_warm_up_is_the_harnesss_own_with_a_fallback_for_older_commits(monkeypatch):
    """The suite compiles a family as the harness does (``progress.warm_up_family``, in the
    timed dtype only); at a commit without it, the same calls from the suite itself."""
    from benchmarks import common
    from harness.infra import progress
    from harness.models import RECURRENCE
    seen = []
    monkeypatch.setattr(progress, "warm_up_family", lambda fam, dtypes: seen.append((fam, dtypes)))
    common.warm_up(RECURRENCE, "float32")
    assert seen == [(common.family(RECURRENCE), ("float32",))]

    monkeypatch.delattr(progress, "warm_up_family")
    calls = []
    monkeypatch.setattr(common, "run_backward", lambda model, X, Ws, out: calls.append(X.shape))
    common.warm_up(RECURRENCE, "float32")
    assert calls == [(3, 2), (2, 3, 2)]                    # unbatched, then a batch of two


def test_threads_are_set_together():
    from benchmarks import common
    blas, numba_threads, coretype = common.apply_threads()
    assert blas == common.THREADS
    assert numba_threads == min(common.THREADS, numba.config.NUMBA_NUM_THREADS)
    assert coretype == (os.environ.get("OPENBLAS_CORETYPE") or "(unset)")


def test_asv_check_passes():
    pytest.importorskip("asv", reason="asv is not installed (pip install -e .[test])")
    r = subprocess.run([sys.executable, "-m", "asv", "check", "-E", f"existing:{sys.executable}",
                        "--config", str(ROOT / "asv.conf.json")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No problems found" in r.stdout, r.stdout
