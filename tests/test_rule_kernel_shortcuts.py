"""Rules that read the kernels table without filtering it where a count says what a filter would
find: shape-alignment and precision-fp32-matmul skip the kernels' filter when no kernel carries
shapes (dtypes) — a GPU trace's never do — and overhead-launch-bound counts its kernels and
short kernels by Series comparisons, filtering the rows only when it fires.

Each against the full path (``analysis.tree.SHORTCUTS`` off: the filters run), finding for
finding, with a spy that the shortcut is taken (fewer queries run); the launch-bound counts
against the filters they replace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import opscope
from conftest import SHARED_TRACES
from helpers.spies import count_queries
from opscope.advise import _common as c
from opscope.advise.rule import rules
from opscope.analysis import tree

CORPUS = Path("/work/corpus")
_GPU_ONLY = "AMD-AGI_tests_traces_mi210_gpu_only_trace_gpu_only_trace.json.gz"


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A count of the queries run (every eager frame operation and collected plan is one; a
    ``head`` or a Series comparison is none)."""
    yield count_queries(monkeypatch)


def _run(path: Path, rid: str, on: bool, made: list[int], mp: pytest.MonkeyPatch) -> Any:
    """(the rule's findings as JSON, the queries its match ran) on a fresh profile whose
    shared intermediates are made first (only the rule's own work is counted)."""
    mp.setattr(tree, "SHORTCUTS", on)
    prof = opscope.load(path, cache=False)
    c.kind_counts(prof)
    rules()[rid].match(prof, {})  # the memoised intermediates, made once
    before = len(made)
    found = rules()[rid].match(prof, {})
    n = len(made) - before
    return json.dumps([f.to_json() for f in found], default=str, sort_keys=True), n


def _trace(rel: str) -> Path:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    return p


@pytest.mark.parametrize("rid", ["shape-alignment", "precision-fp32-matmul"])
@pytest.mark.parametrize(
    "rel",
    [
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",  # findings of both rules
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    ],
)
def test_no_kernel_shapes_skips_the_kernels_filter(
    rid: str, rel: str, queries: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _trace(rel)
    prof = opscope.load(path, cache=False)
    assert not c.present(prof.kernels.get_column("input_dims"))
    assert not c.present(prof.kernels.get_column("input_types"))
    fast, n_fast = _run(path, rid, True, queries, monkeypatch)
    full, n_full = _run(path, rid, False, queries, monkeypatch)
    assert fast == full
    assert n_fast < n_full, (n_fast, n_full)  # the spy: the kernels' filter not run


def test_the_rules_still_read_kernel_shapes_where_there_are() -> None:
    """An Ascend export's kernels carry shapes and dtypes: the filter runs (and finds them)."""
    p = SHARED_TRACES / "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt"
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    assert c.present(prof.kernels.get_column("input_dims"))
    assert c.present(prof.kernels.get_column("input_types"))
    assert rules()["shape-alignment"].match(prof, {})


@pytest.mark.parametrize(
    "path",
    [
        CORPUS / _GPU_ONLY,  # fires: mostly short kernels, no host op
        SHARED_TRACES / "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        SHARED_TRACES / "ascend/small_two_rank/test_rank_0",
    ],
)
def test_launch_bound_counts_equal_the_filters(path: Path) -> None:
    from opscope.advise.rules import overhead

    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    prof = opscope.load(path, cache=False)
    k = prof.kernels.filter(pl.col("kind") == "kernel")
    short = k.filter(pl.col("dur_ns") < overhead.LAUNCH_US * 1000)
    is_kernel = prof.kernels.get_column("kind") == "kernel"
    is_short = is_kernel & (prof.kernels.get_column("dur_ns") < overhead.LAUNCH_US * 1000)
    assert (int(is_kernel.sum()), int(is_short.sum())) == (k.height, short.height)
    assert prof.kernels.filter(is_short).equals(short)
    found = overhead.LaunchBound._device(prof, c.step_info(prof))
    if path.name == _GPU_ONLY:
        assert [f.rule for f in found] == ["overhead-launch-bound"]
        assert found[0].evidence["calls"] == short.height
