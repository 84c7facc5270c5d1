"""Critical path across host threads (a thread waiting untracked while another runs the work:
``loss.backward()`` on the main thread while the autograd thread runs the backward ops) and a
sync waiting on an earlier step's device work: planted profiles with answers worked by hand."""

from __future__ import annotations

from typing import Any

import polars as pl

from opscope.analysis.critical_path import IDLE_OP, critical_path
from opscope.analysis.registry import Options
from opscope.model import Profile


def _op(i: int, name: str, tid: int, ts: int, dur: int, step: int = 0) -> dict[str, Any]:
    return {"id": i, "kind": "cpu_op", "name": name, "tid": tid, "ts_ns": ts, "dur_ns": dur,
            "step": step}  # fmt: skip


def _rt(i: int, name: str, tid: int, ts: int, dur: int, op: int, step: int = 0) -> dict[str, Any]:
    return {"id": i, "kind": "runtime", "name": name, "tid": tid, "ts_ns": ts, "dur_ns": dur,
            "op_id": op, "parent_id": op, "step": step}  # fmt: skip


def _dev(i: int, ts: int, dur: int, launch: int, op: int, step: int = 0) -> dict[str, Any]:
    return {"id": i, "kind": "kernel", "name": f"k{i}", "tid": 7, "stream": 7, "device": 0,
            "ts_ns": ts, "dur_ns": dur, "launch_id": launch, "op_id": op, "step": step}  # fmt: skip


def _profile(ev: list[dict[str, Any]], steps: dict[str, list[int]]) -> Profile:
    events = pl.DataFrame(ev).with_columns(pl.lit(0).alias("rank"))
    return Profile.from_tables(events=events, steps=pl.DataFrame(steps).with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32)))  # fmt: skip


def _backward_on_another_thread() -> Profile:
    # main thread 1: forward [0,20] launching K1 at 5..10; nothing tracked 20..58 (it waits in
    # loss.backward()); optimizer [58,80] launching K3 at 60..65.
    # autograd thread 2: nothing tracked 0..20; backward [20,58] launching K2 at 30..35 and
    # K2b at 52..57. Stream 7: K1 [11,13], K2 [36,40], K2b [58,59], K3 [66,70]. Step [0,100].
    ev = [
        _op(1, "forward", 1, 0, 20), _rt(2, "cudaLaunchKernel", 1, 5, 5, 1),
        _op(3, "backward", 2, 20, 38), _rt(4, "cudaLaunchKernel", 2, 30, 5, 3),
        _rt(5, "cudaLaunchKernel", 2, 52, 5, 3),
        _op(6, "optimizer", 1, 58, 22), _rt(7, "cudaLaunchKernel", 1, 60, 5, 6),
        _dev(20, 11, 2, 2, 1), _dev(21, 36, 4, 4, 3), _dev(22, 58, 1, 5, 3),
        _dev(23, 66, 4, 7, 6),
    ]  # fmt: skip
    return _profile(ev, {"rank": [0], "step": [0], "ts_ns": [0], "dur_ns": [100]})


def test_wait_on_another_thread_is_its_work_not_idle() -> None:
    res = critical_path(_backward_on_another_thread(), Options())
    got = res.path.select("lane", "start_ns", "end_ns", "op", "on_path_ns").rows()
    # by hand: main's forward up to its launch (0..10) and its tail (10..20); thread 2's
    # untracked 0..20 is covered by main's forward: an edge from main's node ending at 20 to
    # thread 2's first node (20..35), then its second (35..57); main's untracked 20..58 is
    # covered by thread 2's backward: an edge from thread 2's node ending at 57 to main's next
    # node (58..65), then K3 (66..70). Before, main's 38 ns gap was one idle node on the path
    # (0..10, 10..20, idle 20..58, 58..65, K3: 69 ns).
    assert got == [
        (1, 0, 10, "forward", 10), (1, 10, 20, "forward", 10), (2, 20, 35, "backward", 15),
        (2, 35, 57, "backward", 22), (1, 58, 65, "optimizer", 7), (7, 66, 70, "optimizer", 4),
    ]  # fmt: skip
    assert IDLE_OP not in res.ops.get_column("op").to_list()
    s = res.steps.row(0, named=True)
    assert (s["path_ns"], s["host_ns"], s["device_ns"], s["step_ns"]) == (68, 64, 4, 70)


