"""What every benchmark shares: thread settings, sizes, seeds, inputs and warm-up.

Thread counts are set here, all together: BLAS and Numba get the same count,
``HARNESS_BENCH_THREADS`` (default 1), so a timing never depends on whichever
library picked its own default. BLAS's is set at import; Numba's in each
benchmark's setup (``apply_threads``), in the process that runs it, since asv forks
every benchmark from one process that imported the suite (asv.conf.json's
``launch_method``) and Numba's threads must not be started there.
``OPENBLAS_CORETYPE`` is read and recorded, never changed. ``bench_machine.Threads``
puts all three in every results file.

Two suites. Every class says which one it is in (``@suite("default")`` or
``@suite("long")``) and ``HARNESS_BENCH_SUITE`` chooses what asv sees: unset, the
default suite, what a plain ``asv run`` times in a few minutes on two cores (every
family's kernels at a small and a large size, the analysers' deterministic ``track_``
numbers, the machine's ceilings); ``long``, the rest (every parameter, long lengths,
tile sweeps, peak memory, compile time); ``all``, both.
"""

from __future__ import annotations

import os

try:
    from harness.infra import machine
except ModuleNotFoundError:             # a commit before the package's layers
    from harness import machine

# --------------------------------------------------------------------------- threads

def threads_from_env(environ=os.environ):
    """``HARNESS_BENCH_THREADS``: a whole number of at least 1 (unset or empty: 1), at most the threads
    Numba may use here (``NUMBA_NUM_THREADS``, the cores by default). A larger count would
    leave BLAS at it and Numba below it, so it is lowered to Numba's, and said on stderr;
    anything else stops the suite with a message that names the variable."""
    import sys

    import numba

    text = environ.get("HARNESS_BENCH_THREADS", "").strip() or "1"     # set but empty: unset
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"HARNESS_BENCH_THREADS must be a whole number of threads, at least 1 "
                         f"(BLAS and Numba both use it), got {text!r}")
    most = numba.config.NUMBA_NUM_THREADS
    if n > most:
        print(f"HARNESS_BENCH_THREADS={n} is more than the {most} threads Numba can use here "
              f"(NUMBA_NUM_THREADS); BLAS and Numba both use {most}", file=sys.stderr)
        n = most
    return n


THREADS = threads_from_env()    # BLAS = Numba = this

# --------------------------------------------------------------------------- suites

SUITES = {"default": ("default",), "long": ("long",), "all": ("default", "long")}


def suite_from_env(environ=os.environ):
    """``HARNESS_BENCH_SUITE``: ``default`` (unset or empty), ``long`` or ``all``; the
    suites it selects. Anything else stops the suite with a message naming the variable."""
    text = environ.get("HARNESS_BENCH_SUITE", "").strip() or "default"
    if text not in SUITES:
        raise ValueError(f"HARNESS_BENCH_SUITE must be one of {sorted(SUITES)}, got {text!r}")
    return SUITES[text]


SELECTED = suite_from_env()
CLASSES = {}                    # {class name: (suite, class)}: every class, selected or not


def suite(name):
    """Class decorator: the class belongs to suite ``name``. It is registered in ``CLASSES``
    either way, and left out of its module (the name bound to None, which asv passes over)
    unless ``HARNESS_BENCH_SUITE`` selects its suite."""
    if name not in SUITES["all"]:
        raise ValueError(f"suite must be one of {list(SUITES['all'])}, got {name!r}")

    def register(cls):
        cls.suite = name
        CLASSES[cls.__name__] = (name, cls)
        return cls if name in SELECTED else None
    return register


def apply_threads():
    """Set BLAS and Numba threads to THREADS; returns what the libraries now report.
    Call it in setup (or setup_cache), never at import: it starts Numba's threading layer."""
    machine.set_threads(THREADS)
    info = machine.describe()
    return info["blas_threads"], info["numba_threads"], info["OPENBLAS_CORETYPE"] or "(unset)"


