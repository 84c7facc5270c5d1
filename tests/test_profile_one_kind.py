"""``Profile.ops`` / ``Profile.kernels`` of a profile whose every event is of one kind (a partial
Ascend rank's collectives alone, a CPU-only trace's ops) are read from the kind column's least
and greatest value, without the filter's query: none of the events (``clear``) or all of them
(the frame itself, only where every column is one chunk, as a filter of all rows leaves it).
The same frames as the filters (``tree.SHORTCUTS`` off), chunks and sorted flags included."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from opscope.analysis import tree
from opscope.model import Profile, schema


def _layout(df: pl.DataFrame) -> list[tuple[int, dict[str, bool]]]:
    return [(s.n_chunks(), s.flags) for s in df.iter_columns()]


def _both(events: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    """ops and kernels of ``events`` with the shortcuts on equal the filters' (off)."""
    got = {}
    for on in (True, False):
        monkeypatch.setattr(tree, "SHORTCUTS", on)
        p = Profile.from_tables(events=events)
        got[on] = (p.ops, p.kernels)
    for fast, full in zip(got[True], got[False], strict=True):
        assert_frame_equal(fast, full)
        assert _layout(fast) == _layout(full)


def _events(kinds: list[str | None]) -> pl.DataFrame:
    n = len(kinds)
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "rank": [0] * n,
            "kind": pl.Series(kinds, dtype=schema.EventKind),
            "name": [f"e{i}" for i in range(n)],
            "ts_ns": [10 * i for i in range(n)],
            "dur_ns": [5] * n,
        }
    )


@pytest.mark.parametrize(
    "kinds",
    [
        ["communication"] * 7,
        ["kernel"] * 3,
        ["cpu_op"] * 4,
        ["user_annotation"] * 2,
        ["communication", "kernel", "cpu_op"],
        ["communication", None],
        [None, None],
        [],
    ],
)
def test_same_frames_as_the_filters(
    kinds: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    _both(_events(kinds), monkeypatch)


def test_chunked_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # several chunks (a filter keeps them or rechunks): the filters themselves, never the frame
    ev = _events(["communication"] * 5)
    aligned = pl.concat([ev, ev], rechunk=False)
    assert max(aligned.n_chunks("all")) > 1
    _both(aligned, monkeypatch)
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    p = Profile(events=aligned)  # (not conformed: the chunks as they are)
    assert p._of_one_kind(schema.DEVICE_WORK) is None
    assert p._of_one_kind(("cpu_op",)) is not None  # (none of them: an empty frame)


@pytest.mark.parametrize("rank", ["rank_1_ascend_pt", "rank_3_ascend_pt", "rank_0_ascend_pt"])
def test_real_ranks(rank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path("/work/ascend_data/st/level2") / rank
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    events = opscope.load(path, cache=False).events
    _both(events, monkeypatch)
    if rank != "rank_0_ascend_pt":  # (a partial rank: its collectives alone, the shortcut's case)
        monkeypatch.setattr(tree, "SHORTCUTS", True)
        p = Profile(events=events)
        assert p.kernels is events
        assert p.ops.height == 0