def test_time_no_thread_works_stays_idle() -> None:
    # as above, but thread 2 starts its backward at 25: 20..25 nobody runs tracked work
    ev = [
        _op(1, "forward", 1, 0, 20), _rt(2, "cudaLaunchKernel", 1, 5, 5, 1),
        _op(3, "backward", 2, 25, 33), _rt(4, "cudaLaunchKernel", 2, 30, 5, 3),
        _rt(5, "cudaLaunchKernel", 2, 52, 5, 3),
        _op(6, "optimizer", 1, 58, 22), _rt(7, "cudaLaunchKernel", 1, 60, 5, 6),
        _dev(20, 11, 2, 2, 1), _dev(21, 36, 4, 4, 3), _dev(22, 58, 1, 5, 3),
        _dev(23, 66, 4, 7, 6),
    ]  # fmt: skip
    res = critical_path(_profile(ev, {"rank": [0], "step": [0], "ts_ns": [0], "dur_ns": [100]}),
                        Options())  # fmt: skip
    got = res.path.select("lane", "start_ns", "end_ns", "op", "on_path_ns").rows()
    # thread 2's gap 0..25: covered 0..20 (edge from main's 10..20), idle 20..25; its call
    # node then runs 25..35 (the tracked piece before the launch)
    assert got == [
        (1, 0, 10, "forward", 10), (1, 10, 20, "forward", 10), (2, 20, 25, IDLE_OP, 5),
        (2, 25, 35, "backward", 10), (2, 35, 57, "backward", 22), (1, 58, 65, "optimizer", 7),
        (7, 66, 70, "optimizer", 4),
    ]  # fmt: skip
    assert res.steps.row(0, named=True)["path_ns"] == 68


def test_sync_on_an_earlier_steps_work_is_the_sync() -> None:
    # step 0 [0,100]: op A [10,20] launches K0 at 12..14; K0 runs 15..250 (step 0's work).
    # step 1 [100,300]: aten::item [100,260]: cudaMemcpyAsync 101..103 (its copy C runs
    # 250..255, behind K0), cudaStreamSynchronize 104..258.
    ev = [
        _op(1, "A", 1, 10, 10, 0), _rt(2, "cudaLaunchKernel", 1, 12, 2, 1, 0),
        _op(3, "aten::item", 1, 100, 160, 1), _rt(4, "cudaMemcpyAsync", 1, 101, 2, 3, 1),
        _rt(5, "cudaStreamSynchronize", 1, 104, 154, 3, 1),
        _dev(20, 15, 235, 2, 1, 0), _dev(21, 250, 5, 4, 3, 1),
    ]  # fmt: skip
    steps = {"rank": [0, 0], "step": [0, 1], "ts_ns": [0, 100], "dur_ns": [100, 200]}
    res = critical_path(_profile(ev, steps), Options())
    got = res.path.filter(pl.col("step") == 1).select("start_ns", "end_ns", "name", "on_path_ns")
    # by hand: the sync waited 104..250 on K0, which is step 0's (in no node of step 1): that
    # part is its own node (146 ns, aten::item); from 250 it waits on C (ends 255): 3 ns.
    # Before, the wait was the copy's 5 ns plus 3 (a 158 ns step read 11 ns).
    assert got.rows() == [
        (100, 103, "cudaMemcpyAsync", 3), (103, 104, "aten::item", 1),
        (104, 250, "cudaStreamSynchronize", 146), (250, 258, "cudaStreamSynchronize", 3),
    ]  # fmt: skip
    s = res.steps.filter(pl.col("step") == 1).row(0, named=True)
    assert (s["path_ns"], s["step_ns"]) == (153, 158)
    ops = res.ops.filter(pl.col("step") == 1)
    assert ops.row(0, named=True)["op"] == "aten::item"
    assert ops.row(0, named=True)["on_path_ns"] == 153


def test_blocking_copy_behind_an_earlier_steps_work_on_its_stream() -> None:
    # step 0: A launches K0 (stream 7, runs 15..250) and B launches K8 (stream 8, 20..257).
    # step 1 [100,300]: aten::item [100,260] with a blocking cudaMemcpyAsync 101..258 whose
    # copy C runs 250..255 on stream 7, behind K0.
    k8 = {**_dev(22, 20, 237, 6, 5, 0), "stream": 8, "tid": 8}
    ev = [
        _op(1, "A", 1, 10, 10, 0), _rt(2, "cudaLaunchKernel", 1, 12, 2, 1, 0),
        _op(5, "B", 1, 30, 10, 0), _rt(6, "cudaLaunchKernel", 1, 32, 2, 5, 0),
        _op(3, "aten::item", 1, 100, 160, 1), _rt(4, "cudaMemcpyAsync", 1, 101, 157, 3, 1),
        _dev(20, 15, 235, 2, 1, 0), {**_dev(21, 250, 5, 4, 3, 1), "kind": "memcpy"}, k8,
    ]  # fmt: skip
    steps = {"rank": [0, 0], "step": [0, 1], "ts_ns": [0, 100], "dur_ns": [100, 200]}
    res = critical_path(_profile(ev, steps), Options())
    got = res.path.filter(pl.col("step") == 1).select("start_ns", "end_ns", "name", "on_path_ns")
    # by hand: the copy waits on stream 7 only: 101..250 behind step 0's K0 is its own node
    # (K8 on stream 8, ending at 257, is not what it waited on); from 250 it waits on C (ends
    # 255): 3 ns. Before, a 158 ns step read the copy's 5 + 3 = 8 ns.
    assert got.rows() == [
        (100, 101, "aten::item", 1), (101, 250, "cudaMemcpyAsync", 149),
        (250, 258, "cudaMemcpyAsync", 3),
    ]  # fmt: skip
    s = res.steps.filter(pl.col("step") == 1).row(0, named=True)
    assert (s["path_ns"], s["step_ns"]) == (153, 158)
