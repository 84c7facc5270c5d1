"""The critical path's per-step node orders: the steps by (rank, step), a null first, each
step's nodes by (end, start, id), as plain Python sorts them, whatever the rows' order."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from opscope.analysis import critical_path as cp


def _reference(nodes: pl.DataFrame) -> tuple[list[Any], list[list[int]]]:
    """(keys, each step's node ids) in plain Python."""
    steps: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    for r in nodes.iter_rows(named=True):
        steps.setdefault((r["rank"], r["step"]), []).append((r["end_ns"], r["start_ns"], r["id"]))
    keys = sorted(steps, key=lambda k: (k[0] is not None, k[0] or 0, k[1] is not None, k[1] or 0))
    return keys, [[x[2] for x in sorted(steps[k])] for k in keys]


def _got(nodes: pl.DataFrame) -> tuple[list[Any], list[list[int]]]:
    keys, rows = cp._step_rows(nodes)
    ids = nodes.get_column("id").to_numpy()
    return keys, [ids[r].tolist() for r in rows]


def _random_nodes(seed: int, nulls: bool = False) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    start = rng.integers(0, 30, n)  # few distinct times: many equal (end, start) pairs
    nodes = pl.DataFrame(
        {
            "rank": pl.Series(rng.integers(0, 3, n), dtype=pl.Int32),
            "step": pl.Series(rng.integers(-1, 4, n), dtype=pl.Int32),
            "id": rng.permutation(n) - n // 3,
            "start_ns": start,
            "end_ns": start + rng.integers(0, 5, n),
        }
    )
    if nulls:
        nodes = nodes.with_columns(
            pl.when(pl.lit(rng.random(n) < 0.2)).then(None).otherwise(pl.col(c)).alias(c)
            for c in ("rank", "step")
        )
    return nodes


@pytest.mark.parametrize("seed", range(20))
def test_steps_and_orders_equal_plain_sorts(seed: int) -> None:
    nodes = _random_nodes(seed, nulls=seed % 4 == 0)
    want = _reference(nodes)
    assert _got(nodes) == want
    assert _got(nodes.sample(fraction=1.0, shuffle=True, seed=seed)) == want


def test_a_trace_with_ties() -> None:
    import opscope
    from conftest import shared_trace
    from opscope.analysis.critical_path_graph import graph

    p = opscope.load(shared_trace("multi_rank/hta_sampled_128rank_job/rank-0.json.gz"), cache=False)
    nodes, _, _ = graph(p)
    assert nodes.select("rank", "step", "end_ns", "start_ns").is_duplicated().any()  # ties
    want = _reference(nodes)
    assert _got(nodes) == want and len(want[0]) > 0
    assert _got(nodes.sample(fraction=1.0, shuffle=True, seed=1)) == want


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
