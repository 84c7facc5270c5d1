"""Fixed costs of memory, utilisation, roofline and cluster on small traces (issue 19 item 8).

Each shortcut here stands on a height or a schema that says there is nothing to compute:
no allocator event (memory), no kernel and no metric (utilisation), no rank whose collectives
are on the host, no message size, no HCCL op, no link (cluster). ``tree.SHORTCUTS`` off runs
the full path: every table must be the same (schema and rows), and the whole report byte for
byte (``test_report_speed_empty._same``); a spy checks that each shortcut is taken where it
should be and only there. Empty tables made once per process are handed out as copies: one
caller changing its copy changes no other's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from conftest import SHARED_TRACES
from opscope.analysis import (
    breakdown,
    cluster,
    cluster_ascend,
    memory,
    occupancy,
    roofline,
    tree,
)
from opscope.analysis.registry import Options
from test_report_speed_empty import _kernels_only, _same

ASCEND_DATA = Path("/work/ascend_data")


def _trace(path: Path, events: list[dict[str, Any]], **extra: Any) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **extra}))
    return path


def _gloo(path: Path) -> Path:
    """A CPU-only rank: two steps' ops and a gloo all-reduce (a host collective) in each."""
    ev: list[dict[str, Any]] = []
    for s, t0 in enumerate((100.0, 400.0)):
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
             "tid": 1, "ts": t0, "dur": 250.0, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
             "ts": t0 + 10, "dur": 100.0, "args": {}},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1,
             "tid": 2, "ts": t0 + 90, "dur": 60.0, "args": {}},
        ]  # fmt: skip
    return _trace(path, ev)


def _nccl(path: Path, nelems: bool) -> Path:
    """A GPU rank: an op launching a gemm and an NCCL all-reduce (with or without Kineto's
    message size arguments)."""
    size = {"In msg nelems": 1024, "dtype": "Float"} if nelems else {}
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100.0,
         "dur": 20.0, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 105.0, "dur": 5.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 112.0, "dur": 5.0, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "sgemm_128x64", "pid": 0, "tid": 7, "ts": 120.0,
         "dur": 40.0, "args": {"device": 0, "stream": 7, "correlation": 1,
                               "grid": [64, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
         "pid": 0, "tid": 13, "ts": 130.0, "dur": 50.0,
         "args": {"device": 0, "stream": 13, "correlation": 2,
                  "Collective name": "allreduce", **size}},
    ]  # fmt: skip
    return _trace(path, ev, deviceProperties=[{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}])


def _results(path: Path, on: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    monkeypatch.setattr(tree, "SHORTCUTS", on)
    prof = opscope.load(path, cache=False)  # a fresh Profile: nothing memoised
    out: dict[str, pl.DataFrame] = {}
    for name, res in (
        ("memory", memory.memory(prof, Options())),
        ("utilisation", occupancy.utilisation(prof, Options())),
        ("roofline", roofline.roofline(prof, Options())),
        ("cluster", cluster.cluster(prof, Options())),
    ):
        out |= {f"{name}.{k}": v for k, v in res.tables().items()}
        out[f"{name}.json"] = pl.DataFrame({"json": [json.dumps(res.to_json(), default=str)]})
    return out


def _equal(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, pl.DataFrame]:
    fast = _results(path, True, monkeypatch)
    full = _results(path, False, monkeypatch)
    assert fast.keys() == full.keys()
    for k, df in full.items():
        assert_frame_equal(fast[k], df, check_row_order=True), (path, k)
    return fast


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, Path]:
    return {
        "kernels": _kernels_only(tmp_path / "k.json"),
        "gloo": _gloo(tmp_path / "g.json"),
        "nccl": _nccl(tmp_path / "n.json", nelems=True),
        "nccl_no_size": _nccl(tmp_path / "n0.json", nelems=False),
    }


