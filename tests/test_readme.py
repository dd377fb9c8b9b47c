"""The README's API example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})


def test_readme_quickstart_is_the_ci_command():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quickstart", 1)[1].split("##", 1)[0]
    assert "make report" in quick and "make test" in quick
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci
