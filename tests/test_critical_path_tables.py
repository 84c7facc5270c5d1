"""The critical path's ``path`` and ``ops`` tables built by indexing and NumPy grouping
(``_path_table``, ``_ops_table``) equal what the Polars plans they replaced gave (kept below as
the references), row order, dtypes and the last bit of ``share`` included: on random nodes with
empty, idle and null names, missing op ids and events of no name, and on every shared Kineto
trace through the whole analysis."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from conftest import shared_trace
from helpers.spies import count_collect_all, count_queries
from opscope import load
from opscope.analysis import critical_path as cp
from opscope.analysis import critical_path_graph as cpg
from opscope.analysis import tree
from opscope.analysis.critical_path_graph import (
    _NODE_SCHEMA,
    IDLE_OP,
    graph,
    name_expr,
    op_expr,
    op_names,
)
from opscope.analysis.registry import Options


def reference_path(
    nodes: pl.DataFrame, ev: pl.DataFrame, rows: np.ndarray, order: np.ndarray, on: np.ndarray
) -> pl.DataFrame:
    """The path's plan as it was (verbatim)."""
    op = op_names(pl.DataFrame([nodes.get_column("op_id")[rows]]), ev)
    name = pl.col("name").gather(rows)
    return (
        nodes.select(
            "rank", "step", "id", "lane_kind", "lane", "start_ns", "end_ns", "name", "op_id"
        )
        .lazy()
        .select(
            pl.col("rank").gather(rows),
            pl.col("step").gather(rows),
            pl.Series("order", order),
            pl.when(pl.col("id") >= 0).then(pl.col("id")).alias("id").gather(rows),
            pl.Series("on_path_ns", on),
            pl.col("lane_kind", "lane", "start_ns", "end_ns").gather(rows),
            name_expr(name, op).alias("name"),
            op_expr(name, op).alias("op"),
            pl.col("op_id").gather(rows),
        )
        .pipe(tree.collect)
        .rechunk()
    )


