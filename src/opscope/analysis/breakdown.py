"""Step breakdown per step and rank, why the device is idle, launch queues, step-time spread.

**Windows.** Each step window ``[ts, ts + dur)`` of ``steps`` (or, without steps, each rank's
whole span as one step with a null number). Every event counts in each window it overlaps, by
its own time, clipped to the window (a kernel launched in step 3 that runs in step 4 is step 4's
time); zero-length events count nowhere. Windows of a rank are assumed not to overlap (ProfilerStep
ranges follow each other).

**Steps table** (interval unions of the clipped work):

- ``compute_ns``: kernels of kind ``kernel``; ``communication_ns``: kind ``communication``
  (classified once at load), ``communication_not_overlapped_ns`` the part of it when no other
  device work runs; ``memcpy_ns``, ``memset_ns``; ``device_busy_ns`` the union of all device work
  (every stream of the rank);
- ``device_idle_ns`` = window − busy, split by why the device waited (the device-wide view: the
  gaps of the union over all streams), each gap by the device work that ends it:
  ``idle_host_wait_ns`` when that work's launch (the runtime call linked to it) started after
  the gap began (the device waited for the host to launch it), ``idle_kernel_wait_ns`` when it had
  already been launched (it waited on a dependency, an event, another stream), ``idle_other_ns``
  when no work ends the gap inside the window (the tail of the step) or the work has no launch
  link. ``device_busy_ns + idle_host_wait_ns + idle_kernel_wait_ns + idle_other_ns == dur_ns``;
- ``data_loading_ns``: DataLoader ops/annotations on the host; ``host_ops_ns``: union of host ops.

**Streams table**: the same split per (rank, step, device, stream) for every stream active on
the rank: ``busy_ns`` (union of its work) and the three idle categories sum to ``dur_ns``.

**Queue table**: per (rank, device, stream), the launch queue (work launched but not finished:
+1 at the launch call's start, or at the work's own start without a launch link, −1 at its
end) over the rank's analysed range ``span_ns`` (first window start to last window end):
time-weighted ``mean`` = area / ``span_ns`` (the area, the integral of the queue's length in
ns, an exact integer; both as float64, one division), ``max``, ``zero_ns`` (time with nothing
queued) and its share ``zero_pct`` = 100 · ``zero_ns`` / ``span_ns`` (the integer product, one
division).

**Stats table**: per rank (a null rank first, then the ranks in order) and over all (rank
null), the windows' lengths (those with both bounds) as exact integers: ``steps`` the number
of windows, ``mean_ns`` = sum / n, ``median_ns`` and ``p10_ns``, ``p90_ns`` the linear
interpolation between the sorted lengths at rank (n − 1) · q (q = 1/2, 1/10, 9/10 exactly: an
integer combination of the two neighbours over 2 or 10), ``std_ns`` (n − 1 in the
denominator) = √(S / (n(n − 1))) with S = n·Σx² − (Σx)², and ``cv`` = ``std_ns`` /
``mean_ns``. Each is the exact value of exact integers rounded once (IEEE division; the
square root of the exact ratio rounded once), not whatever an engine's kernel does (a
product by the reciprocal, a running float sum).

Ascend steps carrying ``computing_ns``/``communication_ns``/``communication_not_overlapped_ns``/
``free_ns`` (step_trace_time.csv) use those figures instead (the idle split is then null: it
would not add up to ``free_ns``). Unions are vectorised: sort, running max of the ends, a new
segment where a start passes it.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import polars as pl

from opscope.analysis import _breakdown_arrays as arrays
from opscope.analysis import small_frames, tree
from opscope.analysis.exact_stats import spread
from opscope.analysis.hotspots import projected, rows_of
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.tree import int_values, per_profile
from opscope.model import Profile

#: Host events that are data loading.
DATA_PATTERN = r"DataLoader|dataloader"

#: The events columns breakdown reads.
BREAKDOWN_COLUMNS: tuple[str, ...] = (
    "id", "rank", "step", "kind", "name", "ts_ns", "dur_ns", "device", "stream", "tid",
    "launch_id",
)  # fmt: skip

#: Host kinds whose names may mark data loading.
_DATA_KINDS = ["cpu_op", "user_annotation", "python_function"]

#: What a projected breakdown reads: ``name`` only where it marks data loading (the one use of
#: it), null elsewhere.
BREAKDOWN_READ: tuple[str | pl.Expr, ...] = tuple(
    pl.when(pl.col("kind").is_in(_DATA_KINDS) & pl.col("name").str.contains(DATA_PATTERN))
    .then(pl.col("name"))
    .alias("name")
    if c == "name"
    else c
    for c in BREAKDOWN_COLUMNS
)

#: A DataFrame or a LazyFrame: the window-function steps run eagerly or in a plan.
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

#: The idle categories, in the order they are shown.
IDLE_COLUMNS = ("idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns")


def union_ns(iv: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Length of the union of intervals (``start``, ``end``) per ``keys``: column ``union_ns``."""
    if not iv.height:
        return pl.DataFrame(schema={**{k: iv.schema[k] for k in keys}, "union_ns": pl.Int64})
    # a stable sort: 5x quicker than Polars' unstable one on 50k intervals (7 -> 1.4 ms); the
    # order of equal starts changes no union (one code path for every size)
    s = iv.sort([*keys, "start"], maintain_order=True)
    runs = _runs(s, keys)
    if runs is not None:
        # each interval adds what it covers past the running end of those before it (its
        # whole length when it starts a segment): the sum per group is the union, no segments
        first, new, covered = runs
        start = s.get_column("start").to_numpy()
        end = s.get_column("end").to_numpy()
        add = np.where(new, end - start, np.maximum(end - np.maximum(start, covered), 0))
        # the groups are contiguous runs of the sorted rows: summed in NumPy, their keys
        # gathered from each run's first row (no group-by query: ms on 50k intervals)
        at = np.flatnonzero(first)
        firsts = pl.Series(first)  # (a Series filter is no query; a gather is one)
        return pl.DataFrame(
            [
                *(s.get_column(k).filter(firsts) for k in keys),
                pl.Series("union_ns", np.add.reduceat(add, at), dtype=pl.Int64),
            ]
        )
    return tree.collect(_union_lazy(s.lazy(), keys))


