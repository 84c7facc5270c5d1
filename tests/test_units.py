"""Microseconds from integer nanoseconds are one IEEE division of exact parts (opscope.units),
checked value for value against Python's own division, and the figures of compare, cluster
(Ascend stages, matrix) and trend that are built with it."""

from __future__ import annotations

import json
import random

import polars as pl

from opscope import units
from opscope.analysis.cluster import COLLECTIVE_COLUMNS, aggregate
from opscope.analysis.cluster_ascend import matrix_rows
from opscope.analysis.compare import _totals
from opscope.analysis.compare.stats import step_time_change

# 13% of the integers below 200k, 9 among them, come out one ulp off as a product by 1/1000
INTS = [*range(0, 20_000), 9, 10**15 + 7, 2**53 - 1]


def _bits(xs: list[float | None]) -> list[str | None]:
    return [None if x is None else float(x).hex() for x in xs]


def test_us_is_pythons_quotient_value_for_value() -> None:
    rng = random.Random(7)
    ns = [*INTS, *(rng.randrange(0, 2**53) for _ in range(20_000)), None]
    got = units.us(pl.Series("t_ns", ns, dtype=pl.Int64), name="t_us")
    assert got.name == "t_us" and got.dtype == pl.Float64
    assert _bits(got.to_list()) == _bits([None if v is None else v / 1000.0 for v in ns])
    per = units.us(pl.Series(ns, dtype=pl.Int64), per=7)
    assert _bits(per.to_list()) == _bits([None if v is None else v / 7000.0 for v in ns])
    assert units.us_value(9) == 9 / 1000.0 == 0.009
    assert units.us_value(None) is None
    assert units.mean_us(27, 3) == 27 / 3000.0


def test_compare_totals_per_step_are_one_division() -> None:
    keys = [f"k{i}" for i in range(300)]
    f = pl.DataFrame(
        {
            "key": keys * 2,
            "match": ["m"] * 600,
            "t_ns": [i * 3 + 9 for i in range(600)],
            "calls": [1] * 600,
        }
    )
    for scale in (1.0, 4.0):
        got = {r["key"]: r["us"] for r in _totals(f, scale).iter_rows(named=True)}
        want = {k: (i * 3 + 9 + (i + 300) * 3 + 9) / (1000.0 * scale) for i, k in enumerate(keys)}
        assert _bits([got[k] for k in keys]) == _bits([want[k] for k in keys])


def test_step_change_medians_and_noise_are_one_division() -> None:
    r = step_time_change([9.0, 9.0, 9.0, 11.0], [7.0, 7.0, 8.0, 13.0], testable=True)
    assert r["before_us"] == 9 / 1000.0 == 0.009  # the product by 1/1000 was 0.009000000000000001
    assert r["after_us"] == 7.5 / 1000.0
    noise_ns = r["noise_us"] * 1000.0
    assert r["noise_us"] == noise_ns / 1000.0


def test_ascend_stage_compute_is_the_mean_in_one_division() -> None:
    compute_ns = {0: 9, 1: 10, 2: 1_000_003, 3: 1_000_010, 4: 77, 5: 80}  # stages of 2 ranks
    steps = pl.DataFrame(
        [
            {
                "rank": r,
                "step": 1,
                "ts_ns": 0,
                "dur_ns": 200_000_000,
                "compute_ns": c,
                "communication_ns": 0,
                "communication_not_overlapped_ns": 0,
                "idle_ns": 0,
            }
            for r, c in compute_ns.items()
        ]
    )
    stages = pl.DataFrame(
        [
            {"rank": r, "pp_stage": r // 2, "pp_size": 3, "pp_group": json.dumps([0, 2, 4])}
            for r in compute_ns
        ]
    )
    out = aggregate(steps, pl.DataFrame(schema=COLLECTIVE_COLUMNS), stages=stages).to_json()
    got = {r["pp_stage"]: r["compute_us"] for r in out["stage_imbalance"]}
    want = {s: (compute_ns[2 * s] + compute_ns[2 * s + 1]) / 2000.0 for s in range(3)}
    assert _bits([got[s] for s in range(3)]) == _bits([want[s] for s in range(3)])


def test_matrix_time_is_one_division() -> None:
    times = list(range(1, 400))
    links = pl.DataFrame(
        {
            "src_rank": [0] * len(times),
            "dst_rank": [1] * len(times),
            "transport": ["HCCS"] * len(times),
            "size_bytes": [8] * len(times),
            "time_ns": times,
            "bandwidth_gbps": [1.0] * len(times),
            "ops": ["x"] * len(times),
        }
    )
    got = [r["time_us"] for r in matrix_rows(links, [0, 1])]
    assert _bits(got) == _bits([t / 1000.0 for t in times])
