"""The significance rule of compare: a change counts only beyond the noise band it prints.

Per row (and for the step time), each side's per-step values give a median and a scaled MAD.
The noise band is :data:`NOISE_K` pooled scaled MADs, ``NOISE_K * sqrt((MAD_a² + MAD_b²) / 2)``
with ``MAD × 1.4826``; a change is *significant* when it is at least :data:`MIN_REL_CHANGE` of
the larger side and the shift of the medians exceeds that band. So the verdict always agrees
with the ``± noise`` printed beside it. The two-sided Mann-Whitney U p-value of the per-step
values is computed and reported, but does not decide (it could call a shift inside the printed
band significant). With fewer than :data:`MIN_STEPS` steps on a side nothing is tested.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from opscope import units

MIN_STEPS: Final = 3
"""Steps needed on each side before a change is tested against the step-to-step noise."""

NOISE_K: Final = 3.0
"""A significant shift of the per-step medians exceeds this many pooled scaled MADs."""

MAD_SCALE: Final = 1.4826
"""Scales a median absolute deviation to a standard deviation for normally distributed data."""

ALPHA: Final = 0.01
"""Or a change is significant when the Mann-Whitney U test of the per-step values gives p < ALPHA
(with 5 steps a side only a complete separation does: p = 0.008)."""

MW_EXACT_MAX: Final = 25
"""Up to this many steps a side the U test's p-value is exact; beyond, a normal approximation."""

MIN_REL_CHANGE: Final = 0.02
"""A change below 2 % of the larger side is noise whatever the spread (timer and jitter floor)."""


def stats(ga: pl.DataFrame, gb: pl.DataFrame, na: int, nb: int) -> pl.DataFrame:
    """Per key: median and scaled MAD of each side's per-step values, and the two-sided
    Mann-Whitney p-value of before vs after (U from mid-ranks within the key)."""

    def spread(g: pl.DataFrame, suffix: str) -> pl.DataFrame:
        return g.group_by("key").agg(
            pl.col("v").median().alias("med" + suffix),
            ((pl.col("v") - pl.col("v").median()).abs().median() * MAD_SCALE).alias("mad" + suffix),
        )

    both = pl.concat(
        [
            ga.with_columns(pl.lit(0, dtype=pl.Int8).alias("side")),
            gb.with_columns(pl.lit(1, dtype=pl.Int8).alias("side")),
        ]
    )
    u = (
        both.with_columns(pl.col("v").rank("average").over("key").alias("r"))
        .filter(pl.col("side") == 0)
        .group_by("key")
        .agg((pl.col("r").sum() - na * (na + 1) / 2.0).alias("u"))
    )
    table = {
        x: _mann_whitney_p(x, na, nb) for x in u.get_column("u").unique().drop_nulls().to_list()
    }
    u = u.with_columns(
        pl.col("u").replace_strict(table, default=None, return_dtype=pl.Float64).alias("p_value")
    ).drop("u")
    return (
        spread(ga, "")
        .join(spread(gb, "_b"), on="key", how="full", coalesce=True)
        .join(u, on="key", how="left")
    )


@functools.lru_cache(maxsize=64)
def _u_counts(m: int, n: int) -> tuple[float, ...]:
    """How many of the C(m+n, m) orderings give each U = 0..m*n (no ties)."""
    # f(m, n)[u] = f(m-1, n)[u-n] + f(m, n-1)[u], built row by row over m
    prev = [np.ones(1)] * (n + 1)  # m = 0: U is 0 whatever n
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # n = 0
        for j in range(1, n + 1):
            a = np.zeros(i * j + 1)
            a[j : j + prev[j].size] += prev[j]
            a[: cur[j - 1].size] += cur[j - 1]
            cur.append(a)
        prev = cur
    return tuple(prev[n].tolist())