def _union_lazy(s: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """:func:`union_ns` by window functions, as a plan: ``s`` sorted by ``keys`` and ``start``."""
    u = _window_segments(s, keys)
    return u.group_by(keys).agg((pl.col("e") - pl.col("s")).sum().cast(pl.Int64).alias("union_ns"))


def _launch_segments(
    s: pl.DataFrame, keys: list[str], runs: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> pl.DataFrame:
    """The union's segments of ``s`` (sorted by ``keys`` and ``start``; :func:`_runs` of it) in
    that order: ``keys``, ``s``, ``e`` and ``launch``, the earliest launch among the work that
    starts the segment (null when none of it has one). Contiguous runs of rows, reduced in NumPy
    (a group-by over hundreds of thousands of segments cost more than the rest)."""
    new = runs[1]
    at = np.flatnonzero(new)
    start = s.get_column("start").to_numpy().astype(np.int64, copy=False)
    end = s.get_column("end").to_numpy().astype(np.int64, copy=False)
    seg_s = start[at]
    seg_e = np.maximum.reduceat(end, at)
    big = np.iinfo(np.int64).max
    lt, has_launch = int_values(s.get_column("launch_ts"))
    launch = np.where(has_launch, lt, big)
    opening = start == np.repeat(seg_s, np.diff(np.append(at, len(start))))
    first_launch = np.minimum.reduceat(np.where(opening, launch, big), at)
    # from Series and arrays (a frame's filter and select were a query each)
    news = pl.Series(new)
    return pl.DataFrame(
        [
            *(s.get_column(k).filter(news) for k in keys),
            pl.Series("s", seg_s, dtype=pl.Int64),
            pl.Series("e", seg_e, dtype=pl.Int64),
            pl.Series(
                "launch", np.ma.masked_array(first_launch, mask=first_launch == big), dtype=pl.Int64
            ),
        ]
    )


def _window_segments(s: FrameT, keys: list[str], *extra: pl.Expr) -> FrameT:
    """The union of intervals per ``keys`` as segments ``s``..``e`` (and ``extra`` aggregates)
    of ``s`` sorted by ``keys`` and ``start``, with a window function per group: for the inputs
    :func:`_runs` declines (null or inverted intervals, times too far apart to lay end to
    end)."""
    s = s.with_columns(pl.col("end").cum_max().shift(1).over(keys).alias("_prev"))
    s = s.with_columns(
        (pl.col("_prev").is_null() | (pl.col("start") > pl.col("_prev")))
        .cum_sum()
        .over(keys)
        .alias("_seg")
    )
    return s.group_by([*keys, "_seg"]).agg(  # type: ignore[return-value]
        pl.col("start").min().alias("s"), pl.col("end").max().alias("e"), *extra
    )


def _starts_group(keys: list[str]) -> pl.Expr:
    """:func:`group_starts` as an expression (``keys`` not empty): in a plan, no query."""
    change = pl.any_horizontal(pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys)
    return change.fill_null(True) | (pl.int_range(pl.len()) == 0)


def group_starts(df: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """For ``df`` sorted by ``keys``: True at the first row of each run of equal keys (null
    equal to null)."""
    if not df.height:
        return np.zeros(0, dtype=bool)
    if not keys:
        first = np.zeros(df.height, dtype=bool)
    elif all(df.schema[k].is_integer() for k in keys):
        # integer keys (every caller's) in NumPy, without the select's query: a row starts a
        # run where a key differs from the row before, a null equal only to a null
        first = np.zeros(df.height, dtype=bool)
        for k in keys:
            v, ok = int_values(df.get_column(k))
            first[1:] |= (ok[1:] != ok[:-1]) | (ok[1:] & (v[1:] != v[:-1]))
    else:
        change = df.select(
            pl.any_horizontal(pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys).fill_null(
                True
            )
        ).to_series()
        first = change.to_numpy().copy()
    first[0] = True
    return first


#: Below this many intervals the window functions are cheaper than the NumPy passes (a few
#: fixed-cost conversions): small traces keep them. (From 2000: the idle split of the 1,154
#: clipped kernels of multi_rank/hta_sampled_128rank_job/rank-1 took 9.6 ms of breakdown with
#: the window functions, 8.3 with the runs; 98 on hta_alexnet_a100_cuda_sync: the same.)
RUNS_MIN_ROWS = 1000


def _runs(s: pl.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For ``s`` sorted by ``keys`` and ``start``: (``first``: the row starts its group,
    ``new``: it starts a segment of the group's union, ``covered``: the running maximum of the
    ends of the group's rows before it), by :func:`arrays.running_cover`. None when there are
    fewer than :data:`RUNS_MIN_ROWS` rows, a time is null, or ``running_cover`` declines (the
    caller then takes the window functions).
    """
    st, en = s.get_column("start"), s.get_column("end")
    if s.height < RUNS_MIN_ROWS or st.null_count() or en.null_count():
        return None
    first = group_starts(s, keys)
    runs = arrays.running_cover(
        first,
        st.to_numpy().astype(np.int64, copy=False),
        en.to_numpy().astype(np.int64, copy=False),
    )
    return None if runs is None else (first, *runs)


def _windows(profile: Profile) -> pl.LazyFrame:
    """The windows (see the module doc) as a plan: ``rank``, ``step``, ``w0``, ``w1``."""
    st = profile.steps
    if st.height:
        return st.lazy().select(
            "rank",
            "step",
            pl.col("ts_ns").alias("w0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("w1"),
        )
    return (
        profile.events.lazy()
        .group_by("rank")
        .agg(
            pl.col("ts_ns").min().alias("w0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("w1"),
        )
        .with_columns(pl.lit(None, pl.Int32).alias("step"))
        .select("rank", "step", "w0", "w1")
    )


def _clip(ev: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """``ev`` (``rank``, ``ts_ns``, ``dur_ns``, any other columns) once per window of ``win``
    (``rank``, ``step``, ``w0``, ``w1``) of its rank that it overlaps, clipped to it: ``ev``'s
    columns, the window's ``step`` (``step_right`` when ``ev`` has a ``step``), ``w0``, ``w1``,
    ``start``, ``end``; rows in no particular order. Zero-length
    events, and events or windows with a null rank or time, count nowhere.

    Per rank, with the windows numbered by start: the first window ending after the event
    starts and the last one starting before it ends (binary searches), the event repeated once
    per window from the one to the other (a cross join of events and steps would be
    events x steps rows). In NumPy: the as-of joins and the plan around them were a fixed cost
    of ~0.6 ms on a 21-event trace and 2 ms on a 75k-event one.
    """
    rows, at, start, end = _clip_rows(ev, win)
    # the window's columns gathered as Series (a frame's gather is a query of fixed cost); the
    # events' rows as they are when each is kept once, in order (one window: most small traces)
    cols = [
        tree.gather(win.get_column("step"), at).alias(
            "step_right" if "step" in ev.columns else "step"
        ),
        tree.gather(win.get_column("w0"), at),
        tree.gather(win.get_column("w1"), at),
        pl.Series("start", start, dtype=pl.Int64),
        pl.Series("end", end, dtype=pl.Int64),
    ]
    same = tree.SHORTCUTS and len(rows) == ev.height and bool((rows == np.arange(len(rows))).all())
    out: pl.DataFrame = ev if same else ev[rows]
    return out.hstack(cols)


def _clip_rows(
    ev: pl.DataFrame, win: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_clip` as arrays: (the row of ``ev``, the row of ``win``, ``start``, ``end``) of
    each clipped piece."""
    cols = (ev.get_column("rank"), ev.get_column("ts_ns"), ev.get_column("dur_ns"))
    (er, eok), (s, sok), (d, dok) = (int_values(c) for c in cols)
    return _clip_arrays((er, eok, s, sok, d, dok), win)


def _clip_arrays(
    ev: tuple[np.ndarray, ...], win: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_clip_rows` of the events' rank, start and duration arrays, each with where it
    is known: ``(rank, rank_ok, ts, ts_ok, dur, dur_ok)``."""
    er, eok, s, sok, d, dok = ev
    wr, wok = int_values(win.get_column("rank"))
    w0, ok0 = int_values(win.get_column("w0"))
    w1, ok1 = int_values(win.get_column("w1"))
    wid = np.flatnonzero(wok & ok0 & ok1)
    order = wid[np.lexsort((w0[wid], wr[wid]))]  # by rank, then start: the windows' numbers
    e = s + d
    live = np.flatnonzero(eok & sok & dok & (d > 0))
    live = live[np.argsort(er[live], kind="stable")]  # each rank's events one slice
    live_rank = er[live]
    ranks = wr[order]
    rows_at: list[np.ndarray] = []
    win_at: list[np.ndarray] = []
    for r in np.unique(ranks):
        ws = order[ranks == r]
        a, b = np.searchsorted(live_rank, [r, r + 1])
        evi = live[a:b]
        if not len(evi):
            continue
        by_end = np.argsort(w1[ws], kind="stable")
        # the first window ending after the start; the last starting before the end
        i = np.searchsorted(w1[ws][by_end], s[evi], side="right")
        j = np.searchsorted(w0[ws], e[evi], side="left") - 1
        has = (i < len(ws)) & (j >= 0)
        lo = np.where(has, by_end[np.minimum(i, len(ws) - 1)], 0)
        m = has & (lo <= j)
        cnt = (j - lo + 1)[m]
        nth = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        rows_at.append(np.repeat(evi[m], cnt))
        win_at.append(ws[np.repeat(lo[m], cnt) + nth])
    none = np.zeros(0, dtype=np.int64)
    rows = np.concatenate(rows_at) if rows_at else none
    at = np.concatenate(win_at) if win_at else none
    start = np.maximum(s[rows], w0[at])
    end = np.minimum(e[rows], w1[at])
    keep = end > start
    return rows[keep], at[keep], start[keep], end[keep]


def idle_split(iv: pl.DataFrame, lanes: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """:func:`idle_plan`, collected."""
    return tree.collect(idle_plan(iv, lanes, keys))


def idle_plan(
    iv: pl.DataFrame, lanes: pl.DataFrame | pl.LazyFrame, keys: list[str]
) -> pl.LazyFrame:
    """Busy time and idle categories per lane and window (see the module doc), as a plan
    (collected with the caller's query: a query per step was a fixed cost on small traces).

    ``iv``: clipped work (``keys``, ``start``, ``end``, ``launch_ts``); ``lanes``: every
    (``keys``, ``w0``, ``w1``) to report, work or not. Returns ``keys``, ``busy_ns`` and
    :data:`IDLE_COLUMNS`, which sum to ``w1 - w0`` per lane.
    """
    lanes = lanes.lazy()
    ordered = iv.lazy().sort([*keys, "start"], maintain_order=True)  # stable: quicker
    # the NumPy runs need the sorted rows; below their threshold they decline unread
    runs = None
    if iv.height >= RUNS_MIN_ROWS:
        s = tree.collect(ordered)
        runs = _runs(s, keys)
        ordered = s.lazy()
    if runs is not None:  # segments in time order per lane, kept through the join
        segs = (
            _launch_segments(s, keys, runs)
            .lazy()
            .join(lanes, on=keys, how="inner", nulls_equal=True, maintain_order="left")
        )
    else:
        x = _idle_exprs(tuple(keys))
        segs = _window_segments(ordered, keys, x.launch)
        # sorted after the join: shift() below needs time order, which a join does not promise
        segs = segs.join(lanes, on=keys, how="inner", nulls_equal=True).sort([*keys, "s"])
    x = _idle_exprs(tuple(keys))
    # the gap before each segment: from the previous segment's end, or the window's start (the
    # previous row's end unless the row starts its lane: no window function over lanes)
    segs = segs.with_columns(x.g0).with_columns(x.gap)
    per = segs.group_by(keys).agg(*x.per)
    out = lanes.join(per, on=keys, how="left", nulls_equal=True).with_columns(*x.fill)
    return out.select(*x.out)


@dataclass(frozen=True)
class _IdleExprs:
    """:func:`idle_plan`'s expressions for its lane keys."""

    launch: pl.Expr
    g0: pl.Expr
    gap: pl.Expr
    per: tuple[pl.Expr, ...]
    fill: tuple[pl.Expr, ...]
    out: tuple[pl.Expr, ...]


@functools.cache
def _idle_exprs(keys: tuple[str, ...]) -> _IdleExprs:
    """Built once per process and lane keys (~0.1 ms of Python a plan)."""
    at_start = pl.col("start") == pl.col("start").min()
    host = pl.col("launch") > pl.col("g0")
    kernel = pl.col("launch") <= pl.col("g0")
    return _IdleExprs(
        launch=pl.col("launch_ts").filter(at_start).min().alias("launch"),
        g0=pl.when(_starts_group(list(keys)))
        .then(pl.col("w0"))
        .otherwise(pl.col("e").shift(1))
        .alias("g0"),
        gap=(pl.col("s") - pl.col("g0")).alias("gap"),
        per=(
            (pl.col("e") - pl.col("s")).sum().alias("busy_ns"),
            pl.col("gap").filter(host).sum().alias("idle_host_wait_ns"),
            pl.col("gap").filter(kernel).sum().alias("idle_kernel_wait_ns"),
            # no launch link, plus the tail after the last segment
            (
                pl.col("gap").filter(pl.col("launch").is_null()).sum()
                + pl.col("w1").max()
                - pl.col("e").max()
            ).alias("idle_other_ns"),
        ),
        fill=(
            pl.col("busy_ns", "idle_host_wait_ns", "idle_kernel_wait_ns").fill_null(0),
            pl.col("idle_other_ns").fill_null(pl.col("w1") - pl.col("w0")),
        ),
        out=(
            *(pl.col(k) for k in keys),
            *(pl.col(c).cast(pl.Int64) for c in ("busy_ns", *IDLE_COLUMNS)),
        ),
    )


def queue_stretches(dev: pl.LazyFrame, rng: pl.LazyFrame, lane: list[str]) -> pl.LazyFrame:
    """Each ``lane``'s launch queue as stretches: from every launch (``launch_ts``, else the
    start) and every end of ``dev``'s work to the lane's next such point, ``q`` the work
    launched and not yet ended, ``len`` the stretch's length clipped to its rank's range
    ``[r0, r1]`` (``rng``: per rank). Shared by :func:`queue_lengths` and the out-of-core
    load's per-segment sums (which merge exactly: the queue is empty at a cut)."""
    x = _queue_exprs(tuple(lane))
    # at one instant the ends first: no phantom peak (stable: quicker; rows equal in every
    # column read)
    pts = pl.concat([dev.select(*x.launches), dev.select(*x.ends)]).sort(
        [*lane, "t", "d"], maintain_order=True
    )
    pts = pts.with_columns(*x.running).join(rng, on="rank")
    return pts.with_columns(x.length)


@dataclass(frozen=True)
class _QueueExprs:
    """:func:`queue_stretches`' and :func:`_queue_plan`'s expressions for their lane keys."""

    launches: tuple[pl.Expr, ...]
    ends: tuple[pl.Expr, ...]
    running: tuple[pl.Expr, ...]
    length: pl.Expr
    per_lane: tuple[pl.Expr, ...]
    cast: tuple[pl.Expr, ...]


#: The launch-queue table's columns.
_QUEUE_SCHEMA: dict[str, type[pl.DataType]] = {
    "rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64, "span_ns": pl.Int64,
    "mean": pl.Float64, "max": pl.Int64, "zero_ns": pl.Int64, "zero_pct": pl.Float64,
}  # fmt: skip

#: :func:`_queue_plan`'s columns: each lane's range, area and busy time (integers), its figures
#: computed from them after the query (:func:`_queue_frame`).
_QUEUE_SUMS: dict[str, type[pl.DataType]] = {
    "rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64, "span_ns": pl.Int64,
    "area": pl.Int64, "max": pl.Int64, "busy": pl.Int64,
}  # fmt: skip


@functools.cache
def _queue_exprs(lane: tuple[str, ...]) -> _QueueExprs:
    """Built once per process and lane keys (~0.1 ms of Python a plan)."""
    keys = [pl.col(k) for k in lane]
    return _QueueExprs(
        launches=(*keys, pl.coalesce("launch_ts", "ts_ns").alias("t"), pl.lit(1).alias("d")),
        ends=(*keys, (pl.col("ts_ns") + pl.col("dur_ns")).alias("t"), pl.lit(-1).alias("d")),
        # the points sorted by lane: a lane's rows are contiguous and its launches and ends
        # cancel (each work item has one of each, in its lane), so the running sum over all
        # rows is the lane's own, and the next point is the next row's where it is the same
        # lane: no window per lane (two group-bys of the lane keys: ~0.4 ms of 1.2 ms on a
        # 4.8k-event trace)
        running=(
            pl.col("d").cum_sum().alias("q"),
            pl.when(pl.all_horizontal(pl.col(k).shift(-1).eq_missing(pl.col(k)) for k in lane))
            .then(pl.col("t").shift(-1))
            .alias("t1"),
        ),
        length=(pl.min_horizontal(pl.coalesce("t1", "t"), "r1") - pl.max_horizontal("t", "r0"))
        .clip(lower_bound=0)
        .alias("len"),
        per_lane=(
            (pl.col("r1").first() - pl.col("r0").first()).alias("span_ns"),
            (pl.col("q") * pl.col("len")).sum().alias("area"),
            pl.col("q").filter(pl.col("len") > 0).max().fill_null(0).alias("max"),
            pl.col("len").filter(pl.col("q") > 0).sum().alias("busy"),
        ),
        cast=tuple(pl.col(c).cast(t) for c, t in _QUEUE_SUMS.items()),
    )


def queue_lengths(dev: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """Launch-queue length per (rank, device, stream) over each rank's analysed range (the
    module doc's queue table; :func:`_queue_table` over arrays where breakdown's arrays are
    taken)."""
    return _queue_of_sums(tree.collect(_queue_plan(dev, win)))


def _queue_of_sums(sums: pl.DataFrame) -> pl.DataFrame:
    """The queue table of :func:`_queue_plan`'s sums (no query: the quotients in NumPy)."""
    span, area, top, busy = (
        sums.get_column(c).to_numpy() for c in ("span_ns", "area", "max", "busy")
    )
    keys = [sums.get_column(c) for c in ("rank", "device", "stream")]
    return pl.DataFrame(
        [
            *keys,
            *(
                pl.Series(c, v, dtype=_QUEUE_SCHEMA[c])
                for c, v in _queue_figures(span, area, top, busy)
            ),
        ]
    )


def _queue_figures(
    span: np.ndarray, area: np.ndarray, top: np.ndarray, busy: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    """The queue table's ``span_ns``, ``mean``, ``max``, ``zero_ns`` and ``zero_pct`` of each
    lane's integer sums (``span`` > 0): each share one division of exact integers (as float64:
    exact below 2**53 ns)."""
    zero = span - busy
    return [
        ("span_ns", span),
        ("mean", area.astype(np.float64) / span),
        ("max", top),
        ("zero_ns", zero),
        ("zero_pct", (100 * zero).astype(np.float64) / span),
    ]


def _queue_plan(dev: pl.DataFrame, win: pl.DataFrame) -> pl.LazyFrame:
    """The sums of :func:`queue_lengths` (:data:`_QUEUE_SUMS`) as a plan (breakdown's plans
    run it with their other tables' plans)."""
    if not dev.height or not win.height:
        return pl.DataFrame(schema=_QUEUE_SUMS).lazy()
    # one lazy query on the in-memory engine (the eager calls' engine): a query per step was
    # a fixed cost on small traces
    rng = (
        win.lazy()
        .group_by("rank")
        .agg(pl.col("w0").min().alias("r0"), pl.col("w1").max().alias("r1"))
    )
    lane = ["rank", "device", "stream"]
    x = _queue_exprs(tuple(lane))
    pts = queue_stretches(dev.lazy(), rng, lane)
    out = pts.group_by(lane).agg(*x.per_lane).filter(pl.col("span_ns") > 0)
    return out.select(*x.cast).sort(lane)


@dataclass(frozen=True)
class Breakdown(Result):
    """``steps``: one row per (rank, step) with the columns of the module doc;
    ``streams``: busy and idle categories per (rank, step, device, stream); ``queue``: launch
    queue length per stream; ``stats``: step time mean/median/std/p10/p90/cv per rank and over
    all (rank null)."""

    steps: pl.DataFrame
    stats: pl.DataFrame
    streams: pl.DataFrame = field(default_factory=pl.DataFrame)
    queue: pl.DataFrame = field(default_factory=pl.DataFrame)
    top: int = 20

    def to_json(self) -> dict[str, Any]:
        """``{"steps", "stats", "streams", "queue"}`` in µs."""
        # (the four conversions in one call: a query each was a fixed cost)
        steps, stats, streams, queue = rows_of(
            [(self.steps, None), (self.stats, None), (self.streams, None), (self.queue, None)]
        )
        return {"steps": steps, "stats": stats, "streams": streams, "queue": queue}


#: The step-time statistics' columns.
_STATS_SCHEMA: dict[str, type[pl.DataType]] = {
    "rank": pl.Int32, "steps": pl.UInt32, "mean_ns": pl.Float64, "median_ns": pl.Float64,
    "std_ns": pl.Float64, "p10_ns": pl.Float64, "p90_ns": pl.Float64, "cv": pl.Float64,
}  # fmt: skip


def _stats_table(win: pl.DataFrame) -> pl.DataFrame:
    """The step-time statistics of the windows (``stats``, the module doc's definitions): the
    lengths read once, each group's figures from Python integers (a handful of windows a
    rank: a plan of a filter and seven aggregates per rank was ~0.4 ms)."""
    rank, rank_ok = int_values(win.get_column("rank"))
    w0, w0_ok = int_values(win.get_column("w0"))
    w1, w1_ok = int_values(win.get_column("w1"))
    length = w1 - w0
    # the windows by group (a null rank first) and length: each group a run, its lengths sorted
    order = np.lexsort((length, rank, rank_ok))
    rank, rank_ok, length = rank[order], rank_ok[order], length[order]
    has_len = (w0_ok & w1_ok)[order]
    new = arrays.run_starts(rank)
    new[1:] |= rank_ok[1:] != rank_ok[:-1]  # (a null rank reads 0: rank 0 starts a run too)
    lengths = length.tolist()
    counted = has_len.tolist()
    bounds = [*np.flatnonzero(new).tolist(), len(order)]
    rows = []
    for a, b in itertools.pairwise(bounds):
        key = int(rank[a]) if rank_ok[a] else None
        mine = [x for x, c in zip(lengths[a:b], counted[a:b], strict=True) if c]
        rows.append((key, b - a, *spread(mine)))
    every = sorted(x for x, c in zip(lengths, counted, strict=True) if c)
    rows.append((None, len(order), *spread(every)))
    return small_frames.frame_of_rows(rows, _STATS_SCHEMA)


def _device_work(profile: Profile) -> pl.DataFrame:
    """Device work with its stream and the start of the runtime call that launched it (the
    columns the plans read): the profile's device work (cached: the same rows in the same
    order as filtering every event again)."""
    return _device_frame(profile.kernels, _DeviceArrays.of(profile.kernels, profile.events))


def _device_frame(k: pl.DataFrame, work: _DeviceArrays) -> pl.DataFrame:
    """:func:`_device_work` of the device work ``k`` and its arrays: its columns as Series (no
    query: a plan's select was one), ``device`` and ``stream`` filled (``fill_null(-1)``,
    ``coalesce(stream, tid).fill_null(-1)``) and the launch times from the arrays."""
    ts = k.get_column("ts_ns")
    if work.launched.any():
        launch_ts = pl.Series(
            "launch_ts", np.ma.masked_array(work.launch, mask=~work.launched), dtype=ts.dtype
        )
    else:  # (no launch link: Ascend exports, kernels without runtime calls)
        launch_ts = pl.Series("launch_ts", [None], dtype=ts.dtype).new_from_index(0, k.height)
    return pl.DataFrame(
        [
            k.get_column("rank"),
            k.get_column("kind"),
            # (the columns' dtypes: a frame's schema is ~25 us to build)
            pl.Series("device", work.device, dtype=work.device_dtype),
            pl.Series("stream", work.stream, dtype=pl.Int64),
            ts,
            k.get_column("dur_ns"),
            k.get_column("launch_id"),
            launch_ts,
        ]
    )


@dataclass(frozen=True)
class _DeviceArrays:
    """The device work's columns as int64 arrays, read once for the window clip, the streams
    and the queue (each re-read the frame's columns): ``rank``, ``ts``, ``dur`` with where
    each is known (``*_ok``), ``device`` (-1 for none) and ``stream`` (else the thread, else
    -1) filled, each piece's ``launch`` (the start of the runtime call that launched it) where
    ``launched``; its ``kind`` and the type of ``device``."""

    rank: np.ndarray
    rank_ok: np.ndarray
    ts: np.ndarray
    ts_ok: np.ndarray
    dur: np.ndarray
    dur_ok: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    launch: np.ndarray
    launched: np.ndarray
    kind: pl.Series
    device_dtype: Any

    @staticmethod
    def of(k: pl.DataFrame, ev: pl.DataFrame) -> _DeviceArrays:
        """The arrays of the device work ``k``, its launches found among the events ``ev``."""
        device, has_device = int_values(k.get_column("device"))
        stream, has_stream = int_values(k.get_column("stream"))
        tid, has_tid = int_values(k.get_column("tid"))
        ids = k.get_column("launch_id")
        if ids.null_count() == len(ids):
            # no launch link (Ascend exports, kernels without runtime calls): none, without
            # looking the ids up
            launch = np.zeros(len(ids), dtype=np.int64)
            launched = np.zeros(len(ids), dtype=bool)
        else:
            # each launch's start by its event's position (ids are row ids, unique: what the
            # left join on the ids gave), a gather instead of hashing every event (2.7 -> 1.2
            # ms on 75k events)
            lid, linked = int_values(ids)
            ev_id = ev.get_column("id").to_numpy().astype(np.int64, copy=False)
            at = tree._positions(ev_id, lid, ~linked)
            ev_ts, ev_ts_ok = int_values(ev.get_column("ts_ns"))
            safe = np.maximum(at, 0)
            launched = (at >= 0) & ev_ts_ok[safe] if len(ev_ts) else at >= 0
            launch = np.where(launched, ev_ts[safe], 0) if len(ev_ts) else np.zeros_like(at)
        rank, rank_ok = int_values(k.get_column("rank"))
        ts, ts_ok = int_values(k.get_column("ts_ns"))
        dur, dur_ok = int_values(k.get_column("dur_ns"))
        return _DeviceArrays(
            rank=rank,
            rank_ok=rank_ok,
            ts=ts,
            ts_ok=ts_ok,
            dur=dur,
            dur_ok=dur_ok,
            device=np.where(has_device, device, -1),
            stream=np.where(has_stream, stream, np.where(has_tid, tid, -1)),
            launch=launch,
            launched=launched,
            kind=k.get_column("kind"),
            device_dtype=k.get_column("device").dtype,
        )

    @property
    def complete(self) -> bool:
        """Whether no piece lacks a rank, start or duration (what the arrays path takes)."""
        return bool(self.rank_ok.all() and self.ts_ok.all() and self.dur_ok.all())


def _window_frame(profile: Profile) -> pl.DataFrame | None:
    """:func:`_windows` of a profile with steps, from the steps' Series (no query); None
    without steps (the windows' plan then)."""
    st = profile.steps
    if not st.height:
        return None
    ts = st.get_column("ts_ns")
    return pl.DataFrame(
        [
            st.get_column("rank"),
            st.get_column("step"),
            ts.alias("w0"),
            (ts + st.get_column("dur_ns")).alias("w1"),
        ]
    )


@analysis("breakdown")
def breakdown(profile: Profile, options: Options) -> Breakdown:
    """Per-step breakdown and step-time spread: see the module doc."""
    return dataclasses.replace(_breakdown(profile), top=options.top)


@per_profile
def _breakdown(profile: Profile) -> Breakdown:
    # Once per Profile: the report's "breakdown" and the cluster analysis both ask for it.
    # An out-of-core entry's stored aggregates when it has them (never reading the events);
    # else a large file-backed profile is read for the columns used alone (never whole).
    from opscope.analysis import stored_aggregates

    stored = stored_aggregates.stored(profile)
    got = stored_aggregates.breakdown(stored, profile) if stored else None
    if got is not None:
        return got
    return _breakdown_of(_inputs(projected(profile, BREAKDOWN_READ)))


@dataclass(frozen=True)
class _Inputs:
    """What breakdown reads of a profile: taken first, so that a projected profile's events
    are freed before the unions (a large file-backed profile's peak)."""

    win: pl.DataFrame
    work: _DeviceArrays
    kernels: pl.DataFrame
    host: pl.DataFrame
    data: pl.DataFrame
    has_dev: bool
    steps: pl.DataFrame

    @functools.cached_property
    def dev(self) -> pl.DataFrame:
        """:func:`_device_work`'s frame (the plans' input), made when first read: the arrays
        path reads :attr:`work` alone."""
        return _device_frame(self.kernels, self.work)


def _inputs(profile: Profile) -> _Inputs:
    """Breakdown's inputs of ``profile``."""
    # the columns used, before any filter (filtering every column of the events was the cost);
    # ``step`` too: the host parts keep the event's own step (the window's is ``step_right``)
    events = profile.events
    ev = _columns(events, ("rank", "step", "kind", "name", "ts_ns", "dur_ns"))
    # the host ops from the profile's (cached) ops: the same rows as filtering the events; its
    # columns as Series (a selection of columns needs no query)
    host = _columns(profile.ops, ("rank", "step", "ts_ns", "dur_ns"))
    # the windows of the steps and the device work from Series (no query); the windows of a
    # trace without steps and the data-loading events in one call at most (a collect each was
    # a fixed cost)
    win = _window_frame(profile)
    work = _DeviceArrays.of(profile.kernels, events)
    plans = [] if win is not None else [_windows(profile)]
    kind = events.get_column("kind")
    # (Series comparisons: no query, where is_in was one; a null kind is none of them)
    one = _one_kind(kind) if tree.SHORTCUTS else None
    if tree.SHORTCUTS and (
        one not in _DATA_KINDS
        if one is not None
        else not any((kind == k).any() for k in _DATA_KINDS)
    ):
        # no host event that could be data loading (a trace of device work only): none, without
        # the filter's query
        data = ev.clear()
    else:
        data_ops = pl.col("kind").is_in(_DATA_KINDS) & pl.col("name").str.contains(DATA_PATTERN)
        plans.append(ev.lazy().filter(data_ops))
    # (the eager calls' optimisations; the filter and the windows' minima are the same rows
    # under any)
    got = pl.collect_all(plans, engine="in-memory", optimizations=tree.EAGER_FLAGS) if plans else []
    if win is None:
        win, *got = got
    return _Inputs(
        win=win,
        work=work,
        kernels=profile.kernels,
        host=host,
        data=got[0] if got else data,
        has_dev=profile.has_device,
        steps=profile.steps,
    )


def _columns(df: pl.DataFrame, names: tuple[str, ...]) -> pl.DataFrame:
    """``df.select(names)`` from its Series (no query)."""
    return pl.DataFrame([df.get_column(c) for c in names])


def _own_figures_everywhere(steps: pl.DataFrame) -> bool:
    """Whether every step row carries Ascend's own figures (``computing_ns`` somewhere and
    ``free_ns``, ``rank`` and ``step`` on every row): then each step's idle split is null."""
    if not steps.height or "free_ns" not in steps.columns:
        return False
    return (
        _any_value(steps.get_column("computing_ns"))
        and sum(steps.get_column(c).null_count() for c in ("free_ns", "rank", "step")) == 0
    )


def _any_value(s: pl.Series) -> bool:
    """Whether ``s`` holds a value that is not null (a count, not a query)."""
    return s.null_count() < len(s)


#: The interval classes of the steps table, in their order (``busy``: only under Ascend's own
#: step figures).
_CLASSES = ("compute", "communication", "memcpy", "memset", "not_comm", "host_ops", "data_loading",
            "busy")  # fmt: skip


@functools.cache
def _class_codes() -> dict[str, pl.Expr]:
    """Each class as its place in :data:`_CLASSES` (a literal ``cls``), built once."""
    return {c: pl.lit(i, pl.UInt8).alias("cls") for i, c in enumerate(_CLASSES)}


def _breakdown_of(inp: _Inputs, *, per_trace: bool = True) -> Breakdown:
    """The breakdown of ``inp``'s windows. ``per_trace=False``: the steps and streams tables only
    (the statistics and the launch queue empty), for the out-of-core load's segments, which
    sum the queue over the whole trace themselves and recompute the statistics at read time."""
    if tree.SHORTCUTS:
        fast = _breakdown_arrays(inp, per_trace=per_trace)
        if fast is not None:
            return fast
    win, dev = inp.win, inp.dev
    is_comm = pl.col("kind") == "communication"  # classified once at load (model/kinds.py)
    cdev = _clip(dev, win)
    cdev_lazy = cdev.lazy()
    cols = list(_CLASSES)
    # each class by its place in cols (a small integer sorts faster than a string: ms on the
    # unions' sort of 50k intervals)
    code = _class_codes()
    # the device classes as one lazy query (a query per filter and per label was a fixed
    # cost on small traces); rows in the same order as the filters one by one
    parts = [
        cdev_lazy.filter(keep).select("rank", "step", code[cls], "start", "end")
        for keep, cls in (
            (pl.col("kind") == "kernel", "compute"),
            (is_comm, "communication"),
            (pl.col("kind") == "memcpy", "memcpy"),
            (pl.col("kind") == "memset", "memset"),
            (~is_comm, "not_comm"),
        )
    ]
    # at most this many intervals: each device piece in one class of its kind and maybe in
    # not_comm (and busy), the clipped host pieces once
    most = 2 * cdev.height
    for host, cls in ((inp.host, "host_ops"), (inp.data, "data_loading")):
        # no host op (or no data loading) clips to no interval: the as-of joins skipped
        if host.height or not tree.SHORTCUTS:
            clipped = _clip(host, win)
            most += clipped.height
            parts.append(clipped.lazy().select("rank", "step", code[cls], "start", "end"))
    # Ascend steps with their own figures for every step: the device-wide idle split is nulled
    # below (it would not add up to free_ns), so only its busy time is needed: the union of all
    # device work, one more class here instead of the split's ~30 queries
    busy_only = tree.SHORTCUTS and _own_figures_everywhere(inp.steps)
    if busy_only:
        parts.append(cdev_lazy.select("rank", "step", code["busy"], "start", "end"))
        most += cdev.height
    else:
        cols.remove("busy")
    # the steps table as one plan from here (a query per step was a fixed cost on small traces):
    # the unions per (rank, step, class) (below the NumPy runs' size, in the plan, the
    # intervals too: fewer than that many for certain, no query to count them), one column per
    # class (a class with no interval in a step: 0, as the pivot's gaps filled were)
    by_class = ["rank", "step", "cls"]
    if most >= RUNS_MIN_ROWS:
        iv = tree.collect(pl.concat(parts))
        del parts  # the clipped copies: only their intervals are needed now
        unions = (
            union_ns(iv, by_class).lazy()
            if iv.height >= RUNS_MIN_ROWS
            else _union_lazy(iv.lazy().sort([*by_class, "start"], maintain_order=True), by_class)
        )
    else:
        unions = _union_lazy(
            pl.concat(parts).sort([*by_class, "start"], maintain_order=True), by_class
        )
    per_class = unions.group_by("rank", "step").agg(
        pl.col("union_ns").filter(pl.col("cls") == i).sum().alias(c) for i, c in enumerate(cols)
    )
    wins = win.lazy()
    if busy_only:
        out = (
            wins.join(per_class, on=["rank", "step"], how="left", nulls_equal=True)
            .with_columns(pl.col(cols).fill_null(0))
            .with_columns(
                (pl.col("w1") - pl.col("w0")).alias("dur_ns"),
                pl.col("busy").alias("busy_ns"),
                *(pl.lit(None, pl.Int64).alias(c) for c in IDLE_COLUMNS),
            )
        )
    else:
        # device-wide idle: the union over every stream of the rank
        whole = idle_plan(cdev, win, ["rank", "step"])
        out = (
            wins.join(per_class, on=["rank", "step"], how="left", nulls_equal=True)
            .join(whole, on=["rank", "step"], how="left", nulls_equal=True)
            .with_columns(pl.col(cols).fill_null(0))
            .with_columns((pl.col("w1") - pl.col("w0")).alias("dur_ns"))
        )
    has_dev = inp.has_dev

    def dev_only(c: str) -> pl.Expr:
        return (pl.col(c) if has_dev else pl.lit(None, pl.Int64)).alias(c)

    out = out.select(
        "rank",
        "step",
        pl.col("w0").alias("ts_ns"),
        "dur_ns",
        pl.col("compute").alias("compute_ns"),
        pl.col("communication").alias("communication_ns"),
        (pl.col("busy_ns") - pl.col("not_comm")).alias("communication_not_overlapped_ns"),
        pl.col("memcpy").alias("memcpy_ns"),
        pl.col("memset").alias("memset_ns"),
        pl.col("busy_ns").alias("device_busy_ns"),
        ((pl.col("dur_ns") - pl.col("busy_ns")) if has_dev else pl.lit(None, pl.Int64)).alias(
            "device_idle_ns"
        ),
        *(dev_only(c) for c in IDLE_COLUMNS),
        pl.col("data_loading").alias("data_loading_ns"),
        pl.col("host_ops").alias("host_ops_ns"),
    )
    st = inp.steps
    if st.height and _any_value(st.get_column("computing_ns")):
        asc = st.lazy().select(
            "rank",
            "step",
            "computing_ns",
            "communication_ns",
            "communication_not_overlapped_ns",
            "free_ns",
        )
        own = pl.col("free_ns").is_null()
        out = (
            out.join(asc, on=["rank", "step"], how="left", suffix="_src")
            .with_columns(
                pl.coalesce("computing_ns", "compute_ns").alias("compute_ns"),
                pl.coalesce("communication_ns_src", "communication_ns").alias("communication_ns"),
                pl.coalesce(
                    "communication_not_overlapped_ns_src", "communication_not_overlapped_ns"
                ).alias("communication_not_overlapped_ns"),
                pl.coalesce("free_ns", "device_idle_ns").alias("device_idle_ns"),
                *(pl.when(own).then(pl.col(c)).alias(c) for c in IDLE_COLUMNS),
            )
            .drop(
                "computing_ns",
                "communication_ns_src",
                "communication_not_overlapped_ns_src",
                "free_ns",
            )
        )
    steps_plan = out.sort("rank", "step")
    # per stream: every stream active on the rank, in every window (one plan)
    lanes = cdev.lazy().select("rank", "device", "stream").unique().join(wins, on="rank")
    streams_plan = (
        idle_plan(cdev, lanes, ["rank", "step", "device", "stream"])
        .join(wins, on=["rank", "step"], how="left", nulls_equal=True)
        .select(
            "rank",
            "step",
            "device",
            "stream",
            (pl.col("w1") - pl.col("w0")).alias("dur_ns"),
            "busy_ns",
            *IDLE_COLUMNS,
        )
        .sort("rank", "step", "device", "stream")
    )

    # the three tables' plans in one call (a collect each was a fixed cost on small traces)
    if not per_trace:
        steps, streams = pl.collect_all(
            [steps_plan, streams_plan], engine="in-memory", optimizations=tree.EAGER_FLAGS
        )
        return Breakdown(steps=steps, stats=pl.DataFrame(), streams=streams)
    steps, streams, sums = pl.collect_all(
        [steps_plan, streams_plan, _queue_plan(dev, win)],
        engine="in-memory",
        optimizations=tree.EAGER_FLAGS,
    )
    return Breakdown(
        steps=steps, stats=_stats_table(win), streams=streams, queue=_queue_of_sums(sums)
    )


@dataclass(frozen=True)
class _WindowArrays:
    """The windows sorted by (rank, step), a null step first (the steps table's order):
    ``order`` the row of ``win`` at each place, ``place`` each row's place."""

    order: np.ndarray
    place: np.ndarray
    rank: np.ndarray
    step: np.ndarray
    step_ok: np.ndarray
    w0: np.ndarray
    w1: np.ndarray

    @staticmethod
    def of(win: pl.DataFrame) -> _WindowArrays | None:
        """None when a window has a null rank or bound, or two share a (rank, step): the
        plans' joins are then not one row per window."""
        rank, rank_ok = int_values(win.get_column("rank"))
        step, step_ok = int_values(win.get_column("step"))
        w0, w0_ok = int_values(win.get_column("w0"))
        w1, w1_ok = int_values(win.get_column("w1"))
        if not (rank_ok & w0_ok & w1_ok).all():
            return None
        order = np.lexsort((step, step_ok, rank))
        rank, step, step_ok = rank[order], step[order], step_ok[order]
        same = (rank[1:] == rank[:-1]) & (step_ok[1:] == step_ok[:-1]) & (step[1:] == step[:-1])
        if same.any():
            return None
        place = np.empty(len(order), dtype=np.int64)
        place[order] = np.arange(len(order))
        return _WindowArrays(order, place, rank, step, step_ok, w0[order], w1[order])

    def place_of(self, rank: np.ndarray, step: np.ndarray, step_ok: np.ndarray) -> np.ndarray:
        """The place of the window of each (``rank``, ``step``) (a null step, not ``step_ok``,
        matching a null one), -1 for none: the keys sorted after the windows', each row's
        match the first of its run of equal keys when that is a window."""
        n_win, n = len(self.rank), len(rank)
        keys = [
            np.concatenate([self.rank, rank]),
            np.concatenate([self.step_ok, step_ok]),
            np.concatenate([np.where(self.step_ok, self.step, 0), np.where(step_ok, step, 0)]),
        ]
        order = np.lexsort((np.arange(n_win + n), *keys[::-1]))  # windows first in a run
        first = np.zeros(n_win + n, dtype=bool)
        first[:1] = True
        for k in keys:
            sk = k[order]
            first[1:] |= sk[1:] != sk[:-1]
        head = order[np.maximum.accumulate(np.where(first, np.arange(n_win + n), 0))]
        out = np.empty(n, dtype=np.int64)
        out[order[order >= n_win] - n_win] = np.where(head < n_win, head, -1)[order >= n_win]
        return out


def _breakdown_arrays(inp: _Inputs, *, per_trace: bool) -> Breakdown | None:
    """:func:`_breakdown_of` over NumPy arrays of the columns (:mod:`._breakdown_arrays`), no
    query: a plan of a dozen steps per table was most of breakdown's time on small traces.
    None where the inputs fall outside what the arrays take (see :meth:`_WindowArrays.of`, a
    null in the device work's columns, times that do not fit int64 laid end to end): the
    plans then."""
    taken = _arrays_of(inp.work, inp.win)
    if taken is None:
        return None
    win, clip = taken
    steps = inp.steps
    figures = steps.height > 0 and _any_value(steps.get_column("computing_ns"))
    src = _step_rows(steps, win) if figures else None
    if figures and src is None:
        return None
    got = _streams_split(inp.work, win, clip)
    if got is None:
        return None
    lanes, per_stream = got
    # what the steps table reads: a class whose figure every window takes from its step row,
    # and the device-wide idle split where it is null everywhere, are not computed (Ascend's
    # step_trace_time figures on every window: only the busy time of the split is read)
    owned = {c for c, col in _OWN_OF.items() if tree.SHORTCUTS and _owned(steps, src, col)}
    everywhere = _own_figures_everywhere(steps)
    split_read = not tree.SHORTCUTS or (inp.has_dev and not everywhere and "free" not in owned)
    # one stream a rank: each window's device-wide split is its one stream's
    whole = _one_stream_split(lanes, per_stream, win) if tree.SHORTCUTS else None
    wanted = [c for c in _CLASSES[:-1] if c not in owned]
    if whole is None and not split_read:
        wanted.append("busy")  # the split's busy time alone: the union of the device work
    unions = _class_unions(inp, win, clip, wanted)
    if unions is None:
        return None
    if whole is None:
        whole = (
            arrays.idle_split(
                clip.place, clip.start, clip.end, clip.launch, clip.launched, win.w0, win.w1
            )
            if split_read
            else _busy_only(unions["busy"])
        )
    if whole is None:
        return None
    table = _steps_table(inp, win, unions, whole, src, split_null=everywhere)
    streams = _streams_frame(inp.work, inp.win, win, lanes, per_stream)
    if not per_trace:
        return Breakdown(steps=table, stats=pl.DataFrame(), streams=streams)
    return Breakdown(
        steps=table,
        stats=_stats_table(inp.win),
        streams=streams,
        queue=_queue_table(inp.work, win),
    )


#: The union classes the steps table replaces by a column of Ascend's step figures (``free``:
#: the idle time, whose split is then null), and that column.
_OWN_OF = {
    "compute": "computing_ns",
    "communication": "communication_ns",
    "not_comm": "communication_not_overlapped_ns",
    "free": "free_ns",
}


def _owned(steps: pl.DataFrame, src: np.ndarray | None, col: str) -> bool:
    """Whether every window has a row of the steps (``src``) with a value of ``col``: then the
    steps table reads that value, never the figure computed in its place."""
    if src is None or not len(src) or (src < 0).any():
        return False
    return bool(int_values(steps.get_column(col))[1][src].all())


def _busy_only(busy: np.ndarray) -> arrays.Split:
    """A split of which only the busy time is read (the idle split null everywhere)."""
    none = np.zeros(len(busy), dtype=np.int64)
    return arrays.Split(busy=busy, host_wait=none, kernel_wait=none, other=none)


def _one_stream_split(
    lanes: _StreamLanes, per_stream: arrays.Split, win: _WindowArrays
) -> arrays.Split | None:
    """The device-wide split of each window when every rank's device work is on one (device,
    stream) at most: that stream's lane in each window of the rank is the window's whole
    work, the same pieces in the same lane (a window without a lane: idle throughout, as the
    split of a lane without work); None where a rank has several."""
    count = lanes.count
    if len(count) and int(count.max()) > 1:
        return None
    has = count == 1
    at = np.where(has, lanes.base, 0)
    none = np.zeros(len(count), dtype=np.int64)

    def pick(v: np.ndarray, empty: np.ndarray) -> np.ndarray:
        return np.where(has, v[at], empty) if len(v) else empty

    return arrays.Split(
        busy=pick(per_stream.busy, none),
        host_wait=pick(per_stream.host_wait, none),
        kernel_wait=pick(per_stream.kernel_wait, none),
        other=pick(per_stream.other, win.w1 - win.w0),
    )


def _arrays_of(
    work: _DeviceArrays, frame: pl.DataFrame
) -> tuple[_WindowArrays, _DeviceClip] | None:
    """The windows' arrays and the device work clipped to them; None where the arrays decline
    the windows (:meth:`_WindowArrays.of`) or a piece lacks a rank, start or duration."""
    win = _WindowArrays.of(frame)
    if win is None or not work.complete:
        return None
    return win, _DeviceClip.of(work, frame, win)


@dataclass(frozen=True)
class _DeviceClip:
    """The device work clipped to the windows (:func:`_clip_rows`): each piece's ``rows`` in
    the device work, ``place`` of its window, ``start``, ``end``, and its launch."""

    rows: np.ndarray
    place: np.ndarray
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    launched: np.ndarray

    @staticmethod
    def of(work: _DeviceArrays, frame: pl.DataFrame, win: _WindowArrays) -> _DeviceClip:
        ok = work.rank_ok  # (all of them: what _arrays_of took)
        rows, at, start, end = _clip_arrays((work.rank, ok, work.ts, ok, work.dur, ok), frame)
        return _DeviceClip(rows, win.place[at], start, end, work.launch[rows], work.launched[rows])


def _step_rows(steps: pl.DataFrame, win: _WindowArrays) -> np.ndarray | None:
    """Each window's row of ``steps`` by (rank, step), -1 without one (a null key matches
    none, as the plan's left join); None when two rows of ``steps`` share a key (the join
    would repeat the window)."""
    rank, rank_ok = int_values(steps.get_column("rank"))
    step, step_ok = int_values(steps.get_column("step"))
    keyed = np.flatnonzero(rank_ok & step_ok)
    rows = {(int(rank[i]), int(step[i])): int(i) for i in keyed}
    if len(rows) < len(keyed):
        return None
    return np.array(
        [
            rows.get((int(r), int(s)), -1) if ok else -1
            for r, s, ok in zip(win.rank, win.step, win.step_ok, strict=True)
        ],
        dtype=np.int64,
    )


def _one_kind(kind: pl.Series) -> str | None:
    """The kind of every row when they share one (no null), else None: from the column's
    least and greatest value, which Polars keeps with it (no query; a comparison is ~8 us)."""
    if not len(kind) or kind.null_count():
        return None
    lo, hi = kind.min(), kind.max()
    return str(lo) if lo == hi else None


def _kind_is(kind: pl.Series, name: str) -> np.ndarray:
    """Where ``kind`` is ``name`` (a null kind is not), without a query."""
    return tree.bool_values(kind == name)[0]


def _class_unions(
    inp: _Inputs, win: _WindowArrays, clip: _DeviceClip, wanted: list[str]
) -> dict[str, np.ndarray] | None:
    """The union of each class of :data:`_CLASSES` per window (0 for one not ``wanted``): the
    device work's pieces by kind (``busy``: all of them), the host ops' and data loading's
    clipped here; None where :func:`arrays.union_per_lane` declines."""
    rows, place, start, end = clip.rows, clip.place, clip.start, clip.end
    kind = inp.work.kind
    one = _one_kind(kind) if tree.SHORTCUTS else None
    n = len(_CLASSES)
    lanes: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for cls in wanted:
        if cls in ("host_ops", "data_loading"):
            continue
        if cls == "busy":
            mask: np.ndarray | None = None
        elif one is not None:  # (every piece of one kind: each class all or none, no comparison)
            if not _of_class(one, cls):
                continue
            mask = None
        else:
            mask = _class_mask(kind, cls)[rows]
        i = _CLASSES.index(cls)
        if mask is None:
            lanes.append(place * n + i)
            starts.append(start)
            ends.append(end)
        else:
            lanes.append(place[mask] * n + i)
            starts.append(start[mask])
            ends.append(end[mask])
    for host, cls in ((inp.host, "host_ops"), (inp.data, "data_loading")):
        if not host.height or cls not in wanted:  # (no host op, no data loading: no piece)
            continue
        h_rows, _, h_start, h_end = _clip_rows(host, inp.win)
        # a host piece counts in its event's own step (as the plans' unions keyed by the
        # events' step), clipped to the window it overlaps; a step without a window: nowhere
        step, step_ok = int_values(host.get_column("step"))
        rank = host.get_column("rank").to_numpy().astype(np.int64, copy=False)
        at = win.place_of(rank[h_rows], step[h_rows], step_ok[h_rows])
        kept = at >= 0
        lanes.append(at[kept] * n + _CLASSES.index(cls))
        starts.append(h_start[kept])
        ends.append(h_end[kept])
    n_win = len(win.w0)
    if tree.SHORTCUTS and not lanes:  # (no class to compute: every union 0, no call)
        got: np.ndarray | None = np.zeros(n_win * n, dtype=np.int64)
    else:
        none = np.zeros(0, dtype=np.int64)
        got = arrays.union_per_lane(
            np.concatenate([none, *lanes]),
            np.concatenate([none, *starts]),
            np.concatenate([none, *ends]),
            n_win * n,
        )
    if got is None:
        return None
    return dict(zip(_CLASSES, got.reshape(n_win, n).T, strict=True))


def _of_class(kind: str, cls: str) -> bool:
    """Whether device work of ``kind`` is of class ``cls`` (not ``busy``)."""
    if cls == "not_comm":
        return kind != "communication"
    return kind == ("kernel" if cls == "compute" else cls)


def _class_mask(kind: pl.Series, cls: str) -> np.ndarray:
    """Where the device work is of class ``cls`` (a null kind is neither communication nor
    not: the filters' nulls drop it)."""
    if cls == "compute":
        return _kind_is(kind, "kernel")
    if cls == "not_comm":
        return tree.bool_values(kind != "communication")[0]
    return _kind_is(kind, cls)


#: Up to this many rows a table is built from Python rows: ~40 us for the steps table's 16
#: columns, where a Series per column is ~10 us each (rows cost more from ~60 rows on).
_ROWS_MAX = small_frames.ROWS_MAX

#: A column to build: its name, type, values and where they are valid (None: everywhere).
_Col = tuple[str, Any, np.ndarray, np.ndarray | None]


def _frame(cols: list[_Col]) -> pl.DataFrame:
    """A frame of ``cols`` (each as long as the others)."""
    n = len(cols[0][2])
    if n > _ROWS_MAX:
        return pl.DataFrame([_series(*c) for c in cols])
    values = [v.tolist() if ok is None else _with_nulls(v, ok) for _, _, v, ok in cols]
    return small_frames.frame_of_rows(zip(*values, strict=True), {c[0]: c[1] for c in cols})


def _with_nulls(values: np.ndarray, ok: np.ndarray) -> list[Any]:
    return [v if k else None for v, k in zip(values.tolist(), ok.tolist(), strict=True)]


def _series(name: str, dtype: Any, values: np.ndarray, ok: np.ndarray | None) -> pl.Series:
    """A column of ``values``, null where not ``ok``."""
    if ok is None or ok.all():
        return pl.Series(name, values, dtype=dtype)
    if not ok.any():  # (a masked array's read was ~30 us, whatever its length)
        return pl.Series(name, [None], dtype=dtype).new_from_index(0, len(values))
    return pl.Series(name, np.ma.masked_array(values, mask=~ok), dtype=dtype)


def _window_keys(frame: pl.DataFrame, win: _WindowArrays, at: np.ndarray) -> list[_Col]:
    """The ``rank`` and ``step`` of the windows at places ``at``, in ``frame``'s types (from
    the arrays: a Series' gather was ~50 us a column)."""
    return [
        ("rank", frame.get_column("rank").dtype, win.rank[at], None),
        ("step", frame.get_column("step").dtype, win.step[at], win.step_ok[at]),
    ]


def _steps_table(
    inp: _Inputs,
    win: _WindowArrays,
    u: dict[str, np.ndarray],
    whole: arrays.Split,
    src: np.ndarray | None,
    *,
    split_null: bool,
) -> pl.DataFrame:
    """The steps table (the module doc's columns, sorted by rank and step) from the windows,
    the class unions ``u``, the device-wide split and, with Ascend's own figures, each
    window's row of the steps (``src``); ``split_null``: Ascend's figures on every step
    (:func:`_own_figures_everywhere`)."""
    dur = win.w1 - win.w0
    busy = whole.busy
    n = len(dur)
    has_dev = np.full(n, inp.has_dev)
    # Ascend steps with their own figures for every step: the device-wide split is null (it
    # would not add up to free_ns)
    split_ok = has_dev & (not split_null)
    compute, comm, not_overlapped = u["compute"], u["communication"], busy - u["not_comm"]
    idle, idle_ok = dur - busy, has_dev
    if src is not None:
        steps = inp.steps

        def own(col: str, fallback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            v, ok = int_values(steps.get_column(col))
            at = np.maximum(src, 0)
            mine = (src >= 0) & ok[at]
            return np.where(mine, v[at], fallback), mine

        compute = own("computing_ns", compute)[0]
        comm = own("communication_ns", comm)[0]
        not_overlapped = own("communication_not_overlapped_ns", not_overlapped)[0]
        idle, free = own("free_ns", idle)
        idle_ok = idle_ok | free
        split_ok = split_ok & ~free  # the file's free time: its split is not known
    i64 = pl.Int64
    split = (whole.host_wait, whole.kernel_wait, whole.other)
    return _frame(
        [
            *_window_keys(inp.win, win, np.arange(n)),
            ("ts_ns", inp.win.get_column("w0").dtype, win.w0, None),
            ("dur_ns", i64, dur, None),
            ("compute_ns", i64, compute, None),
            ("communication_ns", i64, comm, None),
            ("communication_not_overlapped_ns", i64, not_overlapped, None),
            ("memcpy_ns", i64, u["memcpy"], None),
            ("memset_ns", i64, u["memset"], None),
            ("device_busy_ns", i64, busy, None),
            ("device_idle_ns", i64, idle, idle_ok),
            *((c, i64, v, split_ok) for c, v in zip(IDLE_COLUMNS, split, strict=True)),
            ("data_loading_ns", i64, u["data_loading"], None),
            ("host_ops_ns", i64, u["host_ops"], None),
        ]
    )


@dataclass(frozen=True)
class _StreamLanes:
    """The streams table's lanes: every (device, stream) pair with work in some window of a
    rank (its ``device`` and ``stream`` at ``pair``), in every window of that rank; each
    window's ``count`` of lanes from ``base``, each lane's window ``lane_win``."""

    device: np.ndarray
    stream: np.ndarray
    lane_win: np.ndarray
    lane_pair: np.ndarray
    count: np.ndarray
    base: np.ndarray


def _streams_split(
    work: _DeviceArrays, win: _WindowArrays, clip: _DeviceClip
) -> tuple[_StreamLanes, arrays.Split] | None:
    """The streams table's lanes and their split, from the windows' arrays ``win`` and the
    device work (clipped: ``clip``); None where the arrays decline."""
    device = work.device[clip.rows]
    stream = work.stream[clip.rows]
    rank = win.rank[clip.place]
    # the rank's (device, stream) pairs, sorted: each rank's one run of them
    pair, reps = arrays.lane_ids(rank, device, stream)
    pair_rank = rank[reps]
    first = np.searchsorted(pair_rank, win.rank, side="left")
    count = np.searchsorted(pair_rank, win.rank, side="right") - first
    # lanes: each window's pairs in a row, windows in order
    base = np.cumsum(count) - count
    lane_win = np.repeat(np.arange(len(count)), count)
    lane_pair = first[lane_win] + np.arange(len(lane_win)) - base[lane_win]
    lane = base[clip.place] + pair - first[clip.place]
    w0, w1 = win.w0[lane_win], win.w1[lane_win]
    split = arrays.idle_split(lane, clip.start, clip.end, clip.launch, clip.launched, w0, w1)
    if split is None:
        return None
    return _StreamLanes(device[reps], stream[reps], lane_win, lane_pair, count, base), split


def _streams_frame(
    work: _DeviceArrays,
    frame: pl.DataFrame,
    win: _WindowArrays,
    lanes: _StreamLanes,
    split: arrays.Split,
) -> pl.DataFrame:
    """The streams table: its lanes sorted by rank, step, device and stream, its window's
    ``dur_ns``, ``busy_ns`` and :data:`IDLE_COLUMNS` (the windows ``frame``, their arrays
    ``win``)."""
    i64 = pl.Int64
    lane_win = lanes.lane_win
    return _frame(
        [
            *_window_keys(frame, win, lane_win),
            ("device", work.device_dtype, lanes.device[lanes.lane_pair], None),
            ("stream", i64, lanes.stream[lanes.lane_pair], None),
            ("dur_ns", i64, win.w1[lane_win] - win.w0[lane_win], None),
            ("busy_ns", i64, split.busy, None),
            ("idle_host_wait_ns", i64, split.host_wait, None),
            ("idle_kernel_wait_ns", i64, split.kernel_wait, None),
            ("idle_other_ns", i64, split.other, None),
        ]
    )


def _queue_table(work: _DeviceArrays, win: _WindowArrays) -> pl.DataFrame:
    """:func:`queue_lengths` over arrays (the module doc's definitions): the device work of
    the ranks with a window, each (rank, device, stream) a lane over its rank's range, the
    windows' arrays ``win`` (no null rank or bound) and the device work's keys without a null
    (what :func:`_arrays_of` took)."""
    rank, ts, launch, launched = work.rank, work.ts, work.launch, work.launched
    end = ts + work.dur
    # each rank's range: its windows (sorted by rank) from the first start to the last end
    at = np.flatnonzero(arrays.run_starts(win.rank))
    ranks = win.rank[at]
    r0 = np.minimum.reduceat(win.w0, at) if len(at) else win.w0
    r1 = np.maximum.reduceat(win.w1, at) if len(at) else win.w1
    of = np.minimum(np.searchsorted(ranks, rank), max(len(ranks) - 1, 0))
    kept = np.flatnonzero(ranks[of] == rank) if len(ranks) else np.zeros(0, dtype=np.int64)
    device = work.device[kept]
    stream = work.stream[kept]
    lane, reps = arrays.lane_ids(rank[kept], device, stream)
    place = of[kept][reps]  # each lane's rank among the ranges
    q = arrays.launch_queue(
        lane,
        np.where(launched, launch, ts)[kept],
        end[kept],
        r0[place],
        r1[place],
    )
    span = (r1 - r0)[place]
    live = np.flatnonzero(span > 0)  # (a rank's range without length: no row, as the plan)
    keys = (("rank", rank[kept][reps]), ("device", device[reps]), ("stream", stream[reps]))
    figures = _queue_figures(span[live], q.area[live], q.top[live], q.busy[live])
    return _frame(
        [(c, _QUEUE_SCHEMA[c], v, None) for c, v in (*((c, v[live]) for c, v in keys), *figures)]
    )
