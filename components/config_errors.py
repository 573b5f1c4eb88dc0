"""pydantic's validation errors of a family config, as the lines a ConfigError lists.

Both families' configs (`components.ctr.feature_config`, `components.text.task_config`) are
pydantic models; this turns each error into `place: rule` without echoing the file (rule
22): the place is the key path (a key that is not a short word is not shown,
`run_inputs.key_text`), the rule says what the key takes (its type and bounds, read off
the model) and the value appears only as what it is ("got a string"), or as a number out
of its bounds, or as a short word where a choice goes. pydantic's own text is never
used where it could quote input. Stdlib + pydantic only: both configs stay light.

A validator that checks several fields raises `rule(message, at=...)`: `at` names the key
the message is about when it is not the field whose validator found it (e.g. a `min_` key
found above its `max_` by the `max_` key's validator).
"""
from __future__ import annotations

import types
import typing
from typing import Any, Callable, Literal

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from retrain.common.run_inputs import is_word, key_text, number_text, what, word_text

_PLURALS = (("an integer", "integers"), ("a number", "numbers"), ("a string", "strings"),
            ("true or false", "booleans"), ("a mapping", "mappings"))
_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal",
           "finite_number")
_MISSING = object()


def rule(message: str, at: str | None = None, up: bool = False) -> PydanticCustomError:
    """A validator's own problem: `message` is shown as written (no placeholders);
    `at` moves it from the validated field to a sibling key, `up` to the mapping that
    holds the field (a rule about the whole entry, e.g. a feature's unknown kind)."""
    return PydanticCustomError("rule", "{message}", {"message": message,
                                                     **({"at": at} if at else {}),
                                                     **({"up": True} if up else {})})


def fail(title: str, found: list[tuple[tuple, str]],
         errors: list[dict] | None = None) -> None:
    """Raise every problem at once from a (wrap or after) model validator: `found` are
    (location under the model, message) pairs, `errors` earlier pydantic errors carried
    along (`ValidationError.errors()`). Nothing is raised when there is nothing."""
    details = [InitErrorDetails(type=PydanticCustomError(e["type"], "{message}", e["ctx"])
                                if e["type"] == "rule" else e["type"],
                                loc=e["loc"], input=e.get("input"),
                                **({"ctx": e["ctx"]} if e.get("ctx") else {}))
               for e in errors or ()]
    details += [InitErrorDetails(type=rule(message), loc=loc, input=None)
                for loc, message in found]
    if details:
        raise ValidationError.from_exception_data(title, details)


def _unwrap(tp) -> tuple[Any, list]:
    """The type under Annotated / Optional, and the Annotated metadata met on the way."""
    meta: list = []
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp, *extra = typing.get_args(tp)
            for m in extra:     # a Field(...) inside Annotated keeps its constraints in it
                meta.extend(m.metadata if isinstance(m, FieldInfo) else [m])
        elif typing.get_origin(tp) in (typing.Union, types.UnionType):
            arms = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(arms) != 1:
                return tp, meta
            tp = arms[0]
        else:
            return tp, meta


def _fields(tp) -> dict | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.model_fields
    return getattr(tp, "__pydantic_fields__", None)


def _walk(root, loc) -> tuple[Any, list, Any]:
    """(type, constraints, fields' owner) of the value at `loc` under the model `root`."""
    tp, meta, owner = root, [], None
    for part in loc:
        tp, _ = _unwrap(tp)
        fields = _fields(tp)
        origin = typing.get_origin(tp)
        if fields is not None:
            if part not in fields:
                return None, [], tp
            owner, info = tp, fields[part]
            tp, meta = info.annotation, list(info.metadata)
        elif origin is dict:
            tp, meta = typing.get_args(tp)[1], []
        elif origin in (list, tuple):
            tp, meta = typing.get_args(tp)[0], []
        else:
            return None, [], owner
    tp, more = _unwrap(tp)
    return tp, meta + more, _fields(tp) and tp


