"""`retrain config suggest`: a config written from a few days of partitions loads with the
family's own loader and passes that family's validation on the days it was fitted to;
ids are named only when unique; errors name the folder or rule, never a value."""
from __future__ import annotations

import datetime as dt
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from components.ctr import feature_config as fc
from components.ctr.synth import SynthSpec, run as synthesize
from components.text import task_config
from components.text.tickets import tickets
from retrain import cli
from retrain import config_suggest as cs
from retrain import config_yaml


def _suggest(*args: str) -> int:
    return cli.main(["config", "suggest", *args])


@pytest.fixture(scope="module")
def ctr_days(tmp_path_factory):
    """3 days of the example click logs (an event_id per row), as JSONL."""
    root = tmp_path_factory.mktemp("ctr") / "raw"
    synthesize(SynthSpec(feature_config=str(fc.PACKAGED_DIR / "example_user_logs.yaml"),
                         raw_root=str(root), start="2026-12-01", days=3, rows_per_day=1500))
    return root


def _to_parquet(src, dst, drop=()):
    """The same days as Parquet, optionally without some columns."""
    for day in sorted(src.glob("dt=*")):
        rows = [{k: v for k, v in json.loads(line).items() if k not in drop}
                for line in gzip.open(day / "part-00000.jsonl.gz", "rt")]
        (dst / day.name).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), dst / day.name / "part-00000.parquet")
        (dst / day.name / "_SUCCESS").write_text("")


def _write_tickets(root, days=3, n=200):
    for k in range(1, days + 1):
        day = root / f"dt=2026-12-0{k}"
        day.mkdir(parents=True)
        (day / "part-00000.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in tickets(k, n)))
        (day / "_SUCCESS").write_text("")


def test_ctr_suggestion_loads_and_passes_validation_on_the_newest_day(ctr_days, tmp_path,
                                                                      capsys):
    from components.ctr.validate import ValidateSpec, run as validate

    out = tmp_path / "suggested.yaml"
    assert _suggest("--raw-root", str(ctr_days), "--out", str(out)) == 0
    assert "family: ctr" in capsys.readouterr().err
    cfg = fc.load(out)
    assert cfg.label == "clicked" and cfg.example_id == "event_id" and not cfg.derived_id
    kinds = {f.name: (f.kind, f.transform) for f in cfg.features}
    assert kinds["tags"][0] == "multi_categorical" and kinds["query"][0] == "text"
    assert kinds["slot"] == ("categorical", "identity")
    assert kinds["dwell_time"] == ("numeric", "log_zscore")
    assert dict(cfg.validation.allowed_values)["device"] == ("android", "ios", "tablet", "web")
    text = out.read_text()
    assert "# smallest day read: 1,500 rows (dt=2026-12-01); half of it" in text
    result = validate(ValidateSpec(span_dir=str(ctr_days / "dt=2026-12-03"),
                                   out_dir=str(tmp_path / "validation"),
                                   feature_config=str(out)))
    assert result["gate"] == "passed"


def test_parquet_without_an_id_column_leaves_example_id_out(ctr_days, tmp_path):
    raw = tmp_path / "raw"
    _to_parquet(ctr_days, raw, drop=("event_id",))
    text, family, notes = cs.suggest(str(raw), days=2)
    assert family == "ctr" and any("ids are derived" in n for n in notes)
    data = yaml.safe_load(text)
    assert "example_id" not in data and "example_id left out" in text
    cfg = fc.loads(text)
    assert cfg.derived_id and cfg.validation.threshold("min_rows") == 750
    assert {f.name for f in cfg.features} == {"dwell_time", "age", "country", "device",
                                              "ad_id", "slot", "tags", "query"}


def test_a_unique_integer_id_column_is_the_ctr_id_and_passes_validation(ctr_days, tmp_path):
    """CTR readers take an integer id as its text: the column is named, not derived."""
    from components.ctr.validate import ValidateSpec, run as validate

    raw = tmp_path / "raw"
    _to_parquet(ctr_days, raw)
    for k, part in enumerate(sorted(raw.glob("dt=*/part-00000.parquet"))):
        t = pq.read_table(part)
        ids = pa.array(range(k * 10_000, k * 10_000 + t.num_rows), pa.int64())
        pq.write_table(t.set_column(t.schema.get_field_index("event_id"), "event_id", ids), part)
    text, family, notes = cs.suggest(str(raw), days=3)
    cfg = fc.loads(text)
    assert family == "ctr" and cfg.example_id == "event_id" and not cfg.derived_id
    assert not [n for n in notes if "event_id" in n]
    out = tmp_path / "suggested.yaml"
    out.write_text(text)
    result = validate(ValidateSpec(span_dir=str(raw / "dt=2026-12-03"),
                                   out_dir=str(tmp_path / "validation"), feature_config=str(out)))
    assert result["gate"] == "passed"


def test_text_family_is_guessed_and_passes_text_validation(tmp_path, capsys):
    from components.text.validate import TextValidateSpec, run as validate

    _write_tickets(tmp_path / "raw")
    out = tmp_path / "text.yaml"
    assert _suggest("--raw-root", str(tmp_path / "raw"), "--out", str(out)) == 0
    assert "family: text" in capsys.readouterr().err
    cfg = task_config.load(out)
    assert cfg.example_id == "ticket_id" and cfg.text == "body"
    assert cfg.task("team").labels == ("billing", "outage")
    result = validate(TextValidateSpec(span_dir=str(tmp_path / "raw" / "dt=2026-12-03"),
                                       out_dir=str(tmp_path / "validation"),
                                       text_config=str(out)))
    assert result["gate"] == "passed"


def test_text_without_a_unique_column_derives_ids_and_label_picks_the_task(tmp_path):
    raw = tmp_path / "raw"
    _write_tickets(raw, days=2, n=100)
    for part in raw.glob("dt=*/part-*"):
        rows = [json.loads(line) for line in part.read_text().splitlines()]
        part.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "ticket_id"})
                                + "\n" for r in rows))
    text, family, _ = cs.suggest(str(raw), "text", label="team")
    cfg = task_config.from_dict(yaml.safe_load(text))
    assert family == "text" and cfg.example_id is None and "example_id left out" in text
    assert [t.name for t in cfg.tasks] == ["team"]


