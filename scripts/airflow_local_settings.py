"""Airflow local settings for retrain: the cluster policy in retrain/orchestration/airflow_policy.py.

Airflow imports `airflow_local_settings` from `$AIRFLOW_HOME/config/`; scripts/airflow-env.sh
links this file there for the project-local home. A deployment with settings of its own
adds the import below to its file instead.
"""
from retrain.orchestration.airflow_policy import task_instance_mutation_hook

__all__ = ["task_instance_mutation_hook"]
