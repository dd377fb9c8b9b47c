"""The depth baseline: counts by part, span, max_path (and the op graph's fingerprint) of every
traced form at T in BASELINE_T, recorded with the per-element tracer before issue #26's
structured tracer replaced it, so that tests/test_depth_baseline.py can hold the new tracer
to the old numbers.

Run as a script to rewrite tests/data/depth_baseline.json (slow: minutes at T = 4096):

    .venv/bin/python tests/_depth_baseline.py
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

from harness import models
from harness.analysis import trace

PATH = Path(__file__).parent / "data" / "depth_baseline.json"
BASELINE_T = (1, 2, 7, 64, 256, 1024, 4096)
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


def main(widths=(8, 64)):
    rows = []
    for name, (fam, form) in all_forms().items():
        for d in widths:
            for T in BASELINE_T:
                g, outputs = run_form(fam, form, T, d)
                rows.append(dict(model=name, T=T, d=d, **record(g, outputs, T)))
                print(name, T, d, rows[-1]["span"], rows[-1]["max_path"], file=sys.stderr, flush=True)
                del g, outputs
    PATH.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
