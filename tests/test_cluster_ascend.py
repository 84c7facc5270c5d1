"""Ascend cluster figures (msprof-analyze's terms), the communication matrix, stage imbalance,
slow links on planted inputs, the HTML page, and the Ascend timeline names.

Expected figures are recomputed from the raw JSON with plain Python, never copied from opscope.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace

_OUT = "ASCEND_PROFILER_OUTPUT"


def _rank_dirs(run: Path) -> dict[int, Path]:
    from opscope.ingest.multirank import list_ranks

    return {r: p for r, p, _ in list_ranks(run)}


def _ops(path: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(step, kind, op key, value) of a communication(_matrix).json, "Total Op Info" left out."""
    d = json.loads(path.read_text())
    return [
        (step, kind, op, v)
        for step, kinds in d.items()
        for kind, ops in kinds.items()
        for op, v in ops.items()
        if op != "Total Op Info"
    ]


@pytest.fixture(scope="module")
def small_two_rank() -> Any:
    from opscope.cluster import run_cluster

    d = shared_trace("ascend/small_two_rank")
    return d, run_cluster(d, workers=0, cache=False)


def test_per_rank_communication_and_wait_equal_communication_json(small_two_rank: Any) -> None:
    d, res = small_two_rank
    got = {r["rank"]: r for r in res.to_json()["msprof_ranks"]}
    dirs = _rank_dirs(d)
    assert sorted(got) == sorted(dirs) == [0, 1]
    for rank, p in dirs.items():
        ops = _ops(p / _OUT / "communication.json")
        info = [v["Communication Time Info"] for *_, v in ops]
        elapse_us = sum(i["Elapse Time(ms)"] for i in info) * 1000
        wait_us = sum(i["Wait Time(ms)"] for i in info) * 1000
        transit_us = sum(i["Transit Time(ms)"] for i in info) * 1000
        # opscope keeps ns integers: at most 1 ns of rounding per op.
        tol = len(info) * 1e-3
        assert got[rank]["hccl_ops"] == len(info)
        assert got[rank]["hccl_elapse_us"] == pytest.approx(elapse_us, abs=tol)
        assert got[rank]["hccl_wait_us"] == pytest.approx(wait_us, abs=tol)
        assert got[rank]["hccl_transit_us"] == pytest.approx(transit_us, abs=tol)
        assert wait_us > 0
        # Computing / Communication / Free are step_trace_time.csv's (msprof-analyze's) figures.
        head, *rows = (p / _OUT / "step_trace_time.csv").read_text().splitlines()
        cols = head.split(",")
        vals = [dict(zip(cols, r.split(","), strict=True)) for r in rows]
        for ours, theirs in (
            ("computing_us", "Computing"),
            ("communication_us", "Communication"),
            ("communication_not_overlapped_us", "Communication(Not Overlapped)"),
            ("free_us", "Free"),
        ):
            assert got[rank][ours] == pytest.approx(sum(float(v[theirs]) for v in vals), abs=0.01)


def test_matrix_bytes_per_link_equal_the_json_rows(small_two_rank: Any) -> None:
    d, res = small_two_rank
    # Every (step, op, link, transport) once (both ends may write it), self links left out.
    # This run has no parallel_group_info and only 2 of its ranks: a group's index i is the
    # rank that wrote the self link "i-i" in it; an index no rank claims is taken as written
    # (the world group), unless a profiled rank has that number but is not the group's member
    # i (it wrote no "i-i" there): then the end is unknown (-1).
    ranks = _rank_dirs(d)
    files = {r: _ops(p / _OUT / "communication_matrix.json") for r, p in sorted(ranks.items())}
    member = {
        (op.partition("@")[2], int(pair.split("-")[0])): r
        for r, ops in files.items()
        for _, _, op, links in ops
        for pair in links
        if pair.split("-")[0] == pair.split("-")[1]
    }

    def end(group: str, i: int) -> int:
        if (group, i) in member:
            return member[(group, i)]
        return -1 if i in ranks else i

    seen: set[tuple[str, str, str, str, str]] = set()
    want: dict[tuple[int, int, str], int] = {}
    for ops in files.values():
        for step, _kind, op, links in ops:
            name, _, group = op.partition("@")
            for pair, v in links.items():
                key = (step, name, group, pair, v["Transport Type"])
                src, dst = (int(x) for x in pair.split("-"))
                if key in seen or src == dst:
                    continue
                seen.add(key)
                k = (end(group, src), end(group, dst), v["Transport Type"])
                want[k] = want.get(k, 0) + round(v["Transit Size(MB)"] * 1_000_000)
    assert (0, -1, "RDMA") in want and (1, -1, "RDMA") in want
    got = {(m["src_rank"], m["dst_rank"], m["transport"]): m for m in res.to_json()["matrix"]}
    assert set(got) == set(want)
    assert len(want) >= 5
    for k, b in want.items():
        assert got[k]["size_bytes"] == pytest.approx(b, abs=len(seen)), k
        assert got[k]["bandwidth_gbps"] == pytest.approx(
            got[k]["size_bytes"] / (got[k]["time_us"] * 1000), rel=1e-6
        )


