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

import functools
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
    bool_values,
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
            if df.height:
                out.extend(_json_rows(df, note))
        return out


def _json_rows(df: pl.DataFrame, note: dict[str, str]) -> list[dict[str, Any]]:
    """:meth:`RooflineResult.to_json`'s entries of one group table, ``note`` in each."""
    # the columns read as lists once and walked together (an index into a dict of columns
    # per key and row, and a dict of the PMU metrics per row, were most of this on a trace of
    # a few hundred groups)
    rows = zip(*(_column_list(df, c) for c in _JSON_COLUMNS), strict=True)
    out = [
        {
            "name": name,
            "input_shapes": _decode(dims),
            "dtypes": _decode(types),
            "calls": calls,
            "time_us": time_ns / 1e3 if time_ns is not None else None,
            "flops": flops,
            "torch_flops": torch_flops,
            "bytes": nbytes,
            "intensity": intensity,
            "achieved_tflops": tflops,
            "achieved_gbps": gbps,
            "pct_of_peak": pct,
            **note,
            "bound": bound,
            "formula": formula,
        }
        for (
            name, dims, types, calls, time_ns, flops, torch_flops, nbytes, intensity, tflops,
            gbps, pct, bound, formula,
        ) in rows
    ]  # fmt: skip
    pmu = [m for m in PMU_METRICS if m in df.columns]
    if pmu:  # (Ascend kernels' counters: after the rest)
        per_row = zip(*(df.get_column(m).to_list() for m in pmu), strict=True)
        for entry, values in zip(out, per_row, strict=True):
            entry.update(zip(pmu, values, strict=True))
    return out


#: The columns :func:`_json_rows` reads, in its order.
_JSON_COLUMNS: Final = (
    "name", "input_dims", "input_types", "calls", "time_ns", "flops", "torch_flops", "bytes",
    "intensity", "achieved_tflops", "achieved_gbps", "pct_of_peak", "bound", "formula",
)  # fmt: skip


def _column_list(df: pl.DataFrame, name: str) -> list[Any]:
    if name == "torch_flops" and name not in df.columns:  # (not in every group table: null)
        return [None] * df.height
    return df.get_column(name).to_list()


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
    op = dev.get_column("op_id")
    if op.null_count() == len(op):  # no work launched by an op (no op): no comparison
        return np.zeros(len(op), dtype=bool)
    kind = dev.get_column("kind")
    out = not_null(op)
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


def _masked(values: npt.NDArray[Any], null: npt.NDArray[np.bool_], dtype: Any) -> pl.Series:
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


_F64 = npt.NDArray[np.float64]
_Bools = npt.NDArray[np.bool_]
#: (peak_flops, valid, peak_tf32, valid) per row: :func:`_peaks`.
_Peaks = tuple[_F64, _Bools, _F64, _Bools]


def _peaks(df: pl.DataFrame, spec: DeviceSpec | None) -> _Peaks:
    """``peak_flops`` (:meth:`DeviceSpec.peak` of each row's dtype and roof) and ``peak_tf32``
    (the TF32 matrix peak on fp32 matrix rows), each with its valid mask.

    The peak of every dtype the device's tables can answer for, by the roof's branch of
    :meth:`DeviceSpec.peak` (``"matrix"``, else the vector units; a null roof is not
    ``"matrix"``): any other dtype, an empty or null one, has none. Looked up by the dtype's
    code in an Enum of those dtypes (one select: a cast and its codes; expressions mapping the
    strings were a hash join each, ~1.7 ms on a 75k-event trace's 9k calls)."""
    n = df.height
    if spec is None:
        none = np.zeros(n, dtype=np.float64)
        return none, np.zeros(n, dtype=bool), none, np.zeros(n, dtype=bool)
    # (the fallbacks of DeviceSpec.peak among the keys: tf32 on matrix units, fp16/bf16 on
    # vector units)
    matrix = {d: spec.peak(d, "matrix") for d in (*spec.matrix, "tf32")}
    vector = {d: spec.peak(d, "vector") for d in (*spec.vector, "fp16", "bf16")}
    names = sorted({*matrix, *vector, "fp32"})
    codes = df.select(pl.col("dtype").cast(pl.Enum(names), strict=False).to_physical())
    code, known = int_values(codes.to_series())  # (a dtype of no name there: null)
    on_matrix, _ = bool_values(df.get_column("roof") == "matrix")

    def table(peaks: dict[str, float | None]) -> tuple[_F64, _Bools]:
        got = [peaks.get(d) for d in names]
        return (
            np.array([0.0 if v is None else float(v) for v in got], dtype=np.float64),
            np.array([v is not None for v in got], dtype=bool),
        )

    (m_peak, m_ok), (v_peak, v_ok) = table(matrix), table(vector)
    peak = np.where(on_matrix, m_peak[code], v_peak[code])
    ok = known & np.where(on_matrix, m_ok[code], v_ok[code])
    tf32 = spec.peak("tf32", "matrix")
    tf32_ok = on_matrix & known & (code == names.index("fp32")) & (tf32 is not None)
    return peak, ok, np.full(n, 0.0 if tf32 is None else float(tf32)), tf32_ok


