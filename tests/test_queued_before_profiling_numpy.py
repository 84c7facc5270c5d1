""":func:`opscope.ingest.link.queued_before_profiling` against a plain-Python statement of its
rule on random event tables: several ranks and devices, null ranks and starts, launches with and
without device work (the "lost launch" doubt that clears a rank's candidates)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import polars as pl
import pytest

from opscope.ingest.link import queued_before_profiling
from opscope.model import schema

_LAUNCH = re.compile(r"launch|memcpy|memset", re.IGNORECASE)
_NAMES = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSync", "aten::mul", "k", None)


# the columns queued_before_profiling reads, as the events table types them
_SCHEMA = {
    "rank": pl.Int32,
    "kind": schema.EventKind,
    "name": pl.String,
    "ts_ns": pl.Int64,
    "device": pl.Int32,
    "correlation": pl.Int64,
    "op_id": pl.Int64,
    "launch_id": pl.Int64,
}


def _table(rng: np.random.Generator, n: int) -> pl.DataFrame:
    def maybe(v: Any, p: float) -> Any:
        return None if rng.random() < p else v

    rows: dict[str, list[Any]] = {c: [] for c in ("rank", "kind", "name", "ts_ns", "device")}
    rows |= {"correlation": [], "op_id": [], "launch_id": []}
    for _ in range(n):
        dev = rng.random() < 0.5
        rows["rank"].append(maybe(int(rng.integers(0, 3)), 0.05))
        rows["kind"].append(
            str(rng.choice(["kernel", "memcpy"])) if dev else str(rng.choice(["runtime", "cpu_op"]))
        )
        rows["name"].append(_NAMES[int(rng.integers(0, len(_NAMES)))])
        rows["ts_ns"].append(maybe(int(rng.integers(0, 1000)), 0.05))
        rows["device"].append(int(rng.integers(0, 2)) if dev else None)
        rows["correlation"].append(maybe(int(rng.integers(0, 50)), 0.2))
        rows["op_id"].append(maybe(int(rng.integers(0, n)), 0.8) if dev else None)
        rows["launch_id"].append(maybe(int(rng.integers(0, n)), 0.5) if dev else None)
    return pl.DataFrame(
        rows,
        schema=_SCHEMA,
    )


def _reference(ev: pl.DataFrame) -> list[bool]:
    r = ev.to_dicts()
    is_dev = [x["device"] is not None for x in r]  # the tables' device kinds all set a device
    via = [x["op_id"] if x["op_id"] is not None else x["launch_id"] for x in r]
    known = [x["rank"] is not None and x["ts_ns"] is not None for x in r]
    first: dict[tuple[int, int], int] = {}
    for i, x in enumerate(r):
        if is_dev[i] and via[i] is not None and known[i]:
            key = (x["rank"], x["device"])
            first[key] = min(first.get(key, x["ts_ns"]), x["ts_ns"])
    cand = [
        is_dev[i]
        and via[i] is None
        and known[i]
        and (x["rank"], x["device"]) in first
        and x["ts_ns"] < first[(x["rank"], x["device"])]
        for i, x in enumerate(r)
    ]
    rank_first: dict[int, int] = {}
    for (rk, _), t in first.items():
        rank_first[rk] = min(rank_first.get(rk, t), t)
    used = {x["launch_id"] for i, x in enumerate(r) if is_dev[i] and x["launch_id"] is not None}
    lost: dict[int, int] = {}
    n_cand: dict[int, int] = {}
    for i, x in enumerate(r):
        if cand[i]:
            n_cand[x["rank"]] = n_cand.get(x["rank"], 0) + 1
        if (
            x["kind"] == "runtime"
            and x["correlation"] is not None
            and x["name"] is not None
            and _LAUNCH.search(x["name"])
            and i not in used
            and known[i]
            and x["rank"] in rank_first
            and x["ts_ns"] < rank_first[x["rank"]]
        ):
            lost[x["rank"]] = lost.get(x["rank"], 0) + 1
    doubtful = {rk for rk, c in n_cand.items() if lost.get(rk, 0) >= c}
    return [c and x["rank"] not in doubtful for c, x in zip(cand, r, strict=True)]


@pytest.mark.parametrize("seed", range(40))
def test_queued_matches_plain_python(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ev = _table(rng, int(rng.integers(1, 60)))
    assert queued_before_profiling(ev).tolist() == _reference(ev)


def test_a_doubtful_rank_and_a_queued_one() -> None:
    # rank 0: one kernel without launch before the first launched one, and one launch call
    # without device work before it (its lost launch, maybe): not known to be queued. Rank 1:
    # the same kernel, no such call: queued.
    ev = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0, 1, 1, 1],
            "kind": ["runtime", "kernel", "runtime", "kernel", "runtime", "kernel", "kernel"],
            "name": [
                "cudaLaunchKernel",
                "a",
                "cudaLaunchKernel",
                "b",
                "cudaLaunchKernel",
                "a",
                "b",
            ],
            "ts_ns": [0, 5, 8, 10, 8, 5, 10],
            "device": [None, 0, None, 0, None, 0, 0],
            "correlation": [1, None, 2, 2, 3, None, 3],
            "op_id": [None] * 7,
            "launch_id": [None, None, None, 2, None, None, 4],
        },
        schema=_SCHEMA,
    )
    got = queued_before_profiling(ev).tolist()
    assert got == [False, False, False, False, False, True, False]
    assert got == _reference(ev)
