"""Critical path on a synthetic profile with a known answer, and on a real A100 trace."""

from __future__ import annotations

import gzip
import json
import time
from collections import defaultdict
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.critical_path import IDLE_OP, critical_path, longest_path
from opscope.analysis.critical_path_graph import _nodes
from opscope.analysis.registry import Options
from opscope.model import Profile


def _synthetic() -> Profile:
    # host thread 1: launch L1 [10,15], launch L2 [20,25], cudaDeviceSynchronize [30,90]
    # stream 7: K1 [16,50] (from L1); stream 8: K2 [26,80] (from L2); step 0 = [0,100]
    ev = [
        {"id": 1, "kind": "cpu_op", "name": "opA", "tid": 1, "ts_ns": 5, "dur_ns": 12, "depth": 0},
        {"id": 2, "kind": "cpu_op", "name": "opB", "tid": 1, "ts_ns": 18, "dur_ns": 10, "depth": 0},
        {
            "id": 10,
            "kind": "runtime",
            "name": "cudaLaunchKernel",
            "tid": 1,
            "ts_ns": 10,
            "dur_ns": 5,
            "op_id": 1,
            "parent_id": 1,
            "depth": 1,
        },
        {
            "id": 11,
            "kind": "runtime",
            "name": "cudaLaunchKernel",
            "tid": 1,
            "ts_ns": 20,
            "dur_ns": 5,
            "op_id": 2,
            "parent_id": 2,
            "depth": 1,
        },
        {
            "id": 12,
            "kind": "runtime",
            "name": "cudaDeviceSynchronize",
            "tid": 1,
            "ts_ns": 30,
            "dur_ns": 60,
            "depth": 0,
        },
        {
            "id": 20,
            "kind": "kernel",
            "name": "k1",
            "tid": 7,
            "stream": 7,
            "device": 0,
            "ts_ns": 16,
            "dur_ns": 34,
            "launch_id": 10,
            "op_id": 1,
        },
        {
            "id": 21,
            "kind": "kernel",
            "name": "k2",
            "tid": 8,
            "stream": 8,
            "device": 0,
            "ts_ns": 26,
            "dur_ns": 54,
            "launch_id": 11,
            "op_id": 2,
        },
    ]
    events = pl.DataFrame(ev).with_columns(pl.lit(0).alias("step"), pl.lit(0).alias("rank"))
    steps = pl.DataFrame({"rank": [0], "step": [0], "ts_ns": [0], "dur_ns": [100]})
    return Profile.from_tables(events=events, steps=steps)


def test_synthetic_known_path() -> None:
    res = critical_path(_synthetic(), Options())
    # by hand: the thread does nothing tracked on 0..5 (before opA) and 17..18 (between opA and
    # opB): explicit idle nodes (no event id), never part of the next op. Then opA's launch
    # 5..15 and its tail 15..17, opB up to L2's end (18..25), K2 (26..80), the sync's tail (80..90)
    assert res.path.get_column("id").to_list() == [None, 10, None, None, 11, 21, 12]
    assert res.path.get_column("on_path_ns").to_list() == [5, 10, 2, 1, 7, 54, 10]
    s = res.steps.row(0, named=True)
    assert s["path_ns"] == 89 and s["step_ns"] == 90 and s["host_step_ns"] == 100
    assert s["device_ns"] == 54 and s["host_ns"] == 35
    ops = dict(zip(res.ops.get_column("op"), res.ops.get_column("on_path_ns"), strict=True))
    assert ops == {"opA": 12, "opB": 61, "cudaDeviceSynchronize": 10, IDLE_OP: 6}
    assert res.to_json()["steps"][0]["path_us"] == pytest.approx(0.089)


