"""Fused attention (SDPA / flash / npu_fusion_attention) and convolutions far from the
performance model's bound, with the cause the shapes show: head-dim padding, short sequences
(launch-bound calls), fp32 or odd channel counts.

Savings are the model's gap (measured - lower bound) of the flagged calls, or the part of it the
cause explains; without peaks, no finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.gemm import (
    ATTN_FORMULA,
    CONV_FORMULA,
    GAP_MIN_SHARE,
    STEP_MIN_PCT,
    _finding,
    _significant,
    model_calls,
)
from opscope.model import Profile

# Flash-attention kernels are compiled for head dims in steps of 32 up to 256 (FlashAttention-2
# `headdim` dispatch: 32, 64, 96, 128, 160, 192, 224, 256; cuDNN/CK follow the same steps): a
# head dim between two steps runs the next one up and computes the padding.
HEAD_DIM_STEP: Final = 32
# A call whose time is within this many launch floors is launch-bound: the sequence is too short
# for the device (opscope's heuristic: 4 floors = the kernel is mostly ramp-up and tail).
SHORT_CALL_FLOORS: Final = 4.0
# q's layout per op family: (batch·heads dims, sequence axis, head-dim axis)
_BSHD = ("aten::_flash_attention_forward", "aten::_efficient_attention_forward")


def _groups(profile: Profile, results: Mapping[str, Any], formula: str) -> tuple[Any, Any]:
    model = c.perf_model(profile, results)
    if model.calls.height == 0:  # no costed call (no host op): nothing to filter
        return model, None
    calls = model_calls(profile, results, formula)
    if calls.height == 0:
        return model, None
    return model, c.shape_groups(calls, pl.col("kernels").sum())


def _flagged(
    profile: Profile, results: Mapping[str, Any], formula: str
) -> tuple[Any, c.StepInfo, list[dict[str, Any]]] | None:
    """(perf model, step info, the rows of the significant groups of calls whose formula
    matches ``formula``); ``None`` without such calls or without peaks (``model.spec``)."""
    model, g = _groups(profile, results, formula)
    if g is None or model.spec is None:
        return None
    steps = c.step_info(profile)
    return model, steps, [r for r in g.iter_rows(named=True) if _significant(r, steps)]


class AttentionEfficiency:
    """Fused attention calls far above their bound."""

    id = "attention-efficiency"
    doc = (
        "A fused attention call (F.scaled_dot_product_attention's flash / memory-efficient / "
        "cuDNN kernels, npu_fusion_attention) does 4·B·H·Lq·Lk·d FLOPs on q, k, v and the "
        "output; the performance model's bound is that work at the matrix peak (or the bytes "
        "at the bandwidth) plus a launch floor per kernel. Groups whose time is at least "
        f"{GAP_MIN_SHARE:.0%} above the bound (gap ≥ {STEP_MIN_PCT:g}% of the step) are "
        "flagged with the cause the shapes show: a head dim between the kernels' steps of "
        f"{HEAD_DIM_STEP} (d=72 runs the d=96 kernel: 25% of the work is padding; saving: "
        "that share of the time), calls within "
        f"{SHORT_CALL_FLOORS:g} launch floors (short sequences: launch overhead dominates; "
        "saving: the gap), else the backend (the math fallback for an unsupported mask/dtype, "
        "fp32 inputs; saving: the gap). Never more than the gap. Fix: a head dim that is a "
        "multiple of 32 (64/128), batching short sequences (pack them, or CUDA graphs), "
        "bf16/fp16 inputs and a boolean/causal mask so the flash kernel applies."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        flagged = _flagged(profile, results, ATTN_FORMULA)
        if flagged is None:
            return []
        model, steps, rows = flagged
        out = []
        for r in rows:
            q = (r["dims"] or [[]])[0] or []
            if len(q) < 3:
                continue
            seq, d = (q[1], q[3]) if r["name"] in _BSHD and len(q) == 4 else (q[-2], q[-1])
            time_ns = float(r["time_ns"])
            gap = float(r["gap_ns"])
            padded = -(-d // HEAD_DIM_STEP) * HEAD_DIM_STEP
            per_call = time_ns / max(int(r["calls"]), 1)
            floors = model.floor_ns * max(int(r["kernels"]), 1) / max(int(r["calls"]), 1)
            if d % HEAD_DIM_STEP and d < 256:
                cause = f"head dim {d} runs the {padded} kernel"
                saving = time_ns * (1 - d / padded)
                how = f"the padded share of the time (1 - {d}/{padded}), capped at the gap"
                fix = f"# make head_dim a multiple of {HEAD_DIM_STEP}: {d} -> {padded}, or " + (
                    "re-split the hidden size into heads of 64/128"
                )
            elif floors and per_call <= SHORT_CALL_FLOORS * floors:
                cause = f"sequence {seq}: {per_call / 1e3:.1f} µs per call, launch-bound"
                saving = gap
                how = "the gap between the calls' time and their bound (launch floor included)"
                fix = (
                    "# pack short sequences into one call (nested/jagged tensors) or capture "
                    "the step in a CUDA graph:\nmodel = torch.compile(model, "
                    "mode='reduce-overhead')"
                )
            else:
                eff = (r["bound_ns"] or 0.0) / time_ns
                cause = f"{eff:.0%} of its bound"
                saving = gap
                how = "the gap between the calls' time and their bound"
                fix = (
                    "# make sure the flash kernel runs: bf16/fp16 q/k/v, is_causal=True or a "
                    "boolean mask\nfrom torch.nn.attention import SDPBackend, sdpa_kernel\n"
                    "with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n"
                    "    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)"
                )
            out.append(
                _finding(
                    profile,
                    self.id,
                    [r],
                    saving,
                    f"{r['name']} (L={seq}, d={d}): {cause}",
                    how,
                    fix,
                    {"seq_len": seq, "head_dim": d},
                    steps,
                )
            )
        return out


class ConvEfficiency:
    """Convolutions far above their bound."""

    id = "conv-efficiency"
    doc = (
        "A convolution's bound is its FLOPs (2·N·Cout·prod(out)·Cin/g·prod(k)) at the matrix "
        "peak or its bytes at the bandwidth, plus a launch floor per kernel. Groups whose time "
        f"is at least {GAP_MIN_SHARE:.0%} above it (gap ≥ {STEP_MIN_PCT:g}% of the step) are "
        "flagged, with what the shapes and dtype show: fp32 (the tensor cores want bf16/fp16, "
        "or TF32), channel counts not a multiple of 8, NCHW layout (cuDNN's tensor-core "
        "kernels are NHWC: an NCHW input pays transposes). Saving: the gap. Fix: "
        "`torch.backends.cudnn.benchmark = True` (picks the fastest algorithm per shape), "
        "`model.to(memory_format=torch.channels_last)`, autocast to bf16, channels padded to "
        "a multiple of 8. Needs stride/padding in the trace (Concrete Inputs) to cost a "
        "convolution at all."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        flagged = _flagged(profile, results, CONV_FORMULA)
        if flagged is None:
            return []
        _, steps, rows = flagged
        out = []
        for r in rows:
            dims = r["dims"] or []
            x = dims[0] if dims else []
            w = dims[1] if len(dims) > 1 else []
            causes = []
            if r["dtype"] == "fp32":
                causes.append("fp32")
            chans = [ch for ch in (x[1:2] + w[:1]) if ch >= 8 and ch % 8]
            if chans:
                causes.append(f"channels {', '.join(map(str, chans))} not a multiple of 8")
            eff = (r["bound_ns"] or 0.0) / float(r["time_ns"])
            causes.append(f"{eff:.0%} of its bound")
            out.append(
                _finding(
                    profile,
                    self.id,
                    [r],
                    float(r["gap_ns"]),
                    f"{r['name']} {c.fmt_shape(x)} * {c.fmt_shape(w)}: {'; '.join(causes)}",
                    "the gap between the convolutions' time and their bound",
                    "torch.backends.cudnn.benchmark = True\n"
                    "model = model.to(memory_format=torch.channels_last)\n"
                    "with torch.autocast('cuda', dtype=torch.bfloat16):\n    y = model(x)",
                    {"efficiency": round(eff, 3)},
                    steps,
                )
            )
        return out


register(AttentionEfficiency())
register(ConvEfficiency())
