"""Attribution: time per line of the user's code, forward and backward.

Every device kernel (and copy) and every top-level host op is charged to one user source line and
``nn.Module`` path:

1. a kernel goes to the op that launched it (``op_id``); a host op charges itself;
2. a backward op goes to the forward op it differentiates: the nearest op at or above it with a
   ``fwd_id`` (or, for the engine's ``evaluate_function`` wrapper, the nearest one below it);
3. the line is the innermost user frame (``STACKS.is_user``: torch's own frames skipped) of the
   nearest op at or above that forward op with a ``stack_id``; the module likewise.

Times: ``fwd_ns``/``bwd_ns``/``total_ns`` are device time when the profile has device work, host
time otherwise; ``host_ns`` is always the host time. Host time is the inclusive time of top-level
ops only (an op with no op above it), so nested ops are never counted twice. ``calls`` counts those
top-level op calls, ``kernels`` the device events charged. Work that reaches no user frame is
charged to a row with a null file (shown as "(no user frame)").

Kineto ``python_function`` stacks and Ascend "Call stack" strings both arrive as ``stacks`` rows, so
both work the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import polars as pl

from opscope.analysis import tree
from opscope.analysis.hotspots import one_row_sums, rows
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.tree import (
    IntArray,
    _positions,
    collect,
    empty_frame,
    gather,
    host_forest,
    int_values,
    no_ops,
    not_null,
    per_profile,
    schema_key,
)
from opscope.model import Profile

KEYS: list[str] = ["file", "line", "function", "module"]

_LINE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "file": pl.String,
    "line": pl.Int32,
    "function": pl.String,
    "module": pl.String,
    "fwd_ns": pl.Int64,
    "bwd_ns": pl.Int64,
    "total_ns": pl.Int64,
    "host_ns": pl.Int64,
    "kernels": pl.UInt32,
    "calls": pl.UInt32,
}
_LINE_KEY = schema_key(_LINE_SCHEMA)


@per_profile
def resolve_ops(profile: Profile) -> pl.DataFrame:
    """For every host op: where its time is charged.

    Columns: ``id``, ``is_backward``, ``src_id`` (the forward op for a backward op, else the op),
    ``stack_id``, ``module``, ``file``, ``line``, ``function``, ``top_level``. Computed once per
    Profile (hotspots, attribution, memory and the rules all need it).
    """
    if no_ops(profile):
        # no host op to resolve (a trace of kernels only): the empty table, without the dozen
        # fixed-cost queries that would build it (tests/test_report_speed_empty.py)
        # (a frame made once per process for these types: ~70 us a report; the types of the
        # columns read, not the events' whole schema of 40 columns: ~0.1 ms)
        ev, st = profile.events.get_column, profile.stacks.get_column
        return empty_frame(
            schema_key({
                "id": ev("id").dtype, "is_backward": pl.Boolean, "src_id": pl.Int64,
                "stack_id": ev("stack_id").dtype, "module": ev("module").dtype,
                "file": st("file").dtype, "line": st("line").dtype,
                "function": st("function").dtype, "top_level": pl.Boolean,
            })
        )  # fmt: skip
    return _resolve(profile)


def _resolve(profile: Profile) -> pl.DataFrame:
    """:func:`resolve_ops` computed in full (also right, and empty, without host ops)."""
    # In NumPy over the host events' forest (shared with hotspots' op times), by position: the
    # links between events are row positions, not joins on ids. The columns read come in one
    # query and leave in two gathers (each Series method is a query of its own: a fixed cost
    # each, and joins and Series steps were most of this function's 19 ms on a 75k-event
    # trace, most of its time on a small one).
    rows, forest = host_forest(profile)
    ev = profile.events
    cols = _columns_read(ev)

    def host(column: str) -> npt.NDArray[Any]:
        return cols[column][rows]

    is_op = host("is_op")
    ops = np.flatnonzero(is_op)
    fwd = host("fwd").astype(np.int64, copy=False)
    with_fwd = is_op & host("has_fwd")
    # the nearest op at or above (below, for the engine's wrapper) that has a forward link:
    # a backward op (or one under a forward link) is charged to that forward op, the one
    # above first
    up = forest.nearest_up(with_fwd)[ops]
    down = forest.nearest_down(with_fwd)[ops]
    backward = host("backward")[ops]
    target = np.where(backward | (up >= 0), np.where(up >= 0, up, down), -1)
    linked = target >= 0
    src_id = np.where(linked, fwd[np.maximum(target, 0)], forest.ids[ops])
    # Stack and module: nearest at or above the source op, through any host event (python frames
    # carry no stack_id themselves, but an annotation might); a source op outside the host
    # events has neither
    src = _positions(forest.ids, src_id, np.zeros(len(src_id), dtype=bool))

    def nearest(has: str) -> IntArray:
        """The host position of each op's nearest event at or above its source with ``has``."""
        found = forest.nearest_up(host(has))
        return np.where(src >= 0, found[np.maximum(src, 0)], -1)

    at_stack, at_module = nearest("has_stack"), nearest("has_module")
    # the events' rows, null where none (taken by position: no query)
    found_stack = gather(ev.get_column("stack_id"), np.where(at_stack >= 0, rows[at_stack], -1))
    found_module = gather(ev.get_column("module"), np.where(at_module >= 0, rows[at_module], -1))
    frames = user_frames(profile)
    keys = frames.get_column("stack_id")
    if keys.null_count():  # a null key joins nothing: one no stack id can equal
        keys = keys.fill_null(np.iinfo(np.int64).min)
    # the innermost user frame of each op's stack (null without one), by position in frames
    stack = host("stack").astype(np.int64, copy=False)
    fr = _positions(
        keys.to_numpy().astype(np.int64, copy=False),
        np.where(at_stack >= 0, stack[np.maximum(at_stack, 0)], -1),
        at_stack < 0,
    )
    user = [gather(frames.get_column(c), fr) for c in ("file", "line", "function")]
    return pl.DataFrame(
        [
            pl.Series("id", forest.ids[ops], dtype=ev.schema["id"]),
            pl.Series("is_backward", backward | linked, dtype=pl.Boolean),
            pl.Series("src_id", src_id, dtype=pl.Int64),
            found_stack,
            found_module,
            *user,
            pl.Series("top_level", ~forest.has_ancestor(is_op)[ops]),
        ]
    )


