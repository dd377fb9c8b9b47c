"""The mutmut mutant patterns of the functions changed since a commit, for ``mutmut run``.

    python tools/mutmut_changed.py BASE            # one fnmatch pattern a line
    mutmut run $(python tools/mutmut_changed.py BASE)

A recorded full run (docs/mutation-score.json) stays true for every function whose code has
not changed since it; only the changed ones need their mutants run again. A function is
changed when its AST (comments and blank lines aside) differs from BASE's, or it is new. The
modules are pyproject's ``[tool.mutmut] only_mutate``; the names follow mutmut 3's:
``pkg.mod.x_func__mutmut_*`` for a module's function, ``pkg.mod.xǁClassǁmethod__mutmut_*``
for a method (a nested function is mutated as part of the one it is in).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(root=ROOT):
    """The files ``only_mutate`` names, relative to the root, sorted."""
    with open(root / "pyproject.toml", "rb") as f:
        globs = tomllib.load(f)["tool"]["mutmut"]["only_mutate"]
    return sorted({p.relative_to(root).as_posix() for g in globs for p in root.glob(g)})


def functions(source):
    """{mutmut prefix without the module: 'x_f' or 'xǁCǁm': the AST dump} of a module."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[f"x_{node.name}"] = ast.dump(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"xǁ{node.name}ǁ{item.name}"] = ast.dump(item)
    return out


def changed(base, root=ROOT):
    """The mutant patterns of every function of ``modules()`` new or changed since ``base``."""
    patterns = []
    for path in modules(root):
        head = functions((root / path).read_text())
        shown = subprocess.run(["git", "show", f"{base}:{path}"], cwd=root, capture_output=True,
                               text=True)
        old = functions(shown.stdout) if shown.returncode == 0 else {}
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        patterns += [f"{module}.{name}__mutmut_*" for name, dump in head.items()
                     if old.get(name) != dump]
    return patterns


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python tools/mutmut_changed.py BASE (a commit)")
    check = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args[0]}^{{commit}}"],
                           cwd=ROOT, capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"BASE must be a commit of this repository, got {args[0]!r}")
    print("\n".join(changed(args[0])))


if __name__ == "__main__":
    main()
