"""A tiny gloo (CPU) data-parallel run for the cluster tests: one Kineto trace per rank.

Usage: ``torchrun --nproc_per_node=N cluster_ddp.py OUT_DIR SLOW_RANK DELAY_S [STEPS]``.
Each step runs a small Linear forward/backward and all-reduces the gradients by hand;
``SLOW_RANK`` (``-1`` for none) multiplies matrices for ``DELAY_S`` seconds before the
all-reduce (extra compute, timed so the planted delay is exact), so its peers wait for it.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> None:
    out, slow_rank, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    x = torch.randn(16, 64)
    # Warm-up: the first collective sets up the gloo connections.
    dist.all_reduce(torch.zeros(4))
    a = torch.randn(32, 32)
    sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
    path = os.path.join(out, f"rank{rank}.json")
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(path),
    ) as prof:
        for _ in range(steps + 1):
            loss = model(x).square().mean()
            loss.backward()
            if rank == slow_rank:
                end = time.perf_counter() + delay
                while time.perf_counter() < end:
                    a = torch.mm(a, a).clamp_(-1.0, 1.0)
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad = None
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # The traces are written and the group is gone; skip the interpreter's C++ teardown, where
    # torch 2.13 + gloo sometimes aborts ("terminate called without an active exception", seen
    # once in a clean-clone CI run), which says nothing about the run being measured.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
