"""The shortcuts for the tiniest traces (issue 19 item 8) change nothing.

A profile without allocator events skips the memory analysis' queries (its five tables built
empty from the plan's schema), one without link rows the cluster's link matrix, one without host
ops the op table's forest walk and breakdown's host clips. ``opscope.analysis.tree.SHORTCUTS``
switches them off: each table must then be equal (schema and rows) to the shortcut's, and the
whole report byte for byte (``test_report_speed_empty._same``). The inputs: the 4-rank Ascend
export's ranks that hold only communication files (15 and 23 events, no memory row, no host op),
the two-rank shared export, and planted traces with and without memory rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import SHARED_TRACES
from opscope.analysis import breakdown, cluster, hotspots, memory, tree
from opscope.analysis.registry import Options
from test_report_speed_empty import _kernels_only, _same

ASCEND_DATA = Path("/work/ascend_data")
_COMM_ONLY = ["st/level2/rank_1_ascend_pt", "st/level2/rank_3_ascend_pt"]


def _with_memory(path: Path) -> Path:
    """A CPU trace: two nested ops, three allocations (one freed), so memory has rows."""
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 100.0,
         "dur": 50.0, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110.0,
         "dur": 30.0, "args": {}},
    ]  # fmt: skip
    for ts, nbytes, addr in [(112.0, 4096, 1), (115.0, 1024, 2), (130.0, -4096, 1)]:
        ev.append(
            {
                "ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                "ts": ts, "s": "t", "args": {"Addr": addr, "Bytes": nbytes, "Device Type": 1,
                                             "Device Id": 0},
            }
        )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def _tables(path: Path, on: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    """memory, cluster links, hotspots' op table and breakdown of ``path``, shortcuts on/off."""
    monkeypatch.setattr(tree, "SHORTCUTS", on)
    prof = opscope.load(path, cache=False)  # a fresh Profile: nothing memoised
    m = memory.memory(prof, Options())
    cl = cluster.cluster(prof, Options())
    b = breakdown.breakdown(prof, Options())
    return {
        "memory.timeline": m.timeline,
        "memory.peaks": m.peaks,
        "memory.live_at_peak": m.live_at_peak,
        "memory.churn": m.churn,
        "memory.never_freed": m.never_freed,
        "cluster.links": cl.links,
        "cluster.slow_links": cl.slow_links,
        "op_times": hotspots.op_times(prof),
        "breakdown.steps": b.steps,
        "breakdown.streams": b.streams,
        "breakdown.queue": b.queue,
    }


def _equal_tables(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    fast = _tables(path, True, monkeypatch)
    full = _tables(path, False, monkeypatch)
    for k, df in full.items():
        assert_frame_equal(fast[k], df, check_row_order=True), (path, k)
    return fast


@pytest.mark.parametrize("rel", _COMM_ONLY)
def test_communication_only_ranks(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = ASCEND_DATA / rel
    if not p.exists():
        pytest.skip(f"ascend_data export not found: {p}")
    prof = opscope.load(p, cache=False)
    # what the shortcuts stand on: no allocator event, no host op, every event a collective
    assert prof.memory.height == 0 and prof.ops.height == 0
    assert set(prof.events.get_column("kind").cast(pl.String)) == {"communication"}
    t = _equal_tables(p, monkeypatch)
    assert t["memory.peaks"].height == 0 and t["cluster.links"].height == 0
    assert t["op_times"].height == 0
    # breakdown still computes the collectives' time: the shortcuts only skip empty parts
    assert t["breakdown.steps"].get_column("communication_ns").sum() > 0
    _same(p, monkeypatch)


def test_two_rank_shared_export(monkeypatch: pytest.MonkeyPatch) -> None:
    p = SHARED_TRACES / "ascend/small_two_rank/test_rank_0"
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    t = _equal_tables(p, monkeypatch)
    assert t["memory.timeline"].height > 0  # memory rows: the full path ran both times


def test_planted_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels only (no memory, no op, no link) and ops with memory rows (the full path)."""
    kern = _kernels_only(tmp_path / "k.json")
    t = _equal_tables(kern, monkeypatch)
    assert t["memory.timeline"].height == 0
    # two streams busy 40+5+41+6 and 90 ns over the kernels' span: breakdown is not skipped
    assert t["breakdown.streams"].height == 2
    mem = _with_memory(tmp_path / "m.json")
    t = _equal_tables(mem, monkeypatch)
    assert t["memory.timeline"].height == 3
    # 4096 then 1024 bytes live (5120 at the peak, 115 µs), the 4096 freed at 130 µs
    assert t["memory.peaks"].get_column("peak_allocated").to_list() == [5120]
    assert t["memory.never_freed"].get_column("bytes").to_list() == [1024]
    assert t["op_times"].height == 2
    _same(kern, monkeypatch)
    _same(mem, monkeypatch)


def test_the_memory_shortcut_runs_no_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without allocator events the memory tables come from the plan's schema: the plan is
    never run; with events its five tables are run, together (one collect_all)."""
    calls: list[int] = []
    real = pl.collect_all

    def spy(plans: Any, *a: Any, **k: Any) -> Any:
        calls.append(len(plans))
        return real(plans, *a, **k)

    monkeypatch.setattr(pl, "collect_all", spy)
    memory.memory(opscope.load(_kernels_only(tmp_path / "k.json"), cache=False), Options())
    assert calls == []
    memory.memory(opscope.load(_with_memory(tmp_path / "m.json"), cache=False), Options())
    assert calls == [5]


def test_breakdown_skips_the_device_wide_split_only_under_step_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ascend steps with ``free_ns`` on every row: the device-wide idle split (nulled for them)
    is not computed, only the per-stream one; the steps table is the same (checked above and
    here); a GPU trace without such figures computes both. (The plans' path: the NumPy one,
    taken first, declined here; it is compared with the plans in test_breakdown_arrays.py.)"""
    monkeypatch.setattr(breakdown, "_breakdown_arrays", lambda inp, per_trace: None)
    calls: list[tuple[str, ...]] = []
    real = breakdown.idle_plan

    def spy(iv: Any, lanes: Any, keys: list[str]) -> Any:
        calls.append(tuple(keys))
        return real(iv, lanes, keys)

    monkeypatch.setattr(breakdown, "idle_plan", spy)
    for rel, want in [
        ("ascend/small_two_rank/test_rank_0", [("rank", "step", "device", "stream")]),
        (
            "gpu/hta_triton_a100.json.gz",
            [("rank", "step"), ("rank", "step", "device", "stream")],
        ),
    ]:
        p = SHARED_TRACES / rel
        if not p.exists():
            pytest.skip(f"shared trace not found: {p}")
        calls.clear()
        monkeypatch.setattr(tree, "SHORTCUTS", True)
        fast = breakdown.breakdown(opscope.load(p, cache=False), Options())
        assert calls == want, rel
        monkeypatch.setattr(tree, "SHORTCUTS", False)
        full = breakdown.breakdown(opscope.load(p, cache=False), Options())
        assert_frame_equal(fast.steps, full.steps)
        # the Ascend step's idle split is null (its figures are the file's); the GPU's is not
        nulls = fast.steps.get_column("idle_other_ns").null_count()
        assert nulls == (fast.steps.height if rel.startswith("ascend") else 0), rel
