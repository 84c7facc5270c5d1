"""Planted-issue Ascend profiler outputs: one ``*_ascend_pt`` directory per issue class of the
Ascend rules (``opscope.advise.rules.ascend_*``), with the truth written beside it.

Each output is the text layout the Ascend PyTorch profiler writes and opscope's Ascend reader
accepts: ``rank0_ascend_pt/profiler_info_0.json`` and ``ASCEND_PROFILER_OUTPUT/`` holding
``trace_view.json`` (host ops with shapes and call stacks on the Python thread, CANN calls,
``async_npu`` flows from each op to its kernels, the HCCL group slice and its per-plane tasks)
and ``kernel_details.csv`` (one row per device kernel: op type, OP State, shapes and the
PipeUtilization PMU columns of a Level1 profile: core and MTE times). A few steps
of clean work that runs close to its bound (a 4096³ bf16 MatMul and a 4096² Add at 1.1× their
bound, the figures of :mod:`helpers.planted`) plus one planted issue whose extra time (the
*planted gap*, µs per step: what a perfect fix removes) follows from the plan here, not from
opscope:

- ``affinity-rotary``: HF-style rotary embedding (``q*cos + rotate_half(q)*sin``: mul, slice,
  slice, neg, cat, mul, add) on a [8, 32, 2048, 128] bf16 tensor, every op at 1.2× its own
  bandwidth bound. Gap: their time minus one fused ``npu_rotary_mul`` that reads q and writes
  the output once (2·|q| bytes at the bandwidth, one 3 µs launch floor).
- ``affinity-add-layer-norm``: a residual add then ``layer_norm`` on [16, 2048, 4096] bf16, at
  1.2× their bounds. Gap: their time minus one fused kernel moving 2·|x| bytes.
- ``affinity-slow-add-layer-norm``: the same at 4x their bounds (25% of the bandwidth):
  ``elementwise-bandwidth`` finds the add and the layer_norm too, on the same op groups. Gap:
  as above (one fused kernel removes more than either op's own gap).
- ``comm-alignment``: an all-reduce with nothing to hide it; on each of 4 HCCS planes two SDMA
  tasks of 4 MiB (aligned to 512 B) at 20 GB/s and two of 4 MiB + 100 B at a third of that
  rate. Gap: per collective, one plane's unaligned tasks' time minus their bytes at 20 GB/s
  (the planes run side by side).
- ``comm-packet``: per step one exposed all-reduce of 64 MiB and ten of 1 MiB (msprof-analyze's
  small packet: under 16 MB over SDMA), each a 40 µs fixed cost then its bytes over 4 HCCS
  planes at 20 GB/s. Gap: the ten small ones' fixed cost (bucketed, they pay it once).
- ``dynamic-shape``: a matmul whose M changes every step (sequence lengths 1000, 1500, 2000:
  three shapes), each time compiled by ``aclopCompileAndExecute`` (2 ms, ``opCompile`` inside)
  on the task-queue thread before its kernel can start; the device waits. Gap: the compile
  time per step (the kernel starts 3 µs after the compile ends, the device was idle from the
  compile's start).
- ``fusible-sequence``: ``relu(x * s + r)`` on [8192, 2048] bf16, eight times a step, as three
  vector kernels (Muls, Add, Relu) each at 1.15x its own bound with 90% of its time in memory
  transfers (the PMU columns). Gap: their time minus one fused kernel per occurrence reading x
  and r and writing the output (3·|x| bytes at the bandwidth, one 3 µs launch floor).
- ``fusible-slow-sequence``: the same at 4x their bounds (25% of the bandwidth):
  ``elementwise-bandwidth`` finds the mul, add and relu too, on the same op groups.
- ``fusible-host-bound``: ``relu(x * s + r)`` on a small [256, 256] bf16 tensor, eight times a
  step, as three ops of 20 µs host time each launching one 2 µs vector kernel (not
  memory-bound): the device waits for the host between them. Gap: the host periods (20 + 2 µs)
  of the two ops one fused op does not issue, per occurrence.
- ``optimizer-loop``: AdamW without ``foreach``: 16 parameters of [1024, 1024] fp32, three
  per-parameter ops (mul_, add_, addcdiv_) of one kernel each inside
  ``Optimizer.step#AdamW.step``. Gap: the launch floors one op per kind would not pay,
  (48 - 3) x 3 µs (``fusion-optimizer-foreach`` gives no saving from the profile: only its
  fix, ``torch_npu.optim.NpuFusedAdamW``, is checked).
- ``clean``: the clean work alone.

``write(case, dir)`` writes ``<case>/rank0_ascend_pt`` and ``<case>.truth.json`` under ``dir``
and returns both; ``CASES`` lists the classes. Read with the device named
(``--device ascend910b2``): the output carries no peaks.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from helpers.planted import ASCEND_BF16, ASCEND_BW, Truth, _roof_us

CASES = (
    "clean",
    "affinity-rotary",
    "affinity-add-layer-norm",
    "affinity-slow-add-layer-norm",
    "comm-alignment",
    "comm-packet",
    "dynamic-shape",
    "fusible-sequence",
    "fusible-slow-sequence",
    "fusible-host-bound",
    "optimizer-loop",
)
RULES = {
    "clean": None,
    "affinity-rotary": "ascend-affinity-api",
    "affinity-add-layer-norm": "ascend-affinity-api",
    "affinity-slow-add-layer-norm": "ascend-affinity-api",
    "comm-alignment": "ascend-comm-byte-alignment",
    "comm-packet": "ascend-comm-packet",
    "dynamic-shape": "ascend-dynamic-shape",
    "fusible-sequence": "ascend-fusible-sequence",
    "fusible-slow-sequence": "ascend-fusible-sequence",
    "fusible-host-bound": "ascend-fusible-sequence",
    "optimizer-loop": "fusion-optimizer-foreach",
}
DEVICE = "ascend910b2"
LAUNCH_FLOOR_US = 3.0  # Ascend AI-core task scheduling (CANN tuning guide), as in the model
KERNEL_GAP_US = 2.0  # kernels follow each other on the stream with this gap
SDMA_ALIGNED_GBPS = 20.0  # HCCS per-plane SDMA rate of aligned tasks (real 910B traces: 15-30)
UNALIGNED_SLOWDOWN = 3.0
HCCL_FIXED_US = 40.0  # a collective's fixed cost (launch, notifies) whatever its size
BASE_US = 1_700_000_000_000  # profiler clocks are µs since the epoch

PY_PID, CANN_PID, HW_PID, HCCL_PID = 1000, 2000, 3000, 4000
MAIN_TID, ACL_TID, STREAM = 1000, 1001, 2
STACK = "/work/model/llama.py({line}): forward;\r\n/work/model/train.py(88): train_step"

KERNEL_COLUMNS = [
    "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
    "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim",
    "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
    "Output Formats", "aicore_time(us)", "aic_mte2_time(us)", "aic_fixpipe_time(us)",
    "aiv_time(us)", "aiv_mte2_time(us)", "aiv_mte3_time(us)",
]  # fmt: skip


def _us(ns: int) -> str:
    """A profiler timestamp: µs text with three decimals (no float rounding)."""
    return f"{BASE_US + ns // 1000}.{ns % 1000:03d}"


def _ns(us: float) -> int:
    return round(us * 1000)


@dataclass
class _Kernel:
    name: str
    op_type: str
    dur_us: float
    shapes: list[list[int]]
    dtype: str = "DT_BF16"
    out: list[int] | None = None
    core: str = "AI_VECTOR_CORE"
    state: str = "dynamic"
    mte: float = 0.9  # share of the kernel's time in memory transfers (PMU columns)

    def pmu(self) -> dict[str, str]:
        """The PipeUtilization columns: two thirds of the MTE time reading, a third writing."""
        d, rd, wr = self.dur_us, self.dur_us * self.mte * 2 / 3, self.dur_us * self.mte / 3
        cube = self.core == "AI_CORE"
        z = "0.000"
        return {
            "aicore_time(us)": f"{d:.3f}" if cube else z,
            "aic_mte2_time(us)": f"{rd:.3f}" if cube else z,
            "aic_fixpipe_time(us)": f"{wr:.3f}" if cube else z,
            "aiv_time(us)": z if cube else f"{d:.3f}",
            "aiv_mte2_time(us)": z if cube else f"{rd:.3f}",
            "aiv_mte3_time(us)": z if cube else f"{wr:.3f}",
        }


class _Output:
    """One rank's trace_view events and kernel rows, on a host and a device clock (ns)."""

    def __init__(self) -> None:
        self.ev: list[dict[str, Any]] = [
            _meta("process_name", PY_PID, 0, "Python"),
            _meta("thread_name", PY_PID, MAIN_TID, f"Thread {MAIN_TID}"),
            _meta("thread_name", PY_PID, ACL_TID, f"Thread {ACL_TID}"),
            _meta("process_name", CANN_PID, 0, "CANN"),
            _meta("process_name", HW_PID, 0, "Ascend Hardware"),
            _meta("thread_name", HW_PID, STREAM, f"Stream {STREAM}"),
            _meta("process_name", HCCL_PID, 0, "HCCL"),
            _meta("thread_name", HCCL_PID, 0, "Group 0 Communication"),
            *[_meta("thread_name", HCCL_PID, p, f"Plane {p - 1}") for p in range(1, 5)],
        ]
        self.rows: list[dict[str, Any]] = []
        self.host = 1_000_000  # ns
        self.dev = 1_100_000  # where the next kernel may start
        self.flow = 0
        self.task = 0
        self.step = 0

    def op(
        self,
        name: str,
        dims: list[list[int]],
        types: list[str],
        kernels: list[_Kernel],
        *,
        line: int = 42,
        not_before_ns: int = 0,
        host_ns: int | None = None,
    ) -> int:
        """A host op on the Python thread launching ``kernels`` back to back; returns the
        first kernel's start (ns). ``not_before_ns``: no kernel starts earlier (a compile);
        ``host_ns``: the op's host time (default 4 µs + 3 µs per kernel)."""
        ts = self.host
        dur = host_ns if host_ns is not None else 4_000 + 3_000 * len(kernels)
        self.ev.append(
            {
                "ph": "X", "cat": "cpu_op", "name": name, "pid": PY_PID, "tid": MAIN_TID,
                "ts": _us(ts), "dur": dur / 1000,
                "args": {
                    "Sequence number": -1, "Fwd thread id": 0,
                    "Input Dims": ";\r\n".join(",".join(map(str, d)) for d in dims),
                    "Input type": ";\r\n".join(types),
                    "Call stack": STACK.format(line=line),
                },
            }
        )  # fmt: skip
        first = -1
        for i, k in enumerate(kernels):
            lts = ts + 1_000 + 3_000 * i
            kts = max(self.dev + _ns(KERNEL_GAP_US), lts + 3_000, not_before_ns)
            first = kts if first < 0 else first
            self.flow += 1
            self.task += 1
            self.ev += [
                {"ph": "s", "bp": "e", "name": "torch_to_npu", "id": self.flow, "pid": PY_PID,
                 "tid": MAIN_TID, "ts": _us(lts), "cat": "async_npu"},
                {"ph": "f", "bp": "e", "name": "torch_to_npu", "id": self.flow, "pid": HW_PID,
                 "tid": STREAM, "ts": _us(kts), "cat": "async_npu"},
            ]  # fmt: skip
            out = k.out if k.out is not None else k.shapes[0]
            self.rows.append(
                {
                    "Step Id": self.step, "Model ID": 4294967295, "Task ID": self.task,
                    "Stream ID": STREAM, "Name": f"{k.name}_{self.task}", "Type": k.op_type,
                    "OP State": k.state, "Accelerator Core": k.core,
                    "Start Time(us)": _us(kts), "Duration(us)": f"{k.dur_us:.3f}",
                    "Wait Time(us)": 0, "Block Dim": 24,
                    "Input Shapes": ";".join(",".join(map(str, s)) for s in k.shapes),
                    "Input Data Types": ";".join(k.dtype.removeprefix("DT_") for _ in k.shapes),
                    "Input Formats": ";".join("ND" for _ in k.shapes),
                    "Output Shapes": ",".join(map(str, out)),
                    "Output Data Types": k.dtype.removeprefix("DT_"), "Output Formats": "ND",
                    **k.pmu(),
                }
            )  # fmt: skip
            self.dev = kts + _ns(k.dur_us)
        self.host = ts + dur + 2_000
        return first

    def x(self, name: str, pid: int, tid: int, ts: int, dur: int, **args: Any) -> None:
        ev: dict[str, Any] = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": _us(ts)}
        ev["dur"] = dur / 1000
        ev["args"] = args
        self.ev.append(ev)

    def begin_step(self) -> int:
        return self.host

    def end_step(self, start: int) -> None:
        end = max(self.host, self.dev) + 10_000
        self.ev.append(
            {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{self.step}", "pid": PY_PID,
             "tid": MAIN_TID, "ts": _us(start - 1_000), "dur": (end - start + 1_000) / 1000,
             "args": {"Sequence number": -1, "Fwd thread id": 0}}
        )  # fmt: skip
        self.host = end + 5_000
        self.dev = self.host + 10_000
        self.step += 1


