"""Kineto track names carry the trace's ``process_name`` ("PROCESS · THREAD"), as Ascend's do.

Expected names come from a plain-JSON reading of the shared GPU traces.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.ingest.kineto import parse_kineto
from opscope.report.viewer.query import TimelineIndex

TRACES = [
    "gpu/tracelens_h100_bert_small.json.gz",
    "gpu/hta_amd_mi250_minitoy.json.gz",
    "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",  # string tids
]
# Device activity categories (current and 2021 spellings): the pids holding them are GPUs.
DEVICE_CATS = {
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "gpu_user_annotation",
    "Kernel",
    "Memcpy",
    "Memset",
}


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        doc = json.loads(f.read())
    return list(doc["traceEvents"] if isinstance(doc, dict) else doc)


@pytest.mark.parametrize("rel", TRACES)
def test_host_tracks_named_after_their_process(rel: str) -> None:
    path = shared_trace(rel)
    raw = _events(path)
    pname: dict[int, str] = {}
    tname: dict[tuple[int, int], str] = {}
    for e in raw:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "process_name":
            pname.setdefault(int(e["pid"]), e["args"]["name"])
        elif e.get("name") == "thread_name":
            tname.setdefault((int(e["pid"]), int(e["tid"])), e["args"]["name"])
    device_pids = {int(e["pid"]) for e in raw if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS}
    host_named = [(p, t) for p, t in tname if p in pname and p not in device_pids]
    assert host_named, "the trace names no host thread of a named process"

    prof = parse_kineto(path)
    got = {(p, t): n for p, t, n in prof.threads.select("pid", "tid", "name").iter_rows()}
    for (p, t), n in tname.items():
        want = f"{pname[p]} · {n}" if (p, t) in host_named else n
        assert got[(p, t)] == want

    # The viewer's host group headers name the process (they read "process PID" before).
    idx = TimelineIndex(prof)
    host = [tr for tr in idx.tracks if not tr.is_device and (tr.pid, tr.tid) in host_named]
    assert host
    for tr in host:
        assert tr.group == f"rank {tr.rank} · {pname[tr.pid]} ({tr.pid})"
        assert tr.name == tname[(tr.pid, tr.tid)]
    # Device streams keep their names and the device header.
    dev = [tr for tr in idx.tracks if tr.is_device]
    assert dev and all(" · device " in tr.group for tr in dev)
    assert prof.threads.filter(pl.col("is_device")).height == len({(tr.pid, tr.tid) for tr in dev})
