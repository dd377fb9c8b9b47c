"""The depth baseline: counts by part, span, max_path (and the op graph's fingerprint) of every
traced form at T in BASELINE_T, recorded with the per-element tracer before issue #26's
structured tracer replaced it, so that tests/test_depth_baseline.py can hold the new tracer
to the old numbers.

Run as a script to rewrite tests/data/depth_baseline.json (slow: minutes at T = 4096):

    .venv/bin/python tests/_depth_baseline.py

The report's lengths (REPORT_T at d = REPORT_D, where the products' and the grids' fields pass
``DENSE_MAX`` and the tracer keeps them as row and column terms) are recorded in
tests/data/depth_baseline_report.json with every field held dense (``all_dense``), the
per-element values the terms must reproduce:

    .venv/bin/python tests/_depth_baseline.py --report
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import sys
from pathlib import Path

from harness import models
from harness.analysis import field, trace

PATH = Path(__file__).parent / "data" / "depth_baseline.json"
BASELINE_T = (1, 2, 7, 64, 256, 1024, 4096)
REPORT_PATH = PATH.with_name("depth_baseline_report.json")
REPORT_T, REPORT_D = (50, 100, 200, 500, 1000, 2000), 512     # harness.infra.config.REPORT.depth
EXTRA = ("linear_attention",)        # families whose forms are recorded even if not registered


def all_forms():
    """{form name: (family, Form)} of the registered families and of EXTRA."""
    forms = dict(models.traced_forms())
    for name in EXTRA:
        fam = importlib.import_module(f"harness.models.{name}").FAMILY
        forms.update((f.name, (fam, f)) for f in fam.tracing.forms)
    return forms


def run_form(fam, form, T, d):
    """(graph, outputs) of ``form`` at (T, d), as ``depth.trace_model`` runs it."""
    weights = fam.tracing.weights(d)
    g = trace.Graph(weight_parts={name: part for name, _, _, part in weights})
    X = trace.leaf(g, "X", (T, d), ("T", "d_model"), source_row=0)
    W = [trace.leaf(g, name, shape, axes) for name, shape, axes, _ in weights]
    return g, form.forward(X, *W)


@contextlib.contextmanager
def all_dense():
    """Every Field kept as one dense array, however large: the dense twin of a trace."""
    before = field.DENSE_MAX
    field.DENSE_MAX = 1 << 62
    try:
        yield
    finally:
        field.DENSE_MAX = before


def fingerprint(graph):
    """sha256 of every op's kind, part, shape, inner, deps, op_depth and split."""
    h = hashlib.sha256()
    for op in graph.ops:
        h.update(repr((op.kind, op.part, tuple(int(s) for s in op.shape), int(op.inner),
                       [(int(i), int(r)) for i, r in op.deps], int(op.op_depth),
                       bool(op.split))).encode())
    return h.hexdigest()


def record(g, outputs, T):
    """What the baseline keeps of one trace (the columns of depth.csv it is read from)."""
    parts = {}
    for op in g.ops:
        if op.kind in trace.MULTIPLYING:
            parts[op.part] = parts.get(op.part, 0) + op.macs
    y = outputs[0]
    return dict(macs_by_part=dict(sorted(parts.items())), ops=len(g.ops),
                span=max(op.op_depth for op in g.ops),
                max_path=int(y.dist[..., T - 1, :].min()),
                scalar_span=int(max(int(o.sdepth.max()) for o in outputs)),
                scalar_work=int(sum(sum(op.levels("scalar")) for op in g.ops)),
                graph_sha256=fingerprint(g))


def main(widths=(8, 64), lengths=BASELINE_T, path=PATH):
    rows = []
    for name, (fam, form) in all_forms().items():
        for d in widths:
            for T in lengths:
                g, outputs = run_form(fam, form, T, d)
                rows.append(dict(model=name, T=T, d=d, **record(g, outputs, T)))
                print(name, T, d, rows[-1]["span"], rows[-1]["max_path"], file=sys.stderr, flush=True)
                del g, outputs
    path.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:
        with all_dense():
            main((REPORT_D,), REPORT_T, REPORT_PATH)
    else:
        main()
