"""Multi-rank directories: rank discovery and per-rank reads, checked against stdlib counts."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import opscope
from conftest import shared_trace
from opscope.errors import InputError
from opscope.ingest import cache as cache_mod
from opscope.ingest.multirank import kineto_rank, list_ranks, read_directory

HTA = "multi_rank/hta_sampled_128rank_job"
# Kineto category -> opscope kind (the whole-trace "Trace" span is not an event).
_KIND = {
    "cpu_op": "cpu_op",
    "cuda_runtime": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
}


def _hta_dir(tmp_path: Path) -> Path:
    src = shared_trace(HTA)
    job = tmp_path / "job" / "nested"
    job.mkdir(parents=True)
    # Names that say the opposite of distributedInfo: the trace's own rank must win.
    (job / "worker1_a.json.gz").symlink_to(src / "rank-0.json.gz")
    (job / "worker0_b.json.gz").symlink_to(src / "rank-1.json.gz")
    return tmp_path / "job"


def _stdlib_counts(path: Path) -> tuple[int, Counter[str]]:
    d = json.loads(gzip.decompress(path.read_bytes()))
    kinds: Counter[str] = Counter()
    for e in d["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") == "Trace":
            continue
        cat = e.get("cat")
        if cat == "user_annotation":
            kinds["step" if e["name"].startswith("ProfilerStep#") else "user_annotation"] += 1
        elif cat == "kernel" and e["name"].startswith("nccl"):
            kinds["communication"] += 1  # this job's only collectives are NCCL kernels
        else:
            kinds[_KIND[cat]] += 1
    return d["distributedInfo"]["rank"], kinds


def test_hta_ranks_from_distributed_info(tmp_path: Path) -> None:
    job = _hta_dir(tmp_path)
    ranks = list_ranks(job)
    assert [r for r, _, _ in ranks] == [0, 1]
    assert [p.name for _, p, _ in ranks] == ["worker1_a.json.gz", "worker0_b.json.gz"]
    assert {f for _, _, f in ranks} == {"kineto"}


def test_hta_per_rank_counts(tmp_path: Path) -> None:
    job = _hta_dir(tmp_path)
    p = read_directory(job, workers=1, cache=False)
    assert p.ranks == [0, 1]
    src = shared_trace(HTA)
    for f in ("rank-0.json.gz", "rank-1.json.gz"):
        rank, want = _stdlib_counts(src / f)
        got = dict(p.events.filter(pl.col("rank") == rank).group_by("kind").len().iter_rows())
        assert got == dict(want)
    # Ids stay unique across ranks and links stay within their rank.
    ev = p.events
    assert ev.get_column("id").n_unique() == ev.height
    ranks_of = dict(ev.select("id", "rank").iter_rows())
    for op, r in ev.filter(pl.col("op_id").is_not_null()).select("op_id", "rank").iter_rows():
        assert ranks_of[op] == r


def test_pool_workers_write_the_cache(tmp_path: Path) -> None:
    job = _hta_dir(tmp_path)
    ref = read_directory(job, workers=1, cache=False)
    got = read_directory(job, workers=2, cache=True)
    nested = job / "nested"
    for name in ("worker1_a.json.gz", "worker0_b.json.gz"):
        (entry,) = cache_mod.candidates(nested / name)  # the user cache (the default)
        meta = json.loads((entry / "meta.json").read_text())
        assert meta["cache_key"]["size"] == (nested / name).stat().st_size
    assert got.events.equals(ref.events)
    assert got.flows.equals(ref.flows)
    again = read_directory(job, workers=2, cache=True)
    assert again.events.equals(ref.events)


def test_ascend_two_ranks(tmp_path: Path) -> None:
    src = shared_trace("ascend/small_two_rank")
    p = opscope.load(src)
    assert p.ranks == [0, 1]
    assert p.meta["format"] == "ascend"
    for r in (0, 1):
        f = src / f"test_rank_{r}" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        with open(f, newline="", encoding="utf-8-sig") as fh:
            n = sum(1 for _ in csv.DictReader(fh))
        # each kernel_details row is a kernel or (HCCL core) communication
        dev = pl.col("kind").is_in(["kernel", "communication"])
        assert p.events.filter((pl.col("rank") == r) & dev).height == n
    assert sorted(p.steps.get_column("rank").to_list()) == [0, 1]


def test_duplicate_rank_is_a_clear_error() -> None:
    # level0 and level1 output of rank 0 side by side: two inputs claim rank 0.
    d = shared_trace("ascend/alexnet_ddp_910b")
    with pytest.raises(InputError, match="rank 0 claimed by both") as e:
        list_ranks(d)
    assert "level0_rank0_ascend_pt" in str(e.value) and "level1_rank0_ascend_pt" in str(e.value)


def test_rank_from_names_then_order(tmp_path: Path) -> None:
    for name in ("trace_rank_3.json", "worker5.pt.trace.json", "zzz.json"):
        (tmp_path / name).write_text('{"traceEvents": []}')
    (tmp_path / "run_7").mkdir()
    (tmp_path / "run_7" / "rank-2.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    got = {p.name: r for r, p, _ in list_ranks(tmp_path)}
    assert got == {
        "rank-2.json.gz": 2,
        "trace_rank_3.json": 3,
        "worker5.pt.trace.json": 5,
        "zzz.json": 0,
    }


def test_kineto_rank_is_parsed_not_searched(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    decoy = json.dumps({"distributedInfo": {"rank": 9}})
    f.write_text(
        json.dumps({"note": decoy, "distributedInfo": {"rank": 2}, "traceEvents": [{"x": 1}]})
    )
    assert kineto_rank(f) == 2
    g = tmp_path / "g.json"
    g.write_text(json.dumps({"traceEvents": [], "distributedInfo": {"rank": 4}}))
    assert kineto_rank(g) is None  # after traceEvents: not read from the head


def test_nothing_readable(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError) as e:
        read_directory(tmp_path)
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError):
        opscope.load(tmp_path)


def test_truncated_rank_names_the_file(tmp_path: Path) -> None:
    src = shared_trace(HTA)
    (tmp_path / "rank-0.json.gz").symlink_to(src / "rank-0.json.gz")
    data = gzip.decompress((src / "rank-1.json.gz").read_bytes())
    (tmp_path / "rank-1.json").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as e:
        read_directory(tmp_path, workers=1, cache=False)
    assert "rank-1.json" in str(e.value) and "truncated" in str(e.value)
    p = read_directory(tmp_path, workers=1, cache=False, salvage=True)
    assert p.ranks == [0, 1]
    # Independent count: complete events of rank 1 before the cut.
    text = data[: len(data) // 2].decode()
    dec = json.JSONDecoder()
    pos = text.index("[", text.index('"traceEvents"')) + 1
    complete = 0
    while True:
        while pos < len(text) and text[pos] in " \r\n\t,":
            pos += 1
        try:
            _, pos = dec.raw_decode(text, pos)
        except ValueError:
            break
        complete += 1
    assert p.meta["salvaged"]["events"] == complete
