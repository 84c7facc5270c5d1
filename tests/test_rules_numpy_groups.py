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
    """No Optimizer.step annotation: the rule ends after the names' mask (no query on a
    small trace: its names' codes found in Python), before any walk or group; with one, the
    same trace finds its loop."""
    ev = [_x("aten::add_", 10 * i, 5) for i in range(20)]
    p = tmp_path / "plain.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    prof = opscope.load(p, cache=False)
    c.kind_counts(prof)
    ran = count_queries(monkeypatch)
    assert rules()["fusion-optimizer-foreach"].match(prof, {}) == []
    assert len(ran) == 0
    ev.append(_x("Optimizer.step#Adam.step", 0, 300, "user_annotation"))
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    prof = opscope.load(p, cache=False)
    (f,) = _check_loops(prof)
    assert f.evidence["calls"] == 20


# shape-alignment's candidates -------------------------------------------------------------

_ALIGN_TRACES = [
    SHARED_TRACES / "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    SHARED_TRACES / "gpu/tracelens_h100_bert_small.json.gz",
    SHARED_TRACES / "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    CORPUS / "facebookresearch_tests_data_rank_non_gpu_rank_non_gpu.json.gz",
    Path("/work/ascend_data/db/level0/rank0_ascend_pt"),  # kernels with their own shapes
]


def _old_candidates(profile: Profile) -> list[dict[str, Any]]:
    """The plan shape-alignment ran before: a filter and a join with the costs (or the shaped
    kernels), the attention spans' ops dropped, a group_by, the shapes table, a sort."""
    from opscope.advise.rules import alignment as al
    from opscope.advise.rules.fusion import in_attention_spans

    kern = c.kernels_with(
        profile,
        "input_dims",
        lambda: (
            pl.col("name").str.contains(al._KERNEL_MM).fill_null(False)
            | pl.col("name").str.contains(al._KERNEL_FA).fill_null(False)
        ),
    )
    if kern.height:
        src = kern.with_columns(pl.col("dur_ns").alias("cost_ns"), pl.lit(True).alias("dev"))
    else:
        src = (
            profile.ops.filter(
                pl.col("name").is_in([*al._HOST_MM, *al._HOST_CONV, *al._HOST_ATTN])
                & pl.col("input_dims").is_not_null()
            )
            .join(c.op_cost(profile), on="id", how="left", maintain_order="left")
            .with_columns(pl.lit(False).alias("dev"))
        )
        if src.height:
            src = src.filter(~in_attention_spans(profile, src.get_column("id")))
    if src.height == 0:
        return []
    g = src.group_by("name", "input_dims", "input_types", "dev").agg(
        pl.len().alias("calls"),
        pl.col("cost_ns").fill_null(0).sum(),
        pl.col("id").sort().alias("ids"),
    )
    keys = ["cost_ns", "name", "input_dims", "input_types", "dev"]
    out = c.shapes_table(g).sort(keys, descending=[k == "cost_ns" for k in keys], nulls_last=True)
    return list(out.iter_rows(named=True))


def _alignment_trace(path: Path) -> Path:
    """Matmuls with null dtypes, null and repeated shapes, equal times (the order's ties), a
    conv and an SDPA call, and a materialised attention span whose bmms are not candidates."""
    ev: list[dict[str, Any]] = []
    t = 0.0

    def op(name: str, dims: Any, types: Any, dur: float = 10) -> None:
        nonlocal t
        args = {"Input Dims": dims} if dims is not None else {}
        if types is not None:
            args["Input type"] = types
        ev.append(_x(name, t, dur, **args))
        t += dur + 1

    for _ in range(2):
        op("aten::mm", [[100, 130], [130, 7]], ["float", "float"])
        op("aten::mm", [[100, 130], [130, 7]], None)
        op("aten::mm", [[9, 9], [9, 16]], ["float", "float"])
        op("aten::mm", [[9, 9], [9, 9]], ["float", "float"])
        op("aten::addmm", [[7], [100, 130], [130, 7]], ["float", "float", "float"], 30)
        op("aten::mm", None, ["float", "float"])
        op("aten::convolution", [[8, 3, 32, 32], [130, 3, 3, 3]], ["float", "float"], 20)
        op("aten::scaled_dot_product_attention", [[2, 4, 200, 72]], ["float"], 5)
        op("aten::bmm", [[8, 200, 72], [8, 72, 200]], ["float", "float"])
        op("aten::softmax", [[8, 200, 200]], ["float"])
        op("aten::bmm", [[8, 200, 200], [8, 200, 72]], ["float", "float"])
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def _check_candidates(prof: Profile) -> list[dict[str, Any]]:
    from opscope.advise.rules.alignment import Alignment

    want = _old_candidates(prof)
    got = Alignment._candidates(prof)
    assert got == want
    return got


