"""The text family's config file: every problem reported at once with its place, labels
declared or derived from a numeric column, a template over several columns, and the
bundled reviews as one such file."""
from __future__ import annotations

import pytest

from components.common.errors import BadData, ConfigError
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
    for place in ("colour: unknown key", "example_id:", "text: give exactly one",
                  "tasks.text: task name", "tasks.urgent.thresholds", "tasks.queue.labels",
                  "tasks.spam.positive", "tasks.spam.min_macro_f1", "max_seq_length",
                  "class_weighting", "validation.min_rows", "validation.unknown",
                  "validation.max_class_share: is a share: must be in [0, 1], got 2",
                  "validation.min_chars: 50 is above max_chars 10",
                  "tasks.vip.labels: got [False, True]: YAML reads unquoted"):
        assert place in msg, place
    assert "15 problem(s)" in msg
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