def reference_ops(path: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The ops' plan as it was (verbatim)."""
    return (
        path.lazy()
        .group_by("rank", "step", "op")
        .agg(pl.col("on_path_ns").sum(), pl.len().alias("nodes"))
        .join(steps.lazy().select("rank", "step", "step_ns"), on=["rank", "step"])
        .sort(["rank", "step", "on_path_ns", "op"], descending=[False, False, True, False])
        .pipe(tree.collect)
        .rechunk()
        .pipe(_with_share)
    )


def _with_share(ops: pl.DataFrame) -> pl.DataFrame:
    """``share``: on-path time over the step's span, the quotient in float64 (Polars computes
    a column over a one-value column as a product with the reciprocal: not the quotient)."""
    on = ops.get_column("on_path_ns").to_numpy().astype(np.float64)
    span = ops.get_column("step_ns").to_numpy().astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ops.with_columns(pl.Series("share", on / span, dtype=pl.Float64))


def _random(seed: int) -> tuple[pl.DataFrame, pl.DataFrame, list[tuple[int, int]], list[Any]]:
    """Nodes and events, the steps (rank, step) and per step its path's node rows."""
    rng = np.random.default_rng(seed)
    n_ev = int(rng.integers(1, 60))
    ev_names: list[str | None] = [
        str(rng.choice(["aten::mm", "aten::add", "é::op", "", "b"])) for _ in range(n_ev)
    ]
    for k in rng.integers(0, n_ev, int(rng.integers(0, 3))):
        ev_names[int(k)] = None
    ev = pl.DataFrame(
        {"id": rng.permutation(n_ev * 2)[:n_ev] + 100, "name": ev_names},
        schema={"id": pl.Int64, "name": pl.String},
    )
    n = int(rng.integers(1, 200))
    names: list[str | None] = [
        str(rng.choice(["", "(idle)", "cudaLaunchKernel", "k", "aten::mm", "b"])) for _ in range(n)
    ]
    for k in rng.integers(0, n, int(rng.integers(0, 3))):
        names[int(k)] = None
    op_id: list[int | None] = [
        int(x) for x in rng.choice(np.concatenate((ev["id"].to_numpy(), [1, 2, 3])), n)
    ]
    for k in rng.integers(0, n, int(rng.integers(0, 5))):
        op_id[int(k)] = None
    keys = sorted({(int(rng.integers(0, 2)), int(rng.integers(0, 3))) for _ in range(3)})
    start = rng.integers(0, 1000, n)
    nodes = pl.DataFrame(
        {
            "rank": [keys[int(k)][0] for k in rng.integers(0, len(keys), n)],
            "step": rng.integers(0, 3, n),
            "id": np.where(rng.random(n) < 0.3, -1 - np.arange(n), 1000 + np.arange(n)),
            "lane_kind": rng.choice(["host", "device"], n),
            "lane": rng.integers(0, 4, n),
            "start_ns": start,
            "end_ns": start + rng.integers(0, 50, n),
            "op_id": op_id,
            "name": names,
            "is_sync": False,
            "is_wait": False,
        },
        schema=_NODE_SCHEMA,
    )
    paths = [rng.choice(n, int(rng.integers(0, n + 1)), replace=False) for _ in keys]
    return nodes, ev, keys, paths


def _tables(
    nodes: pl.DataFrame,
    ev: pl.DataFrame,
    keys: list[tuple[int, int]],
    paths: list[Any],
    rng: np.random.Generator,
    repeat: list[int],
) -> tuple[tuple[pl.DataFrame, pl.DataFrame], tuple[pl.DataFrame, pl.DataFrame]]:
    """(path, ops) both ways; ``repeat``: the steps table's rows per step (0: none, as a step
    of no ProfilerStep row gets one of its own in the analysis; here the join drops it)."""
    i64 = np.int64
    rows = np.concatenate(paths).astype(i64)
    order = np.concatenate([np.arange(len(p), dtype=i64) for p in paths])
    # times with ties, zeros and large values: the sums and shares in the last bit
    on = rng.choice([0, 1, 7, 10**9 + 7, 123_456_789], len(rows)).astype(i64)
    span = [int(x) for x in rng.choice([0, 3, 1_000_003, 2**40 + 1], len(keys))]
    step_rows = [k for k, r in enumerate(repeat) for _ in range(r)]
    steps = pl.DataFrame(
        {
            "rank": [keys[k][0] for k in step_rows],
            "step": [keys[k][1] for k in step_rows],
            "step_ns": [span[k] for k in step_rows],
        },
        schema={"rank": pl.Int32, "step": pl.Int32, "step_ns": pl.Int64},
    )
    path = cp._path_table(nodes, ev, rows, order, on)
    # the analysis' path has its steps' (rank, step) on every row
    step_of = np.repeat(np.arange(len(keys), dtype=i64), [len(p) for p in paths])
    fixed = path.with_columns(
        pl.Series("rank", [keys[k][0] for k in step_of], pl.Int32),
        pl.Series("step", [keys[k][1] for k in step_of], pl.Int32),
    )
    want_path = reference_path(nodes, ev, rows, order, on)
    got_ops = cp._ops_table(fixed, step_of, step_rows, span)
    return (path, got_ops), (want_path, reference_ops(fixed, steps))


@pytest.mark.parametrize("seed", range(60))
def test_tables_equal_the_plans(seed: int) -> None:
    nodes, ev, keys, paths = _random(seed)
    rng = np.random.default_rng(1000 + seed)
    # one steps row (the join's scalar span: a product with its reciprocal), one per step,
    # repeated rows
    for repeat in ([1] + [0] * (len(keys) - 1), [1] * len(keys), [2] + [1] * (len(keys) - 1)):
        (path, ops), (want_path, want_ops) = _tables(nodes, ev, keys, paths, rng, repeat)
        assert_frame_equal(path, want_path, check_exact=True)
        assert_frame_equal(ops, want_ops, check_exact=True)


def test_one_steps_row_share_is_the_quotient() -> None:
    # one steps row: the share is still the true quotient (not a product with the reciprocal,
    # which differs in the last bit on some rows)
    nodes, ev, keys, paths = _random(3)
    keys, paths = keys[:1], [np.arange(nodes.height)]
    rng = np.random.default_rng(0)
    (_, ops), (_, want) = _tables(nodes, ev, keys, paths, rng, [1])
    assert_frame_equal(ops, want, check_exact=True)
    on = ops.get_column("on_path_ns").to_list()
    span = ops.get_column("step_ns").to_list()
    assert ops.get_column("share").to_list() == [a / b for a, b in zip(on, span, strict=True)]


def test_idle_and_pieces_read_their_op() -> None:
    nodes = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0],
            "step": [1, 1, 1, 1],
            "id": [-1, -2, 10, 11],
            "lane_kind": ["host"] * 4,
            "lane": [1] * 4,
            "start_ns": [0, 5, 9, 12],
            "end_ns": [5, 9, 12, 20],
            "op_id": [None, 100, 100, 7],
            "name": ["(idle)", "", "cudaLaunchKernel", "k"],
            "is_sync": False,
            "is_wait": False,
        },
        schema=_NODE_SCHEMA,
    )
    ev = pl.DataFrame({"id": [100], "name": ["aten::mm"]})
    rows = np.arange(4)
    path = cp._path_table(nodes, ev, rows, rows, np.array([5, 4, 3, 8]))
    assert path.get_column("id").to_list() == [None, None, 10, 11]
    assert path.get_column("name").to_list() == ["(idle)", "aten::mm", "cudaLaunchKernel", "k"]
    assert path.get_column("op").to_list() == [IDLE_OP, "aten::mm", "aten::mm", "k"]