def _columns_read(ev: pl.DataFrame) -> dict[str, npt.NDArray[Any]]:
    """The events' columns :func:`_resolve` reads, as arrays: from the Series without a query
    where no column needs its nulls read row by row (the common case: a column without nulls,
    or all null), else from one query (a Series' fill_null or is_not_null is one each)."""

    kind, back, module = (ev.get_column(c) for c in ("kind", "is_backward", "module"))
    if all(not s.null_count() or s.null_count() == len(s) for s in (kind, back, module)):
        fwd, has_fwd = int_values(ev.get_column("fwd_id"))
        stack, has_stack = int_values(ev.get_column("stack_id"))
        n = len(ev)

        def filled(s: pl.Series, value: bool) -> npt.NDArray[Any]:
            return np.full(n, value) if s.null_count() else s.to_numpy().astype(bool)

        return {
            "is_op": np.zeros(n, dtype=bool)
            if kind.null_count()
            else (kind == "cpu_op").to_numpy(),
            "fwd": np.where(has_fwd, fwd, -1),
            "has_fwd": has_fwd,
            "backward": filled(back, False),
            "stack": np.where(has_stack, stack, -1),
            "has_stack": has_stack,
            "has_module": np.full(n, not module.null_count()),
        }
    cols = collect(
        ev.lazy().select(
            (pl.col("kind") == "cpu_op").fill_null(False).alias("is_op"),
            pl.col("fwd_id").fill_null(-1).alias("fwd"),
            pl.col("fwd_id").is_not_null().alias("has_fwd"),
            pl.col("is_backward").fill_null(False).alias("backward"),
            pl.col("stack_id").fill_null(-1).cast(pl.Int64).alias("stack"),
            pl.col("stack_id").is_not_null().alias("has_stack"),
            pl.col("module").is_not_null().alias("has_module"),
        )
    )
    return {c: cols.get_column(c).to_numpy() for c in cols.columns}


