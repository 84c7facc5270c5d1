"""The edges and the per-step pass of ``critical_path`` in NumPy give exactly what the Polars plan
and the per-step loop they replaced gave (both kept below as references, since 2026-12 in the
defined orders: a lane by (start, end, id), a step's nodes by (end, start, id), a node's edges
by (kind, source), the path by the plain-Python loop of ``test_critical_path_vectorised``),
where the plan's sorts left ties in Polars' (unstable) order."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import shared_trace
from opscope import load
from opscope.analysis import critical_path as cp
from opscope.analysis import critical_path_graph as cpg
from opscope.analysis import tree
from opscope.analysis.registry import Options
from opscope.model import Profile
from test_critical_path_vectorised import reference_longest_path


def reference_edges(
    nodes: pl.DataFrame, events: pl.DataFrame, cross: pl.DataFrame | None = None
) -> pl.LazyFrame:
    """``edges`` as the Polars plan it was (kept as the reference, its sorts with the ids last),
    with each edge's ``kind``."""
    lane = (
        nodes.lazy()
        .sort("start_ns", "end_ns", "id")
        .with_columns(pl.col("id").shift(1).over("rank", "step", "lane_kind", "lane").alias("src"))
        .filter(pl.col("src").is_not_null())
        .select("src", pl.col("id").alias("dst"), pl.lit(cpg.LANE).alias("kind"))
    )
    launch = (
        events.lazy()
        .select(pl.col("launch_id").alias("src"), pl.col("id").alias("dst"))
        .filter(pl.col("src").is_not_null())
    )
    is_sync = nodes.get_column("is_sync")
    sync_edges: list[pl.DataFrame] = []
    if is_sync.any():
        syncs = nodes.filter(is_sync).sort("end_ns")
        dev = nodes.filter(pl.col("lane_kind") == "device").sort("end_ns", "start_ns", "id")
        for (rank, step), s in syncs.group_by("rank", "step") if dev.height else ():
            d = dev.filter((pl.col("rank") == rank) & (pl.col("step") == step))
            if d.height == 0:
                continue
            s_id = s.get_column("id").to_numpy()
            s_end = s.get_column("end_ns").to_numpy()
            d_lane = d.get_column("lane").to_numpy()
            d_id = d.get_column("id").to_numpy()
            d_end = d.get_column("end_ns").to_numpy()
            for ln in d.get_column("lane").unique().to_list():
                on = d_lane == ln
                j = np.searchsorted(d_end[on], s_end, side="right") - 1
                hit = j >= 0
                sync_edges.append(
                    pl.DataFrame(
                        {"src": d_id[on][j[hit]], "dst": s_id[hit], "kind": cpg.SYNC},
                        schema={"src": pl.Int64, "dst": pl.Int64, "kind": pl.Int64},
                    )
                )
    waiting = nodes.get_column("is_wait") & ~is_sync
    copy_edges = (
        launch.select(pl.col("dst").alias("src"), pl.col("src").alias("dst")).join(
            nodes.lazy().filter(waiting).select(pl.col("id").alias("dst")), on="dst", how="semi"
        )
        if waiting.any()
        else pl.LazyFrame(schema={"src": pl.Int64, "dst": pl.Int64})
    )
    parts = [
        lane,
        launch.with_columns(pl.lit(cpg.LAUNCH).alias("kind")),
        copy_edges.with_columns(pl.lit(cpg.COPY).alias("kind")),
        *(e.lazy() for e in sync_edges),
        *([] if cross is None else [cross.lazy().with_columns(pl.lit(cpg.CROSS).alias("kind"))]),
    ]
    want = pl.Schema({"src": pl.Int64, "dst": pl.Int64, "kind": pl.Int64})
    return pl.concat([p if p.collect_schema() == want else p.cast(want) for p in parts])


