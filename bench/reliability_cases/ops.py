"""Hostile use, round 2, on the operator's side: bad deployment settings, published files
changed after a publish, a `<script>` in the data reaching a served page, the admin
password's file, the training cluster's listeners, and record text in a refusal.

Each case drives the real product (the `retrain` CLI, the validate step, the stack's and
`make ui`'s password writers, the Kubernetes renderer) and states what a correct product
must do: exit non-zero naming the setting without a traceback, refuse or repair a damaged
registry naming the file, write data into HTML only escaped, keep a secret in a mode-600
file and out of every log, admit only the job's own pods, name a bad record by file and
line without printing it.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

from .harness import (PY, REPO, CaseEnv, Outcome, cli_outcome, edit_column, leaked, log,
                      raw_case, read_jsonl)
from .raw_data import _add_col, _every
from .registry import current_version, registry_case, registry_copy

# ------------------------------------------------------------------ settings

BAD_SETTINGS = [
    ("publish_deadline_hours_1e308", "RETRAIN_PUBLISH_DEADLINE_HOURS", "1e308"),
    ("schedule_not_cron", "RETRAIN_SCHEDULE", "every day at noon"),
    ("relative_home", "RETRAIN_HOME", "var/retrain-home"),
]


def settings_case(var: str | None, value: str | None):
    """`retrain settings check` (what `make ui` and `retrain stack up` run first) with one
    setting bad; None: the campaign's own settings, which must pass (the control)."""
    def setup(env: CaseEnv) -> Outcome:
        return cli_outcome(["settings", "check"], env.home, env={var: value} if var else None)
    return setup


# ------------------------------------------------------------------ published files

def _model_file(mdir: Path) -> Path:
    return sorted((mdir / str(current_version(mdir)) / "variables").glob("variables.data-*"))[0]


def _replace_model_bytes(mdir: Path) -> None:
    """A published weights file rewritten in place: same path, same size, other bytes."""
    f = _model_file(mdir)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


