"""The cross-thread waits (idle nodes cut where another thread of the rank runs tracked work)
and their edges in NumPy give exactly the tables of the per-rank and per-step queries they
replaced (kept below as references), row order included: on random threads and on real
traces."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import shared_trace
from opscope import load
from opscope.analysis import critical_path_graph as cpg
from opscope.analysis import tree
from test_critical_path_vectorised import _random_events


def reference_cross_thread_waits(
    host: pl.DataFrame, ev: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``_cross_thread_waits`` as it was, with a query per rank (kept verbatim as the
    reference).

    Cut the idle nodes of ``host`` (:func:`_host_nodes`' table, in its row order) at the time
    other host threads of the rank run tracked work: then the thread waits on them, not idles.

    Returns the host nodes with each idle node replaced by its uncovered pieces (new ids < 0),
    and its **covered stretches** ``[c, d)`` (rank, step, lane) with ``dst``: the thread's node
    after the stretch (its next uncovered piece, else the node after the idle node); see
    :func:`_stretch_edges`.
    """
    i64 = np.int64
    stretch_schema = {"rank": pl.Int32, "step": pl.Int32, "lane": pl.Int64, "c": pl.Int64,
                      "d": pl.Int64, "dst": pl.Int64}  # fmt: skip
    if tree.SHORTCUTS and host.height == 0:  # no host node, no gap to cut (device work only)
        return host, pl.DataFrame(schema=stretch_schema)
    host = host.with_columns(pl.col("id").shift(-1).over("rank", "lane", "step").alias("_next"))
    is_idle = pl.col("name") == "(idle)"
    idle = host.filter(is_idle)
    if idle.height == 0:
        return host.drop("_next"), pl.DataFrame(schema=stretch_schema)
    cover = cpg._rank_coverage(ev)
    next_id = min(int(host.get_column("id").min() or 0), 0) - 1  # type: ignore[arg-type]
    pieces: list[pl.DataFrame] = []
    stretches: list[pl.DataFrame] = []
    for key, g in idle.partition_by("rank", as_dict=True, maintain_order=True).items():
        seg_s, seg_e = cover.get(int(key[0]), (np.empty(0, i64), np.empty(0, i64)))  # type: ignore[call-overload]
        a = g.get_column("start_ns").to_numpy().astype(i64)
        b = g.get_column("end_ns").to_numpy().astype(i64)
        # (an idle node always precedes a node of its thread and step: the null is defensive)
        nxt = g.get_column("_next").fill_null(cpg._NO_NODE).to_numpy().astype(i64)
        # covered stretches of each idle node: the coverage segments overlapping (a, b), clipped
        lo = np.searchsorted(seg_e, a, side="right")
        m = np.maximum(np.searchsorted(seg_s, b, side="left") - lo, 0)
        s_off = np.cumsum(m) - m
        s_node = np.repeat(np.arange(g.height), m)
        j = np.arange(len(s_node)) - s_off[s_node] + lo[s_node]
        c = np.maximum(seg_s[j], a[s_node])
        d = np.minimum(seg_e[j], b[s_node])
        # uncovered pieces: [a, c0), [d0, c1), ..., [d(m-1), b); piece k follows stretch k-1
        p_node = np.repeat(np.arange(g.height), m + 1)
        k = np.arange(len(p_node)) - (np.cumsum(m + 1) - (m + 1))[p_node]
        si = s_off[p_node] + k  # the stretch after piece k (if k < m)
        pa = np.where(k == 0, a[p_node], d[np.clip(si - 1, 0, None)] if len(d) else 0)
        pb = np.where(
            k == m[p_node], b[p_node], c[np.clip(si, 0, max(len(c) - 1, 0))] if len(c) else 0
        )
        keep = pa < pb
        pid = np.zeros(len(pa), dtype=i64)
        pid[keep] = next_id - np.arange(int(keep.sum()), dtype=i64)
        next_id -= int(keep.sum())
        pieces.append(
            g.drop("_next")
            .gather(p_node[keep])
            .with_columns(
                pl.Series("id", pid[keep]),
                pl.Series("start_ns", pa[keep]),
                pl.Series("end_ns", pb[keep]),
            )
        )
        after = k > 0
        stretches.append(
            g.select("rank", "step", "lane")
            .gather(p_node[after])
            .with_columns(
                pl.Series("c", c),
                pl.Series("d", d),
                pl.Series("dst", np.where(keep, pid, nxt[p_node])[after]),
            )
        )
    out = pl.concat([host.filter(~is_idle).drop("_next"), *pieces])
    return out, pl.concat(stretches).filter(pl.col("dst") != cpg._NO_NODE)


