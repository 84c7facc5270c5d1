"""``trace_view.json`` records -> raw events (kinds, device rows, HCCL bytes), flow records,
counters and track names, before the kernel table joins them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import polars as pl

from opscope.ingest.ascend.convert import (
    _STRIP,
    _dims_json,
    _types_json,
    _us_float_to_ns,
    us_text_to_ns,
)
from opscope.ingest.ascend.counters import _trace_counters
from opscope.ingest.ascend.trace_view import _TRACE_SCHEMA
from opscope.model import dtypes
from opscope.model import schema as S

# NPU task types that are kernels (the rest are syncs, copies and HCCL sub-tasks).
_COMPUTE_TASKS = ["AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"]


@dataclass(frozen=True)
class TraceParts:
    """What one ``trace_view.json`` gives before the kernel table joins it."""

    events: pl.DataFrame  # one row per slice, EVENTS columns (no id, rank) + ``_call_stack``
    flow_records: pl.DataFrame  # cat, ph, fid, pid, tid, ts_ns of every s/f/t record
    counters: pl.DataFrame
    threads: pl.DataFrame
    hw_pid: int | None  # the "Ascend Hardware" process
    hccl_pid: int | None  # the "HCCL" process


def _trace_parts(
    trace: pl.DataFrame,
    has_kernel_table: bool,
    device: int,
    odd: Counter[str],
    meta_extra: dict[str, Any],
) -> TraceParts:
    """Events, flow records, counters and track names of the decoded trace records. Without a
    kernel table (``has_kernel_table`` False) the trace's compute tasks are the kernels."""
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
        pl.when(is_hw & pl.lit(not has_kernel_table) & pl.col("Task Type").is_in(_COMPUTE_TASKS))
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
        pl.when(is_hccl).then(pl.col("stream id")).when(is_hw).then(pl.col("tid")).alias("stream"),
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
            # collective bytes = count x element size (HCCL spellings: FP16, BFP16, INT8, ...)
            pl.col("count") * dtypes.itemsize_expr(pl.col("data_type"))
        )
        .otherwise(pl.col("size(Byte)"))
        .alias("bytes"),
    ).with_columns(
        pl.when(pl.col("kind").is_in(["communication", "kernel"]) | is_hccl).then(pl.col("bytes"))
    )

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

    counters = _trace_counters(t, proc, odd)
    return TraceParts(
        events=ev,
        flow_records=fl,
        counters=counters,
        threads=_threads(pnames, tnames, hw + hccl),
        hw_pid=hw[0] if hw else None,
        hccl_pid=hccl[0] if hccl else None,
    )


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
