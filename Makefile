# retrain developer entry points. Everything runs from the repo's virtualenv ($(VENV)).
# Airflow settings (project-local AIRFLOW_HOME, dags folder, SQLite, no examples, UI on
# 127.0.0.1:8080) live in one place: scripts/airflow-env.sh, sourced by the Airflow targets.

SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
PY := $(VENV)/bin/python
# Airflow's own environment (scheduler, dag-processor, triggerer, api-server, Celery
# workers of the production-shaped stack): requirements-airflow.lock, no TensorFlow,
# Beam or great-expectations; tasks hand their steps to $(PY) (RETRAIN_STEP_PYTHON).
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_PY := $(AIRFLOW_VENV)/bin/python
# uv lives in its own small venv: `uv pip sync` removes from $(VENV) whatever the lock
# does not list, uv and pip included.
UV_VENV ?= .uv-venv
UV := $(UV_VENV)/bin/uv
UV_VERSION := 0.13.9
# The manual's builder (mkdocs, requirements-docs.txt) in a small venv of its own.
DOCS_VENV ?= .venv-docs
DOCS_PY := $(DOCS_VENV)/bin/python
export VENV

AIRFLOW_ENV := source scripts/airflow-env.sh &&
# Stamp of the last `airflow db migrate` of the project-local home (airflow_home/ unless
# RETRAIN_AIRFLOW_HOME is set); redone whenever the venv is re-synced.
AIRFLOW_STAMP := $(shell source scripts/airflow-env.sh && echo "$$AIRFLOW_HOME")/.migrated

.PHONY: venv venv-airflow lint test test-fast test-server airflow-init ui ui-components demo reliability \
	stack-up stack-down lock-airflow docs

## venv: create $(VENV) if missing and sync it to requirements.lock (+ this repo, editable)
venv: $(VENV)/.synced

$(PY):
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)

$(UV):
	python3.11 -m venv $(UV_VENV) || python3 -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install -q uv==$(UV_VERSION)

# --compile-bytecode: the environment exports PYTHONDONTWRITEBYTECODE=1, so without .pyc
# files every process recompiles what it imports (`import airflow`: ~4.5 s instead of ~1.4 s).
# `uv pip sync` removes anything not in the lock, so a hand-installed package does not survive.
$(VENV)/.synced: requirements.lock requirements-nodeps.txt pyproject.toml | $(UV) $(PY)
	$(UV) pip sync --python $(PY) --compile-bytecode requirements.lock
	$(UV) pip install --python $(PY) --no-deps -r requirements-nodeps.txt
	$(UV) pip install --python $(PY) --no-deps -e .
	$(PY) -m retrain.common.docs_assets fetch \
	  || echo "WARNING: Data Docs assets not fetched from the npm registry: the docs will need the network to render" >&2
	touch $@

## venv-airflow: create $(AIRFLOW_VENV) and sync it to requirements-airflow.lock (+ this repo, no deps)
venv-airflow: $(AIRFLOW_VENV)/.synced

$(AIRFLOW_PY):
	python3.11 -m venv $(AIRFLOW_VENV) || python3 -m venv $(AIRFLOW_VENV)

$(AIRFLOW_VENV)/.synced: requirements-airflow.lock pyproject.toml | $(UV) $(AIRFLOW_PY)
	$(UV) pip sync --python $(AIRFLOW_PY) --compile-bytecode requirements-airflow.lock
	$(UV) pip install --python $(AIRFLOW_PY) --no-deps -e .
	touch $@

## lock-airflow: re-resolve requirements-airflow.lock from requirements-airflow.in (the ML lock as constraints)
lock-airflow: | $(UV)
	$(UV) pip compile requirements-airflow.in -c requirements.lock --python-version 3.11 \
	  -o requirements-airflow.lock

## lint: ruff and the import contracts (pyproject.toml: Airflow's side never imports step
##   code or a heavy library; step code never imports orchestration; no file circles is a test)
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

