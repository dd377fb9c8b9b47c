"""Peak memory and time of ``harness depth --torch`` at T = 4096, one fresh process per run.

What it measures (docs/guide/your-model.md, "Memory and time at T = 4096"): the whole command

    harness depth --torch FACTORY --shape X=1,T,d --T 4096 --d 64 --no-measure --quiet --out TMP

(Python's start, PyTorch's import, torch.export, the decomposition to core ATen and the trace)
for each module of ``MODULES``: PyTorch's ``nn.TransformerEncoderLayer(64, 8,
dim_feedforward=256, batch_first=True)`` (examples/torch/encoder_layer.py) and the two-layer
``nn.LSTM`` of examples/torch/lstm2.py. Each run is a fresh child process, waited for with
``os.wait4``, whose ``struct rusage`` gives that child's own peak resident set (``ru_maxrss``,
KiB on Linux, the figure ``/usr/bin/time -v`` prints as "Maximum resident set size") and its
user + system CPU time; the wall time is ``perf_counter`` from the spawn to the reap. Runs are
interleaved: round r runs every module once, the order rotated each round, so that a change
in the machine's load falls on every module alike. ``load`` is the 1-minute load average
(/proc/loadavg) as each run starts. The peak RSS does not depend on the load; the times do.

Written (``--out``, atomically): one row per run, columns module, T, d, run, peak_rss_bytes,
wall_s, cpu_s, load (docs/data.md, "torch_trace_cost.csv"). The summary the docs show (median
and range per module) is docs/_ext/harness_docs.py's ``torch_trace_cost`` table.

Run (3 rounds: 6.5 minutes at load 7 to 8 on the 2-core development machine; the child's
environment is this one's, thread settings included):

    .venv/bin/python tools/torch_trace_cost.py --out docs/torch_trace_cost.csv
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = {                                     # name in the CSV: the factory --torch gets
    "encoder_layer": "examples/torch/encoder_layer.py:factory",
    "lstm2": "examples/torch/lstm2.py:factory",
}
T, D = 4096, 64
COLUMNS = ("module", "T", "d", "run", "peak_rss_bytes", "wall_s", "cpu_s", "load")


def command(factory, T, d, out):
    """The argv of one traced run: the installed ``harness`` beside this Python."""
    harness = Path(sys.executable).with_name("harness")
    return [str(harness), "depth", "--torch", factory, "--shape", "X=1,T,d", "--T", str(T),
            "--d", str(d), "--no-measure", "--quiet", "--out", str(out)]


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def measure(argv, cwd=ROOT):
    """(peak_rss_bytes, wall_s, cpu_s) of one child process running ``argv``; a child that
    fails raises RuntimeError with the end of what it printed."""
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        p = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)          # this child's own rusage, not the sum
        wall = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(argv)} exited with {p.returncode}:\n{tail}")
    return ru.ru_maxrss * 1024, wall, ru.ru_utime + ru.ru_stime


def run(modules, runs, T, d, log=print):
    """The rows, one per (round, module), modules rotated each round."""
    names = list(modules)
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="torch_trace_cost-"))
    try:
        for r in range(runs):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                load = load1()
                rss, wall, cpu = measure(command(modules[name], T, d, scratch / name))
                rows.append({"module": name, "T": T, "d": d, "run": r, "peak_rss_bytes": rss,
                             "wall_s": wall, "cpu_s": cpu, "load": load})
                log(f"round {r} {name}: {rss / 1e6:.1f} MB, {wall:.1f} s wall, {cpu:.1f} s CPU, "
                    f"load {load:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--modules", nargs="+", default=list(MODULES), choices=list(MODULES))
    p.add_argument("--T", type=int, default=T, help=f"sequence length (default {T})")
    p.add_argument("--d", type=int, default=D, help=f"model width (default {D})")
    p.add_argument("--out", default="docs/torch_trace_cost.csv", help="the CSV written")
    a = p.parse_args(argv)
    for arg, v in (("--runs", a.runs), ("--T", a.T), ("--d", a.d)):
        if v < 1:
            p.error(f"{arg}: expected a positive integer, got {v}")
    out = Path(a.out)
    if not out.parent.is_dir():
        p.error(f"--out: the folder {str(out.parent)!r} does not exist")
    import pandas as pd
    from harness.infra.files import atomic_write_text

    rows = run({m: MODULES[m] for m in a.modules}, a.runs, a.T, a.d,
               log=lambda m: print(m, file=sys.stderr))
    buf = io.StringIO()
    pd.DataFrame(rows, columns=COLUMNS).to_csv(buf, index=False, float_format="%.6g")
    atomic_write_text(out, buf.getvalue())
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
