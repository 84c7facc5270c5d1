"""compare(): matching, planted speedups, significance, normalisation, cross-device matching.

Profiles here are built directly from tables (Profile.from_tables), so these tests need no
reader; the expected figures are computed in the test from what was planted.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from opscope.analysis.compare import MIN_REL_CHANGE, Comparison, compare, step_time_change
from opscope.errors import AnalysisError
from opscope.ingest import load
from opscope.model import Profile


@dataclass
class _Builder:
    """Plants steps, ops (optionally with one kernel each) and records what it planted (µs)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    stacks: list[dict[str, Any]] = field(default_factory=list)
    planted: dict[str, list[float]] = field(default_factory=dict)  # op name -> per-call µs
    kernel_planted: dict[str, list[float]] = field(default_factory=dict)
    t: int = 0

    def _id(self) -> int:
        return len(self.events)

    def step(self, n: int, ops: list[dict[str, Any]]) -> None:
        sid = self._id()
        start = self.t
        self.events.append(
            {"id": sid, "kind": "step", "name": f"ProfilerStep#{n}", "ts_ns": start, "step": n}
        )
        for o in ops:
            dur = round(o["us"] * 1000)
            oid = self._id()
            self.events.append(
                {
                    "id": oid,
                    "kind": "cpu_op",
                    "name": o["name"],
                    "ts_ns": self.t,
                    "dur_ns": dur,
                    "step": n,
                    "parent_id": sid,
                    "input_dims": o.get("dims", "[[4,4]]"),
                    "input_types": o.get("types"),
                    "module": o.get("module"),
                    "stack_id": o.get("stack_id"),
                }
            )
            self.planted.setdefault(o["name"], []).append(dur / 1000)
            if "child" in o:  # a nested op inside this one, taking half of it
                self.events.append(
                    {
                        "id": self._id(),
                        "kind": "cpu_op",
                        "name": o["child"],
                        "ts_ns": self.t + 1,
                        "dur_ns": dur // 2,
                        "step": n,
                        "parent_id": oid,
                        "input_dims": o.get("dims", "[[4,4]]"),
                        "module": o.get("module"),
                        "stack_id": o.get("stack_id"),
                    }
                )
                launcher = self._id() - 1
            else:
                launcher = oid
            span = dur
            if "kernel" in o:
                kdur = round(o["kernel_us"] * 1000)
                self.events.append(
                    {
                        "id": self._id(),
                        "kind": "kernel",
                        "name": o["kernel"],
                        "ts_ns": self.t + 10,
                        "dur_ns": kdur,
                        "step": n,
                        "op_id": launcher,
                        "device": 0,
                        "pid": 0,
                    }
                )
                self.kernel_planted.setdefault(o["kernel"], []).append(kdur / 1000)
                span = max(dur, kdur + 10)
            self.t += span + 1000
        self.events[sid]["dur_ns"] = self.t - start
        self.t += 1000

    def profile(self, sources: str = "planted", device: str | None = None) -> Profile:
        ev = pl.DataFrame(self.events, infer_schema_length=None)
        tables: dict[str, pl.DataFrame] = {"events": ev}
        if device:
            tables["devices"] = pl.DataFrame(
                {"device": [0], "name": [device], "vendor": ["nvidia"]}
            )
        if self.stacks:
            tables["stacks"] = pl.DataFrame(self.stacks)
        return Profile.from_tables(meta={"sources": [sources]}, **tables)


def _planted(x_us: float, *, steps: int = 5, seed: int = 0, noise: float = 3.0) -> _Builder:
    """X takes ``x_us`` per call, Y 500 µs, Z 300 µs, each ± ``noise`` µs (uniform)."""
    r = random.Random(seed)
    b = _Builder()
    for s in range(steps):
        b.step(
            s,
            [
                {"name": "aten::X", "us": x_us + r.uniform(-noise, noise), "module": "M/x"},
                {"name": "aten::Y", "us": 500 + r.uniform(-noise, noise), "module": "M/y"},
                {"name": "aten::Z", "us": 300 + r.uniform(-noise, noise), "module": "M/y"},
            ],
        )
    return b


