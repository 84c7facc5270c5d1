"""Trace records and kernel rows -> raw events, raw flows, counters and track names (before
linking)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import polars as pl

from opscope.ingest import link
from opscope.ingest.ascend.convert import (
    _STRIP,
    _dims_json,
    _shapes_json,
    _types_json,
    _us_float_to_ns,
    us_text_to_ns,
)
from opscope.ingest.ascend.csvfile import _col
from opscope.ingest.ascend.kernels import _KERNEL_ARGS
from opscope.ingest.ascend.trace_view import _COUNTER_KEYS, _TRACE_SCHEMA
from opscope.model import schema as S
from opscope.model.kinds import COMM_CORE_TYPES

# Element sizes of HCCL data types (collective bytes = count x size).
_DTYPE_BYTES = {
    "INT8": 1,
    "UINT8": 1,
    "FP16": 2,
    "BFP16": 2,
    "BF16": 2,
    "INT16": 2,
    "UINT16": 2,
    "FP32": 4,
    "INT32": 4,
    "UINT32": 4,
    "FP64": 8,
    "INT64": 8,
    "UINT64": 8,
}


# NPU task types that are kernels (the rest are syncs, copies and HCCL sub-tasks).
_COMPUTE_TASKS = ["AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"]


_EVENT_COLS = [c for c in S.EVENTS if c not in ("rank",)]


def _assemble(
    trace: pl.DataFrame | None,
    kernels: pl.DataFrame | None,
    device: int,
    odd: Counter[str],
    meta_extra: dict[str, Any],
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    parts: list[pl.DataFrame] = []
    flow_parts: list[pl.DataFrame] = []
    counters = S.empty("counters").drop("rank")
    threads = S.empty("threads").drop("rank")
    hw_pid: int | None = None
    hccl_pid: int | None = None

    if trace is not None:
        t = (
            trace.with_columns(
                pl.col("pid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False),
                pl.col("tid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False),
                us_text_to_ns(pl.col("ts")).alias("ts_ns"),
                _us_float_to_ns(pl.col("dur")).alias("dur_ns"),
            )
            .with_columns(
                pl.col("args").struct.rename_fields(
                    [f if f != "name" else "_argname" for f in _TRACE_SCHEMA["args"].to_schema()]
                )
            )
            .unnest("args")
        )
        pnames = _meta_names(trace, "process_name")
        tnames = _meta_names(trace, "thread_name", with_tid=True)
        proc = dict(zip(pnames["pid"].to_list(), pnames["value"].to_list(), strict=True))
        hw = [p for p, n in proc.items() if n == "Ascend Hardware"]
        hccl = [p for p, n in proc.items() if n == "HCCL"]
        cann = [p for p, n in proc.items() if n == "CANN"]
        skip_procs = [p for p, n in proc.items() if n == "Overlap Analysis"]
        hw_pid = hw[0] if hw else None
        hccl_pid = hccl[0] if hccl else None
        python_pids = [p for p, n in proc.items() if n == "Python"]
        host_pid = python_pids[0] if len(python_pids) == 1 else None

        x = t.filter(pl.col("ph") == "X")
        skipped = x.filter(pl.col("pid").is_in(skip_procs)).height
        if skipped:
            meta_extra["skipped_overlap_analysis_slices"] = skipped
        x = x.filter(~pl.col("pid").is_in(skip_procs))
        bad = x.filter(pl.col("ts_ns").is_null() | pl.col("dur_ns").is_null()).height
        if bad:
            odd["trace_view.json: slices without ts or dur (dropped)"] += bad
            x = x.filter(pl.col("ts_ns").is_not_null() & pl.col("dur_ns").is_not_null())
        neg = x.filter(pl.col("dur_ns") < 0).height
        if neg:
            odd["trace_view.json: negative durations (clamped)"] += neg
            x = x.with_columns(pl.col("dur_ns").clip(lower_bound=0))

        is_hw = pl.col("pid").is_in(hw)
        is_hccl = pl.col("pid").is_in(hccl)
        is_cann = pl.col("pid").is_in(cann)
        cat = pl.col("cat").fill_null("")
        kind = (
            # Without a kernel table, compute tasks in the trace are the kernels (MemSet too).
            pl.when(is_hw & pl.lit(kernels is None) & pl.col("Task Type").is_in(_COMPUTE_TASKS))
            .then(pl.lit("kernel"))
            .when(is_hw & pl.col("name").str.contains("(?i)memcpy|memset"))
            .then(
                pl.when(pl.col("name").str.contains("(?i)memset"))
                .then(pl.lit("memset"))
                .otherwise(pl.lit("memcpy"))
            )
            .when(is_hw)
            .then(pl.lit("other"))
            # The HCCL group slice (tid 0) is the collective. The per-plane tasks (Notify_Wait,
            # Memcpy, RDMASend...) are its steps, inside its time: kept for the timeline as
            # "other" so that a collective counts once (kinds.py).
            .when(is_hccl & (pl.col("tid") == 0))
            .then(pl.lit("communication"))
            .when(is_hccl)
            .then(pl.lit("other"))
            .when(is_cann)
            .then(pl.lit("runtime"))
            .when(pl.col("name").str.starts_with("ProfilerStep#"))
            .then(pl.lit("step"))
            .when(cat == "cpu_op")
            .then(pl.lit("cpu_op"))
            .when(cat == "python_function")
            .then(pl.lit("python_function"))
            .when(cat == "user_annotation")
            .then(pl.lit("user_annotation"))
            .otherwise(pl.lit("other"))
        )
        on_device = is_hw | is_hccl
        host_pid_expr = (
            pl.when(is_cann).then(pl.lit(host_pid, pl.Int64)).otherwise(pl.col("pid"))
            if host_pid is not None
            else pl.col("pid")
        )
        comm_args = pl.struct(
            [
                pl.col(c)
                for c in (
                    "src rank",
                    "dst rank",
                    "size(Byte)",
                    "transport type",
                    "link type",
                    "bandwidth(GB/s)",
                    "data_type",
                    "count",
                    "alg_type",
                    "Task Type",
                )
            ]
        )
        ev = x.select(
            kind.cast(S.EventKind).alias("kind"),
            pl.col("name"),
            host_pid_expr.alias("pid"),
            pl.col("tid"),
            pl.col("ts_ns"),
            pl.col("dur_ns"),
            pl.when(on_device).then(pl.lit(device, pl.Int32)).alias("device"),
            pl.when(is_hccl)
            .then(pl.col("stream id"))
            .when(is_hw)
            .then(pl.col("tid"))
            .alias("stream"),
            pl.col("correlation_id").alias("external_id"),
            pl.col("connection_id").alias("correlation"),
            pl.col("Sequence number").alias("seq"),
            pl.col("Fwd thread id").alias("fwd_tid"),
            _dims_json(pl.col("Input Dims")).alias("input_dims"),
            _types_json(pl.col("Input type").str.replace_all(r"\r?\n", "")).alias("input_types"),
            pl.col("Python id").alias("python_id"),
            pl.col("Python parent id").alias("python_parent_id"),
            pl.when(on_device).then(comm_args.struct.json_encode()).alias("args"),
            pl.col("Call stack").alias("_call_stack"),
            pl.when(is_hw & pl.col("Task Type").is_in(_COMPUTE_TASKS))
            .then(pl.col("Task Type"))
            .when(is_hccl & (pl.col("tid") == 0))
            .then(pl.lit("HCCL"))
            .alias("core_type"),
            pl.when(is_hccl & (pl.col("tid") == 0))
            .then(
                pl.col("count")
                * pl.col("data_type")
                .str.to_uppercase()
                .replace_strict(_DTYPE_BYTES, default=None, return_dtype=pl.Int64)
            )
            .otherwise(pl.col("size(Byte)"))
            .alias("bytes"),
        ).with_columns(
            pl.when(pl.col("kind").is_in(["communication", "kernel"]) | is_hccl).then(
                pl.col("bytes")
            )
        )
        parts.append(ev)

        # Flows (s/f pairs by id within a category).
        fl = t.filter(pl.col("ph").is_in(["s", "f", "t"]) & pl.col("id").is_not_null())
        fl = fl.select(
            pl.col("cat").fill_null(""),
            pl.col("ph"),
            pl.col("id").str.strip_chars(_STRIP).alias("fid"),
            host_pid_expr.alias("pid"),
            pl.col("tid"),
            pl.col("ts_ns"),
        )
        flow_parts.append(fl)

        c = t.filter(pl.col("ph") == "C")
        if c.height:
            procname = pl.col("pid").replace_strict(proc, default=None, return_dtype=pl.String)
            counters = c.select(
                pl.when(procname.is_not_null() & (procname != pl.col("name")))
                .then(procname + pl.lit("/") + pl.col("name"))
                .otherwise(pl.col("name"))
                .alias("name"),
                pl.col("ts_ns"),
                pl.coalesce([pl.col(k) for k in _COUNTER_KEYS]).alias("value"),
            )
            nov = counters.filter(pl.col("value").is_null()).height
            if nov:
                odd["trace_view.json: counters with no known value key (dropped)"] += nov
                counters = counters.filter(pl.col("value").is_not_null())

        threads = _threads(pnames, tnames, hw + hccl)

    if kernels is not None:
        k = kernels
        kev = k.select(
            pl.when(
                _col(k, "Accelerator Core").str.to_uppercase().is_in(list(COMM_CORE_TYPES))
                | _col(k, "Task Type").str.to_uppercase().is_in(list(COMM_CORE_TYPES))
            )
            .then(pl.lit("communication"))
            .otherwise(pl.lit("kernel"))
            .cast(S.EventKind)
            .alias("kind"),
            pl.col("Name").alias("name"),
            pl.lit(hw_pid if hw_pid is not None else device, pl.Int64).alias("pid"),
            _col(k, "Stream ID").cast(pl.Int64, strict=False).alias("tid"),
            pl.col("_ts").alias("ts_ns"),
            pl.col("_dur").alias("dur_ns"),
            pl.lit(device, pl.Int32).alias("device"),
            _col(k, "Stream ID").cast(pl.Int64, strict=False).alias("stream"),
            _shapes_json(_col(k, "Input Shapes")).alias("input_dims"),
            _types_json(_col(k, "Input Data Types")).alias("input_types"),
            _col(k, "Block Num", "Block Dim").cast(pl.Int64, strict=False).alias("blocks"),
            pl.struct([_col(k, c).alias(c) for c in _KERNEL_ARGS if c in k.columns])
            .struct.json_encode()
            .alias("args")
            if any(c in k.columns for c in _KERNEL_ARGS)
            else pl.lit(None, pl.String).alias("args"),
            _col(k, "Type").alias("op_type"),
            _col(k, "Accelerator Core").alias("core_type"),
            _col(k, "Step Id").cast(pl.Int32, strict=False).alias("step"),
            pl.col("_krow"),
        )
        if parts:
            ev = parts[0]
            # The NPU task of a kernel_details row starts at the same ns on the same stream;
            # HCCL collectives (no stream in the table) match by name within 2 µs.
            dev = ev.with_row_index("_erow").filter(pl.col("device").is_not_null())
            hc = dev.filter(pl.col("kind") == "communication").select(
                "name",
                pl.col("ts_ns").alias("_hts"),
                pl.col("correlation").alias("_corr"),
                pl.col("bytes").alias("_hb"),
                "_erow",
            )
            # HCCL collectives (no stream in the table) match the HCCL group slice by name
            # within 2 µs; every other row matches the NPU task starting at the same ns.
            hccl_match = (
                kev.join(hc, on="name", how="inner")
                .filter((pl.col("_hts") - pl.col("ts_ns")).abs() <= 2000)
                .sort("_krow", (pl.col("_hts") - pl.col("ts_ns")).abs())
                .unique("_krow", keep="first")
                .unique("_erow", keep="first")
            )
            rest = kev.filter(~pl.col("_krow").is_in(hccl_match.get_column("_krow").implode()))
            hw_match = (
                rest.join(
                    dev.filter(pl.col("kind") != "communication").select(
                        "ts_ns",
                        pl.col("stream").alias("_hstream"),
                        pl.col("correlation").alias("_corr"),
                        "_erow",
                    ),
                    on="ts_ns",
                    how="inner",
                )
                .filter(pl.col("stream").is_null() | (pl.col("stream") == pl.col("_hstream")))
                .unique("_krow", keep="first")
                .unique("_erow", keep="first")
            )
            matched = pl.concat(
                [
                    hw_match.select("_krow", "_corr", pl.lit(None, pl.Int64).alias("_hb"), "_erow"),
                    hccl_match.select("_krow", "_corr", "_hb", "_erow"),
                ]
            )
            kev = (
                kev.join(matched.select("_krow", "_corr", "_hb"), on="_krow", how="left")
                .with_columns(pl.col("_corr").alias("correlation"), pl.col("_hb").alias("bytes"))
                .drop("_corr", "_hb")
            )
            drop_rows = matched.get_column("_erow")
            meta_extra["kernels_matched_to_trace"] = matched.height
            parts[0] = (
                ev.with_row_index("_erow")
                .filter(~pl.col("_erow").is_in(drop_rows.implode()))
                .drop("_erow")
            )
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


def _meta_names(trace: pl.DataFrame, what: str, *, with_tid: bool = False) -> pl.DataFrame:
    m = trace.filter((pl.col("ph") == "M") & (pl.col("name") == what))
    cols = [
        pl.col("pid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False),
        pl.col("args").struct.field("name").alias("value"),
    ]
    if with_tid:
        cols.insert(1, pl.col("tid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False))
    return m.select(cols).unique(maintain_order=True)


def _threads(pnames: pl.DataFrame, tnames: pl.DataFrame, device_pids: list[int]) -> pl.DataFrame:
    """Track names "PROCESS · THREAD" from the trace's metadata ("Ascend Hardware · Stream 2",
    "HCCL · Group 0 Communication", "Python · Thread 7"): the threads table has no process
    column, and the process is what tells a hardware stream from a host thread."""
    proc = pnames.select("pid", pl.col("value").alias("_proc")).unique(
        "pid", keep="first", maintain_order=True
    )
    return (
        tnames.join(proc, on="pid", how="left", maintain_order="left")
        .select(
            pl.col("pid"),
            pl.col("tid"),
            pl.when(pl.col("_proc").is_not_null())
            .then(pl.format("{} · {}", pl.col("_proc"), pl.col("value")))
            .otherwise(pl.col("value"))
            .alias("name"),
            pl.col("pid").is_in(device_pids).alias("is_device"),
        )
        .unique(["pid", "tid"], keep="first", maintain_order=True)
    )


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
