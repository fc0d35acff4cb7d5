# Conveyor developer tasks (GNU make).
#
#   make install   create .venv and install Conveyor with its dev tools and the postgres, web
#                  and otel extras (re-runs only when pyproject.toml changes). The browser tests also
#                  need Debian's chromium at /usr/bin/chromium (apt-get install chromium),
#                  the PgBouncer tests Debian's pgbouncer (apt-get install pgbouncer; they
#                  start their own in transaction mode, no service needed). .ci/run
#                  installs both when missing.
#   make test      ruff + mypy --strict + pytest, then the Django suite (tests/contrib/django)
#                  and mypy --strict of conveyor.contrib.django in .venv-django, where the
#                  worker's tests also run again on Python >= 3.12 (its eager executions). pytest runs
#                  on PYTEST_WORKERS pytest-xdist workers (default 2; 0 runs it in one
#                  process) with --dist loadgroup: each worker has its own Postgres database;
#                  tests/conftest.py marks xdist groups (modules sharing an expensive fixture,
#                  the heavy chaos scenarios), each run on one worker (pytest < 9: README)
#   make django-venv  create .venv-django (Python >= 3.12, which Django 6 needs) with the
#                  dev, django, postgres and web extras (re-runs only when pyproject.toml changes)
#   make test-django  only the Django part of `make test`
#   make lint      ruff + mypy --strict + the import contract (tests/test_layers.py)
#   make demo      run `conveyor demo`; installs only what it runs (Conveyor's core, into
#                  .venv), not the dev tools, which `make install`/`make test` add
#   make bench     the full benchmark suite (about an hour), the database probes and the
#                  py-spy profiles, the capacity figures (bench/capacity.py, for docs/scaling.md):
#                  bench/results/*.json, capacity.json, profiles/, then summary.md and the
#                  README's performance table, every row stamped with its commit
#   make bench-quick  the README's performance table in at most 10 minutes (bench/quick.py):
#                  both backends at smaller sizes, medians of 3, the floors measured in the
#                  same run, pgqueuer beside them; writes bench/results/quick.json and renders
#                  the README's bench-quick section from it (the main table stays `make bench`'s).
#                  Before landing a hot-path change, `python -m bench.ab BASE [CASES]` runs
#                  interleaved A/B rounds of two commits and prints the ratio for the commit
#                  message (`python -m bench.ab --help` lists the cases)
#   make bench-peers  Conveyor beside the Python queues of issue 29 in one run (bench/peers/:
#                  pgqueuer, procrastinate, chancy, celery, dramatiq, rq, huey, saq), each in a
#                  venv of its own from PyPI (cached in ~/.cache/conveyor-bench-peers), on the
#                  local PostgreSQL and Redis; writes bench/results/peers.json and prints the
#                  table (`python -m bench.peers --render bench/results/peers.json` prints
#                  the README's section from it)
#   The three bench targets run in .venv-bench, made from BENCH_PYTHON: by default the
#                  newest CPython >= 3.12 found (as DJANGO_PYTHON is found), else PYTHON.
#                  Every system of a run (the peers' venvs too) runs on that interpreter, and
#                  each result file names it. Why not 3.11: from 3.12 on, a handler that
#                  does not await runs to its end where the worker starts it (an eager
#                  Task), which 3.11 cannot do; the benchmark measures that path
#   make chaos     the fault-injection suite in its long mode, soaks included (about 35 min); regenerates
#                  docs/reliability.md from tests/chaos/results/*.json (each with its commit)
#   make clean     delete .venv, caches and build output
#
# PYTHON picks the interpreter for the venv (>= 3.11), e.g. `make install PYTHON=python3.12`.
# DJANGO_PYTHON picks the one for .venv-django (>= 3.12); by default the first that runs of
# python3.13, python3.12 on PATH, then the newest >= 3.12 under pyenv's versions directory
# ($PYENV_ROOT or ~/.pyenv). Without one, the Django suite is skipped with a loud banner;
# with CONVEYOR_REQUIRE_DJANGO=1 (CI, .ci/run) that is an error. The main suite (.venv,
# Python 3.11) never runs tests/contrib/django: it skips that directory with one line.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The core package alone (what `make demo` runs), then everything `make test` needs.
CORE_STAMP := $(VENV)/.installed-core
STAMP := $(VENV)/.installed

DJANGO_VENV := .venv-django
DJANGO_BIN := $(DJANGO_VENV)/bin
DJANGO_STAMP := $(DJANGO_VENV)/.installed
# The first interpreter that really runs and is >= 3.12 (pyenv shims exist for versions
# that are not active, and fail when called, so each candidate is run, not just found).
ifeq ($(origin DJANGO_PYTHON),undefined)
DJANGO_PYTHON := $(shell for py in python3.13 python3.12 \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.*/bin/python3 2>/dev/null | sort -rV); do \
	$$py -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 \
	&& { command -v $$py; break; }; done)
endif

# The benchmarks' interpreter and venv (see bench-quick above).
BENCH_VENV := .venv-bench
BENCH_BIN := $(BENCH_VENV)/bin
BENCH_STAMP := $(BENCH_VENV)/.installed
ifeq ($(origin BENCH_PYTHON),undefined)
BENCH_PYTHON := $(or $(DJANGO_PYTHON),$(PYTHON))
endif

