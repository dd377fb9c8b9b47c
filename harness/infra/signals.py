"""Ctrl-C and SIGTERM: unwind at once, and never let a swallowed signal pass as success.

The handler records the signal and raises KeyboardInterrupt, so the work stops
where it is and every ``finally`` runs. A KeyboardInterrupt raised where Python
cannot deliver it (a weakref callback while matplotlib closes a figure prints
"Exception ignored" and goes on) is caught later: ``checkpoint()`` raises again
wherever the work can stop safely, in particular before output is moved into
place, and the command line exits with 128 + the signal's number, never 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received = None
_quiet = 0


def _handler(signum, frame):
    global _received
    first = _received is None
    _received = signum
    if first and not _quiet:
        raise KeyboardInterrupt


@contextlib.contextmanager
def quietly():
    """Record a signal without raising it until the block ends: for code that calls back into
    Python from C (Numba's compiler), where an exception is printed as "Exception ignored"
    with a traceback and then lost."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
        _quiet -= 1
    checkpoint()


def received():
    """The signal that arrived during this command (None if none)."""
    return _received


def checkpoint():
    """Raise KeyboardInterrupt if a signal arrived, even one whose exception was swallowed."""
    if _received is not None:
        raise KeyboardInterrupt


@contextlib.contextmanager
def installed():
    """Our handler for SIGINT and SIGTERM for the length of a command (main thread only)."""
    global _received
    _received = None
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred():
    """Hold SIGINT and SIGTERM back for a few renames: a set of files moves in whole or not at
    all. A signal that arrives meanwhile is delivered when the block ends."""
    checkpoint()
    main = threading.current_thread() is threading.main_thread()
    if main:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def pid_alive(pid):
    """Whether a process with this id exists (for leftovers of a run killed with -9)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
