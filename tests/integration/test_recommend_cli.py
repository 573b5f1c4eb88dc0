"""`retrain recommend` on a real rating log (MovieLens 100k, design rule 16) with a model
whose feature config names its own columns (`movie_id`, no `item_id`, no `position`).

Issue 46: its defaults fit one machine (a cap on users and items, the plan printed before
scoring, the full run one flag away), a progress line (done/total, rate, ETA) appears
while the Beam job runs, the columns default to what the model's feature config and the
window say, and a setting that cannot be derived is refused in one line naming it and
the config file, exit code 2, no traceback.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from components.ctr import feature_config
from retrain.common.atomic import read_json

from outside_logs import rating_log
from savedmodels import raw_dtypes, save_model

pytestmark = pytest.mark.integration

FEATURES = [
    {"name": "user_id", "kind": "categorical", "dtype": "int", "transform": "hash",
     "hash_buckets": 2000},
    {"name": "movie_id", "kind": "categorical", "dtype": "int", "transform": "hash",
     "hash_buckets": 2000},
    {"name": "age", "kind": "numeric", "transform": "zscore"},
    {"name": "gender", "kind": "categorical", "transform": "vocabulary", "top_k": 2},
    {"name": "occupation", "kind": "categorical", "transform": "vocabulary", "top_k": 30}]


def _config(user: str = "user_id") -> feature_config.FeatureConfig:
    features = [dict(f, name=user) if f["name"] == "user_id" else f for f in FEATURES]
    return feature_config.from_dict({
        "name": "movielens_ratings", "label": "liked",        # the log has no id column
        "features": features, "model": {"count_features": ["movie_id", user]}})


def _score(features):
    """A fixed function of the movie and the user's age, in (0, 1)."""
    import tensorflow as tf
    movie = tf.cast(features["movie_id"] % 97, tf.float32)
    return tf.sigmoid(movie / 50.0 - 1.0 + features["age"] / 100.0)


@pytest.fixture(scope="module")
def log_and_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("recommend-cli")
    days = rating_log(root / "raw", days=40)
    span = days[-1].name.removeprefix("dt=")
    cfg = _config()
    model = save_model(root / "model", _score, raw_dtypes(cfg), config=cfg)
    return root, span, model


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retrain.cli", "recommend", *args],
                          capture_output=True, text=True, timeout=600)


def _progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if re.match(r"recommend: [\d,]+/[\d,]+ pairs \(\d+ %\), [\d,]+ pairs/s, "
                        r"(ETA|done in) ", line)]


def test_defaults_cap_the_pairs_derive_the_columns_and_show_progress(log_and_model):
    root, span, model = log_and_model
    out = root / "recs-capped"
    run = _cli("--raw-root", str(root / "raw"), "--span", span, "--out", str(out),
               "--model-dir", model, "--active-days", "30", "--k", "3",
               "--max-users", "20", "--max-items", "50", "--progress-seconds", "0.2")
    assert run.returncode == 0, run.stderr[-3000:]
    err = run.stderr
    # the columns, derived from the model's feature config and the window
    assert ("recommend: columns of feature config 'movielens_ratings': user user_id, item "
            "movie_id, item side [], user side [age, gender, occupation]") in err, err
    # the plan, with the cap and the full run one flag away
    plan = re.search(r"recommend: scoring 20 users x 50 items = 1,000 pairs, about 1 s at "
                     r"[\d,]+ pairs/s \(capped: the 20 most active of ([\d,]+) users, the "
                     r"first 50 of ([\d,]+) pool items; all of them, ([\d,]+) pairs, about "
                     r"[^,]+, with max_users and max_items 0: retrain recommend --all\)", err)
    assert plan, err
    active, pool = (int(plan.group(i).replace(",", "")) for i in (1, 2))
    assert active > 20 and pool > 50
    assert int(plan.group(3).replace(",", "")) == active * pool
    lines = _progress_lines(err)
    assert lines and lines[-1].startswith("recommend: 1,000/1,000 pairs (100 %)"), err
    assert "Traceback" not in err
    summary = read_json(out / "summary.json")
    assert (summary["users"], summary["pool_items"], summary["pairs_scored"]) == (20, 50, 1000)
    assert summary["active_users"] == active and summary["max_users"] == 20
    assert summary["layout"]["item_column"] == "movie_id"
    assert not (out / "_progress").exists()
    recs = pq.read_table(sorted(str(p) for p in out.glob("part-*.parquet")))
    assert recs.num_rows == 20 * 3

    full = _cli("--raw-root", str(root / "raw"), "--span", span, "--out",
                str(root / "recs-all"), "--model-dir", model, "--active-days", "30",
                "--k", "3", "--all", "--progress-seconds", "0")
    assert full.returncode == 0, full.stderr[-3000:]
    assert f"scoring {active:,} users x {pool:,} items = {active * pool:,} pairs" in \
        full.stderr and "capped" not in full.stderr
    assert not _progress_lines(full.stderr)          # --progress-seconds 0: none