def _row(c: Comparison, kind: str, key: str) -> dict[str, Any]:
    rows = c.rows.filter((pl.col("kind") == kind) & (pl.col("key") == key)).to_dicts()
    assert len(rows) == 1, (kind, key, c.rows)
    return rows[0]


def test_profile_against_itself_has_no_change() -> None:
    p = _planted(1000).profile()
    c = compare(p, p)
    assert c.rows.height > 0
    assert c.rows.get_column("speedup").to_list() == [1.0] * c.rows.height
    assert c.rows.get_column("significant").to_list() == [False] * c.rows.height
    assert set(c.rows.get_column("verdict")) == {"noise"}
    assert c.step_speedup == 1.0
    assert c.step_significant is False
    assert c.added.height == 0
    assert c.removed.height == 0


def test_planted_speedup_is_found_and_equal_ops_are_noise() -> None:
    before, after = _planted(1000, seed=1), _planted(250, seed=2)
    c = compare(before.profile(), after.profile())
    x = _row(c, "op", "aten::X")
    assert x["before_us"] == pytest.approx(sum(before.planted["aten::X"]), abs=1e-6)
    assert x["after_us"] == pytest.approx(sum(after.planted["aten::X"]), abs=1e-6)
    expected = sum(before.planted["aten::X"]) / sum(after.planted["aten::X"])
    assert x["speedup"] == pytest.approx(expected, rel=1e-9)
    assert x["speedup"] == pytest.approx(4.0, rel=0.03)
    assert x["significant"] is True
    assert x["verdict"] == "gain"
    assert x["calls_before"] == 5 and x["calls_after"] == 5
    for name in ("aten::Y", "aten::Z"):
        r = _row(c, "op", name)
        assert r["verdict"] == "noise", r
        assert r["significant"] is False
    # the step got faster by the X saving, beyond noise
    assert c.step_verdict == "gain"
    assert c.step_speedup is not None and c.step_speedup > 1.5
    # module rows: M/x holds only X
    mx = _row(c, "module", "M/x")
    assert mx["speedup"] == pytest.approx(expected, rel=1e-9)
    # the summary row says exactly what it covers: X's calls in module M/x, forward, with
    # their input shapes (not "aten::X" over every module, labelled with one)
    labels = c.summary.get_column("metric").to_list()
    assert "M/x · fwd · other aten::X [[4,4]]" in labels
    assert labels[0].startswith("step time")


def test_noise_is_judged_against_the_step_to_step_spread() -> None:
    # Y changes by 10 % but the per-step values scatter by ±40 %: noise. X's 4x shift is not.
    r = random.Random(7)
    a, b = _Builder(), _Builder()
    for s in range(6):
        a.step(s, [{"name": "aten::X", "us": 1000}, {"name": "aten::Y", "us": r.uniform(300, 700)}])
        b.step(s, [{"name": "aten::X", "us": 250}, {"name": "aten::Y", "us": r.uniform(330, 770)}])
    c = compare(a.profile(), b.profile())
    y = _row(c, "op", "aten::Y")
    # the change is above the relative floor, so the spread is what makes it noise
    assert abs(y["delta_us"]) / max(y["before_us"], y["after_us"]) >= MIN_REL_CHANGE
    assert y["verdict"] == "noise"
    assert y["noise_us"] > 0
    assert _row(c, "op", "aten::X")["verdict"] == "gain"


def test_a_planted_regression_is_a_loss() -> None:
    c = compare(_planted(250, seed=3).profile(), _planted(1000, seed=4).profile())
    x = _row(c, "op", "aten::X")
    assert x["verdict"] == "loss"
    assert x["speedup"] == pytest.approx(0.25, rel=0.03)
    assert c.step_verdict == "loss"
    assert c.step_regression_pct > 50


def test_different_step_counts_compare_per_step_averages() -> None:
    before, after = _planted(1000, steps=5, seed=5), _planted(1000, steps=3, seed=6)
    c = compare(before.profile(), after.profile())
    assert "per-step" in c.normalisation and "5 vs 3" in c.normalisation
    x = _row(c, "op", "aten::X")
    assert x["before_us"] == pytest.approx(sum(before.planted["aten::X"]) / 5, abs=1e-6)
    assert x["after_us"] == pytest.approx(sum(after.planted["aten::X"]) / 3, abs=1e-6)
    assert x["verdict"] == "noise"


