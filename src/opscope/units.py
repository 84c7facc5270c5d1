"""Microseconds of the outputs, from integer nanoseconds: one IEEE division of exact parts.

The model holds times as integer nanoseconds; JSON, Markdown and the terminal show microseconds.
A figure is the quotient of exact parts rounded once: ``ns / 1000``, a per-step figure
``ns / (1000 * steps)``, a mean ``sum / (1000 * n)`` (the parts are exact below 2**53 ns, 104
days). Not Polars' ``pl.col(c) / 1000.0`` or ``.mean() / 1000.0``: its kernel multiplies by the
reciprocal, which is the quotient for most values but one ulp off for ~13% of integers (9 ns
came out as 0.009000000000000001 µs), while a scalar held alone divides exactly, so one figure
printed differently by how its table was built. A series divided by a series of divisors is
divided value by value; NumPy's ``/`` and Python's are IEEE divisions too.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

NS_PER_US = 1000.0


def us(ns: pl.Series, *, per: float = 1.0, name: str | None = None) -> pl.Series:
    """``float(ns) / (1000 * per)`` for each value of ``ns`` (null stays null), as Float64
    named ``name`` (default: ``ns``'s name). ``per`` is a count (steps, calls): ``1000 * per``
    is exact."""
    x = ns.cast(pl.Float64)
    return (x / pl.Series(np.full(len(x), NS_PER_US * per))).alias(name or ns.name)


def us_array(name: str, ns: npt.NDArray[np.int64], valid: npt.NDArray[np.bool_]) -> pl.Series:
    """:func:`us` of int64 nanoseconds held as a NumPy array (NumPy's ``/`` divides value by
    value), as Float64 named ``name``, null where not ``valid``."""
    us_ = ns.astype(np.float64) / NS_PER_US
    if valid.all():
        return pl.Series(name, us_, dtype=pl.Float64)
    return pl.Series(name, np.ma.masked_array(us_, mask=~valid), dtype=pl.Float64)


def us_value(ns: float | None, *, per: float = 1.0) -> float | None:
    """:func:`us` of one value: ``float(ns) / (1000 * per)``; None stays None."""
    return None if ns is None else float(ns) / (NS_PER_US * per)


def mean_us(total_ns: float, n: int) -> float:
    """The mean of ``n`` times summing to ``total_ns``, in µs: ``total / (1000 * n)``."""
    return float(total_ns) / (NS_PER_US * n)


__all__ = ("NS_PER_US", "mean_us", "us", "us_array", "us_value")
