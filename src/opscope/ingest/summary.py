"""The one definition of the counts ``opscope load`` prints (reused by ``opscope report``)."""

from __future__ import annotations

from typing import Any

import polars as pl

from opscope.model import Profile, kinds

#: Device work counted as "kernels": the rows of :attr:`Profile.kernels`.
DEVICE_WORK = kinds.DEVICE_WORK


def summary(profile: Profile) -> dict[str, Any]:
    """Counts describing what was read.

    - ``events``: rows of the events table (every slice, host and device)
    - ``ops``: ``cpu_op`` rows; ``kernels``: kernel + communication + memcpy + memset rows
    - ``steps``: rows of the steps table (distinct ProfilerStep#N per rank)
    - ``fwd_bwd_links``: distinct forward ops that some backward op links to (``fwd_id``)
    - ``op_kernel_links``: kernels (as above) whose ``op_id`` names a launching op
    - ``span_us``: from the first start to the last end over all events, in µs
    """
    ev = profile.events
    kinds = ev.get_column("kind").cast(pl.String)
    dev = ev.filter(kinds.is_in(DEVICE_WORK))
    if ev.height:
        span_ns = ev.select(
            (pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()
        ).item()
    else:
        span_ns = 0
    out: dict[str, Any] = {
        "format": profile.meta.get("format", "kineto"),
        "ranks": profile.ranks,
        "events": ev.height,
        "ops": int((kinds == "cpu_op").sum()),
        "kernels": dev.height,
        "steps": profile.steps.height,
        "fwd_bwd_links": int(ev.get_column("fwd_id").drop_nulls().n_unique()),
        "op_kernel_links": int(dev.get_column("op_id").is_not_null().sum()),
        "span_us": float(span_ns or 0) / 1000.0,
        "python_frames": int((kinds == "python_function").sum()),
        "memory_events": profile.memory.height,
        "stacks": int(profile.stacks.get_column("stack_id").n_unique())
        if profile.stacks.height
        else 0,
        "oddities": dict(profile.meta.get("oddities", {})),
        "salvaged": profile.meta.get("salvaged"),
        "from_cache": bool(profile.meta.get("from_cache", False)),
    }
    return out
