"""Render Kubernetes manifests for the parameter-server training of the CTR model.

Why: in production the same trainer (`components.ctr.ps_train`) runs as a cluster of
pods - parameter servers on CPU nodes, workers on a GPU node pool, the coordinator
(chief) - instead of local processes. This renders, from the same settings the DAG uses
(ps/worker counts, the trainer spec), either

- `kind="pods"`: plain Pods + headless Services, each pod with its own `TF_CONFIG`
  (addresses are the services' DNS names), restartPolicy OnFailure for workers (a killed
  worker comes back at the same address and the coordinator reschedules its work); or
- `kind="tfjob"`: a Kubeflow `TFJob` (kubeflow.org/v1), whose operator writes `TF_CONFIG`.

Both carry a NetworkPolicy that admits to the job's pods (chief, ps, workers) only the job's
own pods, on the gRPC port: TensorFlow's servers bind every address of their pod and have no
authentication, so without it any pod of the cluster could read or write the variables
mid-training. It needs a CNI that enforces NetworkPolicy (Calico, Cilium, ...).

The trainer spec goes into a ConfigMap mounted at /etc/retrain; artifacts (transformed
shards in, model and checkpoints out) live on a shared volume mounted at the same path as
RETRAIN_HOME. No Kubernetes cluster runs on the development machines: the output is
checked by tests (roles, TF_CONFIG, GPU resources, schema sanity), never applied here.

    python -m components.ctr.k8s --spec '{"name": "ctr-2026-11-03", "num_ps": 2,
        "num_workers": 4, "train": {"preprocess_dir": "...", "out_dir": "..."}}'
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

from retrain.common.step import main

PORT = 2222
SPEC_DIR = "/etc/retrain"
ROLES = ("chief", "ps", "worker")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass
class K8sSpec:
    name: str                          # job name (DNS-1123 label, e.g. ctr-2026-11-03)
    train: dict                        # components.ctr.ps_train.PsTrainSpec fields
    num_ps: int = 2
    num_workers: int = 2
    kind: str = "pods"                 # "pods" or "tfjob"
    namespace: str = "retrain"
    image: str = "retrain/trainer:latest"
    worker_gpus: int = 1               # nvidia.com/gpu per worker
    gpu_node_selector: dict = dataclasses.field(
        default_factory=lambda: {"retrain.io/pool": "gpu-training"})
    ps_cpu: str = "4"
    ps_memory: str = "32Gi"            # the per-ps limit the embedding shards must fit in
    worker_cpu: str = "8"
    worker_memory: str = "16Gi"
    chief_cpu: str = "2"
    chief_memory: str = "8Gi"
    artifact_claim: str = "retrain-artifacts"   # PersistentVolumeClaim holding RETRAIN_HOME
    artifact_mount: str = "/var/retrain"
    out_file: str | None = None        # write the YAML here (default: returned only)


def _check(spec: K8sSpec) -> None:
    if spec.kind not in ("pods", "tfjob"):
        raise ValueError(f"kind must be 'pods' or 'tfjob', got {spec.kind!r}")
    if not _DNS1123.match(spec.name) or len(spec.name) > 40:
        raise ValueError(f"name {spec.name!r} is not a DNS-1123 label of at most 40 chars")
    if spec.num_ps < 1 or spec.num_workers < 1:
        raise ValueError("need at least 1 ps and 1 worker")
    if spec.worker_gpus < 0:
        raise ValueError("worker_gpus must be >= 0")
    for key in ("preprocess_dir", "out_dir"):
        if key not in spec.train:
            raise ValueError(f"train spec needs {key!r}")


def _host(spec: K8sSpec, role: str, index: int) -> str:
    return f"{spec.name}-{role}-{index}.{spec.namespace}.svc:{PORT}"


def cluster_def(spec: K8sSpec) -> dict:
    return {"chief": [_host(spec, "chief", 0)],
            "ps": [_host(spec, "ps", i) for i in range(spec.num_ps)],
            "worker": [_host(spec, "worker", i) for i in range(spec.num_workers)]}


def _container(spec: K8sSpec, role: str, env: list[dict]) -> dict:
    if role == "chief":
        args = ["python", "-m", "components.ctr.ps_train", "--spec", f"@{SPEC_DIR}/train_spec.json"]
    else:
        args = ["python", "-m", "components.ctr.ps_train", "--serve"]
    cpu, mem = {"chief": (spec.chief_cpu, spec.chief_memory), "ps": (spec.ps_cpu, spec.ps_memory),
                "worker": (spec.worker_cpu, spec.worker_memory)}[role]
    limits = {"cpu": cpu, "memory": mem}
    if role == "worker" and spec.worker_gpus:
        limits["nvidia.com/gpu"] = spec.worker_gpus
    return {
        "name": "tensorflow",              # the container name TFJob expects
        "image": spec.image,
        "command": args,
        "env": env + [{"name": "RETRAIN_HOME", "value": spec.artifact_mount},
                      {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}],
        "ports": [{"name": "tfjob-port", "containerPort": PORT}],
        "resources": {"requests": dict(limits), "limits": limits},
        "volumeMounts": [{"name": "artifacts", "mountPath": spec.artifact_mount},
                         {"name": "train-spec", "mountPath": SPEC_DIR, "readOnly": True}],
    }


def _pod_spec(spec: K8sSpec, role: str, env: list[dict], restart: str) -> dict:
    pod = {
        "restartPolicy": restart,
        "containers": [_container(spec, role, env)],
        "volumes": [{"name": "artifacts",
                     "persistentVolumeClaim": {"claimName": spec.artifact_claim}},
                    {"name": "train-spec", "configMap": {"name": f"{spec.name}-spec"}}],
    }
    if role == "worker" and spec.worker_gpus:
        pod["nodeSelector"] = dict(spec.gpu_node_selector)
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                               "effect": "NoSchedule"}]
    return pod


def _labels(spec: K8sSpec, role: str | None = None, index: int | None = None) -> dict:
    labels = {"app.kubernetes.io/name": "retrain-ctr-trainer", "retrain.io/job": spec.name}
    if role is not None:
        labels["retrain.io/role"] = role
    if index is not None:
        labels["retrain.io/index"] = str(index)
    return labels


RESTART = {"chief": "Never", "ps": "Never", "worker": "OnFailure"}


def network_policy(spec: K8sSpec) -> dict:
    """Ingress to every pod of the job from the job's own pods alone, on the gRPC port (a
    pod a policy selects refuses all ingress the policy does not admit). The selector is
    the job's labels, which the plain pods and the TFJob's replica templates both carry."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{spec.name}-cluster-only", "namespace": spec.namespace,
                         "labels": _labels(spec)},
            "spec": {"podSelector": {"matchLabels": _labels(spec)},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": _labels(spec)}}],
                                  "ports": [{"protocol": "TCP", "port": PORT}]}]}}


