"""What every test starts from, whatever ran before it (the suite runs in a random order)."""

from __future__ import annotations

import signal
import sys

import pytest

from harness.infra import signals


@pytest.fixture(autouse=True)
def _no_signal_left_behind(monkeypatch):
    """No signal recorded, none held, our handler nowhere: a signal one test recorded would
    make every later checkpoint() raise KeyboardInterrupt (the report's, the torch import's)."""
    handlers = {s: signal.getsignal(s) for s in signals.SIGNALS}
    hook = sys.unraisablehook
    for name, value in (("_received", None), ("_owed", False), ("_quiet", 0),
                        ("_for_process", False)):
        monkeypatch.setattr(signals, name, value, raising=False)
    yield
    sys.unraisablehook = hook
    for s, h in handlers.items():
        signal.signal(s, h)
