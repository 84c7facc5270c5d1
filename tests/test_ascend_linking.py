"""The Ascend reader through the shared linker, on the real AlexNet 910B export, checked by an
independent stdlib read of its trace_view.json.

These are the rows where the shared linker answers differently from the Ascend reader's own
linking before it (the one definition of op, step and stack for both formats):

- a python frame's stack is its own frame path (it was the Call stack of an op around it);
- a host python frame or other host slice inside an op has that op as ``op_id`` (it had none);
- a device row of kind ``other`` (hardware syncs, HCCL sub-tasks) has a step: its launch's, else
  the ProfilerStep holding its start (it had none).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.ingest.ascend import read_ascend

L1R0 = "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt"


def _ns(text: Any) -> int:
    return int(Decimal(str(text).strip(' \t"')) * 1000)


@pytest.fixture(scope="module")
def loaded() -> tuple[list[dict[str, Any]], Any]:
    d = shared_trace(L1R0)
    trace = json.loads((Path(d) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    return trace, read_ascend(d, cache=False)


def _procs(trace: list[dict[str, Any]]) -> dict[Any, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in trace
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }


def test_python_frames_have_their_own_path(loaded: tuple[list[dict[str, Any]], Any]) -> None:
    trace, p = loaded
    frames = [
        e
        for e in trace
        if e.get("ph") == "X"
        and e.get("cat") == "python_function"
        and not e["name"].startswith("nn.Module:")
    ]
    assert len(frames) > 1000
    top = {
        sid: f"{f}({ln}): {fn}"
        for sid, f, ln, fn in p.stacks.filter(pl.col("depth") == 0)
        .select("stack_id", "file", "line", "function")
        .iter_rows()
    }
    sid = {
        (n, ts): s
        for n, ts, s in p.events.filter(pl.col("kind") == "python_function")
        .select("name", "ts_ns", "stack_id")
        .iter_rows()
    }
    for e in frames:
        name = re.sub(r" at 0x[0-9a-fA-F]+", "", e["name"])
        want = name if re.match(r"^.*\(\d+\): ", name) else f"<built-in>(None): {name}"
        assert top[sid[(e["name"], _ns(e["ts"]))]] == want


def _nest(slices: list[dict[str, Any]]) -> list[int]:
    """Parent index of each slice of one thread by the nesting rule (docs/loading.md): the
    nearest earlier-starting slice that ends at or after it ends; ties: longer first, then
    step > annotation > python frame > op > runtime. A plain loop over a stack of open slices."""
    prio = {"step": 0, "user_annotation": 1, "python_function": 2, "cpu_op": 3, "runtime": 5}
    order = sorted(
        range(len(slices)),
        key=lambda i: (slices[i]["s"], -slices[i]["e"], prio[slices[i]["k"]], i),
    )
    parent = [-1] * len(slices)
    prev = -1
    for i in order:
        c = prev
        while c >= 0 and slices[c]["e"] < slices[i]["e"]:
            c = parent[c]
        parent[i] = c
        prev = i
    return parent


def test_host_slices_in_an_op_have_it_as_op(loaded: tuple[list[dict[str, Any]], Any]) -> None:
    trace, p = loaded
    procs = _procs(trace)
    python = next(pid for pid, n in procs.items() if n == "Python")
    slices = []
    for e in trace:
        proc = procs.get(e["pid"])
        if e.get("ph") != "X" or proc not in ("Python", "CANN"):
            continue
        s = _ns(e["ts"])
        cat = e.get("cat")
        k = (
            "runtime"
            if proc == "CANN"
            else "step"
            if e["name"].startswith("ProfilerStep#")
            else cat
        )
        if k not in ("runtime", "step", "cpu_op", "python_function", "user_annotation"):
            continue
        slices.append(
            {
                "k": k,
                "name": e["name"],
                "s": s,
                "e": s + round(float(e["dur"]) * 1000),
                "tid": e["tid"],
                "pid": python,
            }
        )
    want: dict[tuple[str, int], tuple[str, int] | None] = {}
    for tid in {x["tid"] for x in slices}:
        track = [x for x in slices if x["tid"] == tid]
        parent = _nest(track)
        for i, x in enumerate(track):
            if x["k"] != "python_function":
                continue
            c = parent[i]
            while c >= 0 and track[c]["k"] != "cpu_op":
                c = parent[c]
            want[(x["name"], x["s"])] = (track[c]["name"], track[c]["s"]) if c >= 0 else None
    ev = p.events
    key = {i: (n, ts) for i, n, ts in ev.select("id", "name", "ts_ns").iter_rows()}
    got = {
        (n, ts): (key[o] if o is not None else None)
        for n, ts, o in ev.filter(pl.col("kind") == "python_function")
        .select("name", "ts_ns", "op_id")
        .iter_rows()
    }
    assert sum(v is not None for v in want.values()) > 500
    assert got == want


def test_device_rows_all_have_a_step(loaded: tuple[list[dict[str, Any]], Any]) -> None:
    trace, p = loaded
    st = next(e for e in trace if e.get("name", "").startswith("ProfilerStep#"))
    s0, s1 = _ns(st["ts"]), _ns(st["ts"]) + round(float(st["dur"]) * 1000)
    num = int(st["name"].split("#")[1])
    ev = p.events
    step_of = dict(ev.select("id", "step").iter_rows())
    dev = ev.filter(pl.col("device").is_not_null())
    others = dev.filter(pl.col("kind") == "other")
    assert others.height > 500
    for kind, ts, launch, op, step in dev.select(
        "kind", "ts_ns", "launch_id", "op_id", "step"
    ).iter_rows():
        if op is not None:
            assert step == step_of[op], kind
        elif launch is not None:
            assert step == step_of[launch], kind
        else:
            assert step == (num if s0 <= ts < s1 else None), kind
    assert (
        others.get_column("step").null_count()
        == others.filter(
            pl.col("launch_id").is_null() & ((pl.col("ts_ns") < s0) | (pl.col("ts_ns") >= s1))
        ).height
    )


def test_one_user_code_rule_for_both_path_forms(loaded: tuple[list[dict[str, Any]], Any]) -> None:
    # One profile holds the same files in both forms: relative to sys.path in the python frames
    # (as Kineto writes them), absolute in the ops' "Call stack" strings. The one rule
    # (opscope.model.usercode.is_model_file) must call each file the same in both.
    _, p = loaded
    frames = p.stacks.select("file", "function", "is_user").unique()
    absolute = frames.filter(pl.col("file").str.starts_with("/"))
    relative = frames.filter(
        ~pl.col("file").str.starts_with("/") & ~pl.col("file").str.starts_with("<")
    )
    pairs = [
        (a, r, ua, ur)
        for a, fn, ua in absolute.iter_rows()
        for r, fn2, ur in relative.iter_rows()
        if fn == fn2 and a.endswith("/" + r)
    ]
    assert len(pairs) > 50
    assert [x for x in pairs if x[2] != x[3]] == []
    user = {r for _, r, ua, _ in pairs if ua}
    assert user == {"main.py", "torchvision/models/alexnet.py"}
