"""A performance model: the least time each op call could take on the device, and the gap.

For every outermost costed op call (the units of :mod:`opscope.analysis.roofline`) the lower
bound is

    bound = max(FLOPs / peak FLOP/s, bytes / peak bytes/s) + kernels × launch floor

with the peaks of the profile's device (datasheet table, ``opscope calibrate`` cache, or the
device named by ``Options.device_name`` / ``--device NAME`` when the trace carries no device
properties). The launch floor is the least time a kernel occupies the device however little it
does (ramp-up, tail, the first memory round trip). ``gap = measured - bound`` (never below 0) is
what any fix to the op itself could remove; the advise rules explain gaps and never claim more.
Without peaks the bound and the gap are null ("unknown"), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import polars as pl

from opscope.analysis import tree
from opscope.analysis.devices import DeviceSpec
from opscope.analysis.registry import Options, Result
from opscope.model import Profile

# The least device time of one kernel launch, by vendor. An empty kernel shows 1-3 µs in
# Kineto/rocprof traces (launch-to-retire on the device, not the host's launch cost): NVIDIA's
# CUDA Graphs article gives ~2 µs launch latency per kernel; ROCm kernels start slower (AMD's
# MI200 tuning guide: 5-10 µs dispatch on HIP, of which ~3 µs on the device); Ascend AI-core
# tasks carry ~3 µs of scheduling (CANN performance tuning guide). Conservative (low) values:
# a higher floor would hide real gaps.
LAUNCH_FLOOR_NS: Final[dict[str, float]] = {
    "nvidia": 1_500.0,
    "amd": 3_000.0,
    "ascend": 3_000.0,
    "cpu": 0.0,
}
_GROUP: Final = ("name", "input_dims", "input_types")


def launch_floor_ns(spec: DeviceSpec | None) -> float:
    """The per-launch floor for a device (NVIDIA's when the vendor is unknown)."""
    if spec is None:
        return LAUNCH_FLOOR_NS["nvidia"]
    return LAUNCH_FLOOR_NS.get(spec.vendor, LAUNCH_FLOOR_NS["nvidia"])


def bound_ns(
    spec: DeviceSpec | None,
    flops: float | None,
    nbytes: float | None,
    dtype: str | None,
    roof: str | None,
    kernels: int = 1,
) -> float | None:
    """The least time (ns) of work of ``flops`` FLOPs and ``nbytes`` bytes on ``spec``.

    ``roof`` is ``"matrix"`` (tensor/cube units), ``"vector"`` or ``"memory"`` (bytes only).
    None when neither side has a peak (no device, or a dtype without a peak).
    """
    if spec is None:
        return None
    parts: list[float] = []
    peak = spec.peak(dtype, roof) if roof != "memory" else None
    if flops and peak:
        parts.append(float(flops) / peak * 1e9)
    if nbytes and spec.mem_bw:
        parts.append(float(nbytes) / spec.mem_bw * 1e9)
    if not parts:
        return None
    return max(parts) + max(kernels, 1) * launch_floor_ns(spec)


@dataclass(frozen=True)
class PerfModel(Result):
    """``calls``: the roofline calls with ``compute_ns``, ``memory_ns``, ``floor_ns``,
    ``bound_ns`` and ``gap_ns`` (null without peaks); ``groups``: per (name, shapes, dtypes):
    calls, ``time_ns``, ``bound_ns``, ``gap_ns`` (sum of the calls' gaps) and ``efficiency``
    (bound / time), sorted by gap. ``device``/``spec``/``peaks_note``: which peaks were used.

    ``groups`` is run when first read, from its plan (``groups_plan``): the rules read the
    calls and the peaks only (the groups were ~40% of the model's query on a 4.8k-event trace).
    """

    calls: pl.DataFrame
    groups_plan: pl.LazyFrame | pl.DataFrame
    device: str | None
    spec: DeviceSpec | None
    peaks_note: str
    floor_ns: float
    _groups: dict[str, pl.DataFrame] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def groups(self) -> pl.DataFrame:
        """Per (name, shapes, dtypes): see the class doc."""
        return tree.table_once(self._groups, self.groups_plan, _in_memory)

    def tables(self) -> dict[str, pl.DataFrame]:
        """``calls`` and ``groups`` (in its plan's place)."""
        return {"calls": self.calls, "groups": self.groups}

    def scalars(self) -> dict[str, Any]:
        """``device``, ``spec``, ``peaks_note`` and ``floor_ns``."""
        return {
            "device": self.device,
            "spec": self.spec,
            "peaks_note": self.peaks_note,
            "floor_ns": self.floor_ns,
        }

    def to_json(self) -> dict[str, Any]:
        """``{"device", "peaks", "launch_floor_us", "groups": [...]}`` (top 50 by gap)."""
        rows = []
        for r in self.groups.head(50).iter_rows(named=True):
            rows.append(
                {
                    "name": r["name"],
                    "input_shapes": r["input_dims"],
                    "dtypes": r["input_types"],
                    "calls": r["calls"],
                    "time_us": _us(r["time_ns"]),
                    "bound_us": _us(r["bound_ns"]),
                    "gap_us": _us(r["gap_ns"]),
                    "efficiency": r["efficiency"],
                }
            )
        return {
            "device": self.device,
            "peaks": self.peaks_note,
            "launch_floor_us": self.floor_ns / 1e3,
            "groups": rows,
        }


def _us(v: float | None) -> float | None:
    return None if v is None else round(float(v) / 1e3, 3)


def perf_model(profile: Profile, options: Options) -> PerfModel:
    """Lower bound and gap of every outermost costed op call, and per group."""
    from opscope.analysis.roofline import device_of, roofline

    spec, dev_name, note = device_of(profile, options)
    rf = roofline(profile, options)
    # the calls and the groups as plans, collected together (each eager step was a query)
    calls = rf.calls.lazy()
    floor = launch_floor_ns(spec) if spec is not None else 0.0
    bw = spec.mem_bw if spec is not None else None
    if spec is None:
        calls = calls.with_columns(
            *[pl.lit(None, pl.Float64).alias(c) for c in ("compute_ns", "memory_ns", "floor_ns")],
        )
    else:
        peak = (
            pl.col("peak_flops") if "peak_flops" in rf.calls.columns else pl.lit(None, pl.Float64)
        )
        calls = calls.with_columns(
            pl.when((pl.col("roof") != "memory") & (peak > 0))
            .then(pl.col("flops").cast(pl.Float64) / peak * 1e9)
            .otherwise(None)
            .alias("compute_ns"),
            (pl.col("bytes").cast(pl.Float64) / bw * 1e9 if bw else pl.lit(None, pl.Float64)).alias(
                "memory_ns"
            ),
            (pl.col("kernels").clip(lower_bound=1).cast(pl.Float64) * floor).alias("floor_ns"),
        )
    roof_ns = pl.max_horizontal("compute_ns", "memory_ns")
    calls = calls.with_columns(
        pl.when(roof_ns.is_not_null()).then(roof_ns + pl.col("floor_ns")).alias("bound_ns")
    ).with_columns(
        pl.when(pl.col("time_ns").is_not_null() & pl.col("bound_ns").is_not_null())
        .then((pl.col("time_ns").cast(pl.Float64) - pl.col("bound_ns")).clip(lower_bound=0))
        .alias("gap_ns")
    )
    if tree.SHORTCUTS and not rf.calls.height:
        # no costed call (a trace of kernels only): the plans' empty tables from their schemas,
        # without the query (a fixed cost of ~0.7 ms on the small Ascend exports)
        calls_df = pl.DataFrame(schema=calls.collect_schema())
        return PerfModel(
            calls_df,
            pl.DataFrame(schema=_groups_plan(calls).collect_schema()),
            dev_name,
            spec,
            note,
            floor,
        )
    calls_df = calls.collect(engine="in-memory")
    # the groups from the calls collected (not the calls' plan again) when first read
    return PerfModel(calls_df, _groups_plan(calls_df.lazy()), dev_name, spec, note, floor)


def _groups_plan(calls: pl.LazyFrame) -> pl.LazyFrame:
    """The groups of :class:`PerfModel` from its calls, as a plan."""
    return (
        calls.group_by(list(_GROUP), maintain_order=True)
        .agg(
            pl.len().cast(pl.UInt32).alias("calls"),
            pl.col("time_ns").sum().cast(pl.Float64).alias("time_ns"),
            pl.when(pl.col("bound_ns").is_not_null().any())
            .then(pl.col("bound_ns").sum())
            .alias("bound_ns"),
            pl.when(pl.col("gap_ns").is_not_null().any())
            .then(pl.col("gap_ns").sum())
            .alias("gap_ns"),
            pl.col("kernels").sum().alias("kernels"),
            pl.col("formula").first(),
        )
        .with_columns(
            pl.when(pl.col("time_ns") > 0)
            .then(pl.col("bound_ns") / pl.col("time_ns"))
            .alias("efficiency")
        )
        .sort(["gap_ns", *_GROUP], descending=[True, *[False] * len(_GROUP)], nulls_last=True)
    )


def _in_memory(plan: pl.LazyFrame) -> pl.DataFrame:
    return plan.collect(engine="in-memory")
