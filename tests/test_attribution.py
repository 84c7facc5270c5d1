"""Attribution: planted slow lines and backward kernels are charged to the right user line."""

from __future__ import annotations

import inspect
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import opscope
import opscope.analysis
from helpers.synth import USER_FILE, training
from opscope.analysis.registry import run
from opscope.analysis.tree import gather


def _by_line(res: object) -> dict[int, tuple[float, float]]:
    lines = res.lines  # type: ignore[attr-defined]
    return {
        r["line"]: (r["fwd_ns"] / 1000, r["bwd_ns"] / 1000)
        for r in lines.filter(pl.col("file") == USER_FILE).iter_rows(named=True)
    }


def test_device_kernels_forward_and_backward_charged_to_forward_line() -> None:
    plan = training(steps=3, layers=3, slow_at=(1, 2), slow_factor=20)
    got = _by_line(run("attribution", plan.profile))
    assert set(got) == set(plan.line_fwd_us)
    for line in plan.line_fwd_us:
        assert got[line] == (plan.line_fwd_us[line], plan.line_bwd_us[line])
    # the planted slow line is the top row
    top = run("attribution", plan.profile).lines.row(0, named=True)  # type: ignore[attr-defined]
    assert top["line"] == 32 and top["module"] == "Net/Linear_2"
    assert top["kernels"] == 6  # 3 steps x (1 forward + 1 backward kernel)


def test_host_only_profile_charges_top_level_ops_once() -> None:
    plan = training(steps=2, layers=2, device=False)
    res = run("attribution", plan.profile)
    got = _by_line(res)
    for line in plan.line_fwd_us:
        assert got[line] == (plan.line_fwd_us[line], plan.line_bwd_us[line])
    # nested ops (addmm in linear, mm in the backward node) are not counted twice
    ops = plan.profile.ops
    top_level = ops.filter(
        pl.col("name").is_in(
            ["aten::linear", "autograd::engine::evaluate_function: AddmmBackward0"]
        )
    )
    total = res.lines.get_column("total_ns").sum()  # type: ignore[attr-defined]
    assert total == top_level.get_column("dur_ns").sum()


