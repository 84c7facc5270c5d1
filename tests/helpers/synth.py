"""Synthetic, fully linked Profiles with known answers (planted anomalies, slow lines, backward
kernels). Times are given in µs and stored as int ns. Reused by several test files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from opscope.model import Profile

USER_FILE = "/home/u/model.py"
TORCH_FILE = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"


def profiler_step(n: int, ts: float, dur: float) -> dict[str, Any]:
    """The Kineto ``ProfilerStep#n`` range (``user_annotation`` on pid 1, tid 1) as a JSON event."""
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
    }


@dataclass
class Builder:
    """Add events with their links; ``build()`` gives the Profile."""

    events: list[dict[str, Any]] = field(default_factory=list)
    stacks: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)

    def _add(self, **kw: Any) -> int:
        i = len(self.events)
        kw["ts_ns"] = round(kw.pop("ts") * 1000)
        kw["dur_ns"] = round(kw.pop("dur") * 1000)
        self.events.append({"id": i, "rank": kw.pop("rank", 0), **kw})
        return i

    def stack(self, frames: list[tuple[str, int, str]]) -> int:
        """A stack (innermost first); a frame is user code unless its file is under torch."""
        sid = len({s["stack_id"] for s in self.stacks})
        for d, (f, ln, fn) in enumerate(frames):
            self.stacks.append(
                {
                    "stack_id": sid,
                    "depth": d,
                    "file": f,
                    "line": ln,
                    "function": fn,
                    "is_user": "site-packages" not in f,
                }
            )
        return sid

    def step(self, n: int, ts: float, dur: float) -> int:
        self.steps.append(
            {"rank": 0, "step": n, "ts_ns": round(ts * 1000), "dur_ns": round(dur * 1000)}
        )
        return self._add(
            kind="step", name=f"ProfilerStep#{n}", ts=ts, dur=dur, pid=1, tid=1, step=n
        )

    def op(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        parent: int | None = None,
        step: int | None = None,
        dims: str | None = None,
        types: str | None = None,
        stack: int | None = None,
        module: str | None = None,
        bwd: bool = False,
        fwd: int | None = None,
        tid: int = 1,
        flops: int | None = None,
    ) -> int:
        return self._add(
            kind="cpu_op",
            name=name,
            ts=ts,
            dur=dur,
            pid=1,
            tid=tid,
            parent_id=parent,
            step=step,
            input_dims=dims,
            input_types=types,
            stack_id=stack,
            module=module,
            is_backward=bwd,
            fwd_id=fwd,
            flops=flops,
        )

    def kernel(
        self, name: str, ts: float, dur: float, op: int, *, kind: str = "kernel", stream: int = 7
    ) -> int:
        o = self.events[op]
        return self._add(
            kind=kind,
            name=name,
            ts=ts,
            dur=dur,
            pid=0,
            tid=stream,
            device=0,
            stream=stream,
            op_id=op,
            step=o.get("step"),
            is_backward=o.get("is_backward"),
            stack_id=o.get("stack_id"),
            module=o.get("module"),
        )

    def alloc(
        self,
        ts: float,
        nbytes: int,
        *,
        addr: int,
        op: int | None,
        total: int | None,
        reserved: int | None,
        step: int | None = None,
    ) -> None:
        self.memory.append(
            {
                "rank": 0,
                "ts_ns": round(ts * 1000),
                "bytes": nbytes,
                "addr": addr,
                "total_allocated": total,
                "total_reserved": reserved,
                "device_type": 1,
                "device": 0,
                "op_id": op,
                "step": step,
            }
        )

    def build(self) -> Profile:
        tables: dict[str, pl.DataFrame] = {
            "events": pl.DataFrame(self.events, infer_schema_length=None).with_columns(
                pl.col("kind").cast(pl.String)
            )
        }
        if self.stacks:
            tables["stacks"] = pl.DataFrame(self.stacks)
        if self.steps:
            tables["steps"] = pl.DataFrame(self.steps)
        if self.memory:
            tables["memory"] = pl.DataFrame(self.memory, infer_schema_length=None)
        return Profile.from_tables(meta={"format": "kineto", "ranks": [0]}, **tables)


@dataclass
class Planted:
    """What a generated training profile holds, computed from the plan (not from the analyses)."""

    profile: Profile
    line_fwd_us: dict[int, float]  # user line -> forward kernel µs
    line_bwd_us: dict[int, float]  # user line -> backward kernel µs
    slow: list[tuple[int, float]]  # (step, kernel µs) of the planted slow calls
    slow_kernel: str