def test_a_setting_that_cannot_be_derived_is_one_line_naming_it(log_and_model, tmp_path):
    root, span, _ = log_and_model
    cfg = _config(user="account")                   # nothing says it is the user
    model = save_model(tmp_path / "model", _score, raw_dtypes(cfg), config=cfg)
    run = _cli("--raw-root", str(root / "raw"), "--span", span, "--out",
               str(tmp_path / "recs"), "--model-dir", model)
    assert run.returncode == 2, run.stderr[-3000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith("retrain recommend: error: user_column (--user-column): ")
    assert str(Path(model) / feature_config.MODEL_CONFIG_PATH) in lines[0]
    assert not (tmp_path / "recs").exists()
    # named, it runs
    ok = _cli("--raw-root", str(root / "raw"), "--span", span, "--out",
              str(tmp_path / "recs"), "--model-dir", model, "--user-column", "account",
              "--max-users", "5", "--max-items", "5", "--progress-seconds", "0")
    assert ok.returncode != 0 and "account" in ok.stderr     # the log has no such column
    assert "Traceback" not in ok.stderr and len(ok.stderr.strip().splitlines()) <= 3


def test_the_dags_step_refuses_settings_that_do_not_fit_by_name(log_and_model, tmp_path):
    """The reviewer's case: the DAG's bundled-data settings (item columns, a `position`
    context) against a rating log's model. The step process fails as bad data naming the
    setting; no KeyError from a result without `output_dir` (the launcher raises)."""
    from retrain.common.errors import BadDataFailed
    from retrain.orchestration.launch import run_step

    root, span, model = log_and_model
    spec = {"raw_root": str(root / "raw"), "span": span, "output_dir": str(tmp_path / "out"),
            "model_dir": model, "user_column": "user_id", "item_column": "movie_id",
            "item_columns": ["category_id", "price", "item_age_days"],
            "context": {"position": 1}, "progress_seconds": 0}
    with pytest.raises(BadDataFailed) as e:
        run_step("components.ctr.recommend", spec)
    message = str(e.value)
    assert "RecommendSettingError: item_columns (--item-columns): ['category_id', 'price', " \
           "'item_age_days'] are not item-side or context inputs" in message, message
    assert "feature_config.json" in message and not (tmp_path / "out").exists()


def test_a_pool_larger_than_a_model_call_is_scored_in_item_slices(log_and_model):
    """Issue 44.5: with more items than `batch_pairs`, each model call takes a slice of
    the pool (bounded memory per worker), and the scores and top-K equal one whole call's."""
    import numpy as np
    import pyarrow as pa

    from components.ctr.recommend_scoring import PairLayout, PairScorer

    _, _, model = log_and_model
    items = pa.table({"movie_id": pa.array(range(1, 41), pa.int64())})
    users = pa.table({"user_id": pa.array([7, 8, 9], pa.int64()), "age": [20.0, 35.0, 61.0],
                      "gender": ["M", "F", "M"], "occupation": ["writer", "other", "artist"]})
    layout = PairLayout("user_id", "movie_id", (), {})
    whole = PairScorer(model, items, layout, k=5, batch_pairs=1000)
    sliced = PairScorer(model, items, layout, k=5, batch_pairs=7)   # 40 items: 6 slices
    calls = []
    serve = sliced._serve
    sliced._serve = lambda **batch: calls.append(len(batch["movie_id"])) or serve(**batch)
    (ids_w, scores_w), = list(whole.score_blocks(users))
    blocks = list(sliced.score_blocks(users))
    assert [ids for ids, _ in blocks] == [[7], [8], [9]]
    np.testing.assert_allclose(np.vstack([s for _, s in blocks]), scores_w, rtol=1e-6)
    assert max(calls) <= 7 and sum(calls) == 3 * 40 == sliced.pairs_scored
    # The same lists; a score may differ in float32's last digit (another batch shape).
    a, b = list(whole.top_k(users)), list(sliced.top_k(users))
    assert [(r["user"], r["rank"], r["item"]) for r in a] == \
        [(r["user"], r["rank"], r["item"]) for r in b]
    np.testing.assert_allclose([r["score"] for r in a], [r["score"] for r in b], rtol=1e-6)


def test_out_never_replaces_a_file_or_a_folder_retrain_did_not_write(log_and_model, tmp_path):
    """--out is replaced whole on a rerun, so pointing it at a file or at someone's folder
    is refused in one line naming the path, before any pair is scored; nothing is
    changed and the file's content is not echoed. Found by trying `--out /etc/passwd`,
    which replaced the file with the partition folder."""
    root, span, model = log_and_model
    afile = tmp_path / "notes.txt"
    afile.write_text("SECRET-CONTENT-1234\n")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "keep.csv").write_text("a,b\n")
    args = ("--raw-root", str(root / "raw"), "--span", span, "--model-dir", model,
            "--active-days", "30", "--k", "3", "--max-users", "5", "--max-items", "20")
    for target in (afile, folder):
        run = _cli(*args, "--out", str(target))
        assert run.returncode == 2, run.stderr[-3000:]
        (line,) = [x for x in run.stderr.splitlines() if x.startswith("retrain recommend:")]
        assert str(target) in line and "refusing to replace it" in line, line
        assert "SECRET" not in run.stderr + run.stdout and "Traceback" not in run.stderr
        assert _progress_lines(run.stderr) == []          # refused before scoring
    assert afile.read_text() == "SECRET-CONTENT-1234\n"
    assert [p.name for p in folder.iterdir()] == ["keep.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "notes.txt"]

    ours = tmp_path / "recs"
    for _ in range(2):                                    # its own output: rerun replaces
        run = _cli(*args, "--out", str(ours))
        assert run.returncode == 0, run.stderr[-3000:]
    assert read_json(ours / "summary.json")["k"] == 3


def test_a_model_dir_without_a_model_and_a_bad_span_are_refused_by_name(log_and_model,
                                                                       tmp_path):
    """Found by trying `--model-dir /etc`: the folder was only opened inside the Beam
    job's workers, which printed TensorFlow's traceback after the scoring plan; a bad
    --span failed with Python's "month must be in 1..12", naming no flag. Now each is one
    line naming the flag and the path, before a window is read or a worker started, and
    a model's artifact folder points at its serving_model/. A text model failed in the
    workers on its text ops; now it is named as no CTR model."""
    root, span, model = log_and_model
    secret = tmp_path / "plain"
    secret.mkdir()
    (secret / "saved_model.txt").write_text("SECRET-CONTENT-1234\n")
    artifact = tmp_path / "artifact"
    (artifact / "serving_model").mkdir(parents=True)
    (artifact / "serving_model" / "saved_model.pb").write_bytes(b"")
    text_model = tmp_path / "text-model"        # another family's export: TensorFlow
    (text_model / "assets.extra").mkdir(parents=True)   # failed on its ops in the workers
    (text_model / "saved_model.pb").write_bytes(b"")
    (text_model / "assets.extra" / "labels.json").write_text('{"tasks": {}}')
    args = ("--raw-root", str(root / "raw"), "--out", str(tmp_path / "recs"),
            "--active-days", "30", "--k", "3", "--max-users", "5", "--max-items", "20")
    cases = [(("--span", span, "--model-dir", str(secret)),
              f"--model-dir {secret}: not an exported model"),
             (("--span", span, "--model-dir", str(tmp_path / "absent")),
              f"--model-dir {tmp_path / 'absent'}: no such folder"),
             (("--span", span, "--model-dir", str(artifact)),
              f"give {artifact / 'serving_model'}"),
             (("--span", span, "--model-dir", str(text_model)),
              f"model_dir (--model-dir): {text_model} is not a CTR model"),
             (("--span", "2026-13-01", "--model-dir", model), "span (--span): not a date")]
    for extra, expected in cases:
        run = _cli(*args, *extra)
        assert run.returncode == 2, run.stderr[-3000:]
        (line,) = [x for x in run.stderr.splitlines() if x.startswith("retrain recommend:")]
        assert expected in line, line
        assert "SECRET" not in run.stderr + run.stdout and "Traceback" not in run.stderr
        assert _progress_lines(run.stderr) == [] and "scoring" not in run.stderr
    assert not (tmp_path / "recs").exists()


def test_a_longer_seen_memory_keeps_every_movie_a_user_rated_out_of_their_list(log_and_model):
    """--seen-days 40: no user gets back a movie they rated in any of the 40 days, though
    only the last 7 days' users are scored; with the 7 days' memory alone some list holds
    a movie its user rated before them (so the option is what keeps it out)."""
    from components.ctr import rawdata
    from retrain.common.paths import partition

    root, span, model = log_and_model
    days = sorted(p.name.removeprefix("dt=") for p in (root / "raw").glob("dt=*"))
    rated: dict[str, set[str]] = {}
    for day in days:
        rows = rawdata.read_span(partition(str(root / "raw"), day), _config())
        for u, m in zip(rows.column("user_id").to_pylist(), rows.column("movie_id").to_pylist()):
            rated.setdefault(str(u), set()).add(str(m))

    def again(out: Path, *flags: str) -> int:
        run = _cli("--raw-root", str(root / "raw"), "--span", span, "--out", str(out),
                   "--model-dir", model, "--active-days", "7", "--k", "5", "--all",
                   "--exclude-seen", "--progress-seconds", "0", *flags)
        assert run.returncode == 0, run.stderr[-3000:]
        recs = pq.read_table(sorted(str(p) for p in out.glob("part-*.parquet")))
        return sum(str(m) in rated[str(u)] for u, m in zip(recs.column("user").to_pylist(),
                                                           recs.column("item").to_pylist()))

    assert again(root / "recs-seen-7") > 0
    assert again(root / "recs-seen-40", "--seen-days", "40", "--seen-max", "5000") == 0
    summary = read_json(root / "recs-seen-40" / "summary.json")
    assert summary["seen_days_read"] == days[-40:] and len(summary["days_read"]) == 7
    assert summary["seen_max"] == 5000
