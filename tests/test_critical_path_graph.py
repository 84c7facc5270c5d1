"""The graph's top-level operator nodes (threads without runtime calls) and each node's
operator name, found on arrays, equal the anti join, parent join and name join they replaced
(kept below as the reference) on real traces, a CPU-only one among them, and on random events."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import shared_trace
from opscope import load
from opscope.analysis import critical_path as cp
from opscope.analysis import critical_path_graph as cpg
from opscope.analysis import tree
from opscope.model import Profile
from test_critical_path_vectorised import _random_events


def reference_top_nodes(ev: pl.DataFrame) -> pl.DataFrame:
    """The top-level operators of threads without runtime calls, by the joins they were."""
    lazy = ev.lazy()
    runtime = lazy.filter(pl.col("kind").is_in(["runtime", "driver"]))
    threads_rt = runtime.select("rank", "pid", "tid").unique()
    ops = lazy.filter(pl.col("kind") == "cpu_op").join(
        threads_rt, on=["rank", "pid", "tid"], how="anti", nulls_equal=True
    )
    parent_kind = lazy.select(pl.col("id").alias("parent_id"), pl.col("kind").alias("pk"))
    top = ops.join(parent_kind, on="parent_id", how="left").filter(
        pl.col("pk").is_null() | (pl.col("pk") != "cpu_op")
    )
    return top.select(
        "rank", "step", "id", pl.lit("host").alias("lane_kind"), pl.col("tid").alias("lane"),
        pl.col("ts_ns").alias("start_ns"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), pl.col("id").alias("op_id"),
        "name", pl.lit(False).alias("is_sync"), pl.lit(False).alias("is_wait"),
    ).pipe(tree.collect)  # fmt: skip


def reference_nodes(profile: Profile) -> pl.DataFrame:
    """``_nodes`` with the top-level operators and the operator names by joins."""
    ev = profile.events.select(
        "rank", "pid", "tid", pl.col("step").fill_null(-1), "id", "parent_id", "kind", "name",
        "ts_ns", "dur_ns", "op_id", "launch_id", "device", "stream",
    )  # fmt: skip
    lazy = ev.lazy()
    names = lazy.select(pl.col("id").alias("op_id"), pl.col("name").alias("op"))
    host, _ = cpg._cross_thread_waits(cpg._host_nodes(ev, profile.steps), ev)
    top = reference_top_nodes(ev)
    dev = lazy.filter(pl.col("kind").is_in(list(cpg._DEVICE_KINDS))).select(
        "rank", "step", "id", pl.lit("device").alias("lane_kind"),
        (pl.col("device").fill_null(0).cast(pl.Int64) * 1_000_000
         + pl.coalesce("stream", "tid", pl.lit(-1, dtype=pl.Int64))).alias("lane"),
        pl.col("ts_ns").alias("start_ns"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
        "op_id", "name", pl.lit(False).alias("is_sync"), pl.lit(False).alias("is_wait"),
    )  # fmt: skip
    nodes = (
        pl.concat([host.lazy(), top.lazy(), dev], how="vertical_relaxed")
        .join(names, on="op_id", how="left")
        .with_columns(
            pl.when(pl.col("name") == "(idle)")
            .then(pl.lit(cp.IDLE_OP))
            .otherwise(pl.coalesce("op", "name"))
            .alias("op"),
            pl.when(pl.col("name") == "").then(pl.col("op")).otherwise("name").alias("name"),
        )
        .pipe(tree.collect)
    )
    return cpg._split_earlier_waits(nodes, ev)


_CPU_ONLY = Path("/work/corpus/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")


@pytest.mark.parametrize(
    "rel",
    [
        "gpu/hta_alexnet_a100_cuda_sync.json.gz",
        "gpu/hta_triton_a100.json.gz",
        "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
        "ascend/small_two_rank/test_rank_0",
        "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
        "cpu-only",
    ],
)
def test_same_nodes_as_the_joins(rel: str) -> None:
    if rel == "cpu-only":
        if not _CPU_ONLY.exists():
            pytest.skip("CPU-only corpus trace not found")
        profile = load(_CPU_ONLY, cache=False)
    else:
        profile = load(shared_trace(rel), cache=False)
    got = cpg._nodes(profile)
    want = reference_nodes(profile)
    assert got.schema == want.schema
    assert got.equals(want)


@pytest.mark.parametrize("seed", range(100))
def test_same_top_nodes_as_the_joins_on_random_events(seed: int) -> None:
    """Random threads of calls and slices, plus threads of operators only (one of null tid),
    nested under operators, under other events or under unknown parents."""
    ev, _ = _random_events(random.Random(seed))
    rng = np.random.default_rng(seed)
    k = int(rng.integers(0, 30))
    ids = np.arange(20_000, 20_000 + k)
    parent = [
        None if x < 0.3 else int(rng.choice(ev.get_column("id").to_numpy())) if x < 0.6
        else int(rng.choice(ids)) if x < 0.9 else 99_999
        for x in rng.random(k)
    ]  # fmt: skip
    other = pl.DataFrame(
        {"id": ids, "rank": [0] * k, "pid": [1] * k,
         "tid": [None if t == 0 else int(t) for t in rng.integers(0, 3, k)],
         "kind": rng.choice(["cpu_op", "cpu_op", "python_function"], k).tolist(),
         "ts_ns": rng.integers(0, 200, k), "dur_ns": rng.integers(0, 30, k),
         "step": rng.integers(-1, 2, k), "op_id": [None] * k, "name": [f"o{i}" for i in ids],
         "launch_id": [None] * k},
        schema=ev.schema,
    )  # fmt: skip
    ev = pl.concat(
        [
            ev.with_columns(pl.lit(None, pl.Int64).alias("parent_id")),
            other.with_columns(pl.Series("parent_id", parent, dtype=pl.Int64)),
        ]
    )
    got = cpg._top_op_nodes(ev)
    got = got.collect() if isinstance(got, pl.LazyFrame) else got
    want = reference_top_nodes(ev)
    assert got.schema == want.schema
    assert got.equals(want)


@pytest.mark.parametrize("dtype", [pl.Int16, pl.Int32, pl.Int64, pl.UInt32, pl.UInt64])
@pytest.mark.parametrize("seed", range(10))
def test_int_column_is_fill_null_and_is_null(dtype: pl.DataType, seed: int) -> None:
    """The float copy read for a column with nulls gives its exact values (else the queries)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 50))
    top = {pl.Int16: 2**15, pl.Int32: 2**31, pl.UInt32: 2**32}.get(dtype, 2**62)
    values = [
        None if rng.random() < 0.3 else int(rng.integers(0, top)) * (1 if rng.random() < 0.5 or
        dtype in (pl.UInt32, pl.UInt64) else -1) // (1 if seed % 2 else 2**40 if top > 2**41 else 1)
        for _ in range(n)
    ]  # fmt: skip
    df = pl.DataFrame({"x": values}, schema={"x": dtype})
    got, null = cpg._int_column(df, "x")
    assert got.tolist() == df.get_column("x").fill_null(0).cast(pl.Int64).to_list()
    want_null = df.get_column("x").is_null().to_list()
    assert (null is None and not any(want_null)) or (
        null is not None and null.tolist() == want_null
    )


