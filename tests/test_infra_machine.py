"""harness.infra.machine: what produced a measurement, the same for two runs of one command."""

from __future__ import annotations

from harness.infra import machine


def test_describe_lists_the_blas_libraries_in_one_order_whatever_order_they_loaded_in(monkeypatch):
    libs = [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.31.188.0",
             "architecture": "SkylakeX", "num_threads": 2},
            {"user_api": "openmp", "internal_api": "openmp", "version": None},
            {"user_api": "blas", "internal_api": "openblas", "version": "0.3.30",
             "architecture": "SkylakeX", "num_threads": 2}]
    seen = []
    for order in (libs, libs[::-1]):
        monkeypatch.setattr(machine, "threadpool_info", lambda order=order: list(order))
        seen.append(machine.describe()["blas"])
    assert seen == ["openblas 0.3.30 (SkylakeX),openblas 0.3.31.188.0 (SkylakeX)"] * 2


NUMPY_BLAS = {"user_api": "blas", "internal_api": "openblas", "version": "0.3.31.188.0",
              "architecture": "Haswell", "num_threads": 1, "threading_layer": "pthreads",
              "filepath": "/v/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-3.so",
              "prefix": "libscipy_openblas"}
SCIPY_BLAS = {**NUMPY_BLAS, "version": "0.3.30", "num_threads": 2,
              "filepath": "/v/lib/python3.11/site-packages/scipy.libs/libscipy_openblas-6.so"}
OPENMP = {"user_api": "openmp", "internal_api": "openmp", "version": None, "num_threads": 2,
          "filepath": "/v/lib/python3.11/site-packages/torch/lib/libgomp.so.1"}


def _without(monkeypatch, *names):
    import sys
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_libraries_has_one_row_per_blas_named_by_its_package_in_one_order(monkeypatch):
    _without(monkeypatch, "torch", "jax")
    seen = []
    for order in ([NUMPY_BLAS, OPENMP, SCIPY_BLAS], [SCIPY_BLAS, NUMPY_BLAS, OPENMP]):
        monkeypatch.setattr(machine, "threadpool_info", lambda order=order: list(order))
        seen.append(machine.libraries())
    assert seen[0] == seen[1]
    rows = seen[0]
    assert [tuple(r) for r in rows] == [machine.LIBRARY_KEYS] * 2
    assert [(r["library"], r["internal_api"], r["version"], r["architecture"], r["num_threads"],
             r["threading_layer"]) for r in rows] == [
        ("numpy", "openblas", "0.3.31.188.0", "Haswell", 1, "pthreads"),
        ("scipy", "openblas", "0.3.30", "Haswell", 2, "pthreads")]
    assert machine.libraries_line(rows) == ("numpy: openblas 0.3.31.188.0 Haswell, 1 thread; "
                                            "scipy: openblas 0.3.30 Haswell, 2 threads")
    assert machine.libraries_line([]) == ""


def test_libraries_sees_the_blas_libraries_this_process_loaded(monkeypatch):
    """The real threadpoolctl: NumPy's and SciPy's OpenBLAS (machine.py loads SciPy's), at the
    thread count set."""
    _without(monkeypatch, "torch", "jax")
    with machine.threads(1):
        rows = machine.libraries()
    assert {"numpy", "scipy"} <= {r["library"] for r in rows}
    assert all(r["user_api"] == "blas" and r["num_threads"] == 1 for r in rows)


def test_a_library_outside_site_packages_is_named_by_its_file():
    assert machine._owner("/usr/lib/x86_64-linux-gnu/libopenblas.so.0") == "libopenblas"
    assert machine._owner("C:\\py\\Lib\\site-packages\\numpy.libs\\libopenblas.dll") == "numpy"


def test_torchs_blas_is_recorded_when_torch_is_imported(monkeypatch):
    import re
    from _deps import require_module
    torch = require_module("torch", "pip install -e '.[torch]'")
    _without(monkeypatch, "jax")
    monkeypatch.setattr(machine, "threadpool_info", lambda: [])
    (row,) = machine.libraries()
    assert row["library"] == "torch" and row["num_threads"] == torch.get_num_threads()
    show = torch.__config__.show()
    assert row["internal_api"] == re.search(r"BLAS_INFO=(\w+)", show).group(1)
    if row["internal_api"] == "mkl":
        assert row["version"] and row["version"] in show
    assert f"torch {torch.__version__}" in row["detail"]
    assert ("MKL yes" in row["detail"]) == torch.backends.mkl.is_available()
    assert row["architecture"] == torch.backends.cpu.get_cpu_capability()


def test_xlas_backend_is_recorded_when_jax_is_imported(monkeypatch):
    from _deps import require_module
    require_module("jax", "pip install -e '.[jax]'")
    from harness.analysis import compare
    jax = compare._jax(1)
    _without(monkeypatch, "torch")
    monkeypatch.setattr(machine, "threadpool_info", lambda: [])
    (row,) = machine.libraries(compare.jax_threads())
    assert row["library"] == "jax" and row["internal_api"] == "xla"
    assert row["version"] == jax.__version__ and row["architecture"] == "cpu"
    assert row["num_threads"] == compare.jax_threads() == 1
    assert machine.libraries_line([row]).startswith(f"jax: xla {jax.__version__} cpu, 1 thread")


def test_the_asv_suite_records_the_libraries():
    """benchmarks/bench_machine.Libraries: the line as a param, in every results file; its
    track_ counts the BLAS libraries loaded."""
    from threadpoolctl import threadpool_info
    from benchmarks import bench_machine, common
    assert common.libraries_line() == machine.libraries_line(machine.libraries())
    suite, cls = common.CLASSES["Libraries"]
    assert suite == "default" and cls.param_names == ["libraries"]
    (line,), = cls.params
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    for p in blas:
        assert f"{p['internal_api']} {p['version']} {p['architecture']}, " in line
    b = cls()
    b.setup(line)
    assert b.track_blas_libraries(line) == len(blas) >= 2
    assert cls.track_blas_libraries.unit == "libraries"
    assert bench_machine.Libraries in (cls, None)        # None where the suite is not selected


def test_the_asv_record_falls_back_to_threadpoolctl_at_an_older_commit(monkeypatch):
    from threadpoolctl import threadpool_info
    from benchmarks import common
    monkeypatch.delattr(machine, "libraries")            # as harness.infra.machine was before
    line = common.libraries_line()
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert line.count(";") == len(blas) - 1
    for p in blas:
        assert f"{p['internal_api']} {p['version']} {p['architecture']}, {p['num_threads']} threads" in line
