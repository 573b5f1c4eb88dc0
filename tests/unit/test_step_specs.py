"""A step's spec is checked against its field types when it is built from JSON (issue 47:
"specs validated on construction"): a wrong type fails before the step starts, naming the
spec and the field, never the value.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from retrain.common.step import SpecTypeError, check_types, spec_from_dict

REPO = Path(__file__).resolve().parents[2]
_ENTRY = re.compile(r"\bmain\(\s*([A-Z]\w*Spec)\b")


def step_specs() -> list[tuple[str, str]]:
    """(module, spec class) of every step entry point under components/."""
    out = []
    for path in sorted((REPO / "components").rglob("*.py")):
        for name in _ENTRY.findall(path.read_text(encoding="utf-8")):
            out.append((".".join(path.relative_to(REPO).with_suffix("").parts), name))
    return out


def test_every_step_is_found():
    found = {m for m, _ in step_specs()}
    assert {"components.ctr.preprocess", "components.ctr.cluster", "components.ctr.evaluate",
            "components.text.train", "components.text.evaluate"} <= found


@pytest.mark.parametrize("module,name", step_specs())
def test_every_step_spec_is_checked_by_field(module, name):
    cls = getattr(importlib.import_module(module), name)
    required = [f for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    # A text field of the spec given a mapping is refused by name; the others, given
    # values of their own types, pass.
    victim = next(f for f in dataclasses.fields(cls) if str(f.type).startswith("str"))
    values = {f.name: _sample(f) for f in required}
    assert check_types(cls, values) is None
    with pytest.raises(SpecTypeError, match=rf"^{name}: {victim.name}: "):
        check_types(cls, values | {victim.name: {"nested": 1}})


def _sample(field: dataclasses.Field):
    """A value of the field's own type (strings for paths, which is what the specs hold)."""
    text = str(field.type)
    if text.startswith(("int", "float")):
        return 1
    if text.startswith(("list", "tuple")):
        return []
    if text.startswith("dict"):
        return {}
    if text.startswith("bool"):
        return True
    return "x"


@dataclasses.dataclass
class _Spec:
    out_dir: str
    rows: int = 10
    share: float = 0.5
    columns: tuple[str, ...] = ()
    note: str | None = None


def test_right_types_pass_and_keep_their_values():
    spec = spec_from_dict(_Spec, {"out_dir": "/tmp/x", "rows": 3, "share": 1,
                                  "columns": ["a", "b"], "note": None})
    assert spec == _Spec("/tmp/x", 3, 1, ["a", "b"], None)


@pytest.mark.parametrize("data,field", [
    ({"out_dir": 5}, "out_dir"),
    ({"out_dir": "o", "rows": "10"}, "rows"),            # no string-to-number coercion
    ({"out_dir": "o", "rows": 2.5}, "rows"),
    ({"out_dir": "o", "columns": "a,b"}, "columns"),
    ({"out_dir": "o", "note": ["SECRET-VALUE-7f3"]}, "note"),
])
def test_a_wrong_type_names_the_spec_and_field_never_the_value(data, field):
    with pytest.raises(SpecTypeError) as info:
        spec_from_dict(_Spec, data)
    message = str(info.value)
    assert message.startswith(f"_Spec: {field}: ") and "SECRET-VALUE" not in message