def test_fewer_than_three_steps_leaves_changes_untested() -> None:
    c = compare(_planted(1000, steps=2, seed=1).profile(), _planted(250, steps=2).profile())
    assert _row(c, "op", "aten::X")["verdict"] == "untested"
    assert _row(c, "op", "aten::X")["significant"] is None
    # a change under MIN_REL_CHANGE is noise even untested
    assert _row(c, "op", "aten::Y")["verdict"] == "noise"
    assert any("fewer than 3 steps" in n for n in c.notes)


def test_added_and_removed_rows() -> None:
    a, b = _Builder(), _Builder()
    for s in range(3):
        a.step(s, [{"name": "aten::X", "us": 100}, {"name": "aten::matmul", "us": 900}])
        b.step(s, [{"name": "aten::X", "us": 100}, {"name": "aten::linear", "us": 300}])
    c = compare(a.profile(), b.profile())
    removed = {(r["kind"], r["key"]): r for r in c.removed.to_dicts()}
    added = {(r["kind"], r["key"]): r for r in c.added.to_dicts()}
    assert removed[("op", "aten::matmul")]["us"] == pytest.approx(2700.0)
    assert removed[("op", "aten::matmul")]["calls"] == 3
    assert added[("op", "aten::linear")]["us"] == pytest.approx(900.0)
    assert ("op", "aten::linear") not in removed


def test_no_common_operators_is_an_analysis_error() -> None:
    a, b = _Builder(), _Builder()
    a.step(0, [{"name": "aten::A", "us": 10}])
    b.step(0, [{"name": "aten::B", "us": 10}])
    with pytest.raises(AnalysisError, match="no common operators between"):
        compare(a.profile("a.json"), b.profile("b.json"))


def _device_pair(steps_b: int = 4) -> tuple[_Builder, _Builder]:
    """CUDA-like before (4 steps), Ascend-like after (``steps_b`` steps): kernel names differ,
    host ops and modules match."""
    a, b = _Builder(), _Builder()
    for s in range(4):
        a.step(
            s,
            [
                {
                    "name": "aten::linear",
                    "child": "aten::addmm",
                    "us": 50,
                    "module": "Net/fc",
                    "kernel": "volta_sgemm_128x64_nn",
                    "kernel_us": 400 + s,
                },
                {
                    "name": "aten::relu",
                    "us": 20,
                    "module": "Net/act",
                    "kernel": "vectorized_elementwise_kernel",
                    "kernel_us": 30,
                },
            ],
        )
    for s in range(steps_b):
        b.step(
            s,
            [
                {
                    "name": "aten::linear",
                    "child": "aten::addmm",
                    "us": 50,
                    "module": "Net/fc",
                    "kernel": "MatMulV2",
                    "kernel_us": 100 + s,
                },
                {
                    "name": "aten::relu",
                    "us": 20,
                    "module": "Net/act",
                    "kernel": "vectorized_elementwise_kernel",
                    "kernel_us": 30,
                },
            ],
        )
    return a, b


def test_renamed_kernels_match_through_their_host_operator() -> None:
    a, b = _device_pair()
    c = compare(a.profile(), b.profile())
    assert c.basis == "device"
    k = _row(c, "kernel", "via aten::linear @ Net/fc")
    assert k["match"] == "host op"
    assert k["before_us"] == pytest.approx(sum(a.kernel_planted["volta_sgemm_128x64_nn"]))
    assert k["after_us"] == pytest.approx(sum(b.kernel_planted["MatMulV2"]))
    assert k["verdict"] == "gain"
    same = _row(c, "kernel", "vectorized_elementwise_kernel")
    assert same["match"] == "exact" and same["speedup"] == 1.0
    # renamed kernels are matched, so they are neither added nor removed
    assert c.added.filter(pl.col("kind") == "kernel").height == 0
    assert c.removed.filter(pl.col("kind") == "kernel").height == 0
    # device basis: the outer op is charged with the kernel launched by its child (inclusive)
    lin = _row(c, "op", "aten::linear")
    assert lin["before_us"] == pytest.approx(sum(a.kernel_planted["volta_sgemm_128x64_nn"]))
    assert lin["calls_before"] == 4
    assert _row(c, "module", "Net/fc")["after_us"] == pytest.approx(
        sum(b.kernel_planted["MatMulV2"])
    )


