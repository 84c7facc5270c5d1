"""Device peaks: datasheet figures for common accelerators, matched by name, and calibration.

Every figure is dense (no structured sparsity), per device as torch sees it (one MI250/MI250X
GCD is one torch device, so its figures are half the package's). ``matrix`` peaks are the
tensor/matrix/cube units (what matmul and convolution reach); ``vector`` peaks are the
general-purpose cores (what elementwise work reaches). A dtype missing from a dict has no peak
on that device (V100 has no bf16) and gives ``pct_of_peak`` null.

The CPU, and any device not in the table, gets its peaks from ``opscope calibrate``'s cache
(``~/.cache/opscope/calibration/<device-key>.json``) when one is present; else peaks are unknown.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from opscope.errors import OpscopeError

T: Final = 1e12
G: Final = 1e9


@dataclass(frozen=True)
class DeviceSpec:
    """Peak figures of one device."""

    key: str  # "h100-sxm"
    label: str  # "NVIDIA H100 SXM5 80GB"
    vendor: str  # "nvidia", "amd", "ascend", "cpu"
    matrix: dict[str, float]  # dtype class -> FLOP/s on tensor/matrix/cube units
    vector: dict[str, float]  # dtype class -> FLOP/s on the general-purpose cores
    mem_bw: float | None  # DRAM bytes/s
    compute_units: int | None  # SMs / CUs / AI cores (cube cores on Ascend)
    source: str  # where the figures come from
    patterns: tuple[str, ...] = ()  # lower-case substrings of the device name
    min_memory_gb: float = 0.0  # tells 40 GB from 80 GB boards when the name does not
    extra: dict[str, Any] = field(default_factory=dict)

    def peak(self, dtype: str | None, roof: str | None) -> float | None:
        """FLOP/s for a dtype class on the ``"matrix"`` or ``"vector"`` units, else None."""
        if dtype is None:
            return None
        if roof == "matrix":
            if dtype == "tf32" and "tf32" not in self.matrix:
                return self.matrix.get("fp32")
            return self.matrix.get(dtype)
        return self.vector.get(
            dtype, self.vector.get("fp32") if dtype in ("fp16", "bf16") else None
        )


def _nv(
    fp64: float,
    fp32: float,
    tf32: float | None,
    half: float,
    fp8: float | None,
    int8: float | None,
    fp64_tc: float | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    matrix = {"fp64": (fp64_tc or fp64) * T, "fp32": fp32 * T, "fp16": half * T, "bf16": half * T}
    if tf32 is not None:
        matrix["tf32"] = tf32 * T
    if fp8 is not None:
        matrix["fp8"] = fp8 * T
    if int8 is not None:
        matrix["int8"] = int8 * T
    return matrix, {"fp64": fp64 * T, "fp32": fp32 * T}


_A100_M, _A100_V = _nv(9.7, 19.5, 156, 312, None, 624, fp64_tc=19.5)
_H100S_M, _H100S_V = _nv(34, 67, 494.7, 989.5, 1979, 1979, fp64_tc=67)
_H100P_M, _H100P_V = _nv(26, 51, 378, 756, 1513, 1513, fp64_tc=51)
_H100N_M, _H100N_V = _nv(30, 60, 417.5, 835.5, 1670.5, 1670.5, fp64_tc=60)
_B200_M, _B200_V = _nv(37, 75, 1125, 2250, 4500, 4500, fp64_tc=37)
_L4_M, _L4_V = _nv(0.47, 30.3, 60, 121, 242.5, 242.5)
_V100S_M = {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T}
_V100P_M = {"fp64": 7 * T, "fp32": 14 * T, "fp16": 112 * T}


def _amd(
    fp64v: float,
    fp64m: float,
    fp32v: float,
    fp32m: float,
    half: float,
    int8: float,
    tf32: float | None = None,
    fp8: float | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    matrix = {
        "fp64": fp64m * T,
        "fp32": fp32m * T,
        "fp16": half * T,
        "bf16": half * T,
        "int8": int8 * T,
    }
    if tf32 is not None:
        matrix["tf32"] = tf32 * T
    if fp8 is not None:
        matrix["fp8"] = fp8 * T
    return matrix, {"fp64": fp64v * T, "fp32": fp32v * T}


# MI250/MI250X: datasheet figures are for the 2-GCD package; torch sees each GCD as a device.
_MI250X_M, _MI250X_V = _amd(47.9 / 2, 95.7 / 2, 47.9 / 2, 95.7 / 2, 383 / 2, 383 / 2)
_MI250_M, _MI250_V = _amd(45.3 / 2, 90.5 / 2, 45.3 / 2, 90.5 / 2, 362.1 / 2, 362.1 / 2)
_MI300X_M, _MI300X_V = _amd(81.7, 163.4, 163.4, 163.4, 1307.4, 2614.9, tf32=653.7, fp8=2614.9)


def _ascend(half: float, int8: float) -> tuple[dict[str, float], dict[str, float]]:
    return {"fp16": half * T, "bf16": half * T, "int8": int8 * T}, {}


_NV_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
_NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023), sparsity figures halved"
_NV_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), sparsity figures halved"
_NV_B200 = "NVIDIA HGX B200 datasheet (2024), per GPU, sparsity figures halved"
_NV_L4 = "NVIDIA L4 Tensor Core GPU datasheet (2023), sparsity halved; fp64 = fp32/64 (derived)"
_NV_V100 = "NVIDIA Tesla V100 datasheet (2020)"
# China-market variants: the same SMs, clocks and HBM as H100 SXM5 / A100 SXM4 80GB, only the
# NVLink bandwidth is reduced (400 GB/s), which the peaks here do not use.
_NV_H800 = "NVIDIA H800 SXM5 product brief (2023): H100 SXM5 compute and HBM3, NVLink 400 GB/s"
_NV_A800 = "NVIDIA A800 40/80GB product brief (2022): A100 compute and HBM2e, NVLink 400 GB/s"
_AMD_MI250 = "AMD Instinct MI250/MI250X datasheets, package figures halved per GCD"
_AMD_MI300 = "AMD Instinct MI300X datasheet (2023), dense"
_ASC = (
    "Huawei Ascend 910 / Atlas 800T A2 public figures (not an English vendor datasheet): "
    "approximate, fp16 cube peak; check with `opscope calibrate --device npu`"
)

DEVICES: Final[tuple[DeviceSpec, ...]] = (
    DeviceSpec(
        "a100-sxm-40gb",
        "NVIDIA A100 SXM4 40GB",
        "nvidia",
        _A100_M,
        _A100_V,
        1555 * G,
        108,
        _NV_A100,
        ("a100-sxm4-40gb", "a100-pg509", "a100 sxm4 40gb", "a100"),
    ),
    DeviceSpec(
        "a100-sxm-80gb",
        "NVIDIA A100 SXM4 80GB",
        "nvidia",
        _A100_M,
        _A100_V,
        2039 * G,
        108,
        _NV_A100,
        ("a100-sxm4-80gb", "a100-sxm-80gb", "a100 sxm4 80gb", "a100"),
        min_memory_gb=60,
    ),
    DeviceSpec(
        "a100-pcie-40gb",
        "NVIDIA A100 PCIe 40GB",
        "nvidia",
        _A100_M,
        _A100_V,
        1555 * G,
        108,
        _NV_A100,
        ("a100-pcie-40gb", "a100 pcie 40gb", "a100-pcie"),
    ),
    DeviceSpec(
        "a100-pcie-80gb",
        "NVIDIA A100 PCIe 80GB",
        "nvidia",
        _A100_M,
        _A100_V,
        1935 * G,
        108,
        _NV_A100,
        ("a100-pcie-80gb", "a100 80gb pcie", "a100-pcie"),
        min_memory_gb=60,
    ),
    DeviceSpec(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        "nvidia",
        _H100S_M,
        _H100S_V,
        3350 * G,
        132,
        _NV_H100,
        ("h100 80gb hbm3", "h100-sxm", "h100 sxm", "h100"),
    ),
    DeviceSpec(
        "h100-pcie",
        "NVIDIA H100 PCIe 80GB",
        "nvidia",
        _H100P_M,
        _H100P_V,
        2000 * G,
        114,
        _NV_H100,
        ("h100 pcie", "h100-pcie"),
    ),
    DeviceSpec(
        "h100-nvl",
        "NVIDIA H100 NVL 94GB",
        "nvidia",
        _H100N_M,
        _H100N_V,
        3900 * G,
        132,
        _NV_H100,
        ("h100 nvl", "h100-nvl"),
    ),
    DeviceSpec(
        "h200",
        "NVIDIA H200 SXM 141GB",
        "nvidia",
        _H100S_M,
        _H100S_V,
        4800 * G,
        132,
        _NV_H200,
        ("h200",),
    ),
    DeviceSpec(
        "h800",
        "NVIDIA H800 SXM5 80GB",
        "nvidia",
        _H100S_M,
        _H100S_V,
        3350 * G,
        132,
        _NV_H800,
        ("h800",),
    ),
    DeviceSpec(
        "a800-80gb",
        "NVIDIA A800 SXM4 80GB",
        "nvidia",
        _A100_M,
        _A100_V,
        2039 * G,
        108,
        _NV_A800,
        ("a800",),
    ),
    DeviceSpec(
        "b200", "NVIDIA B200", "nvidia", _B200_M, _B200_V, 8000 * G, 148, _NV_B200, ("b200",)
    ),
    DeviceSpec("l4", "NVIDIA L4", "nvidia", _L4_M, _L4_V, 300 * G, 58, _NV_L4, ("nvidia l4",)),
    DeviceSpec(
        "v100-sxm2",
        "NVIDIA Tesla V100 SXM2",
        "nvidia",
        _V100S_M,
        {"fp64": 7.8 * T, "fp32": 15.7 * T},
        900 * G,
        80,
        _NV_V100,
        ("v100-sxm2", "v100-dgxs", "v100 sxm2", "v100"),
    ),
    DeviceSpec(
        "v100-pcie",
        "NVIDIA Tesla V100 PCIe",
        "nvidia",
        _V100P_M,
        {"fp64": 7 * T, "fp32": 14 * T},
        900 * G,
        80,
        _NV_V100,
        ("v100-pcie", "v100 pcie"),
    ),
    DeviceSpec(
        "mi250x",
        "AMD Instinct MI250X (one GCD)",
        "amd",
        _MI250X_M,
        _MI250X_V,
        1638.4 * G,
        110,
        _AMD_MI250,
        ("mi250x",),
    ),
    DeviceSpec(
        "mi250",
        "AMD Instinct MI250 (one GCD)",
        "amd",
        _MI250_M,
        _MI250_V,
        1638.4 * G,
        104,
        _AMD_MI250,
        ("mi250",),
    ),
    DeviceSpec(
        "mi300x",
        "AMD Instinct MI300X",
        "amd",
        _MI300X_M,
        _MI300X_V,
        5300 * G,
        304,
        _AMD_MI300,
        ("mi300x",),
    ),
    DeviceSpec(
        "ascend910a",
        "Huawei Ascend 910A",
        "ascend",
        *_ascend(256, 512),
        1200 * G,
        32,
        _ASC,
        ("ascend910a", "ascend 910a", "910a"),
    ),
    DeviceSpec(
        "ascend910b1",
        "Huawei Ascend 910B1",
        "ascend",
        *_ascend(414, 828),
        1600 * G,
        24,
        _ASC,
        ("ascend910b1", "910b1"),
    ),
    DeviceSpec(
        "ascend910b2",
        "Huawei Ascend 910B2",
        "ascend",
        *_ascend(376, 752),
        1600 * G,
        24,
        _ASC,
        ("ascend910b2", "910b2"),
    ),
    DeviceSpec(
        "ascend910b3",
        "Huawei Ascend 910B3",
        "ascend",
        *_ascend(313, 626),
        1600 * G,
        20,
        _ASC,
        ("ascend910b3", "910b3"),
    ),
    DeviceSpec(
        "ascend910b4",
        "Huawei Ascend 910B4",
        "ascend",
        *_ascend(280, 560),
        800 * G,
        20,
        _ASC,
        ("ascend910b4", "910b4"),
    ),
)

# gfx90a parts report themselves as "AMD Radeon Graphics" under some ROCm versions: tell
# MI250 from MI250X by the CU count of the GCD.
_GENERIC_AMD: Final = ("amd radeon graphics", "amd instinct", "gfx90a")


def match(
    name: str | None, *, compute_units: int | None = None, memory_bytes: int | None = None
) -> DeviceSpec | None:
    """The table entry for a device name (case-insensitive, longest pattern wins), else None.

    ``compute_units`` (SMs/CUs) and ``memory_bytes`` break ties between variants the name does
    not tell apart (A100 40/80 GB, MI250 vs MI250X reported as "AMD Radeon Graphics").
    """
    if not name:
        return None
    n = name.lower()
    mem_gb = (memory_bytes or 0) / 1e9
    best: tuple[int, int, float, DeviceSpec] | None = None
    for spec in DEVICES:
        hits = [p for p in spec.patterns if p in n]
        if not hits or (memory_bytes and mem_gb < spec.min_memory_gb):
            continue
        cu_ok = int(compute_units is not None and spec.compute_units == compute_units)
        # memory known: the largest variant it fits; unknown: the smallest (conservative)
        mem_pref = spec.min_memory_gb if memory_bytes else -spec.min_memory_gb
        score = (max(len(p) for p in hits), cu_ok, mem_pref, spec)
        if best is None or score[:3] > best[:3]:
            best = score
    if best is not None:
        return best[3]
    if compute_units is not None and any(g in n for g in _GENERIC_AMD):
        for spec in DEVICES:
            if spec.vendor == "amd" and spec.compute_units == compute_units:
                return spec
    return None


# Calibration cache --------------------------------------------------------------------------


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/opscope/calibration`` (default ``~/.cache/opscope/calibration``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opscope" / "calibration"


def device_key(name: str) -> str:
    """A file-name-safe key for a device name (``"NVIDIA H100"`` -> ``"nvidia-h100"``)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def spec_from_calibration(data: dict[str, Any]) -> DeviceSpec:
    """A DeviceSpec from a calibration record (see ``opscope calibrate --json``)."""
    flops = {str(k): float(v) for k, v in (data.get("matmul_flops") or {}).items() if v}
    return DeviceSpec(
        key=str(data.get("key", "calibrated")),
        label=f"{data.get('name', 'device')} (calibrated)",
        vendor=str(data.get("vendor", "cpu")),
        matrix=flops,
        vector={k: v for k, v in flops.items() if k in ("fp32", "fp64")},
        mem_bw=float(data["copy_bandwidth"]) if data.get("copy_bandwidth") else None,
        compute_units=data.get("compute_units"),
        source=f"opscope calibrate, {data.get('measured_at', '?')}",
    )


