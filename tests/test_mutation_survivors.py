"""tools/mutation_survivors.py: a survivor's change read from mutmut's mutated module, and the
reason carried over from the last run's list by function and change, whatever the module."""

from __future__ import annotations

import csv
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import mutation_survivors as ms  # noqa: E402

MUTATED = '''\
def helper():
    return 1


def x_f__mutmut_orig(a, b):
    c = a + b
    return c * 2


def x_f__mutmut_3(a, b):
    c = a - b
    return c * 2


class Thing:
    def x_g__mutmut_orig(self):
        return [1, 2]

    def x_g__mutmut_1(self):
        return [1, 3]
'''


def test_changed_lines_are_the_lines_that_differ_after_the_def_line():
    fs = ms.functions(MUTATED)
    assert set(fs) == {"helper", "x_f__mutmut_orig", "x_f__mutmut_3", "x_g__mutmut_orig",
                       "x_g__mutmut_1"}
    assert ms.changed_lines(fs["x_f__mutmut_orig"], fs["x_f__mutmut_3"]) == ("c = a + b", "c = a - b")
    two = "def f():\n    x = 1\n    y = 2\n    return x\n"
    assert ms.changed_lines(two, "def g():\n    x = 3\n    y = 4\n    return x\n") == \
        ("x = 1 / y = 2", "x = 3 / y = 4")
    assert ms.changed_lines(two, two.replace("def f", "def h")) == ("", "")


def test_a_reason_follows_the_function_and_its_change_across_a_moved_module(tmp_path):
    pkg = tmp_path / "mutants" / "harness" / "infra"
    pkg.mkdir(parents=True)
    (pkg / "stats.py").write_text(MUTATED)
    known = ms.reasons([
        {"mutant": "harness._fit.x_f__mutmut_9", "line before": " c = a + b",
         "line after": "c = a - b ", "why it survives": "equivalent: a test"},
        {"mutant": "harness._fit.x_f__mutmut_9", "line before": "c = a + b",
         "line after": "c = a * b", "why it survives": "not worth a test: another change"}])
    cache = {}
    assert ms.row(tmp_path, "harness.infra.stats.x_f__mutmut_3", known, cache) == \
        ("harness.infra.stats.x_f__mutmut_3", "c = a + b", "c = a - b", "equivalent: a test")
    # a method, whose change has no reason on record: none given
    assert ms.row(tmp_path, "harness.infra.stats.x_g__mutmut_1", known, cache) == \
        ("harness.infra.stats.x_g__mutmut_1", "return [1, 2]", "return [1, 3]", "")
    assert ms.short_name("harness.infra.stats.x_f__mutmut_3") == "x_f"


def test_the_tsv_in_docs_has_the_columns_the_tool_writes():
    with open(ROOT / "docs" / "mutation-survivors.tsv", newline="") as f:
        assert tuple(next(csv.reader(f, delimiter="\t"))) == ms.COLUMNS
