# Conveyor developer tasks (GNU make).
#
#   make install   create .venv and install Conveyor with its dev tools and the web and otel
#                  extras (re-runs only when pyproject.toml changes). The browser tests also
#                  need Debian's chromium at /usr/bin/chromium (apt-get install chromium).
#   make test      ruff + mypy --strict + pytest
#   make lint      ruff + mypy --strict + the import contract (tests/test_layers.py)
#   make demo      run `conveyor demo`
#   make bench     the full benchmark suite (about an hour), the database probes and the
#                  py-spy profiles: bench/results/*.json, profiles/, then summary.md and the
#                  README's performance table, every row stamped with its commit
#   make chaos     the fault-injection suite in its long mode, soaks included (about 35 min); regenerates
#                  docs/reliability.md from tests/chaos/results/*.json (each with its commit)
#   make clean     delete .venv, caches and build output
#
# PYTHON picks the interpreter for the venv (>= 3.11), e.g. `make install PYTHON=python3.12`.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install .venv demo test lint bench chaos clean

install .venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; Conveyor needs Python >= 3.11 (set PYTHON=...)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "error: Conveyor needs Python >= 3.11, but $(PYTHON) is $$($(PYTHON) -V 2>&1)." >&2; \
		echo "       Install a newer Python and run e.g. 'make install PYTHON=python3.12'." >&2; \
		exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev,web,otel]'
	@touch $@

demo: $(STAMP)
	$(BIN)/conveyor demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict
	$(BIN)/pytest -q -p no:cacheprovider tests/test_layers.py

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench --quiet-wait 120
	$(BIN)/python -m bench.probes
	$(BIN)/python -m bench.profile
	$(BIN)/python -m bench --summary-only

chaos: $(STAMP)
	rm -rf tests/chaos/results
	status=0; CONVEYOR_CHAOS=long CONVEYOR_CHAOS_RESULTS=tests/chaos/results \
		$(BIN)/pytest tests/chaos tests/test_storage_model.py || status=$$?; \
	$(BIN)/python -m tests.chaos.report tests/chaos/results docs/reliability.md; exit $$status

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache
	find src tests -depth \( -name __pycache__ -o -name '*.egg-info' \) -type d -exec rm -rf {} +
