"""Doctor checks on a profile without metrics or counters: no query runs to find them empty
(a spy counts DataFrame.filter), and the answer is the one the filter would give ([])."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from conftest import shared_trace
from opscope.doctor import checks
from opscope.ingest import load


@pytest.fixture
def bare_profile() -> object:
    p = load(shared_trace("gpu/hta_triton_a100.json.gz"), cache=False)
    assert p.metrics.is_empty() and p.counters.is_empty()
    return p


def test_empty_metrics_and_counters_run_no_filter(
    bare_profile: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = pl.DataFrame.filter

    def spy(self: pl.DataFrame, *a: object, **k: object) -> pl.DataFrame:
        calls.append(self.height)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.DataFrame, "filter", spy)
    assert checks.check_overhead(bare_profile) == []  # type: ignore[arg-type]
    assert checks.check_clock(bare_profile) == []  # type: ignore[arg-type]
    assert calls == []  # the shortcuts were taken
    # the full path on the same empty tables gives the same answer
    monkeypatch.undo()
    assert bare_profile.metrics.filter(pl.col("wall_ns") > 0).height == 0  # type: ignore[attr-defined]
    assert (
        bare_profile.counters.filter(  # type: ignore[attr-defined]
            pl.col("name").str.contains(r"(?i)\bfreq")
        ).height
        == 0
    )


def test_a_trace_with_counters_still_reads_them(tmp_path: Path) -> None:
    # the shortcut does not hide a profile that has counters: the clock check still looks
    d = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    p = load(d, cache=False)
    if p.counters.is_empty():
        pytest.skip("no counters in this export")
    got = checks.check_clock(p)
    freq = p.counters.filter(pl.col("name").str.contains(r"(?i)\bfreq"))
    assert (got != []) == (freq.height > 0)
