"""Ascend communication files (communication.json, communication_matrix.json) and ranks that
kept only them and the step breakdown; each figure recomputed from the JSON with plain Python."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.errors import InputError
from opscope.ingest.ascend_comm import (
    group_hash,
    is_summary_op,
    parallel_groups,
    read_communication,
    world_size,
)
from opscope.ingest.registry import load
from opscope.ingest.summary import world_size as profile_world_size

SUMMARY = re.compile(r"-(top\d*|middle\d*|bottom\d*|total)$")
REAL = [
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",
    "ascend/small_two_rank/test_rank_0",
    "ascend/small_two_rank/test_rank_1",
]


def _out(d: Path) -> Path:
    return d / "ASCEND_PROFILER_OUTPUT"


def _comm_rows(comm: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        v["Communication Time Info"]
        for kinds in comm.values()
        for ops in kinds.values()
        for k, v in ops.items()
        if k != "Total Op Info"
    ]


@pytest.mark.parametrize("rel", REAL)
def test_collectives_equal_communication_json(rel: str) -> None:
    d = shared_trace(rel)
    if not (_out(d) / "communication.json").is_file():
        pytest.skip("no communication.json")
    rows = _comm_rows(json.loads((_out(d) / "communication.json").read_text()))
    c = read_communication(d)["collectives"]
    assert c.height == len(rows) > 0
    for col, key in (
        ("elapse_ns", "Elapse Time(ms)"),
        ("wait_ns", "Wait Time(ms)"),
        ("transit_ns", "Transit Time(ms)"),
        ("synchronization_ns", "Synchronization Time(ms)"),
    ):
        assert c.get_column(col).sum() == sum(round(r[key] * 1e6) for r in rows), col


@pytest.mark.parametrize("rel", REAL)
def test_matrix_links_equal_the_json_rows(rel: str) -> None:
    d = shared_trace(rel)
    f = _out(d) / "communication_matrix.json"
    if not f.is_file():
        pytest.skip("no communication_matrix.json")
    matrix = json.loads(f.read_text())
    # Expected per (op, src, dst): each collective's own entry; a top/middle/bottom copy only
    # for a collective without its own entry.
    want: dict[tuple[str, int, int], int] = {}
    totals: dict[tuple[int, int], int] = defaultdict(int)
    for kinds in matrix.values():
        for entries in kinds.values():
            own = {k.split("@")[0] for k in entries}
            own = {o for o in own if o != "Total Op Info" and not SUMMARY.search(o)}
            for key, pairs in entries.items():
                name = key.split("@")[0]
                for pair, v in pairs.items():
                    s, t = (int(x) for x in pair.split("-"))
                    size = round(v["Transit Size(MB)"] * 1e6)
                    if key == "Total Op Info" or name.endswith("-total"):
                        totals[(s, t)] += size
                        continue
                    op = v["Op Name"] if SUMMARY.search(name) else name
                    if SUMMARY.search(name) and op in own:
                        continue
                    want[(op, s, t)] = size
    links = read_communication(d)["links"]
    got = {
        (r["op_name"], r["src_rank"], r["dst_rank"]): r["size_bytes"]
        for r in links.iter_rows(named=True)
    }
    assert links.height == len(got) == len(want) > 0
    assert got == want
    assert not any(SUMMARY.search(op) for op, *_ in got)
    # Where the file's total covers every collective, the links add up to it per link.
    if "alexnet" in rel:
        per_link: dict[tuple[int, int], int] = defaultdict(int)
        for (_, s, t), size in got.items():
            per_link[(s, t)] += size
        assert dict(per_link) == pytest.approx(dict(totals), abs=4)


def _write_rank(root: Path, rank: int, groups: dict[str, list[int]], world: int) -> Path:
    """A partial rank: profiler_info, metadata, step_trace_time.csv and communication files."""
    d = root / f"rank{rank}_ascend_pt"
    out = d / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (d / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))
    info = {
        g: {"group_name": f"g{i}", "group_rank": ranks.index(rank), "global_ranks": ranks}
        for i, (g, ranks) in enumerate(groups.items())
        if rank in ranks
    }
    meta = {"distributed_args": {"world_size": world}, "parallel_group_info": info}
    (d / "profiler_metadata.json").write_text(json.dumps(meta))
    (out / "step_trace_time.csv").write_text(
        "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage\n"
        f"3,{100 + rank},{20 + rank},5,25,7.5,200\n"
    )
    comm: dict[str, Any] = {"step3": {"collective": {}, "p2p": {}}}
    matrix: dict[str, Any] = {"step3": {"collective": {}}}
    start = 1_000_000.0
    for i, (g, ranks) in enumerate(groups.items()):
        if rank not in ranks:
            continue
        op = f"hcom_allReduce__7_{i}_1"
        comm["step3"]["collective"][f"{op}@{g}"] = {
            "Communication Time Info": {
                "Start Timestamp(us)": start + 100 * i,
                "Elapse Time(ms)": 0.05 + i / 100,
                "Transit Time(ms)": 0.01,
                "Wait Time(ms)": 0.02 * (rank + 1),
                "Synchronization Time(ms)": 0.001,
                "Idle Time(ms)": 0.0,
                "Wait Time Ratio": 0.5,
                "Synchronization Time Ratio": 0.1,
            },
            "Communication Bandwidth Info": {
                "HCCS": {"Transit Size(MB)": 4.0, "Transit Time(ms)": 0.01, "Bandwidth(GB/s)": 400}
            },
        }
        local = ranks.index(rank)
        pairs = {
            f"{local}-{j}": {
                "Transport Type": "HCCS",
                "Transit Size(MB)": 1.5 + j,
                "Transit Time(ms)": 0.01,
                "Bandwidth(GB/s)": 150.0,
                "Op Name": op,
            }
            for j in range(len(ranks))
            if j != local
        }
        entries = matrix["step3"]["collective"]
        entries[f"{op}@{g}"] = pairs
        entries[f"allreduce-top1@{g}"] = pairs  # a copy of the one collective
        entries[f"allreduce-total@{g}"] = pairs  # its sum
    comm["step3"]["collective"]["Total Op Info"] = {"Communication Time Info": {}}
    (out / "communication.json").write_text(json.dumps(comm))
    (out / "communication_matrix.json").write_text(json.dumps(matrix))
    return d


GROUPS = {"111": [0, 1, 2, 3], "222": [1, 3]}  # world group, and a DP group of ranks 1 and 3


def test_global_ranks_and_no_summary_rows(tmp_path: Path) -> None:
    d = _write_rank(tmp_path, 3, GROUPS, 4)
    assert parallel_groups(d)["222"]["global_ranks"] == [1, 3]
    assert world_size(d) == 4
    c = read_communication(d)
    links = c["links"]
    # rank 3 is local 3 of the world group and local 1 of group 222.
    dp = links.filter(pl.col("group") == "222")
    assert dp.select("src_rank", "dst_rank").rows() == [(3, 1)]
    assert dp.get_column("size_bytes").to_list() == [1_500_000]
    world = links.filter(pl.col("group") == "111").sort("dst_rank")
    assert world.select("src_rank", "dst_rank").rows() == [(3, 0), (3, 1), (3, 2)]
    assert links.height == 4  # the top1 copies and totals are not links
    assert c["link_totals"].height == 4
    assert not links.get_column("op_name").map_elements(is_summary_op, pl.Boolean).any()


def test_summary_only_matrix_keeps_each_collective_once(tmp_path: Path) -> None:
    d = _write_rank(tmp_path, 1, {"9": [0, 1]}, 2)
    f = _out(d) / "communication_matrix.json"
    m = json.loads(f.read_text())
    entries = m["step3"]["collective"]
    del entries["hcom_allReduce__7_0_1@9"]  # older exports: only top/middle/bottom/total
    entries["allreduce-bottom1@9"] = entries["allreduce-top1@9"]
    f.write_text(json.dumps(m))
    links = read_communication(d)["links"]
    assert links.select("op_name", "src_rank", "dst_rank").rows() == [
        ("hcom_allReduce__7_0_1", 1, 0)
    ]


def test_partial_ranks_are_ranks(tmp_path: Path) -> None:
    for r in range(4):
        _write_rank(tmp_path, r, GROUPS, 4)
    p = load(tmp_path, cache=False)
    assert sorted(p.meta["ranks"]) == [0, 1, 2, 3]
    steps = p.steps.sort("rank")
    assert steps.get_column("step").to_list() == [3] * 4
    assert steps.get_column("computing_ns").to_list() == [(100 + r) * 1000 for r in range(4)]
    comm = p.events.filter(pl.col("kind") == "communication")
    # one collective per group the rank is in: ranks 1 and 3 are in two groups
    per_rank = dict(comm.group_by("rank").len().iter_rows())
    assert per_rank == {0: 1, 1: 2, 2: 1, 3: 2}
    # every rank's collectives sit in its step window
    assert steps.get_column("ts_ns").null_count() == 0
    for r in range(4):
        c = read_communication(tmp_path / f"rank{r}_ascend_pt")["collectives"]
        want = sum(round(0.02 * (r + 1) * 1e6) for _ in range(per_rank[r]))
        assert c.get_column("wait_ns").sum() == want


def test_real_partial_rank_beside_a_full_one(tmp_path: Path) -> None:
    src = shared_trace("ascend/small_two_rank")
    r0 = tmp_path / "test_rank_0"
    _out(r0).mkdir(parents=True)
    shutil.copy(src / "test_rank_0" / "profiler_info_0.json", r0)
    for name in ("step_trace_time.csv", "communication.json", "communication_matrix.json"):
        shutil.copy(_out(src / "test_rank_0") / name, _out(r0))
    shutil.copytree(src / "test_rank_1", tmp_path / "test_rank_1")
    p = load(tmp_path, cache=False)
    assert sorted(p.meta["ranks"]) == [0, 1]
    rows = _comm_rows(json.loads((_out(r0) / "communication.json").read_text()))
    c0 = p.events.filter((pl.col("rank") == 0) & (pl.col("kind") == "communication"))
    assert c0.height == len(rows)
    assert c0.get_column("dur_ns").sum() == sum(round(r["Elapse Time(ms)"] * 1e6) for r in rows)
    assert p.steps.filter(pl.col("rank") == 0).height == 1


def test_bad_communication_json_is_a_typed_error(tmp_path: Path) -> None:
    d = _write_rank(tmp_path, 0, {"1": [0, 1]}, 2)
    (_out(d) / "communication.json").write_text("{not json")
    with pytest.raises(InputError, match=r"communication\.json"):
        read_communication(d)


def _to_analysis_db(out: Path) -> None:
    """The rank's communication JSON as analysis.db's CommAnalyzer tables (the database
    export's schema), then the JSON files removed."""
    comm = json.loads((out / "communication.json").read_text())
    matrix = json.loads((out / "communication_matrix.json").read_text())
    con = sqlite3.connect(out / "analysis.db")
    con.executescript(
        """CREATE TABLE CommAnalyzerTime (hccl_op_name TEXT, group_name TEXT,
             start_timestamp NUMERIC, elapse_time NUMERIC, transit_time NUMERIC,
             wait_time NUMERIC, synchronization_time NUMERIC, idle_time NUMERIC, step TEXT,
             type TEXT);
           CREATE TABLE CommAnalyzerBandwidth (hccl_op_name TEXT, group_name TEXT,
             transport_type TEXT, transit_size NUMERIC, transit_time NUMERIC, bandwidth NUMERIC,
             large_packet_ratio NUMERIC, package_size NUMERIC, count NUMERIC,
             total_duration NUMERIC, step TEXT, type TEXT);
           CREATE TABLE CommAnalyzerMatrix (hccl_op_name TEXT, group_name TEXT, src_rank TEXT,
             dst_rank TEXT, transport_type TEXT, transit_size NUMERIC, transit_time NUMERIC,
             bandwidth NUMERIC, step TEXT, type TEXT, op_name TEXT);"""
    )
    for step, kinds in comm.items():
        for kind, ops in kinds.items():
            for key, v in ops.items():
                if key == "Total Op Info":
                    continue
                op, group = key.split("@")
                t = v["Communication Time Info"]
                con.execute(
                    "INSERT INTO CommAnalyzerTime VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (op, group, t["Start Timestamp(us)"], t["Elapse Time(ms)"],
                     t["Transit Time(ms)"], t["Wait Time(ms)"], t["Synchronization Time(ms)"],
                     t["Idle Time(ms)"], step, kind),
                )  # fmt: skip
                for tr, b in v["Communication Bandwidth Info"].items():
                    for bucket in (1.0, 2.0):  # one row per packet-size bucket, figures repeated
                        con.execute(
                            "INSERT INTO CommAnalyzerBandwidth VALUES (?,?,?,?,?,?,0,?,1,0,?,?)",
                            (op, group, tr, b["Transit Size(MB)"], b["Transit Time(ms)"],
                             b["Bandwidth(GB/s)"], bucket, step, kind),
                        )  # fmt: skip
    for step, kinds in matrix.items():
        for kind, entries in kinds.items():
            for key, pairs in entries.items():
                op, _, group = key.partition("@")
                for pair, v in pairs.items():
                    s, d = pair.split("-")
                    con.execute(
                        "INSERT INTO CommAnalyzerMatrix VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (op, group, s, d, v["Transport Type"], v["Transit Size(MB)"],
                         v["Transit Time(ms)"], v["Bandwidth(GB/s)"], step, kind,
                         v.get("Op Name")),
                    )  # fmt: skip
    con.commit()
    con.close()
    (out / "communication.json").unlink()
    (out / "communication_matrix.json").unlink()