TRACES = [
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
]


@pytest.mark.parametrize("rel", TRACES)
def test_traces_equal_the_plans(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis' tables equal the plans' on its own path rows, with one query between them
    (the two plans were two, and an eager select a third)."""
    profile = load(shared_trace(rel), cache=False)
    seen: dict[str, Any] = {}
    real_path, real_ops = cp._path_table, cp._ops_table
    ran = count_queries(monkeypatch)
    all_plans = count_collect_all(monkeypatch)

    def path_spy(*a: Any) -> Any:
        seen["path"] = a
        before = len(ran), len(all_plans)
        out = real_path(*a)
        seen["path_queries"] = (len(ran), len(all_plans)) != before
        return out

    def ops_spy(*a: Any) -> Any:
        before = len(ran), len(all_plans)
        out = real_ops(*a)
        seen["ops_queries"] = len(ran) - before[0], len(all_plans) - before[1]
        return out

    monkeypatch.setattr(cp, "_path_table", path_spy)
    monkeypatch.setattr(cp, "_ops_table", ops_spy)
    res = cp.critical_path(profile, Options())
    nodes, ev, rows, order, on = seen["path"]
    assert nodes.get_column("name").null_count() == 0  # (no query for the null names)
    # (the path none; the ops one: the names' cast to codes)
    assert not seen["path_queries"] and seen["ops_queries"] == (1, 0)
    assert_frame_equal(res.path, reference_path(nodes, ev, rows, order, on), check_exact=True)
    assert_frame_equal(res.ops, reference_ops(res.path, res.steps), check_exact=True)
    assert res.path.height and res.ops.height
    assert graph(profile)[0].height == nodes.height


@pytest.mark.parametrize("seed", range(20))
def test_dense_unique_is_numpys(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways (the table over a dense range, the sort over a sparse one) give np.unique's."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    for x in (rng.integers(0, 50, n), rng.integers(0, 10**5, n), np.zeros(n, dtype=np.int64)):
        want_u, want_inv = np.unique(x, return_inverse=True)
        for span in (-(10**6), 10**3):  # (every range sparse; every one dense)
            monkeypatch.setattr(cpg, "DENSE_SPAN", span)
            u, inv = cpg.dense_unique(x)
            assert np.array_equal(u, want_u) and np.array_equal(inv, want_inv.reshape(-1))
            row = cpg.a_row_of_each(inv)
            assert np.array_equal(x[row], u)
