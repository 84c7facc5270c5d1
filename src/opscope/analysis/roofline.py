"""Roofline figures per operator call and per (name, input shapes, dtypes) group.

The unit is the *outermost costed operator*: an op with a formula in :mod:`opscope.analysis.flops`
none of whose ancestors has one (``aten::linear``, not the ``aten::addmm`` inside it), so nothing
is counted twice. Its time is the device time of every kernel launched by it or its descendants
(``op_id``) when the profile has a device, else its host duration.

Bound classes (see ``docs/roofline.md``):

- ``"latency"`` — a call shorter than :data:`LATENCY_NS`, or reaching less than
  :data:`LATENCY_PCT` % of the roof that applies at its intensity: fixed costs (launch, sync,
  ramp-up, tiny tiles), not the hardware's throughput, decide its time.
- ``"compute"`` — intensity at or right of the ridge point (peak FLOP/s / peak bytes/s).
- ``"memory"`` — left of the ridge point (and every bytes-only operator: copies, gathers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from opscope.analysis import tree
from opscope.analysis.devices import DeviceSpec, resolve
from opscope.analysis.flops import ascend_kernel_costs, host_op_costs
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.tree import (
    _positions,
    gather,
    int_values,
    no_ops,
    not_null,
    per_profile,
    per_profile_args,
)
from opscope.model import Profile, kinds

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

# A kernel launch costs ~2-5 µs of host/driver work and a few µs of ramp-up on the device; below
# this a call's time says nothing about throughput.
LATENCY_NS: Final = 5_000
# Reaching under this share of the roof that applies means something other than the roof
# (launch gaps inside the op, tiny grids, synchronisation) sets the time.
LATENCY_PCT: Final = 10.0
# Hardware counters of Ascend kernels worth carrying (duration-weighted mean per group).
PMU_METRICS: Final = (
    "aic_mac_ratio",
    "aic_mte2_ratio",
    "aic_fixpipe_ratio",
    "aiv_vec_ratio",
    "aiv_mte2_ratio",
    "cube_utilization(%)",
)
_GROUP: Final = ("name", "input_dims", "input_types")
# Communication is left out: a collective's time is set by its peers and the network, not by
# the FLOPs and bytes of the op around it (DDP's allreduce runs inside backward nodes).
_DEVICE_KINDS: Final = kinds.LOCAL_WORK


#: What a share of peak reads when the device's peaks are unknown (never 0% or a blank).
NO_PEAK: Final = "n/a — no peak for this device; `--device` or `opscope calibrate`"


@dataclass(frozen=True)
class RooflineResult(Result):
    """``calls``: one row per outermost costed op call; ``groups``: per (name, shapes, dtypes),
    sorted by time; ``kernel_groups``: Ascend kernels costed from their own shapes (may be empty).
    ``device``/``peaks_note``: which peaks were used and where they come from."""

    calls: pl.DataFrame
    groups: pl.DataFrame
    kernel_groups: pl.DataFrame
    device: str | None
    peaks_note: str
    time_source: str  # "device" or "host"
    peak_known: bool = True

    def to_json(self) -> list[dict[str, Any]]:
        """The report's ``"roofline"`` list, one entry per group (ops, then Ascend kernels)."""
        out: list[dict[str, Any]] = []
        note = {} if self.peak_known else {"peak_note": NO_PEAK}
        for df in (self.groups, self.kernel_groups):
            if not df.height:
                continue
            # the columns read as lists, once (a dict of every column per row, iter_rows',
            # was most of this on a trace of a few hundred groups); the same values
            col = {c: df.get_column(c).to_list() for c in _JSON_COLUMNS if c in df.columns}
            pmu = [m for m in PMU_METRICS if m in df.columns]
            pmu_cols = [df.get_column(m).to_list() for m in pmu]
            none = [None] * df.height
            torch = col.get("torch_flops", none)
            for i, time_ns in enumerate(col["time_ns"]):
                out.append(
                    {
                        "name": col["name"][i],
                        "input_shapes": _decode(col["input_dims"][i]),
                        "dtypes": _decode(col["input_types"][i]),
                        "calls": col["calls"][i],
                        "time_us": time_ns / 1e3 if time_ns is not None else None,
                        "flops": col["flops"][i],
                        "torch_flops": torch[i],
                        "bytes": col["bytes"][i],
                        "intensity": col["intensity"][i],
                        "achieved_tflops": col["achieved_tflops"][i],
                        "achieved_gbps": col["achieved_gbps"][i],
                        "pct_of_peak": col["pct_of_peak"][i],
                        **note,
                        "bound": col["bound"][i],
                        "formula": col["formula"][i],
                        **{m: v[i] for m, v in zip(pmu, pmu_cols, strict=True)},
                    }
                )
        return out