def load_calibration(name: str, directory: Path | None = None) -> DeviceSpec | None:
    """The cached calibration for the device called ``name``, if one was written."""
    path = (directory or cache_dir()) / f"{device_key(name)}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return spec_from_calibration(data)


def any_cpu_calibration(directory: Path | None = None) -> DeviceSpec | None:
    """The most recent cached CPU calibration (a CPU trace does not name its CPU)."""
    d = directory or cache_dir()
    try:
        files = sorted(d.glob("cpu*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for f in files:
        spec = load_calibration(f.stem, d)
        if spec is not None:
            return spec
    return None


def resolve(
    name: str | None,
    *,
    vendor: str | None = None,
    compute_units: int | None = None,
    memory_bytes: int | None = None,
    calibration_dir: Path | None = None,
) -> tuple[DeviceSpec | None, str]:
    """The peaks to use for a device and a one-line note on where they come from.

    Order: a calibration cached for this exact device name, the datasheet table, the latest CPU
    calibration for a host-only profile (``vendor="cpu"``); else ``(None, reason)``.
    """
    if name:
        cal = load_calibration(name, calibration_dir)
        if cal is not None:
            return cal, f"peaks measured by opscope calibrate ({cal.source})"
        spec = match(name, compute_units=compute_units, memory_bytes=memory_bytes)
        if spec is not None:
            return spec, f"datasheet peaks of {spec.label} ({spec.source})"
    if vendor == "cpu" or (name or "").lower().startswith("cpu"):
        cal = any_cpu_calibration(calibration_dir)
        if cal is not None:
            return cal, f"CPU peaks measured by opscope calibrate ({cal.source})"
        return None, "no peaks for the CPU: run `opscope calibrate` to measure them"
    if name is None:
        return None, "the profile does not name its device: no peaks (see Options.device_name)"
    return None, f"no peaks known for device {name!r}: run `opscope calibrate` on it"


def write_calibration(data: dict[str, Any], directory: Path | None = None) -> Path:
    """Write a calibration record as ``<device-key>.json``, atomically (temp file + rename)."""
    import tempfile

    d = directory or cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    target = d / f"{device_key(str(data['name']))}.json"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


class UnknownDeviceError(OpscopeError):
    """``--device NAME`` names no device of the datasheet table nor a calibrated one."""


def check_device_name(name: str, calibration_dir: Path | None = None) -> DeviceSpec:
    """The peaks for a device named by the user (``--device MI300X``), or a one-line error.

    The one resolution every command's ``--device`` goes through: a calibration cached under
    that name first, then the datasheet table (case-insensitive, ``"h100"``, ``"MI300X"``,
    ``"ascend910b2"``, a table key such as ``"a100-sxm-80gb"``).
    """
    spec, _ = resolve(name, calibration_dir=calibration_dir)
    if spec is None:
        spec = next((d for d in DEVICES if d.key == name.strip().lower()), None)
    if spec is None:
        keys = ", ".join(d.key for d in DEVICES)
        raise UnknownDeviceError(f"unknown device {name!r} for --device (known: {keys})")
    return spec
