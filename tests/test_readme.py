"""The README as a front door: its commands run, its example runs, its links resolve, and it
stays short. Its numbers live in the docs (tests/test_docs.py)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _text():
    return README.read_text(encoding="utf-8")


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", _text(), re.S)
    assert blocks, "the README has no python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})


def test_the_quickstart_commands_are_make_targets_and_ci_runs_the_test_one():
    quick = _text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make [\w-]+)", quick.split("```bash", 1)[1].split("```", 1)[0], re.M)
    assert commands == ["make report", "make test"]
    named = set(re.findall(r"`(make [\w-]+)`", quick))
    for command in sorted(set(commands) | named):
        dry = subprocess.run([*command.split(), "-n"], cwd=ROOT, capture_output=True, text=True)
        assert dry.returncode == 0, (command, dry.stderr)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^time make test$", ci, re.M) and re.search(r"^time make docs$", ci, re.M)


def test_every_link_and_picture_resolves_inside_the_repository():
    links = re.findall(r"\]\(([^)\s]+)\)", _text())
    assert links
    for link in links:
        assert not link.startswith(("http:", "https:", "/", "..")), link
        assert (ROOT / link.split("#", 1)[0]).is_file(), link


def test_the_readme_is_a_front_door():
    """At most 150 lines, the newcomer's path on its first screen (the two commands within
    its first 25 lines), and no path outside the repository."""
    lines = _text().splitlines()
    assert len(lines) <= 150
    first = "\n".join(lines[:25])
    assert "make report" in first and "make test" in first and "index.html" in first
    assert "../" not in _text()


def test_the_quickstarts_times_are_the_measured_ones():
    """"under 5 minutes" and "under 15 minutes": the slowest fresh-clone run of each command
    recorded in docs/timings.csv, which the docs' timings table shows."""
    import pandas as pd
    quick = " ".join(_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0].split())
    t = pd.read_csv(ROOT / "docs" / "timings.csv")
    report = t[t.command.str.startswith("make report") & t.start.str.contains("fresh clone")]
    tests = t[t.command.str.startswith("make test") & t.start.str.contains("fresh clone")]
    assert len(report) and len(tests)
    said = re.search(r"`make report` takes under (\d+) minutes", quick)
    assert said and report.seconds.max() < 60 * int(said[1])
    said = re.search(r"`make test` takes under (\d+) minutes", quick)
    assert said and tests.seconds.max() < 60 * int(said[1])
