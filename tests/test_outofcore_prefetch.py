"""The next segment's rows read on a worker thread while one is linked
(opscope.ingest.window_link._Prefetch): every segment is handed over once, in order, equal to
a direct read; at most one read runs ahead; close() stops the worker with a read under way."""

from __future__ import annotations

import threading

import polars as pl
import pytest

from opscope.ingest import spill, window_link


def _reader(log: list[int]) -> window_link._Prefetch:
    def read(k: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        log.append(k)
        return pl.DataFrame({"k": [k] * (k + 1)}), pl.DataFrame({"f": [k]})

    return window_link._Prefetch(read, 5)


@pytest.mark.parametrize("prefetch", [True, False])
def test_segments_in_order_equal_direct_reads(
    prefetch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(window_link, "PREFETCH", prefetch)
    log: list[int] = []
    r = _reader(log)
    for k in range(5):
        ev, fl = r.get(k)
        assert ev.get_column("k").to_list() == [k] * (k + 1)
        assert fl.get_column("f").to_list() == [k]
        # read ahead: segment k + 1 asked for before k is used, never two ahead
        assert max(log) <= k + 1
    r.close()
    assert log == [0, 1, 2, 3, 4]  # each read once
    assert (r.pool is not None) == prefetch


def test_close_with_a_read_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window_link, "PREFETCH", True)
    started, release = threading.Event(), threading.Event()
    log: list[int] = []

    def read(k: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        log.append(k)
        if k == 1:
            started.set()
            release.wait(5)
        return pl.DataFrame({"k": [k]}), pl.DataFrame({"f": [k]})

    r = window_link._Prefetch(read, 3)
    r.get(0)
    assert started.wait(5), "segment 1 read ahead"
    release.set()
    r.close()  # waits for the read under way, starts no other
    assert log == [0, 1]


def test_threads_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window_link, "PREFETCH", True)
    monkeypatch.setenv(window_link.THREADS_ENV, "0")
    assert window_link._Prefetch(lambda k: (pl.DataFrame(), pl.DataFrame()), 3).pool is None
    assert spill._Writer().pool is None
    monkeypatch.setenv(window_link.THREADS_ENV, "1")
    r = window_link._Prefetch(lambda k: (pl.DataFrame(), pl.DataFrame()), 3)
    w = spill._Writer()
    assert r.pool is not None and w.pool is not None
    r.close()
    w.close()
