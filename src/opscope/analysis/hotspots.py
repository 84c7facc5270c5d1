"""Hotspots: where the time goes, by operator, kernel, operator+shapes, module and source line.

Self time of a host event is its duration minus the durations of its direct children (events whose
nearest non-Python ancestor it is: ``python_function`` frames between an op and its children are
looked through, as ``torch.profiler``'s ``key_averages()`` does). Device time of an op is the sum
of the kernels whose ``op_id`` is the op (``device_self``) and, inclusive, of the kernels of every
descendant op (``device``).

Shares (``pct``) are of the summed step time when the profile has steps, else of the wall span
(``pct_span`` is always of the span). Span and step time are summed over ranks, so shares stay in
0..100 for a multi-rank profile whose times are summed too.

The helpers here (:func:`ancestor_pairs`, :func:`nearest`, :func:`to_us`, :func:`rows`) are
shared by the other core analyses (their Markdown tables are written in report/).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from opscope import units
from opscope.analysis import tree as _tree  # its SHORTCUTS switch, read when used
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.tree import collect, host_forest, no_ops, per_profile
from opscope.model import Profile, kinds

#: Kinds of device work that count as kernel time (annotations are ranges, not work).
DEVICE_WORK: tuple[str, ...] = kinds.DEVICE_WORK

#: Nesting deeper than this is treated as a cycle in the parent links and cut.
MAX_DEPTH = 256

#: An events table file at least this large (not parsed yet), or any of an out-of-core profile
#: (``meta["out_of_core"]``), is analysed from the columns the analysis reads, never read whole
#: (docs/lazy-analyses.md). Below it, reading the whole table once serves every analysis of a
#: report and costs less than one projection per analysis. 512 MB of zstd Parquet is a trace of
#: about 10 GB of JSON text, which would not fit in memory whole anyway.
LAZY_FILE_BYTES = 512 << 20

#: The events columns hotspots' op and kernel tables read.
HOTSPOT_COLUMNS: tuple[str, ...] = (
    "id", "rank", "kind", "name", "ts_ns", "dur_ns", "parent_id", "op_id", "step",
    "input_dims", "input_types", "op_type", "core_type",
)  # fmt: skip

#: The events columns its modules and source lines (attribution's ``charged_lines``) read.
ATTRIBUTION_COLUMNS: tuple[str, ...] = (
    "id", "parent_id", "kind", "fwd_id", "is_backward", "stack_id", "module", "op_id", "step",
    "dur_ns",
)  # fmt: skip


def _only(kinds_: tuple[str, ...], column: str) -> pl.Expr:
    return pl.when(pl.col("kind").is_in(kinds_)).then(pl.col(column)).alias(column)


#: What a projected hotspots reads of each column: the strings only on the rows whose values
#: it reads (names of ops and device work, shapes of ops, Ascend types of device work), the
#: others null (less memory: Python frames and runtime calls are most of the events).
HOTSPOT_READ: tuple[str | pl.Expr, ...] = tuple(
    _only(("cpu_op", *kinds.DEVICE_WORK), c)
    if c == "name"
    else _only(("cpu_op",), c)
    if c in ("input_dims", "input_types")
    else _only(kinds.DEVICE_WORK, c)
    if c in ("op_type", "core_type")
    else c
    for c in HOTSPOT_COLUMNS
)


# Shared helpers ---------------------------------------------------------------------------------


def lazy_events(profile: Profile) -> bool:
    """True when ``profile``'s events are a file not parsed yet that analyses should not read
    whole: an out-of-core profile's, or one of at least :data:`LAZY_FILE_BYTES`."""
    size = profile.file_bytes("events")
    if size is None:
        return False
    return bool(profile.meta.get("out_of_core")) or size >= LAZY_FILE_BYTES


def projected(profile: Profile, columns: tuple[str | pl.Expr, ...]) -> Profile:
    """``profile`` itself, or, when :func:`lazy_events`, its copy holding only ``columns`` of
    the events (read from the file alone, streaming; see :meth:`Profile.projected`)."""
    return profile.projected(columns) if lazy_events(profile) else profile


def ancestor_pairs(events: pl.DataFrame, *, include_self: bool = False) -> pl.DataFrame:
    """Every (``id``, ``anc_id``, ``dist``) with ``anc_id`` an ancestor of ``id`` via ``parent_id``.

    ``dist`` is 1 for the parent. With ``include_self`` each event is also its own ancestor at
    distance 0. One join per nesting level, so the cost is events × depth.
    """
    parent = events.select(pl.col("id").alias("anc_id"), pl.col("parent_id").alias("next")).filter(
        pl.col("next").is_not_null()
    )
    cur = events.select("id", pl.col("parent_id").alias("anc_id")).filter(
        pl.col("anc_id").is_not_null()
    )
    parts = []
    if include_self:
        parts.append(events.select("id", pl.col("id").alias("anc_id"), pl.lit(0).alias("dist")))
    dist = 1
    while cur.height and dist <= MAX_DEPTH:
        parts.append(cur.with_columns(pl.lit(dist).alias("dist")))
        cur = cur.join(parent, on="anc_id").select("id", pl.col("next").alias("anc_id"))
        dist += 1
    if not parts:
        return pl.DataFrame(schema={"id": pl.Int64, "anc_id": pl.Int64, "dist": pl.Int32})
    return pl.concat(parts).with_columns(pl.col("dist").cast(pl.Int32))


