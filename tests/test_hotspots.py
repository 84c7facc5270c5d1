"""Hotspots against independent computations: torch's key_averages() on a real CPU run, and a
stdlib-json sum over the raw file of real GPU traces."""

from __future__ import annotations

import gzip
import json
import math
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import opscope.analysis  # noqa: F401
from conftest import shared_trace
from helpers.spies import count_collect_all
from helpers.synth import training
from opscope.analysis.registry import Options, run


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    out = tmp_path_factory.mktemp("hot") / "trace.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
        with_stack=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        for _ in range(5):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
    return out, prof.key_averages()


@pytest.mark.slow
@pytest.mark.torch
def test_cpu_totals_self_and_calls_equal_key_averages(cpu_run: tuple[Path, Any]) -> None:
    from opscope.ingest import load

    path, ka = cpu_run
    res = run("hotspots", load(path, cache=False))
    ours = {r["name"]: r for r in res.ops.iter_rows(named=True)}  # type: ignore[attr-defined]
    theirs = {e.key: e for e in ka}
    prof = load(path, cache=False)
    ev = prof.events
    # torch's EventList drops an op nested directly in an op of the same name
    # (``_remove_dup_nodes``: aten::sum inside aten::sum); those names can't be compared.
    par = ev.select(pl.col("id").alias("parent_id"), pl.col("name").alias("pname"))
    dup = set(
        ev.join(par, on="parent_id")
        .filter(pl.col("name") == pl.col("pname"))
        .get_column("name")
        .to_list()
    )
    common = [n for n in ours if n in theirs and n.startswith("aten::") and n not in dup]
    assert len(common) >= 8
    for n in common:
        e = theirs[n]
        assert ours[n]["calls"] == e.count, n
        assert ours[n]["total_ns"] / 1000 == pytest.approx(e.cpu_time_total, rel=0.01, abs=1), n
        assert ours[n]["self_ns"] / 1000 == pytest.approx(e.self_cpu_time_total, rel=0.01, abs=1), n


