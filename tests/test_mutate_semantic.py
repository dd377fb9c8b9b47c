"""tools/mutate_semantic.py: every mutation of tools/semantic_mutations.toml still applies to the
code as it is, the CSV it writes, and a campaign on a tiny module whose tests catch one planted
bug and miss another."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("mutate_semantic",
                                                  ROOT / "tools" / "mutate_semantic.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


ms = _tool()
MUTATIONS = ms.load()


def test_every_mutation_applies_exactly_once():
    """A snippet that a later change moved, or that now occurs twice, fails here, not silently
    in a campaign."""
    assert ms.check(MUTATIONS) == []
    assert len(MUTATIONS) >= 40


def test_the_mutations_cover_the_modules_the_reader_reads():
    files = {m.file for m in MUTATIONS}
    for part in ("harness/analysis/claims/", "harness/analysis/lesson_checks.py",
                 "harness/analysis/figure1.py", "harness/report/captions.py",
                 "harness/report/numbers.py", "harness/analysis/field.py",
                 "harness/analysis/trace.py", "harness/infra/stats.py", "harness/kernels/"):
        assert any(f.startswith(part) for f in files), part


def test_each_mutation_changes_its_file():
    for m in MUTATIONS:
        before = (ROOT / m.file).read_text()
        after = ms.mutated_source(m)
        assert after != before and after.count(m.replacement) >= 1, m.id


def _write(tmp_path, text):
    path = tmp_path / "m.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_stale_snippet_is_refused(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\ny = 1\n")
    (tmp_path / "t.py").write_text("")
    twice = ms.Mutation("twice", "pkg/a.py", "= 1", "= 2", "constant", ("t.py",))
    gone = ms.Mutation("gone", "pkg/a.py", "z = 1", "z = 2", "constant", ("t.py",))
    once = ms.Mutation("once", "pkg/a.py", "y = 1", "y = 2", "constant", ("t.py",))
    no_test = ms.Mutation("no-test", "pkg/a.py", "y = 1", "y = 2", "constant", ("nope.py",))
    for m, n in ((twice, "occurs 2 times"), (gone, "occurs 0 times"),
                 (no_test, "test file nope.py")):
        with pytest.raises(ms.StaleMutation, match=n):
            ms.mutated_source(m, tmp_path)
    assert ms.mutated_source(once, tmp_path) == "x = 1\ny = 2\n"
    problems = ms.check([twice, once, gone], tmp_path)
    assert len(problems) == 2 and "'twice'" in problems[0] and "'gone'" in problems[1]
    with pytest.raises(ms.StaleMutation):
        ms.campaign([once, gone], root=tmp_path, parts=("pkg", "t.py"), package="pkg",
                    log=lambda s: None)


def test_load_refuses_a_bad_entry(tmp_path):
    entry = """
        [[mutation]]
        id = "a"
        file = "f.py"
        original = "1"
        replacement = "2"
        kind = "{kind}"
        tests = ["t.py"]
        """
    with pytest.raises(ValueError, match="kind 'typo'"):
        ms.load(_write(tmp_path, entry.format(kind="typo")))
    with pytest.raises(ValueError, match="used twice"):
        ms.load(_write(tmp_path, entry.format(kind="sign") * 2))
    with pytest.raises(ValueError, match="lacks tests"):
        ms.load(_write(tmp_path, entry.format(kind="sign").replace('tests = ["t.py"]', "")))
    (m,) = ms.load(_write(tmp_path, entry.format(kind="sign")))
    assert m == ms.Mutation("a", "f.py", "1", "2", "sign", ("t.py",), "")


def test_the_csv_round_trips_in_the_lists_order(tmp_path):
    path = tmp_path / "out.csv"
    rows = [dict(id=i, file="f.py", kind="sign", caught=c, test=t, seconds="1.5", note=n)
            for i, c, t, n in (("b", "yes", "tests/t.py::test_x", ""),
                               ("a", "no", "", "equivalent: x, y"))]
    ms.write_csv(rows, path, order=["a", "b"])
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(ms.COLUMNS)
    assert lines[1] == 'a,f.py,sign,no,,1.5,"equivalent: x, y"'
    assert ms.read_csv(path) == rows[::-1]


def test_a_row_says_how_it_was_caught():
    m = ms.Mutation("a", "f.py", "1", "2", "sign", ("t.py",))
    r = ms.row(m, ms.Outcome(True, "", 3.04, "timeout"))
    assert r["caught"] == "yes" and r["seconds"] == "3.0" and "timeout" in r["note"]
    assert ms.row(m, ms.Outcome(False, "", 1.0, "passed"))["caught"] == "no"
    argued = ms.Mutation("a", "f.py", "1", "2", "sign", ("t.py",), "equivalent because")
    assert ms.row(argued, ms.Outcome(False, "", 1.0, "passed"))["note"] == "equivalent because"


def test_a_campaign_catches_one_bug_and_misses_another(tmp_path):
    """A module whose test checks ``double`` but not ``label``: the bug in ``double`` is caught
    by that test, the one in ``label`` survives, and the source tree is left as it was."""
    pkg = tmp_path / "demo_pkg"
    pkg.mkdir()
    source = "def double(x):\n    return 2 * x\n\n\ndef label(x):\n    return f'{x:.2f}'\n"
    (pkg / "__init__.py").write_text(source)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_demo.py").write_text(
        "from demo_pkg import double, label\n\n\ndef test_label_runs():\n    assert label(1)\n\n\n"
        "def test_double():\n    assert double(3) == 6\n")
    caught = ms.Mutation("caught", "demo_pkg/__init__.py", "2 * x", "3 * x", "constant",
                         ("tests/test_demo.py",))
    missed = ms.Mutation("missed", "demo_pkg/__init__.py", ":.2f", ":.1f", "constant",
                         ("tests/test_demo.py",))
    rows = ms.campaign([caught, missed], root=tmp_path, parts=("demo_pkg", "tests"),
                       package="demo_pkg", timeout=120, log=lambda s: None)
    assert [(r["id"], r["caught"], r["test"]) for r in rows] == [
        ("caught", "yes", "tests/test_demo.py::test_double"), ("missed", "no", "")]
    assert (pkg / "__init__.py").read_text() == source


def test_the_committed_csv_is_the_lists_campaign():
    """docs/semantic-mutations.csv has one row per mutation, in the list's order and with its
    file and kind; at least 95 % are caught, and every survivor says why it is equivalent."""
    rows = ms.read_csv()
    assert [(r["id"], r["file"], r["kind"]) for r in rows] == \
        [(m.id, m.file, m.kind) for m in MUTATIONS]
    caught = [r for r in rows if r["caught"] == "yes"]
    assert len(caught) >= 0.95 * len(rows)
    assert all(r["test"].startswith("tests/") or r["note"] for r in caught)
    assert all(r["note"].startswith("equivalent") for r in rows if r["caught"] == "no")
