#!/usr/bin/env bash
# Serve the Airflow UI + REST API on http://127.0.0.1:8080 with the repo's dags/, in the
# foreground (Ctrl-C stops every component, in about 5-15 s). Login: user `admin`, password kept
# in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated (mode 600): the script prints
# that file's path, never the password (it would land in CI and terminal logs).
#
#   scripts/airflow-ui.sh              # api-server, scheduler, dag-processor and triggerer
#   scripts/airflow-ui.sh components   # only api-server + scheduler + dag-processor
#
# Every listening socket is on 127.0.0.1: the api-server binds $AIRFLOW__API__HOST, and the
# scheduler and triggerer run with --skip-serve-logs. Their log servers (ports 8793/8794)
# bind every interface and are not needed here: with the LocalExecutor on one machine the
# api-server reads task logs from the local files. This is also why the script starts the
# components itself instead of `airflow standalone`, which cannot pass that flag.
# (`standalone` is still accepted as a name for the default.)
#
# RETRAIN_ADMIN_PASSWORD=... sets the password; otherwise one is generated on first start
# and reused. Expects a migrated DB (`make airflow-init`). Every RETRAIN_* setting is checked
# first (`retrain settings check`): a bad one stops the script before Airflow starts,
# named with its rule. `scripts/airflow-ui.sh --check-only` stops after the checks and the
# password file (what tests/unit/test_ui_secrets.py runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/airflow-env.sh
source scripts/airflow-env.sh
# The text form's default on the demo's data: the config sized for it (the full
# reviews.yaml stays one text_config away; set RETRAIN_TEXT_CONFIG to choose another).
export RETRAIN_TEXT_CONFIG="${RETRAIN_TEXT_CONFIG:-$PWD/components/text/configs/reviews-demo.yaml}"

python -m retrain.orchestration.settings_cli check --quiet

mkdir -p "$AIRFLOW_HOME"
pwfile="$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
if [[ -n "${RETRAIN_ADMIN_PASSWORD:-}" || ! -s "$pwfile" ]]; then
  # SimpleAuthManager reads {"user": "password"} from this file and only generates a
  # password for users missing from it, so a pre-written file fixes the admin password.
  (umask 077; python - "$pwfile" <<'PY'
import json, os, secrets, sys
pw = os.environ.get("RETRAIN_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"admin": pw}) + "\n")
PY
  )
fi
chmod 600 "$pwfile"     # an older file may have been made with a wider mode
echo "Airflow UI: http://${AIRFLOW__API__HOST}:${AIRFLOW__API__PORT}/  user: admin  password: in $pwfile (mode 600)"
echo "  (the UI answers after about 30-60 s)"
echo "  REST token: python3 -c 'import json,sys; print(json.dumps({\"username\": \"admin\", \"password\": json.load(open(sys.argv[1]))[\"admin\"]}))' \\"
echo "      '$pwfile' | curl -s -X POST http://${AIRFLOW__API__HOST}:${AIRFLOW__API__PORT}/auth/token \\"
echo "      -H 'Content-Type: application/json' -d @-"
if [[ "${1:-}" == "--check-only" ]]; then
  exit 0
fi

# Ctrl-C must stop every component. It does not if SIGINT reaches them directly: on
# SIGINT the scheduler waits forever for its LocalExecutor workers, which ignore SIGINT
# (seen with 3.3.2; `airflow standalone` then hangs at "Shutting down components").
# SIGTERM to the whole process group stops everything in about 5-15 s. So the components
# run in their own session/process group (setsid: the terminal's SIGINT does not reach
# them) and this script turns Ctrl-C / SIGTERM into SIGTERM for that group.
leader=""
stop_group() {
  trap - INT TERM EXIT
  local group="$leader"
  leader=""
  [[ -n "$group" ]] || return 0
  kill -TERM -- "-$group" 2>/dev/null || return 0
  echo "airflow-ui: stopping Airflow (process group $group)..." >&2
  for _ in $(seq 60); do
    # zombies (stat Z) are already dead; anything else is still shutting down
    ps -o stat= -s "$group" 2>/dev/null | grep -qv '^Z' || return 0
    sleep 1
  done
  echo "airflow-ui: still running after 60 s, sending SIGKILL" >&2
  kill -KILL -- "-$group" 2>/dev/null || true
}
run_group() {
  setsid "$@" &
  leader=$!
  trap stop_group INT TERM EXIT
  wait "$leader" || true
  stop_group
}

case "${1:-all}" in
  all|standalone) components=(api-server scheduler dag-processor triggerer) ;;
  components) components=(api-server scheduler dag-processor) ;;
  *)
    echo "usage: $0 [all|components]" >&2
    exit 2
    ;;
esac
# Exits (and so stops the rest) as soon as one component exits.
run_group bash -c '
  for c in "$@"; do
    case "$c" in
      api-server) airflow api-server --host "$AIRFLOW__API__HOST" --port "$AIRFLOW__API__PORT" & ;;
      scheduler | triggerer) airflow "$c" --skip-serve-logs & ;;
      *) airflow "$c" & ;;
    esac
  done
  wait -n' airflow-ui "${components[@]}"