def _raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.parametrize(
    "rel",
    [
        "gpu/tracelens_h100_bert_small.json.gz",
        "gpu/hta_amd_mi250_minitoy.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    ],
)
def test_kernel_totals_equal_raw_json_sum(rel: str) -> None:
    from opscope.ingest import load

    path = shared_trace(rel)
    want: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in _raw_events(path):
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in (
            "kernel",
            "gpu_memcpy",
            "gpu_memset",
            "memcpy",
            "memset",
        ):
            want[e["name"]][0] += 1
            want[e["name"]][1] += float(e.get("dur", 0))
    res = run("hotspots", load(path, cache=False), Options(top=1000))
    got = {r["name"]: r for r in res.kernels.iter_rows(named=True)}  # type: ignore[attr-defined]
    assert set(got) == set(want)
    for n, (calls, dur) in want.items():
        assert got[n]["calls"] == calls
        assert got[n]["total_ns"] / 1000 == pytest.approx(dur, abs=1e-3 * calls + 1e-6)


def test_self_time_and_device_time_on_synthetic_profile() -> None:
    plan = training(steps=2, layers=2)
    res = run("hotspots", plan.profile)
    ops = {r["name"]: r for r in res.ops.iter_rows(named=True)}  # type: ignore[attr-defined]
    # linear 30 µs holds addmm 20 µs -> self 10 µs per call; 2 steps x 2 layers calls
    assert ops["aten::linear"]["self_ns"] == 4 * 10_000
    assert ops["aten::addmm"]["self_ns"] == 4 * 20_000
    # device time: addmm launches 10 / 20 µs kernels; linear includes them
    assert ops["aten::addmm"]["device_self_ns"] == 2 * (10_000 + 20_000)
    assert ops["aten::linear"]["device_ns"] == 2 * (10_000 + 20_000)
    assert ops["aten::linear"]["device_self_ns"] == 0
    # share of step time: 2 steps of 1000 µs
    assert ops["aten::linear"]["pct"] == pytest.approx(100 * 4 * 30 / 2000)
    per = res.per_step.filter(pl.col("what") == "kernel")  # type: ignore[attr-defined]
    assert per.get_column("calls").sum() == 2 * 4
    js = res.to_json()  # type: ignore[attr-defined]
    assert {"name", "calls", "total_us", "self_us", "pct"} <= set(js["ops"][0])
    assert {"name", "calls", "total_us", "self_us", "pct"} <= set(js["kernels"][0])


@pytest.mark.parametrize(
    "rel",
    [
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
        "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",
    ],
)
def test_ascend_kernel_type_totals_equal_op_statistic_csv(rel: str) -> None:
    import csv

    from opscope.ingest import load

    d = shared_trace(rel)
    with open(d / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv", newline="") as f:
        want = {
            (r["OP Type"].strip(), r["Core Type"].strip()): (
                int(r["Count"]),
                float(r["Total Time(us)"]),
            )
            for r in csv.DictReader(f)
        }
    res = run("hotspots", load(d, cache=False), Options(top=1000))
    got = {
        (r["op_type"], r["core_type"]): r
        for r in res.kernel_types.iter_rows(named=True)  # type: ignore[attr-defined]
    }
    for key, (count, total) in want.items():
        assert key in got, key
        assert got[key]["calls"] == count, key
        assert got[key]["total_ns"] / 1000 == pytest.approx(total, rel=1e-6, abs=0.01), key


def _ordered(tables: list[list[dict[str, Any]]]) -> list[list[list[tuple[str, Any]]]]:
    # the keys' order too (the JSON's): dicts compare equal in any order
    return [[list(d.items()) for d in t] for t in tables]


def test_rows_of_equal_each_tables_eager_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """rows_of gives, table by table, what the eager to_us + to_dicts gives, keys in the same
    order: ns columns of several chunks, a replaced ``*_us``, no ns column, an empty table,
    ``top`` and none; a spy: no query for integer and Float64 ns columns (converted in Python),
    one collect_all for the tables it cannot convert in Python for certain: a Float32 column
    (Polars keeps single precision), a constant one held as a scalar (Polars divides it
    exactly: 16076072.670276158 ns is 16076.072670276157 µs there, ...159 as a product)."""
    from opscope.analysis import hotspots as hs

    chunked = pl.concat(
        [pl.DataFrame({"name": ["a", "b"], "total_ns": [18865, 7]}),
         pl.DataFrame({"name": ["c"], "total_ns": [1]})],
        rechunk=False,
    )  # fmt: skip
    tables = [
        (chunked, 2),
        (chunked, None),
        (pl.DataFrame({"x_us": [1.0], "x_ns": [2500], "k": [None]}), 20),
        (pl.DataFrame({"name": ["a"]}), None),
        (pl.DataFrame(schema={"total_ns": pl.Int64}), 5),
        (pl.DataFrame({"mean_ns": [2.5, None], "n_ns": pl.Series([3, 4], dtype=pl.UInt32)}), 1),
    ]
    want = [hs.to_us(df if top is None else df.head(top)).to_dicts() for df, top in tables]
    calls = count_collect_all(monkeypatch)
    assert _ordered(hs.rows_of(tables)) == _ordered(want)
    assert calls == []
    assert _ordered([hs.rows(df, top) for df, top in tables]) == _ordered(want)
    single = pl.DataFrame({"a_ns": pl.Series([1.5, None], dtype=pl.Float32), "b": [1, 2]})
    v = 16076072.670276158
    scalar = pl.DataFrame({"k": [1, 2]}).with_columns(pl.lit(v).alias("std_ns"))
    one_row = pl.DataFrame({"k": [1, 2]}).select(pl.lit(v).alias("std_ns"), pl.len())
    odd = [single, scalar, one_row]
    calls.clear()
    got = hs.rows_of([*tables, *((df, None) for df in odd)])
    assert _ordered(got) == _ordered([*want, *(hs.to_us(df).to_dicts() for df in odd)])
    assert calls == [2]  # (the one-row table in Python: divided exactly, as Polars does)
    assert got[-1] == [{"len": 2, "std_us": 16076.072670276157}]  # not v * (1 / 1000.0)
    # a constant column whose product is the quotient: converted in Python (no query)
    calls.clear()
    same = pl.DataFrame({"k": [1, 2]}).with_columns(pl.lit(2500).alias("t_ns"))
    assert hs.rows(same) == hs.to_us(same).to_dicts()
    assert calls == []


def test_rows_of_runs_plans_in_the_same_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table given as a plan (cluster.to_json's rank rows and collectives' sums) is run in
    rows_of's one collect_all beside the tables converted by a query, its rows as collecting
    it eagerly gives them (its ``top`` first rows; no ``*_ns`` conversion); with no other
    table to convert, the call holds the plans alone."""
    from opscope.analysis import hotspots as hs
    from opscope.analysis import tree

    df = pl.DataFrame({"rank": [1, 0, 1], "dur_ns": [3, 5, 7]})
    plan = (
        df.lazy()
        .group_by("rank")
        .agg((pl.col("dur_ns").sum() / 1000.0).alias("dur_us"), pl.len())
        .sort("rank")
    )
    v = 16076072.670276158
    one_row = pl.DataFrame({"k": [1, 2]}).select(pl.lit(v).alias("std_ns"), pl.len())
    py = pl.DataFrame({"name": ["a", "b"], "total_ns": [18865, 7]})
    calls = count_collect_all(monkeypatch)
    got = hs.rows_of([(plan, None), (py, None), (one_row, None), (plan, 1), (df.lazy(), None)])
    assert calls == [3]  # the three plans (the one-row table in Python: see the test above)
    assert got == [
        tree.collect(plan).to_dicts(),
        hs.to_us(py).to_dicts(),
        hs.to_us(one_row).to_dicts(),
        tree.collect(plan).head(1).to_dicts(),
        df.to_dicts(),
    ]
    calls.clear()
    assert hs.rows_of([(plan, None), (py, None)]) == [
        tree.collect(plan).to_dicts(),
        hs.to_us(py).to_dicts(),
    ]
    assert calls == [1]


@pytest.mark.parametrize(
    "dtype",
    [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.Float64],
)
def test_rows_in_python_equal_the_query_bit_for_bit(dtype: pl.DataType) -> None:
    """The Python conversion (x * (1 / 1000.0)) gives the doubles of the eager to_us select,
    bit for bit, over random values of every integer dtype (its extremes too) and Float64
    (every magnitude, inf, nan, -0.0), with nulls."""
    from opscope.analysis import hotspots as hs

    rng = np.random.default_rng(7)
    if dtype.is_integer():
        info = np.iinfo(np.dtype(str(dtype).lower()))
        kind = np.uint64 if info.min == 0 else np.int64
        vals: list[Any] = rng.integers(
            info.min, info.max, 20_000, endpoint=True, dtype=kind
        ).tolist()
        vals += [int(info.min), int(info.max), 0, 2**53 + 1, None]
        vals = [v for v in vals if v is None or info.min <= v <= info.max]
    else:
        mags = 10.0 ** rng.integers(-8, 16, 20_000)
        vals = (rng.standard_normal(20_000) * mags).tolist()
        vals += [float("inf"), float("-inf"), float("nan"), -0.0, None]
    df = pl.DataFrame([pl.Series("t_ns", vals, dtype=dtype), pl.Series("k", range(len(vals)))])
    got = hs.rows(df)
    want = hs.to_us(df).to_dicts()
    assert [list(d) for d in got] == [list(d) for d in want]
    pack = struct.Struct("<d").pack
    for g, w in zip(got, want, strict=True):
        assert (g["t_us"] is None) == (w["t_us"] is None)
        if w["t_us"] is not None and math.isnan(w["t_us"]):
            assert math.isnan(g["t_us"])
        elif w["t_us"] is not None:
            assert pack(g["t_us"]) == pack(w["t_us"])


@pytest.mark.parametrize(
    "dtype",
    [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.Float64],
)
def test_one_row_in_python_equals_the_query_bit_for_bit(
    dtype: pl.DataType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-row table's ns values converted in Python are the query's doubles bit for bit:
    Polars divides a column of length one exactly (not by the reciprocal's product), however
    the row is held (a frame of one row, the head of a longer one, a literal broadcast to one
    row); the values where the product and the quotient differ, the extremes, inf, nan, -0.0
    and null; rows_of makes no query for them."""
    from opscope.analysis import hotspots as hs

    rng = np.random.default_rng(11)
    if dtype.is_integer():
        info = np.iinfo(np.dtype(str(dtype).lower()))
        kind = np.uint64 if info.min == 0 else np.int64
        pool: list[Any] = rng.integers(
            info.min, info.max, 20_000, endpoint=True, dtype=kind
        ).tolist()
        extra: list[Any] = [int(info.min), int(info.max), 0, None]
    else:
        pool = (rng.standard_normal(20_000) * 10.0 ** rng.integers(-8, 16, 20_000)).tolist()
        extra = [float("inf"), float("-inf"), float("nan"), -0.0, None]
    differ = [v for v in pool if v * (1 / 1000.0) != v / 1000.0][:60]
    assert len(differ) >= 20 or info.max < 2**12  # (small ints: every product is exact)
    pack = struct.Struct("<d").pack
    frames = []
    for v in [*differ, *extra]:
        s = pl.Series("t_ns", [v], dtype=dtype)
        frames += [
            pl.DataFrame([s, pl.Series("k", [1])]),
            pl.DataFrame([s.extend_constant(1, 1), pl.Series("k", [1, 2])]).head(1),
            pl.DataFrame({"k": [1]}).with_columns(pl.lit(v, dtype).alias("t_ns")),
        ]
    calls = count_collect_all(monkeypatch)
    got = hs.rows_of([(df, None) for df in frames])
    assert calls == []
    for df, g in zip(frames, got, strict=True):
        w = hs.to_us(df).to_dicts()
        assert [list(d) for d in g] == [list(d) for d in w]
        gv, wv = g[0]["t_us"], w[0]["t_us"]
        assert (gv is None) == (wv is None)
        if wv is not None and math.isnan(wv):
            assert math.isnan(gv)
        elif wv is not None:
            assert pack(gv) == pack(wv), (df, gv, wv)


def test_time_base_span_of_one_rank_without_a_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """time_base's span on one rank (Series reductions, no query) is the per-rank group-by's:
    the latest end less the earliest start, nulls left out (a null duration, a null start);
    several ranks, or a null rank, take the group-by (a query)."""
    from types import SimpleNamespace

    from helpers.spies import count_queries
    from opscope.analysis import hotspots as hs

    def reference(ev: pl.DataFrame) -> int:
        s = ev.group_by("rank").agg(
            ((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()).alias("span")
        )
        return int(s.get_column("span").sum() or 0)

    def events(rank: list[int | None], ts: list[int | None], dur: list[int | None]) -> Any:
        ev = pl.DataFrame(
            {"rank": rank, "ts_ns": ts, "dur_ns": dur},
            schema={"rank": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64},
        )
        return SimpleNamespace(events=ev, steps=pl.DataFrame())

    one = [
        events([3, 3, 3], [100, 50, 400], [10, None, 7]),
        events([0, 0], [None, 20], [5, 30]),
        events([1], [None], [None]),  # nothing timed: 0, as the group's null span sums
        events([2, 2], [5, 9], [None, None]),
    ]
    several = [
        events([0, 1, 1], [100, 50, 400], [10, 60, 7]),
        events([None, 1], [100, 50], [10, 60]),
    ]
    want = [reference(p.events) for p in one], [reference(p.events) for p in several]
    assert want == ([357, 30, 0, 0], [10 + 357, 10 + 60])
    ran = count_queries(monkeypatch)
    assert [hs.time_base(p)[1] for p in one] == want[0]  # type: ignore[arg-type]
    assert ran == []
    assert [hs.time_base(p)[1] for p in several] == want[1]  # type: ignore[arg-type]
    assert len(ran) == 2


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
        "gpu/tracelens_h100_bert_small.json.gz",
    ],
)
def test_op_times_equal_the_ancestor_pairs_joins(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """op_times over the forest (its columns and device sums in NumPy, the figures beside the
    ops' columns: no query once the forest is built) equals the joins over every ancestor
    pair; _device_self equals the filter and group-by it replaced."""
    from polars.testing import assert_frame_equal

    import opscope
    from helpers.spies import count_queries
    from opscope.analysis import hotspots as hs
    from opscope.analysis import tree

    p = opscope.load(shared_trace(rel), cache=False)
    want = hs.op_times(p, hs.ancestor_pairs(p.events)).sort("id")
    tree.host_forest(p), p.ops, p.kernels  # the shared intermediates, built first
    ran = count_queries(monkeypatch)
    got = hs.op_times(p)
    assert ran == []
    assert_frame_equal(got.sort("id"), want, check_column_order=False)
    assert got.columns == [*hs._OP_COLUMNS, "device_self_ns", "self_ns", "device_ns"]
    dev = (
        p.events.lazy()
        .select("kind", "op_id", "dur_ns")
        .filter(pl.col("kind").is_in(hs.DEVICE_WORK) & pl.col("op_id").is_not_null())
        .group_by("op_id")
        .agg(pl.col("dur_ns").sum().alias("device_self_ns"))
        .rename({"op_id": "id"})
        .sort("id")
        .collect()
    )
    assert_frame_equal(hs._device_self(p.kernels), dev)


def test_per_step_is_run_when_first_read_and_equals_the_definition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The analysis leaves per_step as a plan (its tables' one call holds three or four plans,
    no query of it; the report's terminal and JSON never read it); the first read runs it once,
    the next reads none; its rows are the definition's, computed here in Python from the ops
    and kernels: per (step, what, name) the calls, total and self time, sorted by step, what,
    total time (largest first), name; tables() and scalars() as the fields gave them."""
    from helpers.spies import count_queries
    from opscope.analysis import hotspots as hs

    profile = training(steps=3, layers=2, slow_at=(1, 0), slow_factor=4).profile
    calls = count_collect_all(monkeypatch)
    res = hs.hotspots(profile, Options())
    # the tables' plans (the kernel types' only where a kernel has an operator type), not
    # per_step's beside them
    k = profile.kernels
    tables = 3 if k.get_column("op_type").null_count() == k.height else 4
    assert tables in calls and tables + 1 not in calls
    assert isinstance(res.per_step_plan, pl.LazyFrame)
    ran = count_queries(monkeypatch)
    per = res.per_step
    assert len(ran) == 1
    assert res.per_step is per and len(ran) == 1
    sums: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
    ops = hs.op_times(profile)
    for what, df, self_col in (("op", ops, "self_ns"), ("kernel", profile.kernels, "dur_ns")):
        for r in df.iter_rows(named=True):
            s = sums[(r["step"], what, r["name"])]
            s[0] += 1
            s[1] += r["dur_ns"]
            s[2] += r[self_col]
    want = sorted(
        ((st, name, c, t, sf, what) for (st, what, name), (c, t, sf) in sums.items()),
        key=lambda r: (r[0], r[5], -r[3], r[1]),
    )
    assert per.columns == ["step", "name", "calls", "total_ns", "self_ns", "what"]
    assert per.rows() == want
    assert list(res.tables()) == [
        "ops", "kernels", "op_shapes", "modules", "sources", "per_step", "kernel_types"
    ]  # fmt: skip
    assert res.tables()["per_step"] is per
    assert res.scalars() == {"step_ns": res.step_ns, "span_ns": res.span_ns, "top": 20}
