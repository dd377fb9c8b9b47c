"""The semantic mutation campaign: plant each hand-written bug of tools/semantic_mutations.toml,
one at a time, in a throwaway copy of the tree, run the test files named for it, and write
whether they caught it to docs/semantic-mutations.csv.

    python tools/mutate_semantic.py                 # every mutation (make mutate-semantic)
    python tools/mutate_semantic.py --only ID ...   # some of them; the CSV's other rows stay
    python tools/mutate_semantic.py --check         # every snippet matches once; runs nothing

The working tree is never edited: harness/, tests/, tools/, docs/, benchmarks/ and pyproject.toml
are copied (with their modification times, so that Numba's caches stay valid) to a temporary
folder, the mutated file is written there, the tests run there with that folder first on
PYTHONPATH, and the original file is put back before the next mutation. A mutation whose
snippet does not occur exactly once in its file stops the run before anything is planted: the
list cannot rot.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTATIONS = ROOT / "tools" / "semantic_mutations.toml"
CSV = ROOT / "docs" / "semantic-mutations.csv"
COLUMNS = ["id", "file", "kind", "caught", "test", "seconds", "note"]
# benchmarks/: the gate's tests import the asv suite (tests/test_bench_gate.py)
COPIED = ("harness", "tests", "tools", "docs", "benchmarks", "pyproject.toml")
TIMEOUT_S = 600             # one mutation's test run; past it the mutation counts as caught
KINDS = ("threshold", "statistic", "interval", "off-by-one", "formula", "row", "sign",
         "constant", "column")


@dataclass(frozen=True)
class Mutation:
    """One planted bug: in ``file`` (from the root) ``original`` becomes ``replacement``."""
    id: str
    file: str
    original: str
    replacement: str
    kind: str
    tests: tuple
    note: str = ""


class StaleMutation(ValueError):
    """A mutation that no longer applies: its snippet is not in its file exactly once."""


def load(path=MUTATIONS):
    """The mutations of a TOML file ([[mutation]] tables), checked for their fields."""
    with open(path, "rb") as fh:
        table = tomllib.load(fh)
    out, seen = [], set()
    for i, m in enumerate(table.get("mutation", [])):
        missing = {"id", "file", "original", "replacement", "kind", "tests"} - set(m)
        if missing:
            raise ValueError(f"{path}: mutation {i + 1} lacks {', '.join(sorted(missing))}")
        if m["id"] in seen:
            raise ValueError(f"{path}: mutation id {m['id']!r} is used twice")
        if m["kind"] not in KINDS:
            raise ValueError(f"{path}: mutation {m['id']!r} has kind {m['kind']!r}, expected "
                             f"one of {', '.join(KINDS)}")
        if m["original"] == m["replacement"]:
            raise ValueError(f"{path}: mutation {m['id']!r} changes nothing")
        seen.add(m["id"])
        out.append(Mutation(m["id"], m["file"], m["original"], m["replacement"], m["kind"],
                            tuple(m["tests"]), m.get("note", "")))
    return out


def mutated_source(mutation, root=ROOT):
    """The mutated text of ``mutation.file`` under ``root``; ``StaleMutation`` unless the snippet
    occurs exactly once, and a missing test file is one too."""
    path = Path(root) / mutation.file
    if not path.is_file():
        raise StaleMutation(f"mutation {mutation.id!r}: {mutation.file} does not exist")
    text = path.read_text()
    n = text.count(mutation.original)
    if n != 1:
        raise StaleMutation(f"mutation {mutation.id!r}: its snippet occurs {n} times in "
                            f"{mutation.file} (expected once): update tools/semantic_mutations"
                            f".toml to the code as it is now\n  snippet: {mutation.original!r}")
    for t in mutation.tests:
        if not (Path(root) / t).is_file():
            raise StaleMutation(f"mutation {mutation.id!r}: its test file {t} does not exist")
    return text.replace(mutation.original, mutation.replacement)


def check(mutations, root=ROOT):
    """Every mutation applies to the tree at ``root``: the list of problems, [] when none."""
    problems = []
    for m in mutations:
        try:
            mutated_source(m, root)
        except StaleMutation as e:
            problems.append(str(e))
    return problems


def copy_tree(dest, root=ROOT, parts=COPIED):
    """The parts of the tree the tests need, copied to ``dest`` with their times (copy2)."""
    ignore = shutil.ignore_patterns("_build", "_generated", ".hypothesis", ".pytest_cache")
    for p in parts:
        src = Path(root) / p
        if src.is_dir():
            shutil.copytree(src, Path(dest) / p, ignore=ignore, symlinks=True)
        elif src.exists():
            shutil.copy2(src, Path(dest) / p)


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - .*)?$", re.M)


@dataclass(frozen=True)
class Outcome:
    caught: bool
    test: str               # the first test that failed (its node id), '' when none did
    seconds: float
    how: str                # 'failed', 'error', 'timeout' or 'passed'


def run_tests(tree, tests, timeout=TIMEOUT_S, python=sys.executable):
    """Run ``tests`` (paths under ``tree``) in one process, stopping at the first failure:
    pytest's exit status 1 is a catch by a test; 2 to 4 (collection or usage error), a crash
    or a timeout a catch too, said so in ``how``; 0 or 5 (nothing collected) is no catch."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
           "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [python, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:randomly",
           "-p", "no:cacheprovider", "-rfE", *tests]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(True, "", time.perf_counter() - t0, "timeout")
    seconds = time.perf_counter() - t0
    hit = _FAILED.search(p.stdout)
    test = hit.group(1) if hit else ""
    if p.returncode in (0, 5):
        return Outcome(False, "", seconds, "passed")
    return Outcome(True, test, seconds, "failed" if p.returncode == 1 else "error")


