"""Local receivers for the alert tests (imported by name: tests/ is on sys.path): a JSON
webhook and an SMTP sink on 127.0.0.1, each in a daemon thread, and the Airflow connection
(AIRFLOW_CONN_RETRAIN_ALERTS, JSON form) that points the alerts at them."""
from __future__ import annotations

import contextlib
import email
import http.server
import json
import socketserver
import threading


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


@contextlib.contextmanager
def _serving(handler):
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def webhook():
    """Yields (port, received): each POST's JSON body, with its headers under "_headers"."""
    received: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append({**body, "_headers": dict(self.headers), "_path": self.path})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    with _serving(Handler) as server:
        yield server.server_address[1], received


@contextlib.contextmanager
def smtp_sink():
    """Yields (port, received): each message as an email.message.Message (a minimal SMTP
    dialogue: enough for smtplib without TLS or login)."""
    received: list = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            self.wfile.write(b"220 sink ESMTP\r\n")
            while line := self.rfile.readline():
                verb = line.decode(errors="replace").strip().split(" ")[0].upper()
                if verb == "DATA":
                    self.wfile.write(b"354 end with .\r\n")
                    lines = []
                    while (data := self.rfile.readline()) not in (b".\r\n", b""):
                        lines.append(data[1:] if data.startswith(b"..") else data)
                    received.append(email.message_from_bytes(b"".join(lines)))
                    self.wfile.write(b"250 queued\r\n")
                elif verb == "QUIT":
                    self.wfile.write(b"221 bye\r\n")
                    return
                else:               # EHLO, HELO, MAIL, RCPT, RSET, NOOP
                    self.wfile.write(b"250 ok\r\n")

    with _serving(Handler) as server:
        yield server.server_address[1], received


def webhook_connection(port: int, **extra_fields) -> str:
    return json.dumps({"conn_type": "generic", "host": f"http://127.0.0.1:{port}/alerts",
                       **extra_fields})


def smtp_connection(port: int, to: str = "oncall@example.com") -> str:
    return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": port,
                       "extra": {"to": to, "from_email": "retrain@example.com",
                                 "disable_ssl": True, "disable_tls": True,
                                 "retry_limit": 0, "timeout": 5}})


def html_of(message) -> str:
    """The HTML body of a received alert email."""
    for part in message.walk():
        if part.get_content_type() == "text/html":
            return part.get_payload(decode=True).decode()
    raise AssertionError("no text/html part")
