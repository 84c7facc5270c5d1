"""Breakdown's figures that are ratios (the step-time statistics, the launch queue's mean and
zero share) are defined as quotients of exact integer sums rounded once: each compared here bit
for bit with plain Python's computation over the rows (``int / int`` is the correctly rounded
quotient; ``statistics`` computes medians, deciles and the standard deviation exactly), on real
traces and planted windows; and within 2 ulp of the Polars aggregates they replace."""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import opscope
from conftest import shared_trace
from helpers.queue_sweep import queue_sweep
from opscope.analysis import _breakdown_arrays as arrays
from opscope.analysis import breakdown as bd
from opscope.analysis.exact_stats import sqrt_of_ratio

REAL = [
    "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    "multi_rank/hta_sampled_128rank_job",
    "ascend/small_two_rank/test_rank_0",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    "compare/hta_trace_diff_test_v100_rank1of2.json.gz",
]

_WIN = {"rank": pl.Int32, "step": pl.Int32, "w0": pl.Int64, "w1": pl.Int64}


def _expected_stats(rows: list[tuple[int | None, int | None, int | None]]) -> list[tuple]:
    """The statistics table of windows (rank, w0, w1), computed here: per rank (a null rank
    first, then in order) and over all, of the lengths with both bounds."""
    ranks = sorted({r for r, _, _ in rows}, key=lambda r: (r is not None, r or 0))
    out = []
    for key, mine in [*((r, [x for x in rows if x[0] == r]) for r in ranks), (None, rows)]:
        v = [w1 - w0 for _, w0, w1 in mine if w0 is not None and w1 is not None]
        out.append((key, len(mine), *_figures(v)))
    return out


def _figures(v: list[int]) -> tuple[float | None, ...]:
    if not v:
        return (None,) * 6
    mean = sum(v) / len(v)
    median = statistics.median(v)
    deciles = statistics.quantiles(v, n=10, method="inclusive") if len(v) > 1 else [v[0]] * 9
    std = statistics.stdev(v) if len(v) > 1 else None
    cv = None if std is None else (std / mean if mean else math.nan if std == 0 else math.inf)
    return (mean, float(median), std, float(deciles[0]), float(deciles[8]), cv)


def _rows(table: pl.DataFrame) -> list[tuple]:
    return [tuple(r) for r in table.rows()]