@per_profile  # the resolution and two of the rules' helpers ask: once per profile
def user_frames(profile: Profile) -> pl.DataFrame:
    """(``stack_id``, ``file``, ``line``, ``function``): the innermost user frame of each stack
    (one row per stack id in order, a null id first)."""

    st = profile.stacks
    cols = ("stack_id", "file", "line", "function")
    # in NumPy (the filter, sort and group-by were one query of fixed cost): the user frames
    # by stack id then depth, nulls first, and each stack's first; frames of one stack at one
    # depth in table order (the stable sort's: the query's sort left their order open)
    flag, known = int_values(st.get_column("is_user").cast(pl.Int8))
    user = np.flatnonzero(known & (flag == 1))
    sid, has_sid = (a[user] for a in int_values(st.get_column("stack_id")))
    depth, has_depth = (a[user] for a in int_values(st.get_column("depth")))
    order = np.lexsort((depth, has_depth, sid, has_sid))
    keys = np.stack([has_sid, sid])[:, order]
    same_stack = (keys[:, 1:] == keys[:, :-1]).all(axis=0)
    first = order[np.flatnonzero(np.append(len(order) > 0, ~same_stack))]
    return pl.DataFrame([st.get_column(c) for c in cols])[user[first]]


def charges(profile: Profile) -> pl.DataFrame:
    """One row per charged unit: every device event and every top-level host op.

    Columns: ``event_id``, ``op_id`` (the op charged), ``device`` (bool), ``is_backward``,
    ``time_ns``, ``file``, ``line``, ``function``, ``module``.
    """
    return charges_plan(profile).collect(engine="in-memory")  # the eager calls' engine


def charges_plan(profile: Profile) -> pl.LazyFrame:
    """:func:`charges` as a plan (one query with its reader's: a query per step was a fixed
    cost on small traces)."""
    order = ["event_id", "op_id", "device", "is_backward", "time_ns", *KEYS[:3], "module"]
    return charge_rows(profile, ["file", "line", "function", "module"]).select(order)


def charge_rows(profile: Profile, keys: list[str]) -> pl.LazyFrame:
    """The charged units of :func:`charges` as a plan: ``event_id``, ``op_id``, ``device``,
    ``time_ns``, ``is_backward`` and ``keys`` (columns of :func:`resolve_ops`' table: where
    the op charged resolves); the device work first, then the top-level host ops. Also the
    out-of-core load's per-segment charges (``ingest.segment_aggregates``, keyed by stack id)."""
    res = resolve_ops(profile).lazy()
    cols = ["is_backward", *keys]
    # the device work from the cached kernels table: the events' DEVICE_WORK rows, in order,
    # without a filter of every event
    dev = profile.kernels.lazy()
    if profile.steps.height:
        # device work of no op and no step: queued before profiling (the warm-up step's
        # kernels, ingest.link.queued_before_profiling) or run after it; no line of the steps
        dev = dev.filter(pl.col("op_id").is_not_null() | pl.col("step").is_not_null())
    dev = dev.select(pl.col("id").alias("event_id"), "op_id", pl.col("dur_ns").alias("time_ns"))
    if no_ops(profile):
        # no host op: no line to charge the device work to (what the join with the empty
        # resolution gives: every column null, not backward) and no top-level op (the host
        # part empty): two joins fewer (tests/test_report_speed_empty.py)
        schema = res.collect_schema()
        return dev.with_columns(
            pl.lit(True).alias("device"),
            pl.lit(False).alias("is_backward"),
            *(pl.lit(None, schema[c]).alias(c) for c in keys),
        )
    dev = dev.join(
        res.select(pl.col("id").alias("op_id"), *cols), on="op_id", how="left"
    ).with_columns(pl.lit(True).alias("device"), pl.col("is_backward").fill_null(False))
    host = (
        # each op's own duration by position, not a join with the events on id: the
        # resolution's rows are the cached ops, row for row
        res.with_columns(pl.lit(profile.ops.get_column("dur_ns")).alias("time_ns"))
        .filter(pl.col("top_level"))
        .select(pl.col("id").alias("event_id"), pl.col("id").alias("op_id"), "time_ns", *cols)
        .with_columns(pl.lit(False).alias("device"))
    )
    order = ["event_id", "op_id", "device", "time_ns", *cols]
    return pl.concat([dev.select(order), host.select(order)])


