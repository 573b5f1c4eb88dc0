"""The declarative feature config: the packaged default is today's feature set, round-trips
through YAML/JSON, and every kind of invalid config is reported with its location, all
problems of a file at once."""
from __future__ import annotations

import copy
import json
import re
import sys

import pytest

from components.ctr import feature_config as fc
from components.ctr import features as F

EXAMPLE = fc.PACKAGED_DIR / "example_user_logs.yaml"


def test_default_config_is_todays_feature_set():
    cfg = fc.default()
    assert (cfg.label, cfg.example_id) == ("click", "example_id")
    assert cfg.raw_columns() == {
        "example_id": "str", "click": "int", "user_id": "str", "item_id": "str",
        "category_id": "str", "device": "str", "hour": "int", "position": "int",
        "price": "float", "user_past_clicks": "float", "item_age_days": "float"}
    assert cfg.categorical_outputs() == {
        "user_id_xf": 2**18, "item_id_xf": 2**17, "category_id_xf": 2010, "device_xf": 22,
        "hour_xf": 24, "position_xf": 32}
    assert cfg.numeric_features() == ["price", "user_past_clicks", "item_age_days"]
    assert all(cfg.feature(k).transform == "log_zscore" for k in cfg.numeric_features())
    assert cfg.dense_outputs() == ["price_xf", "price_missing_xf", "user_past_clicks_xf",
                                   "user_past_clicks_missing_xf", "item_age_days_xf",
                                   "item_age_days_missing_xf"]
    assert cfg.slices == ("category_id", "device")
    assert cfg.crosses == () and cfg.multi_valued_outputs() == {}
    assert cfg.model.deep_fields == ("category_id", "device", "hour", "position")
    assert cfg.model.count_features == ("item_id",)
    assert cfg.model.id_l2_dict() == {"user_id": 10.0, "item_id": 5.0}
    # features.py derives its constants from it (one source of truth: the YAML).
    assert F.HASHED_ID_FEATURES == {"user_id": 2**18, "item_id": 2**17}
    assert F.VOCAB_FEATURES == {"category_id": {"top_k": 2000, "oov_buckets": 10},
                                "device": {"top_k": 20, "oov_buckets": 2}}
    assert F.IDENTITY_FEATURES == {"hour": 24, "position": 32}
    assert F.CATEGORICAL_FEATURES == cfg.categorical_fields()
    assert F.RAW_INT_COLUMNS == ["ts", "hour", "position", "click"]
    assert F.categorical_size("category_id") == 2010
    assert F.transformed_name("price") == "price_xf"
    assert F.missing_name("price") == "price_missing_xf"


def test_configs_round_trip_and_fingerprint_is_canonical(tmp_path):
    for cfg in (fc.default(), fc.load(EXAMPLE)):
        d = cfg.to_dict()
        assert fc.from_dict(d) == cfg
        path = tmp_path / f"{cfg.name}.json"
        path.write_text(json.dumps(d, indent=3))
        assert fc.load(path) == cfg
        shuffled = dict(reversed(list(d.items())))
        assert fc.from_dict(shuffled).fingerprint() == cfg.fingerprint()
        assert re.fullmatch(r"[0-9a-f]{64}", cfg.fingerprint())
    assert fc.default().fingerprint() != fc.load(EXAMPLE).fingerprint()
    changed = fc.default().to_dict()
    changed["features"][0]["hash_buckets"] = 2**17
    assert fc.from_dict(changed).fingerprint() != fc.default().fingerprint()
    # load_for / for_preprocess_dir fall back to the default for old artifacts.
    assert fc.load_for(None) == fc.load_for("") == fc.default()
    assert fc.load_for(str(EXAMPLE)) == fc.load(EXAMPLE)
    assert fc.for_preprocess_dir(tmp_path / "nothing") == fc.default()
    (tmp_path / fc.FEATURE_CONFIG_FILE).write_text(json.dumps(fc.load(EXAMPLE).to_dict()))
    assert fc.for_preprocess_dir(tmp_path) == fc.load(EXAMPLE)
    model = tmp_path / "model" / "serving_model"
    assert fc.for_model_dir(model) == fc.default()          # exported before configs
    fc.write_model_config(model, fc.load(EXAMPLE))
    assert fc.for_model_dir(model) == fc.for_model_dir(model.parent) == fc.load(EXAMPLE)


