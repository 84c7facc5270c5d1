"""Overhead of ``opscope record`` (issue 3).

1. Profiled steps under ``opscope record`` vs the same steps under a plain
   ``torch.profiler.profile`` with the same schedule and options (target ratio <= 1.03).
2. Steps between samples in periodic mode (``--every``) vs no profiler at all (target <= 1.01).

Each configuration runs the same training loop (this file with ``--worker``) in a fresh process;
the loop times every iteration itself, and the ratios compare medians over the same step indices
(>= 20 steps each). Rounds alternate the configurations and the best median of each is kept, to
damp noise from other processes. The same medians of each step's CPU time (the worker's process
time) are printed too, and a second no-profiler process gives the noise floor: the ratio of two
identical configurations in this run, which the targets above cannot be read more finely than.
Usage: ``python benchmarks/record_overhead.py [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ACTIVE = 20
PERIODIC_STEPS = 90
EVERY = 40


def worker(mode: str, steps: int, times_out: str, trace_dir: str, device: str) -> None:
    import torch

    torch.manual_seed(0)
    # one thread: the comparison is about profiler overhead, not thread scheduling on a busy host
    torch.set_num_threads(1)
    dev = torch.device(device)
    model = torch.nn.Sequential(
        *[m for _ in range(6) for m in (torch.nn.Linear(256, 256), torch.nn.GELU())]
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device=dev)
    prof = None
    if mode == "torch":
        import gzip
        import shutil

        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)

        def save(p: torch.profiler.profile) -> None:
            tmp = os.path.join(trace_dir, "t.json")
            p.export_chrome_trace(tmp)
            with open(tmp, "rb") as fi, gzip.open(tmp + ".gz", "wb") as fo:
                shutil.copyfileobj(fi, fo)

        prof = torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=ACTIVE, repeat=1),
            on_trace_ready=save,
            record_shapes=True,
            profile_memory=True,
            with_stack=True,
            with_modules=True,
            with_flops=True,
        )
        prof.start()
    times = []
    cpu = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        c0 = time.process_time_ns()
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if prof is not None:
            prof.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter_ns() - t0)
        cpu.append(time.process_time_ns() - c0)
    if prof is not None:
        prof.stop()
    Path(times_out).write_text(json.dumps({"wall": times, "cpu": cpu}))


def run(config: str, tmp: Path, device: str) -> dict[str, list[int]]:
    out = tmp / f"{config}-{time.perf_counter_ns()}"
    out.mkdir()
    times = out / "times.json"
    me = [sys.executable, __file__, "--worker"]
    if config == "opscope":
        steps = ACTIVE + 3
        cmd = [sys.executable, "-m", "opscope", "record", "--wait", "1", "--warmup", "1",
               "--active", str(ACTIVE), "--out", str(out / "run"), "--", *me, "none"]  # fmt: skip
    elif config == "periodic":
        steps = PERIODIC_STEPS
        cmd = [sys.executable, "-m", "opscope", "record", "--wait", "1", "--warmup", "1",
               "--active", "3", "--every", str(EVERY), "--out", str(out / "run"), "--",
               *me, "none"]  # fmt: skip
    else:
        steps = ACTIVE + 3 if config == "torch" else PERIODIC_STEPS
        cmd = [*me, "torch" if config == "torch" else "none"]
    cmd += ["--steps", str(steps), "--times", str(times), "--trace-dir", str(out),
            "--device", device]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return dict(json.loads(times.read_text()))


def between_samples(n: int) -> list[int]:
    """Step indices with the profiler off from their start to their end.

    A sample starting at step ``s`` (warmup 1, active 3) owns steps ``s - 1`` (its optimizer-step
    hook starts the profiler) to ``s + 3`` (its hook stops the profiler and saves the trace); the
    step after that is a between-samples step like any other.
    """
    busy: set[int] = set()
    for start in range(1, n, EVERY):
        busy.update(range(start - 1, start + 1 + 3))
    return [i for i in range(5, n) if i not in busy]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", default=None)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--times", default="")
    ap.add_argument("--trace-dir", default="")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps, a.times, a.trace_dir, a.device)
        return
    profiled = list(range(2, 2 + ACTIVE))
    idle = between_samples(PERIODIC_STEPS)
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.rounds):
            for config in ("torch", "opscope", "none", "periodic", "none-again"):
                t = run(config, Path(d), a.device)
                idx = profiled if config in ("torch", "opscope") else idle
                for kind in ("wall", "cpu"):
                    med = statistics.median(t[kind][i] for i in idx)
                    key = config if kind == "wall" else f"{config} cpu"
                    best[key] = min(best.get(key, float("inf")), med)
    r1 = best["opscope"] / best["torch"]
    r2 = best["periodic"] / best["none"]
    floor = best["none-again"] / best["none"]
    print(f"device={a.device} rounds={a.rounds}")
    print(f"profiled step median: opscope {best['opscope'] / 1e6:.3f} ms, torch.profiler "
          f"{best['torch'] / 1e6:.3f} ms over {len(profiled)} steps")  # fmt: skip
    print(f"ratio opscope/torch.profiler = {r1:.3f} (target <= 1.03) "
          f"{'OK' if r1 <= 1.03 else 'OVER'}")  # fmt: skip
    print(f"between-sample step median: periodic {best['periodic'] / 1e6:.3f} ms, no profiler "
          f"{best['none'] / 1e6:.3f} ms over {len(idle)} steps")  # fmt: skip
    print(f"ratio periodic/no-profiler = {r2:.3f} (target <= 1.01) "
          f"{'OK' if r2 <= 1.01 else 'OVER'}")  # fmt: skip
    print(f"CPU-time ratios: opscope/torch.profiler "
          f"{best['opscope cpu'] / best['torch cpu']:.3f}, periodic/no-profiler "
          f"{best['periodic cpu'] / best['none cpu']:.3f}")  # fmt: skip
    print(f"noise floor: no-profiler/no-profiler (two processes) = {floor:.3f} wall, "
          f"{best['none-again cpu'] / best['none cpu']:.3f} CPU")  # fmt: skip


if __name__ == "__main__":
    main()
