"""``Cluster.to_json``'s collectives summed per (rank, collective) and its ranks' rows, made in
Python (``cluster_calls.sums``, ``cluster._rank_rows``), equal the group-by's and the Series'
they replace: on random collectives (null ranks and collectives, non-ASCII names, null bytes,
several ranks), on the real partial Ascend ranks' whole JSON (``tree.SHORTCUTS`` off runs the
queries), and they decline where their conditions fail."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

import opscope
from opscope.analysis import cluster as C
from opscope.analysis import cluster_calls, registry, tree
from opscope.analysis.hotspots import rows_of


def _coll(rng: random.Random, n: int) -> pl.DataFrame:
    names = ("allreduce", "allgather", "sendrecv", "é-reduce", "Z", "", None)
    return pl.DataFrame(
        {
            "rank": [rng.choice([None, 0, 1, 3]) for _ in range(n)],
            "collective": [rng.choice(names) for _ in range(n)],
            "dur_ns": [rng.choice([None, rng.randrange(0, 10**12)]) for _ in range(n)],
            "wait_ns": [rng.randrange(0, 10**9) for _ in range(n)],
            "bytes": [rng.choice([None, rng.randrange(0, 10**15)]) for _ in range(n)],
        },
        schema={"rank": pl.Int32, "collective": pl.String, "dur_ns": pl.Int64,
                "wait_ns": pl.Int64, "bytes": pl.Int64},
    )  # fmt: skip


def _query(coll: pl.DataFrame) -> list[dict[str, object]]:
    plan = (
        coll.lazy()
        .group_by("rank", "collective")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_ns").sum(),
            pl.col("wait_ns").sum(),
            pl.col("bytes").sum().alias("bytes"),
        )
        .sort("rank", "collective")
    )
    return rows_of([(plan, None)])[0]


@pytest.mark.parametrize("seed", range(25))
def test_sums_equal_the_group_by(seed: int) -> None:
    rng = random.Random(seed)
    coll = _coll(rng, rng.randrange(0, 60))
    got = cluster_calls.sums(coll)
    assert got is not None
    want = _query(coll)
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]  # (the keys' order: the JSON's)


def test_sums_decline() -> None:
    coll = _coll(random.Random(1), 5)
    assert cluster_calls.sums(coll.with_columns(pl.col("bytes").cast(pl.Float64))) is None
    assert cluster_calls.sums(coll.with_columns(pl.col("rank").cast(pl.String))) is None
    big = coll.with_columns(
        pl.lit(0, pl.Int32).alias("rank"),
        pl.lit("x").alias("collective"),
        pl.lit(2**62, pl.Int64).alias("wait_ns"),
    )
    assert cluster_calls.sums(big) is None  # (a sum past Int64)
    many = pl.concat([coll] * (cluster_calls.MAX_CALLS // 5 + 1))
    assert cluster_calls.sums(many) is None


def test_rank_rows_equal_the_series() -> None:
    rng = random.Random(3)
    n = 4
    times = {f"{c}_ns": [rng.choice([None, rng.randrange(0, 10**13)]) for _ in range(n)]
             for c in C._RANK_TIMES}  # fmt: skip
    ranks = pl.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "steps": pl.Series([1, 2, 3, 4], dtype=pl.UInt32),
            **{k: pl.Series(v, dtype=pl.Int64) for k, v in times.items()},
            "collectives": pl.Series([5, 0, 1, 2], dtype=pl.UInt32),
            "last_arrival_share": [0.5, None, float("nan"), 1 / 3],
        }
    )
    want = ranks.select(
        "rank",
        "steps",
        *[pl.col(f"{c}_ns").cast(pl.Float64) / 1000.0 for c in C._RANK_TIMES],
        "last_arrival_share",
        "collectives",
    ).rename({f"{c}_ns": f"{c}_us" for c in C._RANK_TIMES})
    got = C._rank_rows(ranks)
    assert got is not None
    assert repr(got) == repr(want.to_dicts())
    assert C._rank_rows(ranks.with_columns(pl.col("idle_ns").cast(pl.String))) is None


@pytest.mark.parametrize("rank", ["rank_1_ascend_pt", "rank_3_ascend_pt", "rank_0_ascend_pt"])
def test_real_ranks(rank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path("/work/ascend_data/st/level2") / rank
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    res = registry.run("cluster", opscope.load(path, cache=False))
    assert isinstance(res, C.Cluster)
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    assert cluster_calls.sums(res.collectives) is not None
    fast = res.to_json()
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    assert repr(fast) == repr(res.to_json())