def reference_tables(profile: Profile) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``critical_path``'s path, ops and steps by the per-step loop of Polars queries it was
    (kept as the reference; the path by the plain-Python loop), from the same graph."""
    nodes, cross = cpg._nodes(profile), cpg.graph(profile)[1]
    step_spans = profile.steps.lazy().select("rank", "step", "dur_ns")
    paths = []
    edges = (
        reference_edges(nodes, profile.events, cross)
        .join(nodes.lazy().select(pl.col("id").alias("dst"), "rank", "step"), on="dst")
        .pipe(tree.collect)
    )
    by_step = {
        (int(k[0]), int(k[1])): df  # type: ignore[call-overload]
        for k, df in edges.partition_by("rank", "step", as_dict=True).items()
    }
    empty_edges = pl.DataFrame(schema={"src": pl.Int64, "dst": pl.Int64, "kind": pl.Int64})
    schema = {"rank": pl.Int32, "step": pl.Int32, "order": pl.Int64, "id": pl.Int64,
              "on_path_ns": pl.Int64}  # fmt: skip
    for (rank, step), group in nodes.group_by("rank", "step", maintain_order=True):
        g = group.sort("end_ns", "start_ns", "id")
        e = by_step.get((int(rank), int(step)), empty_edges)  # type: ignore[call-overload]
        p, c, _ = reference_longest_path(
            g.get_column("id").to_numpy(),
            g.get_column("start_ns").to_numpy(),
            g.get_column("end_ns").to_numpy(),
            e.get_column("src").to_numpy(),
            e.get_column("dst").to_numpy(),
            kinds=e.get_column("kind").to_numpy(),
            waits=g.get_column("is_wait").to_numpy(),
            device=(g.get_column("lane_kind") == "device").to_numpy(),
        )
        paths.append(
            pl.DataFrame(
                {
                    "rank": [rank] * len(p),
                    "step": [step] * len(p),
                    "order": list(range(len(p))),
                    "id": p,
                    "on_path_ns": c,
                },
                schema=schema,
            )
        )
    path = pl.concat(paths) if paths else pl.DataFrame(schema=schema)
    path = (
        path.join(
            nodes.select("id", "lane_kind", "lane", "start_ns", "end_ns", "name", "op", "op_id"),
            on="id",
            how="left",
        )
        .sort("rank", "step", "order")
        .with_columns(pl.when(pl.col("id") >= 0).then(pl.col("id")).alias("id"))
    )
    span = nodes.group_by("rank", "step").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span_ns")
    )
    steps = (
        path.group_by("rank", "step")
        .agg(
            pl.col("on_path_ns").sum().alias("path_ns"),
            pl.col("on_path_ns").filter(pl.col("lane_kind") == "host").sum().alias("host_ns"),
            pl.col("on_path_ns").filter(pl.col("lane_kind") == "device").sum().alias("device_ns"),
        )
        .join(span, on=["rank", "step"], how="left")
        .join(step_spans.collect(), on=["rank", "step"], how="left")
        .with_columns(pl.col("span_ns").alias("step_ns"), pl.col("dur_ns").alias("host_step_ns"))
        .drop("dur_ns", "span_ns")
        .sort("rank", "step")
    )
    ops = (
        path.group_by("rank", "step", "op")
        .agg(pl.col("on_path_ns").sum(), pl.len().alias("nodes"))
        .join(steps.select("rank", "step", "step_ns"), on=["rank", "step"])
        .sort(["rank", "step", "on_path_ns", "op"], descending=[False, False, True, False])
    )
    # share: the true quotient (Polars divides by a one-value column as a product with its
    # reciprocal, a last-bit difference on a profile of one step)
    on = ops.get_column("on_path_ns").to_numpy().astype(np.float64)
    span_of = ops.get_column("step_ns").to_numpy().astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ops = ops.with_columns(pl.Series("share", on / span_of, dtype=pl.Float64))
    return path, ops, steps


def _random_nodes(seed: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Nodes on a few lanes of a few steps with many equal (start, end) pairs, launches, syncs,
    blocking copies and cross-thread edges."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    host = rng.random(n) < 0.5
    start = rng.integers(0, 40, n)
    ids = rng.permutation(n).astype(np.int64) - int(rng.integers(0, n // 3 + 1))
    wait = host & (rng.random(n) < 0.3)
    nodes = pl.DataFrame(
        {
            "rank": rng.integers(0, 2, n),
            "step": rng.integers(0, 3, n),
            "id": ids,
            "lane_kind": np.where(host, "host", "device"),
            "lane": np.where(host, rng.integers(0, 3, n), rng.integers(0, 4, n)),
            "start_ns": start,
            "end_ns": start + rng.integers(0, 4, n),
            "op_id": np.zeros(n, dtype=np.int64),
            "name": ["x"] * n,
            "is_sync": wait & (rng.random(n) < 0.5),
            "is_wait": wait,
        },
        schema=cpg._NODE_SCHEMA,
    )
    m = int(rng.integers(0, n + 1))
    events = pl.DataFrame(
        {
            "id": rng.choice(np.concatenate((ids, [10_000, 10_001])), m),
            "launch_id": [None if rng.random() < 0.3 else int(x) for x in rng.choice(ids, m)],
        },
        schema={"id": pl.Int64, "launch_id": pl.Int64},
    )
    k = int(rng.integers(0, n + 1))
    cross = pl.DataFrame(
        {"src": rng.choice(ids, k), "dst": rng.choice(ids, k)},
        schema={"src": pl.Int64, "dst": pl.Int64},
    )
    return nodes, events, cross


def _edges(nodes: pl.DataFrame, events: pl.DataFrame, cross: pl.DataFrame | None) -> list[Any]:
    """``edges``' (src, dst, kind) rows, sorted (their order within a kind has no meaning)."""
    src, dst, kind = cpg.edges(nodes, events, cross)
    return sorted(zip(src.tolist(), dst.tolist(), kind.tolist(), strict=True))