def _meta(what: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}


def _bytes(shape: list[int], size: int = 2) -> float:
    n = 1
    for d in shape:
        n *= d
    return float(n * size)


def _elt_us(*shapes: list[int], factor: float = 1.2) -> float:
    """An elementwise kernel reading and writing ``shapes`` at ``factor`` x its bound."""
    return factor * _roof_us(0, sum(_bytes(s) for s in shapes), ASCEND_BF16, ASCEND_BW)


def _clean(o: _Output) -> None:
    """A 4096³ MatMul and a 4096² Add, both at 1.1x their bound (helpers.planted's figures)."""
    n = 4096
    mm_us = 1.1 * _roof_us(2.0 * n**3, 2.0 * 3 * n * n, ASCEND_BF16, ASCEND_BW)
    bf = ["c10::BFloat16", "c10::BFloat16"]
    o.op("aten::mm", [[n, n], [n, n]], bf,
         [_Kernel("MatMulV2", "MatMulV2", mm_us, [[n, n], [n, n]], out=[n, n],
                  core="AI_CORE", mte=0.35)], line=20)  # fmt: skip
    add_us = 1.1 * _roof_us(0, 3 * 2 * n * n, ASCEND_BF16, ASCEND_BW)
    o.op("aten::add", [[n, n], [n, n], []], [*bf, "Scalar"],
         [_Kernel("Add", "Add", add_us, [[n, n], [n, n]])], line=21)  # fmt: skip


