"""Which model input is the user, which the item, which comes with the item and which is
the same for every pair: the recommendation job's column roles, derived from the feature
config the model was trained with and the window's rows when a run does not name them.

Why derived: a user's own rating or click log has its own column names (`movie_id`,
`genres`, `release_year`), and a default that only fits the bundled logs fails there.
The feature config says which columns are inputs and of what kind; the rows say which
side decides each one:

- user / item id: the categorical feature named `user_id` / `item_id`; else the one
  categorical feature whose name holds "user"; for the item, the first of the config's
  per-id model hints (`model.count_features`, `fm_fields`, `id_l2`) that is not the user,
  else the one whose name holds "item";
- every other input is measured on the window: the share of its dispersion (variance of a
  number, Gini impurity of a category; unbiased, groups of one row left out) that the item
  explains and the share the user explains. Item-side when the item explains at least
  half and more than the user (a price, a category, a release year); context when neither
  explains a tenth (a slot, an hour): every pair gets its most common value (a number's
  median); the rest stays with the user (their latest value), as before.

A setting that cannot be derived raises `RecommendSettingError` naming the setting, its
flag and the feature config file; a column name given that the model does not take names
the setting and the model's inputs. File contents are never echoed (rule 22).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from retrain.common.errors import BadData

ITEM_SIDE_SHARE = 0.5      # the item explains at least this share (and more than the user)
CONTEXT_SHARE = 0.1        # neither explains this much: a value every pair shares
FLAGS = {"user_column": "--user-column", "item_column": "--item-column",
         "item_columns": "--item-columns", "context": "--context",
         "category_column": "--category-column", "span": "--span", "k": "--k",
         "num_shards": "--num-shards", "active_days": "--active-days",
         "max_users": "--max-users", "max_items": "--max-items", "pool_size": "--pool-size",
         "model_dir": "--model-dir", "seen_days": "--seen-days", "seen_max": "--seen-max"}


class RecommendSettingError(BadData, ValueError):
    """A recommendation setting is missing (cannot be derived) or names no model input;
    `setting` is the spec field. Bad data: a retry cannot mend it, a setting can."""

    def __init__(self, setting: str, message: str):
        super().__init__(f"{setting} ({FLAGS.get(setting, setting)}): {message}")
        self.setting = setting


@dataclasses.dataclass(frozen=True)
class Roles:
    user_column: str
    item_column: str
    item_columns: tuple[str, ...]
    context: dict
    category_column: str | None
    derived: tuple[str, ...]      # which settings were derived, not given

    def describe(self, user_side: list[str]) -> str:
        ctx = ", ".join(f"{k}={v!r}" for k, v in self.context.items()) or "none"
        how = (f" (derived: {', '.join(self.derived)})" if self.derived else "")
        return (f"user {self.user_column}, item {self.item_column}, item side "
                f"[{', '.join(self.item_columns)}], user side [{', '.join(user_side)}], "
                f"context {ctx}{how}")


def config_file(model_dir: str) -> str:
    """Where the model's feature config is read from (named in errors)."""
    from components.ctr import feature_config as F

    d = Path(model_dir)
    for path in (d / F.MODEL_CONFIG_PATH, d / "serving_model" / F.MODEL_CONFIG_PATH):
        if path.exists():
            return str(path)
    return f"{F.DEFAULT_CONFIG} (the model carries no feature config)"


def _where(cfg, source: str) -> str:
    return f"feature config {cfg.name or '(unnamed)'!r} ({source})"


def inputs_of(cfg) -> list[str]:
    """The raw columns the model's signature takes."""
    return [c for c in cfg.raw_columns() if c not in (cfg.label, cfg.example_id)]


def _single_categorical(cfg) -> list[str]:
    return [f.name for f in cfg.features if f.kind == "categorical"]


def ids(cfg, source: str, user_column: str | None = None,
        item_column: str | None = None) -> tuple[str, str, list[str]]:
    """(user id column, item id column, the settings derived)."""
    inputs, cats = inputs_of(cfg), _single_categorical(cfg)
    derived = []
    for setting, given in (("user_column", user_column), ("item_column", item_column)):
        if given is not None and given not in inputs:
            raise RecommendSettingError(setting, f"{given!r} is not an input of the model "
                                        f"({_where(cfg, source)}; its inputs: {inputs})")
    user = user_column
    if user is None:
        named = [c for c in cats if "user" in c.lower()]
        user = "user_id" if "user_id" in cats else (named[0] if len(named) == 1 else None)
        if user is None:
            raise RecommendSettingError(
                "user_column", f"cannot tell which input is the user id: the "
                f"{_where(cfg, source)} has {len(named)} categorical features named "
                f"like a user ({named}); name it among {cats}")
        derived.append("user_column")
    item = item_column
    if item is None:
        m = cfg.model
        hints = [*m.count_features, *m.fm_fields, *(k for k, _ in m.id_l2)]
        hinted = [c for c in hints if c in cats and c != user and "user" not in c.lower()]
        named = [c for c in cats if "item" in c.lower() and c != user]
        item = ("item_id" if "item_id" in cats and user != "item_id" else
                hinted[0] if hinted else named[0] if len(named) == 1 else None)
        if item is None:
            raise RecommendSettingError(
                "item_column", f"cannot tell which input is the item id: the "
                f"{_where(cfg, source)} names none (no item_id, no model.count_features / "
                f"fm_fields / id_l2 besides the user); name it among "
                f"{[c for c in cats if c != user]}")
        derived.append("item_column")
    if item == user:
        raise RecommendSettingError("item_column", f"{item!r} is also the user column")
    return user, item, derived


