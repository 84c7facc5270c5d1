"""``longest_path``'s pass over nodes and edges runs in the compiled kernel
(:mod:`opscope.analysis._critical_path_kernels`): a spy shows the kernel is taken, and its answer
is the per-node Python loop's (``reference_longest_path``, kept in
``test_critical_path_vectorised``) on random graphs and on the tie that once read memory never
written: an edge between nodes of equal end time from a node later in the order (read as 0,
then closed over with the rest of its group)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import polars as pl
import pytest

from opscope.analysis import _critical_path_kernels as kernels
from opscope.analysis import critical_path_graph as cpg
from opscope.analysis.critical_path import longest_path
from test_critical_path_vectorised import reference_longest_path


def _random_graph(seed: int) -> tuple[tuple[np.ndarray, ...], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    end = np.sort(rng.integers(0, 200, n))  # many equal ends: ties in the order
    start = end - rng.integers(0, 40, n)
    ids = rng.permutation(np.arange(1, n + 1)) * rng.choice([1, -1], n)
    m = int(rng.integers(0, 4 * n))
    src = rng.choice(np.concatenate((ids, [10_000])), m)
    dst = rng.choice(ids, m)
    kw = {"waits": rng.random(n) < 0.3, "device": rng.random(n) < 0.5}
    return (ids, start, end, src, dst), kw


def test_the_kernel_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = kernels.longest

    def spy(*args: Any) -> Any:
        calls.append(len(args[0]))
        return real(*args)

    monkeypatch.setattr(kernels, "longest", spy)
    args, kw = _random_graph(7)
    assert longest_path(*args, **kw) == reference_longest_path(*args, **kw)
    assert calls == [len(args[0])]


@pytest.mark.parametrize("seed", range(100))
def test_same_answer_as_the_loop(seed: int) -> None:
    args, kw = _random_graph(1000 + seed)
    for k in ({}, kw):
        got = longest_path(*args, **k)
        assert got == reference_longest_path(*args, **k)
        # Python ints, as the loop returned
        assert all(type(x) is int for x in [*got[0], *got[1], got[2]])


def test_an_edge_from_a_later_node_of_equal_end_is_closed_over() -> None:
    """Nodes 10 (position 0) and 20 (position 1) both end at 5; the edge 20 -> 10 is relaxed
    before 20 is reached, with 20's best length still 0 (never garbage). Once the group of end
    5 is relaxed its lengths are closed over its edges: 10 gets 20's 5 (the edge adds nothing
    of its own), so the path is 20 then 10, of length 5. Before 2026-12-05 it stopped at 10's
    own 2 and the path was 20 alone: here the same length, but a node after 10 lost 20's."""
    ids = np.array([10, 20])
    start = np.array([3, 0])
    end = np.array([5, 5])
    src, dst = np.array([20]), np.array([10])
    want = reference_longest_path(ids, start, end, src, dst)
    assert want == ([20, 10], [5, 0], 5)
    assert longest_path(ids, start, end, src, dst) == want
    # and a node after 10 (id 30, 5-6) now gets 20's length through it: 5 + 1
    ids, start, end = np.array([10, 20, 30]), np.array([3, 0, 5]), np.array([5, 5, 6])
    src, dst = np.array([20, 10]), np.array([10, 30])
    want = reference_longest_path(ids, start, end, src, dst)
    assert want == ([20, 10, 30], [5, 0, 1], 6)
    assert longest_path(ids, start, end, src, dst) == want