def _busy_and_window_ns(profile: Profile) -> tuple[int, int]:
    """The union of the kernels' intervals clipped to the steps' span, and that span (ns)."""
    ev = profile.events.to_dicts()
    steps = [e for e in ev if e["kind"] == "step"]
    lo = min(e["ts_ns"] for e in steps)
    hi = max(e["ts_ns"] + e["dur_ns"] for e in steps)
    iv = sorted(
        (max(e["ts_ns"], lo), min(e["ts_ns"] + e["dur_ns"], hi))
        for e in ev
        if e["kind"] == "kernel"
    )
    busy, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s  # type: ignore[operator]
    return busy, hi - lo


def test_device_busy_and_idle_match_a_union_of_intervals() -> None:
    a, b = _device_pair()
    pa = a.profile()
    c = compare(pa, b.profile())
    busy, window = _busy_and_window_ns(pa)
    side = c.sides.row(0, named=True)
    # exact: the integer ns divided once (these sides are totals over all profiled steps)
    assert side["device_busy_us"] == busy / 1000
    assert side["device_idle_us"] == (window - busy) / 1000
    assert "device busy (all profiled steps)" in c.summary.get_column("metric").to_list()


def test_per_step_device_busy_and_idle_are_one_division() -> None:
    a, b = _device_pair(steps_b=3)
    pa, pb = a.profile(), b.profile()
    c = compare(pa, pb)
    assert "per-step" in c.normalisation
    for i, (p, n) in enumerate([(pa, 4), (pb, 3)]):
        busy, window = _busy_and_window_ns(p)
        side = c.sides.row(i, named=True)
        # ns / (1000 * steps), rounded once: not (ns / 1000) / steps
        assert side["device_busy_us"] == busy / (1000 * n)
        assert side["device_idle_us"] == (window - busy) / (1000 * n)


def test_changed_shapes_match_by_operator_and_source_line() -> None:
    a, b = _Builder(), _Builder()
    for bld in (a, b):
        bld.stacks = [
            {
                "stack_id": 1,
                "depth": 0,
                "file": "torch/nn/functional.py",
                "line": 9,
                "is_user": False,
            },
            {
                "stack_id": 1,
                "depth": 1,
                "file": "model.py",
                "line": 30,
                "function": "forward",
                "is_user": True,
            },
            {
                "stack_id": 2,
                "depth": 0,
                "file": "model.py",
                "line": 41,
                "function": "forward",
                "is_user": True,
            },
        ]
    for s in range(3):
        a.step(
            s,
            [
                {"name": "aten::mm", "us": 800, "dims": "[[256,1000],[1000,256]]", "stack_id": 1},
                {"name": "aten::mm", "us": 100, "dims": "[[8,8],[8,8]]", "stack_id": 2},
            ],
        )
        b.step(
            s,
            [
                {"name": "aten::mm", "us": 200, "dims": "[[256,1024],[1024,256]]", "stack_id": 1},
                {"name": "aten::mm", "us": 100, "dims": "[[8,8],[8,8]]", "stack_id": 2},
            ],
        )
    c = compare(a.profile(), b.profile())
    r = _row(c, "op_shape", "aten::mm @ model.py:30 (shape changed)")
    assert r["match"] == "shape changed"
    assert r["before_us"] == pytest.approx(2400.0)
    assert r["after_us"] == pytest.approx(600.0)
    assert _row(c, "op_shape", "aten::mm [[8,8],[8,8]]")["match"] == "exact"
    assert c.added.filter(pl.col("kind") == "op_shape").height == 0
    # source-line rows: the innermost user frame, not torch's
    assert _row(c, "line", "model.py:30")["speedup"] == pytest.approx(4.0)


