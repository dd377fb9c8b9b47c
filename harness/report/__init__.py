"""``harness report``: the three claims of the lessons, with this machine's numbers.

One command writes a self-contained folder: ``index.html`` (offline, no network
fetch), every figure as PNG and SVG, and the CSV behind each figure. Each
section is data (tidy frames, written as CSV), seaborn figures drawn from those
frames, and a caption whose numbers are computed from the same frames; the tests
re-read the CSVs and check that the captions match.

The modules, one concern each:

* ``numbers``: the numbers a caption and a claim (``harness.analysis.claims``)
  both state, computed once: the crossovers, attention's rate and level, the scan;
* ``captions``: each section's caption from its frames (``CAPTIONS``, by key);
* ``figures``: each figure, one seaborn call on a tidy frame, and ``encode``;
* ``history``: asv's results across commits, as tidy frames;
* ``html``: ``Section``, the tables under captions, and ``render_html``;
* ``build``: the analysers run section by section, and the folder written all
  new or not at all (``build_report``, ``check_out``, ``STAGES``).
"""

from __future__ import annotations

import importlib

# The entry points, loaded when first asked for: harness.analysis.claims imports
# ``numbers`` from this package, and must not pull in matplotlib, seaborn and
# ``build`` (which imports claims) with it.
_EXPORTS = {"build_report": "build", "check_out": "build", "STAGES": "build"}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
