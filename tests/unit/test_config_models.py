"""Both families' configs load through pydantic models (issue 47.2): a bad key or type is
refused naming the file, the key's place and what the key takes, never quoting the file's
values (rule 22); and the move to pydantic changed no bundled config's fingerprint (what
lineage and the preprocess cache key on)."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from components.text import task_config as T
from retrain.common.errors import BadData, ConfigError

# Recorded before the configs moved to pydantic (the hand parser's results).
TEXT_FINGERPRINTS = {
    "reviews.yaml": "8c70e86ce1382ed9c220538934c84fd891024260f432c970ecf6ae461cbbfb43",
    "reviews-demo.yaml": "fed66f0ab59ebffff0bc24d8036e1c4c37faafe5990e2938a19966e6f2a4e98c",
}
PLANTED = "PLANTEDVALUE77"


def _text_fingerprint(cfg: T.TextConfig, name: str, leave_out: tuple[str, ...] = ()) -> str:
    """The resolved config a preprocess run writes, in canonical JSON."""
    resolved = {k: v for k, v in T.resolved(cfg).items() if k not in leave_out}
    canonical = json.dumps({**resolved, "source": name}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def test_bundled_text_configs_keep_their_fingerprints():
    found = {p.name: _text_fingerprint(T.load(p), p.name)
             for p in sorted(T.PACKAGED_DIR.glob("*.yaml"))}
    assert found["reviews.yaml"] == TEXT_FINGERPRINTS["reviews.yaml"]
    # The demo config's one change since: `epochs: 2` (a key at its default, 3, is left
    # out of the resolved config, so every other config keeps its fingerprint).
    demo = T.load(T.PACKAGED_DIR / "reviews-demo.yaml")
    assert found["reviews-demo.yaml"] != TEXT_FINGERPRINTS["reviews-demo.yaml"]
    assert T.resolved(demo)["epochs"] == 2 and "epochs" not in T.resolved(T.default())
    assert _text_fingerprint(demo, "reviews-demo.yaml", leave_out=("epochs",)) \
        == TEXT_FINGERPRINTS["reviews-demo.yaml"]


def _text_error(tmp_path, body: str) -> str:
    path = tmp_path / "tasks.yaml"
    path.write_text("text: body\ntasks:\n  queue: {labels: [a, b]}\n" + body)
    with pytest.raises(ConfigError) as e:
        T.load(path)
    assert isinstance(e.value, BadData) and e.value.__cause__ is None
    msg = str(e.value)
    assert str(path) in msg, msg
    return msg


def test_text_unknown_key_names_file_key_and_allowed_keys(tmp_path):
    msg = _text_error(tmp_path, "gate: {min_aux: 0.5}\n")
    assert "gate.min_aux: unknown key (allowed: " in msg and "min_auc" in msg, msg
    msg = _text_error(tmp_path, "tasks_extra: 1\n")
    assert "tasks_extra: unknown key (allowed: bucket_boundaries, checkpoint" in msg, msg


@pytest.mark.parametrize("body, line", [
    ("max_seq_length: long\n", "max_seq_length: must be an integer in [8, 512], got a string"),
    ("gate: {beat_classical_baseline: 1}\n",
     "gate.beat_classical_baseline: must be true or false, got an integer"),
    ("gate: {min_eval_rows: 2.5}\n",
     "gate.min_eval_rows: must be an integer >= 0, got a number with a fraction"),
    ("validation: [1, 2]\n", "validation: must be a mapping, got a list of 2 item(s)"),
    ("bucket_boundaries: [16, x]\n", "bucket_boundaries[1]: must be an integer > 0, got a "
                                     "string"),
    ("class_weighting: 3\n", "class_weighting: must be one of 'balanced', 'sqrt', 'none', "
                             "got <an integer>"),
])
def test_text_wrong_type_names_key_and_expected_type(tmp_path, body, line):
    assert line in _text_error(tmp_path, body)


@pytest.mark.parametrize("body, line", [
    ("validation: {max_duplicate_rate: 1.5}\n",
     "validation.max_duplicate_rate: must be a number in [0, 1], got 1.5"),
    ("max_seq_length: 4096\n", "max_seq_length: must be an integer in [8, 512], got 4096"),
    ("gate: {min_auc: -0.1}\n", "gate.min_auc: must be a number >= 0, got -0.1"),
    ("validation: {min_rows: 900, max_rows: 100}\n",
     "validation.min_rows: 900 is above max_rows 100"),
    ("validation: {min_chars: 30000}\n",         # above the default max_chars
     "validation.min_chars: 30000 is above max_chars 20000"),
])
def test_text_out_of_range_names_key_and_rule(tmp_path, body, line):
    assert line in _text_error(tmp_path, body)


def test_text_errors_never_echo_a_value(tmp_path):
    msg = _text_error(tmp_path, f"""
