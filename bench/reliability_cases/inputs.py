"""Params, run inputs and family configs: what the trigger form, the run-input check
(resolve_span) and the steps' config loaders refuse.
"""
from __future__ import annotations

import datetime as dt
import os
from typing import Callable

from .harness import (REPO, SPAN, TEXT_CONFIG, CaseEnv, Outcome, config_case, quiet_launch_log,
                      spec_case)


def run_inputs_case(span: str | None = None, raw_root: Callable[[CaseEnv], str] | None = None,
                    config: Callable[[CaseEnv], str] | None = None,
                    roots: Callable[[CaseEnv], str] | None = None
                    ) -> Callable[[CaseEnv], Outcome]:
    """The first task of both DAGs (resolve_span in retrain/orchestration/dag_factory.py): the run-input
    check, then the family's config loader on the config file; any problem refuses the run
    (AirflowFailException: no retry, no sensor wait)."""
    def setup(env: CaseEnv) -> Outcome:
        from retrain.common import run_inputs
        from retrain.orchestration.families import FAMILIES, resolve
        family = FAMILIES[env.fam]
        env.copy_raw()
        day = dt.date.fromisoformat(span or SPAN[env.fam])
        cfg = config(env) if config else ""
        rr = raw_root(env) if raw_root else str(env.raw_root)
        old = os.environ.get("RETRAIN_ALLOWED_DATA_ROOTS")
        old_configs = os.environ.get("RETRAIN_CONFIG_ROOTS")
        os.environ["RETRAIN_CONFIG_ROOTS"] = str(env.home)   # the cases' configs live there
        if roots:
            os.environ["RETRAIN_ALLOWED_DATA_ROOTS"] = roots(env)
        try:
            problems = run_inputs.check(day, raw_root=rr, config=cfg,
                                        config_param=family.config_param)
            if cfg and not problems:
                try:
                    resolve(family.config_loader)(cfg)
                except Exception as e:  # noqa: BLE001 - as resolve_span does
                    problems.append(f"{family.config_param} {cfg}: {e}")
        finally:
            if old_configs is None:
                os.environ.pop("RETRAIN_CONFIG_ROOTS", None)
            else:
                os.environ["RETRAIN_CONFIG_ROOTS"] = old_configs
            if roots:
                if old is None:
                    os.environ.pop("RETRAIN_ALLOWED_DATA_ROOTS", None)
                else:
                    os.environ["RETRAIN_ALLOWED_DATA_ROOTS"] = old
        if problems:
            return Outcome(True, "refused", "refusing the run: " + "; ".join(problems))
        return Outcome(False, "accepted", "run inputs accepted")
    return setup


_PARAMS_CACHE: dict[str, dict] = {}


def params_case(values: dict) -> Callable[[CaseEnv], Outcome]:
    """The DAG's params as the trigger form / REST API validate them (airflow Param schema,
    built by retrain.orchestration.dag_factory.family_params)."""
    def setup(env: CaseEnv) -> Outcome:
        from retrain.orchestration.families import FAMILIES
        if env.fam not in _PARAMS_CACHE:
            from retrain.orchestration.dag_factory import family_params
            _PARAMS_CACHE[env.fam] = family_params(FAMILIES[env.fam])
        from airflow.sdk.definitions.param import ParamsDict
        quiet_launch_log()       # importing airflow reconfigured logging
        params = ParamsDict(dict(_PARAMS_CACHE[env.fam]))
        problems = []
        for key, value in values.items():   # what a run's conf does to the DAG's params
            try:
                params[key] = value
                params.validate()
            except Exception as e:  # noqa: BLE001 - ParamValidationError
                problems.append(f"{type(e).__name__}: {e}")
        if problems:
            return Outcome(True, "param_schema", "; ".join(problems))
        return Outcome(False, "accepted", f"params {values} accepted")
    return setup


def _cfg_base(**override) -> str:
    """The CTR feature config of the generated logs, with top-level keys replaced."""
    import yaml
    src = REPO / "components" / "ctr" / "feature_configs" / "generated.yaml"
    data = yaml.safe_load(src.read_text())
    for k, v in override.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    return yaml.safe_dump(data, sort_keys=False)


def _ctr_cfg(fn: Callable[[dict], None]) -> Callable[[], str]:
    def make() -> str:
        import yaml
        src = REPO / "components" / "ctr" / "feature_configs" / "generated.yaml"
        data = yaml.safe_load(src.read_text())
        fn(data)
        return yaml.safe_dump(data, sort_keys=False)
    return make