def test_out_is_never_overwritten_without_force(ctr_days, tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    out.write_text("my own config\n")
    assert _suggest("--raw-root", str(ctr_days), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "--force" in err and out.read_text() == "my own config\n"
    assert _suggest("--raw-root", str(ctr_days), "--out", str(out), "--force") == 0
    assert fc.load(out).label == "clicked"


def test_bad_raw_roots_are_named(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert _suggest("--raw-root", str(missing)) == 2
    assert f"raw root {missing} does not exist" in capsys.readouterr().err
    (tmp_path / "raw" / "dt=2026-12-01").mkdir(parents=True)   # no _SUCCESS: not delivered
    assert _suggest("--raw-root", str(tmp_path / "raw")) == 2
    assert f"raw root {tmp_path / 'raw'} holds no delivered day" in capsys.readouterr().err


def test_errors_name_the_rule_never_a_value(tmp_path, capsys):
    day = tmp_path / "raw" / "dt=2026-12-01"
    day.mkdir(parents=True)
    rows = [{"clicked": i % 2, "secret": f"hunter2-{i % 3}", "x": i * 0.5} for i in range(40)]
    (day / "part-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (day / "_SUCCESS").write_text("")
    assert _suggest("--raw-root", str(tmp_path / "raw"), "--label", "secret") == 2
    err = capsys.readouterr().err
    assert "--label secret" in err and "only 0 and 1" in err and "hunter2" not in err
    assert _suggest("--raw-root", str(tmp_path / "raw"), "--family", "text") == 2
    assert "hunter2" not in capsys.readouterr().err


def test_a_part_of_lines_that_are_not_json_is_counted_not_echoed(tmp_path, capsys):
    day = tmp_path / "raw" / "dt=2026-12-01"
    day.mkdir(parents=True)
    (day / "part-00000.jsonl").write_text("root:$6$SECRETHASH:19000:0:99999:7:::\nnope\n")
    (day / "_SUCCESS").write_text("")
    assert _suggest("--raw-root", str(tmp_path / "raw")) == 2
    err = capsys.readouterr().err
    assert "hold no rows: 2 line(s) of their JSONL parts are not JSON objects" in err
    assert "SECRETHASH" not in err and "nope" not in err


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["config", "suggest", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--raw-root", "--family", "--window-days", "--days", "--out", "--force",
                 "--label", "--text", "--id"):
        assert flag in out


def test_yaml_scalars_that_read_as_other_types_are_quoted():
    assert config_yaml.scalar("yes") == '"yes"' and config_yaml.scalar("no") == '"no"'
    assert config_yaml.scalar("12") == '"12"' and config_yaml.scalar("a b") == '"a b"'
    assert config_yaml.scalar(0.0001) == "0.0001" and config_yaml.scalar(2.0) == "2.0"
    doc = {"labels": (["no", "yes"], "a comment"), "#c": "a line"}
    assert yaml.safe_load("\n".join(config_yaml.render(doc))) == {"labels": ["no", "yes"]}


# ------------------------------------------------------------------ issues 46 and 47

def test_an_ndjson_text_folder_is_read_with_the_text_familys_own_suffixes(tmp_path, capsys):
    """The suffixes come from components.text.rawdata.PART_SUFFIXES (issue 47): a folder
    of .ndjson and .ndjson.gz parts is profiled, and its config passes text validation."""
    from components.text import rawdata
    from components.text.validate import TextValidateSpec, run as validate

    raw = tmp_path / "raw"
    _write_tickets(raw)
    for k, part in enumerate(sorted(raw.glob("dt=*/part-00000.jsonl"))):
        if k % 2:
            part.rename(part.with_suffix(".ndjson"))
        else:
            with gzip.open(part.parent / "part-00000.ndjson.gz", "wt") as fh:
                fh.write(part.read_text())
            part.unlink()
    assert set(rawdata.PART_SUFFIXES) <= set(cs.part_suffixes())
    out = tmp_path / "text.yaml"
    assert _suggest("--raw-root", str(raw), "--out", str(out)) == 0
    assert "read 3 day(s), dt=2026-12-01 .. dt=2026-12-03 (600 rows)" in \
        capsys.readouterr().err
    result = validate(TextValidateSpec(span_dir=str(raw / "dt=2026-12-03"),
                                       out_dir=str(tmp_path / "validation"),
                                       text_config=str(out)))
    assert result["gate"] == "passed"
    # the CTR family reads no .ndjson part: said, naming the file, not suggested from it
    assert _suggest("--raw-root", str(raw), "--family", "ctr") == 2
    err = capsys.readouterr().err
    assert "part-00000.ndjson" in err and "the ctr family reads parts ending in" in err


def test_the_window_read_and_its_warnings(ctr_days, capsys):
    """Default: every delivered day up to the longest window a run may ask for, with a
    warning when fewer are delivered; --window-days N (alias --days) the newest N, with a
    warning naming the older days left unread."""
    text, _, notes = cs.suggest(str(ctr_days))
    assert notes[0] == ("read 3 day(s), dt=2026-12-01 .. dt=2026-12-03 (4,500 rows), of a "
                        "60-day window")
    assert notes[1].startswith("WARNING: only 3 of the 60 days asked for are delivered")
    assert "# WARNING: only 3 of the 60 days" in text
    text, _, notes = cs.suggest(str(ctr_days), days=2)
    assert notes[0].startswith("read 2 day(s), dt=2026-12-02 .. dt=2026-12-03")
    assert notes[1].startswith("WARNING: 1 older delivered day(s) before dt=2026-12-02 were "
                               "not read")
    assert _suggest("--raw-root", str(ctr_days), "--days", "0") == 2
    assert "--window-days must be at least 1" in capsys.readouterr().err


def test_the_default_window_follows_the_deployments_longest(ctr_days, monkeypatch):
    monkeypatch.setenv("RETRAIN_MAX_WINDOW_DAYS", "2")
    assert cs.default_window() == 2
    _, _, notes = cs.suggest(str(ctr_days))
    assert notes[0].endswith("of a 2-day window") and "1 older" in notes[1]


def test_days_are_closed_as_read_so_memory_stays_flat(tmp_path):
    """Per-day samples and text hashes are dropped when the day is done; what the
    suggesters need of them (a day's median length, its duplicate count) stays."""
    _write_tickets(tmp_path / "raw")
    prof = cs.profile(tmp_path / "raw", 3)
    body = [dc for _, dc in prof.day_values("body")]
    assert all(dc.lengths == [] and dc.text_hashes == set() for dc in body)
    assert all(dc.median_chars and dc.median_chars > 0 for dc in body)


def _write_days(root, rows_of_day, days=3):
    """Parquet days 2026-12-01.. whose rows come from rows_of_day(k, day start epoch)."""
    for k in range(days):
        day = dt.date(2026, 12, 1) + dt.timedelta(days=k)
        start = int(dt.datetime(day.year, day.month, day.day,
                                tzinfo=dt.timezone.utc).timestamp())
        folder = root / f"dt={day}"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows_of_day(k, start)),
                       folder / "part-00000.parquet")
        (folder / "_SUCCESS").write_text("")


def test_the_event_time_is_recognised_and_never_a_feature(tmp_path):
    """By type (a Parquet timestamp), by name over epoch numbers (ts, in milliseconds),
    by values alone (epoch seconds on their partition's day, under a plain name) and ISO
    text; an id whose numbers look like epochs is still the id."""
    def rows(k, start):
        return [{"clicked": int(i % 7 == 0), "ts": (start + 60 * i) * 1000,
                 "seen": start + 37 * i, "when": f"2026-12-0{k + 1}T10:{i % 60:02d}:00Z",
                 "logged": dt.datetime.fromtimestamp(start + i, dt.timezone.utc),
                 "order_id": 1_700_000_000 + k * 1000 + i, "device": ["ios", "web"][i % 2],
                 "price": float(i % 13)} for i in range(200)]
    _write_days(tmp_path / "raw", rows)
    prof = cs.profile(tmp_path / "raw", 3)
    assert set(prof.event_times) == {"ts", "seen", "when", "logged"}
    assert prof.event_times["logged"] == "a date/time type"
    assert prof.event_times["ts"] == "epoch milliseconds, each on the day of its partition"
    assert prof.event_times["when"] == "ISO dates/times"
    text, _, notes = cs.suggest(str(tmp_path / "raw"))
    cfg = fc.loads(text)
    assert {f.name for f in cfg.features} == {"device", "price"}
    assert cfg.example_id == "order_id"
    assert dict(cfg.validation.extra_columns) == {"ts": "int", "seen": "int", "when": "str"}
    for name in ("ts", "seen", "when", "logged"):
        assert any(n.startswith(f"column {name!r} reads as the event time") for n in notes)
        assert f"# Event time: column {name!r} reads as the event time" in text
    assert any(n.startswith("column 'logged' (datetime values) is the event time") and
               "epoch seconds (int) or ISO text" in n for n in notes)


def test_a_time_named_column_of_other_numbers_is_a_feature(tmp_path):
    """A name alone is not enough: 'hour_of_day' (0-23, no order) and 'day' counts stay
    features; 'time_spent' (seconds, not an epoch, not ordered) too."""
    def rows(k, start):
        return [{"clicked": int(i % 5 == 0), "hour_of_day": (i * 7) % 24,
                 "time_spent": float((i * 13) % 300), "device": ["ios", "web"][i % 2]}
                for i in range(200)]
    _write_days(tmp_path / "raw", rows)
    prof = cs.profile(tmp_path / "raw", 3)
    assert prof.event_times == {}


def test_columns_whose_names_cannot_be_features_are_declared(tmp_path):
    def rows(k, start):
        return [{"clicked": int(i % 5 == 0), "hours-per-week": 20 + i % 40,
                 "native country": ["a", "b"][i % 2], "device": ["ios", "web"][i % 2]}
                for i in range(200)]
    _write_days(tmp_path / "raw", rows)
    text, _, notes = cs.suggest(str(tmp_path / "raw"))
    cfg = fc.loads(text)
    assert {f.name for f in cfg.features} == {"device"}
    assert dict(cfg.validation.extra_columns) == {"hours-per-week": "int",
                                                  "native country": "str"}
    assert any(n.startswith("column 'hours-per-week': its name is not a feature name")
               for n in notes)


def test_a_feed_too_small_for_the_gate_is_warned_at_config_time(tmp_path, capsys):
    """Three days of 150 rows: about 90 held-out rows at eval_percent 20, below the gate's
    200, so the suggestion says no run on them would bless, before any training."""
    root = tmp_path / "raw"
    synthesize(SynthSpec(feature_config=str(fc.PACKAGED_DIR / "example_user_logs.yaml"),
                         raw_root=str(root), start="2026-12-01", days=3, rows_per_day=150))
    out = tmp_path / "small.yaml"
    assert _suggest("--raw-root", str(root), "--out", str(out)) == 0
    err = capsys.readouterr().err
    assert "about 90 held-out rows" in err and "min_eval_rows 200" in err, err
    assert fc.load(out).gate == fc.GateDefaults()       # the minimums are not lowered


def test_a_feed_large_enough_for_the_gate_gets_no_evidence_warning(ctr_days, tmp_path, capsys):
    assert _suggest("--raw-root", str(ctr_days), "--out", str(tmp_path / "c.yaml")) == 0
    assert "min_eval_rows" not in capsys.readouterr().err


def test_a_text_feed_too_small_for_the_gate_is_warned_at_config_time(tmp_path, capsys):
    """3 days of 200 tickets: 120 eval texts at eval_percent 20, less two dev slices of 30,
    leave the gate about 60 per task, below its 200: said before any fine-tune."""
    _write_tickets(tmp_path / "raw", days=3, n=200)
    out = tmp_path / "text.yaml"
    assert _suggest("--raw-root", str(tmp_path / "raw"), "--out", str(out)) == 0
    err = capsys.readouterr().err
    assert "about 60 scored eval texts" in err and "tasks.team about 60 labelled" in err, err
    assert "min_eval_rows 200" in err
    assert task_config.load(out).gate == task_config.Gate()   # the minimums are not lowered


def test_a_rare_class_is_named_and_a_large_enough_text_feed_is_not_warned(tmp_path, capsys):
    raw = tmp_path / "raw"
    _write_tickets(raw, days=3, n=800)       # 2,400 texts: about 240 scored
    assert _suggest("--raw-root", str(raw), "--out", str(tmp_path / "a.yaml")) == 0
    assert "min_eval" not in capsys.readouterr().err
    newest = raw / "dt=2026-12-03" / "part-00000.jsonl"
    rows = [json.loads(line) for line in newest.read_text().splitlines()]
    for r in rows[:12]:                      # 12 of 2,400 texts: about 1.2 scored
        r["team"] = "legal-SECRET77"
    newest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _suggest("--raw-root", str(raw), "--out", str(tmp_path / "b.yaml")) == 0
    err = capsys.readouterr().err
    # named by its place in the written labels (billing, legal-..., outage), not its value
    assert "tasks.team.labels[1] about 1.2 (min_eval_positives 5)" in err, err
    assert "labelled (min_eval_rows" not in err and "SECRET77" not in err
