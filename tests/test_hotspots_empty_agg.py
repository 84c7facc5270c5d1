"""hotspots' aggregate of no row (the ops of a profile without host ops, issue 19 item 8): the
plan's empty table from its schema, without running it; equal to the full path's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from opscope.analysis import hotspots, tree

_OPS = pl.DataFrame(
    schema={
        "name": pl.String, "input_dims": pl.String, "input_types": pl.String,
        "dur_ns": pl.Int64, "self_ns": pl.Int64, "device_ns": pl.Int64,
        "device_self_ns": pl.Int64,
    }
)  # fmt: skip


@pytest.mark.parametrize("device", [True, False])
@pytest.mark.parametrize("base,span", [(0, 0), (1000, 5000)])
@pytest.mark.parametrize("keys", [["name"], ["name", "input_dims", "input_types"]])
def test_the_empty_aggregate_is_the_full_paths_without_a_query(
    monkeypatch: pytest.MonkeyPatch, keys: list[str], base: int, span: int, device: bool
) -> None:
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = hotspots._agg(_OPS, keys, base, span, device)
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    ran: list[Any] = []
    real = pl.LazyFrame.collect

    def spy(self: pl.LazyFrame, *a: Any, **k: Any) -> Any:
        ran.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    fast = hotspots._agg(_OPS, keys, base, span, device)
    assert ran == []  # the shortcut was taken
    assert_frame_equal(fast, full)
    assert fast.height == 0 and fast.columns == full.columns
    # made once per process for the schema, keys and device columns: each caller its own copy
    again = hotspots._agg(_OPS, keys, base, span, device)
    assert again is not fast
    assert_frame_equal(again, full)
    assert ran == []
    # a table with rows still runs its query
    one = pl.DataFrame([dict.fromkeys(_OPS.columns, 1) | {"name": "a"}], schema=_OPS.schema)
    hotspots._agg(one, keys, base, span, device)
    assert ran == [1]


def test_charges_of_a_profile_without_ops_skip_the_joins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No host op: the device work is charged to the null line without joining the (empty)
    resolution, no host part; the charges and charged lines equal the full path's."""
    import opscope
    from opscope.analysis import attribution
    from test_report_speed_empty import _kernels_only

    path = _kernels_only(tmp_path / "k.json")
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    p = opscope.load(path, cache=False)
    full_plan = attribution.charges_plan(p)
    full, full_lines = attribution.charges(p), attribution.charged_lines(p)
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    p = opscope.load(path, cache=False)
    fast_plan = attribution.charges_plan(p)
    assert "JOIN" in full_plan.explain() and "JOIN" not in fast_plan.explain()  # taken
    assert_frame_equal(attribution.charges(p), full)
    assert_frame_equal(attribution.charged_lines(p), full_lines)
    assert full.height == 6 and full_lines.height == 1  # five kernels and a copy, one line


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",  # no kernel with an operator type
        "ascend/small_two_rank/test_rank_0",  # Ascend kernels with theirs: the full path
    ],
)
def test_kernel_types_without_operator_types_are_the_full_paths(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel-types table of kernels without an operator type is the group-by's empty
    table, without it; with operator types the shortcut is not taken."""
    import opscope
    from conftest import SHARED_TRACES

    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"shared trace not found: {path}")
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = hotspots._op_tables(opscope.load(path, cache=False)).kernel_types
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    p = opscope.load(path, cache=False)
    typed = hotspots._typed_kernels(p.kernels, p.kernels.lazy())
    untyped = p.kernels.get_column("op_type").null_count() == p.kernels.height
    assert isinstance(typed, pl.DataFrame) == untyped  # the shortcut taken where it applies
    assert_frame_equal(hotspots._op_tables(p).kernel_types, full, check_row_order=True)
    assert (full.height == 0) == untyped