@per_profile
def charged_lines(profile: Profile) -> pl.DataFrame:
    """Per (file, line, function, module): fwd/bwd/total/host ns, kernels, calls (computed once
    per Profile: hotspots and attribution both show it)."""
    if no_ops(profile):
        return _lines_without_ops(profile)
    ch = charges_plan(profile)
    dev = pl.col("device")
    timed = dev == profile.has_device
    time = pl.col("time_ns")
    # one group-by of conditional sums: the rows of every line charged anything (three
    # group-bys joined in full, their gaps zero, were the same rows and figures, and five
    # operations more: a fixed cost each on small traces)
    out = ch.group_by(KEYS).agg(
        time.filter(timed & ~pl.col("is_backward")).sum().alias("fwd_ns"),
        time.filter(timed & pl.col("is_backward")).sum().alias("bwd_ns"),
        time.filter(timed).sum().alias("total_ns"),
        time.filter(~dev).sum().alias("host_ns"),
        dev.sum().cast(pl.UInt32).alias("kernels"),
        (~dev).sum().cast(pl.UInt32).alias("calls"),
    )
    lines = (
        out.select(list(_LINE_SCHEMA))
        .cast(_LINE_SCHEMA)  # type: ignore[arg-type]
        .sort(  # every key last: one line run by two modules must not swap run to run
            ["total_ns", "host_ns", "file", "line", "function", "module"],
            descending=[True, True, False, False, False, False],
            nulls_last=True,
        )
        .pipe(collect)  # the eager calls' engine and optimisations
    )
    # nothing charged: the table of the schema (as before the plan, whatever the joins give)
    return lines if lines.height else pl.DataFrame(schema=_LINE_SCHEMA)


def _lines_without_ops(profile: Profile) -> pl.DataFrame:
    """:func:`charged_lines` of a profile without host ops: its device work (that
    :func:`charge_rows` keeps) all charged to no line, one row of null keys, the time device
    time, nothing backward and no host call; no row when there is no such work. In NumPy over
    the kernels' columns (the group-by and sort of one row were a query of ~1 ms, most of
    attribution's time on a small Ascend export); ``tests/test_attribution_no_ops.py`` checks
    it against the group-by."""
    dev = profile.kernels
    dur, timed = int_values(dev.get_column("dur_ns"))
    kept = np.ones(dev.height, dtype=bool)
    if profile.steps.height:
        # as charge_rows: work of no op and no step is charged nowhere
        kept = not_null(dev.get_column("op_id")) | not_null(dev.get_column("step"))
    n = int(kept.sum())
    if not n:
        return empty_frame(_LINE_KEY)
    # (every row kept is device work, and the profile has device work: all of it timed; a
    # null duration adds nothing, as in a sum)
    total = int(dur[kept & timed].sum())
    row = {"fwd_ns": total, "bwd_ns": 0, "total_ns": total, "host_ns": 0, "kernels": n, "calls": 0}
    # the keys null; a frame of one row (a column each was 3x the time)
    return pl.DataFrame([tuple(row.get(c) for c in _LINE_SCHEMA)], _LINE_SCHEMA, orient="row")


@dataclass(frozen=True)
class Attribution(Result):
    """Time per user source line (and module), forward and backward. See the module doc."""

    lines: pl.DataFrame
    modules: pl.DataFrame
    device: bool
    top: int = 20

    json_key: ClassVar[str] = "sources"

    def to_json(self) -> list[dict[str, Any]]:
        """The top lines: file, line, function, module, fwd_us, bwd_us, total_us, host_us, ..."""
        return rows(self.lines, self.top)


@analysis("attribution")
def attribution(profile: Profile, options: Options) -> Attribution:
    """Charge every kernel and top-level op to the user's source line: see :class:`Attribution`."""
    lines = charged_lines(profile)
    if tree.SHORTCUTS and lines.height <= 1:
        # no line or one (a profile without host ops charges its device work to none): its
        # module's sums are its own, without the query (~0.2 ms)
        modules = one_row_sums(lines, _module_sums, frozenset(_MODULE_SUMS))
    else:
        modules = _module_sums(lines.lazy()).pipe(collect)  # (one query: two were a fixed cost)
    return Attribution(lines=lines, modules=modules, device=profile.has_device, top=options.top)


_MODULE_SUMS = ("fwd_ns", "bwd_ns", "total_ns", "host_ns", "kernels", "calls")


def _module_sums(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The modules' table of the charged ``lines``."""
    return (
        lines.group_by("module")
        .agg(pl.col(*_MODULE_SUMS).sum())
        .sort(["total_ns", "module"], descending=[True, False], nulls_last=True)
    )
