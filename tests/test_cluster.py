"""Cluster analysis: real gloo runs under torchrun, shared NCCL/HCCL ranks, engines, CLI.

Expected figures are computed here from the raw trace files with the stdlib (json/csv/gzip).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace

SCRIPT = Path(__file__).parent / "scripts" / "cluster_ddp.py"
DELAY_S = 0.06
STEPS = 4
_port = [29500 + os.getpid() % 1000]


def _torchrun(out: Path, slow_rank: int, delay: float, steps: int = STEPS) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    _port[0] += 7
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [
        str(torchrun),
        "--nproc_per_node=2",
        f"--master_port={_port[0]}",
        str(SCRIPT),
        str(out),
        str(slow_rank),
        str(delay),
        str(steps),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in out.glob("rank*.json")) == ["rank0.json", "rank1.json"]
    return out


@pytest.fixture(scope="module")
def slowed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _torchrun(tmp_path_factory.mktemp("slowed"), 1, DELAY_S)


@pytest.fixture(scope="module")
def balanced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _torchrun(tmp_path_factory.mktemp("balanced"), -1, 0.0, steps=6)


def _raw_events(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _ns(us: float) -> int:
    return round(us * 1000)


def _expected_gloo_wait(run: Path) -> dict[int, int]:
    """Pair the i-th gloo:all_reduce of each rank (all happen inside profiled steps)."""
    starts: dict[int, list[tuple[int, int]]] = {}
    for r in (0, 1):
        evs = [e for e in _raw_events(run / f"rank{r}.json") if e["name"] == "gloo:all_reduce"]
        starts[r] = sorted((_ns(e["ts"]), _ns(e["dur"])) for e in evs)
    assert len(starts[0]) == len(starts[1]) == 2 * STEPS or len(starts[0]) == len(starts[1])
    wait = {0: 0, 1: 0}
    for (s0, d0), (s1, d1) in zip(starts[0], starts[1], strict=True):
        m = max(s0, s1)
        wait[0] += min(m - s0, d0)
        wait[1] += min(m - s1, d1)
    return wait


@pytest.mark.slow
@pytest.mark.timing
def test_slowed_rank_is_found(slowed_run: Path) -> None:
    from opscope.cluster import run_cluster

    res = run_cluster(slowed_run, workers=0)
    out = res.to_json()
    assert out["slow_ranks"] == [1]
    ranks = {r["rank"]: r for r in out["ranks"]}
    # Rank 0 waits for rank 1's planted extra work every step.
    assert ranks[0]["wait_us"] >= 0.5 * DELAY_S * 1e6 * STEPS
    assert ranks[1]["wait_us"] < ranks[0]["wait_us"] * 0.5
    # The evidence: rank 1's extra matmuls show as compute.
    ev = out["slow_rank_evidence"][0]
    assert ev["rank"] == 1 and ev["cause"] == "compute"
    assert ranks[1]["compute_us"] > ranks[0]["compute_us"] + 0.3 * DELAY_S * 1e6 * STEPS
    # Wait figures equal an independent pairing of the raw gloo ranges.
    exp = _expected_gloo_wait(slowed_run)
    assert ranks[0]["wait_us"] == pytest.approx(exp[0] / 1000, abs=1e-6)
    assert ranks[1]["wait_us"] == pytest.approx(exp[1] / 1000, abs=1e-6)
    # Per-rank step time: sum of the raw ProfilerStep durations.
    for r in (0, 1):
        raw = [
            e
            for e in _raw_events(slowed_run / f"rank{r}.json")
            if e["name"].startswith("ProfilerStep#")
        ]
        assert ranks[r]["steps"] == len(raw) == STEPS
        assert ranks[r]["step_time_us"] == pytest.approx(
            sum(_ns(e["dur"]) for e in raw) / 1000, abs=1e-3
        )
    gap = out["step_gap"]
    assert [g["step"] for g in gap] == sorted({g["step"] for g in gap}) and len(gap) == STEPS


@pytest.mark.slow
@pytest.mark.timing
def test_balanced_run_waits_equal_the_raw_pairing(balanced_run: Path) -> None:
    """A real balanced run, checked for what the machine's speed cannot change: the ranks, their
    steps and the waits recomputed from the raw gloo ranges. Whether anybody is flagged is the
    machine's doing here (a rank descheduled for a few ms in several of these sub-ms steps is a
    straggler by the rule's own figures, and was flagged in a fresh-clone run); the verdict on
    balanced ranks is pinned by the generated tables below (``test_ranks_late_in_turn_...``)."""
    from opscope.cluster import run_cluster

    out = run_cluster(balanced_run, workers=0).to_json()
    assert len(out["ranks"]) == 2
    assert [r["steps"] for r in out["ranks"]] == [6, 6]
    exp = _expected_gloo_wait(balanced_run)
    got = {r["rank"]: r["wait_us"] for r in out["ranks"]}
    assert got[0] == pytest.approx(exp[0] / 1000, abs=1e-6)
    assert got[1] == pytest.approx(exp[1] / 1000, abs=1e-6)


@pytest.mark.slow
@pytest.mark.timing
def test_process_pool_equals_in_process(slowed_run: Path) -> None:
    from opscope.cluster import run_cluster

    a = run_cluster(slowed_run, workers=0).to_json()
    b = run_cluster(slowed_run, workers=2).to_json()
    assert a == b


@pytest.mark.slow
@pytest.mark.timing
def test_ray_engine_equals_local(slowed_run: Path) -> None:
    pytest.importorskip("ray", reason="ray not installed (extra opscope[ray])")
    from opscope.cluster import run_cluster

    local = run_cluster(slowed_run, workers=0).to_json()
    ray_out = run_cluster(slowed_run, engine="ray", workers=2).to_json()
    assert ray_out.pop("engine") == "ray"
    assert local.pop("engine") == "local"
    assert ray_out == local


# ----------------------------------------------------------------------------- shared traces


def _union(iv: list[tuple[int, int]]) -> int:
    total, end = 0, None
    start = 0
    for s, e in sorted(iv):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def test_hta_nccl_ranks_comm_and_collectives() -> None:
    from opscope.cluster import run_cluster

    d = shared_trace("multi_rank/hta_sampled_128rank_job")
    out = run_cluster(d, workers=0).to_json()
    ranks = {r["rank"]: r for r in out["ranks"]}
    assert sorted(ranks) == [0, 1]
    for r in (0, 1):
        evs = _raw_events(d / f"rank-{r}.json.gz")
        steps = [
            (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            for e in evs
            if e["name"].startswith("ProfilerStep#")
        ]
        nccl = [
            (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            for e in evs
            if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
        ]
        comm = sum(
            _union([(max(s, w0), min(e, w1)) for s, e in nccl if s < w1 and e > w0])
            for w0, w1 in steps
        )
        assert ranks[r]["comm_us"] == pytest.approx(comm / 1000, abs=1e-3)
        assert ranks[r]["step_time_us"] == pytest.approx(
            sum(w1 - w0 for w0, w1 in steps) / 1000, abs=1e-3
        )
        colls = [c for c in out["collectives"] if c["rank"] == r]
        assert sum(c["calls"] for c in colls) == len(nccl)
        assert sum(c["dur_us"] for c in colls) == pytest.approx(
            sum(e - s for s, e in nccl) / 1000, abs=1e-3
        )


def test_nccl_bytes_and_groups_from_kineto_args(tmp_path: Path) -> None:
    from opscope.cluster import run_cluster

    src = shared_trace("gpu/hta_nccl_a100_rank0of2.json.gz")
    d = tmp_path / "run"
    d.mkdir()
    (d / "rank0.json.gz").symlink_to(src)
    size = {"Float": 4, "Long": 8, "Half": 2, "BFloat16": 2}
    exp: dict[str, list[int]] = {}
    for e in _raw_events(src):
        if e.get("cat") == "kernel" and "nccl" in e["name"].lower():
            a = e["args"]
            got = exp.setdefault(a["Collective name"], [0, 0])
            got[0] += 1
            got[1] += int(a["In msg nelems"]) * size[a["dtype"]]
    out = run_cluster(d, workers=0).to_json()
    assert {c["collective"]: [c["calls"], c["bytes"]] for c in out["collectives"]} == exp
    # One rank: nothing to align, nobody waits or is slow.
    assert out["ranks"][0]["wait_us"] == 0 and out["slow_ranks"] == []


def _ascend_expect(out_dir: Path) -> tuple[float, float]:
    with open(out_dir / "step_trace_time.csv", newline="") as f:
        comm = sum(float(row["Communication"]) for row in csv.DictReader(f))
    with open(out_dir / "kernel_details.csv", newline="") as f:
        hccl = sum(
            float(row["Duration(us)"])
            for row in csv.DictReader(f)
            if row["Accelerator Core"] == "HCCL"
        )
    return comm, hccl


@pytest.mark.parametrize("layout", ["small_two_rank", "alexnet_level1"])
def test_ascend_ranks_comm_totals(layout: str, tmp_path: Path) -> None:
    from opscope.cluster import run_cluster

    if layout == "small_two_rank":
        d = shared_trace("ascend/small_two_rank")
        outs = {
            0: d / "test_rank_0" / "ASCEND_PROFILER_OUTPUT",
            1: d / "test_rank_1" / "ASCEND_PROFILER_OUTPUT",
        }
    else:
        base = shared_trace("ascend/alexnet_ddp_910b")
        d = tmp_path / "run"
        d.mkdir()
        outs = {}
        for r in (0, 1):
            (d / f"rank{r}_ascend_pt").symlink_to(base / f"level1_rank{r}_ascend_pt")
            outs[r] = base / f"level1_rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out = run_cluster(d, workers=0).to_json()
    ranks = {r["rank"]: r for r in out["ranks"]}
    assert sorted(ranks) == [0, 1]
    for r, od in outs.items():
        comm, hccl = _ascend_expect(od)
        assert ranks[r]["comm_us"] == pytest.approx(comm, abs=1e-2)
        dur = sum(c["dur_us"] for c in out["collectives"] if c["rank"] == r)
        assert dur == pytest.approx(hccl, abs=1e-2)


def _synthetic(starts: dict[int, list[float]], dur_us: float = 5000.0) -> Any:
    """Per-rank tables with one all-reduce per step at ``starts[rank][step]`` µs after the
    step's start; every call ends at the same time (the last arrival + 100 µs)."""
    from opscope.analysis.cluster import aggregate

    steps, colls = [], []
    n = len(next(iter(starts.values())))
    for s in range(n):
        end = max(v[s] for v in starts.values()) + 100.0
        for r, v in starts.items():
            t0 = s * 1_000_000
            steps.append(
                {
                    "rank": r,
                    "step": s,
                    "ts_ns": t0 * 1000,
                    "dur_ns": int(dur_us * 1000),
                    "compute_ns": int(v[s] * 1000),
                }
            )
            colls.append(_allreduce(r, s, 0, t0 + v[s], t0 + end))
    return aggregate(pl.DataFrame(steps), pl.DataFrame(colls))


