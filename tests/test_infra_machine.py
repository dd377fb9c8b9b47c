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
