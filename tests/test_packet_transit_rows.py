"""The packet rule's transit sizes from the communication files, read as rows (no tables, one
query): equal, row by row, to the tables of ``read_communication`` joined with frames as the
rule did before (the reference below), on the real exports and on a planted rank whose keys
repeat (two step keys without a number: every match of the left join is kept)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import SHARED_TRACES
from opscope.advise.rules.ascend_comm_packet import MIN_BYTES, transit_from_files
from opscope.ingest.ascend_comm import communication_rows, read_communication
from opscope.ingest.registry import load
from opscope.model import Profile

ASCEND_DATA = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data"))
EXPORTS = [
    SHARED_TRACES / "ascend" / "small_two_rank" / "test_rank_0",
    SHARED_TRACES / "ascend" / "small_two_rank" / "test_rank_1",
    SHARED_TRACES / "ascend" / "alexnet_ddp_910b" / "level1_rank0_ascend_pt",
    ASCEND_DATA / "st" / "level2" / "rank_1_ascend_pt",
    ASCEND_DATA / "st" / "level2",
    ASCEND_DATA / "db" / "level1" / "rank0_ascend_pt",
]


def _reference(profile: Profile) -> pl.DataFrame:
    """The rule's former path: per rank read_communication's tables, joined as frames."""
    frames = []
    by_rank = profile.meta.get("rank_sources") or {}
    pairs = [(int(r), str(p)) for r, p in by_rank.items()] or [
        (None, str(p)) for p in profile.meta.get("sources") or []
    ]
    for rank, src in pairs:
        comm = read_communication(Path(src))
        if rank is not None:
            comm = {
                k: comm[k].with_columns(pl.lit(rank, pl.Int32).alias("rank"))
                for k in ("collectives", "bandwidth")
            }
        if comm["collectives"].height == 0:
            continue
        bw = comm["bandwidth"].filter(
            pl.col("transport").is_in(list(MIN_BYTES)) & (pl.col("size_bytes") > 0)
        )
        keys = [
            pl.col(k).cast(pl.String).fill_null("").alias(f"_{k}")
            for k in ("step", "kind", "op_name", "group")
        ]
        starts = comm["collectives"].select(*keys, "start_ns", "elapse_ns")
        on = [f"_{k}" for k in ("step", "kind", "op_name", "group")]
        frames.append(bw.with_columns(*keys).join(starts, on=on, how="left").drop(on))
    rows = pl.concat(frames).with_columns(pl.col("start_ns").fill_null(0).alias("at_ns"))
    events = (
        profile.events.filter(pl.col("kind") == "communication")
        .select(pl.col("id").alias("coll"), "rank", pl.col("name").alias("op_name"), "ts_ns")
        .sort("ts_ns")
    )
    j = rows.sort("at_ns").join_asof(
        events,
        left_on="at_ns",
        right_on="ts_ns",
        by=["rank", "op_name"],
        strategy="nearest",
        check_sortedness=False,
    )
    return j.select(
        "coll",
        "rank",
        "transport",
        pl.col("size_bytes").alias("bytes"),
        "time_ns",
        "start_ns",
        "elapse_ns",
        "op_name",
    )


def _keyed(df: pl.DataFrame) -> list[tuple[object, ...]]:
    cols = ["coll", "rank", "transport", "bytes", "time_ns", "start_ns", "elapse_ns", "op_name"]
    return sorted(df.select(cols).rows(), key=repr)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: "/".join(p.parts[-3:]))
def test_transit_from_files_equals_the_tables_joined(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"not found: {path}")
    p = load(path, cache=False)
    got, ranks = transit_from_files(p)
    assert got.height > 0 and ranks
    assert got.get_column("tasks").null_count() == got.height
    ref = _reference(p)
    assert _keyed(got) == _keyed(ref)
    # the join is not vacuous: every row found its collective's start in the files
    assert got.get_column("start_ns").null_count() == 0


@pytest.mark.parametrize("path", EXPORTS[:4], ids=lambda p: "/".join(p.parts[-3:]))
def test_communication_rows_are_read_communications_rows(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"not found: {path}")
    colls, bws = communication_rows(path)
    comm = read_communication(path)
    assert colls == comm["collectives"].drop("parallel_group").to_dicts()
    assert bws == comm["bandwidth"].drop("parallel_group").to_dicts()
    assert colls and bws


def test_repeated_keys_keep_every_match(tmp_path: Path) -> None:
    src = SHARED_TRACES / "ascend" / "small_two_rank" / "test_rank_0"
    if not src.exists():
        pytest.skip(f"not found: {src}")
    d = tmp_path / "test_rank_0"
    shutil.copytree(src, d)
    cj = d / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    data = json.loads(cj.read_text())
    # two step keys without a number: both read as step null, so each bandwidth row of one
    # matches the collective of both (the left join keeps both matches)
    first = next(iter(data.values()))
    cj.write_text(json.dumps({"warmup": first, "profiled": first}))
    p = load(d, cache=False)
    got, _ = transit_from_files(p)
    ref = _reference(p)
    assert _keyed(got) == _keyed(ref)
    n_bw = sum(
        1
        for kinds in first.values()
        for k, info in kinds.items()
        if k != "Total Op Info"
        for t, b in (info.get("Communication Bandwidth Info") or {}).items()
        if t in MIN_BYTES and b.get("Transit Size(MB)")
    )
    assert n_bw > 0 and got.height == 4 * n_bw  # 2 copies x 2 matches each


def test_nearest_match_equals_join_asof_with_ties() -> None:
    """The files' rows matched in Python to the nearest event of their name and rank: what a
    join_asof ``nearest`` gives, ties (a start halfway between two events, events starting
    together) and rows without a start (matched at 0) included."""
    from opscope.advise.rules.ascend_comm_packet import _files_rows

    ev = pl.DataFrame(
        {
            "id": [0, 1, 2, 3, 4, 5, 6],
            "rank": [0, 0, 0, 0, 0, 1, 0],
            "kind": ["communication"] * 6 + ["kernel"],
            "name": ["a", "a", "a", "a", "b", "a", "a"],
            "ts_ns": [10, 20, 20, 30, 25, 15, 12],
            "dur_ns": [1] * 7,
        }
    )
    starts = [15, 20, 25, 35, 0, None, 100, 5, 22, 15]
    names = ["a", "a", "a", "a", "a", "a", "a", "b", "b", "zzz"]
    ranks = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    rows = [
        [rk, n, "SDMA", 1000 + i, 7, s, 3]
        for i, (rk, n, s) in enumerate(zip(ranks, names, starts, strict=True))
    ]
    rows.append([1, "a", "SDMA", 5, 7, 16, 3])
    rows.append([0, "a", "HCCS", 5, 7, 16, 3])  # a transport the rule does not test
    rows.append([0, "a", "RDMA", 0, 7, 16, 3])  # no traffic
    meta = {
        "sources": ["nowhere"],
        "ascend": {"transit": {"ranks": [0, 1], "columns": [], "rows": rows}},
    }
    prof = Profile.from_tables(events=ev, meta=meta)
    got, ranks_got = _files_rows(prof)
    assert ranks_got == {0, 1}
    cols = ["rank", "op_name", "transport", "size_bytes", "time_ns", "start_ns", "elapse_ns"]
    files = pl.DataFrame(rows[:-2], schema=cols, orient="row").with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("start_ns").fill_null(0).alias("at_ns")
    )
    events = (
        prof.events.filter(pl.col("kind") == "communication")
        .select(pl.col("id").alias("coll"), "rank", pl.col("name").alias("op_name"), "ts_ns")
        .sort("ts_ns", maintain_order=True)
    )
    want = files.sort("at_ns", maintain_order=True).join_asof(
        events,
        left_on="at_ns",
        right_on="ts_ns",
        by=["rank", "op_name"],
        strategy="nearest",
        check_sortedness=False,
    )
    assert [(r[0], r[3]) for r in got] == list(
        zip(want["coll"].to_list(), want["size_bytes"].to_list(), strict=True)
    )
    assert [r[0] for r in got if r[3] == 1000] == [2]  # a tie: the later start, its last event


def test_a_partial_rank_keeps_its_transit_rows(tmp_path: Path) -> None:
    """A rank without a trace keeps the files' transit rows at load (read_partial reads the
    file anyway): the rule's rows equal those read from the folder again, and its findings
    are the same once the folder is gone."""
    from opscope.advise import advise
    from opscope.advise.rules.ascend_comm_packet import _file_transit

    src = ASCEND_DATA / "st" / "level2" / "rank_1_ascend_pt"
    if not src.exists():
        pytest.skip(f"not found: {src}")
    d = tmp_path / "rank_1_ascend_pt"
    shutil.copytree(src, d)
    p = load(d, cache=False)
    kept = p.meta["ascend"]["transit"]
    assert kept["ranks"] == [1] and kept["rows"]
    reread = Profile.from_tables(
        events=p.events, steps=p.steps, devices=p.devices, meta={**p.meta, "ascend": {}}
    )
    assert _file_transit(p) == _file_transit(reread)
    before = [f.to_json() for f in advise(p).by_rule("ascend-comm-packet")]
    assert before
    shutil.rmtree(d)
    assert [f.to_json() for f in advise(p).by_rule("ascend-comm-packet")] == before
    assert _file_transit(reread) == ([], set())  # (the folder read again: gone)
