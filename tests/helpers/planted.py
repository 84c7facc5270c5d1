"""Planted-issue Kineto traces: one trace per issue class, with the truth written beside it.

Each trace is a few steps of a GPU-like run (one host thread, one stream) made of *clean* work
that runs close to its hardware bound (a 4096³ bf16 GEMM and a bf16 add, both at 1.1× their
bound) plus one planted issue whose extra time (the *planted gap*) is known from the plan: the
kernel durations are computed here from the datasheet peaks typed below, not from opscope.

``write(case, dir)`` writes ``<case>.json`` (the trace) and ``<case>.truth.json`` (the truth)
and returns both paths; ``CASES`` lists the classes.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# H100 SXM5 datasheet figures (NVIDIA H100 Tensor Core GPU datasheet): dense bf16 tensor-core
# peak, HBM3 bandwidth, SM count. Typed here so that the truth does not come from opscope.
H100_BF16 = 989.5e12
H100_BW = 3.35e12
H100_SMS = 132
# MI300X datasheet: dense bf16 matrix peak, HBM3 bandwidth (for traces read with --device).
MI300X_BF16 = 1307.4e12
MI300X_BW = 5.3e12
MI300X_CUS = 304
# Ascend 910B2 public figures (as opscope's table: approximate): fp16/bf16 cube peak, HBM
# bandwidth, AI (cube) cores. An Ascend-like run: the same ops, read with --device ascend910b2.
ASCEND_BF16 = 376e12
ASCEND_BW = 1.6e12
ASCEND_CORES = 24
DEVICES = ("h100", "mi300x", "ascend910b2")
STEP_GAP_US = 2.0  # host launches run ahead; kernels follow each other with this gap
CASES = (
    "clean",
    "gemm-few-tiles",
    "gemm-wave",
    "misaligned",
    "tall-skinny",
    "attention",
    "elementwise",
    "sync",
    "sdpa-headdim",
    "conv",
    "comm",
    "moe",
    "sdpa-short",
    "skinny-misaligned",
    "non-pow2",
    "comm-small",
)
CLEAN_FACTOR = 1.1  # the clean work's time over its bound
SMALL_MSGS = 32  # comm-small: all-reduces per step
SMALL_MSG_US = 8.0  # each: latency-bound (a 8 KB message; NCCL's in-node latency ~5-20 µs)


@dataclass(frozen=True)
class Truth:
    """What was planted: the class, the rule expected to explain it, the planted gap (µs per
    step: what a perfect fix removes) and the step time (µs)."""

    case: str
    rule: str | None
    gap_us: float
    step_us: float
    device: str


def _roof_us(flops: float, nbytes: float, peak: float, bw: float) -> float:
    return max(flops / peak, nbytes / bw) * 1e6


class _Trace:
    def __init__(self) -> None:
        self.ev: list[dict[str, Any]] = []
        self.ext = 0
        self.host = 1000.0  # host clock (µs)
        self.dev = 1100.0  # device clock: where the next kernel may start
        self.idle_from: float | None = None  # device end before a sync, until the next kernel
        self.sync_idle = 0.0  # device idle after syncs, up to the next kernel (µs)

    def op(
        self,
        name: str,
        dims: list[Any],
        types: list[Any],
        kernels: list[tuple[str, float]],
        *,
        module: str | None = None,
        grid: list[int] | None = None,
        gap: float = STEP_GAP_US,
        concrete: list[str] | None = None,
    ) -> None:
        """A host op launching ``kernels`` (name, µs) back to back on stream 7."""
        ts = self.host
        self.ev.append(
            {
                "ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": 4.0 + 3.0 * len(kernels),
                "args": {"Input Dims": dims, "Input type": types, "External id": self.ext + 1},
            }
        )  # fmt: skip
        if concrete is not None:
            self.ev[-1]["args"]["Concrete Inputs"] = concrete
        if module:
            self.ev.append(
                {
                    "ph": "X", "cat": "python_function", "name": f"nn.Module: {module}",
                    "pid": 1, "tid": 1, "ts": ts - 0.5, "dur": 5.0 + 3.0 * len(kernels),
                }
            )  # fmt: skip
        for i, (kname, kdur) in enumerate(kernels):
            self.ext += 1
            lts = ts + 1 + 3 * i
            self.ev.append(
                {
                    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                    "tid": 1, "ts": lts, "dur": 2.0,
                    "args": {"correlation": self.ext, "External id": self.ext},
                }
            )  # fmt: skip
            kts = max(self.dev + gap, lts + 3)
            if self.idle_from is not None:
                self.sync_idle += kts - self.idle_from
                self.idle_from = None
            args: dict[str, Any] = {
                "device": 0, "stream": 7, "correlation": self.ext, "External id": self.ext,
            }  # fmt: skip
            if grid is not None:
                args["grid"] = grid
                args["block"] = [256, 1, 1]
            self.ev.append(
                {"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": kts,
                 "dur": kdur, "args": args}
            )  # fmt: skip
            self.dev = kts + kdur
        self.host = ts + 6.0 + 3.0 * len(kernels)

    def sync(self) -> None:
        """A cudaDeviceSynchronize: the host waits for the device, then returns; the device
        idles until the next kernel (counted in ``sync_idle`` when that kernel is launched)."""
        ts = self.host
        end = max(self.dev, ts) + 3.0
        self.ev.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1,
             "tid": 1, "ts": ts, "dur": end - ts, "args": {}}
        )  # fmt: skip
        self.host = end + 1.0
        self.idle_from = self.dev


def _bf16_mm(m: int, k: int, n: int) -> tuple[float, float]:
    return 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)


def trace(
    case: str,
    *,
    steps: int = 3,
    device_props: bool = True,
    clean_work: bool = True,
    extra_views: int = 0,
    device: str | None = None,
) -> tuple[dict[str, Any], Truth]:
    """The Kineto trace (dict) of ``case`` and its truth. ``device`` (``DEVICES``) sets the
    peaks the planted times are computed from; only the H100 trace carries device properties
    (the others are read with ``--device NAME``). ``device_props=False`` means MI300X and leaves the
    device properties out (an MI300X-like trace to read with ``--device MI300X``);
    ``clean_work=False`` leaves the clean GEMM and add out (only the planted issue);
    ``extra_views`` adds that many view/reshape ops (no kernels) on each side of the softmax
    of the attention case, the dropout in its own child module."""
    if case not in CASES:
        raise ValueError(case)
    device = device or ("h100" if device_props else "mi300x")
    device_props = device == "h100"
    peak, bw, sms = {
        "h100": (H100_BF16, H100_BW, H100_SMS),
        "mi300x": (MI300X_BF16, MI300X_BW, MI300X_CUS),
        "ascend910b2": (ASCEND_BF16, ASCEND_BW, ASCEND_CORES),
    }[device]
    t = _Trace()
    gap_total = 0.0
    rule: str | None = None
    bf = ["c10::BFloat16", "c10::BFloat16"]
    starts: list[float] = []
    for s in range(steps):
        starts.append(t.host)
        step_ev_index = len(t.ev)
        if clean_work:
            _clean(t, bf, peak, bw)
        if case == "gemm-few-tiles":
            rule = "gemm-tiles"
            m = n = 1024
            k = 65536
            f, b = _bf16_mm(m, k, n)
            ideal = _roof_us(f, b, peak, bw)
            tiles = math.ceil(m / 128) * math.ceil(n / 128)
            dur = ideal * sms / tiles  # only `tiles` SMs of `sms` busy
            t.op("aten::mm", [[m, k], [k, n]], bf, [("sm90_xmma_gemm_bf16_splitk0", dur)],
                 grid=[8, 8, 1] if device_props else None)  # fmt: skip
            gap_total += dur - ideal
        elif case == "gemm-wave":
            rule = "gemm-tiles"
            # one tile more than the SMs/cores: 133 / 308 / 25 tiles of 128x128
            m, k, n = {
                "h100": (128 * 7, 8192, 128 * 19),
                "mi300x": (128 * 7, 8192, 128 * 44),
                "ascend910b2": (128 * 5, 16384, 128 * 5),
            }[device]
            f, b = _bf16_mm(m, k, n)
            ideal = _roof_us(f, b, peak, bw)
            dur = 2.0 * ideal  # a second, nearly empty wave
            t.op("aten::mm", [[m, k], [k, n]], bf, [("sm90_xmma_gemm_bf16", dur)])
            gap_total += dur - ideal
        elif case == "misaligned":
            rule = "shape-alignment"
            f, b = _bf16_mm(4097, 4097, 4097)
            ideal = _roof_us(f, b, peak, bw)
            dur = 2.0 * ideal  # the unaligned shape falls off the tensor-core fast path
            t.op("aten::mm", [[4097, 4097], [4097, 4097]], bf, [("gemm_bf16_unaligned", dur)])
            gap_total += dur - ideal
        elif case == "tall-skinny":
            rule = "gemm-memory-bound"
            f, b = _bf16_mm(8, 8192, 8192)
            ideal = _roof_us(f, b, peak, bw)
            dur = 3.0 * ideal
            t.op("aten::mm", [[8, 8192], [8192, 8192]], bf, [("gemv_bf16_splitk", dur)])
            gap_total += dur - ideal
        elif case == "skinny-misaligned":
            # tall-skinny and K misaligned: gemm-memory-bound and shape-alignment both see it,
            # with savings within 10%; alignment's padding is a fix `opscope verify` measures
            # (3.9x faster on an H200), the memory-bound one a bound gap: alignment goes first
            rule = "shape-alignment"
            f, b = _bf16_mm(8, 4097, 8192)
            ideal = _roof_us(f, b, peak, bw)
            dur = 3.0 * ideal
            t.op("aten::mm", [[8, 4097], [4097, 8192]], bf, [("gemv_bf16_unaligned", dur)])
            gap_total += dur - ideal
        elif case == "non-pow2":
            # 4104 = 8 x 513: aligned for the tensor cores, 33 tiles of 128 where 32.06 would do;
            # Ascend's cube rule is 128 already (shape-alignment's finding there)
            rule = "shape-alignment" if device == "ascend910b2" else "gemm-non-pow2"
            f, b = _bf16_mm(4104, 4104, 4104)
            ideal = _roof_us(f, b, peak, bw)
            dur = 1.5 * ideal  # a partly empty last row/column of tiles and a less tuned kernel
            t.op("aten::mm", [[4104, 4104], [4104, 4104]], bf, [("gemm_bf16_tn_edge", dur)])
            if device == "ascend910b2":
                gap_total += dur - ideal  # the cube's 128 rule: padding is the fix there
            elif clean_work:
                # on NVIDIA/AMD the penalty is not assumed (an H200 ran 4104³ at 96% of
                # 4224³'s FLOP/s): what is planted is the whole-tile 4096³ GEMM of the clean
                # work running faster per FLOP in the same trace, so the gap is the time above
                # that rate
                cf, cb = _bf16_mm(4096, 4096, 4096)
                gap_total += dur - f * CLEAN_FACTOR * _roof_us(cf, cb, peak, bw) / cf
            # alone: nothing in the trace shows a penalty, the planted gap is 0 (unknown)
        elif case == "elementwise":
            rule = "elementwise-bandwidth"
            nb = 3 * 2 * 8192 * 8192
            ideal = _roof_us(0, nb, peak, bw)
            dur = 10.0 * ideal  # 10% of the bandwidth
            t.op("aten::mul", [[8192, 8192], [8192, 8192]], bf,
                 [("elementwise_kernel_strided", dur)])  # fmt: skip
            gap_total += dur - ideal
        elif case == "attention":
            rule = "fusion-attention"
            gap_total += _attention(t, peak, bw, extra_views)
        elif case == "sdpa-headdim":
            rule = "attention-efficiency"
            b_, h, l_, d = 8, 16, 2048, 72  # d=72 runs the d=96 flash kernel
            fl = 4.0 * b_ * h * l_ * l_ * d
            ideal = _roof_us(fl, 4 * 2 * b_ * h * l_ * d, peak, bw)
            dur = ideal * 96 / 72 * 1.1  # the padding, and 10% more
            q = [b_, h, l_, d]
            t.op("aten::scaled_dot_product_attention", [q, q, q], [bf[0]] * 3,
                 [("flash_fwd_kernel_hdim96", dur)])  # fmt: skip
            gap_total += dur - ideal
        elif case == "sdpa-short":
            rule = "attention-efficiency"
            q = [1, 8, 32, 64]  # 32 tokens: the kernel is all launch, ramp-up and tail
            fl = 4.0 * 8 * 32 * 32 * 64
            ideal = _roof_us(fl, 4 * 2 * 8 * 32 * 64, peak, bw)
            for _ in range(40):
                t.op("aten::scaled_dot_product_attention", [q, q, q], [bf[0]] * 3,
                     [("flash_fwd_kernel_hdim64", 5.0)])  # fmt: skip
            # the floor a launch cannot avoid: the model's 1.5 µs on NVIDIA (3 µs elsewhere)
            floor = 1.5 if device == "h100" else 3.0
            gap_total += 40 * (5.0 - ideal - floor)
        elif case == "conv":
            rule = "conv-efficiency"
            n_, ci, hw, co = 64, 256, 56, 256
            fl = 2.0 * n_ * co * hw * hw * ci * 9
            nb = 2.0 * (n_ * ci * hw * hw + co * ci * 9 + n_ * co * hw * hw)
            ideal = _roof_us(fl, nb, peak, bw)
            dur = 3.0 * ideal  # NCHW + no cudnn.benchmark
            t.op("aten::conv2d", [[n_, ci, hw, hw], [co, ci, 3, 3], [], [], [], [], []],
                 [bf[0], bf[0], "", "", "", "", ""], [("implicit_convolve_sgemm", dur)],
                 concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"])  # fmt: skip
            gap_total += dur - ideal
        elif case == "moe":
            rule = "moe-expert-loop"
            gap_total += _moe(t, peak, bw)
        elif case == "comm":
            rule = "comm-exposed"
            dur = 400.0  # an all-reduce after the compute, nothing to hide it behind
            t.op("c10d::allreduce_", [[16 * 1024 * 1024]], [bf[0]],
                 [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", dur)])  # fmt: skip
            gap_total += dur
        elif case == "comm-small":
            rule = "comm-exposed"
            # one all-reduce per small gradient, nothing to hide them: bucketing removes all but
            # one message's latency, so their exposed time bounds the saving
            for _ in range(SMALL_MSGS):
                t.op("c10d::allreduce_", [[4096]], [bf[0]],
                     [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", SMALL_MSG_US)])  # fmt: skip
                gap_total += SMALL_MSG_US
        elif case == "sync":
            rule = "overhead-host-sync"
            f, b = _bf16_mm(8192, 8192, 8192)
            mm_us = 1.05 * _roof_us(f, b, peak, bw)
            t.op("aten::mm", [[8192, 8192], [8192, 8192]], bf,
                 [("sm90_xmma_gemm_bf16bf16_bf16f32", mm_us)])  # fmt: skip
            t.sync()
        end = t.dev + 10.0
        t.host = max(t.host, t.dev) + 5.0
        t.ev.insert(
            step_ev_index,
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
             "tid": 1, "ts": starts[s] - 1.0, "dur": end - starts[s] + 1.0},
        )  # fmt: skip
        t.dev = t.host + 10.0
    gap_total += t.sync_idle
    step_us = sum(e["dur"] for e in t.ev if e["name"].startswith("ProfilerStep#")) / steps
    doc: dict[str, Any] = {"traceEvents": t.ev, "displayTimeUnit": "ms"}
    if device_props:
        doc["deviceProperties"] = [
            {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_000_000_000,
             "computeMajor": 9, "computeMinor": 0, "numSms": H100_SMS}
        ]  # fmt: skip
    truth = Truth(
        case,
        rule if case != "clean" else None,
        gap_total / steps,
        step_us,
        device,
    )
    return doc, truth


def _moe(t: _Trace, peak: float, bw: float) -> float:
    """An MoE layer as a loop over 8 experts (HF Mixtral-style modules ``experts.E.w1``), each
    a small-M linear at 3x its own bound. Returns the planted gap: their time minus one grouped
    GEMM's bound (summed FLOPs at the peak or summed bytes at the bandwidth, one launch floor
    of 1.5 µs, the H100 floor typed here)."""
    tokens = [40, 310, 75, 128, 9, 200, 66, 190]
    k, n = 1024, 4096
    bf = "c10::BFloat16"
    total = flops = nbytes = 0.0
    for e, m in enumerate(tokens):
        f = 2.0 * m * n * k
        b = 2.0 * (m * k + n * k + m * n)
        dur = 3.0 * _roof_us(f, b, peak, bw)
        t.op("aten::linear", [[m, k], [n, k]], [bf, bf], [("gemm_bf16_small_m", dur)],
             module=f"model.layers.0.block_sparse_moe.experts.{e}.w1")  # fmt: skip
        total += dur
        flops += f
        nbytes += b
    return total - (_roof_us(flops, nbytes, peak, bw) + 1.5)


def _clean(t: _Trace, bf: list[str], peak: float, bw: float) -> None:
    """Clean work: a 4096³ GEMM and a 4096² add, both at CLEAN_FACTOR (1.1x) their bound."""
    f, b = _bf16_mm(4096, 4096, 4096)
    mm_us = CLEAN_FACTOR * _roof_us(f, b, peak, bw)
    t.op("aten::mm", [[4096, 4096], [4096, 4096]], bf,
         [("sm90_xmma_gemm_bf16bf16_bf16f32", mm_us)])  # fmt: skip
    add_us = CLEAN_FACTOR * _roof_us(0, 3 * 2 * 4096 * 4096, peak, bw)
    t.op("aten::add", [[4096, 4096], [4096, 4096], []], [*bf, "Scalar"],
         [("vectorized_elementwise_kernel", add_us)])  # fmt: skip


def _attention(t: _Trace, peak: float, bw: float, extra_views: int = 0) -> float:
    """HF-style eager attention (ViT/BERT layout): matmul(q, kᵀ) -> view -> div -> add mask ->
    softmax -> dropout -> matmul(p, v) -> permute/reshape, with the score matrix written and
    read by every op. Returns the planted gap: the span's time minus a fused (flash) kernel's
    bound (FLOPs 4·B·H·L²·d at the matrix peak, q/k/v/o bytes)."""
    b_, h, l_, d = 8, 12, 1024, 64
    bf = "c10::BFloat16"
    q = [b_, h, l_, d]
    kt = [b_, h, d, l_]
    sc = [b_, h, l_, l_]
    score_bytes = 2 * b_ * h * l_ * l_
    qkv_bytes = 2 * b_ * h * l_ * d
    flops_qk = 2.0 * b_ * h * l_ * l_ * d
    mm1 = _roof_us(flops_qk, 2 * qkv_bytes + score_bytes, peak, bw)
    mm2 = _roof_us(flops_qk, score_bytes + 2 * qkv_bytes, peak, bw)
    elt = _roof_us(0, 2 * score_bytes, peak, bw)
    mod = "vit.encoder.layer.0.attention.attention"
    span = 0.0
    views = [("aten::view", [sc, []], [bf, ""], None, 0.0)] * extra_views
    for name, dims, types, kern, dur in (
        ("aten::matmul", [q, kt], [bf, bf], "bmm_bf16_nt", 1.2 * mm1),
        *views,
        ("aten::view", [sc, []], [bf, ""], None, 0.0),
        ("aten::div", [sc, []], [bf, "Scalar"], "elementwise_div", 1.2 * elt),
        ("aten::add", [sc, [b_, 1, 1, l_]], [bf, bf], "elementwise_add", 1.2 * elt),
        ("aten::softmax", [sc, [], []], [bf, "Scalar", ""], "softmax_warp_forward", 1.5 * elt),
        ("aten::dropout", [sc, [], []], [bf, "Scalar", "Scalar"], None, 0.0),
        *[("aten::reshape", [sc, []], [bf, ""], None, 0.0)] * extra_views,
        ("aten::matmul", [sc, q], [bf, bf], "bmm_bf16_nn", 1.2 * mm2),
        ("aten::permute", [q, []], [bf, ""], None, 0.0),
        ("aten::reshape", [[b_, l_, h, d], []], [bf, ""], None, 0.0),
    ):
        sub = f"{mod}.dropout" if name == "aten::dropout" else mod
        t.op(name, dims, types, [(kern, dur)] if kern else [], module=sub)
        if name == "aten::matmul" or kern in (
            "elementwise_div",
            "elementwise_add",
            "softmax_warp_forward",
        ):
            span += dur
    fused = _roof_us(2 * flops_qk, 4 * qkv_bytes, peak, bw)
    return span - fused


def write(
    case: str,
    directory: Path,
    *,
    device_props: bool = True,
    clean_work: bool = True,
    extra_views: int = 0,
    device: str | None = None,
) -> tuple[Path, Truth]:
    """Write ``<case>.json`` and ``<case>.truth.json`` under ``directory``."""
    doc, truth = trace(
        case,
        device_props=device_props,
        clean_work=clean_work,
        extra_views=extra_views,
        device=device,
    )
    suffix = ("" if device_props else ".noprops") + ("" if clean_work else ".alone")
    suffix += f".{device}" if device else ""
    suffix += f".v{extra_views}" if extra_views else ""
    p = directory / f"{case}{suffix}.json"
    p.write_text(json.dumps(doc))
    (directory / f"{case}{suffix}.truth.json").write_text(json.dumps(asdict(truth)))
    return p, truth