def _rotary(o: _Output) -> float:
    """q*cos + rotate_half(q)*sin; returns the gap (ops' time minus one fused kernel)."""
    q = [8, 32, 2048, 128]
    half = [8, 32, 2048, 64]
    cs = [1, 1, 2048, 128]
    bf = "c10::BFloat16"
    total = 0.0
    for name, dims, types, ktype, kshapes in (
        ("aten::mul", [q, cs], [bf, bf], "Mul", [q, cs, q]),
        ("aten::slice", [q, [], [], [], []], [bf, "Scalar", "Scalar", "Scalar", "Scalar"],
         None, []),
        ("aten::slice", [q, [], [], [], []], [bf, "Scalar", "Scalar", "Scalar", "Scalar"],
         None, []),
        ("aten::neg", [half], [bf], "Neg", [half, half]),
        ("aten::cat", [[], []], ["TensorList", "Scalar"], "ConcatD", [half, half, q]),
        ("aten::mul", [q, cs], [bf, bf], "Mul", [q, cs, q]),
        ("aten::add", [q, q, []], [bf, bf, "Scalar"], "Add", [q, q, q]),
    ):  # fmt: skip
        kernels = []
        if ktype is not None:
            dur = _elt_us(*kshapes)
            total += dur
            kernels.append(_Kernel(ktype, ktype, dur, kshapes[:-1], out=kshapes[-1]))
        o.op(name, dims, types, kernels, line=64)
    fused = _roof_us(0, 2 * _bytes(q), ASCEND_BF16, ASCEND_BW) + LAUNCH_FLOOR_US
    return total - fused