def _text_cfg(fn: Callable[[dict], None]) -> Callable[[], str]:
    def make() -> str:
        import yaml
        data = yaml.safe_load(TEXT_CONFIG)
        fn(data)
        return yaml.safe_dump(data, sort_keys=False)
    return make


def cfg_file(content: Callable[[], str] | str, name: str = "bad-config.yaml"
             ) -> Callable[[CaseEnv], str]:
    def make(env: CaseEnv) -> str:
        p = env.home / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content() if callable(content) else content)
        return str(p)
    return make


def lazy_config_case(content: Callable[[], str], stage: str = "validate"):
    def setup(env: CaseEnv) -> Outcome:
        return config_case(content(), stage)(env)
    return setup


def _set(path: str, value):
    def fn(data: dict) -> None:
        *head, last = path.split(".")
        d = data
        for k in head:
            d = d.setdefault(k, {})
        if value is _DELETE:
            d.pop(last, None)
        else:
            d[last] = value
    return fn


_DELETE = object()


def _feature_names(data: dict) -> list[str]:
    return [f.get("name") for f in data.get("features", [])]


def input_cases(add) -> None:
    # -------------------------------------------------- run inputs (resolve_span), both
    for fam in ("ctr", "text"):
        cp = "feature_config" if fam == "ctr" else "text_config"
        ri = [
            ("future_span", dict(span="2099-01-01"), ["2099-01-01", "RETRAIN_MAX_FUTURE_DAYS"]),
            ("relative_raw_root", dict(raw_root=lambda e: "../raw"), ["raw_root", "../raw"]),
            ("raw_root_outside_allowed", dict(raw_root=lambda e: "/etc",
                                              roots=lambda e: str(e.home)),
             ["raw_root", "/etc", "RETRAIN_ALLOWED_DATA_ROOTS"]),
            ("raw_root_traversal", dict(raw_root=lambda e: f"{e.home}/../../etc",
                                        roots=lambda e: str(e.home)),
             ["raw_root", "RETRAIN_ALLOWED_DATA_ROOTS"]),
            ("raw_root_is_a_file", dict(raw_root=lambda e: "/etc/passwd"), ["raw_root",
                                                                            "/etc/passwd"]),
            ("relative_config", dict(config=lambda e: "configs/x.yaml"), [cp, "configs/x.yaml"]),
            ("config_missing", dict(config=lambda e: f"{e.home}/nope.yaml"), [cp, "nope.yaml"]),
            ("config_is_a_folder", dict(config=lambda e: str(e.home)), [cp]),
            ("config_is_etc_passwd", dict(config=lambda e: "/etc/passwd"), [cp, "/etc/passwd"]),
            ("config_bad_yaml", dict(config=cfg_file("a: [1, 2\nb: {")), [cp, "bad-config.yaml"]),
            ("config_not_a_mapping", dict(config=cfg_file("- 1\n- 2\n")), [cp, "mapping"]),
        ]
        for name, kw, names in ri:
            add(f"{fam}.inputs.{name}", fam, "run_inputs", "params", run_inputs_case(**kw),
                names, kinds=("refused",))
        # DAG params, as the trigger form / REST API check them
        pr = [
            ("window_days_0", {"window_days": 0}, ["window_days"]),
            ("eval_percent_0", {"eval_percent": 0}, ["eval_percent"]),
            ("eval_percent_150", {"eval_percent": 150}, ["eval_percent"]),
            ("empty_force_reason", {"force_bless_reason": ""}, ["force_bless_reason"]),
            ("epochs_0", {"epochs": 0}, ["epochs"]),
            ("min_auc_2", {"min_auc": 2}, ["min_auc"]),
            ("span_not_a_date", {"span": "2026-13-45"}, ["span"]),
        ]
        if fam == "ctr":
            pr += [("ps_count_0", {"ps_count": 0}, ["ps_count"]),
                   ("worker_count_string", {"worker_count": "many"}, ["worker_count"])]
        else:
            pr += [("batch_size_0", {"batch_size": 0}, ["batch_size"]),
                   ("strategy_unknown", {"strategy": "tpu_magic"}, ["strategy"]),
                   ("max_seq_length_4", {"max_seq_length": 4}, ["max_seq_length"])]
        for name, values, names in pr:
            add(f"{fam}.params.{name}", fam, "params", "params", params_case(values), names,
                kinds=("param_schema",))

    # -------------------------------------------------- step specs (past the DAG's checks)
    add("ctr.spec.preprocess_eval_percent_0", "ctr", "preprocess", "params",
        spec_case("preprocess", {"eval_percent": 0}), ["eval_percent"])
    add("ctr.spec.preprocess_window_days_0", "ctr", "preprocess", "params",
        spec_case("preprocess", {"window_days": 0}), ["window_days"])
    add("ctr.spec.train_missing_preprocess_dir", "ctr", "train", "params",
        spec_case("train", lambda e: {"preprocess_dir": str(e.home / "no-such-pre")}),
        ["no-such-pre"])
    add("ctr.spec.evaluate_not_a_model", "ctr", "evaluate", "params",
        spec_case("evaluate", lambda e: {"candidate_model_dir": str(e.raw_root)}),
        ["{raw}"])
    add("text.spec.train_batch_size_0", "text", "train", "params",
        spec_case("train", {"batch_size": 0}), ["batch_size"])
    add("text.spec.train_strategy_unknown", "text", "train", "params",
        spec_case("train", {"strategy": "tpu_magic"}), ["strategy"])
    add("text.spec.train_checkpoint_missing", "text", "train", "params",
        spec_case("train", lambda e: {"checkpoint_dir": str(e.home / "no-ckpt")}), ["no-ckpt"])
    add("text.spec.preprocess_eval_percent_100", "text", "preprocess", "params",
        spec_case("preprocess", {"eval_percent": 100}), ["eval_percent"])

    # -------------------------------------------------- family configs
    ctr_cfgs = [
        ("unknown_key", _ctr_cfg(_set("surprise_key", 1)), ["surprise_key"]),
        ("missing_label", _ctr_cfg(_set("label", _DELETE)), ["label"]),
        ("label_not_a_column", _ctr_cfg(_set("label", "no_such_column")), ["no_such_column"],
         "accepted"),   # a column name the loader cannot check without the data
        ("thresholds_inverted", _ctr_cfg(_set("validation.thresholds",
                                              {"min_label_rate": 0.5, "max_label_rate": 0.1})),
         ["min_label_rate"]),
        ("threshold_not_a_number", _ctr_cfg(_set("validation.thresholds",
                                                 {"min_rows": "lots"})), ["min_rows"]),
        ("threshold_unknown", _ctr_cfg(_set("validation.thresholds", {"min_rowz": 5})),
         ["min_rowz"]),
        ("bad_yaml", lambda: "features: [\n  - name: x\n    type: {int\n", ["config.yaml"]),
    ]
    for name, content, names, *resolve_ok in ctr_cfgs:
        add(f"ctr.config.{name}", "ctr", "validate", "config", lazy_config_case(content),
            names)
        add(f"ctr.config.resolve_{name}", "ctr", "run_inputs", "config",
            run_inputs_case(config=cfg_file(content)),
            [] if resolve_ok else ["feature_config", *names[:1]]
            if names != ["config.yaml"] else ["feature_config", "bad-config.yaml"],
            kinds=("refused",), expect="accepted" if resolve_ok else "refused")
    text_cfgs = [
        ("unknown_key", _text_cfg(_set("surprise_key", 1)), ["surprise_key"]),
        ("missing_label_column", _text_cfg(_set("tasks.queue.label_column", _DELETE)),
         ["queue"], "accepted"),   # label_column defaults to the task name
        ("one_label", _text_cfg(_set("tasks.queue.labels", ["billing"])), ["labels"]),
        ("positive_not_a_label", _text_cfg(_set("tasks.queue.positive", "sales")), ["sales"]),
        ("max_class_share_2", _text_cfg(_set("validation.max_class_share", 2)),
         ["max_class_share"]),
        ("min_rows_negative", _text_cfg(_set("validation.min_rows", -5)), ["min_rows"]),
        # the path is a value of the file: named by its key, never echoed (rule 22)
        ("checkpoint_missing", _text_cfg(_set("checkpoint", "/nonexistent/ckpt")),
         ["checkpoint"]),
        ("bad_yaml", lambda: "tasks: {queue: [\n", ["config.yaml"]),
    ]
    for name, content, names, *resolve_ok in text_cfgs:
        add(f"text.config.{name}", "text", "validate", "config", lazy_config_case(content),
            names)
        add(f"text.config.resolve_{name}", "text", "run_inputs", "config",
            run_inputs_case(config=cfg_file(content)),
            [] if resolve_ok else ["text_config", *names[:1]]
            if names != ["config.yaml"] else ["text_config", "bad-config.yaml"],
            kinds=("refused",), expect="accepted" if resolve_ok else "refused")