def _ge(a: _F64, b: _F64) -> _Bools:
    """``a >= b`` as Polars compares floats: NaN is the greatest value, equal to itself."""
    out: _Bools = (a >= b) | np.isnan(a)
    return out


def _gt(a: _F64, b: _F64) -> _Bools:
    """``a > b`` as Polars compares floats (NaN greater than any number, not than NaN)."""
    out: _Bools = (a > b) | (np.isnan(a) & ~np.isnan(b))
    return out


def _floats(s: pl.Series) -> tuple[_F64, _Bools]:
    """(values as float64, valid) of an integer column: Polars' cast of each value."""
    v, ok = int_values(s)
    return v.astype(np.float64), ok


def _figures(
    df: pl.DataFrame,
    spec: DeviceSpec | None,
    peaks: _Peaks,
    rates: tuple[tuple[_F64, _Bools], tuple[_F64, _Bools]] | None = None,
) -> list[pl.Series]:
    """The columns of :data:`_METRIC_SCHEMA` for rows with ``flops``/``bytes``/``time_ns``/
    ``calls``/``roof``, in NumPy over the rows (no query).

    Rates divide ``rates`` (the flops and bytes of the timed calls, with their valid masks;
    default the rows' flops and bytes) by ``time_ns``. Every figure is plain float64
    arithmetic in the order written (``tests/test_roofline_figures.py`` recomputes each row in
    Python); a figure is null wherever an operand is null, and comparisons order NaN (0 flops
    over 0 bytes) above every number, as the tables' sorts do."""
    f, f_ok = _floats(df.get_column("flops"))
    b, b_ok = _floats(df.get_column("bytes"))
    t, t_ok = _floats(df.get_column("time_ns"))
    c, c_ok = _floats(df.get_column("calls"))
    (rf, rf_ok), (rb, rb_ok) = rates if rates is not None else ((f, f_ok), (b, b_ok))
    peak, p_ok, tf32, t32_ok = peaks
    bw = spec.mem_bw if spec is not None else None
    bw_ok = bw is not None
    timed = t_ok & (t > 0)
    bw_v = np.float64(bw if bw is not None else np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        secs = t / 1e9
        intensity = f / b
        tflops = rf / secs / 1e12
        tf_ok = rf_ok & timed
        gbps = rb / secs / 1e9
        gb_ok = rb_ok & timed
        # fp32 matmul/conv beyond the fp32 roof ran on TF32 tensor cores (cuDNN's default for
        # convolutions, torch.backends.cuda.matmul.allow_tf32 for matmul): use the TF32 roof
        tf32_roof = t32_ok & tf_ok & p_ok & _gt(tflops * 1e12, peak)
        peak = np.where(tf32_roof, tf32, peak)
        p_ok = p_ok | tf32_roof
        # at or right of the ridge point the compute roof applies, left of it the bandwidth
        # roof (the roof a null: neither)
        memory, roof_ok = bool_values(df.get_column("roof") == "memory")
        ridge = peak / bw_v
        compute_side = roof_ok & ~memory & f_ok & b_ok & p_ok & bw_ok & _ge(intensity, ridge)
        pct = np.where(compute_side, tflops * 1e12 / peak * 100, gbps * 1e9 / bw_v * 100)
        pct_ok = timed & np.where(compute_side, tf_ok & p_ok, gb_ok & bw_ok)
        per_call = t / c
    bound = np.full(df.height, "memory", dtype=object)
    bound[compute_side] = "compute"
    bound[pct_ok & (pct < LATENCY_PCT)] = "latency"  # (a NaN is not below)
    bound[~pct_ok] = None
    bound[t_ok & c_ok & (per_call < LATENCY_NS)] = "latency"
    return [
        _masked(peak, ~p_ok, pl.Float64).alias("peak_flops"),
        _masked(intensity, ~(f_ok & b_ok), pl.Float64).alias("intensity"),
        _masked(tflops, ~tf_ok, pl.Float64).alias("achieved_tflops"),
        _masked(gbps, ~gb_ok, pl.Float64).alias("achieved_gbps"),
        _masked(pct, ~pct_ok, pl.Float64).alias("pct_of_peak"),
        pl.Series("bound", bound.tolist(), dtype=pl.String),
    ]


def _metrics(
    df: pl.DataFrame,
    spec: DeviceSpec | None,
    rate_flops: str = "flops",
    rate_bytes: str = "bytes",
) -> pl.DataFrame:
    """Add intensity, achieved rates, % of peak and bound to rows with flops/bytes/time_ns
    (:func:`_figures`; the peaks one select).

    Rates divide ``rate_flops`` / ``rate_bytes`` (the work of the timed calls) by ``time_ns``.
    """
    rates = (_floats(df.get_column(rate_flops)), _floats(df.get_column(rate_bytes)))
    return df.hstack(_figures(df, spec, _peaks(df, spec), rates))


def _index(at: npt.NDArray[Any]) -> pl.Series:
    """Positions as a UInt32 Series, to index Series by (no query, and no conversion and
    bounds check of a NumPy array per Series indexed)."""
    return pl.Series(at, dtype=pl.UInt32)


def _order(time_ns: npt.NDArray[np.int64], timed: _Bools, *keys: pl.Series) -> Any:
    """The positions of rows sorted by ``time_ns`` descending (untimed rows last), then
    ``keys`` ascending, nulls last in each (strings by code point: UTF-8's byte order,
    Polars'). In Python over the rows (groups: a few hundred), not a sort query of fixed
    cost; rows equal in every key (none: the groups' keys are distinct) keep their order."""
    cols: list[list[Any]] = [(~timed).tolist(), (-time_ns).tolist()]
    for k in keys:
        v = k.to_list()
        cols += ([x is None for x in v], ["" if x is None else x for x in v])
    rows = list(zip(*cols, strict=True))
    return np.array(sorted(range(len(rows)), key=rows.__getitem__), dtype=np.int64)


def _sums(group: npt.NDArray[np.int64], n: int, values: npt.NDArray[np.int64]) -> Any:
    """Each group's sum of the int64 ``values`` (exact: no float weights)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, group, values)
    return out


def _groups(calls: pl.DataFrame, spec: DeviceSpec | None, peaks: _Peaks) -> pl.DataFrame:
    """The calls per :data:`_GROUP` (nulls a key of their own), sorted by time (descending)
    and then the key: the counts and sums (a null flops or bytes adds 0; torch flops and time
    null where no call has one), each key's first call's formula, dtype, roof, time source
    and peaks, the figures (:func:`_figures`) of the timed calls' work. One window query, the
    rest in NumPy and Python (a group-by, a sort and the figures' expressions were a query of
    ~1 ms)."""
    # each call's group as the position of its group's first call (one window query: a
    # Python dict of the keys was ~2 ms on the 9k calls of a 75k-event trace)
    at = pl.Series("_at", np.arange(calls.height, dtype=np.int64))
    first_of = calls.hstack([at]).select(pl.col("_at").first().over(_GROUP)).to_series()
    first, group = np.unique(first_of.to_numpy(), return_inverse=True)
    group = group.reshape(-1)
    n = len(first)
    flops, _ = int_values(calls.get_column("flops"))
    nbytes, _ = int_values(calls.get_column("bytes"))
    torch, torch_ok = int_values(calls.get_column("torch_flops"))
    time_ns, time_ok = int_values(calls.get_column("time_ns"))
    kernels, _ = int_values(calls.get_column("kernels"))
    any_torch = np.zeros(n, dtype=bool)
    any_torch[group[torch_ok]] = True
    any_time = np.zeros(n, dtype=bool)
    any_time[group[time_ok]] = True
    time_sum = _sums(group, n, time_ns)
    # (Series indexed by a UInt32 Series: by a NumPy array each converts and checks it)
    keys = [calls.get_column(c)[_index(first)] for c in _GROUP]
    # ties broken by the group's key: the same trace gives the same table order on any machine
    order = _order(np.where(any_time, time_sum, 0), any_time, *keys)
    at = first[order]  # each group's first call, in the table's order
    at_s = _index(at)
    g = pl.DataFrame(
        [
            *(calls.get_column(c)[at_s] for c in _GROUP),
            pl.Series("calls", np.bincount(group, minlength=n)[order], dtype=pl.UInt32),
            pl.Series("flops", _sums(group, n, flops)[order], dtype=pl.Int64),
            pl.Series("bytes", _sums(group, n, nbytes)[order], dtype=pl.Int64),
            _masked(_sums(group, n, torch)[order], ~any_torch[order], pl.Int64).alias(
                "torch_flops"
            ),
            _masked(time_sum[order], ~any_time[order], pl.Int64).alias("time_ns"),
            pl.Series("kernels", _sums(group, n, kernels)[order], dtype=pl.UInt32),
            *(calls.get_column(c)[at_s] for c in ("formula", "dtype", "roof", "time_source")),
        ]
    )
    ones = np.ones(n, dtype=bool)
    rates = (
        (_sums(group, n, np.where(time_ok, flops, 0))[order].astype(np.float64), ones),
        (_sums(group, n, np.where(time_ok, nbytes, 0))[order].astype(np.float64), ones),
    )
    peak, p_ok, tf32, t32_ok = peaks
    return g.hstack(_figures(g, spec, (peak[at], p_ok[at], tf32[at], t32_ok[at]), rates))


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
    # the calls (the ops that own themselves) and their groups in NumPy, from the ops'
    # columns indexed by position: the plans (a filter, a group-by, a sort and the figures'
    # expressions) were two queries of ~1 ms each, a fixed cost on every profile
    rows = np.flatnonzero(owner_at == np.arange(n))
    dev_ok = kernels[rows] > 0  # (a call without kernels: no row of the joins, null)
    dur, dur_ok = int_values(ops.get_column("dur_ns"))
    # on a device profile an op without kernels did no device work (a no-op, a pass-through,
    # or host tensors): its host time says nothing about throughput
    time_ok = dev_ok | (not has_device and dur_ok[rows])
    source = np.where(dev_ok, "device", "none" if has_device else "host")
    rows_s = _index(rows)
    picked = {c: ops.get_column(c)[rows_s] for c in ("id", "rank", "step", *_GROUP, "module")}
    calls = pl.DataFrame(
        [
            *picked.values(),
            ops.get_column("our_flops")[rows_s].alias("flops"),
            ops.get_column("our_bytes")[rows_s].alias("bytes"),
            _masked(torch[rows], ~any_flops[rows], pl.Int64).alias("torch_flops"),
            *(ops.get_column(c)[rows_s] for c in ("formula", "dtype", "roof")),
            _masked(np.where(dev_ok, device_ns[rows], dur[rows]), ~time_ok, pl.Int64).alias(
                "time_ns"
            ),
            pl.Series("time_source", source.tolist(), dtype=pl.String),
            pl.Series("kernels", kernels[rows], dtype=pl.UInt32),
            pl.Series("calls", np.ones(len(rows), dtype=np.uint32), dtype=pl.UInt32),
            ops.get_column("is_backward")[rows_s],
        ]
    )
    peaks = _peaks(calls, spec)
    groups = _groups(calls, spec, peaks)
    calls = calls.hstack(_figures(calls, spec, peaks))
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
        groups = (
            groups.lazy()
            .join(agg, on=list(_GROUP), how="left", nulls_equal=True, maintain_order="left")
            .collect(engine="in-memory")
        )
    kernel_groups = _ascend_kernels(profile, spec)
    return RooflineResult(
        calls=calls,
        groups=groups,
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
    ops = profile.ops
    # (the types of the columns read: the ops' whole schema of 40 columns was ~0.1 ms)
    read = tuple((c, ops.get_column(c).dtype) for c in _OPS_READ)
    calls_key, groups_key = _empty_schemas(read, _pmu_columns(profile))
    return RooflineResult(
        calls=tree.empty_frame(calls_key),
        groups=tree.empty_frame(groups_key),
        kernel_groups=_ascend_kernels(profile, spec),
        device=dev_name,
        peaks_note=note if spec is not None else f"{NO_PEAK} ({note})",
        time_source="device" if has_device else "host",
        peak_known=spec is not None,
    )


_OPS_READ: Final = ("id", "rank", "step", "name", "input_dims", "input_types", "module",
                    "is_backward")  # fmt: skip


def _pmu_columns(profile: Profile) -> tuple[str, ...]:
    """The PMU metrics of :data:`PMU_METRICS` the profile's kernels carry."""
    wide = _pmu_wide(profile)
    return () if wide is None else tuple(m for m in PMU_METRICS if m in wide.columns)


@functools.cache
def _empty_schemas(
    read: tree.SchemaKey, pmu: tuple[str, ...]
) -> tuple[tree.SchemaKey, tree.SchemaKey]:
    """The schemas of :func:`_without_ops`' calls and groups, for the ops' columns ``read``
    and the PMU metrics ``pmu``."""
    o = dict(read)
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
    # the PMU columns the full path joins to the groups (null for every group: none)
    groups_schema.update(dict.fromkeys(pmu, pl.Float64))
    return tree.schema_key(calls_schema), tree.schema_key(groups_schema)


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
    # (one filter: the mask's select and the filter by it were a query each)
    k = kern.filter(
        (pl.col("kind") == "kernel") & pl.col("input_dims").is_not_null()
        & pl.col("op_type").is_not_null()
    )  # fmt: skip
    if k.height == 0:
        return empty
    costs = ascend_kernel_costs(k)
    # the costed kernels as a plan, and their groups one query with it (a query for the join
    # and its filter, then one for the groups, were a fixed cost each); no group: no kernel
    lk = (
        k.lazy()
        .join(costs.lazy(), on="id", how="left", suffix="_model")
        .filter(pl.col("flops_model").is_not_null() | pl.col("bytes_model").is_not_null())
    )
    # the groups one query, their figures in NumPy
    g = (
        lk.group_by("op_type", "input_dims", "input_types", maintain_order=True)
        .agg(
            pl.len().cast(pl.UInt32).alias("calls"),
            pl.col("flops_model").sum().alias("flops"),
            pl.col("bytes_model").sum().alias("bytes"),
            pl.col("dur_ns").sum().alias("time_ns"),
            pl.col("formula").first(),
            pl.col("dtype").first(),
            pl.col("roof").first(),
        )
        .rename({"op_type": "name"})
        .collect(engine="in-memory")
    )
    if g.height == 0:
        return empty
    g = _metrics(g, spec)
    pmu = _pmu(profile, lk.with_columns(pl.concat_str("op_type", "input_dims").alias("gk")), "gk")
    if pmu is not None:
        g = (
            g.lazy()
            .with_columns(pl.concat_str("name", "input_dims").alias("gk"))
            .join(pmu, on="gk", how="left", maintain_order="left")
            .drop("gk")
            .collect(engine="in-memory")
        )
    at = _order(
        *int_values(g.get_column("time_ns")), g.get_column("name"), g.get_column("input_dims")
    )
    at_s = _index(at)
    return pl.DataFrame([c[at_s] for c in g.get_columns()])