def reference_stretch_edges(
    stretches: pl.DataFrame, srcs: pl.DataFrame | pl.LazyFrame
) -> pl.DataFrame:
    """``_stretch_edges`` as it was, with a partition and sort per step (kept verbatim as the
    reference).

    Every node of ``srcs`` on another lane of the same rank and step ending in ``(c, d]`` of a
    stretch -> the stretch's ``dst``."""
    i64 = np.int64
    if tree.SHORTCUTS and stretches.height == 0:
        return pl.DataFrame(schema={"src": pl.Int64, "dst": pl.Int64})
    srcs = tree.collect(srcs.lazy())
    by_step = {
        (int(k[0]), int(k[1])): g.sort("end_ns")  # type: ignore[call-overload]
        for k, g in srcs.partition_by("rank", "step", as_dict=True).items()
    }
    parts = []
    for key, st in stretches.partition_by("rank", "step", as_dict=True).items():
        g = by_step.get((int(key[0]), int(key[1])))  # type: ignore[call-overload]
        if g is None:
            continue
        end = g.get_column("end_ns").to_numpy().astype(i64)
        lo = np.searchsorted(end, st.get_column("c").to_numpy().astype(i64), side="right")
        hi = np.searchsorted(end, st.get_column("d").to_numpy().astype(i64), side="right")
        n = np.maximum(hi - lo, 0)
        row = np.repeat(np.arange(st.height), n)
        src = np.arange(len(row)) - (np.cumsum(n) - n)[row] + lo[row]
        other = g.get_column("lane").to_numpy()[src] != st.get_column("lane").to_numpy()[row]
        parts.append(
            pl.DataFrame(
                {
                    "src": g.get_column("id").to_numpy()[src][other],
                    "dst": st.get_column("dst").to_numpy()[row][other],
                },
                schema={"src": pl.Int64, "dst": pl.Int64},
            )
        )
    return pl.concat(parts) if parts else pl.DataFrame(schema={"src": pl.Int64, "dst": pl.Int64})


def _same_waits(host: pl.DataFrame, ev: pl.DataFrame) -> int:
    got, got_st = cpg._cross_thread_waits(host, ev)
    want, want_st = reference_cross_thread_waits(host, ev)
    assert got.schema == want.schema and got.equals(want)
    assert got_st.schema == want_st.schema and got_st.equals(want_st)
    srcs = got.lazy().select("rank", "step", "lane", "id", "end_ns")
    e = cpg._stretch_edges(got_st, srcs)
    assert e.equals(reference_stretch_edges(want_st, srcs))
    return got_st.height


