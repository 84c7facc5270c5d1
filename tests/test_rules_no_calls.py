"""The efficiency and GEMM rules on a profile with no costed call (no host op): the perf
model's empty call table is returned without filtering it (a spy counts DataFrame.filter),
and it equals what the filters give."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from opscope.advise.rules import efficiency, gemm
from test_report_speed_empty import _kernels_only


def test_no_calls_no_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    results: dict[str, object] = {}
    model = efficiency.c.perf_model(p, results)
    assert model.calls.height == 0
    calls: list[int] = []
    real = pl.DataFrame.filter

    def spy(self: pl.DataFrame, *a: object, **k: object) -> pl.DataFrame:
        calls.append(self.height)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.DataFrame, "filter", spy)
    got_model, groups = efficiency._groups(p, results, "^gemm")
    assert groups is None and got_model is model
    got_model, g = gemm._gemm_calls(p, results)
    assert calls == []  # the shortcuts were taken
    monkeypatch.undo()
    # what the full path's filter gives: the same empty table
    full = model.calls.filter(pl.col("name").is_in(gemm.GEMM_OPS) & (pl.col("roof") == "matrix"))
    assert_frame_equal(g, full)