def _bounds(meta) -> str:
    lo = next((m for m in meta if isinstance(m, (annotated_types.Ge, annotated_types.Gt))),
              None)
    hi = next((m for m in meta if isinstance(m, (annotated_types.Le, annotated_types.Lt))),
              None)
    if isinstance(lo, annotated_types.Ge) and isinstance(hi, annotated_types.Le):
        return f" in [{lo.ge}, {hi.le}]"
    out = ""
    if lo is not None:
        out += f" >= {lo.ge}" if isinstance(lo, annotated_types.Ge) else f" > {lo.gt}"
    if hi is not None:
        out += (" and" if out else "") + \
            (f" <= {hi.le}" if isinstance(hi, annotated_types.Le) else f" < {hi.lt}")
    return out


def expected(tp, meta) -> str:
    """What a key takes, in words: `an integer >= 0`, `one of 'a', 'b'`, `a mapping`."""
    origin = typing.get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer" + _bounds(meta)
    if tp is float:
        return "a number" + _bounds(meta)
    if tp is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        item = expected(*_unwrap(typing.get_args(tp)[0]))
        for one, many in _PLURALS:
            if item.startswith(one):
                return "a list of " + many + item[len(one):]
        return "a list"
    if origin is dict or _fields(tp) is not None:
        return "a mapping"
    return "a value of another type"


def _shown(err: dict) -> str:
    value = err.get("input", _MISSING)
    if err["type"] == "literal_error":
        return word_text(value)
    if err["type"] in _BOUNDS:
        return number_text(value)
    return what(value)


def problems(error: ValidationError, root: type,
             place: Callable[[tuple], str]) -> list[str]:
    """One `place: rule` line per error of validating against `root` (a BaseModel)."""
    out: list[str] = []
    for err in error.errors():
        loc = tuple(p for p in err["loc"] if p != "[key]")
        ctx = err.get("ctx") or {}
        if "[key]" in err["loc"] and err["type"] != "rule":
            line = f"{place(loc)}: a key here must be a name (a string), got {_shown(err)}"
        elif err["type"] == "rule":
            if "at" in ctx:
                loc = loc[:-1] + (ctx["at"],)
            elif ctx.get("up"):
                loc = loc[:-1]
            line = f"{place(loc)}: {ctx['message']}"
        elif err["type"] in ("value_error", "assertion_error"):
            line = f"{place(loc)}: {str(ctx.get('error', err['msg'])) or err['msg']}"
        elif err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            _, _, owner = _walk(root, loc[:-1])
            fields = _fields(owner) or {}
            line = f"{place(loc)}: unknown key (allowed: {', '.join(sorted(fields))})"
        elif err["type"] in ("invalid_key",):
            line = f"{place(loc)}: a key here must be a name (a string)"
        elif err["type"] == "missing":
            line = f"{place(loc)}: is required but missing"
        else:
            tp, meta, _ = _walk(root, loc)
            line = f"{place(loc)}: must be {expected(tp, meta)}, got {_shown(err)}"
        if line not in out:
            out.append(line)
    return out


def place_in(data, named: tuple[str, ...] = ()) -> Callable[[tuple], str]:
    """How a place in the file `data` is named: `tasks.sentiment.labels`, `slices[1]` (a
    list index), and for an entry of a list in `named`, its name when that is a short word
    (`features[2] 'country'.top_k`). A key that is not a short word is not shown."""
    def place(loc: tuple) -> str:
        out, node = "", data
        for depth, part in enumerate(loc):
            if isinstance(part, int) and isinstance(node, list):
                out += f"[{part}]"
                node = node[part] if 0 <= part < len(node) else None
                if depth == 1 and loc[0] in named and isinstance(node, dict) \
                        and is_word(node.get("name")):
                    out += f" {word_text(node['name'])}"
            else:
                out += ("." if out else "") + key_text(part)
                node = node.get(part) if isinstance(node, dict) else None
        return out or "(top level)"
    return place
