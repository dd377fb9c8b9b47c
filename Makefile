# Two commands from a fresh clone (Python 3.11+):
#   make report   install into .venv and write a report under reports/<date-time>/
#   make test     install the test extras into .venv and run the tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPORT_ARGS ?=

.PHONY: report quick-report test bench-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# PyTorch is an optional reference and peer; without it those tests skip.
	$(BIN)/python -m pip install --quiet torch==2.13.0 || echo "torch==2.13.0 not installable here: its tests will skip"
	touch $@

report: $(VENV)/.installed
	$(BIN)/harness report $(REPORT_ARGS)

quick-report: $(VENV)/.installed
	$(BIN)/harness report --quick $(REPORT_ARGS)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

bench-check: $(VENV)/.installed-test
	$(BIN)/asv check -E existing
	$(BIN)/asv run --python=same --quick --dry-run --show-stderr

clean:
	rm -rf $(VENV) .asv build dist *.egg-info