def test_the_compiled_kernel_equals_its_python_source() -> None:
    for seed in range(20):
        (ids, start, end, _, _), _ = _random_graph(seed)
        n = len(ids)
        own = (end - start).astype(np.int64)
        rng = np.random.default_rng(seed)
        # edges from earlier positions only (a later one could close a cycle of ``via``)
        kd = np.sort(rng.integers(0, n, 3 * n))
        ks = (rng.random(3 * n) * kd).astype(np.int64)
        ks, kd = ks[ks < kd], kd[ks < kd]
        gains = rng.integers(0, 50, len(kd)).astype(np.int64)
        bounds = np.searchsorted(kd, np.arange(n + 1)).astype(np.int64)
        none = np.empty(0, np.int64)
        a = kernels.longest(own, gains, ks, bounds, none, none, none, none)
        b = kernels.longest.py_func(own, gains, ks, bounds, none, none, none, none)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
        assert int(a[2]) == int(b[2])


@pytest.mark.parametrize("seed", range(60))
def test_positions_by_table_equal_the_binary_search(seed: int) -> None:
    """The id table (dense ids) gives the binary search's positions: first of a repeated id,
    -1 for an absent one or one outside the ids' range; sparse or repeated ids take the search."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    spread = int(rng.choice([2, 10, 100_000]))  # dense, dense, sparse
    ids = rng.integers(-spread * n // 2, spread * n // 2 + 1, n)
    if seed % 3 == 0:
        ids = rng.permutation(np.unique(ids))  # no repeat
    x = rng.integers(-spread * n, spread * n + 1, int(rng.integers(0, 3 * n)))
    x = np.concatenate((x, rng.choice(ids, 5)))
    assert cpg.positions(ids, x).tolist() == cpg._positions_sorted(ids, x).tolist()


def test_positions_take_the_table_when_ids_are_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    searched: list[int] = []
    real = cpg._positions_sorted

    def spy(ids: np.ndarray, x: np.ndarray) -> np.ndarray:
        searched.append(len(x))
        return real(ids, x)

    monkeypatch.setattr(cpg, "_positions_sorted", spy)
    ids = np.array([5, -3, 0, 7, 2])
    x = np.array([7, 8, -3, -4, 100, 5, 2])
    assert cpg.positions(ids, x).tolist() == [3, -1, 1, -1, -1, 0, 4]
    assert searched == []  # dense and unique: the table
    assert cpg.positions(np.array([5, 5, 1]), np.array([5, 1])).tolist() == [0, 2]
    assert searched == [2]  # a repeated id: the search
    assert cpg.positions(np.array([0, 10**9]), np.array([10**9])).tolist() == [1]
    assert searched == [2, 1]  # sparse: the search


def _reference_sync_edges(nodes: pl.DataFrame) -> list[tuple[int, int]]:
    """The sync edges by their definition, in plain Python: each sync, per stream of its rank
    and step, waits on the last device node by (end, start, id) ending at or before it."""
    rows = nodes.rows(named=True)
    out: list[tuple[int, int]] = []
    for s in (r for r in rows if r["is_sync"]):
        lanes: dict[Any, tuple[int, int, int]] = {}
        for d in rows:
            if (
                d["lane_kind"] == "device"
                and (d["rank"], d["step"]) == (s["rank"], s["step"])
                and d["end_ns"] <= s["end_ns"]
            ):
                key = (d["end_ns"], d["start_ns"], d["id"])
                lanes[d["lane"]] = max(lanes.get(d["lane"], key), key)
        out += [(k[2], s["id"]) for k in lanes.values()]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_sync_edges_are_the_last_node_of_each_stream(seed: int) -> None:
    """Random steps of host syncs and device nodes on a few streams, many equal end and start
    times (the last of the tied nodes by id): the same (src, dst) edges as the definition."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    host = rng.random(n) < 0.4
    nodes = pl.DataFrame(
        {
            "rank": rng.integers(0, 2, n),
            "step": rng.integers(0, 3, n),
            "id": rng.permutation(n),
            "lane_kind": np.where(host, "host", "device"),
            "lane": np.where(host, 1, rng.integers(0, 4, n)),
            "start_ns": rng.integers(0, 3, n),
            "end_ns": rng.integers(3, 30, n),
            "op_id": np.zeros(n, dtype=np.int64),
            "name": ["x"] * n,
            "is_sync": host & (rng.random(n) < 0.6),
            "is_wait": np.zeros(n, dtype=bool),
        },
        schema=cpg._NODE_SCHEMA,
    )
    events = pl.DataFrame(
        {"id": np.arange(n), "launch_id": [None] * n},
        schema={"id": pl.Int64, "launch_id": pl.Int64},
    )
    src, dst, kind = cpg.edges(nodes, events)
    sync = kind == cpg.SYNC
    got = sorted(zip(src[sync].tolist(), dst[sync].tolist(), strict=True))
    assert got == sorted(_reference_sync_edges(nodes))
    # the order of the nodes' rows changes nothing
    src, dst, kind = cpg.edges(nodes.sample(fraction=1.0, shuffle=True, seed=seed), events)
    sync = kind == cpg.SYNC
    assert sorted(zip(src[sync].tolist(), dst[sync].tolist(), strict=True)) == got


