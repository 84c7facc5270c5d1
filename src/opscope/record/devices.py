"""Device detection (CPU / CUDA / ROCm / XPU / Ascend NPU) and profiler activities.

torch and torch_npu are imported inside the functions so that importing this module stays cheap.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from opscope.errors import RecordError

ASCEND_OPTIONS = ("profiler_level", "aic_metrics", "l2_cache", "data_simplification", "export_type")


@dataclass(frozen=True)
class DeviceInfo:
    """The accelerator this process sees: ``kind`` is cpu, cuda, rocm, xpu or npu."""

    kind: str
    name: str
    count: int


def has_npu() -> bool:
    """Whether torch_npu is importable (an Ascend machine)."""
    return importlib.util.find_spec("torch_npu") is not None


def detect() -> DeviceInfo:
    """The device kind, name of device 0 and device count."""
    import torch

    if has_npu():
        import torch_npu  # noqa: F401

        npu: Any = getattr(torch, "npu", None)
        if npu is not None and npu.is_available():
            return DeviceInfo("npu", str(npu.get_device_name(0)), int(npu.device_count()))
    if torch.cuda.is_available():
        kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        return DeviceInfo(kind, torch.cuda.get_device_name(0), torch.cuda.device_count())
    xpu: Any = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return DeviceInfo("xpu", str(xpu.get_device_name(0)), int(xpu.device_count()))
    return DeviceInfo("cpu", "cpu", 1)


def activities(spec: str | list[str], device: DeviceInfo) -> list[Any]:
    """Profiler activities for ``spec`` ("auto", "cpu", or a list of cpu/cuda/xpu/npu)."""
    import torch.profiler as tp

    names: list[str]
    if spec == "auto":
        names = ["cpu"] + ([] if device.kind == "cpu" else [device.kind])
    elif isinstance(spec, str):
        names = [spec]
    else:
        names = list(spec)
    out: list[Any] = []
    for n in names:
        key = "cuda" if n == "rocm" else n
        if key == "npu":
            import torch_npu

            out.append(torch_npu.profiler.ProfilerActivity.NPU)
            continue
        act = getattr(tp.ProfilerActivity, key.upper(), None)
        if act is None:
            raise RecordError(f"unknown profiler activity {n!r} (use cpu, cuda, rocm, xpu, npu)")
        out.append(act)
    return out


def experimental_config(options: dict[str, Any], device: DeviceInfo) -> Any:
    """Build the vendor experimental config from pass-through options; unknown ones are errors."""
    unknown = [k for k in options if k not in ASCEND_OPTIONS]
    if unknown:
        raise RecordError(f"unknown profiler option {unknown[0]!r}")
    if not options:
        return None
    if device.kind != "npu":
        raise RecordError(
            f"profiler option {next(iter(options))!r} applies to Ascend NPU only "
            "(torch_npu is not available)"
        )
    import torch_npu

    npp: Any = torch_npu.profiler
    kw: dict[str, Any] = {}
    enums = {
        "profiler_level": "ProfilerLevel",
        "aic_metrics": "AiCMetrics",
        "export_type": "ExportType",
    }
    for k, raw in options.items():
        v = raw
        if k in enums and isinstance(v, str):
            enum = getattr(npp, enums[k])
            if not hasattr(enum, v):
                raise RecordError(f"profiler option {k}: unknown value {v!r}")
            v = getattr(enum, v)
        kw[k] = v
    return npp._ExperimentalConfig(**kw)


def memory_peaks(device: DeviceInfo) -> tuple[int | None, int | None]:
    """Peak allocated/reserved bytes since the last call (then reset); None on CPU."""
    if device.kind == "cpu":
        return None, None
    import torch

    mod: Any = torch.cuda if device.kind in ("cuda", "rocm") else getattr(torch, device.kind)
    try:
        a = int(mod.max_memory_allocated())
        r = int(mod.max_memory_reserved())
        mod.reset_peak_memory_stats()
    except Exception:
        return None, None
    return a, r
