"""Step breakdown per step and rank, and the spread of step times.

Each step window ``[ts, ts + dur)`` of ``steps`` (or, without steps, each rank's whole span as one
step with a null number) is split by interval unions of the work clipped to it:

- ``compute_ns``: device kernels that are not communication (union over streams);
- ``communication_ns``: NCCL/HCCL/collective kernels and ``communication`` events;
  ``communication_not_overlapped_ns`` the part of it when no compute runs;
- ``memcpy_ns``, ``memset_ns``; ``device_busy_ns`` the union of all device work;
- ``device_idle_ns`` = step − busy; ``data_loading_ns``: DataLoader ops/annotations on the host;
  ``host_bound_ns``: device idle time that is not data loading (the device waits for the host);
- ``host_ops_ns``: union of host ops (the only figure a CPU-only profile has besides loading).

Ascend steps carrying ``computing_ns``/``communication_ns``/``communication_not_overlapped_ns``/
``free_ns`` (step_trace_time.csv) use those figures instead. Unions are vectorised: sort, running
max of the ends, a new segment where a start passes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from opscope.analysis.hotspots import markdown_table, rows
from opscope.analysis.registry import Options, Result, analysis
from opscope.model import Profile

#: Host events that are data loading.
DATA_PATTERN = r"DataLoader|dataloader"


def union_ns(iv: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Length of the union of intervals (``start``, ``end``) per ``keys``: column ``union_ns``."""
    if not iv.height:
        return pl.DataFrame(schema={**{k: iv.schema[k] for k in keys}, "union_ns": pl.Int64})
    s = iv.sort([*keys, "start"])
    s = s.with_columns(pl.col("end").cum_max().shift(1).over(keys).alias("prev"))
    s = s.with_columns(
        (pl.col("prev").is_null() | (pl.col("start") > pl.col("prev")))
        .cum_sum()
        .over(keys)
        .alias("seg")
    )
    return (
        s.group_by([*keys, "seg"])
        .agg((pl.col("end").max() - pl.col("start").min()).alias("len"))
        .group_by(keys)
        .agg(pl.col("len").sum().cast(pl.Int64).alias("union_ns"))
    )


