"""Ctrl-C and SIGTERM: unwind at once, and never let a swallowed signal pass as success.

The handler records the signal and raises KeyboardInterrupt, so the work stops
where it is and every ``finally`` runs. Where raising would do harm it only
records, and the exception comes when the block ends: ``quietly()`` (code that
calls back into Python from C or C++: Numba's compiler, importing PyTorch), every Numba
compilation wherever it happens (``watch_numba``, which ``harness.kernels`` turns on) and
``deferred()`` (a few renames that move in together).

A KeyboardInterrupt raised where Python cannot deliver it (a weakref callback
while matplotlib closes a figure) would be printed as "Exception ignored" and
lost: while our handler is installed, such an interrupt is put back, silently,
and raised again at the next line the work runs. ``checkpoint()`` raises for
any recorded signal wherever the work can stop safely, in particular before
output is moved into place, so the command line exits with 128 + the signal's
number, never 0.

The executable (``harness._entry``) installs the handler for the whole process
(``hold_for_process``): quiet while the command line loads and after the
command has answered, raising only while the command runs.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received = None       # the first signal of this command
_owed = False          # its KeyboardInterrupt has not reached the work yet
_quiet = 0             # > 0: record a signal, raise it later
_for_process = False   # the executable's handler: installed once, never taken down
_next_hook = sys.__unraisablehook__    # what prints every other "Exception ignored"
_watching = False      # watch_numba's listener is registered


def _handler(signum, frame):
    global _received, _owed
    if _received is None:
        _received, _owed = signum, True
    if _owed and not _quiet:
        _owed = False                # a second signal does not interrupt the unwinding
        raise KeyboardInterrupt


def _unraisable(hook):
    """``sys.unraisablehook``: our KeyboardInterrupt raised in a callback Python cannot raise
    from is owed again and re-sent, instead of printed as "Exception ignored" and lost."""
    global _owed, _quiet
    if isinstance(hook.exc_value, KeyboardInterrupt) and _received is not None:
        _quiet += 1                  # not raised in here, should the re-sent one come at once
        try:
            _owed = True
            # from another thread: sent from here, it would run our handler in this hook
            _thread.start_new_thread(_thread.interrupt_main, (_received,))
        finally:
            _quiet -= 1
        return
    _next_hook(hook)


@contextlib.contextmanager
def quietly():
    """Record a signal without raising it until the block ends: for code that calls back into
    Python from C or C++ (Numba's compiler, PyTorch's import), where an exception is printed
    as "Exception ignored" and lost, or aborts the process (pybind11: "terminate called after
    throwing an instance of 'pybind11::error_already_set'")."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
        _quiet -= 1
    checkpoint()


def watch_numba():
    """Make every Numba compilation in the main thread, and every load from Numba's cache, a
    ``quietly()`` block, wherever it happens: a kernel compiles the first time it meets a
    type, not only in the warm-up. A KeyboardInterrupt raised inside llvmlite's code
    leaves half-built objects whose ``__del__`` prints "Exception ignored ... has no
    attribute '_ptr'" as the process ends. Numba holds its compiler lock around both
    (the event "numba:compiler_lock", nested as the lock is): a signal that arrives while it
    is held is recorded, and sent again once the outermost hold ends."""
    global _watching
    if _watching:
        return
    from numba.core import event

    class _Held(event.Listener):
        def on_start(self, ev):
            global _quiet
            if threading.current_thread() is threading.main_thread():
                _quiet += 1

        def on_end(self, ev):
            global _quiet
            if threading.current_thread() is threading.main_thread():
                _quiet -= 1
                if _owed and not _quiet and _received is not None:
                    # from another thread, so that it lands after Numba's own bookkeeping
                    _thread.start_new_thread(_thread.interrupt_main, (_received,))

    event.register("numba:compiler_lock", _Held())
    _watching = True


def received():
    """The signal that arrived during this command (None if none)."""
    return _received


def checkpoint():
    """Raise KeyboardInterrupt if a signal arrived, even one whose exception was swallowed."""
    global _owed
    if _received is not None and not _quiet:
        _owed = False
        raise KeyboardInterrupt


def hold_for_process(early=()):
    """The executable's first step: our handler from now until the process exits, recording
    only (``installed`` lets it raise while a command runs). ``early``: signals recorded
    before this module was loaded."""
    global _for_process, _quiet, _received, _owed, _next_hook
    if threading.current_thread() is not threading.main_thread():
        return
    _for_process = True
    _quiet += 1
    for s in SIGNALS:
        signal.signal(s, _handler)
    _next_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    if early and _received is None:         # read after ours is in place: none is lost
        _received, _owed = early[0], True


@contextlib.contextmanager
def installed():
    """Our handler for SIGINT and SIGTERM for the length of a command (main thread only).

    In a process of its own (the executable) the handler is already in place: here it starts
    raising, and a signal recorded while the command line loaded is raised at the first
    ``checkpoint()``. Called in a process that goes on (a test, a notebook), it installs the
    handler, and on leaving puts the previous handlers back and forgets the signal."""
    global _received, _owed, _quiet, _next_hook
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _for_process:
        _quiet -= 1
        try:
            yield
        finally:
            _quiet += 1                      # after the answer: recorded, said by the exit
        return
    before = (_received, _owed)
    _received, _owed = None, False
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    hooks = (sys.unraisablehook, _next_hook)
    _next_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        yield
    finally:
        sys.unraisablehook, _next_hook = hooks
        for s, h in previous.items():
            signal.signal(s, h)
        _received, _owed = before


@contextlib.contextmanager
def deferred():
    """Hold SIGINT and SIGTERM back for a few renames: a set of files moves in whole or not at
    all. A signal that arrives meanwhile is raised when the block ends.

    The mask holds back a signal sent to this thread; one that another thread takes (BLAS's,
    Numba's) still runs our handler here, which only records it while the block runs."""
    global _quiet
    checkpoint()
    main = threading.current_thread() is threading.main_thread()
    if main:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    _quiet += 1
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        _quiet -= 1
    checkpoint()


def pid_alive(pid):
    """Whether a process with this id exists (for leftovers of a run killed with -9)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
