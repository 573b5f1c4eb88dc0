"""The Kubernetes manifests of the PS training, rendered (no cluster runs here: the
Kubernetes API is the one part we cannot have, so the rendered objects are checked)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from components.ctr.k8s import K8sSpec, render, run, to_yaml

TRAIN = {"preprocess_dir": "/var/retrain/runs/ctr/dt=2026-11-03/r/preprocess",
         "out_dir": "/var/retrain/runs/ctr/dt=2026-11-03/r/model", "epochs": 2}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
EXAMPLES = Path(__file__).resolve().parents[2] / "docker" / "k8s"


def _sane(doc: dict) -> None:
    assert doc["apiVersion"] and doc["kind"]
    assert DNS1123.match(doc["metadata"]["name"]) and len(doc["metadata"]["name"]) <= 63
    assert doc["metadata"]["namespace"] == "retrain"


def _pods(docs, role=None):
    return [d for d in docs if d["kind"] == "Pod"
            and (role is None or d["metadata"]["labels"]["retrain.io/role"] == role)]


def test_plain_pods_have_one_tf_config_each_and_gpus_only_on_workers():
    docs = yaml.safe_load_all(to_yaml(render(K8sSpec(name="ctr-2026-11-03", train=TRAIN,
                                                     num_ps=3, num_workers=4))))
    docs = list(docs)
    for d in docs:
        _sane(d)
    pods = _pods(docs)
    assert len(pods) == 1 + 3 + 4
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    seen = set()
    for pod in pods:
        c = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"]}
        cfg = json.loads(env["TF_CONFIG"])
        role, index = cfg["task"]["type"], cfg["task"]["index"]
        seen.add((role, index))
        assert pod["metadata"]["name"] == f"ctr-2026-11-03-{role}-{index}"
        assert len(cfg["cluster"]["ps"]) == 3 and len(cfg["cluster"]["worker"]) == 4
        assert len(cfg["cluster"]["chief"]) == 1
        # Every address is the DNS name of a Service selecting exactly this pod.
        host = cfg["cluster"][role][index]
        svc = services[host.split(".")[0]]
        assert svc["spec"]["selector"] == pod["metadata"]["labels"]
        assert svc["spec"]["clusterIP"] == "None"
        assert host.endswith(f":{svc['spec']['ports'][0]['port']}")
        limits = c["resources"]["limits"]
        if role == "worker":
            assert limits["nvidia.com/gpu"] == 1
            assert pod["spec"]["nodeSelector"] == {"retrain.io/pool": "gpu-training"}
            assert pod["spec"]["restartPolicy"] == "OnFailure"   # a dead worker comes back
            assert c["command"][-1] == "--serve"
        else:
            assert "nvidia.com/gpu" not in limits and "nodeSelector" not in pod["spec"]
        if role == "chief":
            assert c["command"][-2:] == ["--spec", "@/etc/retrain/train_spec.json"]
        if role == "ps":
            assert limits["memory"] == "32Gi" and c["command"][-1] == "--serve"
    assert seen == {("chief", 0)} | {("ps", i) for i in range(3)} | {("worker", i) for i in range(4)}
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert json.loads(config_map["data"]["train_spec.json"]) == TRAIN


def test_tfjob_has_the_three_replica_types():
    docs = render(K8sSpec(name="ctr-x", train=TRAIN, kind="tfjob", num_ps=2, num_workers=5,
                          worker_gpus=2))
    job = next(d for d in docs if d["kind"] == "TFJob")
    _sane(job)
    assert job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "PS": 2, "Worker": 5}
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert worker["name"] == "tensorflow"      # the container name the operator looks for
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 2
    for name in ("Chief", "PS"):
        c = replicas[name]["template"]["spec"]["containers"][0]
        assert "nvidia.com/gpu" not in c["resources"]["limits"]
        assert not any(e["name"] == "TF_CONFIG" for e in c["env"])  # the operator sets it


@pytest.mark.parametrize("bad, match", [
    ({"name": "CTR_bad"}, "DNS-1123"), ({"kind": "deployment"}, "kind"),
    ({"num_ps": 0}, "at least 1 ps"), ({"train": {"out_dir": "x"}}, "preprocess_dir")])
def test_bad_specs_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        render(K8sSpec(**{"name": "ctr", "train": TRAIN, **bad}))


def test_example_manifests_in_docker_k8s_are_current(tmp_path):
    for kind in ("pods", "tfjob"):
        example = EXAMPLES / f"ctr-ps-training-{kind}.yaml"
        spec = K8sSpec(name="ctr-2026-11-03", kind=kind, num_ps=2, num_workers=2, train={
            "preprocess_dir": "/var/retrain/runs/ctr/dt=2026-11-03/scheduled__2026-11-04/preprocess",
            "out_dir": "/var/retrain/runs/ctr/dt=2026-11-03/scheduled__2026-11-04/model"},
            out_file=str(tmp_path / f"{kind}.yaml"))
        run(spec)
        assert (tmp_path / f"{kind}.yaml").read_text() == example.read_text(), (
            f"regenerate {example} with python -m components.ctr.k8s")
