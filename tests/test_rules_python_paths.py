"""The rules' steps done in Python over a few values, against the Polars plans they replace.

Each test keeps the replaced plan here as the reference and compares it with the rule's helper
on real traces and on planted tables with the cases the plan decided (ties, nulls, one group).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import SHARED_TRACES
from opscope.advise.rules import memory
from opscope.model import Profile


def _busiest_by_plan(m: pl.DataFrame) -> pl.DataFrame:
    """memory._busiest as it was: a group-by of the events per device, sorted, and a filter."""
    if m.height == 0:
        return m
    m = m.with_columns(pl.col("device_type").fill_null(-1), pl.col("device").fill_null(-1))
    dev = (
        m.group_by("device_type", "device")
        .len()
        .sort(
            [pl.col("device_type") > 0, "len", "device_type", "device"],
            descending=[True, True, False, False],
        )
        .row(0, named=True)
    )
    return m.filter(
        (pl.col("device_type") == dev["device_type"]) & (pl.col("device") == dev["device"])
    )


def _with_memory(base: Profile, rows: list[tuple[int | None, int | None]]) -> Profile:
    """``base`` with a memory table of one event per (device_type, device) in ``rows``."""
    schema = base.memory.schema
    n = len(rows)
    cols: dict[str, list[object]] = {k: [None] * n for k in schema}
    cols["device_type"] = [r[0] for r in rows]
    cols["device"] = [r[1] for r in rows]
    cols["ts_ns"] = list(range(n))
    cols["bytes"] = [64] * n
    return base._replace(memory=pl.DataFrame(cols, schema=schema))


@pytest.mark.parametrize(
    "rows",
    [
        [(1, 0), (1, 0), (1, 0)],  # one device: every event
        [(0, 0), (0, 0), (1, 3), (1, 2)],  # the CPU has most, an accelerator still first
        [(1, 3), (1, 2), (1, 2), (1, 3)],  # a tie: the lower device
        [(2, 0), (1, 5), (1, 5), (2, 0)],  # a tie: the lower device type
        [(None, None), (None, None), (0, 1)],  # nulls read as -1: not an accelerator
        [(1, None), (1, None), (1, 0), (None, 0)],  # a null device is device -1
        [(0, 0)],
    ],
)
def test_busiest_device_equals_the_group_by(rows: list[tuple[int | None, int | None]]) -> None:
    p = SHARED_TRACES / "ascend/small_two_rank/test_rank_0"
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = _with_memory(opscope.load(p, cache=False), rows)
    assert_frame_equal(memory._busiest(prof), _busiest_by_plan(prof.memory))


@pytest.mark.parametrize(
    "rel",
    [
        "ascend/small_two_rank/test_rank_0",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
        "gpu/hta_triton_a100.json.gz",
    ],
)
def test_busiest_device_of_real_traces(rel: str) -> None:
    p: Path = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    assert_frame_equal(memory._busiest(prof), _busiest_by_plan(prof.memory))


@pytest.mark.parametrize(
    "rel",
    [
        "ascend/small_two_rank/test_rank_0",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
        "ascend/kernel_details_gpt_fp16",
    ],
)
def test_repeated_kernels_equal_a_group_by(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ascend-fusible-sequence's check for a kernel (type and shapes) repeated more than
    MIN_COUNT times on a rank, against a group-by of the compute kernels' keys."""
    from opscope.advise.rules import ascend_fusible as af

    p: Path = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    most = (
        prof.kernels.filter((pl.col("kind") == "kernel") & pl.col("op_type").is_not_null())
        .group_by("rank", pl.format("{}|{}", "op_type", pl.col("input_dims").fill_null("None")))
        .len()
        .get_column("len")
        .max()
    )
    assert af._repeats(prof) == (most is not None and int(most) > af.MIN_COUNT)  # type: ignore[arg-type]
    if not af._repeats(prof):  # the rule finds nothing there without the check either
        from opscope.advise.rule import rules
        from opscope.analysis import tree

        monkeypatch.setattr(tree, "SHORTCUTS", False)
        assert rules()["ascend-fusible-sequence"].match(opscope.load(p, cache=False), {}) == []