def test_database_export_communication_equals_the_json(tmp_path: Path) -> None:
    d = _write_rank(tmp_path, 3, GROUPS, 4)
    want = read_communication(d)
    _to_analysis_db(_out(d))
    got = read_communication(d)
    ratio = ["wait_ratio", "synchronization_ratio"]  # derived by the reader from the times
    assert got["collectives"].drop(ratio).equals(want["collectives"].drop(ratio))
    c = got["collectives"]
    want_ratio = [w / (w + t) for w, t in zip(c["wait_ns"], c["transit_ns"], strict=True)]
    assert c.get_column("wait_ratio").to_list() == pytest.approx(want_ratio, rel=1e-9)
    for name in ("bandwidth", "links", "link_totals"):
        assert got[name].sort(got[name].columns).equals(want[name].sort(want[name].columns)), name
    assert got["links"].height == 4


def test_world_size_from_metadata_reaches_the_profile(tmp_path: Path) -> None:
    from opscope.doctor.checks import check_ranks

    for r in (0, 1, 3):  # rank 2 kept nothing
        _write_rank(tmp_path, r, GROUPS, 4)
    p = load(tmp_path, cache=False)
    assert profile_world_size(p) == 4
    (check,) = check_ranks(p)
    assert check.evidence["first_missing"] == [2]


