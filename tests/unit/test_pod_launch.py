"""The `kubernetes` step launcher, against a stand-in for the Kubernetes API server (none
can run here). The stand-in checks every pod it is sent against Kubernetes' own Pod schema
(kubernetes-validate, as test_k8s_manifests.py) and runs it for real: the container's
command starts here, with this environment's python as the ML image's, so the step is the
real one. What it cannot show: scheduling, images, volumes, a real API server's auth."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from retrain.orchestration import launch, pod_launch
from test_k8s_manifests import _check_k8s

REPO = Path(__file__).resolve().parents[2]


class StandInApi:
    """POST / GET / DELETE pods and a following log, for one namespace."""

    def __init__(self):
        self.pods: dict[str, dict] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.deleted: list[str] = []
        self.problems: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                pod = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.problems += _check_k8s(pod)
                name = pod["metadata"]["name"]
                c = pod["spec"]["containers"][0]
                cmd = [sys.executable if c["command"][0] == "python" else c["command"][0],
                       *c["command"][1:]]
                env = {e["name"]: e["value"] for e in c["env"]}
                api.pods[name] = pod
                api.procs[name] = subprocess.Popen(
                    cmd, cwd=REPO, env={"PATH": "/usr/bin:/bin", **env}, text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                self._send(201, pod)

            def do_GET(self):
                name = self.path.split("/pods/")[1].split("/")[0].split("?")[0]
                proc = api.procs[name]
                if "/log" in self.path:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    for line in proc.stdout:
                        self.wfile.write(line.encode())
                        self.wfile.flush()
                    self.close_connection = True
                    return
                code = proc.poll()
                phase = "Running" if code is None else ("Succeeded" if code == 0 else "Failed")
                self._send(200, {**api.pods[name], "status": {"phase": phase}})

            def do_DELETE(self):
                name = self.path.split("/pods/")[1].split("?")[0]
                api.procs[name].kill()
                api.procs[name].wait()
                api.deleted.append(name)
                self._send(200, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()


@pytest.fixture
def kube(tmp_path, monkeypatch):
    api = StandInApi()
    monkeypatch.setenv(launch.LAUNCHER_ENV, "kubernetes")
    monkeypatch.setenv("RETRAIN_K8S_API", api.url)
    monkeypatch.setenv("RETRAIN_K8S_NAMESPACE", "retrain")
    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RETRAIN_STEP_NODE_SELECTOR", '{"retrain.io/pool": "gpu-training"}')
    monkeypatch.setenv("RETRAIN_STEP_RESOURCES", '{"limits": {"nvidia.com/gpu": 1}}')
    yield api
    api.close()


def test_a_step_runs_as_a_pod_of_the_ml_image(kube, tmp_path, caplog):
    home = tmp_path / "home"
    with caplog.at_level(logging.INFO, logger="retrain.launch"):
        result = launch.run_step("components.ctr.generate", {
            "out_root": str(home), "start": "2026-11-01", "days": 1, "rows_per_day": 300,
            "n_users": 50, "n_items": 40, "n_categories": 5})
    assert result["days"][0]["rows"] == 300                       # the real step's result
    assert (home / "raw" / "ctr" / "dt=2026-11-01" / "_SUCCESS").exists()
    (name,) = kube.pods
    pod = kube.pods[name]
    assert not kube.problems, kube.problems                          # a valid Pod
    c = pod["spec"]["containers"][0]
    assert c["image"] == "retrain/ml:latest" and c["command"][:3] == [
        "python", "-m", "components.ctr.generate"]
    assert c["volumeMounts"] == [{"name": "artifacts", "mountPath": str(home)}]
    assert pod["spec"]["nodeSelector"] == {"retrain.io/pool": "gpu-training"}
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["spec"]["restartPolicy"] == "Never"
    # Only what the step needs: never the worker's environment (Airflow's secrets).
    assert {e["name"] for e in c["env"]} == {"RETRAIN_HOME", "TF_CPP_MIN_LOG_LEVEL"}
    assert kube.deleted == [name]                                    # cleaned up
    assert not list((home / pod_launch.RESULTS).iterdir())
    assert any(r.getMessage().startswith("[generate] ") for r in caplog.records)


def test_a_failed_step_pod_fails_the_task_with_the_steps_own_error(kube, tmp_path):
    with pytest.raises(launch.StepFailed, match="does not exist|not found|No such|missing"):
        launch.run_step("components.ctr.validate", {"span_dir": str(tmp_path / "nope"),
                                                 "out_dir": str(tmp_path / "out")})
    assert len(kube.deleted) == 1


def test_an_unknown_launcher_is_refused(monkeypatch):
    monkeypatch.setenv(launch.LAUNCHER_ENV, "ssh")
    with pytest.raises(ValueError, match="RETRAIN_STEP_LAUNCHER=ssh"):
        launch.run_step("components.ctr.generate", {})


def test_the_launchers_rbac_is_valid_and_grants_what_it_calls():
    import yaml
    docs = list(yaml.safe_load_all(
        (REPO / "docker" / "k8s" / "step-launcher-rbac.yaml").read_text()))
    assert not [p for d in docs for p in _check_k8s(d)]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    # KubeApi's calls: POST, GET, DELETE pods; GET pods/log.
    assert {("pods", "create"), ("pods", "get"), ("pods", "delete"), ("pods/log", "get")} <= granted
