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
