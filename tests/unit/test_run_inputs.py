"""A run's inputs are refused before any work, each problem named: a span in the future,
relative paths, folders outside the allowed roots, a missing config file."""
from __future__ import annotations

import datetime as dt

from retrain.common import run_inputs

TODAY = dt.date(2026, 12, 1)


def _check(span, **kw):
    kw.setdefault("raw_root", None)
    kw.setdefault("config", None)
    return run_inputs.check(span, config_param="text_config", today=TODAY,
                            max_future_days=1, **kw)


def test_span_in_the_future_and_bad_paths_are_named(tmp_path):
    assert _check(dt.date(2026, 12, 2), raw_root=str(tmp_path)) == []    # clock slack
    problems = _check(dt.date(2030, 1, 1), raw_root="../../", config=str(tmp_path / "no.yaml"))
    assert len(problems) == 3
    assert "span 2030-01-01 is in the future" in problems[0]
    assert "raw_root '../../' is a relative path" in problems[1]
    assert "text_config" in problems[2] and "does not exist" in problems[2]
    assert _check(TODAY, raw_root="gs://bucket/logs") == []              # object stores


def test_allowed_roots_keep_runs_inside_the_data_area(tmp_path):
    data = tmp_path / "data"
    (data / "clicks").mkdir(parents=True)
    roots = [data.resolve()]
    assert run_inputs.check(TODAY, raw_root=str(data / "clicks"), config=None,
                            config_param="c", today=TODAY, roots=roots) == []
    problems = run_inputs.check(TODAY, raw_root="/etc", config=None, config_param="c",
                                today=TODAY, roots=roots)
    assert problems and "outside the allowed data roots" in problems[0]
    escape = str(data / "clicks" / ".." / ".." / "elsewhere")
    assert "outside" in run_inputs.check(TODAY, raw_root=escape, config=None,
                                         config_param="c", today=TODAY, roots=roots)[0]


# ------------------------------------------------ config params: confined, never echoed

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from retrain.common.errors import BadDataFailed  # noqa: E402
from retrain.orchestration.families import FAMILIES, resolve  # noqa: E402
from retrain.orchestration.launch import run_step  # noqa: E402