def test_example_user_config_covers_every_kind_and_transform():
    cfg = fc.load(EXAMPLE)
    assert {(f.kind, f.transform) for f in cfg.features} == {
        ("numeric", "log_zscore"), ("numeric", "bucketize"), ("categorical", "vocabulary"),
        ("categorical", "hash"), ("categorical", "identity"),
        ("multi_categorical", "vocabulary"), ("text", "hash")}
    assert cfg.raw_columns()["tags"] == "str_list" and cfg.raw_columns()["query"] == "str"
    assert cfg.raw_columns()["slot"] == "int" and cfg.raw_columns()["age"] == "float"
    outputs = cfg.categorical_outputs()
    assert outputs["age_xf"] == 9                      # 8 buckets + the missing bucket
    assert outputs["country_x_device_xf"] == 4096
    assert cfg.multi_valued_outputs() == {"tags_xf": 5, "query_xf": 16}
    assert cfg.dense_features() == ["dwell_time"]


def test_the_module_is_importable_without_tensorflow():
    import subprocess
    code = ("import sys; from components.ctr import feature_config as fc, features; "
            "fc.default(); assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _base() -> dict:
    return copy.deepcopy(fc.load(EXAMPLE).to_dict())


def _problems(d) -> str:
    with pytest.raises(ValueError) as e:
        fc.from_dict(d)
    return str(e.value)


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["features"][0].update(kind="numerical"),
     "features[0] 'dwell_time': unknown kind 'numerical'"),
    (lambda d: d["features"][0].update(transform="log"),
     "features[0] 'dwell_time': unknown transform 'log'"),
    (lambda d: d["features"][0].update(transform="hash"),
     "features[0] 'dwell_time': transform 'hash' is not allowed for kind 'numeric'"),
    (lambda d: d["features"][6].update(transform="identity"),
     "features[6] 'tags': transform 'identity' is not allowed for kind 'multi_categorical'"),
    (lambda d: d["features"][1].pop("buckets"),
     "features[1] 'age': missing required parameter 'buckets' for bucketize"),
    (lambda d: d["features"][1].update(buckets=1),
     "features[1] 'age'.buckets: must be an integer >= 2, got 1"),
    (lambda d: d["features"][2].update(top_k="many"),
     "features[2] 'country'.top_k: must be an integer >= 1, got a string"),   # type only
    (lambda d: d["features"][2].update(topk=10),
     "features[2] 'country'.topk: unknown key (allowed: buckets, description, dtype"),
    (lambda d: d["features"][4].update(top_k=10),
     "features[4] 'ad_id': unknown parameter 'top_k' for categorical/hash"),
    (lambda d: d["features"][6].pop("max_values"),
     "features[6] 'tags': missing required parameter 'max_values'"),
    (lambda d: d["features"][5].update(dtype="str"),
     "features[5] 'slot': identity needs integer ids (dtype: int)"),
    (lambda d: d["features"].append(dict(d["features"][2])),
     "features[8] 'country': duplicate name (also features[2])"),
    (lambda d: d["features"][3].update(name="clicked"),
     "features[3] 'clicked': clashes with the label column"),
    (lambda d: d.update(example_id="clicked"),
     "example_id: is the same column as the label ('clicked')"),
    (lambda d: d["features"][3].update(name="bad name"),
     "features[3].name: must match"),          # a name that is not a word is not shown
    (lambda d: d["crosses"][0].update(features=["country", "devic"]),
     "crosses[0] 'country_x_device'.features: unknown feature 'devic'"),
    (lambda d: d["crosses"][0].update(features=["country", "tags"]),
     "crosses[0] 'country_x_device'.features: 'tags' is multi_categorical, only categorical"),
    (lambda d: d["crosses"][0].update(features=["country"]),
     "crosses[0] 'country_x_device'.features: a cross needs at least 2 features"),
    (lambda d: d["crosses"][0].pop("hash_buckets"),
     "crosses[0] 'country_x_device'.hash_buckets: is required but missing"),
    (lambda d: d.update(slices=["country", "continent"]),
     "slices[1]: unknown column 'continent'"),
    (lambda d: d.update(slices=["dwell_time"]),
     "slices[0]: 'dwell_time' is numeric; slices must be categorical"),
    (lambda d: d["model"].update(deep_fields=["dwell_time"]),
     "model.deep_fields: 'dwell_time' is not a categorical feature or cross"),
    (lambda d: d["model"].update(count_features=["tags"]),
     "model.count_features: 'tags' is multi-valued"),
    (lambda d: d["model"].update(fm_fields=["country"]),
     "model.fm_fields: crosses pairs of fields: name two or more"),
    (lambda d: d["model"].update(fm_dim=8), "model.fm_dim: unknown key (allowed: count_features, deep_fields"),
    (lambda d: d["model"].update(embeddings={"dwell_time": {"dim": 4}}),
     "model.embeddings: 'dwell_time' is not a categorical feature or cross"),
    (lambda d: d["model"].update(embeddings={"ad_id": {"dim": 0}}),
     "model.embeddings.ad_id.dim: must be a whole number in [1, 1024], got 0"),
    (lambda d: d["model"].update(embeddings={"ad_id": {"dim": 8, "init": "ones"}}),
     "model.embeddings.ad_id.init: must be one of 'normal', 'zeros'"),
    (lambda d: d["features"][5].update(new_id_row=True),
     "features[5] 'slot': unknown parameter 'new_id_row' for categorical/identity"),
    (lambda d: d["features"][6].update(new_id_row=True),
     "features[6] 'tags': new_id_row is for single-valued categorical features, not "
     "multi_categorical"),
    (lambda d: d["features"][2].update(new_id_row="yes"),
     "features[2] 'country'.new_id_row: must be true or false, got a string"),
    (lambda d: d["features"][2].update(seen_filter_bits=4096),
     "features[2] 'country': seen_filter_bits needs new_id_row: true"),
    (lambda d: d["features"][2].update(new_id_row=True, seen_filter_bits=4100),
     "features[2] 'country': seen_filter_bits must be a multiple of 8, got 4100"),
    (lambda d: d["features"][4].update(new_id_row=True, seen_filter_bits=512),
     "features[4] 'ad_id'.seen_filter_bits: must be an integer >= 1024, got 512"),
    (lambda d: d["features"][4].update(new_id_row=True, seen_filter_bits=1 << 40),
     "features[4] 'ad_id': seen_filter_bits must be at most 4294967296"),
    (lambda d: d.update(labels="x"), "labels: unknown key"),
    (lambda d: d.pop("label"), "label: is required but missing"),
    (lambda d: d.update(label=7), "label: must be a column name"),
    (lambda d: d.update(features=[]), "features: must be a non-empty list"),
])
def test_each_invalid_config_names_its_location(mutate, expected):
    d = _base()
    mutate(d)
    assert expected in _problems(d)


