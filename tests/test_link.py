"""The linking functions on small hand-made tables (each expectation worked out by hand)."""

from __future__ import annotations

import numpy as np
import polars as pl

from helpers.link_tables import events as _events
from helpers.link_tables import raw_flows as _raw_flows
from opscope.ingest import link


def test_nearest_ancestor() -> None:
    parent = np.array([-1, 0, 1, 2, 0], dtype=np.int64)
    mask = np.array([True, False, True, False, False])
    assert link.nearest_ancestor(parent, mask).tolist() == [-1, 0, 0, 2, 0]
    assert link.nearest_ancestor(parent, mask, include_self=True).tolist() == [0, 0, 2, 2, 0]


def test_nesting_per_thread_with_ties_and_siblings() -> None:
    ev = _events(
        [
            {
                "kind": "step",
                "name": "ProfilerStep#3",
                "pid": 1,
                "tid": 1,
                "ts_ns": 0,
                "dur_ns": 100,
            },
            {"kind": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts_ns": 0, "dur_ns": 100},
            {"kind": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts_ns": 10, "dur_ns": 20},
            {"kind": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts_ns": 30, "dur_ns": 20},
            {"kind": "runtime", "name": "launch", "pid": 1, "tid": 1, "ts_ns": 35, "dur_ns": 5},
            {
                "kind": "cpu_op",
                "name": "other_thread",
                "pid": 1,
                "tid": 2,
                "ts_ns": 20,
                "dur_ns": 5,
            },
        ]
    )
    out = link.nest(ev)
    assert out.get_column("parent_id").to_list() == [None, 0, 1, 1, 3, None]
    assert out.get_column("depth").to_list() == [0, 1, 2, 2, 3, 0]


def test_launch_op_backward_fwd_and_steps() -> None:
    ev = _events(
        [
            {
                "kind": "step",
                "name": "ProfilerStep#7",
                "pid": 1,
                "tid": 1,
                "ts_ns": 0,
                "dur_ns": 1000,
            },
            {
                "kind": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts_ns": 10,
                "dur_ns": 50,
                "seq": 5,
                "fwd_tid": 0,
                "external_id": 11,
            },
            {
                "kind": "runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts_ns": 20,
                "dur_ns": 5,
                "correlation": 99,
                "external_id": 11,
            },
            {
                "kind": "kernel",
                "name": "gemm",
                "pid": 0,
                "tid": 7,
                "ts_ns": 2000,
                "dur_ns": 30,
                "correlation": 99,
                "external_id": 11,
            },
            {
                "kind": "cpu_op",
                "name": "autograd::engine::evaluate_function: MmBackward0",
                "pid": 1,
                "tid": 2,
                "ts_ns": 100,
                "dur_ns": 80,
                "seq": 5,
                "fwd_tid": 0,
            },
            {
                "kind": "cpu_op",
                "name": "MmBackward0",
                "pid": 1,
                "tid": 2,
                "ts_ns": 105,
                "dur_ns": 70,
                "seq": 5,
                "fwd_tid": 0,
            },
            {"kind": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts_ns": 110, "dur_ns": 20},
            {
                "kind": "kernel",
                "name": "orphan",
                "pid": 0,
                "tid": 7,
                "ts_ns": 3000,
                "dur_ns": 1,
                "external_id": 11,
            },
        ]
    )
    linked = link.link_events(ev, _raw_flows([]))
    e = linked.events
    assert e.get_column("launch_id").to_list() == [None, None, None, 2, None, None, None, None]
    # runtime -> enclosing op; kernel -> its launch's op; orphan -> External id fallback;
    # ops themselves have none (their nesting is parent_id)
    assert e.get_column("op_id").to_list() == [None, None, 1, 1, None, None, None, 1]
    assert e.get_column("is_backward").to_list() == [
        False,
        False,
        False,
        False,
        True,
        True,
        True,
        False,
    ]
    # no flows: fallback by (seq, fwd_tid) on both backward ops carrying the seq
    assert e.get_column("fwd_id").to_list() == [None, None, None, None, 1, 1, None, None]
    # the kernel ran after the step ended on the host, but takes its launching op's step
    assert e.get_column("step").to_list() == [7, 7, 7, 7, 7, 7, 7, 7]
    assert linked.steps.get_column("step").to_list() == [7]


def test_flows_bind_to_exact_starts_and_win_over_seq() -> None:
    ev = _events(
        [
            {
                "kind": "cpu_op",
                "name": "aten::linear",
                "pid": 1,
                "tid": 1,
                "ts_ns": 0,
                "dur_ns": 100,
                "seq": 1,
                "fwd_tid": 0,
            },
            {
                "kind": "cpu_op",
                "name": "aten::addmm",
                "pid": 1,
                "tid": 1,
                "ts_ns": 10,
                "dur_ns": 50,
                "seq": 1,
                "fwd_tid": 0,
            },
            {
                "kind": "cpu_op",
                "name": "autograd::engine::evaluate_function: AddmmBackward0",
                "pid": 1,
                "tid": 2,
                "ts_ns": 200,
                "dur_ns": 50,
                "seq": 1,
                "fwd_tid": 0,
            },
            {
                "kind": "cpu_op",
                "name": "AddmmBackward0",
                "pid": 1,
                "tid": 2,
                "ts_ns": 205,
                "dur_ns": 40,
                "seq": 1,
                "fwd_tid": 0,
            },
        ]
    )
    flows = _raw_flows(
        [
            {"kind": "fwdbwd", "flow_id": 1, "phase": "s", "pid": 1, "tid": 1, "ts_ns": 0},
            {"kind": "fwdbwd", "flow_id": 1, "phase": "f", "pid": 1, "tid": 2, "ts_ns": 205},
        ]
    )
    linked = link.link_events(ev, flows)
    assert linked.flows.select("src_id", "dst_id").rows() == [(0, 3)]
    # the flow says linear (not the deeper addmm the seq fallback would pick)
    assert linked.events.get_column("fwd_id").to_list() == [None, None, 0, 0]


def test_call_stack_strings_are_interned() -> None:
    cs = "/home/u/lib/python3.9/site-packages/torch/nn/functional.py(12): relu;train.py(5): main"
    ev = _events(
        [
            {
                "kind": "cpu_op",
                "name": "a",
                "pid": 1,
                "tid": 1,
                "ts_ns": 0,
                "dur_ns": 1,
                "call_stack": cs,
            },
            {
                "kind": "cpu_op",
                "name": "b",
                "pid": 1,
                "tid": 1,
                "ts_ns": 5,
                "dur_ns": 1,
                "call_stack": cs,
            },
            {
                "kind": "cpu_op",
                "name": "c",
                "pid": 1,
                "tid": 1,
                "ts_ns": 9,
                "dur_ns": 1,
                "call_stack": "train.py(5): main",
            },
        ]
    )
    linked = link.link_events(ev, _raw_flows([]))
    sid = linked.events.get_column("stack_id").to_list()
    assert sid[0] == sid[1] != sid[2]
    st = linked.stacks.filter(pl.col("stack_id") == sid[0]).sort("depth")
    assert st.get_column("function").to_list() == ["relu", "main"]
    assert st.get_column("line").to_list() == [12, 5]
    assert st.get_column("is_user").to_list() == [False, True]
    # the shorter stack is the outer frame of the longer one, interned once
    assert linked.stacks.filter(pl.col("stack_id") == sid[2]).height == 1


def test_is_user_file() -> None:
    assert link.is_user_file("train.py")
    assert link.is_user_file("/home/me/proj/model.py")
    assert not link.is_user_file("torch/nn/modules/linear.py")
    assert not link.is_user_file("threading.py")
    assert not link.is_user_file("/usr/lib/python3.11/site-packages/x/y.py")
    assert not link.is_user_file("<built-in>")
    assert link.parse_frame("a/b.py(12): f") == ("a/b.py", 12, "f")
    assert link.parse_frame("<built-in method foo>") == (
        "<built-in>",
        None,
        "<built-in method foo>",
    )


def _track_order_reference(ev: pl.DataFrame) -> list[int]:
    """Row numbers in nesting order, by Python's sort of the documented key."""
    prio = link._PRIORITY
    rows = list(enumerate(ev.select("rank", "pid", "tid", "ts_ns", "dur_ns", "kind", "id").rows()))

    def key(item: tuple[int, tuple[object, ...]]) -> tuple[object, ...]:
        _, (rk, pid, tid, ts, dur, kind, eid) = item
        nulls_first = (pid is not None, pid or 0, tid is not None, tid or 0)
        return (rk, *nulls_first, ts, -(ts + dur), prio.get(str(kind), 8), eid)  # type: ignore[operator]

    return [i for i, _ in sorted(rows, key=key)]


def test_track_order_packed_and_plain_sorts_agree() -> None:
    rng = np.random.default_rng(7)
    n = 400
    kinds = ["cpu_op", "runtime", "kernel", "python_function", "user_annotation", "step"]
    rows = [
        {
            "kind": kinds[int(rng.integers(len(kinds)))],
            "name": "x",
            "pid": None if rng.random() < 0.1 else int(rng.integers(3)),
            "tid": int(rng.integers(-2, 3)),
            "ts_ns": int(rng.integers(0, 20)),  # few distinct starts: many ties
            "dur_ns": int(rng.integers(0, 5)),
        }
        for _ in range(n)
    ]
    ev = _events(rows)
    assert link._packed_keys(_sort_inputs(ev)) is not None
    assert link._track_order(ev).get_column("i").to_list() == _track_order_reference(ev)
    # starts 2**61 apart leave no room to pack the track number: the plain sort is used
    far = ev.with_columns(
        pl.when(pl.col("id") == 0).then(pl.lit(2**61)).otherwise(pl.col("ts_ns")).alias("ts_ns")
    )
    assert link._packed_keys(_sort_inputs(far)) is None
    assert link._track_order(far).get_column("i").to_list() == _track_order_reference(far)


def _sort_inputs(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.select(
        "rank",
        "pid",
        "tid",
        "ts_ns",
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
        pl.lit(0, pl.Int64).alias("prio"),
    )


def test_track_index_equals_the_one_nesting_builds() -> None:
    """track_index on nested events gives nest_indexed's index: enclosing() answers the same
    with either, or with none (it crashed without one: a column the sort no longer outputs)."""
    import opscope
    from conftest import shared_trace

    ev = opscope.load(shared_trace("gpu/hta_nccl_a100_rank0of2.json.gz"), cache=False).events
    _, built = link.nest_indexed(ev.drop("parent_id", "depth"))
    again = link.track_index(ev)
    assert (again.ids == built.ids).all() and (again.ts == built.ts).all()
    ops = link.kind_mask(ev, "cpu_op")
    pts = ev.filter(pl.col("kind") == "runtime").select("rank", "pid", "tid", "ts_ns")
    want = link.enclosing(ev, pts, ops, index=built)
    assert (want >= 0).sum() > 1000
    assert (link.enclosing(ev, pts, ops, index=again) == want).all()
    assert (link.enclosing(ev, pts, ops) == want).all()