def test_planted_traces_are_the_same_with_and_without_shortcuts(
    planted: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, path in planted.items():
        t = _equal(path, monkeypatch)
        _same(path, monkeypatch)
        if name == "gloo":  # the host collectives found through the full path
            assert t["cluster.collectives"].get_column("collective").to_list() == [
                "allreduce",
                "allreduce",
            ]
        if name.startswith("nccl"):
            coll = t["cluster.collectives"]
            assert coll.get_column("collective").to_list() == ["allreduce"]
            # 1024 float32 elements: 4096 bytes; without the size arguments: null
            assert coll.get_column("bytes").to_list() == ([4096] if name == "nccl" else [None])


@pytest.mark.parametrize(
    "rel",
    [
        "ascend/small_two_rank/test_rank_0",
        "gpu/hta_nccl_a100_rank0of2.json.gz",
        "gpu/hta_triton_a100.json.gz",
    ],
)
def test_shared_traces_are_the_same_with_and_without_shortcuts(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    _equal(p, monkeypatch)


def test_communication_only_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    p = ASCEND_DATA / "st/level2/rank_1_ascend_pt"
    if not p.exists():
        pytest.skip(f"ascend_data export not found: {p}")
    t = _equal(p, monkeypatch)
    assert t["utilisation.kernels"].height == 0 and t["memory.peaks"].height == 0
    assert t["cluster.collectives"].height == 15
    _same(p, monkeypatch)


class _Spy:
    """Records the calls of ``module.name`` (and still makes them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.calls: list[Any] = []
        real = getattr(module, name)

        def spy(*a: Any, **k: Any) -> Any:
            out = real(*a, **k)
            self.calls.append(out)
            return out

        monkeypatch.setattr(module, name, spy)


def test_shortcuts_are_taken_where_there_is_nothing(
    planted: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shortcut fires on the input with nothing to compute and not on the others."""
    p = ASCEND_DATA / "st/level2/rank_1_ascend_pt"
    if not p.exists():
        pytest.skip(f"ascend_data export not found: {p}")
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    groups = _Spy(monkeypatch, occupancy, "_groups_plan")
    host = _Spy(monkeypatch, cluster, "_rank_without")
    msprof = _Spy(monkeypatch, cluster_ascend, "msprof_plan")
    occupancy._empty_groups.cache_clear()

    def run(path: Path) -> None:
        prof = opscope.load(path, cache=False)
        occupancy.utilisation(prof, Options())
        cluster.cluster(prof, Options())

    # (the collectives' bytes are a column of their one query, its expressions built once per
    # process: no shortcut of its own since 2026-12-05)
    run(p)  # collectives only: no kernel, every rank's collectives on the device
    run(p)  # the empty table made once: the plan is not built again
    assert len(groups.calls) == 1 and host.calls == [False, False]
    assert msprof.calls == []  # no HCCL op in the in-process analysis
    run(planted["gloo"])  # host collectives: looked for; no kernel
    assert host.calls[-1] is True and len(groups.calls) == 2
    run(planted["nccl"])  # kernels: the full paths
    assert host.calls[-1] is False and len(groups.calls) == 3


def test_rank_without() -> None:
    s = pl.Series
    assert not cluster._rank_without(s([0, 0, 0], dtype=pl.Int32), [0])
    assert cluster._rank_without(s([0, 0, 1], dtype=pl.Int32), [0])
    assert not cluster._rank_without(s([1, 0, 1], dtype=pl.Int32), [0, 1])
    assert cluster._rank_without(s([0, None], dtype=pl.Int32), [0])  # null: not known
    assert cluster._rank_without(s([3], dtype=pl.Int32), [])
    assert not cluster._rank_without(s([], dtype=pl.Int32), [])  # no event: no host part


def test_msprof_without_hccl_equals_the_join() -> None:
    ranks = pl.DataFrame(
        {
            "rank": [None, 0, 3],
            "steps": [1, 2, 2],
            "step_time_ns": [10, 2_000_001, 3_000],
            "compute_ns": [1, 1_500_000, 0],
            "comm_ns": [0, 300_000, 7],
            "comm_not_overlapped_ns": [0, 100_001, 7],
            "idle_ns": [9, 200_000, 2_993],
            "wait_ns": [0, 5, 0],
        },
        schema_overrides={"rank": pl.Int32, "steps": pl.UInt32},
    )
    hccl = pl.DataFrame(schema=cluster_ascend.HCCL_COLUMNS)
    for r in (ranks, ranks.clear()):
        want = cluster_ascend.msprof_ranks(r, hccl)
        assert_frame_equal(cluster_ascend.msprof_without_hccl(r), want)


def test_empty_tables_are_copies(planted: dict[str, Path]) -> None:
    """The empty tables made once per process reach each caller as its own copy."""
    for path in (planted["kernels"], planted["gloo"]):
        a = opscope.load(path, cache=False)
        m = memory.memory(a, Options())
        u = occupancy.utilisation(a, Options())
        c = cluster.cluster(a, Options())
        for df in (m.peaks, u.kernels, c.links, c.hccl):
            df.insert_column(0, pl.Series("planted", [None] * df.height, dtype=pl.Int8))
        b = opscope.load(path, cache=False)
        for df in (
            memory.memory(b, Options()).peaks,
            cluster.cluster(b, Options()).links,
            cluster.cluster(b, Options()).hccl,
        ):
            assert "planted" not in df.columns
        if not (a.kernels.get_column("kind") == "kernel").any():
            assert "planted" not in occupancy.utilisation(b, Options()).kernels.columns


# breakdown ---------------------------------------------------------------------------------


def _breakdown_tables(path: Path, on: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(tree, "SHORTCUTS", on)
    prof = opscope.load(path, cache=False)
    b = breakdown.breakdown(prof, Options())
    return {**b.tables(), "json": json.dumps(b.to_json(), default=str)}


@pytest.mark.parametrize("name", ["kernels", "gloo", "nccl", "nccl_no_size"])
def test_breakdown_is_the_same_with_and_without_shortcuts(
    name: str, planted: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _breakdown_tables(planted[name], True, monkeypatch)
    full = _breakdown_tables(planted[name], False, monkeypatch)
    assert fast["json"] == full["json"]
    for k in ("steps", "stats", "streams", "queue"):
        assert_frame_equal(fast[k], full[k], check_row_order=True), (name, k)


def test_breakdown_input_shortcuts_are_taken_where_there_is_nothing(
    planted: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No host event that could be data loading: its filter is not run (with steps, whose
    windows and the device work come from Series: no plan collected; else one plan fewer); no
    launch link (no kernel, or Ascend's): the launch times are null without looking any up;
    else each is its launching event's start (plain Python over the events)."""
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    sizes: list[int] = []
    real = pl.collect_all

    def spy(plans: Any, *a: Any, **k: Any) -> Any:
        sizes.append(len(plans))
        return real(plans, *a, **k)

    looked = _Spy(monkeypatch, tree, "_positions")
    p = ASCEND_DATA / "st/level2/rank_1_ascend_pt"
    if not p.exists():
        pytest.skip(f"ascend_data export not found: {p}")
    nccl = planted["nccl"]
    for path, data, linked in (
        (p, False, False),
        (planted["gloo"], True, False),
        (nccl, True, True),
    ):
        prof = opscope.load(path, cache=False)
        monkeypatch.setattr(pl, "collect_all", spy)
        sizes.clear()
        breakdown._inputs(prof)
        monkeypatch.setattr(pl, "collect_all", real)
        plans = int(data) + int(not prof.steps.height)  # the data-loading filter, the windows
        assert sizes == ([plans] if plans else []), path
        looked.calls.clear()
        work = breakdown._device_work(prof)
        assert bool(looked.calls) is linked, path
        ts = dict(zip(prof.events.get_column("id"), prof.events.get_column("ts_ns"), strict=True))
        want = [ts.get(i) if i is not None else None for i in work.get_column("launch_id")]
        assert work.get_column("launch_ts").to_list() == want, path
        assert any(w is not None for w in want) is linked, path


def test_clip_is_the_same_with_and_without_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random intervals against random windows (ranks with several, one, none; null ranks and
    times; zero lengths): the rows kept as they are (one window, each row once, in order) and
    the gathered rows give the same table; the shortcut is taken when every row is kept once."""
    rng = np.random.default_rng(7)
    taken = 0
    for case in range(300):
        n, m = int(rng.integers(0, 12)), int(rng.integers(1, 4))
        ranks = rng.integers(0, 2, n).tolist()
        ts = rng.integers(0, 100, n).tolist()
        dur = rng.integers(0, 30, n).tolist()
        if case % 3 == 0 and n:
            ranks[0] = None
            dur[-1] = None
        ev = pl.DataFrame(
            {"rank": ranks, "ts_ns": ts, "dur_ns": dur, "x": list(range(n))},
            schema={"rank": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64, "x": pl.Int64},
        )
        w0 = np.sort(rng.integers(-10, 120, m))
        if case % 2:  # one window over everything: each live row kept once, in order
            w0, m = np.array([-100]), 1
        win = pl.DataFrame(
            {
                "rank": [int(case % 4 == 1)] * m if case % 2 else rng.integers(0, 2, m).tolist(),
                "step": list(range(m)),
                "w0": w0.tolist(),
                "w1": (w0 + rng.integers(1, 60, m)).tolist() if not case % 2 else [1000],
            },
            schema={"rank": pl.Int32, "step": pl.Int32, "w0": pl.Int64, "w1": pl.Int64},
        )
        monkeypatch.setattr(tree, "SHORTCUTS", False)
        full = breakdown._clip(ev, win)
        monkeypatch.setattr(tree, "SHORTCUTS", True)
        fast = breakdown._clip(ev, win)
        assert_frame_equal(fast, full, check_row_order=True)
        taken += full.height == ev.height and full.get_column("x").to_list() == list(range(n))
    assert taken > 20


@pytest.mark.parametrize("fast", [True, False], ids=["numpy_runs", "window_functions"])
def test_unions_and_idle_split_with_many_equal_starts(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stable sort of the intervals (quicker than the unstable one) keeps equal starts in
    their input order: the unions and the idle split still equal plain Python per group when
    most starts are shared by several intervals of other ends and launches."""
    import random

    from test_breakdown_golden import split

    monkeypatch.setattr(breakdown, "RUNS_MIN_ROWS", 0 if fast else 10**9)
    rng = random.Random(11)
    rows = []
    for g in range(20):
        t0 = (20 - g) * 1000
        starts = [t0 + rng.randint(0, 8) * 50 for _ in range(30)]  # ~9 distinct starts
        seen = set()
        for s in starts:
            e = s + rng.randint(1, 120)
            if (s, e) in seen:  # the reference sorts (start, end, launch): no None compared
                continue
            seen.add((s, e))
            launch = rng.choice([None, s - rng.randint(0, 300), s])
            rows.append((g, s, e, launch, t0, t0 + 600))
    rng.shuffle(rows)
    df = pl.DataFrame(rows, schema=["g", "start", "end", "launch_ts", "w0", "w1"], orient="row")
    got = dict(breakdown.union_ns(df, ["g"]).iter_rows())
    lanes = df.select("g", "w0", "w1").unique()
    split_got = {r[0]: r[1:] for r in breakdown.idle_split(df, lanes, ["g"]).iter_rows()}
    for g in range(20):
        mine = [r for r in rows if r[0] == g]
        covered = {t for r in mine for t in range(r[1], r[2])}
        assert got[g] == len(covered), g
        assert split_got[g] == split([(r[1], r[2], r[3]) for r in mine], mine[0][4], mine[0][5])


def test_roofline_takes_the_aligned_costs(
    planted: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost table beside the ops (their rows in their order): taken on a trace with ops,
    and the roofline the same as with the join (checked on these traces above); a table out of
    order, short, or with a null id is not aligned."""
    monkeypatch.setattr(tree, "SHORTCUTS", True)
    aligned = _Spy(monkeypatch, roofline, "_aligned")
    # (traces with costed ops: without one the roofline takes none of its full path)
    for rel in (
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    ):
        p = SHARED_TRACES / rel
        if not p.exists():
            pytest.skip(f"shared trace not found: {p}")
        roofline.roofline(opscope.load(p, cache=False), Options())
    assert aligned.calls == [True, True]
    ops = pl.DataFrame({"id": [3, 5, 9], "name": ["a", "b", "c"]})
    costs = pl.DataFrame({"id": [3, 5, 9], "flops": [1, None, 2]})
    assert roofline._aligned(ops, costs)
    assert not roofline._aligned(ops, costs.reverse())
    assert not roofline._aligned(ops, costs.head(2))
    assert not roofline._aligned(ops, costs.with_columns(pl.Series("id", [3, None, 9])))
    assert not roofline._aligned(ops, costs.with_columns(pl.lit("x").alias("name")))