def training(
    steps: int = 4,
    layers: int = 3,
    *,
    slow_at: tuple[int, int] | None = None,
    slow_factor: float = 15.0,
    device: bool = True,
) -> Planted:
    """``layers`` Linear layers (model.py lines 30, 31, ...), forward and backward per step.

    Layer ``i``'s forward kernel takes ``10 * (i + 1)`` µs, its backward kernel twice that.
    ``slow_at=(step, layer)`` makes that one forward kernel ``slow_factor`` times slower.
    """
    b = Builder()
    fwd_us: dict[int, float] = {}
    bwd_us: dict[int, float] = {}
    slow: list[tuple[int, float]] = []
    stacks = [
        b.stack(
            [(TORCH_FILE, 125, "forward"), (USER_FILE, 30 + i, "forward"), (USER_FILE, 50, "train")]
        )
        for i in range(layers)
    ]
    t = 0.0
    for s in range(steps):
        st = b.step(s, t, 1000.0)
        fwd_ops = []
        t0 = t + 10
        for i in range(layers):
            k_us = 10.0 * (i + 1)
            if slow_at == (s, i):
                k_us *= slow_factor
                slow.append((s, k_us))
            lin = b.op(
                "aten::linear",
                t0,
                30,
                parent=st,
                step=s,
                dims="[[8,64],[64,64],[64]]",
                types='["float","float","float"]',
                stack=stacks[i],
                module=f"Net/Linear_{i}",
            )
            mm = b.op(
                "aten::addmm",
                t0 + 5,
                20,
                parent=lin,
                step=s,
                dims="[[64],[8,64],[64,64]]",
                types='["float","float","float"]',
                stack=stacks[i],
                module=f"Net/Linear_{i}",
            )
            if device:
                b.kernel("gemm_fwd", t0 + 20, k_us, mm)
            fwd_us[30 + i] = fwd_us.get(30 + i, 0.0) + (k_us if device else 30)
            fwd_ops.append(mm)
            t0 += max(40, k_us + 25)
        for i in reversed(range(layers)):
            ev = b.op(
                "autograd::engine::evaluate_function: AddmmBackward0",
                t0,
                40,
                parent=st,
                step=s,
                bwd=True,
                fwd=fwd_ops[i],
                tid=2,
            )
            node = b.op(
                "AddmmBackward0", t0 + 2, 35, parent=ev, step=s, bwd=True, fwd=fwd_ops[i], tid=2
            )
            mm = b.op(
                "aten::mm",
                t0 + 4,
                25,
                parent=node,
                step=s,
                bwd=True,
                tid=2,
                dims="[[8,64],[64,64]]",
                types='["float","float"]',
            )
            k_us = 20.0 * (i + 1)
            if device:
                b.kernel("gemm_bwd", t0 + 10, k_us, mm)
            bwd_us[30 + i] = bwd_us.get(30 + i, 0.0) + (k_us if device else 40)
            t0 += max(50, k_us + 15)
        t += 1000.0
    return Planted(b.build(), fwd_us, bwd_us, slow, "gemm_fwd")


def kineto_trace(
    steps: int = 6, *, slow_step: int | None = None, slow_us: float = 300.0
) -> dict[str, Any]:
    """A Kineto Chrome trace (dict) of a 2-layer training loop on one GPU stream: forward
    ``aten::addmm`` ops launching ``gemm_fwd_<layer>`` kernels (20 µs), backward node ops linked by
    ``Sequence number`` launching ``gemm_bwd_<layer>`` (30 µs), ops and kernels joined by
    ``External id`` and ``correlation``. ``slow_step`` makes layer 1's forward kernel take
    ``slow_us``."""
    ev: list[dict[str, Any]] = []
    ext = 0
    t = 1000.0

    def op(name: str, ts: float, dur: float, tid: int, **args: Any) -> None:
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    def launch(kname: str, ts: float, kts: float, kdur: float, tid: int) -> None:
        nonlocal ext
        ext += 1
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": tid,
                "ts": ts,
                "dur": 2,
                "args": {"correlation": ext, "External id": ext},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kname,
                "pid": 0,
                "tid": 7,
                "ts": kts,
                "dur": kdur,
                "args": {"device": 0, "stream": 7, "correlation": ext, "External id": ext},
            }
        )

    seq = 0
    for s in range(steps):
        ev.append(profiler_step(s, t, 900))
        seqs = []
        for layer in range(2):
            ts = t + 10 + layer * 100
            seq += 1
            seqs.append(seq)
            op(
                "aten::addmm",
                ts,
                20,
                1,
                **{
                    "Sequence number": seq,
                    "Fwd thread id": 0,
                    "Input Dims": [[64], [8, 64], [64, 64]],
                    "Input type": ["float", "float", "float"],
                },
            )
            kdur = slow_us if (s == slow_step and layer == 1) else 20.0
            launch(f"gemm_fwd_{layer}", ts + 5, ts + 10, kdur, 1)
        for i, layer in enumerate(reversed(range(2))):
            ts = t + 500 + i * 150
            op("autograd::engine::evaluate_function: AddmmBackward0", ts, 60, 2)
            op(
                "AddmmBackward0",
                ts + 1,
                50,
                2,
                **{"Sequence number": seqs[layer], "Fwd thread id": 1},
            )
            op(
                "aten::mm",
                ts + 3,
                40,
                2,
                **{"Input Dims": [[8, 64], [64, 64]], "Input type": ["float", "float"]},
            )
            launch(f"gemm_bwd_{layer}", ts + 5, ts + 60, 30.0, 2)
        t += 1000.0
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