def render(spec: K8sSpec) -> list[dict]:
    """The manifests as a list of Kubernetes objects (dicts)."""
    _check(spec)
    # The chief's checkpoints and export go to the shared volume like every other path.
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"{spec.name}-spec", "namespace": spec.namespace,
                               "labels": _labels(spec)},
                  "data": {"train_spec.json": json.dumps(spec.train, indent=2, sort_keys=True)}}
    docs = [config_map, network_policy(spec)]
    counts = {"chief": 1, "ps": spec.num_ps, "worker": spec.num_workers}
    if spec.kind == "tfjob":
        replica_names = {"chief": "Chief", "ps": "PS", "worker": "Worker"}
        docs.append({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": _labels(spec)},
            "spec": {
                "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
                "tfReplicaSpecs": {
                    replica_names[role]: {
                        "replicas": counts[role], "restartPolicy": RESTART[role],
                        "template": {"metadata": {"labels": _labels(spec, role)},
                                     "spec": _pod_spec(spec, role, [], RESTART[role])}}
                    for role in ROLES}}})
        return docs
    cluster = cluster_def(spec)
    for role in ROLES:
        for i in range(counts[role]):
            name = f"{spec.name}-{role}-{i}"
            tf_config = json.dumps({"cluster": cluster, "task": {"type": role, "index": i}},
                                   sort_keys=True)
            docs.append({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": name, "namespace": spec.namespace,
                                      "labels": _labels(spec, role, i)},
                         "spec": {"clusterIP": "None", "selector": _labels(spec, role, i),
                                  "ports": [{"name": "grpc", "port": PORT, "targetPort": PORT}]}})
            docs.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": spec.namespace,
                                      "labels": _labels(spec, role, i)},
                         "spec": _pod_spec(spec, role, [{"name": "TF_CONFIG", "value": tf_config}],
                                           RESTART[role])})
    return docs


def to_yaml(docs: list[dict]) -> str:
    import yaml
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def run(spec: K8sSpec) -> dict:
    """Render the manifests; write them to out_file if given."""
    docs = render(spec)
    text = to_yaml(docs)
    if spec.out_file:
        path = Path(spec.out_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    kinds: dict[str, int] = {}
    for d in docs:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    return {"out_file": spec.out_file, "objects": kinds, "yaml": None if spec.out_file else text}


if __name__ == "__main__":
    sys.exit(main(K8sSpec, run, description=(
        "Render Kubernetes manifests (plain pods + services with TF_CONFIG, or a Kubeflow "
        "TFJob) for the CTR parameter-server trainer. Nothing is applied.")))
