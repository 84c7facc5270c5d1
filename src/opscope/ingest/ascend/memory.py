"""``operator_memory.csv`` / ``memory_record.csv``: allocations and allocator counters."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from opscope.ingest import link
from opscope.ingest.ascend.convert import us_text_to_ns
from opscope.ingest.ascend.csvfile import _col, read_csv
from opscope.model import schema as S


def _read_memory(
    out: Path, device: int, odd: Counter[str], read: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    del device
    frames: list[pl.DataFrame | None] = []
    for name in ("operator_memory.csv", "memory_record.csv"):
        f = out / name
        frames.append(read_csv(f, odd) if f.is_file() else None)
        if f.is_file():
            read.append(name)
    return _memory_from_frames(frames[0], frames[1])


def _memory_from_frames(
    om_df: pl.DataFrame | None, mr_df: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Memory rows and allocator counters from operator_memory / memory_record tables
    (strings, the CSVs' columns); either may be None."""
    mib = 1024 * 1024
    memory = S.empty("memory").drop("rank")
    counters = S.empty("counters").drop("rank")
    if om_df is not None:
        df = om_df
        if "Size(KB)" in df.columns and "Allocation Time(us)" in df.columns:
            size = (
                (pl.col("Size(KB)").cast(pl.Float64, strict=False) * 1024).round(0).cast(pl.Int64)
            )
            dev = _col(df, "Device Type").str.extract(r"(\d+)$").cast(pl.Int32, strict=False)

            def mb(c: str) -> pl.Expr:
                return (_col(df, c).cast(pl.Float64, strict=False) * mib).round(0).cast(pl.Int64)

            alloc = df.select(
                us_text_to_ns(pl.col("Allocation Time(us)")).alias("ts_ns"),
                size.alias("bytes"),
                mb("Allocation Total Allocated(MB)").alias("total_allocated"),
                mb("Allocation Total Reserved(MB)").alias("total_reserved"),
                dev.alias("device"),
            )
            free = df.select(
                us_text_to_ns(_col(df, "Release Time(us)")).alias("ts_ns"),
                (-size).alias("bytes"),
                mb("Release Total Allocated(MB)").alias("total_allocated"),
                mb("Release Total Reserved(MB)").alias("total_reserved"),
                dev.alias("device"),
            ).filter(pl.col("ts_ns").is_not_null())
            memory = (
                pl.concat([alloc, free])
                .filter(pl.col("ts_ns").is_not_null())
                .with_columns(pl.lit(20, pl.Int32).alias("device_type"))
                .sort("ts_ns")
            )
    if mr_df is not None:
        df = mr_df
        if "Timestamp(us)" in df.columns:
            comp = _col(df, "Component").fill_null("memory")
            longs = []
            for col, label in (
                ("Total Allocated(MB)", "allocated"),
                ("Total Reserved(MB)", "reserved"),
                ("Total Active(MB)", "active"),
            ):
                if col not in df.columns:
                    continue
                longs.append(
                    df.select(
                        (pl.lit("memory_record/") + comp + pl.lit(f" {label} bytes")).alias("name"),
                        us_text_to_ns(pl.col("Timestamp(us)")).alias("ts_ns"),
                        (pl.col(col).cast(pl.Float64, strict=False) * mib).alias("value"),
                    ).filter(pl.col("value").is_not_null() & pl.col("ts_ns").is_not_null())
                )
            if longs:
                counters = pl.concat(longs)
    return memory, counters


def _memory_links(memory: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Step of each allocation: the ProfilerStep holding its timestamp, by the shared linker's
    rule (:func:`opscope.ingest.link.step_of_times`, as for Kineto's memory rows)."""
    if memory.height == 0:
        return memory
    steps = link.step_numbers(events)
    rank = events.get_column("rank")[0] if events.height else 0
    return memory.with_columns(
        link.step_of_times(
            steps, pl.repeat(rank, memory.height, dtype=pl.Int32, eager=True), memory["ts_ns"]
        )
    )
