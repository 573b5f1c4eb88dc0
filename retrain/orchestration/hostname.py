"""The host name Airflow records for a task and fetches its log from.

Airflow's `[core] hostname_callable`. The API server reads a running or finished task's
log from `http://<hostname>:<worker_log_server_port>/log/...`, so the name must be one the
API server can reach. Several workers on one machine, each in its own network namespace
(the local production-shaped stack), share the machine's name: each is started with
RETRAIN_HOSTNAME set to its own address. Elsewhere this is Airflow's default, the FQDN.
Stdlib only: every Airflow process imports it.
"""
from __future__ import annotations

import socket

HOSTNAME_ENV = "RETRAIN_HOSTNAME"


def task_host() -> str:
    from retrain.common.settings import settings
    return settings().hostname or socket.getfqdn()
