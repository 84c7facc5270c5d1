"""``advise._common.locate`` gathers the places by row position when the events' ids are their
positions (every loaded trace), without the join on the id (a spy counts DataFrame.join), and
gives what the join gives (``tree.SHORTCUTS`` off): every id, duplicates once, ids past the
table unplaced, the same order."""

from __future__ import annotations

import polars as pl
import pytest

from helpers import synth
from opscope.advise import _common as c
from opscope.analysis import tree


def test_locate_by_position_equals_the_join(monkeypatch: pytest.MonkeyPatch) -> None:
    p = synth.training(steps=2, layers=3).profile  # ops with user stacks: lines to find
    assert c._dense_ids(p.events)
    n = p.events.height
    placed_ids = [int(i) for i in p.ops.get_column("id").to_list()]
    ids = [n + 5, *placed_ids[::-1], 0, placed_ids[0], n - 1, n, -1, 3, 3]
    c.locate(p, [0])  # the places table built before the spy
    joins: list[int] = []
    real = pl.DataFrame.join

    def spy(self: pl.DataFrame, *a: object, **k: object) -> pl.DataFrame:
        joins.append(self.height)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.DataFrame, "join", spy)
    fast = c.locate(p, ids)
    assert joins == []  # the shortcut was taken
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = c.locate(p, ids)
    assert joins  # the full path joins
    assert list(fast.items()) == list(full.items())
    nowhere = c.Location(None, None, None, None)
    assert any(loc.file is not None for loc in fast.values())  # some op has a user line
    assert fast[n + 5] == fast[-1] == fast[n] == nowhere
    assert c.locate(p, []) == {}


def test_dense_ids_only_when_each_id_is_its_position() -> None:
    def ids(*v: int | None) -> pl.DataFrame:
        return pl.DataFrame({"id": list(v)}, schema={"id": pl.Int64})

    assert c._dense_ids(ids(0, 1, 2)) and c._dense_ids(ids())
    assert not c._dense_ids(ids(0, 2, 1))  # a permutation: positions differ
    assert not c._dense_ids(ids(1, 2, 3))
    assert not c._dense_ids(ids(0, None, 2))


@pytest.mark.parametrize(
    "rel",
    [
        None,  # a recorded-like profile whose ops carry user stacks
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/small_two_rank/test_rank_1",
    ],
)
def test_a_few_ids_are_placed_as_many_are(rel: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """locate of a few ids (each value read by position) places each id as locate of many
    does (each column gathered): every op and event, one by one and in tens; and
    _gather_lists' two ways give the same lists, None at the -1 positions."""
    import opscope
    from conftest import shared_trace
    from opscope.analysis.attribution import resolve_ops

    if rel is None:
        p = synth.training(steps=2, layers=3).profile
    else:
        p = opscope.load(shared_trace(rel), cache=False)
    ids = [int(i) for i in p.events.get_column("id").to_list()]
    with monkeypatch.context() as m:  # every column gathered, whatever the number of ids
        m.setattr(c, "_SCALAR_GATHER_MAX", 0)
        many = c.locate(p, [*ids, p.events.height + 3])
    if rel is None:
        assert any(loc.file is not None for loc in many.values())
    for i in ids[:: max(1, len(ids) // 200)]:
        assert c.locate(p, [i]) == {i: many[i]}
    for k in range(0, len(ids), 10):
        chunk = ids[k : k + 10]
        assert c.locate(p, chunk) == {i: many[i] for i in chunk}
    table = resolve_ops(p)
    if not table.height:  # (no op: nothing to gather)
        table = p.events
    cols = [n for n in ("file", "line", "function", "module", "name") if n in table.columns]
    at = [0, -1, table.height - 1, min(3, table.height - 1), -1, 0]
    few = c._gather_lists(table, at, cols)
    monkeypatch.setattr(c, "_SCALAR_GATHER_MAX", 0)
    assert c._gather_lists(table, at, cols) == few
    assert all(col[1] is None and col[4] is None for col in few)
