"""The roofline's calls (an op that owns itself, with its owned ops' kernel time, kernel count
and torch flops) summed by position in NumPy against the plan they replace: a group-by of the
kernels joined to their op's owner, a group-by of the owned ops' flops, both left-joined to the
calls. On real traces (GPU, and Ascend exports with ops) and on a profile made to hit the
corners: kernels of no duration, kernels whose op is not a host op, ops without kernels, owners
whose ops have no torch flops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import opscope
from conftest import SHARED_TRACES
from opscope.analysis import roofline as rl
from opscope.analysis.flops import host_op_costs

_DEVICE_KINDS = list(rl._DEVICE_KINDS)


def _reference(profile: Any) -> pl.DataFrame:
    """The calls' device_ns, kernels, torch_flops and time columns by the joins (the code
    before the NumPy sums), keyed by id."""
    ops = profile.ops
    costs = host_op_costs(profile)
    costed = costs.get_column("flops").is_not_null() | costs.get_column("bytes").is_not_null()
    derived = costs.get_column("formula").fill_null("").str.starts_with("backward: ")
    direct = costed & ~derived
    par = rl._op_parents(ops)
    if derived.any():
        costed = direct | (derived & ~rl._with_direct_descendant(ops, direct, par))
    owners = rl._owners(ops, costed, par)
    owned = ops.lazy().with_columns(owners.get_column("owner"))
    dev = profile.kernels
    has_device = bool(
        (dev.get_column("kind").is_in(_DEVICE_KINDS) & dev.get_column("op_id").is_not_null()).any()
    )
    kern = (
        dev.lazy()
        .filter(pl.col("kind").is_in(_DEVICE_KINDS) & pl.col("op_id").is_not_null())
        .join(owned.select(pl.col("id").alias("op_id"), "owner"), on="op_id", how="inner")
        .filter(pl.col("owner").is_not_null())
    )
    dev_time = kern.group_by("owner").agg(
        pl.col("dur_ns").sum().alias("device_ns"), pl.len().alias("kernels")
    )
    torch_flops = (
        owned.filter(pl.col("owner").is_not_null())
        .group_by("owner")
        .agg(pl.col("flops").sum().alias("torch_flops"), pl.col("flops").is_not_null().any())
        .select(
            "owner",
            pl.when(pl.col("flops"))
            .then(pl.col("torch_flops"))
            .otherwise(None)
            .alias("torch_flops"),
        )
    )
    return (
        owned.filter(pl.col("owner") == pl.col("id"))
        .join(dev_time, left_on="id", right_on="owner", how="left")
        .join(torch_flops, left_on="id", right_on="owner", how="left")
        .select(
            "id",
            "torch_flops",
            pl.when(pl.col("device_ns").is_not_null())
            .then(pl.col("device_ns"))
            .when(pl.lit(has_device))
            .then(None)
            .otherwise(pl.col("dur_ns"))
            .alias("time_ns"),
            pl.when(pl.col("device_ns").is_not_null())
            .then(pl.lit("device"))
            .when(pl.lit(has_device))
            .then(pl.lit("none"))
            .otherwise(pl.lit("host"))
            .alias("time_source"),
            pl.col("kernels").fill_null(0),
        )
        .sort("id")
        .collect()
    )


def _check(profile: Any) -> pl.DataFrame:
    got = rl._with_ops(profile, None).calls
    cols = ["id", "torch_flops", "time_ns", "time_source", "kernels"]
    want = _reference(profile)
    mine = got.select(cols).sort("id")
    assert mine.schema == want.schema
    assert mine.equals(want)
    # the calls in the ops' order (the left joins kept it)
    at = {i: k for k, i in enumerate(profile.ops.get_column("id").to_list())}
    order = [at[i] for i in got.get_column("id").to_list()]
    assert order == sorted(order)
    return got


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/tracelens_h100_bert_small.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    ],
)
def test_calls_equal_the_joins_on_shared_traces(rel: str) -> None:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    got = _check(opscope.load(p, cache=False))
    assert got.height and got.get_column("kernels").sum() > 0


def test_calls_equal_the_joins_at_the_corners(tmp_path: Path) -> None:
    """A kernel of no duration (adds nothing, still counted), a kernel launched by a runtime
    call (no host op: in no call), an op without kernels, an op with torch flops under a costed
    op (its owner's), a costed op whose ops have none (null)."""
    mm = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    ev: list[dict[str, Any]] = []

    def x(name: str, cat: str, ts: float, dur: float | None, **args: Any) -> None:
        e = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "args": args}
        if dur is not None:
            e["dur"] = dur
        ev.append(e)

    x("aten::linear", "cpu_op", 0, 100, **mm, **{"External id": 1})
    x("aten::mm", "cpu_op", 10, 50, **mm, flops=524288, **{"External id": 2})
    x("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=1, **{"External id": 2})
    x("aten::mm", "cpu_op", 200, 50, **mm, **{"External id": 3})
    x("cudaLaunchKernel", "cuda_runtime", 210, 5, correlation=2, **{"External id": 3})
    x("aten::add", "cpu_op", 300, 20, **mm, **{"External id": 4})
    x("cudaMemsetAsync", "cuda_runtime", 400, 5, correlation=3)
    for ts, dur, corr in ((30, 40, 1), (230, 0, 2), (410, 10, 3)):
        ev.append(
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts,
             "dur": dur, "args": {"correlation": corr, "device": 0, "stream": 7}}
        )  # fmt: skip
    for corr, (src, dst) in enumerate(((20, 30), (210, 230), (400, 410)), start=1):
        ev.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": src, "cat": "ac2g"})
        ev.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": dst, "cat": "ac2g", "bp": "e"})
    path = tmp_path / "t.json"
    path.write_text(__import__("json").dumps({"traceEvents": ev}))
    got = _check(opscope.load(path, cache=False))
    assert got.height >= 2


