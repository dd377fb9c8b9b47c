"""Progress of a long command on standard error.

On a terminal: a tqdm bar with the step, the count and an estimate of what is
left. Anywhere else (CI logs, pipes): plain lines, at most one every few
seconds, so that logs stay readable. ``quiet``: nothing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
import time

PLAIN_EVERY_S = 2.0       # at most one plain line per this many seconds (and always the last)


class Progress:
    def __init__(self, command, quiet=False, stream=None):
        self.command = command
        self.quiet = quiet
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()

    def line(self, msg):
        """One plain line, whatever the stream is (silent when quiet)."""
        if not self.quiet:
            print(f"{self.command}: [{time.perf_counter() - self.t0:6.1f} s] {msg}",
                  file=self.stream, flush=True)

    @contextlib.contextmanager
    def steps(self, total, desc):
        """``with progress.steps(n, "decay") as step: ... step(label)`` before each of n steps."""
        if self.quiet:
            yield lambda label: None
            return
        if self.tty:
            import shutil

            from tqdm import tqdm
            # a terminal that reports a size of 0 x 0 (a new pty) would get an invisible bar
            size = shutil.get_terminal_size((100, 24))
            bar = tqdm(total=total, desc=f"{self.command}: {desc}", file=self.stream,
                       ncols=size.columns or 100, nrows=size.lines or 24, leave=True,
                       bar_format="{desc} {n_fmt}/{total_fmt} |{bar:24}| {elapsed}<{remaining}{postfix}")
            started = [False]

            def step(label):
                if started[0]:
                    bar.update(1)
                started[0] = True
                bar.set_postfix_str(str(label), refresh=True)
            try:
                yield step
                if started[0]:
                    bar.update(1)
            finally:
                bar.close()
            return
        state = {"i": 0, "last": -1e9}

        def step(label):
            state["i"] += 1
            now = time.perf_counter()
            if now - state["last"] >= PLAIN_EVERY_S or state["i"] == total:
                state["last"] = now
                self.line(f"{desc} [{state['i']}/{total}] {label}")
        yield step


def _cache_is_cold():
    """True when Numba's on-disk cache holds none of the kernels yet (a fresh clone)."""
    import harness.kernels
    where = os.environ.get("NUMBA_CACHE_DIR")
    pattern = ("**/rnn*.nbi" if where else os.path.join(os.path.dirname(harness.kernels.__file__),
                                                       "__pycache__", "rnn*.nbi"))
    return not glob.glob(os.path.join(where, pattern) if where else pattern, recursive=True)


def warm_up_kernels(progress):
    """Compile (or load from Numba's cache) every family's kernels on tiny inputs, and say so
    when that compiles: the first run of a fresh clone takes most of its time here."""
    cold = _cache_is_cold()
    if cold:
        progress.line("compiling the Numba kernels (first run only; later runs load them "
                      "from Numba's cache)")
    t0 = time.perf_counter()
    from harness.infra import signals
    with signals.quietly():                 # a signal during compilation waits for its end
        _compile_everything(parallel=cold)
    if cold:
        progress.line(f"compiled the kernels in {time.perf_counter() - t0:.1f} s")


def warm_up_family(fam, dtypes=("float32", "float64")):
    """Compile (or load from Numba's cache) one family's forward and backward in ``dtypes``,
    unbatched and batched, on tiny inputs: what a timed call of it will run."""
    k = fam.kernels
    for dtype in dtypes:
        for batch in (1, 2):
            X, W = k.inputs(3, 2, batch, dtype)
            out = k.forward(X, *W)
            k.backward(X, W, out, k.primary(out))


# The families a second process compiles into Numba's cache while this one compiles the rest,
# on a fresh clone with two cores or more: the Transformer layer's kernels take about as long
# to compile as every other family's together.
SECOND_SHARE = ("transformer",)


def _second_process(names):
    """A child process that compiles the families ``names`` into Numba's on-disk cache, or
    None where it cannot help (one core, or none of them registered)."""
    import subprocess
    from harness import models
    names = [n for n in names if n in models.NAMES]
    if (os.cpu_count() or 1) < 2 or not names:
        return None
    code = ("import sys; from harness import models; from harness.infra import progress; "
            "[progress.warm_up_family(models.get(n)) for n in sys.argv[1:]]")
    return subprocess.Popen([sys.executable, "-c", code, *names], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _compile_everything(parallel=False):
    """Compile every kernel; ``parallel``: with ``SECOND_SHARE`` compiled by a second process
    meanwhile, then loaded here from the cache it wrote (compiled here after all, should the
    child fail)."""
    import numpy as np

    from harness.kernels import blas, greedy, jacobian
    from harness import models
    child = _second_process(SECOND_SHARE) if parallel else None
    later = set(SECOND_SHARE) if child else set()
    try:
        for fam in models.families():
            if fam.name not in later:
                warm_up_family(fam)
        if child:
            child.wait()
    finally:
        if child and child.poll() is None:
            child.kill()
            child.wait()
    for name in sorted(later, key=models.NAMES.index):
        warm_up_family(models.get(name))
    S, m, eye = np.ones((3, 2)), np.zeros(3), np.eye(2)        # the analysers' own kernels
    jacobian.probe_backward(eye, np.ones(2), S, m, np.empty((3, 2)), np.empty(3))
    jacobian.jacobian_products(eye, S, m, np.empty((2, 2, 2)), np.empty(2))
    ptr, none, one = np.array([0, 1]), np.zeros(0, np.int64), np.ones(1, np.int64)
    greedy.greedy_schedule(ptr, one, np.zeros(2, np.int64), none, np.zeros(1, np.int64), one, 1,
                            np.zeros(3, np.int64))
    greedy.span_and_priority(ptr, np.zeros(2, np.int64), none, np.zeros(1, np.int64),
                              np.zeros(1, np.int64))
    blas.gemv_steps(eye, np.ones(2), np.empty(2), 1)