def reference_device_nodes(ev: pl.DataFrame) -> pl.DataFrame:
    """The device nodes as the plan of graph() was (verbatim)."""
    return (
        ev.lazy()
        .filter(pl.col("kind").is_in(list(cpg._DEVICE_KINDS)))
        .select(
            "rank", "step", "id", pl.lit("device").alias("lane_kind"),
            (pl.col("device").fill_null(0).cast(pl.Int64) * 1_000_000
             + pl.coalesce("stream", "tid", pl.lit(-1, dtype=pl.Int64))).alias("lane"),
            pl.col("ts_ns").alias("start_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
            "op_id", "name", pl.lit(False).alias("is_sync"), pl.lit(False).alias("is_wait"),
        )
        .pipe(tree.collect)
    )  # fmt: skip


def _random_kinds_events(seed: int) -> pl.DataFrame:
    from opscope.model.schema import EventKind

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))

    def nulls(x: Any, p: float = 0.2) -> list[Any]:
        return [None if rng.random() < p else v for v in np.asarray(x).tolist()]

    kinds = EventKind.categories.to_list()
    return pl.DataFrame(
        {
            "rank": pl.Series(rng.integers(0, 2, n), dtype=pl.Int32),
            "pid": rng.integers(0, 3, n),
            "tid": nulls(rng.integers(0, 9, n)),
            "step": pl.Series(rng.integers(-1, 3, n), dtype=pl.Int32),
            "id": rng.permutation(n),
            "parent_id": [None] * n,
            "kind": pl.Series(nulls(rng.choice(kinds, n), 0.05), dtype=EventKind),
            "name": nulls([f"k{i}" for i in rng.integers(0, 5, n)], 0.05),
            "ts_ns": nulls(rng.integers(0, 10**6, n), 0.05),
            "dur_ns": nulls(rng.integers(0, 10**3, n), 0.05),
            "op_id": nulls(rng.integers(0, max(n, 1), n)),
            "launch_id": nulls(rng.integers(0, max(n, 1), n)),
            "device": pl.Series(nulls(rng.integers(0, 3, n)), dtype=pl.Int32),
            "stream": nulls(rng.integers(0, 20, n)),
        },
        schema_overrides={
            **dict.fromkeys(("pid", "tid", "id", "parent_id", "ts_ns", "dur_ns"), pl.Int64),
            **dict.fromkeys(("op_id", "launch_id", "stream"), pl.Int64),
            "name": pl.String,
        },
    )


