"""Send many SIGTERM and SIGINT at spread-out moments to harness decay, depth, compare and
report --quick, and check every outcome as tests/test_interrupt.py does.

Each signal lands at one of three moments, in turn: ``start`` (0.1 to 2.5 s after the
process starts: the command line and its libraries loading), ``progress`` (0 to 4 s after
the first progress line: the work) and ``output`` (0 to 0.3 s after the last line of
output: the process on its way out). ``--torch N`` adds N runs of harness compare that
signal themselves while PyTorch loads (as ``exec`` runs its n-th string, or a set time in).

    .venv/bin/python tests/stress_signals.py 200                 # about 15 minutes on two cores
    .venv/bin/python tests/stress_signals.py 60 --commands decay depth --torch 40
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_interrupt import (_AT_TORCH, COMMANDS, EXPECTED, _torch_import_seconds,  # noqa: E402
                            check_outcome, kill_at)

MOMENTS = {"start": (0.1, 2.5), "progress": (0.0, 4.0), "output": (0.0, 0.3)}


def _one(command, sig, moment, when, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run" / "out"
        out.parent.mkdir()
        rc, err = kill_at(COMMANDS[command], out, when, sig, after=moment, env=env)
        try:
            check_outcome(rc, err, out, sig if sig is not None else int(env["HARNESS_TEST_SIGNAL"]),
                          EXPECTED[command], command)
            return rc, None
        except AssertionError as e:
            return rc, str(e)[:300]


def main(n, commands, torch_n):
    rng = np.random.default_rng(0)
    outcomes = collections.Counter()
    failures = []
    moments = list(MOMENTS)
    for i in range(n):
        command = commands[i % len(commands)]
        sig = (signal.SIGTERM, signal.SIGINT)[(i // len(commands)) % 2]
        moment = moments[(i // (2 * len(commands))) % len(moments)]
        when = float(rng.uniform(*MOMENTS[moment]))
        rc, failed = _one(command, sig, moment, when)
        outcomes[(command, moment, signal.Signals(sig).name, rc)] += 1
        if failed:
            failures.append((command, moment, sig, when, rc, failed))
        print(f"[{i + 1}/{n}] {command} {signal.Signals(sig).name} {moment} + {when:.2f} s: "
              f"rc={rc}{' FAILED' if failed else ''}", flush=True)
    if torch_n:
        span = _torch_import_seconds()
        with tempfile.TemporaryDirectory() as hook:
            Path(hook, "sitecustomize.py").write_text(_AT_TORCH)
            for i in range(torch_n):
                sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
                at = ({"HARNESS_TEST_SIGNAL_NTH": str(int(rng.integers(1, 1100)))} if i % 3 == 0
                      else {"HARNESS_TEST_SIGNAL_AT": f"{rng.uniform(0, span):.4f}"})
                env = dict(os.environ, PYTHONPATH=hook, HARNESS_TEST_SIGNAL=str(int(sig)), **at)
                rc, failed = _one("compare", None, "none", 0.0, env)
                outcomes[("compare", "torch import", signal.Signals(sig).name, rc)] += 1
                if failed or rc != 128 + sig:
                    failures.append(("compare", "torch import", sig, at, rc, failed))
                print(f"[torch {i + 1}/{torch_n}] {signal.Signals(sig).name} {at}: rc={rc}"
                      f"{' FAILED' if failed or rc != 128 + sig else ''}", flush=True)
    print("\noutcomes (command, moment, signal, exit status): count")
    for k, v in sorted(outcomes.items()):
        print(f"  {k}: {v}")
    print(f"{len(failures)} failures of {n + torch_n}")
    for f in failures:
        print("  FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=200, help="signals to the four commands")
    ap.add_argument("--commands", nargs="+", default=sorted(COMMANDS), choices=sorted(COMMANDS))
    ap.add_argument("--torch", type=int, default=0, help="signals while PyTorch loads")
    a = ap.parse_args()
    sys.exit(main(a.n, a.commands, a.torch))
