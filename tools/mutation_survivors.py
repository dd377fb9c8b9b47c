"""The survivors of a ``make mutate`` run, one row each, for docs/mutation-survivors.tsv.

    .venv/bin/python tools/mutation_survivors.py CLONE OLD_TSV OUT_TSV

CLONE is the checkout where ``make mutate`` ran (its ``mutants/`` and ``.venv/``). Each row
names a surviving mutant, the line it changes before and after (several lines joined by
" / "), and why it survives, carried over from OLD_TSV where a mutant of a function of the
same name made the same change; a row with no reason is one to read: kill it with a test, or
write why it survives ("equivalent: ..." or "not worth a test: ..."), as the README's
mutation section asks.
"""

from __future__ import annotations

import ast
import csv
import difflib
import subprocess
import sys
from pathlib import Path

COLUMNS = ("mutant", "line before", "line after", "why it survives")


def survivors(clone):
    """The names of the surviving mutants, as ``mutmut results`` lists them."""
    out = subprocess.run([str(clone / ".venv" / "bin" / "mutmut"), "results", "--all", "true"],
                         cwd=clone, capture_output=True, text=True, check=True).stdout
    return [line.split(":")[0].strip() for line in out.splitlines()
            if line.strip().endswith(": survived")]


def functions(source):
    """{name: source} of every function in ``source``, nested ones and methods included."""
    lines = source.splitlines()
    return {node.name: "\n".join(lines[node.lineno - 1:node.end_lineno])
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def changed_lines(original, mutant):
    """(before, after): the lines that differ between two versions of a function, the def line
    left out (mutmut renames it), stripped and joined by " / "."""
    a, b = original.splitlines()[1:], mutant.splitlines()[1:]
    before, after = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b).get_opcodes():
        if tag != "equal":
            before += a[i1:i2]
            after += b[j1:j2]
    return " / ".join(x.strip() for x in before), " / ".join(x.strip() for x in after)


def short_name(mutant):
    """'x_fit_rate' of 'harness.infra.stats.x_fit_rate__mutmut_6': the mutated function as
    mutmut names it, without its module, which moves when a module does."""
    return mutant.split(".")[-1].split("__mutmut_")[0]


def reasons(rows):
    """{(function, line before, line after): why} from earlier rows."""
    out = {}
    for r in rows:
        out.setdefault((short_name(r["mutant"]), r["line before"].strip(), r["line after"].strip()),
                       r["why it survives"])
    return out


def row(clone, mutant, known, cache):
    """One survivor's row: its change read from the mutated module in ``clone/mutants``."""
    parts = mutant.split(".")
    path = clone / "mutants" / Path(*parts[:-1]).with_suffix(".py")
    if not path.exists():
        path = clone / "mutants" / Path(*parts[:-1]) / "__init__.py"
    if path not in cache:
        cache[path] = functions(path.read_text())
    fs, base = cache[path], short_name(mutant)
    before, after = changed_lines(fs.get(base + "__mutmut_orig", ""), fs.get(parts[-1], ""))
    return mutant, before, after, known.get((base, before, after), "")


def main(argv):
    clone, old_tsv, out_tsv = Path(argv[0]), Path(argv[1]), Path(argv[2])
    with open(old_tsv, newline="") as f:
        known = reasons(csv.DictReader(f, delimiter="\t"))
    cache = {}
    rows = [row(clone, m, known, cache) for m in survivors(clone)]
    with open(out_tsv, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows(rows)
    print(f"{len(rows)} survivors, {sum(1 for r in rows if r[3])} with a reason carried over",
          file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