# msinsight test/st/level2 (4 ranks, pp=2; ranks 1 and 3 kept only the step breakdown, the
# communication files and analysis.db), extracted outside the repo; skipped when absent.
ST_LEVEL2 = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data")) / "st" / "level2"


def test_real_partial_output_run_reads_every_rank() -> None:
    if not ST_LEVEL2.is_dir():
        pytest.skip(f"msinsight st/level2 not found at {ST_LEVEL2}")
    p = load(ST_LEVEL2, cache=False)
    assert sorted(p.meta["ranks"]) == [0, 1, 2, 3]
    assert profile_world_size(p) == 4
    for r in range(4):
        d = ST_LEVEL2 / f"rank_{r}_ascend_pt"
        rows = _comm_rows(json.loads((_out(d) / "communication.json").read_text()))
        c = read_communication(d)["collectives"]
        assert c.get_column("wait_ns").sum() == sum(round(x["Wait Time(ms)"] * 1e6) for x in rows)
        ev = p.events.filter((pl.col("rank") == r) & (pl.col("kind") == "communication"))
        assert ev.height == len(rows) > 0
        steps = list(csv.DictReader((_out(d) / "step_trace_time.csv").open()))
        st = p.steps.filter(pl.col("rank") == r)
        assert st.get_column("computing_ns").to_list() == [
            round(float(s["Computing"]) * 1000) for s in steps
        ]


