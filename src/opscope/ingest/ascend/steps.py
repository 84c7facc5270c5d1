"""The steps table: ``step_trace_time.csv`` (or the analysis database) joined to the ProfilerStep
slices."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from opscope.ingest import link
from opscope.ingest.ascend.convert import _us_float_to_ns
from opscope.ingest.ascend.csvfile import _col, read_csv
from opscope.model import schema as S


def _read_steps(
    path: Path, events: pl.DataFrame, odd: Counter[str], read: list[str]
) -> pl.DataFrame:
    if not path.is_file():
        return _steps_from_frame(None, events)
    df = read_csv(path, odd)
    read.append(path.name)
    return _steps_from_frame(df, events)


def _steps_from_frame(df: pl.DataFrame | None, events: pl.DataFrame) -> pl.DataFrame:
    """Steps from a step_trace_time table (strings, the CSV's columns; None: from the events)."""
    # the ProfilerStep#N slices, read as the shared linker reads them
    marks = link.step_numbers(events).select("step", "ts_ns", "dur_ns")
    dev = (
        events.filter(pl.col("device").is_not_null() & pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            pl.col("ts_ns").min().alias("_dts"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("_dend"),
        )
    )
    if df is None:
        if marks.height:
            return marks.sort("step")
        return dev.select(
            "step",
            pl.col("_dts").alias("ts_ns"),
            (pl.col("_dend") - pl.col("_dts")).alias("dur_ns"),
        ).sort("step")
    if "Step" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("Step"))
    ms = pl.Float64
    b = df.select(
        pl.col("Step").str.extract(r"(\d+)$").cast(pl.Int32, strict=False).alias("step"),
        _us_float_to_ns(_col(df, "Computing").cast(ms, strict=False)).alias("computing_ns"),
        _us_float_to_ns(_col(df, "Communication").cast(ms, strict=False)).alias("communication_ns"),
        _us_float_to_ns(_col(df, "Communication(Not Overlapped)").cast(ms, strict=False)).alias(
            "communication_not_overlapped_ns"
        ),
        _us_float_to_ns(_col(df, "Free").cast(ms, strict=False)).alias("free_ns"),
        _us_float_to_ns(_col(df, "Stage").cast(ms, strict=False)).alias("_stage"),
    )
    out = b.join(marks, on="step", how="left").join(dev, on="step", how="left")
    return out.with_columns(
        pl.coalesce("ts_ns", "_dts").alias("ts_ns"),
        pl.coalesce("dur_ns", "_stage", pl.col("_dend") - pl.col("_dts")).alias("dur_ns"),
    ).select([c for c in S.STEPS if c != "rank"])
