"""The analysers: counted multiplications and span (depth), fitted decay rate (gradpath).

These ``track_`` numbers are deterministic: a change in one between commits is a
change in what the analyser measures, not noise.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile

from . import common


@common.suite("default")
class Depth(common.Tracked):
    """Multiplications and op-graph span of the traced reference forward, d = 64.

    RNN: 2 T d^2 multiplications in a span that grows like T; attention: the
    T^2 d grid and mix in a span that stays a handful of stages; the linear
    recurrence's scan (``lru-scan``): a span that grows like log T. Every traced
    form of every registered family.
    """
    params = [common.FORMS, [64, 256, 1024]]
    param_names = ["model", "T"]
    d = 64

    def setup(self, model, T):
        depth = common.analyser("depth")
        self.trace = depth.trace_model(model, T, self.d)
        self.lesson_parts = common.lesson_parts(model)   # RNN products vs grid + mix

    def track_multiplications(self, model, T):
        return sum(self.trace.macs_by_part().get(p, 0) for p in self.lesson_parts)
    track_multiplications.unit = "multiplications"

    def track_multiplications_all(self, model, T):
        return sum(self.trace.macs_by_part().values())          # attention: with projections
    track_multiplications_all.unit = "multiplications"

    def track_span(self, model, T):
        return self.trace.span
    track_span.unit = "operations"

    def track_scalar_span(self, model, T):
        return self.trace.scalar_span
    track_scalar_span.unit = "scalar operations"


@common.suite("default")
class DecayRate(common.Tracked):
    """The gradient-path analyser's fitted decay of ||dh_T/dh_{T-k}||, orthogonal W_hh, default T, d.

    ``track_fitted_rate`` is the fitted slope of ln ||.|| per step: log(rho) exactly for
    the identity, lower for tanh by what saturation adds. ``track_fitted_factor`` is
    exp(rate), the norm's ratio per step (rho for the identity): always positive, so
    asv's compare reads its changes right (it misreads equal negative values as changes).
    """
    params = [["identity", "tanh"], [0.5, 0.9, 1.1]]
    param_names = ["activation", "rho"]

    def setup(self, activation, rho):
        gradpath = common.analyser("gradpath")
        D = gradpath.DEFAULT
        frame = common.analyser("models.rnn").rnn_decay(T=D.Ts[0], d=D.ds[0], rho=rho,
                                                        weight="orthogonal",
                                                        activation=activation, seed=D.seed)
        self.rate = float(gradpath.summarise(frame, D.fit_from)["ln_rate"].iloc[0])

    def track_fitted_rate(self, activation, rho):
        return self.rate
    track_fitted_rate.unit = "ln(norm) per step"

    def track_fitted_factor(self, activation, rho):
        return math.exp(self.rate)
    track_fitted_factor.unit = "norm ratio per step"


@common.suite("default")
class AttentionDecayRate(common.Tracked):
    """The same fit for self-attention: about 0, one alpha factor at every distance."""

    def setup(self):
        gradpath = common.analyser("gradpath")
        D = gradpath.DEFAULT
        frame = common.analyser("models.attention").attention_paths(T=D.Ts[0], d=D.ds[0], seed=D.seed)
        self.rate = float(gradpath.summarise(frame, D.fit_from)["ln_rate"].iloc[0])

    def track_fitted_rate(self):
        return self.rate
    track_fitted_rate.unit = "ln(norm) per step"

    def track_fitted_factor(self):
        return math.exp(self.rate)
    track_fitted_factor.unit = "norm ratio per step"


@common.suite("long")
class DecaySweep(common.Benchmark):
    """Wall time of the default ``harness decay`` sweep, and of the whole command."""
    repeat = (1, 3, 5.0)
    number = 1

    def setup(self):
        self.gradpath = common.analyser("gradpath")
        self.mrnn, self.matt = common.analyser("models.rnn"), common.analyser("models.attention")
        from harness import cli
        self.cli = cli
        common.apply_threads()
        self.tmp = tempfile.TemporaryDirectory(prefix="harness-bench-")
        self.argv = ["decay", "--quiet", "--out", self.tmp.name]
        self.mrnn.rnn_decay(T=4, d=2)                         # compile outside the clock
        self.matt.attention_paths(T=4, d=2)
        self.stdout, sys.stdout = sys.stdout, open(os.devnull, "w")   # the command prints its summary

    def teardown(self):
        sys.stdout.close()
        sys.stdout = self.stdout
        self.tmp.cleanup()

    def time_decay_sweep(self):
        self.gradpath.decay_sweep(self.gradpath.DEFAULT)

    def time_decay_command(self):
        self.cli.main(self.argv)
