"""Record a tiny model on CPU under torch.profiler and load the trace as a Profile.

Loads with ``opscope.load`` when the Kineto reader is importable; until then with a minimal
stand-in (nesting, python stacks, modules, steps, memory, fwd↔bwd by sequence number) so the
rule tests can run. The stand-in is test scaffolding only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

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
    """The Profile of a trace: opscope.load when its Kineto reader works, else the stand-in."""
    try:
        import opscope.ingest.kineto
    except Exception:  # the reader is not there yet (or broken): use the stand-in
        return minimal_load(path)
    import opscope

    return opscope.load(path, cache=False)


_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.*)$")


def _is_user(file: str) -> bool:
    return not (
        "site-packages" in file
        or file.startswith("torch/")
        or "/torch/" in file
        or file.startswith("<")
        or "/lib/python3" in file
    )


def minimal_load(path: Path) -> Profile:
    raw = json.loads(Path(path).read_text())
    evs = [e for e in raw["traceEvents"] if e.get("ph") in ("X", "i")]
    rows: list[dict[str, Any]] = []
    mem: list[dict[str, Any]] = []
    for e in evs:
        cat, name, a = e.get("cat"), e.get("name", ""), e.get("args", {}) or {}
        ts = round(float(e["ts"]) * 1000)
        if e.get("ph") == "i":
            if name == "[memory]":
                mem.append(
                    {
                        "ts_ns": ts,
                        "bytes": a.get("Bytes"),
                        "addr": a.get("Addr"),
                        "total_allocated": a.get("Total Allocated"),
                        "total_reserved": a.get("Total Reserved"),
                        "device_type": a.get("Device Type"),
                        "device": a.get("Device Id"),
                        "tid": e.get("tid"),
                    }
                )
            continue
        if cat == "user_annotation" and name.startswith("ProfilerStep#"):
            kind = "step"
        elif cat in ("cpu_op", "python_function", "user_annotation"):
            kind = cat
        else:
            continue
        rows.append(
            {
                "kind": kind,
                "name": name,
                "pid": int(e["pid"]),
                "tid": int(e["tid"]),
                "ts_ns": ts,
                "dur_ns": round(float(e.get("dur", 0)) * 1000),
                "seq": a.get("Sequence number"),
                "fwd_tid": a.get("Fwd thread id"),
                "input_dims": json.dumps(a["Input Dims"], separators=(",", ":"))
                if "Input Dims" in a
                else None,
                "input_types": json.dumps(a["Input type"], separators=(",", ":"))
                if "Input type" in a
                else None,
                "input_strides": json.dumps(a["Input Strides"], separators=(",", ":"))
                if "Input Strides" in a
                else None,
                "python_id": a.get("Python id"),
                "python_parent_id": a.get("Python parent id"),
            }
        )
    rows.sort(key=lambda r: (r["tid"], r["ts_ns"], -r["dur_ns"]))
    for i, r in enumerate(rows):
        r["id"] = i
    # Nesting per thread.
    stack: list[dict[str, Any]] = []
    cur_tid = None
    for r in rows:
        if r["tid"] != cur_tid:
            stack, cur_tid = [], r["tid"]
        while stack and stack[-1]["ts_ns"] + stack[-1]["dur_ns"] <= r["ts_ns"]:
            stack.pop()
        r["parent_id"] = stack[-1]["id"] if stack else None
        r["_anc"] = [s["id"] for s in stack]
        stack.append(r)
    by_id = {r["id"]: r for r in rows}
    steps = [r for r in rows if r["kind"] == "step"]
    for r in rows:
        r["step"] = next(
            (
                int(s["name"].split("#")[1])
                for s in steps
                if s["ts_ns"] <= r["ts_ns"] < s["ts_ns"] + s["dur_ns"]
            ),
            None,
        )
    # Stacks: for each op, python frames enclosing it (innermost first), and module path.
    stack_rows: list[dict[str, Any]] = []
    interned: dict[tuple[Any, ...], int] = {}
    for r in rows:
        if r["kind"] != "cpu_op":
            continue
        pys = [by_id[a] for a in reversed(r["_anc"]) if by_id[a]["kind"] == "python_function"]
        frames = []
        mods = []
        for p in pys:
            if p["name"].startswith("nn.Module: "):
                mods.append(p["name"].removeprefix("nn.Module: "))
                continue
            m = _FRAME.match(p["name"])
            if m:
                frames.append((m["file"], int(m["line"]), m["func"]))
        r["module"] = "/".join(reversed(mods)) or None
        if not frames:
            continue
        key = tuple(frames)
        if key not in interned:
            sid = len(interned)
            interned[key] = sid
            for d, (f, ln, fn) in enumerate(frames):
                stack_rows.append(
                    {
                        "stack_id": sid,
                        "depth": d,
                        "file": f,
                        "line": ln,
                        "function": fn,
                        "is_user": _is_user(f),
                    }
                )
        r["stack_id"] = interned[key]
    # Backward ops -> forward op by sequence number.
    fwd_by_seq: dict[int, int] = {}
    for r in rows:
        if r["kind"] == "cpu_op" and r["seq"] is not None and not r["fwd_tid"]:
            fwd_by_seq.setdefault(int(r["seq"]), r["id"])
    for r in rows:
        bw = r["kind"] == "cpu_op" and bool(r["fwd_tid"])
        r["is_backward"] = bw
        if bw and r["seq"] is not None:
            r["fwd_id"] = fwd_by_seq.get(int(r["seq"]))
    ops = sorted((r for r in rows if r["kind"] == "cpu_op"), key=lambda r: r["ts_ns"])
    for m in mem:
        enc = [
            o
            for o in ops
            if o["tid"] == m["tid"] and o["ts_ns"] <= m["ts_ns"] <= o["ts_ns"] + o["dur_ns"]
        ]
        m["op_id"] = max(enc, key=lambda o: o["ts_ns"])["id"] if enc else None
        m["step"] = next(
            (
                int(s["name"].split("#")[1])
                for s in steps
                if s["ts_ns"] <= m["ts_ns"] < s["ts_ns"] + s["dur_ns"]
            ),
            None,
        )
        del m["tid"]
    for r in rows:
        del r["_anc"]
    events = pl.DataFrame(rows, infer_schema_length=None)
    tables: dict[str, pl.DataFrame] = {"events": events}
    if stack_rows:
        tables["stacks"] = pl.DataFrame(stack_rows)
    if mem:
        tables["memory"] = pl.DataFrame(mem, infer_schema_length=None).with_columns(
            pl.lit(0).alias("rank")
        )
    if steps:
        tables["steps"] = pl.DataFrame(
            {
                "rank": [0] * len(steps),
                "step": [int(s["name"].split("#")[1]) for s in steps],
                "ts_ns": [s["ts_ns"] for s in steps],
                "dur_ns": [s["dur_ns"] for s in steps],
            }
        )
    tables["events"] = tables["events"].with_columns(pl.lit(0).alias("rank"))
    return Profile.from_tables(meta={"format": "kineto", "ranks": [0]}, **tables)
