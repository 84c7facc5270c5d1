"""``kernel_details.csv``: the kernel table and its hardware metrics (PMU columns)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from opscope.errors import InputError
from opscope.ingest.ascend.convert import _us_float_to_ns, us_text_to_ns
from opscope.ingest.ascend.csvfile import read_csv
from opscope.model import schema as S

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