def nearest(
    pairs: pl.DataFrame, events: pl.DataFrame, column: str, *, upward: bool = True
) -> pl.DataFrame:
    """For each event, ``column`` of its nearest ancestor (or, ``upward=False``, descendant).

    ``pairs`` comes from :func:`ancestor_pairs` (with ``include_self`` to let an event answer for
    itself). Returns (``id``, ``column``, ``<column>_from``): the value and the event it came from.
    """
    me, other = ("id", "anc_id") if upward else ("anc_id", "id")
    vals = events.select(pl.col("id").alias(other), pl.col(column)).filter(
        pl.col(column).is_not_null()
    )
    return (
        pairs.join(vals, on=other)
        .sort(me, "dist", other)  # downward, several descendants share a distance: lowest id
        .group_by(me, maintain_order=True)
        .first()
        .select(pl.col(me).alias("id"), pl.col(column), pl.col(other).alias(f"{column}_from"))
    )


def host_parent(events: pl.DataFrame, pairs: pl.DataFrame | None = None) -> pl.DataFrame:
    """(``id``, ``host_parent``): the nearest ancestor of each event that is not a Python frame."""
    if pairs is None:
        pairs = ancestor_pairs(events)
    kinds = events.select(pl.col("id").alias("anc_id"), pl.col("kind").alias("anc_kind"))
    return (
        pairs.join(kinds, on="anc_id")
        .filter(pl.col("anc_kind") != "python_function")
        .sort("id", "dist")
        .group_by("id", maintain_order=True)
        .first()
        .select("id", pl.col("anc_id").alias("host_parent"))
    )


def to_us(df: pl.DataFrame) -> pl.DataFrame:
    """``*_ns`` columns become ``*_us`` Float64 columns (JSON outputs use microseconds): each
    value the quotient ``float(ns) / 1000`` rounded once (IEEE division), null kept null. The
    other columns stay in place (an existing ``*_us`` is replaced where it stands), the new ones
    come at the end. No query: Series arithmetic on the columns (:mod:`opscope.units`, not
    Polars' ``pl.col(c) / 1000.0``, a product by the reciprocal)."""
    layout = _us_layout(df.columns)
    if layout is None:
        return df
    return pl.DataFrame(
        [
            ns_to_us(df.get_column(src), out) if src.endswith("_ns") else df.get_column(src)
            for out, src in layout
        ]
    )


def _us_layout(names: Sequence[str]) -> list[tuple[str, str]] | None:
    """:func:`to_us`' columns in order, each (its name, the column it comes from: a ``*_ns``
    one converted); None where no column is in ns."""
    conv = {c[:-3] + "_us": c for c in names if c.endswith("_ns")}
    if not conv:
        return None
    kept = [c for c in names if not c.endswith("_ns")]
    return [(c, conv.get(c, c)) for c in kept] + [
        (us, ns) for us, ns in conv.items() if us not in kept
    ]


def ns_to_us(ns: pl.Series, name: str) -> pl.Series:
    """``ns / 1000`` value by value (:func:`opscope.units.us`); a list column (an anomaly's
    slow calls' durations) value by value in its lists."""
    if isinstance(ns.dtype, pl.List):
        return pl.Series(
            name,
            [None if xs is None else [units.us_value(v) for v in xs] for xs in ns.to_list()],
            dtype=pl.List(pl.Float64),
        )
    return units.us(ns, name=name)


def rows(df: pl.DataFrame, top: int | None = None) -> list[dict[str, Any]]:
    """The first ``top`` rows of ``df`` (ns columns in µs) as JSON-ready dicts."""
    return rows_of([(df, top)])[0]


def rows_of(
    tables: Sequence[tuple[pl.DataFrame | pl.LazyFrame, int | None]],
) -> list[list[dict[str, Any]]]:
    """:func:`rows` of each (table, top): the ``top`` first rows of :func:`to_us` of each
    DataFrame as dicts (no query), and the rows of each plan (its columns are its caller's: no
    ``*_ns`` conversion) run together in one collect_all, as eager calls would run them (a
    query each was a fixed cost of every report on small traces)."""
    plans = [
        df if top is None else df.head(top) for df, top in tables if isinstance(df, pl.LazyFrame)
    ]
    done = iter(
        pl.collect_all(plans, engine="in-memory", optimizations=_tree.EAGER_FLAGS) if plans else []
    )
    out = []
    for df, top in tables:
        if isinstance(df, pl.LazyFrame):
            out.append(next(done).to_dicts())
        elif not df.height:
            out.append([])  # (no row: no layout to work out)
        else:
            out.append(_us_dicts(df if top is None or top >= df.height else df.head(top)))
    return out


