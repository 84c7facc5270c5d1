"""Core utilisation: waves and tail effect against hand computations and the trace's own args."""

from __future__ import annotations

import gzip
import json
import math
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.occupancy import utilisation
from opscope.analysis.registry import Options
from opscope.model import Profile

H100 = {"rank": [0], "device": [0], "name": ["NVIDIA H100 80GB HBM3"], "vendor": ["nvidia"],
        "compute_units": [132], "compute_capability": ["9.0"]}  # fmt: skip


def _resident_blocks(threads: int, regs: int, smem: int) -> int:
    # CUDA occupancy rules for sm_90: 2048 threads, 32 blocks, 64K registers allocated per warp
    # in 256-register units, 228 KiB shared memory with 1 KiB reserved per block
    warps = -(-threads // 32)
    limits = [2048 // threads, 32]
    if regs:
        limits.append(65536 // (math.ceil(regs * 32 / 256) * 256 * warps))
    if smem:
        limits.append((228 * 1024) // (smem + 1024))
    return min(limits)


def test_waves_and_tail_on_h100() -> None:
    kernels = [
        ("small", [264, 1, 1], [256, 1, 1], 32, 0, 10_000),
        ("big", [1100, 1, 1], [128, 1, 1], 128, 48 * 1024, 30_000),
    ]
    ev = pl.DataFrame(
        {
            "id": [0, 1],
            "kind": ["kernel", "kernel"],
            "name": [k[0] for k in kernels],
            "grid": [json.dumps(k[1]) for k in kernels],
            "block": [json.dumps(k[2]) for k in kernels],
            "registers": [k[3] for k in kernels],
            "shared_mem": [k[4] for k in kernels],
            "dur_ns": [k[5] for k in kernels],
            "occupancy": [25.0, 12.0],
        }
    )
    res = utilisation(Profile.from_tables(events=ev, devices=pl.DataFrame(H100)), Options())
    rows = {r["name"]: r for r in res.kernels.iter_rows(named=True)}
    total_eff = 0.0
    for name, grid, block, regs, smem, dur in kernels:
        per_sm = _resident_blocks(block[0], regs, smem)
        waves = grid[0] / (132 * per_sm)
        r = rows[name]
        assert r["blocks_per_sm"] == per_sm
        assert r["waves"] == pytest.approx(waves)
        frac = waves - math.floor(waves)
        assert r["tail_idle"] == pytest.approx(1 - frac if frac else 0.0)
        assert r["wave_efficiency"] == pytest.approx(waves / math.ceil(waves))
        total_eff += waves / math.ceil(waves) * dur
    assert res.wave_efficiency == pytest.approx(total_eff / 40_000)
    assert rows["small"]["achieved_occupancy"] == 25.0


def test_ascend_blocks_vs_ai_cores_and_pipes() -> None:
    ev = pl.DataFrame(
        {
            "id": [0, 1, 2],
            "kind": ["kernel"] * 3,
            "name": ["MatMulV2", "MatMulV2", "Add"],
            "blocks": [16, 16, 30],
            "core_type": ["AI_CORE", "AI_CORE", "AI_VECTOR_CORE"],
            "dur_ns": [100, 300, 50],
        }
    )
    km = pl.DataFrame(
        {"event_id": [0, 1], "metric": ["aic_mac_ratio", "aic_mac_ratio"], "value": [0.2, 0.6]}
    )
    dev = pl.DataFrame({"rank": [0], "device": [0], "name": ["Ascend910B4"],
                        "vendor": ["ascend"], "compute_units": [20]})  # fmt: skip
    res = utilisation(Profile.from_tables(events=ev, kernel_metrics=km, devices=dev), Options())
    rows = {r["name"]: r for r in res.kernels.iter_rows(named=True)}
    assert rows["MatMulV2"]["waves"] == pytest.approx(16 / 20)
    assert rows["MatMulV2"]["tail_idle"] == pytest.approx(4 / 20)
    assert rows["MatMulV2"]["aic_mac_ratio"] == pytest.approx((0.2 * 100 + 0.6 * 300) / 400)
    assert rows["Add"]["waves"] == pytest.approx(30 / 40)  # vector cores: 2 per cube core


def test_h100_trace_blocks_per_sm_match_kineto() -> None:
    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    from opscope.ingest import kineto

    profile = kineto.read_kineto(path, cache=False)
    res = utilisation(profile, Options())
    data = json.loads(gzip.decompress(path.read_bytes()))
    want = {}
    for e in data["traceEvents"]:
        if e.get("cat") == "kernel":
            a = e["args"]
            want[(e["name"], json.dumps(a["grid"]), json.dumps(a["block"]))] = a["blocks per SM"]
    assert res.compute_units == 132
    checked = 0
    for r in res.kernels.iter_rows(named=True):
        key = (r["name"], json.dumps(json.loads(r["grid"])), json.dumps(json.loads(r["block"])))
        if key in want:
            assert r["blocks"] / 132 == pytest.approx(
                want[key], abs=1e-6
            )  # kineto rounds to 6 places
            checked += 1
    assert checked == len(want)


@pytest.mark.parametrize(
    "rel",
    [
        "ascend/small_two_rank/test_rank_0",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
        "ascend/alexnet_ddp_910b/level0_rank0_ascend_pt",
    ],
)
def test_kernels_without_grid_or_block_skip_the_parses(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No kernel with a launch geometry (Ascend's): the groups without the grid and block
    parses and joins equal the full plan's (SHORTCUTS off); a spy: no parse built."""
    import opscope
    from conftest import SHARED_TRACES
    from opscope.analysis import occupancy, tree
    from opscope.analysis.registry import Options

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    parsed: list[str] = []
    real = occupancy._shape_product

    def spy(col: str) -> Any:
        parsed.append(col)
        return real(col)

    monkeypatch.setattr(occupancy, "_shape_product", spy)
    fast = occupancy.utilisation(opscope.load(p, cache=False), Options())
    assert parsed == []
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = occupancy.utilisation(opscope.load(p, cache=False), Options())
    assert parsed == ["grid", "block"]
    assert fast.kernels.schema == full.kernels.schema
    assert fast.kernels.equals(full.kernels) and fast.kernels.height > 0
    assert (fast.wave_efficiency, fast.note, fast.compute_units) == (
        full.wave_efficiency,
        full.note,
        full.compute_units,
    )


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
        "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",
    ],
)
def test_launch_geometry_products_from_their_text(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each grid's and block's product computed in Python from its distinct strings gives the
    groups of the plan's parses and joins (SHORTCUTS off); a spy: no parse built then."""
    import opscope
    from opscope.analysis import occupancy, tree

    p = shared_trace(rel)
    parsed: list[str] = []
    real = occupancy._shape_product

    def spy(col: str) -> Any:
        parsed.append(col)
        return real(col)

    monkeypatch.setattr(occupancy, "_shape_product", spy)
    fast = occupancy.utilisation(opscope.load(p, cache=False), Options())
    assert parsed == []
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = occupancy.utilisation(opscope.load(p, cache=False), Options())
    assert parsed == ["grid", "block"]
    assert fast.kernels.schema == full.kernels.schema
    assert fast.kernels.equals(full.kernels)
    assert fast.kernels.get_column("threads_per_block").null_count() < fast.kernels.height
    assert (fast.wave_efficiency, fast.note) == (full.wave_efficiency, full.note)


def test_products_match_the_plans_parse_or_step_aside() -> None:
    """``_products`` equals the plan's parse where it answers (nulls inside skipped, an empty
    list 1) and answers nothing for text that is no list of integers within Int64 (the plan's
    parse then: it wraps, reads floats and booleans its own way, fails on other JSON)."""
    from opscope.analysis.occupancy import _products, _shape_product

    ok = ["[2,3,4]", "[]", "[null]", "[null,5]", "[1]", "[0,7]", "[-2,3]", "[9223372036854775807]"]
    got = _products([*ok, None])
    want = pl.DataFrame({"g": ok}).select(_shape_product("g")).get_column("g").to_list()
    assert got == dict(zip(ok, want, strict=True))
    bad_items = ("[1.0]", "[2,3.0]", '["4"]', "[1,false]", "[1e3]", "[-9223372036854775809]")
    for bad in ("[1.5]", "[true]", "{}", "x", "[[1]]", "[9223372036854775807,2]", "3", *bad_items):
        assert _products(["[2]", bad]) is None, bad


def test_not_null_of_a_float_column_equals_is_not_null() -> None:
    """The NumPy mask (no query) where every NaN of the copy is a null, the Series' own where a
    real NaN (0/0) sits among them: both equal is_not_null."""
    from opscope.analysis.occupancy import _not_null

    for values in ([1.0, None, 0.5], [None, None], [1.0, None, float("nan")], [float("nan"), 2.0]):
        s = pl.Series(values, dtype=pl.Float64)
        assert _not_null(s).to_list() == s.is_not_null().to_list(), values
