"""The plan as text for a person (every figure and assumption with its source) or as JSON."""
from __future__ import annotations

import dataclasses

from retrain.plan.fmt import _hours, _many, _n, _secs
from retrain.plan.model import Plan
from retrain.plan.spec import Machine


def render(p: Plan) -> str:
    spec, d, ps = p.spec, p.data, p.parameter_servers
    out = [f"retrain plan: {_n(d['rows_per_day'])} rows/day x {d['window_days']}-day window = "
           f"{_n(d['window_rows'])} rows; deadline {spec['deadline_hours']:g} h",
           f"  feature config: {spec['feature_config'] or 'the bundled generated.yaml'}; tables "
           f"x{spec['sparse_scale']:g}; optimizer {ps['optimizer']} ({ps['slots']} slots); "
           f"{_n(d['train_examples'])} training examples ({_n(d['train_steps'])} steps of "
           f"{d['batch_size']})", ""]
    out += _stage_table(p)
    out.append("")
    out.append("FITS the deadline" if p.fits else "DOES NOT FIT as built:")
    out += [f"  - {b}" for b in p.blockers]
    if not p.fits and not p.blockers:
        out.append("  - the stages' estimated walls add up to more than the deadline")
    out += ["", "Work and rates (each [figure] is listed with its source below)"]
    for name, st in p.steps.items():
        out.append(f"  {name}: start-up {p.figures[st['startup_figure']]['value']:.1f} s "
                   f"[{st['startup_figure']}]")
        for part in st["parts"]:
            how = "per machine" if part["parallel"] else "in one process"
            out.append(f"    {_n(part['work'])} {part['what']}: {_n(part['rate'])}/s {how} "
                       f"[{part['figure']}{part['scaling']}]")
    out += ["", f"Parameter servers: {ps['count']} x ({Machine(**ps['machine']).text()}); "
                f"memory needs {ps['for_memory'] or '-'}, network needs {ps['for_network']} "
                f"[ps_runtime_mb, ps_peak_factor]",
            f"  tables: {ps['all_weights_gb']:.3f} GB of weights, "
            f"{ps['all_weights_and_slots_gb']:.3f} GB with slots; per ps "
            f"{ps['per_ps_weights_and_slots_mb']:,.1f} MB -> needs {ps['per_ps_need_mb']:,} MB "
            f"of {ps['per_ps_usable_mb']:,} MB usable",
            f"  {ps['bytes_per_example']:.0f} bytes per example between workers and ps "
            f"(lookups, gradients, dense weights per step)",
            "  bytes per id (a row of every table of the field, weights + slots): "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(ps["bytes_per_id"].items(),
                                                        key=lambda kv: -kv[1]))]
    for t in sorted(ps["tables"], key=lambda t: -t["rows"] * t["width"])[:6]:
        out.append(f"    {t['name']:<24}{_n(t['rows']):>16} x {t['width']:<3} "
                   f"{'trainable' if t['trainable'] else 'fixed':<10} {t['shards']} shard(s)")
    out += ["", "Figures (this project's measured runs)"]
    for k, f in p.figures.items():
        out.append(f"  {k} = {f['value']:,.{0 if f['value'] >= 100 else 2}f} {f['unit']}")
        out.append(f"      [{f['source']}]")
    out += ["", "Assumptions (and where they come from)"]
    out += [f"  - {a['assumption']}\n      [{a['source']}]" for a in p.assumptions]
    return "\n".join(out)


def _stage_table(p: Plan) -> list[str]:
    """The stages in columns, one unit a column (named in its header): each stage's share of
    the deadline in hours, its estimated wall in seconds, and the wall as a part of the share."""
    spec, ps = p.spec, p.parameter_servers
    names = {"beam": "Beam worker", "worker": "worker", "evaluate": "Beam worker"}
    rows = [["stage", "share (h)", "machines", "machine kind", "est. wall (s)", "of share"]]
    notes: dict[int, str] = {}
    for s in p.stages:
        kind = Machine(**spec["machines"].get(s.role) or spec["machines"].get("all")
                       or dataclasses.asdict(Machine())).text()
        n = "-" if s.machines is None else _many(s.machines, names[s.role])
        if s.name == "train" and s.machines is not None:
            n += f" + {ps['count']} ps"
        rows.append([s.name, _hours(s.budget_s), n, kind, _secs(s.wall_s), _part(s.wall_s,
                                                                                 s.budget_s)])
        if s.machines_if_distributed:
            extra = f" + {ps['count']} ps" if s.name == "train" else ""
            notes[len(rows) - 1] = (f"if distributed (not built): "
                                    f"{_many(s.machines_if_distributed, names[s.role])}{extra}, "
                                    f"est. wall {_secs(s.wall_if_distributed_s)} s")
    deadline = spec["deadline_hours"] * 3600
    rows.append(["total", _hours(deadline), "", "", _secs(p.total_wall_s),
                 _part(p.total_wall_s, deadline)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {1, 4, 5}
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.rjust(w) if j in right else c.ljust(w)
                             for j, (c, w) in enumerate(zip(r, widths))).rstrip())
        if i in notes:
            out.append(" " * (widths[0] + 2) + notes[i])
    return out


def _part(wall: float | None, share: float | None) -> str:
    if wall is None or not share:
        return "-"
    return "<1%" if 0 < wall / share < 0.005 else f"{wall / share:.0%}"


def plan_json(p: Plan) -> dict:
    return dataclasses.asdict(p)
