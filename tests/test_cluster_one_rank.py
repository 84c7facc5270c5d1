"""The cluster of a single-rank profile without a query (``cluster._one_rank``): every table
equal to the plans' (the multi-rank path) on real traces and planted edge cases; the step gap's
and msprof's µs figures the quotient ns / 1000 (plain Python's ``int / int``), the gap that of
the integer gap."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import shared_trace
from helpers.spies import count_queries
from opscope.analysis import cluster as cl
from opscope.analysis import cluster_ascend as asc
from opscope.analysis.registry import Options

_TABLES = ("ranks", "steps", "collectives", "step_gap", "slow_ranks", "links", "slow_links",
           "hccl", "msprof", "stages", "stage_imbalance")  # fmt: skip


def _both(steps: pl.DataFrame, colls: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> Any:
    """(The single-rank path's cluster, asserting it was taken; the plans' of the same
    frames)."""
    assert cl._one_rank(steps, colls) is not None
    fast = cl._aggregate(steps, colls)
    with monkeypatch.context() as m:
        m.setattr(cl, "_one_rank", lambda *a: None)
        plans = cl._aggregate(steps, colls)
    for t in _TABLES:
        assert_frame_equal(getattr(fast, t), getattr(plans, t), check_exact=True)
    assert fast.to_json() == plans.to_json()
    return fast


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/small_two_rank/test_rank_0",
        "gpu/hta_nccl_a100_rank0of2.json.gz",
        "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    ],
)
def test_one_rank_equals_the_plans_on_real_traces(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = opscope.load(shared_trace(rel), cache=False)
    t = cl._rank_plans(p)
    res = _both(t["steps"], t["collectives"], monkeypatch)
    assert res.steps.height and res.ranks.height == 1
    # no query from the rank tables on, as the analysis calls it (its breakdown done before)
    cl.cluster(p, Options())
    ran = count_queries(monkeypatch)
    cl._aggregate(t["steps"], t["collectives"], t["links"], hccl=t["hccl"], stages=t["stages"])
    assert ran == []


def test_one_rank_equals_the_plans_on_a_host_only_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    path = Path("/work/corpus/hta/rank_non_gpu/rank_non_gpu.json.gz")
    if not path.exists():
        pytest.skip(f"corpus trace not found: {path}")
    t = cl._rank_plans(opscope.load(path, cache=False))
    _both(t["steps"], t["collectives"], monkeypatch)


def _steps(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=cl.STEP_COLUMNS, orient="row")


def _colls(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=cl.COLLECTIVE_COLUMNS, orient="row")


def test_one_rank_equals_the_plans_on_planted_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps out of order, a repeated step, a null step and a null time; collectives at one
    instant whose seq puts them in another order; no collective; no step; neither."""
    steps = _steps(
        [
            (3, 2, 5000, 9288291, 10, 20, 5, 100),
            (3, 1, 1000, 4000, 1, 2, 3, None),
            (3, 2, 5000, 9288290, 10, 20, 5, 100),
            (3, None, 0, None, None, 0, 0, 7),
        ]
    )
    colls = _colls(
        [
            (3, 1, "allreduce", "nccl:all_reduce", "g0", 1, 2000, 50, 64),
            (3, 1, "broadcast", "nccl:broadcast", "g0", 0, 2000, 70, None),
            (3, 1, "allreduce", "nccl:all_reduce", "g0", 0, 1500, 30, 64),
            (3, 2, "allreduce", "nccl:all_reduce", None, 0, 5100, 10, None),
        ]
    )
    res = _both(steps, colls, monkeypatch)
    assert res.collectives.get_column("seq").to_list() == [0, 0, 1, 0]
    _both(steps, colls.clear(), monkeypatch)
    _both(steps.clear(), colls, monkeypatch)
    _both(steps.clear(), colls.clear(), monkeypatch)
    # several ranks, or a null one: the plans
    assert cl._one_rank(steps, colls.with_columns(pl.lit(4, pl.Int32).alias("rank"))) is None
    assert cl._one_rank(steps.with_columns(pl.lit(None, pl.Int32).alias("rank")), colls) is None


def test_step_gap_figures_are_quotients_of_the_ns() -> None:
    """Several ranks (the plans' path) and one (the arrays'): each µs figure is ns / 1000 as
    Python divides integers, the gap that of slowest − fastest (9288291 ns: 9288.291 µs, not
    Polars' 9288.291000000001)."""
    rows = [(0, 1, 0, 9288291), (1, 1, 0, 7), (2, 1, 0, 123456789), (0, 2, 0, 5), (1, 2, 0, None)]
    multi = _steps([(r, s, t, d, 0, 0, 0, 0) for r, s, t, d in rows])
    one = multi.filter(pl.col("rank") == 0)
    for st in (multi, one):
        mine = set(st.get_column("rank").to_list())
        got = cl._aggregate(st, _colls([])).step_gap
        assert got.height == 2
        for g in got.iter_rows(named=True):
            durs = [d for r, s, _, d in rows if r in mine and s == g["step"] and d is not None]
            lo, hi = min(durs), max(durs)
            assert (g["fastest_us"], g["slowest_us"], g["gap_us"]) == (
                lo / 1000,
                hi / 1000,
                (hi - lo) / 1000,
            )
    assert cl._aggregate(one, _colls([])).step_gap.get_column("fastest_us").to_list() == [
        9288.291,
        0.005,
    ]


def test_msprof_without_hccl_equals_the_join_and_divides_exactly() -> None:
    ranks = pl.DataFrame(
        {
            "rank": [0, 1],
            "steps": [2, 2],
            "step_time_ns": [9288291, 9],
            "compute_ns": [75174575, 1],
            "comm_ns": [153601324, 0],
            "comm_not_overlapped_ns": [146614020, 3],
            "idle_ns": [69909504, 8],
            "wait_ns": [0, 123],
        },
        schema_overrides={"rank": pl.Int32},
    )
    hccl = pl.DataFrame(schema=asc.HCCL_COLUMNS)
    got = asc.msprof_without_hccl(ranks)
    assert_frame_equal(got, asc.msprof_ranks(ranks, hccl), check_exact=True)
    for r, row in zip(ranks.iter_rows(named=True), got.iter_rows(named=True), strict=True):
        for a, b in asc._MSPROF_US:
            assert row[b] == (r[a] / 1000 if a in r else None)


def test_merged_and_below_of_one_group_equal_brute_force() -> None:
    """One group (the single-rank shortcut: no group keys) and the same intervals beside a
    second group (the keyed path): each union's covered ns and each query's length before it
    counted point by point."""
    import random

    import numpy as np

    rng = random.Random(9)
    s = np.array([rng.randrange(0, 400) for _ in range(60)], dtype=np.int64)
    e = s + np.array([rng.randrange(0, 40) for _ in range(60)], dtype=np.int64)
    x = np.array([rng.randrange(-20, 460) for _ in range(50)], dtype=np.int64)
    covered = {t for a, b in zip(s.tolist(), e.tolist(), strict=True) for t in range(a, b)}
    want = [sum(1 for t in covered if t < q) for q in x.tolist()]
    one = cl._merged(np.zeros(60, dtype=np.int64), s, e)
    assert sum((one[2] - one[1]).tolist()) == len(covered)
    assert cl._below(one, np.zeros(50, dtype=np.int64), x).tolist() == want
    two = cl._merged(np.r_[np.zeros(60, dtype=np.int64), [1]], np.r_[s, [5]], np.r_[e, [9]])
    assert [a[:-1].tolist() for a in two] == [a.tolist() for a in one]
    assert cl._below(two, np.zeros(50, dtype=np.int64), x).tolist() == want
