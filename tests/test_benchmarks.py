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
import signal
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
    """Every benchmark class of both suites, from the registry (a class of a suite that
    HARNESS_BENCH_SUITE leaves out is not in its module, but is registered)."""
    for name in MODULES:
        importlib.import_module(f"benchmarks.{name}")
    from benchmarks import common
    for cname, (suite, cls) in sorted(common.CLASSES.items()):
        assert any(m.startswith(PREFIXES) for m in dir(cls)), f"{cname} has no benchmark"
        yield pytest.param(cls, id=f"{cls.__module__.split('.')[-1]}.{cname}")


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
    from benchmarks import common
    from harness import models
    for name in ("Kernels", "KernelsSweep"):
        cls = common.CLASSES[name][1]
        assert cls.param_names[0] == "model"
        assert cls.params[0] == list(models.NAMES)                 # every family, one graph


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


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5"])
def test_a_thread_count_that_is_not_one_names_the_variable(value):
    from benchmarks import common
    with pytest.raises(ValueError, match=f"HARNESS_BENCH_THREADS must be a whole number .*"
                                         f"at least 1.*got '{value}'"):
        common.threads_from_env({"HARNESS_BENCH_THREADS": value})


def test_more_threads_than_numba_may_use_are_lowered_and_said(capsys):
    from benchmarks import common
    most = numba.config.NUMBA_NUM_THREADS
    assert common.threads_from_env({"HARNESS_BENCH_THREADS": str(most + 97)}) == most
    err = capsys.readouterr().err
    assert f"HARNESS_BENCH_THREADS={most + 97}" in err and f"both use {most}" in err
    assert common.threads_from_env({}) == 1 and common.threads_from_env({"HARNESS_BENCH_THREADS": ""}) == 1


@pytest.mark.parametrize("value", ["abc", "99"])
def test_the_suite_imports_with_a_message_or_not_at_all(value):
    """What asv sees: a bad count stops the import with one line naming the variable; a large
    one imports with BLAS and Numba at the same, lowered count."""
    code = ("from benchmarks import common; from harness.infra import machine; "
            "common.apply_threads(); "
            "i = machine.describe(); print(common.THREADS, i['blas_threads'], i['numba_threads'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, HARNESS_BENCH_THREADS=value), timeout=300)
    if value == "abc":
        assert r.returncode != 0
        assert r.stderr.strip().splitlines()[-1] == (
            "ValueError: HARNESS_BENCH_THREADS must be a whole number of threads, at least 1 "
            "(BLAS and Numba both use it), got 'abc'")
    else:
        assert r.returncode == 0, r.stderr
        threads, blas, numba_threads = r.stdout.split()
        assert threads == blas == numba_threads == str(numba.config.NUMBA_NUM_THREADS)
        assert "HARNESS_BENCH_THREADS=99" in r.stderr


# What asv's forkserver does: import the suite once, then fork each benchmark from that process,
# whose setup sets Numba's threads and may run a parallel kernel (the LRU's scans).
_FORKED = r"""
import os, sys
import numpy as np
from benchmarks import bench_analysers, bench_kernels, bench_machine, common
from harness.kernels import lru
if sys.argv[1] == "threads-in-parent":
    common.apply_threads()
pid = os.fork()
if pid == 0:
    common.apply_threads()
    lam, B = lru.ring_init(8, 0.5, 0.9, 0.3, 0, d_in=4)
    X = np.random.default_rng(0).standard_normal((64, 4))
    ok = all(np.allclose(lru.forward(X, lam, B, method=m), lru.forward(X, lam, B))
             for m in ("blelloch", "chunked"))
    os._exit(0 if ok else 3)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
import numba
common.apply_threads()                     # after the fork: only to name the layer
print(code, numba.threading_layer())
"""


@pytest.mark.parametrize("parent", ["import-only", "threads-in-parent"])
def test_a_process_forked_from_the_imported_suite_runs_parallel_kernels(parent):
    """Importing the suite starts no Numba threads, so a forked benchmark runs the parallel
    scans; the other side: a parent that started them (apply_threads at import, as the suite
    did) has the forked one stopped by Numba's GNU OpenMP layer, by SIGTERM."""
    r = subprocess.run([sys.executable, "-c", _FORKED, parent], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ, HARNESS_BENCH_THREADS="2"), timeout=300)
    assert r.returncode == 0, r.stderr
    code, layer = r.stdout.split()
    if parent == "import-only":
        assert code == "0", r.stderr
    elif layer != "omp":
        pytest.skip(f"Numba's {layer} threading layer survives a fork")
    else:
        assert code == str(-signal.SIGTERM) and "Terminating: fork()" in r.stderr, r.stderr


