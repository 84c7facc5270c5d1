"""Breakdown's shortcuts over arrays (``tree.SHORTCUTS``) against its full arrays path: a rank
whose device work is on one stream takes each window's device-wide split from the streams
split (no second split); a class whose figure every window takes from Ascend's step row
(step_trace_time.csv) is not unioned, and the device-wide split, null on every step under
those figures, is one union of the device work. On the communication-only Ascend ranks, on
planted profiles (one stream and several, figures on every step, on some, none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import opscope
from opscope.analysis import _breakdown_arrays as arrays
from opscope.analysis import breakdown as bd
from opscope.analysis import tree
from opscope.analysis.hotspots import projected
from opscope.model import Profile
from test_breakdown_arrays import _two_ranks

_FIG = {
    "computing_ns": 123_000,
    "communication_ns": 45_000,
    "communication_not_overlapped_ns": 6_000,
    "free_ns": 700_000,
}
_DEVICE_KINDS = ("kernel", "communication", "memcpy", "memset")


def _calls(profile: Profile, on: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """The arrays path's breakdown with the shortcuts ``on`` or off, and its splits' and
    unions' calls."""
    inp = bd._inputs(projected(profile, bd.BREAKDOWN_READ))
    calls: list[str] = []
    split, union = arrays.idle_split, arrays.union_per_lane

    def spy_split(*a: Any) -> Any:
        calls.append("split")
        return split(*a)

    def spy_union(*a: Any) -> Any:
        calls.append("union")
        return union(*a)

    with monkeypatch.context() as m:
        m.setattr(arrays, "idle_split", spy_split)
        m.setattr(arrays, "union_per_lane", spy_union)
        m.setattr(tree, "SHORTCUTS", on)
        got = bd._breakdown_arrays(inp, per_trace=True)
    assert got is not None
    return got, calls


def _same_both_ways(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    fast, calls = _calls(profile, True, monkeypatch)
    full, full_calls = _calls(profile, False, monkeypatch)
    assert full_calls == ["split", "union", "split"]  # (the full path: every figure)
    for table in ("steps", "streams", "stats", "queue"):
        assert_frame_equal(getattr(fast, table), getattr(full, table), check_exact=True)
    return calls


def _one_stream(figures: list[dict[str, Any]] | None = None) -> Profile:
    b = _two_ranks(figures=figures)
    for e in b.events:
        if e["kind"] in _DEVICE_KINDS:
            e["stream"] = 7
    return b.build()


@pytest.mark.parametrize("rel", ["st/level2/rank_1_ascend_pt", "st/level2/rank_3_ascend_pt"])
def test_communication_only_ranks_compute_one_split_and_no_union(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = Path("/work/ascend_data") / rel
    if not p.exists():
        pytest.skip(f"ascend_data export not found: {p}")
    # (the one split: its work has no launch, so it is the union of each stream's work)
    assert _same_both_ways(opscope.load(p, cache=False), monkeypatch) == ["split", "union"]


def test_one_stream_a_rank_takes_the_streams_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launch links, an empty step, work outside the steps, host ops and data loading: the
    device-wide split (not null here) is the one stream's."""
    fast, _ = _calls(_one_stream(), True, monkeypatch)
    assert fast.steps.get_column("idle_host_wait_ns").sum() > 0
    assert fast.steps.get_column("idle_other_ns").null_count() == 0
    assert _same_both_ways(_one_stream(), monkeypatch) == ["split", "union"]


@pytest.mark.parametrize("n", [6, 2, 0], ids=["every_step", "some_steps", "none"])
def test_several_streams_under_step_figures(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures on every step: the owned classes not unioned and the device-wide split one
    union (its busy time); on some or none: the full split."""
    p = _two_ranks(figures=[dict(_FIG) for _ in range(n)]).build()
    want = ["split", "union"] if n == 6 else ["split", "union", "split"]
    assert _same_both_ways(p, monkeypatch) == want


@pytest.mark.parametrize("n", [6, 2], ids=["every_step", "some_steps"])
def test_one_stream_under_step_figures(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _same_both_ways(_one_stream([dict(_FIG) for _ in range(n)]), monkeypatch) == [
        "split",
        "union",
    ]


def test_a_step_figure_missing_on_one_window_is_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """computing_ns null on one step row: that window's compute is the union (computed)."""
    figs = [dict(_FIG) for _ in range(6)]
    figs[3]["computing_ns"] = None
    p = _two_ranks(figures=figs).build()
    _same_both_ways(p, monkeypatch)
    fast, _ = _calls(p, True, monkeypatch)
    assert fast.steps.get_column("compute_ns").to_list().count(123_000) == 5
