"""Ascend reader against the real msinsight outputs, each checked by an independent stdlib read."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.errors import InputError
from opscope.ingest.ascend import read_ascend, read_communication
from opscope.model import schema

L1R0 = "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt"
L1R1 = "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt"
L0R0 = "ascend/alexnet_ddp_910b/level0_rank0_ascend_pt"
OLD0 = "ascend/small_two_rank/test_rank_0"
OLD1 = "ascend/small_two_rank/test_rank_1"
GPT = "ascend/kernel_details_gpt_fp16"
ALL = [L1R0, L1R1, L0R0, OLD0, OLD1, GPT]


def _out(d: Path) -> Path:
    return d / "ASCEND_PROFILER_OUTPUT" if (d / "ASCEND_PROFILER_OUTPUT").is_dir() else d


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        return [
            {k.strip(): (v or "").strip(' \t\r\n"') for k, v in r.items() if k is not None}
            for r in csv.DictReader(f)
        ]


def _ns(text: str) -> int:
    return int(Decimal(text.strip(' \t"')) * 1000)


def _frames_of(p: Any) -> dict[int, list[str]]:
    """Stack id -> its frames as "file(line): function" texts, innermost first."""
    out: dict[int, list[str]] = {}
    rows = p.stacks.sort("stack_id", "depth").select("stack_id", "file", "line", "function")
    for sid, f, ln, fn in rows.iter_rows():
        out.setdefault(sid, []).append(f"{f}({ln}): {fn}")
    return out


_cache: dict[str, object] = {}


def _load(rel: str):  # type: ignore[no-untyped-def]
    if rel not in _cache:
        _cache[rel] = read_ascend(shared_trace(rel))
    return _cache[rel]


@pytest.mark.parametrize("rel", ALL)
def test_kernel_rows_times_and_shapes(rel: str) -> None:
    p = _load(rel)
    rows = _rows(_out(shared_trace(rel)) / "kernel_details.csv")
    # a kernel_details row is a kernel, or communication when its core is HCCL
    k = p.events.filter(pl.col("kind").is_in(["kernel", "communication"])).sort("ts_ns")
    assert k.height == len(rows)
    comm = p.events.filter(pl.col("kind") == "communication")
    assert comm.height == sum(r["Accelerator Core"] == "HCCL" for r in rows)
    want_ts = sorted(_ns(r["Start Time(us)"]) for r in rows)
    assert k.get_column("ts_ns").to_list() == want_ts
    want_dur = sum(round(float(r["Duration(us)"]) * 1000) for r in rows)
    assert k.get_column("dur_ns").sum() == want_dur
    # Shapes "a,b;c,d" -> [[a,b],[c,d]] and blocks, per row, compared as multisets. Rows with
    # fewer fields than the header (one real file has one) are shifted: counted as oddities.
    with open(
        _out(shared_trace(rel)) / "kernel_details.csv", newline="", encoding="utf-8-sig"
    ) as f:
        raw = list(csv.reader(f))
    short = sum(1 for r in raw[1:] if len(r) < len(raw[0]))
    assert p.meta["oddities"].get("kernel_details.csv: rows with missing fields", 0) == short
    want_rows = []
    for r in rows:
        shp = r.get("Input Shapes", "").strip('"')
        ok = shp not in ("", "N/A") and all(c.isdigit() or c in ",;" for c in shp)
        dims = (
            json.dumps([[int(x) for x in part.split(",") if x] for part in shp.split(";")])
            if ok
            else None
        )
        b = r.get("Block Num", r.get("Block Dim", "N/A"))
        blocks = int(b) if b.isdigit() else None
        want_rows.append((_ns(r["Start Time(us)"]), dims, blocks))
    got_rows = [
        (ts, None if d is None else json.dumps(json.loads(d)), b)
        for ts, d, b in k.select("ts_ns", "input_dims", "blocks").iter_rows()
    ]
    assert sorted(got_rows, key=str) == sorted(want_rows, key=str)
    assert set(p.events.columns) == set(schema.EVENTS)


@pytest.mark.parametrize("rel", [L1R0, L1R1])
def test_kernels_per_type_equal_op_statistic(rel: str) -> None:
    p = _load(rel)
    stat = _rows(_out(shared_trace(rel)) / "op_statistic.csv")
    got = {
        (t, c): (n, tot)
        for t, c, n, tot in p.events.filter(pl.col("kind") == "kernel")
        .group_by("op_type", "core_type")
        .agg(pl.len(), pl.col("dur_ns").sum())
        .iter_rows()
    }
    assert len(stat) > 20
    for r in stat:
        n, tot = got[(r["OP Type"], r["Core Type"])]
        assert n == int(r["Count"])
        assert abs(tot / 1000 - float(r["Total Time(us)"])) <= 0.002 * n + 0.001


@pytest.mark.parametrize("rel", [L1R0, L1R1, L0R0, OLD0, OLD1])
def test_steps_equal_step_trace_time(rel: str) -> None:
    p = _load(rel)
    rows = _rows(_out(shared_trace(rel)) / "step_trace_time.csv")
    got = {r["step"]: r for r in p.steps.to_dicts()}
    assert len(got) == len(rows)
    for r in rows:
        s = got[int(r["Step"])]
        assert s["computing_ns"] == round(float(r["Computing"]) * 1000)
        assert s["communication_ns"] == round(float(r["Communication"]) * 1000)
        assert s["communication_not_overlapped_ns"] == round(
            float(r["Communication(Not Overlapped)"]) * 1000
        )
        assert s["free_ns"] == round(float(r["Free"]) * 1000)
        assert s["dur_ns"] > 0


@pytest.mark.parametrize("rel", [L1R0, L1R1, L0R0])
def test_kernel_to_op_links_follow_async_npu_flows(rel: str) -> None:
    d = shared_trace(rel)
    trace = json.loads((_out(d) / "trace_view.json").read_text())
    rows = _rows(_out(d) / "kernel_details.csv")
    kernel_ts = {_ns(r["Start Time(us)"]) for r in rows}
    ops = {(e["pid"], e["tid"], _ns(e["ts"])): e["name"] for e in trace if e.get("cat") == "cpu_op"}
    src = {}
    dst = {}
    for e in trace:
        if e.get("cat") == "async_npu":
            (src if e["ph"] == "s" else dst)[e["id"]] = e
    want: dict[int, str] = {}
    for fid, s in src.items():
        f = dst.get(fid)
        if f is None:
            continue
        key = (s["pid"], s["tid"], _ns(s["ts"]))
        # HCCL collectives: the table's start can sit 1 ns before the trace's slice (rounded
        # apart); the flow end falls inside the kernel, which is what binds it.
        kt = next((t for t in (_ns(f["ts"]), _ns(f["ts"]) - 1) if t in kernel_ts), None)
        if kt is not None and key in ops:
            want[kt] = ops[key]
    p = _load(rel)
    ev = p.events
    names = dict(ev.select("id", "name").iter_rows())
    k = ev.filter(pl.col("kind").is_in(["kernel", "communication"]) & pl.col("op_id").is_not_null())
    got = {ts: names[op] for ts, op in k.select("ts_ns", "op_id").iter_rows()}
    assert len(want) > 150
    assert got == want
    assert p.meta["ascend"]["op_kernel_links"] == len(want)
    # Linked kernels inherit the op's step.
    assert k.get_column("step").null_count() == 0


def test_ranks_levels_and_metrics() -> None:
    r0, r1, l0 = _load(L1R0), _load(L1R1), _load(L0R0)
    assert (r0.ranks, r1.ranks, l0.ranks) == ([0], [1], [0])
    assert r0.meta["ascend"]["level"] == "Level1" and l0.meta["ascend"]["level"] == "Level0"
    # Level1 PMU columns become kernel_metrics: every numeric cell of a metric column.
    rows = _rows(_out(shared_trace(L1R0)) / "kernel_details.csv")
    metric_cols = [c for c in rows[0] if c.startswith(("aic_", "aiv_", "cube_utilization"))]
    want = 0
    for r in rows:
        for c in metric_cols:
            try:
                float(r[c])
                want += 1
            except ValueError:
                pass
    km = r0.kernel_metrics.filter(pl.col("metric").is_in(metric_cols))
    assert km.height == want
    mac = dict(
        r0.kernel_metrics.filter(pl.col("metric") == "aic_mac_ratio")
        .join(r0.events.select(pl.col("id").alias("event_id"), "ts_ns"), on="event_id")
        .select("ts_ns", "value")
        .iter_rows()
    )
    for r in rows:
        if r["aic_mac_ratio"] not in ("", "N/A"):
            assert mac[_ns(r["Start Time(us)"])] == pytest.approx(float(r["aic_mac_ratio"]))


def test_host_events_stacks_flows_and_counters() -> None:
    d = shared_trace(L1R0)
    trace = json.loads((_out(d) / "trace_view.json").read_text())
    p = _load(L1R0)
    cat = Counter(e.get("cat") for e in trace if e.get("ph") == "X")
    steps = sum(1 for e in trace if e.get("name", "").startswith("ProfilerStep#"))
    kinds = dict(p.events.group_by("kind").len().iter_rows())
    assert kinds["cpu_op"] + kinds["step"] == cat["cpu_op"]
    assert kinds["step"] == steps == 1
    assert kinds["python_function"] == cat["python_function"]
    # Each op with a "Call stack" has that stack, frame for frame (innermost first), as the
    # shared linker interns it; the stacks of the rest come from python frames or enclosing ops.
    frames = _frames_of(p)
    op_stack = {
        (n, ts): sid
        for n, ts, sid in p.events.filter(pl.col("kind").is_in(["cpu_op", "step"]))
        .select("name", "ts_ns", "stack_id")
        .iter_rows()
    }
    with_stack = [
        e
        for e in trace
        if e.get("cat") == "cpu_op" and e.get("args", {}).get("Call stack", "").strip("; \r\n")
    ]
    assert len(with_stack) > 100
    for e in with_stack:
        want = [t.strip() for t in e["args"]["Call stack"].split(";") if t.strip()]
        assert frames[op_stack[(e["name"], _ns(e["ts"]))]] == want, e["name"]
    # fwd_id: every backward op with a sequence number -> the forward op of that number (here
    # the fwdbwd flows' pairs), as the shared linker links Kineto's.
    fb = Counter(e["ph"] for e in trace if e.get("cat") == "fwdbwd")
    ev = p.events
    bwd = ev.filter((pl.col("kind") == "cpu_op") & pl.col("is_backward") & (pl.col("seq") >= 0))
    linked = ev.filter(pl.col("fwd_id").is_not_null())
    assert sorted(linked.get_column("id").to_list()) == sorted(bwd.get_column("id").to_list())
    pairs = linked.select("seq", "fwd_id").join(
        ev.select(pl.col("id").alias("fwd_id"), pl.col("seq").alias("fseq"), "is_backward"),
        on="fwd_id",
    )
    assert (pairs.get_column("seq") == pairs.get_column("fseq")).all()
    assert not pairs.get_column("is_backward").any()
    # torch_npu writes "Sequence number": -1 on ops without one: none of those is paired
    assert linked.height == fb["f"] > 20
    assert ev.filter(pl.col("seq") == -1).height > 500
    # Counters: one row per "C" event with a value.
    nc = sum(1 for e in trace if e.get("ph") == "C")
    mem_rows = _rows(_out(d) / "memory_record.csv")
    nmem = sum(
        1
        for r in mem_rows
        for c in ("Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)")
        if r.get(c)
    )
    assert p.counters.height == nc + nmem
    # Modules come from the nn.Module python frames enclosing the ops.
    names = {
        e["name"].split(":", 1)[1].strip()
        for e in trace
        if e.get("cat") == "python_function" and e["name"].startswith("nn.Module:")
    }
    mods = p.ops.get_column("module").drop_nulls()
    assert mods.len() > 50
    assert mods.str.starts_with("DistributedDataParallel_0").sum() > 50
    assert {part for m in mods.to_list() for part in m.split("/")} <= names


def test_memory_from_operator_memory() -> None:
    d = shared_trace(L1R0)
    rows = _rows(_out(d) / "operator_memory.csv")
    p = _load(L1R0)
    allocs = [r for r in rows if r["Allocation Time(us)"]]
    frees = [r for r in rows if r["Release Time(us)"]]
    m = p.memory
    assert m.height == len(allocs) + len(frees)
    assert m.filter(pl.col("bytes") >= 0).height == len(allocs)
    assert m.filter(pl.col("bytes") > 0).get_column("bytes").sum() == sum(
        round(float(r["Size(KB)"]) * 1024) for r in allocs
    )
    assert m.filter(pl.col("bytes") < 0).get_column("bytes").sum() == -sum(
        round(float(r["Size(KB)"]) * 1024) for r in frees
    )
    assert sorted(m.filter(pl.col("bytes") >= 0).get_column("ts_ns").to_list()) == sorted(
        _ns(r["Allocation Time(us)"]) for r in allocs
    )


@pytest.mark.parametrize("rel", [L1R0, OLD0, OLD1])
def test_read_communication(rel: str) -> None:
    out = _out(shared_trace(rel))
    comm = json.loads((out / "communication.json").read_text())
    matrix = json.loads((out / "communication_matrix.json").read_text())
    n_coll = sum(
        1 for kinds in comm.values() for ops in kinds.values() for k in ops if k != "Total Op Info"
    )
    # Links: each collective's own entry, plus a top/middle/bottom summary's copy of a
    # collective that has no own entry (once); totals never.
    n_links = 0
    for kinds in matrix.values():
        for groups in kinds.values():
            summary = re.compile(r"-(top\d*|middle\d*|bottom\d*|total)$")
            own = {g.partition("@")[0] for g in groups if g != "Total Op Info"}
            own = {o for o in own if not summary.search(o)}
            copies = set()
            for g, pairs in groups.items():
                name = g.partition("@")[0]
                if g == "Total Op Info" or name.endswith("-total"):
                    continue
                if not summary.search(name):
                    n_links += len(pairs)
                    continue
                for pair, v in pairs.items():
                    if v["Op Name"] not in own:
                        copies.add((v["Op Name"], g.partition("@")[2], pair))
            n_links += len(copies)
    c = read_communication(shared_trace(rel))
    assert c["collectives"].height == n_coll > 0
    assert c["links"].height == n_links > 0
    wait = sum(
        round(v["Communication Time Info"]["Wait Time(ms)"] * 1e6)
        for kinds in comm.values()
        for ops in kinds.values()
        for k, v in ops.items()
        if k != "Total Op Info"
    )
    assert c["collectives"].get_column("wait_ns").sum() == wait


# --------------------------------------------------------------------------------------------
# Odd and bad inputs (written in tmp_path)

_HEADER = (
    "Step Id,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),Block Num,"
    "Input Shapes,Input Data Types,aic_mac_ratio"
)


def _write(p: Path, text: str, *, bom: bool = False, crlf: bool = False) -> None:
    data = text.replace("\n", "\r\n") if crlf else text
    p.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data.encode())


def test_bom_crlf_quotes_tabs(tmp_path: Path) -> None:
    out = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    _write(
        out / "kernel_details.csv",
        _HEADER
        + "\n"
        + '3,2,MatMul_1,MatMulV2,AI_CORE,"1700000000000.123\t",12.5,24,'
        + '"""4,8;8,16""",FLOAT16;FLOAT16,0.5\n'
        + '3,2,Add_1,Add,AI_VECTOR_CORE,1700000000100.9\t,1.25,N/A,"""4,16""",FLOAT16,N/A\n',
        bom=True,
        crlf=True,
    )
    p = read_ascend(tmp_path / "x_ascend_pt")
    k = p.events.sort("ts_ns")
    assert k.get_column("ts_ns").to_list() == [1700000000000123, 1700000000100900]
    assert k.get_column("dur_ns").to_list() == [12500, 1250]
    assert k.get_column("input_dims").to_list() == ["[[4,8],[8,16]]", "[[4,16]]"]
    assert json.loads(k.get_column("input_types")[0]) == ["FLOAT16", "FLOAT16"]
    assert k.get_column("blocks").to_list() == [24, None]
    assert k.get_column("op_type").to_list() == ["MatMulV2", "Add"]
    assert k.get_column("step").to_list() == [3, 3]
    assert p.kernel_metrics.filter(pl.col("metric") == "aic_mac_ratio").get_column(
        "value"
    ).to_list() == [0.5]


def test_missing_optional_and_extra_columns(tmp_path: Path) -> None:
    _write(
        tmp_path / "kernel_details.csv",
        "Name,Start Time(us),Duration(us),Block Dim\n"
        "k1,100.5,2,8\n"
        "k2,200.25,3,4,EXTRA,MORE\n"
        "k3,300,4\n",
    )
    p = read_ascend(tmp_path)
    assert p.events.sort("ts_ns").get_column("name").to_list() == ["k1", "k2", "k3"]
    assert p.events.sort("ts_ns").get_column("blocks").to_list() == [8, 4, None]
    assert p.meta["oddities"] == {
        "kernel_details.csv: rows with extra fields": 1,
        "kernel_details.csv: rows with missing fields": 1,
    }


def test_missing_required_column_is_one_line_error(tmp_path: Path) -> None:
    _write(tmp_path / "kernel_details.csv", "Name,Duration(us)\nk1,2\n")
    with pytest.raises(InputError) as e:
        read_ascend(tmp_path)
    msg = str(e.value)
    assert "kernel_details.csv" in msg and "Start Time(us)" in msg and "\n" not in msg


def test_empty_output_dir_is_error(tmp_path: Path) -> None:
    out = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    with pytest.raises(InputError, match="nothing to read"):
        read_ascend(tmp_path / "r_ascend_pt")


def _truncated_copy(tmp_path: Path) -> tuple[Path, int]:
    src = _out(shared_trace(L1R0)) / "trace_view.json"
    data = src.read_bytes()
    cut = int(len(data) * 0.6)
    out = tmp_path / "t_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_bytes(data[:cut])
    # Independent count of the complete events before the cut.
    events = json.loads(data)
    text = data.decode()
    pos = 0
    complete = 0
    dec = json.JSONDecoder()
    pos = text.index("[") + 1
    for _ in events:
        while text[pos] in " \r\n\t,":
            pos += 1
        _, end = dec.raw_decode(text, pos)
        if end > cut:
            break
        complete += 1
        pos = end
    return tmp_path / "t_ascend_pt", complete


def test_truncated_trace_view(tmp_path: Path) -> None:
    d, complete = _truncated_copy(tmp_path)
    with pytest.raises(InputError, match="truncated"):
        read_ascend(d)
    p = read_ascend(d, salvage=True)
    assert p.meta["salvaged"]["events"] == complete


def test_cli_load_exit_code(tmp_path: Path) -> None:
    from opscope.cli.app import main

    out = tmp_path / "e_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    assert main(["load", str(tmp_path / "e_ascend_pt")]) == 2
    d, _ = _truncated_copy(tmp_path / "t")
    assert main(["load", str(d)]) == 2


def test_registry_routes_bare_kernel_table() -> None:
    import opscope

    d = shared_trace(GPT)
    rows = _rows(d / "kernel_details.csv")
    p = opscope.load(d)
    assert p.meta["format"] == "ascend"
    assert p.events.height == len(rows)
    by_type: dict[str, int] = defaultdict(int)
    for r in rows:
        by_type[r["Type"]] += 1
    assert dict(p.events.group_by("op_type").len().iter_rows()) == by_type


def test_cache_of_large_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from opscope.ingest import ascend

    d = tmp_path / "rank0_ascend_pt"
    shutil.copytree(shared_trace(L1R0), d)
    monkeypatch.setattr(ascend, "CACHE_MIN_BYTES", 1)
    first = read_ascend(d)
    assert not first.meta.get("from_cache")
    second = read_ascend(d)
    assert second.meta.get("from_cache") is True
    assert second.events.equals(first.events)
    assert second.kernel_metrics.equals(first.kernel_metrics)
    # A changed trace_view.json invalidates the entry.
    tv = d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    tv.write_bytes(tv.read_bytes().rstrip() + b"\n")
    assert not read_ascend(d).meta.get("from_cache")


def test_trace_view_without_kernel_table(tmp_path: Path) -> None:
    src = _out(shared_trace(L1R0)) / "trace_view.json"
    out = tmp_path / "k_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").symlink_to(src)
    trace = json.loads(src.read_text())
    hw = {
        e["pid"]
        for e in trace
        if e.get("ph") == "M"
        and e.get("name") == "process_name"
        and e["args"]["name"] == "Ascend Hardware"
    }
    compute = {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"}
    tasks = [
        e
        for e in trace
        if e.get("ph") == "X" and e["pid"] in hw and e["args"].get("Task Type") in compute
    ]
    groups = sum(
        1
        for e in trace
        if e.get("ph") == "X" and e["name"].startswith("hcom_") and e.get("tid") == 0
    )
    p = read_ascend(tmp_path / "k_ascend_pt")
    assert p.events.filter(pl.col("kind") == "communication").height == groups
    k = p.events.filter(pl.col("kind").is_in(["kernel", "communication"]))
    assert k.height == len(tasks) + groups
    linked = k.filter(pl.col("op_id").is_not_null()).height
    assert linked >= len(tasks) - 5  # the same flows link the trace's own tasks
    assert k.get_column("core_type").drop_nulls().len() == k.height


def test_hccl_collective_bytes() -> None:
    trace = json.loads((_out(shared_trace(L1R0)) / "trace_view.json").read_text())
    size = {"FP32": 4, "FP16": 2, "BF16": 2, "INT32": 4, "INT64": 8, "INT8": 1}
    want = {
        e["name"]: e["args"]["count"] * size[e["args"]["data_type"]]
        for e in trace
        if e.get("ph") == "X" and e["name"].startswith("hcom_") and e.get("tid") == 0
    }
    p = _load(L1R0)
    k = p.events.filter((pl.col("kind") == "communication") & (pl.col("core_type") == "HCCL"))
    assert len(want) == 4
    assert dict(k.select("name", "bytes").iter_rows()) == want
