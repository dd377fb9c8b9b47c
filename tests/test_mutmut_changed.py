"""tools/mutmut_changed.py: the mutant patterns of exactly the functions changed since a commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import mutmut_changed  # noqa: E402
from _deps import require_module  # noqa: E402

BEFORE = '''
def kept(x):
    return x + 1


def changed(x):
    return x * 2


class Box:
    def same(self):
        return 1

    def edited(self):
        return 2
'''

AFTER = '''
# a comment and a blank line change no function

def kept(x):
    return x + 1   # nor does a comment on its line


def changed(x):
    return x * 3


class Box:
    def same(self):
        return 1

    def edited(self):
        return 3

    def added(self):
        return 4


def new():
    return 5
'''


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mutmut]\nonly_mutate = ["pkg/mod.py", "pkg/sub/*.py"]\n')
    (tmp_path / "pkg" / "mod.py").write_text(BEFORE)
    (tmp_path / "pkg" / "other.py").write_text("def f():\n    return 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (tmp_path / "pkg" / "mod.py").write_text(AFTER)
    (tmp_path / "pkg" / "other.py").write_text("def f():\n    return 2\n")   # not listed
    (tmp_path / "pkg" / "sub").mkdir()
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("def g():\n    return 0\n")
    return tmp_path


def test_only_the_changed_and_new_functions_of_the_listed_modules(repo):
    assert mutmut_changed.modules(repo) == ["pkg/mod.py", "pkg/sub/__init__.py"]
    assert mutmut_changed.changed("HEAD", repo) == [
        "pkg.mod.x_changed__mutmut_*", "pkg.mod.xǁBoxǁedited__mutmut_*",
        "pkg.mod.xǁBoxǁadded__mutmut_*", "pkg.mod.x_new__mutmut_*",
        "pkg.sub.x_g__mutmut_*"]                    # a file new since the base: all of it


def test_the_keys_are_mutmuts_own():
    """Every function's key is the one mutmut 3 gives it (its own AST walk of the module)."""
    mutmut = require_module("mutmut.mutation.file_mutation", "pip install -e '.[test]'")
    assert set(mutmut_changed.functions(AFTER)) == set(mutmut.compute_function_hashes(AFTER))


def test_a_base_that_is_not_a_commit_is_named(capsys):
    with pytest.raises(SystemExit, match="BASE must be a commit of this repository, got 'nope'"):
        mutmut_changed.main(["nope"])
    with pytest.raises(SystemExit, match="usage"):
        mutmut_changed.main([])
