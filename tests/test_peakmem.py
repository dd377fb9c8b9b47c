"""harness.analysis.peakmem: peak memory measured in fresh processes, checked against sizes known by hand;
and its bookkeeping in this process, with a stand-in variant and stand-in children (what a row
holds, what a child is told and in which environment, the counters read in bytes)."""

from __future__ import annotations

import dataclasses
import json
import math
import mmap
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from harness import models
from harness.infra import config
from harness.analysis import peakmem
from harness.report import captions, figures

SMALL = config.MemoryConfig(T_values=(512, 2048), d=32, dtype="float32")
MiB = 2**20
TINY = config.MemoryConfig(T_values=(8, 16), d=4, dtype="float32", threads=1)   # the stand-ins'


@pytest.fixture(scope="module")
def measured():
    return peakmem.measure(SMALL, variants=["rnn", "attention", "attention (tiled)"])


def test_rows_and_output_sizes_are_the_arrays_returned(measured):
    assert list(measured.columns) == list(peakmem.COLUMNS)
    assert len(measured) == 6
    out = measured.set_index(["model", "T"]).output_bytes
    for T in SMALL.T_values:
        assert out["rnn", T] == T * 32 * 4                       # H (T, d)
        assert out["attention", T] == T * 32 * 4 + T * T * 4     # Y (T, d) and A (T, T)
        assert out["attention (tiled)", T] == T * 32 * 4 + T * 8  # Y and L (T,), float64


def test_the_materialised_weights_are_resident_and_the_tiles_are_not(measured):
    m = measured.set_index(["model", "T"])
    grid = 2048 * 2048 * 4                                        # 16 MiB
    assert m.peak_bytes["attention", 2048] >= grid                # A is returned: it was resident
    assert m.peak_bytes["attention (tiled)", 2048] < grid / 8
    # resident-size counters move in pages, and Linux syncs them in batches: a few hundred
    # KiB are below what this can see (an RNN's 64 KiB H read 0 once), so: never negative,
    # and the MiB-sized outputs seen whole
    assert (measured.peak_bytes >= 0).all()
    big = measured[measured.output_bytes >= 4 * 2**20]
    assert len(big) and (big.peak_bytes >= big.output_bytes - 2**19).all()
    assert (measured.peak_bytes <= measured.estimate_bytes).all()  # the estimates cover the peaks
    g = peakmem.growth_exponents(measured)
    assert 1.7 < g["attention"] < 2.2                              # the T x T weights


def test_growth_exponents_of_exact_powers():
    f = pd.DataFrame({"model": ["a"] * 3 + ["b"] * 3, "T": [10, 100, 1000] * 2,
                      "peak_bytes": [5e3, 9e9, 9e11, 7 * 10, 7 * 100, 7 * 1000]})
    assert peakmem.growth_exponents(f) == {"a": pytest.approx(2.0), "b": pytest.approx(1.0)}


def test_growth_exponents_read_the_two_largest_T_whatever_the_order():
    f = pd.DataFrame({"model": ["a"] * 3, "T": [1000, 10, 100], "peak_bytes": [8e6, 1.0, 8e3]})
    assert peakmem.growth_exponents(f)["a"] == pytest.approx(3.0)


def test_caption_states_the_largest_T_each_variant_and_the_ratio():
    f = pd.DataFrame({"model": ["big", "big", "small", "small"], "T": [100, 1000] * 2, "d": 64,
                      "dtype": "float32", "peak_bytes": [2**20, 100 * 2**20, 2**20, 10 * 2**20],
                      "output_bytes": 0, "estimate_bytes": 0})
    cap = captions.caption_memory({"peak_memory": f})
    assert "At T = 1000: small 10.0 MiB (T^1.00); big 100.0 MiB (T^2.00)" in cap
    assert "big needs 10 times what small needs" in cap
    assert "float32, d = 64" in cap


def test_figure_draws_one_line_per_variant_in_mib():
    f = pd.DataFrame({"model": ["a", "a", "b", "b"], "T": [10, 20, 10, 20], "d": 4,
                      "dtype": "float64", "peak_bytes": [2**20, 2**21, 2**22, 2**23],
                      "output_bytes": 0, "estimate_bytes": 0})
    fig = figures.figure_memory({"peak_memory": f})
    ax = fig.axes[0]
    lines = {tuple(l.get_ydata()) for l in ax.get_lines() if len(l.get_xdata()) == 2}
    assert lines == {(1.0, 2.0), (4.0, 8.0)}
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_a_system_without_clear_refs_is_named(monkeypatch):
    monkeypatch.setattr(peakmem, "CLEAR_REFS", "/nonexistent/clear_refs")
    with pytest.raises(OSError, match="/nonexistent/clear_refs"):
        peakmem.measure(SMALL, variants=["rnn"])