def _blocking_copy() -> Profile:
    # thread 1: div launches K [10,12] at 10..11; then nothing tracked 12..20; aten::item 20..300
    # with a cudaMemcpyAsync 21..290 whose copy C runs 250..289 on stream 7 behind a long kernel
    # L 30..250 (launched by mm at 13..14 inside aten::mm 12.5..14.5); then aten::div 300..310
    # launching D at 301..302 (the op of the issue: must not carry the wait)
    def op(i: int, name: str, ts: int, dur: int) -> dict[str, Any]:
        return {"id": i, "kind": "cpu_op", "name": name, "tid": 1, "ts_ns": ts, "dur_ns": dur}

    def rt(i: int, name: str, ts: int, dur: int, parent: int) -> dict[str, Any]:
        return {"id": i, "kind": "runtime", "name": name, "tid": 1, "ts_ns": ts, "dur_ns": dur,
                "op_id": parent, "parent_id": parent}  # fmt: skip

    def dev(i: int, kind: str, ts: int, dur: int, launch: int, parent: int) -> dict[str, Any]:
        return {"id": i, "kind": kind, "name": f"dev{i}", "tid": 7, "stream": 7, "device": 0,
                "ts_ns": ts, "dur_ns": dur, "launch_id": launch, "op_id": parent}  # fmt: skip

    ev = [
        op(1, "aten::add", 9, 3), rt(2, "cudaLaunchKernel", 10, 1, 1),
        op(3, "aten::mm", 12, 3), rt(4, "cudaLaunchKernel", 13, 1, 3),
        op(5, "aten::item", 20, 280), rt(6, "cudaMemcpyAsync", 21, 269, 5),
        op(7, "aten::div", 300, 10), rt(8, "cudaLaunchKernel", 301, 1, 7),
        dev(20, "kernel", 11, 1, 2, 1), dev(21, "kernel", 30, 220, 4, 3),
        dev(22, "memcpy", 250, 39, 6, 5), dev(23, "kernel", 303, 2, 8, 7),
    ]  # fmt: skip
    events = pl.DataFrame(ev).with_columns(pl.lit(0).alias("step"), pl.lit(0).alias("rank"))
    steps = pl.DataFrame({"rank": [0], "step": [0], "ts_ns": [0], "dur_ns": [320]})
    return Profile.from_tables(events=events, steps=steps)


def test_blocking_copy_carries_the_wait_not_the_next_op() -> None:
    p = _blocking_copy()
    res = critical_path(p, Options())
    got = res.path.select("start_ns", "end_ns", "op", "on_path_ns").rows()
    # by hand: nothing tracked 0..9; add's launch 9..11 and its tail 11..12; mm's launch
    # 12..14; mm's kernel L 30..250 and the copy 250..289, which the blocking cudaMemcpyAsync
    # waited for (a wait edge from its copy: its own time counts from 289); item's tail
    # 290..300; div's launch 300..302 and its kernel 303..305
    assert got == [
        (0, 9, IDLE_OP, 9), (9, 11, "aten::add", 2), (11, 12, "aten::add", 1),
        (12, 14, "aten::mm", 2), (30, 250, "aten::mm", 220), (250, 289, "aten::item", 39),
        (21, 290, "aten::item", 1), (290, 300, "aten::item", 10), (300, 302, "aten::div", 2),
        (303, 305, "aten::div", 2),
    ]  # fmt: skip
    ops = dict(zip(res.ops.get_column("op"), res.ops.get_column("on_path_ns"), strict=True))
    assert ops["aten::div"] == 4  # its own time only, never the 270 ns wait before it
    # the thread's empty time 15..20 is an explicit idle node, not part of aten::item's node
    nodes = _nodes(p).filter(pl.col("lane_kind") == "host").sort("start_ns")
    assert (15, 20, IDLE_OP) in nodes.select("start_ns", "end_ns", "op").rows()
    s = res.steps.row(0, named=True)
    assert s["path_ns"] == 288 and s["step_ns"] == 305


