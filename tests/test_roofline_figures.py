"""The roofline's figures and groups in NumPy against independent references: each row's
figures recomputed in plain Python floats from their definitions (on frames made to hit every
branch: one row, every row timed or not, compute-side rows or none, nulls, zeros, NaN
intensities, TF32, no device), and the groups against a Polars group-by and sort of the calls
on shared traces."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import shared_trace
from opscope.analysis import roofline as rl
from opscope.analysis.devices import DEVICES, DeviceSpec
from opscope.analysis.roofline import LATENCY_NS, LATENCY_PCT


def _peak(spec: DeviceSpec, dtype: str | None, roof: str | None) -> float | None:
    """A row's peak by :meth:`DeviceSpec.peak`: the matrix units' for a matrix roof, else the
    vector units' (the dtypes the device's tables name, and their documented fallbacks)."""
    if not dtype:
        return None
    if roof == "matrix":
        known = {*spec.matrix, "tf32"}
        return spec.peak(dtype, "matrix") if dtype in known else None
    known = {*spec.vector, "fp16", "bf16"}
    return spec.peak(dtype, "vector") if dtype in known else None


def _ge(a: float, b: float) -> bool:
    return a >= b or math.isnan(a)  # NaN (0 flops over 0 bytes) above every number


def _div(a: float, b: float) -> float:
    """IEEE float64 division (NumPy's): x/0 is +-inf, 0/0 NaN."""
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def _row_figures(
    r: dict[str, Any], spec: DeviceSpec | None, rate_flops: str = "flops", rate_bytes: str = "bytes"
) -> dict[str, Any]:
    """One row's figures from their definitions, in Python floats."""
    f, b, t, c = r["flops"], r["bytes"], r["time_ns"], r["calls"]
    rf, rb = r[rate_flops], r[rate_bytes]
    peak = _peak(spec, r["dtype"], r["roof"]) if spec is not None else None
    bw = spec.mem_bw if spec is not None else None
    timed = t is not None and t > 0
    secs = t / 1e9 if timed else None
    tflops = rf / secs / 1e12 if secs is not None and rf is not None else None
    gbps = rb / secs / 1e9 if secs is not None and rb is not None else None
    intensity = _div(float(f), float(b)) if f is not None and b is not None else None
    # fp32 matrix work beyond the fp32 roof ran on TF32 units
    if (
        spec is not None
        and r["roof"] == "matrix"
        and r["dtype"] == "fp32"
        and tflops is not None
        and peak is not None
        and spec.peak("tf32", "matrix") is not None
        and tflops * 1e12 > peak
    ):
        peak = spec.peak("tf32", "matrix")
    compute_side = (
        r["roof"] is not None
        and r["roof"] != "memory"
        and intensity is not None
        and peak is not None
        and bw is not None
        and _ge(intensity, peak / bw)
    )
    pct = None
    if timed:
        if compute_side:
            pct = tflops * 1e12 / peak * 100 if tflops is not None else None
        elif gbps is not None and bw is not None:
            pct = gbps * 1e9 / bw * 100
    bound = None
    if pct is not None:
        bound = "latency" if pct < LATENCY_PCT else "compute" if compute_side else "memory"
    if t is not None and c is not None and t / c < LATENCY_NS:
        bound = "latency"
    return {
        "peak_flops": peak,
        "intensity": intensity,
        "achieved_tflops": tflops,
        "achieved_gbps": gbps,
        "pct_of_peak": pct,
        "bound": bound,
    }


def _expected(
    df: pl.DataFrame, spec: DeviceSpec | None, rate_flops: str = "flops", rate_bytes: str = "bytes"
) -> pl.DataFrame:
    """``df`` with each row's figures (:func:`_row_figures`) appended."""
    rows = [_row_figures(r, spec, rate_flops, rate_bytes) for r in df.iter_rows(named=True)]
    return df.hstack(pl.DataFrame(rows, schema=rl._METRIC_SCHEMA, orient="row"))


_H100 = next(d for d in DEVICES if d.key == "h100-sxm")


def _frame(seed: int, n: int, *, timed: bool, compute: bool) -> pl.DataFrame:
    """Rows of every kind: matmuls far right of the ridge (compute side, when ``compute``),
    copies, elementwise ops, nulls in every column, zero flops and bytes (NaN intensity),
    fp32 matrix rows beyond the fp32 roof (TF32), untimed rows (unless ``timed``)."""
    rng = np.random.default_rng(seed)
    flops = rng.integers(0, 10**9, n)
    nbytes = rng.integers(1, 10**8, n)
    if compute:
        flops[::7] = rng.integers(10**12, 10**14, len(flops[::7]))
    flops[3::11] = 0
    nbytes[3::22] = 0
    time_ns = rng.integers(1, 10**7, n)
    time_ns[5::9] = rng.integers(1, 6000, len(time_ns[5::9]))
    roofs = np.array(["matrix", "vector", "memory", None], dtype=object)
    dtypes = np.array(["fp32", "bf16", "fp16", "int64", "x", None], dtype=object)
    roof = roofs[rng.integers(0, 3 if compute or timed else 4, n)]
    dtype = dtypes[rng.integers(0, 6, n)]
    if compute:
        roof[::7], dtype[::7] = "matrix", "bf16"
        roof[1::13], dtype[1::13], flops[1::13] = "matrix", "fp32", 10**14
    df = pl.DataFrame(
        {
            "flops": flops,
            "bytes": nbytes,
            "time_ns": time_ns,
            "calls": pl.Series(rng.integers(1, 4, n), dtype=pl.UInt32),
            "roof": pl.Series(roof.tolist(), dtype=pl.String),
            "dtype": pl.Series(dtype.tolist(), dtype=pl.String),
        }
    )
    if n > 1:  # nulls where the row is not the only one (its figures then all null)
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) % 17 == 4)
            .then(None)
            .otherwise(pl.col("flops"))
            .alias("flops"),
            pl.when(pl.int_range(pl.len()) % 19 == 6)
            .then(None)
            .otherwise(pl.col("bytes"))
            .alias("bytes"),
        )
    if not timed:
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) % 5 == 2)
            .then(pl.lit(None) if seed % 2 else 0)
            .otherwise(pl.col("time_ns"))
            .alias("time_ns")
        )
    return df


