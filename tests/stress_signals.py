"""Send many SIGTERM and SIGINT at spread-out times to harness decay, depth, compare and
report --quick, and check every outcome as tests/test_interrupt.py does.

    .venv/bin/python tests/stress_signals.py 200      # about 10 minutes on two cores
"""

from __future__ import annotations

import collections
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_interrupt import COMMANDS, EXPECTED, check_outcome, kill_at  # noqa: E402


def main(n):
    rng = np.random.default_rng(0)
    outcomes = collections.Counter()
    failures = []
    names = sorted(COMMANDS)
    for i in range(n):
        command = names[i % len(names)]
        sig = (signal.SIGTERM, signal.SIGINT)[(i // len(names)) % 2]
        when = float(rng.uniform(0.0, 4.0))
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run" / "out"
            out.parent.mkdir()
            rc, err = kill_at(COMMANDS[command], out, when, sig)
            try:
                check_outcome(rc, err, out, sig, EXPECTED[command])
                outcomes[(command, signal.Signals(sig).name, rc)] += 1
            except AssertionError as e:
                failures.append((command, sig, when, rc, str(e)[:300]))
        print(f"[{i + 1}/{n}] {command} {signal.Signals(sig).name} at {when:.2f} s: rc={rc}",
              flush=True)
    print("\noutcomes (command, signal, exit status): count")
    for k, v in sorted(outcomes.items()):
        print(f"  {k}: {v}")
    print(f"{len(failures)} failures of {n}")
    for f in failures:
        print("  FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
