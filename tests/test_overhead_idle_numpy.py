"""The device-idle figure of the overhead rules (``overhead._idle_of``, computed in NumPy, and in
Python for a few kernels, advise/_idle.py) against a plain-Python reference of its definition,
over random kernel and step tables built to hit its corners: several ranks (the first one's
kernels), null ranks, devices and steps, untimed kernels, kernels of no duration, ties,
epoch-sized nanoseconds, steps of no window, windows of a null end, a step's window given
twice; and over every shared trace."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest

import opscope
from conftest import shared_trace
from opscope.advise import _idle
from opscope.advise.rules import overhead
from opscope.analysis import tree

KERNELS = {
    "rank": pl.Int32,
    "device": pl.Int32,
    "step": pl.Int32,
    "ts_ns": pl.Int64,
    "dur_ns": pl.Int64,
}
STEPS = {"rank": pl.Int32, "step": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64}


def _reference(kern: list[dict[str, Any]], steps: list[dict[str, Any]]) -> float:
    """The definition, row by row: the first rank's timed kernels (all when no rank is known),
    per device (and step, when any of them has one), in time order; before each kernel but a
    group's first, the gap from the latest end so far (none right after a kernel of no end) to
    its start, clipped to its step's window (that step's first row of that rank); per device
    summed, the largest."""
    timed = [k for k in kern if k["ts_ns"] is not None]
    if not timed:
        return 0.0
    ranks = [k["rank"] for k in timed if k["rank"] is not None]
    r0 = min(ranks) if ranks else None
    mine = [k for k in timed if r0 is None or k["rank"] == r0]
    stepped = any(k["step"] is not None for k in mine)
    rows = [k for k in mine if not stepped or k["step"] is not None]
    windows: dict[int, tuple[Any, Any]] = {}
    for s in steps:
        if (r0 is None or s["rank"] == r0) and s["step"] is not None and s["step"] not in windows:
            end = None if s["ts_ns"] is None or s["dur_ns"] is None else s["ts_ns"] + s["dur_ns"]
            windows[s["step"]] = (s["ts_ns"], end)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for k in rows:
        dev = k["device"] if k["device"] is not None else 0
        groups.setdefault((dev, k["step"]) if stepped else (dev,), []).append(k)
    per_device: dict[int, int] = {}
    for key, group in groups.items():
        ks = sorted(group, key=lambda k: k["ts_ns"])
        latest: int | None = None
        prev_has_end = False
        idle = 0
        for i, k in enumerate(ks):
            if i and prev_has_end and latest is not None:
                lo, hi = latest, k["ts_ns"]
                if stepped and steps and k["step"] in windows:
                    w0, w1 = windows[k["step"]]
                    lo = lo if w0 is None else max(lo, w0)
                    hi = hi if w1 is None else min(hi, w1)
                idle += max(hi - lo, 0)
            prev_has_end = k["dur_ns"] is not None
            if prev_has_end:
                end = k["ts_ns"] + k["dur_ns"]
                latest = end if latest is None else max(latest, end)
        per_device[key[0]] = per_device.get(key[0], 0) + idle
    return float(max(per_device.values())) if per_device else 0.0


def _maybe(rng: np.random.Generator, p: float, v: Any) -> Any:
    return None if rng.random() < p else v


def _tables(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    base = int(rng.choice([0, 1_700_000_000_000_000_000]))  # relative, or epoch-sized ns
    null = float(rng.choice([0.0, 0.1]))
    kern = []
    for _ in range(int(rng.integers(0, 60))):
        kern.append(
            {
                "rank": _maybe(rng, null, int(rng.integers(0, 3))),
                "device": _maybe(rng, null, int(rng.integers(0, 3))),
                "step": _maybe(rng, 0.3 if null else 0.0, int(rng.integers(0, 4))),
                # few distinct starts: ties
                "ts_ns": _maybe(rng, null, base + int(rng.integers(0, 40)) * 50),
                "dur_ns": _maybe(rng, null, int(rng.integers(0, 300))),
            }
        )
    steps = []
    for _ in range(int(rng.integers(0, 8))):
        steps.append(
            {
                "rank": _maybe(rng, null, int(rng.integers(0, 3))),
                "step": _maybe(rng, null, int(rng.integers(0, 5))),
                "ts_ns": _maybe(rng, null, base + int(rng.integers(0, 1000))),
                "dur_ns": _maybe(rng, null, int(rng.integers(0, 1500))),
            }
        )
    return kern, steps


def _profile(kern: list[dict[str, Any]], steps: list[dict[str, Any]]) -> Any:
    # the two tables _idle_of reads
    return SimpleNamespace(
        kernels=pl.DataFrame(kern, schema=KERNELS, orient="row"),
        steps=pl.DataFrame(steps, schema=STEPS, orient="row"),
    )


@pytest.mark.parametrize("py_max_rows", [-1, 1 << 30])  # NumPy, Python
@pytest.mark.parametrize("shortcuts", [True, False])
def test_idle_equals_the_reference_on_random_tables(
    shortcuts: bool, py_max_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree, "SHORTCUTS", shortcuts)
    monkeypatch.setattr(_idle, "IDLE_PY_MAX_ROWS", py_max_rows)
    nonzero = 0
    for seed in range(400):
        kern, steps = _tables(seed)
        want = _reference(kern, steps)
        assert overhead._idle_of(_profile(kern, steps)) == want, seed
        nonzero += want > 0
    assert nonzero > 200  # the tables do have gaps to count


@pytest.mark.parametrize("py_max_rows", [-1, 1 << 30])  # NumPy, Python
def test_idle_of_a_group_after_a_kernel_of_no_end(
    py_max_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel of no duration has no end: the next kernel has no gap before it (a null
    running maximum, as the window function read), the one after counts from the latest end."""
    kern = [
        {"rank": 0, "device": 0, "step": None, "ts_ns": t, "dur_ns": d}
        for t, d in ((0, 10), (100, None), (200, 10), (300, 10))
    ]
    monkeypatch.setattr(_idle, "IDLE_PY_MAX_ROWS", py_max_rows)
    # 100 - 10 before the second; none before the third; 300 - 210 before the fourth
    assert overhead._idle_of(_profile(kern, [])) == 90.0 + 90.0 == _reference(kern, [])


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/hta_alexnet_a100_cuda_sync.json.gz",
        "gpu/hta_amd_mi250_minitoy.json.gz",
        "ascend/small_two_rank/test_rank_0",
    ],
)
@pytest.mark.parametrize("py_max_rows", [-1, 1 << 30])  # NumPy, Python
def test_idle_equals_the_reference_on_shared_traces(
    rel: str, py_max_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_idle, "IDLE_PY_MAX_ROWS", py_max_rows)
    p = opscope.load(shared_trace(rel), cache=False)
    kern = p.kernels.select(*KERNELS).to_dicts()
    steps = p.steps.select(*STEPS).to_dicts()
    assert overhead._idle_of(p) == _reference(kern, steps) > 0


