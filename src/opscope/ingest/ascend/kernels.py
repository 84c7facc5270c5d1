"""``kernel_details.csv``: the kernel table, its rows as events matched to their trace tasks, and
its hardware metrics (PMU columns)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError
from opscope.ingest.ascend.convert import _shapes_json, _types_json, _us_float_to_ns, us_text_to_ns
from opscope.ingest.ascend.csvfile import _col, read_csv
from opscope.model import schema as S
from opscope.model.kinds import COMM_CORE_TYPES

# kernel_details columns that describe a kernel; every other numeric column is a hardware metric.
_KERNEL_DESCRIPTIVE = {
    "Step Id",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Name",
    "Type",
    "OP State",
    "Accelerator Core",
    "Start Time(us)",
    "Duration(us)",
    "Block Dim",
    "Block Num",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
    "Device_id",
}


_KERNEL_ARGS = [
    "Task ID",
    "Model ID",
    "OP State",
    "HF32 Eligible",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
]


def _read_kernels(path: Path, odd: Counter[str]) -> pl.DataFrame:
    df = read_csv(path, odd)
    missing = [c for c in ("Name", "Start Time(us)", "Duration(us)") if c not in df.columns]
    if missing:
        raise InputError(f"kernel table lacks column(s) {', '.join(missing)}", path)
    k = df.with_columns(
        us_text_to_ns(pl.col("Start Time(us)")).alias("_ts"),
        _us_float_to_ns(pl.col("Duration(us)")).alias("_dur"),
    )
    bad = k.filter(pl.col("_ts").is_null() | pl.col("_dur").is_null()).height
    if bad:
        odd["kernel_details.csv: rows without start or duration (dropped)"] += bad
        k = k.filter(pl.col("_ts").is_not_null() & pl.col("_dur").is_not_null())
    neg = k.filter(pl.col("_dur") < 0).height
    if neg:
        odd["kernel_details.csv: negative durations (clamped)"] += neg
    return k.with_columns(pl.col("_dur").clip(lower_bound=0)).with_row_index("_krow")


def _kernel_metrics(events: pl.DataFrame, kernels: pl.DataFrame | None) -> pl.DataFrame:
    if kernels is None or "_krow" not in events.columns:
        return S.empty("kernel_metrics")
    metric_cols = [
        c for c in kernels.columns if c not in _KERNEL_DESCRIPTIVE and not c.startswith("_")
    ]
    if not metric_cols:
        return S.empty("kernel_metrics")
    ids = events.filter(pl.col("_krow").is_not_null()).select(
        pl.col("id").alias("event_id"), "_krow"
    )
    long = (
        kernels.select("_krow", *[pl.col(c).cast(pl.Float64, strict=False) for c in metric_cols])
        .unpivot(index="_krow", variable_name="metric", value_name="value")
        .filter(pl.col("value").is_not_null())
    )
    return (
        long.join(ids, on="_krow", how="inner")
        .select("event_id", "metric", "value")
        .sort("event_id", maintain_order=True)
    )


def _kernel_events(kernels: pl.DataFrame, hw_pid: int | None, device: int) -> pl.DataFrame:
    """One event per kernel_details row (kind ``communication`` on the HCCL core), on the
    hardware process's stream tracks (``hw_pid``, else the device number as pid)."""
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
    return kev


def _match_trace_tasks(
    kev: pl.DataFrame, ev: pl.DataFrame, meta_extra: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Join each kernel row to its task in the trace events ``ev`` (which it replaces): the
    kernel takes the task's correlation (and an HCCL collective its bytes); returns the kernel
    events and the trace events less the matched tasks."""
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
    ev = (
        ev.with_row_index("_erow").filter(~pl.col("_erow").is_in(drop_rows.implode())).drop("_erow")
    )
    return kev, ev
