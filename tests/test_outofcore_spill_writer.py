"""The spill's per-window jobs on a worker thread (opscope.ingest.spill._Writer): every job handed
over has ended after wait() (its files on disk), in the order handed over, a failed job raises its
error at wait() (never lost), wait(keep=n) leaves the last n running, and the synchronous mode
runs each at once."""

from __future__ import annotations

import threading
from pathlib import Path

import polars as pl
import pytest

from opscope.ingest import spill


def test_writes_on_disk_after_wait(tmp_path: Path) -> None:
    w = spill._Writer()
    frames = [pl.DataFrame({"a": list(range(i, i + 100))}) for i in range(5)]
    for i, df in enumerate(frames):
        w.run(df.write_parquet, tmp_path / f"f{i}.parquet", compression="lz4", statistics=False)
    w.wait()
    w.close()
    for i, df in enumerate(frames):
        assert pl.read_parquet(tmp_path / f"f{i}.parquet").equals(df)


def test_failed_write_raises_at_wait(tmp_path: Path) -> None:
    w = spill._Writer()
    w.run(pl.DataFrame({"a": [1]}).write_parquet, tmp_path / "no such folder" / "f.parquet")
    with pytest.raises(Exception, match=r"(?i)no such file|not found|os error"):
        w.wait()
    w.close()  # (no error left to raise)


def test_synchronous_mode_writes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "BACKGROUND_WRITES", False)
    w = spill._Writer()
    w.run(pl.DataFrame({"a": [1, 2]}).write_parquet, tmp_path / "f.parquet")
    assert (tmp_path / "f.parquet").is_file()
    assert not w.pending
    w.close()


def test_jobs_run_in_the_order_handed_over() -> None:
    # the windows' jobs share state (provisional track ids, flow counts): one at a time, in order
    w = spill._Writer()
    assert w.pool is not None
    seen: list[int] = []
    for i in range(50):
        w.run(seen.append, i)
    w.wait()
    w.close()
    assert seen == list(range(50))


def test_wait_keeps_the_last_windows_in_flight() -> None:
    """``wait(keep=1)``: every job but the last has ended, the last may still run (the scanner
    reads on while the writer finishes it); ``wait()`` then waits for it too."""
    w = spill._Writer()
    gate = threading.Event()
    done: list[int] = []

    def gated() -> None:
        gate.wait(10)
        done.append(1)

    w.run(done.append, 0)
    w.run(gated)
    w.wait(keep=1)
    assert done == [0] and len(w.pending) == 1  # (the second job waits for the gate)
    gate.set()
    w.wait()
    w.close()
    assert done == [0, 1] and not w.pending
    assert spill.WINDOWS_IN_FLIGHT >= 1
