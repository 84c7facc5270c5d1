"""The collectives table of device calls without Kineto ``args`` made in Python and NumPy
(``cluster_calls.collectives``) equals the plan's (``test_cluster_calls_numpy._definition``, the
filters and the collectives' plan): on random calls of one or two ranks with HCCL, NCCL and odd
names (null, "", underscores, upper case, no collective word), null steps and durations, tied
starts, rows out of time order; on the real Ascend ranks of collectives alone. And it declines
(the plan then) where its conditions fail."""

from __future__ import annotations

import random
import re
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from opscope.analysis import cluster as C
from opscope.analysis import cluster_calls, tree
from opscope.model import schema
from test_cluster_calls_numpy import _definition

_NAMES = (
    "hcom_allReduce__586_0_1", "hcom_batchSendRecv__764_3_1", "hcom_reduceScatter__097_4_1",
    "hcom_allGather__612_7_1", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "HcclBroadcast",
    "ALL_TO_ALLV_x", "send_recv", "foo", "", None, "Barrier", "reduce_scatter_base",
)  # fmt: skip


def _events(rng: random.Random, n: int, ranks: tuple[int, ...]) -> pl.DataFrame:
    rows = [
        {
            "rank": rng.choice(ranks),
            "step": rng.choice([None, 0, 1, 2]),
            "kind": rng.choice(("communication", "communication", "kernel")),
            "name": rng.choice(_NAMES),
            "ts_ns": rng.randrange(0, 40) * 10,
            "dur_ns": rng.choice([None, rng.randrange(0, 500)]),
            "args": None,
            "id": i,
        }
        for i in range(n)
    ]
    return pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int32, "step": pl.Int32, "kind": schema.EventKind, "name": pl.String,
            "ts_ns": pl.Int64, "dur_ns": pl.Int64, "args": pl.String, "id": pl.Int64,
        },
    )  # fmt: skip


def _fast(ev: pl.DataFrame) -> pl.DataFrame | None:
    return cluster_calls.collectives(ev, ev.get_column("kind") == "communication", C._COLL_WORD_RE)


@pytest.mark.parametrize("seed", range(30))
def test_equal_to_the_plan(seed: int) -> None:
    rng = random.Random(seed)
    ev = _events(rng, rng.randrange(1, 90), ((0,), (0, 1), (3, 1))[seed % 3])
    if not (ev.get_column("kind") == "communication").any():
        pytest.skip("no communication drawn")
    got = _fast(ev)
    assert got is not None
    want, _ = _definition(ev, host_compute=False)
    assert_frame_equal(got, want)
    # and through _calls, which takes it
    assert_frame_equal(C._calls(ev, host_compute=False)[0], want)


@pytest.mark.parametrize("rank", ["rank_1_ascend_pt", "rank_3_ascend_pt"])
def test_real_ranks(rank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path("/work/ascend_data/st/level2") / rank
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    ev = opscope.load(path, cache=False).events
    got = _fast(ev)
    assert got is not None and got.height > 0
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    assert_frame_equal(got, C._calls(ev, host_compute=False)[0])


def test_the_comparison_can_fail() -> None:
    """A word pattern that misses a collective's word gives another table."""
    ev = _events(random.Random(7), 40, (0,))
    want, _ = _definition(ev, host_compute=False)
    wrong = cluster_calls.collectives(
        ev, ev.get_column("kind") == "communication", re.compile(r"(?i)(allreduce)")
    )
    assert wrong is not None
    with pytest.raises(AssertionError):
        assert_frame_equal(wrong, want)


@pytest.mark.parametrize(
    "change",
    [
        pl.lit('{"Collective name": "allreduce"}').alias("args"),
        pl.when(pl.col("id") == 3).then(None).otherwise(pl.col("rank")).alias("rank"),
        pl.when(pl.col("id") == 3).then(None).otherwise(pl.col("ts_ns")).alias("ts_ns"),
        pl.when(pl.col("id") == 3).then(pl.lit("é_allreduce")).otherwise("name").alias("name"),
    ],
)
def test_declines_outside_its_conditions(change: pl.Expr) -> None:
    """Args, a null rank or start, a name not ASCII: None (and _calls' plan gives the table)."""
    ev = _events(random.Random(3), 30, (0, 1))
    ev = ev.with_columns(pl.lit("communication").cast(schema.EventKind).alias("kind")).with_columns(
        change
    )
    assert _fast(ev) is None
    want, _ = _definition(ev, host_compute=False)
    assert_frame_equal(C._calls(ev, host_compute=False)[0], want)
