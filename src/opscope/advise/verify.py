"""Verification: run the flagged operator at its real shape and dtype, and its fix, on the
present device, and write the measured speedup back into the finding.

Findings whose evidence carries a ``bench`` spec can be measured, and so can conv-efficiency
and elementwise-bandwidth findings, whose spec is built here from their evidence (shape and
dtype): the convolution in NCHW vs channels-last; the elementwise op eager vs
``torch.compile``'d and, when the present device is the trace's kind, the trace's per-call time
vs the op as it runs here (the bandwidth the op reaches when nothing is wrong with it). The
others come back with ``verification = {"status": "not measurable", ...}`` and no speedup —
nothing is claimed unmeasured. A fix that does not measure faster says so: "not faster on this
device: 0.97×". Every measured finding reports the estimated and the measured saving per step.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
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
    "channels_last": "channels-last memory format",
    "compiled": "torch.compile'd (fused, vectorised) kernel",
    "wave": "N changed by whole tiles to fill the last wave (rate)",
}
# Packed attention calls per benchmark call at most (a launch-bound finding's fix).
MAX_PACK = 64
# The present benchmark device for each trace device kind (opscope's target names).
KIND_OF_DEVICE = {"cuda": ("nvidia", "amd"), "npu": ("ascend",), "cpu": ("cpu",)}


def _shapes(raw: Any) -> list[list[int]]:
    """The input shapes of an evidence ``shapes`` entry (a JSON string or a list)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    if not isinstance(raw, list):
        return []
    return [[int(x) for x in d] if isinstance(d, list) else [] for d in raw]