#: The columns :meth:`RooflineResult.to_json` reads (``torch_flops`` where there is one).
_JSON_COLUMNS: Final = (
    "name", "input_dims", "input_types", "calls", "time_ns", "flops", "torch_flops", "bytes",
    "intensity", "achieved_tflops", "achieved_gbps", "pct_of_peak", "bound", "formula",
)  # fmt: skip


def _decode(s: str | None) -> Any:
    if s is None:
        return None
    try:
        return msgspec.json.decode(s)
    except msgspec.DecodeError:
        return s


def device_of(profile: Profile, options: Options) -> tuple[DeviceSpec | None, str | None, str]:
    """The peaks for the profile's device (``options.device_name`` overrides the table)."""
    return _device_of(profile, options.device_name)


@per_profile_args
def _device_of(
    profile: Profile, device_name: str | None
) -> tuple[DeviceSpec | None, str | None, str]:
    # once per profile and device name: the roofline and the performance model both ask, and
    # the lookup (a filter of the device table, the spec table's matching) is a fixed cost that
    # dominates on a small trace
    name: str | None = device_name
    vendor: str | None = None
    cu: int | None = None
    mem: int | None = None
    dev = profile.devices
    if name is None and dev.height:
        # the first device that is not a CPU (a null vendor is none), else the first: in
        # Python over the few devices, not a filter (or a Series' fill_null) query
        vendors = dev.get_column("vendor").to_list()
        gpu = next((i for i, v in enumerate(vendors) if v != "cpu"), 0)
        row = dev.row(gpu, named=True)
        name, vendor, cu, mem = (
            row["name"],
            row["vendor"],
            row["compute_units"],
            row["memory_bytes"],
        )
    if name is None and not profile.has_device:
        vendor = "cpu"
    spec, note = resolve(name, vendor=vendor, compute_units=cu, memory_bytes=mem)
    return spec, name, note


def _aligned(ops: pl.DataFrame, costs: pl.DataFrame) -> bool:
    """Whether ``costs`` has ``ops``' ids in their order and no other column of theirs (Series
    operations, no query)."""
    if costs.height != ops.height or set(costs.columns) & set(ops.columns) != {"id"}:
        return False
    a, b = ops.get_column("id"), costs.get_column("id")
    return a.null_count() == 0 and b.null_count() == 0 and bool((a == b).all())


