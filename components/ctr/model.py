"""The CTR network the parameter-server trainer fits, as a plain `tf.Module`.

Why a module of its own: the trainer (`components.ctr.ps_train`), its export and the tests
build the same network, and a reader should be able to hold the model in mind apart from
the loop. Every table is created through `_initializer`, which can build one shard on its
parameter server, so under a strategy scope no table is materialised whole on the
coordinator. Regularised per-ID biases (a prior applied to looked-up rows, weighted by
1 / count), item popularity, numerics, a small MLP over low-dimensional embeddings and
optional factorization-machine crosses; multi-valued fields take the masked mean over
their present values (in the crosses too: a user's recent items against the candidate).
"""
from __future__ import annotations

import math
import zlib


def _initializer(shape, kind: str, seed: int, stddev: float = 0.05, values=None):
    """Initial value callable that can build one shard on its parameter server.

    The strategy calls it with `partition_shape`/`partition_offset`, so a large table is
    never materialised whole on the coordinator.
    """
    import numpy as np
    import tensorflow as tf

    def init(partition_shape=None, partition_offset=None):
        shp = tuple(partition_shape or shape)
        off = int(partition_offset[0]) if partition_offset else 0
        if kind == "zeros":
            return tf.zeros(shp, tf.float32)
        if kind == "values":
            return tf.constant(np.asarray(values[off:off + shp[0]], np.float32).reshape(shp))
        if kind == "normal":
            return tf.random.stateless_normal(shp, seed=[seed, off], stddev=stddev)
        if kind == "glorot":
            limit = math.sqrt(6.0 / (shape[0] + shape[-1]))
            return tf.random.stateless_uniform(shp, seed=[seed, off], minval=-limit, maxval=limit)
        raise ValueError(kind)
    return init


def build_net(cfg: dict, counts: dict | None = None, base_rate: float = 0.04):
    """The CTR network as a tf.Module; under a strategy scope its tables are sharded."""
    import numpy as np
    import tensorflow as tf

    from components.ctr.feature_config import missing_name, transformed_name

    def var(name, shape, kind, trainable=True, values=None, stddev=0.05):
        seed = (cfg["seed"] * 1000 + zlib.crc32(name.encode()) % 997) & 0x7FFFFFFF
        return tf.Variable(_initializer(shape, kind, seed, stddev, values), shape=shape,
                           dtype=tf.float32, trainable=trainable, name=name)

    class Params(tf.Module):
        pass

    class Counts(tf.Module):
        pass

    class CtrNet(tf.Module):
        def __init__(self):
            super().__init__(name="ctr_net")
            p = self.params = Params(name="params")
            p.bias = {k: var(f"bias_{k}", [cfg["rows"][k], 1], "zeros")
                      for k in cfg["rows"]}
            inits = cfg.get("embedding_inits") or {}
            p.emb = {k: var(f"emb_{k}", [cfg["rows"][k], d], inits.get(k, cfg["embedding_init"]))
                     for k, d in cfg["dims"].items()}
            # Zeros would be a saddle for a product of two factors: always random.
            p.fm = {k: var(f"fm_{k}", [cfg["rows"][k], cfg["fm_dim"]], "normal")
                    for k in cfg["fm"]}
            n_numeric = 2 * len(cfg["dense"]) + 2 * len(cfg["count_features"])
            p.linear_w = var("linear_w", [n_numeric, 1], "zeros")
            logit0 = math.log(base_rate / (1.0 - base_rate))
            p.linear_b = tf.Variable(tf.constant([logit0], tf.float32), name="linear_b")
            width = sum(cfg["dims"].values()) + n_numeric
            p.hidden_w, p.hidden_b = [], []
            for i, units in enumerate(cfg["hidden"]):
                p.hidden_w.append(var(f"hidden_w{i}", [width, units], "glorot"))
                p.hidden_b.append(tf.Variable(tf.zeros([units]), name=f"hidden_b{i}"))
                width = units
            p.deep_w = var("deep_w", [width, 1], "zeros") if cfg["hidden"] else None
            c = self.counts = Counts(name="counts")
            c.table = {}
            for k in cfg["count_features"]:
                values = np.zeros(cfg["rows"][k], np.float32)
                if counts is not None:
                    values[:len(counts[k])] = counts[k]
                c.table[k] = var(f"count_{k}", [cfg["rows"][k], 1], "values",
                                 trainable=False, values=values)

        def forward(self, feats, training=False):
            """Click probability and the batch's prior penalty (0 without inverse counts)."""
            p = self.params

            def lookup(table, k, prior):
                return rows_of(table, feats[transformed_name(k)], k in cfg["multi"],
                               feats.get(prior))

            terms, vectors = [], []
            penalty = tf.constant(0.0)
            for k in cfg["rows"]:
                b, cost = lookup(p.bias[k], k, f"__prior_bias_{k}")
                terms.append(b[:, 0])
                penalty += cost
                if k in p.emb:
                    e, cost = lookup(p.emb[k], k, f"__prior_emb_{k}")
                    vectors.append(e)
                    penalty += cost
            if cfg["fm"]:
                # sum over pairs <v_a, v_b> = ((sum v)^2 - sum v^2) / 2, summed over factors;
                # a multi-valued field's v is the mean of its values' factors (a user's
                # recent items against the candidate item: an item-to-item cross).
                factors = []
                for k in cfg["fm"]:
                    v, cost = lookup(p.fm[k], k, f"__prior_fm_{k}")
                    factors.append(v)
                    penalty += cost
                total = tf.add_n(factors)
                terms.append(0.5 * tf.reduce_sum(
                    tf.square(total) - tf.add_n([tf.square(v) for v in factors]), axis=1))
            numeric = []
            for k in cfg["dense"]:
                numeric += [feats[transformed_name(k)], feats[missing_name(k)]]
            for k in cfg["count_features"]:
                n = tf.reshape(tf.nn.embedding_lookup(self.counts.table[k],
                                                      feats[transformed_name(k)]), [-1])
                numeric += [tf.math.log1p(n), tf.cast(tf.equal(n, 0.0), tf.float32)]
            numeric = (tf.stack([tf.cast(x, tf.float32) for x in numeric], axis=1) if numeric
                       else tf.zeros([tf.shape(terms[0])[0], 0]))
            terms.append(tf.reshape(tf.matmul(numeric, dense_value(p.linear_w)) + p.linear_b, [-1]))
            if cfg["hidden"]:
                x = tf.concat(vectors + [numeric], axis=1)
                for w, bias in zip(p.hidden_w, p.hidden_b):
                    x = tf.nn.relu(tf.matmul(x, dense_value(w)) + bias)
                    if training and cfg["dropout"]:
                        x = tf.nn.dropout(x, rate=cfg["dropout"])
                terms.append(tf.reshape(tf.matmul(x, dense_value(p.deep_w)), [-1]))
            return tf.sigmoid(tf.add_n(terms)), penalty

        @tf.function
        def __call__(self, feats):
            return self.forward(feats, training=False)[0]

    return CtrNet()


