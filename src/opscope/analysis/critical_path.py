"""Critical path of each step across host threads, launches and device streams.

The graph of one step (one rank):

- **host nodes** — each host thread's time cut at its runtime calls: the node of call *i* runs
  from the end of call *i-1* (or the step's start) to the end of call *i* (the host work that led
  to the launch, plus the launch), except that the thread's **untracked time** in between (no
  operator and no runtime call running on it: Python outside ops, waits, an idle thread) is an
  explicit idle node (``op`` :data:`IDLE_OP`, no event id), never part of the next op, and a
  piece of tracked time cut off from the call by such a gap (or by a new top-level operator)
  is a node of the top-level operator running then. A synchronising call is its own node from
  its start. Threads with no runtime calls (a CPU-only profile) use their top-level operators.
  Consecutive nodes of a thread are joined by an edge.
- **cross-thread waits** — a thread's untracked gap is idle only where *no* host thread of the
  rank runs tracked work (operator or runtime call). Where another thread does, the thread waits
  on it: that stretch is no node, and every host node of another thread ending inside it gets an
  edge to the thread's node after it. Without this the path walked one thread's idle instead of
  the work: on an H200 eager training step the main thread records no op during
  ``loss.backward()`` (the autograd thread runs the backward ops), and the autograd thread none
  before backward starts; the path read 10.3 ms "idle" of 14.3 ms while the host was 62% busy.
- **device nodes** — kernels, copies and fills; consecutive nodes of a stream are joined.
- **launch edges** — host node of the runtime call -> the kernel it launched (``launch_id``).
- **sync edges** — ``cudaDeviceSynchronize`` / ``cudaStreamSynchronize`` /
  ``cudaEventSynchronize`` / ``hipDeviceSynchronize`` / ``aclrtSynchronizeStream`` (and
  ``cudaMemcpy``) wait on the last device node of every stream that ends before the call returns;
  a **blocking copy** call (``cudaMemcpyAsync`` / ``hipMemcpyAsync`` / ``aclrtMemcpy*`` whose copy
  ends before the call returns: a D2H copy to pageable memory, ``.item()``) waits on its own copy,
  and through the stream on the work queued before it. A waiting node only counts from the moment
  the device work it waited on ended: the wait is that work's time on the path. A waiting call
  that waits while device work of another step runs on what it waits on (a sync: any stream; a
  blocking copy: its copy's) — an earlier step's, work queued before profiling: in no node of
  this graph — is first a plain node of its own from its start to the end of the last such work
  ending before it returns: that wait is the call's (its op's) time, not a hole in the path
  (an H200 step read a 98 ms idle thread there, the main thread waiting in ``aten::item``'s
  ``cudaStreamSynchronize`` for the previous step's kernels).

A node's contribution along an edge ``u -> v`` is the part of ``v`` after ``u`` ended
(``end(v) - max(start(v), end(u))``): time overlapped with the predecessor is not counted
twice, so a path's length never exceeds the step's span, and a stream's own chain of kernels
weighs exactly its busy time. Edges only go forward in end time, so ordering nodes by end time
is a topological order and the longest path is one pass over nodes and edges (O(N + E)).

**Order.** The result depends on no row order and on no sort's order of ties (an unstable
sort's can change with the engine's version or its threads): every order is a stated key,
ending in the nodes' ids (an event's id numbers it by start time, then trace order; the ids of
host pieces that are no event are numbered in the orders below):

- a step's nodes: by (end, start, id); the path ends at the first node of the greatest length;
- the edges into a node: by kind (lane, launch, copy, sync, cross), then the source's position
  in its step's order; a node takes the first edge giving its length, and only one longer than
  the node alone;
- a thread's runtime calls: by (start, id); its tracked slices: by (start, end descending, id),
  so that of slices starting together the enclosing one is the top-level one;
- a lane's nodes (its chain of edges): by (start, end, id);
- a sync's predecessor on a stream: the last of the stream's nodes by (end, start, id) ending
  at or before the sync does; a blocking copy's stream: that of its copy last by (end, id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.analysis import _critical_path_kernels as _kernels
from opscope.analysis import tree
from opscope.analysis.critical_path_graph import (
    _NODE_SCHEMA,
    IDLE_OP,
    _flag,
    a_row_of_each,
    dense_unique,
    edges,
    graph,
    positions,
)
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.small_frames import ROWS_MAX, codes_in_order, columns_frame, series
from opscope.model import Profile

# IDLE_OP (the graph's): the op name of the idle nodes in this analysis' output
__all__ = ["IDLE_OP", "CriticalPathResult", "critical_path", "longest_path"]


@dataclass(frozen=True)
class CriticalPathResult(Result):
    """``path``: the nodes on each step's critical path in order (``id`` null for the explicit
    host segments that are no event: idle gaps, host work cut off a call); ``ops``: per step and
    operator, time on the path and its share of step time; ``steps``: path length (``path_ns``,
    split into ``host_ns`` and ``device_ns``) vs the step's span (``step_ns``: first node's start
    to last node's end, device tail included) and its ProfilerStep range (``host_step_ns``)."""

    path: pl.DataFrame
    ops: pl.DataFrame
    steps: pl.DataFrame

    def to_json(self) -> dict[str, Any]:
        """Per step: path length, step time, and the operators on the path (µs)."""
        out = []
        # the ops rows by step in one pass, in their order (a filter per step was a query each)
        by_step: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for r in self.ops.iter_rows(named=True):
            by_step.setdefault((r["rank"], r["step"]), []).append(r)
        for s in self.steps.iter_rows(named=True):
            ops = by_step.get((s["rank"], s["step"]), [])
            out.append(
                {
                    "rank": s["rank"],
                    "step": s["step"],
                    "step_us": s["step_ns"] / 1e3,
                    "path_us": s["path_ns"] / 1e3,
                    "host_us": s["host_ns"] / 1e3,
                    "device_us": s["device_ns"] / 1e3,
                    "ops": [
                        {"name": r["op"], "on_path_us": r["on_path_ns"] / 1e3, "share": r["share"]}
                        for r in ops
                    ],
                }
            )
        return {"steps": out}


