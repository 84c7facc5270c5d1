"""Roofline figures of a comparison: achieved TFLOP/s and GB/s of the heaviest matched
operators and semantic rows, and their share of each side's device peaks."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from opscope.analysis.compare.side import Side
from opscope.model import Profile

HEAVY_TOP: Final = 10
"""How many of the heaviest matched operators get achieved FLOP/s and bandwidth figures."""


def operator_roofline(rows: pl.DataFrame, sa: Side, sb: Side) -> tuple[pl.DataFrame, list[str]]:
    notes: list[str] = []
    empty = pl.DataFrame(
        schema={
            "key": pl.String,
            "before_tflops": pl.Float64,
            "after_tflops": pl.Float64,
            "before_gbps": pl.Float64,
            "after_gbps": pl.Float64,
        }
    )
    from opscope.analysis.flops import op_costs

    heavy = (
        rows.filter((pl.col("kind") == "op") & (pl.col("match") == "exact"))
        .with_columns(pl.max_horizontal("before_us", "after_us").alias("w"))
        .sort("w", descending=True)
        .head(HEAVY_TOP)
    )
    if heavy.height == 0:
        return empty, notes
    keys = heavy.get_column("key").to_list()
    per_side: list[pl.DataFrame] = []
    for side, col in ((sa, "before_us"), (sb, "after_us")):
        spec, why = device_spec(side.profile)
        if spec is None:
            notes.append(f"{side.name}: utilisation n/a: {why}")
        ids = side.ops.filter(pl.col("name").is_in(keys)).select("id", "name")
        ev = side.profile.events.join(ids.select("id"), on="id", how="semi")
        costs: pl.DataFrame = op_costs(ev)
        agg = (
            ids.join(costs, on="id", how="left")
            .group_by("name")
            .agg(
                # null, not 0, when no call of the operator has a cost formula
                pl.when(pl.col("flops").is_not_null().any()).then(pl.col("flops").sum()),
                pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
                # the dtype and unit (matrix / vector) most of the operator's calls use
                pl.col("dtype").drop_nulls().mode().first().alias("dtype"),
                pl.col("roof").drop_nulls().mode().first().alias("roof"),
            )
            .join(
                heavy.select(pl.col("key").alias("name"), pl.col(col).alias("us")),
                on="name",
            )
        )
        peak_flops = [
            None if spec is None else spec.peak(d, r)
            for d, r in zip(agg["dtype"].to_list(), agg["roof"].to_list(), strict=True)
        ]
        per_side.append(
            agg.with_columns(
                pl.Series("peak_flops", peak_flops, dtype=pl.Float64),
                pl.lit(None if spec is None else spec.mem_bw, dtype=pl.Float64).alias("peak_bw"),
            ).select(
                pl.col("name").alias("key"),
                (pl.col("flops") / pl.col("us") / 1e6).alias("tflops"),
                (pl.col("bytes") / pl.col("us") / 1e3).alias("gbps"),
                (pl.col("flops") / pl.col("us") * 1e6 / pl.col("peak_flops")).alias("flops_util"),
                (pl.col("bytes") / pl.col("us") * 1e6 / pl.col("peak_bw")).alias("bw_util"),
            )
        )
    out = (
        per_side[0]
        .join(per_side[1], on="key", how="inner", suffix="_b")
        .select(
            "key",
            pl.col("tflops").alias("before_tflops"),
            pl.col("tflops_b").alias("after_tflops"),
            pl.col("gbps").alias("before_gbps"),
            pl.col("gbps_b").alias("after_gbps"),
            pl.col("flops_util").alias("before_flops_util"),
            pl.col("flops_util_b").alias("after_flops_util"),
            pl.col("bw_util").alias("before_bw_util"),
            pl.col("bw_util_b").alias("after_bw_util"),
        )
    )
    out = (
        out.filter(pl.col("before_tflops").is_not_null() | pl.col("before_gbps").is_not_null())
        .join(heavy.select("key", "w"), on="key")
        .sort("w", descending=True)
        .drop("w")
    )
    util = ["before_flops_util", "after_flops_util", "before_bw_util", "after_bw_util"]
    if all(out.get_column(c).null_count() == out.height for c in util):
        out = out.drop(util)
    return out, notes


def device_spec(p: Profile, override: str | None = None) -> tuple[Any, str]:
    """The roofline engineer's peaks for the profile's (first) device, or for ``override``,
    and where they come from."""
    from opscope.analysis import devices

    if override:
        return devices.resolve(override)
    dev = p.devices.filter(pl.col("vendor").fill_null("") != "cpu")
    if dev.height == 0:
        return devices.resolve(None, vendor="cpu")
    d = dev.row(0, named=True)
    return devices.resolve(
        d["name"],
        vendor=d["vendor"],
        compute_units=d["compute_units"],
        memory_bytes=d["memory_bytes"],
    )


def device_label(p: Profile, override: str | None) -> str:
    """The device a side ran on, as its profile (or ``--device``) names it."""
    if override:
        return override
    dev = p.devices.filter(pl.col("vendor").fill_null("") != "cpu")
    if dev.height:
        name = dev.row(0, named=True)["name"]
        return str(name) if name else "unnamed device"
    return "cpu" if not p.has_device else "unnamed device"


_HEAVY_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "key": pl.String,
    "match": pl.String,
    "before_us": pl.Float64,
    "after_us": pl.Float64,
    "speedup": pl.Float64,
    "verdict": pl.String,
    "noise_us": pl.Float64,
    "before_gbps": pl.Float64,
    "after_gbps": pl.Float64,
    "before_tflops": pl.Float64,
    "after_tflops": pl.Float64,
    "before_flops_util": pl.Float64,
    "after_flops_util": pl.Float64,
    "before_bw_util": pl.Float64,
    "after_bw_util": pl.Float64,
}


def heavy_rows(
    rows: pl.DataFrame,
    frames: tuple[pl.DataFrame, pl.DataFrame] | None,
    sides: tuple[Side, Side],
    scales: tuple[float, float],
    specs: tuple[Any, Any],
) -> tuple[pl.DataFrame, list[str]]:
    """Time, achieved GB/s and TFLOP/s and their share of the device's peaks, before and after,
    for the :data:`HEAVY_TOP` heaviest matched semantic rows.

    FLOPs and bytes are :func:`opscope.analysis.flops.op_costs` of the row's anchor operators
    (the roofline's per-op models) over the same steps as the row's time. A utilisation is null
    where that side's peak is unknown.
    """
    notes: list[str] = []
    heavy = (
        rows.filter(pl.col("kind") == "semantic")
        .with_columns(pl.max_horizontal("before_us", "after_us").alias("w"))
        .sort("w", "key", descending=[True, False])
        .head(HEAVY_TOP)
    )
    if heavy.height == 0 or frames is None:
        return pl.DataFrame(schema=_HEAVY_SCHEMA), notes
    from opscope.analysis.flops import op_costs

    keys = heavy.select("key")
    figures: list[pl.DataFrame] = []
    for side, frame, scale, spec in zip(sides, frames, scales, specs, strict=True):
        anchors = (
            frame.filter(pl.col("match").is_not_null() & pl.col("anchor_id").is_not_null())
            .join(keys, on="key", how="semi")
            .select("key", "anchor_id")
            .unique()
        )
        ev = side.profile.events.join(
            anchors.select(pl.col("anchor_id").alias("id")), on="id", how="semi"
        )
        costs = op_costs(ev).rename({"id": "anchor_id"})
        agg = (
            anchors.join(costs, on="anchor_id", how="left")
            .group_by("key")
            .agg(
                # null, not 0, when no anchor of the row has a cost formula
                pl.when(pl.col("flops").is_not_null().any()).then(pl.col("flops").sum()),
                pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
                pl.col("dtype").drop_nulls().mode().first().alias("dtype"),
                pl.col("roof").drop_nulls().mode().first().alias("roof"),
            )
        )
        peaks = [
            None if spec is None else spec.peak(d, r)
            for d, r in zip(agg["dtype"].to_list(), agg["roof"].to_list(), strict=True)
        ]
        figures.append(
            agg.with_columns(
                (pl.col("flops").cast(pl.Float64) / scale).alias("flops"),
                (pl.col("bytes").cast(pl.Float64) / scale).alias("bytes"),
                pl.Series("peak_flops", peaks, dtype=pl.Float64),
                pl.lit(None if spec is None else spec.mem_bw, dtype=pl.Float64).alias("peak_bw"),
            ).select("key", "flops", "bytes", "peak_flops", "peak_bw")
        )
    out = heavy.join(figures[0], on="key", how="left").join(
        figures[1], on="key", how="left", suffix="_b"
    )

    def rate(work: str, us: str, unit: float) -> pl.Expr:
        return pl.when(pl.col(us) > 0).then(pl.col(work) / pl.col(us) * 1e6 / unit)

    out = out.with_columns(
        rate("bytes", "before_us", 1e9).alias("before_gbps"),
        rate("bytes_b", "after_us", 1e9).alias("after_gbps"),
        rate("flops", "before_us", 1e12).alias("before_tflops"),
        rate("flops_b", "after_us", 1e12).alias("after_tflops"),
    ).with_columns(
        (pl.col("before_tflops") * 1e12 / pl.col("peak_flops")).alias("before_flops_util"),
        (pl.col("after_tflops") * 1e12 / pl.col("peak_flops_b")).alias("after_flops_util"),
        (pl.col("before_gbps") * 1e9 / pl.col("peak_bw")).alias("before_bw_util"),
        (pl.col("after_gbps") * 1e9 / pl.col("peak_bw_b")).alias("after_bw_util"),
    )
    return out.select([pl.col(c).cast(t) for c, t in _HEAVY_SCHEMA.items()]), notes
