"""Traces recorded with torch (CPU) at test time, checked against a stdlib-json reading."""

from __future__ import annotations

import collections
import inspect
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from opscope.ingest.kineto import parse_kineto

torch = pytest.importorskip("torch")
nn = torch.nn


class TinyNet(nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: Any) -> Any:
        y = self.conv(x)
        return self.fc(self.relu(y).flatten(1))


def _forward_line() -> int:
    # torch's Python tracer names a frame by its code object's first line: the ``def``.
    _src, start = inspect.getsourcelines(TinyNet.forward)
    return start


@pytest.fixture(scope="session")
def torch_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    out = tmp_path_factory.mktemp("torch_trace")
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 3, 8, 8)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=2),
        record_shapes=True,
        with_stack=True,
        with_modules=True,
        profile_memory=True,
        on_trace_ready=tensorboard_trace_handler(str(out)),
    ) as prof:
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
    files = sorted(out.glob("*.pt.trace.json"))
    assert files, "torch wrote no trace"
    return files[-1]


@pytest.fixture(scope="session")
def ref(torch_trace: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(torch_trace.read_text())
    return doc


@pytest.fixture(scope="session")
def loaded(torch_trace: Path) -> Any:
    return parse_kineto(torch_trace)


def _slices(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]


def test_counts_per_category(ref: dict[str, Any], loaded: Any) -> None:
    want: collections.Counter[str] = collections.Counter()
    for e in _slices(ref):
        if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#"):
            want["step"] += 1
        else:
            want[e["cat"]] += 1
    got = {k: int(v) for k, v in loaded.events.group_by("kind").len().iter_rows()}
    assert got == dict(want)
    mem = [e for e in ref["traceEvents"] if e.get("ph") == "i" and e.get("name") == "[memory]"]
    assert loaded.memory.height == len(mem)
    assert sorted(loaded.memory.get_column("bytes").to_list()) == sorted(
        e["args"]["Bytes"] for e in mem
    )


def test_steps(ref: dict[str, Any], loaded: Any) -> None:
    steps = sorted(
        int(e["name"].split("#")[1])
        for e in _slices(ref)
        if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")
    )
    assert loaded.steps.get_column("step").to_list() == steps
    assert len(steps) == 2  # schedule(wait=0, warmup=1, active=2)
    ops = loaded.events.filter(pl.col("kind") == "cpu_op")
    # every op started inside a step gets that step
    st = loaded.steps
    for r in ops.sample(min(50, ops.height), seed=1).iter_rows(named=True):
        inside = st.filter(
            (pl.col("ts_ns") <= r["ts_ns"]) & (pl.col("ts_ns") + pl.col("dur_ns") > r["ts_ns"])
        )
        expect = inside.get_column("step")[0] if inside.height else None
        assert r["step"] == expect


def test_per_op_totals(ref: dict[str, Any], loaded: Any) -> None:
    want: dict[str, int] = collections.defaultdict(int)
    calls: collections.Counter[str] = collections.Counter()
    for e in _slices(ref):
        if e["cat"] == "cpu_op":
            want[e["name"]] += round(e["dur"] * 1000)
            calls[e["name"]] += 1
    ops = loaded.events.filter(pl.col("kind") == "cpu_op")
    got = dict(ops.group_by("name").agg(pl.col("dur_ns").sum()).iter_rows())
    assert got == dict(want)
    assert dict(ops.group_by("name").len().iter_rows()) == dict(calls)


def test_fwd_bwd_pairs_follow_flows(ref: dict[str, Any], loaded: Any) -> None:
    evs = ref["traceEvents"]
    s = {e["id"]: e for e in evs if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    f = {e["id"]: e for e in evs if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
    pairs = set(s) & set(f)
    assert pairs
    ev = loaded.events
    by_id = {r["id"]: r for r in ev.iter_rows(named=True)}
    fb = loaded.flows.filter(pl.col("kind") == "fwdbwd")
    assert fb.height == len(pairs)
    for r in fb.iter_rows(named=True):
        src, dst = by_id[r["src_id"]], by_id[r["dst_id"]]
        # the flow records sit at the ops' exact starts
        assert src["ts_ns"] == round(s[r["flow_id"]]["ts"] * 1000)
        assert dst["ts_ns"] == round(f[r["flow_id"]]["ts"] * 1000)
        assert dst["fwd_id"] == src["id"]
        assert dst["is_backward"] and not src["is_backward"]
        assert dst["seq"] == src["seq"]
    from opscope.ingest.summary import summary

    assert summary(loaded)["fwd_bwd_links"] == len(pairs)


def test_nesting_matches_timestamps(ref: dict[str, Any], loaded: Any) -> None:
    # brute force: innermost enclosing host slice on the same thread
    sl = list(_slices(ref))
    rows = [
        (e["tid"], round(e["ts"] * 1000), round(e["dur"] * 1000), e["name"], e["cat"]) for e in sl
    ]
    ev = loaded.events
    by_id = {r["id"]: r for r in ev.iter_rows(named=True)}
    ops = [r for r in by_id.values() if r["kind"] == "cpu_op"]
    for r in ops:
        t0, t1 = r["ts_ns"], r["ts_ns"] + r["dur_ns"]
        encl = [
            x
            for x in rows
            if x[0] == r["tid"]
            and x[1] <= t0
            and x[1] + x[2] >= t1
            and not (x[1] == t0 and x[2] == r["dur_ns"] and x[3] == r["name"])
        ]
        if not encl:
            assert r["parent_id"] is None
            continue
        inner = max(encl, key=lambda x: (x[1], -x[2]))
        p = by_id[r["parent_id"]]
        assert (p["ts_ns"], p["dur_ns"]) == (inner[1], inner[2])
        assert p["ts_ns"] <= t0 and p["ts_ns"] + p["dur_ns"] >= t1
        assert r["depth"] == p["depth"] + 1


def test_backward_marks(loaded: Any) -> None:
    ev = loaded.events
    by_id = {r["id"]: r for r in ev.iter_rows(named=True)}
    for r in by_id.values():
        if r["kind"] != "cpu_op":
            continue
        chain = []
        p = r
        while p is not None:
            chain.append(p["name"])
            p = by_id.get(p["parent_id"]) if p["parent_id"] is not None else None
        expect = any(n.startswith("autograd::engine::evaluate_function") for n in chain)
        assert r["is_backward"] == expect, r["name"]


def test_stack_and_module_point_at_this_file(loaded: Any) -> None:
    ev = loaded.events
    conv = ev.filter((pl.col("name") == "aten::conv2d") & (pl.col("is_backward").not_())).row(
        0, named=True
    )
    assert conv["module"] is not None and conv["module"].endswith("Conv2d_0")
    assert conv["module"].startswith("TinyNet_0")
    frames = loaded.stacks.filter(pl.col("stack_id") == conv["stack_id"]).sort("depth")
    here = frames.filter(pl.col("file").str.ends_with("test_kineto_torch.py"))
    assert here.height >= 1
    assert _forward_line() in here.get_column("line").to_list()
    assert "forward" in here.get_column("function").to_list()
    assert here.get_column("is_user").all()
    torch_frames = frames.filter(pl.col("file").str.starts_with("torch/"))
    assert torch_frames.height >= 1 and not torch_frames.get_column("is_user").any()
    # innermost frame first: the conv module's forward in torch
    assert frames.get_column("depth").to_list() == list(range(frames.height))


def test_memory_rows_link_to_enclosing_op(ref: dict[str, Any], loaded: Any) -> None:
    ops = [
        (e["tid"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), e["name"])
        for e in _slices(ref)
        if e["cat"] == "cpu_op"
    ]
    by_id = {r["id"]: r for r in loaded.events.iter_rows(named=True)}
    mem = [e for e in ref["traceEvents"] if e.get("ph") == "i" and e.get("name") == "[memory]"]
    got = loaded.memory.sort("ts_ns")
    mem.sort(key=lambda e: e["ts"])
    for e, r in zip(mem, got.iter_rows(named=True), strict=True):
        t = round(e["ts"] * 1000)
        assert r["ts_ns"] == t
        encl = [o for o in ops if o[0] == e["tid"] and o[1] <= t <= o[2]]
        if not encl:
            assert r["op_id"] is None
        else:
            inner = max(encl, key=lambda o: (o[1], -o[2]))
            assert by_id[r["op_id"]]["name"] == inner[3]
            assert by_id[r["op_id"]]["ts_ns"] == inner[1]
