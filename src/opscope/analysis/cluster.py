"""Multi-rank cluster analysis: per-rank breakdown, collectives and wait, slow ranks and links.

The work is split in two so that it scales past one machine (:mod:`opscope.cluster` runs it):

1. :func:`rank_tables` turns ONE rank's Profile into small summary tables (``steps``: one row per
   step; ``collectives``: one row per collective call; ``links``: Ascend per-link bandwidth when
   given). It runs once per rank, in a worker process or a Ray task.
2. :func:`aggregate` joins those tables over all ranks: aligns the same collective across ranks,
   derives each rank's wait, flags slow ranks and slow links, and the per-step rank gap.

The registered analysis ``"cluster"`` does both in-process on a multi-rank Profile.

Breakdown per step
    Device profiles reuse :func:`opscope.analysis.breakdown.breakdown` (compute = non-collective
    kernels, communication = collective kernels, not-overlapped = communication while no compute
    runs, idle = step − device busy; Ascend ``step_trace_time.csv`` figures where present).
    Host-only profiles (gloo on CPU) use the same interval unions over host events: compute =
    union of ``cpu_op`` that are not collectives, communication = union of the collectives.

Collectives
    Device: events of kind ``communication`` (classified once at load, see
    :mod:`opscope.model.kinds`: NCCL/RCCL, DeepEP, NVSHMEM, symmetric-memory kernels, Ascend
    tasks on the ``HCCL`` core; one event per call, Ascend's per-plane HCCL tasks are ``other``
    and do not count again). Host-only
    ranks: ``gloo:`` / ``mpi:`` / ``ucc:`` ranges (gloo runs collectives on its own threads).
    ``collective`` is the normalised operation (``allreduce``, ``allgather``, ``broadcast``, ...);
    ``bytes`` comes from Kineto's ``In msg nelems`` × the ``dtype`` size when recorded.

Wait time
    The same collective is aligned across ranks by (step, collective, process group, sequence
    index of that collective within the step and group on each rank). Every rank leaves a
    collective together, so a rank that enters it early waits for the last one:
    ``wait_r = max(start over ranks) − start_r`` (as HTA and msprof compute it), clipped to the
    call's own duration. Only collectives seen on two ranks or more count.

Slow rank (all thresholds below are named constants)
    A rank is slow when it makes the others wait: it is among the last to arrive (it waits at
    most :data:`LATE_WAIT_RATIO` of that collective's median wait) in at least
    :data:`LAST_ARRIVAL_SHARE` of the aligned collectives where some rank waited at least
    :data:`MIN_COLLECTIVE_WAIT_US` and :data:`MIN_COLLECTIVE_WAIT_SHARE` of the median step, its
    peers wait on average at least :data:`MIN_PEER_WAIT_US` per step and at least
    :data:`MIN_PEER_WAIT_SHARE` of their step time, and its own wait is at most
    :data:`OWN_WAIT_RATIO` of its peers' median wait. The evidence says how much more compute it
    has than the median of its peers.

Slow link
    Ascend ``communication_matrix.json`` links are summed per (src, dst, transport); a link whose
    bandwidth is below :data:`SLOW_LINK_RATIO` × the median bandwidth of its transport type
    (over links that moved at least :data:`MIN_LINK_BYTES`) is slow.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import numpy as np
import polars as pl

from opscope import units
from opscope.analysis import cluster_ascend as asc
from opscope.analysis import cluster_calls, tree
from opscope.analysis.breakdown import breakdown
from opscope.analysis.cluster_calls import collectives
from opscope.analysis.hotspots import rows_of
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.small_frames import frame_of_rows
from opscope.model import Profile, dtypes

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

LAST_ARRIVAL_SHARE: Final = 0.6
"""A slow rank is among the last to arrive in at least this share of the aligned collectives."""

LATE_WAIT_RATIO: Final = 0.1
"""Among the last to arrive at a collective: waiting at most this fraction of its median wait."""

MIN_COLLECTIVE_WAIT_US: Final = 100.0
"""Arrival order counts only at collectives where some rank waited at least this long (µs) ..."""

MIN_COLLECTIVE_WAIT_SHARE: Final = 0.01
"""... and at least this share of the median step time: where all arrive together, which one was
last by a few hundred µs is scheduling jitter (a 2-rank run whose second all-reduce of each step
was such a tie left its straggler last at only half to two thirds of the collectives)."""

MIN_PEER_WAIT_US: Final = 1000.0
"""Its peers wait at least this long per step on average (µs): below it, jitter, not a straggler."""

MIN_PEER_WAIT_SHARE: Final = 0.05
"""... and at least this share of their step time."""

OWN_WAIT_RATIO: Final = 0.5
"""A slow rank's own wait is at most this fraction of the median wait of its peers."""

COMPUTE_EXCESS: Final = 0.1
"""Evidence: compute more than 10 % above the peers' median is called the cause."""

SLOW_LINK_RATIO: Final = 0.5
"""A link is slow below this fraction of the median bandwidth of its transport type."""

MIN_LINK_BYTES: Final = 1 << 20
"""Links that moved less than 1 MiB are too small for a bandwidth figure and are ignored."""

HOST_COLLECTIVE: Final = r"^(gloo|mpi|ucc):"
"""Host ranges that are collectives on CPU-only ranks (gloo's worker threads)."""

_COLL_WORD = (
    r"(?i)(all_?reduce|all_?gather|reduce_?scatter|all_?to_?allv?|alltoallv?|broadcast|"
    r"send_?recv|barrier|reduce|gather|scatter|send|recv)"
)
_COLL_WORD_RE: Final = re.compile(_COLL_WORD)
STEP_COLUMNS: Final[dict[str, type[pl.DataType]]] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "ts_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "compute_ns": pl.Int64,
    "communication_ns": pl.Int64,
    "communication_not_overlapped_ns": pl.Int64,
    "idle_ns": pl.Int64,
}
COLLECTIVE_COLUMNS: Final[dict[str, type[pl.DataType]]] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "collective": pl.String,
    "name": pl.String,
    "group": pl.String,
    "seq": pl.Int32,
    "start_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "bytes": pl.Int64,
}
LINK_COLUMNS: Final[dict[str, type[pl.DataType]]] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "op_name": pl.String,
    "group": pl.String,
    "src_rank": pl.Int32,
    "dst_rank": pl.Int32,
    "transport": pl.String,
    "size_bytes": pl.Int64,
    "time_ns": pl.Int64,
    "bandwidth_gbps": pl.Float64,
    # Ascend: the ends were mapped to global ranks through the rank's parallel_group_info;
    # the row is a "<op>-total" summary of its group (the sum of all that op type's calls).
    "mapped": pl.Boolean,
    "total": pl.Boolean,
}


# --------------------------------------------------------------------------------- per rank

#: The schema of each of :func:`rank_tables`' tables.
_SCHEMAS: Final[dict[str, dict[str, type[pl.DataType]]]] = {
    "steps": STEP_COLUMNS,
    "collectives": COLLECTIVE_COLUMNS,
    "links": LINK_COLUMNS,
    "hccl": asc.HCCL_COLUMNS,
    "stages": asc.STAGE_COLUMNS,
}


