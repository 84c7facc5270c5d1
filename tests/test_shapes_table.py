"""``advise._common.shapes_table``: the parsed ``dims`` and ``dtypes`` columns (built from the
parsed values' JSON text) equal the columns Polars builds from the parsed Python lists, per row,
for Kineto JSON and Ascend strings, scalars, tensor lists, nulls and repeats."""

from __future__ import annotations

import polars as pl

from opscope.advise import _common as c


def test_shapes_table_equals_the_parsed_lists() -> None:
    dims = [
        "[[4,8],[8,16]]",
        "[[4,8],[8,16]]",  # a repeat: parsed once, joined to both rows
        "[[2,3],[],[]]",
        '[[4],"x",[5,6]]',  # a non-shape entry: no shape
        "256,1024;1024",  # Ascend's form
        "N/A",
        None,
        "[]",
    ]
    types = [
        '["float","float"]',
        '["c10::BFloat16","c10::BFloat16"]',
        '["float","Scalar",""]',
        None,
        "DT_BF16;DT_BF16",
        "",
        '["float"]',
        "[]",
    ]
    df = pl.DataFrame(
        {"id": list(range(len(dims))), "input_dims": dims, "input_types": types},
        schema={"id": pl.Int64, "input_dims": pl.String, "input_types": pl.String},
    )
    got = c.shapes_table(df)
    assert got.columns == ["id", "input_dims", "input_types", "dims", "dtypes"]
    assert got.schema["dims"] == pl.List(pl.List(pl.Int64))
    assert got.schema["dtypes"] == pl.List(pl.String)
    want_dims = pl.Series("dims", [c.parse_dims(s) for s in dims], dtype=pl.List(pl.List(pl.Int64)))
    want_types = pl.Series("dtypes", [c.parse_types(s) for s in types], dtype=pl.List(pl.String))
    assert got.get_column("id").to_list() == df.get_column("id").to_list()  # row order kept
    assert got.get_column("dims").equals(want_dims)
    assert got.get_column("dtypes").equals(want_types)
    assert got.get_column("dims").to_list()[:5] == [
        [[4, 8], [8, 16]],
        [[4, 8], [8, 16]],
        [[2, 3], [], []],
        [[4], [], [5, 6]],
        [[256, 1024], [1024]],
    ]


def test_shapes_table_of_no_rows() -> None:
    df = pl.DataFrame(schema={"input_dims": pl.String, "input_types": pl.String})
    got = c.shapes_table(df)
    assert got.height == 0
    assert got.schema["dims"] == pl.List(pl.List(pl.Int64))
    assert got.schema["dtypes"] == pl.List(pl.String)
