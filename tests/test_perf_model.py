"""The performance model (opscope.analysis.model): lower bounds from FLOPs and bytes against
the device's peaks, the launch floor, the gap; device names for --device; the saving caps."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import opscope
from helpers import planted
from helpers.spies import count_collect_all, count_queries
from opscope.advise import _common as c
from opscope.advise import advise, rule
from opscope.advise.finding import Finding
from opscope.analysis.devices import UnknownDeviceError, check_device_name
from opscope.analysis.model import LAUNCH_FLOOR_NS, bound_ns, perf_model
from opscope.analysis.registry import Options
from opscope.errors import OpscopeError


def test_bound_is_the_slower_roof_plus_the_launch_floor() -> None:
    h100 = check_device_name("H100")
    flops = 2.0 * 4096**3
    nbytes = 3 * 2 * 4096**2
    # datasheet: 989.5 TFLOP/s dense bf16, 3.35 TB/s
    want = flops / 989.5e12 * 1e9 + LAUNCH_FLOOR_NS["nvidia"]
    assert bound_ns(h100, flops, nbytes, "bf16", "matrix") == pytest.approx(want)
    # bytes only: the bandwidth roof, one floor per kernel
    want_mem = nbytes / 3.35e12 * 1e9 + 3 * LAUNCH_FLOOR_NS["nvidia"]
    assert bound_ns(h100, 0, nbytes, "bf16", "memory", kernels=3) == pytest.approx(want_mem)
    assert bound_ns(None, flops, nbytes, "bf16", "matrix") is None


def test_device_names_resolve_and_unknown_is_a_one_line_error() -> None:
    assert check_device_name("MI300X").key == "mi300x"
    assert check_device_name("h200").key == "h200"
    assert check_device_name("NVIDIA H800").key == "h800"  # DeepSeek's training GPUs
    assert check_device_name("a100-sxm-80gb").key == "a100-sxm-80gb"
    with pytest.raises(UnknownDeviceError, match="--device") as e:
        check_device_name("TPUv9")
    assert isinstance(e.value, OpscopeError) and "\n" not in str(e.value)


def test_gap_per_call_is_measured_minus_bound(tmp_path: Path) -> None:
    path, _ = planted.write("clean", tmp_path)
    doc = json.loads(path.read_text())
    gemm_us = [e["dur"] for e in doc["traceEvents"] if e["name"].startswith("sm90_xmma_gemm")]
    model = perf_model(opscope.load(path), Options())
    mm = model.calls.filter(model.calls["name"] == "aten::mm").sort(
        "ts_ns" if "ts_ns" in model.calls.columns else "id"
    )
    assert mm.height == len(gemm_us)
    bound = 2.0 * 4096**3 / 989.5e12 * 1e9 + LAUNCH_FLOOR_NS["nvidia"]
    for row, us in zip(mm.iter_rows(named=True), gemm_us, strict=True):
        assert row["time_ns"] == pytest.approx(us * 1e3, abs=1)
        assert row["bound_ns"] == pytest.approx(bound, rel=1e-6)
        assert row["gap_ns"] == pytest.approx(max(us * 1e3 - bound, 0), abs=2)
    g = model.groups.filter(model.groups["name"] == "aten::mm").row(0, named=True)
    assert g["efficiency"] == pytest.approx(g["bound_ns"] / g["time_ns"])


def test_no_peaks_no_bound_and_no_model_findings(tmp_path: Path) -> None:
    path, _ = planted.write("tall-skinny", tmp_path, device_props=False)
    prof = opscope.load(path)
    model = perf_model(prof, Options())
    assert model.spec is None and model.calls["bound_ns"].null_count() == model.calls.height
    rules = ["gemm-tiles", "gemm-memory-bound", "elementwise-bandwidth"]
    assert len(advise(prof, only=rules)) == 0
    # the same trace with the device named finds it
    assert advise(prof, {"target_name": "MI300X"}, only=rules).by_rule("gemm-memory-bound")


class _Greedy:
    """A rule claiming ten steps' time, with and without a limit of its own."""

    id = "x-greedy"
    doc = "test"

    def match(self, profile: opscope.Profile, results: Mapping[str, Any]) -> list[Finding]:
        si = c.step_info(profile)
        total = si.step_ns * si.n
        return [
            c.make_finding(
                profile, rule=self.id, title="limited", where=("a.py", 1, None), key="a",
                saving_ns=10 * total, saving_how="greedy", fix="", evidence={},
                limit_ns=total / 4, limit_what="a quarter",
            ),
            c.make_finding(
                profile, rule=self.id, title="step", where=("a.py", 2, None), key="b",
                saving_ns=10 * total, saving_how="greedy", fix="", evidence={},
            ),
        ]  # fmt: skip


def test_savings_never_exceed_their_limit_or_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, truth = planted.write("clean", tmp_path)
    prof = opscope.load(path)
    monkeypatch.setitem(rule._RULES, "x-greedy", _Greedy())
    found = {f.title: f for f in advise(prof, only=["x-greedy"])}
    step_us = c.step_info(prof).step_ns / 1e3
    assert found["limited"].saving_us == pytest.approx(step_us / 4, rel=1e-3)
    assert "capped at a quarter" in found["limited"].saving_how
    assert found["step"].saving_us == pytest.approx(step_us, rel=1e-3)
    assert found["step"].saving_pct == pytest.approx(100.0, rel=1e-3)
    assert step_us == pytest.approx(truth.step_us, rel=1e-3)


@pytest.mark.parametrize(
    "where",
    [
        "/work/ascend_data/st/level2/rank_1_ascend_pt",
        "shared:gpu/hta_triton_a100.json.gz",
        "shared:gpu/hta_amd_mi250_minitoy.json.gz",  # 12 costed calls
    ],
)
def test_no_costed_call_skips_the_query(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace of kernels only (no costed call): the tables from the plans' schemas equal what
    the query gives with the shortcuts off, and collect_all is not called (a spy); a trace with
    calls runs it."""
    from conftest import shared_trace
    from opscope.analysis import tree

    if where.startswith("shared:"):
        path = shared_trace(where.removeprefix("shared:"))
    else:
        path = Path(where)
        if not path.exists():
            pytest.skip("no Ascend export here")
    ran = count_collect_all(monkeypatch)
    queries = count_queries(monkeypatch)
    profile = opscope.load(path, cache=False)
    from opscope.analysis.roofline import roofline

    roofline(profile, Options())  # (its own queries: memoised for the model below)
    queries.clear()
    fast = perf_model(profile, Options())
    has_calls = fast.calls.height > 0
    # the calls in one query; the groups not until read (the rules read the calls only)
    assert ran == [] and queries == ([1] if has_calls else [])
    assert isinstance(fast.groups_plan, pl.LazyFrame) == has_calls
    assert fast.groups.height <= fast.calls.height
    assert queries == ([1, 1] if has_calls else [])
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = perf_model(opscope.load(path, cache=False), Options())
    for a, b in ((fast.calls, full.calls), (fast.groups, full.groups)):
        assert a.schema == b.schema and a.equals(b)
    assert fast.to_json() == full.to_json()
