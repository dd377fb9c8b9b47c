"""Every default of the harness, in one place: one frozen config per analyser, composed.

This module imports nothing heavy, so the command line can show the defaults in
its help without loading NumPy, pandas or Numba. The report's config holds the
analysers' configs instead of copying their values; ``QUICK`` variants shrink
what takes time and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.models import ATTENTION, NAMES, RECURRENCE

# the lessons' two families, by name, for the tables that set them side by side
RECURRENCE_NAME, ATTENTION_NAME = RECURRENCE, ATTENTION

# the RNN gradient path's choices
ACTIVATIONS = ("identity", "tanh")
WEIGHTS = ("orthogonal", "gaussian")
MEASURES = ("both", "probe", "exact")
GRAINS = ("scalar", "element")


@dataclass(frozen=True)
class DecayConfig:
    """The gradient-path sweep (``harness decay``)."""
    rhos: tuple = (0.5, 0.9, 1.0, 1.1, 1.5)    # spectral radii of W_hh: vanish, edge, explode
    activations: tuple = ACTIVATIONS           # identity: decay exactly rho^k on orthogonal W_hh
    weights: tuple = WEIGHTS                   # normal versus non-normal (transient growth)
    input_scales: tuple = (1.0, 4.0)           # std of x_t; 4.0 drives tanh into saturation
    Ts: tuple = (256,)                         # sequence lengths; distances run 1..T-1
    ds: tuple = (32,)                          # d_h = d_in = d_model
    seed: int = 0                              # one seed per configuration grid, fixed
    measure: str = "both"                      # "probe" (O(T d^2)), "exact" (O(T d^3)) or both
    exact_max_d: int = 128                     # above this the exact product is skipped
    fit_from: float = 0.5                      # fit the rate on k >= fit_from*(T-1): past transients
    models: tuple = NAMES                      # the families in the sweep, registration order
    path_options: tuple = ()                   # ((family, knobs), ...): replaces a family's own
                                               # knobs (GradientPath.options: the LRU's radii)


@dataclass(frozen=True)
class ClippingConfig:
    """Clipping the total gradient of one RNN, for each of the decay sweep's radii."""
    rhos: tuple = DecayConfig.rhos             # vanishing, edge, exploding
    threshold: float = 10.0                    # ||g|| above this is rescaled to it
    T: int = 50                                # distances 1..T-1
    d: int = 16                                # d_h = d_in
    weight: str = "orthogonal"                 # normal W_hh: contributions decay exactly as rho^k
    activation: str = "identity"
    input_scale: float = 1.0
    seed: int = DecayConfig.seed


@dataclass(frozen=True)
class DepthConfig:
    """The traced counts, span and path (``harness depth``)."""
    d: int = 512                                        # the paper's d_model
    T_values: tuple = (50, 100, 200, 500, 512, 800, 1000, 2000)  # lesson's 50/1000/2000, T = d, 800 tokens


@dataclass(frozen=True)
class ScheduleConfig:
    """The greedy schedule of the traced graphs on P processors."""
    T_values: tuple = (800,)           # the lesson's 800-token text
    grains: tuple = GRAINS             # both task models, side by side
    processors: tuple = ()             # () = schedule.default_processors(d)
    plateau_tol: float = 0.01          # "stops falling": within 1 % of the time at the largest P


@dataclass(frozen=True)
class WallConfig:
    """Wall time of the compiled forwards over T."""
    T_values: tuple = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # brackets T = d and the measured crossover
    linear_T_values: tuple = ()        # T timed for the recurrences only (walltime.linear_families):
                                       # their exponents fitted where a call's fixed cost is negligible
    d: int = DepthConfig.d             # the lessons' d_model: the two crossovers share one axis
    threads: int = 1                   # BLAS and Numba threads: one is stable on a shared machine
    rounds: int = 7                    # interleaved rounds per T: the median and its 95 % interval
    min_sample_s: float = 0.02         # each sample calls a kernel until this much ran
    seed: int = 0                      # inputs from default_rng(seed)
    scaling_T: int = 1024              # strong scaling at one T past the crossover
    fit_min_T: int = 128               # exponents fitted where overheads stop dominating
    extrapolate_max: float = 100.0     # an extrapolated crossover past this x max(T) is NaN
    baseline: str = RECURRENCE         # the variant every other one is measured against


@dataclass(frozen=True)
class LessonConfig:
    """The attention lessons' experiments."""
    d_model: int = 16                     # token width of the attention-map experiment
    token_lengths: tuple = (1.0, 3.0)     # the lesson's length 1 and "three times longer"
    d_k_values: tuple = (8, 16, 32, 64, 128, 256, 512)
    draws: int = 2000                     # the d_k experiment is a distribution over this many draws
    seed: int = 0
    va_scales: tuple = (0.5, 2.0)         # scales of va for the additive routes: the lesson's 0.5, and 4x


