# Two commands from a fresh clone (Python 3.11+):
#   make report   install into .venv and write a report under reports/<date-time>/ (every
#                 section at fewer points; make full-report for the full sweeps)
#   make test     install the test extras into .venv and run the tests on every core
# make docs builds the documentation site into docs/_build/html.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPORT_ARGS ?=

.PHONY: report full-report quick-report test docs bench-check bench-gate docs-figures clean mutate mutate-semantic

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# PyTorch is an optional reference and peer, JAX an optional peer; without them those tests skip.
	$(BIN)/python -m pip install --quiet -e '.[torch]' || echo "the torch extra is not installable here: its tests skip locally and fail under HARNESS_REQUIRE_OPTIONAL=1 (as CI sets)"
	$(BIN)/python -m pip install --quiet -e '.[jax]' || echo "the jax extra is not installable here: its tests skip locally and fail under HARNESS_REQUIRE_OPTIONAL=1 (as CI sets)"
	touch $@

$(VENV)/.installed-docs: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

# the newcomer's first command: a complete report, every section at fewer points
report: $(VENV)/.installed
	$(BIN)/harness report --quick $(REPORT_ARGS)

quick-report: report

full-report: $(VENV)/.installed
	$(BIN)/harness report $(REPORT_ARGS)

# The documentation site, offline, warnings as errors: the tables are generated from the
# committed CSVs as the build starts (docs/_ext/harness_docs.py), then every page is checked
# for a resource it would fetch from another host.
docs: $(VENV)/.installed-docs
	rm -rf docs/_build docs/_generated
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html
	$(BIN)/python docs/_ext/harness_docs.py --check-offline docs/_build/html

# On every core (pytest-xdist), a test module's tests on one worker (--dist loadscope), so that
# a module's expensive fixture (a whole quick report in tests/test_report.py) is built once.
# PYTEST_ARGS: more arguments, e.g. PYTEST_ARGS='-n 0 -k lstm' for one process and a selection.
PYTEST_ARGS ?=
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n auto --dist loadscope $(PYTEST_ARGS)

# asv finds and can import every benchmark of both suites (each one's run at its smallest
# sizes is tests/test_benchmarks.py's, in make test)
bench-check: $(VENV)/.installed-test
	$(BIN)/asv machine --yes
	HARNESS_BENCH_SUITE=all $(BIN)/asv check -E existing

# The regression gate (tools/bench_gate.py): the working tree's kernels against BASE's, their
# instructions per call counted under Valgrind (tools/bench_count.py), then timed in
# interleaved paired rounds beside an A/A floor, and the tracked numbers exactly; exits 1 when
# something is flagged. GATE_ARGS: e.g. --rounds 25, --bench 'rnn', --json gate.json,
# --no-count (no Valgrind here).
BASE ?= HEAD~1
GATE_ARGS ?=
bench-gate: $(VENV)/.installed-test
	$(BIN)/python tools/bench_gate.py --base '$(BASE)' $(GATE_ARGS)

# The figures the README and the docs show, and the claims table's data, from a quick report
# made by the tool itself (then update docs/figures/claims.csv's row in docs/measurements.csv).
DOCS_FIGURES := decay schedule work attention_maps
# the data behind the claims page, kept beside the figures for tests/test_docs.py
DOCS_DATA := claims schedule depth decay_summary crossover wall_samples row_max row_max_lesson additive_routes attention_level clipping
docs-figures: $(VENV)/.installed
	rm -rf .docs-report
	$(BIN)/harness report --quick --out .docs-report
	mkdir -p docs/figures
	for f in $(DOCS_FIGURES); do cp .docs-report/$$f.png docs/figures/; done
	for f in $(DOCS_DATA); do cp .docs-report/$$f.csv docs/figures/; done
	rm -rf .docs-report

# Mutation testing of the analysers, scheduler, timing and crossover code, the report's
# captions and figures and the file writing ([tool.mutmut] in pyproject.toml); not on CI.
# A fresh run every time (mutants/ is rebuilt). Survivors: $(BIN)/mutmut results, and one
# mutant's change: $(BIN)/mutmut show <name>. MUTATE_JOBS: mutants run at once.
# mutmut forks each mutant's run from a process that has already run the kernels; GNU
# OpenMP, Numba's default threading layer here, kills a forked child that uses it again
# (SIGTERM, which mutmut files as "suspicious"), so the run takes Numba's fork-safe workqueue.
# PyTorch's OpenMP pool has the same flaw without a signal: a forked child that runs a torch
# peer waits forever, and mutmut files it as a "timeout" (caught) that caught nothing. One
# OpenMP thread makes no pool to inherit.
MUTATE_JOBS ?= 2
mutate: $(VENV)/.installed-test
	rm -rf mutants
	NUMBA_THREADING_LAYER=workqueue OMP_NUM_THREADS=1 $(BIN)/mutmut run --max-children $(MUTATE_JOBS)
	$(BIN)/mutmut export-cicd-stats
	$(BIN)/python -c "import json; s = json.load(open('mutants/mutmut-cicd-stats.json')); \
	caught = s['killed'] + s['timeout'] + s['segfault']; n = s['total'] - s['skipped']; \
	print(f\"mutation score {caught}/{n} = {100 * caught / n:.1f} % \
	(survived {s['survived']}, not reached by a test {s['no_tests']}, suspicious {s['suspicious']})\")"

# The semantic mutation campaign (tools/mutate_semantic.py): each hand-written bug of
# tools/semantic_mutations.toml planted alone in a temporary copy of the tree, the test files
# named for it run (-x, one process), and docs/semantic-mutations.csv rewritten with what caught
# it; not on CI (about 10 minutes on 2 cores). MUTATE_ARGS: e.g. --only ID ..., or --check.
MUTATE_ARGS ?=
mutate-semantic: $(VENV)/.installed-test
	$(BIN)/python tools/mutate_semantic.py $(MUTATE_ARGS)

clean:
	rm -rf $(VENV) .asv build dist *.egg-info docs/_build docs/_generated
