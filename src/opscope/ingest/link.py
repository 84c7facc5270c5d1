"""Linking, once, vectorised: nesting, launches, flows, forward/backward, steps, stacks, memory.

Every function here is pure (DataFrames in, DataFrames out) and works for any reader that fills
the ``events`` columns of :data:`opscope.model.schema.EVENTS` (``id`` 0..n-1, ``rank``, ``kind``,
``name``, ``pid``, ``tid``, ``ts_ns``, ``dur_ns`` and whatever of ``correlation``,
``external_id``, ``seq``, ``fwd_tid`` the source has). The Ascend reader calls the same functions.

Rules (also in docs/loading.md):

- **Nesting** (``parent_id``, ``depth``): per ``(rank, pid, tid)`` (device events: per stream), an
  event's parent is the nearest earlier-starting event on the same track that ends at or after it
  ends (ties: longer first, then step > annotation > python frame > op > runtime). Host tracks mix
  ops, python frames, annotations, steps and runtime calls; device tracks mix kernels and
  ``gpu_annotation`` ranges. Computed by pointer jumping over sorted arrays, no per-event loop.
- **Launch** (``launch_id``): a device event's runtime/driver call with the same
  ``(rank, correlation)``; else the source of its ``ac2g`` flow.
- **Device events**: the device kinds, and any row a reader places on a device (``device`` set:
  Ascend's hardware syncs and HCCL sub-tasks, kind ``other``); see :func:`on_device`.
- **Op** (``op_id``): a host event's innermost enclosing ``cpu_op``; a device event's op as its
  ``async_npu`` flow names it (Ascend), else its launch's op; if none, the ``cpu_op`` with the
  same ``(rank, external_id)``.
- **Backward** (``is_backward``): ``autograd::engine::evaluate_function*`` ops, autograd node ops
  (names ending in ``Backward`` + digits, how 2021 traces record them) and everything nested in
  them; device events inherit from their op.
- **Forward** (``fwd_id``): set on every backward op that carries a sequence number, to the forward
  op its ``fwdbwd`` flow starts at (the flow's key ``(rank, seq, fwd_tid)`` covers both the
  ``evaluate_function`` wrapper and the node op inside it); without flows, the deepest forward op
  with the same ``(rank, seq)`` (and ``fwd_tid`` when both sides have one).
- **Step** (``step``): the ProfilerStep#N (kind ``step``) whose time range holds the event's start,
  per rank; device events take their op's step (their launch's; without either, the step the
  source recorded, else their own time).
- **Stacks** (``stack_id``, ``module``): the innermost of an event's own ``call_stack`` string,
  that of the nearest enclosing event with one, and its nearest enclosing ``python_function``
  frame (interned as a path of frames, ``nn.Module`` frames left out); the module path is the
  chain of enclosing ``nn.Module: X`` frames joined by ``/`` (or the source's "Module
  Hierarchy"). Device events take their op's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from opscope.model import kinds, schema
from opscope.model.usercode import CALL_SITE_PREFIX, is_model_file

IntArray = np.ndarray[Any, np.dtype[np.int64]]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]

#: Extra input columns link_events understands (dropped from its output).
HELPER_COLUMNS: tuple[str, ...] = ("call_stack", "module_hierarchy", "frame_text")

#: Raw flow endpoints as readers produce them (one row per ``s``/``f``/``t`` record).
RAW_FLOWS: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int32,
    "kind": schema.FlowKind,
    "flow_id": pl.Int64,
    "phase": pl.String,  # "s" (start) or "f" / "t" (finish / step)
    "pid": pl.Int64,
    "tid": pl.Int64,
    "ts_ns": pl.Int64,
}

_PRIORITY = {
    "step": 0,
    "gpu_annotation": 0,
    "user_annotation": 1,
    "python_function": 2,
    "cpu_op": 3,
    "runtime": 5,
    "driver": 6,
    "kernel": 7,
    # device work all ranks alike (a collective was "kernel" until classified, after nesting)
    "communication": 7,
    "memcpy": 7,
    "memset": 7,
    "other": 8,
}
#: Kinds that run on a device (their op, step, stack come from the host op that launched them).
_DEVICE_KINDS = kinds.DEVICE_KINDS
_STEP_RE = r"^ProfilerStep#(\d+)$"
_EVAL_FN = "autograd::engine::evaluate_function"
_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")


@dataclass(frozen=True)
class Linked:
    """What :func:`link_events` returns."""

    events: pl.DataFrame
    flows: pl.DataFrame
    stacks: pl.DataFrame
    steps: pl.DataFrame
    #: The events' per-track sort, for :func:`link_memory` on the same events.
    index: TrackIndex | None = None


# --------------------------------------------------------------------------------------------------
# array helpers


def _np(s: pl.Series, fill: int = -1) -> IntArray:
    out: IntArray = np.array(s.fill_null(fill).cast(pl.Int64).to_numpy(), dtype=np.int64)
    return out


def _nullable(name: str, arr: IntArray, dtype: Any = pl.Int64) -> pl.Series:
    """Series from an index array where negative means null."""
    s = pl.Series(name, arr, dtype=pl.Int64)
    # A vectorised mask: scattering millions of nulls is ~20x slower.
    col = pl.col(name)
    return s.to_frame().select(pl.when(col >= 0).then(col).cast(dtype)).to_series()


def _gather(s: pl.Series, idx: IntArray) -> pl.Series:
    """``s[idx]`` with nulls where ``idx < 0``."""
    return s.gather(_nullable("idx", idx))


def kind_codes(kind: pl.Series) -> tuple[IntArray, list[str]]:
    """Each row's kind (an Enum column) as its code in the Enum's categories, returned with it;
    a null kind: ``len(categories)``."""
    cats: list[str] = kind.dtype.categories.to_list()  # type: ignore[attr-defined]
    codes: IntArray = kind.to_physical().fill_null(len(cats)).cast(pl.Int64).to_numpy()
    return codes, cats


def kind_mask(events: pl.DataFrame, *kinds: str) -> BoolArray:
    """``events.kind`` in ``kinds`` as a numpy mask (null kinds: False)."""
    kind = events.get_column("kind")
    if isinstance(kind.dtype, pl.Enum):
        # Through the Enum's codes: no string per row (this runs a dozen times per load).
        codes, cats = kind_codes(kind)
        table = np.array([c in kinds for c in cats] + [False], dtype=bool)
        out: BoolArray = table[codes]
        return out
    return kind.cast(pl.String).is_in(list(kinds)).fill_null(False).to_numpy()


def on_device(events: pl.DataFrame) -> BoolArray:
    """Rows that run on a device: the device kinds, and any row a reader placed on a device
    (``device`` set: Ascend's hardware syncs and HCCL sub-tasks, kind ``other``). Kineto sets
    ``device`` on the device kinds only, so there this is the kind test."""
    mask = kind_mask(events, *_DEVICE_KINDS)
    if "device" in events.columns:
        mask = mask | events.get_column("device").is_not_null().to_numpy()
    return mask


def _priority(events: pl.DataFrame) -> pl.Series:
    """:data:`_PRIORITY` of each event's kind (unknown and null kinds: 8)."""
    kind = events.get_column("kind")
    if isinstance(kind.dtype, pl.Enum):
        codes, cats = kind_codes(kind)
        table = np.array([_PRIORITY.get(c, 8) for c in cats] + [8], dtype=np.int64)
        return pl.Series("prio", table[codes], dtype=pl.Int64)
    return kind.cast(pl.String).replace_strict(_PRIORITY, default=8, return_dtype=pl.Int64)


def nearest_ancestor(parent: IntArray, mask: BoolArray, *, include_self: bool = False) -> IntArray:
    """For each row, the nearest ancestor (by ``parent`` index, -1 = none) where ``mask`` is True.

    One vectorised step up the tree per round, only over rows still climbing.
    """
    n = parent.shape[0]
    res = np.full(n, -1, dtype=np.int64)
    if include_self:
        res[mask] = np.nonzero(mask)[0]
        cur = np.where(mask, -1, parent)
    else:
        cur = parent.copy()
    idx = np.nonzero(cur >= 0)[0]
    c = cur[idx]
    while idx.size:
        hit = mask[c]
        res[idx[hit]] = c[hit]
        keep = ~hit
        idx = idx[keep]
        c = parent[c[keep]]
        alive = c >= 0
        idx = idx[alive]
        c = c[alive]
    return res


def _depths(parent: IntArray) -> IntArray:
    """Distance to the root for every row (list ranking by pointer doubling)."""
    d = (parent >= 0).astype(np.int64)
    j = parent.copy()
    act = np.nonzero(j >= 0)[0]
    while act.size:  # only rows whose pointer has not reached the root yet
        jj = j[act]
        # every read before any write: one synchronous doubling step
        nd = d[act] + d[jj]
        nj = j[jj]
        d[act] = nd
        j[act] = nj
        act = act[nj >= 0]
    return d


# --------------------------------------------------------------------------------------------------
# nesting


@dataclass(frozen=True)
class TrackIndex:
    """Events sorted per track, built once (by :func:`nest_indexed`) and shared by every
    :func:`enclosing` call on the same events (flows of each kind and phase, memory rows)."""

    spans: dict[tuple[Any, ...], tuple[int, int]]  # (rank, pid, tid) -> rows [lo, hi) below
    ts: IntArray  # start per sorted row
    ids: IntArray  # event id per sorted row
    parent: IntArray  # parent id per event id (-1: none)
    end: IntArray  # end per event id


def _track_order(events: pl.DataFrame) -> pl.DataFrame:
    """``rank, pid, tid, ts_ns, end, i`` (``i``: row number) sorted by track, then start, longer
    first, then :data:`_PRIORITY`, then id: the order in which a parent comes before all it holds.
    """
    k = events.select(
        pl.col("rank").fill_null(0),
        pl.col("pid"),
        pl.col("tid"),
        pl.col("ts_ns"),
        (pl.col("ts_ns") + pl.col("dur_ns").fill_null(0)).alias("end"),
        pl.lit(_priority(events)).alias("prio"),
        pl.col("id"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("i"),
    )
    packed = _packed_keys(k)
    if packed is not None:
        # Three integer keys sort ~3x faster than the seven they stand for.
        return k.with_columns(packed).sort(["k1", "k2", "id"]).select(_ORDER_OUT)
    return k.sort(
        ["rank", "pid", "tid", "ts_ns", "end", "prio", "id"],
        descending=[False, False, False, False, True, False, False],
    ).select(_ORDER_OUT)


_ORDER_OUT = ["rank", "pid", "tid", "ts_ns", "end", "i"]


def _packed_keys(k: pl.DataFrame) -> list[pl.Series] | None:
    """``k1`` = (track number, start) and ``k2`` = (end descending, priority) packed into one
    Int64 each, ordered as the keys they pack; None where the value ranges do not fit."""
    if k.height == 0 or k.get_column("ts_ns").null_count():
        return None
    lo_ts, hi_ts = k.get_column("ts_ns").min(), k.get_column("ts_ns").max()
    lo_end, hi_end = k.get_column("end").min(), k.get_column("end").max()
    assert isinstance(lo_ts, int) and isinstance(hi_ts, int)
    assert isinstance(lo_end, int) and isinstance(hi_end, int)
    # Track numbers in (rank, pid, tid) order, nulls first as in the plain sort.
    codes = [_dense_codes(k.get_column(c)) for c in ("rank", "pid", "tid")]
    n_tracks = codes[0][1] * codes[1][1] * codes[2][1]
    ts_bits = (hi_ts - lo_ts).bit_length()
    if n_tracks.bit_length() + ts_bits > 62 or (hi_end - lo_end).bit_length() + 4 > 62:
        return None
    code = (codes[0][0] * codes[1][1] + codes[1][0]) * codes[2][1] + codes[2][0]
    packed = k.select(
        (pl.lit(pl.Series(code)) * (1 << ts_bits) + (pl.col("ts_ns") - lo_ts)).alias("k1"),
        ((hi_end - pl.col("end")) * 16 + pl.col("prio")).alias("k2"),
    )
    return packed.get_columns()


def _dense_codes(s: pl.Series) -> tuple[IntArray, int]:
    """Codes numbering the distinct values of ``s`` in sort order, null first (code 0), and how
    many codes there are. Binary search over the few distinct values: no hashing per row."""
    vals = s.drop_nulls().unique().sort().to_numpy()
    code: IntArray = np.searchsorted(vals, s.fill_null(0).to_numpy()).astype(np.int64) + 1
    code[s.is_null().to_numpy()] = 0
    return code, len(vals) + 1


def _track_spans(k: pl.DataFrame) -> tuple[dict[tuple[Any, ...], tuple[int, int]], BoolArray]:
    """Row ranges of each track in the sorted ``k`` and, per row, whether the previous row is on
    the same track (null pid/tid compare equal to each other)."""
    same_col = (
        pl.col("rank").eq_missing(pl.col("rank").shift(1))
        & pl.col("pid").eq_missing(pl.col("pid").shift(1))
        & pl.col("tid").eq_missing(pl.col("tid").shift(1))
    ).fill_null(False)
    same: BoolArray = k.select(same_col).to_series().to_numpy()
    lo = np.nonzero(~same)[0]
    hi = np.append(lo[1:], k.height)
    heads = k.select("rank", "pid", "tid")[lo]
    spans = {
        (r, p, t): (int(a), int(b))
        for (r, p, t), a, b in zip(heads.iter_rows(), lo, hi, strict=True)  # one per track
    }
    return spans, same


def nest(events: pl.DataFrame) -> pl.DataFrame:
    """Fill ``parent_id`` and ``depth`` (see the module doc). ``events.id`` must be 0..n-1."""
    return nest_indexed(events)[0]


def nest_indexed(events: pl.DataFrame) -> tuple[pl.DataFrame, TrackIndex]:
    """:func:`nest`, plus the :class:`TrackIndex` of the result (from the same sort)."""
    n = events.height
    if n == 0:
        out = events.with_columns(
            pl.lit(None, pl.Int64).alias("parent_id"), pl.lit(None, pl.Int32).alias("depth")
        )
        empty = np.zeros(0, dtype=np.int64)
        return out, TrackIndex({}, empty, empty, empty, empty)
    k = _track_order(events)
    order = _np(k.get_column("i"))  # row numbers (== ids where ids are 0..n-1 in row order)
    end = _np(k.get_column("end"))
    spans, same = _track_spans(k)
    ts_sorted = _np(k.get_column("ts_ns"))
    del k
    cand = np.where(same, np.arange(n, dtype=np.int64) - 1, -1)
    # Pointer jumping: move each candidate to its own candidate until it ends at/after us.
    idx = np.nonzero(cand >= 0)[0]
    idx = idx[end[cand[idx]] < end[idx]]
    while idx.size:
        cand[idx] = cand[cand[idx]]
        c = cand[idx]
        idx = idx[(c >= 0)]
        idx = idx[end[cand[idx]] < end[idx]]
    parent_sorted = cand
    depth_sorted = _depths(parent_sorted)
    # Back to original row order; parents as event ids.
    parent_ids = np.where(parent_sorted >= 0, order[np.maximum(parent_sorted, 0)], -1)
    parent = np.empty(n, dtype=np.int64)
    depth = np.empty(n, dtype=np.int64)
    parent[order] = parent_ids
    depth[order] = depth_sorted
    end_by_id = np.empty(n, dtype=np.int64)
    end_by_id[order] = end
    index = TrackIndex(spans=spans, ts=ts_sorted, ids=order, parent=parent, end=end_by_id)
    out = events.with_columns(
        _nullable("parent_id", parent), pl.Series("depth", depth, dtype=pl.Int32)
    )
    return out, index


def track_index(events: pl.DataFrame) -> TrackIndex:
    """The :class:`TrackIndex` of ``events`` (which must have been through :func:`nest`)."""
    k = _track_order(events)
    spans, _ = _track_spans(k)
    ts = _np(events.get_column("ts_ns"))
    return TrackIndex(
        spans=spans,
        ts=_np(k.get_column("ts_ns")),
        ids=_np(k.get_column("i")),  # row numbers == ids (0..n-1 in row order), as nest_indexed
        parent=_np(events.get_column("parent_id")),
        end=ts + _np(events.get_column("dur_ns"), 0),
    )


def enclosing(
    events: pl.DataFrame,
    points: pl.DataFrame,
    mask: BoolArray,
    *,
    index: TrackIndex | None = None,
) -> IntArray:
    """For each point ``(rank, pid, tid, ts_ns)``, the innermost event on that track holding it.

    Only events where ``mask`` is True qualify. ``events`` must have been through :func:`nest`;
    ``index`` (from :func:`track_index` on the same events) saves re-sorting them per call.
    Returns event ids (-1 where none). The latest-starting event at or before the point is tried
    first, so a point at an event's exact start binds to that event.
    """
    m = points.height
    out = np.full(m, -1, dtype=np.int64)
    if m == 0 or events.height == 0:
        return out
    if index is None:
        index = track_index(events)
    parent, end = index.parent, index.end
    pts = points.select(
        pl.col("rank").fill_null(0), pl.col("pid"), pl.col("tid"), pl.col("ts_ns")
    ).with_row_index("i")
    for key, grp in pts.group_by(["rank", "pid", "tid"]):
        span = index.spans.get(tuple(key))
        if span is None or span[1] <= span[0]:
            continue
        gts = index.ts[span[0] : span[1]]
        gid = index.ids[span[0] : span[1]]
        pt = _np(grp.get_column("ts_ns"))
        pi = _np(grp.get_column("i"))
        pos = np.searchsorted(gts, pt, side="right") - 1
        cand = np.where(pos >= 0, gid[np.maximum(pos, 0)], -1)
        active = np.nonzero(cand >= 0)[0]
        res = np.full(pt.shape[0], -1, dtype=np.int64)
        while active.size:
            c = cand[active]
            ok = mask[c] & (end[c] >= pt[active])
            res[active[ok]] = c[ok]
            active = active[~ok]
            cand[active] = parent[cand[active]]
            active = active[cand[active] >= 0]
        out[pi] = res
    return out


# --------------------------------------------------------------------------------------------------
# flows, launches, ops


def resolve_flows(
    events: pl.DataFrame, raw_flows: pl.DataFrame, *, index: TrackIndex | None = None
) -> pl.DataFrame:
    """Bind each flow's start and finish records to events; returns the FLOWS table.

    ``ac2g`` starts bind to runtime/driver calls and finishes to device events; ``fwdbwd`` and
    ``async_npu`` ends bind to host ops; every endpoint binds to the innermost qualifying event on
    its track holding its time (the record's own ``ts`` is the event's start in Kineto). Flows with
    an unbound end are dropped (counted by the caller as oddities). ``index``: as for
    :func:`enclosing`.
    """
    if raw_flows.height == 0 or events.height == 0:
        return schema.empty("flows")
    host_op = kind_mask(events, "cpu_op", "user_annotation", "step")
    launch = kind_mask(events, "runtime", "driver")
    device = kind_mask(events, *kinds.DEVICE_WORK)
    anyk = np.ones(events.height, dtype=bool)
    raw = raw_flows.with_columns(pl.col("kind").cast(pl.String).alias("k"))
    parts = []
    if index is None:
        index = track_index(events)
    for (k, phase), grp in raw.group_by(["k", pl.col("phase") == "s"]):
        if k == "ac2g":
            mask = launch if phase else device
        elif k in ("fwdbwd", "async_npu"):
            mask = host_op if k == "fwdbwd" or phase else (host_op | device)
        else:
            mask = anyk
        bound = enclosing(events, grp, mask, index=index)
        parts.append(
            grp.with_columns(_nullable("event_id", bound), pl.lit(phase).alias("is_start"))
        )
    return schema.conform("flows", _pair_flows(pl.concat(parts)))


def _pair_flows(ends: pl.DataFrame) -> pl.DataFrame:
    """One row per flow with a bound start and end (the first of each), sorted by
    ``(rank, kind, flow_id)``.

    Per ``(rank, kind)`` (a handful), so joins and sorts run on the Int64 ``flow_id`` alone:
    three-column keys are row-encoded, several times slower at a million flows.
    """
    keys = ends.select("rank", "kind").unique().sort(["rank", "kind"])
    out = []
    for rk, kd in keys.iter_rows():  # one per (rank, flow kind)
        part = ends.filter(
            pl.col("rank").eq_missing(pl.lit(rk, ends.schema["rank"]))
            & pl.col("kind").eq_missing(pl.lit(kd, ends.schema["kind"]))
        )
        src = (
            part.filter(pl.col("is_start"))
            .select("rank", "kind", "flow_id", pl.col("event_id").alias("src_id"))
            .unique("flow_id", keep="first")
        )
        dst = (
            part.filter(~pl.col("is_start"))
            .select("flow_id", pl.col("event_id").alias("dst_id"))
            .unique("flow_id", keep="first")
        )
        pairs = src.join(dst, on="flow_id", how="inner", nulls_equal=True)
        pairs = pairs.filter(pl.col("src_id").is_not_null() & pl.col("dst_id").is_not_null())
        out.append(pairs.sort("flow_id"))
    return pl.concat(out) if out else schema.empty("flows")


def link_launches(events: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Fill ``launch_id`` and ``op_id`` (see the module doc). Needs :func:`nest` first."""
    n = events.height
    parent = _np(events.get_column("parent_id"))
    is_op = kind_mask(events, "cpu_op")
    is_launch = kind_mask(events, "runtime", "driver")
    is_dev = on_device(events)
    # op of host events: innermost enclosing cpu_op (runtime calls, python frames inside ops...)
    op = nearest_ancestor(parent, is_op)
    op[is_op] = -1
    # launches by correlation
    ev = events.select("id", "rank", "correlation")
    launches = (
        ev.filter(pl.Series(is_launch) & pl.col("correlation").is_not_null())
        .unique(["rank", "correlation"], keep="first")  # joined on, so any row order
        .select("rank", "correlation", pl.col("id").alias("launch"))
    )
    dev = ev.filter(pl.Series(is_dev)).join(launches, on=["rank", "correlation"], how="left")
    launch = np.full(n, -1, dtype=np.int64)
    did = _np(dev.get_column("id"))
    launch[did] = _np(dev.get_column("launch"))
    # flow fallback (ac2g without a correlation arg)
    if flows.height:
        ac = flows.filter(pl.col("kind") == "ac2g")
        dst = _np(ac.get_column("dst_id"))
        src = _np(ac.get_column("src_id"))
        ok = (dst >= 0) & (src >= 0)
        dst, src = dst[ok], src[ok]
        need = (launch[dst] < 0) & is_launch[src]
        launch[dst[need]] = src[need]
    has_l = launch >= 0
    op[has_l] = op[launch[has_l]]
    # A device task's own op -> task flow (Ascend's async_npu) names its op outright.
    if flows.height:
        an = flows.filter(pl.col("kind") == "async_npu").unique("dst_id", keep="first")
        dst = _np(an.get_column("dst_id"))
        src = _np(an.get_column("src_id"))
        ok = (dst >= 0) & (src >= 0)
        ok[ok] = is_dev[dst[ok]]
        op[dst[ok]] = src[ok]
    # External id fallback for launches and device events without an enclosing op
    need = (op < 0) & (is_launch | is_dev)
    if need.any():
        # Narrow first: filtering all of events would copy every column of the kept rows.
        xev = events.select("id", "rank", "external_id")
        ops = (
            xev.filter(pl.Series(is_op) & pl.col("external_id").is_not_null())
            .unique(["rank", "external_id"], keep="first")
            .select("rank", "external_id", pl.col("id").alias("xop"))
        )
        miss = xev.filter(pl.Series(need))
        miss = miss.join(ops, on=["rank", "external_id"], how="left")
        mid = _np(miss.get_column("id"))
        op[mid] = _np(miss.get_column("xop"))
    return events.with_columns(_nullable("launch_id", launch), _nullable("op_id", op))


def classify_communication(events: pl.DataFrame) -> pl.DataFrame:
    """Set kind ``communication`` on the ``kernel`` rows that are communication.

    A kernel is communication when its name says so
    (:data:`~opscope.model.kinds.COMM_KERNEL_PATTERN`) or when a collective launched it: the
    innermost ``cpu_op`` or ``user_annotation`` around its launch, or its op, is named like
    :data:`~opscope.model.kinds.COMM_OP_PATTERN` (``record_param_comms``, ``c10d::*``,
    ``nccl:*``, ``hccl*``). Innermost only: a copy kernel that ``c10d::allgather_`` launches
    through a nested ``aten::copy_`` is a copy, not communication. Copies and fills keep their
    kind. Needs :func:`nest` and :func:`link_launches`.
    """
    is_kernel = kind_mask(events, *kinds.COMPUTE_KINDS)
    if not is_kernel.any():
        return events
    name = events.get_column("name")
    # Per distinct name: kernel and op names repeat every step.
    knames = name.filter(pl.Series(is_kernel)).unique().drop_nulls()
    comm_k = knames.filter(
        knames.to_frame().select(kinds.is_comm_kernel_name(pl.col("name"))).to_series()
    )
    comm = is_kernel & name.is_in(comm_k.implode()).fill_null(False).to_numpy()
    is_range = kind_mask(events, "cpu_op", "user_annotation")
    onames = name.filter(pl.Series(is_range)).unique().drop_nulls()
    comm_o = onames.filter(
        onames.to_frame().select(kinds.is_comm_op_name(pl.col("name"))).to_series()
    )
    if comm_o.len():
        comm_op = is_range & name.is_in(comm_o.implode()).fill_null(False).to_numpy()
        inner = nearest_ancestor(_np(events.get_column("parent_id")), is_range)
        launch = _np(events.get_column("launch_id"))
        op = _np(events.get_column("op_id"))
        by_launch = np.zeros(events.height, dtype=bool)
        has = is_kernel & (launch >= 0)
        rng = inner[launch[has]]
        by_launch[np.nonzero(has)[0]] = (rng >= 0) & comm_op[np.maximum(rng, 0)]
        has_op = is_kernel & (op >= 0)
        by_launch[has_op] |= comm_op[op[has_op]]
        comm |= is_kernel & by_launch
    if not comm.any():
        return events
    return events.with_columns(
        pl.when(pl.Series(comm))
        .then(pl.lit(kinds.COMMUNICATION, schema.EventKind))
        .otherwise(pl.col("kind").cast(schema.EventKind))
        .alias("kind")
    )


def mark_backward(events: pl.DataFrame) -> pl.DataFrame:
    """Fill ``is_backward`` (needs :func:`nest` and :func:`link_launches`)."""
    name = events.get_column("name")
    # evaluate_function wraps each node in current traces; 2021 traces record the node alone
    # ("AddmmBackward"), so a node name is a root too.
    root = (name.str.starts_with(_EVAL_FN) | name.str.contains(r"Backward\d*$")).fill_null(
        False
    ).to_numpy() & kind_mask(events, "cpu_op")
    parent = _np(events.get_column("parent_id"))
    anc = nearest_ancestor(parent, root, include_self=True)
    bwd = anc >= 0
    op = _np(events.get_column("op_id"))
    has = op >= 0
    bwd[has] = bwd[has] | bwd[op[has]]
    return events.with_columns(pl.Series("is_backward", bwd, dtype=pl.Boolean))


def link_fwd_bwd(events: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Fill ``fwd_id`` on backward ops (needs :func:`mark_backward`; see the module doc)."""
    n = events.height
    fwd = np.full(n, -1, dtype=np.int64)
    # A negative sequence number is none: torch_npu writes -1 on every op without one (as
    # PyTorch's own "no sequence number"), and pairing those would tie every such backward op
    # to one forward op.
    ops = events.select(
        "id", "rank", "kind", "seq", "fwd_tid", "is_backward", "depth", "ts_ns"
    ).filter((pl.col("kind") == "cpu_op") & (pl.col("seq") >= 0))
    bwd = ops.filter(pl.col("is_backward"))
    fw = ops.filter(~pl.col("is_backward"))
    if flows.height:
        fb = flows.filter(pl.col("kind") == "fwdbwd").select("src_id", "dst_id")
        if fb.height:
            src = _np(fb.get_column("src_id"))
            dst = _np(fb.get_column("dst_id"))
            fwd[dst] = src
            keyed = (
                fb.join(
                    events.select("id", "rank", "seq", "fwd_tid"), left_on="dst_id", right_on="id"
                )
                .filter(pl.col("seq") >= 0)
                .select("rank", "seq", pl.col("fwd_tid").fill_null(-1), "src_id")
                .unique(["rank", "seq", "fwd_tid"], keep="first")
            )
            hit = bwd.with_columns(pl.col("fwd_tid").fill_null(-1)).join(
                keyed, on=["rank", "seq", "fwd_tid"], how="inner"
            )
            hid = _np(hit.get_column("id"))
            sel = fwd[hid] < 0
            fwd[hid[sel]] = _np(hit.get_column("src_id"))[sel]
    # Fallback by sequence number for backward ops still unlinked.
    todo = bwd.filter(pl.Series(fwd[_np(bwd.get_column("id"))] < 0))
    if todo.height and fw.height:
        cand = fw.sort(["depth", "ts_ns"], descending=[True, True])
        exact = (
            cand.filter(pl.col("fwd_tid").is_not_null())
            .unique(["rank", "seq", "fwd_tid"], keep="first")
            .select("rank", "seq", "fwd_tid", pl.col("id").alias("f1"))
        )
        loose = cand.unique(["rank", "seq"], keep="first").select(
            "rank", "seq", pl.col("id").alias("f2")
        )
        t = todo.join(exact, on=["rank", "seq", "fwd_tid"], how="left").join(
            loose, on=["rank", "seq"], how="left"
        )
        tid_ = _np(t.get_column("id"))
        fwd[tid_] = _np(t.select(pl.coalesce("f1", "f2")).to_series())
    return events.with_columns(_nullable("fwd_id", fwd))


# --------------------------------------------------------------------------------------------------
# steps


def step_numbers(events: pl.DataFrame) -> pl.DataFrame:
    """The STEPS table from ``kind == "step"`` events named ``ProfilerStep#N``."""
    st = (
        events.filter(pl.col("kind") == "step")
        .select(
            "rank",
            pl.col("name").str.extract(_STEP_RE, 1).cast(pl.Int32, strict=False).alias("step"),
            "ts_ns",
            "dur_ns",
        )
        .filter(pl.col("step").is_not_null())
    )
    st = st.sort(["rank", "ts_ns"]).unique(["rank", "step"], keep="first", maintain_order=True)
    return schema.conform("steps", st)


def step_of_times(steps: pl.DataFrame, rank: pl.Series, ts: pl.Series) -> pl.Series:
    """The step holding each ``(rank, ts)`` (start <= ts < end), null where none."""
    out = np.full(ts.len(), -1, dtype=np.int64)
    if steps.height and ts.len():
        r = _np(rank, 0)
        t = _np(ts, np.iinfo(np.int64).min)
        for (rk,), grp in steps.sort("ts_ns").group_by(["rank"]):
            s0 = _np(grp.get_column("ts_ns"))
            s1 = s0 + _np(grp.get_column("dur_ns"), 0)
            num = _np(grp.get_column("step"))
            sel = np.nonzero(r == int(rk or 0))[0]  # type: ignore[call-overload]
            pos = np.searchsorted(s0, t[sel], side="right") - 1
            ok = (pos >= 0) & (t[sel] < s1[np.maximum(pos, 0)])
            out[sel[ok]] = num[pos[ok]]
    return _nullable("step", out, pl.Int32)


def assign_steps(events: pl.DataFrame, steps: pl.DataFrame, *, queued: bool = True) -> pl.DataFrame:
    """Fill ``step`` (needs :func:`link_launches`): the one rule, for every reader.

    Host events: the step holding their start. Device events: their op's step, else their
    launch's; without either, the step the source recorded for them (Ascend's
    ``kernel_details.csv`` "Step Id"; Kineto records none), else the step holding their start,
    except :func:`queued_before_profiling` work, which is no profiled step's. ``queued=False``
    leaves that exception out (the windowed linker applies it once it has seen every window:
    it depends on the first launched work of the whole trace).
    """
    st = _np(step_of_times(steps, events.get_column("rank"), events.get_column("ts_ns")))
    is_dev = on_device(events)
    op = _np(events.get_column("op_id"))
    la = _np(events.get_column("launch_id"))
    via = np.where(op >= 0, op, la)
    own = _np(events.get_column("step")) if "step" in events.columns else np.full(len(st), -1)
    keep = is_dev & (via < 0) & (own >= 0)
    st[keep] = own[keep]
    if queued:
        early = queued_before_profiling(events, is_dev, via) & (own < 0)
        st[early] = -1
    use = is_dev & (via >= 0)
    st[use] = st[via[use]]
    return events.with_columns(_nullable("step", st, pl.Int32))


# Host calls that put work on a device queue (CUDA/HIP kernel launches, async copies and fills).
_LAUNCH_CALL = r"(?i)launch|memcpy|memset"


def _int_column(s: pl.Series) -> tuple[IntArray, BoolArray]:
    """An integer column's values (-1 at nulls) and where it is null, without :func:`_np`'s
    ``fill_null`` (a query: ~0.1 ms each, most of :func:`queued_before_profiling` on a small
    trace). With nulls, through float64 (NaN at a null), only where every value is exact in it."""
    if not s.null_count():
        return np.asarray(s.to_numpy(), dtype=np.int64), np.zeros(s.len(), dtype=bool)
    v = s.to_numpy()
    null = np.isnan(v)
    if v.dtype == np.float64 and not (np.abs(v[~null]) >= 2.0**53).any():
        return np.where(null, -1, v).astype(np.int64), null
    return _np(s), null


def _true(mask: pl.Series) -> BoolArray:
    """A boolean Series as a mask, null as False (``fill_null`` only where there is one)."""
    out: BoolArray = (mask.fill_null(False) if mask.null_count() else mask).to_numpy()
    return out


def queued_before_profiling(
    events: pl.DataFrame, is_dev: BoolArray | None = None, via: IntArray | None = None
) -> BoolArray:
    """Device work with no launch in the trace that ran before the first device work launched
    in it, per (rank, device): work queued before the profiler's active window (the warm-up
    step's kernels, which Kineto keeps while it drops their launches; a device that lags the
    host runs them well inside the first profiled step's time range). Charging them to that
    step by time would mix two steps' kernels; they belong to no profiled step."""
    if is_dev is None:
        is_dev = on_device(events)
    la, _ = _int_column(events.get_column("launch_id"))
    if via is None:
        op, _ = _int_column(events.get_column("op_id"))
        via = np.where(op >= 0, op, la)
    launched = is_dev & (via >= 0)
    orphan = is_dev & (via < 0)
    if not launched.any() or not orphan.any():
        return np.zeros(events.height, dtype=bool)
    # NumPy on the columns, not Polars queries: this runs at load and again in the doctor, and
    # a query's fixed cost dominates on small traces. A null rank or start matches no group
    # (as a join on it would not), so such rows are never "before".
    (rank, rank_null), (ts, ts_null) = (
        _int_column(events.get_column(c)) for c in ("rank", "ts_ns")
    )
    known = ~(rank_null | ts_null)
    dev, _ = _int_column(events.get_column("device"))
    pairs, group = np.unique(np.stack([rank, dev], axis=1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    first = np.full(len(pairs), np.iinfo(np.int64).max, dtype=np.int64)
    has = np.zeros(len(pairs), dtype=bool)
    sel = launched & known
    np.minimum.at(first, group[sel], ts[sel])
    has[group[sel]] = True
    before = known & has[group] & (ts < first[group])
    cand = orphan & before
    if not cand.any():
        return cand
    # Launch calls in the trace whose device work is missing, issued before the first linked
    # work ran, may be these events' own launches with their correlation lost: when there are
    # as many as the events, they are not known to predate profiling. (Fewer cannot explain
    # them: a recorded H200 run has 4 memsets per step that leave no device record, beside
    # 266 warm-up kernels.)
    ranks, rank_group = np.unique(pairs[:, 0], return_inverse=True)
    rank_first = np.full(len(ranks), np.iinfo(np.int64).max, dtype=np.int64)
    rank_has = np.zeros(len(ranks), dtype=bool)
    np.minimum.at(rank_first, rank_group[has], first[has])
    rank_has[rank_group[has]] = True
    used = np.unique(la[is_dev & (la >= 0)])
    pos = np.searchsorted(ranks, rank)
    pos_ok = pos < len(ranks)
    pos_ok[pos_ok] = ranks[pos[pos_ok]] == rank[pos_ok]
    pos = np.where(pos_ok, pos, 0)
    runtime = events.get_column("kind") == "runtime"
    maybe = (
        _true(runtime)
        & ~_int_column(events.get_column("correlation"))[1]
        & known
        & pos_ok
        & rank_has[pos]
        & (ts < rank_first[pos])
    )
    maybe &= ~np.isin(np.arange(events.height), used)
    rows = np.flatnonzero(maybe)
    if len(rows):
        hit = events.get_column("name").gather(rows).str.contains(_LAUNCH_CALL)
        rows = rows[_true(hit)]
    n_lost = np.bincount(pos[rows], minlength=len(ranks))
    n_cand = np.bincount(pos[cand], minlength=len(ranks))
    doubtful = ranks[(n_cand > 0) & (n_lost >= n_cand)]
    if len(doubtful):
        cand &= ~np.isin(rank, doubtful)
    return cand


# --------------------------------------------------------------------------------------------------
# stacks and modules


def is_user_file(file: str | None) -> bool:
    """True for the model's code (:func:`opscope.model.usercode.is_model_file`, the one rule)."""
    return is_model_file(file)


def call_site_frames(events: pl.DataFrame) -> pl.DataFrame:
    """The recorder's call-site annotations (``opscope.line: model.py(30): forward``, written
    as host ops or annotations by :mod:`opscope.record.callsites`) as Python frames named
    ``model.py(30): forward``: the innermost frame of the ops they enclose, so the stack of
    each op ends at the line that called it."""
    if events.height == 0:
        return events
    name = pl.col("name").fill_null("")
    is_site = name.str.starts_with(CALL_SITE_PREFIX) & pl.col("kind").cast(pl.String).is_in(
        ["cpu_op", "user_annotation"]
    )
    if not events.select(is_site.any()).item():
        return events
    return events.with_columns(
        pl.when(is_site)
        .then(pl.lit("python_function"))
        .otherwise(pl.col("kind").cast(pl.String))
        .cast(events.schema["kind"])
        .alias("kind"),
        pl.when(is_site)
        .then(name.str.strip_prefix(CALL_SITE_PREFIX))
        .otherwise(pl.col("name"))
        .alias("name"),
    )


def parse_frame(text: str) -> tuple[str | None, int | None, str]:
    """``"file.py(12): func"`` -> ``("file.py", 12, "func")``; a built-in -> ``("<built-in>", None,
    text)``."""
    t = text.strip()
    m = _FRAME_RE.match(t)
    if m:
        return m.group(1), int(m.group(2)), m.group(3)
    if t.startswith("<built-in") or t.startswith("<method"):
        return "<built-in>", None, t
    return None, None, t


def _frames_table(texts: list[str]) -> pl.DataFrame:
    parsed = [parse_frame(t) for t in texts]
    return pl.DataFrame(
        {
            "text": texts,
            "file": [p[0] for p in parsed],
            "line": [p[1] for p in parsed],
            "function": [p[2] for p in parsed],
            "is_user": [is_user_file(p[0]) for p in parsed],
        },
        schema={
            "text": pl.String,
            "file": pl.String,
            "line": pl.Int32,
            "function": pl.String,
            "is_user": pl.Boolean,
        },
    )


def build_stacks(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fill ``stack_id`` and ``module``; return ``(events, stacks)`` (needs linking first).

    Python frames are interned by path: two calls through the same chain of frames share a
    stack id. A ``call_stack`` column (``"file(line): func;..."``, innermost first) is interned
    the same way for the events that carry it. A ``frame_text`` column, where a reader gives
    one, is the text a frame is interned by instead of its name (Ascend: without the object
    address of a built-in method, which differs from run to run).
    An event's stack is the innermost of: its own call stack, the call stack of the nearest
    enclosing event that has one, its nearest enclosing frame.
    """
    events, frame_levels, cs_nodes = stack_nodes(events)
    return events, stack_rows(frame_levels + cs_nodes)


def stack_nodes(
    events: pl.DataFrame,
) -> tuple[pl.DataFrame, list[pl.DataFrame], list[pl.DataFrame]]:
    """:func:`build_stacks` before the stacks table is made: ``(events, frame levels, call-stack
    nodes)``, each node frame ``sid, pstack, text``. Stack ids are given level by level (every
    depth-0 frame path in order of first appearance, then depth 1...), then the call-stack
    strings' nodes in order of first appearance (the windowed linker renumbers the nodes of
    each window in that order: :mod:`opscope.ingest.window_link`)."""
    n = events.height
    name = events.get_column("name").fill_null("")
    parent = _np(events.get_column("parent_id"))
    is_py = kind_mask(events, "python_function")
    is_mod = is_py & name.str.starts_with("nn.Module: ").to_numpy()
    is_frame = is_py & ~is_mod
    stack = np.full(n, -1, dtype=np.int64)
    nodes: list[pl.DataFrame] = []  # stack_id, parent_stack, text: one frame per level
    cs_nodes: list[pl.DataFrame] = []  # the call-stack strings' nodes (one frame)
    next_id = 0
    # --- python frames: trie by levels
    if is_frame.any():
        frame_text = name
        if "frame_text" in events.columns:
            frame_text = events.select(pl.coalesce("frame_text", "name").fill_null("")).to_series()
        fpar = nearest_ancestor(parent, is_frame)
        fidx = np.nonzero(is_frame)[0]
        lvl_parent = np.where(is_frame, fpar, -1)
        depth = _depths(lvl_parent)
        fr = pl.DataFrame(
            {"i": fidx, "par": fpar[fidx], "d": depth[fidx], "text": frame_text.gather(fidx)}
        )
        for d in range(int(depth[fidx].max()) + 1):
            lv = fr.filter(pl.col("d") == d)
            pst = np.where(
                _np(lv.get_column("par")) >= 0, stack[np.maximum(_np(lv.get_column("par")), 0)], -1
            )
            lv = lv.with_columns(pl.Series("pstack", pst))
            keys = lv.select("pstack", "text").unique(maintain_order=True).with_row_index("k")
            keys = keys.with_columns((pl.col("k").cast(pl.Int64) + next_id).alias("sid"))
            lv = lv.join(keys, on=["pstack", "text"], how="left")
            stack[_np(lv.get_column("i"))] = _np(lv.get_column("sid"))
            nodes.append(keys.select("sid", "pstack", "text"))
            next_id += keys.height
        # every event: nearest enclosing non-module frame
        anc = fpar  # the same climb
        own_sid = stack.copy()  # each frame's own stack id (-1 elsewhere)
        stack = np.where(is_frame, stack, np.where(anc >= 0, stack[np.maximum(anc, 0)], -1))
    else:
        own_sid = stack.copy()
    # --- call stack strings
    if "call_stack" in events.columns:
        cs = events.get_column("call_stack")
        has_cs = cs.is_not_null() & (cs.str.len_bytes() > 0)
        if has_cs.any():
            uniq = cs.filter(has_cs).unique(maintain_order=True).to_list()
            trie: dict[tuple[int, str], int] = {}
            sid_of: dict[str, int] = {}
            cs_rows: list[tuple[int, int, str]] = []
            for text in uniq:  # loop over distinct stacks, not events
                frames = [f for f in text.split(";") if f.strip()]
                p = -1
                for fr_text in reversed(frames):  # outermost first
                    key = (p, fr_text.strip())
                    sid = trie.get(key)
                    if sid is None:
                        sid = next_id
                        next_id += 1
                        trie[key] = sid
                        cs_rows.append((sid, p, key[1]))
                    p = sid
                sid_of[text] = p
            cs_nodes.append(
                pl.DataFrame(
                    cs_rows,
                    schema={"sid": pl.Int64, "pstack": pl.Int64, "text": pl.String},
                    orient="row",
                )
            )
            mapped = _np(cs.replace_strict(sid_of, default=None, return_dtype=pl.Int64))
            # The innermost record wins: an event's own call stack, else that of the nearest
            # enclosing event that has one or the nearest enclosing frame, whichever is nearer.
            # (A frame's name carries one line for its whole run; the call stack recorded
            # by an op inside it names the line that called the op.)
            src = (mapped >= 0) | (own_sid >= 0)
            own_sid = np.where(mapped >= 0, mapped, own_sid)
            near = nearest_ancestor(parent, src, include_self=True)
            stack = np.where(near >= 0, own_sid[np.maximum(near, 0)], -1)
    # --- modules from nn.Module frames, one level of nesting at a time
    path = pl.repeat(None, n, dtype=pl.String, eager=True).alias("module")
    if is_mod.any():
        mpar = nearest_ancestor(parent, is_mod)
        midx = np.nonzero(is_mod)[0]
        mdepth = _depths(np.where(is_mod, mpar, -1))
        short = name.str.strip_prefix("nn.Module: ")
        for d in range(int(mdepth[midx].max()) + 1):
            sel = midx[mdepth[midx] == d]
            base = _gather(path, mpar[sel])
            own = short.gather(sel)
            val = (
                pl.DataFrame({"b": base, "o": own})
                .select(
                    pl.when(pl.col("b").is_null())
                    .then(pl.col("o"))
                    .otherwise(pl.col("b") + "/" + pl.col("o"))
                )
                .to_series()
            )
            path = path.scatter(sel, val)
        anc = np.where(is_mod, np.arange(n, dtype=np.int64), mpar)  # mpar, self included
        module = _gather(path, anc).alias("module")
    else:
        module = path
    if "module_hierarchy" in events.columns:
        mh = events.get_column("module_hierarchy").replace("", None)
        module = pl.DataFrame({"a": module, "b": mh}).select(pl.coalesce("a", "b")).to_series()
    # device / launch events take their op's stack and module
    op = _np(events.get_column("op_id"))
    dev = on_device(events) | kind_mask(events, "runtime", "driver")
    use = dev & (op >= 0) & (stack < 0)
    stack[use] = stack[op[use]]
    from_op = _gather(module, np.where(dev, op, -1))
    module = (
        pl.DataFrame({"a": module, "b": from_op})
        .select(pl.coalesce("a", "b").alias("module"))
        .to_series()
    )
    events = events.with_columns(_nullable("stack_id", stack), module.alias("module"))
    return events, nodes, cs_nodes


def stack_rows(nodes: list[pl.DataFrame]) -> pl.DataFrame:
    """The STACKS table of interned nodes (``sid, pstack, text`` frames)."""
    if not nodes:
        return schema.empty("stacks")
    nd = pl.concat(nodes).sort("sid")
    sid = _np(nd.get_column("sid"))
    size = int(sid.max()) + 1
    par = np.full(size, -1, dtype=np.int64)
    par[sid] = _np(nd.get_column("pstack"))
    texts = nd.get_column("text")
    uniq = texts.unique().to_list()
    ft = _frames_table(uniq)
    text_of = np.empty(size, dtype=object)
    text_of[sid] = texts.to_numpy()
    rows_sid: list[IntArray] = []
    rows_depth: list[IntArray] = []
    rows_node: list[IntArray] = []
    cur = sid.copy()
    owner = sid.copy()
    d = 0
    while cur.size:
        rows_sid.append(owner)
        rows_depth.append(np.full(cur.size, d, dtype=np.int64))
        rows_node.append(cur)
        nxt = par[cur]
        keep = nxt >= 0
        owner, cur = owner[keep], nxt[keep]
        d += 1
    all_node = np.concatenate(rows_node)
    out = (
        pl.DataFrame(
            {
                "stack_id": np.concatenate(rows_sid),
                "depth": np.concatenate(rows_depth).astype(np.int32),
                "text": pl.Series(text_of[all_node].tolist(), dtype=pl.String),
            }
        )
        .join(ft, on="text", how="left")
        .drop("text")
    )
    return schema.conform("stacks", out.sort(["stack_id", "depth"]))


# --------------------------------------------------------------------------------------------------
# memory


def link_memory(
    events: pl.DataFrame,
    memory: pl.DataFrame,
    steps: pl.DataFrame,
    *,
    index: TrackIndex | None = None,
) -> pl.DataFrame:
    """Fill memory ``op_id`` (innermost enclosing cpu_op on the allocation's thread) and ``step``.

    ``memory`` may carry ``pid``/``tid`` helper columns (dropped here); without them only the step
    is filled. ``index``: as for :func:`enclosing` (:attr:`Linked.index` saves a sort).
    """
    if memory.height == 0:
        return schema.conform("memory", memory.drop(["pid", "tid"], strict=False))
    if "pid" in memory.columns and "tid" in memory.columns and events.height:
        is_op = kind_mask(events, "cpu_op")
        pts = memory.select("rank", "pid", "tid", "ts_ns")
        op = enclosing(events, pts, is_op, index=index)
        memory = memory.with_columns(_nullable("op_id", op))
    memory = memory.with_columns(
        step_of_times(steps, memory.get_column("rank"), memory.get_column("ts_ns"))
    )
    return schema.conform("memory", memory.drop(["pid", "tid"], strict=False))


# --------------------------------------------------------------------------------------------------
# all of it


def link_events(events: pl.DataFrame, raw_flows: pl.DataFrame) -> Linked:
    """Run every linking step on ``events`` (ids 0..n-1) and raw flow records (:data:`RAW_FLOWS`).

    Returns the linked events (conformed to :data:`~opscope.model.schema.EVENTS`, helper columns
    dropped), the resolved FLOWS table, the STACKS table and the STEPS table.
    """
    ev, index = nest_indexed(call_site_frames(events))
    flows = resolve_flows(ev, raw_flows, index=index) if raw_flows.height else schema.empty("flows")
    ev = link_launches(ev, flows)
    ev = classify_communication(ev)
    ev = mark_backward(ev)
    ev = link_fwd_bwd(ev, flows)
    steps = step_numbers(ev)
    ev = assign_steps(ev, steps)
    ev, stacks = build_stacks(ev)
    ev = ev.drop([c for c in HELPER_COLUMNS if c in ev.columns])
    return Linked(schema.conform("events", ev), flows, stacks, steps, index)