@pytest.mark.parametrize(
    "rel",
    ["gpu/hta_alexnet_a100_cuda_sync.json.gz", "multi_rank/hta_sampled_128rank_job/rank-0.json.gz"],
)
def test_without_a_costed_op_the_full_path_is_skipped(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host ops, none with a modelled cost (recorded without shapes): the roofline's tables
    from their schemas, equal to the full path's (SHORTCUTS off), which is not run (a spy);
    with a costed op it is."""
    from polars.testing import assert_frame_equal

    from opscope.analysis import tree
    from opscope.analysis.registry import Options

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    ran: list[int] = []
    real = rl._with_ops

    def spy(profile: Any, device_name: Any) -> Any:
        ran.append(1)
        return real(profile, device_name)

    monkeypatch.setattr(rl, "_with_ops", spy)
    fast = rl.roofline(opscope.load(p, cache=False), Options())
    costed = bool(ran)
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    ran.clear()
    full = rl.roofline(opscope.load(p, cache=False), Options())
    assert ran == [1]
    assert costed == ("alexnet" not in rel)  # alexnet's ops carry no shapes: none costed
    for name in ("calls", "groups", "kernel_groups"):
        assert_frame_equal(getattr(fast, name), getattr(full, name))
    for name in ("device", "peaks_note", "time_source", "peak_known"):
        assert getattr(fast, name) == getattr(full, name)


def _json_by_rows(res: Any) -> list[dict[str, Any]]:
    """The report's roofline list built row by row from dicts of every column (the code before
    the column lists)."""
    out: list[dict[str, Any]] = []
    for df in (res.groups, res.kernel_groups):
        for r in df.iter_rows(named=True):
            out.append(
                {
                    "name": r["name"],
                    "input_shapes": rl._decode(r["input_dims"]),
                    "dtypes": rl._decode(r["input_types"]),
                    "calls": r["calls"],
                    "time_us": r["time_ns"] / 1e3 if r["time_ns"] is not None else None,
                    "flops": r["flops"],
                    "torch_flops": r.get("torch_flops"),
                    "bytes": r["bytes"],
                    "intensity": r["intensity"],
                    "achieved_tflops": r["achieved_tflops"],
                    "achieved_gbps": r["achieved_gbps"],
                    "pct_of_peak": r["pct_of_peak"],
                    **({} if res.peak_known else {"peak_note": rl.NO_PEAK}),
                    "bound": r["bound"],
                    "formula": r["formula"],
                    **{m: r[m] for m in rl.PMU_METRICS if m in r},
                }
            )
    return out


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",  # op groups, a known peak
        "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",  # op and kernel groups, PMU columns
        "ascend/small_two_rank/test_rank_0",  # kernel groups only
    ],
)
def test_to_json_equals_the_rows_dicts(rel: str) -> None:
    """The JSON list from column lists equals the row-by-row one, keys in the same order."""
    from opscope.analysis.registry import Options

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    res = rl.roofline(opscope.load(p, cache=False), Options())
    got, want = res.to_json(), _json_by_rows(res)
    assert [list(d.items()) for d in got] == [list(d.items()) for d in want]
    assert got


def test_to_json_equals_the_rows_dicts_planted() -> None:
    """The same on planted groups: a known and an unknown peak, a null time, shapes that are
    not JSON (kept as text), null shapes, no torch_flops column, PMU columns with nulls."""
    import dataclasses

    groups = pl.DataFrame(
        {
            "name": ["aten::mm", "aten::add", None],
            "input_dims": ["[[2, 3], [3, 4]]", "not json [", None],
            "input_types": ['["float", "float"]', None, "[]"],
            "calls": pl.Series([3, 1, 2], dtype=pl.UInt32),
            "time_ns": [1_500, None, 7],
            "flops": [48, None, 0],
            "torch_flops": [48, 2, None],
            "bytes": [80, 12, None],
            "intensity": [0.6, None, 3.0],
            "achieved_tflops": [1e-3, None, 0.0],
            "achieved_gbps": [2.5, None, 0.0],
            "pct_of_peak": [12.5, None, None],
            "bound": ["memory", "latency", None],
            "formula": ["2*m*n*k", None, "x"],
        }
    )
    kernels = groups.drop("torch_flops").with_columns(
        pl.Series("aic_mac_ratio", [0.5, None, 0.25]), pl.Series("aiv_vec_ratio", [None, 1.0, 0.0])
    )
    base = rl.RooflineResult(
        calls=pl.DataFrame(),
        groups=groups,
        kernel_groups=kernels,
        device=None,
        peaks_note="",
        time_source="device",
    )
    for res in (base, dataclasses.replace(base, peak_known=False)):
        got, want = res.to_json(), _json_by_rows(res)
        assert [list(d.items()) for d in got] == [list(d.items()) for d in want]
        assert len(got) == 6 and ("peak_note" in got[0]) == (not res.peak_known)
        assert got[1]["input_shapes"] == "not json [" and got[3]["aic_mac_ratio"] == 0.5
