"""Tests written from mutmut's survivors in code changed since the 9709ba6 mutation run
(docs/mutation-score.json): each names the mutant it kills, and checks the behaviour that
mutant changes, on the public function, worked out by hand."""

from __future__ import annotations

import runpy

from harness.analysis import depth
from harness.infra.files import UserCodeError


def _raised_by_their_code(tmp_path, source):
    """The exception that ``f`` of a user's file (``source``) raises, and the file's path."""
    path = tmp_path / "theirs_gap.py"
    path.write_text(source)
    f = runpy.run_path(str(path))["f"]
    try:
        f()
    except Exception as e:           # noqa: BLE001 - whatever their code raised
        return e, path
    raise AssertionError("their f() did not raise")


def test_an_exception_without_a_message_is_named_by_its_class_alone(tmp_path):
    """``raise RuntimeError`` (no message) reads as "RuntimeError", not as an IndexError of
    the harness (x_user_error__mutmut_73: the message's first line read whatever it is)."""
    e, path = _raised_by_their_code(tmp_path, "def f():\n    raise RuntimeError\n")
    err = depth.user_error(e, "theirs_gap.py:f", "tracing theirs_gap.py:f")
    assert isinstance(err, UserCodeError)
    assert str(err) == (f"--forward: {path}:2: RuntimeError (raised while tracing "
                        f"theirs_gap.py:f; your code's frames below)")
    e, path = _raised_by_their_code(tmp_path, "def f():\n    raise ValueError('  \\n')\n")
    assert str(depth.user_error(e, "s", "tracing s")).startswith(f"--forward: {path}:2: ValueError (")


def test_an_exception_of_theirs_raised_from_another_is_the_one_named(tmp_path):
    """Their ``raise RuntimeError(...) from e`` names the RuntimeError and its line (5), not
    the KeyError it came from (line 3): the cause is taken only when none of the exception's
    own frames is theirs, as when trace_forward re-raised it (x_user_error__mutmut_4)."""
    source = ("def f():\n"
              "    try:\n"
              "        {}['k']\n"
              "    except KeyError as e:\n"
              "        raise RuntimeError('outer') from e\n")
    e, path = _raised_by_their_code(tmp_path, source)
    assert isinstance(e.__cause__, KeyError)
    err = depth.user_error(e, "theirs_gap.py:f", "tracing theirs_gap.py:f")
    assert str(err) == (f"--forward: {path}:5: RuntimeError: outer (raised while tracing "
                        f"theirs_gap.py:f; your code's frames below)")
    assert f'File "{path}", line 5, in f' in err.frames
    assert "line 3" not in err.frames