.PHONY: install .venv demo test lint bench bench-quick bench-peers chaos clean django-venv test-django print-django-python

install .venv: $(STAMP)

$(CORE_STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; Conveyor needs Python >= 3.11 (set PYTHON=...)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "error: Conveyor needs Python >= 3.11, but $(PYTHON) is $$($(PYTHON) -V 2>&1)." >&2; \
		echo "       Install a newer Python and run e.g. 'make install PYTHON=python3.12'." >&2; \
		exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e .
	@touch $@

$(STAMP): $(CORE_STAMP) pyproject.toml
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev,postgres,web,otel]'
	@touch $@

demo: $(CORE_STAMP)
	$(BIN)/conveyor demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict
	$(BIN)/pytest -q -p no:cacheprovider tests/test_layers.py

# Workers for the main suite: its tests mostly wait on PostgreSQL and subprocesses.
PYTEST_WORKERS ?= 2

test: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup
	$(MAKE) --no-print-directory test-django

# Django 6 needs Python >= 3.12, so its suite runs in a venv of its own.
django-venv: $(DJANGO_STAMP)

print-django-python:
	@echo "$(DJANGO_PYTHON)"

$(DJANGO_STAMP): pyproject.toml
	@test -n "$(DJANGO_PYTHON)" || { echo "error: no Python >= 3.12 found for .venv-django (set DJANGO_PYTHON=...)" >&2; exit 1; }
	$(DJANGO_PYTHON) -m venv $(DJANGO_VENV)
	$(DJANGO_BIN)/python -m pip install --upgrade pip
	$(DJANGO_BIN)/python -m pip install -e '.[dev,django,postgres,web]'
	@touch $@

ifeq ($(strip $(DJANGO_PYTHON)),)
test-django:
	@echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!! DJANGO TESTS SKIPPED !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	@echo "No Python >= 3.12 found (Django 6 needs it): tests/contrib/django did not run." >&2
	@echo "Fix: install Python 3.12+ (python3.12 on PATH, or pyenv), or set DJANGO_PYTHON=..." >&2
	@echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!! DJANGO TESTS SKIPPED !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
	@case "$${CONVEYOR_REQUIRE_DJANGO:-}" in 1|true|yes|on) \
		echo "error: CONVEYOR_REQUIRE_DJANGO is set: a missing Python >= 3.12 fails the run" >&2; \
		exit 1;; esac
else
test-django: $(DJANGO_STAMP)
	$(DJANGO_BIN)/ruff check src/conveyor/contrib/django tests/contrib/django examples/django
	@# Files, not directories: [tool.mypy] excludes these from the main (3.11) run.
	$(DJANGO_BIN)/mypy --strict --python-version 3.12 \
		$$(find src/conveyor/contrib/django tests/contrib/django examples/django -name '*.py' | sort)
	$(DJANGO_BIN)/pytest -p no:cacheprovider tests/contrib/django
	@# The eager execution path (Python >= 3.12: a handler that does not await runs where
	@# the worker starts it), which the main suite on 3.11 cannot reach and the benchmarks
	@# (.venv-bench) measure.
	$(DJANGO_BIN)/pytest -p no:cacheprovider tests/test_worker_eager.py tests/test_worker.py
endif

$(BENCH_STAMP): pyproject.toml
	$(BENCH_PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_BIN)/python -m pip install --upgrade pip
	$(BENCH_BIN)/python -m pip install -e '.[dev,postgres,web,otel]'
	@touch $@

bench: $(BENCH_STAMP)
	$(BENCH_BIN)/python -m bench --quiet-wait 120
	$(BENCH_BIN)/python -m bench.probes
	$(BENCH_BIN)/python -m bench.capacity
	$(BENCH_BIN)/python -m bench.profile
	$(BENCH_BIN)/python -m bench --summary-only
	$(BENCH_BIN)/python -m bench.read_replica

bench-quick: $(BENCH_STAMP)
	$(BENCH_BIN)/python -m bench.quick --save bench/results/quick.json
	$(BENCH_BIN)/python -m bench --summary-only

bench-peers: $(BENCH_STAMP)
	$(BENCH_BIN)/python -m bench.peers --out bench/results/peers.json
	$(BENCH_BIN)/python -m bench --summary-only

chaos: $(STAMP)
	rm -rf tests/chaos/results
	status=0; CONVEYOR_CHAOS=long CONVEYOR_CHAOS_RESULTS=tests/chaos/results \
		$(BIN)/pytest tests/chaos tests/test_storage_model.py || status=$$?; \
	$(BIN)/python -m tests.chaos.report tests/chaos/results docs/reliability.md; exit $$status

clean:
	rm -rf $(VENV) $(DJANGO_VENV) $(BENCH_VENV) build dist .mypy_cache .ruff_cache .pytest_cache
	find src tests -depth \( -name __pycache__ -o -name '*.egg-info' \) -type d -exec rm -rf {} +
