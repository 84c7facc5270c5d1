"""Kernels queued before the profiler's active window (the warm-up step's, whose launches Kineto
drops) on a device that lags the host: they ran inside the first profiled step's time range but
belong to no profiled step. Seen on a real H200 recording (torch 2.11): 266 such kernels were
charged to steps by time, mixing two steps' kernels, and the device-idle rule reported "device
idle 63% of the step" on a device busy 98% of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

import opscope
from opscope.advise import advise
from opscope.doctor import diagnose

PID, TID, DEV, STREAM = 7, 7, 0, 7


def _trace() -> dict[str, Any]:
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": DEV, "tid": 0, "args": {"name": "GPU 0"}},
    ]

    def kernel(name: str, ts: float, dur: float, corr: int | None) -> None:
        args: dict[str, Any] = {"device": DEV, "stream": STREAM}
        if corr is not None:
            args["correlation"] = corr
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": DEV, "tid": STREAM,
                   "ts": ts, "dur": dur, "args": args})  # fmt: skip

    # the warm-up step's six kernels still running when profiling starts, back to back until
    # the first profiled kernel: no launch in the trace
    for i in range(6):
        kernel(f"warmup_kernel_{i}", 250.0 * i, 250.0, None)
    corr = 1
    for step, (h0, d0) in enumerate(((0.0, 1500.0), (1000.0, 2300.0)), start=1):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                   "pid": PID, "tid": TID, "ts": h0, "dur": 1000.0})  # fmt: skip
        for j in range(4):
            t = h0 + 10.0 + 200.0 * j
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": PID, "tid": TID,
                       "ts": t, "dur": 20.0, "args": {"External id": corr}})  # fmt: skip
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID,
                       "tid": TID, "ts": t + 5.0, "dur": 10.0,
                       "args": {"correlation": corr, "External id": corr}})  # fmt: skip
            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": PID,
                       "tid": TID, "ts": t + 5.0})  # fmt: skip
            kts = d0 + 200.0 * j  # the device runs 500 µs behind the host, back to back
            ev.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": corr,
                       "pid": DEV, "tid": STREAM, "ts": kts})  # fmt: skip
            kernel("elementwise_kernel", kts, 200.0, corr)
            corr += 1
    return {
        "traceEvents": ev,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "numSms": 132}],
    }


def _queued_from_raw(doc: dict[str, Any]) -> set[str]:
    """Plain Python: kernels whose correlation no launch has, starting before every launched one."""
    ev = doc["traceEvents"]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"}
    ks = [e for e in ev if e.get("cat") == "kernel"]
    first = min(k["ts"] for k in ks if k["args"].get("correlation") in launched)
    return {
        k["name"] for k in ks if k["args"].get("correlation") not in launched and k["ts"] < first
    }


def test_queued_kernels_belong_to_no_step(tmp_path: Path) -> None:
    doc = _trace()
    path = tmp_path / "lag.json"
    path.write_text(json.dumps(doc))
    p = opscope.load(path, cache=False)
    k = p.kernels
    queued = set(k.filter(pl.col("step").is_null()).get_column("name").to_list())
    assert queued == _queued_from_raw(doc) == {f"warmup_kernel_{i}" for i in range(6)}
    launched = k.filter(pl.col("launch_id").is_not_null())
    # each launched kernel keeps its launch's step, although it runs in the next host step
    assert launched.group_by("step").len().sort("step").rows() == [(1, 4), (2, 4)]


def test_no_device_idle_finding_on_a_busy_lagging_device(tmp_path: Path) -> None:
    path = tmp_path / "lag.json"
    path.write_text(json.dumps(_trace()))
    p = opscope.load(path, cache=False)
    # the device never stops: a step's kernels charged by time would mix the warm-up's
    # kernels with the step's own, 500 µs apart ("device idle 50%")
    assert advise(p).by_rule("overhead-device-idle") == []


def test_doctor_names_the_queued_kernels_not_missing_flows(tmp_path: Path) -> None:
    path = tmp_path / "lag.json"
    path.write_text(json.dumps(_trace()))
    checks = {c.id: c for c in diagnose(opscope.load(path, cache=False)).checks}
    assert checks["queued.before.profiling"].evidence["queued_before_profiling"] == 6
    assert checks["incomplete.flows"].status == "ok"
    assert checks["incomplete.flows"].evidence["kernels_without_launch"] == 0