def apply_blas_threads():
    """Set BLAS threads to THREADS and leave Numba's threading layer unstarted; returns the
    counts ``apply_threads`` sets, (BLAS, Numba, OPENBLAS_CORETYPE), without asking Numba.

    asv forks every benchmark from a process that imported the suite. Where that process has
    started Numba's threads (``numba.set_num_threads`` or ``get_num_threads`` do), every
    parallel kernel in a forked one stops with "Terminating: fork() called from a process
    already using GNU OpenMP" (Numba's omp layer). OpenBLAS stops its own threads at a fork."""
    from threadpoolctl import threadpool_limits
    import numba

    threadpool_limits(limits=THREADS, user_api="blas")
    return (machine.blas_threads(), min(THREADS, numba.config.NUMBA_NUM_THREADS),
            os.environ.get("OPENBLAS_CORETYPE") or "(unset)")


apply_blas_threads()    # at import; Numba's count in setup, in the process asv forks


def libraries_line():
    """The numerical libraries this process computes with, in one line: each BLAS loaded, its
    internal_api, version, architecture and threads (``machine.libraries_line``); at a commit
    before that function, threadpoolctl's report of each BLAS in the same words."""
    if hasattr(machine, "libraries"):
        return machine.libraries_line(machine.libraries())
    from threadpoolctl import threadpool_info
    return "; ".join(sorted(f"{p.get('internal_api')} {p.get('version')} {p.get('architecture')}, "
                            f"{p.get('num_threads')} threads"
                            for p in threadpool_info() if p.get("user_api") == "blas"))


def build_numba_contexts():
    """Build Numba's typing and target contexts now (~0.2 s), as its first compile or cache
    load in a process otherwise does. asv's forkserver (asv.conf.json) imports this module once
    and forks every benchmark from it, so each starts with them built; True where it worked
    (a Numba without ``numba.core.registry`` leaves the first kernel to build them)."""
    try:
        from numba.core.registry import cpu_target
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    except (ImportError, AttributeError):
        return False
    return True


build_numba_contexts()

# --------------------------------------------------------------------------- sizes

try:
    from harness.models import NAMES as _NAMES
    MODELS = list(_NAMES)                   # every registered family
except ImportError:                         # commits before the family registry
    MODELS = ["rnn", "attention"]
try:                                        # every traced form (a family's, and its scans)
    from harness.models import traced_forms as _traced_forms
    FORMS = list(_traced_forms())
except ImportError:
    FORMS = list(MODELS)
T_VALUES = [64, 256, 1024, 4096]
D_VALUES = [64, 256]
BATCHES = [1, 32]
DTYPES = ["float32", "float64"]
SEED = 1234                                # inputs from default_rng(SEED)

# The default suite's two sizes of every family, (T, d, batch, dtype): a small one that takes
# the batched kernels in float64, and a large one, one sequence of T = 1024 in float32. Between
# them every compiled path a family has (batched and not, both dtypes) is timed, and on two
# cores no call takes more than about 0.3 s (the Transformer layer's backward at "large").
SIZES = {"small": (T_VALUES[0], D_VALUES[0], BATCHES[-1], "float64"),
         "large": (1024, D_VALUES[-1], BATCHES[0], "float32")}

# attention keeps A, (B, T, T): it runs where that grid has at most one 4096 x 4096's
# elements (T = 4096 one sequence at a time; batch 32 up to T = 512). Past that one call
# costs seconds and gigabytes on the 2-core, 24 GiB machines and says nothing new
MAX_GRID_ELEMENTS = 4096 * 4096


class Benchmark:
    """Timing attributes for the whole suite: two rounds, few repeats, no extra warm-up.

    Two rounds, so that ``asv continuous --interleave-rounds`` alternates the two commits
    (round 1 of each, then round 2 of each). The kernels are compiled and the memory touched
    in ``setup``; the default suite then takes minutes on two cores, not an hour.
    """
    rounds = 2                      # asv's default; each round is its own process
    repeat = (1, 5, 1.0)            # min, max samples, and stop after ~1 s of them
    warmup_time = 0.0               # setup already called the kernel once
    timeout = 180
    deterministic = False           # True: its track_ numbers are the same on every run


