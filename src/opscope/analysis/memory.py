"""Memory: allocated and reserved over time, the peak and what was live at it, churn, leaks.

Per (rank, device_type, device): ``allocated`` is the allocator's ``total_allocated`` when the
trace records it, else the running sum of ``bytes`` (relative to the profile's start, since what was
allocated before it is unknown). An allocation is paired with the next free of the same address;
it is *live at the peak* when it was made at or before the peak's time and not freed before it, and
*never freed* when no free follows inside the profile. Live-at-peak bytes are grouped by the op
that allocated (``op_id``), its module and the user source line (as in attribution).
Fragmentation is reserved − allocated at the peak, for device memory only: host memory
(``device_type`` 0) has no caching allocator, Kineto writes ``Total Reserved: 0`` for it, and
0 − allocated is no fragmentation; there, and wherever reserved is unknown or below allocated,
it is null (n/a).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, TypeVar

import polars as pl

from opscope.analysis import tree
from opscope.analysis.hotspots import rows_of
from opscope.analysis.registry import Options, Result, analysis
from opscope.model import Profile

_DEV = ["rank", "device_type", "device"]
#: The memory tables are computed eagerly, or built lazily for their schemas alone.
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)
#: Kineto's device_type of host (CPU) memory.
HOST_DEVICE_TYPE = 0
#: From this many allocator events the memory tables' query runs Polars' optimiser (its common
#: subplans: the shared steps once); below, the eager calls' flags (the passes cost more than
#: they save). 236 rows (tracelens_h100_bert_small): 2.5 ms optimised, 2.0 not; 12.8k rows
#: (kineto_resnet50_v100_train_2021): 7.6 and 15.3.
_OPTIMISE_MIN_ROWS = 1000


@dataclass(frozen=True)
class Memory(Result):
    """``timeline``, ``peaks`` (one row per device), ``live_at_peak`` (by op/module/line),
    ``churn`` (per step), ``never_freed`` (by op/module/line)."""

    timeline: pl.DataFrame
    peaks: pl.DataFrame
    live_at_peak: pl.DataFrame
    churn: pl.DataFrame
    never_freed: pl.DataFrame
    top: int = 20

    def to_json(self) -> dict[str, Any]:
        """Peaks, live-at-peak, churn and never-freed tables (no timeline: it is per event)."""
        tables = [(self.peaks, None), (self.live_at_peak, self.top), (self.churn, None)]
        peaks, live, churn, never = rows_of([*tables, (self.never_freed, self.top)])
        return {"peaks": peaks, "live_at_peak": live, "churn": churn, "never_freed": never}


def _where(places: FrameT, df: FrameT) -> FrameT:
    """Adds op name, module and user source line (:func:`_places_lazy`) to rows with an
    ``op_id``."""
    return df.join(places, on="op_id", how="left")


def _by_bytes(df: FrameT) -> FrameT:
    """Largest first; equal sizes by their keys (group_by's row order varies with the thread
    count, so a tie alone would not give the same table twice)."""
    keys: list[str] = [*_DEV, "op", "module", "file", "line", "function"]
    return df.sort(["bytes", *keys], descending=[True] + [False] * len(keys), nulls_last=True)


@analysis("memory")
def memory(profile: Profile, options: Options) -> Memory:
    """Memory over time, peak, live-at-peak, churn, fragmentation, leaks: see the module doc."""
    res = _resolved(profile)
    if tree.SHORTCUTS and profile.memory.height == 0:
        # no allocator event: every table is empty, with the schemas the plan gives for inputs
        # of these schemas, made once per process and copied (building and resolving the five
        # plans, then five frames from their schemas, was ~1 ms of every report without memory
        # rows); tests/test_report_speed_empty.py and tests/test_report_speed_ha.py check them
        # against the plan run eagerly
        # (the types as a list: a frame's Schema checks each one, ~3x the time)
        key = tuple(
            tuple(zip(t.columns, t.dtypes, strict=True))
            for t in (profile.memory, res, _names(profile))
        )
        tl, pk, live, churn, never = (t.clone() for t in _empty_tables(*key))
        return Memory(tl, pk, live, churn, never, top=options.top)
    lazy = _tables(profile.memory.lazy(), _places_plan(res.lazy(), _names(profile).lazy()))
    # the five tables' plans run together: the eager steps were ~24 queries of fixed cost;
    # tests/test_memory_plans.py checks it equals the eager run. Their shared steps run once
    # by the optimiser's common subplans, which pay on many rows (28k: 30 ms, 58 without);
    # on a few hundred rows its passes cost more than the steps (56 rows: 2.1 ms, 1.5 without)
    few = profile.memory.height < _OPTIMISE_MIN_ROWS
    tl, pk, live, churn, never = pl.collect_all(
        list(lazy),
        engine="in-memory",
        optimizations=tree.EAGER_FLAGS if few else pl.QueryOptFlags(),
    )
    return Memory(tl, pk, live, churn, never, top=options.top)


@functools.cache
def _empty_tables(
    memory: tree.SchemaKey, res: tree.SchemaKey, names: tree.SchemaKey
) -> tuple[pl.DataFrame, ...]:
    """:func:`_tables`' five tables, empty, for inputs of these schemas (the same plans, on
    empty frames, for their schemas alone)."""

    def empty(key: tree.SchemaKey) -> pl.LazyFrame:
        return pl.DataFrame(schema=dict(key)).lazy()

    lazy = _tables(empty(memory), _places_plan(empty(res), empty(names)))
    return tuple(pl.DataFrame(schema=t.collect_schema()) for t in lazy)


def _resolved(profile: Profile) -> pl.DataFrame:
    """Each op's module and user source line (attribution's, computed once per profile)."""
    from opscope.analysis.attribution import resolve_ops

    return resolve_ops(profile)


def _names(profile: Profile) -> pl.DataFrame:
    """The events' ``id`` and ``name`` (their Series: no query)."""
    ev = profile.events
    return pl.DataFrame([ev.get_column("id"), ev.get_column("name")])


