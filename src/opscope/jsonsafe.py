"""JSON-safe values: one place that decides how odd Python values reach JSON output."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_isfinite = math.isfinite


def finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities as ``None`` (JSON has no spelling for them), mapping keys as
    strings, tuples as lists, and any other non-JSON value as its ``str``."""
    # exact types first: a report's JSON is ~15k values, nearly all str, int, float or dict,
    # and an isinstance chain per value was most of this function's time
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float:
        return obj if _isfinite(obj) else None
    if t is dict:
        return {k if type(k) is str else str(k): finite(v) for k, v in obj.items()}
    if t is list:
        return [finite(v) for v in obj]
    # subclasses and other containers: the general rules
    if isinstance(obj, float):
        return obj if _isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    return str(obj)