def _add_layer_norm(o: _Output, factor: float = 1.2) -> float:
    """x = x + residual; y = layer_norm(x), each at ``factor`` x its bound; returns the gap."""
    x = [16, 2048, 4096]
    w = [4096]
    bf = "c10::BFloat16"
    add_us = _elt_us(x, x, x, factor=factor)
    ln_us = _elt_us(x, x, factor=factor)
    o.op("aten::add", [x, x, []], [bf, bf, "Scalar"], [_Kernel("Add", "Add", add_us, [x, x])],
         line=71)  # fmt: skip
    o.op("aten::layer_norm", [x, [], w, w, [], []], [bf, "ScalarList", bf, bf, "Scalar", ""],
         [_Kernel("LayerNormV3", "LayerNormV3", ln_us, [x, w, w])], line=72)  # fmt: skip
    fused = _roof_us(0, 2 * _bytes(x), ASCEND_BF16, ASCEND_BW) + LAUNCH_FLOOR_US
    return add_us + ln_us - fused


def _fusible(o: _Output, factor: float = 1.15) -> float:
    """relu(x * s + r), eight times: Muls, Add, Relu kernels at ``factor`` x their bounds;
    returns the gap."""
    x = [8192, 2048]
    bf = "c10::BFloat16"
    gap = 0.0
    for _ in range(8):
        muls, add = _elt_us(x, x, factor=factor), _elt_us(x, x, x, factor=factor)
        relu = _elt_us(x, x, factor=factor)
        o.op("aten::mul", [x, []], [bf, "Scalar"], [_Kernel("Muls", "Muls", muls, [x])], line=80)
        o.op("aten::add", [x, x, []], [bf, bf, "Scalar"], [_Kernel("Add", "Add", add, [x, x])],
             line=81)  # fmt: skip
        o.op("aten::relu", [x], [bf], [_Kernel("Relu", "Relu", relu, [x])], line=82)
        fused = _roof_us(0, 3 * _bytes(x), ASCEND_BF16, ASCEND_BW) + LAUNCH_FLOOR_US
        gap += muls + add + relu - fused
    return gap