def sample_trace(walls_us: dict[int, float], ops_us: dict[str, float]) -> dict[str, Any]:
    """A host-only Kineto trace (dict) of one periodic sample: a ``ProfilerStep#N`` range of
    ``walls_us[N]`` µs per step and, inside each, one ``cpu_op`` per name of ``ops_us`` taking
    that many µs, laid one after the other (they must fit in the step)."""
    ev: list[dict[str, Any]] = []
    t = 1000.0
    for s, wall in sorted(walls_us.items()):
        ev.append(profiler_step(s, t, wall))
        t0 = t + 1.0
        for name, us in ops_us.items():
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": 1,
                    "tid": 1,
                    "ts": t0,
                    "dur": us,
                    "args": {},
                }
            )
            t0 += us + 1.0
        assert t0 <= t + wall, (s, ops_us, wall)
        t += wall + 10.0
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


@dataclass
class TrendRun:
    """A generated run directory and the plan it was written from."""

    path: Any  # pathlib.Path of the run directory
    walls_us: list[float]  # wall µs of every step (index = step)
    profiled: set[int]  # steps the profiler was on for
    samples: list[int]  # first step of each periodic trace
    clean: list[int]  # steps outside the profiler's windows (the series trend keeps)


def trend_run(
    path: Any,
    walls_us: list[float],
    *,
    ops_us: Any = None,
    first: int = 2,
    every: int = 10,
    warmup: int = 1,
    active: int = 3,
    batch: int = 16,
) -> TrendRun:
    """Write an opscope run directory (``run.json``, ``metrics.jsonl``, ``rank0/`` traces) laid
    out like the recorder's: a sample of ``active`` profiled steps every ``every`` steps from
    ``first``, its ``warmup`` steps before it. Step ``i`` took ``walls_us[i]`` µs.
    ``ops_us(first_step) -> {op name: µs per step}`` plants the operators of each sample's trace
    (no traces when None)."""
    import gzip
    import json
    from pathlib import Path

    root = Path(path)
    (root / "rank0").mkdir(parents=True, exist_ok=True)
    n = len(walls_us)
    samples = list(range(first, n - active + 1, every))
    profiled = {s + k for s in samples for k in range(active)}
    warm = {s - k for s in samples for k in range(1, warmup + 1)}
    after = {s + active for s in samples}
    run = {
        "profiler": {"wait": 1, "warmup": warmup, "active": active, "every": every},
        "device": {"kind": "cpu"},
    }
    (root / "run.json").write_text(json.dumps(run))
    rows = [
        {
            "rank": 0,
            "step": i,
            "wall_ns": round(w * 1000),
            "samples_per_s": batch / (w * 1e-6),
            "mem_allocated_peak": 1 << 20,
            "profiled": i in profiled,
        }
        for i, w in enumerate(walls_us)
    ]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if ops_us is not None:
        for s in samples:
            walls = {k: walls_us[k] for k in range(s, s + active)}
            data = json.dumps(sample_trace(walls, ops_us(s))).encode()
            (root / "rank0" / f"step_{s:06d}.pt.trace.json.gz").write_bytes(gzip.compress(data))
    clean = [i for i in range(n) if i not in profiled | warm | after]
    return TrendRun(root, list(walls_us), profiled, samples, clean)
