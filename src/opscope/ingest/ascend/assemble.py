"""Trace records and kernel rows -> raw events and raw flow records, before the shared linker
(:mod:`opscope.ingest.ascend.linking`): the trace's slices (:mod:`.trace_events`), the kernel
table's rows matched to their trace tasks (:mod:`.kernels`), the HCCL lanes and device track
names, ids in time order."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import polars as pl

from opscope.ingest import link
from opscope.ingest.ascend.kernels import _kernel_events, _match_trace_tasks
from opscope.ingest.ascend.trace_events import _trace_parts
from opscope.model import schema as S


def _assemble(
    trace: pl.DataFrame | None,
    kernels: pl.DataFrame | None,
    device: int,
    odd: Counter[str],
    meta_extra: dict[str, Any],
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Raw events (ids 0..n-1 by start, longer first), raw flow records
    (:data:`opscope.ingest.link.RAW_FLOWS` less ``rank``), counters and threads of one rank."""
    parts: list[pl.DataFrame] = []
    flow_parts: list[pl.DataFrame] = []
    counters = S.empty("counters").drop("rank")
    threads = S.empty("threads").drop("rank")
    hw_pid: int | None = None
    hccl_pid: int | None = None
    if trace is not None:
        tp = _trace_parts(trace, kernels is not None, device, odd, meta_extra)
        parts.append(tp.events)
        flow_parts.append(tp.flow_records)
        counters, threads, hw_pid, hccl_pid = tp.counters, tp.threads, tp.hw_pid, tp.hccl_pid
    if kernels is not None:
        kev = _kernel_events(kernels, hw_pid, device)
        if parts:
            kev, parts[0] = _match_trace_tasks(kev, parts[0], meta_extra)
        parts.append(kev)

    events = pl.concat(parts, how="diagonal_relaxed") if parts else S.empty("events").drop("rank")
    events = events.with_columns(
        [
            pl.lit(None, dtype).alias(c)
            for c, dtype in S.EVENTS.items()
            if c not in events.columns and c not in ("id", "rank")
        ]
    )
    if "_krow" not in events.columns:
        events = events.with_columns(pl.lit(None, pl.UInt32).alias("_krow"))
    if "_call_stack" not in events.columns:
        events = events.with_columns(pl.lit(None, pl.String).alias("_call_stack"))
    events = (
        events.sort(["ts_ns", "dur_ns"], descending=[False, True], maintain_order=True)
        .with_row_index("id")
        .with_columns(pl.col("id").cast(pl.Int64))
    )

    events, threads = _device_tracks(events, threads, hccl_pid)
    raw_flows = (
        _raw_flows(flow_parts, odd)
        if flow_parts
        else pl.DataFrame(schema={k: v for k, v in link.RAW_FLOWS.items() if k != "rank"})
    )
    return events, raw_flows, counters, threads


HCCL_LANE_TID: Final = -1
"""Communication lane of HCCL ops that have no stream (kernel_details.csv without a trace)."""


def _device_tracks(
    events: pl.DataFrame, threads: pl.DataFrame, hccl_pid: int | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """HCCL ops on the communication lanes and a name for every device track.

    kernel_details.csv gives an HCCL op no Stream ID: it goes on the HCCL process's
    "Group 0 Communication" lane (tid 0) when the trace has one, else on a lane of its own
    (:data:`HCCL_LANE_TID`, "HCCL · communication"). Device tracks that the metadata does not
    name (kernels of a run without trace_view.json) are named "Ascend Hardware · Stream N"."""
    comm = (pl.col("kind") == "communication") & pl.col("tid").is_null()
    if hccl_pid is not None:
        events = events.with_columns(
            pl.when(comm).then(pl.lit(hccl_pid, pl.Int64)).otherwise(pl.col("pid")).alias("pid"),
            pl.when(comm).then(pl.lit(0, pl.Int64)).otherwise(pl.col("tid")).alias("tid"),
        )
    else:
        events = events.with_columns(
            pl.when(comm)
            .then(pl.lit(HCCL_LANE_TID, pl.Int64))
            .otherwise(pl.col("tid"))
            .alias("tid")
        )
    tracks = (
        events.filter(pl.col("device").is_not_null() & pl.col("tid").is_not_null())
        .select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64))
        .unique()
        .sort("pid", "tid")
    )
    missing = tracks.join(threads.select("pid", "tid"), on=["pid", "tid"], how="anti")
    if missing.height:
        extra = missing.select(
            "pid",
            "tid",
            pl.when(pl.col("tid") == HCCL_LANE_TID)
            .then(pl.lit("HCCL · communication"))
            .otherwise(pl.format("Ascend Hardware · Stream {}", pl.col("tid")))
            .alias("name"),
            pl.lit(True).alias("is_device"),
        )
        threads = pl.concat([threads, extra], how="vertical_relaxed")
    return events, threads


def _raw_flows(parts: list[pl.DataFrame], odd: Counter[str]) -> pl.DataFrame:
    """The trace's flow records as :data:`opscope.ingest.link.RAW_FLOWS` (without ``rank``),
    for :func:`opscope.ingest.link.resolve_flows` to bind once the events are nested."""
    fl = pl.concat(parts)
    kind = (
        pl.when(pl.col("cat") == "async_npu")
        .then(pl.lit("async_npu"))
        .when(pl.col("cat") == "fwdbwd")
        .then(pl.lit("fwdbwd"))
        .when(pl.col("cat") == "HostToDevice")
        .then(pl.lit("ac2g"))
        .otherwise(pl.lit("other"))
    )
    # CANN numbers most HostToDevice flows past 64 bits ("40004912544273661951"): an id that
    # fits an Int64 is kept, any other pairs by a 64-bit hash of its text (casting it gave
    # null, and every such flow one id).
    fid = pl.col("fid")
    flow_id = pl.coalesce(fid.cast(pl.Int64, strict=False), fid.hash().reinterpret(signed=True))
    fl = fl.with_columns(flow_id.alias("flow_id"))
    bad = fl.filter(pl.col("ts_ns").is_null()).height
    if bad:
        odd["trace_view.json: flow records without a ts (dropped)"] += bad
        fl = fl.filter(pl.col("ts_ns").is_not_null())
    return fl.select(
        kind.cast(S.FlowKind).alias("kind"),
        pl.col("flow_id"),
        pl.col("ph").alias("phase"),
        pl.col("pid").cast(pl.Int64),
        pl.col("tid").cast(pl.Int64),
        pl.col("ts_ns").cast(pl.Int64),
    )
