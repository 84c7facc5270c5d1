"""The critical path of a profile whose every event is device work (an Ascend rank's
collectives alone, a trace of kernels without host events), from the events' columns.

There is then no host node (no runtime call, no operator: no thread's nodes, no idle piece, no
cross-thread wait), no waiting call (no sync or copy edge, no earlier wait to split) and, with no
``launch_id`` and no ``op_id``, no launch edge and no operator to name: each step's graph is its
nodes and the chains of its lanes (:mod:`opscope.analysis.critical_path_graph`'s device nodes and
lane edges). This builds that graph in NumPy, without the nodes table and the frames the full
graph makes on the way (~1.5 of the 2.1 ms of the analysis on a rank of 15 collectives, all of
it a fixed cost of those frames). The same tables as the full graph, to the bit
(tests/test_critical_path_device.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from opscope.analysis import tree
from opscope.analysis.critical_path_graph import _NODE_SCHEMA, IDLE_OP, LANE
from opscope.analysis.small_frames import ROWS_MAX, columns_frame, repeated, series
from opscope.model import Profile, kinds

if TYPE_CHECKING:
    from opscope.analysis.critical_path import CriticalPathResult


def device_only(profile: Profile) -> CriticalPathResult | None:
    """The critical path of ``profile`` when every event is device work with a rank, start,
    duration and id, no ``launch_id`` and no ``op_id`` (and the shortcuts are on); None
    otherwise (the full graph then)."""
    from opscope.analysis.critical_path import paths, result, step_rows_of

    ev = profile.events
    n = ev.height
    if not tree.SHORTCUTS or not n or not _all_device_work(ev.get_column("kind")):
        return None
    col = {c: ev.get_column(c) for c in _READ}
    if any(col[c].null_count() for c in _KNOWN) or any(
        col[c].null_count() != n for c in ("launch_id", "op_id")
    ):
        return None
    i64 = np.int64
    ids = col["id"].to_numpy().astype(i64, copy=False)
    if not _unique(ids):  # (an edge names its nodes by id: a repeated one is the full graph's)
        return None
    rank = col["rank"].to_numpy().astype(i64)
    # a null step is step -1 (as the graph reads the events' columns)
    step_v, step_ok = tree.int_values(col["step"])
    step = np.where(step_ok, step_v, -1)
    start = col["ts_ns"].to_numpy().astype(i64, copy=False)
    end = start + col["dur_ns"].to_numpy().astype(i64, copy=False)
    # each node's lane: its device (a null: 0) and stream, else its thread, else -1
    device, _ = tree.int_values(col["device"])
    stream, has_stream = tree.int_values(col["stream"])
    tid, has_tid = tree.int_values(col["tid"])
    lane = device * 1_000_000 + np.where(has_stream, stream, np.where(has_tid, tid, -1))
    every = np.ones(n, dtype=bool)
    keys, step_rows = step_rows_of(rank, every, step, every, end, start, ids)
    # the lane edges: each node after the one before it on its lane (rank, step, lane) in the
    # lane's order, by start, then end, then id
    by_lane = np.lexsort((ids, end, start, lane, step, rank))
    same = np.ones(n - 1, dtype=bool)
    for k in (rank, step, lane):
        same &= k[by_lane][1:] == k[by_lane][:-1]
    src, dst = by_lane[:-1][same], by_lane[1:][same]
    path_rows, contribs = paths(
        step_rows, (src, dst, np.full(len(src), LANE, dtype=i64)), (start, end, None, every)
    )
    rows = np.concatenate(path_rows)
    path = _path_table(col, rows, path_rows, contribs, (rank, step, lane, start, end))
    return result(profile, keys, step_rows, path_rows, contribs, (start, end, every), path)


#: The events' columns read.
_READ = ("id", "rank", "step", "ts_ns", "dur_ns", "device", "stream", "tid", "name", "launch_id",
         "op_id")  # fmt: skip
#: The columns that must hold no null.
_KNOWN = ("id", "rank", "ts_ns", "dur_ns")


def _unique(ids: np.ndarray) -> bool:
    """Whether no id repeats (the events' ids are their rows in order: one comparison)."""
    return bool((ids[1:] > ids[:-1]).all()) or len(np.unique(ids)) == len(ids)


def _all_device_work(kind: pl.Series) -> bool:
    """Whether every event's kind is device work (:data:`~opscope.model.kinds.DEVICE_WORK`; a
    null kind is not), from the kind Enum's codes (no query)."""
    if kind.null_count():
        return False
    lo, hi = kind.min(), kind.max()  # (kept with the column: no query)
    if lo == hi:  # one kind (a rank's collectives, a trace's kernels)
        return lo in kinds.DEVICE_WORK
    if not isinstance(kind.dtype, pl.Enum):
        return False
    cats = kind.dtype.categories.to_list()
    work = np.array([c in kinds.DEVICE_WORK for c in cats], dtype=bool)
    return bool(work[kind.to_physical().to_numpy()].all())


def _path_table(
    col: dict[str, pl.Series],
    rows: np.ndarray,
    path_rows: list[np.ndarray],
    contribs: list[np.ndarray],
    node: tuple[np.ndarray, ...],
) -> pl.DataFrame:
    """The path's table (:func:`opscope.analysis.critical_path._path_table`'s columns) of the
    events at ``rows``: no operator, so a node's name is its own (null for "", as a host
    piece's of no operator) and so is its op (:data:`IDLE_OP` for "(idle)")."""
    i64 = np.int64
    rank, step, lane, start, end = (x[rows] for x in node)
    ids = col["id"].to_numpy()[rows]
    m = len(rows)
    names = col["name"]
    # (the names in place when the path is every event in order: one rank's chain of work)
    same = m == len(names) and bool((rows == np.arange(m)).all())
    if m <= ROWS_MAX:
        # a few nodes: the frame from rows (a Series per column was ~5 us each)
        every = names.to_list()
        name_l = every if same else [every[i] for i in rows.tolist()]
        valid = (ids >= 0).tolist()
        return columns_frame(
            [
                ("rank", _NODE_SCHEMA["rank"], rank.tolist()),
                ("step", _NODE_SCHEMA["step"], step.tolist()),
                ("order", pl.Int64, [i for p in path_rows for i in range(len(p))]),
                (
                    "id",
                    pl.Int64,
                    [v if ok else None for v, ok in zip(ids.tolist(), valid, strict=True)],
                ),
                ("on_path_ns", pl.Int64, np.concatenate(contribs).tolist()),
                ("lane_kind", pl.String, ["device"] * m),
                ("lane", pl.Int64, lane.tolist()),
                ("start_ns", pl.Int64, start.tolist()),
                ("end_ns", pl.Int64, end.tolist()),
                ("name", names.dtype, [None if x == "" else x for x in name_l]),
                ("op", names.dtype, [IDLE_OP if x == "(idle)" else x for x in name_l]),
                ("op_id", pl.Int64, [None] * m),
            ]
        )
    name = names if same else names[rows]
    op = name
    empty, idle = (tree.bool_values(name == x)[0] for x in ("", "(idle)"))
    if empty.any() or idle.any():
        pool = pl.concat([name, pl.Series("name", [IDLE_OP, None], pl.String)])
        own = np.arange(m, dtype=i64)
        name = pool[np.where(empty, m + 1, own)]
        op = pool[np.where(idle, m, own)]
    return pl.DataFrame(
        [
            series("rank", rank, _NODE_SCHEMA["rank"]),
            series("step", step, _NODE_SCHEMA["step"]),
            series(
                "order", np.concatenate([np.arange(len(p), dtype=i64) for p in path_rows]), pl.Int64
            ),
            # (an id below 0 is a host piece's: null, as the full table has it)
            series("id", ids, pl.Int64, ids >= 0),
            series("on_path_ns", np.concatenate(contribs), pl.Int64),
            repeated("lane_kind", "device", pl.String, m),
            series("lane", lane, pl.Int64),
            series("start_ns", start, pl.Int64),
            series("end_ns", end, pl.Int64),
            name.alias("name"),
            op.alias("op"),
            repeated("op_id", None, pl.Int64, m),
        ]
    )