def derived_bench(finding: Finding, steps: int | None = None) -> dict[str, Any] | None:
    """The micro-benchmark spec of a finding whose rule sets none but whose evidence holds the
    shape: conv-efficiency (NCHW vs channels-last), elementwise-bandwidth (eager vs compiled,
    and vs the trace's own time), attention-efficiency (the head dim the kernel pads to, or
    the short calls packed into one: compared by rate) and gemm-tiles waves (N changed by
    whole tiles: by rate). ``steps``: the trace's step count (calls per step to pack)."""
    ev = finding.evidence
    shapes = ev.get("shapes") or []
    dims = _shapes(shapes[0]) if shapes else []
    dtypes = [str(d) for d in ev.get("dtypes") or [] if d]
    dtype = b.TORCH_DTYPES.get(dtypes[0].lower(), "float32") if dtypes else "float32"
    ops = [str(o) for o in ev.get("operators") or []]
    figs = ev.get("figures") or {}
    if finding.rule == "conv-efficiency" and len(dims) >= 2:
        x, w = dims[0], dims[1]
        if len(x) == 4 and len(w) == 4:
            return {"op": "conv", "x": x, "w": w, "dtype": dtype, "fix": "channels_last"}
    if finding.rule == "elementwise-bandwidth" and ops and dims:
        return {"op": "elementwise", "name": ops[0], "shapes": dims, "dtype": dtype,
                "fix": "compiled"}  # fmt: skip
    if finding.rule == "attention-efficiency" and ops == ["aten::scaled_dot_product_attention"]:
        q = dims[0] if dims else []
        if len(q) != 4:
            return None
        d, step = q[-1], 32
        if d % step and d < 256:
            fix = f"headdim:{-(-d // step) * step}"
        elif "launch-bound" in finding.title:
            calls = int(ev.get("calls") or 1)
            fix = f"batch:{max(min(calls // max(steps or 1, 1), MAX_PACK), 2)}"
        else:
            return None
        return {"op": "sdpa", "shape": q, "dtype": dtype, "fix": fix, "compare": "rate"}
    if finding.rule == "gemm-tiles" and figs.get("tiles") and figs.get("sms") and ops and dims:
        from opscope.advise.rules.gemm import TILE_N, gemm_dims

        bmnk = gemm_dims(ops[0], dims)
        tiles, sms = int(figs["tiles"]), int(figs["sms"])
        if bmnk is None or bmnk[0] != 1 or tiles <= sms:
            return None
        _, m, n, k = bmnk
        rows = -(-m // 128)
        extra = tiles - (-(-tiles // sms) - 1) * sms  # tiles in the last wave
        n_fix = n - TILE_N * -(-extra // rows)
        if n_fix <= 0:
            return None
        return {"op": "matmul", "m": m, "k": k, "n": n, "dtype": dtype, "fix": "wave",
                "padded_shape": [m, k, n_fix], "compare": "rate"}  # fmt: skip
    return None


def _fns(spec: dict[str, Any], device: str) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    op = spec.get("op")
    fix = str(spec.get("fix", ""))
    if op == "matmul":
        m, k, n = int(spec["m"]), int(spec["k"]), int(spec["n"])
        dtype = str(spec.get("dtype") or "float32")
        if fix == "wave":
            fix = "padded"  # the padded variant runs padded_shape: here N less whole tiles
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
        if spec.get("compare") == "rate":
            fm, fk, fn = v[fix][1]
            shape["work_ratio"] = (fm * fk * fn) / (m * k * n)
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
    if op == "sdpa":
        fns, ratio = sweep.sdpa_variants(
            spec["shape"], str(spec.get("dtype") or "float32"), device, fix
        )
        return fns, {"shape": list(spec["shape"]), "work_ratio": ratio}
    if op == "conv":
        fns = sweep.conv_variants(spec["x"], spec["w"], str(spec.get("dtype") or "float32"), device)
        return {"original": fns["original"], "fix": fns["channels_last"]}, {
            "input": list(spec["x"]),
            "weight": list(spec["w"]),
        }
    if op == "elementwise":
        args = (str(spec["name"]), spec["shapes"], str(spec.get("dtype") or "float32"), device)
        info: dict[str, Any] = {
            "operator": spec["name"],
            "shapes": [list(x) for x in spec["shapes"]],
        }
        try:
            fns = sweep.elementwise_variants(*args)
        except b.BenchError as e:
            if "torch.compile" not in e.reason:
                raise
            # no compiler here: the op as it runs here can still be set against the trace
            fns = sweep.elementwise_variants(*args, compile=False)
            info["compile_error"] = e.reason
        return {"original": fns["original"], "fix": fns.get("compiled", fns["original"])}, info
    raise b.BenchError(f"no micro-benchmark for op {op!r}")


def verify_finding(
    finding: Finding,
    device: str = "auto",
    budget_s: float = 2.0,
    *,
    trace: Mapping[str, Any] | None = None,
) -> Finding:
    """The finding with ``verified_speedup`` and ``verification`` measured on ``device``.

    ``trace`` (``{"kind": "nvidia", "steps": 3}``: the trace's device kind and step count)
    lets an elementwise finding compare the trace's per-call time with the op run here, when
    the present device is of the trace's kind."""
    steps = (trace or {}).get("steps")
    spec = finding.evidence.get("bench") or derived_bench(
        finding, steps if isinstance(steps, int) else None
    )
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
        return _skipped(finding, dev, e)
    compile_error = shape.pop("compile_error", None)
    t = b.time_variants(fns, dev, budget_s)
    orig, fix = t["original"], t["fix"]
    ratio = shape.get("work_ratio")
    if spec.get("compare") == "rate" and isinstance(ratio, int | float) and ratio > 0:
        # the fix does `ratio` times the work: its time per original's work, so that the
        # speedup is the ratio of rates (the same kernel at a whole tile / head-dim step)
        fix = b.Timing(tuple(x / ratio for x in fix.samples_ns), fix.inner)
    label = _label(str(spec.get("fix")))
    extra: dict[str, Any] = {}
    if spec.get("op") == "elementwise":
        try:
            orig, fix, label, extra = _against_trace(
                finding, dev, orig, fix, trace, {**spec, "_compile_error": compile_error}
            )
        except b.BenchError as e:
            return _skipped(finding, dev, e)
    speedup = orig.median_ns / fix.median_ns
    faster = b.is_faster(orig, fix)
    where = b.device_label(dev)
    noise = (
        f"median {fix.median_ns / 1e3:.1f} µs vs {orig.median_ns / 1e3:.1f} µs, IQR "
        f"{fix.iqr_ns / 1e3:.1f} / {orig.iqr_ns / 1e3:.1f} µs, "
        f"{max(len(orig.samples_ns), len(fix.samples_ns))} interleaved samples each"
    )
    if faster:
        summary = f"{label}: {speedup:.2f}× faster on {where} ({noise})"
    else:
        summary = f"not faster on this device: {speedup:.2f}× ({label} on {where}; {noise})"
    # estimated vs measured: the flagged calls' time per step scaled by the measured speedup
    # the time the fix replaces: the flagged calls' (or, for attention, the span's) per step
    figs = finding.evidence.get("figures") or {}
    per_step = figs.get("time_us_per_step", figs.get("span_us_per_step"))
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
            **extra,
            "original_us": orig.median_ns / 1e3,
            "fix_us": fix.median_ns / 1e3,
            "original_iqr_us": orig.iqr_ns / 1e3,
            "fix_iqr_us": fix.iqr_ns / 1e3,
            "repeats": max(len(orig.samples_ns), len(fix.samples_ns)),
            "speedup": speedup,
            "estimated_saving_us": finding.saving_us,
            "measured_saving_us": measured_saving,
            "summary": summary,
        },
    )


def _label(fix: str) -> str:
    kind, _, arg = fix.partition(":")
    if kind == "headdim":
        return f"the kernel's own head-dim step d={arg} (rate)"
    if kind == "batch":
        return f"{arg} calls packed into one (rate)"
    return FIX_LABELS.get(fix, fix)


def _skipped(finding: Finding, dev: str, e: b.BenchError) -> Finding:
    return dataclasses.replace(
        finding,
        verified_speedup=None,
        verification={"status": "skipped", "summary": f"not measured: {e.reason}", "device": dev},
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
    not changed). Each finding's evidence holds its shape and dtype; ``profile`` (optional)
    gives the trace's device kind and step count, so that an elementwise finding can be
    compared with the trace's own time (see :func:`verify_finding`).
    """
    trace: dict[str, Any] | None = None
    if profile is not None:
        from opscope.advise._common import device_kind, step_info

        trace = {"kind": device_kind(profile), "steps": step_info(profile).n}
    fs = findings if isinstance(findings, Findings) else Findings(tuple(findings))
    wanted = set(only) if only is not None else None
    pick = [
        f for f in fs if wanted is None or f.id in wanted or any(f.id.startswith(w) for w in wanted)
    ]
    n_steps = trace["steps"] if trace else None
    n_bench = sum(1 for f in pick if f.evidence.get("bench") or derived_bench(f, n_steps)) or 1
    per = max(budget_s / n_bench, 0.05)
    done = {f.id: verify_finding(f, device, per, trace=trace) for f in pick}
    return fs.replace_items(done.get(f.id, f) for f in fs)


def _against_trace(
    finding: Finding,
    dev: str,
    eager: b.Timing,
    compiled: b.Timing,
    trace: Mapping[str, Any] | None,
    spec: Mapping[str, Any],
) -> tuple[b.Timing, b.Timing, str, dict[str, Any]]:
    """An elementwise finding's (original, fix, label, extra figures): on a device of the
    trace's kind, the trace's own per-call time against the faster of eager and compiled here
    (what the op costs when it streams its bytes); elsewhere eager against compiled. The
    extra figures are the bytes per call and the bandwidth each measured variant reaches."""
    size = int(b.torch_dtype(str(spec.get("dtype") or "float32")).itemsize)
    elems = [_numel(s) for s in spec.get("shapes", [])]
    # inputs read and one output of the largest input's size written
    nbytes = (sum(elems) + max(elems, default=0)) * size
    extra: dict[str, Any] = {
        "bytes_per_call": nbytes,
        "eager_us": eager.median_ns / 1e3,
        "compiled_us": compiled.median_ns / 1e3,
        "eager_gbps": nbytes / eager.median_ns,
        "compiled_gbps": nbytes / compiled.median_ns,
    }
    compile_error = spec.get("_compile_error")
    if compile_error:
        extra["compile_error"] = compile_error
        del extra["compiled_us"], extra["compiled_gbps"]
        best = eager
    else:
        best = compiled if compiled.median_ns < eager.median_ns else eager
    kinds = KIND_OF_DEVICE.get(dev, ())
    figures = finding.evidence.get("figures") or {}
    per_step = figures.get("time_us_per_step")
    calls = finding.evidence.get("calls")
    steps = (trace or {}).get("steps")
    if (
        trace is not None
        and trace.get("kind") in kinds
        and isinstance(per_step, int | float)
        and isinstance(calls, int)
        and calls > 0
        and isinstance(steps, int)
        and steps > 0
    ):
        trace_ns = float(per_step) * 1e3 * steps / calls
        extra["baseline"] = "trace"
        extra["trace_us_per_call"] = trace_ns / 1e3
        which = "compiled" if best is compiled and not compile_error else "eager"
        label = (
            f"the same op on contiguous inputs run here ({which}, "
            f"{nbytes / best.median_ns:.0f} GB/s)"
        )
        return b.Timing((trace_ns,), 1), best, label, extra
    if compile_error:
        raise b.BenchError(
            f"{compile_error}; and the trace ran on another kind of device, so its own time "
            "cannot be compared with a run here"
        )
    extra["baseline"] = "eager"
    return eager, compiled, FIX_LABELS["compiled"], extra


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for x in shape:
        n *= int(x)
    return n