def _allreduce(rank: int, step: int, seq: int, start_us: float, end_us: float) -> dict[str, Any]:
    """One rank's row of an all-reduce (group "0") entered at ``start_us``, left at ``end_us``."""
    return {
        "rank": rank,
        "step": step,
        "collective": "allreduce",
        "name": "k",
        "group": "0",
        "seq": seq,
        "start_ns": int(start_us * 1000),
        "dur_ns": int((end_us - start_us) * 1000),
    }


def test_two_stragglers_of_four_are_both_found() -> None:
    # Ranks 2 and 3 enter every all-reduce ~2 ms after ranks 0 and 1 (± a few µs).
    starts = {
        0: [0.0, 3, 1, 0],
        1: [2.0, 0, 0, 4],
        2: [2000.0, 2004, 2001, 2000],
        3: [2003.0, 2000, 2005, 2002],
    }
    out = _synthetic(starts).to_json()
    assert out["slow_ranks"] == [2, 3]
    waits = {r["rank"]: r["wait_us"] for r in out["ranks"]}
    for r, v in starts.items():
        exp = sum(max(starts[q][s] for q in starts) - v[s] for s in range(4))
        assert waits[r] == pytest.approx(exp, abs=1e-3)


def test_ties_do_not_dilute_the_straggler() -> None:
    """Per 50 ms step two all-reduces: at the first rank 0 waits 3 ms for rank 1; at the second
    they arrive together, rank 0 last by 200 µs (< 1 % of the step). Rank 1 is the straggler:
    last at every collective where somebody waited, though last at only half of all of them."""
    from opscope.analysis.cluster import MIN_COLLECTIVE_WAIT_SHARE, aggregate

    step_us = 50_000.0
    assert 200.0 < MIN_COLLECTIVE_WAIT_SHARE * step_us < 3000.0
    arrive = {0: (0.0, 4000.0), 1: (3000.0, 3800.0)}  # (first, second) all-reduce, µs
    steps, colls = [], []
    for s in range(4):
        t0 = s * 1_000_000
        for r, (a, b) in arrive.items():
            steps.append({"rank": r, "step": s, "ts_ns": t0 * 1000, "dur_ns": int(step_us * 1000)})
            for seq, (at, end) in enumerate(((a, 3100.0), (b, 4100.0))):
                colls.append(_allreduce(r, s, seq, t0 + at, t0 + end))
    out = aggregate(pl.DataFrame(steps), pl.DataFrame(colls)).to_json()
    assert out["slow_ranks"] == [1]
    share = {r["rank"]: r["last_arrival_share"] for r in out["ranks"]}
    assert share == {0: 0.0, 1: 1.0}
    waits = {r["rank"]: r["wait_us"] for r in out["ranks"]}
    assert waits == {0: pytest.approx(4 * 3000.0), 1: pytest.approx(4 * 200.0)}