def test_longest_path_is_linear_time() -> None:
    """A chain plus skip edges: right on 200k nodes, and linear, judged by the ratio of two
    sizes timed alternately in this process (min of 3 each), not by a wall-clock limit that a
    busy machine could break: a quadratic walk gives ~100x for 10x the nodes, linear ~10x."""

    def chain(n: int) -> tuple[Any, ...]:
        ids = np.arange(n)
        start = ids * 10
        src = np.concatenate([ids[:-1], ids[:-2]])
        dst = np.concatenate([ids[1:], ids[2:]])
        return ids, start, start + 8, src, dst

    small, big = chain(20_000), chain(200_000)
    path, _, length = longest_path(*big)
    assert len(path) == 200_000 and length == 8 * 200_000
    best = {20_000: float("inf"), 200_000: float("inf")}
    for _ in range(3):
        for n, args in ((20_000, small), (200_000, big)):
            t0 = time.perf_counter()
            longest_path(*args)
            best[n] = min(best[n], time.perf_counter() - t0)
    assert best[200_000] / best[20_000] < 40, best


def test_alexnet_a100_bounds() -> None:
    path = shared_trace("gpu/hta_alexnet_a100_cuda_sync.json.gz")
    from opscope.ingest import kineto

    profile = kineto.read_kineto(path, cache=False)
    res = critical_path(profile, Options())
    # independent: per ProfilerStep, each stream's busy time from the raw JSON, kernels assigned
    # to the step their launching runtime call (same correlation id) falls in
    data = json.loads(gzip.decompress(path.read_bytes()))
    xs = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in xs
        if e["name"].startswith("ProfilerStep#")
    }
    if not steps:  # this trace has no ProfilerStep: the whole trace is one step (-1)
        steps = {-1: (min(e["ts"] for e in xs), max(e["ts"] + e.get("dur", 0) for e in xs))}
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in xs
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    busy: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for e in xs:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        t = launch_ts.get(e["args"].get("correlation"))
        for n, (a, b) in steps.items():
            if t is not None and a <= t <= b:
                busy[n][e["args"].get("stream", e["tid"])] += e["dur"]
    checked = 0
    for s in res.steps.iter_rows(named=True):
        if s["step"] not in steps:
            continue
        a, b = steps[s["step"]]
        assert s["path_ns"] <= (b - a) * 1000 + 1000
        longest_stream = max(busy[s["step"]].values(), default=0.0)
        assert longest_stream > 0
        assert s["path_ns"] >= longest_stream * 1000 - 1000
        checked += 1
    assert checked >= 1


def test_ascend_step_bounds_against_step_trace_time() -> None:
    import csv

    root = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    from opscope.ingest import ascend

    res = critical_path(ascend.read_ascend(root, cache=False), Options())
    out = root / "ASCEND_PROFILER_OUTPUT"
    with (out / "step_trace_time.csv").open(newline="") as f:
        steps = {int(r["Step"]): r for r in csv.DictReader(f)}
    # compute kernels of each step from kernel_details.csv, summed per stream
    busy: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    with (out / "kernel_details.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            busy[int(r["Step Id"])][r["Stream ID"]] += float(r["Duration(us)"])
    checked = 0
    for s in res.steps.iter_rows(named=True):
        if s["step"] not in steps:
            continue
        st = steps[s["step"]]
        # the whole step is at least its computing + non-overlapped communication + free time
        step_us = (
            float(st["Computing"]) + float(st["Communication(Not Overlapped)"]) + float(st["Free"])
        )
        assert s["path_ns"] <= step_us * 1000 * 1.01
        assert s["path_ns"] >= max(busy[s["step"]].values()) * 1000 * 0.99
        checked += 1
    assert checked == len(steps)


def test_empty_profile_gives_empty_results() -> None:
    from opscope.analysis.occupancy import utilisation
    from opscope.analysis.roofline import roofline

    p = Profile()
    assert critical_path(p, Options()).steps.height == 0
    assert roofline(p, Options()).to_json() == []
    assert utilisation(p, Options()).kernels.height == 0
