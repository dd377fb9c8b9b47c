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

    def setup_cache(self):
        """Every form's counts at every T, traced once per run: asv shares them among the four
        methods and every parameter, each of which is its own process."""
        common.apply_threads()
        depth = common.analyser("depth")
        counts = {}
        for model in self.params[0]:
            for T in self.params[1]:
                try:
                    trace = depth.trace_model(model, T, self.d)
                    parts = common.lesson_parts(model)        # RNN products vs grid + mix
                except (NotImplementedError, ValueError) as e:   # a form this commit lacks
                    counts[(model, T)] = str(e)
                    continue
                macs = trace.macs_by_part()
                counts[(model, T)] = {
                    "multiplications": sum(macs.get(p, 0) for p in parts),
                    "multiplications_all": sum(macs.values()),   # attention: with projections
                    "span": trace.span, "scalar_span": trace.scalar_span}
        return counts

    def setup(self, counts, model, T):
        if isinstance(counts[(model, T)], str):
            raise NotImplementedError(counts[(model, T)])

    def track_multiplications(self, counts, model, T):
        return counts[(model, T)]["multiplications"]
    track_multiplications.unit = "multiplications"

    def track_multiplications_all(self, counts, model, T):
        return counts[(model, T)]["multiplications_all"]
    track_multiplications_all.unit = "multiplications"

    def track_span(self, counts, model, T):
        return counts[(model, T)]["span"]
    track_span.unit = "operations"

    def track_scalar_span(self, counts, model, T):
        return counts[(model, T)]["scalar_span"]
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

    def setup_cache(self):
        """Every fitted rate, once per run (shared by both methods and every parameter)."""
        common.apply_threads()
        gradpath = common.analyser("gradpath")
        rnn = common.analyser("models.rnn")
        D = gradpath.DEFAULT
        rates = {}
        for activation in self.params[0]:
            for rho in self.params[1]:
                frame = rnn.rnn_decay(T=D.Ts[0], d=D.ds[0], rho=rho, weight="orthogonal",
                                      activation=activation, seed=D.seed)
                rates[(activation, rho)] = float(
                    gradpath.summarise(frame, D.fit_from)["ln_rate"].iloc[0])
        return rates

    def track_fitted_rate(self, rates, activation, rho):
        return rates[(activation, rho)]
    track_fitted_rate.unit = "ln(norm) per step"

    def track_fitted_factor(self, rates, activation, rho):
        return math.exp(rates[(activation, rho)])
    track_fitted_factor.unit = "norm ratio per step"


@common.suite("default")
class AttentionDecayRate(common.Tracked):
    """The same fit for self-attention: about 0, one alpha factor at every distance."""

    def setup(self):
        common.apply_threads()
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
