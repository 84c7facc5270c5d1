"""Breakdown's NumPy path (the steps and streams tables over arrays) against the plans it
replaces and against plain Python: the array functions on random intervals, whole breakdowns of
real traces and of planted profiles (an empty step, work outside every step, overlapping work
on one stream, several streams and ranks, launch links, no steps, Ascend's own figures)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import shared_trace
from helpers.synth import Builder
from opscope.analysis import _breakdown_arrays as arrays
from opscope.analysis import breakdown as bd
from opscope.analysis.hotspots import projected
from opscope.model import Profile
from test_breakdown_golden import split


def _ints(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("base", [0, 1_700_000_000_000_000_000, 2**62])
def test_union_and_split_per_lane_equal_plain_python(base: int) -> None:
    """Random intervals in random lane order (touching, nested, repeated; lanes without any),
    times near 0, an epoch in ns and 2**62: each lane's union is the number of ns covered, its
    split the golden tests' reference."""
    rng = random.Random(5)
    n_lanes = 40
    w0 = [base + rng.randint(0, 1000) for _ in range(n_lanes)]
    w1 = [a + rng.randint(0, 600) for a in w0]
    rows = []
    for lane in range(n_lanes):
        if lane % 9 == 4 or w1[lane] == w0[lane]:
            continue  # a lane without work
        seen = set()
        for _ in range(rng.randint(1, 20)):
            s = rng.randint(w0[lane], w1[lane] - 1)
            e = rng.randint(s + 1, w1[lane])
            if (s, e) in seen:  # (the reference sorts (start, end, launch): no None compared)
                continue
            seen.add((s, e))
            launch = rng.choice([None, s - rng.randint(0, 400), s, s + 1])
            rows.append((lane, s, e, launch))
    rows += rows[:5]  # the same work twice
    rng.shuffle(rows)
    lane, start, end = (_ints([r[i] for r in rows]) for i in range(3))
    launched = np.array([r[3] is not None for r in rows])
    launch = _ints([r[3] or 0 for r in rows])
    unions = arrays.union_per_lane(lane, start, end, n_lanes)
    got = arrays.idle_split(lane, start, end, launch, launched, _ints(w0), _ints(w1))
    assert unions is not None and got is not None
    for k in range(n_lanes):
        mine = [(s, e, ln) for lk, s, e, ln in rows if lk == k]
        covered = {
            t for _, s, e, _ in [r for r in rows if r[0] == k] for t in range(s - base, e - base)
        }
        assert unions[k] == len(covered), k
        want = split(mine, w0[k], w1[k])
        assert (got.busy[k], got.host_wait[k], got.kernel_wait[k], got.other[k]) == want, k


