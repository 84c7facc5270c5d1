"""cluster's steps table of a rank without device work: per step window the union of the host
compute ops, of the host collectives and of both, clipped to the window. Equal to a reference
written here in Python from that definition (each interval clipped to each window of its rank
it overlaps, the clipped pieces of one (rank, step) merged), on generated profiles: several
ranks, overlapping, duplicated, touching and null windows, null ranks, zero-length and
window-spanning intervals, with and without a steps table. The NumPy path runs no query."""

from __future__ import annotations

import random
import re
from typing import Any

import polars as pl
import pytest

from helpers.spies import count_queries
from opscope.analysis import cluster as C
from opscope.model import Profile

_NAMES = [
    "aten::mm",
    "aten::add",
    "gloo:all_reduce",
    "c10d::allreduce_",
    "record_param_comms",
    "mpi:send",
    None,
]


def _union(iv: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(iv):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _compute(name: str | None) -> bool:
    return name is not None and not (
        re.match(C.HOST_COLLECTIVE, name)
        or name.startswith("c10d::")
        or "record_param_comms" in name
    )


def _reference(ev: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows of the steps table by the definition (sorted by rank and step, nulls first)."""
    if steps:
        win = [(w["rank"], w["step"], w["ts_ns"], w["dur_ns"]) for w in steps]
    else:
        ranks = {e["rank"] for e in ev}
        win = []
        for r in ranks:
            ts = [e["ts_ns"] for e in ev if e["rank"] == r and e["ts_ns"] is not None]
            ends = [
                e["ts_ns"] + e["dur_ns"]
                for e in ev
                if e["rank"] == r and e["ts_ns"] is not None and e["dur_ns"] is not None
            ]
            lo, hi = (min(ts) if ts else None), (max(ends) if ends else None)
            win.append((r, -1, lo, None if lo is None or hi is None else hi - lo))
    comm = [
        e
        for e in ev
        if e["kind"] in ("cpu_op", "user_annotation")
        and e["name"] is not None
        and re.match(C.HOST_COLLECTIVE, e["name"])
    ]
    comp = [e for e in ev if e["kind"] == "cpu_op" and _compute(e["name"])]
    pieces: dict[tuple[Any, Any, str], list[tuple[int, int]]] = {}
    for r, step, w0, d in win:
        if r is None or step is None or w0 is None or d is None:
            continue
        w1 = w0 + d
        for cls, iv in (("compute", comp), ("comm", comm)):
            for e in iv:
                if e["rank"] != r or e["ts_ns"] is None or e["dur_ns"] is None:
                    continue
                s, t = e["ts_ns"], e["ts_ns"] + e["dur_ns"]
                if s < w1 and t > w0:
                    piece = (max(s, w0), min(t, w1))
                    pieces.setdefault((r, step, cls), []).append(piece)
                    pieces.setdefault((r, step, "busy"), []).append(piece)
    rows = []
    for r, step, w0, d in win:
        got = {c: _union(pieces.get((r, step, c), [])) for c in ("compute", "comm", "busy")}
        dur = None if w0 is None or d is None else d
        rows.append(
            (
                r,
                step,
                w0,
                dur,
                got["compute"],
                got["comm"],
                got["busy"] - got["compute"],
                None if dur is None else dur - got["busy"],
            )
        )
    return sorted(rows, key=lambda t: (t[0] is not None, t[0] or 0, t[1] is not None, t[1] or 0))


def _generated(seed: int, with_steps: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    ranks: list[int | None] = [0, 1, 5] + ([None] if rng.random() < 0.4 else [])
    ev = []
    for i in range(rng.randint(0, 60)):
        ts = rng.choice([rng.randint(0, 1000), rng.randint(0, 20) * 50])
        ev.append(
            {
                "id": i,
                "rank": rng.choice(ranks),
                "kind": rng.choice(["cpu_op", "cpu_op", "user_annotation", "python_function"]),
                "name": rng.choice(_NAMES),
                "tid": 1,
                "ts_ns": None if rng.random() < 0.03 else ts,
                "dur_ns": None if rng.random() < 0.03 else rng.choice([0, 5, 50, 400, 1500]),
            }
        )
    steps = []
    if with_steps:
        for _ in range(rng.randint(1, 8)):
            w0 = rng.choice([rng.randint(0, 1000), rng.randint(0, 20) * 50])
            steps.append(
                {
                    "rank": rng.choice(ranks),
                    "step": None if rng.random() < 0.1 else rng.randint(0, 3),
                    "ts_ns": None if rng.random() < 0.05 else w0,
                    "dur_ns": rng.choice([0, 50, 300, 1000]),
                }
            )
    return ev, steps


def _profile(ev: list[dict[str, Any]], steps: list[dict[str, Any]]) -> Profile:
    evs = pl.DataFrame(
        ev,
        schema={
            "id": pl.Int64,
            "rank": pl.Int32,
            "kind": pl.String,
            "name": pl.String,
            "tid": pl.Int64,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
        },
    )
    st = pl.DataFrame(
        steps, schema={"rank": pl.Int32, "step": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64}
    )
    return Profile.from_tables(events=evs, steps=st)


@pytest.mark.parametrize("with_steps", [True, False])
def test_host_steps_equal_the_clipped_unions(with_steps: bool) -> None:
    for seed in range(150):
        ev, steps = _generated(seed, with_steps)
        p = _profile(ev, steps)
        assert not p.has_device
        got = C.rank_tables(p)["steps"]
        assert got.schema == pl.Schema(C.STEP_COLUMNS)
        want = _reference(ev, steps)
        # (rows of one (rank, step) differ only in their window: any order among them)
        assert [r[:2] for r in got.rows()] == [r[:2] for r in want], seed
        assert sorted(got.rows(), key=repr) == sorted(want, key=repr), seed


def test_planted_windows_by_hand() -> None:
    # rank 0: compute [0,100) and [50,150), gloo [120,300); windows [0,200) and [200,400)
    ev = [
        {"id": 0, "rank": 0, "kind": "cpu_op", "name": "aten::mm", "tid": 1, "ts_ns": 0,
         "dur_ns": 100},
        {"id": 1, "rank": 0, "kind": "cpu_op", "name": "aten::mm", "tid": 1, "ts_ns": 50,
         "dur_ns": 100},
        {"id": 2, "rank": 0, "kind": "user_annotation", "name": "gloo:all_reduce", "tid": 2,
         "ts_ns": 120, "dur_ns": 180},
    ]  # fmt: skip
    steps = [
        {"rank": 0, "step": 1, "ts_ns": 0, "dur_ns": 200},
        {"rank": 0, "step": 2, "ts_ns": 200, "dur_ns": 200},
    ]
    got = C.rank_tables(_profile(ev, steps))["steps"]
    assert got.rows() == [
        # compute 150; comm 80 of [120,200); busy [0,200) = 200: not overlapped 50; idle 0
        (0, 1, 0, 200, 150, 80, 50, 0),
        # comm [200,300) = 100, no compute; idle 100
        (0, 2, 200, 200, 0, 100, 100, 100),
    ]


def test_host_steps_run_no_query(monkeypatch: pytest.MonkeyPatch) -> None:
    ev, steps = _generated(3, True)
    p = _profile(ev, steps)
    calls, comp = C._calls(p.events, host_compute=True)
    assert comp is not None
    ran = count_queries(monkeypatch)
    C._host_steps(p, calls, comp)
    assert not ran


def test_merged_and_below_on_groups() -> None:
    import numpy as np

    g = np.array([2, 2, 2, 7, 7], dtype=np.int64)
    s = np.array([10, 0, 25, 5, 5], dtype=np.int64)
    e = np.array([20, 10, 30, 6, 9], dtype=np.int64)
    u = C._merged(g, s, e)
    # group 2: [0,20) (touching pieces join) and [25,30); group 7: [5,9)
    assert [a.tolist() for a in u] == [[2, 2, 7], [0, 25, 5], [20, 30, 9]]
    q_g = np.array([2, 2, 2, 7, 7, 3], dtype=np.int64)
    x = np.array([-5, 15, 27, 100, 5, 50], dtype=np.int64)
    assert C._below(u, q_g, x).tolist() == [0, 15, 22, 4, 0, 0]
