"""Memory: peak, live at the peak by op/module/line, churn, fragmentation, never-freed."""

from __future__ import annotations

import polars as pl

import opscope.analysis  # noqa: F401
from helpers.synth import USER_FILE, Builder
from opscope.analysis.registry import run


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
