"""metrics.jsonl writer: lines buffered, written whole, never lost at a normal stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opscope.record import metrics
from opscope.record.metrics import MetricsWriter


def _lines(p: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in p.read_text().splitlines()]


def test_lines_wait_for_flush_then_come_whole_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: clock[0])
    p = tmp_path / "metrics.jsonl"
    w = MetricsWriter(p, rank=3)
    for i in range(5):
        w.write(i, 1000 + i, 8, (None, None), profiled=i == 2)
    assert p.read_text() == ""  # within the second: still buffered
    clock[0] += metrics.FLUSH_SECONDS
    w.write(5, 1005, 8, (7, 9), profiled=False)  # a second later: all six go out at once
    got = _lines(p)
    assert [x["step"] for x in got] == list(range(6))
    assert [x["profiled"] for x in got] == [False, False, True, False, False, False]
    assert got[5]["mem_allocated_peak"] == 7 and got[5]["rank"] == 3
    assert got[0]["samples_per_s"] == pytest.approx(8 / 1000e-9)
    w.write(6, 1, 0, (None, None), profiled=False)
    assert len(_lines(p)) == 6
    w.close()  # stop: nothing left behind
    assert [x["step"] for x in _lines(p)] == list(range(7))
    assert _lines(p)[6]["samples_per_s"] is None


def test_two_writers_share_the_file_by_whole_lines(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    a, b = MetricsWriter(p, rank=0), MetricsWriter(p, rank=1)
    for i in range(3):
        a.write(i, 10, 0, (None, None), profiled=False)
        b.write(i, 20, 0, (None, None), profiled=False)
    a.flush()
    b.close()
    a.close()
    got = _lines(p)
    assert [(x["rank"], x["step"]) for x in got] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
