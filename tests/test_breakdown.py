"""Step breakdown: unions on planted intervals; Ascend figures equal step_trace_time.csv."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import polars as pl
import pytest

import opscope.analysis  # noqa: F401
from conftest import shared_trace
from helpers.queue_sweep import queue_sweep
from helpers.spies import count_queries
from helpers.synth import Builder
from opscope.analysis import breakdown as bd
from opscope.analysis.breakdown import union_ns
from opscope.analysis.registry import run


def test_union_matches_brute_force() -> None:
    import random

    import polars as pl

    rng = random.Random(3)
    iv = [(g, s, s + rng.randint(0, 30)) for g in range(3) for s in rng.sample(range(200), 40)]
    df = pl.DataFrame(iv, schema=["g", "start", "end"], orient="row")
    got = dict(union_ns(df, ["g"]).iter_rows())
    for g in range(3):
        covered = {t for gg, s, e in iv if gg == g for t in range(s, e)}
        assert got[g] == len(covered)


@pytest.mark.parametrize("fast", [True, False], ids=["numpy_runs", "window_functions"])
@pytest.mark.parametrize("base", [0, 3_000_000_000_000_000, 2**62])
def test_union_and_idle_split_match_brute_force_over_many_groups(
    base: int, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many groups (null keys too), times near 0, 3e15 ns (a steady clock) and 2**62: unions
    and the idle split equal plain Python per group (the golden tests' reference split), on
    both paths (the NumPy runs of large inputs, the window functions of small ones)."""
    import random

    import polars as pl

    from opscope.analysis import breakdown as bd
    from opscope.analysis.breakdown import idle_split
    from test_breakdown_golden import split

    monkeypatch.setattr(bd, "RUNS_MIN_ROWS", 0 if fast else 10**9)
    taken = []
    real = bd._runs
    monkeypatch.setattr(bd, "_runs", lambda s, k: taken.append(r := real(s, k)) or r)

    rng = random.Random(7)
    rows = []
    for g in range(60):
        k = None if g % 7 == 0 else g % 5  # (k, g) keys; k null for some groups
        # later groups earlier in time: the order of groups is not the order of times
        t0 = base + (60 - g) * 500
        seen = set()
        for _ in range(rng.randint(1, 25)):
            s = t0 + rng.randint(0, 400)
            e = s + rng.choice([1, rng.randint(1, 120)])
            if (s, e) in seen:  # the reference sorts (start, end, launch): no None compared
                continue
            seen.add((s, e))
            launch = rng.choice([None, s - rng.randint(0, 300), s - 5, s])
            rows.append((k, g, s, e, launch, t0, t0 + 520))
    df = pl.DataFrame(
        rows, schema=["k", "g", "start", "end", "launch_ts", "w0", "w1"], orient="row"
    )
    got = {(r[0], r[1]): r[2] for r in union_ns(df, ["k", "g"]).iter_rows()}
    lanes = df.select("k", "g", "w0", "w1").unique()
    split_got = {(r[0], r[1]): r[2:] for r in idle_split(df, lanes, ["k", "g"]).iter_rows()}
    groups = {(r[0], r[1]): (r[5], r[6]) for r in rows}
    assert len(got) == len(split_got) == len(groups) == 60
    for key, (w0, w1) in groups.items():
        mine = [r for r in rows if (r[0], r[1]) == key]
        covered: set[int] = set()
        for r in mine:
            covered.update(range(r[2] - base, r[3] - base))
        assert got[key] == len(covered), key
        assert split_got[key] == split([(r[2], r[3], r[4]) for r in mine], w0, w1), key
    # below the size threshold the idle split keeps its rows in the plan, not asking _runs
    # (which would decline them by size): only the union asks
    assert len(taken) == (2 if fast else 1) and all((r is not None) == fast for r in taken)