@pytest.mark.parametrize("seed", range(6))
def test_split_without_launches_equals_the_full_split(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No work with a launch (Ascend's): the split from the union alone (the window less the
    busy time is other) equals the segments' split, on random lanes, some without work, some
    with work outside their window."""
    rng = random.Random(seed)
    n_lanes = rng.randint(1, 12)
    w0 = _ints([rng.randint(0, 1000) for _ in range(n_lanes)])
    w1 = w0 + _ints([rng.randint(0, 600) for _ in range(n_lanes)])
    n = rng.randint(0, 60)
    lane = _ints([rng.randrange(n_lanes) for _ in range(n)])
    start = _ints([rng.randint(-100, 1700) for _ in range(n)])
    end = start + _ints([rng.randint(0, 300) for _ in range(n)])
    launch, launched = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    got = {}
    for on in (True, False):
        monkeypatch.setattr(bd.tree, "SHORTCUTS", on)
        got[on] = arrays.idle_split(lane, start, end, launch, launched, w0, w1)
    fast, full = got[True], got[False]
    assert fast is not None and full is not None
    for c in ("busy", "host_wait", "kernel_wait", "other"):
        assert getattr(fast, c).tolist() == getattr(full, c).tolist(), c


def test_running_cover_declines_inverted_or_too_far_apart_intervals() -> None:
    first = np.array([True, False])
    assert arrays.running_cover(first, _ints([10, 50]), _ints([20, 40])) is None
    assert arrays.running_cover(first, _ints([0, 2**62]), _ints([10, 2**62 + 2**61])) is None
    # and an empty input is no segment
    new, covered = arrays.running_cover(np.zeros(0, bool), _ints([]), _ints([]))  # type: ignore[misc]
    assert len(new) == len(covered) == 0


def test_lane_ids_number_the_distinct_keys_in_order() -> None:
    rank, dev, stream = _ints([1, 0, 1, 0, 1]), _ints([0, 0, 0, 0, 1]), _ints([7, 9, 3, 9, 3])
    ids, reps = arrays.lane_ids(rank, dev, stream)
    keys = sorted(set(zip(rank.tolist(), dev.tolist(), stream.tolist(), strict=True)))
    assert [keys.index(k) for k in zip(rank, dev, stream, strict=True)] == ids.tolist()
    assert [(rank[i], dev[i], stream[i]) for i in reps] == keys


def _both(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> tuple[bd.Breakdown, bd.Breakdown]:
    """(The NumPy path's breakdown, asserting it was taken and is what breakdown gives; the
    plans' of the same inputs)."""
    inp = bd._inputs(projected(profile, bd.BREAKDOWN_READ))
    fast = bd._breakdown_arrays(inp, per_trace=True)
    assert fast is not None
    _same(bd._breakdown_of(inp), fast)
    with monkeypatch.context() as m:
        m.setattr(bd, "_breakdown_arrays", lambda inp, per_trace: None)
        plans = bd._breakdown_of(inp)
    return fast, plans


def _same(fast: bd.Breakdown, plans: bd.Breakdown) -> None:
    for table in ("steps", "streams", "stats", "queue"):
        assert_frame_equal(getattr(fast, table), getattr(plans, table), check_exact=True)


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/small_two_rank/test_rank_0",
        "gpu/hta_triton_a100.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
        "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    ],
)
def test_numpy_path_equals_the_plans_on_real_traces(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, plans = _both(opscope.load(shared_trace(rel), cache=False), monkeypatch)
    _same(fast, plans)
    assert fast.steps.height and fast.streams.height


def test_numpy_path_equals_the_plans_on_a_host_only_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pathlib import Path

    p = Path("/work/corpus/hta/rank_non_gpu/rank_non_gpu.json.gz")
    if not p.exists():
        pytest.skip(f"corpus trace not found: {p}")
    fast, plans = _both(opscope.load(p, cache=False), monkeypatch)
    _same(fast, plans)
    assert fast.steps.get_column("host_ops_ns").sum() > 0


def _launched(
    b: Builder,
    name: str,
    launch_ts: float,
    ts: float,
    dur: float,
    op: int,
    stream: int = 7,
    rank: int = 0,
) -> int:
    rt = b._add(
        kind="runtime",
        name="cudaLaunchKernel",
        ts=launch_ts,
        dur=1.0,
        pid=1,
        tid=1,
        step=b.events[op].get("step"),
        rank=rank,
    )
    k = b.kernel(name, ts, dur, op, stream=stream)
    b.events[k]["launch_id"] = rt
    b.events[k]["rank"] = rank
    return k


def _two_ranks(*, with_steps: bool = True, figures: list[dict[str, Any]] | None = None) -> Builder:
    """Rank 0 and rank 1, three steps each (the middle one of rank 0 empty), work before the
    first step and after the last, overlapping kernels on one stream, three streams, launch
    links on some, a data-loading op, host ops of a step without a window and of none."""
    b = Builder()
    for rank in (0, 1):
        t0 = 10_000.0 * rank
        for n in range(3):
            if with_steps:
                b.steps.append(
                    {
                        "rank": rank,
                        "step": n,
                        "ts_ns": round((t0 + 1000 * n) * 1000),
                        "dur_ns": 1_000_000,
                    }
                )
            b._add(
                kind="step",
                name=f"ProfilerStep#{n}",
                ts=t0 + 1000 * n,
                dur=1000,
                pid=1,
                tid=1,
                step=n,
                rank=rank,
            )
        op = b.op("aten::mm", t0 + 10, 2900, step=0)
        b.events[op]["rank"] = rank
        dl = b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 5, 40, step=0)
        b.events[dl]["rank"] = rank
        # host ops count in their own step (clipped to the windows they overlap): op above in
        # step 0 across all three windows, these in a step without a window and in none
        for step in (5, None):
            b.events[b.op("aten::add", t0 + 1500, 20, step=step)]["rank"] = rank
        # before the first step, and across its start
        _launched(b, "early", t0 - 500, t0 - 400, 100, op, rank=rank)
        _launched(b, "across", t0 - 60, t0 - 50, 250, op, rank=rank)
        # overlapping on stream 7, nested, and one starting with them
        _launched(b, "a", t0 + 100, t0 + 300, 400, op, rank=rank)
        _launched(b, "b", t0 + 350, t0 + 400, 100, op, rank=rank)
        k = b.kernel("c", t0 + 300, 50, op)  # no launch link
        b.events[k]["rank"] = rank
        _launched(b, "d", t0 + 800, t0 + 650, 100, op, stream=8, rank=rank)
        k = b.kernel("ncclAllReduce", t0 + 680, 200, op, stream=9, kind="communication")
        b.events[k]["rank"] = rank
        k = b.kernel("Memcpy HtoD", t0 + 900, 50, op, kind="memcpy")
        b.events[k]["rank"] = rank
        if rank:  # rank 1 works in its middle step too, and runs past its last
            _launched(b, "mid", t0 + 1100, t0 + 1200, 300, op, stream=8, rank=rank)
            _launched(b, "late", t0 + 2900, t0 + 2950, 400, op, rank=rank)
    if figures:
        for row, fig in zip(b.steps, figures, strict=False):
            row.update(fig)
    return b


def test_numpy_path_equals_the_plans_on_planted_profiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast, plans = _both(_two_ranks().build(), monkeypatch)
    _same(fast, plans)
    steps = fast.steps
    assert steps.height == 6
    empty = steps.filter((pl.col("rank") == 0) & (pl.col("step") == 1)).row(0, named=True)
    assert empty["device_busy_ns"] == 0 and empty["idle_other_ns"] == empty["dur_ns"]
    assert steps.get_column("data_loading_ns").sum() > 0
    # every stream of a rank in each of its windows, work or not
    assert fast.streams.height == 2 * 3 * 3
    for r in [*steps.iter_rows(named=True), *fast.streams.iter_rows(named=True)]:
        busy = r.get("device_busy_ns", r.get("busy_ns"))
        assert busy + sum(r[c] for c in bd.IDLE_COLUMNS) == r["dur_ns"]


def test_numpy_path_split_equals_plain_python_on_a_planted_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The device-wide and per-stream splits of the planted ranks from the events here: each
    kernel clipped to its window, its launch the runtime call's start."""
    b = _two_ranks()
    fast, _ = _both(b.build(), monkeypatch)
    ev = b.events
    work = [
        (
            e["rank"],
            e["stream"],
            e["ts_ns"],
            e["ts_ns"] + e["dur_ns"],
            ev[e["launch_id"]]["ts_ns"] if e.get("launch_id") is not None else None,
        )
        for e in ev
        if e["kind"] in ("kernel", "communication", "memcpy")
    ]
    for r in fast.steps.iter_rows(named=True):
        w0, w1 = r["ts_ns"], r["ts_ns"] + r["dur_ns"]
        mine = [(s, e, ln) for rank, _, s, e, ln in work if rank == r["rank"]]
        got = (r["device_busy_ns"], *(r[c] for c in bd.IDLE_COLUMNS))
        assert got == split(mine, w0, w1), (r["rank"], r["step"])
    for r in fast.streams.iter_rows(named=True):
        step = fast.steps.filter((pl.col("rank") == r["rank"]) & (pl.col("step") == r["step"])).row(
            0, named=True
        )
        w0, w1 = step["ts_ns"], step["ts_ns"] + step["dur_ns"]
        mine = [(s, e, ln) for rank, st, s, e, ln in work if (rank, st) == (r["rank"], r["stream"])]
        got = (r["busy_ns"], *(r[c] for c in bd.IDLE_COLUMNS))
        assert got == split(mine, w0, w1), (r["rank"], r["step"], r["stream"])


def test_numpy_path_equals_the_plans_without_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """No steps: one window per rank (its events' span), a null step."""
    fast, plans = _both(_two_ranks(with_steps=False).build(), monkeypatch)
    _same(fast, plans)
    assert fast.steps.height == 2 and fast.steps.get_column("step").null_count() == 2


@pytest.mark.parametrize("everywhere", [True, False], ids=["every_step", "some_steps"])
def test_numpy_path_equals_the_plans_under_ascend_figures(
    everywhere: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps carrying step_trace_time.csv's figures (on every step: the split null; on some:
    those steps take the file's figures, the others the computed ones)."""
    fig = {
        "computing_ns": 123_000,
        "communication_ns": 45_000,
        "communication_not_overlapped_ns": 6_000,
        "free_ns": 700_000,
    }
    n = 6 if everywhere else 2
    fast, plans = _both(_two_ranks(figures=[dict(fig) for _ in range(n)]).build(), monkeypatch)
    _same(fast, plans)
    own = fast.steps.filter(pl.col("compute_ns") == 123_000)
    assert own.height == n
    assert own.get_column("device_idle_ns").to_list() == [700_000] * n
    assert own.get_column("idle_other_ns").null_count() == n
    others = fast.steps.filter(pl.col("compute_ns") != 123_000)
    assert others.get_column("idle_other_ns").null_count() == 0


def test_numpy_path_declines_two_windows_of_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two steps rows with one (rank, step): the plans' joins repeat rows; the arrays decline
    and the plans answer."""
    b = _two_ranks()
    b.steps.append(dict(b.steps[0]))
    inp = bd._inputs(projected(b.build(), bd.BREAKDOWN_READ))
    assert bd._breakdown_arrays(inp, per_trace=True) is None


def test_tables_built_from_rows_equal_those_built_from_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small tables are built from Python rows, large ones from a Series per column: the same
    frames (nulls and types too)."""
    fast, _ = _both(_two_ranks(figures=[{"free_ns": 1, "computing_ns": 2}]).build(), monkeypatch)
    monkeypatch.setattr(bd, "_ROWS_MAX", -1)
    series, _ = _both(_two_ranks(figures=[{"free_ns": 1, "computing_ns": 2}]).build(), monkeypatch)
    _same(fast, series)
    assert fast.steps.get_column("idle_other_ns").null_count() == 1
