"""Precision: fp32 matmuls on devices whose low-precision matrix peak is far higher."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.model import Profile

# Flag fp32 matmuls when the best of the device's tf32/bf16/fp16 matrix peaks is at least this
# many times its fp32 peak (A100: bf16 312 / fp32 19.5 = 16×; tf32 8×; datasheets via
# opscope.analysis.devices). Below 2× the dtype change is rarely worth its numerics review.
MIN_PEAK_RATIO = 2.0
_HOST_MM = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution")
_KERNEL_MM = r"(?i)matmul|gemm|conv2d"
# Default device per target when the profile does not name one (target given on a CPU run).
DEFAULT_DEVICE = {"nvidia": "A100", "amd": "MI300X", "ascend": "Ascend910B"}


class Precision:
    """fp32 matmul / conv work on a device that is much faster in tf32/bf16/fp16."""

    id = "precision-fp32-matmul"
    doc = (
        "Matrix units of current accelerators run bf16/fp16 (and tf32) many times faster than "
        "fp32: an A100's datasheet gives 19.5 TFLOP/s fp32, 156 tf32, 312 bf16. Matmuls and "
        "convolutions left in fp32 run on the slow path. The rule flags fp32 matmul/conv work "
        f"when the target device's best low-precision matrix peak is ≥ {MIN_PEAK_RATIO:g}× its "
        "fp32 peak (peaks from opscope.analysis.devices; the target is the profile's device, "
        "or `target`/`target_name`). It does not fire on CPU targets (CPU bf16 speed depends "
        "on AMX/AVX-512 support that a trace does not show). Saving: when the profile ran on "
        "the target, the fp32 time × (1 − fp32 peak / low-precision peak) — a compute-bound "
        "upper bound from datasheet peaks; on another device it is not estimated. Fix: "
        "`torch.autocast` with bf16 (or `torch.backends.cuda.matmul.allow_tf32 = True`)."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        target = c.target_of(profile, results)
        if target == "cpu":
            return []
        from opscope.analysis import devices

        name = (
            results.get("target_name")
            or (c.device_name(profile) if c.device_kind(profile) == target else None)
            or DEFAULT_DEVICE.get(target)
        )
        spec = devices.match(str(name)) if name else None
        if spec is None:
            return []
        fp32 = spec.matrix.get("fp32") or spec.vector.get("fp32")
        low = {k: v for k, v in spec.matrix.items() if k in ("tf32", "bf16", "fp16")}
        if not fp32 or not low:
            return []
        best_dtype, best = max(low.items(), key=lambda kv: (kv[1], kv[0] == "bf16"))
        ratio = best / fp32
        if ratio < MIN_PEAK_RATIO:
            return []
        from opscope.analysis.tree import no_ops

        if no_ops(profile) and not c.present(profile.kernels.get_column("input_types")):
            return []  # no dtype on any kernel, no host op: no fp32 matmul (the queries find none)
        kern = c.kernels_with(
            profile,
            "input_types",
            lambda: (
                c.name_match(profile, "kernels", pattern=_KERNEL_MM)
                | pl.col("op_type").fill_null("").str.contains(_KERNEL_MM)
            ),
        )
        # (the columns picked as Series: a select is a query)
        cols = ("id", "name", "input_dims", "input_types")
        if kern.height:
            src = [*(kern.get_column(k) for k in cols), kern.get_column("dur_ns").alias("cost_ns")]
        else:
            # the matmul ops by position, their costs by position too (a filter and a join
            # with every op's cost were a query, ~1 ms on a 2.3k-op rank)
            import numpy as np

            at = np.flatnonzero(c.name_mask(profile, "ops", names=_HOST_MM))
            src = [*(profile.ops.get_column(k)[at] for k in cols), c.op_costs_at(profile, at)]
        if src[0].len() == 0:
            return []
        fp = c.has_tensor_dtype(pl.DataFrame(src), ("float32",))
        if fp.height == 0:
            return []
        same_device = c.device_kind(profile) == target
        steps = c.step_info(profile)
        out = []
        for where, ids, rs in c.rows_by_location(profile, fp):
            t = float(rs.get_column("cost_ns").sum())  # (a sum skips nulls: no fill_null query)
            saving = t * (1 - fp32 / best) if same_device else 0.0
            how = (
                f"fp32 time × (1 − {fp32 / 1e12:g}/{best / 1e12:g} TFLOP/s, {spec.label} "
                "datasheet) — compute-bound upper bound"
                if same_device
                else f"not estimated: measured on {c.device_kind(profile)}, advice for {target}"
            )
            first = rs.row(0, named=True)
            mm = c.parse_dims(first["input_dims"]) or []
            mats = [d for d in mm if len(d) == 2]
            ev: dict[str, Any] = {
                "operators": sorted(set(rs.get_column("name").to_list())),
                "shapes": sorted(set(map(str, rs.get_column("input_dims").to_list())))[:10],
                "dtypes": ["float32"],
                "calls": rs.height,
                "figures": {
                    "fp32_us_per_step": round(steps.per_step_us(t), 3),
                    "fp32_peak_tflops": fp32 / 1e12,
                    f"{best_dtype}_peak_tflops": best / 1e12,
                    "peak_ratio": round(ratio, 2),
                    "device": spec.label,
                },
                "event_ids": ids[:10],
            }
            if len(mats) >= 2 and mats[0][1] == mats[1][0]:
                ev["bench"] = {
                    "op": "matmul",
                    "m": mats[0][0],
                    "k": mats[0][1],
                    "n": mats[1][1],
                    "dtype": "float32",
                    "fix": f"dtype:{'bfloat16' if best_dtype != 'fp16' else 'float16'}",
                }
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=f"fp32 matmuls on {spec.label}: {best_dtype} peak is {ratio:.0f}× fp32",
                    where=where,
                    key=spec.key,
                    saving_ns=saving,
                    saving_how=how,
                    fix=(
                        "with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n"
                        "    loss = model(x)\n"
                        "# or keep fp32 storage and allow TF32 on matmuls:\n"
                        "torch.backends.cuda.matmul.allow_tf32 = True"
                    ),
                    evidence=ev,
                    cap=None if same_device else "medium",
                    steps=steps,
                    severity=None if same_device else "medium",
                    limit_ns=t,
                    limit_what="the fp32 matmuls' own time",
                    method="peak-ratio" if saving else "unknown",
                )
            )
        return out


register(Precision())