def _same_floats(got: list[tuple], want: list[tuple]) -> None:
    """Equal bit for bit (nan equal to nan)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w)
        for a, b in zip(g, w, strict=True):
            if isinstance(b, float) and math.isnan(b):
                assert isinstance(a, float) and math.isnan(a), (g, w)
            else:
                assert type(a) is type(b) and a == b, (g, w)


def test_stats_equal_plain_python_on_planted_windows() -> None:
    """Random windows of three ranks and a null rank, lengths near 0 and near an epoch in ns
    (2**62 apart from 0: their squares far past int64), a null bound, equal lengths, one
    window alone, no window at all."""
    rng = random.Random(11)
    cases: list[list[tuple[int | None, int | None, int | None]]] = [[]]
    for base in (0, 1_700_000_000_000_000_000):
        rows: list[tuple[int | None, int | None, int | None]] = []
        for rank in (None, 0, 1, 2):
            for _ in range(rng.randint(1, 30)):
                w0 = base + rng.randint(0, 10**9)
                w1 = w0 + rng.choice([rng.randint(0, 10**9), 7_777_777, 1])
                rows.append((rank, w0, w1))
        rows.append((1, None, 5))  # no length: counted as a step, not in the figures
        rows.append((2, 5, None))
        rng.shuffle(rows)
        cases.append(rows)
    cases.append([(3, 0, 123_456_789)])  # one window: no spread
    cases.append([(4, 0, 10), (4, 5, 15), (4, 100, 110)])  # all equal: std 0
    cases.append([(5, 0, 0), (5, 3, 3)])  # all zero: cv 0 / 0
    for rows in cases:
        win = pl.DataFrame(
            [(r, i, a, b) for i, (r, a, b) in enumerate(rows)], schema=_WIN, orient="row"
        )
        got = bd._stats_table(win)
        assert got.schema == pl.Schema(bd._STATS_SCHEMA)
        _same_floats(_rows(got), _expected_stats(rows))


def test_sqrt_of_ratio_is_correctly_rounded() -> None:
    """Each root lies within half an ulp of the exact √(num / den): its neighbours' midpoints
    bracket the ratio (exact rational arithmetic)."""
    rng = random.Random(2)
    pairs = [(0, 1), (1, 1), (2, 1), (10**40 + 1, 3), (1, 10**30), (2**200 + 12345, 7)]
    pairs += [
        (rng.randint(0, 10 ** rng.randint(1, 60)), rng.randint(1, 10**20)) for _ in range(300)
    ]
    for num, den in pairs:
        root = sqrt_of_ratio(num, den)
        ratio = Fraction(num, den)
        lo, hi = math.nextafter(root, -math.inf), math.nextafter(root, math.inf)
        if root > 0:
            assert ((Fraction(lo) + Fraction(root)) / 2) ** 2 <= ratio, (num, den)
        assert ratio <= ((Fraction(root) + Fraction(hi)) / 2) ** 2, (num, den)


@pytest.mark.parametrize("rel", REAL)
def test_stats_and_queue_equal_plain_python_on_real_traces(rel: str) -> None:
    p = opscope.load(shared_trace(rel), cache=False)
    b = bd.breakdown(p, bd.Options())
    inp = bd._inputs(p)
    win = inp.win
    rows = list(zip(*(win.get_column(c).to_list() for c in ("rank", "w0", "w1")), strict=True))
    _same_floats(_rows(b.stats), _expected_stats(rows))
    # the queue: a sweep per lane here, its figures Python's quotients of the integer sums
    want = _sweep(inp.dev, win)
    got = {(r[0], r[1], r[2]): r[3:] for r in b.queue.rows()}
    assert got == want
    assert b.queue.height == len(want) > 0
    assert b.queue.select("rank", "device", "stream").rows() == sorted(want)


def _sweep(dev: pl.DataFrame, win: pl.DataFrame) -> dict[tuple, tuple]:
    """The queue table per (rank, device, stream) of rows of ``dev`` without a null key: each
    lane's launch and end points (an end first at one instant) swept over its rank's range."""
    rng_of: dict[int, tuple[int, int]] = {}
    for r, w0, w1 in win.select("rank", "w0", "w1").rows():
        a, b = rng_of.get(r, (w0, w1))
        rng_of[r] = (min(a, w0), max(b, w1))
    rows = dev.select("rank", "device", "stream", "launch_ts", "ts_ns", "dur_ns").rows()
    return queue_sweep(rows, rng_of)


def test_launch_queue_equals_a_sweep_on_planted_lanes() -> None:
    """Many lanes with points at one instant (ends before launches), launches after their end,
    work outside its lane's range and a lane of no range: the arrays' sums equal a sweep."""
    rng = random.Random(4)
    n_lanes = 30
    r0 = [rng.randint(0, 500) for _ in range(n_lanes)]
    r1 = [a + rng.choice([0, rng.randint(1, 1500)]) for a in r0]
    rows = []
    for _ in range(600):
        lane = rng.randrange(n_lanes)
        ts = rng.randrange(-200, 2200, 10)
        rows.append((lane, ts - rng.randrange(-50, 300, 10), ts + rng.randrange(10, 200, 10)))
    lane, launch, end = (np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
    got = arrays.launch_queue(lane, launch, end, np.array(r0), np.array(r1))
    for k in range(n_lanes):
        pts = sorted(
            [p for ln, a, e in rows if ln == k for p in ((a, 1), (e, -1))]
        )  # (-1 before 1 at one instant)
        q = area = top = busy = 0
        for i, (t, d) in enumerate(pts):
            q += d
            t1 = pts[i + 1][0] if i + 1 < len(pts) else t
            ln = max(min(t1, r1[k]) - max(t, r0[k]), 0)
            area += q * ln
            top = max(top, q) if ln > 0 else top
            busy += ln if q > 0 else 0
        assert (got.area[k], got.top[k], got.busy[k]) == (area, top, busy), k


@pytest.mark.parametrize("rel", REAL)
def test_queue_arrays_equal_the_plan_and_stats_stay_within_2_ulp_of_polars(rel: str) -> None:
    """The arrays' queue equals :func:`queue_lengths` (the plan's sums, the same quotients);
    the statistics are within 2 ulp of Polars' aggregates (its running float sums and
    interpolation round differently, by an ulp at most on these traces)."""
    p = opscope.load(shared_trace(rel), cache=False)
    inp = bd._inputs(p)
    taken = bd._arrays_of(inp.work, inp.win)
    assert taken is not None
    assert bd._queue_table(inp.work, taken[0]).equals(bd.queue_lengths(inp.dev, inp.win))
    d = pl.col("dur_ns").cast(pl.Float64)
    polars = (
        inp.win.select("rank", (pl.col("w1") - pl.col("w0")).alias("dur_ns"))
        .group_by("rank")
        .agg(
            d.mean().alias("mean"),
            d.median().alias("median"),
            d.std().alias("std"),
            d.quantile(0.1, "linear").alias("p10"),
            d.quantile(0.9, "linear").alias("p90"),
        )
        .sort("rank")
    )
    mine = bd._stats_table(inp.win).filter(pl.col("rank").is_not_null()).sort("rank")
    for want, got in zip(polars.rows(), mine.rows(), strict=True):
        for a, b in zip(want[1:], got[2:7], strict=True):
            assert (a is None and b is None) or abs(a - b) <= 2 * math.ulp(max(abs(a), abs(b)))