def rows_of(table, ids, multi: bool, inv=None):
    """(rows of `table` per example, the batch's prior penalty on them; 0 without the
    inverse counts `inv`). A multi-valued field (ids padded with -1) takes the masked mean
    over its present values, and the prior applies to every present value's row."""
    import tensorflow as tf
    if not multi:
        rows = tf.nn.embedding_lookup(table, ids)                               # (b, d)
        return rows, (tf.constant(0.0) if inv is None else
                      tf.reduce_mean(inv * tf.reduce_sum(tf.square(rows), axis=1)))
    mask = tf.cast(tf.greater_equal(ids, 0), tf.float32)                        # (b, L)
    present = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)                      # (b,)
    rows = tf.nn.embedding_lookup(table, tf.maximum(ids, 0))                    # (b, L, d)
    mean = tf.reduce_sum(rows * mask[:, :, None], axis=1) / present[:, None]
    return mean, (tf.constant(0.0) if inv is None else tf.reduce_mean(tf.reduce_sum(
        inv * mask * tf.reduce_sum(tf.square(rows), axis=2), axis=1)))


def dense_value(v):
    """A small weight as one tensor, whether or not the partitioner split it."""
    import tensorflow as tf
    parts = getattr(v, "variables", None)
    return tf.concat(list(parts), axis=0) if parts is not None and len(parts) > 1 else (
        parts[0] if parts is not None else v)


def leaves(module) -> list:
    """Trainable variables as the optimizer sees them: every shard of a ShardedVariable."""
    out = []
    for _, v in named_variables(module):
        parts = list(getattr(v, "variables", [v]))
        if parts[0].trainable:
            out.extend(parts)
    return out


def named_variables(net) -> list[tuple[str, object]]:
    """(path, variable) of every model variable; a ShardedVariable counts once."""
    p, c = net.params, net.counts
    items = [(f"bias/{k}", v) for k, v in p.bias.items()]
    items += [(f"emb/{k}", v) for k, v in p.emb.items()]
    items += [(f"fm/{k}", v) for k, v in p.fm.items()]
    items += [("linear_w", p.linear_w), ("linear_b", p.linear_b)]
    items += [(f"hidden_w{i}", v) for i, v in enumerate(p.hidden_w)]
    items += [(f"hidden_b{i}", v) for i, v in enumerate(p.hidden_b)]
    if p.deep_w is not None:
        items.append(("deep_w", p.deep_w))
    items += [(f"count/{k}", v) for k, v in c.table.items()]
    return items


def shard_layout(net) -> dict[str, list[dict]]:
    """Per variable: its shards' devices and shapes (for logs, the summary and tests)."""
    out = {}
    for name, v in named_variables(net):
        parts = list(getattr(v, "variables", [v]))
        out[name] = [{"device": s.device, "shape": s.shape.as_list()} for s in parts]
    return out