def _us_dicts(df: pl.DataFrame) -> list[dict[str, Any]]:
    """``to_us(df).to_dicts()``, each quotient made in Python from the row's value: a report's
    tables are ~20 rows each, and to_us' Series (a cast, a column of 1000s and a division per
    ``*_ns`` column) and the new frame cost more than the rows themselves (~0.1 ms a table)."""
    names = df.columns
    layout = _us_layout(names)
    if layout is None:
        return df.to_dicts()
    schema = dict(zip(names, df.dtypes, strict=True))  # (a Schema checks each type: ~3x)
    how: dict[str, int] = {}
    for _, src in layout:
        if src.endswith("_ns"):
            kind = _quotient_kind(schema[src])
            if kind is None:  # (a column float() does not take as ns_to_us' cast does)
                return to_us(df).to_dicts()
            how[src] = kind
    at = {c: i for i, c in enumerate(names)}
    # (key, position of its value, 0: as it is, 1: its quotient, 2: its values' quotients)
    keys = [(out, at[src], how.get(src, 0)) for out, src in layout]
    return [{k: _converted(row[i], q) if q else row[i] for k, i, q in keys} for row in df.rows()]


def _quotient_kind(dtype: pl.DataType) -> int | None:
    """1 for a column of numbers (or nulls), 2 for a list of them, else None."""
    if isinstance(dtype, pl.List):
        return 2 if _quotient_kind(dtype.inner) == 1 else None  # type: ignore[arg-type]
    return 1 if dtype.is_integer() or dtype.is_float() or dtype == pl.Null else None


def _converted(v: Any, how: int) -> Any:
    if v is None:
        return v
    if how == 1:
        return units.us_value(v)
    return [units.us_value(x) for x in v]


