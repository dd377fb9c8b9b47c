"""harness.analysis.peakmem's bookkeeping, in this process and without children: what a row holds,
what the child is told and in which environment, and the counters read in bytes.

The real measurements (fresh processes, real kernels) are in tests/test_peakmem.py; these
are fast enough for mutation testing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import mmap
import os
import subprocess

import numpy as np
import pytest

from harness.infra import config
from harness import models
from harness.analysis import peakmem

MiB = 2**20
SMALL = config.MemoryConfig(T_values=(8, 16), d=4, dtype="float32", threads=1)


def test_the_status_counters_are_read_in_bytes():
    page = os.sysconf("SC_PAGE_SIZE")
    for _ in range(5):                  # nothing else runs here, but allow a page fault between
        with open("/proc/self/statm") as f:
            resident = int(f.read().split()[1]) * page
        if peakmem._status("VmRSS:") == resident:
            break
    assert peakmem._status("VmRSS:") == pytest.approx(resident, abs=page * 4)
    assert peakmem._status("VmHWM:") >= peakmem._status("VmRSS:") - page * 4


def test_only_the_arrays_of_an_output_are_counted():
    a, b = np.zeros(3), np.zeros((2, 5), dtype=np.float32)
    assert [x is a for x in peakmem._arrays(a)] == [True]
    out = peakmem._arrays((a, 2.0, None, b))
    assert len(out) == 2 and out[0] is a and out[1] is b
    assert peakmem._arrays(2.0) == []


class _Recorder:
    """A timed variant that records how it is called and allocates a known amount."""

    def __init__(self, size):
        self.size, self.dtypes, self.draws, self.sizes = size, [], [], []

    def inputs(self, T, d, rng, dtype="float64"):
        self.dtypes.append(dtype)
        self.sizes.append((T, d))
        self.draws.append(float(rng.standard_normal()))
        return (T, d)

    def call(self, T, d):
        if T <= 2:                       # the warm-up: nothing to see
            return np.zeros(1)
        # fresh pages, every one touched: an anonymous map of its own (malloc could hand back
        # memory already resident after earlier tests in this process)
        big = np.frombuffer(mmap.mmap(-1, self.size), dtype=np.float64)
        big[::512] = 1.0                 # one write per 4 KiB page
        return big, float(T), np.zeros(T, dtype=np.float32)

    def bytes(self, T, d):
        return 1000 * T + d


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder(64 * MiB)
    real = models.variants
    monkeypatch.setattr(models, "variants", lambda: {**real(), "recorder": (None, rec)})
    return rec


def test_a_row_is_the_peak_above_the_resident_size_and_the_arrays_returned(recorder):
    rows = peakmem.measure_here("recorder", [16, 32], 4, "float32", seed=3)
    assert [list(r) for r in rows] == [list(peakmem.COLUMNS)] * 2
    for r, T in zip(rows, (16, 32)):
        assert (r["model"], r["T"], r["d"], r["dtype"]) == ("recorder", T, 4, "float32")
        assert r["estimate_bytes"] == 1000 * T + 4
        assert r["output_bytes"] == 64 * MiB + 4 * T
        # the 64 MiB the call touched, not the process's whole resident size besides
        assert 64 * MiB - MiB <= r["peak_bytes"] <= 64 * MiB + 16 * MiB, r["peak_bytes"]
    assert recorder.dtypes == ["float32"] * 3        # the warm-up too: the same specialisation
    assert recorder.sizes[1:] == [(16, 4), (32, 4)]   # after a warm-up, each T at this d


def test_the_inputs_are_drawn_from_the_seed(recorder):
    peakmem.measure_here("recorder", [16], 4, "float64", seed=3)
    peakmem.measure_here("recorder", [16], 4, "float64", seed=3)
    peakmem.measure_here("recorder", [16], 4, "float64", seed=4)
    first, again, other = recorder.draws[0:2], recorder.draws[2:4], recorder.draws[4:6]
    assert first == again == list(np.random.default_rng(3).standard_normal(2))
    assert other != first


@pytest.fixture
def children(monkeypatch):
    """subprocess.run replaced: records each child's job and environment, answers one row."""
    calls = []

    def run(argv, env=None, **kwargs):
        job = json.loads(argv[-1])
        calls.append((job, env, kwargs))
        rows = [{"model": job["variant"], "T": T, "d": job["d"], "dtype": job["dtype"],
                 "peak_bytes": 1, "output_bytes": 2, "estimate_bytes": 3} for T in job["T_values"]]
        return subprocess.CompletedProcess(argv, 0, stdout="compiling\nloaded\n" + json.dumps(rows), stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_every_timed_variant_by_default_each_in_its_own_child(children):
    frame = peakmem.measure(SMALL)
    names = list(models.variants())
    assert [job["variant"] for job, _, _ in children] == names
    assert list(frame.columns) == list(peakmem.COLUMNS)
    assert list(frame.model) == [n for n in names for _ in SMALL.T_values]
    assert [job["T_values"] for job, _, _ in children] == [list(SMALL.T_values)] * len(names)
    # the child's printout is read as text, its last line the rows
    assert all(kw == {"capture_output": True, "text": True} for _, _, kw in children)


def test_a_child_runs_in_this_environment_with_the_threads_and_malloc_set(children, monkeypatch):
    monkeypatch.setenv("HARNESS_PEAKMEM_TEST", "passed on")
    peakmem.measure(dataclasses.replace(SMALL, threads=3, seed=7), variants=["rnn"])
    (job, env, _), = children
    assert job == {"variant": "rnn", "T_values": [8, 16], "d": 4, "dtype": "float32", "seed": 7}
    assert env is not None and env["HARNESS_PEAKMEM_TEST"] == "passed on"
    assert env["MALLOC_MMAP_THRESHOLD_"] == "65536"
    for var in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        assert env[var] == "3", var


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_both_float_dtypes_are_measured(children, dtype):
    frame = peakmem.measure(dataclasses.replace(SMALL, dtype=dtype), variants=["rnn"])
    assert set(frame.dtype) == {dtype}


@pytest.mark.parametrize("change, words", [
    ({"T_values": (8, 0)}, r"^T_values must be an integer >= 1"), ({"T_values": ()}, r"^T_values"),
    ({"d": 0}, r"^d must be an integer >= 1"), ({"dtype": "float16"}, r"^dtype must be")])
def test_a_bad_config_is_named_before_any_child_runs(children, change, words):
    with pytest.raises(ValueError, match=words):
        peakmem.measure(dataclasses.replace(SMALL, **change), variants=["rnn"])
    assert children == []


def _frame(rows):
    import pandas as pd
    return pd.DataFrame(rows, columns=["model", "T", "peak_bytes"])


def test_growth_needs_two_measured_T_and_two_nonzero_peaks():
    g = peakmem.growth_exponents(_frame([
        ("one T", 64, 5.0),                                   # a single T: no slope
        ("tiny", 1, 1.0), ("tiny", 2, 4.0),                   # 1 byte to 4: T^2
        ("zero", 8, 0.0), ("zero", 16, 4096.0),               # below the counters: no slope
        ("refused", 8, 4096.0), ("refused", 16, float("nan")),   # NaN: only one measured T
        ("after", 10, 100.0), ("after", 100, 1000.0)]))
    assert list(g) == ["one T", "tiny", "zero", "refused", "after"]
    assert math.isnan(g["one T"]) and math.isnan(g["zero"]) and math.isnan(g["refused"])
    assert g["tiny"] == pytest.approx(2.0) and g["after"] == pytest.approx(1.0)


def test_a_real_child_measures_one_small_call():
    """One fresh process, for real: the command line that starts it, and its rows read back."""
    small = config.MemoryConfig(T_values=(8,), d=2, dtype="float64")
    frame = peakmem.measure(small, variants=["rnn"])
    _, v = models.variants()["rnn"]
    out = v.call(*v.inputs(8, 2, np.random.default_rng(0), "float64"))
    assert frame[["model", "T", "d", "dtype"]].values.tolist() == [["rnn", 8, 2, "float64"]]
    assert frame.output_bytes.tolist() == [sum(a.nbytes for a in peakmem._arrays(out))]
    assert frame.estimate_bytes.tolist() == [v.bytes(8, 2)]
    assert frame.peak_bytes.iloc[0] >= 0