@dataclass(frozen=True)
class CompareConfig:
    """The kernels against their peers (``harness compare``)."""
    # (family, batch, T, d[, kernel]), for each dtype, in this order; None: every registered
    # family's own cases for ``suite`` (Compared.cases, .quick_cases or .long_cases)
    cases: tuple | None = None
    suite: str = "default"                 # "default", "quick" or "long"
    dtypes: tuple = ("float32", "float64")
    repeats: int = 7                       # samples per implementation; the median is kept
    min_sample_s: float = 0.02             # each sample runs enough calls to last this long
    threads: int = 1                       # BLAS, Numba and torch threads, set together
    seed: int = 0


@dataclass(frozen=True)
class MemoryConfig:
    """Peak memory of the compiled forwards over T (``harness.analysis.peakmem``)."""
    T_values: tuple = (256, 1024, 4096, 16384)   # a float32 T x T grid is 1 GiB at the top
    d: int = 64
    dtype: str = "float32"
    threads: int = 1
    seed: int = 0


@dataclass(frozen=True)
class ReportConfig:
    """The report: the analysers' configs, at the report's sizes."""
    decay: DecayConfig = DecayConfig(Ts=(1001,))   # distances 1..1000: "the signal from 1000 steps back"
    clipping: ClippingConfig = ClippingConfig()
    depth: DepthConfig = DepthConfig(T_values=(50, 100, 200, 500, 1000, 2000))
    # the depth figure's long lengths, traced at d = 64 (the grids kept as row and column
    # terms; the loops' traces take minutes at 65,536); the quick report has none
    depth_long: DepthConfig = DepthConfig(d=64, T_values=(4096, 16384, 65536))
    schedule: ScheduleConfig = ScheduleConfig(
        processors=(1, 10, 64, 100, 128, 256, 800, 10**3, 10**4, 10**5, 10**6))
    schedule_d: int = 64                           # graph small enough to schedule at every P
    path_T: tuple = (64, 256, 1024, 4096)          # attention's path level against T ...
    path_input_scales: tuple = (0.5, 1.0, 2.0, 4.0)  # ... and against the size of its inputs
    wall: WallConfig = WallConfig()
    memory: MemoryConfig = MemoryConfig()
    lessons: LessonConfig = LessonConfig(va_scales=(0.25, 0.5, 1.0, 2.0, 4.0))
    asv_results: str = ".asv/results"


DECAY = DecayConfig()
CLIPPING = ClippingConfig()
DEPTH = DepthConfig()
SCHEDULE = ScheduleConfig()
WALL = WallConfig()
LESSONS = LessonConfig()
COMPARE = CompareConfig()
REPORT = ReportConfig()

QUICK_COMPARE = CompareConfig(suite="quick", repeats=3, min_sample_s=0.001)
# ``harness compare --long``: attention's tiled kernel where the question is asked today,
# against PyTorch's tiled SDPA and NumPy by query blocks (the attention issue's targets:
# forward and forward+backward at least as fast, T = 4096 to 32,768, d = 64 and 256).
# Seconds per call at the top (T = 32,768, d = 256: ~10 s forward, ~40 s both passes),
# so one call per sample, no warm-up call, 3 rounds: about 15 minutes in all.
LONG_COMPARE = CompareConfig(suite="long", dtypes=("float32",), repeats=3, min_sample_s=0.0)
# the quick sweep stops at 2048, but times the recurrences to 4096 too: at 2048 the LRU's fixed
# cost is still ~5 % of a call (~50 % at T = 128), and its exponent was weakly identified (#27)
# It is the newcomer's first command (`make report`): a complete report in a few minutes on 2
# cores, compilation included, so three rounds (the fewest with an interval) of 10 ms samples.
QUICK_REPORT = replace(REPORT, wall=replace(WALL, T_values=WALL.T_values[:-1], rounds=3,
                                            min_sample_s=0.01,
                                            linear_T_values=WALL.T_values[-1:]),
                       depth_long=replace(REPORT.depth_long, T_values=()),
                       path_T=REPORT.path_T[:-1],
                       memory=replace(REPORT.memory, T_values=REPORT.memory.T_values[:-1]))


# ----------------------------------------------------------------------------- LRU

@dataclass(frozen=True)
class LruConfig:
    """The linear recurrence h_t = lam h_{t-1} + B x_t (``harness.models.lru``)."""
    r_min: float = 0.9                     # |lam| uniform on the ring [r_min, r_max] (Orvieto et al., 2023)
    r_max: float = 0.999                   # near 1 the far signal survives: 0.999^4095 ~ 0.017
    max_phase: float = 0.6283185307179586  # 2 pi / 10: phases of lam in [0, max_phase]
    decay_r_maxes: tuple = (0.9, 0.99, 0.999)   # the decay sweep's rings [r, r]: max|lam|^k = r^k
    log_range: float = 600.0               # the decay's backward renormalises within e^(+-600)
    scaling_T: int = 2 ** 20               # the chunked scan's strong scaling: T, d_h, dtype ...
    scaling_d: int = 64
    scaling_dtype: str = "float32"
    scaling_threads: tuple = (1, 2)        # ... on these thread counts, interleaved
    scaling_rounds: int = 7


LRU = LruConfig()
