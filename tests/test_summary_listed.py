"""The loader summary's counts of a small events table (from the columns' Python lists) are the
Series operations' counts, on real profiles and on planted tables with nulls everywhere."""

from __future__ import annotations

import os
import random
from pathlib import Path

import polars as pl
import pytest

import opscope
from conftest import shared_trace
from opscope.ingest import summary as S
from opscope.model.schema import EVENT_KINDS, EVENTS

ASCEND = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data")) / "st" / "level2"


def _events(rows: list[dict[str, object]]) -> pl.DataFrame:
    cols = ("kind", "ts_ns", "dur_ns", "fwd_id", "op_id")
    data = {c: [r.get(c) for r in rows] for c in cols}
    return pl.DataFrame(data, schema={c: EVENTS[c] for c in cols})  # type: ignore[misc]


def _random_rows(rng: random.Random, n: int) -> list[dict[str, object]]:
    def maybe(v: object) -> object:
        return None if rng.random() < 0.2 else v

    return [
        {
            "kind": maybe(rng.choice(EVENT_KINDS)),
            "ts_ns": maybe(rng.randrange(0, 10**12)),
            "dur_ns": maybe(rng.randrange(0, 10**6)),
            "fwd_id": maybe(rng.randrange(0, 4)),
            "op_id": maybe(rng.randrange(0, 50)),
        }
        for _ in range(n)
    ]


def test_listed_counts_are_the_series_counts_on_planted_tables() -> None:
    rng = random.Random(3)
    for n in [0, 1, 2, 5, 15, 60, 256]:
        for _ in range(20):
            ev = _events(_random_rows(rng, n))
            assert S._counts_listed(ev) == S._counts(ev), n
    # every side of the span unknown, and every id null
    ev = _events([{"kind": "kernel", "ts_ns": None, "dur_ns": 5}, {"kind": None, "ts_ns": 7}])
    assert S._counts_listed(ev) == S._counts(ev)
    assert S._counts_listed(ev).span_ns is None


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_listed_counts_are_the_series_counts_on_ascend_ranks(rank: int) -> None:
    path = ASCEND / f"rank_{rank}_ascend_pt"
    if not path.exists():
        pytest.skip(f"not found: {path}")
    ev = opscope.load(path, cache=False).events
    assert S._counts_listed(ev) == S._counts(ev)


@pytest.mark.parametrize(
    "rel",
    ["gpu/hta_amd_mi250_minitoy.json.gz", "ascend/small_two_rank", "gpu/hta_triton_a100.json.gz"],
)
def test_listed_counts_are_the_series_counts_on_shared_traces(rel: str) -> None:
    ev = opscope.load(shared_trace(rel), cache=False).events
    assert ev.height
    assert S._counts_listed(ev) == S._counts(ev)
