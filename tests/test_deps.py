"""tests/_deps.py: a missing optional dependency skips, or fails under HARNESS_REQUIRE_OPTIONAL=1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from _deps import require_executable, require_module

MISSING_MODULE = "no_such_module_xyz"
MISSING_EXE = "no-such-exe-xyz"


@pytest.fixture
def required(monkeypatch):
    monkeypatch.setenv("HARNESS_REQUIRE_OPTIONAL", "1")


@pytest.fixture
def not_required(monkeypatch):
    monkeypatch.delenv("HARNESS_REQUIRE_OPTIONAL", raising=False)


def test_missing_module_fails_when_required(required):
    with pytest.raises(pytest.fail.Exception) as e:
        require_module(MISSING_MODULE, "pip install it")
    assert MISSING_MODULE in str(e.value) and "pip install it" in str(e.value)
    assert "HARNESS_REQUIRE_OPTIONAL=1" in str(e.value)


def test_missing_module_skips_otherwise(not_required):
    with pytest.raises(pytest.skip.Exception) as e:
        require_module(MISSING_MODULE, "pip install it")
    assert MISSING_MODULE in str(e.value) and "pip install it" in str(e.value)
    assert "HARNESS_REQUIRE_OPTIONAL=1" in str(e.value)


@pytest.mark.parametrize("value", ["0", "", "true"])
def test_only_the_value_1_requires(monkeypatch, value):
    monkeypatch.setenv("HARNESS_REQUIRE_OPTIONAL", value)
    with pytest.raises(pytest.skip.Exception):
        require_module(MISSING_MODULE, "pip install it")


@pytest.mark.parametrize("env", ["required", "not_required"])
def test_present_module_is_returned(request, env):
    request.getfixturevalue(env)
    assert require_module("json", "it is in the standard library") is json


def test_missing_executable_fails_when_required(required):
    with pytest.raises(pytest.fail.Exception) as e:
        require_executable([MISSING_EXE, MISSING_EXE + "-2"], "apt-get install it")
    assert MISSING_EXE in str(e.value) and "apt-get install it" in str(e.value)
    assert "HARNESS_REQUIRE_OPTIONAL=1" in str(e.value)


def test_missing_executable_skips_otherwise(not_required):
    with pytest.raises(pytest.skip.Exception) as e:
        require_executable([MISSING_EXE], "apt-get install it")
    assert MISSING_EXE in str(e.value) and "apt-get install it" in str(e.value)


@pytest.mark.parametrize("env", ["required", "not_required"])
def test_present_executable_is_returned(request, env):
    request.getfixturevalue(env)
    path = require_executable([MISSING_EXE, "sh"], "it is POSIX")
    assert os.path.basename(path) == "sh" and os.access(path, os.X_OK)


@pytest.mark.parametrize("value, outcome, rc", [("1", "1 error", 2), ("0", "1 passed, 1 skipped", 0)])
def test_module_level_use_at_collection(tmp_path, value, outcome, rc):
    """At module level a missing module skips the file, or (required) is a collection error: exit non-zero."""
    (tmp_path / "test_other.py").write_text("def test_passes():\n    pass\n")
    (tmp_path / "test_needs_it.py").write_text(textwrap.dedent(f"""
        from _deps import require_module
        mod = require_module({MISSING_MODULE!r}, "pip install it")

        def test_never_runs():
            pass
    """))
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "HARNESS_REQUIRE_OPTIONAL": value,
           "PYTHONPATH": os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == rc, r.stdout + r.stderr
    assert outcome in r.stdout, r.stdout