@pytest.mark.slow
@pytest.mark.torch
def test_real_cpu_run_lines_forward_and_backward(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    from opscope.ingest import load

    torch.set_num_threads(1)

    class Net(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(32, 64)
            self.fc2 = torch.nn.Linear(64, 8)

        def forward(self, x: Any) -> Any:
            h = self.fc1(x).relu()
            return self.fc2(h)

    # Kineto's python tracer records a frame's function's first line (the ``def``), not the
    # line executing: both Linear calls land on forward's first line, told apart by module.
    _, def_line = inspect.getsourcelines(Net.forward)
    model, x = Net(), torch.randn(16, 32)
    out = tmp_path / "t.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=3),
        record_shapes=True,
        with_stack=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        for _ in range(4):
            model(x).sum().backward()
            prof.step()
    res = run("attribution", load(out, cache=False))
    lines = res.lines.filter(  # type: ignore[attr-defined]
        pl.col("file").str.ends_with(Path(__file__).name) & (pl.col("line") == def_line)
    )
    by = {r["module"]: r for r in lines.iter_rows(named=True)}
    for mod in ("Net_0/Linear_0", "Net_0/Linear_1"):
        assert mod in by, (mod, res.lines)  # type: ignore[attr-defined]
        assert by[mod]["function"] == "forward"
        assert by[mod]["fwd_ns"] > 0 and by[mod]["bwd_ns"] > 0  # backward charged forward
    # every top-level op's host time is charged exactly once: compare with the raw JSON
    raw = [
        e
        for e in json.loads(out.read_text())["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "cpu_op"
    ]
    total = 0.0
    for _, evs in itertools.groupby(
        sorted(raw, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"])),
        key=lambda e: (e["pid"], e["tid"]),
    ):
        end = -1.0
        for e in evs:
            if e["ts"] >= end:  # not inside the previous top-level op
                total += e["dur"]
                end = e["ts"] + e["dur"]
    got = res.lines.get_column("total_ns").sum() / 1000  # type: ignore[attr-defined]
    assert got == pytest.approx(total, rel=1e-6, abs=1.0)


def test_op_times_and_the_resolution_walk_one_host_forest(monkeypatch: pytest.MonkeyPatch) -> None:
    """hotspots' op times and the resolution of the ops read the same host events' forest, built
    once per Profile (each filtered the events and built its own)."""
    from opscope.analysis import tree
    from opscope.analysis.attribution import resolve_ops
    from opscope.analysis.hotspots import op_times

    built: list[int] = []
    real = tree.collect

    def spy(plan: pl.LazyFrame) -> pl.DataFrame:
        out = real(plan)
        built.append(out.height)  # tree's own queries: the forest's only
        return out

    monkeypatch.setattr(tree, "collect", spy)
    p = training().profile
    res, ops = resolve_ops(p), op_times(p)
    assert len(built) == 1 and built[0] == tree.host_forest(p)[1].ids.size
    assert res.height == ops.height == p.ops.height
    # charges_plan puts each top-level op's duration beside its resolution by position: the
    # resolution's rows are the cached ops, row for row
    assert res.get_column("id").to_list() == p.ops.get_column("id").to_list()


def _columns_by_query(ev: pl.DataFrame) -> dict[str, list[Any]]:
    cols = ev.select(
        (pl.col("kind") == "cpu_op").fill_null(False).alias("is_op"),
        pl.col("fwd_id").fill_null(-1).alias("fwd"),
        pl.col("fwd_id").is_not_null().alias("has_fwd"),
        pl.col("is_backward").fill_null(False).alias("backward"),
        pl.col("stack_id").fill_null(-1).cast(pl.Int64).alias("stack"),
        pl.col("stack_id").is_not_null().alias("has_stack"),
        pl.col("module").is_not_null().alias("has_module"),
    )
    return {c: cols.get_column(c).to_list() for c in cols.columns}


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    ],
)
def test_resolve_reads_its_columns_without_a_query(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The columns the resolution reads, from the Series (no query) where no column needs its
    nulls read row by row, equal the query's; a column partly null takes the query; the rows
    taken by position (null at -1) equal the gathers they replaced."""
    from conftest import shared_trace
    from helpers.spies import count_queries
    from opscope.analysis import attribution as A

    ev = opscope.load(shared_trace(rel), cache=False).events
    # every variant of a column read for its nulls: as loaded, all null, none null, some null
    half = [True, None] * (ev.height // 2) + [True] * (ev.height % 2)
    for back in (
        ev.get_column("is_backward"),
        pl.Series([None] * ev.height, dtype=pl.Boolean),
        pl.Series([False] * ev.height),
        pl.Series(half, dtype=pl.Boolean),
    ):
        frame = ev.with_columns(back.alias("is_backward"))
        partly = any(
            0 < frame.get_column(c).null_count() < frame.height
            for c in ("kind", "is_backward", "module")
        )
        ran = count_queries(monkeypatch)
        got = {c: a.tolist() for c, a in A._columns_read(frame).items()}
        monkeypatch.undo()
        assert len(ran) == int(partly)
        assert got == _columns_by_query(frame)
    s = ev.get_column("module")
    at = np.array([0, -1, ev.height - 1, -1, 1], dtype=np.int64)
    idx = pl.Series(np.where(at >= 0, at, np.nan), nan_to_null=True, dtype=pl.Int64)
    assert gather(s, at).to_list() == s.gather(idx).to_list()
    assert gather(s, at[[0, 2]]).to_list() == s.gather(at[[0, 2]]).to_list()


@pytest.mark.parametrize("seed", range(40))
def test_user_frames_equal_the_query(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """user_frames in NumPy (each stack's user frame of least depth, stacks in order, a null
    stack id and a null depth first) equals the filter-sort-group query it replaced, on random
    stacks tables with null ids, depths and flags; no query unless two user frames of a stack
    share a depth (then the query's own order decides, as before); memoised per profile."""
    from helpers.spies import count_queries
    from opscope.analysis import attribution as A
    from opscope.model import schema

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))

    def col(values: list[Any], nulls: float) -> list[Any]:
        return [None if rng.random() < nulls else v for v in values]

    rows = {
        "stack_id": col([int(x) for x in rng.integers(0, 6, n)], 0.1),
        "depth": col([int(x) for x in rng.permutation(n)], 0.05 if seed % 2 else 0.0),
        "file": col([f"f{i}.py" for i in range(n)], 0.1),
        "line": col(list(range(n)), 0.1),
        "function": col([f"fn{i}" for i in range(n)], 0.1),
        "is_user": col([bool(x) for x in rng.integers(0, 2, n)], 0.1),
    }
    if seed % 5 == 0 and n > 2:  # two user frames of one stack at one depth
        rows["stack_id"][:2] = [3, 3]
        rows["depth"][:2] = [1, 1]
        rows["is_user"][:2] = [True, True]
    stacks = pl.DataFrame(rows, schema=schema.STACKS)
    want = (
        stacks.lazy()
        .filter(pl.col("is_user").fill_null(False))
        .sort("stack_id", "depth", maintain_order=True)
        .group_by("stack_id", maintain_order=True)
        .first()
        .select("stack_id", "file", "line", "function")
        .collect()
    )

    class Owner:  # (a profile's stand-in the memo can refer to weakly)
        pass

    profile = Owner()
    profile.stacks = stacks  # type: ignore[attr-defined]
    profile.events = stacks  # type: ignore[attr-defined]
    ran = count_queries(monkeypatch)
    got = A.user_frames(profile)  # type: ignore[arg-type]
    assert A.user_frames(profile) is got  # type: ignore[arg-type]
    assert ran == []
    assert got.rows() == want.rows() and got.schema == want.schema
