"""story._kind (one pass, stopping at the first non-number) against its definition: ``auto``
when every value that is not None is an int or float and not a bool."""

from __future__ import annotations

import itertools
from typing import Any

from opscope.report.story import _kind

VALUES: list[Any] = [None, 1, 2.5, float("nan"), True, False, "x", "", [1], {"a": 1}, 10**20]


def _definition(rows: list[dict[str, Any]], col: str) -> str:
    vals = [r.get(col) for r in rows if r.get(col) is not None]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)
    return "auto" if numeric else "text"


def test_kind_is_its_definition() -> None:
    for n in range(4):
        for combo in itertools.product(VALUES, repeat=n):
            rows = [{"c": v} for v in combo] + [{"other": 1}]
            assert _kind(rows, "c") == _definition(rows, "c"), combo
    assert _kind([], "c") == "auto"