@pytest.mark.parametrize("seed", range(60))
def test_same_edges_of_the_same_kinds_as_the_plan(seed: int) -> None:
    """The same edges of the same kinds (the kinds and the sources decide ties), whatever the
    order of the nodes' rows."""
    nodes, events, cross = _random_nodes(seed)
    for c in (cross, None):
        want = sorted(reference_edges(nodes, events, c).collect().rows())
        assert _edges(nodes, events, c) == want
        shuffled = nodes.sample(fraction=1.0, shuffle=True, seed=seed)
        assert _edges(shuffled, events, c) == want


@pytest.mark.filterwarnings("ignore:Comparisons with None")  # the plan's, meant
@pytest.mark.parametrize("seed", range(30))
def test_same_edges_with_null_ranks_and_steps(seed: int) -> None:
    """A node of a null rank or step: its own lane group, and a sync of one has no device node
    to wait on (the plan's equality with a null matches none), as in the plan."""
    nodes, events, cross = _random_nodes(seed)
    rng = np.random.default_rng(1000 + seed)
    nodes = nodes.with_columns(
        pl.when(pl.lit(rng.random(nodes.height) < 0.2)).then(None).otherwise(pl.col(c)).alias(c)
        for c in ("rank", "step")
    )
    assert _edges(nodes, events, cross) == sorted(
        reference_edges(nodes, events, cross).collect().rows()
    )


_TRACES = [
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "gpu/hta_triton_a100.json.gz",
    "gpu/hta_nccl_a100_rank0of2.json.gz",
    "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
    "ascend/small_two_rank/test_rank_0",
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
]


@pytest.mark.parametrize("rel", _TRACES)
def test_same_tables_as_the_per_step_loop(rel: str) -> None:
    """On real traces (ties in end and start on every step of the 75k-event one): the path, its
    operators and its steps equal the per-step loop's, dtypes included."""
    profile = load(shared_trace(rel), cache=False)
    got = cp.critical_path(profile, Options())
    for g, w in zip((got.path, got.ops, got.steps), reference_tables(profile), strict=True):
        assert g.schema == w.schema
        assert g.equals(w)