def test_json_has_the_documented_keys() -> None:
    import opscope

    assert opscope.compare is compare
    c = compare(_planted(1000, seed=1).profile(), _planted(250).profile())
    j = c.to_json()
    assert set(j["step_time"]) >= {"before_us", "after_us", "speedup", "significant", "noise_us"}
    assert j["rows"]
    assert set(j["rows"][0]) >= {"key", "kind", "before_us", "after_us", "speedup", "significant"}
    assert {"summary", "added", "removed", "roofline", "sides", "notes"} <= set(j)
    assert j["summary"][0]["metric"].startswith("step time")
    assert j["summary"][0]["before"] == c.step_before_us  # numbers, not text
    from opscope.report.compare_render import render_markdown

    md = render_markdown(c)
    assert "| metric | before | after | change |" in md
    assert "aten::X" in md


def _brute_force_mann_whitney_p(x: list[float], y: list[float]) -> float:
    """Two-sided exact p by enumerating every split of the pooled values (no ties here)."""
    pooled = sorted(x + y)
    rank = {v: i + 1 for i, v in enumerate(pooled)}
    m, n = len(x), len(y)

    def u_of(ranks: tuple[int, ...]) -> float:
        return sum(ranks) - m * (m + 1) / 2

    observed = u_of(tuple(rank[v] for v in x))
    lo = min(observed, m * n - observed)
    splits = list(itertools.combinations(range(1, m + n + 1), m))
    extreme = sum(1 for s in splits if min(u_of(s), m * n - u_of(s)) <= lo)
    return min(1.0, extreme / len(splits))


def test_a_shift_inside_the_printed_noise_band_is_noise_whatever_the_rank_test() -> None:
    # every after step is slower than every before step, but the after side scatters so much
    # that the shift is inside the noise band printed with it: the verdict must agree with the
    # band it prints (issue 21), so it is noise; the U test's p-value is still reported
    before = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]
    after = [1100.0, 1500.0, 2200.0, 1050.0, 1800.0, 2150.0]
    a, b = _Builder(), _Builder()
    for s, (x, y) in enumerate(zip(before, after, strict=True)):
        a.step(s, [{"name": "aten::X", "us": x}])
        b.step(s, [{"name": "aten::X", "us": y}])
    c = compare(a.profile(), b.profile())
    x = _row(c, "op", "aten::X")
    assert x["p_value"] == pytest.approx(_brute_force_mann_whitney_p(before, after), rel=1e-12)
    assert x["p_value"] < 0.01
    assert x["noise_us"] > abs(1650.0 - 1001.0)  # the printed band exceeds the shift
    assert x["verdict"] == "noise"
    assert x["significant"] is False


def test_p_value_matches_brute_force_on_overlapping_samples() -> None:
    before = [500.0, 520.0, 480.0, 515.0, 470.0]
    after = [505.0, 530.0, 490.0, 560.0, 540.0]
    a, b = _Builder(), _Builder()
    for s, (x, y) in enumerate(zip(before, after, strict=True)):
        a.step(s, [{"name": "aten::Y", "us": x}])
        b.step(s, [{"name": "aten::Y", "us": y}])
    c = compare(a.profile(), b.profile())
    y = _row(c, "op", "aten::Y")
    assert y["p_value"] == pytest.approx(_brute_force_mann_whitney_p(before, after), rel=1e-12)
    assert y["verdict"] == "noise"


