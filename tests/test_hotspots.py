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
from helpers.spies import count_collect_all, count_queries
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


def _quotient(v: Any) -> Any:
    """The definition of a µs value, in plain Python: the ns value as a double, divided once."""
    if v is None:
        return None
    if isinstance(v, list):
        return [_quotient(x) for x in v]
    return float(v) / 1000.0


def _expected_rows(df: pl.DataFrame, top: int | None) -> list[dict[str, Any]]:
    """to_us + to_dicts in plain Python over the rows: each ``*_ns`` key becomes its ``*_us``
    key holding the quotient, in place of an existing ``*_us`` key or else at the end."""
    head = df.to_dicts()[: len(df) if top is None else top]
    out = []
    for row in head:
        ns = {k[:-3] + "_us": _quotient(v) for k, v in row.items() if k.endswith("_ns")}
        kept = {k: ns.get(k, v) for k, v in row.items() if not k.endswith("_ns")}
        out.append({**kept, **{k: v for k, v in ns.items() if k not in kept}})
    return out


def _same_doubles(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [list(d) for d in got] == [list(d) for d in want]
    pack = struct.Struct("<d").pack
    for g, w in zip(got, want, strict=True):
        for k, wv in w.items():
            gv = g[k]
            if isinstance(wv, float) and math.isnan(wv):
                assert isinstance(gv, float) and math.isnan(gv), k
            elif isinstance(wv, float):
                assert isinstance(gv, float) and pack(gv) == pack(wv), (k, gv, wv)
            else:
                assert gv == wv, k


def test_rows_of_are_the_quotients_without_a_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """rows_of gives, table by table, each ``*_ns`` value divided by 1000 (plain Python's
    quotient, bit for bit), keys in to_us' order: ns columns of several chunks, a replaced
    ``*_us``, no ns column, an empty table, ``top`` and none, a Float32 column (as a double),
    a constant column held as one scalar, a one-row table, a list column; and no query.
    9 ns is 0.009 µs (Polars' ``col / 1000.0`` gives 0.009000000000000001: its product by the
    reciprocal)."""
    from opscope.analysis import hotspots as hs

    chunked = pl.concat(
        [pl.DataFrame({"name": ["a", "b"], "total_ns": [18865, 9]}),
         pl.DataFrame({"name": ["c"], "total_ns": [1]})],
        rechunk=False,
    )  # fmt: skip
    v = 16076072.670276158
    tables = [
        (chunked, 2),
        (chunked, None),
        (pl.DataFrame({"x_us": [1.0], "x_ns": [2500], "k": [None]}), 20),
        (pl.DataFrame({"name": ["a"]}), None),
        (pl.DataFrame(schema={"total_ns": pl.Int64}), 5),
        (pl.DataFrame({"mean_ns": [2.5, None], "n_ns": pl.Series([3, 4], dtype=pl.UInt32)}), 1),
        (pl.DataFrame({"a_ns": pl.Series([1.5, None], dtype=pl.Float32), "b": [1, 2]}), None),
        (pl.DataFrame({"k": [1, 2]}).with_columns(pl.lit(v).alias("std_ns")), None),
        (pl.DataFrame({"k": [1, 2]}).select(pl.lit(v).alias("std_ns"), pl.len()), None),
        (pl.DataFrame({"d_ns": [[9, None, 13], None, []], "k": [1, 2, 3]}), None),
    ]
    queries = count_queries(monkeypatch)
    got = hs.rows_of(tables)
    assert queries == []
    want = [_expected_rows(df, top) for df, top in tables]
    assert _ordered(got) == _ordered(want)
    for g, w in zip(got, want, strict=True):
        _same_doubles(g, w)
    assert got[1][1]["total_us"] == 0.009
    assert got[-1][0]["d_us"] == [0.009, None, 0.013]
    assert _ordered([hs.rows(df, top) for df, top in tables]) == _ordered(want)
    assert _ordered([hs.to_us(df).to_dicts() for df, _ in tables]) == _ordered(
        [_expected_rows(df, None) for df, _ in tables]
    )


def test_rows_of_runs_plans_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table given as a plan (cluster.to_json's rank rows and collectives' sums) is run in
    rows_of's one collect_all, its rows as collecting it eagerly gives them (its ``top`` first
    rows; no ``*_ns`` conversion), in its place among the tables converted without a query."""
    from opscope.analysis import hotspots as hs
    from opscope.analysis import tree

    df = pl.DataFrame({"rank": [1, 0, 1], "dur_ns": [3, 5, 7]})
    plan = df.lazy().group_by("rank").agg(pl.col("dur_ns").sum(), pl.len()).sort("rank")
    py = pl.DataFrame({"name": ["a", "b"], "total_ns": [18865, 7]})
    calls = count_collect_all(monkeypatch)
    got = hs.rows_of([(plan, None), (py, None), (plan, 1), (df.lazy(), None)])
    assert calls == [3]
    assert got == [
        tree.collect(plan).to_dicts(),
        _expected_rows(py, None),
        tree.collect(plan).head(1).to_dicts(),
        df.to_dicts(),
    ]
    calls.clear()
    assert hs.rows_of([(py, 1)]) == [_expected_rows(py, 1)]
    assert calls == []


@pytest.mark.parametrize(
    "dtype",
    [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.Float64],
)
def test_to_us_is_the_quotient_bit_for_bit(dtype: pl.DataType) -> None:
    """Over random values of every integer dtype (its extremes too) and Float64 (every
    magnitude, inf, nan, -0.0), with nulls, each µs value is plain Python's ``float(v) / 1000``
    bit for bit, whether the column is held as values or as one broadcast scalar; and among the
    values are many where the reciprocal's product differs (a test that can fail)."""
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
    differ = [v for v in vals if v is not None and float(v) * (1 / 1000.0) != float(v) / 1000.0]
    assert len(differ) >= 20 or dtype in (pl.Int8, pl.UInt8)  # (small ints: every product exact)
    df = pl.DataFrame([pl.Series("t_ns", vals, dtype=dtype), pl.Series("k", range(len(vals)))])
    _same_doubles(hs.rows(df), _expected_rows(df, None))
    for v in [*differ[:20], None]:
        scalar = pl.DataFrame({"k": [1, 2]}).with_columns(pl.lit(v, dtype).alias("t_ns"))
        _same_doubles(hs.to_us(scalar).to_dicts(), _expected_rows(scalar, None))


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
    assert not isinstance(res.per_step_plan, pl.DataFrame)  # (a plan, or its maker)
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


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    ],
)
def test_report_rows_are_the_quotients_on_real_traces(rel: str) -> None:
    """On real traces, every ``*_us`` value of the hotspots' JSON tables is its row's ``*_ns``
    divided by 1000 in plain Python, bit for bit; and some of them are values the reciprocal's
    product would have printed otherwise."""
    import opscope
    from opscope.analysis import hotspots as hs

    res = run("hotspots", opscope.load(shared_trace(rel), cache=False), Options(top=1000))
    moved = 0
    for df in res.tables().values():
        got = hs.rows(df)
        _same_doubles(got, _expected_rows(df, None))
        for row in df.to_dicts():
            moved += sum(
                1
                for k, v in row.items()
                if k.endswith("_ns") and v is not None and v * (1 / 1000.0) != v / 1000.0
            )
    assert moved > 0
