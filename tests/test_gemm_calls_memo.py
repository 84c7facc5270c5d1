"""The GEMM rules' shared call groups (``gemm._gemm_calls``) are computed once per profile and
device: the second caller gets the first's table (a spy counts the uncached computation) and it
equals a fresh computation; another device (other peaks) is its own entry."""

from __future__ import annotations

from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import opscope
from helpers import planted
from opscope.advise.rules import gemm


def test_gemm_calls_once_per_profile_and_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = planted.write("skinny-misaligned", tmp_path, device="h100")
    p = opscope.load(path, cache=False)
    computed: list[str | None] = []
    real = gemm._gemm_calls_of

    def spy(profile: opscope.Profile, results: dict[str, object]) -> object:
        computed.append(results.get("target_name"))  # type: ignore[arg-type]
        return real(profile, results)

    monkeypatch.setattr(gemm, "_gemm_calls_of", spy)
    model, g = gemm._gemm_calls(p, {})
    assert g.height > 0  # the planted GEMM is grouped
    model2, g2 = gemm._gemm_calls(p, {})
    assert computed == [None]  # the second call was served from the memo
    assert model2 is model and g2 is g
    # the memo's table is what the uncached path gives
    assert_frame_equal(g, real(p, {})[1])
    _, g3 = gemm._gemm_calls(p, {"target_name": "MI300X"})
    assert computed == [None, "MI300X"]  # another device's peaks: computed for it
    assert_frame_equal(g3, real(p, {"target_name": "MI300X"})[1])
