"""The embedding tables and dense parameters the trainer builds, and what one ps holds of them.

Shapes come from the trainer itself, through the plan's one interface to the steps
(`components.ctr.plan_facts`; it imports the trainer lazily: it is heavy).
"""
from __future__ import annotations

import dataclasses
import math

from retrain.plan.spec import SLOTS, PlanError, PlanSpec


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    rows: int
    width: int
    trainable: bool
    lookups: int = 1     # ids an example looks up (multi-valued fields: max_values)


def model_tables(spec: PlanSpec, fcfg) -> tuple[list[Table], int, int]:
    """(tables, dense parameters, optimizer slots) as the CTR trainer builds the network
    for this feature config and these overrides, tables scaled by sparse_scale."""
    from components.ctr import plan_facts
    deep = list(fcfg.model.deep_fields)
    deep += [k for k in spec.embedding_dims if k not in deep]
    optimizer = spec.optimizer or plan_facts.defaults().optimizer
    try:   # the trainer's own shapes and checks
        cfg = plan_facts.network_shapes(fcfg, spec.table_rows, spec.embedding_dims, deep,
                                        spec.embedding_dim, optimizer)
    except KeyError as e:
        raise PlanError(str(e).strip("'\"")) from None
    tables = []
    for k, rows in cfg["rows"].items():
        if k not in spec.table_rows:
            rows = max(1, round(rows * spec.sparse_scale))
        look = cfg["multi"].get(k, 1)
        tables.append(Table(f"bias_{k}", rows, 1, True, look))
        if k in cfg["dims"]:
            tables.append(Table(f"emb_{k}", rows, cfg["dims"][k], True, look))
        if k in cfg["fm"]:
            tables.append(Table(f"fm_{k}", rows, cfg["fm_dim"], True, look))
        if k in cfg["count_features"]:
            tables.append(Table(f"count_{k}", rows, 1, False, look))
    n_numeric = 2 * len(cfg["dense"]) + 2 * len(cfg["count_features"])
    width, dense = sum(cfg["dims"].values()) + n_numeric, n_numeric + 1
    for units in cfg["hidden"]:
        dense, width = dense + width * units + units, units
    dense += width if cfg["hidden"] else 0
    return tables, dense, SLOTS[optimizer]


def shards(table: Table, num_ps: int, min_shard_bytes: int) -> int:
    """Shards of a table under MinSizePartitioner(min_shard_bytes, max_shards=num_ps)
    (TensorFlow's min_max_variable_partitioner: at least min_shard_bytes each)."""
    return max(1, min(table.rows, num_ps,
                      math.ceil(table.rows * table.width * 4 / min_shard_bytes)))


def ps_bytes(tables: list[Table], num_ps: int, slots: int, min_shard_bytes: int) -> int:
    """Weights + slots one ps holds at most: every table's largest shard (round-robin
    placement gives each ps one shard of a table split num_ps ways)."""
    return sum(math.ceil(t.rows / shards(t, num_ps, min_shard_bytes)) * t.width * 4
               * (1 + (slots if t.trainable else 0)) for t in tables)
