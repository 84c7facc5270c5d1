"""The vectorised ``_host_nodes`` gives exactly the node table of the per-call loop it replaced
(kept below as the reference): on every shared Kineto trace with device work, and on random
threads with nested, touching, zero-length and overlapping slices, syncs and blocking copies;
and ``longest_path`` gives the path, contributions and length of its per-node loop on random
graphs (also kept below)."""

from __future__ import annotations

import bisect
import random
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import SHARED_TRACES
from opscope.analysis.critical_path import longest_path
from opscope.analysis.critical_path_graph import (
    _NODE_SCHEMA,
    _TRACKED,
    COPY_CALL,
    SYNC_PATTERN,
    _host_nodes,
)
from opscope.model import kinds

_DEVICE_KINDS = kinds.DEVICE_WORK


def reference_host_nodes(ev: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The per-call Python loop that ``_host_nodes`` replaced (kept as the reference; its sorts
    since 2026-12 in the defined orders: calls by (start, id), slices by (start, end
    descending, id), where Polars' sort by start left ties in its own order).

    Per thread, the time from the previous call's end (or the step's start) to the end of call
    *i* is cut where the thread was doing nothing tracked (no operator or runtime call
    covers it): those gaps become explicit idle nodes (ids < 0, ``op`` :data:`IDLE_OP`), never
    part of the next op. The tracked piece just before the call is its node (the call's id and
    op); earlier tracked pieces are nodes of the top-level slice running at their end. A
    synchronising call is its own node from its start, so that the host work before it keeps
    its time when the wait is handed to the device.
    """
    rt = ev.filter(pl.col("kind").is_in(["runtime", "driver"]))
    if not rt.height:
        return pl.DataFrame(schema=_NODE_SCHEMA)
    thread = ["rank", "pid", "tid"]
    step_ts = dict(
        zip(
            zip(
                steps.get_column("rank").to_list(), steps.get_column("step").to_list(), strict=True
            ),
            steps.get_column("ts_ns").to_list(),
            strict=True,
        )
    )
    copies = ev.filter(
        pl.col("kind").is_in(list(_DEVICE_KINDS)) & pl.col("launch_id").is_not_null()
    )
    copy_end = copies.group_by("launch_id").agg(
        (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("copy_end")
    )
    # per call, vectorised: whether it synchronises, and whether it is a copy that blocked
    rt = rt.join(copy_end, left_on="id", right_on="launch_id", how="left").with_columns(
        pl.col("name").fill_null("").str.contains(SYNC_PATTERN).alias("sync"),
        (
            pl.col("name").fill_null("").str.contains(COPY_CALL)
            & (pl.col("copy_end") <= pl.col("ts_ns") + pl.col("dur_ns"))
        )
        .fill_null(False)
        .alias("blocking_copy"),
    )
    threads = rt.select(thread).unique()
    tracked = ev.filter(pl.col("kind").is_in(list(_TRACKED))).join(
        threads, on=thread, how="semi", nulls_equal=True
    )
    tracked_by = (
        tracked.with_columns((pl.col("ts_ns") + pl.col("dur_ns")).alias("_end"))
        .sort(["ts_ns", "_end", "id"], descending=[False, True, False])
        .partition_by(thread, as_dict=True, maintain_order=True)
    )
    out: list[tuple[Any, ...]] = []
    emit_row = out.append
    next_id = -1

    def emit(rank: int, step: int, nid: int, lane: int, a: int, b: int, op: Any, name: str,
             sync: bool, wait: bool) -> None:  # fmt: skip
        emit_row((rank, step, nid, "host", lane, a, b, op, name, sync, wait))

    by_thread = rt.sort("ts_ns", "id").partition_by(thread, as_dict=True, maintain_order=True)
    for key, calls in by_thread.items():
        rank, _pid, tid = (int(k) if k is not None else -1 for k in key)
        tr = tracked_by.get(key)
        # coverage of the thread: union of tracked slices, with the top-level slice ids
        seg_s: list[int] = []
        seg_e: list[int] = []
        top_ts: list[int] = []
        top_id: list[int] = []
        for t0, d, i in [] if tr is None else tr.select("ts_ns", "dur_ns", "id").iter_rows():
            t1 = t0 + d
            if not seg_e or t0 >= seg_e[-1]:  # not inside the slices seen so far: top level
                top_ts.append(t0)
                top_id.append(i)
            if not seg_e or t0 > seg_e[-1]:
                seg_s.append(t0)
                seg_e.append(t1)
            seg_e[-1] = max(seg_e[-1], t1)
        prev_end: dict[int, int] = {}
        rows = calls.select(
            "id", "ts_ns", "dur_ns", "step", "op_id", "name", "sync", "blocking_copy"
        ).iter_rows()
        for cid, ts, dur, step, op, name, sync, blocking in rows:
            end = ts + dur
            start = prev_end.get(step, step_ts.get((rank, step), ts))
            start = min(start, ts)
            prev_end[step] = end
            wait = sync or blocking
            # cut [start, ts) at the thread's untracked gaps
            a = start
            while a < ts:
                k = bisect.bisect_right(seg_e, a)  # the first coverage segment ending after a
                if k < len(seg_s) and seg_s[k] <= a:
                    # tracked: up to the end of the coverage or the next top-level slice
                    n = bisect.bisect_right(top_ts, a)
                    b = min(seg_e[k], ts, top_ts[n] if n < len(top_ts) else ts)
                    if b >= ts:
                        break  # the piece just before the call: part of the call's node
                    j = bisect.bisect_right(top_ts, b - 1) - 1
                    emit(rank, step, next_id, tid, a, b, top_id[j] if j >= 0 else op, "", False,
                         False)  # fmt: skip
                    next_id -= 1
                else:
                    b = min(seg_s[k] if k < len(seg_s) else ts, ts)
                    emit(rank, step, next_id, tid, a, b, None, "(idle)", False, False)
                    next_id -= 1
                a = b
            if wait and a < ts:
                emit(rank, step, next_id, tid, a, ts, op, "", False, False)
                next_id -= 1
                a = ts
            emit(rank, step, cid, tid, min(a, ts), end, op, name, sync, wait)
    return pl.DataFrame(out, schema=_NODE_SCHEMA, orient="row")


_KEY = ["rank", "step", "lane", "start_ns", "id"]


def _same(ev: pl.DataFrame, steps: pl.DataFrame) -> None:
    got = _host_nodes(ev, steps)
    want = reference_host_nodes(ev, steps)
    assert got.schema == want.schema
    assert got.height == want.height
    assert got.sort(_KEY).equals(want.sort(_KEY))
    # the explicit segments get the same negative ids
    assert got.filter(pl.col("id") < 0).sort("id").equals(want.filter(pl.col("id") < 0).sort("id"))


def _kineto_traces() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(
        p
        for p in SHARED_TRACES.rglob("*")
        if p.is_file()
        and p.name.endswith((".json", ".json.gz"))
        and not any(part.startswith(".") for part in p.relative_to(SHARED_TRACES).parts)
        and "ASCEND_PROFILER_OUTPUT" not in p.parts
        and "ascend" not in p.relative_to(SHARED_TRACES).parts[:1]
    )


_TRACES = _kineto_traces()


@pytest.mark.skipif(not _TRACES, reason=f"shared traces not found at {SHARED_TRACES}")
@pytest.mark.parametrize(
    "path", _TRACES, ids=[str(p.relative_to(SHARED_TRACES)) for p in _TRACES] or None
)
def test_same_nodes_as_the_loop_on_shared_trace(path: Path) -> None:
    import opscope

    profile = opscope.load(path, cache=False)
    ev = profile.events.with_columns(pl.col("step").fill_null(-1))
    if not ev.filter(pl.col("kind").is_in(list(_DEVICE_KINDS))).height:
        pytest.skip("no device work")
    assert ev.filter(pl.col("kind").is_in(["runtime", "driver"])).height > 0
    _same(ev, profile.steps)


def _random_events(rng: random.Random) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two threads of random slices: nested, touching, zero-length and overlapping ops,
    runtime calls (some syncs, some copies whose copy ends before or after the call), two
    steps, some calls outside any step."""
    rows: list[dict[str, Any]] = []
    nid = 1

    def add(kind: str, tid: int, ts: int, dur: int, **kw: Any) -> int:
        nonlocal nid
        nid += 1
        rows.append({"id": nid, "rank": 0, "pid": 1, "tid": tid, "kind": kind,
                     "ts_ns": ts, "dur_ns": dur, **kw})  # fmt: skip
        return nid

    for tid in (7, 8):
        t = rng.randrange(0, 20)
        for _ in range(rng.randrange(1, 25)):
            t += rng.choice([0, 0, 1, 3, 10])
            d = rng.choice([0, 1, 5, 20, 40])
            step = rng.choice([0, 1, None])
            kind = rng.choice(["cpu_op", "cpu_op", "python_function", "runtime", "driver"])
            op = rng.choice([None, 1])
            if kind in ("runtime", "driver"):
                name = rng.choice(
                    [
                        "cudaLaunchKernel",
                        "cudaStreamSynchronize",
                        "cudaMemcpyAsync",
                        "x@aclrtMemcpy",
                    ]
                )
                cid = add(kind, tid, t, d, step=step, op_id=op, name=name)
                if rng.random() < 0.7:
                    add("kernel", 0, t + rng.choice([0, 2, d, d + 5]), rng.choice([0, 3]),
                        step=step, launch_id=cid, name="k")  # fmt: skip
            else:
                add(kind, tid, t, d, step=step, op_id=None, name=f"op{nid}")
            if rng.random() < 0.5:
                t += d
    schema = {"id": pl.Int64, "rank": pl.Int32, "pid": pl.Int64, "tid": pl.Int64,
              "kind": pl.String, "ts_ns": pl.Int64, "dur_ns": pl.Int64, "step": pl.Int32,
              "op_id": pl.Int64, "name": pl.String, "launch_id": pl.Int64}  # fmt: skip
    ev = pl.DataFrame(rows, schema=schema).with_columns(pl.col("step").fill_null(-1))
    steps = pl.DataFrame(
        {"rank": [0, 0], "step": [0, 1], "ts_ns": [rng.randrange(0, 30), rng.randrange(0, 200)]},
        schema={"rank": pl.Int32, "step": pl.Int32, "ts_ns": pl.Int64},
    )
    return ev, steps


@pytest.mark.parametrize("seed", range(300))
def test_same_nodes_as_the_loop_on_random_threads(seed: int) -> None:
    ev, steps = _random_events(random.Random(seed))
    _same(ev, steps)


@pytest.mark.parametrize("seed", range(100))
def test_same_nodes_as_the_loop_with_null_steps_and_thread_ids(seed: int) -> None:
    """Calls outside every step (a null step: a group of its own) and a thread of null tid (a
    key of its own, its slices matched to it)."""
    ev, steps = _random_events(random.Random(seed))
    ev = ev.with_columns(
        pl.when(pl.col("step") != -1).then(pl.col("step")).alias("step"),
        pl.when(pl.col("tid") != 8).then(pl.col("tid")).alias("tid"),
    )
    assert ev.get_column("tid").null_count() > 0
    _same(ev, steps)


@pytest.mark.parametrize("seed", range(30))
def test_distinct_is_np_unique(seed: int) -> None:
    from opscope.analysis.critical_path_graph import _distinct

    rng = np.random.default_rng(seed)
    x = rng.integers(-5, int(rng.choice([3, 20, 10_000])), int(rng.integers(0, 500)))
    assert _distinct(x).tolist() == np.unique(x).tolist()


def test_the_comparison_can_fail() -> None:
    ev, steps = _random_events(random.Random(3))
    want = reference_host_nodes(ev, steps)
    assert want.height > 0
    moved = want.with_columns(pl.col("start_ns") + 1)
    assert not moved.sort(_KEY).equals(want.sort(_KEY))


def reference_longest_path(
    ids: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    *,
    kinds: np.ndarray | None = None,
    waits: np.ndarray | None = None,
    device: np.ndarray | None = None,
) -> tuple[list[int], list[int], int]:
    """The per-node loop that ``longest_path`` replaced (kept as the reference; since
    2026-12-05 it closes each group of equal end time over that group's edges once the group is
    relaxed, as ``longest_path`` does; since 2026-12 a node's edges are taken by (kind, source's
    position), the defined order of ties, not in the order given)."""
    n = len(ids)
    if n == 0:
        return [], [], 0
    # edge endpoints -> positions in the end-time order, vectorised
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]

    def pos(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(sorted_ids, x), 0, n - 1)
        return np.where(sorted_ids[i] == x, order[i], -1)

    ks, kd = pos(np.asarray(src)), pos(np.asarray(dst))
    kind = [0] * len(ks) if kinds is None else np.asarray(kinds).tolist()
    preds: list[list[int]] = [[] for _ in range(n)]
    for _, p, d in sorted(
        (k, p, d)
        for p, d, k in zip(ks.tolist(), kd.tolist(), kind, strict=True)
        if p >= 0 and d >= 0 and p != d and end[p] <= end[d]
    ):
        preds[d].append(p)
    st = start.tolist()
    en = end.tolist()
    if waits is not None and device is not None:
        w = waits.tolist()
        dv = device.tolist()
        for k in range(n):
            if w[k]:
                ready = max((en[p] for p in preds[k] if dv[p]), default=st[k])
                st[k] = min(max(st[k], ready), en[k])
    best = [0] * n
    via = [-1] * n
    gain = [0] * n
    g0 = 0  # the first node of the current group of equal end time
    for k in range(n):
        if k and en[k] != en[k - 1]:
            g0 = k
        b = en[k] - st[k]
        bv = -1
        g = b
        for p in preds[k]:
            c = max(en[k] - max(st[k], en[p]), 0)
            if best[p] + c > b:
                b, bv, g = best[p] + c, p, c
        best[k], via[k], gain[k] = b, bv, g
        if k == n - 1 or en[k + 1] != en[k]:
            # the group of equal end time is relaxed: its lengths closed over its edges (an
            # edge from a node listed later was read as 0 above; each adds nothing of its own)
            grp = [(p, d) for d in range(g0, k + 1) for p in preds[d] if en[p] == en[k]]
            if any(p > d for p, d in grp):
                changed = True
                while changed:
                    changed = False
                    for p, d in sorted(grp, key=lambda e: e[1]):
                        if best[p] > best[d]:
                            best[d], via[d], gain[d] = best[p], p, 0
                            changed = True
    k = max(range(n), key=best.__getitem__)
    length = best[k]
    path: list[int] = []
    contrib: list[int] = []
    while k != -1:
        path.append(int(ids[k]))
        contrib.append(gain[k])
        k = via[k]
    return path[::-1], contrib[::-1], length


@pytest.mark.parametrize("seed", range(200))
def test_same_longest_path_as_the_loop_on_random_graphs(seed: int) -> None:
    """Random DAGs in end order with ties, backward and unknown edges, waits on device nodes."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    end = np.sort(rng.integers(0, 100, n))
    start = end - rng.integers(0, 30, n)
    ids = rng.permutation(np.arange(1, n + 1)) * rng.choice([1, -1], n)
    m = int(rng.integers(0, 3 * n))
    src = rng.choice(np.concatenate((ids, [10_000])), m)
    dst = rng.choice(ids, m)
    waits = rng.random(n) < 0.3
    device = rng.random(n) < 0.5
    kinds = rng.integers(0, 5, m)
    for kw in ({}, {"waits": waits, "device": device}, {"kinds": kinds}):
        assert longest_path(ids, start, end, src, dst, **kw) == reference_longest_path(
            ids, start, end, src, dst, **kw
        )
    # the edges' order given is none of the path's business: only (kind, source) order them
    o = rng.permutation(m)
    assert longest_path(ids, start, end, src[o], dst[o], kinds=kinds[o]) == longest_path(
        ids, start, end, src, dst, kinds=kinds
    )