def _host_bound(o: _Output) -> float:
    """relu(x * s + r) on a small [256, 256] bf16 tensor, eight times: three ops of 20 µs host
    time each (Python between them), each launching one 2 µs vector kernel (MTE half of its
    time: not memory-bound). The device waits for the host between the kernels. Returns the
    gap: the host periods (op + 2 µs) of the two ops a single fused op does not issue."""
    x = [256, 256]
    bf = "c10::BFloat16"
    host = 20_000
    o.host = max(o.host, o.dev)  # the device has drained: from here it waits for the host
    for _ in range(8):
        for name, ktype, dims, types in (
            ("aten::mul", "Muls", [x, []], [bf, "Scalar"]),
            ("aten::add", "Add", [x, x, []], [bf, bf, "Scalar"]),
            ("aten::relu", "Relu", [x], [bf]),
        ):
            o.op(name, dims, types, [_Kernel(ktype, ktype, 2.0, [x], mte=0.5)], line=90,
                 host_ns=host)  # fmt: skip
    return 8 * 2 * (host + 2_000) / 1000


def _allreduce(o: _Output, step: int) -> float:
    """An exposed all-reduce: 4 planes of 2 aligned + 2 unaligned SDMA tasks. Returns the gap
    (one plane's unaligned tasks' time minus their bytes at the aligned rate)."""
    start = max(o.host, o.dev) + 5_000
    aligned = 4 * 1024 * 1024
    unaligned = aligned + 100
    rate = SDMA_ALIGNED_GBPS * 1e3  # bytes per µs
    plane_end = start
    gap = 0.0
    for plane in range(1, 5):
        t = start
        # a 4-byte ON_CHIP flag (excluded: on-chip, under 512 B)
        _sdma(o, "Reduce_Inline", plane, t, 600, 4, "ON_CHIP")
        t += 1_000
        plane_gap = 0.0
        for size, slow in ((aligned, 1.0), (aligned, 1.0), (unaligned, UNALIGNED_SLOWDOWN),
                           (unaligned, UNALIGNED_SLOWDOWN)):  # fmt: skip
            dur_us = size / rate * slow
            _sdma(o, "Memcpy", plane, t, _ns(dur_us), size, "HCCS")
            t += _ns(dur_us) + 1_000
            if slow > 1.0:
                plane_gap += dur_us - size / rate
        plane_end = max(plane_end, t)
        gap = max(gap, plane_gap)
    count = 64 * 1024 * 1024
    group = {"data_type": "BF16", "count": count, "alg_type": "MESH-RING", "connection_id": 0}
    o.x(f"hcom_allReduce__{step}_0_1", HCCL_PID, 0, start, plane_end - start, **group)
    o.dev = plane_end
    o.host = max(o.host, plane_end)
    return gap


