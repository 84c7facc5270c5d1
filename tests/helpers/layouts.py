"""Kineto traces in the layouts real profilers write, and the odd ones they sometimes write.

Each generated trace has a host thread of nested CPU ops with steps, kernels on streams linked
by correlation ids and ``ac2g`` flows, Python frames, counters, and the ``ph: "M"`` metadata
events (process/thread names and sort indices) placed first, interleaved or last. Tracks are
numbered or named (``"Spans"``, ``"stream 7"``), tids may be negative, and some events lack
``cat``. Every value that identifies an event (pid, tid, ts, ids) differs from its neighbours',
so a reader that puts one event's field on another shows it.
"""

from __future__ import annotations

import json
import random
from typing import Any

PLACEMENTS = ("first", "interleaved", "last")


def _meta(pid: Any, tid: Any, rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"p{pid}"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 3}},
    ]
    if tid is not None:
        out.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"t{tid}"}}
        )
        out.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": rng.randint(0, 9)},
            }
        )
    return out


def layout_trace(
    seed: int,
    *,
    steps: int = 3,
    ops_per_step: int = 6,
    placement: str = "interleaved",
    string_tracks: bool = False,
    negative_tids: bool = False,
    drop_cat: float = 0.0,
) -> dict[str, Any]:
    """A whole trace (the top-level object) with the given layout."""
    rng = random.Random(seed)
    host_pid: Any = 4000 + seed % 97
    host_tid: Any = -(1000 + seed % 13) if negative_tids else 1000 + seed % 13
    bwd_tid: Any = host_tid - 1 if negative_tids else host_tid + 1
    gpu_pid: Any = "Spans" if string_tracks else seed % 4
    streams: list[Any] = ["stream 7", "stream 13"] if string_tracks else [7, 13]
    body: list[dict[str, Any]] = []
    t = 1_000_000.0 + seed
    corr = 100 + seed % 50
    seq = 0
    for s in range(steps):
        step_start = t
        body.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s + 10}",
                "pid": host_pid,
                "tid": host_tid,
                "ts": round(step_start, 3),
                "dur": 0,  # set below
                "args": {"External id": corr},
            }
        )
        step_ev = body[-1]
        corr += 1
        t += 1.25
        for i in range(ops_per_step):
            name = rng.choice(["aten::mm", "aten::add", "aten::relu", "aten::copy_"])
            op_ts = t
            dur = 10.0 + rng.randint(0, 40) + rng.choice([0.0, 0.125, 0.5])
            seq += 1
            body.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": host_pid,
                    "tid": host_tid if i % 3 else bwd_tid,
                    "ts": round(op_ts, 3),
                    "dur": dur,
                    "args": {
                        "External id": corr,
                        "Sequence number": seq,
                        "Input Dims": [[8, 16 + i], [16 + i, 4]],
                        "Input type": ["float", "float"],
                    },
                }
            )
            launch_ts = op_ts + 2.5
            body.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": host_pid,
                    "tid": host_tid if i % 3 else bwd_tid,
                    "ts": round(launch_ts, 3),
                    "dur": 4.0,
                    "args": {"External id": corr, "correlation": corr},
                }
            )
            k_ts = launch_ts + 5 + rng.randint(0, 20)
            stream = streams[i % 2]
            body.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"kernel_{name[6:]}_{i}<float>",
                    "pid": gpu_pid,
                    "tid": stream,
                    "ts": round(k_ts, 3),
                    "dur": 3.0 + i,
                    "args": {
                        "External id": corr,
                        "correlation": corr,
                        "device": 0,
                        "stream": 7 if i % 2 == 0 else 13,
                        "grid": [i + 1, 1, 1],
                        "block": [128, 1, 1],
                    },
                }
            )
            flow = {"id": corr, "cat": "ac2g", "name": "ac2g"}
            body.append(
                {
                    "ph": "s",
                    **flow,
                    "pid": host_pid,
                    "tid": host_tid if i % 3 else bwd_tid,
                    "ts": round(launch_ts, 3),
                }
            )
            body.append(
                {"ph": "f", "bp": "e", **flow, "pid": gpu_pid, "tid": stream, "ts": round(k_ts, 3)}
            )
            if rng.random() < 0.3:
                body.append(
                    {
                        "ph": "X",
                        "cat": "python_function",
                        "name": f"model.py({30 + i}): forward",
                        "pid": host_pid,
                        "tid": host_tid,
                        "ts": round(op_ts - 0.5, 3),
                        "dur": dur + 1,
                        "args": {"Python id": seq, "Python parent id": None},
                    }
                )
            corr += 1
            t = op_ts + dur + 1.5
        body.append(
            {
                "ph": "C",
                "name": "memory",
                "pid": host_pid,
                "tid": host_tid,
                "ts": round(t, 3),
                "args": {"allocated": s * 1000 + seed},
            }
        )
        step_ev["dur"] = round(t - step_start + 0.5, 3)
        t += 3
    for ev in body:
        if ev.get("cat") and rng.random() < drop_cat:
            del ev["cat"]
    meta = _meta(host_pid, host_tid, rng) + _meta(host_pid, bwd_tid, rng)
    meta += _meta(gpu_pid, None, rng) + [m for s in streams for m in _meta(gpu_pid, s, rng)[2:]]
    if placement == "first":
        events = meta + body
    elif placement == "last":
        events = body + meta
    else:
        events = list(body)
        for m in meta:
            events.insert(rng.randint(0, len(events)), m)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Generated GPU", "numSms": 10}],
        "traceEvents": events,
        "traceName": f"layout-{seed}",
    }


def layout_bytes(seed: int, *, compact: bool = False, **kw: Any) -> bytes:
    """:func:`layout_trace` as JSON text (``compact``: no spaces, as some exporters write)."""
    obj = layout_trace(seed, **kw)
    if compact:
        return json.dumps(obj, separators=(",", ":")).encode()
    return json.dumps(obj, indent=1).encode()
