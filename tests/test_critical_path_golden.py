"""Critical-path length per step recomputed from the raw JSON of real traces with plain Python:
a second, simple implementation of the graph documented in docs/analysis.md (steps, nesting,
launch links, host nodes with explicit idle gaps, sync and blocking-copy waits, the longest
path by covered time), sharing no code with opscope, and equal to the ns."""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from helpers.golden import DEVICE_CATS, GOLDEN, RUNTIME_CATS, golden_files, ns

OPS = {"cpu_op", "operator"}
SYNC = re.compile(r"^(?:cuda|hip)(?:Device|Stream|Event)Synchronize$|^(?:cuda|hip)Memcpy$")
COPY = re.compile(r"^(?:cuda|hip)Memcpy")
STEP = re.compile(r"ProfilerStep#\d+")


def _lane(e: dict[str, Any]) -> int:
    a = e.get("args", {})
    s = a.get("stream", e["tid"])
    return int(a.get("device", 0) or 0) * 1_000_000 + int(str(s).split()[-1])


def golden(trace: Path) -> dict[tuple[int, int], int]:
    """Critical-path length per (rank, step), step -1 holding what lies outside every step."""
    with gzip.open(trace) as f:
        data = json.load(f)
    rank = int((data.get("distributedInfo") or {}).get("rank", 0))
    xs = [e for e in data["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    for i, e in enumerate(xs):
        e["_i"], e["_s"] = i, ns(e["ts"])
        e["_e"] = e["_s"] + max(ns(e.get("dur", 0)), 0)
        e["_c"] = str(e.get("cat", "")).lower()
    steps = sorted(
        (e["_s"], e["_e"], int(m.group(1)))
        for e in xs
        if e["_c"] != "gpu_user_annotation"
        and (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"]))
    )
    starts = [s[0] for s in steps]

    def step_at(t: int) -> int:
        k = bisect.bisect_right(starts, t) - 1
        return steps[k][2] if k >= 0 and t < steps[k][1] else -1

    step_ts = {n: s for s, _, n in steps}
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in xs:
        # a ProfilerStep#N range (an "Operator" in the 2021 schema) is a step, not an operator
        if (e["_c"] in OPS or e["_c"] in RUNTIME_CATS) and not STEP.fullmatch(e["name"]):
            by_thread[(e["pid"], e["tid"])].append(e)
    # innermost operator around each runtime call on its thread: the step of its kernels
    launch_step: dict[Any, int] = {}
    calls_of: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for th, evs in by_thread.items():
        evs.sort(key=lambda e: (e["_s"], -e["_e"]))
        ops = [e for e in evs if e["_c"] in OPS]
        op_starts = [o["_s"] for o in ops]
        calls = [e for e in evs if e["_c"] in RUNTIME_CATS]
        if calls:
            calls_of[th] = sorted(calls, key=lambda e: (e["_s"], e["_i"]))
        for c in calls:
            k = bisect.bisect_right(op_starts, c["_s"]) - 1
            while k >= 0 and ops[k]["_e"] < c["_e"]:
                k -= 1
            corr = c.get("args", {}).get("correlation")
            if corr is not None:
                launch_step[corr] = step_at(ops[k]["_s"] if k >= 0 else c["_s"])
    dev = [e for e in xs if e["_c"] in DEVICE_CATS]
    copy_end: dict[Any, int] = {}
    for d in dev:
        corr = d.get("args", {}).get("correlation")
        copy_end[corr] = max(copy_end.get(corr, d["_e"]), d["_e"])
    # the rank's coverage: union of every thread's tracked slices of positive length
    cov_s: list[int] = []
    cov_e: list[int] = []
    for e in sorted((e for evs in by_thread.values() for e in evs), key=lambda e: e["_s"]):
        if e["_e"] <= e["_s"]:
            continue
        if not cov_e or e["_s"] > cov_e[-1]:
            cov_s.append(e["_s"])
            cov_e.append(e["_e"])
        cov_e[-1] = max(cov_e[-1], e["_e"])
    # nodes: (step, lane kind, lane, start, end, wait kind, key); key links launches
    nodes: list[list[Any]] = []
    # covered stretches of idle gaps: [step, lane, c, d, the thread's node after the stretch]
    stretches: list[list[Any]] = []
    pending: list[list[Any]] = []

    def add(node: list[Any]) -> None:
        for w in pending:  # the thread's next node ends its waits on other threads
            w[4] = node
        pending.clear()
        nodes.append(node)

    def idle(st: int, tid: Any, a: int, b: int) -> None:
        """An untracked gap: idle where no thread of the rank runs tracked work, else a wait."""
        for cs, ce in zip(cov_s, cov_e, strict=True):
            c, d = max(cs, a), min(ce, b)
            if c >= d:
                continue
            if a < c:
                add([st, "h", tid, a, c, None, None])
            w = [st, tid, c, d, None]
            stretches.append(w)
            pending.append(w)
            a = d
        if a < b:
            add([st, "h", tid, a, b, None, None])

    for (_pid, tid), calls in calls_of.items():
        seg_s: list[int] = []
        seg_e: list[int] = []
        tops: list[int] = []
        for e in by_thread[(_pid, tid)]:
            if not seg_e or e["_s"] >= seg_e[-1]:
                tops.append(e["_s"])
            if not seg_e or e["_s"] > seg_e[-1]:
                seg_s.append(e["_s"])
                seg_e.append(e["_e"])
            seg_e[-1] = max(seg_e[-1], e["_e"])
        prev: dict[int, int] = {}
        for c in calls:
            st, ts, end = step_at(c["_s"]), c["_s"], c["_e"]
            a = min(prev.get(st, step_ts.get(st, ts)), ts)
            prev[st] = end
            corr = c.get("args", {}).get("correlation")
            sync = SYNC.match(c["name"]) is not None
            block = not sync and COPY.match(c["name"]) and copy_end.get(corr, end + 1) <= end
            while a < ts:
                k = bisect.bisect_right(seg_e, a)
                if k < len(seg_s) and seg_s[k] <= a:
                    n = bisect.bisect_right(tops, a)
                    b = min(seg_e[k], ts, tops[n] if n < len(tops) else ts)
                    if b >= ts:
                        break
                    add([st, "h", tid, a, b, None, None])
                else:
                    b = min(seg_s[k] if k < len(seg_s) else ts, ts)
                    idle(st, tid, a, b)
                a = b
            if (sync or block) and a < ts:
                add([st, "h", tid, a, ts, None, None])
                a = ts
            wait = "sync" if sync else "copy" if block else None
            add([st, "h", tid, min(a, ts), end, wait, ("rt", corr)])
    for (_pid, tid), evs in by_thread.items():
        if (_pid, tid) in calls_of:
            continue
        cover = -(10**30)
        for e in evs:  # top-level operators of threads without runtime calls
            if e["_c"] in OPS and e["_s"] >= cover:
                nodes.append([step_at(e["_s"]), "h", tid, e["_s"], e["_e"], None, None])
            cover = max(cover, e["_e"]) if e["_c"] in OPS else cover

    # work queued before profiling (docs/analysis.md, Steps): no launch in the trace, started
    # before the first work with one on its device, unless as many launch calls whose work is
    # missing were issued before that (then they may be their own launches, correlation lost)
    def dev_id(d: dict[str, Any]) -> int:
        return int(d.get("args", {}).get("device", -1) or 0)

    first: dict[int, int] = {}
    for d in dev:
        if d.get("args", {}).get("correlation") in launch_step:
            first[dev_id(d)] = min(first.get(dev_id(d), d["_s"]), d["_s"])
    worked = {d.get("args", {}).get("correlation") for d in dev}
    lost = [
        c["_s"]
        for cs in calls_of.values()
        for c in cs
        if re.search(r"(?i)launch|memcpy|memset", c["name"])
        and c.get("args", {}).get("correlation") is not None
        and c["args"]["correlation"] not in worked
    ]
    cand = [
        d
        for d in dev
        if d.get("args", {}).get("correlation") not in launch_step
        and d["_s"] < first.get(dev_id(d), -(10**30))
    ]
    doubtful = bool(first) and sum(s < min(first.values()) for s in lost) >= len(cand)
    for d in dev:
        corr = d.get("args", {}).get("correlation")
        st = launch_step.get(corr, step_at(d["_s"]))
        if corr not in launch_step and not doubtful and d["_s"] < first.get(dev_id(d), -(10**30)):
            st = -1
        nodes.append([st, "d", _lane(d), d["_s"], d["_e"], None, ("dev", corr)])
    # a waiting call while device work of another step runs on what it waits on (a sync: every
    # stream; a blocking copy: its copy's): its wait up to the end of the last such work ending
    # before it returns is a plain host node (that work is in no node of this step)
    copy_lane: dict[Any, tuple[int, Any]] = {}
    for x in nodes:
        if x[1] == "d" and x[6][1] is not None:
            copy_lane[x[6][1]] = max(copy_lane.get(x[6][1], (x[4], x[2])), (x[4], x[2]))
    for x in [x for x in nodes if x[5] == "sync" or (x[5] == "copy" and x[6][1] in copy_lane)]:
        on = None if x[5] == "sync" else copy_lane[x[6][1]][1]
        prev = max((d[4] for d in nodes if d[1] == "d" and d[0] != x[0] and d[4] <= x[4]
                    and on in (None, d[2])), default=x[3])  # fmt: skip
        if prev > x[3]:
            nodes.append([x[0], "h", x[2], x[3], prev, None, None])
            x[3] = prev
    out = {}
    graphs: dict[int, list[list[Any]]] = defaultdict(list)
    for n in nodes:
        graphs[n[0]].append(n)
    waits: dict[int, list[list[Any]]] = defaultdict(list)
    for w in stretches:
        waits[w[0]].append(w)
    for st, g in graphs.items():
        out[(rank, st)] = longest(g, waits[st])
    return out


def longest(g: list[list[Any]], waits: list[list[Any]]) -> int:
    """The documented longest path over one step's nodes; ``waits``: the covered stretches."""
    n = len(g)
    preds: list[list[int]] = [[] for _ in range(n)]
    at = {id(x): i for i, x in enumerate(g)}
    for _st, tid, c, d, after in waits:  # host nodes of other threads ending in (c, d]
        preds[at[id(after)]] += [
            i for i, x in enumerate(g) if x[1] == "h" and x[2] != tid and c < x[4] <= d
        ]
    lanes: dict[tuple[str, Any], list[int]] = defaultdict(list)
    for i, x in enumerate(g):
        lanes[(x[1], x[2])].append(i)
    for idx in lanes.values():
        idx.sort(key=lambda i: (g[i][3], g[i][4]))
        for u, v in pairwise(idx):
            preds[v].append(u)
    rt = {x[6][1]: i for i, x in enumerate(g) if x[6] and x[6][0] == "rt" and x[6][1] is not None}
    for i, x in enumerate(g):
        if x[6] and x[6][0] == "dev" and x[6][1] in rt:
            preds[i].append(rt[x[6][1]])
            if g[rt[x[6][1]]][5] == "copy":
                preds[rt[x[6][1]]].append(i)
    dev_lanes = {k: v for k, v in lanes.items() if k[0] == "d"}
    for i, x in enumerate(g):
        if x[5] == "sync":
            for idx in dev_lanes.values():
                ok = [j for j in idx if g[j][4] <= x[4]]
                if ok:
                    preds[i].append(max(ok, key=lambda j: g[j][4]))
    ps = [[p for p in preds[i] if p != i and g[p][4] <= g[i][4]] for i in range(n)]
    start = {i: g[i][3] for i in range(n)}
    for i in range(n):
        if g[i][5]:
            ready = max((g[p][4] for p in ps[i] if g[p][1] == "d"), default=start[i])
            start[i] = min(max(start[i], ready), g[i][4])
    # each node's best length by the definition, iterated to its least fixed point (no node
    # order: an edge between two nodes of the same end counts whichever is listed first, and a
    # cycle of such edges, which add nothing of their own, is harmless)
    best = {i: g[i][4] - start[i] for i in range(n)}
    changed = True
    while changed:  # (in end order, only so that few passes are needed)
        changed = False
        for i in sorted(range(n), key=lambda i: (g[i][4], g[i][3])):
            for p in ps[i]:
                b = best[p] + max(g[i][4] - max(start[i], g[p][4]), 0)
                if b > best[i]:
                    best[i] = b
                    changed = True
    return max(best.values(), default=0)


# with the test V100 trace: syncs that end with the kernel they waited on (edges between nodes
# of equal end time, which opscope read as 0 before 2026-12-05: 2.5 ms short on one step)
@pytest.mark.parametrize("rel", [*GOLDEN, "compare/hta_trace_diff_test_v100_rank1of2.json.gz"])
def test_critical_path_length_equals_raw_json(rel: str) -> None:
    from opscope.analysis.critical_path import critical_path
    from opscope.analysis.registry import Options
    from opscope.ingest import load

    want: dict[tuple[int, int], int] = {}
    for t in golden_files(rel):
        want.update(golden(t))
    res = critical_path(load(shared_trace(rel), cache=False), Options())
    got = {(r["rank"], r["step"]): r["path_ns"] for r in res.steps.iter_rows(named=True)}
    assert got == want
    assert max(want.values()) > 0
