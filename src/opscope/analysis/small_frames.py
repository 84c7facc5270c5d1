"""Columns of the analyses' result tables, made at the least fixed cost for their size.

A Series from a NumPy array costs ~9 µs whatever its length (the constructor's checks of the
array); from a Python list ~5 µs and ~20 ns a value. The small traces' tables (a rank's steps,
the critical path of 15 collectives) are a few dozen rows: a dozen columns each, a fixed cost of
every report that the list halves. Up to :data:`LIST_MAX` values the list, past it the array.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np
import polars as pl

#: Up to this many values a column is made from a Python list.
LIST_MAX: Final = 64

#: Up to this many rows a result table is made from Python rows (``pl.from_dicts`` with its
#: schema: ~20 us for a few rows of a dozen columns, where a Series per column is ~5 us each
#: whatever its length, and ``orient="row"`` checks its schema twice).
ROWS_MAX: Final = 48


def series(name: str, values: np.ndarray, dtype: Any, valid: np.ndarray | None = None) -> pl.Series:
    """A column ``name`` of ``dtype`` holding ``values``, null where not ``valid`` (None:
    valid everywhere)."""
    n = len(values)
    if valid is not None and bool(valid.all()):
        valid = None
    if n <= LIST_MAX:
        v = values.tolist()
        if valid is not None:
            v = [x if ok else None for x, ok in zip(v, valid.tolist(), strict=True)]
        return pl.Series(name, v, dtype)
    if valid is None:
        return pl.Series(name, values, dtype)
    if not valid.any():  # (a masked array's read is ~30 µs, whatever its length)
        return pl.Series(name, [None], dtype).new_from_index(0, n)
    return pl.Series(name, np.ma.masked_array(values, mask=~valid), dtype)


def repeated(name: str, value: Any, dtype: Any, n: int) -> pl.Series:
    """A column ``name`` of ``dtype`` holding ``value`` ``n`` times."""
    if n <= LIST_MAX:
        return pl.Series(name, [value] * n, dtype)
    return pl.Series(name, [value], dtype).new_from_index(0, n)


def frame_of_rows(rows: Iterable[Sequence[Any]], schema: Mapping[str, Any]) -> pl.DataFrame:
    """A frame of ``schema`` from Python ``rows`` (values in the schema's column order), as
    dicts: ~30% less than ``orient="row"``."""
    names = list(schema)
    return pl.from_dicts([dict(zip(names, r, strict=True)) for r in rows], schema=dict(schema))


def columns_frame(cols: list[tuple[str, Any, list[Any]]]) -> pl.DataFrame:
    """A frame of the columns ``cols`` (name, type, values; each as long as the others): from
    its rows up to :data:`ROWS_MAX` of them (:func:`frame_of_rows`), else a Series of each
    column's list."""
    if cols and len(cols[0][2]) > ROWS_MAX:
        return pl.DataFrame([pl.Series(name, v, dtype) for name, dtype, v in cols])
    return frame_of_rows(zip(*(c[2] for c in cols), strict=True), {c[0]: c[1] for c in cols})


def codes_in_order(values: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """A code per value (0, 1, ... in order of first appearance; None a value like any other)
    and each code's value: a dict in Python, for the few values of a small table (a
    Categorical cast and NumPy's unique are fixed costs of ~0.1 ms)."""
    first: dict[Any, int] = {}
    codes = np.fromiter((first.setdefault(v, len(first)) for v in values), np.int64, len(values))
    return codes, list(first)
