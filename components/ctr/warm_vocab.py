"""Warm start by id for vocabulary fields (issue 44): a tf.Transform vocabulary is ordered
by the window's frequencies, so the same value can get another row on another day (the
demo's category_id vocabulary reorders between consecutive days). Copying a published
model's tables row by row would hand a value's learned row to another value; here each row
of today's vocabulary takes the row its value had, the OOV buckets keep theirs (their
hashing does not depend on the vocabulary), and values the published model never had
keep their fresh initial rows; a new-id row (`new_id_row`) keeps its own.

Vocabulary tables hold top_k + oov_buckets rows (thousands, not the hashed id tables'
millions), so the coordinator reads and writes them whole.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("retrain.ps_train")


def read_vocabulary(path: str | Path) -> list[bytes]:
    """One value per line, as tf.Transform writes a vocabulary file (bytes: values are
    compared exactly, whatever their encoding)."""
    return Path(path).read_bytes().splitlines()


def row_sources(old: list[bytes], new: list[bytes], oov_buckets: int, rows: int,
                new_id_row: int | None = None) -> np.ndarray:
    """For each row of today's table: the published table's row it takes, or -1 (keep
    its initial value). The new-id row (the table's last, at a fixed index) keeps its own."""
    src = np.full(rows, -1, dtype=np.int64)
    if new_id_row is not None and new_id_row < rows:
        src[new_id_row] = new_id_row
    where = {value: j for j, value in enumerate(old)}
    for i, value in enumerate(new[:rows]):
        src[i] = where.get(value, -1)
    for b in range(oov_buckets):
        if len(new) + b < rows and len(old) + b < rows:
            src[len(new) + b] = len(old) + b
    return src


def _value(var) -> np.ndarray:
    from components.ctr.model import dense_value   # every shard of a sharded table
    return np.asarray(dense_value(var).numpy())


def tables_of(params, field: str) -> list:
    """Every table of a field in the network's parameters (bias, embedding, FM factors)."""
    return [t[field] for t in (params.bias, params.emb, params.fm) if field in t]


class VocabularyRemap:
    """Take the vocabulary tables' initial values before the restore, then move the
    restored rows to today's rows after it."""

    def __init__(self, params, fields: dict[str, tuple[str, int]]):
        # fields: name -> (today's vocabulary file, oov buckets, new-id row or None)
        self._params = params
        self._fields = fields
        self._initial = {k: [_value(t) for t in tables_of(params, k)] for k in fields}

    def apply(self, saved_model_dir: str | Path) -> dict[str, dict]:
        """Remap after the restore; returns per field what was kept, new and dropped."""
        out = {}
        for field, (vocab_file, oov, new_id_row) in self._fields.items():
            old_file = Path(saved_model_dir) / "assets" / field
            if not old_file.is_file():
                log.warning("warm start: the published model has no vocabulary for %s "
                            "(%s): its rows are taken by position", field, old_file)
                out[field] = {"by": "position"}
                continue
            old, new = read_vocabulary(old_file), read_vocabulary(vocab_file)
            if old == new:
                out[field] = {"by": "id", "kept": len(new), "new": 0, "dropped": 0}
                continue
            for table, initial in zip(tables_of(self._params, field), self._initial[field]):
                restored = _value(table)
                src = row_sources(old, new, oov, len(restored), new_id_row)
                values = initial.copy()
                values[src >= 0] = restored[src[src >= 0]]
                table.assign(values)
            known = set(old)
            kept = sum(1 for value in new if value in known)
            out[field] = {"by": "id", "kept": kept, "new": len(new) - kept,
                          "dropped": len(old) - kept}
            log.info("warm start: %s rows mapped by value: %d kept, %d new, %d no longer in "
                     "the vocabulary", field, kept, len(new) - kept, len(old) - kept)
        return out