gate: {{min_auc: "{PLANTED}", max_auc_drop: [{PLANTED}]}}
class_weighting: "{PLANTED} weights"
max_seq_length: "{PLANTED}"
validation: {{max_rows: {{a: {PLANTED}}}}}
description: [{PLANTED}]
""")
    assert "gate.min_auc: must be a number >= 0, got a string" in msg, msg
    assert "class_weighting: must be one of" in msg and "description: must be a string" in msg
    assert PLANTED not in msg, msg


def test_text_settings_stay_dataclasses_that_revalidate():
    cfg = T.default()
    gate = dataclasses.replace(cfg.gate, min_eval_rows=7)        # as the evaluate step does
    assert gate.min_eval_rows == 7 and gate.min_auc == cfg.gate.min_auc
    with pytest.raises(ValueError):
        dataclasses.replace(cfg.gate, min_eval_rows=-1)
    exp = T.from_dict({"text": "t", "tasks": {"q": {"labels": ["a", "b"]}},
                       "gate": {"max_auc_drop": "5e-3"}})       # YAML 1.1 reads it as text
    assert exp.gate.max_auc_drop == 0.005


# ------------------------------------------------------------------------ CTR feature config

from components.ctr import feature_config as fc  # noqa: E402

CTR_FINGERPRINTS = {
    "example_user_logs.yaml":
        "dd5162127cd046c191b3ade0000a22f2e611b82771be398477fdf492dc9f016b",
    "generated.yaml": "fb3350ed50fb40f35348a51013e193b365a53d563e79e4ee957367fae9504a2c",
}


def test_bundled_feature_configs_keep_their_fingerprints():
    found = {p.name: fc.load(p).fingerprint() for p in sorted(fc.PACKAGED_DIR.glob("*.yaml"))}
    assert found == CTR_FINGERPRINTS
    for p in fc.PACKAGED_DIR.glob("*.yaml"):          # and through the resolved JSON form
        assert fc.from_dict(fc.load(p).to_dict()).fingerprint() == CTR_FINGERPRINTS[p.name]


def _ctr_error(tmp_path, mutate) -> str:
    import yaml
    d = fc.load(fc.PACKAGED_DIR / "example_user_logs.yaml").to_dict()
    mutate(d)
    path = tmp_path / "features.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError) as e:
        fc.load(path)
    assert isinstance(e.value, BadData) and e.value.__cause__ is None
    msg = str(e.value)
    assert msg.startswith(f"invalid feature config {path}: "), msg
    return msg


@pytest.mark.parametrize("mutate, line", [
    (lambda d: d["gate"].update(min_eval_rowz=5) if "gate" in d else d.update(
        gate={"min_eval_rowz": 5}),
     "gate.min_eval_rowz: unknown key (allowed: min_eval_positives, min_eval_rows, refuse_confidently_worse)"),
    (lambda d: d["crosses"][0].update(buckets=4),
     "crosses[0] 'country_x_device'.buckets: unknown key (allowed: description, features"),
    (lambda d: d["validation"].update(drift={"country": {"metric": "js", "max": 0.2,
                                                         "level": "error"}}),
     "validation.drift.country.level: unknown key (allowed: max, metric, severity)"),
])
def test_ctr_unknown_key_names_file_and_key(tmp_path, mutate, line):
    assert line in _ctr_error(tmp_path, mutate)


@pytest.mark.parametrize("mutate, line", [
    (lambda d: d["features"][2].update(top_k="many"),
     "features[2] 'country'.top_k: must be an integer >= 1, got a string"),
    (lambda d: d.update(slices="country"), "slices: must be a list of strings, got a string"),
    (lambda d: d["crosses"][0].update(hash_buckets=2.5),
     "crosses[0] 'country_x_device'.hash_buckets: must be an integer >= 1, got a number "
     "with a fraction"),
    (lambda d: d.update(gate={"min_eval_rows": True}),
     "gate.min_eval_rows: must be an integer >= 0, got a boolean"),
    (lambda d: d["model"].update(id_l2={"ad_id": "high"}),
     "model.id_l2.ad_id: must be a number >= 0, got a string"),
    (lambda d: d["validation"].update(ranges={"age": "0-120"}),
     "validation.ranges.age: must be [min, max] (numbers, one may be null), got a string"),
])
def test_ctr_wrong_type_names_key_and_expected_type(tmp_path, mutate, line):
    assert line in _ctr_error(tmp_path, mutate)


@pytest.mark.parametrize("mutate, line", [
    (lambda d: d["features"][1].update(buckets=1),
     "features[1] 'age'.buckets: must be an integer >= 2, got 1"),
    (lambda d: d["validation"].update(thresholds={"max_null_rate": 1.5}),
     "validation.thresholds.max_null_rate: must be a number in [0, 1], got 1.5"),
    (lambda d: d["validation"].update(thresholds={"min_rows": 10, "max_rows": 5}),
     "validation.thresholds.min_rows: 10 is above max_rows 5"),
    (lambda d: d.update(gate={"min_eval_positives": -1}),
     "gate.min_eval_positives: must be an integer >= 0, got -1"),
])
def test_ctr_out_of_range_names_key_and_rule(tmp_path, mutate, line):
    assert line in _ctr_error(tmp_path, mutate)


def test_ctr_rules_between_sections_run_beside_field_errors(tmp_path):
    def mutate(d):
        d["features"][0]["kind"] = "numerical"                  # an entry's own problem
        d["features"][2]["oov_buckets"] = 0                     # a field's bound
        d["crosses"][0]["features"] = ["country", "nope"]       # a name no feature has
        d["model"]["deep_fields"] = ["dwell_time"]              # invalid feature: not named
        d["slices"] = ["age"]                                   # numeric, not categorical
    msg = _ctr_error(tmp_path, mutate)
    assert "4 problem(s)" in msg, msg
    for line in ("features[0] 'dwell_time': unknown kind 'numerical'",
                 "features[2] 'country'.oov_buckets: must be an integer >= 1, got 0",
                 "crosses[0] 'country_x_device'.features: unknown feature 'nope'",
                 "slices[0]: 'age' is numeric; slices must be categorical"):
        assert line in msg, line


def test_ctr_errors_never_echo_a_value(tmp_path):
    def mutate(d):
        d["name"] = [PLANTED]
        d["features"][0]["kind"] = f"{PLANTED} kind"
        d["features"][2]["top_k"] = {"k": PLANTED}
        d["crosses"][0]["features"] = ["country", f"{PLANTED} x"]
        d["validation"]["patterns"] = {"event_id": f"({PLANTED}"}
        d["validation"]["thresholds"] = {"max_row_ratio": PLANTED}
        d["model"]["id_l2"] = {"ad_id": [PLANTED]}
        d["gate"] = {"min_eval_rows": f"{PLANTED}"}
    msg = _ctr_error(tmp_path, mutate)
    for line in ("name: must be a string, got a list of 1 item(s)",
                 "features[0] 'dwell_time': unknown kind <a string that is not a short name>",
                 "features[2] 'country'.top_k: must be an integer >= 1, got a mapping",
                 "unknown feature <a string that is not a short name>",
                 "validation.patterns.event_id: is not a regular expression",
                 "validation.thresholds.max_row_ratio: must be a number >= 1, got a string",
                 "model.id_l2.ad_id: must be a number >= 0, got a list of 1 item(s)",
                 "gate.min_eval_rows: must be an integer >= 0, got a string"):
        assert line in msg, (line, msg)
    assert PLANTED not in msg, msg


# ------------------------------------------------------------------------ the manual's schemas

def _generator():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "scripts" / "gen_config_schema.py"
    spec = importlib.util.spec_from_file_location("gen_config_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_config_schemas_are_the_models():
    generated = _generator().schemas()
    assert {p.name for p in generated} == {"feature-config.schema.json",
                                           "text-config.schema.json"}
    for path, text in generated.items():
        assert path.exists(), f"{path} missing: run scripts/gen_config_schema.py"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is out of date: run scripts/gen_config_schema.py")


def test_the_schemas_describe_the_bundled_configs():
    """What the manual says a file may hold, the bundled files hold (a small check of the
    schema's sense: keys, required keys, no extra keys at the top level)."""
    import yaml
    generated = {p.name: json.loads(t) for p, t in _generator().schemas().items()}
    for name, folder in (("feature-config.schema.json", fc.PACKAGED_DIR),
                         ("text-config.schema.json", T.PACKAGED_DIR)):
        schema = generated[name]
        assert schema["additionalProperties"] is False
        for path in folder.glob("*.yaml"):
            data = yaml.safe_load(path.read_text())
            assert set(data) <= set(schema["properties"]), path
            assert set(schema.get("required", [])) <= set(data), path
    ctr = generated["feature-config.schema.json"]
    assert ctr["$defs"]["FeatureFile"]["properties"]["top_k"]["anyOf"][0] == {
        "minimum": 1, "type": "integer"}