SECRETS = ("SECRETHASHabc", "AKIASECRET123", "SECRETVALUE42")
# Files a config param might be pointed at, each holding a secret. A shadow line ends in
# ':', so YAML reads the whole line, hash included, as a mapping key.
PLANTED: dict[str, str | bytes] = {
    "shadow": "root:$6$SECRETHASHabc:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
    "credentials": "[default]\naws_access_key_id = AKIAEXAMPLE\n"
                   "aws_secret_access_key = AKIASECRET123\n",
    "credentials.yaml": "aws_secret_access_key = AKIASECRET123\n",
    "aws.yaml": "aws_secret_access_key: AKIASECRET123\nregion: eu-west-1\n",
    "unknown_key.yaml": "example_id: id\nlabel: clicked\nsurprise_key: SECRETVALUE42\n"
                        "tasks: {q: {labels: [a, b], token: SECRETVALUE42}}\n"
                        "validation: {extra: SECRETVALUE42, thresholds: {x: SECRETVALUE42}}\n",
    "known_keys_wrong_types.yaml": (
        "name: [SECRETVALUE42]\ndescription: {token: SECRETVALUE42}\n"
        "label: 'SECRETVALUE42 x'\nexample_id: 'SECRETVALUE42!'\ntext: [SECRETVALUE42]\n"
        "text_template: 'SECRETVALUE42'\ncheckpoint: /SECRETVALUE42/ckpt\n"
        "class_weighting: [SECRETVALUE42]\nmax_seq_length: SECRETVALUE42\n"
        "bucket_boundaries: SECRETVALUE42\n"
        "features:\n"
        "  - {name: 'SECRETVALUE42 x', kind: 'SECRETVALUE42 y', transform: zscore}\n"
        "  - {name: age, kind: numeric, transform: bucketize, buckets: SECRETVALUE42}\n"
        "  - {name: c, kind: categorical, transform: vocabulary, top_k: 5, dtype: "
        "'SECRETVALUE42 z'}\n"
        "  - 'SECRETVALUE42'\n"
        "crosses: [{name: x, features: ['SECRETVALUE42 a', c], hash_buckets: 'SECRETVALUE42'}]\n"
        "slices: ['SECRETVALUE42 s']\n"
        "model: {deep_fields: 'SECRETVALUE42', id_l2: {c: 'SECRETVALUE42'}}\n"
        "validation:\n"
        "  thresholds: {min_rows: SECRETVALUE42}\n"
        "  ranges: {age: SECRETVALUE42}\n"
        "  patterns: {c: '(SECRETVALUE42'}\n"
        "  drift: {age: {metric: 'SECRETVALUE42 m', max: SECRETVALUE42}}\n"
        "  min_rows: SECRETVALUE42\n"
        "gate: {min_auc: SECRETVALUE42}\n"
        "tasks:\n"
        "  q: {label_column: [SECRETVALUE42], labels: SECRETVALUE42, positive: 'SECRETVALUE42 p'}\n"
        "  r: {labels: ['SECRETVALUE42 a', 'SECRETVALUE42 a'], thresholds: SECRETVALUE42}\n"),
    "broken.yaml": "label: clicked\nfeatures: [SECRETVALUE42\n  - {\n",
    "broken.json": '{"label": "SECRETVALUE42", "x": [SECRETVALUE42}',
    "tab.yaml": "a:\n\tSECRETVALUE42: 1\n",                      # "found character '\\t'..."
    "alias.yaml": "a: *SECRETVALUE42\n",                         # "found undefined alias ..."
    "tag.yaml": "a: !!python/object:SECRETVALUE42 {}\n",         # "could not determine ..."
    "date.yaml": "a: 2026-13-45\nb: SECRETVALUE42\n",
    "latin1.yaml": b"label: \xff SECRETVALUE42\n",
    "list.yaml": "- SECRETVALUE42\n- AKIASECRET123\n",
}


def _plant(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, content in PLANTED.items():
        path = folder / name
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        out[name] = path
    return out


def _as_resolve_span_does(family, config: str, config_roots) -> list[str]:
    """What retrain/orchestration/dag_factory.py resolve_span puts into its AirflowFailException."""
    problems = run_inputs.check(TODAY, raw_root=None, config=config,
                                config_param=family.config_param, today=TODAY,
                                max_future_days=1, roots=[], config_roots=config_roots)
    if config and not problems:
        try:   # in a step process, as resolve_span does
            run_step("components.config_check", {"loader": family.config_loader,
                                                 "path": config})
        except BadDataFailed as e:
            problems.append(f"{family.config_param} {config}: {e}")
    return problems


def _no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} echoed in: {text}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_config_param_never_echoes_the_file_it_names(tmp_path, family):
    family = FAMILIES[family]
    root = tmp_path / "configs"
    inside = _plant(root)
    outside = _plant(tmp_path / "elsewhere")
    links = {}
    for name, target in outside.items():
        links[name] = root / f"link-{name}"
        links[name].symlink_to(target)
    roots = [root.resolve()]
    for name in PLANTED:
        # Inside the roots: the loader reads it, and its refusal names file and places only.
        problems = _as_resolve_span_does(family, str(inside[name]), roots)
        assert problems, name
        _no_secret("; ".join(problems))
        assert str(inside[name]) in problems[0]
        # Outside the roots, directly or through a symlink inside them: refused unread,
        # naming the param, the path and the setting to change.
        for path in (outside[name], links[name]):
            problems = _as_resolve_span_does(family, str(path), roots)
            assert len(problems) == 1, problems
            _no_secret(problems[0])
            for part in (family.config_param, str(path), "outside the allowed config "
                         "folders", run_inputs.CONFIG_ROOTS_ENV):
                assert part in problems[0], (part, problems[0])
        assert "resolves to" in _as_resolve_span_does(family, str(links[name]), roots)[0]
        # The loaders themselves (the steps call them too) never echo, wherever the file is.
        for path in (inside[name], outside[name], links[name]):
            with pytest.raises(Exception) as e:
                resolve(family.config_loader)(str(path))
            _no_secret(str(e.value))
            _no_secret(repr(e.value))
            assert e.value.__cause__ is None or not any(
                s in str(e.value.__cause__) for s in SECRETS)


