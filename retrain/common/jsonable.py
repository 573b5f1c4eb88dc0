"""Plain JSON values out of what validation libraries return (numpy scalars, NaN, tuples),
so every family's reports are valid JSON. Stdlib only."""
from __future__ import annotations

import math


def jsonable(obj):
    """Plain JSON values: numpy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    item = getattr(obj, "item", None)  # numpy scalar
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(obj)
