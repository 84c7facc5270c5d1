"""The doctor's kernels per (rank, step), counted in NumPy from the codes of the distinct ranks
and steps, equal a count in plain Python over the rows: on real traces and on planted kernels
with null ranks and steps, negative and far-apart values, one rank or several."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.doctor import checks
from opscope.ingest import load


def _reference(kernels: pl.DataFrame) -> dict[Any, dict[Any, int]]:
    """Counted row by row: the kernels with a step, per rank (None for a null rank) and step."""
    n = Counter(
        (r, s)
        for r, s in zip(*(kernels.get_column(c).to_list() for c in ("rank", "step")), strict=True)
        if s is not None
    )
    out: dict[Any, dict[Any, int]] = {}
    for (r, s), c in n.items():
        out.setdefault(r, {})[s] = c
    return out


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/hta_triton_a100.json.gz",
        "ascend/small_two_rank/test_rank_0",
    ],
)
def test_real_traces(rel: str) -> None:
    k = load(shared_trace(rel), cache=False).kernels
    assert checks._kernels_per_step(k) == _reference(k)


PLANTED = [
    {"rank": [0, 0, 1, None, None, 1, 0], "step": [3, 3, 3, 3, None, 2**40, None]},
    {"rank": [-5, 7, -5, 2**31 - 1], "step": [-1, -1, -1, 0]},
    {"rank": [None, None], "step": [1, 2]},
    {"rank": [4, 4], "step": [None, None]},
    {"rank": [], "step": []},
]


@pytest.mark.parametrize("case", PLANTED)
def test_planted(case: dict[str, list[Any]]) -> None:
    k = pl.DataFrame(case, schema={"rank": pl.Int32, "step": pl.Int64})
    got = checks._kernels_per_step(k)
    assert got == _reference(k)
    # the keys' types as the rows' (Python ints, None), not NumPy's
    assert all(type(r) in (int, type(None)) for r in got)
    assert all(type(s) is int and type(n) is int for d in got.values() for s, n in d.items())
