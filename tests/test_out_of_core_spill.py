"""Out-of-core load, phases 2-3: each window's slices spilled to Parquet (opscope.ingest.spill),
then linked segment by segment into a Profile folder (opscope.ingest.window_link).

A tiny budget forces the out-of-core path, tiny windows make every trace many windows and a
1-event segment target makes every cut a segment; every Profile table and the meta (but the
``out_of_core`` marker) must equal the in-memory load's (the reference), the spill folder must
be gone afterwards, and what the spill carries across windows (non-numeric track ids, oddity
counts, the rank from a header after the events) is checked against hand-computed values.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import SHARED_TRACES
from opscope.ingest import cache, fastscan, kineto, outofcore, spill, window_link
from opscope.model import Profile, schema
from test_scanner_differential import assert_same_profile

#: meta keys only the out-of-core load sets (its marker; the cache key of an entry it wrote)
OOC_META = ("out_of_core", "cache_key")


def assert_same_windowed(got: Profile, ref: Profile) -> None:
    """Every table equal, and the meta but the out-of-core marker, which must be there."""
    assert "out_of_core" in got.meta, "linked window by window"
    meta = {k: v for k, v in got.meta.items() if k not in OOC_META}
    assert_same_profile(Profile(meta=meta, **{n: got.table(n) for n in schema.TABLES}), ref)


pytestmark = pytest.mark.skipif(not fastscan.available(), reason="numba scanner not available")

SHARED = sorted(
    str(p.relative_to(SHARED_TRACES))
    for sub in ("gpu", "compare", "multi_rank")
    for p in (SHARED_TRACES / sub).glob("**/*.json*")
    if SHARED_TRACES.is_dir() and not any(part.startswith(".") for part in p.parts)
)


class Spied:
    """What the spill did during a load: windows handed over, files written, loads that
    stepped aside (None)."""

    def __init__(self) -> None:
        self.windows: list[int] = []  # rows per window
        self.files: list[Path] = []
        self.results: list[bool] = []


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Spied]:
    monkeypatch.delenv(outofcore.ENV, raising=False)
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    s = Spied()
    real_call, real_load = spill.Spill.__call__, spill.load

    def call(self: spill.Spill, first_row: int, window: fastscan.Scanned) -> None:
        s.windows.append(window.n)
        real_call(self, first_row, window)
        self.write.wait()  # (made and written on a worker thread while the next window is read)
        s.files.append(self.files[-1])
        assert self.files[-1].is_file(), "the window's rows are on disk once it is handed over"

    def load(*a: Any, **kw: Any) -> Profile | None:
        got = real_load(*a, **kw)
        s.results.append(got is not None)
        return got

    monkeypatch.setattr(spill.Spill, "__call__", call)
    monkeypatch.setattr(spill, "load", load)
    yield s
    spill_root = tmp_path / "cache" / "spill"
    assert not spill_root.exists(), "spill folder left behind"


SEGMENTS = 12
"""Segments a test load is cut into (at least; the cuts found decide): each costs ~170 Polars
queries whatever its size, so one segment per event (600 on the planted trace, ~460 on a 75k
event trace) made these tests 3 of CI's 15 minutes without meeting more boundaries."""


