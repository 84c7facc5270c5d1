"""The shared linker's rules that the Ascend reader relies on, on hand-made tables.

Each expectation is worked out by hand from the rows below: rows placed on a device whatever
their kind, the op named by an ``async_npu`` flow, the step a source recorded, the innermost
stack source (an op's own call stack over the frame around it), and frames interned by
``frame_text``.
"""

from __future__ import annotations

import polars as pl

from helpers.link_tables import events as _events
from helpers.link_tables import raw_flows as _flows
from opscope.ingest import link


def _host(kind: str, name: str, ts: int, dur: int, **kw: object) -> dict[str, object]:
    return {"kind": kind, "name": name, "pid": 1, "tid": 1, "ts_ns": ts, "dur_ns": dur, **kw}


def _dev(kind: str, name: str, ts: int, dur: int, **kw: object) -> dict[str, object]:
    row = {"kind": kind, "name": name, "pid": 9, "tid": 2, "ts_ns": ts, "dur_ns": dur}
    return {**row, "device": 0, "stream": 2, **kw}


def test_device_rows_of_any_kind_async_npu_ops_and_steps() -> None:
    ev = _events(
        [
            _host("step", "ProfilerStep#4", 0, 100),  # 0
            _host("cpu_op", "aten::add", 10, 30),  # 1
            _host("runtime", "launch_add", 12, 5, correlation=7),  # 2 (in op 1)
            _host("cpu_op", "aten::mul", 50, 30),  # 3
            _host("runtime", "launch_mul", 52, 5, correlation=8),  # 4 (in op 3)
            _host("python_function", "m.py(3): f", 60, 10),  # 5 (in op 3)
            _dev("kernel", "AddKernel", 120, 10, correlation=7),  # 6: async_npu from op 3
            _dev("other", "EVENT_RECORD", 140, 1, correlation=8),  # 7: launch 4 -> op 3
            _dev("kernel", "Orphan", 150, 1, step=9),  # 8: no launch, source step 9
            _dev("kernel", "Orphan2", 40, 1),  # 9: no launch, no source step
        ]
    )
    # async_npu: the op issuing the task (3) starts it; the task's start ends it.
    flows = _flows(
        [
            {"kind": "async_npu", "flow_id": 1, "phase": "s", "pid": 1, "tid": 1, "ts_ns": 55},
            {"kind": "async_npu", "flow_id": 1, "phase": "f", "pid": 9, "tid": 2, "ts_ns": 120},
        ]
    )
    out = link.link_events(ev, flows).events.sort("id")
    col = {c: out.get_column(c).to_list() for c in ("launch_id", "op_id", "step")}
    # kernel 6: launched by 2 (correlation 7) inside op 1, but its async_npu flow names op 3
    assert (col["launch_id"][6], col["op_id"][6]) == (2, 3)
    # "other" row 7 is on a device: it takes launch 4 (correlation 8) and its op 3
    assert (col["launch_id"][7], col["op_id"][7]) == (4, 3)
    # host rows: innermost enclosing cpu_op (the python frame 5 in op 3, the launches)
    assert (col["op_id"][5], col["op_id"][2], col["op_id"][4]) == (3, 1, 3)
    # steps: host rows by their start (all in step 4); device rows via their op (6, 7 -> 4);
    # without op or launch the step the source recorded (8 -> 9), else their own start, but
    # row 9 ran before the first launched device work: queued before profiling, no step
    assert col["step"] == [4, 4, 4, 4, 4, 4, 4, 4, 9, None]


def test_device_kinds_alone_without_a_device_column_behave_as_before() -> None:
    # Kineto sets ``device`` on the device kinds only: an "other" row without one stays host.
    ev = _events(
        [
            _host("cpu_op", "aten::add", 10, 30),
            _host("runtime", "launch", 12, 5, correlation=7),
            {
                "kind": "other",
                "name": "x",
                "pid": 9,
                "tid": 2,
                "ts_ns": 30,
                "dur_ns": 1,
                "correlation": 7,
            },
        ]
    )
    out = link.link_events(ev, _flows([])).events.sort("id")
    assert out.get_column("launch_id").to_list() == [None, None, None]
    assert link.on_device(ev).tolist() == [False, False, False]


