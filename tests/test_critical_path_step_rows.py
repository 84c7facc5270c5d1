"""The critical path's per-step node orders: the NumPy partition (``_step_partitions``) gives
what ``partition_by`` gave before it, Polars' sort order of ties included."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from opscope.analysis import critical_path as cp


def _both(monkeypatch: pytest.MonkeyPatch, nodes: pl.DataFrame) -> tuple[Any, Any, list[int]]:
    taken: list[int] = []
    real = cp._step_partitions

    def spy(df: pl.DataFrame) -> Any:
        out = real(df)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(cp.tree, "SHORTCUTS", True)
    monkeypatch.setattr(cp, "_step_partitions", spy)
    fast = cp._step_rows(nodes)
    monkeypatch.setattr(cp, "_step_partitions", lambda df: None)
    full = cp._step_rows(nodes)
    return fast, full, taken


def _equal(a: Any, b: Any) -> bool:
    return (
        a[0] == b[0]
        and len(a[1]) == len(b[1])
        and all(np.array_equal(x, y) for x, y in zip(a[1], b[1], strict=True))
    )


@pytest.mark.parametrize("seed", range(20))
def test_partition_equals_partition_by_with_ties(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    start = rng.integers(0, 30, n)  # few distinct times: many equal (end, start) pairs
    nodes = pl.DataFrame(
        {
            "rank": pl.Series(rng.integers(0, 3, n), dtype=pl.Int32),
            "step": pl.Series(rng.integers(0, 4, n), dtype=pl.Int32),
            "id": np.arange(n),
            "start_ns": start,
            "end_ns": start + rng.integers(0, 5, n),
        }
    )
    fast, full, taken = _both(monkeypatch, nodes)
    assert taken == [True]
    assert _equal(fast, full)


def test_a_trace_with_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    import opscope
    from conftest import shared_trace
    from opscope.analysis.critical_path_graph import graph

    p = opscope.load(shared_trace("multi_rank/hta_sampled_128rank_job/rank-0.json.gz"), cache=False)
    nodes, _, _ = graph(p)
    assert cp._step_rows_unique(nodes) is None  # ties: the sorts run
    fast, full, taken = _both(monkeypatch, nodes)
    assert taken == [True]
    assert _equal(fast, full) and len(fast[0]) > 0


def test_a_null_key_takes_partition_by(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = pl.DataFrame(
        {
            "rank": pl.Series([0, 0, None], dtype=pl.Int32),
            "step": pl.Series([1, 1, 1], dtype=pl.Int32),
            "id": [0, 1, 2],
            "start_ns": [0, 0, 0],
            "end_ns": [5, 5, 5],
        }
    )
    assert cp._step_partitions(nodes) is None


def test_no_runtime_call_no_host_node_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace of device work only (st/level2's rank 1: collectives): the host nodes are the
    empty table without a query (the calls found by the kinds' codes in NumPy, shortcuts on or
    off), and the path tables equal those of the shortcuts off."""
    import os

    import opscope
    from helpers.spies import count_collect_all, count_queries
    from opscope.analysis import tree
    from opscope.analysis.critical_path_graph import _host_nodes, _Kinds
    from opscope.analysis.registry import Options

    path = "/work/ascend_data/st/level2/rank_1_ascend_pt"
    if not os.path.exists(path):
        pytest.skip(f"trace not found: {path}")
    p = opscope.load(path, cache=False)
    ev = p.events
    assert not ev.get_column("kind").is_in(["runtime", "driver"]).any()
    kinds = _Kinds.of(ev.get_column("kind"))  # (graph's, once per graph: one small query)
    calls = count_collect_all(monkeypatch)
    ran = count_queries(monkeypatch)
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    fast_nodes = _host_nodes(ev, p.steps, kinds=kinds)
    assert calls == [] and ran == [] and fast_nodes.height == 0
    fast = cp.critical_path(opscope.load(path, cache=False), Options())
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    calls.clear()
    ran.clear()
    full_nodes = _host_nodes(ev, p.steps, kinds=kinds)
    assert calls == [] and ran == []
    assert full_nodes.schema == fast_nodes.schema and full_nodes.height == 0
    full = cp.critical_path(opscope.load(path, cache=False), Options())
    for a, b in zip(
        (fast.path, fast.ops, fast.steps), (full.path, full.ops, full.steps), strict=True
    ):
        assert a.schema == b.schema and a.equals(b)
    assert fast.path.height > 0
