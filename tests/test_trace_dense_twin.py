"""The tracer across ``DENSE_MAX`` (#36): past it a Field is kept as row and column terms, and
that path runs only for products and grids larger than 65,536 elements, so only at lengths the
other tests hardly trace (T > 128 at d = 512, T > 256 for a T x T grid). Every traced form, at
the report's lengths and on both sides of the switch, at d = 64 and d = 512, against its dense
twin (every Field held as one array, the per-element values): the same counts, span, path,
scalar span and work, op graph, and every element of the outputs' dist and sdepth. Then the
report's lengths against tests/data/depth_baseline_report.json, recorded dense.

The fast tests stop at T = 1000 (d = 64) and T = 500 (d = 512); HARNESS_DEPTH_BASELINE_ALL=1
(CI) adds T = 2000 and 4096 (about a minute)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import _depth_baseline as B
from harness.analysis import field

FORMS = B.all_forms()
ALL = os.environ.get("HARNESS_DEPTH_BASELINE_ALL") == "1"
slow = pytest.mark.skipif(not ALL, reason="set HARNESS_DEPTH_BASELINE_ALL=1 (a minute)")
REPORT_ROWS = json.loads(B.REPORT_PATH.read_text())

# (d, T): below the switch for every field (T x d and T x T at most 65,536), then past it
CASES = [pytest.param(d, T, marks=[slow] if (d, T) in {(64, 2000), (64, 4096), (512, 1000),
                                                           (512, 2000)} else [])
         for d, Ts in ((64, (50, 200, 500, 1000, 2000, 4096)),
                       (512, (50, 100, 200, 500, 1000, 2000))) for T in Ts]


def _traced(fam, form, T, d):
    g, outputs = B.run_form(fam, form, T, d)
    return B.record(g, outputs, T), [(o.dist.copy(), o.sdepth.copy()) for o in outputs]


def _equals_its_dense_twin(model, d, T, monkeypatch):
    """Trace ``model`` at (T, d) as it is and all dense; assert the same records and the same
    dist and sdepth of every output. Returns whether any field was kept as terms."""
    fam, form = FORMS[model]
    past = []                       # sizes of the fields kept as terms (past DENSE_MAX)
    numel = field._numel

    def counting(shape):
        n = numel(shape)
        if n > field.DENSE_MAX:
            past.append(n)
        return n

    monkeypatch.setattr(field, "_numel", counting)
    got, got_out = _traced(fam, form, T, d)
    terms_path = bool(past)
    with B.all_dense():
        want, want_out = _traced(fam, form, T, d)
    assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    for (gd, gs), (wd, ws) in zip(got_out, want_out, strict=True):
        np.testing.assert_array_equal(gd, wd)
        np.testing.assert_array_equal(gs, ws)
    return terms_path


@pytest.mark.parametrize("d, T", CASES)
@pytest.mark.parametrize("model", sorted(FORMS))
def test_a_trace_equals_its_dense_twin(model, d, T, monkeypatch):
    terms_path = _equals_its_dense_twin(model, d, T, monkeypatch)
    # the switch is where it is said to be: below it no field of a product is kept as terms
    # (T x d and every T x T grid small), past it the terms path ran
    if max(T * d, T * T, d * d) <= field.DENSE_MAX:
        assert not terms_path
    if T * d > field.DENSE_MAX:
        assert terms_path, "no field passed DENSE_MAX: the test would not reach the terms"


def test_the_report_baseline_covers_every_form_at_the_reports_lengths():
    from harness.infra.config import REPORT
    assert B.REPORT_T == REPORT.depth.T_values and B.REPORT_D == REPORT.depth.d
    assert {(r["model"], r["T"], r["d"]) for r in REPORT_ROWS} == {
        (m, T, B.REPORT_D) for m in FORMS for T in B.REPORT_T}


@pytest.mark.parametrize("T", [pytest.param(T, marks=[slow] if T > 500 else [])
                               for T in B.REPORT_T])
def test_the_tracer_gives_the_dense_numbers_recorded_at_the_reports_lengths(T):
    for r in REPORT_ROWS:
        if r["T"] == T:
            fam, form = FORMS[r["model"]]
            g, outputs = B.run_form(fam, form, T, r["d"])
            got = B.record(g, outputs, T)
            want = {k: v for k, v in r.items() if k not in ("model", "T", "d")}
            assert got == want, (r["model"], {k: (got[k], want[k]) for k in want
                                              if got[k] != want[k]})


@pytest.mark.parametrize("d, T", [(4, 24), (6, 37)])
@pytest.mark.parametrize("model", sorted(FORMS))
def test_the_terms_path_at_small_sizes_equals_its_dense_twin(model, d, T, monkeypatch):
    """The same comparison with the switch moved down to 16 elements: every form's fields of
    more than 16 kept as terms (reshapes, transposes, broadcasts and reductions of terms
    included) at sizes that trace in milliseconds."""
    monkeypatch.setattr(field, "DENSE_MAX", 16)
    assert _equals_its_dense_twin(model, d, T, monkeypatch), "no field passed the moved switch"