def test_all_problems_are_reported_at_once(tmp_path):
    d = _base()
    d["features"][0]["kind"] = "numerical"
    d["features"][2]["oov_buckets"] = 0
    d["crosses"][0]["features"] = ["country", "nope"]
    d["slices"] = ["nowhere"]
    path = tmp_path / "bad.yaml"
    import yaml
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(ValueError) as e:
        fc.load(path)
    message = str(e.value)
    assert message.startswith(f"invalid feature config {path}: 4 problem(s):")
    for part in ("features[0] 'dwell_time': unknown kind 'numerical'",
                 "features[2] 'country'.oov_buckets: must be an integer >= 1, got 0",
                 "crosses[0] 'country_x_device'.features: unknown feature 'nope'",
                 "slices[0]: unknown column 'nowhere'"):
        assert part in message


def test_unreadable_files_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fc.load(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("label: [unclosed\n")
    with pytest.raises(ValueError, match="broken.yaml is not valid YAML"):
        fc.load(tmp_path / "broken.yaml")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json is not valid JSON"):
        fc.load(tmp_path / "broken.json")


def test_trainer_field_options_are_checked_against_the_config():
    cfg = fc.load(EXAMPLE)
    cfg.check_fields("deep_fields", ["tags", "country_x_device", "age"])
    with pytest.raises(ValueError, match=r"deep_fields: \['user_id'\] are not categorical "
                                         r"features of the feature config example_user_logs"):
        cfg.check_fields("deep_fields", ["user_id"])
    with pytest.raises(ValueError, match=r"count_features: \['query'\] are multi-valued"):
        cfg.check_fields("count_features", ["query"], single_valued=True)


def test_validation_rules_come_from_the_config():
    from components.ctr.validation_rules import DEFAULT_DRIFT, rules_for
    generated = rules_for(fc.default())
    assert set(generated.expected_columns) == {*F.RAW_STRING_COLUMNS, *F.RAW_INT_COLUMNS,
                                               *F.RAW_FLOAT_COLUMNS}      # incl. extra `ts`
    assert generated.allowed_values["device"] == ["ios", "android", "web", "tablet", "other"]
    assert generated.ranges["hour"] == (0, 23) and generated.drift["device"]["max"] == 0.1
    user = rules_for(fc.load(EXAMPLE))
    assert user.label == "clicked" and "tags" in user.expected_columns
    assert "tags" not in user.arrow_types and "dwell_time" not in user.never_null
    assert user.drift["country"] == {"metric": "js", "max": 0.2, "severity": "error"}
    assert user.drift["ad_id"] == DEFAULT_DRIFT["categorical"]            # not listed
    assert user.drift["dwell_time"] == DEFAULT_DRIFT["numeric"]


def test_invalid_validation_rules_name_their_location():
    base = fc.load(EXAMPLE).to_dict()
    base["validation"] = {"ranges": {"country": [0, 1], "nope": [1, 2], "age": [None, None]},
                          "drift": {"age": {"metric": "js", "max": 0.1}},
                          "patterns": {"event_id": "("}, "extra_columns": {"age": "int"},
                          "bogus": 1}
    with pytest.raises(ValueError) as e:
        fc.from_dict(base)
    for where in ("validation.bogus", "validation.ranges.country", "validation.ranges.nope",
                  "validation.ranges.age", "validation.patterns.event_id",
                  "validation.drift.age", "validation.extra_columns.age"):
        assert where in str(e.value), where
    assert "7 problem(s)" in str(e.value)


SECRET = "SECRETVALUE42"


@pytest.mark.parametrize("text, expected", [
    ("label: clicked\nfeatures: [SECRETVALUE42\n  - {\n", "is not valid YAML/JSON (line "),
    ("a:\n\tSECRETVALUE42: 1\n", "(line 2, column 1)"),
    ("a: *SECRETVALUE42\n", "(line 1, column 4)"),
    ("a: !!python/object:SECRETVALUE42 {}\n", "(line 1, column 4)"),
    ("- SECRETVALUE42\n", "must be a mapping at the top level, got list"),
    ("SECRETVALUE42 is a plain line\n", "must be a mapping at the top level, got str"),
])
def test_syntax_and_shape_errors_name_the_place_never_the_text(tmp_path, text, expected):
    path = tmp_path / "planted.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        fc.load(path)
    assert str(path) in str(e.value) and expected in str(e.value)
    assert SECRET not in str(e.value) and e.value.__cause__ is None


def test_json_and_encoding_errors_name_the_file_only(tmp_path):
    bad = tmp_path / "planted.json"
    bad.write_text('{"label": "SECRETVALUE42",\n "x": [SECRETVALUE42}')
    with pytest.raises(ValueError, match=r"planted.json is not valid JSON \(line 2, column 8\)"
                       ) as e:
        fc.load(bad)
    assert SECRET not in str(e.value)
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(b"label: \xff SECRETVALUE42\n")
    with pytest.raises(ValueError) as e:
        fc.load(latin)
    assert str(e.value) == f"feature config {latin} is not UTF-8 text"


def test_unknown_keys_are_named_and_values_never_shown():
    d = _base()
    d["surprise_key"] = SECRET
    d["root:$6$SECRETHASHabc:19000:0:99999:7::"] = None     # a shadow line read as a key
    d["model"]["password"] = SECRET
    d["validation"] = {"thresholds": {"token": SECRET, "min_rows": SECRET},
                       "patterns": {"event_id": f"({SECRET}"}}
    d["features"][0]["secret_param"] = SECRET
    d["features"][2]["top_k"] = [SECRET]
    d["features"][3]["dtype"] = f"{SECRET} str"
    d["description"] = {"token": SECRET}
    d["slices"] = [f"{SECRET} slice"]
    message = _problems(d)
    for place in ("surprise_key: unknown key", "model.password: unknown key",
                  "<a key that is not a short name, not shown>: unknown key",
                  "validation.thresholds.token: unknown key (allowed: history_days",
                  "validation.thresholds.min_rows: must be a whole number >= 0, got a string",
                  "validation.patterns.event_id: is not a regular expression (error at "
                  "position 0)",
                  "features[0] 'dwell_time'.secret_param: unknown key",
                  "features[2] 'country'.top_k: must be an integer >= 1, got a list of 1",
                  "dtype: must be one of 'str', 'int', got <a string that is not a short name>",
                  "description: must be a string, got a mapping",
                  "slices[0]: unknown column <a string that is not a short name>"):
        assert place in message, place
    assert SECRET not in message and "SECRETHASH" not in message


def test_the_gate_section_sets_the_evidence_minimums_and_defaults_keep_the_fingerprint():
    import yaml
    from importlib import resources
    raw = yaml.safe_load((resources.files("components.ctr") / "feature_configs"
                          / "generated.yaml").read_text())
    base = fc.from_dict(raw)
    assert base.gate == fc.GateDefaults(200, 20)
    assert "gate" not in base.to_dict()          # defaults: fingerprints of old configs hold
    raw["gate"] = {"min_eval_rows": 50, "min_eval_positives": 3}
    small = fc.from_dict(raw)
    assert small.gate == fc.GateDefaults(50, 3) and small.fingerprint() != base.fingerprint()
    assert fc.from_dict(small.to_dict()).gate == small.gate   # survives the model's copy
    raw["gate"] = {"min_eval_rows": -1, "min_eval_rowz": 5}
    with pytest.raises(fc.ConfigError) as e:
        fc.from_dict(raw)
    assert "gate.min_eval_rows" in str(e.value) and "gate.min_eval_rowz" in str(e.value)


def test_the_gate_section_can_let_a_confidently_worse_candidate_through_the_allowances():
    """`gate.refuse_confidently_worse` (on by default) reaches the evaluate step's rules
    unless the run's spec sets it; the default keeps older configs' fingerprints."""
    import yaml
    from importlib import resources
    from components.ctr.evaluate import EvaluateSpec, thresholds_of
    raw = yaml.safe_load((resources.files("components.ctr") / "feature_configs"
                          / "generated.yaml").read_text())
    raw["gate"] = {"min_eval_rows": 50, "min_eval_positives": 3}
    small = fc.from_dict(raw)
    assert small.gate.refuse_confidently_worse is True
    assert small.to_dict()["gate"] == {"min_eval_rows": 50, "min_eval_positives": 3}
    raw["gate"]["refuse_confidently_worse"] = False
    lenient = fc.from_dict(raw)
    assert lenient.gate == fc.GateDefaults(50, 3, False)
    assert lenient.fingerprint() != small.fingerprint()
    assert fc.from_dict(lenient.to_dict()).gate == lenient.gate
    spec = EvaluateSpec(span_dir="s", candidate_model_dir="m", out_dir="o")
    assert thresholds_of(spec, lenient).refuse_confidently_worse is False
    assert thresholds_of(spec, small).refuse_confidently_worse is True
    assert (thresholds_of(spec, lenient).min_eval_rows, thresholds_of(spec, lenient)
            .min_eval_positives) == (50, 3)
    forced = EvaluateSpec(span_dir="s", candidate_model_dir="m", out_dir="o",
                          refuse_confidently_worse=True, min_eval_rows=7)
    assert thresholds_of(forced, lenient).refuse_confidently_worse is True
    assert thresholds_of(forced, lenient).min_eval_rows == 7
    raw["gate"]["refuse_confidently_worse"] = "no"
    with pytest.raises(fc.ConfigError) as e:
        fc.from_dict(raw)
    assert "gate.refuse_confidently_worse" in str(e.value) and "'no'" not in str(e.value)
