"""A finding names the line the report charges its events to (issue 23, "one house": advise had
its own location walk, which could disagree with the report's attribution).

The report's answer is :func:`opscope.analysis.attribution.charges` (every device event and
top-level op, as the "time per source line" table sums them) and ``resolve_ops`` (every op).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from helpers.synth import TORCH_FILE, USER_FILE, Builder
from opscope.advise import _common as c
from opscope.advise import advise
from opscope.analysis.attribution import charges, resolve_ops
from opscope.model import Profile, kinds

Where = tuple[str | None, int | None, str | None]


def _report(profile: Profile) -> dict[int, Where]:
    """The report's (file, line, module) per op and per device event."""
    out: dict[int, Where] = {
        r["id"]: (r["file"], r["line"], r["module"])
        for r in resolve_ops(profile).iter_rows(named=True)
    }
    # device work charged to no line (queued before profiling: no op, no step) is unplaced
    dev = profile.events.filter(pl.col("kind").cast(pl.String).is_in(list(kinds.DEVICE_WORK)))
    out.update(dict.fromkeys(dev.get_column("id").to_list(), (None, None, None)))
    for r in charges(profile).iter_rows(named=True):
        out[r["event_id"]] = (r["file"], r["line"], r["module"])
    return out


def _advise_where(profile: Profile, ids: list[int]) -> dict[int, Where]:
    return {i: (loc.file, loc.line, loc.module) for i, loc in c.locate(profile, ids).items()}


# --- planted: the cases where the old walk and the report parted ------------------------------


def _forward(b: Builder, stack: int, step: int) -> tuple[int, int]:
    lin = b.op("aten::linear", 10, 30, parent=step, stack=stack, module="Net/Linear_0")
    mm = b.op("aten::addmm", 15, 20, parent=lin, stack=stack, module="Net/Linear_0")
    return lin, mm


def test_backward_wrapper_goes_to_the_forward_line_as_in_the_report() -> None:
    # The engine's evaluate_function wrapper carries no forward link; the node below it does.
    # The report charges the wrapper's time to the forward line (the link below it); the old
    # walk only looked up and left the wrapper's host time with no line.
    b = Builder()
    st = b.step(0, 0, 1000)
    stack = b.stack([(TORCH_FILE, 125, "forward"), (USER_FILE, 30, "forward")])
    _, mm = _forward(b, stack, st)
    wrap = b.op("autograd::engine::evaluate_function: AddmmBackward0", 100, 40, parent=st, bwd=True)
    node = b.op("AddmmBackward0", 102, 35, parent=wrap, bwd=True, fwd=mm)
    profile = b.build()
    got = _advise_where(profile, [wrap, node])
    assert got[wrap] == (USER_FILE, 30, "Net/Linear_0")
    assert got[node] == (USER_FILE, 30, "Net/Linear_0")
    assert got == {i: _report(profile)[i] for i in (wrap, node)}


def test_deeply_nested_kernel_goes_to_the_line_as_in_the_report() -> None:
    # 60 nested ops under the one with the stack: the old walk stopped after 48 parents.
    b = Builder()
    st = b.step(0, 0, 1000)
    stack = b.stack([(USER_FILE, 41, "forward")])
    top = b.op("aten::linear", 10, 500, parent=st, stack=stack, module="Net/Linear_0")
    parent = top
    for d in range(60):
        parent = b.op(f"aten::inner_{d}", 11 + d, 400 - d, parent=parent)
    k = b.kernel("gemm", 100, 5, parent)
    profile = b.build()
    got = _advise_where(profile, [k, parent])
    assert got[k] == (USER_FILE, 41, "Net/Linear_0")
    assert got == {i: _report(profile)[i] for i in (k, parent)}


def test_runtime_call_goes_with_its_op_and_alone_to_its_own_frame() -> None:
    b = Builder()
    st = b.step(0, 0, 1000)
    in_op = b.stack([(USER_FILE, 30, "forward")])
    frame_stack = b.stack([(TORCH_FILE, 900, "synchronize"), (USER_FILE, 77, "train")])
    _, mm = _forward(b, in_op, st)
    launch = b._add(kind="runtime", name="cudaLaunchKernel", ts=16, dur=2, pid=1, tid=1,
                    parent_id=mm)  # fmt: skip
    frame = b._add(kind="python_function", name="torch/cuda/__init__.py(900): synchronize",
                   ts=200, dur=50, pid=1, tid=1, parent_id=st, stack_id=frame_stack)  # fmt: skip
    sync = b._add(kind="runtime", name="cudaDeviceSynchronize", ts=201, dur=40, pid=1, tid=1,
                  parent_id=frame)  # fmt: skip
    orphan = b._add(kind="kernel", name="k", ts=300, dur=5, pid=0, tid=7, stream=7, device=0)
    profile = b.build()
    got = _advise_where(profile, [launch, sync, orphan])
    assert got[launch] == (USER_FILE, 30, "Net/Linear_0")  # the op whose time holds it
    assert got[sync] == (USER_FILE, 77, None)  # no op above: the innermost user frame
    assert got[orphan] == (None, None, None)  # no launching op: unplaced, as in the report
    assert _report(profile)[orphan] == (None, None, None)


# --- real traces: every event and every finding ------------------------------------------------


def _check(profile: Profile) -> tuple[int, int]:
    """Asserts advise's location of every op and device event is the report's, and that each
    finding naming a line whose evidence the report charges to one line names that line.
    Returns (events compared, findings compared)."""
    report = _report(profile)
    kind = profile.events.get_column("kind").cast(pl.String)
    ids = profile.events.filter(kind.is_in(["cpu_op", *kinds.DEVICE_WORK])).get_column("id")
    mine = _advise_where(profile, ids.to_list())
    wrong = {i: (mine[i], report.get(i)) for i in mine if mine[i] != report.get(i)}
    assert wrong == {}, list(wrong.items())[:5]
    checked = 0
    for f in advise(profile):
        ev: list[int] = f.evidence.get("event_ids") or []
        lines = {report[i][:2] for i in ev if i in report}
        if f.file is None or len(lines) != 1:
            continue  # a profile-wide finding, or examples from several lines
        assert (f.file, f.line) in lines, (f.rule, f.title, f.file, f.line, lines)
        checked += 1
    return len(mine), checked


@pytest.mark.parametrize(
    ("rel", "min_findings"),
    [
        ("gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz", 20),
        ("gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz", 5),
        ("gpu/tracelens_h100_bert_small.json.gz", 10),
        ("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt", 5),
    ],
)
def test_real_trace_findings_name_the_reports_line(rel: str, min_findings: int) -> None:
    from opscope.ingest import load

    profile = load(shared_trace(rel), cache=False)
    assert profile.stacks.height > 0  # a trace with Python stacks, or the check says nothing
    events, findings = _check(profile)
    assert events > 100
    assert findings >= min_findings


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(
    "model", ["seed_linear", "copy_linear", "alignment", "host_sync", "attention", "dispatch"]
)
def test_recorded_cpu_run_findings_name_the_reports_line(model: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from models import rule_models
    from models._profile import load, record

    step: Any = getattr(rule_models, model)(False)
    profile = load(record(step, tmp_path / "t.json"))
    assert profile.stacks.height > 0
    events, findings = _check(profile)
    assert events > 10
    assert findings >= 1
