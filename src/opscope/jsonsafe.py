"""JSON-safe values: one place that decides how odd Python values reach JSON output."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities as ``None`` (JSON has no spelling for them), mapping keys as
    strings, tuples as lists, and any other non-JSON value as its ``str``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    return str(obj)