def test_union_of_inverted_or_far_apart_intervals_keeps_todays_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import polars as pl

    from opscope.analysis import breakdown as bd

    monkeypatch.setattr(bd, "RUNS_MIN_ROWS", 0)  # declined for what they are, not their size
    taken = []
    real = bd._runs
    monkeypatch.setattr(bd, "_runs", lambda s, k: taken.append(r := real(s, k)) or r)
    # an interval ending before it starts counts as today's segments did: e - s, negative
    df = pl.DataFrame({"g": [0, 0, 1], "start": [10, 50, 5], "end": [20, 40, 9]})
    assert dict(union_ns(df, ["g"]).iter_rows()) == {0: 10 + (40 - 50), 1: 4}
    # groups 2**62 wide cannot be laid end to end in int64
    far = 2**62
    df = pl.DataFrame(
        {"g": [0, 0, 0, 1, 1], "start": [0, 5, far, 3, far], "end": [10, 12, far + 10, 4, far + 1]}
    )
    assert dict(union_ns(df, ["g"]).iter_rows()) == {0: 12 + 10, 1: 1 + 1}
    # the idle split of group 0 too: [0, 10) launched before the window (kernel wait of a
    # 0 ns gap), [5, 12) no launch, [far, far + 10) launched at far - 1, after the gap opened
    # at 12 (host wait far - 12), then a 10 ns tail (other) to the window's end at far + 20
    g0 = df.filter(pl.col("g") == 0).with_columns(
        pl.Series("launch_ts", [-1, None, far - 1], dtype=pl.Int64)
    )
    lanes = pl.DataFrame({"g": [0], "w0": [0], "w1": [far + 20]})
    got = bd.idle_split(g0, lanes, ["g"]).rows()
    assert got == [(0, 22, far - 12, 0, 10)]
    assert taken == [None, None, None]  # each took the window-function path


def _planted() -> Builder:
    b = Builder()
    for s in range(2):
        t = s * 1000.0
        st = b.step(s, t, 1000)
        dl = b.op(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 100, parent=st, step=s
        )
        del dl
        op = b.op("aten::mm", t + 100, 50, parent=st, step=s)
        b.kernel("gemm", t + 200, 300, op)  # compute 200..500
        b.kernel("gemm2", t + 400, 200, op, stream=8)  # compute 400..600 (overlaps)
        # kind set as the loader classifies it (the breakdown trusts the kind, not the name)
        b.kernel("ncclDevKernel_AllReduce", t + 550, 150, op, stream=9, kind="communication")
        b.kernel("Memcpy HtoD", t + 800, 50, op, kind="memcpy")  # 800..850
    return b


def test_planted_step_breakdown() -> None:
    res = run("breakdown", _planted().build())
    steps = res.steps  # type: ignore[attr-defined]
    assert steps.height == 2
    for r in steps.iter_rows(named=True):
        assert r["dur_ns"] == 1_000_000
        assert r["compute_ns"] == 400_000  # 200..600
        assert r["communication_ns"] == 150_000
        assert r["communication_not_overlapped_ns"] == 100_000  # 600..700
        assert r["memcpy_ns"] == 50_000
        assert r["device_busy_ns"] == 550_000  # 200..700 + 800..850
        assert r["device_idle_ns"] == 450_000
        assert r["data_loading_ns"] == 100_000
        # no launch links planted: every gap (0..200, 700..800, 850..1000) is "other"
        assert (r["idle_host_wait_ns"], r["idle_kernel_wait_ns"]) == (0, 0)
        assert r["idle_other_ns"] == 450_000
    stats = res.stats.filter(res.stats["rank"].is_null()).row(0, named=True)  # type: ignore[attr-defined]
    assert stats["mean_ns"] == 1_000_000 and stats["std_ns"] == 0 and stats["cv"] == 0


