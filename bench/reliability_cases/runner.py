"""Running one bad-input case and judging its outcome against its declaration.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from . import harness as H
from .harness import (OUT_KEY, Case, CaseEnv, Outcome, leaked, log, partial_visible,
                      registry_state)


def first_line(text: str, n: int = 110) -> str:
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= n else line[: n - 1] + "…"


def unblessed_versions(home: Path, fam: str) -> int:
    """Versions in a registry that should never have been published: not blessed by the
    gate (nor forced with a reason), or without a passed serving check."""
    from retrain.common.registry import Registry
    n = 0
    reg = Registry(home / "registry")
    if fam not in reg.models():
        return 0
    for meta in reg.list_versions(fam):
        gate = meta.get("gate") or {}
        if not gate.get("blessed") or not (meta.get("serving_check") or {}).get("passed"):
            n += 1
    return n


def run_case(case: Case, work: Path) -> dict:
    home = work / "cases" / case.name
    shutil.rmtree(home, ignore_errors=True)    # a reused --workdir
    home.mkdir(parents=True)
    env = CaseEnv(case, home)
    t = time.time()
    try:
        before = None
        outcome: Outcome | None = None
        # The registry's state before the case, taken after the setup copied it in:
        # registry cases copy inside setup, so compare against the fixture's registry.
        before = registry_state(H.FX.home)
        outcome = case.setup(env)
    except Exception as e:  # noqa: BLE001 - a broken case, not a product verdict
        import traceback
        outcome = Outcome(True, "harness_error", f"harness error: {type(e).__name__}: {e}")
        log.error("case %s: %s", case.name, traceback.format_exc())
    seconds = time.time() - t
    problems = []
    if case.expect == "refused":
        if not outcome.refused:
            problems.append("accepted")
        elif "*" not in case.kinds and outcome.kind not in case.kinds:
            problems.append(f"kind {outcome.kind}")
        elif outcome.kind in ("crash", "harness_error"):
            problems.append(outcome.kind)
    elif outcome.refused:
        problems.append("refused")
    names = [n.format(home=home, raw=home / "raw" / case.family) for n in case.names]
    missing = [n for n in names if n not in outcome.message]
    if missing:
        problems.append(f"message lacks {missing}")
    figures = outcome.figures or {}
    # a case that looks for its own secret (one the product generated) reports where
    leaks = leaked(case.absent, outcome.message, home, case.absent_in) \
        + list(figures.get("leaked", []))
    if leaks:
        problems.append(f"leaked into {leaks}")
    hang = int(figures.get("hang", 0))
    if hang:
        problems.append("hung past its timeout")
    silent = int(figures.get("silent_drops", 0))
    if silent:
        problems.append(f"{silent} day(s) dropped without being listed")
    served = int(figures.get("served_script", 0))
    if served:
        problems.append(f"a <script> from the data in {served} served page(s)")
    if case.category == "hostile" and outcome.kind == "transient":
        problems.append("a hostile record was taken as transient (it would be retried)")
    out = Path(outcome.out_dir) if outcome.out_dir else None
    partial = partial_visible(outcome.stage, out) if out and outcome.stage in OUT_KEY else False
    if partial:
        problems.append(f"partial artifact {out}")
    # Publishing: a push case that should have been refused but changed the registry.
    # A bad candidate (not a SavedModel, not blessed) is a bad model published; a good one
    # published over a broken registry is counted apart (the registry was the bad input).
    bad_published = over_broken = 0
    reg_errors_after: list[str] = []
    if env.reg_before is not None:
        changed = registry_state(home) != env.reg_before
        if changed:     # no case here may publish
            if case.name.endswith(("push_not_a_savedmodel", "push_unblessed")):
                bad_published = 1
                problems.append("a bad candidate was published")
            else:
                over_broken = 1
                problems.append("published over the broken registry")
        from retrain.common.registry import Registry
        try:
            reg_errors_after = Registry(home / "registry").check(case.family)
        except Exception as e:  # noqa: BLE001
            reg_errors_after = [f"{type(e).__name__}: {e}"]
        bad_published += unblessed_versions(home, case.family)
    if registry_state(H.FX.home) != before:
        bad_published += 1
        problems.append("the fixture's registry changed")
    return {"name": case.name, "family": case.family, "stage": case.stage,
            "category": case.category, "type": "bad_input", "expected": case.expected,
            "observed": f"{outcome.kind}: {first_line(outcome.message, 400)}",
            "message": outcome.message[:4000], "kind": outcome.kind,
            "refused": outcome.refused, "names_missing": missing,
            "partial_artifact": partial, "bad_models_published": bad_published,
            "published_over_broken_registry": over_broken,
            "registry_errors_after": reg_errors_after,
            "rows_lost": 0, "orphans": (outcome.figures or {}).get("orphans", 0),
            "leaks": len(leaks), "hangs": hang, "silent_drops": silent,
            "served_script": served,
            "hostile_retried": int(case.category == "hostile" and outcome.kind == "transient"),
            "rollbacks_undone": (outcome.figures or {}).get("rollbacks_undone", 0),
            **({"figures": outcome.figures} if outcome.figures else {}),
            "verdict": "FAIL" if problems else "PASS",
            "problems": problems, "seconds": round(seconds, 1)}