def test_no_polars_sort_decides_an_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spy on the frames' sorts: the critical path sorts nothing in Polars (every order is
    NumPy's, of stated keys ending in the ids: no engine's order of ties)."""
    profile = load(shared_trace("multi_rank/hta_sampled_128rank_job/rank-1.json.gz"), cache=False)
    seen: list[Any] = []
    for cls in (pl.LazyFrame, pl.DataFrame):
        real = cls.sort

        def spy(self: Any, *a: Any, _real: Any = real, **kw: Any) -> Any:
            seen.append(a)
            return _real(self, *a, **kw)

        monkeypatch.setattr(cls, "sort", spy)
    cp.critical_path(profile, Options())
    assert seen == []
    assert pl.DataFrame({"a": [2, 1]}).sort("a").height == 2 and seen  # (the spy sees a sort)


def test_steps_take_the_step_ranges_as_a_left_join() -> None:
    """A step range repeated, one missing and one of a null step: the steps table is the
    reference's left join (a repeated range repeats the row, a missing one is null)."""
    profile = load(shared_trace("multi_rank/hta_sampled_128rank_job/rank-1.json.gz"), cache=False)
    steps = profile.steps
    odd = pl.concat([steps, steps.head(1), steps.head(1).with_columns(pl.lit(None).alias("step"))])
    for table in (odd, steps.tail(1), steps.clear()):
        p = profile.with_tables(steps=table)
        got = cp.critical_path(p, Options()).steps
        want = reference_tables(p)[2]
        assert got.schema == want.schema
        assert got.equals(want)


@pytest.mark.parametrize("keep", ["none", "cpu_op"])
def test_same_tables_without_events_or_device_work(keep: str) -> None:
    """No event at all (empty tables of the same dtypes) and operators only."""
    profile = load(shared_trace("gpu/hta_triton_a100.json.gz"), cache=False)
    ev = profile.events
    p = profile.with_tables(
        events=ev.clear() if keep == "none" else ev.filter(pl.col("kind") == keep)
    )
    got = cp.critical_path(p, Options())
    for g, w in zip((got.path, got.ops, got.steps), reference_tables(p), strict=True):
        assert g.schema == w.schema
        assert g.equals(w)