def time_base(profile: Profile) -> tuple[int, int]:
    """(summed step time, summed per-rank wall span) in ns; the denominators of shares."""
    ev = profile.events
    span = 0
    rank = ev.get_column("rank")
    if ev.height and not rank.null_count() and rank.min() == rank.max():
        # one rank (a single-rank trace: most): its span from Series reductions, no query (the
        # group-by was one, of fixed cost); nulls left out as the group's max and min do
        ts = ev.get_column("ts_ns")
        hi, lo = (ts + ev.get_column("dur_ns")).max(), ts.min()
        span = int(hi) - int(lo) if hi is not None and lo is not None else 0  # type: ignore[arg-type]
    elif ev.height:
        s = ev.group_by("rank").agg(
            ((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()).alias("span")
        )
        span = int(s.get_column("span").sum() or 0)
    steps = int(profile.steps.get_column("dur_ns").sum() or 0) if profile.steps.height else 0
    return steps, span


def op_times(profile: Profile, pairs: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every host op with ``self_ns``, ``device_ns`` (inclusive) and ``device_self_ns``.

    Columns: id, rank, name, input_dims, input_types, step, ts_ns, dur_ns, self_ns,
    device_self_ns, device_ns. Without ``pairs`` (:func:`ancestor_pairs` of the host events) the
    nesting is walked as arrays and the result is computed once per Profile.
    """
    if pairs is None:
        return _op_times(profile)
    ev = profile.events
    host = ev.filter(~pl.col("kind").is_in(["python_function", *_DEVICE_KINDS]))
    hp = host_parent(ev, pairs)
    child = (
        host.select("id", "dur_ns")
        .join(hp, on="id")
        .group_by("host_parent")
        .agg(pl.col("dur_ns").sum().alias("child_ns"))
        .rename({"host_parent": "id"})
    )
    dev_self = _device_self(profile.kernels)
    dev_incl = (
        pairs.join(dev_self.rename({"id": "dd"}), left_on="id", right_on="dd")
        .group_by("anc_id")
        .agg(pl.col("device_self_ns").sum().alias("desc_ns"))
        .rename({"anc_id": "id"})
    )
    return _op_table(ev, child, dev_self, dev_incl)


def _device_self(kernels: pl.DataFrame) -> pl.DataFrame:
    """(id, device_self_ns): the device time of the work each op launched itself (never null:
    a sum of no duration is 0), from the profile's device work (``kernels``), one row per op
    in no particular order."""
    from opscope.analysis.tree import int_values

    # summed in NumPy by op (the filter and group-by were a query of fixed cost)
    op, launched = int_values(kernels.get_column("op_id"))
    dur, timed = int_values(kernels.get_column("dur_ns"))
    ids, at = np.unique(op[launched], return_inverse=True)
    sums = np.zeros(len(ids), dtype=np.int64)
    np.add.at(sums, at, np.where(timed, dur, 0)[launched])
    return pl.DataFrame(
        [
            pl.Series("id", ids, dtype=kernels.schema["op_id"]),
            pl.Series("device_self_ns", sums, dtype=pl.Int64),
        ]
    )


@per_profile
def _op_times(profile: Profile) -> pl.DataFrame:
    ev = profile.events
    if no_ops(profile):
        # no host op: the table below without a row, its schema from the plan (the forest's
        # ~14 queries were a fixed cost of every report of a kernels-only trace), made once per
        # process for the columns it reads (the plan's schema and a frame of it: ~0.6 ms)
        key = tuple((c, ev.get_column(c).dtype) for c in _OP_COLUMNS)  # (not the whole schema)
        return _no_op_times(key).clone()
    # the host events' forest, shared with attribution's resolution; the columns read at its
    # rows, from one query (each Series method is a query: a fixed cost each)
    rows, forest = host_forest(profile)
    n = len(forest)
    from opscope.analysis.tree import int_values

    kind = ev.get_column("kind")
    dur_all = int_values(ev.get_column("dur_ns"))[0]  # (a null duration: 0)
    if kind.null_count():
        cols = collect(
            ev.lazy().select(
                (pl.col("kind") != "python_function").fill_null(True).alias("not_py"),
                (pl.col("kind") == "cpu_op").fill_null(False).alias("is_op"),
            )
        )
        not_py_all, is_op_all = (cols.get_column(c).to_numpy() for c in ("not_py", "is_op"))
    else:  # Series comparisons: no query (the fill_nulls were one)
        not_py_all = (kind != "python_function").to_numpy()
        is_op_all = (kind == "cpu_op").to_numpy()
    not_py = not_py_all[rows]
    # children of an event: the events whose nearest non-Python ancestor it is
    hp = forest.nearest_up(not_py, include_self=False)
    dur = dur_all[rows]
    kid = np.flatnonzero(not_py & (hp >= 0))
    child_ns = np.zeros(n, dtype=np.int64)
    np.add.at(child_ns, hp[kid], dur[kid])
    dev_self = _device_self(profile.kernels)
    own = np.zeros(n, dtype=np.int64)
    at = forest.positions(dev_self.get_column("id"))
    vals = dev_self.get_column("device_self_ns").to_numpy().astype(np.int64)
    np.add.at(own, at[at >= 0], vals[at >= 0])
    desc = forest.descendant_sum(own)
    # the cached cpu_op rows' columns as Series: no filter of the events, no query
    ops = pl.DataFrame([profile.ops.get_column(c) for c in _OP_COLUMNS])
    at_op = np.flatnonzero(is_op_all[rows])
    if len(at_op) == ops.height:
        # the ops are the forest's cpu_op rows in the same order: their figures by position,
        # not three joins on id (most of the time of this function on millions of events); in
        # NumPy beside the ops' columns, in the joins' order (with_columns was a query): self
        # time is the duration less the children's, at least 0, null without a duration
        op_dur, timed = int_values(ops.get_column("dur_ns"))
        self_ns = np.maximum(op_dur - child_ns[at_op], 0)
        return ops.hstack(
            [
                pl.Series("device_self_ns", own[at_op], dtype=pl.Int64),
                pl.Series("self_ns", np.ma.masked_array(self_ns, mask=~timed), dtype=pl.Int64),
                pl.Series("device_ns", own[at_op] + desc[at_op], dtype=pl.Int64),
            ]
        )
    ids = pl.Series("id", forest.ids)
    children = pl.DataFrame([ids, pl.Series("child_ns", child_ns)])
    dev_incl = pl.DataFrame([ids, pl.Series("desc_ns", desc)])
    return _op_table(ev, children, dev_self, dev_incl)


_OP_COLUMNS = ("id", "rank", "name", "input_dims", "input_types", "step", "ts_ns", "dur_ns")


@functools.cache
def _no_op_times(columns: _tree.SchemaKey) -> pl.DataFrame:
    """:func:`_op_times`' table without a row, for the events' ``columns`` it reads."""
    plan = (
        pl.LazyFrame(schema=dict(columns))
        .select(_OP_COLUMNS)
        .with_columns(
            pl.lit(0, pl.Int64).alias("device_self_ns"),
            (pl.col("dur_ns") - pl.lit(0, pl.Int64)).clip(lower_bound=0).alias("self_ns"),
            pl.lit(0, pl.Int64).alias("device_ns"),
        )
    )
    return pl.DataFrame(schema=plan.collect_schema())


def _op_table(
    ev: pl.DataFrame, child: pl.DataFrame, dev_self: pl.DataFrame, dev_incl: pl.DataFrame
) -> pl.DataFrame:
    # the columns first: a filter copies every column it keeps
    ops = ev.select(*_OP_COLUMNS, "kind").filter(pl.col("kind") == "cpu_op").select(_OP_COLUMNS)
    return (
        ops.join(child, on="id", how="left")
        .join(dev_self, on="id", how="left")
        .join(dev_incl, on="id", how="left")
        .with_columns(
            (pl.col("dur_ns") - pl.col("child_ns").fill_null(0))
            .clip(lower_bound=0)
            .alias("self_ns"),
            pl.col("device_self_ns").fill_null(0),
        )
        .with_columns(
            (pl.col("device_self_ns") + pl.col("desc_ns").fill_null(0)).alias("device_ns")
        )
        .drop("child_ns", "desc_ns")
    )


_DEVICE_KINDS: tuple[str, ...] = kinds.DEVICE_KINDS


#: Hotspots' per-step table: the table, its plan, or the maker of its plan.
PerStep = pl.LazyFrame | pl.DataFrame | Callable[[], pl.LazyFrame]


# The analysis -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hotspots(Result):
    """Time by operator, kernel, operator+shapes, module and source line; per step too.

    ``kernel_types`` groups kernels by (``op_type``, ``core_type``) where the source has them
    (Ascend). Every table is sorted by total time, largest first, and holds every group (``top``
    only limits what the JSON and Markdown show).

    ``per_step`` is run when first read, from its plan (``per_step_plan``, or the maker of
    the plan: the plan itself is ~0.1 ms of Python on every trace): the report's
    terminal and JSON never read it (1.2 ms of the tables' 3 ms query on a 4.8k-event trace).
    """

    ops: pl.DataFrame
    kernels: pl.DataFrame
    op_shapes: pl.DataFrame
    modules: pl.DataFrame
    sources: pl.DataFrame
    per_step_plan: PerStep
    kernel_types: pl.DataFrame
    step_ns: int
    span_ns: int
    top: int = 20
    _per_step: dict[str, pl.DataFrame] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def per_step(self) -> pl.DataFrame:
        """Per (step, what, name) the calls, total and self time (see :func:`_op_tables`)."""
        got = self._per_step.get("t")
        if got is not None:
            return got
        plan = self.per_step_plan
        if not isinstance(plan, pl.LazyFrame | pl.DataFrame):
            plan = plan()
        return _tree.table_once(self._per_step, plan, _collected)

    def tables(self) -> dict[str, pl.DataFrame]:
        """The tables by name, in the fields' order (``per_step`` in its plan's place)."""
        return {n: getattr(self, n) for n in _TABLE_NAMES}

    def scalars(self) -> dict[str, Any]:
        """``step_ns``, ``span_ns`` and ``top``."""
        return {"step_ns": self.step_ns, "span_ns": self.span_ns, "top": self.top}

    def to_json(self) -> dict[str, Any]:
        """``{"ops": [...], "kernels": [...], "op_shapes", "modules", "sources"}``, top rows."""
        names = ("ops", "kernels", "op_shapes", "modules", "sources", "kernel_types")
        tables = [(getattr(self, n), self.top) for n in names]
        return {
            **dict(zip(names, rows_of(tables), strict=True)),
            "step_us": self.step_ns / 1000.0,
            "span_us": self.span_ns / 1000.0,
        }


_TABLE_NAMES = ("ops", "kernels", "op_shapes", "modules", "sources", "per_step", "kernel_types")


def _collected(plan: pl.LazyFrame) -> pl.DataFrame:
    # the in-memory engine and one chunk, as the tables' collect_all gave it (see _agg)
    return plan.collect(engine="in-memory").rechunk()


def _agg(
    df: pl.DataFrame | pl.LazyFrame, keys: list[str], base: int, span: int, device: bool
) -> pl.DataFrame:
    plan, empty = _agg_plan(df, keys, base, span, device)
    if plan is None:
        assert empty is not None
        return empty
    # the in-memory engine, as the eager calls: the default (streaming) engine divides exactly
    # where the in-memory one multiplies by the reciprocal, and one chunk as the eager sort gave
    # (a corpus trace's 18.865000000000002 became 18.865 otherwise)
    return with_shares(plan.collect(engine="in-memory").rechunk(), base, span)


def _agg_plan(
    df: pl.DataFrame | pl.LazyFrame, keys: list[str], base: int, span: int, device: bool
) -> tuple[pl.LazyFrame | None, pl.DataFrame | None]:
    """The aggregate's plan, or its table already when that needs no query (the plan None)."""
    if _tree.SHORTCUTS and isinstance(df, pl.DataFrame) and not df.height:
        # no row to group (the ops of a profile without host ops): the plan's empty table from
        # its schema, without the query (tests/test_report_speed_empty.py); made once per
        # process for the types of the columns it reads, the keys and the device columns (the
        # plan and a frame of its schema were ~0.2 ms a table; the shares' columns are doubles
        # whatever the denominators; a wide frame's whole schema is ~0.1 ms itself)
        read = [*keys, *_AGG_READ, *(_AGG_DEVICE if device else ())]
        key = tuple((c, df.get_column(c).dtype) for c in read)
        return None, _empty_agg(key, tuple(keys), device).clone()
    return _agg_query(df, keys, base, span, device), None


#: The columns the aggregate reads besides its keys (and, with ``device``, the device ones).
_AGG_READ = ("dur_ns", "self_ns")
_AGG_DEVICE = ("device_ns", "device_self_ns")


@functools.cache
def _empty_agg(schema: _tree.SchemaKey, keys: tuple[str, ...], device: bool) -> pl.DataFrame:
    plan = _agg_query(pl.DataFrame(schema=dict(schema)), list(keys), 0, 0, device)
    return pl.DataFrame(schema=plan.collect_schema())


def _agg_query(
    df: pl.DataFrame | pl.LazyFrame, keys: list[str], base: int, span: int, device: bool
) -> pl.LazyFrame:
    aggs = [
        pl.len().alias("calls"),
        pl.col("dur_ns").sum().alias("total_ns"),
        pl.col("self_ns").sum().alias("self_ns"),
        pl.col("dur_ns").mean().alias("mean_ns"),
        pl.col("dur_ns").min().alias("min_ns"),
        pl.col("dur_ns").max().alias("max_ns"),
    ]
    if device:
        aggs += [
            pl.col("device_ns").sum().alias("device_ns"),
            pl.col("device_self_ns").sum().alias("device_self_ns"),
        ]
    # one lazy query (three eager ones were a fixed cost per table on small traces); the
    # shares' columns in place, filled once collected (with_shares: not the query's product)
    out = df.lazy().group_by(keys).agg(aggs)
    return out.with_columns(
        pl.lit(None, pl.Float64).alias("pct"), pl.lit(None, pl.Float64).alias("pct_span")
    ).sort(["total_ns", *keys], descending=[True] + [False] * len(keys), nulls_last=True)


def with_shares(df: pl.DataFrame, base: int, span: int | None = None) -> pl.DataFrame:
    """``df`` with ``pct`` = 100 · ``total_ns`` / ``base`` (and ``pct_span`` of ``span`` when
    given): the integer product (exact below 2**53) divided once, value by value, null
    without a denominator. Not the query's ``100.0 * col / base``: Polars multiplies by the
    reciprocal there for a table of two rows or more and divides exactly for one row, so the
    same share printed differently by its table's height.

    In NumPy, the columns put in place (or after the others) as ``with_columns`` would, without
    its query (~0.1 ms a table on small traces): the product and the IEEE quotient are Polars'
    Series' (``tests/test_hotspot_shares.py``)."""
    total = df.get_column("total_ns")
    if total.null_count() or not total.dtype.is_integer() or total.dtype == pl.UInt64:
        return _with_shares_series(df, base, span)  # (nulls, casts: as Polars makes them)
    hundred = (total.to_numpy().astype(np.int64, copy=False) * 100).astype(np.float64)
    new = {"pct": _share_np(hundred, base, "pct")}
    if span is not None:
        new["pct_span"] = _share_np(hundred, span, "pct_span")
    return _replaced(df, new)


def _replaced(df: pl.DataFrame, new: dict[str, pl.Series]) -> pl.DataFrame:
    """``df.with_columns(new)`` without a query: each named column replaced where it stands,
    the others at the end."""
    cols = [new.get(c.name, c) for c in df.get_columns()]
    cols += [s for n, s in new.items() if n not in df.columns]
    return pl.DataFrame(cols)


def _share_np(hundred: npt.NDArray[np.float64], whole: int, name: str) -> pl.Series:
    if not whole:
        return pl.Series(name, [None] * len(hundred), dtype=pl.Float64)
    return pl.Series(name, hundred / float(whole), dtype=pl.Float64)


def _with_shares_series(df: pl.DataFrame, base: int, span: int | None) -> pl.DataFrame:
    hundred = (df.get_column("total_ns").cast(pl.Int64) * 100).cast(pl.Float64)
    cols = [_share(hundred, base, "pct")]
    if span is not None:
        cols.append(_share(hundred, span, "pct_span"))
    return df.with_columns(cols)


def _share(hundred: pl.Series, whole: int, name: str) -> pl.Series:
    if not whole:
        return pl.Series(name, [None] * len(hundred), dtype=pl.Float64)
    return (hundred / pl.Series(np.full(len(hundred), float(whole)))).alias(name)


def _typed_kernels(kernels: pl.DataFrame, kern: pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """The kernels with an operator type, as ``kern`` (the kernels with ``self_ns``) filtered:
    with the shortcuts on, no row of its schema where no kernel has one (every GPU trace: from
    the column's null count, no query), so that its aggregate is the empty table without its
    group-by in the tables' query (~0.25 ms of 1.7 on hta_sampled rank-0)."""
    if _tree.SHORTCUTS and kernels.get_column("op_type").null_count() == kernels.height:
        # (the columns the aggregate reads: the kernels' whole schema was ~0.1 ms)
        dur = kernels.get_column("dur_ns").dtype
        types = ((c, kernels.get_column(c).dtype) for c in ("op_type", "core_type"))
        return _tree.empty_frame((*types, ("dur_ns", dur), ("self_ns", dur)))
    return kern.filter(pl.col("op_type").is_not_null())


def _one_call_groups(kernels: pl.DataFrame, base: int, span: int) -> pl.DataFrame | None:
    """The kernels' table by name when each name is one kernel's (a partial Ascend rank's
    collectives) and they are few: each group's figures its call's, sorted as the plan sorts,
    in Python without its query (~0.2 ms on small traces; past :data:`_FIRST_NAMES` rows the
    query costs less than Python); None otherwise. ``tests/test_hotspots_one_call.py``
    compares it with the plan's table."""
    n = kernels.height
    if n > _FIRST_NAMES:
        return None
    name_s = kernels.get_column("name")
    if name_s.n_unique() < n:
        return None
    dur_s = kernels.get_column("dur_ns")
    if not dur_s.dtype.is_integer():
        return None
    names, durs = name_s.to_list(), dur_s.to_list()
    if any(v is not None and abs(v) >= _SHARE_EXACT for v in durs):
        return None  # (the shares' integer products: exact below this)
    # total descending (a null's sum is 0), then name ascending, nulls last: Python's order of
    # the strings (by code point) is Polars' (by UTF-8 bytes)
    at = sorted(range(n), key=lambda i: (-(durs[i] or 0), names[i] is None, names[i] or ""))
    schema = _one_call_schema(name_s.dtype, dur_s.dtype)
    # the rows (a frame of rows is one call into Polars: a Series per column was 3x that);
    # the shares as with_shares makes them: the float of 100 · total, divided once
    rows = [
        (
            names[i],
            1,
            durs[i] or 0,
            durs[i] or 0,
            None if durs[i] is None else float(durs[i]),
            durs[i],
            durs[i],
            float(100 * (durs[i] or 0)) / base if base else None,
            float(100 * (durs[i] or 0)) / span if span else None,
        )
        for i in at
    ]
    return pl.DataFrame(rows, schema=dict(schema), orient="row")


#: Below this (in absolute value) a total's 100-fold product is an exact Int64 and double.
_SHARE_EXACT = 2**53 // 100

_FIRST_NAMES = 64


@functools.cache
def _one_call_schema(name: pl.DataType, dur: pl.DataType) -> _tree.SchemaKey:
    """The schema of the kernels' aggregate by name (what it reads: the name and duration)."""
    df = pl.DataFrame(schema={"name": name, "dur_ns": dur, "self_ns": dur})
    schema = _agg_query(df, ["name"], 0, 0, False).collect_schema()
    assert list(schema) == [
        "name", "calls", "total_ns", "self_ns", "mean_ns", "min_ns", "max_ns", "pct", "pct_span"
    ]  # fmt: skip
    return _tree.schema_key(schema)


class _Tables(NamedTuple):
    ops: pl.DataFrame
    op_shapes: pl.DataFrame
    kernels: pl.DataFrame
    kernel_types: pl.DataFrame
    per_step: PerStep  # (a plan, or its maker: run when read, see Hotspots.per_step)
    step_ns: int
    span_ns: int


@analysis("hotspots")
def hotspots(profile: Profile, options: Options) -> Hotspots:
    """Hotspot tables of ``profile``: see :class:`Hotspots`."""
    from opscope.analysis import stored_aggregates
    from opscope.analysis.attribution import charged_lines

    # An out-of-core entry's stored aggregates when it has them (never reading the events);
    # else a large file-backed profile is read in two projections in turn, the op and kernel
    # tables' then the attribution's: the first is freed before the second is read, so the
    # peak is the larger of the two, not their sum.
    stored = stored_aggregates.stored(profile)
    t = stored_aggregates.hotspot_tables(stored, profile) if stored else None
    if t is None:
        t = _op_tables(projected(profile, HOTSPOT_READ))
    step_ns, span_ns, base = t.step_ns, t.span_ns, t.step_ns or t.span_ns
    lines = stored_aggregates.charged_lines(stored, profile) if stored else None
    if lines is None:
        lines = charged_lines(projected(profile, ATTRIBUTION_COLUMNS))
    one = _one_line_tables(lines, base) if _tree.SHORTCUTS else None
    if one is not None:
        modules, sources = one
    else:
        # both tables in one call (the four eager steps were a query each: a fixed cost),
        # with the eager calls' engine and optimisations
        modules, sources = pl.collect_all(
            [_module_sums(lines.lazy()), lines.lazy().with_columns(_PCT)],
            engine="in-memory",
            optimizations=_tree.EAGER_FLAGS,
        )
        modules, sources = with_shares(modules, base), with_shares(sources, base)
    return Hotspots(
        ops=t.ops,
        kernels=t.kernels,
        op_shapes=t.op_shapes,
        modules=modules,
        sources=sources,
        per_step_plan=t.per_step,
        kernel_types=t.kernel_types,
        step_ns=step_ns,
        span_ns=span_ns,
        top=options.top,
    )


_PCT = pl.lit(None, pl.Float64).alias("pct")  # (filled once collected: with_shares)


def _module_sums(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The modules' table of the charged ``lines`` (its shares null)."""
    return (
        lines.group_by("module")
        .agg(
            pl.col("total_ns").sum().alias("total_ns"),
            pl.col("fwd_ns").sum(),
            pl.col("bwd_ns").sum(),
            pl.col("calls").sum(),
        )
        .with_columns(_PCT)
        .sort(["total_ns", "module"], descending=[True, False], nulls_last=True)
    )


def _one_line_tables(lines: pl.DataFrame, base: int) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """The modules' and sources' tables (their shares of ``base`` in) of ``lines`` of no row
    or one (a profile without host ops charges its device work to no line), without their
    query (~0.3 ms): its module's sums are its own; None for more lines."""
    if lines.height > 1:
        return None
    total = lines.get_column("total_ns")
    if not total.dtype.is_integer() or any(abs(v or 0) >= _SHARE_EXACT for v in total):
        return None  # (the shares as with_shares makes them: exact products)
    # the module's share of its summed total (a null's sum is 0), the line's of its own
    got = total.to_list()
    summed = {"pct": _share_of(got[0] or 0, base)} if got else {}
    modules = one_row_sums(lines, _module_sums, _MODULE_SUMS, summed)
    own = [None if v is None else _share_of(v, base) for v in got]
    return modules, _replaced(lines, {"pct": pl.Series("pct", own, dtype=pl.Float64)})


def _share_of(total: int, whole: int) -> float | None:
    """with_shares' share of an integer ``total`` below :data:`_SHARE_EXACT`, in Python."""
    return float(100 * total) / whole if whole else None


def one_row_sums(
    df: pl.DataFrame,
    plan: Callable[[pl.LazyFrame], pl.LazyFrame],
    sums: frozenset[str],
    values: dict[str, Any] | None = None,
) -> pl.DataFrame:
    """``plan`` (a group-by of ``df`` summing the columns ``sums``, then columns of constants
    or nulls, and a sort) of ``df`` of at most one row, without its query: the empty table of
    the plan's schema, or its one group's row: each sum the value (a null's sum is 0), the key
    as it is, a column ``df`` lacks null or as given in ``values``. The plan's schema is
    resolved once per process for ``df``'s schema."""
    schema = _plan_schema(plan, tuple(zip(df.columns, df.dtypes, strict=True)))
    if not df.height:
        return _tree.empty_frame(schema)
    row = {**df.row(0, named=True), **(values or {})}
    got = tuple((row[c] or 0) if c in sums else row.get(c) for c, _ in schema)
    return pl.DataFrame([got], schema=dict(schema), orient="row")


@functools.cache
def _plan_schema(
    plan: Callable[[pl.LazyFrame], pl.LazyFrame], schema: _tree.SchemaKey
) -> _tree.SchemaKey:
    return _tree.schema_key(plan(pl.LazyFrame(schema=dict(schema))).collect_schema())


_MODULE_SUMS = frozenset({"total_ns", "fwd_ns", "bwd_ns", "calls"})


def _op_tables(profile: Profile) -> _Tables:
    step_ns, span_ns = time_base(profile)
    base = step_ns or span_ns
    ops = op_times(profile)
    device = profile.has_device
    # cached filter; lazy: each table below is one query
    kern = profile.kernels.lazy().with_columns(pl.col("dur_ns").alias("self_ns"))
    one_call = _one_call_groups(profile.kernels, base, span_ns) if _tree.SHORTCUTS else None
    # the tables' plans run together (one call, each plan's result as _agg gives it)
    tables = [
        _agg_plan(ops, ["name"], base, span_ns, device),
        _agg_plan(ops, ["name", "input_dims", "input_types"], base, span_ns, device),
        (None, one_call)
        if one_call is not None
        else _agg_plan(kern, ["name"], base, span_ns, False),
        # Ascend kernels carry their operator type: op_statistic.csv's grouping.
        _agg_plan(
            _typed_kernels(profile.kernels, kern), ["op_type", "core_type"], base, span_ns, False
        ),
    ]
    # the in-memory engine and one chunk each (see _agg)
    run = [plan for plan, _ in tables if plan is not None]
    got = pl.collect_all(run, engine="in-memory") if run else []
    done = iter(with_shares(d.rechunk(), base, span_ns) for d in got)
    op_tab, shape_tab, kern_tab, types_tab = (
        next(done) if empty is None else empty for _, empty in tables
    )
    # (the plan made when first read: ~0.1 ms of Python that most reports never need)
    per_step = functools.partial(_per_step_plan, ops, kern)
    return _Tables(op_tab, shape_tab, kern_tab, types_tab, per_step, step_ns, span_ns)


def _per_step_plan(ops: pl.DataFrame, kern: pl.LazyFrame) -> pl.LazyFrame:
    """Per (step, what, name) of the ops and of the kernels (``kern``, with ``self_ns``) the
    calls, total and self time."""
    step_sums = [
        pl.len().alias("calls"),
        pl.col("dur_ns").sum().alias("total_ns"),
        pl.col("self_ns").sum().alias("self_ns"),
    ]
    return pl.concat(
        [
            ops.lazy()
            .group_by("step", "name")
            .agg(step_sums)
            .with_columns(pl.lit("op").alias("what")),
            kern.group_by("step", "name")
            .agg(step_sums)
            .with_columns(pl.lit("kernel").alias("what")),
        ]
    ).sort(["step", "what", "total_ns", "name"], descending=[False, False, True, False])