def imports_from(tree, package="harness", python=sys.executable):
    """Where ``import package`` resolves with ``tree`` first on the path (the copy, or the
    run would test the working tree)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([python, "-c", f"import {package}; print({package}.__file__)"], cwd=tree,
                         env=env, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()).resolve()


def plant(tree, mutation, root=ROOT):
    """Write the mutated file into ``tree`` (its bytecode dropped) and return a function that
    puts the original back."""
    text = mutated_source(mutation, root)
    dest = Path(tree) / mutation.file
    dest.write_text(text)
    for pyc in (dest.parent / "__pycache__").glob(dest.stem + ".cpython-*.pyc"):
        pyc.unlink()

    def restore():
        shutil.copy2(Path(root) / mutation.file, dest)
    return restore


def row(mutation, outcome):
    """The CSV row of a mutation's run: its note is the TOML's (a survivor's argument), else
    how it was caught."""
    note = mutation.note or ("" if outcome.how in ("failed", "passed") else
                             f"caught by a {outcome.how}, not by an assertion")
    return {"id": mutation.id, "file": mutation.file, "kind": mutation.kind,
            "caught": "yes" if outcome.caught else "no", "test": outcome.test,
            "seconds": f"{outcome.seconds:.1f}", "note": note}


def read_csv(path=CSV):
    if not Path(path).exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_csv(rows, path=CSV, order=None):
    """Write the rows (dicts of ``COLUMNS``), in ``order`` of ids where given."""
    if order is not None:
        rank = {k: i for i, k in enumerate(order)}
        rows = sorted(rows, key=lambda r: rank.get(r["id"], len(rank)))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in COLUMNS})


def campaign(mutations, root=ROOT, timeout=TIMEOUT_S, log=print, parts=COPIED,
             package="harness"):
    """Plant each mutation in one temporary copy of ``root`` (its ``parts``), run its tests,
    put the file back; a row per mutation (see ``row``). ``package`` is the one under test,
    which must import from the copy."""
    problems = check(mutations, root)
    if problems:
        raise StaleMutation("\n".join(problems))
    rows = []
    with tempfile.TemporaryDirectory(prefix="mutate-semantic-") as tree:
        copy_tree(tree, root, parts)
        where = imports_from(tree, package)
        if not where.is_relative_to(Path(tree).resolve()):
            raise RuntimeError(f"the copy imports {package} from {where}, not from {tree}: "
                               f"an installed {package} that is not editable shadows it")
        for i, m in enumerate(mutations, 1):
            restore = plant(tree, m, root)
            try:
                outcome = run_tests(tree, m.tests, timeout)
            finally:
                restore()
            rows.append(row(m, outcome))
            log(f"[{i}/{len(mutations)}] {m.id}: "
                + (f"caught by {outcome.test or outcome.how}" if outcome.caught else "SURVIVED")
                + f" ({outcome.seconds:.1f} s)")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="ID", help="run these mutations only; the "
                    "CSV's rows of the others are kept")
    ap.add_argument("--check", action="store_true", help="check that every mutation applies, "
                    "and run nothing")
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per mutation")
    a = ap.parse_args(argv)
    mutations = load()
    if a.check:
        problems = check(mutations)
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{len(mutations)} mutations, {len(problems)} stale")
        return 1 if problems else 0
    chosen = mutations
    if a.only:
        unknown = set(a.only) - {m.id for m in mutations}
        if unknown:
            ap.error(f"no mutation named {', '.join(sorted(unknown))}")
        chosen = [m for m in mutations if m.id in a.only]
    try:
        rows = campaign(chosen, timeout=a.timeout)
    except StaleMutation as e:
        print(e, file=sys.stderr)
        return 1
    ran = {r["id"] for r in rows}
    known = {m.id for m in mutations}
    kept = [r for r in read_csv(a.csv) if r["id"] not in ran and r["id"] in known]
    write_csv(kept + rows, a.csv, order=[m.id for m in mutations])
    every = read_csv(a.csv)
    caught = sum(r["caught"] == "yes" for r in every)
    print(f"semantic mutations caught: {caught}/{len(every)} = {100 * caught / len(every):.1f} % "
          f"(written to {a.csv.relative_to(ROOT) if a.csv.is_relative_to(ROOT) else a.csv})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
