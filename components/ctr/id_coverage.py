"""How well the id fields' tables fit the ids of a run (issue 44): per single-valued id
field (hash or vocabulary), the distinct ids of the training rows, the table's rows, the
share of ids expected to share a hashed row with another id, and the share of the eval
rows' ids that no training row had (a new user or item gets what its row learned from
others, or the out-of-vocabulary rows).

Counted by preprocessing in the pass that splits the rows: each split's raw ids go into a
KMV sketch (`components.ctr.kmv`, k smallest 64-bit hashes, mergeable across workers), so
memory is k x fields whatever the rows. Counts are exact below k distinct ids and
estimates (relative error about 1/sqrt(k)) above; the report says which. The share of
ids sharing a hashed row is what uniform hashing of that many ids gives (1 - (1 - 1/B)^(n-1)),
not a count.
"""
from __future__ import annotations

import apache_beam as beam
import numpy as np

from components.ctr.kmv import hash_values, kmv_estimate, kmv_merge

KMV_K = 16_384
TRANSFORMS = ("hash", "vocabulary")


def id_fields(cfg) -> dict[str, tuple[str, int]]:
    """Single-valued categorical features with a hash or vocabulary table: name ->
    (transform, table rows)."""
    return {f.name: (f.transform, f.table_size) for f in cfg.features
            if f.kind == "categorical" and f.transform in TRANSFORMS}


class IdSketchFn(beam.CombineFn):
    """Raw batches of a split -> {field: KMV sketch of its ids}."""

    def __init__(self, fields: list[str], k: int = KMV_K):
        self._fields = list(fields)
        self._k = k

    def create_accumulator(self):
        return {f: np.zeros(0, np.uint64) for f in self._fields}

    def add_input(self, acc, batch):
        import pyarrow as pa
        for f in self._fields:
            values = batch.column(f)
            if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
                values = values.flatten()      # the model batch's one-value lists
            h = np.unique(hash_values(values))[:self._k]
            acc[f] = kmv_merge(acc[f], h, self._k)
        return acc

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        out = next(accumulators)
        for acc in accumulators:
            for f in self._fields:
                out[f] = kmv_merge(out[f], acc[f], self._k)
        return out

    def extract_output(self, acc):
        return acc


NEW_ID_COUNTER = "new_id_rows_"    # + split + "_" + field: rows that took the new-id row


class CountNewIdRows(beam.DoFn):
    """Transformed batches of a split -> counters of the rows whose id took its field's
    new-id row (an id the window's filter never saw). Emits nothing."""

    def __init__(self, namespace: str, split: str, rows: dict[str, int]):
        from components.ctr.feature_config import transformed_name
        self._rows = {transformed_name(k): (row, f"{NEW_ID_COUNTER}{split}_{k}")
                      for k, row in rows.items()}
        self._namespace = namespace

    def process(self, element):
        from components.ctr.split_stats import column_values
        batch = element[0] if isinstance(element, tuple) else element
        for column, (row, counter) in self._rows.items():
            n = int(np.count_nonzero(column_values(batch.column(column)) == row))
            beam.metrics.Metrics.counter(self._namespace, counter).inc(n)
        return []


def add_new_id_rows(figures: dict, cfg, counters: dict, splits, vocabulary_sizes: dict) -> dict:
    """The report's figures plus, per field with a new-id row, the rows of each split that
    took it and the window filter's fill and false-positive rate; per vocabulary field, the
    ids in its vocabulary (`vocabulary_sizes`: field -> lines of its vocabulary file)."""
    from components.ctr.seen_filter import BITS_COUNTER, false_positive_rate
    for f in cfg.features:
        if f.name not in figures:
            continue
        if f.name in vocabulary_sizes:
            figures[f.name]["ids_in_vocabulary"] = vocabulary_sizes[f.name]
        if f.new_id_row:
            bits_set = counters.get(f"{BITS_COUNTER}{f.name}")
            figures[f.name]["new_id_row"] = {
                "row": f.new_id_index,
                "rows_by_split": {s: counters.get(f"{NEW_ID_COUNTER}{s}_{f.name}", 0)
                                  for s in splits},
                "filter_bits": f.filter_bits,
                # None where the runner reports no counters (then the fill is unknown).
                "filter_bits_set": bits_set,
                "filter_false_positive_rate": (None if bits_set is None else round(
                    false_positive_rate(bits_set, f.filter_bits), 6))}
    return figures