@pytest.mark.parametrize(
    "rel", ["gpu/hta_triton_a100.json.gz", "multi_rank/hta_sampled_128rank_job/rank-1.json.gz"]
)
def test_same_tables_with_the_shortcuts_off(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcuts on empty inputs change no table."""
    got = cp.critical_path(load(shared_trace(rel), cache=False), Options())
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    want = cp.critical_path(load(shared_trace(rel), cache=False), Options())
    for g, w in zip((got.path, got.ops, got.steps), (want.path, want.ops, want.steps), strict=True):
        assert g.schema == w.schema
        assert g.equals(w)


def test_call_names_equal_the_patterns_in_polars() -> None:
    """The sync and copy call names found in Python equal Polars' ``str.contains`` of the same
    patterns on the names (null read as ""), on names built to differ between the engines if
    they could: a trailing newline (Python's ``$`` matches before one), non-ASCII word
    characters after the name (``\\w``), prefixes, near misses."""
    base = [
        "cudaStreamSynchronize", "cudaDeviceSynchronize", "hipEventSynchronize",
        "AscendCL@aclrtSynchronizeStreamWithTimeout", "aclrtSynchronizeDevice",
        "cudaMemcpy", "cudaMemcpyAsync", "hipMemcpyWithStream", "AscendCL@aclrtMemcpy",
        "cudaStreamWaitEvent", "cudaLaunchKernel", "xcudaMemcpy", "@cudaMemcpy", "",
    ]  # fmt: skip
    names = [
        *base,
        *(n + "\n" for n in base),
        *(n + "é" for n in base),
        *(n + "\u0301" for n in base),
    ]
    names += [*(n + "_2" for n in base), *("a@" + n for n in base), None]
    got = cpg.call_names(pl.Series(names, dtype=pl.String))
    s = pl.Series(names, dtype=pl.String).fill_null("")
    for found, pattern in zip(got, (cpg.SYNC_PATTERN, cpg.COPY_CALL), strict=True):
        want = set(pl.Series(names, dtype=pl.String).filter(s.str.contains(pattern)).to_list())
        assert set(found.to_list()) == want
        assert want  # the patterns do find names here


def _reference_lane_pairs(nodes: pl.DataFrame) -> set[tuple[int, int]]:
    """(predecessor, node) ids of consecutive nodes of each lane by (start, end, id), in plain
    Python (a null start or end first)."""
    lanes: dict[Any, list[tuple[Any, ...]]] = {}
    for r in nodes.iter_rows(named=True):
        key = (r["rank"], r["step"], r["lane"], r["lane_kind"] == "device")
        s, e = r["start_ns"], r["end_ns"]
        lanes.setdefault(key, []).append((s is not None, s or 0, e is not None, e or 0, r["id"]))
    return {(a[-1], b[-1]) for rows in lanes.values() for a, b in itertools.pairwise(sorted(rows))}


@pytest.mark.parametrize("seed", range(40))
def test_lane_pairs_are_the_lanes_orders(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each node's lane predecessor by (start, end, id): times drawn wide (few ties) or narrow
    (many equal starts and ends in a lane), some null; the same pairs whatever the rows'
    order, with no query."""
    from helpers.spies import count_queries

    rng = np.random.default_rng(seed)
    nodes, _, _ = _random_nodes(seed)
    n = nodes.height
    wide = bool(seed % 2)
    start = rng.permutation(n * 10)[:n] if wide else rng.integers(0, 40, n)
    end = start + (0 if wide else rng.integers(0, 4, n))
    nodes = nodes.with_columns(
        pl.Series("start_ns", start, dtype=pl.Int64),
        pl.Series("end_ns", end, dtype=pl.Int64),
    )
    if seed % 4 == 0:  # some null times
        nodes = nodes.with_columns(
            pl.when(pl.lit(rng.random(n) < 0.1)).then(None).otherwise(pl.col(c)).alias(c)
            for c in ("start_ns", "end_ns")
        )
    want = _reference_lane_pairs(nodes)
    for df in (nodes, nodes.sample(fraction=1.0, shuffle=True, seed=seed)):
        lanes = [df[c].to_numpy().astype(np.int64) for c in ("rank", "step", "lane")]
        lanes.append((df["lane_kind"] == "device").to_numpy())
        ids = df["id"].to_numpy()
        ran = count_queries(monkeypatch)
        src, dst = cpg._lane_pairs(df, lanes)
        assert ran == []
        assert set(zip(ids[src].tolist(), ids[dst].tolist(), strict=True)) == want
        assert len(src) == len(want)  # (no pair twice)


def test_rank0_lanes_take_no_sort_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """hta_sampled rank-0: 384 ties of (start, end) across lanes, none in a lane: the lane
    edges without the Polars sort of its 3.8k nodes; the path tables equal the shortcuts off."""
    from helpers.spies import count_queries

    path = shared_trace("multi_rank/hta_sampled_128rank_job/rank-0.json.gz")
    profile = load(path, cache=False)
    nodes, cross, _ = cpg.graph(profile)
    ran = count_queries(monkeypatch)
    cpg.edges(nodes, profile.events, cross)
    assert ran == []
    got = cp.critical_path(profile, Options())
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    want = cp.critical_path(load(path, cache=False), Options())
    for g, w in zip((got.path, got.ops, got.steps), (want.path, want.ops, want.steps), strict=True):
        assert g.schema == w.schema
        assert g.equals(w)