def test_step_spread() -> None:
    b = Builder()
    durs = [100.0, 200.0, 300.0, 1000.0]
    t = 0.0
    for i, d in enumerate(durs):
        b.step(i, t, d)
        t += d
    st = run("breakdown", b.build()).stats  # type: ignore[attr-defined]
    r = st.filter(st["rank"].is_null()).row(0, named=True)
    import statistics

    ns = [d * 1000 for d in durs]
    assert r["mean_ns"] == pytest.approx(statistics.mean(ns))
    assert r["median_ns"] == pytest.approx(statistics.median(ns))
    assert r["std_ns"] == pytest.approx(statistics.stdev(ns))
    assert r["cv"] == pytest.approx(statistics.stdev(ns) / statistics.mean(ns))


def test_ascend_steps_equal_step_trace_time_csv() -> None:
    from opscope.ingest import load

    d = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    with open(d / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        want = {int(r["Step"]): r for r in csv.DictReader(f) if r["Step"].strip()}
    res = run("breakdown", load(d, cache=False))
    got = {r["step"]: r for r in res.steps.iter_rows(named=True)}  # type: ignore[attr-defined]
    assert set(want) <= set(got)
    for s, w in want.items():
        assert got[s]["compute_ns"] / 1000 == pytest.approx(float(w["Computing"]), abs=0.01)
        assert got[s]["communication_ns"] / 1000 == pytest.approx(
            float(w["Communication"]), abs=0.01
        )
        assert got[s]["communication_not_overlapped_ns"] / 1000 == pytest.approx(
            float(w["Communication(Not Overlapped)"]), abs=0.01
        )
        assert got[s]["device_idle_ns"] / 1000 == pytest.approx(float(w["Free"]), abs=0.01)


def _launched(b: Builder, name: str, launch_ts: float, ts: float, dur: float, op: int,
              stream: int = 7) -> None:  # fmt: skip
    rt = b._add(kind="runtime", name="cudaLaunchKernel", ts=launch_ts, dur=1.0, pid=1, tid=1,
                step=b.events[op].get("step"))  # fmt: skip
    k = b.kernel(name, ts, dur, op, stream=stream)
    b.events[k]["launch_id"] = rt


def test_idle_split_by_cause_per_stream_and_device() -> None:
    b = Builder()
    st = b.step(0, 0, 1000)
    op = b.op("aten::mm", 100, 800, parent=st, step=0)
    _launched(b, "A", 150, 200, 300, op)  # gap 0..200: launched at 150 > 0 -> host wait
    _launched(b, "B", 300, 600, 100, op)  # gap 500..600: launched at 300 <= 500 -> kernel wait
    _launched(b, "C", 750, 800, 50, op)  # gap 700..800: launched at 750 > 700 -> host wait
    _launched(b, "D", 160, 550, 100, op, stream=8)  # stream 8: 550..650
    res = run("breakdown", b.build())
    s7, s8 = res.streams.sort("stream").iter_rows(named=True)  # type: ignore[attr-defined]
    # stream 7: busy 200..500, 600..700, 800..850; tail 850..1000 is other
    assert (s7["busy_ns"], s7["idle_host_wait_ns"], s7["idle_kernel_wait_ns"]) == (
        450_000,
        300_000,
        100_000,
    )
    assert s7["idle_other_ns"] == 150_000
    # stream 8: D launched at 160 > 0 -> the 0..550 gap is host wait; tail 650..1000 other
    assert (s8["busy_ns"], s8["idle_host_wait_ns"], s8["idle_kernel_wait_ns"]) == (
        100_000,
        550_000,
        0,
    )
    assert s8["idle_other_ns"] == 350_000
    # device-wide: busy 200..500, 550..700, 800..850; gaps 0..200 host (A), 500..550 kernel
    # (D was launched at 160), 700..800 host (C), tail 850..1000 other
    r = res.steps.row(0, named=True)  # type: ignore[attr-defined]
    assert r["device_busy_ns"] == 500_000
    assert (r["idle_host_wait_ns"], r["idle_kernel_wait_ns"], r["idle_other_ns"]) == (
        300_000,
        50_000,
        150_000,
    )
    for row in [s7, s8, r]:
        cats = row["idle_host_wait_ns"] + row["idle_kernel_wait_ns"] + row["idle_other_ns"]
        assert cats + row.get("busy_ns", row.get("device_busy_ns")) == row["dur_ns"]
    q = {x["stream"]: x for x in res.queue.iter_rows(named=True)}  # type: ignore[attr-defined]
    # stream 7 queue: 1 on 150..300, 2 on 300..500, 1 on 500..700, 1 on 750..850
    assert q[7]["max"] == 2
    assert q[7]["zero_ns"] == 150_000 + 50_000 + 150_000
    assert q[7]["mean"] == pytest.approx((150 + 400 + 200 + 100) / 1000)


def test_device_work_counts_in_the_step_it_runs_in() -> None:
    b = Builder()
    st0 = b.step(0, 0, 1000)
    b.step(1, 1000, 1000)
    op = b.op("aten::mm", 100, 800, parent=st0, step=0)
    # launched in step 0, runs 900..1300: 100 µs in step 0, 300 µs in step 1
    _launched(b, "late", 850, 900, 400, op)
    res = run("breakdown", b.build())
    s0, s1 = res.steps.sort("step").iter_rows(named=True)  # type: ignore[attr-defined]
    assert (s0["compute_ns"], s1["compute_ns"]) == (100_000, 300_000)
    assert s0["idle_host_wait_ns"] == 900_000  # launched at 850 > 0
    assert s1["idle_other_ns"] == 700_000 and s1["idle_host_wait_ns"] == 0
    assert s0["device_busy_ns"] + s0["device_idle_ns"] == s0["dur_ns"]


@pytest.mark.parametrize("seed", range(4))
def test_clip_matches_brute_force(seed: int) -> None:
    """Events of several ranks (null ranks, null and zero lengths, events spanning several
    windows or none) clipped to each window of their rank they overlap: the same rows as
    plain Python over every (event, window) pair; an event's own ``step`` kept, the window's
    beside it as ``step_right``."""
    import random

    import polars as pl

    from opscope.analysis.breakdown import _clip

    rng = random.Random(seed)
    base = rng.choice([0, 1_695_115_378_713_661_000])
    wins = []
    for r in range(3):
        t = base + rng.randint(0, 50)
        for k in range(rng.randint(0, 5)):
            t += rng.randint(0, 20)  # gaps between windows, some none
            d = rng.randint(1, 40)
            wins.append((r, k if seed % 2 else None, t, t + d))
            t += d
    win = pl.DataFrame(
        wins, schema={"rank": pl.Int32, "step": pl.Int32, "w0": pl.Int64, "w1": pl.Int64},
        orient="row",
    )  # fmt: skip
    evs = [
        (
            rng.choice([0, 1, 2, 3, None]),
            rng.randint(0, 9),
            None if rng.random() < 0.05 else base + rng.randint(0, 300),
            rng.choice([None, 0, rng.randint(1, 10), rng.randint(1, 150)]),
            i,
        )
        for i in range(200)
    ]
    ev = pl.DataFrame(
        evs,
        schema={"rank": pl.Int32, "step": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64,
                "id": pl.Int64},
        orient="row",
    )  # fmt: skip
    want = [
        (r, st, ts, d, i, wst, w0, w1, max(ts, w0), min(ts + d, w1))
        for r, st, ts, d, i in evs
        if r is not None and ts is not None and d is not None and d > 0
        for wr, wst, w0, w1 in wins
        if wr == r and max(ts, w0) < min(ts + d, w1)
    ]
    got = _clip(ev, win)
    assert got.columns == [*ev.columns, "step_right", "w0", "w1", "start", "end"]
    assert sorted(got.iter_rows(), key=repr) == sorted(want, key=repr)
    no_step = _clip(ev.drop("step"), win)
    assert no_step.columns == ["rank", "ts_ns", "dur_ns", "id", "step", "w0", "w1", "start", "end"]
    assert no_step.height == len(want)


@pytest.mark.parametrize("dtype", [pl.Int8, pl.Int32, pl.Int64, pl.UInt32])
@pytest.mark.parametrize("nulls", [False, True])
def test_int_values_equal_fill_null_and_is_not_null_without_a_query(
    dtype: pl.DataType, nulls: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """int_values gives what ``fill_null(0)`` and ``is_not_null`` give (epoch-sized values
    exactly, beyond a float's 53 bits), and runs no query (each of those is one)."""
    big = dtype == pl.Int64
    vals = [5, 2**62 + 1 if big else 7, 0, 3]
    if nulls:
        vals[1::2] = [None, None]
    s = pl.Series("x", vals, dtype=dtype)
    want = (s.fill_null(0).to_list(), s.is_not_null().to_list())
    ran = count_queries(monkeypatch)
    got, ok = bd.int_values(s)
    assert (got.tolist(), ok.tolist()) == want
    assert got.dtype == np.int64
    assert ran == []


def test_device_work_launch_times_equal_the_left_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """_device_work's launch times (positions and a NumPy take) equal the left join of the
    launch ids with the events it replaced: launched work, work without a launch id, a launch
    id of no event, a launch with no start; the plan holds its launch times without a query."""
    from types import SimpleNamespace

    ev = pl.DataFrame(
        {
            "id": [0, 1, 2, 3, 4, 5, 6, 7],
            "rank": [0] * 8,
            "kind": ["runtime", "runtime", *["kernel"] * 4, "runtime", "kernel"],
            "device": [None, None, 0, 0, None, 0, None, 0],
            "stream": [None, None, 7, None, 7, 7, None, 7],
            "tid": [1, 1, 7, 9, 7, None, 1, 7],
            "ts_ns": [100, 200, 150, 260, 300, 400, None, 500],
            "dur_ns": [10, 10, 50, 30, 20, 10, 10, 5],
            "launch_id": [None, None, 0, 1, None, 99, None, 6],
        },
        schema_overrides={"rank": pl.Int32, "device": pl.Int32, "launch_id": pl.Int64},
    )
    profile = SimpleNamespace(events=ev, kernels=ev.filter(pl.col("kind") == "kernel"))
    want = (
        profile.kernels.select("rank", "kind", "ts_ns", "dur_ns", "launch_id")
        .join(
            ev.select(pl.col("id").alias("launch_id"), pl.col("ts_ns").alias("launch_ts")),
            on="launch_id",
            how="left",
            maintain_order="left",
        )
        .get_column("launch_ts")
    )
    assert want.to_list() == [100, 200, None, None, None]
    ran = count_queries(monkeypatch)
    work = bd._device_work(profile)  # type: ignore[arg-type]
    assert ran == []
    got = work.get_column("launch_ts")
    assert got.to_list() == want.to_list() and got.dtype == want.dtype
    # the other columns as the plan it replaced selected them (nulls filled, stream or tid)
    from polars.testing import assert_frame_equal

    monkeypatch.undo()
    plan = profile.kernels.select(
        "rank",
        "kind",
        pl.col("device").fill_null(-1).alias("device"),
        pl.coalesce("stream", "tid").fill_null(-1).alias("stream"),
        "ts_ns",
        "dur_ns",
        "launch_id",
    )
    assert_frame_equal(work.drop("launch_ts"), plan)
    none = profile.kernels.with_columns(pl.lit(None, pl.Int64).alias("launch_id"))
    bare = bd._device_work(SimpleNamespace(events=ev, kernels=none))  # type: ignore[arg-type]
    assert bare.get_column("launch_ts").null_count() == none.height
    assert bare.schema["launch_ts"] == pl.Int64


@pytest.mark.parametrize("seed", range(40))
def test_group_starts_of_integer_keys_equal_the_query(seed: int) -> None:
    """group_starts of integer keys (in NumPy) equals the ``ne_missing`` select it replaces
    (which other key types still take): nulls equal only to nulls, several keys, one row."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 50))

    def col(dtype: pl.DataType) -> pl.Series:
        v = rng.integers(0, 3, n).tolist()
        return pl.Series([None if rng.random() < 0.2 else x for x in v], dtype=dtype)

    df = pl.DataFrame({"rank": col(pl.Int32), "step": col(pl.Int64), "cls": col(pl.UInt8)})
    keys = ["rank", "step", "cls"][: int(rng.integers(1, 4))]
    df = df.sort(keys, nulls_last=bool(seed % 2))
    want = (
        df.select(
            pl.any_horizontal(pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys).fill_null(
                True
            )
        )
        .to_series()
        .to_list()
    )
    want[0] = True
    assert bd.group_starts(df, keys).tolist() == want
    # a string key: the query's path, the same answer
    s = df.with_columns(pl.col(keys[0]).cast(pl.String))
    assert bd.group_starts(s, keys).tolist() == want


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    ],
)
def test_window_frame_equals_the_windows_plan(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The windows of a profile with steps from the steps' Series (no query) equal the plan's;
    a step without a duration has a null end in both."""
    from polars.testing import assert_frame_equal

    import opscope

    p = opscope.load(shared_trace(rel), cache=False)
    assert p.steps.height
    odd = p.steps.with_columns(pl.when(pl.col("step") == pl.col("step").min()).then(None)
                               .otherwise(pl.col("dur_ns")).alias("dur_ns"))  # fmt: skip
    for prof in (p, dataclasses.replace(p, steps=odd)):
        want = bd._windows(prof).collect()
        ran = count_queries(monkeypatch)
        got = bd._window_frame(prof)
        assert ran == []
        monkeypatch.undo()
        assert got is not None
        assert_frame_equal(got, want)
    assert got.get_column("w1").null_count() >= 1


def test_queue_lengths_equal_a_sweep_per_lane() -> None:
    """queue_lengths per (rank, device, stream) equals a sweep over each lane's launch and end
    points computed here (ends before launches at one instant; a null launch time: the start;
    lanes with a null stream or device; stretches clipped to the rank's range), many lanes
    sorted together."""
    import random

    from opscope.analysis.breakdown import queue_lengths

    rng = random.Random(3)
    rows = []
    for _ in range(400):
        rank = rng.choice([0, 1])
        dev = rng.choice([0, 1, None])
        stream = rng.choice([7, 9, None])
        ts = rng.randrange(0, 2000, 10)  # (on a grid: points often at one instant)
        launch = None if rng.random() < 0.2 else ts - rng.randrange(0, 300, 10)
        rows.append((rank, dev, stream, launch, ts, rng.randrange(10, 200, 10)))
    dev = pl.DataFrame(
        rows,
        schema={"rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64, "launch_ts": pl.Int64,
                "ts_ns": pl.Int64, "dur_ns": pl.Int64},
        orient="row",
    )  # fmt: skip
    win = pl.DataFrame(
        {"rank": [0, 0, 1], "step": [0, 1, 0], "w0": [100, 900, 50], "w1": [900, 1700, 1900]},
        schema={"rank": pl.Int32, "step": pl.Int32, "w0": pl.Int64, "w1": pl.Int64},
    )
    rng_of = {0: (100, 1700), 1: (50, 1900)}
    want = queue_sweep(rows, rng_of)
    got = queue_lengths(dev, win)
    assert {
        (r["rank"], r["device"], r["stream"]): (
            r["span_ns"], r["mean"], r["max"], r["zero_ns"], r["zero_pct"]
        )
        for r in got.iter_rows(named=True)
    } == want  # fmt: skip
    assert got.height == len(want)
    assert got.select("rank", "device", "stream").rows() == sorted(
        want, key=lambda k: tuple((v is not None, v) for v in k)
    )