@pytest.mark.parametrize("seed", range(30))
def test_device_ends_equal_the_sort_query(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """overhead._device_ends in NumPy: each rank's (and, for a null rank, every rank's) timed
    kernels by rank and start, and the running maximum of their ends, as the filter-and-sort
    query it replaced gives them (kernels starting together on a rank may come in either
    order there: the running maximum at the last of them, where idle_after's search lands,
    is the same); no query."""
    from helpers.spies import count_queries

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))

    def col(hi: int, nulls: float) -> list[int | None]:
        return [None if rng.random() < nulls else int(x) for x in rng.integers(0, hi, n)]

    kern = pl.DataFrame(
        {"rank": col(3, 0.1), "ts_ns": col(30, 0.1), "dur_ns": col(20, 0.1)},
        schema={"rank": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64},
    )
    profile = SimpleNamespace(kernels=kern, events=kern)
    for rank in (None, 0, 1, 2, 5):
        plan = kern.lazy().drop_nulls()
        if rank is not None:
            plan = plan.filter(pl.col("rank") == rank)
        kr = plan.sort("rank", "ts_ns", maintain_order=True).collect()
        ran = count_queries(monkeypatch)
        got = overhead._device_ends(profile, rank)  # type: ignore[arg-type]
        assert ran == []
        monkeypatch.undo()
        if kr.height == 0:
            assert got is None
            continue
        assert got is not None
        starts = kr.get_column("ts_ns").to_numpy()
        ends = np.maximum.accumulate(starts + kr.get_column("dur_ns").to_numpy())
        assert got[0].tolist() == starts.tolist()
        # equal wherever a run of equal (rank, start) ends: the only places read
        last = np.append(
            (kr.get_column("rank").to_numpy()[1:] != kr.get_column("rank").to_numpy()[:-1])
            | (starts[1:] != starts[:-1]),
            True,
        )
        assert got[1][last].tolist() == ends[last].tolist()


@pytest.mark.parametrize(
    "rel",
    ["multi_rank/hta_sampled_128rank_job/rank-0.json.gz", "gpu/tracelens_h100_bert_small.json.gz"],
)
def test_sync_ops_equal_the_gather_and_filter_query(rel: str) -> None:
    """overhead._sync_ops (the rows by position, the parent columns beside them, the rows
    under a sync op left out in Python) equals the one query it replaced."""
    from polars.testing import assert_frame_equal

    from opscope.advise import _common as c

    p = opscope.load(shared_trace(rel), cache=False)
    rows = np.flatnonzero(c.name_mask(p, "ops", names=overhead.SYNC_OPS))
    par, pname, cost = c.op_context(p, rows)
    want = (
        p.ops.lazy()
        .select(pl.all().gather(pl.lit(pl.Series(rows, dtype=pl.Int64))))
        .with_columns(par, cost, pname.alias("pname"))
        .filter(~pl.col("pname").fill_null("").is_in(overhead.SYNC_OPS))
        .collect(engine="in-memory")
    )
    assert want.height
    assert_frame_equal(overhead._sync_ops(p), want)


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/hta_alexnet_a100_cuda_sync.json.gz",  # runtime syncs
        "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",  # above the name index's size
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    ],
)
def test_named_events_equal_the_filters(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host-sync, data-loader and recompile rules' events (_named_events: the three masks
    from one select a profile, the rows by position) equal the filters they replaced."""
    from polars.testing import assert_frame_equal

    from helpers.spies import count_queries
    from opscope.advise import _common as c

    p = opscope.load(shared_trace(rel), cache=False)
    want = {
        pattern: p.events.filter(pl.col("name").str.contains(pattern), kinds)
        for pattern, kinds in (
            (overhead.SYNC_RUNTIME, pl.col("kind").is_in(overhead._SYNC_KINDS)),
            (overhead.DATALOADER, pl.col("kind") != "python_function"),
            (overhead.RECOMPILE, pl.col("kind") != "python_function"),
        )
    }
    # the shared intermediates its shortcut reads (and the names' codes), built first
    p.ops, c.kind_counts(p), c.pattern_masks(p, "events", ())
    ran = count_queries(monkeypatch)
    got = {pattern: overhead._named_events(p, pattern) for pattern in want}
    # one select (over the events' rows, or over their distinct names on a large table)
    assert len(ran) == 1
    for pattern, frame in want.items():
        assert_frame_equal(got[pattern], frame)
    if rel.startswith("gpu/hta_alexnet"):
        assert want[overhead.SYNC_RUNTIME].height
