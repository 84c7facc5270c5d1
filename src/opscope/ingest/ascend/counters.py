"""Counters (``ph: "C"`` records) of ``trace_view.json``: one row per record with a value, named
"PROCESS/NAME" (AI Core frequency, NPU memory, PMU and bandwidth tracks)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from opscope.ingest.ascend.trace_view import _COUNTER_KEYS
from opscope.model import schema as S


def _trace_counters(t: pl.DataFrame, proc: dict[Any, Any], odd: Counter[str]) -> pl.DataFrame:
    """COUNTERS rows (without ``rank``) of the trace records ``t``; ``proc``: pid -> process
    name. Records with no known value key are dropped and counted in ``odd``."""
    counters = S.empty("counters").drop("rank")
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
    return counters
