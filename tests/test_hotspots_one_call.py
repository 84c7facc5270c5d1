"""hotspots' tables made in Python where each group is one row (a partial Ascend rank: a few
collectives of unique names, charged to no source line) equal the plans' tables: the same
schema, rows, order and shares, with the shortcuts off as the reference."""

from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from opscope.analysis import hotspots, tree
from opscope.analysis.attribution import _LINE_SCHEMA


def _kernels(names: list[str | None], durs: list[int | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"name": names, "dur_ns": durs, "op_type": [None] * len(names)},
        schema={"name": pl.String, "dur_ns": pl.Int64, "op_type": pl.String},
    )


def _plan_table(kernels: pl.DataFrame, base: int, span: int) -> pl.DataFrame:
    kern = kernels.lazy().with_columns(pl.col("dur_ns").alias("self_ns"))
    return hotspots._agg(kern, ["name"], base, span, False)


@pytest.mark.parametrize("seed", range(20))
def test_one_call_groups_equal_the_plans_table(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 15, 23, 64])
    names: list[str | None] = rng.sample(
        ["hcom_allReduce__643_4_1", "b", "B", "ä", "a b", "", "hcom_x", *map(str, range(80))], n
    )
    if n and seed % 3 == 0:
        names[rng.randrange(n)] = None
    # ties of totals (the names decide), nulls (a sum of 0, a null mean, min and max)
    durs = [rng.choice([None, 0, 5, 5, 1_000, 441_708_380, 2**40]) for _ in range(n)]
    base, span = rng.choice([(0, 0), (809_431_750, 900_000_000), (3, 0)])
    k = _kernels(names, durs)
    got = hotspots._one_call_groups(k, base, span)
    assert got is not None
    assert_frame_equal(got, _plan_table(k, base, span), check_row_order=True)


def test_one_call_groups_leave_repeated_names_and_many_kernels_to_the_plan() -> None:
    assert hotspots._one_call_groups(_kernels(["a", "b", "a"], [1, 2, 3]), 10, 10) is None
    many = [f"k{i}" for i in range(hotspots._FIRST_NAMES + 1)]
    assert hotspots._one_call_groups(_kernels(many, [1] * len(many)), 10, 10) is None
    huge = _kernels(["a", "b"], [1, 2**60])
    assert hotspots._one_call_groups(huge, 10, 10) is None


def _lines(rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_LINE_SCHEMA)


_LINE = {"fwd_ns": 441_708_380, "bwd_ns": 0, "total_ns": 441_708_380, "host_ns": 0,
         "kernels": 15, "calls": 0}  # fmt: skip


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [_LINE],
        [{**_LINE, "file": "train.py", "line": 7, "function": "f", "module": "net.fc"}],
        [{**_LINE, "fwd_ns": None, "total_ns": None, "calls": None}],
    ],
)
@pytest.mark.parametrize("base", [0, 809_431_750])
def test_one_line_tables_equal_the_plans_tables(rows: list[dict[str, object]], base: int) -> None:
    lines = _lines(rows)
    got = hotspots._one_line_tables(lines, base)
    assert got is not None
    modules, sources = pl.collect_all(
        [hotspots._module_sums(lines.lazy()), lines.lazy().with_columns(hotspots._PCT)],
        engine="in-memory",
        optimizations=tree.EAGER_FLAGS,
    )
    assert_frame_equal(got[0], hotspots.with_shares(modules, base), check_row_order=True)
    assert_frame_equal(got[1], hotspots.with_shares(sources, base), check_row_order=True)
    assert hotspots._one_line_tables(_lines([_LINE, _LINE]), base) is None


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [_LINE],
        [{**_LINE, "file": "train.py", "line": 7, "function": "f", "module": "net.fc"}],
        [{**_LINE, "fwd_ns": None, "kernels": None, "calls": None}],
    ],
)
def test_attribution_modules_of_one_line_equal_the_plans(rows: list[dict[str, object]]) -> None:
    from opscope.analysis import attribution

    lines = _lines(rows)
    got = hotspots.one_row_sums(
        lines, attribution._module_sums, frozenset(attribution._MODULE_SUMS)
    )
    assert_frame_equal(got, tree.collect(attribution._module_sums(lines.lazy())))
