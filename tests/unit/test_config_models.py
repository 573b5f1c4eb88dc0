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
}
PLANTED = "PLANTEDVALUE77"


def _text_fingerprint(cfg: T.TextConfig, name: str) -> str:
    """The resolved config a preprocess run writes, in canonical JSON."""
    canonical = json.dumps({**T.resolved(cfg), "source": name}, sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def test_bundled_text_configs_keep_their_fingerprints():
    found = {p.name: _text_fingerprint(T.load(p), p.name)
             for p in sorted(T.PACKAGED_DIR.glob("*.yaml"))}
    assert found == TEXT_FINGERPRINTS


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
