# Conveyor developer tasks (GNU make).
#
#   make install   create .venv and install Conveyor with its dev tools (re-runs only when
#                  pyproject.toml changes)
#   make test      ruff + mypy --strict + pytest
#   make lint      ruff + mypy --strict
#   make demo      run `conveyor demo`
#   make bench     the full benchmark suite (about an hour): bench/results/*.json and summary.md
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

.PHONY: install .venv demo test lint bench clean

install .venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; Conveyor needs Python >= 3.11 (set PYTHON=...)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "error: Conveyor needs Python >= 3.11, but $(PYTHON) is $$($(PYTHON) -V 2>&1)." >&2; \
		echo "       Install a newer Python and run e.g. 'make install PYTHON=python3.12'." >&2; \
		exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/conveyor demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache
	find src tests -depth \( -name __pycache__ -o -name '*.egg-info' \) -type d -exec rm -rf {} +
