"""The text family's config file: every problem reported at once with its place, labels
declared or derived from a numeric column, a template over several columns, and the
bundled reviews as one such file."""
from __future__ import annotations

import pytest

from retrain.common.errors import BadData, ConfigError
from components.text import task_config as T


def test_bundled_reviews_are_one_config_file():
    cfg = T.default()
    assert cfg.task_labels == {"sentiment": ["negative", "neutral", "positive"],
                               "topic": ["Bottoms", "Dresses", "Intimate", "Jackets", "Tops",
                                         "Trend"]}
    assert cfg.raw_columns() == ["example_id", "text", "sentiment", "topic"]
    assert T.from_resolved(T.resolved(cfg)) == cfg          # what preprocessing writes


def test_every_problem_is_reported_with_its_place(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("""
text: body
text_template: "{a}"
tasks:
  text: {labels: [a, b]}
  urgent: {label_column: prio, labels: ["no", "yes"], thresholds: [3, 1]}
  vip: {labels: [no, yes]}
  queue: {labels: [billing]}
  spam: {labels: [ham, spam], positive: eggs, min_macro_f1: 2}
max_seq_length: 4
class_weighting: heavy
validation: {min_rows: -3, unknown: 1, max_class_share: 2, min_chars: 50, max_chars: 10}
colour: blue
""")
    with pytest.raises(ConfigError) as e:
        T.load(bad)
    msg = str(e.value)
    assert "\n  example_id:" not in msg     # left out: ids are derived (test below)
    for place in ("colour: unknown key", "text: give exactly one",
                  "tasks.text: task name", "tasks.urgent.thresholds", "tasks.queue.labels",
                  "tasks.spam.positive", "tasks.spam.min_macro_f1", "max_seq_length",
                  "class_weighting", "validation.min_rows", "validation.unknown",
                  "validation.max_class_share: must be a number in [0, 1], got 2",
                  "validation.min_chars: 50 is above max_chars 10",
                  "tasks.vip.labels: item(s) [0, 1] are booleans: YAML reads unquoted"):
        assert place in msg, place
    assert "14 problem(s)" in msg
    assert isinstance(e.value, BadData)                     # a bad config is not retried
    with pytest.raises(ConfigError, match="does not exist"):
        T.load(tmp_path / "missing.yaml")
    (tmp_path / "notyaml.yaml").write_text("tasks: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        T.load(tmp_path / "notyaml.yaml")


def test_labels_from_thresholds_and_text_from_a_template():
    cfg = T.from_dict({"example_id": "id", "text_template": "{title}. {body}",
                       "tasks": {"stars": {"label_column": "rating",
                                           "labels": ["negative", "neutral", "positive"],
                                           "thresholds": [2, 3]}}})
    task = cfg.task("stars")
    assert [task.label_of(r) for r in (1, 2, 2.5, 3, 4, 5, None, "")] == [
        "negative", "negative", "neutral", "neutral", "positive", "positive", None, None]
    assert task.index_of(5) == 2 and task.index_of(None) == T.UNLABELLED
    with pytest.raises(ValueError, match="not a number"):
        task.label_of("five")
    assert cfg.text_of({"title": "Great", "body": "fits well", "id": 1}) == "Great. fits well"
    assert cfg.text_of({"title": None, "body": "x"}) == ". x"
    assert cfg.raw_columns() == ["id", "title", "body", "rating"]
    binary = T.from_dict({"example_id": "id", "text": "t",
                          "tasks": {"spam": {"labels": ["ham", "spam"]}}}).task("spam")
    assert binary.binary and binary.positive_index == 1 and binary.label_column == "spam"
    with pytest.raises(ValueError, match="not one of"):
        binary.label_of("eggs")


SECRET = "SECRETVALUE42"


def test_no_problem_echoes_a_value_of_the_file(tmp_path):
    planted = tmp_path / "planted.yaml"
    planted.write_text(f"""
example_id: [{SECRET}]
text_template: "{SECRET}"
tasks:
  q: {{label_column: [{SECRET}], labels: {SECRET}, token: {SECRET}}}
  r: {{labels: ["{SECRET} a", "{SECRET} a"], positive: "{SECRET} p", thresholds: {SECRET}}}
checkpoint: /{SECRET}/ckpt
class_weighting: "{SECRET} w"
max_seq_length: {SECRET}
validation: {{min_rows: {SECRET}, {SECRET}: 1}}
gate: {{min_auc: [{SECRET}]}}
surprise_key: {SECRET}
"root:$6$SECRETHASHabc:19000:0:99999:7::": null
""")
    with pytest.raises(ConfigError) as e:
        T.load(planted)
    msg = str(e.value)
    for place in ("surprise_key: unknown key", "<a key that is not a short name, not shown>",
                  "example_id: must name the column with each record's unique id (or be "
                  "left out: ids are then derived from the text and labels), got a list",
                  "text_template: must name at least one column", "tasks.q.token: unknown key",
                  "tasks.q.label_column: must be a column name, got a list of 1 item(s)",
                  "tasks.q.labels: must list at least 2 label names, got a string",
                  "tasks.r.labels: repeats a label", "checkpoint: the folder it names",
                  "class_weighting: must be one of", "max_seq_length: must be an integer",
                  "validation.min_rows: must be an integer >= 0, got a string",
                  f"validation.{SECRET}: unknown key",       # a key is named: a schema word
                  "gate.min_auc: must be a number >= 0, got a list of 1 item(s)"):
        assert place in msg, place
    assert msg.count(SECRET) == 1 and "SECRETHASH" not in msg     # only the key above


@pytest.mark.parametrize("content, expected", [
    (b"tasks: {queue: [\n" + SECRET.encode() + b"\n", "is not valid YAML/JSON (line 3, column 1)"),
    (b"a: *" + SECRET.encode() + b"\n", "is not valid YAML/JSON (line 1, column 4)"),
    (b"a: \xff " + SECRET.encode() + b"\n", "is not UTF-8 text"),
    (b"- " + SECRET.encode() + b"\n", "must be a mapping, got list"),
])
def test_unreadable_files_name_the_file_and_place_only(tmp_path, content, expected):
    path = tmp_path / "planted.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        T.load(path)
    assert str(path) in str(e.value) and expected in str(e.value), str(e.value)
    assert SECRET not in str(e.value) and e.value.__cause__ is None


def test_ids_are_the_id_column_as_text_or_derived_from_the_record():
    tasks = {"queue": {"label_column": "team", "labels": ["billing", "outage"]}}
    named = T.from_dict({"example_id": "ticket", "text": "body", "tasks": tasks})
    assert named.id_of({"ticket": 1234, "body": "x"}) == "1234"          # integer ids
    assert named.id_of({"body": "x"}) is None                             # validation says so
    for bad in (12.0, 1.5, True):                    # never an id, as in the CTR readers
        with pytest.raises(ValueError, match="'ticket' holds a (float|bool)"):
            named.id_of({"ticket": bad, "body": "x"})
    derived = T.from_dict({"text_template": "{subject}. {body}", "tasks": tasks})
    assert derived.example_id is None
    assert derived.raw_columns() == ["subject", "body", "team"]
    row = {"subject": "Site down", "body": "error 503", "team": "outage", "channel": "mail"}
    rid = derived.id_of(row)
    assert rid.startswith("h") and len(rid) == 25
    assert derived.id_of({**row, "channel": "chat"}) == rid      # a column it does not read
    assert derived.id_of(dict(reversed(list(row.items())))) == rid   # column order
    assert derived.id_of({**row, "team": "billing"}) != rid      # same text, other label
    assert derived.id_of({**row, "body": "error 504"}) != rid
    # It survives the round trip through the config a preprocess run writes beside its data.
    assert T.from_resolved(T.resolved(derived)).id_of(row) == rid


def test_epochs_come_from_the_config_and_a_bad_value_is_named(tmp_path):
    from retrain.orchestration.local_airflow import DEMO_TEXT_CONFIG
    assert T.default().epochs == 3 and T.load(DEMO_TEXT_CONFIG).epochs == 2
    # What preprocessing wrote before the key existed (and writes at the default) reads as 3.
    assert "epochs" not in T.resolved(T.default())
    assert T.from_resolved(T.resolved(T.default())).epochs == 3
    assert T.from_resolved(T.resolved(T.load(DEMO_TEXT_CONFIG))).epochs == 2
    base = "text: t\ntasks: {q: {labels: [a, b]}}\n"
    for value, expected in (("0", "epochs: must be an integer in [1, 50], got 0"),
                            ("51", "epochs: must be an integer in [1, 50], got 51"),
                            (f'"{SECRET}"', "epochs: must be an integer"),
                            ("true", "epochs: must be an integer"),
                            ("2.5", "epochs: must be an integer")):
        path = tmp_path / "c.yaml"
        path.write_text(base + f"epochs: {value}\n")
        with pytest.raises(ConfigError) as e:
            T.load(path)
        assert expected in str(e.value) and SECRET not in str(e.value), str(e.value)
