"""Verification: run the flagged operator at its real shape and dtype, and its fix, on the
present device, and write the measured speedup back into the finding.

Only findings whose evidence carries a ``bench`` spec can be measured; the others come back
with ``verification = {"status": "not measurable", ...}`` and no speedup — nothing is claimed
unmeasured. A fix that does not measure faster says so: "not faster on this device: 0.97×".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from opscope.advise import _bench as b
from opscope.advise import sweep
from opscope.advise.finding import Finding
from opscope.advise.rule import Findings
from opscope.model import Profile

FIX_LABELS = {
    "padded": "padded shape",
    "contiguous_b": "contiguous (pre-transposed) weight",
    "linear": "F.linear with fused bias",
    "addmm": "addmm with fused bias",
    "sdpa": "scaled_dot_product_attention",
    "foreach": "foreach optimizer",
    "identity": "identical variant",
}


def _fns(spec: dict[str, Any], device: str) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    op = spec.get("op")
    fix = str(spec.get("fix", ""))
    if op == "matmul":
        m, k, n = int(spec["m"]), int(spec["k"]), int(spec["n"])
        dtype = str(spec.get("dtype") or "float32")
        v = sweep.matmul_variants(
            m,
            k,
            n,
            dtype,
            device,
            variants=("original", fix),
            pad_to=spec.get("pad_to"),
            padded_shape=spec.get("padded_shape"),
            bias=bool(spec.get("bias")),
            transposed_b=bool(spec.get("transposed_b")),
        )
        shape = {
            "m": m,
            "k": k,
            "n": n,
            "dtype": dtype,
            "fix_shape": list(v[fix][1]),
            "fix_dtype": v[fix][2],
        }
        return {"original": v["original"][0], "fix": v[fix][0]}, shape
    if op == "attention":
        fns = sweep.attention_variants(
            spec["shape"], int(spec["kv_len"]), str(spec.get("dtype") or "float32"), device
        )
        fix_fn = fns["original"] if fix == "identity" else fns["sdpa"]
        return {"original": fns["original"], "fix": fix_fn}, {"shape": spec["shape"]}
    if op == "optimizer":
        shapes = [list(s) for s in spec.get("shapes", [])]
        if not shapes:
            raise b.BenchError("no parameter shapes in the profile")
        fns = sweep.optimizer_variants(
            str(spec["optimizer"]), shapes, str(spec.get("dtype") or "float32"), device
        )
        return {"original": fns["original"], "fix": fns["foreach"]}, {"params": len(shapes)}
    raise b.BenchError(f"no micro-benchmark for op {op!r}")


def verify_finding(finding: Finding, device: str = "auto", budget_s: float = 2.0) -> Finding:
    """The finding with ``verified_speedup`` and ``verification`` measured on ``device``."""
    spec = finding.evidence.get("bench")
    if not spec:
        return dataclasses.replace(
            finding,
            verified_speedup=None,
            verification={
                "status": "not measurable",
                "summary": "no micro-benchmark applies to this rule; nothing was measured",
            },
        )
    dev = b.resolve_device(device)
    try:
        fns, shape = _fns(dict(spec), dev)
    except b.BenchError as e:
        return dataclasses.replace(
            finding,
            verified_speedup=None,
            verification={
                "status": "skipped",
                "summary": f"not measured: {e.reason}",
                "device": dev,
            },
        )
    t = b.time_variants(fns, dev, budget_s)
    orig, fix = t["original"], t["fix"]
    speedup = orig.median_ns / fix.median_ns
    faster = b.is_faster(orig, fix)
    label = FIX_LABELS.get(str(spec.get("fix")), str(spec.get("fix")))
    where = b.device_label(dev)
    noise = (
        f"median {fix.median_ns / 1e3:.1f} µs vs {orig.median_ns / 1e3:.1f} µs, IQR "
        f"{fix.iqr_ns / 1e3:.1f} / {orig.iqr_ns / 1e3:.1f} µs, {len(orig.samples_ns)} "
        "interleaved samples each"
    )
    if faster:
        summary = f"{label}: {speedup:.2f}× faster on {where} ({noise})"
    else:
        summary = f"not faster on this device: {speedup:.2f}× ({label} on {where}; {noise})"
    # estimated vs measured: the flagged calls' time per step scaled by the measured speedup
    per_step = (finding.evidence.get("figures") or {}).get("time_us_per_step")
    measured_saving = (
        max(float(per_step) * (1.0 - 1.0 / speedup), 0.0)
        if isinstance(per_step, int | float) and speedup > 0
        else None
    )
    if measured_saving is not None:
        summary += (
            f"; saving estimated {finding.saving_us:.1f} µs/step, measured "
            f"{measured_saving:.1f} µs/step"
        )
    return dataclasses.replace(
        finding,
        verified_speedup=speedup,
        verification={
            "status": "measured",
            "faster": faster,
            "device": where,
            "fix": spec.get("fix"),
            **shape,
            "original_us": orig.median_ns / 1e3,
            "fix_us": fix.median_ns / 1e3,
            "original_iqr_us": orig.iqr_ns / 1e3,
            "fix_iqr_us": fix.iqr_ns / 1e3,
            "repeats": len(orig.samples_ns),
            "speedup": speedup,
            "estimated_saving_us": finding.saving_us,
            "measured_saving_us": measured_saving,
            "summary": summary,
        },
    )


def verify(
    profile: Profile | None,
    findings: Findings | Iterable[Finding],
    device: str = "auto",
    budget_s: float = 10.0,
    *,
    only: Iterable[str] | None = None,
) -> Findings:
    """Measure every verifiable finding (or those whose id is in ``only``) on ``device``.

    The budget is shared between the measurable findings. Returns new Findings (the inputs are
    not changed). ``profile`` is accepted for symmetry with :func:`~opscope.advise.advise` and
    not needed: each finding's evidence holds its shape and dtype.
    """
    del profile
    fs = findings if isinstance(findings, Findings) else Findings(tuple(findings))
    wanted = set(only) if only is not None else None
    pick = [
        f for f in fs if wanted is None or f.id in wanted or any(f.id.startswith(w) for w in wanted)
    ]
    n_bench = sum(1 for f in pick if f.evidence.get("bench")) or 1
    per = max(budget_s / n_bench, 0.05)
    done = {f.id: verify_finding(f, device, per) for f in pick}
    return fs.replace_items(done.get(f.id, f) for f in fs)