def test_run_metrics_and_peak_memory_are_compared() -> None:
    a, b = _planted(1000, seed=1), _planted(250, seed=2)
    pa = a.profile().with_tables(
        metrics=pl.DataFrame(
            {
                "step": [0, 1, 2],
                "wall_ns": [9_000_000, 11_000_000, 10_000_000],
                "samples_per_s": [100.0, 90.0, 110.0],
                "mem_allocated_peak": [5, 7, 6],
            }
        ),
        memory=pl.DataFrame(
            {"ts_ns": [1, 2, 3], "bytes": [10, 20, -10], "total_allocated": [10, 30, 20]}
        ),
    )
    pb = b.profile().with_tables(
        metrics=pl.DataFrame(
            {
                "step": [0, 1, 2],
                "wall_ns": [5_000_000, 4_000_000, 6_000_000],
                "samples_per_s": [200.0, 250.0, 150.0],
                "mem_allocated_peak": [3, 9, 4],
            }
        )
    )
    c = compare(pa, pb)
    side_a, side_b = c.sides.row(0, named=True), c.sides.row(1, named=True)
    assert side_a["samples_per_s"] == 100.0 and side_b["samples_per_s"] == 200.0  # medians
    assert side_a["metrics_wall_us"] == 10_000.0 and side_b["metrics_wall_us"] == 5_000.0
    assert side_a["peak_mem_bytes"] == 30  # allocator events win over the run metrics
    assert side_b["peak_mem_bytes"] == 9
    from opscope.report.compare_render import summary_cells

    s = {r["metric"]: r for r in c.summary.to_dicts()}
    sps = s["samples/s (run metrics, median)"]
    assert (sps["unit"], sps["before"], sps["after"]) == ("per_s", 100.0, 200.0)
    assert summary_cells(sps)[1:] == ["100", "200", "2.00×"]
    wall = s["wall step time (run metrics, median)"]
    assert (wall["unit"], wall["after"]) == ("us", 5000.0)
    assert summary_cells(wall)[1:] == ["10 ms", "5 ms", "2.00× less"]
    mem = s["peak memory"]
    assert (mem["unit"], mem["before"], mem["after"]) == ("bytes", 30.0, 9.0)
    assert summary_cells(mem)[1:] == ["30 B", "9 B", "3.33× less"]


def test_module_paths_match_below_a_renamed_root() -> None:
    a, b = _Builder(), _Builder()
    for s in range(3):
        a.step(s, [{"name": "aten::mm", "us": 800, "module": "VisionModel_0/Linear_11"}])
        b.step(s, [{"name": "aten::mm", "us": 200, "module": "FixedVisionModel_0/Linear_11"}])
    c = compare(a.profile(), b.profile())
    r = _row(c, "module", "…/Linear_11")
    assert r["match"] == "root renamed"
    assert (r["before_us"], r["after_us"]) == (pytest.approx(2400.0), pytest.approx(600.0))
    assert c.added.filter(pl.col("kind") == "module").height == 0


def test_achieved_flops_and_utilisation_of_heavy_operators() -> None:
    from opscope.analysis.devices import match

    m, n, k = 256, 1024, 256
    dims = f"[[{m},{k}],[{k},{n}]]"
    a, b = _Builder(), _Builder()
    for s in range(3):
        for bld, kus in ((a, 400.0), (b, 100.0)):
            bld.step(
                s,
                [
                    {
                        "name": "aten::mm",
                        "us": 20,
                        "dims": dims,
                        "types": '["float","float"]',
                        "kernel": "gemm",
                        "kernel_us": kus,
                    }
                ],
            )
    gpu = "NVIDIA A100-SXM4-80GB"
    c = compare(a.profile(device=gpu), b.profile(device=gpu))
    r = c.roofline.filter(pl.col("key") == "aten::mm").row(0, named=True)
    flops = 3 * 2 * m * n * k  # three calls, 2mnk each (independent of the formula module)
    assert r["before_tflops"] == pytest.approx(flops / (3 * 400e-6) / 1e12, rel=1e-9)
    assert r["after_tflops"] == pytest.approx(flops / (3 * 100e-6) / 1e12, rel=1e-9)
    spec = match(gpu)
    assert spec is not None and spec.mem_bw
    peak = spec.peak("fp32", "matrix")
    assert peak
    assert r["after_flops_util"] == pytest.approx(r["after_tflops"] * 1e12 / peak, rel=1e-9)
    assert r["after_bw_util"] == pytest.approx(r["after_gbps"] * 1e9 / spec.mem_bw, rel=1e-9)
    # the summary's utilisation rows name the layer's GEMM by its problem size
    metrics = c.summary.get_column("metric").to_list()
    key = f"fwd · GEMM M={m} N={n} K={k} · fp32"
    assert f"bandwidth utilisation ({key})" in metrics
    assert f"FLOP/s utilisation ({key})" in metrics
    h = c.heavy.filter(pl.col("key") == key).row(0, named=True)
    assert h["after_flops_util"] == pytest.approx(flops / (3 * 100e-6) / peak, rel=1e-9)


