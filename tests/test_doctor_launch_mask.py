"""The doctor's launch check reads the launches by one array mask (the kinds' codes and the
names' regex: per distinct name on a large trace, per runtime call on a small one) and tests
them against the kernels' launch ids in NumPy; its evidence must be what the Series
comparisons, regex and ``is_in`` it replaced give, on both paths."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import opscope
from conftest import SHARED_TRACES
from opscope.doctor import checks

_TRACES = [
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
    "ascend/small_two_rank/test_rank_0",
]


def _reference(profile: Any) -> dict[str, Any]:
    """Launches and unlinked launches by Series comparisons on the kind and name columns."""
    ev = profile.events
    kind = ev.get_column("kind")
    runtime = (kind == "runtime") | (kind == "driver")
    names = ev.get_column("name").filter(runtime)
    launch = names.str.contains(checks._LAUNCH_RE)
    ids = ev.get_column("id").filter(runtime).filter(launch)
    unlinked = ~ids.is_in(profile.kernels.get_column("launch_id").implode())
    out: dict[str, Any] = {"launches": ids.len(), "unlinked": int(unlinked.sum())}
    if out["unlinked"]:
        unl = names.filter(launch).filter(unlinked).to_frame("name")
        top = unl.group_by("name").len().sort(["len", "name"], descending=[True, False]).head(5)
        out["by_name"] = {str(n): int(c) for n, c in top.iter_rows()}
    return out


@pytest.mark.parametrize("rel", _TRACES)
@pytest.mark.parametrize("large", [False, True])
def test_launch_evidence_equals_the_series_tests(
    rel: str, large: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    if large:  # the per-distinct-name path on this trace too
        monkeypatch.setattr(checks, "NAME_INDEX_MIN_ROWS", 0)
    prof = opscope.load(p, cache=False)
    (check,) = checks.check_launch_links(prof)
    want = _reference(prof)
    ev = check.evidence
    assert ev["launches"] == want["launches"]
    assert ev["launches_without_device_activity"] == want["unlinked"]
    assert ev.get("unlinked_by_name") == want.get("by_name")
    assert ev["kernels_without_launch"] == prof.kernels.get_column("launch_id").is_null().sum()
    if "alexnet" in rel:
        assert want["launches"] > 0  # the launches are there to find


def test_a_launch_with_no_kernel_is_unlinked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch whose kernel is missing counts as unlinked, a missing launch id matches no
    launch (NaN in the array test)."""
    p = SHARED_TRACES / _TRACES[0]
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    k = prof.kernels
    first = k.get_column("launch_id").drop_nulls().head(1)
    cut = k.with_columns(
        pl.when(pl.col("launch_id").is_in(first.implode()))
        .then(None)
        .otherwise(pl.col("launch_id"))
        .alias("launch_id")
    )
    monkeypatch.setattr(type(prof), "kernels", property(lambda self: cut))
    (check,) = checks.check_launch_links(prof)
    assert check.evidence["launches_without_device_activity"] == _reference(prof)["unlinked"] >= 1


def test_a_device_only_export_has_no_launch() -> None:
    """No runtime call (an Ascend rank of collectives only): no launch, as the Series tests
    find, without the name test."""
    from pathlib import Path

    p = Path("/work/ascend_data/st/level2/rank_1_ascend_pt")
    if not p.exists():
        pytest.skip(f"ascend_data export not found: {p}")
    prof = opscope.load(p, cache=False)
    (check,) = checks.check_launch_links(prof)
    assert check.evidence["launches"] == _reference(prof)["launches"] == 0
    assert check.evidence["launches_without_device_activity"] == 0