def test_ranks_late_in_turn_are_not_stragglers() -> None:
    """Two balanced ranks on a loaded machine: each is descheduled in turn, 4 ms late at every
    other all-reduce (its peer waits 4 ms: well above MIN_PEER_WAIT_US). Each is last at half of
    them (below LAST_ARRIVAL_SHARE) and waits as long as its peer: nobody is a straggler."""
    starts = {0: [4000.0, 0, 4000, 0, 4000, 0], 1: [0.0, 4000, 0, 4000, 0, 4000]}
    out = _synthetic(starts).to_json()
    assert out["slow_ranks"] == []
    share = {r["rank"]: r["last_arrival_share"] for r in out["ranks"]}
    assert share == {0: 0.5, 1: 0.5}
    assert {r["rank"]: r["wait_us"] for r in out["ranks"]} == {
        0: pytest.approx(3 * 4000.0),
        1: pytest.approx(3 * 4000.0),
    }


def test_jitter_is_not_a_straggler() -> None:
    # Arrivals differ by at most 300 µs per step, below MIN_PEER_WAIT_US: nobody is slow.
    starts = {0: [0.0, 300, 0, 0], 1: [250.0, 0, 280, 290]}
    assert _synthetic(starts).to_json()["slow_ranks"] == []


def test_slow_link_below_transport_median() -> None:
    from opscope.analysis.cluster import MIN_LINK_BYTES, aggregate

    mb = MIN_LINK_BYTES * 4
    # (src, dst, transport, bytes, ns): HCCS at 10 GB/s except 1->2 at 2 GB/s; RDMA at 20 GB/s.
    spec = [
        (0, 1, "HCCS", mb, mb // 10),
        (1, 0, "HCCS", mb, mb // 10),
        (1, 2, "HCCS", mb, mb // 2),
        (2, 1, "HCCS", mb, mb // 10),
        (0, 2, "RDMA", mb, mb // 20),
        (2, 0, "RDMA", mb, mb // 20),
        (3, 3, "LOCAL", mb, 1),
        (0, 3, "HCCS", 10, 1000),
    ]
    links = pl.DataFrame(
        [
            {
                "rank": s,
                "step": 1,
                "op_name": "hcom_allReduce_",
                "group": "g",
                "src_rank": s,
                "dst_rank": t,
                "transport": tr,
                "size_bytes": b,
                "time_ns": ns,
                "bandwidth_gbps": b / ns,
            }
            for s, t, tr, b, ns in spec
        ]
    )
    steps = pl.DataFrame({"rank": [0], "step": [1], "dur_ns": [10]})
    res = aggregate(steps, pl.DataFrame(), links)
    slow = res.to_json()["slow_links"]
    assert [(x["src_rank"], x["dst_rank"], x["transport"]) for x in slow] == [(1, 2, "HCCS")]
    assert slow[0]["ratio"] == pytest.approx((mb / (mb // 2)) / (mb / (mb // 10)), rel=1e-9)


# ----------------------------------------------------------------------------- CLI


def test_cli_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opscope.cli.app import main

    d = shared_trace("ascend/small_two_rank")
    assert main(["cluster", str(d), "--workers", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "local"
    assert {"rank", "step_time_us", "compute_us", "comm_us", "wait_us"} <= set(out["ranks"][0])
    assert isinstance(out["slow_ranks"], list) and "slow_links" in out and "step_gap" in out
    assert main(["cluster", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["cluster", str(d), "--engine", "spark"]) == 2
    assert "unknown engine" in capsys.readouterr().err
    assert main(["cluster", str(d), "--workers", "0", "--compare-ranks", "0", "7"]) == 2
    assert "no rank 7" in capsys.readouterr().err


def test_cli_compare_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    from opscope.cli.app import main

    d = shared_trace("multi_rank/hta_sampled_128rank_job")
    assert main(["cluster", str(d), "--workers", "0", "--json", "--compare-ranks", "0", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    st = out["compare_ranks"]["step_time"]
    med = []
    for r in (0, 1):
        durs = sorted(
            _ns(e["dur"])
            for e in _raw_events(d / f"rank-{r}.json.gz")
            if e["name"].startswith("ProfilerStep#")
        )
        n = len(durs)
        med.append((durs[(n - 1) // 2] + durs[n // 2]) / 2 / 1000)
    assert st["before_us"] == pytest.approx(med[0]) and st["after_us"] == pytest.approx(med[1])


@pytest.mark.parametrize("job", ["multi_rank/hta_sampled_128rank_job", "ascend/small_two_rank"])
def test_json_microseconds_are_the_quotients_of_the_tables_ns(job: str) -> None:
    """A two-rank job's JSON µs figures are each table's integer ns divided by 1000 once
    (plain Python over the rows, equal to the last bit): the ranks' times and the collectives'
    summed durations and waits per (rank, collective), not a product by the reciprocal."""
    from collections import defaultdict

    from opscope.cluster import run_cluster

    res = run_cluster(shared_trace(job), workers=0)
    out = res.to_json()
    times = ("step_time", "compute", "comm", "comm_not_overlapped", "idle", "wait")
    want_ranks = [
        {f"{c}_us": None if r[f"{c}_ns"] is None else r[f"{c}_ns"] / 1000.0 for c in times}
        for r in res.ranks.to_dicts()
    ]
    assert [{k: r[k] for k in want_ranks[0]} for r in out["ranks"]] == want_ranks
    sums: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for c in res.collectives.to_dicts():
        s = sums[(c["rank"], c["collective"])]
        s[0] += 1
        s[1] += c["dur_ns"] or 0
        s[2] += c["wait_ns"] or 0
    assert len(sums) >= 2
    got = {(c["rank"], c["collective"]): c for c in out["collectives"]}
    assert sorted(got) == sorted(sums)
    for key, (calls, dur, wait) in sums.items():
        assert got[key]["calls"] == calls
        assert got[key]["dur_us"] == dur / 1000.0 and got[key]["wait_us"] == wait / 1000.0
    if job.startswith("ascend"):  # a test that can fail: values whose product differs
        every = [v for s in sums.values() for v in s[1:]]
        every += [r[f"{c}_ns"] for r in res.ranks.to_dicts() for c in times if r[f"{c}_ns"]]
        assert any(v * (1 / 1000.0) != v / 1000.0 for v in every)
