"""Memory: peak, live at the peak by op/module/line, churn, fragmentation, never-freed."""

from __future__ import annotations

import gzip
import json

import polars as pl

import opscope.analysis  # noqa: F401
from conftest import shared_trace
from helpers.synth import USER_FILE, Builder
from opscope.analysis.registry import run
from opscope.ingest import load
from opscope.report.sections_md import memory_md


def test_planted_allocations() -> None:
    b = Builder()
    s0 = b.stack([(USER_FILE, 40, "forward")])
    s1 = b.stack([(USER_FILE, 41, "forward")])
    st = b.step(0, 0, 1000)
    a = b.op("aten::empty", 10, 5, parent=st, step=0, stack=s0, module="Net/A")
    c = b.op("aten::empty", 20, 5, parent=st, step=0, stack=s1, module="Net/B")
    # plan: +100 @A (t10), +300 @B (t20), -100 (t30), +50 @A (t40, never freed), -300 (t60)
    # allocated after each: 100, 400, 300, 350, 50 -> peak 400 at t20; reserved 1024 throughout
    plan = [
        (10, 100, 1, a),
        (20, 300, 2, c),
        (30, -100, 1, None),
        (40, 50, 3, a),
        (60, -300, 2, None),
    ]
    total = 0
    for ts, nb, addr, op in plan:
        total += nb
        b.alloc(ts, nb, addr=addr, op=op, total=total, reserved=1024, step=0)
    res = run("memory", b.build())
    pk = res.peaks.row(0, named=True)  # type: ignore[attr-defined]
    assert pk["peak_allocated"] == 400 and pk["peak_ts_ns"] == 20_000
    assert pk["fragmentation"] == 1024 - 400
    live = res.live_at_peak  # type: ignore[attr-defined]
    assert dict(zip(live["line"].to_list(), live["bytes"].to_list(), strict=True)) == {
        40: 100,
        41: 300,
    }
    assert set(live["module"].to_list()) == {"Net/A", "Net/B"}
    nf = res.never_freed  # type: ignore[attr-defined]
    assert nf.select("line", "bytes", "allocations").rows() == [(40, 50, 1)]
    ch = res.churn.row(0, named=True)  # type: ignore[attr-defined]
    assert (ch["allocated_bytes"], ch["freed_bytes"], ch["allocations"], ch["frees"]) == (
        450,
        400,
        3,
        2,
    )


def test_without_totals_uses_running_sum() -> None:
    b = Builder()
    b.op("aten::empty", 0, 1)
    for ts, nb, addr in [(1, 64, 1), (2, 32, 2), (3, -64, 1)]:
        b.alloc(ts, nb, addr=addr, op=0, total=None, reserved=None)
    res = run("memory", b.build())
    assert res.peaks.row(0, named=True)["peak_allocated"] == 96  # type: ignore[attr-defined]
    tl = res.timeline  # type: ignore[attr-defined]
    assert tl.get_column("allocated").to_list() == [64, 96, 32]
    assert res.never_freed.get_column("bytes").to_list() == [32]  # type: ignore[attr-defined]
    assert isinstance(tl, pl.DataFrame)


def test_host_memory_fragmentation_is_na() -> None:
    # Host memory has no caching allocator: Kineto writes Total Reserved 0 for it, and 0 - 64
    # would be a negative "fragmentation". Device memory keeps reserved - allocated.
    b = Builder()
    b.op("aten::empty", 0, 1)
    b.alloc(1, 64, addr=1, op=0, total=64, reserved=0)
    b.memory[-1]["device_type"] = 0
    b.memory[-1]["device"] = -1
    b.alloc(2, 32, addr=2, op=0, total=32, reserved=2048)
    res = run("memory", b.build())
    frag = {r["device_type"]: r["fragmentation"] for r in res.peaks.iter_rows(named=True)}  # type: ignore[attr-defined]
    assert frag == {0: None, 1: 2048 - 32}
    assert "n/a for host memory" in memory_md(res)


def test_real_trace_fragmentation_never_negative() -> None:
    src = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    raw = json.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
    mem = sorted((e for e in raw if e.get("name") == "[memory]"), key=lambda e: float(e["ts"]))
    want: dict[int, int | None] = {}
    for dt in {e["args"]["Device Type"] for e in mem}:
        evs = [e["args"] for e in mem if e["args"]["Device Type"] == dt]
        peak = max(a["Total Allocated"] for a in evs)
        at = next(a for a in evs if a["Total Allocated"] == peak)
        want[dt] = None if dt == 0 else at["Total Reserved"] - peak
    assert want[0] is None and 1 in want  # the trace has host and device memory
    res = run("memory", load(src))
    got = {r["device_type"]: r["fragmentation"] for r in res.peaks.iter_rows(named=True)}  # type: ignore[attr-defined]
    assert got == want
    assert all(v is None or v >= 0 for v in got.values())