def _packets(o: _Output, step: int) -> float:
    """One exposed 64 MiB all-reduce and ten of 1 MiB (under msprof-analyze's 16 MB), each
    ``HCCL_FIXED_US`` then its bytes split over 4 HCCS planes at 20 GB/s. Returns the gap: the
    fixed cost of the ten small ones (one bucketed collective pays it once, in the large one)."""
    rate = SDMA_ALIGNED_GBPS * 1e3  # bytes per µs
    for i, size in enumerate([64 * 1024 * 1024] + [1024 * 1024] * 10):
        start = max(o.host, o.dev) + 5_000
        t0 = start + _ns(HCCL_FIXED_US)
        dur = _ns(size / 4 / rate)
        for plane in range(1, 5):
            _sdma(o, "Notify_Wait", plane, start, _ns(HCCL_FIXED_US) - 500, 0, "INVALID_TYPE")
            _sdma(o, "Memcpy", plane, t0, dur, size // 4, "HCCS")
        group = {"data_type": "BF16", "count": size // 2, "alg_type": "MESH", "connection_id": 0}
        o.x(f"hcom_allReduce__{step}_{i}_1", HCCL_PID, 0, start, t0 + dur - start, **group)
        o.dev = o.host = t0 + dur
    return 10 * HCCL_FIXED_US


def _sdma(o: _Output, name: str, plane: int, ts: int, dur: int, size: int, link: str) -> None:
    """One HCCL task on a plane track (the args the HCCL process carries in trace_view)."""
    args = {"transport type": "SDMA", "link type": link, "size(Byte)": size, "src rank": 0}
    args |= {"dst rank": plane, "stream id": 4, "Task Type": name}
    o.x(name, HCCL_PID, plane, ts, dur, **args)


def _dynamic(o: _Output, m: int) -> float:
    """A matmul of a new shape: compiled (2 ms) on the task-queue thread before its kernel;
    returns the device idle it causes (the compile time: the device had drained before)."""
    k, n = 4096, 4096
    bf = ["c10::BFloat16", "c10::BFloat16"]
    compile_us = 2000.0
    c0 = o.host + 1_500  # the task queue takes the op right away (the device is idle)
    o.dev = min(o.dev, c0)  # nothing queued: the device waits from the compile's start
    c1 = c0 + _ns(compile_us)
    o.x("Dequeue@MatMulV2", PY_PID, ACL_TID, c0 - 500, c1 - c0 + 4_000, correlation_id=1)
    o.x("AscendCL@aclopCompileAndExecute", CANN_PID, ACL_TID, c0, c1 - c0, Mode="ACL_OP")
    o.x("AscendCL@opCompile", CANN_PID, ACL_TID, c0 + 10_000, c1 - c0 - 200_000, Mode="ACL_OP")
    mm_us = 1.1 * _roof_us(2.0 * m * n * k, 2.0 * (m * k + k * n + m * n), ASCEND_BF16, ASCEND_BW)
    o.op("aten::mm", [[m, k], [k, n]], bf,
         [_Kernel("MatMulV2", "MatMulV2", mm_us, [[m, k], [k, n]], out=[m, n],
                  core="AI_CORE")], line=101, not_before_ns=c1 + 3_000)  # fmt: skip
    return compile_us


def _optimizer(o: _Output) -> float:
    """AdamW without foreach: 16 parameters of [1024, 1024] fp32, each updated by three ops
    (mul_, add_, addcdiv_) of one small kernel each, inside ``Optimizer.step#AdamW.step``.
    Returns the launch floors a fused optimizer saves (one op per kind instead of one per
    parameter): (48 - 3) x 3 µs."""
    p = [1024, 1024]
    f32 = "float"
    start = o.host
    o.host += 1_000
    for _ in range(16):
        for name, ktype in (("aten::mul_", "Muls"), ("aten::add_", "Add"),
                            ("aten::addcdiv_", "Addcdiv")):  # fmt: skip
            dur = _roof_us(0, 3 * _bytes(p, 4), ASCEND_BF16, ASCEND_BW) + LAUNCH_FLOOR_US
            o.op(name, [p, p], [f32, f32],
                 [_Kernel(ktype, ktype, dur, [p, p], dtype="DT_FLOAT")], line=120)  # fmt: skip
    o.ev.append(
        {"ph": "X", "cat": "cpu_op", "name": "Optimizer.step#AdamW.step", "pid": PY_PID,
         "tid": MAIN_TID, "ts": _us(start), "dur": (o.host - start) / 1000,
         "args": {"Sequence number": -1, "Fwd thread id": 0}}
    )  # fmt: skip
    o.host += 1_000
    return (48 - 3) * LAUNCH_FLOOR_US


def build(case: str, steps: int = 3) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Truth]:
    """The trace_view events, kernel rows and truth of ``case``."""
    if case not in CASES:
        raise ValueError(case)
    o = _Output()
    gap = 0.0
    step_us = 0.0
    for s in range(steps):
        start = o.begin_step()
        if case == "dynamic-shape":
            gap += _dynamic(o, (1000, 1500, 2000)[s % 3])
        _clean(o)
        if case == "affinity-rotary":
            gap += _rotary(o)
        elif case == "affinity-add-layer-norm":
            gap += _add_layer_norm(o)
        elif case == "affinity-slow-add-layer-norm":
            gap += _add_layer_norm(o, factor=4.0)
        elif case == "comm-alignment":
            gap += _allreduce(o, s)
        elif case == "comm-packet":
            gap += _packets(o, s)
        elif case == "fusible-sequence":
            gap += _fusible(o)
        elif case == "fusible-slow-sequence":
            gap += _fusible(o, factor=4.0)
        elif case == "fusible-host-bound":
            gap += _host_bound(o)
        elif case == "optimizer-loop":
            gap += _optimizer(o)
        o.end_step(start)
        step_us += o.ev[-1]["dur"]
    truth = Truth(case, RULES[case], gap / steps, step_us / steps, DEVICE)
    return o.ev, o.rows, truth


def write(case: str, directory: Path, steps: int = 3) -> tuple[Path, Truth]:
    """Write ``<case>/rank0_ascend_pt`` and ``<case>.truth.json`` under ``directory``."""
    events, rows, truth = build(case, steps)
    root = directory / case / "rank0_ascend_pt"
    out = root / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    (root / "profiler_info_0.json").write_text(json.dumps({"rank_id": 0, "config": {}}))
    (out / "trace_view.json").write_text(json.dumps(events))
    with (out / "kernel_details.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=KERNEL_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (directory / f"{case}.truth.json").write_text(json.dumps(asdict(truth)))
    return root, truth
