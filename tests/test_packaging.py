"""The package builds: a wheel, from pyproject.toml alone, without a deprecation warning."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_builds_without_a_deprecation_warning(tmp_path):
    pytest.importorskip("build", reason="build is not installed (pip install -e .[test])")
    src = tmp_path / "src"                   # a copy: the build writes build/ and *.egg-info
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "harness", src / "harness",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # without isolation: offline, with the setuptools of the test extra; every warning an error
    env = dict(os.environ, PYTHONWARNINGS="error")
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                        "--outdir", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, env=env, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "deprecat" not in out.lower(), out[-3000:]
    wheel, = (tmp_path / "dist").glob("harness-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
        names = z.namelist()
    meta = meta.decode()
    assert "License-Expression: MIT" in meta               # PEP 639: the SPDX string
    assert "harness/_entry.py" in names and "harness/cli.py" in names