def test_config_roots_are_the_bundled_folders_the_setting_and_the_data_roots(
        tmp_path, monkeypatch):
    from components.ctr import feature_config
    from components.text import task_config
    monkeypatch.delenv("RETRAIN_CONFIG_ROOTS", raising=False)
    monkeypatch.delenv("RETRAIN_ALLOWED_DATA_ROOTS", raising=False)
    bundled = run_inputs.bundled_config_roots()
    assert feature_config.PACKAGED_DIR in bundled and task_config.PACKAGED_DIR in bundled
    assert run_inputs.allowed_config_roots() == list(bundled)
    # The bundled configs are accepted with nothing set; any other file is not.
    assert _check(TODAY, config=str(task_config.DEFAULT_CONFIG)) == []
    mine = tmp_path / "team" / "tickets.yaml"
    mine.parent.mkdir()
    mine.write_text("example_id: id\ntext: body\ntasks: {q: {labels: [a, b]}}\n")
    assert "RETRAIN_CONFIG_ROOTS" in _check(TODAY, config=str(mine))[0]
    assert "outside" in _check(TODAY, config="/etc/passwd")[0]
    # The deployment names its folders...
    monkeypatch.setenv("RETRAIN_CONFIG_ROOTS", os.pathsep.join(["/nowhere", str(mine.parent)]))
    assert _check(TODAY, config=str(mine)) == []
    assert "does not exist" in _check(TODAY, config=str(mine.parent / "no.yaml"))[0]
    escape = str(mine.parent / ".." / "elsewhere.yaml")
    assert "outside" in _check(TODAY, config=escape)[0]
    # ... or ships configs beside the data, as RETRAIN_ALLOWED_DATA_ROOTS always allowed.
    monkeypatch.delenv("RETRAIN_CONFIG_ROOTS")
    monkeypatch.setenv("RETRAIN_ALLOWED_DATA_ROOTS", str(tmp_path))
    assert _check(TODAY, config=str(mine)) == []
    # Existence is only looked at inside the roots (no probing the disk through a param).
    monkeypatch.delenv("RETRAIN_ALLOWED_DATA_ROOTS")
    assert "outside" in _check(TODAY, config="/etc/no-such-file.yaml")[0]


def test_resolve_span_refuses_a_planted_secret_without_echoing_it(tmp_path, monkeypatch):
    """Through the real first task of both DAGs (its callable, without a scheduler)."""
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.orchestration.dag_factory import make_dag

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RETRAIN_CONFIG_ROOTS", str(tmp_path / "configs"))
    monkeypatch.setenv("RETRAIN_MAX_FUTURE_DAYS", "3650")
    inside = _plant(tmp_path / "configs")
    outside = _plant(tmp_path / "elsewhere")
    (tmp_path / "configs" / "link").symlink_to(outside["shadow"])
    raw = tmp_path / "raw"
    raw.mkdir()
    for family in FAMILIES.values():
        task = make_dag(family)().get_task("resolve_span")
        for path in (inside["shadow"], inside["unknown_key.yaml"], inside["broken.yaml"],
                     inside["known_keys_wrong_types.yaml"], outside["aws.yaml"],
                     tmp_path / "configs" / "link"):
            params = {"span": "2026-12-01", "raw_root": str(raw),
                      family.config_param: str(path), "shadow": None}
            with pytest.raises(AirflowFailException) as e:
                task.python_callable(params=params, logical_date=None, dag_run=None,
                                     run_id="manual__secret")
            assert str(path) in str(e.value) and family.config_param in str(e.value)
            _no_secret(str(e.value))
            assert e.value.__context__ is None and e.value.__cause__ is None