def test_steps_are_assigned_by_time_when_the_reader_left_them_out() -> None:
    before, after = _planted(1000, seed=1), _planted(250, seed=2)
    # an event outside every step must not count
    before.events.append(
        {
            "id": len(before.events),
            "kind": "cpu_op",
            "name": "aten::X",
            "ts_ns": before.t + 10**6,
            "dur_ns": 10**9,
        }
    )

    def bare(b: _Builder) -> Profile:
        return b.profile().with_tables(
            events=b.profile().events.with_columns(pl.lit(None, dtype=pl.Int32).alias("step"))
        )

    c = compare(bare(before), bare(after))
    x = _row(c, "op", "aten::X")
    assert x["before_us"] == pytest.approx(sum(before.planted["aten::X"]), abs=1e-6)
    assert x["calls_before"] == 5
    assert c.sides.get_column("step_source").to_list() == ["ProfilerStep events"] * 2


def test_a_kernel_under_recursive_ops_counts_once_per_row() -> None:
    a, b = _Builder(), _Builder()
    for s in range(3):
        for bld, kus in ((a, 300.0), (b, 100.0)):
            bld.step(
                s,
                [
                    {
                        "name": "aten::sum",
                        "child": "aten::sum",
                        "us": 20,
                        "kernel": "reduce",
                        "kernel_us": kus,
                    },
                    {"name": "aten::relu", "us": 5, "kernel": "relu_k", "kernel_us": 10},
                ],
            )
    c = compare(a.profile(), b.profile())
    r = _row(c, "op", "aten::sum")
    assert r["before_us"] == pytest.approx(sum(a.kernel_planted["reduce"]))  # not twice
    assert r["after_us"] == pytest.approx(sum(b.kernel_planted["reduce"]))
    assert r["calls_before"] == 6  # both levels are calls


_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _loader_trace(path: Path, loader_us: list[float]) -> Profile:
    """A Kineto trace whose steps each load a batch (``loader_us[i]`` µs in the DataLoader),
    then launch one 900 µs kernel; read with the loader."""
    ev: list[dict[str, Any]] = []
    t = 1000.0
    for s, lu in enumerate(loader_us):
        step0 = t
        ev.append({"ph": "X", "cat": "cpu_op", "name": _LOADER, "pid": 1, "tid": 1, "ts": t,
                   "dur": lu})  # fmt: skip
        t += lu + 10
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t,
                   "dur": 20})  # fmt: skip
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 1, "ts": t + 5, "dur": 5, "args": {"correlation": s + 1}})  # fmt: skip
        kargs = {"correlation": s + 1, "stream": 7, "device": 0}
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 15,
                   "dur": 900, "args": kargs})  # fmt: skip
        t += 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
                   "tid": 1, "ts": step0 - 1, "dur": t - step0 + 1})  # fmt: skip
        t += 50
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return load(path, cache=False)


def test_data_loading_change_is_a_summary_row_with_its_own_significance(tmp_path: Path) -> None:
    # num_workers 0 -> 4: the DataLoader's time per step falls; no kernel moves
    before = [40_000.0, 42_000.0, 39_000.0, 41_000.0, 45_000.0, 40_500.0]
    after = [1_000.0, 1_300.0, 900.0, 1_200.0, 1_100.0, 1_050.0]
    c = compare(
        _loader_trace(tmp_path / "a.json", before), _loader_trace(tmp_path / "b.json", after)
    )
    rows = {r["metric"]: r for r in c.summary.to_dicts()}
    row = rows["data loading (host, median of the profiled steps)"]
    assert row["before"] == statistics.median(before)
    assert row["after"] == statistics.median(after)
    assert row["speedup"] == pytest.approx(statistics.median(before) / statistics.median(after))
    assert row["verdict"] == "gain"
    # the same rule on the same per-step values as the step time's
    want = step_time_change([u * 1000 for u in before], [u * 1000 for u in after])
    assert (row["verdict"], row["noise_us"]) == (want["verdict"], want["noise_us"])
    # the kernel rows did not move: the change is the DataLoader's alone
    assert _row(c, "kernel", "gemm")["verdict"] == "noise"


def test_no_data_loading_row_without_a_dataloader() -> None:
    c = compare(_planted(1000).profile(), _planted(900, seed=3).profile())
    assert not any("data loading" in m for m in c.summary.get_column("metric").to_list())
