"""The critical path of random multi-thread Kineto traces (threads that wait on each other,
touching and zero-length slices, syncs, blocking copies behind an earlier step's work) equals
the plain-Python golden reference of tests/test_critical_path_golden.py to the ns."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest

from test_critical_path_golden import golden


def _trace(rng: random.Random) -> dict[str, Any]:
    ev: list[dict[str, Any]] = []
    corr = iter(range(1, 10**6))
    stream_free = {7: 0, 8: 0}

    def x(cat: str, name: str, tid: Any, ts: int, dur: int, **args: Any) -> None:
        pid = 0 if cat in ("kernel", "gpu_memcpy") else 1
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
                   "dur": dur, "args": args})  # fmt: skip

    n_steps = 3
    step_len = 400
    for s in range(n_steps):
        x("user_annotation", f"ProfilerStep#{s + 1}", 1, s * step_len, step_len)
    for tid in range(1, 2 + rng.randint(1, 2)):
        t = rng.randint(0, 30)
        while t < n_steps * step_len - 40:
            if rng.random() < 0.4:  # wait untracked, often across another thread's work
                t += rng.choice([0, 1, rng.randint(1, 120)])
                continue
            dur = rng.randint(0, 40)
            x("cpu_op", f"op{tid}", tid, t, dur)
            u = t
            while u < t + dur - 3 and rng.random() < 0.7:
                u += rng.randint(0, 3)
                c = next(corr)
                kind = rng.random()
                st = rng.choice([7, 8])
                if kind < 0.12:
                    d = rng.randint(1, 60)
                    x("cuda_runtime", "cudaStreamSynchronize", tid, u, d, correlation=c)
                elif kind < 0.24:  # a copy: blocking when it ends before the call returns
                    k0 = max(u + 1, stream_free[st])
                    stream_free[st] = k0 + rng.randint(1, 5)
                    d = max(1, stream_free[st] - u + rng.choice([-2, 0, 2]))
                    x("cuda_runtime", "cudaMemcpyAsync", tid, u, d, correlation=c)
                    x("gpu_memcpy", "Memcpy DtoH", f"stream {st}", k0, stream_free[st] - k0,
                      correlation=c, stream=st, device=0)  # fmt: skip
                else:
                    d = rng.randint(0, 3)
                    x("cuda_runtime", "cudaLaunchKernel", tid, u, d, correlation=c)
                    k0 = max(u + d, stream_free[st]) + rng.randint(0, 3)
                    stream_free[st] = k0 + rng.randint(1, 150)
                    x("kernel", "k", f"stream {st}", k0, stream_free[st] - k0,
                      correlation=c, stream=st, device=0)  # fmt: skip
                u += d
            t += dur + rng.choice([0, 0, 1, 5])
    return {"traceEvents": ev}


@pytest.mark.parametrize("seed", range(25))
def test_random_threads_equal_the_golden(seed: int, tmp_path: Path) -> None:
    from opscope.analysis.critical_path import critical_path
    from opscope.analysis.registry import Options
    from opscope.ingest import load

    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(_trace(random.Random(seed)), f)
    want = golden(path)
    res = critical_path(load(path, cache=False), Options())
    got = {(r["rank"], r["step"]): r["path_ns"] for r in res.steps.iter_rows(named=True)}
    assert got == want
