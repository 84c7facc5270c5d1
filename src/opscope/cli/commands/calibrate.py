"""``opscope calibrate``: measure the present device's matmul FLOP/s and copy bandwidth.

The result is cached as ``~/.cache/opscope/calibration/<device-key>.json`` and used by the
roofline analysis for devices not in the datasheet table, and for the CPU. torch is imported
only when the command runs (it is an optional dependency).
"""

from __future__ import annotations

import datetime as _dt
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

from opscope.errors import OpscopeError
from opscope.model.dtypes import torch_name

# Matmul dtypes measured per device kind, as the peaks tables key them (short names; "tf32" is
# fp32 with TF32 tensor cores allowed). Their torch dtypes come from opscope.model.dtypes.
DTYPES = {
    "cpu": ("fp32", "fp64", "bf16"),
    "cuda": ("fp64", "fp32", "tf32", "fp16", "bf16"),
    "npu": ("fp32", "fp16", "bf16"),
}
SIZES = {"cpu": (256, 512, 1024), "cuda": (2048, 4096, 8192), "npu": (2048, 4096, 8192)}
COPY_BYTES = {"cpu": 64 << 20, "cuda": 1 << 30, "npu": 1 << 30}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return "cpu " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu " + (platform.processor() or platform.machine() or "unknown")


def _timeit(fn: Callable[[], Any], sync: Callable[[], None], warmup: int, repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs after ``warmup`` runs, synchronised."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(
    device: str = "cpu",
    *,
    sizes: Sequence[int] | None = None,
    dtypes: Sequence[str] | None = None,
    copy_bytes: int | None = None,
    warmup: int = 2,
    repeats: int = 5,
) -> dict[str, Any]:
    """Measure matmul FLOP/s (best over ``sizes``, per dtype) and copy bandwidth on ``device``.

    Copy bandwidth counts each copied byte twice (read + write), like the roofline's bytes.
    """
    try:
        import torch
    except ImportError as e:
        raise OpscopeError("calibrate needs torch: pip install 'opscope[torch]'") from e
    if device == "cuda":
        if not torch.cuda.is_available():
            raise OpscopeError("no CUDA device available (torch.cuda.is_available() is False)")
        dev = torch.device("cuda")
        name = torch.cuda.get_device_name(dev)
        props = torch.cuda.get_device_properties(dev)
        cu: int | None = int(props.multi_processor_count)
        vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
        sync: Callable[[], None] = torch.cuda.synchronize
    elif device == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError as e:
            raise OpscopeError("calibrate --device npu needs torch_npu") from e
        dev = torch.device("npu")
        name = str(torch.npu.get_device_name(0))  # type: ignore[attr-defined]
        cu = None
        vendor = "ascend"
        sync = torch.npu.synchronize  # type: ignore[attr-defined]
    elif device == "cpu":
        dev = torch.device("cpu")
        name = _cpu_name()
        cu = None
        vendor = "cpu"

        def sync() -> None:
            return None

    else:
        raise OpscopeError(f"unknown device {device!r}: use cpu, cuda or npu")
    detail = []
    best: dict[str, float] = {}
    for dt in dtypes or DTYPES[device]:
        torch_dt = torch_name(dt)
        if torch_dt is None:
            raise OpscopeError(f"unknown dtype {dt!r} (fp64, fp32, tf32, fp16, bf16)")
        tdt = getattr(torch, torch_dt)
        prev_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        try:
            for n in sizes or SIZES[device]:
                a = torch.randn(n, n, device=dev).to(tdt)
                b = torch.randn(n, n, device=dev).to(tdt)

                def run(a: Any = a, b: Any = b) -> Any:
                    return torch.mm(a, b)

                secs = _timeit(run, sync, warmup, repeats)
                flops = 2 * n**3 / secs
                detail.append({"dtype": dt, "n": n, "median_s": secs, "flops": flops})
                best[dt] = max(best.get(dt, 0.0), flops)
                del a, b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    nbytes = copy_bytes or COPY_BYTES[device]
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    secs = _timeit(lambda: dst.copy_(src), sync, warmup, repeats)
    bw = 2 * src.numel() * 4 / secs
    return {
        "name": name,
        "key": name,
        "vendor": vendor,
        "device": device,
        "compute_units": cu,
        "matmul_flops": best,
        "matmul_detail": detail,
        "copy_bandwidth": bw,
        "copy_bytes": src.numel() * 4,
        "warmup": warmup,
        "repeats": repeats,
        "torch_version": str(torch.__version__),
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to ``app``."""

    @app.command("calibrate")
    def calibrate_cmd(
        *,
        device: str = typer.Option("cpu", "--device", help="cpu, cuda or npu."),
        json_out: bool = typer.Option(False, "--json", help="Print the measurement as JSON."),
        sizes: str | None = typer.Option(
            None, "--sizes", help="Square matmul sizes, comma-separated (default per device)."
        ),
        repeats: int = typer.Option(5, "--repeats", min=1, help="Timed runs per measurement."),
        no_cache: bool = typer.Option(False, "--no-cache", help="Do not write the cache file."),
    ) -> None:
        """Measure matmul FLOP/s per dtype and copy bandwidth; cache them for the roofline."""
        from opscope.analysis.devices import write_calibration

        try:
            size_list = [int(s) for s in sizes.split(",")] if sizes else None
        except ValueError as e:
            raise OpscopeError(f"--sizes must be integers separated by commas: {sizes!r}") from e
        if size_list is not None and any(n <= 0 for n in size_list):
            raise OpscopeError("--sizes must be positive")
        data = measure(device, sizes=size_list, repeats=repeats)
        path = None if no_cache else write_calibration(data)
        if json_out:
            from opscope.cli.output import print_json

            print_json({**data, "cache_file": str(path) if path else None})
            return
        from opscope.cli.output import console

        console.print(f"[bold]{data['name']}[/]")
        for dt, f in data["matmul_flops"].items():
            console.print(f"  matmul {dt:>5}: {f / 1e12:10.3f} TFLOP/s")
        console.print(f"  copy bandwidth: {data['copy_bandwidth'] / 1e9:8.1f} GB/s")
        if path:
            console.print(f"  cached in {path}")