def _starts_with(s: pl.Series, prefix: str) -> npt.NDArray[np.bool_]:
    """``s.str.starts_with(prefix).fill_null(False)`` as a NumPy mask, from two Series
    comparisons (no query; str.starts_with is one): a string starts with ``prefix`` exactly
    when it sorts at or after it and before ``prefix`` with its last character the next one
    (strings compare by their UTF-8 bytes, which keep the code points' order)."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    hit = (s >= prefix) & (s < upper)
    out: npt.NDArray[np.bool_] = (
        (hit.fill_null(False) if hit.null_count() else hit).to_numpy().astype(bool)
    )
    return out


def _local_work(dev: pl.DataFrame) -> npt.NDArray[np.bool_]:
    """Which rows of the device work are local work (:data:`_DEVICE_KINDS`) launched by an op
    (``op_id``): Enum comparisons and a NumPy mask, no query (a Series' is_in and
    is_not_null are one each)."""
    kind = dev.get_column("kind")
    out = not_null(dev.get_column("op_id"))
    local = np.zeros(dev.height, dtype=bool)
    for k in _DEVICE_KINDS:
        eq = kind == k
        local |= (eq.fill_null(False) if eq.null_count() else eq).to_numpy()
    out &= local
    return out


def _op_parents(ops: pl.DataFrame) -> npt.NDArray[np.int64]:
    """For each op (by position), its parent's position when the parent is an op one or more
    nesting levels up (``depth``, null read as 0), else -1: the links the roofline follows."""
    # (Forest.of's parent positions, the parent ids' nulls from NumPy: its fill_null and
    # is_null were a query each)
    ids = ops.get_column("id").to_numpy().astype(np.int64, copy=False)
    parent_id, known = int_values(ops.get_column("parent_id"))
    par = _positions(ids, parent_id, ~known)
    depth, _ = int_values(ops.get_column("depth"))  # (a null read as 0, without a query)
    ok = par >= 0
    ok[ok] = depth[par[ok]] < depth[ok]
    return np.where(ok, par, -1)


def _owners(
    ops: pl.DataFrame, costed: pl.Series, par: npt.NDArray[np.int64] | None = None
) -> pl.DataFrame:
    """``id -> owner``: the outermost costed op among each op and its op ancestors (``par``:
    :func:`_op_parents` of ``ops`` when the caller has it already)."""
    owner = _owner_positions(ops, costed, par)
    ids = ops.get_column("id")
    return pl.DataFrame(
        [ids, gather(ids, owner).alias("owner")], schema={"id": pl.Int64, "owner": pl.Int64}
    )


def _masked(values: npt.NDArray[np.int64], null: npt.NDArray[np.bool_], dtype: Any) -> pl.Series:
    """``values`` as a Series of ``dtype``, null where ``null``."""
    return pl.Series(np.ma.masked_array(values, mask=null), dtype=dtype)


def _owner_positions(
    ops: pl.DataFrame, costed: pl.Series, par: npt.NDArray[np.int64] | None = None
) -> npt.NDArray[np.int64]:
    """:func:`_owners` as positions in ``ops`` (-1: none)."""
    # up the parent links as arrays (one step per nesting level for every op at once); each
    # costed ancestor found overwrites the nearer one, so the outermost wins
    if par is None:
        par = _op_parents(ops)
    is_costed = costed.to_numpy().astype(bool)
    n = len(par)
    owner = np.where(is_costed, np.arange(n), -1)
    idx = np.arange(n)
    cur = par.copy()
    while True:
        live = cur >= 0
        idx, cur = idx[live], cur[live]
        if not len(idx):
            break
        hit = is_costed[cur]
        owner[idx[hit]] = cur[hit]
        cur = par[cur]
    return owner


def _with_direct_descendant(
    ops: pl.DataFrame, direct: pl.Series, par: npt.NDArray[np.int64] | None = None
) -> pl.Series:
    """For each op: does any op below it have a direct (shape-based) formula? (``par`` as in
    :func:`_owners`.)"""
    if par is None:
        par = _op_parents(ops)
    below = np.zeros(len(par), dtype=bool)
    # from every op with a direct formula up its ancestors (each visited once per level)
    cur = np.unique(par[direct.to_numpy().astype(bool)])
    while True:
        cur = cur[cur >= 0]
        cur = cur[~below[cur]]  # already marked: its ancestors are too
        if not len(cur):
            break
        below[cur] = True
        cur = np.unique(par[cur])
    return pl.Series("below", below)


def _peak_columns(spec: DeviceSpec | None) -> tuple[pl.Expr, pl.Expr]:
    """``peak_flops`` (:meth:`DeviceSpec.peak` of each row's dtype and roof) and ``peak_tf32``
    (the TF32 matrix peak on fp32 matrix rows), as expressions over the rows' columns.

    The peak of every dtype the device's tables can answer for, by the roof's branch of
    :meth:`DeviceSpec.peak` (``"matrix"``, else the vector units): any other dtype reads None
    there too. A join with a table of the rows' distinct (dtype, roof) pairs gave the same
    values, but finding the pairs first was a query of its own (or a Python pass over every
    row), of fixed cost on every profile with costed ops."""
    if spec is None:
        none = pl.lit(None, dtype=pl.Float64)
        return none.alias("peak_flops"), none.alias("peak_tf32")
    # (the fallbacks of DeviceSpec.peak among the keys: tf32 on matrix units, fp16/bf16 on
    # vector units; a null or empty dtype has no peak, as `spec.peak(dt, roof) if dt`)
    matrix = {d: spec.peak(d, "matrix") for d in (*spec.matrix, "tf32")}
    vector = {d: spec.peak(d, "vector") for d in (*spec.vector, "fp16", "bf16")}
    dtype = pl.col("dtype")
    on_matrix = pl.col("roof") == "matrix"
    peak = (
        pl.when(on_matrix)
        .then(dtype.replace_strict(matrix, default=None, return_dtype=pl.Float64))
        .otherwise(dtype.replace_strict(vector, default=None, return_dtype=pl.Float64))
    )
    tf32 = pl.when(on_matrix & (dtype == "fp32")).then(
        pl.lit(spec.peak("tf32", "matrix"), dtype=pl.Float64)
    )
    return peak.alias("peak_flops"), tf32.alias("peak_tf32")


def _metrics(
    df: FrameT,
    spec: DeviceSpec | None,
    rate_flops: str = "flops",
    rate_bytes: str = "bytes",
) -> FrameT:
    """Add intensity, achieved rates, % of peak and bound to rows with flops/bytes/time_ns.

    Rates divide ``rate_flops`` / ``rate_bytes`` (the work of the timed calls) by ``time_ns``.
    """
    bw = spec.mem_bw if spec is not None else None
    secs = pl.when(pl.col("time_ns") > 0).then(pl.col("time_ns").cast(pl.Float64) / 1e9)
    df = df.with_columns(*_peak_columns(spec)).with_columns(
        (pl.col("flops") / pl.col("bytes")).alias("intensity"),
        (pl.col(rate_flops) / secs / 1e12).alias("achieved_tflops"),
        (pl.col(rate_bytes) / secs / 1e9).alias("achieved_gbps"),
        pl.lit(bw, dtype=pl.Float64).alias("peak_bw"),
    )
    # fp32 matmul/conv beyond the fp32 roof ran on TF32 tensor cores (cuDNN's default for
    # convolutions, torch.backends.cuda.matmul.allow_tf32 for matmul): use the TF32 roof
    df = df.with_columns(
        pl.when(
            pl.col("peak_tf32").is_not_null()
            & (pl.col("achieved_tflops") * 1e12 > pl.col("peak_flops"))
        )
        .then(pl.col("peak_tf32"))
        .otherwise(pl.col("peak_flops"))
        .alias("peak_flops")
    )
    # at or right of the ridge point the compute roof applies, left of it the bandwidth roof
    compute_side = (pl.col("roof") != "memory") & (
        pl.col("intensity") >= pl.col("peak_flops") / pl.col("peak_bw")
    )
    pct = (
        pl.when(compute_side)
        .then(pl.col("achieved_tflops") * 1e12 / pl.col("peak_flops") * 100)
        .otherwise(pl.col("achieved_gbps") * 1e9 / pl.col("peak_bw") * 100)
    )
    df = df.with_columns(
        pl.when(pl.col("time_ns") > 0).then(pct).otherwise(None).alias("pct_of_peak"),
        compute_side.alias("_compute_side"),
    )
    per_call = pl.col("time_ns") / pl.col("calls").cast(pl.Float64)
    bound = (
        pl.when(per_call < LATENCY_NS)
        .then(pl.lit("latency"))
        .when(pl.col("pct_of_peak").is_null())
        .then(pl.lit(None, dtype=pl.String))
        .when(pl.col("pct_of_peak") < LATENCY_PCT)
        .then(pl.lit("latency"))
        .when(pl.col("_compute_side"))
        .then(pl.lit("compute"))
        .otherwise(pl.lit("memory"))
    )
    # the bound added and the helper columns dropped in one query (a drop is a query of its
    # own; each is a fixed cost per call). Every figure is computed from the columns as
    # before: inlining them into fewer queries changed last digits (Polars folds literals)
    gone = ("peak_tf32", "_compute_side", "peak_bw")
    names = df.collect_schema().names() if isinstance(df, pl.LazyFrame) else df.columns
    return df.select(*(c for c in names if c not in gone), bound.alias("bound"))


def _pmu(profile: Profile, kernels: FrameT, key: str) -> FrameT | None:
    """Duration-weighted mean of the Ascend PMU columns per ``key`` of ``kernels`` (eager, or
    a plan for a plan)."""
    wide = _pmu_wide(profile)
    if wide is None:
        return None
    j = kernels.select(pl.col("id").alias("event_id"), key, "dur_ns").join(
        wide.lazy() if isinstance(kernels, pl.LazyFrame) else wide,  # type: ignore[arg-type]
        on="event_id",
    )
    present = [m for m in PMU_METRICS if m in wide.columns]
    w = pl.col("dur_ns").cast(pl.Float64)
    return j.group_by(key).agg(
        [
            ((pl.col(m) * w).sum() / w.filter(pl.col(m).is_not_null()).sum()).alias(m)
            for m in present
        ]
    )


@per_profile
def _pmu_wide(profile: Profile) -> pl.DataFrame | None:
    """The PMU metrics of :data:`PMU_METRICS` one column each per ``event_id`` (None without
    any): once per profile (the ops' and the kernels' groups, and the schema of a profile
    without ops, all read it; a filter and a pivot each time were a fixed cost)."""
    km = profile.kernel_metrics
    if km.height == 0:
        return None
    km = km.filter(pl.col("metric").is_in(list(PMU_METRICS)))
    if km.height == 0:
        return None
    return km.pivot(on="metric", index="event_id", values="value", aggregate_function="first")


@analysis("roofline")
def roofline(profile: Profile, options: Options) -> RooflineResult:
    """Roofline figures of every outermost costed op call, and per group (computed once per
    profile and device name: the report and the performance model both need it)."""
    return _roofline(profile, options.device_name)


@per_profile_args
def _roofline(profile: Profile, device_name: str | None) -> RooflineResult:
    if no_ops(profile) or (tree.SHORTCUTS and not _any_costed(profile)):
        return _without_ops(profile, device_name)
    return _with_ops(profile, device_name)


def _any_costed(profile: Profile) -> bool:
    """Whether any host op has a modelled cost (else no op owns a call: the calls and groups
    are empty, as :func:`_without_ops` makes them without the queries; ops recorded without
    shapes: hta_alexnet_a100_cuda_sync's). From the cost table's null counts: no query."""
    costs = host_op_costs(profile)
    return any(costs.get_column(c).null_count() < costs.height for c in ("flops", "bytes"))


def _with_ops(profile: Profile, device_name: str | None) -> RooflineResult:
    """The roofline (see :func:`_roofline`) computed in full; also right without host ops."""
    spec, dev_name, note = device_of(profile, Options(device_name=device_name))
    ops = profile.ops
    # the cost columns renamed as Series (a frame's rename, like its drop, is a query)
    names = {"flops": "our_flops", "bytes": "our_bytes"}
    costs = pl.DataFrame([c.alias(names.get(c.name, c.name)) for c in host_op_costs(profile)])
    if tree.SHORTCUTS and _aligned(ops, costs):
        # the cost table holds the ops' rows in their order (as host_op_costs makes it): its
        # columns beside theirs are the left join's (ids are unique), without hashing 40k ids
        ops = ops.hstack([c for c in costs.get_columns() if c.name != "id"])
    else:
        # one query (a rename and a join eagerly were two)
        ops = ops.lazy().join(costs.lazy(), on="id", how="left").collect(engine="in-memory")
    # the masks in NumPy (a Series' is_not_null, fill_null, negation or is_in is a query each)
    costed = not_null(ops.get_column("our_flops")) | not_null(ops.get_column("our_bytes"))
    # a cost derived from the forward op (autograd nodes) yields to exact, shape-based costs of
    # the ops it runs (convolution_backward knows which gradients were needed)
    derived = _starts_with(ops.get_column("formula"), "backward: ")
    direct = costed & ~derived
    par = _op_parents(ops)  # once for both walks (a sort of every op id: ms on 40k ops)
    if derived.any():
        below = _with_direct_descendant(ops, pl.Series(direct), par).to_numpy()
        costed = direct | (derived & ~below)
    owner_at = _owner_positions(ops, pl.Series(costed), par)
    # from here two plans, the calls and the groups, each collected once (each eager step was
    # a query of fixed cost: ~34 per report on an op-bearing Ascend export)
    # from the profile's cached device work (LOCAL_WORK is part of it: the same rows in the
    # same order as filtering every event again)
    dev = profile.kernels
    k_op = dev.get_column("op_id")
    is_device = pl.Series(_local_work(dev))
    has_device = bool(is_device.any())
    # each call (an op that owns itself) with its owned ops' device work and torch flops, by
    # position in NumPy: the sums per owner of the kernels and of the ops (two group_bys and
    # three joins in the calls' plan were most of its time); ids unique, a kernel of no op in
    # none, as the inner join
    n = ops.height
    k_dur, _ = int_values(dev.get_column("dur_ns").filter(is_device))  # a null adds nothing
    k_at = _positions(
        ops.get_column("id").to_numpy().astype(np.int64, copy=False),
        k_op.filter(is_device).to_numpy(),
        np.zeros(len(k_dur), dtype=bool),
    )
    k_owner = np.where(k_at >= 0, owner_at[np.maximum(k_at, 0)], -1)
    mine = k_owner >= 0
    kernels = np.bincount(k_owner[mine], minlength=n)
    device_ns = np.zeros(n, dtype=np.int64)
    np.add.at(device_ns, k_owner[mine], k_dur[mine])
    flops_v, flops_ok = int_values(ops.get_column("flops"))
    counted = flops_ok & (owner_at >= 0)
    torch = np.zeros(n, dtype=np.int64)
    np.add.at(torch, owner_at[counted], flops_v[counted])
    any_flops = np.zeros(n, dtype=bool)
    any_flops[owner_at[counted]] = True
    rows = np.flatnonzero(owner_at == np.arange(n))
    calls_plan = (
        ops.lazy()
        .filter(pl.lit(pl.Series(owner_at == np.arange(n))))
        .with_columns(
            # null where the call has no kernel (no row of the left join)
            pl.lit(_masked(device_ns[rows], kernels[rows] == 0, pl.Int64)).alias("device_ns"),
            pl.lit(_masked(torch[rows], ~any_flops[rows], pl.Int64)).alias("torch_flops"),
        )
        .with_columns(
            pl.when(pl.col("device_ns").is_not_null())
            .then(pl.lit("device"))
            .when(pl.lit(has_device))
            .then(pl.lit("none"))
            .otherwise(pl.lit("host"))
            .alias("time_source"),
            # on a device profile an op without kernels did no device work (a no-op, a
            # pass-through, or host tensors): its host time says nothing about throughput
            pl.when(pl.col("device_ns").is_not_null())
            .then(pl.col("device_ns"))
            .when(pl.lit(has_device))
            .then(None)
            .otherwise(pl.col("dur_ns"))
            .alias("time_ns"),
            pl.lit(pl.Series(kernels[rows], dtype=pl.UInt32)).alias("kernels"),
            pl.lit(1, dtype=pl.UInt32).alias("calls"),
        )
        .select(
            "id", "rank", "step", "name", "input_dims", "input_types", "module",
            pl.col("our_flops").alias("flops"), pl.col("our_bytes").alias("bytes"),
            "torch_flops", "formula", "dtype", "roof", "time_ns", "time_source", "kernels",
            "calls", "is_backward",
        )
    )  # fmt: skip
    calls = _metrics(calls_plan, spec).collect(engine="in-memory")
    groups = (
        calls.lazy()
        .group_by(list(_GROUP), maintain_order=True)
        .agg(
            pl.len().cast(pl.UInt32).alias("calls"),
            pl.col("flops").sum().alias("flops"),
            pl.col("bytes").sum().alias("bytes"),
            pl.when(pl.col("torch_flops").is_not_null().any())
            .then(pl.col("torch_flops").sum())
            .otherwise(None)
            .alias("torch_flops"),
            pl.when(pl.col("time_ns").is_not_null().any())
            .then(pl.col("time_ns").sum())
            .otherwise(None)
            .alias("time_ns"),
            pl.col("kernels").sum().alias("kernels"),
            pl.col("formula").first(),
            pl.col("dtype").first(),
            pl.col("roof").first(),
            pl.col("time_source").first(),
            pl.col("flops").filter(pl.col("time_ns").is_not_null()).sum().alias("_flops_t"),
            pl.col("bytes").filter(pl.col("time_ns").is_not_null()).sum().alias("_bytes_t"),
        )
    )
    groups = _metrics(groups, spec, "_flops_t", "_bytes_t").drop("_flops_t", "_bytes_t")
    pmu = None
    if _pmu_wide(profile) is not None:
        # the kernels of owned ops with their owner's id (the owners as a column: the ops'
        # rows in their order, ids unique)
        owner = gather(ops.get_column("id"), owner_at).alias("owner")
        kern = (
            dev.lazy()
            .filter(pl.col("kind").is_in(list(_DEVICE_KINDS)) & pl.col("op_id").is_not_null())
            .join(
                ops.lazy().select(pl.col("id").alias("op_id"), pl.lit(owner)),
                on="op_id",
                how="inner",
            )
            .filter(pl.col("owner").is_not_null())
        )
        pmu = _pmu(profile, kern, "owner")
    if pmu is not None:
        per_group = (
            calls.lazy()
            .select("id", *_GROUP)
            .join(pmu, left_on="id", right_on="owner")
            .join(
                calls.lazy().select("id", "time_ns"),
                on="id",
            )
        )
        present = [m for m in PMU_METRICS if m in pmu.collect_schema().names()]
        w = pl.col("time_ns").cast(pl.Float64)
        agg = per_group.group_by(list(_GROUP)).agg(
            [((pl.col(m) * w).sum() / w.sum()).alias(m) for m in present]
        )
        groups = groups.join(agg, on=list(_GROUP), how="left", nulls_equal=True)
    # ties broken by the group's key: the same trace gives the same table order on any machine
    groups_out = groups.sort(
        ["time_ns", *_GROUP], descending=[True, False, False, False], nulls_last=True
    ).collect(engine="in-memory")
    kernel_groups = _ascend_kernels(profile, spec)
    return RooflineResult(
        calls=calls,
        groups=groups_out,
        kernel_groups=kernel_groups,
        device=dev_name,
        peaks_note=note if spec is not None else f"{NO_PEAK} ({note})",
        time_source="device" if has_device else "host",
        peak_known=spec is not None,
    )


def _without_ops(profile: Profile, device_name: str | None) -> RooflineResult:
    """:func:`_with_ops` for a profile without host ops (the small Ascend exports hold only
    kernels) or without a costed one: no call to cost, so ``calls`` and ``groups`` are empty
    tables of the same
    schema, built without the three dozen queries (a fixed cost each) that compute them.
    tests/test_report_speed_empty.py checks it equals :func:`_with_ops`."""
    spec, dev_name, note = device_of(profile, Options(device_name=device_name))
    # (from the cached device work, which holds every such row: not every event again; Series
    # operations, not a filter query of fixed cost)
    has_device = bool(_local_work(profile.kernels).any())
    o = profile.ops.schema
    calls_schema: dict[str, pl.DataType | type[pl.DataType]] = {
        **{k: o[k] for k in ("id", "rank", "step", "name", "input_dims", "input_types")},
        "module": o["module"], "flops": pl.Int64, "bytes": pl.Int64, "torch_flops": pl.Int64,
        "formula": pl.String, "dtype": pl.String, "roof": pl.String, "time_ns": pl.Int64,
        "time_source": pl.String, "kernels": pl.UInt32, "calls": pl.UInt32,
        "is_backward": o["is_backward"], **_METRIC_SCHEMA,
    }  # fmt: skip
    groups_schema: dict[str, pl.DataType | type[pl.DataType]] = {
        **{k: calls_schema[k] for k in _GROUP},
        "calls": pl.UInt32, "flops": pl.Int64, "bytes": pl.Int64, "torch_flops": pl.Int64,
        "time_ns": pl.Int64, "kernels": pl.UInt32, "formula": pl.String, "dtype": pl.String,
        "roof": pl.String, "time_source": pl.String, **_METRIC_SCHEMA,
    }  # fmt: skip
    wide = _pmu_wide(profile)
    if wide is not None:
        # the PMU columns the full path joins to the groups (null for every group: none)
        groups_schema.update({m: pl.Float64 for m in PMU_METRICS if m in wide.columns})
    return RooflineResult(
        calls=tree.empty_frame(tree.schema_key(calls_schema)),
        groups=tree.empty_frame(tree.schema_key(groups_schema)),
        kernel_groups=_ascend_kernels(profile, spec),
        device=dev_name,
        peaks_note=note if spec is not None else f"{NO_PEAK} ({note})",
        time_source="device" if has_device else "host",
        peak_known=spec is not None,
    )


#: The columns :func:`_metrics` adds (after ``peak_flops``, which it joins).
_METRIC_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "peak_flops": pl.Float64,
    "intensity": pl.Float64,
    "achieved_tflops": pl.Float64,
    "achieved_gbps": pl.Float64,
    "pct_of_peak": pl.Float64,
    "bound": pl.String,
}


#: The schema of :func:`_ascend_kernels`' table.
_ASCEND_KERNEL_GROUPS: Final = (
    ("name", pl.String), ("input_dims", pl.String), ("input_types", pl.String),
    ("calls", pl.UInt32), ("flops", pl.Int64), ("bytes", pl.Int64), ("time_ns", pl.Int64),
    ("formula", pl.String), ("intensity", pl.Float64), ("achieved_tflops", pl.Float64),
    ("achieved_gbps", pl.Float64), ("pct_of_peak", pl.Float64), ("bound", pl.String),
)  # fmt: skip


def _ascend_kernels(profile: Profile, spec: DeviceSpec | None) -> pl.DataFrame:
    """Ascend kernels that carry their own shapes, grouped by (type, shapes, dtypes)."""
    # from the cached device work (the same rows in the same order as filtering the events)
    kern = profile.kernels
    empty = tree.empty_frame(_ASCEND_KERNEL_GROUPS)
    if any(kern.get_column(c).null_count() == kern.height for c in ("input_dims", "op_type")):
        return empty  # no kernel with both (every GPU trace): no row, from the null counts
    # (one select: a Series' is_not_null is a query each)
    keep = kern.select(
        (pl.col("kind") == "kernel") & pl.col("input_dims").is_not_null()
        & pl.col("op_type").is_not_null()
    ).to_series()  # fmt: skip
    if not keep.any():
        return empty
    k = kern.filter(keep)
    costs = ascend_kernel_costs(k)
    k = (  # one query (a join and a filter eagerly were two)
        k.lazy()
        .join(costs.lazy(), on="id", how="left", suffix="_model")
        .filter(pl.col("flops_model").is_not_null() | pl.col("bytes_model").is_not_null())
        .collect(engine="in-memory")
    )
    if k.height == 0:
        return empty
    # the groups one plan, collected once
    lk = k.lazy()
    g = lk.with_columns(pl.col("op_type").alias("kname"))
    g = g.group_by("kname", "input_dims", "input_types", maintain_order=True).agg(
        pl.len().cast(pl.UInt32).alias("calls"),
        pl.col("flops_model").sum().alias("flops"),
        pl.col("bytes_model").sum().alias("bytes"),
        pl.col("dur_ns").sum().alias("time_ns"),
        pl.col("formula").first(),
        pl.col("dtype").first(),
        pl.col("roof").first(),
    )
    g = _metrics(g.rename({"kname": "name"}), spec)
    pmu = _pmu(profile, lk.with_columns(pl.concat_str("op_type", "input_dims").alias("gk")), "gk")
    if pmu is not None:
        g = g.with_columns(pl.concat_str("name", "input_dims").alias("gk")).join(
            pmu, on="gk", how="left"
        )
        g = g.drop("gk")
    return g.sort(
        ["time_ns", "name", "input_dims"], descending=[True, False, False], nulls_last=True
    ).collect(engine="in-memory")
