"""The analyses' shortcuts on empty inputs (issue 19 item 8) change nothing.

A profile without host ops (the small Ascend exports hold only kernels and collectives) has
nothing for the roofline, the attribution, the shape-efficiency table or the critical path's
host side to compute: ``opscope.analysis.tree.SHORTCUTS`` lets them build those empty tables
from their schemas instead of running the queries that would find them empty (a fixed cost
each: most of a small trace's report). With the shortcuts off, the same code runs in full; the
report must be the same byte for byte (JSON, Markdown, terminal, every finding's fields) and
every section table equal in schema and rows.

Also here: ``advise._common.outermost``, which walks the event forest in NumPy instead of
building the ancestors table, against that table's answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import SHARED_TRACES
from opscope.analysis import roofline, tree
from opscope.report.base import render
from opscope.report.build import build_report

_NO_OPS = ["ascend/small_two_rank/test_rank_0", "ascend/small_two_rank/test_rank_1"]
# traces with host ops: the shortcuts must not fire, and the report stays the same
_WITH_OPS = ["gpu/hta_triton_a100.json.gz", "ascend/alexnet_ddp_910b/level0_rank0_ascend_pt"]


def _kernels_only(path: Path) -> Path:
    """A Kineto trace of two streams' kernels and one copy, no host op, no runtime call."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    for i, (name, stream, ts, dur) in enumerate(
        [
            ("sgemm_128x64", 7, 100.0, 40.0),
            ("elementwise_add", 7, 150.0, 5.0),
            ("sgemm_128x64", 7, 160.0, 41.0),
            ("nccl_allreduce", 13, 120.0, 90.0),
            ("elementwise_add", 7, 210.0, 6.0),
        ]
    ):
        ev.append(
            {
                "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                "dur": dur, "args": {"device": 0, "stream": stream, "correlation": 100 + i,
                                     "grid": [64, 1, 1], "block": [128, 1, 1]},
            }
        )  # fmt: skip
    ev.append(
        {
            "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0,
            "tid": 7, "ts": 230.0, "dur": 3.0, "args": {"device": 0, "stream": 7},
        }
    )  # fmt: skip
    doc = {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}
    path.write_text(json.dumps(doc))
    return path


