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
import os
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


# msinsight's st/level2 ranks 1 and 3: partial ranks of a few collectives, no op, no kernel
_ST_LEVEL2 = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data")) / "st" / "level2"


@pytest.mark.parametrize("rank", [1, 3])
def test_shortcuts_change_no_output_on_partial_ascend_ranks(
    rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _ST_LEVEL2 / f"rank_{rank}_ascend_pt"
    if not p.exists():
        pytest.skip(f"msinsight st/level2 not found at {_ST_LEVEL2}")
    out = _same(p, monkeypatch)
    assert out["tables"]["hotspots.ops"].height == 0
    assert out["tables"]["hotspots.kernels"].height > 0


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
