"""The blessing gate: should a freshly trained candidate replace the published model?

A pure function of numbers (rule 9, docs/principles.md), so every outcome, including
the first run with no published baseline and an operator's forced publish, can be tested
without a model, a cluster or Airflow. It reads the candidate's and the baseline's eval
metrics (`auc`, `log_loss`, `slices` for the per-slice guards, and the candidate's `ci`:
the paired bootstrap intervals against the baseline that the change rules are judged
on; other keys are ignored) and returns a `Decision` whose `to_dict()` is stored with
the published version in the registry, so "why is this model serving?" has a written answer with the observed
numbers. Slice guards exist because a better average can hide a segment (a device, a
category) that got much worse.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

REQUIRED_METRICS = ("auc", "log_loss")
REGRESSION_TESTS = ("interval", "point")
NO_BASELINE_REASON = "no published baseline: decided on absolute thresholds only"

# Metrics are often rounded before they get here; a candidate exactly on a limit passes
# even when float arithmetic (0.782 - 0.002 = 0.7799999...) says otherwise.
_EPS = 1e-9


@dataclass(frozen=True)
class Thresholds:
    """Limits a candidate must meet. Comparisons are inclusive."""

    min_auc: float = 0.6
    max_log_loss: float | None = None
    # Relative to the published baseline: candidate auc >= baseline auc - max_auc_drop,
    # candidate log_loss <= baseline log_loss + max_log_loss_increase.
    max_auc_drop: float = 0.002
    max_log_loss_increase: float = 0.002
    # Per slice (e.g. device=web), against the baseline on the same slice: candidate
    # slice auc >= baseline slice auc - max_slice_auc_drop, for every slice value with at
    # least min_slice_rows eval rows and min_slice_positives clicks (smaller ones are too
    # noisy to judge and are listed as not guarded). None turns the slice guards off.
    # Looser than max_auc_drop because a slice's AUC is noisier: between two equally good
    # models on the same rows, slice AUC deltas had a standard deviation of about 0.01
    # at 4,000 rows / 170 clicks and 0.015-0.025 at 1,200-2,000 rows / 30-50 clicks, so
    # a point rule at 0.03 rejected fresher models by chance. With regression_test
    # "interval" a binary slice (one with clicks counted) is judged on the interval of
    # its difference, as the overall rules are (`slice_delta_interval`).
    max_slice_auc_drop: float | None = 0.03
    min_slice_rows: int = 2000
    min_slice_positives: int = 50
    # How the two regression rules judge a difference. "interval" (default): on the paired
    # bootstrap interval of candidate - baseline (same eval rows, same resamples) when the
    # candidate's metrics carry one (`ci.auc_delta`, `ci.log_loss_delta`): a candidate
    # fails only when it is worse than the allowance with the interval's confidence, i.e.
    # the whole interval lies beyond it. A ±0.002 rule on point estimates sits inside the
    # noise of 400-10,000 eval rows (intervals of ±0.01-0.04) and rejects fresher models
    # by chance. "point": compare the point estimates (also the fallback without an
    # interval).
    regression_test: str = "interval"
    # Evidence: fewer eval rows (positives) than this fail the `min_eval_rows`
    # (`min_eval_positives`) rule (0: no such rule). The decision always states the rows
    # it was judged on and the interval's width. A few dozen rows with a handful of
    # positives gave AUC 0.91 where the window's 1,947 held-out rows gave 0.74.
    min_eval_rows: int = 0
    min_eval_positives: int = 0
    # Never bless a candidate worse than the published model with the interval's
    # confidence (the paired interval of a headline difference wholly on the worse side),
    # whatever the allowances above say.
    refuse_confidently_worse: bool = True

    def __post_init__(self) -> None:
        if self.regression_test not in REGRESSION_TESTS:
            raise ValueError(f"Thresholds.regression_test must be one of {REGRESSION_TESTS}, "
                             f"got {self.regression_test!r}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "refuse_confidently_worse":
                if not isinstance(value, bool):
                    raise ValueError(f"Thresholds.{f.name} must be true or false, got {value!r}")
                continue
            if f.name == "regression_test" or (
                    value is None and f.name in ("max_log_loss", "max_slice_auc_drop")):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"Thresholds.{f.name} must be a finite number, got {value!r}")
        if not 0.0 <= self.min_auc <= 1.0:
            raise ValueError(f"Thresholds.min_auc must lie in [0, 1], got {self.min_auc}")
        if self.max_log_loss is not None and self.max_log_loss <= 0:
            raise ValueError(f"Thresholds.max_log_loss must be > 0, got {self.max_log_loss}")
        for name in ("max_auc_drop", "max_log_loss_increase", "max_slice_auc_drop"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"Thresholds.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("min_slice_rows", "min_slice_positives", "min_eval_rows",
                     "min_eval_positives"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"Thresholds.{name} must be an integer >= 0, "
                                 f"got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Thresholds:
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"Thresholds: unknown field(s) {unknown}; known: {sorted(names)}")
        return cls(**data)


@dataclass(frozen=True)
class Decision:
    """The gate's verdict, with one human-readable reason line per rule."""

    blessed: bool
    reasons: list[str]
    rules: list[dict[str, Any]]  # each: name, passed, observed, limit (+ baseline if relative)
    baseline_present: bool
    forced: bool  # True only when the force overrode failing rules
    force_reason: str | None = None
    thresholds: dict[str, Any] = field(default_factory=dict)

    @property
    def failed_rules(self) -> list[str]:
        return [r["name"] for r in self.rules if not r["passed"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "blessed": self.blessed,
            "reasons": list(self.reasons),
            "rules": [dict(r) for r in self.rules],
            "baseline_present": self.baseline_present,
            "forced": self.forced,
            "force_reason": self.force_reason,
            "thresholds": dict(self.thresholds),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        return cls(
            blessed=bool(data["blessed"]),
            reasons=list(data.get("reasons", [])),
            rules=[dict(r) for r in data.get("rules", [])],
            baseline_present=bool(data.get("baseline_present", False)),
            forced=bool(data.get("forced", False)),
            force_reason=data.get("force_reason"),
            thresholds=dict(data.get("thresholds") or {}),
        )


@dataclass(frozen=True)
class MetricLimit:
    """A headline metric of any family with its direction: "max" (AUC, accuracy: higher is
    better) or "min" (RMSE, log loss). `absolute`: the value a candidate must reach;
    `max_regression`: how much worse than the published baseline it may be."""

    metric: str
    direction: str
    absolute: float | None = None
    max_regression: float | None = None

    def __post_init__(self) -> None:
        if self.direction not in ("max", "min"):
            raise ValueError(f"MetricLimit {self.metric}: direction must be 'max' or 'min', "
                             f"got {self.direction!r}")
        for name in ("absolute", "max_regression"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not math.isfinite(value)):
                raise ValueError(f"MetricLimit {self.metric}.{name} must be a finite number")
        if self.max_regression is not None and self.max_regression < 0:
            raise ValueError(f"MetricLimit {self.metric}.max_regression must be >= 0")


def headline_rules(candidate: dict[str, Any], baseline: dict[str, Any] | None,
                   limits: list[MetricLimit]) -> list[dict[str, Any]]:
    """Rules for `decide(..., extra_rules=...)` from any family's headline metrics: each
    limit's absolute bound, and its regression bound when a baseline is published."""
    rules = []
    for lim in limits:
        value = _metric(candidate, lim.metric, "candidate")
        better = ">=" if lim.direction == "max" else "<="
        sign = -1.0 if lim.direction == "max" else 1.0

        def ok(v: float, bound: float, direction: str = lim.direction) -> bool:
            return v >= bound - _EPS if direction == "max" else v <= bound + _EPS

        if lim.absolute is not None:
            rules.append({"name": f"{'min' if sign < 0 else 'max'}_{lim.metric}",
                          "passed": ok(value, lim.absolute), "observed": value,
                          "limit": lim.absolute,
                          "line": f"{lim.metric} {value:.4f} {better} {lim.absolute:.4f}"})
        if baseline is not None and lim.max_regression is not None:
            base = _metric(baseline, lim.metric, "baseline")
            bound = base + sign * lim.max_regression
            rules.append({"name": f"max_{lim.metric}_regression", "passed": ok(value, bound),
                          "observed": value, "limit": bound, "baseline": base,
                          "test": "point", "delta": value - base,
                          "line": f"{lim.metric} {value:.4f} {better} baseline {base:.4f} "
                                  f"{'-' if sign < 0 else '+'} {lim.max_regression:.4f} "
                                  f"(= {bound:.4f})"})
    return rules


def decide(
    candidate: dict[str, Any],
    baseline: dict[str, Any] | None,
    thresholds: Thresholds | None,
    force_reason: str | None = None,
    extra_rules: list[dict[str, Any]] = (),
    notes: list[str] = (),
) -> Decision:
    """Bless the candidate iff every rule passes (or an operator forces it, with a reason).

    Rules: `min_auc` and (if set) `max_log_loss` always; `max_auc_drop` and
    `max_log_loss_increase` against the baseline when one is published. `baseline=None`
    is the first run: absolute thresholds only, said so in the reasons. A NaN metric fails
    its rules (never blesses by accident). `forced` is True only if the force changed the
    outcome; a force on a passing candidate is recorded as unnecessary.

    Slice guards (when a baseline is published, `max_slice_auc_drop` is set and both
    sides carry `slices` = {slice: {value: {"n": rows, "auc": float | None, ...}}}, as
    `components.metrics.slice_metrics` returns): one rule
    `max_slice_auc_drop[<slice>=<value>]` per slice value with at least `min_slice_rows`
    rows, `min_slice_positives` positives and an AUC on both sides; the others are named
    in one "not guarded" reason.

    `extra_rules`: rules a family computed on its own metrics (for example "macro-F1 of each
    task at least the classical baseline's", or `headline_rules` for any metric with a
    direction), each {name, passed, observed, limit, line}; they count like the built-in
    ones, so a family adds rules without editing the gate. `thresholds=None` turns the
    built-in AUC / log-loss rules off: a family whose headline is RMSE decides on its
    `headline_rules` alone. `notes`: lines recorded with the reasons (for example that a
    rule was switched off for this run), so the registry entry says so.
    """
    if force_reason is not None:
        if not isinstance(force_reason, str) or not force_reason.strip():
            raise ValueError("force_reason must be a non-empty explanation of why the gate "
                             "is overridden")
        force_reason = force_reason.strip()
    if thresholds is not None and not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
    rules: list[dict[str, Any]] = []
    reasons: list[str] = []

    def add(name: str, passed: bool, observed: float, limit: float, line: str,
            **extra: Any) -> None:
        rules.append({"name": name, "passed": passed, "observed": observed, "limit": limit,
                      **extra})
        reasons.append(f"{line}: {'pass' if passed else 'fail'}")

    if thresholds is not None:
        _auc_log_loss_rules(candidate, baseline, thresholds, add, reasons)
    elif baseline is None:
        reasons.append(NO_BASELINE_REASON)

    reasons.extend(notes)
    for rule in extra_rules:
        rule = dict(rule)
        line = rule.pop("line", rule["name"])
        add(rule.pop("name"), bool(rule.pop("passed")), rule.pop("observed"),
            rule.pop("limit"), line, **rule)

    failed = [r["name"] for r in rules if not r["passed"]]
    forced = False
    if not failed:
        blessed = True
        reasons.append(f"blessed: all {len(rules)} rules pass")
        if force_reason:
            reasons.append(f"force requested ({force_reason}) but not needed: all rules pass")
    elif force_reason:
        blessed = forced = True
        reasons.append(f"blessed by force despite failed rules {', '.join(failed)}: "
                       f"{force_reason}")
    else:
        blessed = False
        reasons.append(f"not blessed: failed rules {', '.join(failed)}")

    return Decision(blessed=blessed, reasons=reasons, rules=rules,
                    baseline_present=baseline is not None, forced=forced,
                    force_reason=force_reason, thresholds=thresholds.to_dict() if thresholds else {})


def _auc_log_loss_rules(candidate, baseline, thresholds: Thresholds, add, reasons) -> None:
    """The built-in rules of a probabilistic classifier: AUC and log loss, absolute and
    against the baseline, and the per-slice AUC guards."""
    auc = _metric(candidate, "auc", "candidate")
    log_loss = _metric(candidate, "log_loss", "candidate")
    add("min_auc", auc >= thresholds.min_auc - _EPS, auc, thresholds.min_auc,
        f"auc {auc:.4f} >= min_auc {thresholds.min_auc:.4f}")
    if thresholds.max_log_loss is not None:
        add("max_log_loss", log_loss <= thresholds.max_log_loss + _EPS, log_loss,
            thresholds.max_log_loss,
            f"log_loss {log_loss:.4f} <= max_log_loss {thresholds.max_log_loss:.4f}")

    rows = _eval_rows(candidate)
    if thresholds.min_eval_rows:
        add("min_eval_rows", rows is not None and rows >= thresholds.min_eval_rows,
            rows, thresholds.min_eval_rows,
            f"eval rows {rows} >= min_eval_rows {thresholds.min_eval_rows}")
    positives = candidate.get("positives")
    if thresholds.min_eval_positives:
        ok = isinstance(positives, int) and positives >= thresholds.min_eval_positives
        add("min_eval_positives", ok, positives, thresholds.min_eval_positives,
            f"eval positives {positives} >= min_eval_positives "
            f"{thresholds.min_eval_positives}")
    if baseline is None:
        reasons.append(NO_BASELINE_REASON)
    else:
        base_auc = _metric(baseline, "auc", "baseline")
        base_ll = _metric(baseline, "log_loss", "baseline")
        paired = _paired_intervals(candidate) if thresholds.regression_test == "interval" \
            else None
        if paired is None:
            if thresholds.regression_test == "interval":
                reasons.append("no paired interval of the difference to the baseline in "
                               "the candidate's metrics: point estimates compared")
            _point_regression_rules(auc, log_loss, base_auc, base_ll, thresholds, add)
        else:
            _interval_regression_rules(paired, base_auc, base_ll, thresholds, add, reasons)
        if thresholds.max_slice_auc_drop is not None:
            _slice_rules(candidate, baseline, thresholds, add, reasons)


def _eval_rows(metrics: dict[str, Any]) -> int | None:
    for value in (metrics.get("n"), (metrics.get("ci") or {}).get("rows")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _paired_intervals(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """The candidate's paired bootstrap intervals of auc and log-loss differences against
    the baseline (`components.metrics.bootstrap_ci`), or None when it has none."""
    ci = candidate.get("ci")
    if not isinstance(ci, dict):
        return None
    out = {"level": ci.get("level", 0.95), "rows": ci.get("rows"),
           "n_resamples": ci.get("n_resamples")}
    for key in ("auc_delta", "log_loss_delta"):
        d = ci.get(key)
        if not isinstance(d, dict) or any(not isinstance(d.get(k), (int, float))
                                          or isinstance(d.get(k), bool)
                                          or not math.isfinite(d[k])
                                          for k in ("estimate", "low", "high")):
            return None
        out[key] = {"value": float(d["estimate"]), "low": float(d["low"]),
                    "high": float(d["high"])}
    return out


def _point_regression_rules(auc, log_loss, base_auc, base_ll, thresholds: Thresholds,
                            add) -> None:
    auc_floor = base_auc - thresholds.max_auc_drop
    add("max_auc_drop", auc >= auc_floor - _EPS, auc, auc_floor,
        f"auc {auc:.4f} >= baseline auc {base_auc:.4f} - max_auc_drop "
        f"{thresholds.max_auc_drop:.4f} (= {auc_floor:.4f})",
        baseline=base_auc, test="point", delta=auc - base_auc)
    ll_ceiling = base_ll + thresholds.max_log_loss_increase
    add("max_log_loss_increase", log_loss <= ll_ceiling + _EPS, log_loss, ll_ceiling,
        f"log_loss {log_loss:.4f} <= baseline log_loss {base_ll:.4f} + "
        f"max_log_loss_increase {thresholds.max_log_loss_increase:.4f} "
        f"(= {ll_ceiling:.4f})",
        baseline=base_ll, test="point", delta=log_loss - base_ll)


def _interval_regression_rules(paired: dict[str, Any], base_auc, base_ll,
                               thresholds: Thresholds, add, reasons: list[str]) -> None:
    """Fail only when the candidate is worse than the allowance with the interval's
    confidence: `observed` is the point estimate of the difference, `delta_low` /
    `delta_high` its interval, and `passed` is decided on the interval's end nearest to
    "better" against `limit`; the report shows all three."""
    level, rows = paired["level"], paired["rows"]
    pct = f"{level:.0%}"
    auc_d, ll_d = paired["auc_delta"], paired["log_loss_delta"]
    reasons.append(
        f"judged on {rows} eval rows: the paired {pct} interval of the auc difference is "
        f"{auc_d['high'] - auc_d['low']:.4f} wide ({paired['n_resamples']} bootstrap "
        f"resamples); a smaller difference is noise")
    drop = thresholds.max_auc_drop
    add("max_auc_drop", auc_d["high"] >= -drop - _EPS, auc_d["value"], -drop,
        f"auc difference {auc_d['value']:+.4f} vs baseline {base_auc:.4f}, {pct} interval "
        f"[{auc_d['low']:+.4f}, {auc_d['high']:+.4f}]: worse than -max_auc_drop "
        f"{drop:.4f} with {pct} confidence only if the whole interval is below it",
        baseline=base_auc, test="paired_interval", level=level, delta=auc_d["value"],
        delta_low=auc_d["low"], delta_high=auc_d["high"])
    inc = thresholds.max_log_loss_increase
    add("max_log_loss_increase", ll_d["low"] <= inc + _EPS, ll_d["value"], inc,
        f"log_loss difference {ll_d['value']:+.4f} vs baseline {base_ll:.4f}, {pct} "
        f"interval [{ll_d['low']:+.4f}, {ll_d['high']:+.4f}]: worse than "
        f"+max_log_loss_increase {inc:.4f} with {pct} confidence only if the whole "
        f"interval is above it",
        baseline=base_ll, test="paired_interval", level=level, delta=ll_d["value"],
        delta_low=ll_d["low"], delta_high=ll_d["high"])
    if thresholds.refuse_confidently_worse:
        add("not_worse_auc", auc_d["high"] >= 0, auc_d["value"], 0.0,
            f"auc difference {auc_d['value']:+.4f}, {pct} interval [{auc_d['low']:+.4f}, "
            f"{auc_d['high']:+.4f}]: not wholly below 0 (worse than the published model "
            f"with {pct} confidence)",
            baseline=base_auc, test="paired_interval", level=level, delta=auc_d["value"],
            delta_low=auc_d["low"], delta_high=auc_d["high"])
        add("not_worse_log_loss", ll_d["low"] <= 0, ll_d["value"], 0.0,
            f"log_loss difference {ll_d['value']:+.4f}, {pct} interval [{ll_d['low']:+.4f}, "
            f"{ll_d['high']:+.4f}]: not wholly above 0 (worse than the published model "
            f"with {pct} confidence)",
            baseline=base_ll, test="paired_interval", level=level, delta=ll_d["value"],
            delta_low=ll_d["low"], delta_high=ll_d["high"])


def _slice_rules(candidate_metrics: dict[str, Any], baseline_metrics: dict[str, Any],
                 thresholds: Thresholds, add, reasons: list[str]) -> None:
    candidate, baseline = candidate_metrics.get("slices"), baseline_metrics.get("slices")
    if candidate is None and baseline is None:
        return  # the caller computed no slices: nothing to guard, nothing to say
    if not isinstance(candidate, dict) or not isinstance(baseline, dict):
        missing = "candidate" if not isinstance(candidate, dict) else "baseline"
        reasons.append(f"slice guards not applied: no slice metrics for the {missing}")
        return
    drop, min_rows = thresholds.max_slice_auc_drop, thresholds.min_slice_rows
    min_pos = thresholds.min_slice_positives
    correlation = _paired_correlation(candidate_metrics, baseline_metrics)
    unguarded: list[str] = []
    for slice_name, values in candidate.items():
        base_values = baseline.get(slice_name)
        for value, cm in (values or {}).items():
            label = f"{slice_name}={value}"
            bm = base_values.get(value) if isinstance(base_values, dict) else None
            rows = cm.get("n") if isinstance(cm, dict) else None
            if bm is None:
                unguarded.append(f"{label} (not in the baseline's slices)")
                continue
            if not isinstance(rows, int) or rows < min_rows:
                unguarded.append(f"{label} ({rows} rows < {min_rows})")
                continue
            positives = cm.get("positives")
            if isinstance(positives, int) and positives < min_pos:
                unguarded.append(f"{label} ({positives} positives < {min_pos})")
                continue
            cand_auc, base_auc = cm.get("auc"), bm.get("auc")
            if cand_auc is None or base_auc is None:
                unguarded.append(f"{label} (auc undefined: one class)")
                continue
            cand_auc, base_auc = float(cand_auc), float(base_auc)
            floor = base_auc - drop
            name = f"max_slice_auc_drop[{label}]"
            where = dict(baseline=base_auc, slice=slice_name, value=value, rows=rows)
            interval = None if thresholds.regression_test != "interval" else \
                slice_delta_interval(cm, bm, correlation)
            if interval is None:
                add(name, cand_auc >= floor - _EPS, cand_auc, floor,
                    f"slice {label} ({rows} rows): auc {cand_auc:.4f} >= baseline "
                    f"{base_auc:.4f} - max_slice_auc_drop {drop:.4f} (= {floor:.4f})",
                    test="point", delta=cand_auc - base_auc, **where)
                continue
            low, high = interval     # as the overall paired rules: the difference
            add(name, high >= -drop - _EPS, cand_auc - base_auc, -drop,
                f"slice {label} ({rows} rows, {positives} positives): auc {cand_auc:.4f} vs "
                f"baseline {base_auc:.4f}, difference {cand_auc - base_auc:+.4f}, "
                f"{SLICE_LEVEL:.0%} interval [{low:+.4f}, {high:+.4f}]: worse than "
                f"-max_slice_auc_drop {drop:.4f} with {SLICE_LEVEL:.0%} confidence only if "
                f"the whole interval is below it",
                test="slice_interval", level=SLICE_LEVEL, delta=cand_auc - base_auc,
                delta_low=low, delta_high=high, **where)
    if unguarded:
        reasons.append(f"slices not guarded: {', '.join(unguarded)}")


# The slice intervals' confidence, as the overall rules' paired bootstrap (0.95).
SLICE_LEVEL = 0.95


def auc_standard_error(auc: float, positives: int, negatives: int) -> float | None:
    """Hanley & McNeil (1982): the standard error of an AUC from its class counts alone
    (what a slice's histogram-based metrics carry), None without both classes."""
    if positives < 1 or negatives < 1 or not 0.0 <= auc <= 1.0:
        return None
    q1, q2 = auc / (2.0 - auc), 2.0 * auc * auc / (1.0 + auc)
    var = (auc * (1.0 - auc) + (positives - 1) * (q1 - auc * auc)
           + (negatives - 1) * (q2 - auc * auc)) / (positives * negatives)
    return math.sqrt(max(var, 0.0))


def _paired_correlation(candidate: dict[str, Any], baseline: dict[str, Any]) -> float:
    """How much the two models' AUC errors move together on the same rows, from the
    overall paired bootstrap: var(delta) = var(c) + var(b) - 2 rho sd(c) sd(b). 0 (the
    unpaired, wider interval) when either side has no bootstrap spread to read."""
    def std(metrics: dict[str, Any], key: str) -> float | None:
        value = ((metrics.get("ci") or {}).get(key) or {}).get("std")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value)
        return float(value) if ok else None
    sc, sb, sd = std(candidate, "auc"), std(baseline, "auc"), std(candidate, "auc_delta")
    if not sc or not sb or sd is None:
        return 0.0
    return min(1.0, max(0.0, (sc * sc + sb * sb - sd * sd) / (2.0 * sc * sb)))


def slice_delta_interval(candidate: dict[str, Any], baseline: dict[str, Any],
                         correlation: float = 0.0) -> tuple[float, float] | None:
    """The SLICE_LEVEL interval of one slice's AUC difference (candidate - baseline, same
    rows), or None when the slice carries no class counts (a multi-class task's slice).

    A per-slice paired bootstrap would need replicate histograms per slice value and
    model in every worker's accumulator; instead each side's standard error comes from
    its AUC and class counts (Hanley-McNeil) and the pairing from the overall bootstrap's
    correlation of the two models' errors (`_paired_correlation`; 0 = unpaired, wider).
    `tests/unit/test_gate_noise.py` checks its width against a real paired bootstrap of
    a slice's rows."""
    n, positives = candidate.get("n"), candidate.get("positives")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, positives)):
        return None
    c, b = float(candidate["auc"]), float(baseline["auc"])
    se_c = auc_standard_error(c, positives, n - positives)
    se_b = auc_standard_error(b, positives, n - positives)
    if se_c is None or se_b is None:
        return None
    var = se_c * se_c + se_b * se_b - 2.0 * correlation * se_c * se_b
    half = NormalDist().inv_cdf(0.5 + SLICE_LEVEL / 2.0) * math.sqrt(max(var, 0.0))
    return c - b - half, c - b + half


def _metric(metrics: dict[str, Any], key: str, which: str) -> float:
    if not isinstance(metrics, dict):
        raise ValueError(f"{which} metrics must be a dict, got {type(metrics).__name__}")
    if key not in metrics:
        raise ValueError(f"{which} metrics missing required key {key!r} "
                         f"(have: {sorted(metrics)})")
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{which} metric {key!r} must be a number, got {value!r}")
    return float(value)
