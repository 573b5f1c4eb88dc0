"""Score users against a pool of candidate items and keep each user's top K.

Why a module of its own: the Beam job's workers (`beam_jobs/recommend_ctr.py`) and the
single-process loop of the throughput benchmark must score with exactly the same code, so
that the benchmark compares parallelism, not two implementations.

A user x item pair becomes one raw row of the model's serving signature: the user's
columns (their latest values in the window), the item's columns, and the fixed context
columns (for instance `position: 1`, the top slot the recommendation would take).
A user row with a SEEN list (`exclude_seen`) never gets those items back. Pairs
go to the SavedModel in batches of about `batch_pairs` rows; the model is loaded once per
scorer (once per Beam worker, in `DoFn.setup`).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np
import pyarrow as pa

from components.ctr.recommend_inputs import SEEN

OUTPUT_SCHEMA = pa.schema([("user", pa.string()), ("rank", pa.int32()), ("item", pa.string()),
                           ("score", pa.float64()), ("model_version", pa.int64())])


@dataclasses.dataclass(frozen=True)
class PairLayout:
    """Which serving inputs come from the user, which from the item, which are fixed."""
    user_column: str
    item_column: str
    item_columns: tuple[str, ...]   # item-side inputs besides the item id
    context: dict                    # input -> the value every pair gets

    @classmethod
    def from_dict(cls, d: dict) -> "PairLayout":
        """From `dataclasses.asdict` of one (JSON keeps tuples as lists)."""
        return cls(d["user_column"], d["item_column"], tuple(d["item_columns"]),
                   dict(d["context"]))

    def user_columns(self, inputs: list[str]) -> list[str]:
        item_side = {self.item_column, *self.item_columns, *self.context}
        return [c for c in inputs if c not in item_side]


def _repeat(values: np.ndarray, times: int) -> np.ndarray:
    return np.repeat(values, times, axis=0)


def _tile(values: np.ndarray, times: int) -> np.ndarray:
    return np.tile(values, (times,) + (1,) * (values.ndim - 1))


class PairScorer:
    """Loads the model once; `top_k(users)` yields the output rows of those users."""

    def __init__(self, model_dir: str, items: pa.Table, layout: PairLayout, k: int,
                 batch_pairs: int = 16384, model_version: int | None = None):
        import tensorflow as tf
        from components.ctr import feature_config, rawdata
        from retrain.common.registry import verify_model_dir

        verify_model_dir(model_dir)   # a published version: its files as published
        self._tf = tf
        self._cfg = feature_config.for_model_dir(model_dir)
        self._serve = tf.saved_model.load(model_dir).signatures["serving_default"]
        self._inputs = sorted(self._serve.structured_input_signature[1])
        self._layout = layout
        self._k = k
        self._version = model_version
        self._item_ids = np.asarray(items.column(layout.item_column).to_pylist(), dtype=object)
        # Seen lists hold ids as text (SEEN), whatever the id column's type.
        self._item_text = np.asarray([str(i) for i in self._item_ids], dtype=object)
        self._item_raw = rawdata.to_raw_features(
            items, self._cfg, [c for c in (layout.item_column, *layout.item_columns)
                               if c in self._inputs])
        self._batch_pairs = batch_pairs
        self._users_per_call = max(1, batch_pairs // max(1, len(self._item_ids)))
        self._all = np.arange(len(self._item_ids))
        self.pairs_scored = 0

    @property
    def user_inputs(self) -> list[str]:
        return self._layout.user_columns(self._inputs)

    def _context(self, n: int) -> dict[str, np.ndarray]:
        out = {}
        for name, value in self._layout.context.items():
            if name in self._inputs:
                dtype = self._serve.structured_input_signature[1][name].dtype.as_numpy_dtype
                out[name] = np.full(n, value, dtype=dtype)
        return out

    def _score(self, user_raw: dict[str, np.ndarray], n_users: int) -> np.ndarray:
        """Scores of every (user, item) pair, shaped [n_users, n_items]. A pool larger than
        a call's `batch_pairs` goes to the model in slices of items, so a call's size (and
        a worker's memory) stays bounded however many items there are; only the users'
        score rows (8 bytes a pair) span the whole pool."""
        n_items = len(self._item_ids)
        step = max(1, self._batch_pairs // n_users)
        parts = []
        for lo in range(0, n_items, step):
            hi = min(lo + step, n_items)
            batch = {c: _repeat(v, hi - lo) for c, v in user_raw.items()}
            batch.update({c: _tile(v[lo:hi], n_users) for c, v in self._item_raw.items()})
            batch.update(self._context(n_users * (hi - lo)))
            out = self._serve(**{c: self._tf.constant(batch[c]) for c in self._inputs})
            scores = (out["p_click"] if "p_click" in out else next(iter(out.values()))).numpy()
            self.pairs_scored += n_users * (hi - lo)
            parts.append(scores.reshape(n_users, hi - lo).astype(np.float64))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    @property
    def item_ids(self) -> list[str]:
        return list(self._item_text)

    def score_blocks(self, users: pa.Table) -> Iterator[tuple[list, np.ndarray]]:
        """(user ids, scores [users, items]) per model call, every user of `users`."""
        from components.ctr import rawdata

        user_raw = rawdata.to_raw_features(users, self._cfg, self.user_inputs)
        ids = users.column(self._layout.user_column).to_pylist()
        for start in range(0, len(ids), self._users_per_call):
            stop = min(start + self._users_per_call, len(ids))
            yield ids[start:stop], self._score({c: v[start:stop] for c, v in user_raw.items()},
                                               stop - start)

    def top_k(self, users: pa.Table) -> Iterator[dict]:
        """Output rows (user, rank 1..K, item, score, model_version) of every user."""
        k = min(self._k, len(self._item_ids))
        seen = (users.column(SEEN).to_pylist() if SEEN in users.column_names
                 else [None] * users.num_rows)
        done = 0
        for ids, scores in self.score_blocks(users):
            for row, user in enumerate(ids):
                left = self._unseen(seen[done + row])
                cand = scores[row, left]
                part = (np.argpartition(-cand, k - 1)[:k] if len(left) > k
                        else np.arange(len(left)))
                order = left[part[np.argsort(-cand[part], kind="stable")]]
                for rank, j in enumerate(order, start=1):
                    yield {"user": str(user), "rank": rank, "item": str(self._item_ids[j]),
                           "score": float(scores[row, j]), "model_version": self._version}
            done += len(ids)

    def _unseen(self, seen: list | None) -> np.ndarray:
        """Indices of the pool items not in `seen` (all of them when None)."""
        if not seen:
            return self._all
        return np.flatnonzero(~np.isin(self._item_text,
                                       np.asarray([str(i) for i in seen], dtype=object)))
