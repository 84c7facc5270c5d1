"""Breakdown golden figures: device idle by cause, busy time and communication time per step,
recomputed from the raw JSON of real traces with plain Python (a second, simple implementation
of the rules in docs/analysis.md, sharing no code with opscope), and equal to the ns.

Rules, as documented: a step is a ``ProfilerStep#N`` range (without one, the rank's span of
all slices but Kineto's own ``Trace`` session slice); device work (kernels, copies, fills,
collectives) counts in every step it overlaps, clipped to it; per stream, and over all streams,
each gap in the busy time goes to the work that ends it: host wait when that work's launch call
(same ``correlation``) started after the gap began, kernel wait when it started at or before it,
other when nothing ends the gap in the step or the work has no launch call.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import opscope.analysis  # noqa: F401
from conftest import shared_trace
from helpers.golden import DEVICE_CATS, GOLDEN, RUNTIME_CATS, golden_files, ns
from opscope.analysis.registry import run

COMM = re.compile(r"(?i)nccl|rccl")


def _stream(e: dict[str, Any]) -> int:
    s = e.get("args", {}).get("stream")
    if s is None:
        s = e["tid"]
    return int(str(s).split()[-1])


def split(work: list[tuple[int, int, int | None]], w0: int, w1: int) -> tuple[int, ...]:
    """(busy, host wait, kernel wait, other) of ``work`` = [(start, end, launch)] in [w0, w1)."""
    iv = sorted((max(s, w0), min(e, w1), ln) for s, e, ln in work if min(e, w1) > max(s, w0))
    busy = host = kern = other = 0
    covered = w0  # end of the busy time seen so far
    seg_start = None
    for i, (s, e, _) in enumerate(iv):
        if s > covered or seg_start is None:
            if seg_start is not None:
                busy += covered - seg_start
            gap = s - covered
            launches = [ln for ss, _, ln in iv[i:] if ss == s and ln is not None]
            if not launches:
                other += gap
            elif min(launches) > covered:
                host += gap
            else:
                kern += gap
            seg_start = s
        covered = max(covered, e)
    if seg_start is not None:
        busy += covered - seg_start
    other += w1 - covered
    return busy, host, kern, other


def union(iv: list[tuple[int, int]], w0: int, w1: int) -> int:
    return split([(s, e, None) for s, e in iv], w0, w1)[0]


def golden(trace: Path) -> dict[tuple[int, int | None], dict[str, Any]]:
    """Per (rank, step): window, device-wide split, per-stream splits, communication."""
    with gzip.open(trace) as f:
        data = json.load(f)
    rank = int((data.get("distributedInfo") or {}).get("rank", 0))
    # the "Trace" slice is Kineto's own profiling session, not an event of the program
    xs = [
        e
        for e in data["traceEvents"]
        if e.get("ph") == "X" and "ts" in e and e.get("cat") != "Trace"
    ]
    cat = [str(e.get("cat", "")).lower() for e in xs]
    launch = {
        e["args"]["correlation"]: ns(e["ts"])
        for e, c in zip(xs, cat, strict=True)
        if c in RUNTIME_CATS and "correlation" in e.get("args", {})
    }
    work = [
        (ns(e["ts"]), ns(e["ts"]) + ns(e.get("dur", 0)), launch.get(e["args"].get("correlation")),
         _stream(e), bool(c == "kernel" and COMM.search(e["name"])))
        for e, c in zip(xs, cat, strict=True) if c in DEVICE_CATS
    ]  # fmt: skip
    windows: dict[int | None, tuple[int, int]] = {}
    for e in xs:
        m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
        # a step's projection on a stream (gpu_user_annotation) is not its window
        if m and e.get("cat") != "gpu_user_annotation" and int(m.group(1)) not in windows:
            windows[int(m.group(1))] = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
    if not windows:
        windows[None] = (
            min(ns(e["ts"]) for e in xs),
            max(ns(e["ts"]) + ns(e.get("dur", 0)) for e in xs),
        )
    streams = {w[3] for w in work}
    out = {}
    for step, (w0, w1) in windows.items():
        out[(rank, step)] = {
            "dur": w1 - w0,
            "all": split([w[:3] for w in work], w0, w1),
            "streams": {
                s: split([w[:3] for w in work if w[3] == s], w0, w1) for s in sorted(streams)
            },
            "comm": union([w[:2] for w in work if w[4]], w0, w1),
        }
    return out


@pytest.mark.parametrize("lazy", [False, True], ids=["in_memory", "lazy"])
@pytest.mark.parametrize("rel", GOLDEN)
def test_idle_and_communication_equal_raw_json(
    rel: str, lazy: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opscope.analysis import hotspots
    from opscope.ingest import load
    from opscope.model import Profile

    want: dict[tuple[int, int | None], dict[str, Any]] = {}
    for t in golden_files(rel):
        want.update(golden(t))
    profile = load(shared_trace(rel), cache=False)
    if lazy:  # the cache entry read back from its file, the events columns breakdown reads
        monkeypatch.setattr(hotspots, "LAZY_FILE_BYTES", 0)
        profile = Profile.open(profile.save(tmp_path / "entry"), lazy=True)
        assert hotspots.lazy_events(profile)
    res = run("breakdown", profile)
    steps = {(r["rank"], r["step"]): r for r in res.steps.iter_rows(named=True)}  # type: ignore[attr-defined]
    assert set(steps) == set(want)
    per_stream: dict[tuple[int, int | None], dict[int, tuple[int, ...]]] = defaultdict(dict)
    for r in res.streams.iter_rows(named=True):  # type: ignore[attr-defined]
        per_stream[(r["rank"], r["step"])][r["stream"]] = (
            r["busy_ns"], r["idle_host_wait_ns"], r["idle_kernel_wait_ns"], r["idle_other_ns"]
        )  # fmt: skip
    for key, w in want.items():
        got = steps[key]
        assert got["dur_ns"] == w["dur"]
        assert (
            got["device_busy_ns"], got["idle_host_wait_ns"], got["idle_kernel_wait_ns"],
            got["idle_other_ns"],
        ) == w["all"], key  # fmt: skip
        assert got["communication_ns"] == w["comm"], key
        assert per_stream[key] == w["streams"], key
    # the trace says something: device work, launch-linked idle, collectives where expected
    assert sum(w["all"][0] for w in want.values()) > 0
    assert sum(w["all"][1] + w["all"][2] for w in want.values()) > 0
    if "nccl" in rel or "rank" in rel:
        assert sum(w["comm"] for w in want.values()) > 0


SHARED = [
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "gpu/hta_amd_mi250_minitoy.json.gz",
    "gpu/hta_nccl_a100_rank0of2.json.gz",
    "gpu/hta_triton_a100.json.gz",
    "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    "gpu/tracelens_h100_bert_small.json.gz",
    "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",
    "multi_rank/hta_sampled_128rank_job",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    "compare/hta_trace_diff_test_v100_rank1of2.json.gz",
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    "ascend/small_two_rank/test_rank_0",
]


@pytest.mark.parametrize("rel", SHARED)
def test_idle_categories_sum_to_the_window(rel: str) -> None:
    from opscope.ingest import load

    res = run("breakdown", load(shared_trace(rel), cache=False))
    cats = ["idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns"]
    st = res.steps.filter(pl.col("idle_other_ns").is_not_null())  # type: ignore[attr-defined]
    for df, busy in ((st, "device_busy_ns"), (res.streams, "busy_ns")):  # type: ignore[attr-defined]
        total = pl.sum_horizontal(busy, *cats)
        assert (df.get_column("dur_ns") == df.select(total).to_series()).all()
        for c in [busy, *cats]:
            share = df.get_column(c) / df.get_column("dur_ns")
            assert ((share >= 0) & (share <= 1)).all(), c
    q = res.queue  # type: ignore[attr-defined]
    assert ((q.get_column("zero_pct") >= 0) & (q.get_column("zero_pct") <= 100)).all()
    assert (q.get_column("zero_ns") <= q.get_column("span_ns")).all()
