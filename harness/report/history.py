"""The benchmarks across commits: asv's results JSON read into tidy frames.

``read_asv_results`` reads every timing asv recorded; ``kernel_history`` keeps the
main kernels' forward and backward at one (d, batch, dtype), oldest commit first.
A results folder that is missing or holds other files gives an empty frame, and
the report leaves its history section out.
"""

from __future__ import annotations

import ast
import glob
import itertools
import json
import math
import os

import pandas as pd


def read_asv_results(results_dir):
    """Every timing in asv's results JSON as a tidy frame: benchmark, params, commit, date, seconds."""
    rows = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*", "*.json"))):
        if os.path.basename(path) == "machine.json":
            continue
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
            continue                                  # not an asv results file
        columns = data.get("result_columns", ["result", "params"])
        for name, entry in data.get("results", {}).items():
            if ".time_" not in name and not name.startswith("time_"):
                continue
            rec = dict(zip(columns, entry))
            values, params = rec.get("result"), rec.get("params") or []
            if values is None:
                continue
            if not isinstance(values, list):          # a benchmark without params, older format
                values = [values]
            combos = list(itertools.product(*params)) if params else [()]
            for combo, val in zip(combos, values):
                if val is None or (isinstance(val, float) and not math.isfinite(val)):
                    continue
                rows.append({"benchmark": name, "params": ", ".join(map(str, combo)),
                             "commit": data.get("commit_hash", "")[:8],
                             "date": pd.to_datetime(data.get("date", 0), unit="ms"),
                             "seconds": float(val)})
    return pd.DataFrame(rows, columns=["benchmark", "params", "commit", "date", "seconds"])


def kernel_history(h, d=256, batch=1, dtype="float64"):
    """The main benchmarks across commits: Kernels.time_forward/backward at one (d, batch, dtype).

    Columns: commit (oldest first), date, series ("rnn forward", ...), T, d, seconds.
    """
    rows = []
    for r in h.itertuples():
        if ".Kernels.time_" not in r.benchmark:
            continue
        try:
            model, T, dd, b, dt = ast.literal_eval(f"({r.params},)")
        except (ValueError, SyntaxError, TypeError):
            continue
        if (int(dd), int(b), dt) != (d, batch, dtype):
            continue
        direction = r.benchmark.rsplit("time_", 1)[1]
        rows.append({"commit": r.commit, "date": r.date, "series": f"{model} {direction}",
                     "T": int(T), "d": int(dd), "seconds": r.seconds})
    out = pd.DataFrame(rows, columns=["commit", "date", "series", "T", "d", "seconds"])
    return out.sort_values(["date", "series", "T"], kind="stable").reset_index(drop=True)

