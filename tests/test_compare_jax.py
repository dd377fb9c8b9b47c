"""harness compare's JAX peers: each computes what the harness kernel computes, on one thread.

Every compared kernel of every registered family, at its quick cases, in float32 and float64:
the JAX peer's forward, its backward from kept residuals and its forward+backward give the
kernel's output and dX. XLA's thread pool is checked by the CPU time of each thread on a large
matmul, in a fresh process (the first ``_jax`` call in a process sets it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from _deps import require_module

require_module("jax", "pip install -e '.[jax]'")

from harness import models  # noqa: E402
from harness.analysis import compare  # noqa: E402
from harness.infra import config  # noqa: E402



@pytest.fixture(scope="module")
def jax():
    """JAX on the CPU, one thread, float64 enabled, as compare runs it. A fixture, not a module
    global: XLA's client starts at the first test that needs it, so that a process that only
    collects these tests (mutmut's fork server) has no XLA threads for its forked children to
    lose."""
    return compare._jax()

# float32: the kernels and XLA sum in different orders; float64 near round-off
TOL = {"float32": 2e-5, "float64": 1e-12}


def _close(got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    return np.abs(got - want).max() <= TOL[dtype] * np.abs(want).max()


def test_every_compared_kernel_has_a_jax_peer_at_its_quick_cases():
    cases = compare.cases(config.QUICK_COMPARE)
    assert {(c.model, c.kernel) for c in cases} == {(f.name, k.name) for f in models.families()
                                                    for k in f.compared}
    assert {c.dtype for c in cases} == {"float32", "float64"}


@pytest.mark.parametrize("case", compare.cases(config.QUICK_COMPARE), ids=str)
def test_the_jax_peer_computes_the_kernels_output_and_gradient(case):
    impls = compare.implementations(case, seed=7)
    y_h, dx_h = (np.asarray(a, dtype=np.float64) for a in impls["harness"][2]())
    forward, backward, outputs, both = impls["jax"]
    y, dx = outputs()
    assert y.dtype == np.dtype(case.dtype) and dx.dtype == np.dtype(case.dtype)
    assert _close(y, y_h, case.dtype) and _close(dx, dx_h, case.dtype)
    assert _close(np.asarray(forward()).reshape(y_h.shape), y_h, case.dtype)
    assert _close(backward()[0], dx_h, case.dtype)     # from the residuals kept once
    assert _close(both()[0], dx_h, case.dtype)         # a new forward, then its backward
    assert len(both()) == 1 + len(models.get(case.model).kernels.inputs(4, 2, 1, "float64", 0)[1])


def test_a_wrong_jax_peer_is_caught(jax):
    """The check above can fail: a peer one step out of line is far outside the tolerance."""
    from harness.models import rnn
    X, (W_xh, W_hh) = models.get("rnn").kernels.inputs(16, 8, 1, "float64", 0)
    H = rnn.FAMILY.kernels.forward(X, W_xh, W_hh)
    Y = np.asarray(rnn.jax_forward(jax, jax.numpy.asarray(X), W_xh, 0.9 * W_hh))
    assert not _close(Y, H, "float64")


def test_the_lru_scans_agree(jax):
    """The peer's ``lax.scan`` and the ``lax.associative_scan`` it was measured against."""
    from harness.models import lru
    X, (lam, B) = models.get("lru").kernels.inputs(37, 6, 3, "float64", 2)
    a, b = (np.asarray(lru.jax_forward(jax, X, lam, B, method=m)) for m in ("scan", "associative"))
    assert _close(a, lru.primary(lru.FAMILY.kernels.forward(X, lam, B)), "float64")
    assert _close(b, a, "float64")
    with pytest.raises(ValueError, match="method must be 'scan' or 'associative', got 'loop'"):
        lru.jax_forward(jax, X, lam, B, method="loop")


def test_the_attention_peers_hold_past_one_block_and_over_a_batch(jax):
    """The whole-grid peer on a batch of sequences, with d_k != T, and the blocked peer at a
    length past one block (three blocks of 128, the last short), with a block that does not
    divide T: each the kernel's Y. (The quick cases are one unbatched sequence within a block.)"""
    from harness.kernels import attention as kernel
    from harness.models import attention
    rng = np.random.default_rng(4)
    X = rng.standard_normal((3, 20, 6))
    W = [rng.standard_normal((6, w)) * 0.4 for w in (5, 5, 7)]
    Y, _ = kernel.forward(X, *W)
    assert _close(attention.jax_forward(jax, jax.numpy.asarray(X), *W), Y, "float64")
    X = rng.standard_normal((300, 6))
    Y, _ = kernel.forward(X, *W)
    for block in (128, 256):
        assert _close(attention.jax_blocked(jax, jax.numpy.asarray(X), *W, block=block), Y,
                      "float64")


_PEAK = r"""
import sys
import numpy as np
from harness import models
from harness.analysis import compare
from harness.models import attention
jax = compare._jax(1)
form, T = sys.argv[1], int(sys.argv[2])
X, W = models.get("attention").kernels.inputs(T, 8, 1, "float32", 0)
f = {"blocked": attention.jax_blocked, "whole": attention.jax_forward}[form]
dY = np.ones((T, 8), np.float32)
both = jax.jit(lambda x, *w: jax.vjp(lambda *a: f(jax, *a), x, *w)[1](dY)).lower(X, *W).compile()
def status(key):
    with open("/proc/self/status") as s:
        return next(int(l.split()[1]) for l in s if l.startswith(key + ":")) * 1024
with open("/proc/self/clear_refs", "w") as c:
    c.write("5")                                   # the peak (VmHWM) from here on
base = status("VmRSS")
jax.block_until_ready(both(X, *W))
print(status("VmHWM") - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_tiled_attention_peer_keeps_no_t_by_t_array():
    """The blocked peer's forward+backward raises the peak resident memory by under half of one
    T x T array (34 MB measured at T = 8192, where T x T is 268 MB); the whole-grid form,
    measured the same way, by more than one (1.3 GB). (jax.nn.dot_product_attention on the
    CPU rose by 527 MB forward, 1.2 GB forward+backward, and took twice the blocked form's time:
    not a tiled peer.)"""
    T = 4096
    grid = T * T * 4

    def peak(form):
        out = subprocess.run([sys.executable, "-c", _PEAK, form, str(T)], capture_output=True,
                             text=True, timeout=300, check=True)
        return int(out.stdout.strip().splitlines()[-1])
    assert peak("blocked") < grid / 2
    assert peak("whole") > grid


_THREADS = r"""
import json, os, sys, time
from harness.analysis import compare
jax = compare._jax(int(sys.argv[1]))
import numpy as np
def ticks():
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[t] = int(fields[11]) + int(fields[12])           # utime + stime, clock ticks
    return out
a = jax.numpy.asarray(np.random.default_rng(0).random((1200, 1200)))
f = jax.jit(lambda a: a @ a @ a)
f(a).block_until_ready()
t0, w0, c0 = ticks(), time.perf_counter(), time.process_time()
for _ in range(6):
    f(a).block_until_ready()
t1, wall, cpu = ticks(), time.perf_counter() - w0, time.process_time() - c0
busy = sorted((t1[t] - t0.get(t, 0) for t in t1), reverse=True)
print(json.dumps({"threads": compare.jax_threads(), "busy": busy, "wall": wall, "cpu": cpu,
                  "x64": bool(jax.config.jax_enable_x64), "backend": jax.default_backend(),
                  "flags": os.environ.get("XLA_FLAGS", "")}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_xla_runs_on_one_thread():
    """One thread does the work of a large float64 matmul (each thread's CPU time, which
    holds on a loaded machine where CPU time / wall time does not), and the process's CPU time
    is not more than one thread's share of the wall time."""
    out = subprocess.run([sys.executable, "-c", _THREADS, "1"], capture_output=True, text=True,
                         timeout=300, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["threads"] == 1 and r["x64"] and r["backend"] == "cpu"
    assert "--xla_cpu_multi_thread_eigen=false" in r["flags"]
    total = sum(r["busy"])
    assert total > 0 and r["busy"][0] >= 0.9 * total, r
    assert r["cpu"] <= 1.1 * r["wall"] + 0.05, r


def test_run_comparison_records_jax(monkeypatch):
    """A quick run: every case has a JAX row, its speed-up column and XLA's threads."""
    import dataclasses
    cfg = dataclasses.replace(config.QUICK_COMPARE, repeats=1, dtypes=("float32",),
                              cases=(("rnn", 1, 16, 8), ("attention", 1, 37, 8, "tiled")))
    timings, summary = compare.run_comparison(cfg)
    assert set(timings.impl) >= {"harness", "numpy", "jax"}
    assert summary.speedup_vs_jax.notna().all() and (summary.speedup_vs_jax > 0).all()
    t = timings.set_index(["model", "direction", "impl"]).median_s
    for r in summary.itertuples():
        assert r.speedup_vs_jax == pytest.approx(t[(r.model, r.direction, "jax")] / r.harness_s)
    assert (timings.jax_threads == 1).all() and (summary.jax_threads == 1).all()
    assert summary.libraries.str.contains("jax: xla ").all()