def _three_threads(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The random two threads of calls and slices, and a third thread of the same rank running
    only operators: the calling threads' gaps are cut where it runs."""
    ev, steps = _random_events(random.Random(seed))
    rng = np.random.default_rng(seed)
    k = int(rng.integers(0, 12))
    ts = np.sort(rng.integers(0, 200, k))
    other = pl.DataFrame(
        {"id": np.arange(10_000, 10_000 + k), "rank": [0] * k, "pid": [1] * k, "tid": [9] * k,
         "kind": ["cpu_op"] * k, "ts_ns": ts, "dur_ns": rng.integers(0, 30, k),
         "step": rng.integers(-1, 2, k), "op_id": [None] * k, "name": ["x"] * k,
         "launch_id": [None] * k},
        schema=ev.schema,
    )  # fmt: skip
    return pl.concat([ev, other]), steps


@pytest.mark.parametrize("seed", range(200))
def test_same_waits_as_the_queries_on_random_threads(seed: int) -> None:
    ev, steps = _three_threads(seed)
    _same_waits(cpg._host_nodes(ev, steps), ev)


def test_the_random_threads_have_stretches() -> None:
    total = 0
    for seed in range(50):
        ev, steps = _three_threads(seed)
        total += _same_waits(cpg._host_nodes(ev, steps), ev)
    assert total > 50


_TRACES = [
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "gpu/hta_nccl_a100_rank0of2.json.gz",
    "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
    "ascend/small_two_rank/test_rank_0",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
]


@pytest.mark.parametrize("rel", _TRACES)
def test_same_waits_and_splits_as_the_queries_on_real_traces(rel: str) -> None:
    from test_critical_path_kernel import reference_split_earlier_waits

    profile = load(shared_trace(rel), cache=False)
    ev = profile.events.with_columns(pl.col("step").fill_null(-1))
    _same_waits(cpg._host_nodes(ev, profile.steps), ev)
    nodes = cpg._nodes(profile)
    assert cpg._split_earlier_waits(nodes, ev).equals(reference_split_earlier_waits(nodes, ev))


def test_a_sync_only_graph_reads_no_copy_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits that are all syncs (no blocking copy): the copies' streams are never read (a
    spy on the launch column read), and the split is the reference's; with the blocking copies
    of the same trace they are."""
    from test_critical_path_kernel import reference_split_earlier_waits

    profile = load(shared_trace("gpu/hta_alexnet_a100_cuda_sync.json.gz"), cache=False)
    ev = profile.events.with_columns(pl.col("step").fill_null(-1))
    syncs = cpg._nodes(profile).with_columns(pl.col("is_wait") & pl.col("is_sync"))
    assert syncs.get_column("is_wait").any()
    copy_profile = load(
        shared_trace("multi_rank/hta_sampled_128rank_job/rank-1.json.gz"), cache=False
    )
    copy_ev = copy_profile.events.with_columns(pl.col("step").fill_null(-1))
    nodes = cpg._nodes(copy_profile)
    assert (nodes.get_column("is_wait") & ~nodes.get_column("is_sync")).any()
    read: list[str] = []
    real = cpg._int_column

    def spy(df: pl.DataFrame, name: str) -> Any:
        read.append(name)
        return real(df, name)

    monkeypatch.setattr(cpg, "_int_column", spy)
    got = cpg._split_earlier_waits(syncs, ev)
    assert "launch_id" not in read
    got_copies = cpg._split_earlier_waits(nodes, copy_ev)
    assert "launch_id" in read
    monkeypatch.undo()
    assert got.equals(reference_split_earlier_waits(syncs, ev))
    assert got_copies.equals(reference_split_earlier_waits(nodes, copy_ev))


def _same_coverage(ev: pl.DataFrame, steps: pl.DataFrame) -> None:
    cover: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    host = cpg._host_nodes(ev, steps, cover)
    if host.height == 0:
        return
    want = cpg._rank_coverage(ev)
    assert sorted(cover) == sorted(want)
    for r, (s, e) in want.items():
        assert cover[r][0].tolist() == s.tolist() and cover[r][1].tolist() == e.tolist()
    got = cpg._cross_thread_waits(host, ev, cover)
    alone = cpg._cross_thread_waits(host, ev)
    assert got[0].equals(alone[0]) and got[1].equals(alone[1])


@pytest.mark.parametrize("seed", range(100))
def test_the_host_nodes_coverage_is_the_rank_coverage(seed: int) -> None:
    """The coverage read from the host nodes' tracked slices (no query of its own) is
    ``_rank_coverage``'s, and the waits cut with it are the same."""
    _same_coverage(*_three_threads(seed))


@pytest.mark.parametrize("rel", _TRACES)
def test_the_host_nodes_coverage_on_real_traces(rel: str) -> None:
    profile = load(shared_trace(rel), cache=False)
    _same_coverage(profile.events.with_columns(pl.col("step").fill_null(-1)), profile.steps)