def test_innermost_stack_source_wins() -> None:
    cs = "/p/model.py(30): forward;/p/train.py(9): main"
    ev = _events(
        [
            _host("python_function", "train.py(9): main", 0, 100),  # 0 frame
            _host("cpu_op", "aten::linear", 10, 40, call_stack=cs),  # 1 own call stack
            _host("cpu_op", "aten::t", 12, 5),  # 2 nested in 1: 1's call stack
            _host("cpu_op", "aten::relu", 60, 5),  # 3 in frame 0 only: the frame's path
            _host("python_function", "model.py(31): helper", 70, 20),  # 4 frame in frame 0
            _host("cpu_op", "aten::mul", 72, 5),  # 5 in frame 4
        ]
    )
    linked = link.link_events(ev, _flows([]))
    sid = linked.events.sort("id").get_column("stack_id").to_list()
    frames = {
        s: g.sort("depth")
        .select(pl.format("{}({}): {}", "file", "line", "function"))
        .to_series()
        .to_list()
        for (s,), g in linked.stacks.group_by("stack_id")
    }
    assert frames[sid[1]] == ["/p/model.py(30): forward", "/p/train.py(9): main"]
    assert sid[2] == sid[1]
    assert frames[sid[3]] == frames[sid[0]] == ["train.py(9): main"]
    assert frames[sid[4]] == frames[sid[5]] == ["model.py(31): helper", "train.py(9): main"]


def test_frames_interned_by_frame_text() -> None:
    # Two runs of one path whose built-in frame names differ only by an object address.
    a = "<built-in method mul_ of Tensor object at 0xfff1>"
    b = "<built-in method mul_ of Tensor object at 0xfff2>"
    text = "<built-in method mul_ of Tensor object>"
    rows = [
        _host("python_function", "t.py(1): f", 0, 10),
        _host("python_function", a, 1, 2),
        _host("python_function", "t.py(1): f", 20, 10),
        _host("python_function", b, 21, 2),
    ]
    plain = link.link_events(_events(rows), _flows([]))
    sid = plain.events.sort("id").get_column("stack_id").to_list()
    assert sid[1] != sid[3]  # interned by name: two stacks
    ft = [None, text, None, text]
    rows = [{**r, "frame_text": t} for r, t in zip(rows, ft, strict=True)]
    keyed = link.link_events(_events(rows), _flows([]))
    sid = keyed.events.sort("id").get_column("stack_id").to_list()
    assert sid[1] == sid[3] and sid[0] == sid[2]
    top = keyed.stacks.filter((pl.col("stack_id") == sid[1]) & (pl.col("depth") == 0))
    assert top.get_column("function").to_list() == [text]
    assert "frame_text" not in keyed.events.columns
    # the events keep their names
    assert keyed.events.sort("id").get_column("name").to_list()[1] == a


def test_negative_sequence_numbers_are_none() -> None:
    # torch_npu writes "Sequence number": -1 on ops without one; only real numbers pair.
    ev = _events(
        [
            _host("cpu_op", "aten::addmm", 0, 10, seq=5),  # 0 forward, seq 5
            _host("cpu_op", "aten::max_pool2d", 20, 10, seq=-1),  # 1 forward, no seq
            _host("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 40, 30, seq=-1),
            _host("cpu_op", "AddmmBackward0", 41, 20, seq=5),  # 3 node op: pairs with 0
            _host("cpu_op", "aten::mm", 42, 5, seq=-1),  # 4 inside: no pair
        ]
    )
    out = link.link_events(ev, _flows([])).events.sort("id")
    assert out.get_column("is_backward").to_list() == [False, False, True, True, True]
    assert out.get_column("fwd_id").to_list() == [None, None, None, 0, None]