@pytest.mark.parametrize("spec", [_H100, None], ids=["h100", "no-peaks"])
@pytest.mark.parametrize("n", [1, 2, 3, 40, 1500])
@pytest.mark.parametrize("timed", [True, False])
@pytest.mark.parametrize("compute", [True, False])
def test_figures_equal_their_definitions(
    spec: DeviceSpec | None, n: int, timed: bool, compute: bool
) -> None:
    for seed in range(4):
        df = _frame(seed, n, timed=timed, compute=compute)
        assert_frame_equal(rl._metrics(df, spec), _expected(df, spec), check_exact=True)


def test_frames_reach_every_bound() -> None:
    """The made frames hold rows of each bound, TF32 rows and NaN intensities (the branches
    the reference walks)."""
    df = pl.concat(
        [_frame(0, 1500, timed=t, compute=c) for t in (True, False) for c in (True, False)]
    )
    got = rl._metrics(df, _H100)
    assert set(got.get_column("bound").to_list()) == {"compute", "memory", "latency", None}
    assert got.get_column("intensity").is_nan().sum() > 0
    tf32 = _H100.peak("tf32", "matrix")
    assert (got.get_column("peak_flops") == tf32).sum() > 0


def _groups_by_plan(calls: pl.DataFrame, spec: DeviceSpec | None) -> pl.DataFrame:
    """The groups of the calls by a Polars group-by, their figures by :func:`_expected`."""
    plan = (
        calls.drop(list(rl._METRIC_SCHEMA))
        .lazy()
        .group_by(list(rl._GROUP), maintain_order=True)
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
    grouped = _expected(plan.collect(engine="in-memory"), spec, "_flops_t", "_bytes_t")
    return grouped.drop("_flops_t", "_bytes_t").sort(
        ["time_ns", *rl._GROUP], descending=[True, False, False, False], nulls_last=True
    )


@pytest.mark.parametrize(
    "rel",
    [
        "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    ],
)
def test_calls_and_groups_equal_the_plans(rel: str) -> None:
    """Each call's figures and every group (sums, firsts, figures, order) to the last digit."""
    prof = opscope.load(shared_trace(rel), cache=False)
    spec = rl.device_of(prof, rl.Options())[0]
    res = rl.roofline(prof, rl.Options())
    base = res.calls.drop(list(rl._METRIC_SCHEMA))
    assert_frame_equal(res.calls, _expected(base, spec), check_exact=True)
    assert_frame_equal(res.groups, _groups_by_plan(res.calls, spec), check_exact=True)
    assert res.groups.height > 50


def test_order_sorts_time_then_keys_nulls_last() -> None:
    keys = pl.Series(["b", None, "a", "a", "b"], dtype=pl.String)
    time_ns = np.array([5, 9, 5, 0, 7], dtype=np.int64)
    timed = np.array([True, True, True, False, True])
    got: Any = rl._order(time_ns, timed, keys)
    assert got.tolist() == [1, 4, 2, 0, 3]