## docs: the manual (mkdocs.yml, docs/) into site/: docs/cli.md regenerated from the parsers
##   (scripts/gen_cli_reference.py) and the config schemas from the config models
##   (scripts/gen_config_schema.py), then `mkdocs build --strict` (a broken link or anchor fails);
##   mkdocs from requirements-docs.txt in $(DOCS_VENV), created if missing
docs: venv $(DOCS_VENV)/.synced
	$(PY) scripts/gen_cli_reference.py
	$(PY) scripts/gen_config_schema.py
	$(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

$(DOCS_PY):
	python3.11 -m venv $(DOCS_VENV) || python3 -m venv $(DOCS_VENV)

$(DOCS_VENV)/.synced: requirements-docs.txt | $(UV) $(DOCS_PY)
	$(UV) pip sync --python $(DOCS_PY) requirements-docs.txt
	touch $@

## test: lint, the fast lane, then the rest of the suite (tests/integration), on
## TEST_WORKERS processes (pytest-xdist). Each file stays on one worker (--dist loadfile),
## so a module's fixture (the stack of the UI test, a file's Airflow runs) is built once;
## TEST_WORKERS=0 runs everything in-process. A failing fast lane stops before the rest.
TEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile
test: venv venv-airflow lint
	$(PYTEST) --durations=10 tests/unit
	$(PYTEST) --durations=30 tests/integration

## test-fast: the fast lane for development: lint and tests/unit (every module's logic,
## real SavedModels and small real jobs where a unit needs one; no Airflow DAG runs, no
## clusters, no browser)
test-fast: venv lint
	$(PYTEST) --durations=10 tests/unit

## test-server: only the Airflow UI test on the production-shaped stack (root: PostgreSQL,
## Celery, two worker hosts; headless chromium): trigger, logs, the Retrain tab, a 3-day
## backfill, the text DAG, both hosts' logs, no TensorFlow in Airflow (also part of `make test`)
test-server: venv venv-airflow
	$(PY) -m pytest -q -m airflow_server tests

## stack-up: the production-shaped stack (retrain/orchestration/stack.py; root): PostgreSQL + Redis (installed
##   from Debian's packages where missing), Airflow on Celery, two worker hosts; ARGS="--api-port 8081"
stack-up: venv venv-airflow
	$(AIRFLOW_PY) -m retrain.orchestration.stack up --ml-python $(abspath $(PY)) $(ARGS)

## stack-down: stop everything stack-up started, by PID (ARGS="--purge" also drops its state and DB)
stack-down:
	$(AIRFLOW_PY) -m retrain.orchestration.stack down $(ARGS)

## airflow-init: (re)migrate the project-local Airflow metadata DB (SQLite) and create the pools
airflow-init: venv
	$(AIRFLOW_ENV) mkdir -p "$$AIRFLOW_HOME" && airflow db migrate \
	  && airflow pools import scripts/pools.json && touch "$$AIRFLOW_HOME/.migrated"

$(AIRFLOW_STAMP): $(VENV)/.synced scripts/pools.json
	$(MAKE) airflow-init

## ui: Airflow UI + REST API on http://127.0.0.1:8080 (user admin, password printed), foreground;
##   api-server, scheduler, dag-processor, triggerer, all listening on 127.0.0.1 only
ui: $(AIRFLOW_STAMP)
	scripts/airflow-ui.sh

## ui-components: same, but only api-server + scheduler + dag-processor (no triggerer)
ui-components: $(AIRFLOW_STAMP)
	scripts/airflow-ui.sh components

## demo: end-to-end demo (retrain.orchestration.demo); extra arguments via ARGS="..."
demo: $(AIRFLOW_STAMP)
	$(AIRFLOW_ENV) $(PY) -m retrain.orchestration.demo $(ARGS)

## reliability: bad-input cases + 32 random SIGKILLs on both families (bench/reliability.py, about 20 min); ARGS="--only 'ctr.*'"
reliability: venv
	$(PY) bench/reliability.py $(ARGS)
