"""The critical path depends on no row order and on no engine's order of ties: every order is a
stated key (``critical_path``'s module doc, *Order*). Planted ties with paths worked by hand,
the same tables with the events' rows shuffled, and with Polars on one thread or two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope import load
from opscope.analysis.critical_path import CriticalPathResult, critical_path
from opscope.analysis.registry import Options
from opscope.model import Profile

_SRC = str(Path(__file__).resolve().parents[1] / "src")


def _ev(i: int, kind: str, name: str, tid: int, ts: int, dur: int, **kw: Any) -> dict[str, Any]:
    return {"id": i, "kind": kind, "name": name, "tid": tid, "ts_ns": ts, "dur_ns": dur,
            "step": 0, **kw}  # fmt: skip


def _kernel(i: int, ts: int, dur: int, launch: int) -> dict[str, Any]:
    """A kernel ``k{i}`` (its own op: no op_id) on stream 7."""
    return _ev(i, "kernel", f"k{i}", 7, ts, dur, stream=7, device=0, launch_id=launch)


def _profile(ev: list[dict[str, Any]]) -> Profile:
    events = pl.DataFrame(ev).with_columns(pl.lit(0).alias("rank"))
    steps = {"rank": [0], "step": [0], "ts_ns": [0], "dur_ns": [100]}
    return Profile.from_tables(events=events, steps=pl.DataFrame(steps).with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32)))  # fmt: skip


def _path(res: CriticalPathResult) -> list[tuple[Any, ...]]:
    return res.path.select("id", "start_ns", "end_ns", "op", "on_path_ns").rows()


def _shuffled(p: Profile, seed: int) -> Profile:
    return p.with_tables(events=p.events.sample(fraction=1.0, shuffle=True, seed=seed))


def test_slices_starting_together_the_enclosing_one_is_top_level() -> None:
    # thread 1: op A [0,10] and its child C [0,4] start together (C of the smaller id, listed
    # first); op B [10,30] launches K [26,30] by the call [20,25]. The call's host time from the
    # step's start is cut at B's start: the piece [0,10) is A's (A encloses C, so A is the
    # top-level slice), then the call's node [10,25], then K (26..30).
    ev = [
        _ev(2, "cpu_op", "C", 1, 0, 4), _ev(3, "cpu_op", "A", 1, 0, 10),
        _ev(4, "cpu_op", "B", 1, 10, 20),
        _ev(5, "runtime", "cudaLaunchKernel", 1, 20, 5, op_id=4, parent_id=4),
        _kernel(6, 26, 4, 5),
    ]  # fmt: skip
    want = [(None, 0, 10, "A", 10), (5, 10, 25, "B", 15), (6, 26, 30, "k6", 4)]
    p = _profile(ev)
    assert _path(critical_path(p, Options())) == want
    assert _path(critical_path(_profile(ev[::-1]), Options())) == want


def test_nodes_of_one_lane_with_equal_times_chain_by_id() -> None:
    # thread 2 (no runtime call: its top-level ops are its nodes): P [0,8], then X (id 11) and
    # Y (id 12) both [10,20]; Y launches K [22,30]. The lane is P -> X -> Y (equal start and
    # end: by id), so Y takes X's length (18: the edge adds nothing, both end at 20) and K
    # 18 + 8; the path is P, X, Y, K. With the ids swapped it is P, Y, K (X then follows Y).
    def events(x: int, y: int) -> list[dict[str, Any]]:
        return [
            _ev(10, "cpu_op", "P", 2, 0, 8), _ev(x, "cpu_op", "X", 2, 10, 10),
            _ev(y, "cpu_op", "Y", 2, 10, 10), _kernel(13, 22, 8, y),
        ]  # fmt: skip

    want = [(10, 0, 8, "P", 8), (11, 10, 20, "X", 10), (12, 10, 20, "Y", 0), (13, 22, 30, "k13", 8)]
    for ev in (events(11, 12), events(11, 12)[::-1]):
        assert _path(critical_path(_profile(ev), Options())) == want
    swapped = critical_path(_profile(events(12, 11)), Options())
    assert _path(swapped) == [(10, 0, 8, "P", 8), (11, 10, 20, "Y", 10), (13, 22, 30, "k13", 8)]


def test_a_sync_waits_on_the_last_node_of_a_stream_by_end_then_start() -> None:
    # calls c1 [0,2] -> k1 [10,20], c2 [2,4] -> k2 [15,20] on one stream (equal ends: k2, of the
    # later start, is the stream's last), then cudaDeviceSynchronize [4,30]. k2 takes k1's 12
    # along the lane (the launch gives 4 + 5 only); the sync (its node from 4) counts from 20,
    # and its edge from k2 gives 12 + 10: the path is c1, k1, k2 (0 ns), the sync (an edge
    # from k1 would give the same length without k2).
    ev = [
        _ev(1, "cpu_op", "f", 1, 0, 40),
        _ev(2, "runtime", "cudaLaunchKernel", 1, 0, 2, op_id=1, parent_id=1),
        _ev(3, "runtime", "cudaLaunchKernel", 1, 2, 2, op_id=1, parent_id=1),
        _ev(4, "runtime", "cudaDeviceSynchronize", 1, 4, 26, op_id=1, parent_id=1),
        _kernel(5, 10, 10, 2), _kernel(6, 15, 5, 3),
    ]  # fmt: skip
    want = [(2, 0, 2, "f", 2), (5, 10, 20, "k5", 10), (6, 15, 20, "k6", 0), (4, 4, 30, "f", 10)]
    for e in (ev, ev[::-1]):
        assert _path(critical_path(_profile(e), Options())) == want


# traces with ties in their graphs (rank-0: in every step's node order; the Ascend pair: two
# nodes of equal start and end on one thread, whose order decides the path)
_TRACES = [
    "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
]


def _tables(res: CriticalPathResult) -> list[pl.DataFrame]:
    return [res.path, res.ops, res.steps]


@pytest.mark.parametrize("rel", _TRACES)
def test_the_same_tables_with_the_events_rows_shuffled(rel: str) -> None:
    profile = load(shared_trace(rel), cache=False)
    want = _tables(critical_path(profile, Options()))
    for seed in (1, 2):
        got = _tables(critical_path(_shuffled(profile, seed), Options()))
        for g, w in zip(got, want, strict=True):
            assert g.schema == w.schema
            assert g.equals(w)
    assert want[0].height > 0


_DIGEST = """
import json, sys
import opscope
from opscope.analysis.critical_path import critical_path
from opscope.analysis.registry import Options
out = []
for path in sys.argv[1:]:
    r = critical_path(opscope.load(path, cache=False), Options())
    out.append([t.rows() for t in (r.path, r.ops, r.steps)])
print(json.dumps(out, default=str))
"""


def test_the_same_tables_with_one_polars_thread_or_two() -> None:
    paths = [str(shared_trace(rel)) for rel in _TRACES]
    outs = []
    for threads in ("1", "2"):
        env = {**os.environ, "POLARS_MAX_THREADS": threads, "PYTHONPATH": _SRC}
        run = subprocess.run(
            [sys.executable, "-c", _DIGEST, *paths],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outs.append(json.loads(run.stdout))
    assert outs[0] == outs[1]
    assert all(t[0] for t in outs[0])  # (a path on every trace)
