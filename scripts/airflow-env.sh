# shellcheck shell=bash
# The one place for the local Airflow settings; sourced by the Makefile targets
# (`source scripts/airflow-env.sh`) and by hand (`. scripts/airflow-env.sh; airflow dags list`).
#
# Why explicit env vars instead of airflow.cfg: Airflow 3 writes a full airflow.cfg into
# AIRFLOW_HOME on first start, with dags_folder=$AIRFLOW_HOME/dags and load_examples=True.
# AIRFLOW__SECTION__KEY variables override that file, so the settings below hold whatever
# the generated file says. Production sets its own values (Postgres, Celery/Kubernetes).

_retrain_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"

# Project-local home (gitignored). RETRAIN_AIRFLOW_HOME overrides it; an AIRFLOW_HOME
# inherited from the shell is deliberately ignored so `make ui` never uses ~/airflow.
export AIRFLOW_HOME="${RETRAIN_AIRFLOW_HOME:-$_retrain_root/airflow_home}"
export AIRFLOW__CORE__DAGS_FOLDER="$_retrain_root/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# The metadata DB and the executor: SQLite and the LocalExecutor unless the caller set
# others (the production-shaped stack, `retrain stack up`, sets PostgreSQL + Celery; its
# DB URL comes through the _CMD variant, read from a secrets file, never an env value).
if [ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD:-}" ]; then
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
fi
# SQLite: a writer waits up to 30 s for the lock instead of sqlite3's 5 s (why:
# retrain/orchestration/sqlite_db.py).
case "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}" in
  sqlite*)
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS:-retrain.orchestration.sqlite_db.CONNECT_ARGS}"
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC:-retrain.orchestration.sqlite_db.CONNECT_ARGS}" ;;
esac
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}"
# The name a task's host is recorded under and its log fetched from (retrain/orchestration/hostname.py:
# $RETRAIN_HOSTNAME, else the FQDN): workers sharing a machine each get their own.
export AIRFLOW__CORE__HOSTNAME_CALLABLE=retrain.orchestration.hostname.task_host
# LocalExecutor starts up to `parallelism` worker processes (~130 MB each; the default 32
# meant 32 workers on this 2-core machine).
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
# UI / REST API only on loopback (the default host is 0.0.0.0).
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"
export AIRFLOW__API__PORT="${AIRFLOW__API__PORT:-8080}"
# The scheduler's optional health-check server ([scheduler] enable_health_check, off by
# default) would bind 0.0.0.0 too. The log servers have no host setting: scripts/airflow-ui.sh
# runs the scheduler and triggerer with --skip-serve-logs instead.
export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST=127.0.0.1
# Task processes talk to the API server's execution API; its default URL assumes port
# 8080 on localhost, so derive it from the host and port above.
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-http://${AIRFLOW__API__HOST}:${AIRFLOW__API__PORT}/execution/}"
# SimpleAuthManager: one fixed admin user; its password lives in this JSON file
# ({"admin": "<password>"}); scripts/airflow-ui.sh writes it before the first start.
export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
# `admin:admin` is user:role (one user `admin` with the admin role), not a password.
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
# OpenLineage (apache-airflow-providers-openlineage): every task's START/COMPLETE event with
# its input and output artifacts. Default: appended as JSON lines to a local file;
# RETRAIN_OPENLINEAGE_URL (e.g. a Marquez at http://127.0.0.1:5000) sends them there instead.
# An AIRFLOW__OPENLINEAGE__TRANSPORT set by the caller wins over both.
export AIRFLOW__OPENLINEAGE__NAMESPACE="${AIRFLOW__OPENLINEAGE__NAMESPACE:-retrain}"
if [ -z "${AIRFLOW__OPENLINEAGE__TRANSPORT:-}" ]; then
  if [ -n "${RETRAIN_OPENLINEAGE_URL:-}" ]; then
    export AIRFLOW__OPENLINEAGE__TRANSPORT="{\"type\": \"http\", \"url\": \"$RETRAIN_OPENLINEAGE_URL\"}"
  else
    mkdir -p "$AIRFLOW_HOME/openlineage"
    export AIRFLOW__OPENLINEAGE__TRANSPORT="{\"type\": \"file\", \"log_file_path\": \"$AIRFLOW_HOME/openlineage/events.jsonl\", \"append\": true}"
  fi
fi
# Cluster policy (backfills' heavy tasks in their own pool): Airflow imports
# airflow_local_settings from $AIRFLOW_HOME/config.
mkdir -p "$AIRFLOW_HOME/config"
ln -sf "$_retrain_root/scripts/airflow_local_settings.py" "$AIRFLOW_HOME/config/airflow_local_settings.py"
# scripts/airflow-ui.sh starts the components as `airflow <component>` looked up on PATH.
case "${VENV:-.venv}" in
  /*) export PATH="${VENV}/bin:$PATH" ;;
  *) export PATH="$_retrain_root/${VENV:-.venv}/bin:$PATH" ;;
esac

unset _retrain_root
