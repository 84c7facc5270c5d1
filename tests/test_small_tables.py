"""Tables built as rows or Python lists for the few rows of small traces equal those of the
other ways: the msprof table of up to and past ``cluster_ascend._ROWS_MAX`` ranks (rows, then
Series) and the join it replaces; ``small_frames.series`` below and past its list limit; the
breakdown of device work of one kind (its classes read off the kind, not compared row by row)
with the shortcuts on and off."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from opscope.analysis import breakdown, cluster_ascend, small_frames, tree
from opscope.analysis.registry import Options
from opscope.model import Profile


@pytest.mark.parametrize("n", [0, 1, 3, cluster_ascend._ROWS_MAX, cluster_ascend._ROWS_MAX + 1, 90])
def test_msprof_without_hccl_equals_the_join(n: int) -> None:
    rng = np.random.default_rng(n)
    ranks = pl.DataFrame(
        {
            "rank": [None if i == 2 else i for i in range(n)],
            "steps": rng.integers(1, 4, n),
            **{
                c: rng.integers(0, 10**10, n)
                for c in ("step_time_ns", "compute_ns", "comm_ns", "comm_not_overlapped_ns")
            },
            "idle_ns": [None if i == 1 else int(x) for i, x in enumerate(rng.integers(0, 99, n))],
            "wait_ns": rng.integers(0, 10**7, n),
        },
        schema_overrides={"rank": pl.Int32, "steps": pl.UInt32, "idle_ns": pl.Int64},
    ).sort("rank")  # (the rank rows as the aggregate gives them: by rank, a null first)
    want = cluster_ascend.msprof_ranks(ranks, pl.DataFrame(schema=cluster_ascend.HCCL_COLUMNS))
    assert_frame_equal(cluster_ascend.msprof_without_hccl(ranks), want, check_exact=True)


@pytest.mark.parametrize("n", [0, 5, small_frames.LIST_MAX, small_frames.LIST_MAX + 1, 200])
@pytest.mark.parametrize("dtype", [pl.Int32, pl.Int64, pl.UInt32, pl.Float64])
def test_series_from_lists_and_arrays_are_equal(n: int, dtype: Any) -> None:
    rng = np.random.default_rng(n)
    values = rng.integers(-(10**6), 10**6, n)
    if dtype == pl.UInt32:
        values = np.abs(values).astype(np.uint32)
    if dtype == pl.Float64:
        values = values / 7.0
        values[::5] = np.nan
    valid = rng.random(n) < 0.7
    for ok in (None, valid, np.zeros(n, dtype=bool), np.ones(n, dtype=bool)):
        got = small_frames.series("x", values, dtype, ok)
        want = pl.Series("x", values, dtype)
        if ok is not None:
            want = want.scatter(np.flatnonzero(~ok), None) if (~ok).any() else want
        assert_frame_equal(pl.DataFrame([got]), pl.DataFrame([want]), check_exact=True)
    rep = small_frames.repeated("y", "device", pl.String, n)
    assert rep.to_list() == ["device"] * n and rep.dtype == pl.String


def _device_work(kind: str | list[str]) -> pl.DataFrame:
    rng = np.random.default_rng(len(kind))
    n = 30
    return pl.DataFrame(
        {
            "id": np.arange(n),
            "rank": np.zeros(n, dtype=np.int32),
            "kind": [kind] * n if isinstance(kind, str) else list(rng.choice(kind, n)),
            "name": ["x"] * n,
            "ts_ns": rng.integers(0, 1000, n),
            "dur_ns": rng.integers(1, 50, n),
            "device": np.zeros(n, dtype=np.int32),
            "stream": rng.integers(1, 3, n),
            "step": rng.integers(1, 3, n).astype(np.int32),
        }
    )


@pytest.mark.parametrize(
    "kind",
    ["kernel", "communication", "memcpy", "memset", ["kernel", "communication", "memcpy"]],
)
def test_breakdown_of_one_kind_equals_the_comparisons(
    kind: str | list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ev = _device_work(kind)
    steps = pl.DataFrame(
        {"rank": [0, 0], "step": [1, 2], "ts_ns": [0, 500], "dur_ns": [500, 600]},
        schema_overrides={"rank": pl.Int32, "step": pl.Int32},
    )
    got = {}
    for on in (True, False):
        monkeypatch.setattr(tree, "SHORTCUTS", on)
        b = breakdown.breakdown(Profile.from_tables(events=ev, steps=steps), Options())
        got[on] = b
    for t in ("steps", "streams", "queue", "stats"):
        assert_frame_equal(getattr(got[True], t), getattr(got[False], t), check_exact=True)
    assert got[True].steps.height == 2
