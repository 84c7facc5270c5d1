"""Timing for micro-benchmarks: warm-up, adaptive repeats, interleaved variants, device sync.

torch is imported lazily (only when a benchmark runs).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opscope.errors import OpscopeError
from opscope.model import dtypes

WARMUP = 3  # calls per variant before timing (allocator, kernel selection, caches)
MIN_REPEATS = 7  # samples per variant at least, whatever the budget
MAX_REPEATS = 200
# One sample is at least this long: faster calls are repeated inside it (timer resolution and
# Python overhead would otherwise dominate).
MIN_SAMPLE_NS = 200_000
# A fix counts as faster when its median speedup is at least this and its IQR lies wholly
# below the original's (the spread of interleaved samples is the noise we can see).
MIN_SPEEDUP = 1.05


class BenchError(OpscopeError):
    """A micro-benchmark cannot run (no such device, torch missing, shape too large)."""


@dataclass(frozen=True)
class Timing:
    """Per-call times of one variant (ns)."""

    samples_ns: tuple[float, ...]
    inner: int

    @property
    def median_ns(self) -> float:
        return float(statistics.median(self.samples_ns))

    @property
    def q1_ns(self) -> float:
        return _quantile(self.samples_ns, 0.25)

    @property
    def q3_ns(self) -> float:
        return _quantile(self.samples_ns, 0.75)

    @property
    def iqr_ns(self) -> float:
        return self.q3_ns - self.q1_ns


def _quantile(xs: tuple[float, ...], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def torch_mod() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is installed in CI
        raise BenchError("verification needs torch: pip install 'opscope[torch]'") from e
    return torch


def resolve_device(device: str = "auto") -> str:
    """``"cpu"``, ``"cuda"`` or ``"npu"``: ``auto`` picks the accelerator present."""
    torch = torch_mod()
    d = (device or "auto").lower()
    if d in ("gpu", "nvidia", "amd", "rocm"):
        d = "cuda"
    if d in ("ascend",):
        d = "npu"
    if d == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if _npu_available(torch):
            return "npu"
        return "cpu"
    if d == "cuda" and not torch.cuda.is_available():
        raise BenchError("no CUDA device here (torch.cuda.is_available() is False)")
    if d == "npu" and not _npu_available(torch):
        raise BenchError("no Ascend NPU here (torch_npu not importable or no device)")
    if d not in ("cpu", "cuda", "npu"):
        raise BenchError(f"unknown device {device!r} (auto, cpu, cuda, npu)")
    return d


def _npu_available(torch: Any) -> bool:
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


def synchronizer(device: str) -> Callable[[], None]:
    torch = torch_mod()
    if device == "cuda":
        return torch.cuda.synchronize  # type: ignore[no-any-return]
    if device == "npu":
        return torch.npu.synchronize  # type: ignore[no-any-return]
    return lambda: None


def device_label(device: str) -> str:
    torch = torch_mod()
    if device == "cuda":
        return f"cuda ({torch.cuda.get_device_name()})"
    if device == "npu":
        return f"npu ({torch.npu.get_device_name()})"
    return "cpu"


def time_variants(
    fns: Mapping[str, Callable[[], Any]], device: str, budget_s: float
) -> dict[str, Timing]:
    """Time each callable: warm-up, then interleaved rounds (A B C A B C ...) until the budget
    is spent (between :data:`MIN_REPEATS` and :data:`MAX_REPEATS` samples each)."""
    sync = synchronizer(device)
    est: dict[str, float] = {}
    for name, fn in fns.items():
        for _ in range(WARMUP):
            fn()
        sync()
        t0 = time.perf_counter_ns()
        fn()
        sync()
        est[name] = max(float(time.perf_counter_ns() - t0), 1.0)
    inner = {n: max(1, math.ceil(MIN_SAMPLE_NS / e)) for n, e in est.items()}
    per_round = sum(est[n] * inner[n] for n in fns)
    repeats = int(min(MAX_REPEATS, max(MIN_REPEATS, budget_s * 1e9 / max(per_round, 1.0))))
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            k = inner[name]
            sync()
            t0 = time.perf_counter_ns()
            for _ in range(k):
                fn()
            sync()
            samples[name].append((time.perf_counter_ns() - t0) / k)
    return {n: Timing(tuple(s), inner[n]) for n, s in samples.items()}


def is_faster(orig: Timing, fix: Timing) -> bool:
    """The fix is faster beyond the noise (see :data:`MIN_SPEEDUP`)."""
    return orig.median_ns / fix.median_ns >= MIN_SPEEDUP and fix.q3_ns < orig.q1_ns


#: The dtypes a matmul/conv micro-benchmark runs in (floating point: the precision rules' choices).
BENCH_DTYPES = ("float32", "float16", "bfloat16", "float64")
#: Every spelling of those (:mod:`opscope.model.dtypes`), plus the "tf32" math mode -> the torch
#: dtype name the benchmark builds its tensors in.
TORCH_DTYPES: dict[str, str] = {
    s: name for s, name in dtypes.ALIASES.items() if name in BENCH_DTYPES
} | dtypes.MATMUL_MODES


def torch_dtype(name: str) -> Any:
    """The torch dtype a benchmark runs in for ``name`` ("bf16", "tf32", "c10::Half"...)."""
    torch = torch_mod()
    key = TORCH_DTYPES.get(dtypes.spelling(name))
    if key is None:
        raise BenchError(f"unsupported dtype {name!r} (fp32, tf32, fp16, bf16, fp64)")
    return getattr(torch, key)