# Group names as HCCL writes them in msinsight's st/level2 communication files, beside the
# metadata ids they stand for (read off the run: the hash of the world group is in all four
# ranks' files, that of dp_cp [2, 3] in ranks 2 and 3's).
HASHED = {"group_name_0": "5862276093215481612", "group_name_7": "5862276123280252691"}


def test_hash_named_groups_map_through_the_metadata(tmp_path: Path) -> None:
    d = _write_rank(tmp_path, 3, {"group_name_0": [0, 1, 2, 3], "group_name_7": [2, 3]}, 4)
    for name in ("communication.json", "communication_matrix.json"):
        f = _out(d) / name
        text = f.read_text()
        for gid, h in HASHED.items():
            text = text.replace(f"@{gid}", f"@{h}")
        f.write_text(text)
    assert {gid: str(group_hash(gid)) for gid in HASHED} == HASHED
    groups = parallel_groups(d)
    assert groups[HASHED["group_name_7"]]["id"] == "group_name_7"
    assert groups[HASHED["group_name_7"]]["global_ranks"] == [2, 3]
    links = read_communication(d)["links"]
    # rank 3 is local 1 of group_name_7 ([2, 3]): its link "1-0" is 3 -> 2, not 1 -> 0.
    dp = links.filter(pl.col("group") == HASHED["group_name_7"])
    assert dp.select("src_rank", "dst_rank").rows() == [(3, 2)]
    assert dp.get_column("parallel_group").to_list() == ["g1"]  # _write_rank's names
    world = links.filter(pl.col("group") == HASHED["group_name_0"]).sort("dst_rank")
    assert world.select("src_rank", "dst_rank").rows() == [(3, 0), (3, 1), (3, 2)]