def shared_row_share(ids: float, rows: int) -> float:
    """Expected share of `ids` distinct ids hashed uniformly into `rows` rows that share
    their row with at least one other id."""
    if ids <= 1 or rows < 1:
        return 0.0
    return float(1.0 - (1.0 - 1.0 / rows) ** (ids - 1))


def new_share(eval_sketch: np.ndarray, train_sketch: np.ndarray, k: int) -> float | None:
    """Share of the eval rows' distinct ids that are not among the training rows' ids:
    exact when both sketches hold every id, else from the union's k smallest hashes."""
    if not len(eval_sketch):
        return None
    if len(eval_sketch) < k and len(train_sketch) < k:
        return float(np.setdiff1d(eval_sketch, train_sketch).size / eval_sketch.size)
    union = kmv_merge(eval_sketch, train_sketch, k)
    in_eval = np.isin(union, eval_sketch)
    if not in_eval.any():
        return None
    only_eval = in_eval & ~np.isin(union, train_sketch)
    return float(only_eval.sum() / in_eval.sum())


def report(sketches: dict, fields: dict[str, tuple[str, int]], k: int = KMV_K) -> dict:
    """{field: figures} from the train and eval splits' sketches ({"train": {...},
    "eval": {...}}); fields as `id_fields` gives them."""
    train, held = sketches.get("train") or {}, sketches.get("eval") or {}
    out = {}
    for name, (transform, rows) in fields.items():
        t = train.get(name, np.zeros(0, np.uint64))
        e = held.get(name, np.zeros(0, np.uint64))
        ids, exact = kmv_estimate(t, k)
        eval_ids, eval_exact = kmv_estimate(e, k)
        new = new_share(e, t, k)
        figures = {"transform": transform, "table_rows": rows, "ids": round(ids),
                   "eval_ids": round(eval_ids),
                   "new_ids_in_eval_share": None if new is None else round(new, 4),
                   "exact": bool(exact and eval_exact)}
        if transform == "hash":
            figures["ids_sharing_a_row_share"] = round(shared_row_share(ids, rows), 4)
        out[name] = figures
    return out


def headline(figures: dict) -> str:
    """The report in one line a person reads in the Retrain tab and lineage."""
    parts = []
    for name, f in figures.items():
        words = [f"{'' if f['exact'] else '~'}{f['ids']:,} ids in {f['table_rows']:,} rows"]
        if "ids_sharing_a_row_share" in f:
            words.append(f"{f['ids_sharing_a_row_share']:.0%} share a row")
        if f.get("new_ids_in_eval_share") is not None:
            words.append(f"{f['new_ids_in_eval_share']:.0%} of eval ids new")
        if "ids_in_vocabulary" in f:
            words.append(f"{f['ids_in_vocabulary']:,} in the vocabulary")
        if "new_id_row" in f:
            eval_rows = f["new_id_row"]["rows_by_split"].get("eval")
            if eval_rows is not None:
                words.append(f"{eval_rows:,} eval rows took the new-id row")
        parts.append(f"{name}: " + ", ".join(words))
    return "; ".join(parts)


def write_report(sketches: dict, path: str, fields: dict[str, tuple[str, int]]) -> None:
    """The report as JSON at `path` (a folder or an object store, through Beam's
    FileSystems): the job reads it back into its summary."""
    import json

    from apache_beam.io.filesystems import FileSystems
    with FileSystems.create(path) as f:
        f.write(json.dumps(report(sketches, fields)).encode())   # in the config's order


def read_report(path: str) -> dict:
    import json

    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path) as f:
        return json.loads(f.read())
