"""Attribution's lines of a profile without host ops, computed without the group-by.

Without a host op, every charged unit is device work charged to no line: the lines table is
one row of null keys (or none). ``attribution._lines_without_ops`` builds that row in NumPy;
here it is compared with the group-by it replaces (``tree.SHORTCUTS`` off) and with sums in
plain Python over the kernels' rows, on the small Ascend exports and on planted Kineto traces
(with and without a step, work outside the step, no device work at all).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import shared_trace
from opscope.analysis import attribution, tree

_NO_OPS = ["ascend/small_two_rank/test_rank_0", "ascend/small_two_rank/test_rank_1"]


def _trace(path: Path, *, step: bool, kernels: bool = True) -> Path:
    """Kernels on two streams and a copy, no host op; ``step``: a ProfilerStep annotation
    covering only some of them (the others are of no step and no op)."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    ]
    work = [
        ("sgemm_128x64", 7, 100.0, 40.0),
        ("elementwise_add", 7, 150.0, 5.0),
        ("nccl_allreduce", 13, 120.0, 90.0),
        ("elementwise_add", 7, 400.0, 6.5),  # after the step
    ]
    for i, (name, stream, ts, dur) in enumerate(work if kernels else []):
        ev.append(
            {
                "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                "dur": dur, "args": {"device": 0, "stream": stream, "correlation": 100 + i},
            }
        )  # fmt: skip
    if step:
        ev.append(
            {
                "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1,
                "tid": 1, "ts": 90.0, "dur": 200.0, "args": {},
            }
        )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def _by_group_by(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    try:
        return attribution.charged_lines(opscope.load(path, cache=False))
    finally:
        monkeypatch.setattr(tree, "SHORTCUTS", True)


def _check(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    prof = opscope.load(path, cache=False)
    assert prof.ops.height == 0  # the shortcut's case
    fast = attribution.charged_lines(prof)
    assert_frame_equal(fast, _by_group_by(path, monkeypatch), check_row_order=True)
    # in plain Python: the kernels kept (with steps, those of an op or a step), their time
    rows = prof.kernels.to_dicts()
    if prof.steps.height:
        rows = [r for r in rows if r["op_id"] is not None or r["step"] is not None]
    if not rows:
        assert fast.height == 0
        return fast
    total = sum(r["dur_ns"] for r in rows if r["dur_ns"] is not None)
    assert fast.to_dicts() == [
        {
            "file": None, "line": None, "function": None, "module": None, "fwd_ns": total,
            "bwd_ns": 0, "total_ns": total, "host_ns": 0, "kernels": len(rows), "calls": 0,
        }
    ]  # fmt: skip
    return fast


@pytest.mark.parametrize("rel", _NO_OPS)
def test_lines_without_ops_on_real_traces(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _check(shared_trace(rel), monkeypatch).height == 1


@pytest.mark.parametrize("step", [False, True])
def test_lines_without_ops_on_planted_traces(
    step: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _check(_trace(tmp_path / "k.json", step=step), monkeypatch)
    # the kernel after the step is charged only without steps
    assert out.get_column("kernels").to_list() == [3 if step else 4]


def test_lines_without_device_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _check(_trace(tmp_path / "k.json", step=True, kernels=False), monkeypatch)
    assert out.height == 0