def _truncate_meta(mdir: Path) -> None:
    meta = mdir / str(current_version(mdir)) / "retrain_meta.json"
    data = meta.read_bytes()
    meta.write_bytes(data[: len(data) // 2])


def doctor_case(env: CaseEnv) -> Outcome:
    """CURRENT truncated: `registry doctor` reports it (exit 1, naming CURRENT),
    `doctor --repair` points it at the intact version, then `registry check` is ok."""
    from retrain.common.registry import Registry
    mdir = registry_copy(env)
    was = current_version(mdir)
    cur = mdir / "CURRENT"
    data = cur.read_bytes()
    cur.write_bytes(data[: len(data) // 2])
    report = cli_outcome(["registry", "doctor", env.fam], env.home)
    repair = cli_outcome(["registry", "doctor", env.fam, "--repair"], env.home)
    check = cli_outcome(["registry", "check", env.fam], env.home)
    try:
        now = Registry(env.home / "registry").current_version(env.fam)
    except Exception as e:  # noqa: BLE001 - still damaged
        now = f"{type(e).__name__}: {e}"
    steps = [("doctor", report), ("doctor --repair", repair), ("check", check)]
    message = " | ".join(f"{name}: {o.kind}: {' / '.join(o.message.splitlines()[:3])}"
                         for name, o in steps) + f" | CURRENT now {now} (was {was})"
    ok = (report.refused and report.kind == "cli" and "CURRENT" in report.message
          and not repair.refused and not check.refused and now == was)
    return Outcome(not ok, "accepted" if ok else "not_repaired", message)


# ------------------------------------------------------------------ served pages

XSS_MARK = "retrain-xss-4d1"
XSS = f'<script>alert("{XSS_MARK}")</script>'


def served_case(mutate):
    """A `<script>` planted in the data; the day fails validation, so Data Docs and the
    report are built: every HTML page under the case may hold it only escaped."""
    def setup(env: CaseEnv) -> Outcome:
        mutate(env.copy_raw())
        outcome = env.run_stage("validate")
        pages = [p for p in env.home.rglob("*.htm*") if p.is_file()]
        raw = [str(p.relative_to(env.home)) for p in pages if XSS.encode() in p.read_bytes()]
        shown = sum(XSS_MARK.encode() in p.read_bytes() for p in pages)
        outcome.figures = {"served_script": len(raw), "pages": len(pages),
                           "pages_showing_it_escaped": shown - len(raw), "raw_in": raw[:5]}
        outcome.message += (f" [{len(pages)} HTML page(s); the planted value escaped in "
                            f"{shown - len(raw)}, raw in {len(raw)}]")
        return outcome
    return setup


# ------------------------------------------------------------------ the admin password

def admin_password_case(env: CaseEnv) -> Outcome:
    """The two writers of the admin password, under a umask that would leave files
    world-readable: the production-shaped stack's (`retrain stack up`: its secret and
    SimpleAuthManager's file, over an older mode-644 file) and `make ui`'s
    (scripts/airflow-ui.sh --check-only, a generated password). Each file must be mode
    600, and the password must be in no message, log (the script's output is captured
    into the case's log and the campaign's) or other file."""
    from retrain.orchestration import stack as S
    old = os.umask(0)
    try:
        st = S.Stack(S.StackSpec(root=str(env.home / "stack")))
        pwfile = st._passwords_file()
        pwfile.parent.mkdir(parents=True, exist_ok=True)
        pwfile.write_text('{"admin": "from-an-older-version"}\n')
        pwfile.chmod(0o644)
        S._secret(st.root, "admin_password")      # as Stack.up creates it
        st.write_passwords_file()
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW", "RETRAIN_"))}
        keep["VENV"] = str(Path(PY).parent.parent)
        ui_home = env.home / "ui-airflow"
        run = subprocess.run(["bash", "-c", "umask 000 && exec scripts/airflow-ui.sh "
                              "--check-only"], cwd=REPO, capture_output=True, text=True,
                             timeout=180, env={**keep, "RETRAIN_AIRFLOW_HOME": str(ui_home)})
    finally:
        os.umask(old)
    said = run.stdout + run.stderr
    (env.home / "make-ui-check.log").write_text(said)
    log.info("make ui --check-only (exit %s) said: %s", run.returncode, said)
    ui_file = ui_home / "simple_auth_manager_passwords.json.generated"
    passwords = [st.admin_password()]
    if ui_file.is_file():
        passwords.append(json.loads(ui_file.read_text())["admin"])
    files = [st.admin_password_file(), pwfile, ui_file]
    modes = {str(p.relative_to(env.home)): (oct(p.stat().st_mode & 0o777) if p.exists()
                                            else "missing") for p in files}
    wide = {k: v for k, v in modes.items() if v != "0o600"}
    leaks = leaked(tuple(passwords), said, env.home)
    message = (f"password files {modes}; make ui exit {run.returncode}; "
               f"the password in {leaks or 'nothing printed, logged or written elsewhere'}")
    figures = {"modes": modes, "leaked": leaks}
    if wide or run.returncode or leaks:
        return Outcome(True, "secret_exposed", message, figures=figures)
    return Outcome(False, "accepted", message, figures=figures)


# ------------------------------------------------------------------ listeners

def _selects(selector: dict, labels: dict) -> bool:
    """A NetworkPolicy podSelector against a pod's labels (matchLabels; an expression is
    not used by the renderer, and is treated as not matching)."""
    if selector.get("matchExpressions"):
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def network_policy_case(env: CaseEnv) -> Outcome:
    """The CTR trainer's Kubernetes manifests as `components.ctr.k8s` renders them into a
    file (plain pods and TFJob): every pod of the job (chief, ps, workers) is selected by
    a NetworkPolicy of its namespace that admits ingress from the job's own pods only (no
    namespace, IP block or empty `from`; a pod of another job, same app, not admitted) on
    the gRPC port only. TensorFlow's servers bind every address, so this is what keeps
    other pods off the variables (tests/integration tests the namespace isolation)."""
    import yaml

    from components.ctr import k8s
    problems, seen = [], []
    for kind in ("pods", "tfjob"):
        name = "ctr-2026-11-03"
        out = env.home / f"{kind}.yaml"
        spec = k8s.K8sSpec(name=name, num_ps=2, num_workers=3, kind=kind, out_file=str(out),
                           train={"preprocess_dir": "/var/retrain/pre", "out_dir": "/var/o"})
        k8s.run(spec)
        docs = [d for d in yaml.safe_load_all(out.read_text()) if d]
        policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
        if kind == "pods":
            pods = [(d["metadata"]["namespace"], d["metadata"]["labels"]) for d in docs
                    if d["kind"] == "Pod"]
        else:
            job = next(d for d in docs if d["kind"] == "TFJob")
            pods = [(job["metadata"]["namespace"], r["template"]["metadata"]["labels"])
                    for r in job["spec"]["tfReplicaSpecs"].values()]
        roles = sorted({labels.get("retrain.io/role") for _, labels in pods})
        seen.append(f"{kind}: {len(pods)} pod template(s) of roles {roles}, "
                    f"{len(policies)} NetworkPolicy")
        if roles != ["chief", "ps", "worker"]:
            problems.append(f"{kind}: pods of roles {roles}")
        for ns, labels in pods:
            mine = [p for p in policies if p["metadata"].get("namespace") == ns
                    and _selects(p["spec"].get("podSelector") or {}, labels)
                    and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])]
            if not mine:
                problems.append(f"{kind}: pod {labels} is selected by no ingress policy")
                continue
            stranger = {**labels, "retrain.io/job": "another-job"}
            for p in mine:
                for rule in p["spec"].get("ingress") or []:
                    sources = rule.get("from")
                    if not sources:
                        problems.append(f"{kind}: an ingress rule with no `from` admits all")
                    for src in sources or []:
                        if set(src) != {"podSelector"}:
                            problems.append(f"{kind}: ingress from {sorted(src)}")
                        elif _selects(src["podSelector"], stranger) \
                                or not _selects(src["podSelector"], labels):
                            problems.append(f"{kind}: ingress admits {src['podSelector']}, "
                                            "not only the job's own pods")
                    ports = [(q.get("protocol", "TCP"), q.get("port"))
                             for q in rule.get("ports") or []]
                    if ports != [("TCP", k8s.PORT)]:
                        problems.append(f"{kind}: ingress ports {ports or 'all'}")
    message = "; ".join(seen) + (f"; problems: {sorted(set(problems))}" if problems else
                                 "; each pod admits only its job's pods on the gRPC port")
    return Outcome(bool(problems), "open_listener" if problems else "accepted", message)


# ------------------------------------------------------------------ record text

RECORD_TEXT = "RETRAIN-RECORD-TEXT-51c7e9"   # planted in records that fail validation


def _bad_json_with_text(span_dir: Path) -> None:
    (span_dir / "part-00001.jsonl").write_text(
        f'{{"ticket_id": "T9999", "subject": "{RECORD_TEXT} unterminated\n')


def _bad_utf8_with_text(span_dir: Path) -> None:
    (span_dir / "part-00001.jsonl").write_bytes(
        b'{"ticket_id": "T9998", "subject": "' + RECORD_TEXT.encode() + b' \xff\xfe", '
        b'"body": "' + RECORD_TEXT.encode() + b'", "team": "billing"}\n')


def _control_chars_with_text(span_dir: Path) -> None:
    """One ticket in ten carries the planted text and a control character (past the
    encoding rule's tolerance): the failure is a GX rule, whose results hold examples."""
    part = sorted(span_dir.glob("part-*.jsonl.gz"))[0]
    rows = read_jsonl(part)
    with gzip.open(part, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({**r, "body": (f"{RECORD_TEXT} \u0007 " + r["body"])
                                 if i % 10 == 0 else r["body"]}) + "\n"
                     for i, r in enumerate(rows))


def ops_cases(add) -> None:
    add("settings.campaign_settings_accepted", "ctr", "settings", "settings",
        settings_case(None, None), [], expect="accepted")
    for name, var, value in BAD_SETTINGS:
        add(f"settings.{name}", "ctr", "settings", "settings", settings_case(var, value),
            [var], kinds=("cli",))
    for fam in ("ctr", "text"):
        add(f"{fam}.published.model_bytes_replaced_check", fam, "registry", "published_files",
            registry_case(_replace_model_bytes, "check"), ["variables.data-00000-of-"],
            kinds=("cli",))
        add(f"{fam}.published.model_bytes_replaced_evaluate", fam, "evaluate",
            "published_files", registry_case(_replace_model_bytes, "evaluate"),
            ["variables.data-00000-of-"], kinds=("*",))
        add(f"{fam}.published.current_truncated_doctor_repairs", fam, "registry",
            "published_files", doctor_case, [], expect="accepted")
        add(f"{fam}.published.meta_truncated_list_damaged", fam, "registry", "published_files",
            registry_case(_truncate_meta, "list"), ["DAMAGED", "retrain_meta.json"],
            kinds=("cli",))
    add("ctr.served.script_in_a_categorical_value", "ctr", "validate", "served_pages",
        served_case(edit_column("device", _every(3, XSS))), ["allowed_values:device"])
    add("ctr.served.script_as_a_column_name", "ctr", "validate", "served_pages",
        served_case(_add_col(XSS)), ["schema:columns"])
    add("ops.secrets.admin_password_files", "ctr", "ops", "secrets", admin_password_case, [],
        expect="accepted")
    add("ctr.listeners.network_policy_admits_only_the_job", "ctr", "train", "listeners",
        network_policy_case, [], expect="accepted")
    for name, mutate, names in (
            ("bad_json_line", _bad_json_with_text, ["part-00001.jsonl line 1"]),
            ("invalid_utf8", _bad_utf8_with_text, ["part-00001.jsonl"]),
            ("control_characters", _control_chars_with_text,
             ["expect_column_values_to_not_match_regex"])):
        add(f"text.encoding.{name}_never_prints_record_text", "text", "validate", "encoding",
            raw_case(mutate), names, absent=(RECORD_TEXT,), absent_in="logs")
