"""JSON-safe values: one place that decides how odd Python values reach JSON output."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

_isfinite = math.isfinite
_encode = msgspec.json.encode
# the exact types whose JSON finite() leaves as it is: msgspec writes a NaN or an infinity as
# null, the None finite() makes of it (a test holds msgspec to that)
_LEAF = frozenset({str, int, bool, type(None), float})


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


def encode(obj: Any) -> bytes:
    """The JSON of :func:`finite` of ``obj`` (``msgspec.json.encode(finite(obj))``, byte for
    byte), without copying the parts of ``obj`` whose JSON finite() would not change."""
    # a report's JSON is ~15k values, nearly all plain already: finite() made a copy of all of
    # them (most of the JSON rendering); this checks them, sharing what is plain
    return _encode(_shared(obj))


def _shared(obj: Any) -> Any:
    """finite(obj), or an equivalent for msgspec, sharing obj's plain parts (a tree only to be
    encoded: never handed out, as finite()'s callers may change what it returns)."""
    if _plain(obj):
        return obj
    t = type(obj)
    if t is dict:
        return {k if type(k) is str else str(k): _shared(v) for k, v in obj.items()}
    if t is list:
        return [_shared(v) for v in obj]
    return finite(obj)


def _plain(obj: Any) -> bool:
    """Whether obj encodes as finite(obj) does: str, int, bool, None and floats, in lists and
    str-keyed dicts (finite() makes equal copies of those; of a non-finite float, the None
    msgspec writes for it)."""
    t = type(obj)
    if t is dict:
        for k, v in obj.items():
            tv = type(v)
            if type(k) is not str:
                return False
            if tv in _LEAF or ((tv is dict or tv is list) and _plain(v)):
                continue
            return False
        return True
    if t is list:
        for v in obj:
            tv = type(v)
            if tv in _LEAF or ((tv is dict or tv is list) and _plain(v)):
                continue
            return False
        return True
    return t in _LEAF
