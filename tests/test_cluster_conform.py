"""cluster._conform: one query (or none for a frame already in shape) giving exactly the
columns asked, in order, cast non-strictly, missing ones null; equal to the column-by-column
reference (the Series casts it replaced)."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from opscope.analysis import cluster as C


def _reference(df: pl.DataFrame, cols: dict[str, type[pl.DataType]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            df.get_column(c).cast(t, strict=False)
            if c in df.columns
            else pl.Series(c, [None] * df.height, dtype=t)
            for c, t in cols.items()
        ]
    )


def test_partial_frame_is_cast_filled_and_ordered() -> None:
    df = pl.DataFrame(
        {
            "dur_ns": [5, 7],
            "rank": [1, 300_000_000_000],  # too large for Int32: null, not an error
            "extra": ["x", "y"],
            "step": ["3", "z"],
        }
    )
    got = C._conform(df, C.STEP_COLUMNS)
    assert_frame_equal(got, _reference(df, C.STEP_COLUMNS))
    assert got.columns == list(C.STEP_COLUMNS)
    assert got.get_column("rank").to_list() == [1, None]
    assert got.get_column("step").to_list() == [3, None]
    assert got.get_column("compute_ns").null_count() == 2


def test_empty_frames_and_lazy_plans() -> None:
    for frame in (pl.DataFrame(), pl.DataFrame({"rank": []}, schema={"rank": pl.Int64})):
        got = C._conform(frame, C.COLLECTIVE_COLUMNS)
        assert_frame_equal(got, _reference(frame, C.COLLECTIVE_COLUMNS))
        assert got.height == 0
    df = pl.DataFrame({"rank": [2, 1], "step": [0, 0], "dur_ns": [9, 4]})
    got = C._conform(df.lazy().sort("rank"), C.STEP_COLUMNS)
    assert_frame_equal(got, _reference(df.sort("rank"), C.STEP_COLUMNS))


def test_a_frame_already_in_shape_is_returned_without_a_query() -> None:
    df = _reference(pl.DataFrame({"rank": [0, 1], "step": [4, 4]}), C.STEP_COLUMNS)
    assert C._conform(df, C.STEP_COLUMNS) is df  # the shortcut is taken
    # and it is what the query gives
    assert_frame_equal(C._conformed(df, C.STEP_COLUMNS).collect(), df)
    # a frame of other types is not taken as in shape
    wide = df.with_columns(pl.col("rank").cast(pl.Int64))
    out = C._conform(wide, C.STEP_COLUMNS)
    assert out is not wide and out.schema == pl.Schema(C.STEP_COLUMNS)


def test_an_empty_frame_in_shape_is_sorted_without_a_query() -> None:
    empty = pl.DataFrame(schema=C.STEP_COLUMNS)
    assert C._conform_sorted(empty, C.STEP_COLUMNS, "rank") is empty  # the shortcut
    assert_frame_equal(
        C._conform_sorted(empty, C.STEP_COLUMNS, "rank"),
        C._conformed(empty, C.STEP_COLUMNS).sort("rank").collect(),
    )
    df = pl.DataFrame({"rank": [3, 1, 2], "step": [0, 0, 0]})
    got = C._conform_sorted(df, C.STEP_COLUMNS, "rank")
    assert got.get_column("rank").to_list() == [1, 2, 3]
    assert_frame_equal(got, _reference(df.sort("rank"), C.STEP_COLUMNS))


def test_without_equals_drop_and_leaves_the_source() -> None:
    df = pl.DataFrame({"rank": [1, 2], "aligned": [0, 3], "x": ["a", None]})
    got = C._without(df, "aligned")
    assert_frame_equal(got, df.drop("aligned"))
    assert df.columns == ["rank", "aligned", "x"]  # the source keeps its column


def test_cast_to_is_conformed_of_a_plan_with_every_column() -> None:
    """_cast_to (no schema resolved) is _conformed for a plan holding every column, in any
    order and types (extra columns dropped)."""
    df = pl.DataFrame(
        {
            "idle_ns": [1, 2], "dur_ns": [5.0, 7.0], "rank": [1, 300_000_000_000],
            "step": ["3", "z"], "ts_ns": [0, 1], "compute_ns": [None, 3],
            "communication_ns": [4, 4], "communication_not_overlapped_ns": [0, 0], "x": [1, 1],
        }
    )  # fmt: skip
    plan = df.lazy().sort("rank", descending=True)
    assert_frame_equal(
        C._cast_to(plan, C.STEP_COLUMNS).collect(),
        C._conformed(plan, C.STEP_COLUMNS).collect(),
    )


def test_the_analysis_equals_aggregate_of_the_rank_tables() -> None:
    """The registered analysis hands its own plans to the aggregate without conforming them
    again: the same tables as the public aggregate of rank_tables' conformed tables (a GPU
    rank with collectives, an Ascend rank)."""
    import dataclasses

    import opscope
    from conftest import shared_trace
    from opscope.analysis.registry import Options

    for name in (
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    ):
        p = opscope.load(shared_trace(name), cache=False)
        got = C.cluster(p, Options())
        t = C.rank_tables(p)
        want = C.aggregate(t["steps"], t["collectives"], t["links"], hccl=t["hccl"])
        for f in dataclasses.fields(got):
            a, b = getattr(got, f.name), getattr(want, f.name)
            if isinstance(a, pl.DataFrame):
                assert_frame_equal(a, b)
            else:
                assert a == b
