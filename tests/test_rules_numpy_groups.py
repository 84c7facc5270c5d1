"""The rules' groupings done in NumPy against the Polars plans they replace (issue 19 item 8).

Each reference below is the plan the rule ran before (joins, group-bys and filters over every
op), written out here with a defined row order; the NumPy path must give the same values on
real traces and on synthetic ones built to hit the edge cases (nested annotations, ops with
op parents inside the annotation, foreach ops, loops under the threshold, null names).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import opscope
from conftest import SHARED_TRACES
from helpers.spies import count_queries
from opscope.advise import _common as c
from opscope.advise.rule import rules
from opscope.advise.rules import fusion
from opscope.model import Profile

CORPUS = Path("/work/corpus")
# (a trace, whether it holds a per-parameter loop)
_OPT_TRACES = [
    (SHARED_TRACES / "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz", True),
    (SHARED_TRACES / "multi_rank/hta_sampled_128rank_job/rank-0.json.gz", False),
    (CORPUS / "facebookresearch_tests_data_rank_non_gpu_rank_non_gpu.json.gz", True),
]


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur} | (
        {"args": args} if args else {}
    )


def _optimizer_trace(path: Path) -> Path:
    """Four optimizer steps: a plain loop (some adds with a copy_ child), a loop under an
    annotation nested in another one, a loop with a foreach op, a loop too short."""
    ev: list[dict[str, Any]] = []

    def loop(t0: float, n: int, name: str = "aten::add_", child: bool = False) -> float:
        t = t0
        for i in range(n):
            nm = name if i % 3 else "aten::mul_"
            ev.append(_x(nm, t, 8, **{"Input Dims": [[4 + i % 2, 8], [4 + i % 2, 8]]}))
            if child and i % 2:
                ev.append(_x("aten::copy_", t + 1, 2, **{"Input Dims": [[4, 8]]}))
            t += 10
        return t

    ann = "user_annotation"
    ev.append(_x("Optimizer.step#SGD.step", 0, 200, ann))
    loop(1, 12, child=True)
    ev.append(_x("Optimizer.step#SGD.step", 1000, 300, ann))
    ev.append(_x("Optimizer.step#Inner.step", 1001, 250, ann))
    loop(1002, 10)
    ev.append(_x("Optimizer.step#SGD.step", 2000, 200, ann))
    t = loop(2001, 9)
    ev.append(_x("aten::_foreach_add_", t, 5))
    ev.append(_x("Optimizer.step#SGD.step", 3000, 100, ann))
    loop(3001, 5)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def _old_loops(profile: Profile) -> pl.DataFrame:
    """The plan optimizer-foreach ran before (with the joins' left order kept: the ops' order)."""
    ev_ = profile.events
    ann = ev_.filter(
        pl.col("name").str.contains("^" + re.escape(fusion.OPT_PREFIX)).fill_null(False),
        pl.col("kind").is_in(["user_annotation", "cpu_op"]),
    )
    forest = c._forest(profile)
    is_ann = np.zeros(len(forest), dtype=bool)
    is_ann[c.event_positions(profile, ann.get_column("id"))] = True
    under = forest.nearest_up(is_ann, include_self=False, max_depth=c.MAX_WALK - 1) >= 0
    ops_at = c.event_positions(profile, profile.ops.get_column("id"))
    keep = (ops_at >= 0) & under[ops_at]
    inner = profile.ops.get_column("id").to_numpy()[keep]
    parents = c.op_parents(profile)
    anc = c.ancestors(profile, pl.Series(inner, dtype=pl.Int64)).filter(
        pl.col("anc_id").is_in(ann.get_column("id").implode()) & (pl.col("hops") > 0)
    )
    inside = profile.ops.join(anc.select("id", "anc_id"), on="id", maintain_order="left").join(
        parents, on="id", how="left", maintain_order="left"
    )
    direct = inside.filter(
        ~pl.col("op_parent").is_in(pl.col("id").implode()) | pl.col("op_parent").is_null()
    )
    per = (
        direct.group_by("anc_id", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            pl.col("name").str.contains("_foreach_|_fused_").any().alias("vectorised"),
            pl.col("id").first().alias("first_id"),
            pl.col("input_dims")
            .filter(pl.col("name").is_in(["aten::add_", "aten::mul_"]))
            .alias("dims"),
        )
        .sort("anc_id")
    )
    return per.filter((pl.col("n") >= fusion.FOREACH_MIN_OPS) & ~pl.col("vectorised"))


def _new_loops(profile: Profile) -> Any:
    rule = fusion.Foreach()
    seen: list[Any] = []
    real = fusion._optimizer_loops

    def spy(*a: Any) -> Any:
        seen.append(real(*a))
        return seen[-1]

    fusion._optimizer_loops = spy  # type: ignore[assignment]
    try:
        found = rule.match(profile, {})
    finally:
        fusion._optimizer_loops = real  # type: ignore[assignment]
    return (seen[0] if seen else None), found


def _check_loops(profile: Profile) -> list[Any]:
    old = _old_loops(profile)
    got, found = _new_loops(profile)
    if old.height == 0:
        assert got is None and found == []
        return found
    anns, n, first, dims = got
    assert anns == old.get_column("anc_id").to_list()
    assert n == old.get_column("n").to_list()
    assert first == old.get_column("first_id").to_list()
    assert dims == old.get_column("dims").to_list()[0]
    return found


def test_optimizer_loops_equal_the_join_plan_on_synthetic(tmp_path: Path) -> None:
    prof = opscope.load(_optimizer_trace(tmp_path / "opt.json"), cache=False)
    (f,) = _check_loops(prof)
    # independent figures: loop 1 has 12 direct ops (the copy_ children are not direct),
    # loop 2 has 10 under both annotations, loop 3 a foreach op, loop 4 only 5 ops
    assert f.evidence["calls"] == 12 + 10 + 10
    assert f.evidence["figures"]["ops_per_step"] == pytest.approx((12 + 10 + 10) / 3)
    assert f.title == "SGD updates parameters one tensor at a time (10 ops per step)"
    assert f.evidence["bench"]["shapes"] == [[4, 8], [5, 8]]
    # the loops' annotations: SGD (200 µs), SGD (300 µs) and Inner (250 µs)
    assert f.evidence["figures"]["step_us"] == round((200 + 300 + 250) / 3, 3)


@pytest.mark.parametrize(("path", "loop"), _OPT_TRACES, ids=lambda p: str(p)[-40:])
def test_optimizer_loops_equal_the_join_plan_on_traces(path: Path, loop: bool) -> None:
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    prof = opscope.load(path, cache=False)
    assert bool(_check_loops(prof)) == loop


def test_optimizer_without_annotation_runs_no_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Optimizer.step annotation: the rule ends after the names' mask (one query on a
    small trace), before any walk or group; with one, the same trace finds its loop."""
    ev = [_x("aten::add_", 10 * i, 5) for i in range(20)]
    p = tmp_path / "plain.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    prof = opscope.load(p, cache=False)
    c.kind_counts(prof)
    ran = count_queries(monkeypatch)
    assert rules()["fusion-optimizer-foreach"].match(prof, {}) == []
    assert len(ran) == 1
    ev.append(_x("Optimizer.step#Adam.step", 0, 300, "user_annotation"))
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    prof = opscope.load(p, cache=False)
    (f,) = _check_loops(prof)
    assert f.evidence["calls"] == 20
