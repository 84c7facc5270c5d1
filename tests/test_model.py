"""The Profile model: schema conformance, save/open round trip, rank concat."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from opscope.model import Profile, concat, schema


def _events(n: int, rank: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "rank": [rank] * n,
            "kind": ["cpu_op"] * n,
            "name": [f"op{i}" for i in range(n)],
            "ts_ns": [i * 1000 for i in range(n)],
            "dur_ns": [500] * n,
            "parent_id": [None, *range(n - 1)],
        }
    )


def test_conform_adds_missing_columns_and_orders_them() -> None:
    df = schema.conform("events", _events(3, 0))
    assert df.columns == list(schema.EVENTS)
    assert df.schema["kind"] == schema.EventKind
    assert df.get_column("stack_id").null_count() == 3


def test_conform_rejects_undeclared_columns() -> None:
    with pytest.raises(ValueError, match="undeclared"):
        schema.conform("events", _events(2, 0).with_columns(pl.lit(1).alias("bogus")))


def test_save_open_round_trip(tmp_path: Path) -> None:
    p = Profile.from_tables(meta={"format": "kineto", "ranks": [0]}, events=_events(4, 0))
    p.save(tmp_path / "cache")
    q = Profile.open(tmp_path / "cache")
    assert q.meta["format"] == "kineto"
    assert q.events.equals(p.events)
    # saving again replaces atomically, leaving no temporary directories behind
    p.save(tmp_path / "cache")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["cache"]


def test_concat_renumbers_ids() -> None:
    a = Profile.from_tables(meta={"ranks": [0]}, events=_events(3, 0))
    b = Profile.from_tables(meta={"ranks": [1]}, events=_events(2, 1))
    c = concat([a, b])
    assert c.events.get_column("id").to_list() == [0, 1, 2, 3, 4]
    assert c.events.get_column("parent_id").to_list() == [None, 0, 1, None, 3]
    assert c.ranks == [0, 1]