def longest_path(
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
    """Longest path by covered time; returns (node ids in order, their contributions, length).

    ``ids`` must be sorted by ``end`` (a topological order, as edges go forward in end time);
    edges whose end time goes backwards are ignored. A node flagged in ``waits`` (a
    synchronisation) only counts from the moment its last ``device`` predecessor ended: the time
    it spent waiting belongs to the device work it waited on. Ties: a node takes the first edge
    giving its length (by ``kinds``, the edges' precedence, none: all equal; then by the
    source's position in ``ids``), only when longer than the node alone; the path ends at the
    first node of the greatest length.
    """
    ks = positions(np.asarray(ids), np.asarray(src))
    kd = positions(np.asarray(ids), np.asarray(dst))
    kind = np.zeros(len(kd), dtype=np.int64) if kinds is None else np.asarray(kinds)
    at, contrib, length = _longest_path_of(start, end, ks, kd, kind, waits=waits, device=device)
    return np.asarray(ids)[at].tolist(), contrib.tolist(), length


def _longest_path_of(
    start: np.ndarray,
    end: np.ndarray,
    ks: np.ndarray,
    kd: np.ndarray,
    kind: np.ndarray,
    *,
    waits: np.ndarray | None = None,
    device: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`longest_path` of the edges ``ks`` -> ``kd`` of ``kind`` given as positions in the
    end-time order (-1: a node not in it)."""
    n = len(start)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), 0
    ok = (ks >= 0) & (kd >= 0) & (ks != kd)
    ok[ok] = end[ks[ok]] <= end[kd[ok]]
    ks, kd, kind = ks[ok], kd[ok], kind[ok]
    # the edges by destination, then kind, then source: the kernel takes the first edge of the
    # greatest length into a node (one sort of a key combining the three; equal keys are equal
    # edges)
    i64 = np.int64
    by_dst = np.argsort((kd.astype(i64) * (int(kind.max(initial=0)) + 1) + kind) * n + ks)
    ks, kd = ks[by_dst], kd[by_dst]
    stn = np.asarray(start)
    enn = np.asarray(end)
    if waits is not None and device is not None:
        # a wait counts from the end of its last device predecessor (never past its own end)
        w = np.asarray(waits, dtype=bool)
        m = np.asarray(device, dtype=bool)[ks] & w[kd]
        ready = stn.copy()
        np.maximum.at(ready, kd[m], enn[ks[m]])
        stn = np.where(w, np.minimum(ready, enn), stn)
    # what each edge adds to its destination: the part of it after the source ended
    gains = np.maximum(enn[kd] - np.maximum(stn[kd], enn[ks]), 0).astype(i64)
    bounds = np.searchsorted(kd, np.arange(n + 1)).astype(i64)
    own = (enn - stn).astype(i64)
    gid, es, ed, ebounds = ties_of(enn, ks, kd)
    # the pass over nodes and edges, compiled (it was a Python loop: ~1 us per node and edge)
    at, contrib, length = _kernels.longest(own, gains, ks.astype(i64), bounds, gid, es, ed, ebounds)
    return at, contrib, int(length)


def ties_of(
    end: np.ndarray, ks: np.ndarray, kd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The edges between nodes of equal end time, for the kernel's closure of each such group:
    (group of each node, the edges' sources and destinations by group, each group's first edge).
    All empty when every such edge already goes forward in the order (the one pass is exact).

    Nodes are relaxed in end-time order (ties: start time, then id), so an edge from a node of
    the same end listed later (a synchronisation that started before the kernel it waited on
    ends with it, and sorts first) was read before its source's length was known, and the chain
    through it was lost; a blocking copy and its call, ending together, even wait on each other.
    Such an edge adds nothing of its own (the destination ends when the source does), so once a
    group is relaxed its lengths are closed over its edges: each node's length is at least that
    of every node that reaches it by them (the least fixed point, whatever the cycles)."""
    i64 = np.int64
    none = np.empty(0, i64)
    same = end[ks] == end[kd]
    if not bool((ks[same] > kd[same]).any()):
        return none, none, none, none
    gid = np.concatenate(([0], np.cumsum(end[1:] != end[:-1]))).astype(i64)
    es, ed = ks[same].astype(i64), kd[same].astype(i64)
    o = np.argsort(gid[ed], kind="stable")
    es, ed = es[o], ed[o]
    ebounds = np.searchsorted(gid[ed], np.arange(int(gid[-1]) + 2)).astype(i64)
    return gid, es, ed, ebounds


def _step_rows(nodes: pl.DataFrame) -> tuple[list[tuple[Any, Any]], list[np.ndarray]]:
    """The steps' (rank, step) keys in order (a null first), and each step's nodes' rows in the
    step's node order: by end, then start, then id (see :func:`critical_path`). One NumPy sort
    (a partition and a Polars sort per step were queries of fixed cost)."""
    i64 = np.int64
    rank, rank_ok = tree.int_values(nodes.get_column("rank"))
    step, step_ok = tree.int_values(nodes.get_column("step"))
    end, start, ids = (nodes.get_column(c).to_numpy().astype(i64) for c in _ORDER_COLUMNS)
    return step_rows_of(rank, rank_ok, step, step_ok, end, start, ids)


def step_rows_of(
    rank: np.ndarray,
    rank_ok: np.ndarray,
    step: np.ndarray,
    step_ok: np.ndarray,
    end: np.ndarray,
    start: np.ndarray,
    ids: np.ndarray,
) -> tuple[list[tuple[Any, Any]], list[np.ndarray]]:
    """:func:`_step_rows` of the nodes' columns as arrays (values, and where valid)."""
    order = np.lexsort((ids, start, end, step, step_ok, rank, rank_ok))
    if not len(order):
        return [], []
    r, r_ok, st, st_ok = rank[order], rank_ok[order], step[order], step_ok[order]
    new = (r[1:] != r[:-1]) | (r_ok[1:] != r_ok[:-1]) | (st[1:] != st[:-1])
    cuts = np.flatnonzero(np.concatenate(([True], new | (st_ok[1:] != st_ok[:-1]))))
    firsts = order[cuts]
    keys = [
        (int(a) if a_ok else None, int(b) if b_ok else None)
        for a, a_ok, b, b_ok in zip(
            rank[firsts].tolist(),
            rank_ok[firsts].tolist(),
            step[firsts].tolist(),
            step_ok[firsts].tolist(),
            strict=True,
        )
    ]
    return keys, np.split(order, cuts[1:])


#: The nodes' columns of their order in a step: end, then start, then id.
_ORDER_COLUMNS: Final = ("end_ns", "start_ns", "id")


def _path_table(
    nodes: pl.DataFrame, ev: pl.DataFrame, rows: np.ndarray, order: np.ndarray, on_path: np.ndarray
) -> pl.DataFrame:
    """The path's table: the nodes at ``rows`` with their ``order`` and ``on_path`` time, the
    name of a host piece of no name and every node's operator from the event its ``op_id`` is
    (:func:`~opscope.analysis.critical_path_graph.name_expr`, ``op_expr``). Each column by
    indexing (a gather and the when/then of a plan were a query, of fixed cost): the names
    picked from one pool of the nodes' names, the events' names and :data:`IDLE_OP`."""
    i64 = np.int64
    m = len(rows)
    name = nodes.get_column("name")[rows]
    op_id, op_known = tree.int_values(nodes.get_column("op_id")[rows])
    ev_name = ev.get_column("name")
    at = positions(ev.get_column("id").to_numpy().astype(i64), op_id)
    # no op: no op_id, none of the events, or an event of no name (a query only then)
    no_op = (at < 0) | ~op_known
    if ev_name.null_count() and len(at):
        no_op |= ev_name.is_null().to_numpy()[np.maximum(at, 0)]
    pool = pl.concat(
        [name.alias("name"), ev_name.alias("name"), pl.Series("name", [IDLE_OP, None], pl.String)]
    )
    idle_at, null_at = m + len(ev_name), m + len(ev_name) + 1
    own = np.arange(m, dtype=i64)
    # a name "" (a host piece): its op's (null without one); "(idle)": the idle op; else the
    # op's name, or without one the node's own
    name_at = np.where(_flag(name == ""), np.where(no_op, null_at, m + at), own)
    op_at = np.where(_flag(name == "(idle)"), idle_at, np.where(no_op, own, m + at))
    # explicit host segments (idle gaps, host work cut off a call) are no event of the trace
    ids = nodes.get_column("id")
    keep_id = ids.to_numpy()[rows] >= 0  # (a null reads NaN: not kept, as the when/then)
    path = pl.DataFrame(
        [
            nodes.get_column("rank")[rows],
            nodes.get_column("step")[rows],
            pl.Series("order", order, pl.Int64),
            tree.gather(ids, np.where(keep_id, rows, -1)),
            pl.Series("on_path_ns", on_path, pl.Int64),
            *(nodes.get_column(c)[rows] for c in ("lane_kind", "lane", "start_ns", "end_ns")),
            pool[name_at].alias("name"),
            pool[op_at].alias("op"),
            nodes.get_column("op_id")[rows],
        ]
    ).rechunk()
    return path


def _ops_table(
    path: pl.DataFrame,
    step_of: np.ndarray,
    step_rows: list[int],
    span_ns: list[int],
) -> pl.DataFrame:
    """Per step and operator of ``path``: the time on the path, the nodes, and the share of the
    step's span, for each row of the steps table (``step_rows``: its step, a position in
    ``span_ns``, the steps in (rank, step) order; a step of several rows repeats its operators),
    by step, then time on the path descending, then name (null first): what the group_by, join
    with the steps and sort gave (a query of fixed cost, most of a small trace's part), grouped
    in NumPy. ``step_of``: each row's step."""
    i64 = np.int64
    op = path.get_column("op")
    code, names = _name_codes(op)
    # each name's rank in the sort's order: by its bytes (Python's order of code points is
    # UTF-8's), null first
    by_name = sorted(range(len(names)), key=lambda k: (names[k] is not None, names[k] or ""))
    name_rank = np.empty(len(names), dtype=i64)
    name_rank[by_name] = np.arange(len(names), dtype=i64)
    # the groups (step, name), in that order, their sums and sizes
    width = max(len(names), 1)
    g, g_inv = dense_unique(step_of.astype(i64) * width + code)
    on_path = path.get_column("on_path_ns").to_numpy().astype(i64)
    total = np.zeros(len(g), dtype=i64)
    np.add.at(total, g_inv, on_path)
    count = np.bincount(g_inv, minlength=len(g)).astype(np.uint32)
    g_step, g_code = g // width, g % width
    g_row = a_row_of_each(g_inv)  # (its rank, step and name)
    # the join: each steps row's operators (a step of no row has none)
    per_step = np.bincount(np.asarray(step_rows, dtype=i64), minlength=len(span_ns))
    rows = np.repeat(np.arange(len(g), dtype=i64), per_step[g_step])
    rows = rows[np.lexsort((name_rank[g_code[rows]], -total[rows], g_step[rows]))]
    step_ns = np.asarray(span_ns, dtype=i64)[g_step[rows]]
    with np.errstate(divide="ignore", invalid="ignore"):  # (a step of no span: inf, NaN)
        share = total[rows].astype(np.float64) / step_ns.astype(np.float64)
    at = g_row[rows]
    if len(rows) <= ROWS_MAX:
        # (a few groups: their rank, step and name picked from the lists, the frame from rows)
        picked = at.tolist()
        keys: list[tuple[str, Any, list[Any]]] = []
        for c, col in (
            ("rank", path.get_column("rank")),
            ("step", path.get_column("step")),
            ("op", op),
        ):
            values = col.to_list()
            keys.append((c, col.dtype, [values[i] for i in picked]))
        return columns_frame(
            [
                *keys,
                ("on_path_ns", pl.Int64, total[rows].tolist()),
                ("nodes", pl.UInt32, count[rows].tolist()),
                ("step_ns", pl.Int64, step_ns.tolist()),
                ("share", pl.Float64, share.tolist()),
            ]
        )
    # (Series of their types: a frame from a dict of columns and a schema was ~0.1 ms more;
    # each group's rank, step and name from a row of it, by indexing)
    return pl.DataFrame(
        [
            path.get_column("rank")[at],
            path.get_column("step")[at],
            op[at],
            series("on_path_ns", total[rows], pl.Int64),
            series("nodes", count[rows], pl.UInt32),
            series("step_ns", step_ns, pl.Int64),
            series("share", share, pl.Float64),
        ]
    )


#: Up to this many names, :func:`_name_codes` codes them in Python (a dict: ~0.1 us a name;
#: the Categorical cast is ~25 us and ~12 ns a name).
_CODES_IN_PYTHON = 256


def _name_codes(op: pl.Series) -> tuple[np.ndarray, list[str | None]]:
    """A code per name of ``op`` (a null one of its own) and each code's name. Which code a
    name gets is no output's business: the ops table orders by the names themselves."""
    if len(op) <= _CODES_IN_PYTHON:
        return codes_in_order(op.to_list())
    # the names' codes as a Categorical (its cast is one small query), a null one of its own
    phys, known = tree.int_values(op.cast(pl.Categorical).to_physical())
    _, code = dense_unique(np.where(known, phys + 1, 0))
    return code, op[a_row_of_each(code)].to_list()


@analysis("critical_path")
def critical_path(profile: Profile, options: Options) -> CriticalPathResult:
    """The critical path of every step, the operators on it and their share of step time.

    The result depends on no row order and no sort's order of ties (module doc, *Order*)."""
    from opscope.analysis.critical_path_device import device_only

    fast = device_only(profile)
    if fast is not None:
        return fast
    nodes, cross, ev = graph(profile)
    i64 = np.int64
    n_id = nodes.get_column("id").to_numpy().astype(i64)
    n_start = nodes.get_column("start_ns").to_numpy().astype(i64)
    n_end = nodes.get_column("end_ns").to_numpy().astype(i64)
    n_wait = _flag(nodes.get_column("is_wait"))
    n_dev = _flag(nodes.get_column("lane_kind") == "device")
    # the steps by (rank, step); per step its nodes by (end, start, id)
    keys, step_rows = _step_rows(nodes)
    # edges belong to the step of their destination (an edge into no node, or from a node of
    # another step, is none)
    src, dst, kind = edges(nodes, profile.events, cross)
    dst_row = positions(n_id, dst)
    into = dst_row >= 0
    path_rows, contribs = paths(
        step_rows,
        (positions(n_id, src)[into], dst_row[into], kind[into]),
        (n_start, n_end, n_wait, n_dev),
    )
    rows = np.concatenate(path_rows) if keys else np.empty(0, i64)
    path = _path_table(
        nodes,
        ev,
        rows,
        np.concatenate([np.arange(len(p), dtype=i64) for p in path_rows])
        if keys
        else np.empty(0, i64),
        np.concatenate(contribs) if keys else np.empty(0, i64),
    )
    return result(profile, keys, step_rows, path_rows, contribs, (n_start, n_end, n_dev), path)


def paths(
    step_rows: list[np.ndarray],
    edge_rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    node: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray],
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each step's path (its nodes' rows, in order) and their contributions: the steps' rows
    (:func:`_step_rows`), the edges (source row, -1 for none; destination row; kind) and the
    nodes' start, end, waits (None: none) and device flags."""
    i64 = np.int64
    n_start, n_end, n_wait, n_dev = node
    src_row, dst_row, kind = edge_rows
    group_of = np.zeros(len(n_start), dtype=i64)
    at_in_step = np.zeros(len(n_start), dtype=i64)  # each node's position in its step's order
    for k, rows in enumerate(step_rows):
        group_of[rows] = k
        at_in_step[rows] = np.arange(len(rows), dtype=i64)
    by_group = np.argsort(group_of[dst_row], kind="stable")
    src_row, dst_row, kind = src_row[by_group], dst_row[by_group], kind[by_group]
    cuts = np.searchsorted(group_of[dst_row], np.arange(len(step_rows) + 1))
    path_rows: list[np.ndarray] = []
    contribs: list[np.ndarray] = []
    for k, rows in enumerate(step_rows):
        e_src = src_row[cuts[k] : cuts[k + 1]]
        at, c, _ = _longest_path_of(
            n_start[rows],
            n_end[rows],
            np.where((e_src >= 0) & (group_of[e_src] == k), at_in_step[e_src], -1),
            at_in_step[dst_row[cuts[k] : cuts[k + 1]]],
            kind[cuts[k] : cuts[k + 1]],
            waits=None if n_wait is None else n_wait[rows],
            device=n_dev[rows],
        )
        path_rows.append(rows[at])
        contribs.append(c)
    return path_rows, contribs


def result(
    profile: Profile,
    keys: list[tuple[Any, Any]],
    step_rows: list[np.ndarray],
    path_rows: list[np.ndarray],
    contribs: list[np.ndarray],
    node: tuple[np.ndarray, np.ndarray, np.ndarray],
    path: pl.DataFrame,
) -> CriticalPathResult:
    """The result of the steps' paths (:func:`paths`) and the path's table: the steps table
    and the ops table. ``node``: the nodes' start, end and device flags."""
    i64 = np.int64
    n_start, n_end, n_dev = node
    # per step: the path's length, its host and device parts, and the span of its nodes
    host_ns, device_ns, span_ns = [], [], []
    for p, c, rows in zip(path_rows, contribs, step_rows, strict=True):
        on_dev = n_dev[p]
        device_ns.append(int(c[on_dev].sum()))
        host_ns.append(int(c[~on_dev].sum()))
        span_ns.append(int(n_end[rows].max() - n_start[rows].min()))
    # each step's ProfilerStep range, as a left join on (rank, step) gives it (a null key
    # matches nothing; a repeated one repeats the row): a dict, not a query
    st = profile.steps
    spans: dict[tuple[int, int], list[Any]] = {}
    for r, s, d in zip(
        st.get_column("rank").to_list(),
        st.get_column("step").to_list(),
        st.get_column("dur_ns").to_list(),
        strict=True,
    ):
        if r is not None and s is not None:
            spans.setdefault((r, s), []).append(d)
    rows_of = [(k, d) for k, key in enumerate(keys) for d in spans.get(key, [None])]
    path_ns = [int(c.sum()) for c in contribs]
    of = [k for k, _ in rows_of]
    steps = columns_frame(
        [
            ("rank", _NODE_SCHEMA["rank"], [keys[k][0] for k in of]),
            ("step", _NODE_SCHEMA["step"], [keys[k][1] for k in of]),
            ("path_ns", pl.Int64, [path_ns[k] for k in of]),
            ("host_ns", pl.Int64, [host_ns[k] for k in of]),
            ("device_ns", pl.Int64, [device_ns[k] for k in of]),
            # a step's device work can finish after its ProfilerStep range on the host
            # closes: the step's time is the span from its first to its last node
            ("step_ns", pl.Int64, [span_ns[k] for k in of]),
            ("host_step_ns", st.get_column("dur_ns").dtype, [d for _, d in rows_of]),
        ]
    )
    ops = _ops_table(
        path,
        np.repeat(np.arange(len(keys), dtype=i64), [len(p) for p in path_rows]),
        of,
        span_ns,
    )
    return CriticalPathResult(path=path, ops=ops, steps=steps)
