"""Every shared real GPU trace loads, and its counts equal an independent stdlib-json reading."""

from __future__ import annotations

import collections
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import SHARED_KINETO_FILES, shared_trace
from opscope.ingest.kineto import parse_kineto

_BIG = {  # > 5 s each on a 2-core machine (stdlib json of the same file included)
    "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    "compare/hta_trace_diff_test_v100_rank1of2.json.gz",
}
_ALL = list(SHARED_KINETO_FILES)
TRACES = [pytest.param(r, marks=pytest.mark.slow) if r in _BIG else r for r in _ALL]

# The reference mapping, written independently of the reader's tables.
CAT = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python_function",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}


@functools.cache
def _parsed(path: Path) -> Any:
    return parse_kineto(path)


@functools.cache
def _ref(path: Path) -> dict[str, Any]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    evs = doc["traceEvents"]
    kinds: collections.Counter[str] = collections.Counter()
    steps = set()
    for e in evs:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() == "trace":
            continue
        cat = str(e.get("cat", "")).lower()
        name = e.get("name", "")
        if cat in ("cpu_op", "operator", "user_annotation") and name.startswith("ProfilerStep#"):
            kinds["step"] += 1
            steps.add(int(name.split("#")[1]))
        elif cat == "kernel" and name.startswith("nccl"):
            # the only collectives in these traces are NCCL/RCCL kernels (test_comm_kinds tests
            # the classifier itself)
            kinds["communication"] += 1
        else:
            kinds[CAT.get(cat, "other")] += 1
    launches = {
        e["args"].get("correlation")
        for e in evs
        if e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime")
    }
    dev = [
        e
        for e in evs
        if e.get("ph") == "X"
        and CAT.get(str(e.get("cat", "")).lower()) in ("kernel", "memcpy", "memset")
    ]
    linked = sum(1 for e in dev if e.get("args", {}).get("correlation") in launches)
    fb_s = {e["id"] for e in evs if e.get("cat") == "fwdbwd" and e.get("ph") == "s"}
    fb_f = {e["id"] for e in evs if e.get("cat") == "fwdbwd" and e.get("ph") == "f"}
    mem = sum(1 for e in evs if e.get("ph") == "i" and e.get("name") == "[memory]")
    per_op: dict[str, int] = collections.defaultdict(int)
    for e in evs:
        if (
            e.get("ph") == "X"
            and CAT.get(str(e.get("cat", "")).lower()) == "cpu_op"
            and not e["name"].startswith("ProfilerStep#")
        ):
            per_op[e["name"]] += round(e.get("dur", 0) * 1000)
    return {
        "kinds": dict(kinds),
        "steps": len(steps),
        "linked": linked,
        "fwdbwd": len(fb_s & fb_f),
        "memory": mem,
        "per_op": dict(per_op),
        "rank": (doc.get("distributedInfo") or {}).get("rank", 0),
        "devices": len(doc.get("deviceProperties") or []),
    }


@pytest.mark.parametrize("rel", TRACES)
def test_shared_trace_counts_match_stdlib(rel: str) -> None:
    path = shared_trace(rel)
    ref = _ref(path)
    prof = _parsed(path)
    ev = prof.events
    got = dict(ev.group_by("kind").len().iter_rows())
    assert {k: int(v) for k, v in got.items()} == ref["kinds"]
    assert prof.steps.height == ref["steps"]
    dev = ev.filter(
        pl.col("kind").cast(pl.String).is_in(["kernel", "communication", "memcpy", "memset"])
    )
    assert int(dev.get_column("launch_id").is_not_null().sum()) == ref["linked"]
    # every launched kernel's launch shares its correlation id
    j = dev.filter(pl.col("launch_id").is_not_null()).join(
        ev.select(pl.col("id").alias("launch_id"), pl.col("correlation").alias("lc")),
        on="launch_id",
    )
    assert (j.get_column("correlation") == j.get_column("lc")).all()
    assert prof.flows.filter(pl.col("kind") == "fwdbwd").height == ref["fwdbwd"]
    assert prof.memory.height == ref["memory"]
    assert prof.ranks == [ref["rank"]]
    assert prof.devices.height == ref["devices"]
    per_op = dict(
        ev.filter(pl.col("kind") == "cpu_op")
        .group_by("name")
        .agg(pl.col("dur_ns").sum())
        .iter_rows()
    )
    assert per_op == ref["per_op"]


@pytest.mark.slow
def test_2021_schema_string_tids_and_external_id() -> None:
    path = shared_trace("gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    prof = _parsed(path)
    ev = prof.events
    kernels = ev.filter(pl.col("kind") == "kernel")
    # "stream 7" -> 7
    ref_streams = sorted(
        {int(e["tid"].split()[-1]) for e in doc["traceEvents"] if e.get("cat") == "Kernel"}
    )
    assert sorted(kernels.get_column("stream").unique().to_list()) == ref_streams
    ref_ext = collections.Counter(
        e["args"]["external id"] for e in doc["traceEvents"] if e.get("cat") == "Kernel"
    )
    got_ext = collections.Counter(kernels.get_column("external_id").to_list())
    assert got_ext == ref_ext
    # op threads come from string tids like "25738"
    ref_tids = {int(e["tid"]) for e in doc["traceEvents"] if e.get("cat") == "Operator"}
    assert set(ev.filter(pl.col("kind") == "cpu_op").get_column("tid").unique()) == ref_tids
    # call stacks were interned: an op's innermost frame is the first of its "Call stack"
    first = next(
        e for e in doc["traceEvents"] if e.get("cat") == "Operator" and e["args"].get("Call stack")
    )
    row = ev.filter(
        (pl.col("ts_ns") == first["ts"] * 1000) & (pl.col("name") == first["name"])
    ).row(0, named=True)
    frames = prof.stacks.filter(pl.col("stack_id") == row["stack_id"]).sort("depth")
    inner = first["args"]["Call stack"].split(";")[0]
    assert f"{frames['file'][0]}({frames['line'][0]}): {frames['function'][0]}" == inner
    assert frames.height == len(first["args"]["Call stack"].split(";"))


def _exact_ns(v: Any) -> int:
    from decimal import Decimal

    return int((Decimal(str(v)) * 1000).to_integral_value())


def _track(v: Any) -> int | None:
    if isinstance(v, int):
        return v
    tail = str(v).split()[-1] if str(v).split() else ""
    return int(tail) if tail.lstrip("-").isdigit() else None


@pytest.mark.parametrize("rel", TRACES)
def test_rows_equal_a_stdlib_decode(rel: str) -> None:
    """Every slice, field by field, equals what the stdlib json module reads (times exact)."""
    path = shared_trace(rel)
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=lambda s: s)
    want = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() == "trace":
            continue
        a = e.get("args") or {}
        want.append(
            (
                e.get("name", ""),
                _exact_ns(e["ts"]),
                max(0, _exact_ns(e.get("dur", 0))),
                _track(e.get("pid")),
                _track(e.get("tid")),
                a.get("correlation"),
                a.get("External id", a.get("external id")),
                a.get("Sequence number"),
            )
        )
    ev = _parsed(path).events
    got = ev.select(
        "name", "ts_ns", "dur_ns", "pid", "tid", "correlation", "external_id", "seq"
    ).rows()
    assert sorted(got, key=repr) == sorted(want, key=repr)
