"""The streaming scanner (:func:`fastscan.scan_stream`) reads what the whole-text scanner reads.

A ``.json.gz`` is inflated on the fly (:class:`gz.Stream`) into a bounded sliding window instead
of in full. Every test here uses windows and chunks far smaller than the traces, so the window
slides (and grows for events that do not fit) many times: events cut at every kind of place
(inside a key, a string, a number, between an event and its comma), strings interned in one
window and met again in another, counters in several windows, top-level keys after the events.
Each result is compared, column by column, with :func:`fastscan.scan_document` on the whole text.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from polars.testing import assert_frame_equal

from conftest import shared_trace
from helpers.layouts import PLACEMENTS, layout_bytes
from helpers.scanner import chunk_events
from helpers.shared_traces import kineto_shared_traces
from opscope.errors import CorruptArchiveError
from opscope.ingest import fastscan, gz

pytestmark = pytest.mark.skipif(
    not fastscan.available(), reason="the compiled scanner is switched off (OPSCOPE_SCANNER)"
)


def _streamed(path: Path, window: int) -> tuple[dict[str, Any], fastscan.Scanned] | None:
    with gz.Stream(path) as st:
        return fastscan.scan_stream(st.read, window=window)


def assert_same_scan(path: Path, window: int, chunk: int) -> int:
    """Streamed == whole-text scan of ``path``; returns the number of events."""
    with chunk_events(chunk):
        whole = fastscan.scan_document(gz.read_bytes(path))
        got = _streamed(path, window)
    assert whole is not None, "the whole-text scanner reads this input"
    assert got is not None, "the streaming scanner reads what the whole-text one reads"
    (h1, s1), (h2, s2) = whole, got
    assert h2 == h1
    assert s2.n == s1.n
    c1, (ts1, dur1) = s1.columns()
    c2, (ts2, dur2) = s2.columns()
    assert_frame_equal(c2.frame(), c1.frame())
    assert ts2.to_list() == ts1.to_list()
    assert dur2.to_list() == dur1.to_list()
    assert s2.exact == s1.exact
    assert [msgspec.structs.asdict(c) for c in c2.counters] == [
        msgspec.structs.asdict(c) for c in c1.counters
    ]
    return s1.n


@pytest.mark.parametrize("rel", kineto_shared_traces())
def test_shared_trace_streamed_equals_whole_text(rel: str) -> None:
    path = shared_trace(rel)
    # 64 KiB windows: a 30 MB trace slides ~500 times; 1000-event chunks within each
    assert assert_same_scan(path, 1 << 16, 1000) > 0


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("gzipped", [False, True])
def test_layouts_streamed_in_tiny_windows(
    tmp_path: Path, placement: str, compact: bool, gzipped: bool
) -> None:
    text = layout_bytes(3, steps=3, placement=placement, compact=compact)
    p = tmp_path / ("t.json.gz" if gzipped else "t.json")
    p.write_bytes(gzip.compress(text) if gzipped else text)
    for window in (64, 333, 4096):  # 64: smaller than one event, the window grows
        assert_same_scan(p, window, 7)


def _event(i: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op" if i % 3 else "kernel",
        "name": f"op{i % 11}" + ("\\u00e9" if i % 5 == 0 else ""),
        "pid": 1 + i % 2,
        "tid": f"stream {i % 4}" if i % 7 == 0 else 100 + i % 3,
        "ts": 1000 + 1.5 * i,
        "dur": 2 + i % 4,
        "args": {"External id": i, "Input Dims": [[i, 2]], "correlation": i},
    }


def test_counters_strings_and_keys_across_windows(tmp_path: Path) -> None:
    evs: list[dict[str, Any]] = []
    for i in range(300):
        evs.append(_event(i))
        if i % 40 == 0:
            evs.append({"ph": "C", "name": "mem", "pid": 1, "ts": 1000 + i, "args": {"v": i}})
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "X" * 500}],  # a header value larger than a window
        "traceEvents": evs,
        "traceName": "t",
        "baseTimeNanoseconds": 17,
    }
    p = tmp_path / "t.json"
    # wide whitespace between events: runs of it longer than a window
    p.write_text(json.dumps(doc).replace("}, {", "}" + " " * 700 + ",\n" + " " * 300 + "{"))
    assert assert_same_scan(p, 128, 5) == 308


def test_whitespace_runs_many_windows_long(tmp_path: Path) -> None:
    """Whitespace longer than the window grown 8x, after ``[``, after a comma and before one."""
    pad = " " * 5000
    evs = [json.dumps(_event(i)) for i in range(6)]
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + pad + (pad + "," + pad).join(evs) + pad + "]" + pad + "}")
    assert assert_same_scan(p, 256, 2) == 6
    p.write_text('{"traceEvents": [' + pad + "]}")
    assert assert_same_scan(p, 256, 2) == 0


def test_bare_array_and_empty_array(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps([_event(i) for i in range(50)]))
    assert assert_same_scan(p, 100, 3) == 50
    p.write_text('{"traceEvents": [  ], "x": 1}')
    assert assert_same_scan(p, 64, 3) == 0


def test_steps_aside_as_the_whole_text_scanner_does(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    bad = json.dumps({"traceEvents": [_event(i) for i in range(40)]})
    cut = bad.index('"ph"', len(bad) // 2)
    p.write_text(bad[:cut] + "{" + bad[cut:])  # invalid JSON in the middle
    assert fastscan.scan_document(p.read_bytes()) is None
    assert _streamed(p, 256) is None
    p.write_text(bad[:-5])  # ends early
    assert _streamed(p, 256) is None


def test_an_event_larger_than_the_grown_window_steps_aside(tmp_path: Path) -> None:
    big = _event(1) | {"name": "n" * 5000}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [_event(0), big, _event(2)]}))
    assert _streamed(p, 256) is None  # 5 kB event, window 256 B grows 8x to 2 kB at most
    assert assert_same_scan(p, 1024, 3) == 3  # 8 kB suffices


def test_gzip_stream_reads_members_and_reports_damage(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [_event(i) for i in range(200)]}).encode()
    half = len(text) // 2
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"\x00" * 9)
    with gz.Stream(p) as st:
        got = b"".join(iter(lambda: st.read(1000), b""))
    assert got == text
    assert_same_scan(p, 512, 9)
    whole = gzip.compress(text)
    for damaged, what in (
        (whole[: len(whole) // 2], "ends early"),
        (whole + b"garbage", "trailing garbage"),
    ):
        p.write_bytes(damaged)
        with gz.Stream(p) as st, pytest.raises(CorruptArchiveError, match=what) as e:
            while st.read(1 << 12):
                pass
        assert "t.json.gz" in str(e.value)
    p.write_bytes(text)
    with pytest.raises(CorruptArchiveError, match="not gzip"):
        gz.Stream(p)


def test_gzip_stream_bomb_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b" " * (3 << 20)))
    monkeypatch.setenv("OPSCOPE_MAX_DECOMPRESSED", str(1 << 20))
    with gz.Stream(p) as st, pytest.raises(CorruptArchiveError, match="bomb"):
        while st.read(1 << 16):
            pass