def test_asv_forks_every_benchmark_from_one_import():
    """asv.conf.json's launch_method: the suite imported once, not once a benchmark process."""
    config = pytest.importorskip("asv.config", reason="asv is not installed (pip install -e .[test])")
    assert config.Config.load(str(ROOT / "asv.conf.json")).launch_method == "forkserver"


def test_numbas_contexts_are_built_at_import():
    from benchmarks import common
    assert common.build_numba_contexts()


def test_kernels_setup_again_keeps_its_inputs():
    """asv calls setup before every sample; the second call for the same point reuses the
    first's inputs (no forward and backward a sample), another point builds its own."""
    from benchmarks import common
    kernels = common.CLASSES["Kernels"][1]()
    kernels.setup("rnn", "small")
    X, out = kernels.X, kernels.out
    kernels.setup("rnn", "small")
    assert kernels.X is X and kernels.out is out
    kernels.setup("rnn", "large")
    T, d, batch, dtype = common.SIZES["large"]
    assert kernels.X is not X and kernels.X.shape[-2:] == (T, d) and kernels.X.dtype == dtype


def test_every_class_is_in_one_suite_and_only_its_suite_reaches_asv():
    """Default and long suites: a module holds the classes of the selected suites (what asv
    finds), the registry holds them all; every module's benchmark class is registered."""
    from benchmarks import common
    suites = {cname: suite for cname, (suite, _) in common.CLASSES.items()}
    assert set(suites.values()) == {"default", "long"}
    for name in MODULES:
        mod = importlib.import_module(f"benchmarks.{name}")
        for cname, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and any(m.startswith(PREFIXES) for m in dir(cls)):
                assert suites.get(cname) in common.SELECTED, f"{cname} reaches asv unselected"
    for cname, suite in suites.items():
        module = importlib.import_module(common.CLASSES[cname][1].__module__)
        assert (getattr(module, cname) is None) == (suite not in common.SELECTED), cname


def test_the_default_suite_covers_every_family_at_two_sizes_and_the_tracked_numbers():
    """The rule, not a list: Kernels loops over the registry at common.SIZES; the analysers'
    track_ classes and the machine's GEMM ceiling are in the default suite, rounds > 1 for
    the timings (asv's --interleave-rounds needs two) and 1 for the deterministic numbers."""
    from benchmarks import bench_kernels, common
    from harness import models
    assert common.CLASSES["Kernels"][1].params == [list(models.NAMES), ["small", "large"]]
    assert common.CLASSES["Kernels"][1].rounds >= 2
    assert common.SIZES["small"][0] < common.SIZES["large"][0]
    for name in ("Depth", "DecayRate", "AttentionDecayRate"):
        suite, cls = common.CLASSES[name]
        assert cls.deterministic and cls.rounds == 1 and cls.suite == "default"
    suite, gemm = common.CLASSES["GemmEfficiency"]
    assert suite == "default" and hasattr(gemm, "track_gemm_peak_gflops")
    assert common.CLASSES["KernelsSweep"][0] == "long"
    assert (bench_kernels.KernelsSweep is None) == ("long" not in common.SELECTED)


@pytest.mark.parametrize("value", ["", "default", "long", "all"])
def test_suite_from_env_selects(value):
    from benchmarks import common
    expected = {"": ("default",), "default": ("default",), "long": ("long",),
                "all": ("default", "long")}[value]
    assert common.suite_from_env({"HARNESS_BENCH_SUITE": value}) == expected
    assert common.suite_from_env({}) == ("default",)


def test_an_unknown_suite_names_the_variable():
    from benchmarks import common
    with pytest.raises(ValueError, match=r"HARNESS_BENCH_SUITE must be one of \['all', 'default', "
                                         r"'long'\], got 'quick'"):
        common.suite_from_env({"HARNESS_BENCH_SUITE": "quick"})
    with pytest.raises(ValueError, match="suite must be one of"):
        common.suite("fast")


def test_the_long_suite_is_what_asv_sees_when_selected():
    code = ("from benchmarks import bench_kernels as k, bench_analysers as a; "
            "print(k.Kernels is None, k.KernelsSweep is not None, a.DecaySweep is not None)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, HARNESS_BENCH_SUITE="long"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"]


def test_asv_check_passes():
    pytest.importorskip("asv", reason="asv is not installed (pip install -e .[test])")
    r = subprocess.run([sys.executable, "-m", "asv", "check", "-E", f"existing:{sys.executable}",
                        "--config", str(ROOT / "asv.conf.json")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, HARNESS_BENCH_SUITE="all"))    # both suites
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No problems found" in r.stdout, r.stdout