def _windows(profile: Profile) -> pl.DataFrame:
    st = profile.steps
    if st.height:
        return st.select(
            "rank",
            "step",
            pl.col("ts_ns").alias("w0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("w1"),
        )
    return (
        profile.events.group_by("rank")
        .agg(
            pl.col("ts_ns").min().alias("w0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("w1"),
        )
        .with_columns(pl.lit(None, pl.Int32).alias("step"))
        .select("rank", "step", "w0", "w1")
    )


def _clip(ev: pl.DataFrame, win: pl.DataFrame, cls: str) -> pl.DataFrame:
    """Intervals of ``ev`` in the window holding their start, clipped to its end, tagged ``cls``.

    An as-of join (not a cross join of events and steps): an event belongs to the step it starts
    in; the part of it running past the step's end is cut (it is rare, and it is the next step's
    time only by a few µs at the boundary).
    """
    e = ev.select("rank", "ts_ns", "dur_ns").sort("ts_ns")
    w = win.sort("w0")
    j = e.join_asof(
        w, left_on="ts_ns", right_on="w0", by="rank", strategy="backward", check_sortedness=False
    )
    return j.filter(pl.col("w0").is_not_null() & (pl.col("ts_ns") < pl.col("w1"))).select(
        "rank",
        "step",
        pl.lit(cls).alias("cls"),
        pl.col("ts_ns").alias("start"),
        pl.min_horizontal(pl.col("ts_ns") + pl.col("dur_ns"), "w1").alias("end"),
    )


@dataclass(frozen=True)
class Breakdown(Result):
    """``steps``: one row per (rank, step) with the columns of the module doc;
    ``stats``: step time mean/median/std/p10/p90/cv per rank and over all (rank null)."""

    steps: pl.DataFrame
    stats: pl.DataFrame
    top: int = 20

    def to_json(self) -> dict[str, Any]:
        """``{"steps": [...], "stats": [...]}`` in µs."""
        return {"steps": rows(self.steps), "stats": rows(self.stats)}

    def to_markdown(self) -> str:
        """Per-step breakdown and step-time spread as Markdown."""
        return (
            "## Step breakdown\n\n"
            + markdown_table(self.steps, self.top)
            + "\n\n### Step time\n\n"
            + markdown_table(self.stats)
            + "\n"
        )


@analysis("breakdown")
def breakdown(profile: Profile, options: Options) -> Breakdown:
    """Per-step breakdown and step-time spread: see the module doc."""
    ev = profile.events
    win = _windows(profile)
    dev = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset", "communication"]))
    is_comm = pl.col("kind") == "communication"  # classified once at load (model/kinds.py)
    parts = [
        _clip(dev.filter((pl.col("kind") == "kernel") & ~is_comm), win, "compute"),
        _clip(dev.filter(is_comm), win, "communication"),
        _clip(dev.filter(pl.col("kind") == "memcpy"), win, "memcpy"),
        _clip(dev.filter(pl.col("kind") == "memset"), win, "memset"),
        _clip(dev, win, "device_busy"),
        _clip(dev.filter(~is_comm), win, "not_comm"),
        _clip(ev.filter(pl.col("kind") == "cpu_op"), win, "host_ops"),
    ]
    data = ev.filter(
        pl.col("kind").is_in(["cpu_op", "user_annotation", "python_function"])
        & pl.col("name").str.contains(DATA_PATTERN)
    )
    dl = _clip(data, win, "data_loading")
    busy = parts[4]
    parts += [
        dl,
        pl.concat(
            [
                dl.with_columns(pl.lit("dl_or_busy").alias("cls")),
                busy.with_columns(pl.lit("dl_or_busy").alias("cls")),
            ]
        ),
    ]
    iv = pl.concat(parts)
    u = union_ns(iv, ["rank", "step", "cls"]).pivot(
        on="cls", index=["rank", "step"], values="union_ns"
    )
    cols = [
        "compute",
        "communication",
        "memcpy",
        "memset",
        "device_busy",
        "not_comm",
        "host_ops",
        "data_loading",
        "dl_or_busy",
    ]
    for c in cols:
        if c not in u.columns:
            u = u.with_columns(pl.lit(0, pl.Int64).alias(c))
    out = (
        win.join(u, on=["rank", "step"], how="left", nulls_equal=True)
        .with_columns(pl.col(cols).fill_null(0))
        .with_columns((pl.col("w1") - pl.col("w0")).alias("dur_ns"))
    )
    has_dev = profile.has_device
    out = out.select(
        "rank",
        "step",
        pl.col("w0").alias("ts_ns"),
        "dur_ns",
        pl.col("compute").alias("compute_ns"),
        pl.col("communication").alias("communication_ns"),
        (pl.col("device_busy") - pl.col("not_comm")).alias("communication_not_overlapped_ns"),
        pl.col("memcpy").alias("memcpy_ns"),
        pl.col("memset").alias("memset_ns"),
        pl.col("device_busy").alias("device_busy_ns"),
        ((pl.col("dur_ns") - pl.col("device_busy")) if has_dev else pl.lit(None, pl.Int64)).alias(
            "device_idle_ns"
        ),
        # idle not covered by data loading = step - |busy ∪ data loading|
        ((pl.col("dur_ns") - pl.col("dl_or_busy")) if has_dev else pl.lit(None, pl.Int64)).alias(
            "host_bound_ns"
        ),
        pl.col("data_loading").alias("data_loading_ns"),
        pl.col("host_ops").alias("host_ops_ns"),
    )
    st = profile.steps
    if st.height and st.get_column("computing_ns").is_not_null().any():
        asc = st.select(
            "rank",
            "step",
            "computing_ns",
            "communication_ns",
            "communication_not_overlapped_ns",
            "free_ns",
        )
        out = (
            out.join(asc, on=["rank", "step"], how="left", suffix="_src")
            .with_columns(
                pl.coalesce("computing_ns", "compute_ns").alias("compute_ns"),
                pl.coalesce("communication_ns_src", "communication_ns").alias("communication_ns"),
                pl.coalesce(
                    "communication_not_overlapped_ns_src", "communication_not_overlapped_ns"
                ).alias("communication_not_overlapped_ns"),
                pl.coalesce("free_ns", "device_idle_ns").alias("device_idle_ns"),
            )
            .drop(
                "computing_ns",
                "communication_ns_src",
                "communication_not_overlapped_ns_src",
                "free_ns",
            )
        )
    out = out.sort("rank", "step")

    def stats(df: pl.DataFrame) -> pl.DataFrame:
        d = pl.col("dur_ns").cast(pl.Float64)
        return df.select(
            pl.len().alias("steps"),
            d.mean().alias("mean_ns"),
            d.median().alias("median_ns"),
            d.std().alias("std_ns"),
            d.quantile(0.1, "linear").alias("p10_ns"),
            d.quantile(0.9, "linear").alias("p90_ns"),
            (d.std() / d.mean()).alias("cv"),
        )

    per_rank = (
        pl.concat(
            [
                stats(g).with_columns(pl.lit(r[0], pl.Int32).alias("rank"))
                for r, g in out.group_by("rank", maintain_order=True)
            ]
        )
        if out.height
        else pl.DataFrame()
    )
    overall = stats(out).with_columns(pl.lit(None, pl.Int32).alias("rank"))
    allstats = pl.concat([per_rank, overall], how="diagonal") if per_rank.height else overall
    return Breakdown(steps=out, stats=allstats.select("rank", pl.exclude("rank")), top=options.top)