class Tracked(Benchmark):
    """Deterministic ``track_`` numbers: one round (a second would repeat the same numbers),
    and ``tools/bench_gate.py`` requires them exactly equal between two commits."""
    rounds = 1
    deterministic = True


# --------------------------------------------------------------------------- inputs

def family(model):
    """The registered family ``model``, or skip the benchmark at commits that predate the registry."""
    return analyser("models").get(model)


def kernels(model):
    """The family's compiled forward, backward, primary, inputs and grid size: its ``Kernels``
    part, or the family itself at commits whose families were flat."""
    fam = family(model)
    return fam.kernels if hasattr(fam, "tracing") else fam


def lesson_parts(form):
    """The parts the lessons' work comparison counts, for the family of a traced form."""
    fam = form_family(form)
    return fam.tracing.lesson_parts if hasattr(fam, "tracing") else fam.lesson_parts


def closed_form(form):
    """The closed-form counts ``(T, d) -> {part: multiplications}`` of a traced form."""
    models = analyser("models")
    if hasattr(models, "form"):
        f = models.form(form)[1]
        return f.macs
    return models.get(form).macs


def form_family(form):
    """The family of a traced form (a family's own name is its first form)."""
    models = analyser("models")
    if not hasattr(models, "form"):
        return models.get(form)
    return models.form(form)[0]


def grid_fits(model, T, batch):
    """False where the family's (B, T, T) arrays would exceed MAX_GRID_ELEMENTS."""
    return kernels(model).grid_elements(T, batch) <= MAX_GRID_ELEMENTS


def skip_unless_fits(model, T, batch):
    if not grid_fits(model, T, batch):
        # asv records NotImplementedError from setup as "skipped", not as a failure
        raise NotImplementedError(f"{model} at T={T}, batch={batch}: its (B, T, T) arrays "
                                  f"have more than 4096 x 4096 elements")


def inputs(model, T, d, batch, dtype, seed=SEED):
    """X (T, d) or (B, T, d), and the family's weights, from the family's input factory."""
    return kernels(model).inputs(T, d, batch, dtype, seed)


def run_forward(model, X, Ws):
    return kernels(model).forward(X, *Ws)                             # H | (Y, A)


def run_backward(model, X, Ws, out):
    """Backward from an upstream gradient equal to the forward's output."""
    k = kernels(model)
    return k.backward(X, Ws, out, k.primary(out))


def warm_up(model, dtype):
    """Compile (or load from Numba's cache) every kernel a timed call will use: the harness's
    own warm-up of one family (``progress.warm_up_family``), or at commits without it the
    same calls here (unbatched and batched, forward and backward, on tiny inputs)."""
    try:
        harness_warm_up = getattr(analyser("progress"), "warm_up_family", None)
    except NotImplementedError:
        harness_warm_up = None
    if harness_warm_up is not None:
        return harness_warm_up(family(model), (dtype,))
    for batch in (1, 2):
        X, Ws = inputs(model, 3, 2, batch, dtype)
        run_backward(model, X, Ws, run_forward(model, X, Ws))


# Where a module lives, newest layout first: asv runs this suite on older commits too, whose
# flat package had the analysers and the timing beside the kernels.
_LAYERS = ("harness.analysis.", "harness.infra.", "harness.")


def analyser(name):
    """The module ``name`` of this commit's harness (``gradpath`` is ``harness.analysis.gradpath``
    here, ``harness.gradpath`` in older commits), or skip the benchmark at commits without it."""
    import importlib
    errors = []
    for layer in _LAYERS:
        try:
            return importlib.import_module(layer + name)
        except ModuleNotFoundError as e:
            errors.append(str(e))
    raise NotImplementedError(f"{name} is not in this commit of harness ({'; '.join(errors)})")
