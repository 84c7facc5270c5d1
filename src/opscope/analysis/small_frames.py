"""Columns of the analyses' result tables, made at the least fixed cost for their size.

A Series from a NumPy array costs ~9 µs whatever its length (the constructor's checks of the
array); from a Python list ~5 µs and ~20 ns a value. The small traces' tables (a rank's steps,
the critical path of 15 collectives) are a few dozen rows: a dozen columns each, a fixed cost of
every report that the list halves. Up to :data:`LIST_MAX` values the list, past it the array.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import polars as pl

#: Up to this many values a column is made from a Python list.
LIST_MAX: Final = 64


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
