"""Step breakdown: unions on planted intervals; Ascend figures equal step_trace_time.csv."""

from __future__ import annotations

import csv

import pytest

import opscope.analysis  # noqa: F401
from conftest import shared_trace
from helpers.synth import Builder
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
        assert r["host_bound_ns"] == 350_000  # idle minus the data loading (0..100)
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
    pytest.importorskip("opscope.ingest.ascend", reason="Ascend reader not importable")
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
