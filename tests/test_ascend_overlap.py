"""Overlap Analysis tracks: the interval rules on planted spans, the rebuild from a database's
tasks equal to the table the profiler wrote, the same rule reproducing the text exports' own
slices, and the db and text exports of the AlexNet pairs carrying the same tracks."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from opscope.ingest import ascend_db
from opscope.ingest.ascend import read_ascend
from opscope.ingest.ascend_overlap import NAMES, overlap, subtract, union

ASCEND_DATA = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data"))
LEVELS = ["level0", "level1", "level2"]


def test_union_and_subtract_on_planted_spans() -> None:
    # Touching spans merge, empty and reversed ones are dropped, order does not matter.
    assert union([(5, 9), (0, 2), (2, 4), (7, 12), (20, 20), (30, 25)]) == [(0, 4), (5, 12)]
    # [0, 10) and [20, 30) minus [2, 3), [8, 22), [25, 40).
    assert subtract([(0, 10), (20, 30)], [(2, 3), (8, 22), (25, 40)]) == [
        (0, 2),
        (3, 8),
        (22, 25),
    ]
    assert subtract([(0, 10)], []) == [(0, 10)]
    assert subtract([], [(0, 10)]) == []


def test_overlap_tracks_on_planted_tasks() -> None:
    # Compute 0-10, 5-15, 40-50; collectives 12-30 and 45-60: by hand, Computing 0-15 and
    # 40-50, Communication 12-30 and 45-60, not overlapped 15-30 and 50-60, Free 30-40.
    got = overlap([(0, 10), (5, 15), (40, 50)], [(12, 30), (45, 60)])
    want = [
        (0, "Computing", 0, 15),
        (0, "Computing", 40, 50),
        (1, "Communication", 12, 30),
        (1, "Communication", 45, 60),
        (2, "Communication(Not Overlapped)", 15, 30),
        (2, "Communication(Not Overlapped)", 50, 60),
        (3, "Free", 30, 40),
    ]
    assert got.rows() == want
    assert overlap([], []).height == 0


def _db(level: str, rank: int) -> Path:
    d = ASCEND_DATA / "db" / level / f"rank{rank}_ascend_pt"
    if not d.is_dir():
        pytest.skip(f"msinsight AlexNet data not found under {ASCEND_DATA}")
    return d


def test_rebuilt_tracks_equal_the_databases_own_table() -> None:
    """The Level1 rank-0 database holds OVERLAP_ANALYSIS; the rebuild from its TASK,
    COMPUTE_TASK_INFO and COMMUNICATION_OP gives the same slices to the ns."""
    d = _db("level1", 0)
    table = ascend_db.read_overlap(d)
    rebuilt = ascend_db.read_overlap(d, computed=True)
    assert table.height == 382
    assert rebuilt.equals(table)


def _ns(ts: Any) -> int:
    whole, _, frac = str(ts).strip().partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def _text_slices(out: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]], dict[str, Any]]:
    """From the raw text export: the kernel table's non-HCCL rows, the HCCL process's group
    slices (tid 0), and the trace's own Overlap Analysis slices by name."""
    with (out / "kernel_details.csv").open(encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    compute = []
    for r in rows:
        if r["Accelerator Core"].strip() == "HCCL":
            continue
        s = _ns(r["Start Time(us)"])
        compute.append((s, s + round(float(r["Duration(us)"]) * 1000)))
    data = json.loads((out / "trace_view.json").read_text())
    events = data if isinstance(data, list) else data["traceEvents"]
    proc = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    xs = [e for e in events if e.get("ph") == "X"]
    comm = [
        (_ns(e["ts"]), _ns(e["ts"]) + round(e["dur"] * 1000))
        for e in xs
        if proc.get(e["pid"]) == "HCCL" and e["tid"] == 0
    ]
    own: dict[str, list[tuple[int, int]]] = {}
    for e in xs:
        if proc.get(e["pid"]) == "Overlap Analysis":
            s = _ns(e["ts"])
            own.setdefault(e["name"], []).append((s, s + round(e["dur"] * 1000)))
    return compute, comm, own


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rank", [0, 1])
def test_rule_reproduces_the_text_exports_slices(level: str, rank: int) -> None:
    """The text export's trace holds its Overlap Analysis slices: rebuilt from its kernel table
    and collectives they match slice for slice, to the 1 ns by which its µs durations round."""
    out = ASCEND_DATA / "text" / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    if not out.is_dir():
        pytest.skip(f"msinsight AlexNet data not found under {ASCEND_DATA}")
    compute, comm, own = _text_slices(out)
    got = overlap(compute, comm)
    assert sorted(own) == sorted(NAMES)
    for name in NAMES:
        mine = got.filter(pl.col("name") == name).select("start_ns", "end_ns").rows()
        theirs = sorted(own[name])
        assert len(mine) == len(theirs), name
        worst = max(
            max(abs(a[0] - b[0]), abs(a[1] - b[1])) for a, b in zip(mine, theirs, strict=True)
        )
        assert worst <= 1, (name, worst)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rank", [0, 1])
def test_db_and_text_pairs_carry_the_same_tracks(level: str, rank: int) -> None:
    db_dir = _db(level, rank)
    text_dir = ASCEND_DATA / "text" / level / f"rank{rank}_ascend_pt"
    db, text = read_ascend(db_dir, cache=False), read_ascend(text_dir, cache=False)

    def tracks(p: Any) -> list[str]:
        names = p.threads.get_column("name").to_list()
        return sorted(n for n in names if n.startswith("Overlap Analysis"))

    assert tracks(db) == tracks(text) == sorted(f"Overlap Analysis · {n}" for n in NAMES)
    key = "skipped_overlap_analysis_slices"
    # Separate runs of one program: the same slices per track (187 + 4 + 101 + 90).
    assert db.meta["ascend"][key] == text.meta["ascend"][key] == 382
