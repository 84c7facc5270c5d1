"""The cluster engines agree: Ray tasks, the local process pool, the in-process loop and the
registered in-memory analysis give the same figures, and a rank that fails is skipped by each.

Inputs: the shared 128-rank job's two sampled ranks (skipped when absent) and six ranks written
by ``benchmarks/cluster_scale.py``'s generator (one NCCL all-reduce per step, rank 5 enters each
one 2 ms late) plus a seventh rank file cut short. The generated ranks' waits are recomputed
here from the raw JSON (plain Python: latest start over the ranks − own start, capped at the
call's duration), so the engines are checked against an independent reference, not only
against each other. A few ranks only: the 1,000-rank run is the benchmark, not a test.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.cluster import cluster
from opscope.analysis.registry import Options
from opscope.cluster import run_cluster

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
cluster_scale: Any = importlib.import_module("cluster_scale")  # the benchmark's generator

RANKS = 6
BAD = RANKS  # the rank number of the cut file


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(good, with_bad): six generated ranks; the same plus ``rank-6.json`` cut short."""
    good = tmp_path_factory.mktemp("gen_good")
    cluster_scale.make_ranks(good, RANKS, 0.4)
    bad = tmp_path_factory.mktemp("gen_bad")
    for f in good.iterdir():
        shutil.copy(f, bad / f.name)
    text = (good / "rank-0.json").read_text()
    cut = text.replace('"rank": 0, "world_size"', f'"rank": {BAD}, "world_size"', 1)
    (bad / f"rank-{BAD}.json").write_text(cut[: len(cut) // 2])
    return good, bad


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """One local Ray instance for the module (run_cluster uses it and leaves it running)."""
    ray = pytest.importorskip("ray", reason="ray not installed (extra opscope[ray])")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _no_engine(out: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if k != "engine"}


def _raw_waits(folder: Path) -> dict[int, float]:
    """Σ wait per rank (µs) over the NCCL kernels, paired by their order on each rank."""
    starts: dict[int, list[tuple[float, float]]] = {}
    for f in sorted(folder.glob("rank-*.json")):
        doc = json.loads(f.read_text())
        rank = doc["distributedInfo"]["rank"]
        starts[rank] = sorted(
            (e["ts"], e["dur"])
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and e["name"] == cluster_scale.NCCL
        )
    calls = {len(v) for v in starts.values()}
    assert len(calls) == 1 and calls.pop() >= 2, "every rank has the same all-reduces"
    waits = dict.fromkeys(starts, 0.0)
    for i in range(len(starts[0])):
        latest = max(s[i][0] for s in starts.values())
        for r, s in starts.items():
            waits[r] += min(latest - s[i][0], s[i][1])
    return waits


def test_generated_ranks_engines_equal_raw_waits(
    generated: tuple[Path, Path], ray_local: None
) -> None:
    good, bad = generated
    want = _raw_waits(good)
    ref = run_cluster(good, workers=0, cache=False)
    got = {r["rank"]: r["wait_us"] for r in ref.to_json()["ranks"]}
    assert sorted(got) == list(range(RANKS))
    for r in range(RANKS):
        assert got[r] == pytest.approx(want[r], abs=1e-3)
    # The planted straggler: 2 ms late at every all-reduce, everybody else waits for it.
    assert ref.to_json()["slow_ranks"] == [cluster_scale.SLOW_RANK]
    assert got[cluster_scale.SLOW_RANK] == pytest.approx(0.0, abs=1e-3)

    # With a rank cut short: every engine skips it, names it, and the rest is unchanged.
    runs = {
        "inline": run_cluster(bad, workers=0, cache=False),
        "pool": run_cluster(bad, workers=2, cache=False),
        "ray": run_cluster(bad, engine="ray", workers=2, cache=False),
    }
    for name, res in runs.items():
        assert [r for r, _ in res.failed] == [BAD], name
        assert "rank-6.json" in res.failed[0][1], name
        out = res.to_json()
        assert out["engine"] == ("ray" if name == "ray" else "local")
        assert _no_engine(out) == {**_no_engine(ref.to_json()), "failed_ranks": out["failed_ranks"]}


def _in_memory(folder: Path) -> dict[str, Any]:
    """The registered analysis on the multi-rank Profile loaded whole in this process."""
    import opscope

    return cluster(opscope.load(folder, cache=False), Options()).to_json()


def test_shared_ranks_every_engine_equals_the_in_memory_analysis(
    tmp_path: Path, ray_local: None
) -> None:
    src = shared_trace("multi_rank/hta_sampled_128rank_job")
    want = _no_engine(_in_memory(src))
    assert len(want["ranks"]) == 2 and want["collectives"]
    for engine, workers in (("local", 0), ("local", 2), ("ray", 2)):
        res = run_cluster(src, engine=engine, workers=workers, cache=False)
        assert res.failed == ()
        assert _no_engine(res.to_json()) == want, (engine, workers)


def test_generated_ranks_in_memory_equals_engines(
    generated: tuple[Path, Path], ray_local: None
) -> None:
    good, _ = generated
    want = _no_engine(_in_memory(good))
    ray_res = run_cluster(good, engine="ray", workers=2, cache=False)
    assert _no_engine(ray_res.to_json()) == want
    # The summaries themselves, table by table, not only the JSON rendering.
    local = run_cluster(good, workers=2, cache=False)
    for name in ("ranks", "collectives"):
        a, b = getattr(ray_res, name), getattr(local, name)
        assert isinstance(a, pl.DataFrame) and a.height > 0
        assert a.sort(a.columns).equals(b.sort(b.columns)), name


def test_progress_counts_every_rank_once(generated: tuple[Path, Path]) -> None:
    _, bad = generated
    seen: list[tuple[int, int]] = []
    run_cluster(bad, workers=2, cache=False, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(i, RANKS + 1) for i in range(1, RANKS + 2)]


def test_cli_ray_engine_and_address_errors(
    generated: tuple[Path, Path], ray_local: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from opscope.cli.app import main

    _, bad = generated
    assert main(["cluster", str(bad), "--engine", "ray", "--workers", "2", "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["engine"] == "ray" and [f["rank"] for f in out["failed_ranks"]] == [BAD]
    assert f"note: rank {BAD} skipped:" in cap.err
    assert main(["cluster", str(bad), "--ray-address", "auto", "--json"]) == 2
    err = capsys.readouterr().err
    assert "--ray-address needs --engine ray" in err and "Traceback" not in err
    # A cluster address nobody listens on: one line, exit 2, not Ray's minutes of retries.
    assert main(["cluster", str(bad), "--engine", "ray", "--ray-address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in err and "Traceback" not in err
