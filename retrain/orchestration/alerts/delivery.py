"""How an alert reaches a person: the Airflow Connection `retrain_alerts` picks the
notifier, so a deployment changes where alerts go in the Connections page, not in code.

- conn type `smtp` (or `email`): the smtp provider's SmtpNotifier, through that same
  connection (host, port, login, password, extra `from_email`, `disable_ssl`, ...); the
  recipients are the extra's `to` (an address, a comma-separated list or a JSON list).
- any other type (`generic`, `http`, `https`): a JSON POST (`WebhookNotifier`) to the
  connection's URL: the host field holding a whole URL, or host, port and schema (the
  path) of an `http`/`https` connection; a password is sent as a Bearer token, the extra's
  `headers` as headers.

No connection: nothing is sent and nothing fails (said once per process, at INFO). A
delivery that fails is logged as a WARNING naming the connection and the error type, never
the URL (a webhook URL often is the secret) and never raised: an alert must not fail the
task it reports on.
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import html
import json
import logging
import urllib.request
from typing import Any

from airflow.sdk import BaseNotifier

CONN_ID = "retrain_alerts"
# What went wrong, one word each (docs/alerts.md says what each carries).
KINDS = ("run_failed", "quarantined", "days_left_out", "rejected", "unapproved",
         "stale_model", "deadline_missed")
SMTP_TYPES = ("smtp", "email")

log = logging.getLogger("retrain.alerts")
_said_absent = False


@dataclasses.dataclass(frozen=True)
class Alert:
    """One alert: which run, which span, what kind and why (figures and names only)."""
    kind: str
    dag_id: str
    run_id: str
    span: str | None
    reason: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"alert kind {self.kind!r} is not one of {KINDS}")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self),
                "sent_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}

    def subject(self) -> str:
        return f"[retrain] {self.kind}: {self.dag_id} span {self.span or '-'}"

    def html(self) -> str:
        rows = [("kind", self.kind), ("dag", self.dag_id), ("run", self.run_id),
                ("span", self.span or "-"), ("reason", self.reason),
                *((k, json.dumps(v) if isinstance(v, (list, dict)) else str(v))
                  for k, v in self.details.items())]
        cells = "".join(f"<tr><th align='left'>{html.escape(k)}</th>"
                        f"<td>{html.escape(str(v))}</td></tr>" for k, v in rows)
        return f"<table>{cells}</table>"


class WebhookNotifier(BaseNotifier):
    """POST the alert as JSON (stdlib urllib: no HTTP provider is installed). Nothing is
    templated: the body is the alert as the context carries it."""

    template_fields = ()

    def __init__(self, url: str, headers: dict[str, str] | None = None,
                 timeout: float = 10.0, **kwargs):
        super().__init__(**kwargs)
        self.url, self.headers, self.timeout = url, dict(headers or {}), timeout

    def notify(self, context) -> None:
        body = json.dumps(context["retrain_alert"]).encode()
        request = urllib.request.Request(
            self.url, data=body, method="POST",
            headers={"Content-Type": "application/json", **self.headers})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()

    async def async_notify(self, context) -> None:
        await asyncio.to_thread(self.notify, context)


def _recipients(value) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    return [str(v).strip() for v in value or () if str(v).strip()]


def webhook_url(conn) -> str:
    """The connection's URL: a whole URL in the host field, else scheme://host:port/schema
    (the scheme from an http/https conn type, else https)."""
    host = (conn.host or "").strip()
    if "://" in host:
        return host
    if not host:
        raise ValueError(f"connection {conn.conn_id}: no host (the webhook's URL)")
    scheme = conn.conn_type if conn.conn_type in ("http", "https") else "https"
    port = f":{conn.port}" if conn.port else ""
    path = (conn.schema or "").strip("/")
    return f"{scheme}://{host}{port}/{path}"


def notifier_for(conn) -> BaseNotifier:
    """The Airflow notifier the connection describes (see the module docstring)."""
    extra = conn.extra_dejson
    if conn.conn_type in SMTP_TYPES:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        to = _recipients(extra.get("to"))
        if not to:
            raise ValueError(f"connection {conn.conn_id}: an smtp connection needs the "
                             "recipients in its extra, key \"to\"")
        return SmtpNotifier(to=to, smtp_conn_id=conn.conn_id,
                            subject="{{ retrain_alert_subject }}",
                            html_content="{{ retrain_alert_html }}")
    headers = dict(extra.get("headers") or {})
    if conn.password:
        headers.setdefault("Authorization", f"Bearer {conn.password}")
    return WebhookNotifier(webhook_url(conn), headers=headers,
                           timeout=float(extra.get("timeout", 10)))


def _connection():
    """The alerts connection, or None (absent: said once per process)."""
    global _said_absent
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return Connection.get(CONN_ID)
    except AirflowNotFoundException:
        if not _said_absent:
            log.info("no Airflow connection %s: alerts are not sent (docs/alerts.md)", CONN_ID)
            _said_absent = True
    except Exception as e:  # noqa: BLE001 - a secrets backend's own errors vary
        log.warning("alerts: connection %s could not be read (%s): alert not sent",
                    CONN_ID, type(e).__name__)
    return None


def send(alert: Alert, dag=None) -> bool:
    """Deliver one alert; True when it was handed to the receiver. Never raises."""
    conn = _connection()
    if conn is None:
        return False
    context = {"retrain_alert": alert.to_json(), "retrain_alert_subject": alert.subject(),
               "retrain_alert_html": alert.html()}
    if dag is not None:      # the DAG's own Jinja environment renders the SMTP template
        context["dag"] = dag
    try:
        notifier = notifier_for(conn)
    except ValueError as e:     # our own message: names the connection and the field
        log.warning("alert %s of run %s not sent: %s", alert.kind, alert.run_id, e)
        return False
    try:
        notifier(context)
    except Exception as e:  # noqa: BLE001 - a notifier's errors vary; the task goes on
        log.warning("alert %s of run %s not delivered through connection %s: %s",
                    alert.kind, alert.run_id, CONN_ID, type(e).__name__)
        return False
    log.info("alert %s of run %s (span %s) sent through connection %s", alert.kind,
             alert.run_id, alert.span, CONN_ID)
    return True