def rank_tables(
    profile: Profile,
    links: pl.DataFrame | None = None,
    *,
    hccl: pl.DataFrame | None = None,
    stages: pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """Summary tables of one rank (or of every rank of ``profile``): ``steps``, ``collectives``
    and ``links`` with the columns of :data:`STEP_COLUMNS`, :data:`COLLECTIVE_COLUMNS` and
    :data:`LINK_COLUMNS`. ``links`` is the Ascend ``read_communication()["links"]`` table,
    ``hccl`` its ``["collectives"]`` table and ``stages`` the pipeline stage
    (:mod:`opscope.analysis.cluster_ascend`); both are empty when not given."""
    plans = _rank_plans(profile, links, hccl=hccl, stages=stages)
    return {k: _conform(v, _SCHEMAS[k]) for k, v in plans.items()}


def _rank_plans(
    profile: Profile,
    links: pl.DataFrame | None = None,
    *,
    hccl: pl.DataFrame | None = None,
    stages: pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """:func:`rank_tables`' tables, the steps and collectives already in the columns and types
    of their schemas (the in-process analysis hands them to :func:`_aggregate` as they are)."""
    colls, comp = _calls(profile.events, host_compute=not profile.has_device)
    steps = _steps(profile, colls, comp)
    lk = _conform(links if links is not None else _empty("links"), LINK_COLUMNS)
    hc = _conform(hccl if hccl is not None else _empty("hccl"), asc.HCCL_COLUMNS)
    sg = _conform(stages if stages is not None else _empty("stages"), asc.STAGE_COLUMNS)
    return {"steps": steps, "collectives": colls, "links": lk, "hccl": hc, "stages": sg}


def _conform(
    frame: pl.DataFrame | pl.LazyFrame, cols: dict[str, type[pl.DataType]]
) -> pl.DataFrame:
    if isinstance(frame, pl.DataFrame) and _in_shape(frame, cols):
        return frame  # already those columns and types (rank_tables' empty tables): no query
    if isinstance(frame, pl.LazyFrame) and frame.collect_schema() == pl.Schema(cols):
        return frame.collect(engine="in-memory")  # a plan of _rank_plans: already conformed
    return _conformed(frame, cols).collect(engine="in-memory")


def _conform_sorted(
    frame: pl.DataFrame | pl.LazyFrame, cols: dict[str, type[pl.DataType]], *by: str
) -> pl.DataFrame:
    """:func:`_conform` then sorted by ``by``, one query; none for an empty frame already in
    shape (rank_tables' empty Ascend tables on every GPU trace: sorting nothing is nothing)."""
    if isinstance(frame, pl.DataFrame) and frame.height == 0 and _in_shape(frame, cols):
        return frame
    return _conformed(frame, cols).sort(*by).collect(engine="in-memory")


def _in_shape(frame: pl.DataFrame, cols: dict[str, type[pl.DataType]]) -> bool:
    """Whether ``frame`` has exactly the columns ``cols``, in order, of their types (its
    columns and dtypes read: comparing its schema with ``pl.Schema(cols)`` was ~30 us)."""
    names, types = _shape(tuple(cols.items()))
    return frame.columns == names and frame.dtypes == types


@functools.cache
def _shape(cols: tuple[tuple[str, Any], ...]) -> tuple[list[str], list[pl.DataType]]:
    """The names and dtypes (as instances, which compare exactly) of a schema's columns."""
    schema = pl.Schema(dict(cols))
    return schema.names(), schema.dtypes()


def _conformed(
    frame: pl.DataFrame | pl.LazyFrame, cols: dict[str, type[pl.DataType]]
) -> pl.LazyFrame:
    """``frame`` with exactly the columns ``cols``, in that order, cast (not strictly: a value
    that does not fit is null), a missing column null; as a plan, so that the caller's next
    steps run in the same query."""
    lf = frame.lazy()
    have = set(lf.collect_schema().names())
    missing = [pl.lit(None, t).alias(c) for c, t in cols.items() if c not in have]
    if missing:
        lf = lf.with_columns(missing)
    return _cast_to(lf, cols)


def _cast_to(lf: pl.LazyFrame, cols: dict[str, type[pl.DataType]]) -> pl.LazyFrame:
    """:func:`_conformed` of a plan that holds every column of ``cols``: without resolving its
    schema (~0.1-0.2 ms for a plan of a few steps, twice per plan of a report)."""
    return lf.select(pl.col(c).cast(t, strict=False) for c, t in cols.items())


def _calls(ev: pl.DataFrame, *, host_compute: bool) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(The collectives table of ``ev``'s collective calls (:func:`_collectives_of`), with
    ``host_compute`` the host compute intervals ``rank``, ``ts_ns``, ``dur_ns`` for a profile
    without device work, else None).

    Whether there is a collective call at all, and the host compute rows, found in NumPy (the
    kinds' codes, each distinct name tested once): most traces have no collective call (then
    no query; the plan that found none, and the host compute query, were ~1 ms of a small
    trace's report)."""
    # Per rank: the device collectives when the rank has any, else its host ones (gloo).
    # (The host part only when a rank lacks them.)
    kind, rank = ev.get_column("kind"), ev.get_column("rank")
    comm = kind == "communication"
    dev_ranks = sorted({r for r in rank.filter(comm).to_list() if r is not None})
    names = _NameCodes(ev.get_column("name"))
    made: list[Callable[..., np.ndarray]] = []

    def kind_in(*kinds: str) -> np.ndarray:
        """The kinds' mask (the codes read once, and only where a mask is wanted)."""
        if not made:
            made.append(_kind_test(kind))
        return made[0](*kinds)

    found = bool(comm.any())
    lev = ev.lazy()
    parts = [lev.filter(pl.col("kind") == "communication")]
    if not tree.SHORTCUTS or _rank_without(rank, dev_ranks):
        cand = np.flatnonzero(kind_in("user_annotation", "cpu_op"))
        cand = cand[names.test(cand, _is_host_collective)]
        r, r_ok = tree.int_values(rank[cand])  # (indexing: a gather without a query)
        # (a null rank: in no rank, as the filter's is_in drops it)
        if (r_ok & ~np.isin(r, np.asarray(dev_ranks, dtype=np.int64))).any() or not tree.SHORTCUTS:
            found = True
            host_comm = pl.col("kind").is_in(["user_annotation", "cpu_op"]) & pl.col(
                "name"
            ).str.contains(HOST_COLLECTIVE)
            parts.append(lev.filter(host_comm & ~pl.col("rank").is_in(dev_ranks)))
    if tree.SHORTCUTS and not found:
        colls = _empty("collectives")  # (the plan's schema: its last select casts to it)
    else:
        # device calls without Kineto's args (Ascend's): in Python, no plan
        got = collectives(ev, comm, _COLL_WORD_RE) if tree.SHORTCUTS and len(parts) == 1 else None
        if got is not None:
            colls = got
        else:
            calls = (pl.concat(parts) if len(parts) > 1 else parts[0]).select(*_call_columns())
            # (collect_all: its passes over this plan were ~0.1 ms fewer than collect's)
            colls = pl.collect_all([_collectives_of(calls)], engine="in-memory")[0]
    if not host_compute:
        return colls, None
    ops = np.flatnonzero(kind_in("cpu_op"))
    ops = ops[names.test(ops, _is_host_compute)]
    return colls, pl.DataFrame([ev.get_column(c) for c in ("rank", "ts_ns", "dur_ns")])[ops]


class _NameCodes:
    """Name tests on rows of a name column, each distinct name tested once in Python (a null
    name: False, as a filter drops it): the names' codes from a Categorical cast, made on the
    first test (a test per row was ~0.2 ms on a 2.4k-op trace)."""

    def __init__(self, names: pl.Series) -> None:
        self.names = names
        self.codes: np.ndarray | None = None
        self.texts: list[str | None] = []

    def test(self, rows: np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
        if not len(rows):
            return np.zeros(0, dtype=bool)
        if self.codes is None:
            ids, ok = tree.int_values(self.names.cast(pl.Categorical).to_physical())
            uniq, inv = np.unique(np.where(ok, ids, -1), return_inverse=True)
            one = np.empty(len(uniq), dtype=np.int64)
            one[inv] = np.arange(len(inv), dtype=np.int64)
            self.codes, self.texts = inv.reshape(-1), self.names[one].to_list()
        verdict = np.array([t is not None and test(t) for t in self.texts], dtype=bool)
        out: np.ndarray = verdict[self.codes[rows]]
        return out


_HOST_COLLECTIVE_RE: Final = re.compile(HOST_COLLECTIVE)


def _is_host_collective(name: str) -> bool:
    """A host op of a collective library: :data:`HOST_COLLECTIVE` (a prefix: Python's ``re``
    reads it as Polars' engine does)."""
    return _HOST_COLLECTIVE_RE.search(name) is not None


def _is_host_compute(name: str) -> bool:
    """A host op that is compute on a rank without device work: no collective, not c10d's."""
    return not (
        _is_host_collective(name) or name.startswith("c10d::") or "record_param_comms" in name
    )


def _kind_test(kind: pl.Series) -> Callable[..., np.ndarray]:
    """A mask of the events of given kinds (a null kind: none), from the kind Enum's codes read
    once (a comparison of the column was a query each)."""
    if not isinstance(kind.dtype, pl.Enum):
        text = kind.cast(pl.String).to_list()
        return lambda *names: np.fromiter((k in names for k in text), dtype=bool, count=len(text))
    cats = kind.dtype.categories.to_list()
    codes, known = tree.int_values(kind.to_physical())
    codes = np.where(known, codes, len(cats))

    def mask(*names: str) -> np.ndarray:
        return np.array([c in names for c in cats] + [False], dtype=bool)[codes]

    return mask


def _collectives_of(calls: pl.LazyFrame) -> pl.LazyFrame:
    """The collectives table (:data:`COLLECTIVE_COLUMNS`) of the plan of the collective calls
    in :func:`_call_columns`, as a plan (run in :func:`_calls`' query: a query of its own was a
    fixed cost)."""
    size, seq, cast = _collective_exprs()
    # calls at one instant: in trace order; seq numbers the calls in time, with ties kept in
    # trace order the same calls are matched across ranks every run
    out = calls.select(pl.exclude("_nelems", "_dtype"), size).sort(
        "rank", "start_ns", maintain_order=True
    )
    return out.with_columns(seq).select(*cast)


@functools.cache
def _collective_exprs() -> tuple[pl.Expr, pl.Expr, tuple[pl.Expr, ...]]:
    """:func:`_collectives_of`' bytes, seq and casts, built once per process (~0.4 ms of Python
    each time, the dtype spellings' mapping most)."""
    size = pl.col("_nelems") * dtypes.itemsize_expr(pl.col("_dtype"))
    seq = pl.int_range(pl.len()).over("rank", "step", "collective", "group").cast(pl.Int32)
    cast = tuple(pl.col(c).cast(t, strict=False) for c, t in COLLECTIVE_COLUMNS.items())
    return size.alias("bytes"), seq.alias("seq"), cast


def _rank_without(rank: pl.Series, dev_ranks: list[int]) -> bool:
    """Whether some event's rank (null included) is not in ``dev_ranks``: a rank whose
    collectives are on the host. Series operations, no query."""
    if rank.null_count():
        return True
    lo, hi = rank.min(), rank.max()
    if lo is None:
        return False
    if lo == hi:
        return lo not in dev_ranks
    return not set(rank.unique().to_list()) <= set(dev_ranks)


@functools.cache
def _call_columns() -> tuple[pl.Expr, ...]:
    """The columns of a collective call taken from its event (``bytes`` as its parts
    ``_nelems`` and ``_dtype``): built once per process (~0.4 ms of Python each time)."""
    arg = pl.col("args")
    coll_arg = arg.str.json_path_match("$['Collective name']")
    nelems = arg.str.json_path_match("$['In msg nelems']").cast(pl.Int64, strict=False)
    dtype = arg.str.json_path_match("$['dtype']")
    group = arg.str.json_path_match("$['Process Group Name']")
    word = pl.col("name").str.extract(_COLL_WORD, 1)
    return (
        pl.col("rank"),
        pl.col("step").fill_null(-1).alias("step"),
        pl.coalesce(coll_arg, word, pl.col("name"))
        .str.to_lowercase()
        .str.replace_all("_", "")
        .alias("collective"),
        pl.col("name"),
        group.alias("group"),
        pl.col("ts_ns").alias("start_ns"),
        pl.col("dur_ns"),
        nelems.alias("_nelems"),
        dtype.alias("_dtype"),
    )


def _steps(profile: Profile, calls: pl.DataFrame, comp: pl.DataFrame | None) -> pl.DataFrame:
    """The steps table (:data:`STEP_COLUMNS`): the breakdown's with device work, else the
    host intervals' unions in each step window (``comp``: :func:`_calls`' compute
    intervals)."""
    if profile.has_device or comp is None:
        b = breakdown(profile, Options()).steps
        step, has_step = tree.int_values(b.get_column("step"))
        # the breakdown's columns as Series (a plan's select and casts were a query)
        cols = [
            b.get_column("rank"),
            pl.Series("step", np.where(has_step, step, -1)),
            *(b.get_column(c) for c in ("ts_ns", "dur_ns", "compute_ns", "communication_ns")),
            b.get_column("communication_not_overlapped_ns"),
            b.get_column("device_idle_ns").alias("idle_ns"),
        ]
        # (a column already of its type as it is: a cast is ~3 us even to the same type)
        return pl.DataFrame(
            [c if c.dtype == (t := STEP_COLUMNS[c.name]) else c.cast(t, strict=False) for c in cols]
        )
    return _host_steps(profile, calls, comp)


def _host_steps(profile: Profile, calls: pl.DataFrame, comp: pl.DataFrame) -> pl.DataFrame:
    """Per step window (the profile's steps, else one per rank: its events' span, step -1) the
    length of the union of the rank's compute intervals in it, of its collectives and of both.

    A window's union of the intervals clipped to it is the union of the intervals intersected
    with it: each rank's intervals merged once, then each window's share read off the running
    sum of their lengths by binary search, in NumPy (the join of every interval with every
    window, a union and a pivot were ~16 frame operations of fixed cost). Windows of one
    (rank, step) count as one (their union), as the per-key union did; a window with a null
    rank, step or bound, or none of its rank's intervals, has 0 of each. Intervals with a null
    rank, start or duration count nowhere."""
    st = profile.steps
    if st.height:
        rank, rank_ok = tree.int_values(st.get_column("rank"))
        step, step_ok = tree.int_values(st.get_column("step"))
        w0, w0_ok = tree.int_values(st.get_column("ts_ns"))
        d, d_ok = tree.int_values(st.get_column("dur_ns"))
        w1, w1_ok = w0 + d, w0_ok & d_ok
    else:
        rank, rank_ok, w0, w0_ok, w1, w1_ok = _event_spans(profile.events)
        step, step_ok = np.full(len(rank), -1, dtype=np.int64), np.ones(len(rank), dtype=bool)
    # (rank, step) as one int64 (two int32s): a key's figures are its windows' (a window of
    # no length too, beside one of its key with a length)
    keyed = rank_ok & step_ok
    code = rank[keyed] * (1 << 32) + (step[keyed] + (1 << 31))
    keys, key_of = np.unique(code, return_inverse=True)
    live = (w0_ok & w1_ok & (w1 > w0))[keyed]  # the windows that can hold anything
    g, a, b = _merged(key_of[live].astype(np.int64), w0[keyed][live], w1[keyed][live])
    win_rank = keys[g] >> 32

    def per_window(iv: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        got = np.zeros(len(rank), dtype=np.int64)
        if len(g):
            u = _merged(*iv)
            per_key = np.zeros(len(keys), dtype=np.int64)
            np.add.at(per_key, g, _below(u, win_rank, b) - _below(u, win_rank, a))
            got[keyed] = per_key[key_of]
        return got

    ci, mi = _intervals(comp, "ts_ns"), _intervals(calls, "start_ns")
    compute = per_window(ci)
    comm = per_window(mi)
    busy = per_window(tuple(np.concatenate(x) for x in zip(ci, mi, strict=True)))  # type: ignore[arg-type]
    dur_ok = w0_ok & w1_ok
    dur = w1 - w0
    order = np.lexsort((step, step_ok, rank, rank_ok))  # nulls first, as Polars sorts
    cols = (
        ("rank", rank, rank_ok),
        ("step", step, step_ok),
        ("ts_ns", w0, w0_ok),
        ("dur_ns", dur, dur_ok),
        ("compute_ns", compute, None),
        ("communication_ns", comm, None),
        ("communication_not_overlapped_ns", busy - compute, None),
        ("idle_ns", dur - busy, dur_ok),
    )
    return pl.DataFrame(
        [
            pl.Series(
                c,
                v[order]
                if ok is None or ok.all()  # (a masked array's read: ~30 us, whatever its length)
                else np.ma.masked_array(v[order], mask=~ok[order]),
                dtype=STEP_COLUMNS[c],
            )
            for c, v, ok in cols
        ]
    )


def _event_spans(
    ev: pl.DataFrame,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per rank of ``ev`` (a null rank one too): (rank, rank valid, the least start, valid, the
    greatest end, valid), each window's bounds over its events with them."""
    r, r_ok = tree.int_values(ev.get_column("rank"))
    ts, ts_ok = tree.int_values(ev.get_column("ts_ns"))
    d, d_ok = tree.int_values(ev.get_column("dur_ns"))
    ranks, inv = np.unique(r[r_ok], return_inverse=True)
    n = len(ranks) + int(not r_ok.all())
    grp = np.full(len(r), len(ranks), dtype=np.int64)  # the null rank last
    grp[r_ok] = inv
    big = np.iinfo(np.int64).max
    lo, hi = np.full(n, big, dtype=np.int64), np.full(n, -big - 1, dtype=np.int64)
    np.minimum.at(lo, grp[ts_ok], ts[ts_ok])
    e_ok = ts_ok & d_ok
    np.maximum.at(hi, grp[e_ok], ts[e_ok] + d[e_ok])
    lo_ok, hi_ok = np.bincount(grp[ts_ok], minlength=n) > 0, np.bincount(grp[e_ok], minlength=n) > 0
    rank = np.concatenate([ranks, np.zeros(n - len(ranks), dtype=np.int64)])
    return rank, np.arange(n) < len(ranks), lo, lo_ok, hi, hi_ok


def _intervals(df: pl.DataFrame, start: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, start, end) of the rows of ``df`` with a rank, a start and a duration."""
    r, r_ok = tree.int_values(df.get_column("rank"))
    s, s_ok = tree.int_values(df.get_column(start))
    d, d_ok = tree.int_values(df.get_column("dur_ns"))
    ok = r_ok & s_ok & d_ok
    return r[ok], s[ok], s[ok] + d[ok]


def _merged(
    g: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the intervals [``s``, ``e``) per group ``g``: its disjoint segments (group,
    start, end) sorted by group and start (touching intervals join)."""
    if not len(s):
        return g, s, e
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    first = np.ones(len(s), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    if g[0] == g[-1]:  # one group (one rank: most profiles): its running maximum itself
        reach = np.maximum.accumulate(e)
    else:
        # the running maximum of the ends within each group, by one running maximum over all
        # rows: each end as its rank among the ends, each group's ranks lifted above the
        # group's before (exact integers, no restart per group)
        vals, inv = np.unique(e, return_inverse=True)
        lift = (np.cumsum(first) - 1) * len(vals)
        reach = vals[np.maximum.accumulate(lift + inv) - lift]
    new = first.copy()
    new[1:] |= s[1:] > reach[:-1]
    at = np.flatnonzero(new)
    return g[at], s[at], np.maximum.reduceat(e, at)


def _below(
    u: tuple[np.ndarray, np.ndarray, np.ndarray], g: np.ndarray, x: np.ndarray
) -> np.ndarray:
    """Per query (``g``, ``x``): the length of group ``g``'s union ``u`` (:func:`_merged`)
    before ``x``."""
    ug, us, ue = u
    if not len(us) or not len(x):
        return np.zeros(len(x), dtype=np.int64)
    if ug[0] == ug[-1] and bool((g == ug[0]).all()):
        # one group (one rank: most profiles): the segments sorted by start, no key to build
        k = np.searchsorted(us, x, side="right")  # segments up to the query's
        lo = np.zeros(len(x), dtype=np.int64)
    else:
        # (group, time) pairs ordered as one int64 key: the group's rank among the groups,
        # then the time's rank among the times
        _, gi = np.unique(np.concatenate([ug, g]), return_inverse=True)
        times, ti = np.unique(np.concatenate([us, x]), return_inverse=True)
        key = gi * len(times) + ti
        seg_key, q_key = key[: len(us)], key[len(us) :]
        k = np.searchsorted(seg_key, q_key, side="right")
        lo = np.searchsorted(seg_key, gi[len(us) :] * len(times), side="left")  # group's first
    cum = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(ue - us)])
    last = np.maximum(k - 1, 0)
    inside = np.minimum(x, ue[last]) - us[last]  # of the last segment starting at or before x
    return np.where(k > lo, cum[last] - cum[lo] + inside, 0)


# --------------------------------------------------------------------------------- aggregate


@dataclass(frozen=True)
class Cluster(Result):
    """Cluster analysis over all ranks.

    ``ranks``: one row per rank (step time, compute, communication, not overlapped, idle and wait
    totals in ns, steps, last-arrival share); ``steps``: per (rank, step); ``collectives``: per
    call with ``wait_ns`` and ``ranks_seen``; ``step_gap``: per step the fastest and slowest rank;
    ``slow_ranks``: rows of the flagged ranks with their evidence; ``links`` / ``slow_links``:
    per-link bandwidth and the slow ones. ``engine`` says what ran the per-rank work.
    """

    ranks: pl.DataFrame
    steps: pl.DataFrame
    collectives: pl.DataFrame
    step_gap: pl.DataFrame
    slow_ranks: pl.DataFrame
    links: pl.DataFrame
    slow_links: pl.DataFrame
    engine: str = "local"
    top: int = 20
    failed: tuple[tuple[int, str], ...] = ()  # (rank, reason): ranks skipped, unreadable
    # Ascend: per-op communication.json rows, per-rank figures in msprof-analyze's terms,
    # pipeline stage per rank and the stage imbalance (cluster_ascend.py).
    hccl: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=asc.HCCL_COLUMNS))
    msprof: pl.DataFrame = field(default_factory=pl.DataFrame)
    stages: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=asc.STAGE_COLUMNS))
    stage_imbalance: pl.DataFrame = field(default_factory=pl.DataFrame)

    @property
    def slow_rank_ids(self) -> list[int]:
        """Rank ids of the slow ranks."""
        return [int(r) for r in self.slow_ranks.get_column("rank").to_list()]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: times in µs (``*_us``), see docs/cluster.md."""
        # the collectives' sums, and the ranks' rows, in Python where they take it (a group-by's
        # query and a frame of six Series were ~0.2 ms of a few rows' JSON)
        coll_ns = cluster_calls.sums(self.collectives)
        ranks_rows = _rank_rows(self.ranks) if tree.SHORTCUTS else None
        plans: list[tuple[pl.DataFrame | pl.LazyFrame, int | None]] = []
        if ranks_rows is None:
            r = self.ranks
            ranks = pl.DataFrame(
                [
                    r.get_column("rank"),
                    r.get_column("steps"),
                    *[units.us(r.get_column(f"{c}_ns"), name=f"{c}_us") for c in _RANK_TIMES],
                    r.get_column("last_arrival_share"),
                    r.get_column("collectives"),
                ]
            )
            plans.append((ranks, None))
        if coll_ns is None:
            coll_sum = (
                self.collectives.lazy()
                .group_by("rank", "collective")
                .agg(
                    pl.len().alias("calls"),
                    pl.col("dur_ns").sum(),
                    pl.col("wait_ns").sum(),
                    pl.col("bytes").sum().alias("bytes"),
                )
                .sort("rank", "collective")
            )
            plans.append((coll_sum, None))
        # the tables in one call (the collectives' sums were a query beside it: a fixed cost
        # on every report); the sums' µs the quotients of the integer sums (opscope.units)
        *got, evidence, step_gap, slow_links = rows_of(
            [*plans, (self.slow_ranks, None), (self.step_gap, None), (self.slow_links, None)]
        )
        if ranks_rows is None:
            ranks_rows = got.pop(0)
        if coll_ns is None:
            coll_ns = got.pop(0)
        coll_rows = [
            {
                "rank": c["rank"],
                "collective": c["collective"],
                "calls": c["calls"],
                "dur_us": units.us_value(c["dur_ns"]),
                "wait_us": units.us_value(c["wait_ns"]),
                "bytes": c["bytes"],
            }
            for c in coll_ns
        ]
        return {
            "engine": self.engine,
            "failed_ranks": [{"rank": r, "reason": why} for r, why in self.failed],
            "ranks": ranks_rows,
            "slow_ranks": self.slow_rank_ids,
            "slow_rank_evidence": evidence,
            "step_gap": step_gap,
            "collectives": coll_rows,
            "slow_links": slow_links,
            "msprof_ranks": self.msprof.to_dicts(),
            "rank_gaps": asc.rank_gaps(self.msprof),
            "stages": self.stages.to_dicts(),
            "stage_imbalance": self.stage_imbalance.to_dicts(),
            "slow_stages": [
                int(s) for s in self.stage_imbalance.filter(pl.col("slow")).get_column("pp_stage")
            ]
            if self.stage_imbalance.height
            else [],
            "matrix": asc.matrix_rows(self.links),
            "thresholds": {
                "last_arrival_share": LAST_ARRIVAL_SHARE,
                "late_wait_ratio": LATE_WAIT_RATIO,
                "min_collective_wait_us": MIN_COLLECTIVE_WAIT_US,
                "min_collective_wait_share": MIN_COLLECTIVE_WAIT_SHARE,
                "min_peer_wait_us": MIN_PEER_WAIT_US,
                "min_peer_wait_share": MIN_PEER_WAIT_SHARE,
                "own_wait_ratio": OWN_WAIT_RATIO,
                "slow_link_ratio": SLOW_LINK_RATIO,
                "min_link_bytes": MIN_LINK_BYTES,
                "stage_imbalance": asc.STAGE_IMBALANCE,
            },
        }


def aggregate(
    steps: pl.LazyFrame | pl.DataFrame,
    collectives: pl.LazyFrame | pl.DataFrame,
    links: pl.LazyFrame | pl.DataFrame | None = None,
    *,
    hccl: pl.LazyFrame | pl.DataFrame | None = None,
    stages: pl.LazyFrame | pl.DataFrame | None = None,
    engine: str = "local",
    top: int = 20,
    failed: tuple[tuple[int, str], ...] = (),
) -> Cluster:
    """Join the per-rank tables of :func:`rank_tables` (lazy frames are fine) into a
    :class:`Cluster`: wait per collective, per-rank totals, slow ranks, step gap, slow links."""
    return _aggregate(
        _conformed(steps, STEP_COLUMNS),
        _conformed(collectives, COLLECTIVE_COLUMNS),
        links,
        hccl=hccl,
        stages=stages,
        engine=engine,
        top=top,
        failed=failed,
    )


def _aggregate(
    steps: pl.LazyFrame | pl.DataFrame,
    collectives: pl.LazyFrame | pl.DataFrame,
    links: pl.LazyFrame | pl.DataFrame | None = None,
    *,
    hccl: pl.LazyFrame | pl.DataFrame | None = None,
    stages: pl.LazyFrame | pl.DataFrame | None = None,
    engine: str = "local",
    top: int = 20,
    failed: tuple[tuple[int, str], ...] = (),
) -> Cluster:
    """:func:`aggregate` of steps and collectives already in their schemas' columns and types
    (the in-process analysis' frames: not conformed again)."""
    # (each table one query from the given frames or plans to its end: a report's fixed cost
    # is its number of queries)
    lk = _conform(links if links is not None else pl.DataFrame(), LINK_COLUMNS)
    hc = _conform_sorted(
        hccl if hccl is not None else pl.DataFrame(), asc.HCCL_COLUMNS, "rank", "start_ns"
    )
    sg = _conform_sorted(
        stages if stages is not None else pl.DataFrame(), asc.STAGE_COLUMNS, "rank"
    )
    if tree.SHORTCUTS and not lk.height and not hc.height:
        one = _one_rank(steps, collectives)
        if one is not None:
            st, co, ranks, gap = one
            return Cluster(
                ranks=_without(ranks, "aligned"),
                steps=st,
                collectives=co,
                step_gap=gap,
                slow_ranks=_slow_ranks(ranks),
                links=_empty_link_tables()[0].clone(),
                slow_links=_empty_link_tables()[1].clone(),
                engine=engine,
                top=top,
                failed=failed,
                hccl=hc,
                msprof=asc.msprof_without_hccl(ranks),
                stages=sg,
                stage_imbalance=asc.stage_imbalance(ranks, sg),
            )
    first, second, third = _wait_columns()
    co_plan = (
        collectives.lazy()
        .with_columns(*first)
        .with_columns(*second)
        .with_columns(*third)
        .drop("max_start")
        .sort("rank", "start_ns", "seq", maintain_order=True)
    )
    st_plan = steps.lazy().sort("rank", "step")
    st, co = pl.collect_all([st_plan, co_plan], engine="in-memory")
    step_ns = st.get_column("dur_ns").median()
    decisive_ns = max(
        MIN_COLLECTIVE_WAIT_US * 1000,
        MIN_COLLECTIVE_WAIT_SHARE * (float(step_ns) if step_ns is not None else 0.0),  # type: ignore[arg-type]
    )
    # Who came last only says something where somebody waited for it. (Series operations and
    # a column added in place: the select was a query of fixed cost.)
    decisive = (co.get_column("ranks_seen") > 1) & (co.get_column("_max_wait") >= decisive_ns)
    co = _without(co, "_max_wait")
    co.insert_column(co.width, decisive.alias("decisive"))
    coll_aggs, step_aggs, fills = _rank_columns()
    per_rank_coll = co.lazy().group_by("rank").agg(*coll_aggs)
    ranks_plan = (
        st.lazy()
        .group_by("rank")
        .agg(*step_aggs)
        .join(per_rank_coll, on="rank", how="full", coalesce=True)
        .with_columns(*fills)
        .sort("rank")
    )
    # the rank totals, the step gap and the msprof figures in one call (a collect each was a
    # fixed cost; the msprof plan computes the few rank rows again)
    if tree.SHORTCUTS and not hc.height:
        # no HCCL op (every GPU trace, most Ascend ranks): the msprof figures from the rank
        # rows without the join that would find none
        ranks, gap = pl.collect_all([ranks_plan, _step_gap(st)], engine="in-memory")
        msprof = asc.msprof_without_hccl(ranks)
    else:
        ranks, gap, msprof_ns = pl.collect_all(
            [ranks_plan, _step_gap(st), asc.msprof_plan(ranks_plan, hc)], engine="in-memory"
        )
        msprof = asc.msprof_us(msprof_ns)
    gap = _gap_us(gap)
    slow = _slow_ranks(ranks)
    if tree.SHORTCUTS and not lk.height:
        # no link row (every GPU trace, most Ascend ranks): the link tables are empty; their
        # schemas from the plans (the matrix's remap keeps the columns, ends cast to Int32),
        # not the ~27 queries that would find them empty
        agg_links, slow_links = (t.clone() for t in _empty_link_tables())
    else:
        agg_links, slow_links = _slow_links(asc.matrix_links(lk, hc))
    return Cluster(
        ranks=_without(ranks, "aligned"),
        steps=st,
        collectives=_without(co, "last"),
        step_gap=gap,
        slow_ranks=slow,
        links=agg_links,
        slow_links=slow_links,
        engine=engine,
        top=top,
        failed=failed,
        hccl=hc,
        msprof=msprof,
        stages=sg,
        stage_imbalance=asc.stage_imbalance(ranks, sg),
    )


def _one_rank(
    steps: pl.LazyFrame | pl.DataFrame, collectives: pl.LazyFrame | pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
    """(steps, collectives, rank rows, step gap) of :func:`_aggregate` for frames of one rank
    (a single-rank profile: most reports), without a query: no collective is seen on two
    ranks, so none waits (``ranks_seen`` 1, ``wait_ns`` 0, none decisive) and each step's
    fastest and slowest rank is that rank; the rank row is the steps' sums. None for plans,
    a null rank or several ranks (the plans then)."""
    if not isinstance(steps, pl.DataFrame) or not isinstance(collectives, pl.DataFrame):
        return None
    ranks: set[Any] = set()
    for df in (steps, collectives):
        r = df.get_column("rank")
        if r.null_count():
            return None
        if len(r):
            ranks |= {r.min(), r.max()}
    if len(ranks) > 1:
        return None
    st = _sorted_by(steps, "step")
    co = _sorted_by(collectives, "start_ns", "seq")
    n = co.height
    co = co.hstack(  # (Series beside the columns: with_columns was a query)
        [
            pl.Series("ranks_seen", np.ones(n, dtype=np.uint32)),
            pl.Series("wait_ns", np.zeros(n, dtype=np.int64)),
            pl.Series("decisive", np.zeros(n, dtype=bool)),
        ]
    )
    return st, co, _one_rank_row(st, co, next(iter(ranks), None)), _one_rank_gap(st)


def _sorted_by(df: pl.DataFrame, *by: str) -> pl.DataFrame:
    """``df`` (of one rank) sorted by ``by``, nulls first, ties in their order (a stable
    sort, in NumPy: a plan's sort was a query); itself when already so."""
    keys = []
    for c in by:
        v, ok = tree.int_values(df.get_column(c))
        keys += [ok, v]
    order = np.lexsort(keys[::-1])
    if bool((order == np.arange(len(order))).all()):
        return df
    return df[order]


def _one_rank_row(st: pl.DataFrame, co: pl.DataFrame, rank: int | None) -> pl.DataFrame:
    """The rank row of :func:`_aggregate` for one rank (none without a step or collective):
    its steps' count and sums, its collectives' count, no wait."""
    schema = {
        "rank": pl.Int32, "steps": pl.UInt32, "step_time_ns": pl.Int64, "compute_ns": pl.Int64,
        "comm_ns": pl.Int64, "comm_not_overlapped_ns": pl.Int64, "idle_ns": pl.Int64,
        "wait_ns": pl.Int64, "collectives": pl.UInt32, "last_arrival_share": pl.Float64,
        "aligned": pl.UInt32,
    }  # fmt: skip
    if rank is None:
        return pl.DataFrame(schema=schema)
    sums = [
        int(st.get_column(c).sum() or 0)  # (nulls left out, as the group's sum)
        for c in (
            "dur_ns",
            "compute_ns",
            "communication_ns",
            "communication_not_overlapped_ns",
            "idle_ns",
        )
    ]
    row = (rank, st.height, *sums, 0, co.height, 0.0, 0)
    return frame_of_rows([row], schema)


def _one_rank_gap(st: pl.DataFrame) -> pl.DataFrame:
    """:func:`_step_gap` of one rank's steps (sorted by step) in µs (:func:`_gap_us`): per step
    its rank, the least and greatest time of its rows (one per step but for repeated steps),
    their count and their gap, as rows (a frame in ns and its conversion were ~0.1 ms more)."""
    groups: dict[Any, tuple[Any, list[Any]]] = {}
    steps, rank, dur = (st.get_column(c).to_list() for c in ("step", "rank", "dur_ns"))
    for step, r, d in zip(steps, rank, dur, strict=True):
        groups.setdefault(step, (r, []))[1].append(d)
    rows = []
    us = units.us_value
    for step, (r, durs) in groups.items():
        known = [d for d in durs if d is not None]
        if known:
            lo, hi = min(known), max(known)
            rows.append((step, r, us(lo), r, us(hi), len(durs), us(hi - lo)))
        else:
            rows.append((step, r, None, r, None, len(durs), None))
    return frame_of_rows(rows, _GAP_SCHEMA)


@functools.cache
def _wait_columns() -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """The collectives' wait columns in three stages (each reads the one before), built once
    per process (~50 expressions: ~0.4 ms of Python each report)."""
    key = ["step", "collective", "group", "seq"]
    first = (
        pl.col("start_ns").max().over(key).alias("max_start"),
        pl.len().over(key).alias("ranks_seen"),
    )
    second = (
        pl.when(pl.col("ranks_seen") > 1)
        .then(pl.min_horizontal(pl.col("max_start") - pl.col("start_ns"), pl.col("dur_ns")))
        .otherwise(0)
        .alias("wait_ns"),
    )
    third = (
        # "Among the last": waits at most LATE_WAIT_RATIO of the collective's median wait,
        # so that several stragglers of one collective all count, not just the very last.
        (
            (pl.col("ranks_seen") > 1)
            & (pl.col("wait_ns") <= LATE_WAIT_RATIO * pl.col("wait_ns").median().over(key))
        ).alias("last"),
        # the longest wait of the collective, for "decisive" (its threshold needs the steps
        # table, collected in the same call)
        pl.col("wait_ns").max().over(key).alias("_max_wait"),
    )
    return first, second, third


@functools.cache
def _rank_columns() -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """(The per-rank sums of the collectives, of the steps, the fills of their full join),
    built once per process."""
    coll = (
        pl.col("wait_ns").sum().alias("wait_ns"),
        pl.len().alias("collectives"),
        ((pl.col("last") & pl.col("decisive")).sum() / pl.col("decisive").sum().clip(1)).alias(
            "last_arrival_share"
        ),
        pl.col("ranks_seen").gt(1).sum().alias("aligned"),
    )
    steps = (
        pl.len().alias("steps"),
        pl.col("dur_ns").sum().alias("step_time_ns"),
        pl.col("compute_ns").sum().alias("compute_ns"),
        pl.col("communication_ns").sum().alias("comm_ns"),
        pl.col("communication_not_overlapped_ns").sum().alias("comm_not_overlapped_ns"),
        pl.col("idle_ns").sum().alias("idle_ns"),
    )
    fills = (
        pl.col(
            "steps",
            "step_time_ns",
            "compute_ns",
            "comm_ns",
            "comm_not_overlapped_ns",
            "idle_ns",
            "wait_ns",
            "collectives",
            "aligned",
        ).fill_null(0),
        pl.col("last_arrival_share").fill_null(0.0),
    )
    return coll, steps, fills


@functools.cache
def _gap_columns() -> tuple[pl.Expr, ...]:
    """:func:`_step_gap`'s aggregates, built once per process."""
    return (
        pl.col("rank").sort_by(["dur_ns", "rank"]).first().alias("fastest_rank"),
        pl.col("dur_ns").min().alias("fastest_ns"),
        pl.col("rank").sort_by(["dur_ns", "rank"]).last().alias("slowest_rank"),
        pl.col("dur_ns").max().alias("slowest_ns"),
        pl.len().alias("ranks"),
    )


#: The step gap's columns: each step's fastest and slowest rank and their step times (µs).
_GAP_SCHEMA: Final[dict[str, type[pl.DataType]]] = {
    "step": pl.Int32, "fastest_rank": pl.Int32, "fastest_us": pl.Float64,
    "slowest_rank": pl.Int32, "slowest_us": pl.Float64, "ranks": pl.UInt32, "gap_us": pl.Float64,
}  # fmt: skip


def _gap_us(gap: pl.DataFrame) -> pl.DataFrame:
    """The step gap (:data:`_GAP_SCHEMA`) of the per-step times in ns (:func:`_step_gap`'s):
    each µs figure the quotient ns / 1000 rounded once, ``gap_us`` that of the integer gap
    (slowest − fastest), not a difference of rounded figures."""
    lo, has_lo = tree.int_values(gap.get_column("fastest_ns"))
    hi, has_hi = tree.int_values(gap.get_column("slowest_ns"))
    cols = [
        gap.get_column("step"),
        gap.get_column("fastest_rank"),
        units.us_array("fastest_us", lo, has_lo),
        gap.get_column("slowest_rank"),
        units.us_array("slowest_us", hi, has_hi),
        gap.get_column("ranks"),
        units.us_array("gap_us", hi - lo, has_lo & has_hi),
    ]
    return pl.DataFrame([c.cast(_GAP_SCHEMA[c.name]) for c in cols])


@functools.cache
def _empty_link_tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_slow_links`' tables for links in :data:`LINK_COLUMNS` (those of any link table
    :func:`aggregate` reads) without a row: from the plans' schemas, once per process
    (resolving them was ~0.3 ms of every report, a frame from a schema ~70 µs)."""
    lk = pl.DataFrame(schema=LINK_COLUMNS).lazy()
    agg, slow = _slow_links(lk.with_columns(pl.col("src_rank", "dst_rank").cast(pl.Int32)))
    return pl.DataFrame(schema=agg.collect_schema()), pl.DataFrame(schema=slow.collect_schema())


def _empty(table: str) -> pl.DataFrame:
    """:func:`rank_tables`' ``table`` without a row."""
    return tree.empty_frame(tree.schema_key(_SCHEMAS[table]))


def _without(df: pl.DataFrame, col: str) -> pl.DataFrame:
    """``df.drop(col)`` without a query (a copy's column dropped in place: ``drop`` runs one,
    a fixed cost)."""
    out = df.clone()
    out.drop_in_place(col)
    return out


def _slow_ranks(ranks: pl.DataFrame) -> pl.DataFrame:
    """Rows of the ranks that make the others wait, with the figures that say so."""
    schema = {
        "rank": pl.Int32,
        "last_arrival_share": pl.Float64,
        "wait_us": pl.Float64,
        "peer_median_wait_us": pl.Float64,
        "peer_wait_per_step_us": pl.Float64,
        "peer_wait_share": pl.Float64,
        "compute_us": pl.Float64,
        "peer_median_compute_us": pl.Float64,
        "compute_excess": pl.Float64,
        "cause": pl.String,
    }
    out: list[dict[str, Any]] = []
    if ranks.height < 2:  # (a frame made once per process: ~70 us a report)
        return tree.empty_frame(tree.schema_key(schema))
    # One loop per rank (not per event): the peers' medians exclude the candidate.
    for r in ranks.iter_rows(named=True):
        if r["aligned"] == 0:
            continue
        peers = ranks.filter(pl.col("rank") != r["rank"])
        p_wait = _med(peers, "wait_ns", 0.0)
        p_steps = max(1.0, _med(peers, "steps", 1.0))
        p_time = _med(peers, "step_time_ns", 0.0)
        p_comp = _med(peers, "compute_ns", 0.0)
        per_step = p_wait / p_steps
        share = p_wait / p_time if p_time > 0 else 0.0
        if (
            r["last_arrival_share"] >= LAST_ARRIVAL_SHARE
            and per_step >= MIN_PEER_WAIT_US * 1000
            and share >= MIN_PEER_WAIT_SHARE
            and r["wait_ns"] <= OWN_WAIT_RATIO * p_wait
        ):
            excess = (r["compute_ns"] - p_comp) / p_comp if p_comp > 0 else None
            out.append(
                {
                    "rank": r["rank"],
                    "last_arrival_share": r["last_arrival_share"],
                    "wait_us": r["wait_ns"] / 1000.0,
                    "peer_median_wait_us": p_wait / 1000.0,
                    "peer_wait_per_step_us": per_step / 1000.0,
                    "peer_wait_share": share,
                    "compute_us": r["compute_ns"] / 1000.0,
                    "peer_median_compute_us": p_comp / 1000.0,
                    "compute_excess": excess,
                    "cause": "compute"
                    if excess is not None and excess >= COMPUTE_EXCESS
                    else "not compute (host, data loading or launch)",
                }
            )
    return pl.DataFrame(out, schema=schema)


def _med(df: pl.DataFrame, col: str, default: float) -> float:
    v = df.get_column(col).cast(pl.Float64).median()
    return float(v) if isinstance(v, (int, float)) else default


def _step_gap(st: pl.DataFrame) -> pl.LazyFrame:
    """Per step the fastest and slowest rank and their step times in ns, as a plan (µs:
    :func:`_gap_us`)."""
    if not st.height:
        return pl.LazyFrame(
            schema={
                "step": pl.Int32,
                "fastest_rank": pl.Int32,
                "fastest_ns": pl.Int64,
                "slowest_rank": pl.Int32,
                "slowest_ns": pl.Int64,
                "ranks": pl.UInt32,
            }
        )
    return st.lazy().group_by("step").agg(*_gap_columns()).sort("step")


def _slow_links(lk: FrameT) -> tuple[FrameT, FrameT]:
    """(links aggregated per (src, dst, transport), the slow ones): eager, or lazy plans for
    their schemas alone."""
    # Both ends of a link may report it: keep one copy per (step, op, link).
    d = lk.unique(
        ["step", "op_name", "group", "src_rank", "dst_rank", "transport"],
        keep="first",
        maintain_order=True,
    )
    agg = (
        d.filter(pl.col("src_rank") != pl.col("dst_rank"))
        .group_by("src_rank", "dst_rank", "transport")
        .agg(
            pl.col("size_bytes").sum(),
            pl.col("time_ns").sum(),
            pl.len().alias("ops"),
        )
        .with_columns(
            pl.when(pl.col("time_ns") > 0)
            .then(pl.col("size_bytes") / pl.col("time_ns"))  # bytes/ns = GB/s
            .otherwise(None)
            .alias("bandwidth_gbps")
        )
        .sort("transport", "src_rank", "dst_rank")
    )
    big = agg.filter(
        (pl.col("size_bytes") >= MIN_LINK_BYTES) & pl.col("bandwidth_gbps").is_not_null()
    )
    big = big.with_columns(pl.col("bandwidth_gbps").median().over("transport").alias("median_gbps"))
    slow = big.filter(
        pl.col("bandwidth_gbps") < SLOW_LINK_RATIO * pl.col("median_gbps")
    ).with_columns((pl.col("bandwidth_gbps") / pl.col("median_gbps")).alias("ratio"))
    return agg, slow


@analysis("cluster")
def cluster(profile: Profile, options: Options) -> Cluster:
    """Cluster analysis of an in-memory multi-rank Profile (``options.extra["links"]``: an Ascend
    links table). For many ranks use :func:`opscope.cluster.run_cluster`, which never holds all
    ranks' events at once."""
    links = options.extra.get("links")
    hccl = options.extra.get("hccl")
    stages = options.extra.get("stages")
    t = _rank_plans(
        profile,
        links if isinstance(links, pl.DataFrame) else None,
        hccl=hccl if isinstance(hccl, pl.DataFrame) else None,
        stages=stages if isinstance(stages, pl.DataFrame) else None,
    )
    return _aggregate(  # the frames in their schemas already
        t["steps"],
        t["collectives"],
        t["links"],
        hccl=t["hccl"],
        stages=t["stages"],
        engine="local",
        top=options.top,
    )


#: The ranks' time columns (``*_ns``) that JSON gives in µs.
_RANK_TIMES: Final = ("step_time", "compute", "comm", "comm_not_overlapped", "idle", "wait")


def _rank_rows(ranks: pl.DataFrame) -> list[dict[str, Any]] | None:
    """The ranks' JSON rows (``*_ns`` times as ``*_us``: :func:`opscope.units.us_value` of each
    value, the quotient :func:`opscope.units.us` makes) from the columns' values; None where a
    time column is not of numbers (the Series' cast then)."""
    times = [ranks.get_column(f"{c}_ns") for c in _RANK_TIMES]
    if not all(s.dtype.is_integer() or s.dtype.is_float() for s in times):
        return None
    keys = ["rank", "steps", *(f"{c}_us" for c in _RANK_TIMES), "last_arrival_share",
            "collectives"]  # fmt: skip
    columns = [
        ranks.get_column("rank").to_list(),
        ranks.get_column("steps").to_list(),
        *([units.us_value(v) for v in s.to_list()] for s in times),
        ranks.get_column("last_arrival_share").to_list(),
        ranks.get_column("collectives").to_list(),
    ]
    return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
