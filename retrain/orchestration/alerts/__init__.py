"""Alerts a person gets: a failed run, a quarantined span, days left out of a training
window (within the window policy or past it), a rejected (or, later, a
human-unapproved) candidate, a serving model past its age limit, a run that missed its
publishing deadline.

Delivered through Airflow's own notifiers, configured by one Airflow Connection
(`retrain_alerts`): SMTP (the smtp provider's SmtpNotifier) or a JSON webhook. No
connection: nothing is sent and nothing fails. `delivery` sends; `events` decides what each
kind says, from the run's folder and Airflow's context. An alert names runs, spans, rules
and figures, never the content of a data file.
"""
from retrain.orchestration.alerts.delivery import CONN_ID, KINDS, Alert, send
from retrain.orchestration.alerts.events import (candidate_rejected, deadline_missed,
                                                 on_task_failure, publish_deadline,
                                                 spans_quarantined, stale_model,
                                                 window_days_left_out)

__all__ = ["CONN_ID", "KINDS", "Alert", "send", "candidate_rejected", "deadline_missed",
           "on_task_failure", "publish_deadline", "spans_quarantined", "stale_model",
           "window_days_left_out"]
