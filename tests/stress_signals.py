"""Send many SIGTERM and SIGINT at spread-out moments to harness decay, depth, compare and
report --quick, and check every outcome as tests/test_interrupt.py does.

Each signal lands at one of four moments, in turn: ``start`` (0.1 to 2.5 s after the
process starts: Python's start-up, then the command line and its libraries loading),
``entry`` (0 to 3 s after the executable's module has loaded, sent from inside the process
by a start-up hook: from the first moment the harness's code runs), ``progress`` (0 to 4 s
after the first progress line: the work) and ``output`` (0 to 0.3 s after the last line of
output: the process on its way out). ``--torch N`` adds N runs of harness compare that
signal themselves while PyTorch loads (as ``exec`` runs its n-th string, or a set time in).
``--jobs 2`` runs two at a time.

    .venv/bin/python tests/stress_signals.py 200                 # about 15 minutes on two cores
    .venv/bin/python tests/stress_signals.py 160 --commands compare --torch 40 --jobs 2
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
from test_interrupt import (_AT_ENTRY, _AT_TORCH, COMMANDS, EXPECTED,  # noqa: E402
                            _torch_import_seconds, check_outcome, kill_at)

MOMENTS = {"start": (0.1, 2.5), "entry": (0.0, 3.0), "progress": (0.0, 4.0), "output": (0.0, 0.3)}


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


def main(n, commands, torch_n, jobs=1):
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(0)
    outcomes = collections.Counter()
    failures = []
    moments = list(MOMENTS)
    hooks = tempfile.TemporaryDirectory()
    entry_hook, torch_hook = Path(hooks.name, "entry"), Path(hooks.name, "torch")
    for folder, text in ((entry_hook, _AT_ENTRY), (torch_hook, _AT_TORCH)):
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(text)
    runs = []                       # (label, command, sig, moment, when, env)
    for i in range(n):
        command = commands[i % len(commands)]
        sig = (signal.SIGTERM, signal.SIGINT)[(i // len(commands)) % 2]
        moment = moments[(i // (2 * len(commands))) % len(moments)]
        when = float(rng.uniform(*MOMENTS[moment]))
        env = None
        if moment == "entry":       # sent from inside, timed from the entry module's load
            env = dict(os.environ, PYTHONPATH=str(entry_hook), HARNESS_TEST_SIGNAL=str(int(sig)),
                       HARNESS_TEST_SIGNAL_AFTER=f"{when:.4f}")
        runs.append((f"{i + 1}/{n}", command, sig, moment, when, env))
    span = _torch_import_seconds() if torch_n else 0.0
    for i in range(torch_n):
        sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
        at = ({"HARNESS_TEST_SIGNAL_NTH": str(int(rng.integers(1, 1100)))} if i % 3 == 0
              else {"HARNESS_TEST_SIGNAL_AT": f"{rng.uniform(0, span):.4f}"})
        env = dict(os.environ, PYTHONPATH=str(torch_hook), HARNESS_TEST_SIGNAL=str(int(sig)), **at)
        runs.append((f"torch {i + 1}/{torch_n}", "compare", sig, "torch import", at, env))

    def one(run):
        label, command, sig, moment, when, env = run
        if env is None:
            return run, _one(command, sig, moment, when)
        return run, _one(command, None, "none", 0.0, env)

    with ThreadPoolExecutor(jobs) as pool:
        for (label, command, sig, moment, when, env), (rc, failed) in pool.map(one, runs):
            inside = env is not None
            if inside and not failed and moment == "torch import" and rc != 128 + sig:
                failed = f"exit {rc}: the signal sent during the import did not interrupt"
            outcomes[(command, moment, signal.Signals(sig).name, rc)] += 1
            if failed:
                failures.append((command, moment, sig, when, rc, failed))
            print(f"[{label}] {command} {signal.Signals(sig).name} {moment} "
                  f"{when if isinstance(when, dict) else f'+ {when:.2f} s'}: "
                  f"rc={rc}{' FAILED' if failed else ''}", flush=True)
    hooks.cleanup()
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
    ap.add_argument("--jobs", type=int, default=1, help="processes at a time")
    a = ap.parse_args()
    sys.exit(main(a.n, a.commands, a.torch, a.jobs))
