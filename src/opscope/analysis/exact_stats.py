"""Statistics of integers as exact figures: each computed in integer arithmetic and rounded
to a float64 once (the step-time statistics of :mod:`opscope.analysis.breakdown`).

A mean is ``sum / n``; a quantile the linear interpolation between two sorted values, their
integer combination over its denominator; the sample standard deviation the correctly rounded
``√((n·Σx² − (Σx)²) / (n(n − 1)))``; the coefficient of variation ``std / mean``. Not an
engine's float sums (their order of additions moves the last digit) nor its square root of an
already rounded variance (one ulp off ``statistics.stdev`` there).
"""

from __future__ import annotations

import math

import numpy as np


def spread(v: list[int]) -> tuple[float | None, ...]:
    """(mean, median, std, p10, p90, cv) of the sorted integers ``v`` (the module doc's
    definitions; None where a figure needs more values than there are)."""
    n = len(v)
    if not n:
        return (None,) * 6
    total = sum(v)
    mean = total / n  # (int / int: the exact quotient rounded once)
    std = sqrt_of_ratio(n * sum(x * x for x in v) - total * total, n * (n - 1)) if n > 1 else None
    cv = None if std is None else quotient(std, mean)
    return mean, between(v, 1, 2), std, between(v, 1, 10), between(v, 9, 10), cv


#: Bits of the scaled integer square root: twice float64's 53, and 3 more (round to odd).
_ROOT_BITS = 2 * 53 + 3


def sqrt_of_ratio(num: int, den: int) -> float:
    """√(``num`` / ``den``) of integers (``num`` ≥ 0, ``den`` > 0) rounded once: the integer
    square root of the ratio scaled to :data:`_ROOT_BITS` bits, its last bit set where inexact
    (rounding to odd keeps the one conversion to float64 correct)."""
    q = (num.bit_length() - den.bit_length() - _ROOT_BITS) // 2
    if q >= 0:
        return float(_odd_root(num, den << 2 * q) << q)
    return _odd_root(num << -2 * q, den) / (1 << -q)


def _odd_root(num: int, den: int) -> int:
    """⌊√(``num`` / ``den``)⌋, rounded to odd: its last bit set where inexact."""
    root = math.isqrt(num // den)
    return root | (root * root * den != num)


def quotient(a: float, b: float) -> float:
    """``a / b`` in IEEE arithmetic (a zero ``b``: an infinity or nan, as an engine's column
    division gives, where Python raises)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def between(v: list[int], i: int, k: int) -> float:
    """The linear interpolation between the sorted integers ``v`` at rank (len − 1) · i / k:
    the two neighbours' integer combination over ``k``, one division."""
    j, frac = divmod((len(v) - 1) * i, k)
    return float(v[j]) if not frac else (v[j] * (k - frac) + v[j + 1] * frac) / k