def _spilled(path: Path, monkeypatch: pytest.MonkeyPatch, window: int, events: int) -> Profile:
    monkeypatch.setattr(fastscan, "WINDOW_BYTES", window)
    monkeypatch.setattr(window_link, "MIN_SEGMENT_ROWS", max(1, events // SEGMENTS))
    return kineto.parse_kineto(path, memory_budget=1)


@pytest.mark.parametrize("rel", SHARED or ["(none)"])
def test_shared_trace_spilled_equals_in_memory(
    rel: str, spied: Spied, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = SHARED_TRACES / rel
    if not path.is_file():
        pytest.skip(f"shared trace not found: {path}")
    ref = kineto.parse_kineto(path)
    big = path.stat().st_size > 1_000_000  # (compressed: 10+ MB of text)
    got = _spilled(path, monkeypatch, 1 << 20 if big else 1 << 18, ref.events.height)
    assert spied.results == [True], "spilled, not the phase-1 fallback"
    assert sum(spied.windows) >= ref.events.height > 0
    if path.stat().st_size > 200_000:  # (compressed: its text is several windows)
        assert len(spied.windows) > 3
    assert all(not f.exists() for f in spied.files), "window files removed after the load"
    assert_same_windowed(got, ref)
    ooc = got.meta["out_of_core"]
    # segments of ~1/12 of the events: cut at found cuts only, and more than one
    assert ooc["segments"] <= ooc["cut_points"] + 1
    assert ooc["segments"] > 1 or ooc["cut_points"] == 0
    assert ooc["entry"] is None  # (no cache asked: a folder in the spill folder, gone now)


def _write(path: Path, doc: dict[str, Any]) -> Path:
    text = json.dumps(doc, indent=1).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def _planted(n: int = 600) -> dict[str, Any]:
    """Host slices on numeric threads, and slices on non-numeric tracks first met in the order
    Zeta (early), Mid, Alpha (late), plus a GPU kernel on a track named "gpu stream" (pid
    "Spans": a device slice's device/stream default to its pid/tid), flows, memory rows, an
    unsupported phase and a slice without dur. The rank comes from a header key after the
    events."""
    evs: list[dict[str, Any]] = []
    for i in range(n):
        evs.append(
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 5}", "pid": 7, "tid": 1 + i % 2}
            | {"ts": 100 * i, "dur": 40, "args": {"External id": i, "Sequence number": i}}
        )
    for i, name in ((5, "Zeta"), (n // 2, "Mid"), (n - 5, "Alpha")):
        evs.insert(
            i,
            {"ph": "X", "cat": "user_annotation", "name": f"on {name}"}
            | {"pid": name, "tid": name, "ts": 100 * i + 1, "dur": 2},
        )
    evs.append(
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "Spans", "tid": "gpu stream"}
        | {"ts": 100 * n // 2 + 3, "dur": 5, "args": {"correlation": 9}}
    )
    evs.append({"ph": "X", "cat": "cpu_op", "name": "nodur", "pid": 7, "tid": 1, "ts": 55})
    evs.append({"ph": "Q", "name": "odd", "pid": 7, "tid": 1, "ts": 5})
    evs.append(
        {"ph": "i", "name": "[memory]", "pid": 7, "tid": 2, "ts": 150, "s": "t"}
        | {"args": {"Bytes": 64, "Addr": 1, "Total Allocated": 64, "Total Reserved": 128}}
    )
    evs.append({"ph": "s", "id": 3, "cat": "ac2g", "pid": 7, "tid": 1, "ts": 210, "name": "f"})
    evs.append(
        {"ph": "f", "id": 3, "cat": "ac2g", "pid": 7, "tid": 2, "ts": 305, "name": "f", "bp": "e"}
    )
    return {"traceEvents": evs, "distributedInfo": {"rank": 3}}


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_planted_tracks_rank_and_oddities_carried_across_windows(
    name: str, tmp_path: Path, spied: Spied, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / name, _planted())
    ref = kineto.parse_kineto(path)
    got = _spilled(path, monkeypatch, 4096, ref.events.height)
    assert spied.results == [True]
    assert len(spied.windows) > 10
    assert_same_windowed(got, ref)
    # by hand: -1 - dense rank among the trace's non-numeric pids (Alpha, Mid, Spans, Zeta) and
    # tids (Alpha, Mid, Zeta, gpu stream), whichever window met them first
    ev = got.events
    tracks = dict(
        ev.filter(pl.col("name").str.starts_with("on ")).select("name", "pid").iter_rows()
    )
    assert tracks == {"on Zeta": -5, "on Mid": -3, "on Alpha": -2}
    k = ev.filter(pl.col("name") == "k").select("pid", "tid", "device", "stream").row(0)
    assert k == (-4, -5, -4, -5)
    assert set(ev.get_column("rank").to_list()) == {3}
    odd = got.meta["oddities"]
    assert odd["unsupported phase"] == 1
    assert odd["slice without dur (0 used)"] == 1
    # the flow pair was carried (it binds to no launch/kernel pair, so it is counted as such)
    assert odd["flow not bound to events"] == 1
    assert got.memory.height == 1


def test_empty_events_fall_back(tmp_path: Path, spied: Spied) -> None:
    path = _write(tmp_path / "e.json", {"traceEvents": [], "x": 1})
    ref = kineto.parse_kineto(path)
    got = kineto.parse_kineto(path, memory_budget=1)
    assert spied.results == [False], "no window: nothing spilled, the phase-1 path loads it"
    assert_same_profile(got, ref)


def test_under_the_budget_nothing_is_spilled(tmp_path: Path, spied: Spied) -> None:
    path = _write(tmp_path / "t.json", _planted(50))
    kineto.parse_kineto(path)
    assert spied.results == [] and spied.windows == []


def test_spill_folders_of_dead_loads_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "spill"
    root.mkdir()
    dead = 1
    while True:  # a pid no process has (pid 1 always runs: start above it)
        dead += 7919
        try:
            os.kill(dead, 0)
        except ProcessLookupError:
            break
        except OSError:
            continue
    stale = root / f"{dead}-t.json-abcd"
    live = root / f"{os.getpid()}-t.json-efgh"
    other = root / "notes"
    for d in (stale, live, other):
        d.mkdir()
        (d / "events-00000.parquet").write_bytes(b"x")
    assert cache.remove_dead_spills(root) == [stale]
    assert not stale.exists() and live.exists() and other.exists()


def test_scanner_holds_no_rows_after_a_window(
    tmp_path: Path, spied: Spied, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory bounded by construction: once a window is handed over, the scan's fields hold no
    pieces (only the ts/dur number texts, none here), so the next window starts from nothing."""
    path = _write(tmp_path / "t.json", _planted(400))
    held: list[int] = []
    real = fastscan._window_rows

    def spy(fields: dict[str, Any], *a: Any) -> fastscan.Scanned:
        out = real(fields, *a)
        held.append(sum(len(f.nums) + len(f.ns) + len(f.codes) for f in fields.values()))
        return out

    monkeypatch.setattr(fastscan, "_window_rows", spy)
    got = _spilled(path, monkeypatch, 4096, 400)
    assert len(held) == len(spied.windows) > 10
    assert held == [0] * len(held)
    # every event handed over once: 400 ops, 3 named-track slices, kernel, no-dur op, the "Q"
    # event, the memory instant, the two flow records
    assert sum(spied.windows) == 400 + 3 + 6
    assert got.events.height == 400 + 3 + 1 + 1  # slices: ops, tracks, kernel, no-dur op
