"""A segment's rows in id order (opscope.ingest.window_link._in_time_order): its window files'
row ranges, each sorted by ``ts_ns``, concatenated in window order, then ordered stably by
``ts_ns`` by gathering only the blocks of rows that move. Checked against hand-made orders and
against Polars' stable sort of the whole frame."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from opscope.ingest import window_link


def _frame(ts: list[int]) -> pl.DataFrame:
    return pl.DataFrame(
        {"ts_ns": ts, "row": list(range(len(ts))), "name": [f"e{i}" for i in range(len(ts))]},
        schema={"ts_ns": pl.Int64, "row": pl.Int64, "name": pl.String},
    )


def test_two_ranges_interleaved_by_hand() -> None:
    # window 0's range: 10 20 30 40 | window 1's range: 25 30 50. Stable order: rows 0 1 4 2 5
    # 3 6 (the 30 of window 0 before the 30 of window 1: window order breaks ties).
    got = window_link._in_time_order(_frame([10, 20, 30, 40, 25, 30, 50]))
    assert got.get_column("row").to_list() == [0, 1, 4, 2, 5, 3, 6]
    assert got.get_column("name").to_list() == ["e0", "e1", "e4", "e2", "e5", "e3", "e6"]


def test_sorted_ranges_returned_unchanged() -> None:
    df = _frame([1, 2, 2, 3, 7, 9])
    assert window_link._in_time_order(df) is df


def test_two_separate_blocks_and_rows_between_kept() -> None:
    # ranges 1 5 | 3 8 9 | 8 12: blocks of moved rows at positions 1-2 (5, 3) and 4-5 (9, 8);
    # rows 0, 3 and 6 stay where they are.
    got = window_link._in_time_order(_frame([1, 5, 3, 8, 9, 8, 12]))
    assert got.get_column("row").to_list() == [0, 2, 1, 3, 5, 4, 6]


@pytest.mark.parametrize("max_blocks", [64, 0])
def test_random_ranges_equal_a_stable_sort(
    max_blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(window_link, "MAX_MERGE_BLOCKS", max_blocks)  # 0: one gather of all
    rng = np.random.default_rng(7)
    for _ in range(200):
        parts = []
        for _ in range(int(rng.integers(1, 6))):
            lo = int(rng.integers(0, 100))
            n = int(rng.integers(0, 40))
            parts.append(np.sort(rng.integers(lo, lo + int(rng.integers(1, 60)), n)))
        df = _frame(np.concatenate(parts).tolist())
        want = df.sort("ts_ns", maintain_order=True)
        assert window_link._in_time_order(df).equals(want)
