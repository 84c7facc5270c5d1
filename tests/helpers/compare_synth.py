"""Before/after pairs for compare: one Linear layer whose GEMM changes op and kernel.

Every figure a test checks is computed here from the plan (per-step kernel µs drawn from a seeded
generator), never from the analysis under test.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from helpers.synth import Builder, profiler_step
from opscope.model import Profile

FWD_KEY_PART = "fwd · GEMM M={m} N={n} K={k} · {dtype}"


@dataclass
class GemmSide:
    """How one side runs the layer's forward GEMM."""

    style: str  # "matmul" (aten::matmul > aten::mm), "mm", "linear" (> aten::addmm), "addmm"
    kernel: str  # the GEMM kernel's name
    fwd_us: float  # mean forward GEMM kernel time per step
    device: str | None = "NVIDIA A100-SXM4-80GB"
    module: str | None = "Net_0/encoder/Linear_11"
    k_pad: int | None = None  # K of this side's GEMM when the fix padded it (1000 -> 1024)


@dataclass
class PlantedSide:
    profile: Profile
    fwd_kernel_us: list[float]  # per step: the layer's forward GEMM kernel
    bwd_kernel_us: list[float]  # per step: the layer's two backward GEMM kernels together
    other_us: list[float]  # per step: the relu layer's kernel
    step_us: list[float] = field(default_factory=list)


def _dims(style: str, m: int, n: int, k: int) -> tuple[str, str | None]:
    """(outer op's input dims, inner op's dims or None) of the forward GEMM."""
    if style == "matmul":
        return f"[[{m},{k}],[{k},{n}]]", f"[[{m},{k}],[{k},{n}]]"
    if style == "mm":
        return f"[[{m},{k}],[{k},{n}]]", None
    if style == "linear":
        return f"[[{m},{k}],[{n},{k}],[{n}]]", f"[[{n}],[{m},{k}],[{k},{n}]]"
    if style == "addmm":
        return f"[[{n}],[{m},{k}],[{k},{n}]]", None
    raise ValueError(style)


_OUTER = {"matmul": "aten::matmul", "mm": "aten::mm", "linear": "aten::linear"}
_OUTER["addmm"] = "aten::addmm"