def reference_split_earlier_waits(nodes: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """``_split_earlier_waits`` with a filter per (step, stream) (kept as the reference)."""
    waits = nodes.filter(pl.col("is_wait") & (pl.col("lane_kind") == "host"))
    if waits.height == 0:  # no waiting call (no runtime call at all)
        return nodes
    dev = nodes.filter(pl.col("lane_kind") == "device").select("rank", "step", "lane", "end_ns")
    # the stream a blocking copy waits on: its copy's, last by (end, id)
    copy_lane = (
        ev.filter(pl.col("launch_id").is_not_null())
        .select("id", "launch_id")
        .join(nodes.filter(pl.col("lane_kind") == "device"), on="id")
        .sort("end_ns", "id")
        .group_by("launch_id")
        .agg(pl.col("lane").last().alias("wlane"))
    )
    sync = (
        waits.join(copy_lane, left_on="id", right_on="launch_id", how="left")
        # a sync waits on every stream (null); a blocking copy with no copy in the graph: none
        .with_columns(pl.when(pl.col("is_sync")).then(None).otherwise("wlane").alias("wlane"))
        .filter(pl.col("is_sync") | pl.col("wlane").is_not_null())
    )
    if sync.height == 0 or dev.height == 0:
        return nodes
    i64 = np.int64
    cut_id: list[np.ndarray] = []
    cut_at: list[np.ndarray] = []
    dev_by_rank = {
        int(k[0]): g  # type: ignore[call-overload]
        for k, g in dev.partition_by("rank", as_dict=True).items()
    }
    for key, s in sync.partition_by("rank", "step", "wlane", as_dict=True).items():
        d = dev_by_rank.get(int(key[0]))  # type: ignore[call-overload]
        if d is None:
            continue
        d = d.filter(pl.col("step") != key[1])
        if key[2] is not None:
            d = d.filter(pl.col("lane") == key[2])
        end = np.sort(d.get_column("end_ns").to_numpy())
        a = s.get_column("start_ns").to_numpy().astype(i64)
        b = s.get_column("end_ns").to_numpy().astype(i64)
        k = np.searchsorted(end, b, side="right") - 1
        prev = np.where(k >= 0, end[np.maximum(k, 0)] if len(end) else a, a)
        hit = prev > a
        cut_id.append(s.get_column("id").to_numpy()[hit])
        cut_at.append(prev[hit])
    if not cut_id or not sum(len(c) for c in cut_id):
        return nodes
    cuts = pl.DataFrame(
        {"id": np.concatenate(cut_id), "_cut": np.concatenate(cut_at)},
        schema={"id": pl.Int64, "_cut": pl.Int64},
    )
    first_id = min(int(nodes.get_column("id").min() or 0), 0) - 1  # type: ignore[arg-type]
    before = (
        nodes.join(cuts, on="id", how="inner", maintain_order="left")
        .with_columns(
            (first_id - pl.int_range(pl.len())).cast(pl.Int64).alias("id"),
            pl.col("_cut").alias("end_ns"),
            pl.lit(False).alias("is_sync"),
            pl.lit(False).alias("is_wait"),
        )
        .drop("_cut")
    )
    after = (
        nodes.join(cuts, on="id", how="left")
        .with_columns(pl.coalesce("_cut", "start_ns").alias("start_ns"))
        .drop("_cut")
    )
    return pl.concat([after, before])


# (the reference's filter on a null step warns: that null case is what it checks)
@pytest.mark.filterwarnings("ignore:Comparisons with None")
@pytest.mark.parametrize("seed", range(40))
def test_split_earlier_waits_equal_the_filters(seed: int) -> None:
    """Random waits (syncs, blocking copies with a copy or none) and device nodes of several
    steps, streams and ranks, some steps null: the same split nodes as the filters made."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 100))
    host = rng.random(n) < 0.4
    step = pl.Series(rng.integers(0, 3, n), dtype=pl.Int32)
    if seed % 2:
        step = step.scatter(np.flatnonzero(rng.random(n) < 0.15), None)
    start = rng.integers(0, 50, n)
    is_wait = host & (rng.random(n) < 0.7)
    nodes = pl.DataFrame(
        {
            "rank": rng.integers(0, 2, n),
            "step": step,
            "id": rng.permutation(n),
            "lane_kind": np.where(host, "host", "device"),
            "lane": np.where(host, 1, rng.integers(0, 3, n)),
            "start_ns": start,
            "end_ns": start + rng.integers(0, 40, n),
            "op_id": np.zeros(n, dtype=np.int64),
            "name": ["x"] * n,
            "is_sync": is_wait & (rng.random(n) < 0.5),
            "is_wait": is_wait,
        },
        schema=cpg._NODE_SCHEMA,
    )
    # device nodes launched by random host nodes (a blocking copy waits on its copy's stream)
    ids = nodes.get_column("id").to_numpy()
    host_ids = ids[host]
    launch = [
        int(rng.choice(host_ids)) if not h and len(host_ids) and rng.random() < 0.6 else None
        for h in host
    ]
    events = pl.DataFrame(
        {"id": ids, "launch_id": launch}, schema={"id": pl.Int64, "launch_id": pl.Int64}
    )
    got = cpg._split_earlier_waits(nodes, events)
    assert got.equals(reference_split_earlier_waits(nodes, events))


def reference_rank_coverage(ev: pl.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``_rank_coverage`` by window and group_by queries (kept as the reference)."""
    tr = (
        ev.filter(pl.col("kind").is_in(list(cpg._TRACKED)) & (pl.col("dur_ns") > 0))
        .select("rank", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("e"))
        .sort("rank", "ts_ns")
    )
    seg = (
        tr.with_columns(pl.col("e").cum_max().shift(1).over("rank").alias("reach"))
        .with_columns(
            (pl.col("reach").is_null() | (pl.col("ts_ns") > pl.col("reach")))
            .cum_sum()
            .over("rank")
            .alias("seg")
        )
        .group_by("rank", "seg")
        .agg(pl.col("ts_ns").min().alias("s"), pl.col("e").max())
        .sort("rank", "s")
    )
    i64 = np.int64
    return {
        int(k[0]): (
            g.get_column("s").to_numpy().astype(i64),
            g.get_column("e").to_numpy().astype(i64),
        )  # type: ignore[call-overload]
        for k, g in seg.partition_by("rank", as_dict=True).items()
    }


@pytest.mark.parametrize("seed", range(40))
def test_rank_coverage_equals_the_queries(seed: int) -> None:
    """Random slices on a few ranks: nested, touching, overlapping, zero-length, untracked."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 150))
    ts = rng.integers(0, 300, n)
    ev = pl.DataFrame(
        {
            "rank": rng.integers(0, 3, n).astype(np.int32),
            "kind": rng.choice(["cpu_op", "runtime", "driver", "python_function", "kernel"], n),
            "ts_ns": ts,
            "dur_ns": rng.integers(0, 25, n),
        }
    )
    got = cpg._rank_coverage(ev)
    want = reference_rank_coverage(ev)
    assert sorted(got) == sorted(want)
    for r, (s, e) in want.items():
        assert got[r][0].tolist() == s.tolist() and got[r][1].tolist() == e.tolist()


def _dag_longest(
    start: np.ndarray,
    end: np.ndarray,
    edges: list[tuple[int, int]],
    waits: np.ndarray,
    device: np.ndarray,
) -> int:
    """The longest path by covered time of a DAG, by recursion over each node's predecessors:
    no node order at all (the definition, not the relaxation)."""
    import functools

    preds: dict[int, list[int]] = {}
    for a, b in edges:
        preds.setdefault(b, []).append(a)
    st = [int(x) for x in start]
    for k in range(len(st)):
        if waits[k]:
            ready = max((int(end[p]) for p in preds.get(k, []) if device[p]), default=st[k])
            st[k] = min(max(st[k], ready), int(end[k]))

    @functools.cache
    def best(k: int) -> int:
        own = int(end[k]) - st[k]
        gains = [best(p) + max(int(end[k]) - max(st[k], int(end[p])), 0) for p in preds.get(k, [])]
        return max([own, *gains])

    return max(best(k) for k in range(len(st)))


@pytest.mark.parametrize("seed", range(60))
def test_edges_between_equal_ends_are_honoured(seed: int) -> None:
    """Many nodes share an end time and their edges go either way in the given order (a sync
    listed before the kernel it waited on): the length is the DAG's longest path, whatever the
    order of the ties. Before 2026-12-05 an edge from a node listed later was read as 0."""
    rng = np.random.default_rng(5000 + seed)
    n = int(rng.integers(2, 60))
    end = np.sort(rng.integers(0, 12, n))  # a dozen end times: large tie groups
    start = end - rng.integers(0, 30, n)
    topo = rng.permutation(n)  # a DAG: equal-end edges go up this order
    edges = []
    for _ in range(int(rng.integers(1, 3 * n))):
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if end[a] < end[b] or (end[a] == end[b] and topo[a] < topo[b]):
            edges.append((a, b))
    ids = np.arange(n) + 100
    src = np.array([ids[a] for a, _ in edges], dtype=np.int64)
    dst = np.array([ids[b] for _, b in edges], dtype=np.int64)
    waits, device = rng.random(n) < 0.3, rng.random(n) < 0.5
    for kw in ({}, {"waits": waits, "device": device}):
        path, contrib, length = longest_path(ids, start, end, src, dst, **kw)
        w = kw.get("waits", np.zeros(n, dtype=bool))
        assert length == _dag_longest(start, end, edges, w, kw.get("device", w)), seed
        assert sum(contrib) == length
        at = [int(i) - 100 for i in path]
        assert all((a, b) in edges for a, b in itertools.pairwise(at))


def test_a_sync_listed_before_the_kernel_it_waited_on() -> None:
    """A kernel (id 1, 0-10) then, on the host, a sync that waited for it (id 2, 4-10) and the
    op after the sync (id 3, 10-12). The sync ends with the kernel and, starting earlier, is
    listed first; the path is the kernel, the sync's wait and the op: 12, not the sync's own 6
    and the op's 2."""
    ids = np.array([2, 1, 3])
    start = np.array([4, 0, 10])
    end = np.array([10, 10, 12])
    src, dst = np.array([1, 2]), np.array([2, 3])
    waits, device = np.array([True, False, False]), np.array([False, True, False])
    path, contrib, length = longest_path(ids, start, end, src, dst, waits=waits, device=device)
    assert (path, contrib, length) == ([1, 2, 3], [10, 0, 2], 12)
