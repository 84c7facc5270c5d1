"""Record a tiny model on CPU under torch.profiler (the seed's settings) and load the trace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from opscope.model import Profile


def record(step_fn: Callable[[], Any], path: Path, steps: int = 3, warmup: int = 1) -> Path:
    """Run ``step_fn`` ``warmup + steps`` times under the profiler (seed settings)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    sched = schedule(wait=0, warmup=warmup, active=steps, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        record_shapes=True,
        with_stack=True,
        with_modules=True,
        profile_memory=True,
    ) as prof:
        for _ in range(warmup + steps):
            step_fn()
            prof.step()
    prof.export_chrome_trace(str(path))
    del torch
    return path


def load(path: Path) -> Profile:
    """The Profile of a recorded trace, through the project's own loader."""
    import opscope

    return opscope.load(path, cache=False)