def _steps(compute_us: dict[int, float]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "rank": r,
                "step": 1,
                "ts_ns": 0,
                "dur_ns": 200_000_000,
                "compute_ns": int(c * 1000),
                "communication_ns": 0,
                "communication_not_overlapped_ns": 0,
                "idle_ns": 0,
            }
            for r, c in compute_us.items()
        ]
    )


def _no_colls() -> pl.DataFrame:
    from opscope.analysis.cluster import COLLECTIVE_COLUMNS

    return pl.DataFrame(schema=COLLECTIVE_COLUMNS)


def test_stage_imbalance_on_planted_stages() -> None:
    from opscope.analysis.cluster import aggregate
    from opscope.analysis.cluster_ascend import STAGE_IMBALANCE

    # 8 ranks, 4 pipeline stages of 2 ranks; stage 3 computes 25 % more, stage 1 only 5 %.
    per_stage = {0: 100_000.0, 1: 105_000.0, 2: 100_000.0, 3: 125_000.0}
    stage_of = {r: r // 2 for r in range(8)}
    steps = _steps({r: per_stage[stage_of[r]] for r in range(8)})
    stages = pl.DataFrame(
        [
            {
                "rank": r,
                "pp_stage": s,
                "pp_size": 4,
                "pp_group": json.dumps([r % 2 + 2 * i for i in range(4)]),
            }
            for r, s in stage_of.items()
        ]
    )
    res = aggregate(steps, _no_colls(), stages=stages)
    out = res.to_json()
    rows = {r["pp_stage"]: r for r in out["stage_imbalance"]}
    for s, c in per_stage.items():
        med = statistics.median(v for k, v in per_stage.items() if k != s)
        assert rows[s]["compute_us"] == pytest.approx(c)
        assert rows[s]["others_median_us"] == pytest.approx(med)
        assert rows[s]["excess"] == pytest.approx((c - med) / med)
        assert rows[s]["slow"] == ((c - med) / med >= STAGE_IMBALANCE)
        assert rows[s]["ranks"] == f"{2 * s},{2 * s + 1}"
    assert out["slow_stages"] == [3]


def test_no_stages_without_metadata(tmp_path: Path) -> None:
    from opscope.analysis.cluster import aggregate
    from opscope.analysis.cluster_ascend import read_stages

    assert read_stages(tmp_path, 0).height == 0
    (tmp_path / "profiler_metadata.json").write_text("{not json")
    assert read_stages(tmp_path, 0).height == 0
    res = aggregate(_steps({0: 1.0, 1: 2.0}), _no_colls())
    assert res.to_json()["stage_imbalance"] == [] and res.to_json()["slow_stages"] == []


def test_read_stages_from_parallel_group_info(tmp_path: Path) -> None:
    from opscope.analysis.cluster_ascend import read_stages

    md = {
        "parallel_group_info": {
            "g0": {"group_name": "default_group", "group_rank": 3, "global_ranks": [0, 1, 2, 3]},
            "g1": {"group_name": "tp", "group_rank": 1, "global_ranks": [2, 3]},
            "g2": {"group_name": "pp", "group_rank": 1, "global_ranks": [1, 3]},
        }
    }
    (tmp_path / _OUT).mkdir()
    (tmp_path / "profiler_metadata.json").write_text(json.dumps(md))
    st = read_stages(tmp_path / _OUT, 3).to_dicts()
    assert st == [{"rank": 3, "pp_stage": 1, "pp_size": 2, "pp_group": "[1, 3]"}]


def _link(src: int, dst: int, transport: str, gbps: float, op: str = "allreduce") -> dict[str, Any]:
    size = 64 << 20
    return {
        "rank": src,
        "step": 1,
        "op_name": op,
        "group": "g",
        "src_rank": src,
        "dst_rank": dst,
        "transport": transport,
        "size_bytes": size,
        "time_ns": round(size / gbps),
        "bandwidth_gbps": gbps,
    }


def test_slow_link_per_transport_on_planted_links() -> None:
    from opscope.analysis.cluster import SLOW_LINK_RATIO, aggregate

    # HCCS: one link at a quarter of its peers; RDMA: all within 10 %; one HCCS link at 12 GB/s
    # (60 % of the HCCS median) is not slow. Each transport against its own median.
    hccs = {(0, 1): 20.0, (0, 2): 20.0, (0, 3): 12.0, (1, 2): 20.0, (2, 3): 5.0}
    rdma = {(0, 8): 24.0, (1, 9): 25.0, (2, 10): 22.0}
    links = pl.DataFrame(
        [_link(s, d, "HCCS", g) for (s, d), g in hccs.items()]
        + [_link(s, d, "RDMA", g) for (s, d), g in rdma.items()]
        # The other end reports the same link: counted once.
        + [_link(2, 3, "HCCS", 5.0) | {"rank": 3}]
    )
    res = aggregate(_steps(dict.fromkeys(range(4), 1.0)), _no_colls(), links)
    slow = res.to_json()["slow_links"]
    want = []
    for tr, bws in (("HCCS", hccs), ("RDMA", rdma)):
        size = 64 << 20
        real = {k: size / round(size / g) for k, g in bws.items()}
        med = statistics.median(real.values())
        want += [
            (k[0], k[1], tr, real[k] / med) for k in sorted(real) if real[k] < SLOW_LINK_RATIO * med
        ]
    assert [(s["src_rank"], s["dst_rank"], s["transport"]) for s in slow] == [w[:3] for w in want]
    assert want == [(2, 3, "HCCS", pytest.approx(0.25, rel=1e-3))]
    assert slow[0]["ratio"] == pytest.approx(want[0][3])
    m = {(r["src_rank"], r["dst_rank"]): r for r in res.to_json()["matrix"]}
    assert m[(2, 3)]["size_bytes"] == 64 << 20 and m[(2, 3)]["ops"] == 1


def test_html_page_escapes_and_is_offline() -> None:
    from opscope.analysis.cluster import aggregate
    from opscope.report.cluster_html import to_html

    links = pl.DataFrame([_link(0, 1, "<script>x</script>", 10.0), _link(1, 0, "HCCS", 9.0)])
    res = aggregate(_steps({0: 1.0, 1: 2.0}), _no_colls(), links)
    page = to_html(res)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page
    assert page.count("<table class='hm'>") == 2


def test_cli_html_and_json(
    small_two_rank: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from opscope.cli.app import main

    d, _ = small_two_rank
    out = tmp_path / "c.html"
    assert main(["cluster", str(d), "--workers", "0", "--json", "--html", str(out)]) == 0
    transports = {m["transport"] for m in json.loads(capsys.readouterr().out)["matrix"]}
    assert transports and out.read_text().count("<table class='hm'>") == len(transports)
    bad = tmp_path / "no" / "x.html"
    assert main(["cluster", str(d), "--workers", "0", "--html", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "x.html" in err and "Traceback" not in err


# ------------------------------------------------------------------------------ timeline names


def test_track_names_from_the_trace_metadata() -> None:
    import opscope

    p = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    raw = json.loads((p / _OUT / "trace_view.json").read_text())
    ev = raw if isinstance(raw, list) else raw["traceEvents"]
    procs = {
        e["pid"]: e["args"]["name"]
        for e in ev
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    want = {
        (int(e["pid"]), int(e["tid"])): f"{procs[e['pid']]} · {e['args']['name']}"
        for e in ev
        if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] in procs
    }
    assert {"Python", "CANN", "Ascend Hardware", "HCCL", "Overlap Analysis"} <= set(procs.values())
    prof = opscope.load(p, cache=False)
    th = {(r["pid"], r["tid"]): r for r in prof.threads.to_dicts()}
    for k, name in want.items():
        assert th[k]["name"] == name
    hw = {p_ for p_, n in procs.items() if n in ("Ascend Hardware", "HCCL")}
    assert all(th[k]["is_device"] == (k[0] in hw) for k in want)
    # Every device track is named; the HCCL ops sit on HCCL's communication lane.
    dev = prof.events.filter(pl.col("device").is_not_null())
    for pid, tid in dev.select("pid", "tid").unique().iter_rows():
        assert (pid, tid) in th and th[(pid, tid)]["is_device"]
    comm = dev.filter(pl.col("kind") == "communication").select("pid", "tid").unique().rows()
    assert comm and all(th[k]["name"] == "HCCL · Group 0 Communication" for k in comm)


def test_track_names_without_a_trace() -> None:
    import opscope

    p = shared_trace("ascend/small_two_rank/test_rank_0")
    prof = opscope.load(p, cache=False)
    th = {(r["pid"], r["tid"]): r["name"] for r in prof.threads.to_dicts()}
    dev = prof.events.filter(pl.col("device").is_not_null())
    kernels = dev.filter(pl.col("kind") == "kernel").select("pid", "tid").unique().rows()
    comm = dev.filter(pl.col("kind") == "communication").select("pid", "tid").unique().rows()
    assert kernels and comm
    assert all(th[k] == f"Ascend Hardware · Stream {k[1]}" for k in kernels)
    assert all(th[k] == "HCCL · communication" for k in comm)


def test_matrix_takes_group_totals_and_maps_local_ends_like_msprof() -> None:
    from opscope.analysis.cluster import aggregate
    from opscope.analysis.cluster_ascend import HCCL_COLUMNS

    # pp group "G" holds global ranks 0 and 2 (their communication.json have ops of G); the
    # files write its ends as local indices 0 and 1. Rank 0's file lists one sampled call
    # (top1) and the group's total over all calls; rank 2's only per-op rows (two calls).
    mb = 1_000_000

    def row(rank: int, src: int, dst: int, size: int, op: str, total: bool) -> dict[str, Any]:
        return _link(src, dst, "HCCS", 20.0, op) | {
            "rank": rank,
            "group": "G",
            "size_bytes": size,
            "time_ns": size // 20,
            "total": total,
            "mapped": False,
        }

    links = pl.DataFrame(
        [
            row(0, 0, 1, 8 * mb, "send_1", False),  # top1 sample: replaced by the total
            row(0, 0, 1, 40 * mb, "batchsendrecv-total", True),
            row(2, 1, 0, 8 * mb, "send_1", False),
            row(2, 1, 0, 16 * mb, "send_2", False),
        ]
    )
    hccl = pl.DataFrame(
        [{"rank": r, "step": 1, "op_name": "send_1", "group": "G"} for r in (0, 2)]
    ).with_columns(pl.lit(None, pl.Int64).alias(c) for c in HCCL_COLUMNS if c.endswith("_ns"))
    res = aggregate(_steps({0: 1.0, 2: 1.0}), _no_colls(), links, hccl=hccl)
    m = {(r["src_rank"], r["dst_rank"]): r["size_bytes"] for r in res.to_json()["matrix"]}
    assert m == {(0, 2): 40 * mb, (2, 0): 24 * mb}
    # Without the other rank's communication.json the group's set {0} does not cover index 1:
    # the ends stay as written.
    res1 = aggregate(
        _steps({0: 1.0}), _no_colls(), links.filter(pl.col("rank") == 0), hccl=hccl[:1]
    )
    assert {(r["src_rank"], r["dst_rank"]) for r in res1.to_json()["matrix"]} == {(0, 1)}


def test_rank_gaps_are_max_minus_min_of_step_trace_time(small_two_rank: Any) -> None:
    d, res = small_two_rank
    comp = {}
    for rank, p in _rank_dirs(d).items():
        head, *rows = (p / _OUT / "step_trace_time.csv").read_text().splitlines()
        cols = head.split(",")
        comp[rank] = sum(
            float(dict(zip(cols, r.split(","), strict=True))["Computing"]) for r in rows
        )
    g = res.to_json()["rank_gaps"]["computing_us"]
    hi, lo = max(comp, key=comp.__getitem__), min(comp, key=comp.__getitem__)
    assert (g["max_rank"], g["min_rank"]) == (hi, lo)
    assert g["gap"] == pytest.approx(comp[hi] - comp[lo], abs=0.01)
