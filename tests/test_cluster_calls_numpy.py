"""cluster._calls finds its rows in NumPy and tests each distinct name once in Python: the same
tables as the filters of the events in one plan (the definition, written here) on random events
with device and host collectives, c10d ops, null names and null ranks, with and without the
shortcuts."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from opscope.analysis import cluster as C
from opscope.analysis import tree
from opscope.model import schema

_NAMES = (
    "gloo:all_reduce", "mpi:broadcast", "ucc:allgather", "xgloo:all_reduce", "c10d::allreduce_",
    "nccl:all_reduce", "record_param_comms", "aten::mm", "aten::add", "ProfilerStep#1", None,
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ucc", "GLOO:x",
)  # fmt: skip
_KINDS = ("cpu_op", "user_annotation", "communication", "kernel", "runtime", "python_function")


def _events(rng: random.Random, n: int, ranks: tuple[int | None, ...]) -> pl.DataFrame:
    rows = []
    for i in range(n):
        args = {"Collective name": "allreduce", "In msg nelems": 8, "dtype": "Float"}
        rows.append(
            {
                "rank": rng.choice(ranks),
                "step": rng.choice([None, 0, 1]),
                "kind": rng.choice(_KINDS),
                "name": rng.choice(_NAMES),
                "ts_ns": rng.randrange(0, 10_000),
                "dur_ns": rng.randrange(0, 500),
                "args": json.dumps(args) if rng.random() < 0.5 else None,
                "id": i,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int32,
            "step": pl.Int32,
            "kind": schema.EventKind,
            "name": pl.String,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
            "args": pl.String,
            "id": pl.Int64,
        },
    )


def _definition(ev: pl.DataFrame, host_compute: bool) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    kind, rank = ev.get_column("kind"), ev.get_column("rank")
    dev_ranks = sorted({r for r in rank.filter(kind == "communication").to_list() if r is not None})
    lev = ev.lazy()
    host = pl.col("kind").is_in(["user_annotation", "cpu_op"]) & pl.col("name").str.contains(
        C.HOST_COLLECTIVE
    )
    calls = pl.concat(
        [
            lev.filter(pl.col("kind") == "communication"),
            lev.filter(host & ~pl.col("rank").is_in(dev_ranks)),
        ]
    ).select(*C._call_columns())
    colls = C._collectives_of(calls).collect()
    if not host_compute:
        return colls, None
    name = pl.col("name")
    compute = (
        (pl.col("kind") == "cpu_op")
        & ~name.str.contains(C.HOST_COLLECTIVE)
        & ~name.str.starts_with("c10d::")
        & ~name.str.contains("record_param_comms")
    )
    return colls, ev.filter(compute).select("rank", "ts_ns", "dur_ns")


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("shortcuts", [True, False])
def test_calls_equal_the_filters(
    seed: int, shortcuts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree, "SHORTCUTS", shortcuts)
    rng = random.Random(seed)
    ranks = ((0,), (0, 1), (0, None), (None,))[seed % 4]
    ev = _events(rng, rng.randrange(0, 80), ranks)
    if seed % 3 == 0:  # no device collective: every rank's host ones
        ev = ev.filter(pl.col("kind") != "communication")
    for host_compute in (True, False):
        got, got_comp = C._calls(ev, host_compute=host_compute)
        want, want_comp = _definition(ev, host_compute)
        assert_frame_equal(got, want)
        if want_comp is None:
            assert got_comp is None
        else:
            assert got_comp is not None
            assert_frame_equal(got_comp, want_comp)