@pytest.mark.parametrize("seed", range(40))
def test_device_nodes_and_kinds_equal_the_plans(seed: int) -> None:
    """The device nodes by one gather and NumPy lanes equal the plan's (null devices, streams,
    threads, times and kinds); the kinds' masks from the Enum's codes equal is_in on the kind,
    and those by comparisons on a String column."""
    ev = _random_kinds_events(seed)
    kinds = cpg._Kinds.of(ev.get_column("kind"))
    got = cpg._device_nodes(ev, kinds)
    want = reference_device_nodes(ev)
    assert got.schema == want.schema
    assert got.equals(want)
    as_text = cpg._Kinds.of(ev.get_column("kind").cast(pl.String))
    for mask, group in (
        (kinds.call, ["runtime", "driver"]),
        (kinds.device, list(cpg._DEVICE_KINDS)),
        (kinds.tracked, list(cpg._TRACKED)),
        (kinds.op, ["cpu_op"]),
    ):
        want_mask = ev.get_column("kind").is_in(group).fill_null(False).to_numpy()
        assert np.array_equal(mask, want_mask)
        assert np.array_equal(getattr(as_text, _field(kinds, mask)), want_mask)


def _field(kinds: Any, mask: np.ndarray) -> str:
    return next(f for f in ("call", "device", "tracked", "op") if getattr(kinds, f) is mask)


def test_graph_reads_no_query_but_the_kinds_and_the_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a trace of calls, kernels and threads without calls: the graph's queries are the
    kinds' codes, the calls' names' codes and the operators' filter (``tree.no_ops``), never
    the columns' select, the calls' filters, the nodes' concat (six queries before) nor a sort
    (the orders are NumPy's, of stated keys: two calls of two plans before)."""
    from helpers.spies import count_collect_all, count_queries

    profile = load(shared_trace("multi_rank/hta_sampled_128rank_job/rank-0.json.gz"), cache=False)
    ran = count_queries(monkeypatch)
    plans = count_collect_all(monkeypatch)
    nodes, _, _ = cpg.graph(profile)
    assert nodes.height > 0
    assert len(ran) == 3 and plans == []