def _outputs(path: Path, shortcuts: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(tree, "SHORTCUTS", shortcuts)
    prof = opscope.load(path, cache=False)  # a fresh Profile: nothing memoised from the other run
    rep = build_report(prof, top=20)
    findings = rep.sections.get("findings")
    return {
        "json": render(rep, "json"),
        "md": render(rep, "markdown"),
        "terminal": render(rep, "terminal"),
        "findings": json.dumps(findings.to_json_full() if findings else None, default=str),
        "tables": rep.tables(),
        "errors": [e.to_json() for e in rep.errors],
    }


def _same(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    fast = _outputs(path, True, monkeypatch)
    full = _outputs(path, False, monkeypatch)
    assert fast["errors"] == full["errors"] == []
    for k in ("json", "md", "terminal", "findings"):
        assert fast[k] == full[k], k
    assert fast["tables"].keys() == full["tables"].keys()
    for name, df in full["tables"].items():
        assert_frame_equal(fast["tables"][name], df, check_row_order=True), name
    return fast


@pytest.mark.parametrize("rel", _NO_OPS + _WITH_OPS)
def test_shortcuts_change_no_output_on_real_traces(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    _same(p, monkeypatch)


def test_shortcuts_change_no_output_on_a_kernels_only_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _kernels_only(tmp_path / "kernels_only.json")
    out = _same(path, monkeypatch)
    # the trace is what it says: kernels and a copy, no host op (so the shortcuts ran)
    prof = opscope.load(path, cache=False)
    assert prof.ops.height == 0
    assert prof.kernels.height == 6
    assert out["tables"]["roofline.calls"].height == 0


def test_the_roofline_shortcut_is_taken_without_host_ops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without host ops the roofline never runs its full path (which would cost ~40 queries);
    with them, it does."""
    calls: list[str] = []
    real = roofline._with_ops

    def spy(profile: Any, device_name: Any) -> Any:
        calls.append("full")
        return real(profile, device_name)

    monkeypatch.setattr(roofline, "_with_ops", spy)
    prof = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    res = roofline.roofline(prof, roofline.Options())
    assert calls == []
    assert res.calls.height == 0 and res.groups.height == 0
    assert res.time_source == "host"  # no kernel has a launching op
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    prof = opscope.load(tmp_path / "k.json", cache=False)
    roofline.roofline(prof, roofline.Options())
    assert calls == ["full"]


def test_resolve_ops_without_host_ops_is_the_full_table(tmp_path: Path) -> None:
    from opscope.analysis import attribution

    prof = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    assert_frame_equal(attribution.resolve_ops(prof), attribution._resolve(prof))
    assert attribution.resolve_ops(prof).height == 0
    assert attribution.resolve_ops(prof).schema["line"] == pl.Int32


def _outermost_by_table(profile: Any, events: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``events`` with no ancestor among them, through the ancestors table (the
    code ``advise._common.outermost`` had before it walked the forest in NumPy)."""
    from opscope.advise import _common as c

    ids = events.get_column("id")
    anc = c.ancestors(profile, ids).filter(
        (pl.col("hops") > 0) & pl.col("anc_id").is_in(ids.implode())
    )
    return events.filter(~pl.col("id").is_in(anc.get_column("id").implode()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_outermost_equals_the_ancestors_table(seed: int) -> None:
    """Random subsets of a real trace's host events (nested ops, python frames, runtime calls
    inside ops): the same rows, in the same order, as the ancestors-table version."""
    import random

    from opscope.advise import _common as c

    p = SHARED_TRACES / "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt"
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    host = prof.events.filter(pl.col("kind").is_in(["cpu_op", "python_function", "runtime"]))
    rng = random.Random(seed)
    keep = sorted(rng.sample(range(host.height), host.height // 3))
    sub = host[keep]
    got = c.outermost(prof, sub)
    want = _outermost_by_table(prof, sub)
    assert_frame_equal(got, want)
    # the subset does nest: some rows are dropped, not all
    assert 0 < got.height < sub.height


def test_outermost_on_a_planted_tree() -> None:
    """a ⊃ b ⊃ c, d alone: of {a, c, d} the outermost are a and d (c's grandparent a is in)."""
    from opscope.advise import _common as c
    from opscope.model import Profile

    ev = pl.DataFrame(
        {
            "id": [1, 2, 3, 4],
            "parent_id": [None, 1, 2, None],
            "kind": ["cpu_op"] * 4,
            "name": ["a", "b", "c", "d"],
        },
        schema={"id": pl.Int64, "parent_id": pl.Int64, "kind": pl.String, "name": pl.String},
    )
    prof = Profile.from_tables(events=ev)
    sub = ev.filter(pl.col("id").is_in([1, 3, 4]))
    assert c.outermost(prof, sub).get_column("name").to_list() == ["a", "d"]
    assert_frame_equal(c.outermost(prof, sub), _outermost_by_table(prof, sub))


def test_rule_tables_without_host_ops_equal_the_full_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules' shared tables (op parents, op costs, user-level ops, event places) of a
    profile without host ops: the same empty schemas (and, for the places, the same all-null
    rows) with the shortcuts on as computed in full."""
    from opscope.advise import _common as c

    paths = [_kernels_only(tmp_path / "k.json")]
    paths += [SHARED_TRACES / r for r in _NO_OPS if (SHARED_TRACES / r).exists()]
    for path in paths:
        got = {}
        for on in (True, False):
            monkeypatch.setattr(tree, "SHORTCUTS", on)
            prof = opscope.load(path, cache=False)
            got[on] = {
                "op_parents": c.op_parents(prof),
                "op_cost": c.op_cost(prof),
                "user_level_ops": c.user_level_ops(prof),
                "locations": c._locations(prof),
            }
        for k, full in got[False].items():
            assert_frame_equal(got[True][k], full), (path, k)
        assert got[True]["locations"].height == opscope.load(path, cache=False).events.height


def _metrics_by_steps(
    df: pl.DataFrame, spec: Any, rate_flops: str, rate_bytes: str
) -> pl.DataFrame:
    """``roofline._metrics`` as it was before it saved queries (verbatim: a column per query,
    the drops their own queries): the reference its figures must equal to the last digit.
    (Computing the figures inline in fewer expressions changed last digits on 19 corpus traces:
    Polars rewrites the arithmetic around literals, so the same formula written another way
    is not the same float.)"""
    from opscope.analysis.roofline import LATENCY_NS, LATENCY_PCT

    peaks = []
    if spec is not None:
        for dt, roof in df.select("dtype", "roof").unique().iter_rows():
            tf32 = spec.peak("tf32", roof) if dt == "fp32" and roof == "matrix" else None
            peaks.append(
                {"dtype": dt, "roof": roof, "peak_flops": spec.peak(dt, roof) if dt else None,
                 "peak_tf32": tf32}
            )  # fmt: skip
    peak_df = pl.DataFrame(
        peaks,
        schema={"dtype": pl.String, "roof": pl.String, "peak_flops": pl.Float64,
                "peak_tf32": pl.Float64},
    )  # fmt: skip
    bw = spec.mem_bw if spec is not None else None
    secs = pl.when(pl.col("time_ns") > 0).then(pl.col("time_ns").cast(pl.Float64) / 1e9)
    df = df.join(peak_df, on=["dtype", "roof"], how="left", nulls_equal=True).with_columns(
        (pl.col("flops") / pl.col("bytes")).alias("intensity"),
        (pl.col(rate_flops) / secs / 1e12).alias("achieved_tflops"),
        (pl.col(rate_bytes) / secs / 1e9).alias("achieved_gbps"),
        pl.lit(bw, dtype=pl.Float64).alias("peak_bw"),
    )
    df = df.with_columns(
        pl.when(
            pl.col("peak_tf32").is_not_null()
            & (pl.col("achieved_tflops") * 1e12 > pl.col("peak_flops"))
        )
        .then(pl.col("peak_tf32"))
        .otherwise(pl.col("peak_flops"))
        .alias("peak_flops")
    ).drop("peak_tf32")
    compute_side = (pl.col("roof") != "memory") & (
        pl.col("intensity") >= pl.col("peak_flops") / pl.col("peak_bw")
    )
    pct = (
        pl.when(compute_side)
        .then(pl.col("achieved_tflops") * 1e12 / pl.col("peak_flops") * 100)
        .otherwise(pl.col("achieved_gbps") * 1e9 / pl.col("peak_bw") * 100)
    )
    df = df.with_columns(
        pl.when(pl.col("time_ns") > 0).then(pct).otherwise(None).alias("pct_of_peak"),
        compute_side.alias("_compute_side"),
    )
    per_call = pl.col("time_ns") / pl.col("calls").cast(pl.Float64)
    bound = (
        pl.when(per_call < LATENCY_NS)
        .then(pl.lit("latency"))
        .when(pl.col("pct_of_peak").is_null())
        .then(pl.lit(None, dtype=pl.String))
        .when(pl.col("pct_of_peak") < LATENCY_PCT)
        .then(pl.lit("latency"))
        .when(pl.col("_compute_side"))
        .then(pl.lit("compute"))
        .otherwise(pl.lit("memory"))
    )
    return df.with_columns(bound.alias("bound")).drop("_compute_side", "peak_bw")


_FIGURES = ["peak_flops", "intensity", "achieved_tflops", "achieved_gbps", "pct_of_peak", "bound"]


@pytest.mark.parametrize(
    "rel",
    [
        "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    ],
)
def test_roofline_figures_equal_the_code_before(rel: str) -> None:
    """Every roofline figure of every call, to the last digit, equal to the code before the
    queries were saved (traces with known peaks, compute- and memory-side calls)."""
    from opscope.analysis.roofline import _metrics, device_of

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    spec = device_of(prof, roofline.Options())[0]
    assert spec is not None  # the figures under test need peaks
    res = roofline.roofline(prof, roofline.Options())
    calls = res.calls.drop(_FIGURES)
    assert_frame_equal(
        _metrics(calls, spec), _metrics_by_steps(calls, spec, "flops", "bytes"), check_exact=True
    )
    assert res.calls.get_column("pct_of_peak").drop_nulls().len() > 10
    assert set(res.calls.get_column("bound").drop_nulls()) >= {"memory", "latency"}