def test_a_failing_child_is_named_with_its_error(monkeypatch):
    monkeypatch.setattr(peakmem, "_child_argv",
                        lambda job: [sys.executable, "-c", "raise SystemExit('no memory here')"])
    with pytest.raises(RuntimeError, match="of 'rnn' failed \\(exit 1\\):\nno memory here"):
        peakmem.measure(SMALL, variants=["rnn"])


@pytest.mark.parametrize("change, words", [
    ({"variants": ["no such variant"]}, "variants must name timed variants"),
    ({"T_values": (256, 0)}, "T_values"), ({"d": -1}, "d must be"),
    ({"dtype": "float16"}, "dtype must be 'float32' or 'float64', got 'float16'")])
def test_bad_arguments_are_named(change, words):
    change = dict(change)  # the parameter is shared by every run of this test in a process
    variants = change.pop("variants", ["rnn"])
    with pytest.raises(ValueError, match=words):
        peakmem.measure(dataclasses.replace(SMALL, **change), variants=variants)


def test_a_call_that_would_not_fit_is_nan_and_left_out_of_the_growth(monkeypatch):
    from harness import models
    fam, v = models.variants()["rnn"]

    def refuse(*args):
        if args[0].shape[0] > 100:
            raise MemoryError("X would not fit")
        return v.call(*args)

    monkeypatch.setattr(models, "variants",
                        lambda: {"rnn": (fam, dataclasses.replace(v, call=refuse))})
    rows = pd.DataFrame(peakmem.measure_here("rnn", (16, 64, 256), 4, "float64", seed=0))
    assert rows.peak_bytes.isna().tolist() == [False, False, True]
    assert rows.output_bytes.tolist()[2] == 0
    g = peakmem.growth_exponents(rows.assign(peak_bytes=[1.0, 4.0, float("nan")]))
    assert g == {"rnn": pytest.approx(1.0)}                  # from T = 16 and 64 only
    assert math.isnan(peakmem.growth_exponents(rows.iloc[:1])["rnn"])
    zero = rows.assign(peak_bytes=[0.0, 4.0, 8.0])             # 0: below the counters' resolution
    assert peakmem.growth_exponents(zero.iloc[:2]) == {"rnn": pytest.approx(math.nan, nan_ok=True)}


def test_caption_leaves_out_a_growth_it_cannot_read():
    f = pd.DataFrame({"model": ["a", "a", "b", "b"], "T": [10, 100] * 2, "d": 4, "dtype": "float32",
                      "peak_bytes": [0, 2**20, 2**20, 10 * 2**20], "output_bytes": 0,
                      "estimate_bytes": 0})
    cap = captions.caption_memory({"peak_memory": f})
    assert "a 1.0 MiB; b 10.0 MiB (T^1.00)" in cap


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
    frame = peakmem.measure(TINY)
    names = list(models.variants())
    assert [job["variant"] for job, _, _ in children] == names
    assert list(frame.columns) == list(peakmem.COLUMNS)
    assert list(frame.model) == [n for n in names for _ in TINY.T_values]
    assert [job["T_values"] for job, _, _ in children] == [list(TINY.T_values)] * len(names)
    # the child's printout is read as text, its last line the rows
    assert all(kw == {"capture_output": True, "text": True} for _, _, kw in children)


def test_a_child_runs_in_this_environment_with_the_threads_and_malloc_set(children, monkeypatch):
    monkeypatch.setenv("HARNESS_PEAKMEM_TEST", "passed on")
    peakmem.measure(dataclasses.replace(TINY, threads=3, seed=7), variants=["rnn"])
    (job, env, _), = children
    assert job == {"variant": "rnn", "T_values": [8, 16], "d": 4, "dtype": "float32", "seed": 7}
    assert env is not None and env["HARNESS_PEAKMEM_TEST"] == "passed on"
    assert env["MALLOC_MMAP_THRESHOLD_"] == "65536"
    for var in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        assert env[var] == "3", var


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_both_float_dtypes_are_measured(children, dtype):
    frame = peakmem.measure(dataclasses.replace(TINY, dtype=dtype), variants=["rnn"])
    assert set(frame.dtype) == {dtype}


@pytest.mark.parametrize("change, words", [
    ({"T_values": (8, 0)}, r"^T_values must be an integer >= 1"), ({"T_values": ()}, r"^T_values"),
    ({"d": 0}, r"^d must be an integer >= 1"), ({"dtype": "float16"}, r"^dtype must be")])
def test_a_bad_config_is_named_before_any_child_runs(children, change, words):
    with pytest.raises(ValueError, match=words):
        peakmem.measure(dataclasses.replace(TINY, **change), variants=["rnn"])
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
