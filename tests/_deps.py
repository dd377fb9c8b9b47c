"""Optional test dependencies: skip locally when absent, fail when CI requires them.

With HARNESS_REQUIRE_OPTIONAL=1 in the environment (``.ci/run`` sets it) a
missing dependency fails the test instead of skipping it, so CI cannot go
green without running the tests that need Chromium, PyTorch or JAX. Both helpers
work inside a test and at module level; at module level a failure is a
collection error, which makes pytest exit non-zero.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterable

import pytest

ENV = "HARNESS_REQUIRE_OPTIONAL"


def _required() -> bool:
    return os.environ.get(ENV) == "1"


def _missing(what: str, install_hint: str):
    if _required():
        pytest.fail(f"{what} is missing and {ENV}=1 requires it; install it with: {install_hint}",
                    pytrace=False)
    pytest.skip(f"{what} is missing; install it with: {install_hint} "
                f"(with {ENV}=1, as CI sets, this skip is a failure)",
                allow_module_level=True)


def require_module(name: str, install_hint: str):
    """The imported module ``name``; skip (or fail under HARNESS_REQUIRE_OPTIONAL=1) if it won't import."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        why = f"{type(e).__name__}: {e}"
    # Outside the except block, so the message is not chained to the ImportError's traceback.
    _missing(f"the Python module {name!r} ({why})", install_hint)


def require_executable(candidates: Iterable[str], install_hint: str) -> str:
    """The path of the first of ``candidates`` on PATH; skip (or fail under HARNESS_REQUIRE_OPTIONAL=1) if none is."""
    names = [candidates] if isinstance(candidates, str) else list(candidates)
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    _missing(f"an executable named one of {', '.join(names)}", install_hint)
