"""The structured tracer against the per-element one it replaced (issue #26): counts by part,
span, max_path, scalar span and work, and the op graph itself (its sha256), equal to the
numbers tests/data/depth_baseline.json recorded before the change, for every traced form.

The fast tests cover T <= 256 at d = 8 and T <= 64 at d = 64; HARNESS_DEPTH_BASELINE_ALL=1
checks every recorded row (T up to 4096, about a minute) and traces every form at T = 65,536
against its closed-form counts and the span and path length the recorded lengths extrapolate
to (a few minutes)."""

from __future__ import annotations

import json
import math
import os

import pytest

import _depth_baseline as B
from harness.analysis import depth, trace

ROWS = json.loads(B.PATH.read_text())
FORMS = B.all_forms()
ALL = os.environ.get("HARNESS_DEPTH_BASELINE_ALL") == "1"
slow = pytest.mark.skipif(not ALL, reason="set HARNESS_DEPTH_BASELINE_ALL=1 (minutes)")


def _fast(r):
    return r["T"] <= (256 if r["d"] == 8 else 64)


def _check(r):
    fam, form = FORMS[r["model"]]
    g, outputs = B.run_form(fam, form, r["T"], r["d"])
    got = B.record(g, outputs, r["T"])
    want = {k: v for k, v in r.items() if k not in ("model", "T", "d")}
    assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}


def test_the_baseline_covers_every_traced_form_length_and_width():
    assert {r["model"] for r in ROWS} == set(FORMS)
    assert {(r["T"], r["d"]) for r in ROWS} == {(T, d) for T in B.BASELINE_T for d in (8, 64)}
    assert len(ROWS) == len(FORMS) * len(B.BASELINE_T) * 2


@pytest.mark.parametrize("model", sorted(FORMS))
def test_the_structured_tracer_gives_the_recorded_numbers(model):
    for r in ROWS:
        if r["model"] == model and _fast(r):
            _check(r)


@slow
@pytest.mark.parametrize("row", [r for r in ROWS if not _fast(r)],
                         ids=lambda r: f"{r['model']}-{r['T']}-{r['d']}")
def test_the_structured_tracer_gives_the_recorded_numbers_up_to_4096(row):
    _check(row)


def _law(model, d, key):
    """``key`` of ``model`` over T as the recorded T >= 256 give it: a + b T, a + b log2 T or a
    constant, whichever passes through every recorded value; (law, a, b)."""
    pts = sorted((r["T"], r[key]) for r in ROWS if r["model"] == model and r["d"] == d
                 and r["T"] >= 256)
    for law, x in (("linear", lambda T: T), ("log", lambda T: math.log2(T))):
        (t0, y0), (t1, y1) = pts[0], pts[-1]
        b = (y1 - y0) / (x(t1) - x(t0))
        a = y0 - b * x(t0)
        if all(abs(a + b * x(T) - y) < 1e-9 for T, y in pts):
            return law, a, b
    raise AssertionError(f"{model}: {key} follows no simple law over T: {pts}")


def test_every_forms_span_and_path_follow_a_law_the_65536_check_can_use():
    for model in FORMS:
        for key in ("span", "max_path"):
            _law(model, 64, key)


@slow
@pytest.mark.parametrize("model", sorted(FORMS))
def test_every_form_at_65536_follows_its_closed_forms(model):
    T, d = 65536, 64
    fam, form = FORMS[model]
    g, outputs = B.run_form(fam, form, T, d)
    tr = depth.Trace(model, T, d, g, outputs)
    nonzero = lambda parts: {k: v for k, v in parts.items() if v}      # noqa: E731
    assert nonzero(tr.macs_by_part()) == nonzero(form.macs(T, d))
    for key in ("span", "max_path"):
        law, a, b = _law(model, d, key)
        want = a + b * (T if law == "linear" else math.log2(T))
        assert getattr(tr, key) == round(want), (key, law)
    # the largest arrays are stored as row and column terms, never T x T
    assert max(o.depth_bytes for o in outputs) < 64 * T * d


def test_a_grid_is_kept_as_a_row_and_a_column_term():
    """attention at T = 4096: E (T, T) holds 2 T numbers per depth, not T^2, and reads the
    same as the dense array the per-element tracer held."""
    T = 4096
    g = trace.Graph()
    X = trace.leaf(g, "X", (T, 2), ("T", "d_model"), source_row=0)
    E = X @ X.T
    assert [t.shape for t in E._dist.terms] == [(T, 1), (1, T)]
    assert E.depth_bytes == 2 * (2 * T) * 4
    row = E[T - 1]                                              # one row: the dense path
    assert row.dist[0] == 1 and math.isinf(row.dist[1])
    assert E._dist.total() == 1 and E._sdep.total() == 2
