"""The spill's file writes on a worker thread (opscope.ingest.spill._Writer): every write handed
over is on disk after wait(), a failed write raises its error at wait() (never lost), and the
synchronous mode writes at once."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from opscope.ingest import spill


def test_writes_on_disk_after_wait(tmp_path: Path) -> None:
    w = spill._Writer()
    frames = [pl.DataFrame({"a": list(range(i, i + 100))}) for i in range(5)]
    for i, df in enumerate(frames):
        w(df, tmp_path / f"f{i}.parquet", compression="lz4", statistics=False)
    w.wait()
    w.close()
    for i, df in enumerate(frames):
        assert pl.read_parquet(tmp_path / f"f{i}.parquet").equals(df)


def test_failed_write_raises_at_wait(tmp_path: Path) -> None:
    w = spill._Writer()
    w(pl.DataFrame({"a": [1]}), tmp_path / "no such folder" / "f.parquet")
    with pytest.raises(Exception, match=r"(?i)no such file|not found|os error"):
        w.wait()
    w.close()  # (no error left to raise)


def test_synchronous_mode_writes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "BACKGROUND_WRITES", False)
    w = spill._Writer()
    w(pl.DataFrame({"a": [1, 2]}), tmp_path / "f.parquet")
    assert (tmp_path / "f.parquet").is_file()
    assert not w.pending
    w.close()
