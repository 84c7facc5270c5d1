"""Timeline viewer: queries checked against brute force and the raw trace; server refusals."""

from __future__ import annotations

import gzip
import http.client
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.model import Profile
from opscope.report.viewer import TimelineIndex, make_server

MI300 = "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"


def _generated(n_top: int = 300, seed: int = 7) -> tuple[Profile, list[dict[str, Any]]]:
    """Nested slices on two threads and one stream, with random widths (some sub-pixel)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []

    def add(tid: int, kind: str, ts: int, dur: int, depth: int, parent: int | None) -> int:
        i = len(rows)
        pid = 1 if kind != "kernel" else 0
        name = f"op{rng.randrange(12)}"
        rows.append(
            {"id": i, "rank": 0, "kind": kind, "name": name, "pid": pid, "tid": tid,
             "ts_ns": 1_000_000_000_000 + ts, "dur_ns": dur, "depth": depth, "parent_id": parent}
        )  # fmt: skip
        return i

    for tid in (11, 12):
        t = 0
        for _ in range(n_top):
            dur = rng.choice([50, 400, 3_000, 20_000])
            top = add(tid, "cpu_op", t, dur, 0, None)
            c = t
            while c + 10 < t + dur and rng.random() < 0.7:
                cd = rng.randrange(1, max(2, (t + dur - c) // 2))
                add(tid, "cpu_op", c, cd, 1, top)
                c += cd + rng.randrange(1, 20)
            t += dur + rng.randrange(0, 500)
    t = 0
    for _ in range(n_top):
        dur = rng.choice([30, 800, 5_000])
        add(7, "kernel", t, dur, 0, None)
        t += dur + rng.randrange(0, 300)
    ev = pl.DataFrame(rows)
    mem = pl.DataFrame(
        {
            "rank": [0] * 50,
            "ts_ns": [1_000_000_000_000 + 1000 * i for i in range(50)],
            "bytes": [100] * 50,
            "total_allocated": [(i * 37) % 1000 for i in range(50)],
            "device_type": [1] * 50,
            "device": [0] * 50,
        }
    )
    return Profile.from_tables(events=ev, memory=mem), rows


def test_slices_match_brute_force_aggregation() -> None:
    prof, rows = _generated()
    idx = TimelineIndex(prof)
    origin = min(r["ts_ns"] for r in rows)
    assert idx.origin_ns == origin
    tracks = {(t.pid, t.tid): t.id for t in idx.tracks if t.type == "slice"}
    for start, end, px in [(0, 3_000_000, 800), (100_000, 400_000, 1200), (0, 50_000, 5000)]:
        nspp = max(1, (end - start) // px)
        res = idx.slices(list(tracks.values()), start, end, px)
        assert res["ns_per_px"] == nspp
        for (pid, tid), track in tracks.items():
            mine = [
                r for r in rows
                if r["pid"] == pid and r["tid"] == tid
                and r["ts_ns"] - origin < end and r["ts_ns"] - origin + r["dur_ns"] > start
            ]  # fmt: skip
            big = {r["id"] for r in mine if r["dur_ns"] >= nspp}
            buckets = Counter(
                (r["depth"], (r["ts_ns"] - origin - start) // nspp)
                for r in mine
                if r["dur_ns"] < nspp
            )
            got = next(t for t in res["tracks"] if t["track"] == track)
            singles = {i for i, c in zip(got["id"], got["count"], strict=True) if c == 1}
            merged = [c for c in got["count"] if c > 1]
            assert sum(got["count"]) == len(mine)
            assert len(got["ts"]) == len(big) + len(buckets)
            assert big <= singles
            assert sorted(merged) == sorted(c for c in buckets.values() if c > 1)
            # Each slice's name is the one the events table holds for its id (longest of a bucket).
            by_id = {r["id"]: r for r in rows}
            for i, n in zip(got["id"], got["name"], strict=True):
                assert got["names"][n] == by_id[i]["name"]


def test_counter_track_keeps_the_peak() -> None:
    prof, _ = _generated()
    idx = TimelineIndex(prof)
    counters = [t for t in idx.tracks if t.type == "counter"]
    assert [t.name for t in counters] == ["memory allocated (device 0)"]
    res = idx.slices([counters[0].id], 0, 60_000, 7)  # far fewer pixels than samples
    got = res["tracks"][0]
    assert len(got["ts"]) <= 9
    assert max(got["value"]) == max((i * 37) % 1000 for i in range(50))


def _raw_x(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        d = json.load(f)
    return [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]


@pytest.fixture(scope="module")
def mi300() -> tuple[TimelineIndex, list[dict[str, Any]]]:
    import opscope

    path = shared_trace(MI300)
    return TimelineIndex(opscope.load(path, cache=False)), _raw_x(path)


@pytest.mark.parametrize(
    ("q", "case", "word"),
    [
        ("conv", False, False),
        ("Conv", True, False),
        ("aten::conv2d", False, True),
        ("add", False, True),
    ],
)
def test_search_counts_match_the_raw_trace(mi300: Any, q: str, case: bool, word: bool) -> None:
    idx, raw = mi300
    flags = 0 if case else re.IGNORECASE
    pat = re.compile((r"\b" + re.escape(q) + r"\b") if word else re.escape(q), flags)
    expected = sum(1 for e in raw if pat.search(e["name"]))
    res = idx.search(q, case=case, word=word)
    assert res["total"] == expected
    assert all(pat.search(m["name"]) for m in res["matches"])
    ts = [m["ts"] for m in res["matches"]]
    assert ts == sorted(ts)


def test_event_details_and_flows_agree_with_the_raw_trace(mi300: Any) -> None:
    idx, raw = mi300
    launches: dict[int, list[dict[str, Any]]] = {}
    for e in raw:
        if e["cat"] == "cuda_runtime" and "correlation" in e.get("args", {}):
            launches.setdefault(e["args"]["correlation"], []).append(e)
    kernel = next(
        e
        for e in raw
        if e["cat"] == "kernel" and len(launches.get(e["args"]["correlation"], [])) == 1
    )
    runtime = launches[kernel["args"]["correlation"]]
    hit = [m for m in idx.search(kernel["name"], case=True)["matches"]
           if abs(m["ts"] + idx.origin_ns - round(kernel["ts"] * 1000)) <= 1]  # fmt: skip
    assert len(hit) == 1
    ev = idx.event(hit[0]["id"])
    assert ev is not None
    assert ev["launch"]["name"] == runtime[0]["name"]
    assert ev["dur"] == pytest.approx(kernel["dur"] * 1000, abs=1)
    flows = idx.flows(hit[0]["id"])["flows"]
    assert any(f["kind"] == "ac2g" and f["src"]["name"] == runtime[0]["name"] for f in flows)


def test_call_stack_frames_are_enclosing_python_functions(mi300: Any) -> None:
    idx, raw = mi300
    res = idx.search("aten::conv2d", case=True, word=True)
    ev = idx.event(res["matches"][0]["id"])
    assert ev is not None and ev["stack"]
    start = ev["ts"] + idx.origin_ns
    end = start + ev["dur"]
    enclosing = {
        e["name"] for e in raw
        if e["cat"] == "python_function" and e["tid"] == ev["tid"]
        and round(e["ts"] * 1000) <= start + 1 and round((e["ts"] + e["dur"]) * 1000) >= end - 1
    }  # fmt: skip
    for f in ev["stack"]:
        frame = f["function"] if f["line"] is None else f"{f['file']}({f['line']}): {f['function']}"
        assert frame in enclosing
    src = ev["source"]
    assert src is not None and src["is_user"]
    assert "site-packages" not in src["file"] and not src["file"].startswith("torch/")


# Server ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Any:
    prof, _ = _generated(50)
    srv = make_server(prof, overlays=False)
    srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()


def _get(srv: Any, path: str, host: str | None = None, method: str = "GET") -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.putrequest(method, path, skip_host=True)
    c.putheader("Host", host if host is not None else f"127.0.0.1:{srv.port}")
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def test_server_answers_its_own_host(server: Any) -> None:
    status, body = _get(server, "/api/tracks")
    assert status == 200
    assert len(json.loads(body)["tracks"]) == 4  # two threads, one stream, one counter
    assert _get(server, "/", host=f"localhost:{server.port}")[0] == 200
    assert b"viewer.js" in _get(server, "/")[1]


@pytest.mark.parametrize(
    "host", ["evil.example:80", "127.0.0.1", "127.0.0.1:1", "", "localhost.evil.com"]
)
def test_server_refuses_other_hosts(server: Any, host: str) -> None:
    assert (
        _get(
            server,
            "/api/tracks",
            host=host.replace(":80", f":{server.port}") if "evil" in host else host,
        )[0]
        == 403
    )


@pytest.mark.parametrize(
    "path",
    [
        "/../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/assets/..%2fviewer.js",
        "/api/../../x",
        "/..\\x",
        "//etc/passwd",
    ],
)
def test_server_refuses_traversal(server: Any, path: str) -> None:
    status, body = _get(server, path)
    # http.server itself folds a leading "//" to "/", which then matches no route (404).
    assert status == (404 if path.startswith("//") else 403)
    assert b"root:" not in body


def test_server_serves_no_files_and_no_writes(server: Any) -> None:
    assert _get(server, "/etc/passwd")[0] == 404
    assert _get(server, "/viewer.py")[0] == 404
    assert _get(server, "/api/tracks", method="POST")[0] == 405
    assert _get(server, "/api/event/999999")[0] == 404
    assert _get(server, "/api/slices?track=x&start_ns=0&end_ns=1")[0] == 400


def test_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    from opscope.cli.app import main

    missing = tmp_path / "nope.json"
    assert main(["view", str(missing), "--no-browser"]) == 2
    assert main(["view", str(missing), "--no-browser", "--port", "70000"]) == 2
    assert main(["html", str(missing), "-o", str(tmp_path / "r.html")]) == 2
    assert not (tmp_path / "r.html").exists()


# Folded stacks, range summaries, overlay bands, stream launchers -------------------------------


def test_folded_depths_match_a_walk_up_the_parents(mi300: Any) -> None:
    from opscope.report.viewer.query import FOLD_LEVELS

    idx, _ = mi300
    ev = idx.profile.events.select("id", "kind", "parent_id", "depth")
    kind = dict(zip(ev["id"].to_list(), ev["kind"].cast(pl.String).to_list(), strict=True))
    parent = dict(zip(ev["id"].to_list(), ev["parent_id"].to_list(), strict=True))

    def expected(i: int) -> int:
        py = anc = 0
        p = parent[i]
        while p is not None:
            anc += 1
            py += kind[p] == "python_function"
            p = parent[p]
        if kind[i] == "python_function" and py >= FOLD_LEVELS:
            return -1
        return min(py, FOLD_LEVELS) + anc - py

    ids = ev["id"].to_list()
    sample = random.Random(3).sample(ids, 400)
    assert any(kind[i] == "python_function" and expected(i) < 0 for i in ids)
    for i in sample:
        s = idx.summary(i)
        assert s is not None
        assert s["fdepth"] == expected(i), (i, kind[i])
    # Per track, the folded height is the deepest shown row, and folding hides frames.
    by_track: dict[int, int] = {}
    track_of = dict(zip(*idx._id_track.select("id", "track").to_dict().values(), strict=True))
    for i in ids:
        by_track[track_of[i]] = max(by_track.get(track_of[i], -1), expected(i))
    folded = {t.id: t.folded_depth for t in idx.tracks if t.folded_depth is not None}
    assert folded
    for t, d in folded.items():
        assert d == by_track[t]
        assert d < next(x.max_depth for x in idx.tracks if x.id == t)
    # The folded answer holds no frame below the kept ones.
    t = next(iter(folded))
    res = idx.slices([t], 0, idx.end_ns, 200_000, folded=True)["tracks"][0]
    assert res["folded"] is True and max(res["depth"]) == folded[t]


def test_search_total_is_not_capped_by_the_page() -> None:
    prof, rows = _generated()
    idx = TimelineIndex(prof)
    everything = sorted(rows, key=lambda r: r["ts_ns"])
    assert len(everything) > 1000
    pages = [idx.search("op", offset=o) for o in range(0, len(everything) + 1000, 1000)]
    assert {p["total"] for p in pages} == {len(everything)}
    assert [len(p["matches"]) for p in pages] == [
        max(0, min(1000, len(everything) - o)) for o in range(0, len(everything) + 1000, 1000)
    ]
    got = [m for p in pages for m in p["matches"]]
    assert sorted(m["id"] for m in got) == sorted(r["id"] for r in rows)
    ts = [m["ts"] for m in got]
    assert ts == sorted(ts)


@pytest.mark.parametrize(("start", "end"), [(0, 50_000), (123_456, 700_000), (0, 10**9)])
def test_range_summary_matches_brute_force(start: int, end: int) -> None:
    prof, rows = _generated()
    idx = TimelineIndex(prof)
    origin = min(r["ts_ns"] for r in rows)
    inside = []
    for r in rows:
        a, b = r["ts_ns"] - origin, r["ts_ns"] - origin + r["dur_ns"]
        if a < end and b > start:
            inside.append((r["kind"], r["name"], min(b, end) - max(a, start)))
    res = idx.range_summary(start, end, top=5)
    assert res["slices"] == len(inside)
    assert res["ops"] == sum(1 for k, _, _ in inside if k == "cpu_op")
    assert res["kernels"] == sum(1 for k, _, _ in inside if k == "kernel")
    assert res["kernel_ns"] == sum(d for k, _, d in inside if k == "kernel")
    per_kind: dict[str, list[int]] = {}
    per_name: dict[tuple[str, str], list[int]] = {}
    for k, n, d in inside:
        for table, key in ((per_kind, k), (per_name, (n, k))):
            table.setdefault(key, [0, 0])  # type: ignore[attr-defined]
            table[key][0] += 1  # type: ignore[index]
            table[key][1] += d  # type: ignore[index]
    assert {x["kind"]: [x["count"], x["total_ns"]] for x in res["by_kind"]} == per_kind
    top = sorted(per_name.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0][0]))[:5]
    assert [(x["name"], x["kind"], x["count"], x["total_ns"]) for x in res["top"]] == [
        (n, k, c, t) for (n, k), (c, t) in top
    ]
    # Restricted to one track.
    kernel_track = next(t.id for t in idx.tracks if t.is_device)
    only = idx.range_summary(start, end, [kernel_track])
    assert only["slices"] == only["kernels"] == sum(1 for k, _, _ in inside if k == "kernel")


def test_overlays_come_as_layers_and_critical_bands() -> None:
    prof, rows = _generated()
    origin = min(r["ts_ns"] for r in rows)
    path = [r["id"] for r in rows if r["tid"] == 11][:400]  # parents and their children
    items = [
        {"kind": "anomaly", "id": rows[3]["id"], "label": "x"},
        {"kind": "finding", "rule": "zeta", "id": rows[5]["id"], "label": "z"},
        {"kind": "finding", "rule": "alpha", "id": rows[6]["id"], "label": "a"},
        {"kind": "finding", "rule": "alpha", "id": None, "label": "a, nowhere"},
    ] + [{"kind": "critical_path", "id": i} for i in path]
    idx = TimelineIndex(prof, overlays=lambda _: items)
    res = idx.overlays()
    # Findings first, each rule's together, rules in the order they came (advise: by saving).
    assert [(x["key"], x["count"]) for x in res["layers"]] == [
        ("finding:zeta", 1),
        ("finding:alpha", 2),
        ("anomaly", 1),
        ("critical_path", len(path)),
    ]
    assert [o["layer"] for o in res["overlays"]] == [
        "finding:zeta",
        "finding:alpha",
        "finding:alpha",
        "anomaly",
    ]
    spans = sorted(
        (rows[i]["ts_ns"] - origin, rows[i]["ts_ns"] - origin + rows[i]["dur_ns"]) for i in path
    )
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    assert len(res["bands"]) == 1
    band = res["bands"][0]
    assert [list(x) for x in zip(band["ts"], band["end"], strict=True)] == merged
    assert len(merged) < len(path)


def test_device_streams_name_their_launching_thread(mi300: Any) -> None:
    idx, raw = mi300
    launcher_tid: dict[int, Any] = {}
    for e in raw:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launcher_tid[e["args"]["correlation"]] = e["tid"]
    per_stream: dict[tuple[Any, Any], Counter[Any]] = {}
    for e in raw:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            c = e.get("args", {}).get("correlation")
            if c in launcher_tid:
                per_stream.setdefault((e["pid"], e["tid"]), Counter())[launcher_tid[c]] += 1
    tracks = {t.id: t for t in idx.tracks}
    checked = 0
    for t in idx.tracks:
        if not t.is_device or t.launched_by is None:
            continue
        counts = per_stream[(t.pid, t.tid)]
        best = max(counts.values())
        assert tracks[t.launched_by].tid in {tid for tid, n in counts.items() if n == best}
        checked += 1
    assert checked == len(per_stream) >= 2


def test_server_range_and_folded_slices(server: Any) -> None:
    status, body = _get(server, "/api/range?start_ns=0&end_ns=100000")
    assert status == 200
    res = json.loads(body)
    assert res["slices"] > 0 and res["by_kind"]
    status, body = _get(server, "/api/range?start_ns=0&end_ns=100000&track=0&top=3")
    assert status == 200 and len(json.loads(body)["top"]) <= 3
    assert _get(server, "/api/range?start_ns=x&end_ns=1")[0] == 400
    status, body = _get(server, "/api/slices?track=0&start_ns=0&end_ns=100000&px=500&fold=1")
    assert status == 200 and json.loads(body)["tracks"][0]["folded"] is False  # nothing to fold


def test_track_and_group_names_from_the_threads_table() -> None:
    prof, _ = _generated(20)
    threads = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "pid": [1, 1, 0],
            "tid": [11, 12, 7],
            "name": ["Python · Thread 11", "Python · Thread 12", "stream <7>"],
            "is_device": [False, False, True],
        }
    )
    devices = pl.DataFrame({"rank": [0], "device": [0], "name": ["NVIDIA Z100"]})
    idx = TimelineIndex(Profile.from_tables(events=prof.events, threads=threads, devices=devices))
    got = {(t.pid, t.tid): (t.group, t.name) for t in idx.tracks if t.type == "slice"}
    assert got == {
        (1, 11): ("rank 0 · Python (1)", "Thread 11"),
        (1, 12): ("rank 0 · Python (1)", "Thread 12"),
        (0, 7): ("rank 0 · device 0 (NVIDIA Z100)", "stream <7>"),
    }
    # A process whose threads do not all carry one prefix keeps its number, names whole.
    threads2 = threads.with_columns(
        pl.when(pl.col("tid") == 12).then(pl.lit("loader")).otherwise(pl.col("name")).alias("name")
    )
    idx2 = TimelineIndex(Profile.from_tables(events=prof.events, threads=threads2))
    got2 = {(t.pid, t.tid): (t.group, t.name) for t in idx2.tracks if t.type == "slice"}
    assert got2[(1, 11)] == ("rank 0 · process 1", "Python · Thread 11")
    assert got2[(1, 12)] == ("rank 0 · process 1", "loader")
