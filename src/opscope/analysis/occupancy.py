"""Core utilisation ("parallel efficiency"): how well each kernel's launch fills the device.

GPUs: from the kernel's grid, block, registers per thread and shared memory per block, the
resident blocks per SM are estimated from the architecture's limits (the CUDA occupancy
calculator's rules: threads, warps, blocks, registers in 256-register warp allocations, shared
memory); then ``waves = blocks / (SMs x blocks_per_SM)`` and the tail effect is the share of the
last wave's slots left idle. The profiler's ``est. achieved occupancy %`` is carried alongside.

Ascend: ``Block Num`` against the AI-core count (cube cores for ``AI_CORE`` kernels, vector
cores, twice as many on 910B, for ``AI_VECTOR_CORE`` ones), and the pipe ratios
(``aic_mac_ratio``, ``aic_mte2_ratio``, ``aiv_vec_ratio``...) from ``kernel_metrics``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Final, cast

import msgspec
import numpy as np
import polars as pl

from opscope.analysis import tree
from opscope.analysis.devices import match
from opscope.analysis.registry import Options, Result, analysis
from opscope.model import Profile

# Per-SM limits by compute capability: (max threads, max blocks, registers, shared memory bytes)
# from the CUDA C Programming Guide's "Technical Specifications per Compute Capability" table.
_SM_LIMITS: Final[dict[str, tuple[int, int, int, int]]] = {
    "7.0": (2048, 32, 65536, 96 * 1024),
    "7.2": (2048, 32, 65536, 96 * 1024),
    "7.5": (1024, 16, 65536, 64 * 1024),
    "8.0": (2048, 32, 65536, 164 * 1024),
    "8.6": (1536, 16, 65536, 100 * 1024),
    "8.7": (2048, 16, 65536, 164 * 1024),
    "8.9": (1536, 24, 65536, 100 * 1024),
    "9.0": (2048, 32, 65536, 228 * 1024),
    "10.0": (2048, 32, 65536, 228 * 1024),
}
# AMD CDNA: 4 SIMDs x 8 wavefronts x 64 lanes per CU, 64 KiB LDS (registers not in the traces).
_AMD_LIMITS: Final = (2048, 32, 0, 64 * 1024)
_REG_ALLOC_PER_WARP: Final = 256  # registers are allocated per warp in units of 256
_SMEM_RESERVED_PER_BLOCK: Final = 1024  # sm80+ reserve 1 KiB of shared memory per block
PIPE_METRICS: Final = (
    "aic_mac_ratio",
    "aic_mte1_ratio",
    "aic_mte2_ratio",
    "aic_fixpipe_ratio",
    "aic_scalar_ratio",
    "aiv_vec_ratio",
    "aiv_mte2_ratio",
    "aiv_mte3_ratio",
    "aiv_scalar_ratio",
)


@dataclass(frozen=True)
class UtilisationResult(Result):
    """``kernels``: per (name, grid, block) group: calls, time, blocks, estimated blocks per
    SM, waves, tail idle share, wave efficiency, achieved occupancy, pipe ratios (Ascend).
    ``wave_efficiency``: time-weighted mean over all kernels (1.0 = every wave full)."""

    kernels: pl.DataFrame
    compute_units: int | None
    wave_efficiency: float | None
    note: str

    #: In a report its JSON is the tables' top rows in µs (every kernel in ns is for callers).
    generic_json: ClassVar[bool] = True

    def to_json(self) -> dict[str, Any]:
        """The groups as a list of dicts, and the overall figures."""
        return {
            "compute_units": self.compute_units,
            "wave_efficiency": self.wave_efficiency,
            "note": self.note,
            "kernels": self.kernels.to_dicts(),
        }


def _limits(vendor: str | None, cc: str | None) -> tuple[int, int, int, int] | None:
    if vendor == "amd":
        return _AMD_LIMITS
    if cc and cc in _SM_LIMITS:
        return _SM_LIMITS[cc]
    if cc:
        major = cc.split(".")[0]
        same = [v for k, v in _SM_LIMITS.items() if k.split(".")[0] == major]
        if same:
            return same[0]
    return None


def _device(
    profile: Profile, options: Options
) -> tuple[str | None, str | None, str | None, int | None]:
    dev = profile.devices
    name = options.device_name
    vendor = cc = None
    cu: int | None = None
    if dev.height:
        r = dev.row(0, named=True)
        name = name or r["name"]
        vendor, cc, cu = r["vendor"], r["compute_capability"], r["compute_units"]
    spec = match(name) if name else None
    if cu is None and spec is not None:
        cu = spec.compute_units
    if vendor is None and spec is not None:
        vendor = spec.vendor
    return name, vendor, cc, cu


def _shape_product(col: str) -> pl.Expr:
    return (
        pl.col(col)
        .str.json_decode(pl.List(pl.Int64))
        .list.eval(pl.element().product())
        .list.first()
    )


_I64: Final = range(-(2**63), 2**63)
_INT_LIST: Final = msgspec.json.Decoder(list[int | None])


def _products(shapes: list[str | None]) -> dict[str, int] | None:
    """:func:`_shape_product` of each of the distinct strings ``shapes`` (a null has none), in
    Python: a JSON list of integers, nulls skipped (``[]`` -> 1); None when any string is
    something else or its product leaves Int64 (Polars' product wraps), for the plan's parse.

    A launch geometry is a handful of distinct strings (236 grids on a 4.8k-event rank): the
    decode and a ``list.eval`` per string in the plan were half of its time (~0.9 of 2 ms)."""
    out: dict[str, int] = {}
    for text in shapes:
        if text is None:
            continue
        try:
            # (typed: the decoder checks the items, not a generator per string in Python)
            v = _INT_LIST.decode(text)
        except msgspec.DecodeError:  # not JSON, or not a list of integers and nulls
            return None
        ints = [x for x in v if x is not None] if None in v else cast(list[int], v)
        prod = math.prod(ints)
        if prod not in _I64:
            return None
        out[text] = prod
    return out


@analysis("utilisation")
def utilisation(profile: Profile, options: Options) -> UtilisationResult:
    """Waves, tail effect and occupancy of every kernel group (GPU), or blocks vs AI cores and
    pipe ratios (Ascend)."""
    name, vendor, cc, cu = _device(profile, options)
    is_ascend = vendor == "ascend" or (profile.meta.get("format") == "ascend")
    lim = None if is_ascend else _limits(vendor, cc)
    # from the cached device work: the same rows in the same order as filtering the events,
    # without scanning every event again (ms on a 75k-event trace)
    kernels, km = profile.kernels, profile.kernel_metrics
    if tree.SHORTCUTS and not km.height and not (kernels.get_column("kind") == "kernel").any():
        # no kernel (a trace of collectives or host work only) and no metric: no group, the
        # table empty in the plan's schema for kernels of this schema, made once per process
        # and copied (the plan's ~1 ms of queries found nothing); tests/test_report_speed_ha.py
        # checks it against the plan run
        key = tuple(zip(kernels.columns, kernels.dtypes, strict=True))  # (not a Schema: ~3x)
        empty, note = _empty_groups(key, is_ascend, lim, cu, vendor, cc, name)
        out = empty.clone()
    else:
        # no launch geometry on any kernel (an Ascend export's never have it): nothing to parse
        # or join (Series null counts: no query)
        shapeless = tree.SHORTCUTS and all(
            kernels.get_column(c).null_count() == kernels.height for c in ("grid", "block")
        )
        # each grid's and block's product from its text in Python, when every one is a list
        # of integers (always, from Kineto): no parse in the plan
        products = None
        if tree.SHORTCUTS and not shapeless:
            # (the distinct strings of both in one query)
            distinct = kernels.select(pl.col("grid", "block").unique().implode()).row(0)
            grids, blocks = (_products(d) for d in distinct)
            products = None if grids is None or blocks is None else (grids, blocks)
        plan, note = _groups_plan(
            kernels.lazy(), km, is_ascend, lim, cu, vendor, cc, name, shapeless=shapeless,
            products=products,
        )  # fmt: skip
        out = plan.collect(engine="in-memory")
    valid_eff, valid_ns = out.get_column("wave_efficiency"), out.get_column("time_ns")
    if valid_eff.null_count():
        known = _not_null(valid_eff)
        valid_eff, valid_ns = valid_eff.filter(known), valid_ns.filter(known)
    eff = None
    total = float(valid_ns.sum() or 0)
    if valid_ns.len() and total > 0:
        # fsum: exact, so the same digits whatever the thread count (Polars' float sum adds
        # in an order that depends on how the column is chunked: the last digit varied)
        weighted = math.fsum((valid_eff * valid_ns).to_list())
        eff = weighted / total
    return UtilisationResult(kernels=out, compute_units=cu, wave_efficiency=eff, note=note)


def _not_null(s: pl.Series) -> pl.Series:
    """``s.is_not_null()`` of a float column: from NumPy's copy (NaN where null) when it holds
    no other NaN (a 0/0 efficiency is one), without the Series' query; else that query."""
    nan = np.isnan(s.to_numpy())
    return pl.Series(~nan) if int(nan.sum()) == s.null_count() else s.is_not_null()


@functools.cache
def _empty_groups(
    kernels: tree.SchemaKey,
    is_ascend: bool,
    lim: tuple[int, int, int, int] | None,
    cu: int | None,
    vendor: str | None,
    cc: str | None,
    name: str | None,
) -> tuple[pl.DataFrame, str]:
    """:func:`_groups_plan`'s table, empty, for kernels of this schema and no metric (the same
    plan on an empty frame, for its schema alone), and its note."""
    k = pl.DataFrame(schema=dict(kernels)).lazy()
    empty_km = pl.DataFrame()
    plan, note = _groups_plan(k, empty_km, is_ascend, lim, cu, vendor, cc, name)
    return pl.DataFrame(schema=plan.collect_schema()), note


def _groups_plan(
    kernels: pl.LazyFrame,
    km: pl.DataFrame,
    is_ascend: bool,
    lim: tuple[int, int, int, int] | None,
    cu: int | None,
    vendor: str | None,
    cc: str | None,
    name: str | None,
    *,
    shapeless: bool = False,
    products: tuple[dict[str, int], dict[str, int]] | None = None,
) -> tuple[pl.LazyFrame, str]:
    """The kernel groups of ``kernels`` (the profile's device work) with the pipe ratios of
    ``km`` (its kernel metrics), sorted, as one plan; and the note on the limits used.
    ``shapeless``: no kernel has a grid or a block (the caller checked): their parses and joins
    left out, the columns they give null (what they give then). ``products``: the
    :func:`_products` of the grids and the blocks (the caller's), read instead of the parses
    and joins."""
    # one plan from the events to the sorted groups, collected once (each eager step was a
    # query of fixed cost: ~17 per report on a small trace)
    k = kernels.filter(pl.col("kind") == "kernel")
    if shapeless:
        # a null grid's product is null, a null block's too: the joins' columns, without them
        none = pl.lit(None, pl.Int64)  # (the products' type)
        k = k.with_columns(none.alias("threads"), pl.coalesce("blocks", none).alias("n_blocks"))
    elif products is not None:
        # the joins' columns, each row's from its string's product (a null string: none)
        # (the mappings as Series of their types: from a dict Polars infers them, ~0.03 ms)
        k = k.with_columns(
            *(
                pl.col(c)
                .replace_strict(
                    pl.Series(list(m), dtype=pl.String),
                    pl.Series(list(m.values()), dtype=pl.Int64),
                    default=None,
                    return_dtype=pl.Int64,
                )
                .alias(alias)
                for c, m, alias in zip(("grid", "block"), products, ("_g", "threads"), strict=True)
            )
        )
        k = k.with_columns(pl.coalesce("blocks", "_g").alias("n_blocks")).drop("_g")
    else:
        # parse each distinct grid / block string once
        grids = k.select("grid").unique().with_columns(_shape_product("grid").alias("_g"))
        blocks = k.select("block").unique().with_columns(_shape_product("block").alias("threads"))
        k = (
            k.join(grids, on="grid", how="left", nulls_equal=True)
            .join(blocks, on="block", how="left", nulls_equal=True)
            .with_columns(pl.coalesce("blocks", "_g").alias("n_blocks"))
            .drop("_g")
        )
    if is_ascend:
        # vector kernels run on the vector cores: two per cube core on 910B
        cores = (
            pl.when(pl.col("core_type") == "AI_VECTOR_CORE")
            .then(pl.lit(2 * cu if cu else None))
            .otherwise(pl.lit(cu))
        )
        k = k.with_columns(cores.cast(pl.Float64).alias("slots"), pl.lit(1.0).alias("per_sm"))
        note = f"blocks vs {cu} AI cores" if cu else "AI-core count unknown"
    elif lim is not None and cu:
        max_t, max_b, regs, smem = lim
        threads = pl.col("threads").clip(lower_bound=1)
        warps = (threads + 31) // 32
        by_threads = max_t // threads
        reg_warp = (
            (pl.col("registers").cast(pl.Int64) * 32 + _REG_ALLOC_PER_WARP - 1)
            // _REG_ALLOC_PER_WARP
            * _REG_ALLOC_PER_WARP
        )
        by_regs = (
            pl.when((pl.col("registers").fill_null(0) > 0) & pl.lit(regs > 0))
            .then(pl.lit(regs) // (reg_warp * warps))
            .otherwise(None)
        )
        reserved = _SMEM_RESERVED_PER_BLOCK if vendor != "amd" else 0
        by_smem = (
            pl.when(pl.col("shared_mem").fill_null(0) > 0)
            .then(pl.lit(smem) // (pl.col("shared_mem") + reserved))
            .otherwise(None)
        )
        per_sm = pl.min_horizontal(by_threads, pl.lit(max_b), by_regs, by_smem).clip(lower_bound=1)
        k = k.with_columns(
            per_sm.cast(pl.Float64).alias("per_sm"),
        ).with_columns((pl.col("per_sm") * cu).alias("slots"))
        note = f"{cu} SMs/CUs, limits of compute capability {cc or vendor}"
    else:
        k = k.with_columns(
            pl.lit(None, dtype=pl.Float64).alias("per_sm"),
            pl.lit(None, dtype=pl.Float64).alias("slots"),
        )
        note = f"no SM count or architecture limits for {name or 'this device'}"
    # one query for the four columns (each derived from the waves expression itself: the same
    # arithmetic as adding them one after another, without three fixed-cost queries)
    waves = pl.col("n_blocks") / pl.col("slots")
    tail = 1 - (waves - waves.floor())
    k = k.with_columns(
        waves.alias("waves"),
        (waves / waves.ceil()).alias("wave_efficiency"),
        tail.alias("_t"),
        pl.when(waves.is_null())
        .then(None)  # no SM count or limits: unknown, not "no tail"
        .when(waves - waves.floor() > 0)
        .then(tail)
        .otherwise(0.0)
        .alias("tail_idle"),
    )
    w = pl.col("dur_ns").cast(pl.Float64)
    groups = k.group_by("name", "grid", "block", maintain_order=True).agg(
        pl.len().alias("calls"),
        pl.col("dur_ns").sum().alias("time_ns"),
        pl.col("n_blocks").first().alias("blocks"),
        pl.col("threads").first().alias("threads_per_block"),
        pl.col("registers").first(),
        pl.col("shared_mem").first(),
        pl.col("per_sm").first().alias("blocks_per_sm"),
        pl.col("waves").first(),
        pl.col("tail_idle").first(),
        pl.col("wave_efficiency").first(),
        ((pl.col("occupancy") * w).sum() / w.filter(pl.col("occupancy").is_not_null()).sum()).alias(
            "achieved_occupancy"
        ),
    )
    if km.height:  # (no metric at all: no query to find none)
        km = km.filter(pl.col("metric").is_in(list(PIPE_METRICS)))
    if km.height:
        wide = km.pivot(on="metric", index="event_id", values="value", aggregate_function="first")
        present = [m for m in PIPE_METRICS if m in wide.columns]
        j = k.select(pl.col("id").alias("event_id"), "name", "grid", "block", "dur_ns").join(
            wide.lazy(), on="event_id"
        )
        agg = j.group_by("name", "grid", "block").agg(
            [((pl.col(m) * w).sum() / w.sum()).alias(m) for m in present]
        )
        groups = groups.join(agg, on=["name", "grid", "block"], how="left", nulls_equal=True)
    # equal times by the group's keys: the group_by above orders its groups differently each run
    out = groups.sort(
        ["time_ns", "name", "grid", "block"],
        descending=[True, False, False, False],
        nulls_last=True,
    )
    return out, note
