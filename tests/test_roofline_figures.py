"""The roofline's figures and groups in NumPy against the Polars plans they replace, to the
last digit: the figures' expressions (copied here from the code before) on frames made to hit
every branch (one row, every row timed or not, compute-side rows or none, nulls, zeros, NaN
intensities, TF32, no device), and the groups' group-by and sort on shared traces.

Polars divides a column by a literal as a product with the literal's inverse, except on a
one-row frame, and evaluates the bandwidth branch of the nested ``when`` as a true division
unless every row is timed and none is on the compute side: the frames below cover each case."""

from __future__ import annotations

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


def _peak_columns(spec: DeviceSpec | None) -> tuple[pl.Expr, pl.Expr]:
    """The peaks as expressions (the code before)."""
    if spec is None:
        none = pl.lit(None, dtype=pl.Float64)
        return none.alias("peak_flops"), none.alias("peak_tf32")
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


def _expressions(
    df: pl.LazyFrame, spec: DeviceSpec | None, rate_flops: str = "flops", rate_bytes: str = "bytes"
) -> pl.LazyFrame:
    """``roofline._metrics`` as a plan (the code before, verbatim)."""
    bw = spec.mem_bw if spec is not None else None
    secs = pl.when(pl.col("time_ns") > 0).then(pl.col("time_ns").cast(pl.Float64) / 1e9)
    df = df.with_columns(*_peak_columns(spec)).with_columns(
        (pl.col("flops") / pl.col("bytes")).alias("intensity"),
        (pl.col(rate_flops) / secs / 1e12).alias("achieved_tflops"),
        (pl.col(rate_bytes) / secs / 1e9).alias("achieved_gbps"),
        pl.lit(bw, dtype=pl.Float64).alias("peak_bw"),
    )
    df = df.with_columns(
        pl.when(
            pl.col("peak_tf32").is_not_null()
            & (pl.col("achieved_tflops") * 1e12 > pl.col("peak_flops"))
        )
        .then(pl.col("peak_tf32"))
        .otherwise(pl.col("peak_flops"))
        .alias("peak_flops")
    )
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
    gone = ("peak_tf32", "_compute_side", "peak_bw")
    names = df.collect_schema().names()
    return df.select(*(c for c in names if c not in gone), bound.alias("bound"))


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
def test_figures_equal_the_expressions(
    spec: DeviceSpec | None, n: int, timed: bool, compute: bool
) -> None:
    for seed in range(4):
        df = _frame(seed, n, timed=timed, compute=compute)
        want = _expressions(df.lazy(), spec).collect(engine="in-memory")
        assert_frame_equal(rl._metrics(df, spec), want, check_exact=True)


def test_figures_cover_both_bandwidth_branches() -> None:
    """The frames above do reach both of Polars' evaluations of the bandwidth branch (a
    product with the inverse and a true division differ on some rows)."""
    bw = _H100.mem_bw
    seen = set()
    for timed in (True, False):
        for compute in (True, False):
            df = _frame(0, 1500, timed=timed, compute=compute)
            got = rl._metrics(df, _H100).filter(pl.col("bound") != "compute")
            gbps = got.get_column("achieved_gbps").to_numpy()
            pct = got.get_column("pct_of_peak").to_numpy()
            ok = ~np.isnan(pct)
            if (gbps[ok] * 1e9 / bw * 100 != pct[ok]).any():
                seen.add("inverse")
            if (gbps[ok] * 1e9 * (1 / bw) * 100 != pct[ok]).any():
                seen.add("division")
    assert seen == {"inverse", "division"}


def _groups_by_plan(calls: pl.DataFrame, spec: DeviceSpec | None) -> pl.DataFrame:
    """The groups as the plan before computed them from the calls."""
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
    plan = _expressions(plan, spec, "_flops_t", "_bytes_t").drop("_flops_t", "_bytes_t")
    return plan.sort(
        ["time_ns", *rl._GROUP], descending=[True, False, False, False], nulls_last=True
    ).collect(engine="in-memory")


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
    want = _expressions(base.lazy(), spec).collect(engine="in-memory")
    assert_frame_equal(res.calls, want, check_exact=True)
    assert_frame_equal(res.groups, _groups_by_plan(res.calls, spec), check_exact=True)
    assert res.groups.height > 50


def test_order_sorts_time_then_keys_nulls_last() -> None:
    keys = pl.Series(["b", None, "a", "a", "b"], dtype=pl.String)
    time_ns = np.array([5, 9, 5, 0, 7], dtype=np.int64)
    timed = np.array([True, True, True, False, True])
    got: Any = rl._order(time_ns, timed, keys)
    assert got.tolist() == [1, 4, 2, 0, 3]
