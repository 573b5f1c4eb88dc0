# retrain developer entry points. Everything runs from the repo's virtualenv ($(VENV)).
# Airflow settings (project-local AIRFLOW_HOME, dags folder, SQLite, no examples, UI on
# 127.0.0.1:8080) live in one place: scripts/airflow-env.sh, sourced by the Airflow targets.

SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
PY := $(VENV)/bin/python
# uv lives in its own small venv: `uv pip sync` removes from $(VENV) whatever the lock
# does not list, uv and pip included.
UV_VENV ?= .uv-venv
UV := $(UV_VENV)/bin/uv
UV_VERSION := 0.13.9
export VENV

AIRFLOW_ENV := source scripts/airflow-env.sh &&
# Stamp of the last `airflow db migrate` of the project-local home (airflow_home/ unless
# RETRAIN_AIRFLOW_HOME is set); redone whenever the venv is re-synced.
AIRFLOW_STAMP := $(shell source scripts/airflow-env.sh && echo "$$AIRFLOW_HOME")/.migrated

.PHONY: venv test test-server airflow-init ui ui-components demo reliability

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
	$(PY) -m components.common.docs_assets fetch \
	  || echo "WARNING: Data Docs assets not fetched from the npm registry: the docs will need the network to render" >&2
	touch $@

## test: the whole test suite
test: venv
	$(PY) -m pytest -q tests

## test-server: only the Airflow UI test (scheduler + API server on 127.0.0.1, headless chromium):
## trigger, logs, the Retrain tab, a 2-day backfill (about 7 min; also part of `make test`)
test-server: venv
	$(PY) -m pytest -q -m airflow_server tests

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

## demo: end-to-end demo (retrain.demo); extra arguments via ARGS="..."
demo: $(AIRFLOW_STAMP)
	$(AIRFLOW_ENV) $(PY) -m retrain.demo $(ARGS)

## reliability: bad-input cases + 32 random SIGKILLs on both families (bench/reliability.py, about 20 min); ARGS="--only 'ctr.*'"
reliability: venv
	$(PY) bench/reliability.py $(ARGS)