def gemm_side(
    side: GemmSide,
    *,
    m: int = 1024,
    n: int = 4096,
    k: int = 2048,
    steps: int = 6,
    seed: int = 0,
    jitter: float = 0.01,
    bwd_us: float = 300.0,
    relu_us: float = 50.0,
    dtype: str = "float",
) -> PlantedSide:
    """A training-like profile: per step the layer's forward GEMM (``side.style``), a relu
    layer, and the GEMM's backward (two ``aten::mm`` under ``MmBackward0`` /
    ``AddmmBackward0``), each kernel's time drawn as ``mean × (1 ± jitter)``."""
    r = random.Random(seed)
    b = Builder()
    kk = side.k_pad or k
    outer_dims, inner_dims = _dims(side.style, m, n, kk)
    types = json.dumps([dtype] * (3 if side.style in ("linear", "addmm") else 2))
    fwd_k: list[float] = []
    bwd_k: list[float] = []
    other: list[float] = []
    t = 0.0
    for s in range(steps):
        st = b.step(s, t, 1.0)  # its length is set below, once its work is laid out
        t0 = t + 10
        kus = side.fwd_us * (1 + r.uniform(-jitter, jitter))
        outer = b.op(
            _OUTER[side.style],
            t0,
            30,
            parent=st,
            step=s,
            dims=outer_dims,
            types=types,
            module=side.module,
        )
        launcher = outer
        if inner_dims is not None:
            inner_name = "aten::mm" if side.style == "matmul" else "aten::addmm"
            launcher = b.op(
                inner_name,
                t0 + 2,
                20,
                parent=outer,
                step=s,
                dims=inner_dims,
                types=types,
                module=side.module,
            )
        b.kernel(side.kernel, t0 + 40, kus, launcher)
        fwd_k.append(kus)
        t0 += kus + 60
        rus = relu_us * (1 + r.uniform(-jitter, jitter))
        relu = b.op(
            "aten::relu",
            t0,
            10,
            parent=st,
            step=s,
            dims=f"[[{m},{n}]]",
            types=json.dumps([dtype]),
            module="Net_0/encoder/ReLU_12",
        )
        b.kernel("vectorized_elementwise_kernel<relu>", t0 + 12, rus, relu)
        other.append(rus)
        t0 += rus + 40
        node_name = "AddmmBackward0" if side.style in ("linear", "addmm") else "MmBackward0"
        node = b.op(node_name, t0, 20, parent=st, step=s, bwd=True, fwd=launcher, tid=2)
        total_b = 0.0
        for i, d in enumerate((f"[[{m},{n}],[{n},{kk}]]", f"[[{kk},{m}],[{m},{n}]]")):
            mm = b.op(
                "aten::mm",
                t0 + 2 + i,
                5,
                parent=node,
                step=s,
                dims=d,
                types=json.dumps([dtype, dtype]),
                bwd=True,
                tid=2,
            )
            bus = bwd_us / 2 * (1 + r.uniform(-jitter, jitter))
            b.kernel(f"{side.kernel}_bwd{i}", t0 + 30 + i * (bus + 5), bus, mm)
            total_b += bus
        bwd_k.append(total_b)
        # the step ends 50 µs after its last kernel: its length moves with the planted kernels
        end = t0 + 30 + total_b + 5 + 50
        dur_ns = round((end - t) * 1000)
        b.events[st]["dur_ns"] = dur_ns
        b.steps[-1]["dur_ns"] = dur_ns
        t = end + 100
    p = b.build()
    if side.device is not None:
        p = p.with_tables(
            devices=pl.DataFrame(
                {"rank": [0], "device": [0], "name": [side.device], "vendor": ["nvidia"]}
            )
        )
    return PlantedSide(p, fwd_k, bwd_k, other)


def fwd_key(side: GemmSide, *, m: int = 1024, n: int = 4096, k: int = 2048) -> str:
    """The semantic key compare should give the layer's forward GEMM."""
    part = FWD_KEY_PART.format(m=m, n=n, k=side.k_pad or k, dtype="fp32")
    return f"{side.module} · {part}" if side.module else part


def single_gemm_trace(
    path: Path,
    op: str,
    *,
    m: int,
    n: int,
    k: int,
    kernel: str,
    kernel_us: list[float],
    device_name: str,
) -> None:
    """A Kineto trace of ``len(kernel_us)`` steps, each one GEMM (``aten::mm`` with
    ``[M,K]×[K,N]`` or ``aten::addmm`` with a bias) launching ``kernel``."""
    dims = [[m, k], [k, n]] if op == "mm" else [[n], [m, k], [k, n]]
    ev: list[dict[str, Any]] = []
    t = 1000.0
    for s, kus in enumerate(kernel_us):
        ev.append(profiler_step(s, t, kus + 200))
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::{op}",
                "pid": 1,
                "tid": 1,
                "ts": t + 5,
                "dur": 20,
                "args": {
                    "Input Dims": dims,
                    "Input type": ["float"] * len(dims),
                    "External id": s + 1,
                },
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t + 10,
                "dur": 3,
                "args": {"correlation": s + 1, "External id": s + 1},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": t + 20,
                "dur": kus,
                "args": {"device": 0, "stream": 7, "correlation": s + 1, "External id": s + 1},
            }
        )
        t += kus + 1000
    trace = {
        "traceEvents": ev,
        "deviceProperties": [
            {"id": 0, "name": device_name, "totalGlobalMem": 85899345920, "numSms": 108}
        ],
    }
    path.write_text(json.dumps(trace))
