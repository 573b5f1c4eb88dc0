"""RETRAIN_BEAM_ARGS: one setting gives every Beam job a DAG run starts its runner flags,
pinned in the run context, so validation statistics, preprocessing and evaluation run on
the operator's runner (before it, validation hard-coded the in-process DirectRunner and
no DAG passed any runner flag)."""
from __future__ import annotations

import json

import pytest

from components.ctr import stages as ctr_stages
from components.ctr import validate
from components.text import stages as text_stages
from retrain.common.errors import ConfigError
from retrain.common.run_context import RunContext
from retrain.common.settings import beam_flags, settings

FLAGS = ("--runner=PortableRunner", "--job_endpoint=beam-jobs:8099",
         "--environment_type=EXTERNAL", "--environment_config=pool:50000")
PARAMS = {"window_days": 3, "eval_percent": 10, "min_auc": 0.6}


def test_the_setting_parses_shell_quoted_flags_and_refuses_others(monkeypatch):
    monkeypatch.setenv("RETRAIN_BEAM_ARGS", " ".join(FLAGS) + " '--labels=team=ads ml'")
    assert beam_flags(settings().beam_args) == (*FLAGS, "--labels=team=ads ml")
    monkeypatch.setenv("RETRAIN_BEAM_ARGS", "--runner=FlinkRunner secret-positional")
    with pytest.raises(ConfigError, match="RETRAIN_BEAM_ARGS=.*--flag") as e:
        settings()
    assert "secret-positional" not in str(e.value).split(":", 1)[1].split("(")[0]
    monkeypatch.setenv("RETRAIN_BEAM_ARGS", "--runner='unclosed")
    with pytest.raises(ConfigError, match="RETRAIN_BEAM_ARGS.*shell-quoted"):
        settings()
    monkeypatch.delenv("RETRAIN_BEAM_ARGS")
    assert beam_flags(settings().beam_args) == ()


def test_the_run_context_carries_the_flags_into_every_beam_step():
    ctx = RunContext.create("ctr", "2026-11-03", "/h", "r", beam_args=list(FLAGS))
    ctx = RunContext.from_xcom(json.loads(json.dumps(ctx.to_xcom())))     # through XCom
    assert ctx.beam_args == FLAGS
    upstream = {"preprocess": {"output_dir": "/p"}, "train": {"model_dir": "/m"},
                "published": None}
    for spec in (ctr_stages.validate(ctx, PARAMS, upstream),
                 ctr_stages.preprocess(ctx, PARAMS, upstream).spec,
                 ctr_stages.evaluate(ctx, PARAMS, upstream),
                 text_stages.preprocess(ctx, PARAMS, upstream).spec):
        assert spec["beam_args"] == list(FLAGS), spec
    assert "beam_args" not in ctr_stages.train(ctx, {"ps_count": 1, "worker_count": 1},
                                               upstream)
    # No flags: the specs say nothing and each step keeps its own default runner.
    plain = RunContext.create("ctr", "2026-11-03", "/h", "r")
    assert "beam_args" not in ctr_stages.validate(plain, PARAMS, upstream)
    assert "beam_args" not in ctr_stages.preprocess(plain, PARAMS, upstream).spec


def test_validation_statistics_run_on_the_specs_runner():
    spec = validate.ValidateSpec(span_dir="/s", out_dir="/o", beam_args=list(FLAGS))
    assert validate.stats_args(spec)[-len(FLAGS):] == list(FLAGS)
    assert "--runner=DirectRunner" not in validate.stats_args(spec)
    default = validate.ValidateSpec(span_dir="/s", out_dir="/o")
    assert validate.stats_args(default)[-1] == "--runner=DirectRunner"