def test_alignment_candidates_equal_the_group_by_plan_on_synthetic(tmp_path: Path) -> None:
    prof = opscope.load(_alignment_trace(tmp_path / "align.json"), cache=False)
    got = _check_candidates(prof)
    names = [r["name"] for r in got]
    # the attention span's bmms are fusion-attention's; the mm without shapes is no candidate
    assert "aten::bmm" not in names and all(r["input_dims"] for r in got)
    assert names[:3] == ["aten::addmm", "aten::convolution", "aten::mm"]
    mm = [r for r in got if r["input_dims"] == "[[100,130],[130,7]]"]
    # the same shape with and without dtypes: two candidates, the null dtypes last
    assert [r["input_types"] for r in mm] == ['["float","float"]', None]
    assert [r["calls"] for r in mm] == [2, 2] and mm[1]["dtypes"] == []


@pytest.mark.parametrize("path", _ALIGN_TRACES, ids=lambda p: str(p)[-40:])
def test_alignment_candidates_equal_the_group_by_plan_on_traces(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    assert _check_candidates(opscope.load(path, cache=False))


def test_alignment_candidates_run_no_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host ops' candidates: no query (the names looked up in Python) where the plan ran
    six."""
    from opscope.advise.rules.alignment import Alignment

    p = SHARED_TRACES / "multi_rank/hta_sampled_128rank_job/rank-0.json.gz"
    if not p.exists():
        pytest.skip(f"trace not found: {p}")
    prof = opscope.load(p, cache=False)
    # (memoised intermediates of other rules, and the names' codes every name test reads)
    c.op_cost(prof), fusion.attention_spans(prof), c.pattern_masks(prof, "events", ())
    ran = count_queries(monkeypatch)
    assert Alignment._candidates(prof)
    assert len(ran) == 0


# costs by position, the shapes table -----------------------------------------------------


@pytest.mark.parametrize("path", _ALIGN_TRACES[:4], ids=lambda p: str(p)[-40:])
def test_op_costs_at_equals_the_left_join(path: Path) -> None:
    """The ops' costs by position (shape-alignment, precision-fp32-matmul) equal a left join
    of those ops with ``op_cost``, in their order, nulls where an op has none."""
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    prof = opscope.load(path, cache=False)
    at = np.arange(0, prof.ops.height, 3, dtype=np.int64)[::-1]  # some rows, out of order
    want = (
        prof.ops[at]
        .select("id")
        .join(c.op_cost(prof), on="id", how="left", maintain_order="left")
        .get_column("cost_ns")
    )
    got = c.op_costs_at(prof, at)
    assert got.to_list() == want.to_list() and got.dtype == want.dtype
    assert c.op_costs_at(prof, at[:0]).len() == 0


def test_shapes_table_runs_one_query(monkeypatch: pytest.MonkeyPatch) -> None:
    df = pl.DataFrame(
        {"input_dims": ["[[4,8]]", None, "[[4,8]]"], "input_types": [None, '["float"]', None]},
        schema={"input_dims": pl.String, "input_types": pl.String},
    )
    ran = count_queries(monkeypatch)
    got = c.shapes_table(df)
    assert len(ran) == 1
    assert got.get_column("dims").to_list() == [[[4, 8]], None, [[4, 8]]]
    assert got.get_column("dtypes").to_list() == [[], ["float32"], []]


# the perf model's calls the gemm and efficiency rules read ------------------------------


def _old_model_filters() -> dict[str, pl.Expr]:
    from opscope.advise.rules import gemm

    matrix = (
        pl.col("name").is_in(gemm.GEMM_OPS)
        & (pl.col("roof") == "matrix")
        & pl.col("time_ns").is_not_null()
    )
    costed = pl.col("gap_ns").is_not_null() & (pl.col("time_ns") > 0)
    return {
        "gemm": matrix & pl.col("bound_ns").is_not_null(),
        "moe": matrix & pl.col("module").fill_null("").str.contains(gemm.MOE_MODULE),
        gemm.ATTN_FORMULA: pl.col("formula").fill_null("").str.contains(gemm.ATTN_FORMULA) & costed,
        gemm.CONV_FORMULA: pl.col("formula").fill_null("").str.contains(gemm.CONV_FORMULA) & costed,
    }


@pytest.mark.parametrize(
    "path",
    [
        *_ALIGN_TRACES,
        SHARED_TRACES / "gpu/hta_triton_a100.json.gz",
        SHARED_TRACES / "ascend/kernel_details_gpt_fp16",
    ],
    ids=lambda p: str(p)[-40:],
)
def test_model_calls_equal_the_filters(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The four masks (in Python, once a profile) equal the four filters they replace; no
    query (the rows gathered by position)."""
    from polars.testing import assert_frame_equal

    from opscope.advise.rules import gemm

    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    prof = opscope.load(path, cache=False)
    calls = c.perf_model(prof, {}).calls
    want = {k: calls.filter(e) for k, e in _old_model_filters().items()}
    ran = count_queries(monkeypatch)
    got = {k: gemm.model_calls(prof, {}, k) for k in want}
    assert len(ran) == 0
    for k, w in want.items():
        assert_frame_equal(got[k], w)


# fusion-bias-add / fusion-activation: the pairs of the user-level sequence -----------------


def _old_pairs(profile: Profile) -> tuple[list[int], list[int]]:
    """The rows the two rules' shifted-sequence filters kept (one query each before)."""
    s = fusion._seq(profile).with_row_index("row")
    bias = s.with_columns(fusion._shifted("name", 1).alias("n_name")).filter(
        pl.col("name").is_in(["aten::matmul", "aten::mm"]) & pl.col("n_name").is_in(fusion.ADD_OPS)
    )
    act = s.with_columns(fusion._shifted("name", -1).alias("p_name")).filter(
        pl.col("name").is_in(fusion.ACTIVATIONS) & pl.col("p_name").is_in(fusion.LINEAR_OPS)
    )
    return bias.get_column("row").to_list(), act.get_column("row").to_list()


def _pairs_trace(path: Path) -> Path:
    """Matmul/add and linear/relu pairs on two threads, split across the threads' ends (not a
    pair), a null name between."""
    ev: list[dict[str, Any]] = []
    for tid, t0 in ((1, 0.0), (2, 0.5)):
        t = t0
        for name in ("aten::mm", "aten::add_", "aten::linear", "aten::relu", "aten::mm"):
            ev.append(_x(name, t, 5) | {"tid": tid})
            t += 10
    ev.append(_x("aten::relu", 200, 5) | {"tid": 3})  # first op of its thread: no linear before
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


@pytest.mark.parametrize("path", [*_ALIGN_TRACES[:4], None], ids=lambda p: str(p)[-40:])
def test_fusion_pairs_equal_the_shifted_filters(path: Path | None, tmp_path: Path) -> None:
    if path is None:
        path = _pairs_trace(tmp_path / "pairs.json")
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    prof = opscope.load(path, cache=False)
    bias, act = fusion._pairs(prof)
    assert (bias.tolist(), act.tolist()) == _old_pairs(prof)
    if path.name == "pairs.json":
        assert len(bias) == 2 and len(act) == 2  # one of each per thread, none across


def test_parse_types_cached_gives_fresh_equal_lists() -> None:
    """The cached parse: the same values as before (JSON, Ascend's form, scalars, bad JSON,
    none), and a new list each call (a caller's change does not reach the next caller)."""
    cases = {
        '["float","c10::BFloat16"]': ["float32", "bfloat16"],
        '["float",1,"Scalar"]': ["float32", None, "scalar"],
        "DT_BF16;DT_FLOAT": ["bfloat16", "float32"],
        "[not json": [],
        None: [],
    }
    for s, want in cases.items():
        got = c.parse_types(s)
        assert got == want
        got.append("x")
        assert c.parse_types(s) == want