def explained_share(frame, key: str, column: str, numeric: bool) -> float | None:
    """Share of `column`'s dispersion that `key` explains, 1 - within / total, with
    unbiased estimates and keys of one row left out; None when there is no evidence (a
    constant column, or no key with two rows)."""
    d = frame[[key, column]].dropna()
    if numeric:
        values = d[column].astype(float)
        total = values.var(ddof=1) if len(values) > 1 else 0.0
        groups = d.assign(_v=values).groupby(key)["_v"]
        n, within = groups.size(), groups.var(ddof=1)
        many = n > 1
        spread = (within[many] * (n[many] - 1)).sum()
    else:
        values = d[column].map(lambda v: repr(v.tolist() if hasattr(v, "tolist") else v))
        count = len(values)
        p = values.value_counts(normalize=True)
        total = count / (count - 1) * (1 - (p ** 2).sum()) if count > 1 else 0.0
        cells = d.assign(_v=values).groupby([key, "_v"]).size()
        n = cells.groupby(level=0).sum()
        squares = (cells ** 2).groupby(level=0).sum()
        many = n > 1
        spread = ((n[many] ** 2 - squares[many]) / n[many]).sum()   # gini * (n - 1)
    dof = (n[many] - 1).sum()
    if not total or total <= 0 or dof == 0:
        return None
    return float(1 - (spread / dof) / total)


def _typical(frame, column: str, numeric: bool):
    """The value every pair gets: the most common one (a number's median)."""
    values = frame[column].dropna()
    if values.empty:
        return None
    if numeric:
        return float(values.median())
    top = values.value_counts(sort=True)
    best = top[top == top.iloc[0]].index
    value = sorted(best, key=str)[0]      # ties: the first by text, so reruns agree
    return value.item() if hasattr(value, "item") else value


def sides(rows, cfg, source: str, user: str, item: str, *,
          item_columns: list[str] | None = None, context: dict | None = None,
          category_column: str | None = None, pool: str = "window",
          derived: list[str] | None = None) -> Roles:
    """The roles of every input: given settings checked, missing ones derived from `rows`
    (a pyarrow Table of the window)."""
    inputs = inputs_of(cfg)
    derived = list(derived or [])
    for setting, names in (("item_columns", item_columns), ("context", context)):
        unknown = [c for c in (names or []) if c not in inputs or c in (user, item)]
        if unknown:
            raise RecommendSettingError(setting, f"{unknown} are not item-side or context "
                                        f"inputs of the model ({_where(cfg, source)}; its "
                                        f"inputs: {inputs}, user {user!r}, item {item!r})")
    open_ = [c for c in inputs if c not in (user, item) and c not in (context or {})
             and c not in (item_columns or [])]
    found_items, found_context = [], {}
    if (item_columns is None or context is None) and open_:
        frame = rows.select(list(dict.fromkeys([user, item, *open_]))).to_pandas()
        for c in open_:
            f = cfg.feature(c)
            numeric = f.kind == "numeric"
            by_item = explained_share(frame, item, c, numeric)
            by_user = explained_share(frame, user, c, numeric)
            if by_item is not None and by_item >= ITEM_SIDE_SHARE and \
                    (by_user is None or by_item > by_user):
                found_items.append(c)
            elif (f.kind in ("categorical", "numeric") and by_item is not None
                  and by_user is not None and max(by_item, by_user) < CONTEXT_SHARE):
                value = _typical(frame, c, numeric)
                if value is not None:
                    found_context[c] = value
    if item_columns is None:
        item_columns = found_items
        derived.append("item_columns")
    if context is None:
        context = found_context
        derived.append("context")
    if category_column is None and pool == "top_per_category":
        cats = _single_categorical(cfg)
        choice = [c for c in [*cfg.slices, *item_columns] if c in cats and c in item_columns]
        if not choice:
            raise RecommendSettingError(
                "category_column", f"pool top_per_category needs one category per item, "
                f"and no single-valued categorical item-side input was found (item side "
                f"{list(item_columns)}; {_where(cfg, source)})")
        category_column = choice[0]
        derived.append("category_column")
    elif category_column is not None and pool == "top_per_category" \
            and category_column not in item_columns:
        raise RecommendSettingError(
            "category_column", f"{category_column!r} is not among the item-side inputs "
            f"{list(item_columns)}")
    return Roles(user, item, tuple(item_columns), dict(context), category_column,
                 tuple(derived))
