"""Run a step as a pod of the ML image: the production form of the step launcher.

`RETRAIN_STEP_LAUNCHER=kubernetes` (default `subprocess`: `retrain.orchestration.launch`) makes
every task start its step (`python -m components.<step> --spec ...`, the same entry point)
as a Kubernetes pod of the ML image, so Airflow's workers hold no ML library at all and a
step gets the node, CPU, memory and GPU its pod asks for. The pod mounts the artifact
volume at RETRAIN_HOME (the same path everywhere), writes its result JSON there, and its
output streams into the task log at each line's own level. If the task dies or is
stopped, the pod is deleted, which ends the step. Stdlib only (the Kubernetes REST API
over HTTPS with the service account's token), so the Airflow image needs no client.

Settings (docs/configuration.md): RETRAIN_STEP_IMAGE, RETRAIN_K8S_NAMESPACE,
RETRAIN_ARTIFACT_CLAIM, RETRAIN_STEP_NODE_SELECTOR (JSON), RETRAIN_STEP_RESOURCES (JSON),
RETRAIN_K8S_API (default: the in-cluster API server).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from retrain.common.errors import BadDataFailed, StepFailed
from retrain.orchestration.step_logs import LineLevels

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
RESULTS = ".step-results"        # under RETRAIN_HOME: where pods leave their result JSON
log = logging.getLogger("retrain.launch")


@dataclasses.dataclass
class PodSettings:
    image: str = "retrain/ml:latest"
    namespace: str = "retrain"
    artifact_claim: str = "retrain-artifacts"
    home: str = "/var/retrain"             # RETRAIN_HOME, mounted at the same path
    api: str = "https://kubernetes.default.svc"
    token_file: str = str(SA_DIR / "token")
    ca_file: str = str(SA_DIR / "ca.crt")
    node_selector: dict = dataclasses.field(default_factory=dict)
    resources: dict = dataclasses.field(default_factory=dict)
    poll_seconds: float = 2.0

    @classmethod
    def from_env(cls) -> "PodSettings":
        from retrain.common.settings import settings
        s, d = settings(), cls()
        ns_file = SA_DIR / "namespace"
        return cls(
            image=s.step_image or d.image,
            namespace=s.k8s_namespace or (
                ns_file.read_text().strip() if ns_file.exists() else d.namespace),
            artifact_claim=s.artifact_claim or d.artifact_claim,
            home=s.home or d.home, api=s.k8s_api or d.api,
            node_selector=dict(s.step_node_selector), resources=dict(s.step_resources))


def pod_name(module: str) -> str:
    step = re.sub(r"[^a-z0-9]+", "-", module.rsplit(".", 1)[-1].lower()).strip("-")
    return f"retrain-{step}-{uuid.uuid4().hex[:10]}"


def result_path(settings: PodSettings, name: str) -> str:
    """Where pod `name` leaves its result JSON: on the artifact volume, which the task's
    worker mounts at the same path."""
    return f"{settings.home}/{RESULTS}/{name}.json"


def pod_manifest(module: str, spec: dict, name: str, settings: PodSettings,
                 env: dict | None = None) -> dict:
    """The step's pod: the ML image running the step's entry point, the artifact volume at
    RETRAIN_HOME, no restart (Airflow's retries decide), and only the variables the step
    needs: never the worker's own environment, which holds Airflow's secrets."""
    step_env = {"RETRAIN_HOME": settings.home, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    container = {
        "name": "step", "image": settings.image,
        "command": ["python", "-m", module, "--spec", json.dumps(spec, default=str),
                    "--result-file", result_path(settings, name)],
        "env": [{"name": k, "value": str(v)} for k, v in sorted(step_env.items())],
        "volumeMounts": [{"name": "artifacts", "mountPath": settings.home}],
    }
    if settings.resources:
        container["resources"] = settings.resources
    pod_spec = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "artifacts",
                     "persistentVolumeClaim": {"claimName": settings.artifact_claim}}],
    }
    if settings.node_selector:
        pod_spec["nodeSelector"] = settings.node_selector
        if any("gpu" in k or "gpu" in str(v) for k, v in settings.node_selector.items()):
            pod_spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                        "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": settings.namespace,
                         "labels": {"app.kubernetes.io/name": "retrain-step",
                                    "retrain.io/step": module.rsplit(".", 1)[-1]}},
            "spec": pod_spec}


class KubeApi:
    """The few calls a step launcher needs, over the REST API."""

    def __init__(self, settings: PodSettings):
        self.base = settings.api.rstrip("/")
        self.ns = settings.namespace
        token = Path(settings.token_file)
        self.headers = {"Authorization": f"Bearer {token.read_text().strip()}"} \
            if token.exists() else {}
        self.ctx = None
        if self.base.startswith("https://"):
            self.ctx = ssl.create_default_context(
                cafile=settings.ca_file if Path(settings.ca_file).exists() else None)

    def _req(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        req = urllib.request.Request(
            f"{self.base}/api/v1/namespaces/{self.ns}/pods{path}", method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={**self.headers, "Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=timeout, context=self.ctx)

    def create(self, manifest: dict) -> None:
        self._req("POST", "", manifest).close()

    def phase(self, name: str) -> str:
        with self._req("GET", f"/{name}") as r:
            return json.loads(r.read())["status"].get("phase", "Pending")

    def follow_log(self, name: str):
        """The container's output, line by line, until it ends."""
        with self._req("GET", f"/{name}/log?follow=true", timeout=24 * 3600) as r:
            for raw in r:
                yield raw.decode(errors="replace").rstrip("\n")

    def delete(self, name: str) -> None:
        try:
            self._req("DELETE", f"/{name}?gracePeriodSeconds=10").close()
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


def run_step_in_pod(module: str, spec: dict, env: dict | None = None,
                    settings: PodSettings | None = None) -> dict:
    from retrain.common.errors import BAD_DATA

    settings = settings or PodSettings.from_env()
    api, name = KubeApi(settings), pod_name(module)
    step = module.rsplit(".", 1)[-1]
    result_file = Path(result_path(settings, name))
    result_file.parent.mkdir(parents=True, exist_ok=True)
    log.info("running %s as pod %s/%s (image %s)", module, settings.namespace, name,
             settings.image)
    api.create(pod_manifest(module, spec, name, settings, env))
    try:
        phase = api.phase(name)
        while phase == "Pending":
            time.sleep(settings.poll_seconds)
            phase = api.phase(name)
        level_of = LineLevels()
        for line in api.follow_log(name):
            log.log(level_of(line), "[%s] %s", step, line)
        while phase not in ("Succeeded", "Failed"):
            time.sleep(settings.poll_seconds)
            phase = api.phase(name)
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        if phase != "Succeeded":
            msg = result.get("error") or f"pod {name} ended {phase}"
            failure = BadDataFailed if result.get("error_kind") == BAD_DATA else StepFailed
            raise failure(f"step {module} failed: {msg}")
        return result
    finally:
        # However the task ends (done, failed, killed), the pod goes: nothing keeps
        # writing into the run after its task.
        api.delete(name)
        result_file.unlink(missing_ok=True)