def _mann_whitney_p(u: float, m: int, n: int) -> float:
    """Two-sided p of the Mann-Whitney U statistic ``u`` for samples of ``m`` and ``n``.

    Exact (no-tie null distribution, ties rounded towards the centre, which is conservative)
    up to :data:`MW_EXACT_MAX` values a side; the normal approximation with continuity
    correction beyond.
    """
    if m == 0 or n == 0:
        return 1.0
    lo = min(u, m * n - u)
    if max(m, n) <= MW_EXACT_MAX:
        counts = _u_counts(m, n)
        tail = sum(counts[: math.ceil(lo) + 1]) / sum(counts)
        return min(1.0, 2.0 * tail)
    mu = m * n / 2.0
    sigma = math.sqrt(m * n * (m + n + 1) / 12.0)
    z = max(abs(u - mu) - 0.5, 0.0) / sigma
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


def significance(m: pl.DataFrame, testable: bool) -> pl.DataFrame:
    """Add ``delta_us, speedup, significant, verdict, noise_us`` (see the module docstring)."""
    before, after = pl.col("before_us"), pl.col("after_us")
    rel = (after - before).abs() / pl.max_horizontal(before, after)
    noise_ns = NOISE_K * ((pl.col("mad").pow(2) + pl.col("mad_b").pow(2)) / 2.0).sqrt()
    shift_ns = (pl.col("med_b") - pl.col("med")).abs()
    big = rel >= MIN_REL_CHANGE
    # significant only beyond the noise band that is printed with it (the p-value is reported,
    # not used: a rank test could call a 37.9 ms shift inside a ±74.1 ms band significant)
    beyond = shift_ns > noise_ns
    significant = (big & beyond) if testable else pl.when(big).then(None).otherwise(False)
    out = m.with_columns(
        (after - before).alias("delta_us"),
        pl.when(after > 0).then(before / after).otherwise(None).alias("speedup"),
        significant.cast(pl.Boolean).alias("significant"),
        # ns here, µs below: one division each (units), not the query's product by 1/1000
        noise_ns.alias("noise_us") if testable else pl.lit(None).alias("noise_us"),
        pl.col("p_value") if testable else pl.lit(None, dtype=pl.Float64).alias("p_value"),
    )
    if testable:
        out = out.with_columns(units.us(out.get_column("noise_us")))
    return out.with_columns(
        pl.when(pl.col("significant").is_null())
        .then(pl.lit("untested"))
        .when(~pl.col("significant"))
        .then(pl.lit("noise"))
        .when(pl.col("after_us") < pl.col("before_us"))
        .then(pl.lit("gain"))
        .otherwise(pl.lit("loss"))
        .alias("verdict")
    )


@dataclass(frozen=True)
class StepChange:
    """The step-time change: medians, speedup, noise band, p-value and verdict."""

    before_us: float
    after_us: float
    speedup: float | None
    significant: bool | None
    noise_us: float | None
    p_value: float | None
    verdict: str


def step_time_change(
    before_ns: list[float], after_ns: list[float], testable: bool | None = None
) -> dict[str, Any]:
    """The step-time rule on two lists of per-step times (ns): ``before_us``, ``after_us``
    (medians), ``speedup``, ``significant``, ``noise_us``, ``p_value`` and ``verdict``
    (gain, loss, noise or untested). ``testable`` defaults to both sides having at least
    :data:`MIN_STEPS` steps."""

    def grid(v: list[float]) -> pl.DataFrame:
        return pl.DataFrame(
            {"key": ["step"] * len(v), "v": v}, schema={"key": pl.String, "v": pl.Float64}
        )

    if testable is None:
        testable = min(len(before_ns), len(after_ns)) >= MIN_STEPS
    m = stats(grid(before_ns), grid(after_ns), len(before_ns), len(after_ns))
    m = m.with_columns(
        units.us(m.get_column("med"), name="before_us"),
        units.us(m.get_column("med_b"), name="after_us"),
    )
    row: dict[str, Any] = significance(m, testable).row(0, named=True)
    return row


__all__ = ("StepChange", "significance", "stats", "step_time_change")
