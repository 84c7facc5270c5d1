"""Hotspots' shares are 100 · total_ns / base, the integer product divided once: on real traces
every row of every table equals Python's quotient of the same integers bit for bit, whatever
the table's height (Polars' ``100.0 * col / base`` was the product by the reciprocal for two
rows or more and the exact quotient for one)."""

from __future__ import annotations

import polars as pl
import pytest

import opscope
from conftest import shared_trace
from opscope.analysis.hotspots import with_shares
from opscope.analysis.registry import Options, run

TRACES = (
    "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    "gpu/hta_amd_mi250_minitoy.json.gz",
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
)


def _want(total: int | None, whole: int) -> float | None:
    return None if total is None or not whole else 100 * total / whole


@pytest.mark.parametrize("rel", TRACES)
def test_every_share_is_pythons_quotient(rel: str) -> None:
    h = run("hotspots", opscope.load(shared_trace(rel), cache=False), Options())
    base = h.step_ns or h.span_ns
    assert base > 0
    seen = 0
    for name in ("ops", "op_shapes", "kernels", "kernel_types", "modules", "sources"):
        t: pl.DataFrame = getattr(h, name)
        totals = t.get_column("total_ns").to_list()
        assert t.get_column("pct").to_list() == [_want(x, base) for x in totals], name
        if "pct_span" in t.columns:
            want = [_want(x, h.span_ns) for x in totals]
            assert t.get_column("pct_span").to_list() == want, name
        seen += t.height
    assert seen > 20


def test_one_row_and_many_rows_agree() -> None:
    totals = [7, 9, 1_234_567, 2**40 + 3]
    many = with_shares(pl.DataFrame({"total_ns": totals}), 3_000_001, 7_777_777)
    for i, t in enumerate(totals):
        one = with_shares(pl.DataFrame({"total_ns": [t]}), 3_000_001, 7_777_777)
        assert one.row(0) == many.row(i) == (t, 100 * t / 3_000_001, 100 * t / 7_777_777)
    none = with_shares(pl.DataFrame({"total_ns": totals}), 0)
    assert none.get_column("pct").to_list() == [None] * 4 and "pct_span" not in none.columns


@pytest.mark.parametrize(
    "total",
    [
        pl.Series("total_ns", [5, None, 2**50 + 1, 0], dtype=pl.Int64),
        pl.Series("total_ns", [3, 2**31 - 1], dtype=pl.Int32),
        pl.Series("total_ns", [3, 2**40], dtype=pl.UInt64),
        pl.Series("total_ns", [1.5, 7.0], dtype=pl.Float64),
        pl.Series("total_ns", [], dtype=pl.Int64),
    ],
)
@pytest.mark.parametrize("span", [None, 0, 999_983])
def test_shares_equal_the_series_arithmetic(total: pl.Series, span: int | None) -> None:
    """The shares made in NumPy are the Series arithmetic's (the cast, product and quotient),
    in its columns' places: an existing ``pct`` replaced where it stands, new ones appended."""
    from opscope.analysis.hotspots import _with_shares_series

    df = pl.DataFrame([pl.Series("name", ["x"] * len(total)), total]).with_columns(
        pl.lit(None, pl.Float64).alias("pct"), pl.lit(1, pl.Int8).alias("after")
    )
    for base in (0, 7, 3_000_001):
        got, want = with_shares(df, base, span), _with_shares_series(df, base, span)
        assert got.schema == want.schema and got.equals(want, null_equal=True)
