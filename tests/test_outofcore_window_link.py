"""Out-of-core load, phase 3: windowed linking (opscope.ingest.window_link).

Planted traces check the cut rule by hand (a launch and its ac2g flow crossing a step boundary,
a backward root open across the main thread's step end, steps that touch), the state carried
across segments (stack ids renumbered into the in-memory order, device work queued before
profiling found from a later segment), the cache entry written in place and opened lazily;
each load is also checked equal to the in-memory load, table by table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from opscope.ingest import cache, fastscan, kineto, outofcore, window_link
from opscope.model import Profile
from opscope.model.tablefile import TableFile
from test_out_of_core_spill import assert_same_windowed

pytestmark = pytest.mark.skipif(not fastscan.available(), reason="numba scanner not available")

US = 1000  # ns per us


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(outofcore.ENV, raising=False)
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fastscan, "WINDOW_BYTES", 4096)  # many windows
    monkeypatch.setattr(window_link, "MIN_SEGMENT_ROWS", 1)  # every cut a segment


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    pid = 0 if cat in ("kernel", "gpu_memcpy") else 1
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return ev | ({"args": args} if args else {})


class Trace:
    """Steps of 100 us every 200 us on thread 1, each with an op launching a kernel."""

    def __init__(self) -> None:
        self.evs: list[dict[str, Any]] = []
        self.corr = 0

    def launch(self, t0: float, t_kernel: float, tid: int = 1, ext: int = 0) -> None:
        self.corr += 1
        c = self.corr
        self.evs.append(_x("cuda_runtime", "cudaLaunchKernel", t0, 2, tid, correlation=c))
        args = {"correlation": c, "External id": ext, "stream": 7, "device": 0}
        self.evs.append(_x("kernel", f"k{c}", t_kernel, 5, 7, **args))
        for ph, t, p, tid_ in (("s", t0, 1, tid), ("f", t_kernel, 0, 7)):
            self.evs.append(
                {"ph": ph, "id": c, "cat": "ac2g", "name": "ac2g", "pid": p, "tid": tid_, "ts": t}
                | ({"bp": "e"} if ph == "f" else {})
            )

    def step(self, n: int, *, kernels: bool = True) -> None:
        b = 200.0 * (n - 1)
        self.evs.append(_x("user_annotation", f"ProfilerStep#{n}", b, 100))
        self.evs.append(_x("cpu_op", "aten::mm", b + 10, 30, **{"External id": 100 + n}))
        if kernels:
            self.launch(b + 15, b + 25, ext=100 + n)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"traceEvents": self.evs}, indent=1))
        return path


def _both(path: Path) -> tuple[Profile, Profile]:
    ref = kineto.parse_kineto(path)
    got = kineto.parse_kineto(path, memory_budget=1)
    assert_same_windowed(got, ref)
    return got, ref


def test_cuts_between_steps(tmp_path: Path) -> None:
    t = Trace()
    for n in range(1, 5):
        t.step(n)
    got, _ = _both(t.write(tmp_path / "t.json"))
    # idle between the steps (100-200, 300-400, 500-600): three cuts, four segments
    assert got.meta["out_of_core"]["cut_points"] == 3
    assert got.meta["out_of_core"]["segments"] == 4
    assert got.meta["out_of_core"]["largest_segment_events"] == 4  # step, op, launch, kernel
    assert not got.meta["out_of_core"]["fix_pass"]  # events written once


def test_no_cut_across_a_launch_or_a_backward_root(tmp_path: Path) -> None:
    t = Trace()
    for n in range(1, 5):
        t.step(n)
    # a launch in step 1 whose kernel (and ac2g flow end) runs in step 2: no cut at 200 us
    t.launch(60, 250)
    # the backward thread's root open across the main thread's step 2 end and step 3 start
    t.evs.append(_x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 350, 70, 2))
    t.evs.append(_x("cpu_op", "MmBackward0", 355, 60, 2))
    got, _ = _both(t.write(tmp_path / "t.json"))
    # no cut at 200 us nor 400 us: the cuts left are 350 us (the root's start: nothing is open
    # then) and 600 us
    assert got.meta["out_of_core"]["cut_points"] == 2
    ev = got.events
    k = ev.filter(pl.col("name") == f"k{t.corr}").row(0, named=True)
    launch = ev.filter(pl.col("id") == k["launch_id"]).row(0, named=True)
    assert (launch["ts_ns"], k["step"]) == (60 * US, 1)  # linked across the step boundary
    inner = ev.filter(pl.col("name") == "MmBackward0").row(0, named=True)
    root = ev.filter(pl.col("id") == inner["parent_id"]).row(0, named=True)
    assert root["ts_ns"] == 350 * US and inner["is_backward"]


@pytest.mark.parametrize("by", ["flow", "correlation"])
def test_each_launch_rule_alone_forbids_the_cut(by: str, tmp_path: Path) -> None:
    """A launch in step 1 whose kernel runs in step 2, linked by its ``ac2g`` flow alone (no
    correlation args) or by its correlation alone (no flow records): no cut at 200 us."""
    t = Trace()
    for n in range(1, 4):
        t.step(n)
    if by == "flow":
        t.evs.append(_x("cuda_runtime", "cudaLaunchKernel", 60, 2))
        t.evs.append(_x("kernel", "late", 250, 5, 7, stream=7, device=0))
        for ph, ts, pid, tid in (("s", 60, 1, 1), ("f", 250, 0, 7)):
            t.evs.append(
                {"ph": ph, "id": 99, "cat": "ac2g", "name": "ac2g", "pid": pid, "tid": tid}
                | {"ts": ts, "bp": "e"}
            )
    else:
        t.evs.append(_x("cuda_runtime", "cudaLaunchKernel", 60, 2, correlation=99))
        t.evs.append(_x("kernel", "late", 250, 5, 7, stream=7, device=0, correlation=99))
    got, _ = _both(t.write(tmp_path / "t.json"))
    assert got.meta["out_of_core"]["cut_points"] == 1  # 400 us only
    ev = got.events
    late = ev.filter(pl.col("name") == "late").row(0, named=True)
    launch = ev.filter(pl.col("id") == late["launch_id"]).row(0, named=True)
    assert launch["ts_ns"] == 60 * US and late["step"] == 1


def test_no_cut_between_a_forward_op_and_its_backward_by_sequence_number(tmp_path: Path) -> None:
    t = Trace()
    for n in range(1, 4):
        t.step(n)
    # forward in step 1, its backward (no fwdbwd flow: paired by sequence number) in step 2
    t.evs.append(_x("cpu_op", "aten::addmm", 50, 5, **{"Sequence number": 7}))
    name = "autograd::engine::evaluate_function: AddmmBackward0"
    t.evs.append(_x("cpu_op", name, 250, 10, 2, **{"Sequence number": 7}))
    t.evs.append(_x("cpu_op", "AddmmBackward0", 251, 8, 2, **{"Sequence number": 7}))
    got, _ = _both(t.write(tmp_path / "t.json"))
    assert got.meta["out_of_core"]["cut_points"] == 1  # 400 us only
    ev = got.events
    fwd = ev.filter(pl.col("name") == "aten::addmm").get_column("id").item()
    bwd = ev.filter(pl.col("name") == "AddmmBackward0").get_column("fwd_id").item()
    assert bwd == fwd


def test_touching_steps_cut_unless_a_record_sits_on_the_boundary(tmp_path: Path) -> None:
    t = Trace()
    for n in (1, 2):
        t.step(n)
    t.evs.append(_x("user_annotation", "ProfilerStep#3", 300, 100))  # touches step 2's end
    got, _ = _both(t.write(tmp_path / "a.json"))
    assert got.meta["out_of_core"]["cut_points"] == 2  # 200 us and 300 us
    t.evs.append(_x("cpu_op", "aten::empty", 300, 0))  # zero-length, exactly at 300 us
    got, _ = _both(t.write(tmp_path / "b.json"))
    assert got.meta["out_of_core"]["cut_points"] == 1


def test_stack_ids_renumbered_level_by_level(tmp_path: Path) -> None:
    t = Trace()
    for n in (1, 2):
        t.step(n)
    # step 1: a.py frame holding b.py; step 2: c.py alone. In memory, ids go level by level:
    # a.py 0, c.py 1 (depth 0), b.py 2 (depth 1); segment by segment they were met a, b, c.
    t.evs.append(_x("python_function", "a.py(1): f", 5, 50))
    t.evs.append(_x("python_function", "b.py(2): g", 8, 40))
    t.evs.append(_x("python_function", "c.py(3): h", 205, 50))
    got, _ = _both(t.write(tmp_path / "t.json"))
    assert got.meta["out_of_core"]["segments"] == 2
    sid = dict(
        got.events.filter(pl.col("kind") == "python_function").select("name", "stack_id").rows()
    )
    assert sid == {"a.py(1): f": 0, "c.py(3): h": 1, "b.py(2): g": 2}
    assert got.meta["out_of_core"]["fix_pass"]  # renumbered in a second pass
    ops = got.events.filter(pl.col("name") == "aten::mm").sort("ts_ns")
    assert ops.get_column("stack_id").to_list() == [2, 1]  # innermost frame of each op


def test_work_queued_before_profiling_found_from_a_later_segment(tmp_path: Path) -> None:
    t = Trace()
    t.step(1, kernels=False)
    t.evs.append(_x("kernel", "warmup", 50, 5, 7, stream=7, device=0))  # no launch in the trace
    for n in (2, 3):
        t.step(n)
    got, _ = _both(t.write(tmp_path / "t.json"))
    assert got.meta["out_of_core"]["segments"] == 3
    # it ran before the first launched work (step 2's, next segment): no profiled step's
    warm = got.events.filter(pl.col("name") == "warmup").row(0, named=True)
    assert warm["step"] is None and warm["launch_id"] is None
    assert got.meta["out_of_core"]["fix_pass"]


def test_cache_entry_written_in_place_and_opened_lazily(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Trace()
    for n in range(1, 4):
        t.step(n)
    path = t.write(tmp_path / "t.json")
    ref = kineto.parse_kineto(path)

    def no_store(*a: Any, **kw: Any) -> None:
        raise AssertionError("the out-of-core load writes its entry itself")

    monkeypatch.setattr(cache, "store", no_store)
    got = kineto.read_kineto(path, memory_budget=1)
    entry = cache.candidates(path)[0]
    assert got.meta["out_of_core"]["entry"] == str(entry)
    assert (entry / "meta.json").is_file() and (entry / "events.parquet").is_file()
    assert isinstance(got.__dict__["events"], TableFile), "events not read yet"
    assert_same_windowed(got, ref)
    again = kineto.read_kineto(path)
    assert again.meta.get("from_cache") is True
    for name in ("events", "flows", "stacks", "steps", "threads", "memory"):
        assert again.table(name).equals(ref.table(name)), name
    assert not (tmp_path / "cache" / "spill").exists()


def test_no_writable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Trace()
    for n in range(1, 4):
        t.step(n)
    path = t.write(tmp_path / "t.json")
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(ro))
    os.chmod(ro, 0o555)  # no write bit: not ours to fill (even for root, see cache._writable)
    try:
        got = kineto.read_kineto(path, memory_budget=1)
        assert got.meta["out_of_core"]["entry"] is None
        assert_same_windowed(got, kineto.parse_kineto(path))
        assert not list(ro.glob("*.opscope"))
    finally:
        os.chmod(ro, 0o755)


def test_segments_grown_to_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Trace()
    for n in range(1, 11):
        t.step(n)
    monkeypatch.setattr(window_link, "MIN_SEGMENT_ROWS", 9)
    got, _ = _both(t.write(tmp_path / "t.json"))
    # 10 steps of 4 events, 9 cuts: segments of two steps (8 events; three would be 12)
    assert got.meta["out_of_core"]["cut_points"] == 9
    assert got.meta["out_of_core"]["segments"] == 5
    assert got.meta["out_of_core"]["largest_segment_events"] == 8


def test_candidates_and_choice_by_hand() -> None:
    a = np.array([0, 10, 20, 20, 35, 50], dtype=np.int64)
    b = np.array([10, 15, 30, 25, 60, 55], dtype=np.int64)
    t, touch = window_link._candidates(a, b)
    # 10: [0, 10] ends exactly there (touching); 20: all before end by 15; 35: [20, 30] ended;
    # 50: [35, 60] still open
    assert t.tolist() == [10, 20, 35] and touch.tolist() == [True, False, False]
    before = np.array([2, 2, 5, 9], dtype=np.int64)  # rows before 4 cuts, 12 rows in all
    # (cuts 0 and 1 have no rows between them: the later one is kept)
    assert window_link._choose(before, 12, 4).tolist() == [1, 2, 3]
    assert window_link._choose(before, 12, 100).tolist() == []
    # a candidate after every row (24 rows): the first and last segments grown to 2 rows, the
    # others to 8: [0, 2) [2, 10) [10, 18) [18, 22) [22, 24)
    every = np.arange(1, 24, dtype=np.int64)
    assert window_link._choose(every, 24, 8, 2).tolist() == [1, 9, 17, 21]
    assert window_link._choose(every, 24, 8).tolist() == [7, 15]
    assert window_link._choose(every[:8], 9, 100, 2).tolist() == [1, 6]  # [0, 2) [2, 7) [7, 9)
    s, e = window_link._blocks(np.array([0, 5, 10, 10, 30]), np.array([8, 10, 12, 25, 31]))
    assert s.tolist() == [0, 10, 30] and e.tolist() == [10, 25, 31]


def test_no_slices_at_all(tmp_path: Path) -> None:
    """Memory rows and a flow record but no slice: one empty segment, the same tables."""
    evs: list[dict[str, Any]] = [
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 + i, "s": "t"}
        | {"args": {"Bytes": 4}}
        for i in range(200)
    ]
    evs.append({"ph": "s", "id": 1, "cat": "ac2g", "pid": 1, "tid": 1, "ts": 5, "name": "f"})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}, indent=1))
    got, _ = _both(path)
    assert got.meta["out_of_core"]["segments"] == 1
    assert got.memory.height == 200 and got.events.height == 0
    assert got.meta["oddities"]["flow not bound to events"] == 1
