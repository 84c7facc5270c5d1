"""The critical path of a profile whose every event is device work, built from the events'
columns (``critical_path_device.device_only``), equals the full graph's (the shortcuts off):
on the real ranks of collectives alone and on planted profiles of several ranks, steps (a null
one too), devices, streams and threads, tied times, names "" and "(idle)" and null, rows out of
order. And it is taken only where its conditions hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import SHARED_TRACES
from opscope.analysis import critical_path as cp
from opscope.analysis import critical_path_device as cpd
from opscope.analysis import tree
from opscope.analysis.registry import Options
from opscope.model import Profile

ASCEND_DATA = Path("/work/ascend_data")
_REAL = [
    ASCEND_DATA / "st/level2/rank_1_ascend_pt",
    ASCEND_DATA / "st/level2/rank_3_ascend_pt",
    SHARED_TRACES / "ascend/small_two_rank/test_rank_0",
    SHARED_TRACES / "ascend/small_two_rank/test_rank_1",
]


def _both(make: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, bool]:
    """(shortcut's result, full graph's result, whether the shortcut was taken), each of a fresh
    Profile from ``make()``."""
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    taken = cpd.device_only(make()) is not None
    fast = cp.critical_path(make(), Options())
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = cp.critical_path(make(), Options())
    return fast, full, taken


def _equal(fast: Any, full: Any) -> None:
    for name in ("path", "ops", "steps"):
        assert_frame_equal(getattr(fast, name), getattr(full, name), check_exact=True), name


@pytest.mark.parametrize("path", _REAL, ids=lambda p: p.name)
def test_real_ranks_of_device_work(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    fast, full, taken = _both(lambda: opscope.load(path, cache=False), monkeypatch)
    assert taken
    _equal(fast, full)
    assert fast.path.height > 0


def _events(seed: int, n: int | None = None) -> pl.DataFrame:
    """Device work of 1-3 ranks, steps 1-3 and null, 2 devices (a null one too), streams (null:
    the thread, null too), tied and zero-length times, names with "", "(idle)" and null, rows
    shuffled (ids not in row order)."""
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(1, 120))
    start = rng.integers(0, 60, n) * 10
    names: list[str | None] = [
        str(x) for x in rng.choice(["hcom_allReduce_1", "k", "", "(idle)", "é"], n)
    ]
    for k in rng.integers(0, n, int(rng.integers(0, 3))):
        names[int(k)] = None

    def some_null(values: np.ndarray, share: float) -> list[Any]:
        return [None if rng.random() < share else int(v) for v in values]

    ev = pl.DataFrame(
        {
            "id": rng.permutation(n) * 3 + 5,
            "rank": rng.integers(0, int(rng.integers(1, 4)), n),
            "kind": rng.choice(["kernel", "communication", "memcpy", "memset"], n),
            "name": names,
            "ts_ns": start,
            "dur_ns": rng.integers(0, 4, n) * 10,
            "device": some_null(rng.integers(0, 2, n), 0.1),
            "stream": some_null(rng.integers(1, 4, n), 0.3),
            "tid": some_null(rng.integers(7, 9, n), 0.3),
            "step": some_null(rng.integers(1, 4, n), 0.2),
        }
    )
    return ev


def _steps(ev: pl.DataFrame) -> pl.DataFrame:
    """A ProfilerStep row per (rank, step) of the events but one, and one repeated."""
    keys = ev.select("rank", "step").drop_nulls().unique().sort("rank", "step")
    if keys.height:
        keys = pl.concat([keys[:-1], keys[:1]])
    return keys.with_columns(
        pl.lit(0, pl.Int64).alias("ts_ns"),
        (pl.col("step") * 100 + 7).cast(pl.Int64).alias("dur_ns"),
    )


@pytest.mark.parametrize("seed", range(40))
def test_planted_device_work(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _events(seed)
    steps = _steps(ev)
    fast, full, taken = _both(lambda: Profile.from_tables(events=ev, steps=steps), monkeypatch)
    assert taken
    _equal(fast, full)


def test_the_comparison_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shortcut that lost the lane edges gives another path (the longest node alone, not the
    stream's chain): the comparison above sees it."""
    ev = pl.DataFrame(
        {
            "id": [0, 1, 2],
            "rank": [0, 0, 0],
            "kind": ["kernel", "kernel", "communication"],
            "name": ["a", "b", "c"],
            "ts_ns": [0, 60, 5],
            "dur_ns": [60, 60, 100],
            "device": [0, 0, 0],
            "stream": [1, 1, 2],
            "step": [1, 1, 1],
        }
    )
    fast, full, _ = _both(lambda: Profile.from_tables(events=ev), monkeypatch)
    _equal(fast, full)
    assert full.path.get_column("name").to_list() == ["a", "b"]
    real = cp.paths

    def no_edges(step_rows: Any, edges: Any, node: Any) -> Any:
        return real(step_rows, tuple(e[:0] for e in edges), node)

    monkeypatch.setattr(cp, "paths", no_edges)
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    wrong = cp.critical_path(Profile.from_tables(events=ev), Options())
    with pytest.raises(AssertionError):
        _equal(wrong, full)


@pytest.mark.parametrize(
    "change",
    [
        pl.col("kind").cast(pl.String).replace({"memset": "cpu_op"}),
        pl.col("kind").cast(pl.String).replace({"memset": "runtime"}),
        pl.col("kind").cast(pl.String).replace({"memset": "gpu_annotation"}),
        pl.when(pl.col("kind") == "memset").then(3).otherwise(None).alias("launch_id"),
        pl.when(pl.col("kind") == "memset").then(3).otherwise(None).alias("op_id"),
        pl.when(pl.col("kind") == "memset").then(None).otherwise(pl.col("ts_ns")).alias("ts_ns"),
        pl.when(pl.col("kind") == "memset").then(None).otherwise(pl.col("rank")).alias("rank"),
        pl.when(pl.col("kind") == "memset").then(5).otherwise(pl.col("id")).alias("id"),
    ],
)
def test_not_taken_outside_its_conditions(change: pl.Expr, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host event, a launch or op link, a null time or rank, a repeated id: the full graph
    (and the same tables either way, but for a null time: no time to compare)."""
    ev = _events(3, n=60)
    assert (ev.get_column("kind") == "memset").any()
    ev = ev.with_columns(change.alias(change.meta.output_name()))
    if ev.get_column("ts_ns").null_count():
        assert cpd.device_only(Profile.from_tables(events=ev)) is None
        return
    fast, full, taken = _both(lambda: Profile.from_tables(events=ev), monkeypatch)
    assert not taken
    _equal(fast, full)


def test_an_empty_profile_takes_the_full_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, full, taken = _both(Profile.from_tables, monkeypatch)
    assert not taken
    _equal(fast, full)
    assert fast.path.height == 0
