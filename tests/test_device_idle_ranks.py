"""Device idle on a multi-rank profile is a share of one rank's step, never a sum over ranks set
against one step (the two-rank HTA sample read "device idle 107% of the step")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import opscope
from conftest import shared_trace
from helpers import planted
from opscope.advise import advise

STEPS = 3


def _rank_trace(rank: int, idle_gap_us: float) -> dict[str, Any]:
    """Three steps of two 100 µs kernels, the second launched ``idle_gap_us`` after the first
    ends (a host stall), one stream."""
    t = planted._Trace()
    bf = ["c10::BFloat16", "c10::BFloat16"]
    for s in range(STEPS):
        start = t.host
        first = len(t.ev)
        t.op("aten::mul", [[64, 64], [64, 64]], bf, [("elementwise_kernel", 100.0)])
        t.host = t.dev + idle_gap_us - 4.0  # the host stalls; the kernel starts 4 µs after
        t.op("aten::add", [[64, 64], [64, 64]], bf, [("elementwise_kernel", 100.0)], gap=0.0)
        end = t.dev + 10.0
        t.host = end + 5.0
        t.ev.insert(
            first,
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
             "tid": 1, "ts": start - 1.0, "dur": end - start + 1.0},
        )  # fmt: skip
        t.dev = t.host + 10.0
    return {
        "traceEvents": t.ev,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
    }


def _idle_and_step_us(doc: dict[str, Any]) -> tuple[float, float]:
    """(device idle per step, mean step) from the raw events: kernels belong to the step whose
    range holds their launch; idle = the gaps between a step's kernels, clipped to the step's
    range."""
    ev = doc["traceEvents"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e["name"] == "cudaLaunchKernel"}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    idle = 0.0
    for st in steps:
        lo, hi = st["ts"], st["ts"] + st["dur"]
        mine = [k for k in kernels if lo <= launch[k["args"]["correlation"]] <= hi]
        end = None
        for k in sorted(mine, key=lambda k: k["ts"]):
            if end is not None:
                idle += max(min(k["ts"], hi) - max(end, lo), 0.0)
            end = k["ts"] + k["dur"] if end is None else max(end, k["ts"] + k["dur"])
    return idle / len(steps), sum(s["dur"] for s in steps) / len(steps)


def test_two_ranks_idle_is_the_first_ranks_share_of_its_step(tmp_path: Path) -> None:
    docs = {0: _rank_trace(0, 300.0), 1: _rank_trace(1, 500.0)}
    for r, doc in docs.items():
        (tmp_path / f"rank-{r}.json").write_text(json.dumps(doc))
    idle0, step0 = _idle_and_step_us(docs[0])
    idle1, _ = _idle_and_step_us(docs[1])
    assert idle0 == pytest.approx(300.0) and idle1 == pytest.approx(500.0)
    assert (idle0 + idle1) / step0 > 1.0  # the old sum over ranks: more than the step
    profile = opscope.load(tmp_path)
    assert sorted(profile.kernels.get_column("rank").unique().to_list()) == [0, 1]
    (f,) = advise(profile).by_rule("overhead-device-idle")
    assert f.evidence["figures"]["idle_us_per_step"] == pytest.approx(idle0, abs=1e-3)
    assert f.evidence["figures"]["step_us"] == pytest.approx(step0, abs=1e-3)
    assert f.saving_pct == pytest.approx(100 * idle0 / step0, abs=1e-3)
    assert f.title == f"device idle {100 * idle0 / step0:.0f}% of the step"
    assert f.saving_pct <= 100.0


def test_asynchronous_steps_idle_never_above_the_step(tmp_path: Path) -> None:
    """Host-side step windows much shorter than their device work (the host runs ahead, as in
    a real recording without syncs): the gaps between a step's kernels count only inside its
    window, so the idle is never more than the step (a recording on an H200 read "215% of the
    step" when they counted whole)."""
    from opscope.advise.rules.overhead import _idle_ns

    t = planted._Trace()
    bf = ["c10::BFloat16", "c10::BFloat16"]
    for s in range(STEPS):
        start = t.host
        first = len(t.ev)
        for _ in range(4):
            t.op("aten::mm", [[64, 64], [64, 64]], bf, [("gemm", 400.0)], gap=150.0)
        t.ev.insert(
            first,
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
             "tid": 1, "ts": start - 1.0, "dur": t.host - start + 1.0},
        )  # fmt: skip
    doc = {"traceEvents": t.ev}
    path = tmp_path / "async.json"
    path.write_text(json.dumps(doc))
    idle, step = _idle_and_step_us(doc)
    assert step < 3 * 150.0  # each step's own kernel gaps, counted whole, exceed its window
    assert _idle_ns(opscope.load(path)) / 1e3 / STEPS == pytest.approx(idle, abs=1e-3)
    assert idle <= step
    for f in advise(opscope.load(path)).by_rule("overhead-device-idle"):
        assert f.saving_pct <= 100.0


def test_hta_two_rank_sample_idle_under_the_step() -> None:
    """The HTA two-rank sample: the directory's device-idle finding is rank 0's alone (as
    advised on rank 0's file), under 100% of the step."""
    d = shared_trace("multi_rank/hta_sampled_128rank_job")
    both = advise(opscope.load(d)).by_rule("overhead-device-idle")
    alone = advise(opscope.load(d / "rank-0.json.gz")).by_rule("overhead-device-idle")
    assert len(both) == len(alone) == 1
    assert both[0].saving_pct <= 100.0
    fb, fa = both[0].evidence["figures"], alone[0].evidence["figures"]
    assert fb["idle_us_per_step"] == pytest.approx(fa["idle_us_per_step"])
    assert fb["step_us"] == pytest.approx(fa["step_us"])
    assert both[0].title == alone[0].title