def _places_lazy(profile: Profile) -> pl.LazyFrame:
    """``op_id`` -> op name, module and user source line, for :func:`_where` (one plan for
    both of its uses), as a lazy plan."""
    return _places_plan(_resolved(profile).lazy(), _names(profile).lazy())


def _places_plan(res: pl.LazyFrame, names: pl.LazyFrame) -> pl.LazyFrame:
    """:func:`_places_lazy` of attribution's resolved ops and the events' ids and names."""
    res = res.select(pl.col("id").alias("op_id"), "module", "file", "line", "function")
    names = names.select(pl.col("id").alias("op_id"), pl.col("name").alias("op"))
    return names.join(res, on="op_id", how="left")


def _tables(m: FrameT, places: FrameT) -> tuple[FrameT, FrameT, FrameT, FrameT, FrameT]:
    """timeline, peaks, live at peak, churn, never freed of the memory rows ``m`` (eager, or
    lazy for the schemas alone)."""
    # maintain_order: allocator events at one instant keep the trace's order, so the running
    # total (and the peak it finds) is the same whatever Polars' thread count
    m = m.sort([*_DEV, "ts_ns"], maintain_order=True)
    timeline = m.with_columns(
        pl.coalesce("total_allocated", pl.col("bytes").cum_sum().over(_DEV)).alias("allocated"),
        pl.col("total_reserved").alias("reserved"),
    ).select(*_DEV, "ts_ns", "allocated", "reserved")
    peak_rows = (
        timeline.sort(
            [*_DEV, "allocated", "ts_ns"],
            descending=[False] * 3 + [True, False],
            maintain_order=True,
        )
        .group_by(_DEV, maintain_order=True)
        .first()
        .rename({"ts_ns": "peak_ts_ns", "allocated": "peak_allocated", "reserved": "reserved"})
    )
    peaks = (
        peak_rows.join(
            timeline.group_by(_DEV).agg(pl.col("reserved").max().alias("peak_reserved")),
            on=_DEV,
            how="left",
            nulls_equal=True,
        )
        .with_columns(
            pl.when(
                (pl.col("device_type") != HOST_DEVICE_TYPE)
                & (pl.col("reserved") >= pl.col("peak_allocated"))
            )
            .then(pl.col("reserved") - pl.col("peak_allocated"))
            .alias("fragmentation")
        )
        .select(*_DEV, "peak_ts_ns", "peak_allocated", "reserved", "peak_reserved", "fragmentation")
        .sort(_DEV, nulls_last=True)  # one row per device; a join keeps no order unless asked
    )
    # Pair each allocation with the next event at its address (a free when bytes < 0).
    a = (
        m.filter(pl.col("addr").is_not_null())
        .sort([*_DEV, "addr", "ts_ns"], maintain_order=True)
        .with_columns(
            pl.col("ts_ns").shift(-1).over([*_DEV, "addr"]).alias("next_ts"),
            pl.col("bytes").shift(-1).over([*_DEV, "addr"]).alias("next_bytes"),
        )
    )
    allocs = a.filter(pl.col("bytes") > 0).with_columns(
        pl.when(pl.col("next_bytes") < 0).then(pl.col("next_ts")).alias("free_ts")
    )
    live = allocs.join(peaks.select(*_DEV, "peak_ts_ns"), on=_DEV, nulls_equal=True).filter(
        (pl.col("ts_ns") <= pl.col("peak_ts_ns"))
        & (pl.col("free_ts").is_null() | (pl.col("free_ts") > pl.col("peak_ts_ns")))
    )
    keys = [*_DEV, "op", "module", "file", "line", "function"]
    live_at_peak = (
        _where(places, live)
        .group_by(keys)
        .agg(pl.col("bytes").sum(), pl.len().alias("allocations"))
        .pipe(_by_bytes)
    )
    never = (
        _where(places, allocs.filter(pl.col("free_ts").is_null()))
        .group_by(keys)
        .agg(pl.col("bytes").sum(), pl.len().alias("allocations"))
        .pipe(_by_bytes)
    )
    churn = (
        m.group_by(*_DEV, "step")
        .agg(
            pl.col("bytes").filter(pl.col("bytes") > 0).sum().alias("allocated_bytes"),
            (-pl.col("bytes").filter(pl.col("bytes") < 0)).sum().alias("freed_bytes"),
            (pl.col("bytes") > 0).sum().alias("allocations"),
            (pl.col("bytes") < 0).sum().alias("frees"),
        )
        .sort(*_DEV, "step", nulls_last=True)
    )
    return timeline, peaks, live_at_peak, churn, never