def test_real_hash_named_groups_of_the_megatron_run() -> None:
    """Every group of the 4-rank run's communication files is named by a hash; each one is a
    group of the rank's metadata, the p2p group is pp, and mapped through it every link leaves
    the rank that wrote it (HCCL writes a rank's matrix from its own side) towards a member."""
    if not ST_LEVEL2.is_dir():
        pytest.skip(f"msinsight st/level2 not found at {ST_LEVEL2}")
    seen: set[str] = set()
    for r in range(4):
        d = ST_LEVEL2 / f"rank_{r}_ascend_pt"
        matrix = json.loads((_out(d) / "communication_matrix.json").read_text())
        hashes = {
            key.partition("@")[2]
            for kinds in matrix.values()
            for ops in kinds.values()
            for key in ops
            if "@" in key
        }
        groups = parallel_groups(d)
        assert hashes and hashes <= set(groups), (r, hashes - set(groups))
        seen |= hashes
        p2p = {key.partition("@")[2] for key in matrix["step13"]["p2p"]}
        assert {groups[h]["name"] for h in p2p} == {"pp"}
        comm = read_communication(d)
        links = comm["links"]
        assert set(links.filter(pl.col("kind") == "p2p").get_column("parallel_group")) == {"pp"}
        assert (
            comm["collectives"]
            .filter(pl.col("group").is_in(list(hashes)))["parallel_group"]
            .null_count()
            == 0
        )
        assert links.height > 0
        assert set(links.get_column("src_rank").to_list()) == {r}
        for g, dst in links.select("group", "dst_rank").iter_rows():
            assert dst in groups[g]["global_ranks"], (r, g, dst)
    assert len(seen) == 12
