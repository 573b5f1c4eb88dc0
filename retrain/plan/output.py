"""The plan as text for a person (every figure and assumption with its source) or as JSON."""
from __future__ import annotations

import dataclasses

from retrain.plan.fmt import _dur, _many, _n
from retrain.plan.model import Plan
from retrain.plan.spec import Machine


def render(p: Plan) -> str:
    spec, d, ps = p.spec, p.data, p.parameter_servers
    out = [f"retrain plan: {_n(d['rows_per_day'])} rows/day x {d['window_days']}-day window = "
           f"{_n(d['window_rows'])} rows; deadline {spec['deadline_hours']:g} h",
           f"  feature config: {spec['feature_config'] or 'the bundled generated.yaml'}; tables "
           f"x{spec['sparse_scale']:g}; optimizer {ps['optimizer']} ({ps['slots']} slots); "
           f"{_n(d['train_examples'])} training examples ({_n(d['train_steps'])} steps of "
           f"{d['batch_size']})", "",
           f"{'stage':<11}{'share':>9}  {'machines':<34}{'machine kind':<28}{'est. wall':>10}"]
    names = {"beam": "Beam worker", "worker": "worker", "evaluate": "Beam worker"}
    for s in p.stages:
        kind = Machine(**spec["machines"].get(s.role) or spec["machines"].get("all")
                       or dataclasses.asdict(Machine())).text()
        n = "-" if s.machines is None else _many(s.machines, names[s.role])
        if s.name == "train" and s.machines is not None:
            n += f" + {ps['count']} ps"
        out.append(f"{s.name:<11}{_dur(s.budget_s):>9}  {n:<34}{kind:<28}{_dur(s.wall_s):>10}")
        if s.machines_if_distributed:
            extra = f" + {ps['count']} ps" if s.name == "train" else ""
            out.append(f"{'':<22}if distributed (not built): "
                       f"{_many(s.machines_if_distributed, names[s.role])}{extra}, "
                       f"{_dur(s.wall_if_distributed_s)}")
    out.append(f"{'total':<11}{_dur(spec['deadline_hours'] * 3600):>9}  {'':<62}"
               f"{_dur(p.total_wall_s):>10}")
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
            f"(lookups, gradients, dense weights per step)"]
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


def plan_json(p: Plan) -> dict:
    return dataclasses.asdict(p)
