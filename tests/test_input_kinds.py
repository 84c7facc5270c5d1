"""Files that are valid JSON but not (only) a torch.profiler trace are named, never misread:
torch's memory timeline export, torch's execution trace, a rocprofiler-sdk JSON, a loose Ascend
trace_view.json, a CUPTI range-profiler trace, stray JSON in a ranks directory, one rank of a
larger job opened alone."""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from opscope.cli.app import main
from opscope.doctor import diagnose
from opscope.errors import UnsupportedFormatError
from opscope.ingest import load
from opscope.ingest.ascend import read_ascend
from opscope.ingest.detect import classify
from opscope.ingest.summary import summary


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def _kineto(events: list[dict[str, Any]], **header: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, **header, "traceEvents": events}


def _op(name: str, ts: float, dur: float = 5.0) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


# -- torch's memory timeline export --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "doc"),
    [
        # export_memory_timeline("x.json" / "x.raw"): [times, sizes by category]
        ("x.raw", [[1000, 1010, 1020], [[0, 64, 0], [0, 64, 32], [0, 0, 32]]]),
        # export_memory_timeline("x.raw.json.gz"): [ts, action, bytes, category] per event
        ("x.raw.json.gz", [[1000, 1, 64, 2], [1010, 1, 32, 3], [1020, 3, 64, 2]]),
    ],
)
def test_memory_timeline_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, doc: Any
) -> None:
    p = tmp_path / name
    text = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    with pytest.raises(UnsupportedFormatError, match="memory timeline export"):
        load(p)
    code, out = _cli(capsys, "load", str(p))
    assert code == 2
    assert out.strip().count("\n") == 0 and "not a trace" in out and str(p) in out


def test_memory_timeline_written_by_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    m = torch.nn.Linear(8, 8)
    opts = {"profile_memory": True, "record_shapes": True, "with_stack": True}
    with profile(activities=[ProfilerActivity.CPU], **opts) as pr:
        m(torch.randn(4, 8)).sum().backward()
    p = tmp_path / "x.raw"
    with warnings.catch_warnings():  # (deprecated in torch 2.6+, still written)
        warnings.simplefilter("ignore")
        pr.export_memory_timeline(str(p), device="cpu")
    assert classify(p).kind == "memory_timeline"
    with pytest.raises(UnsupportedFormatError, match="memory timeline export"):
        load(p)


# -- torch's execution trace (ExecutionTraceObserver) --------------------------------------------


def test_execution_trace_written_by_torch_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ExecutionTraceObserver

    p = tmp_path / "et.json"
    et = ExecutionTraceObserver().register_callback(str(p))
    et.start()
    torch.nn.Linear(8, 8)(torch.randn(4, 8)).sum().backward()
    et.stop()
    et.unregister_callback()
    assert json.loads(p.read_text())["nodes"]  # a real one, with operators
    assert classify(p).kind == "execution_trace"
    with pytest.raises(UnsupportedFormatError, match="PyTorch execution trace"):
        load(p)
    code, out = _cli(capsys, "report", str(p))
    assert code == 2 and out.strip().count("\n") == 0 and "Traceback" not in out
    assert "execution trace" in out and str(p) in out


def test_execution_trace_in_a_ranks_directory_is_skipped_with_a_note(tmp_path: Path) -> None:
    et = {"schema": "1.0.1", "pid": 7, "time": "2023-07-12", "start_ts": 1, "nodes": [{"id": 1}]}
    (tmp_path / "rank0_et.json").write_text(json.dumps(et))
    (tmp_path / "rank0.json").write_text(json.dumps(_kineto([_op("aten::mm", 10.0)])))
    prof = load(tmp_path, cache=False)
    assert prof.events.height == 1
    assert any("rank0_et.json" in n and "execution trace" in n for n in prof.meta["notes"])


def test_an_object_with_nodes_but_no_schema_is_not_an_execution_trace(tmp_path: Path) -> None:
    p = tmp_path / "graph.json"
    p.write_text(json.dumps({"nodes": [1, 2], "edges": []}))
    assert classify(p).kind == "not_trace"


# -- rocprofiler-sdk JSON ------------------------------------------------------------------------


def test_rocprof_json_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "908_results.json"
    p.write_text(json.dumps({"rocprofiler-sdk-tool": [{"metadata": {"pid": 908}, "agents": []}]}))
    code, out = _cli(capsys, "load", str(p))
    assert code == 2 and "rocprofiler-sdk JSON" in out and "Traceback" not in out


# -- a loose Ascend trace_view.json --------------------------------------------------------------


def test_loose_ascend_trace_view_is_read_as_ascend(tmp_path: Path) -> None:
    src = shared_trace(
        "ascend/alexnet_ddp_910b/level0_rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    )
    p = tmp_path / "trace_view.json"
    shutil.copy(src, p)
    prof = load(p, cache=False)
    s = summary(prof)
    assert s["format"] == "ascend"
    assert any("Ascend reader" in n for n in s["notes"])
    ref = read_ascend(tmp_path, cache=False)
    assert s["kernels"] == summary(ref)["kernels"] > 0
    raw = json.loads(src.read_text())
    hw = {
        e["pid"]
        for e in raw
        if e.get("ph") == "M" and e.get("name") == "process_name"
        if e["args"]["name"] in ("Ascend Hardware", "HCCL")
    }
    hw_names = {e["name"] for e in raw if e.get("ph") == "X" and e.get("pid") in hw}
    assert set(prof.kernels.get_column("name").to_list()) <= hw_names


def test_renamed_ascend_trace_says_open_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ascend writes timestamps as strings (Kineto never does): enough to tell it apart.
    ev = [{"ph": "X", "name": "aten::add", "pid": 7, "tid": 7, "ts": "1736405443863674.400"}]
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(ev))
    code, out = _cli(capsys, "load", str(p))
    assert code == 2 and "Ascend profiler trace_view.json" in out and "_ascend_pt" in out


# -- CUPTI range-profiler trace ------------------------------------------------------------------


def test_cupti_counter_trace_gets_a_note(tmp_path: Path) -> None:
    counters = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1234}
    ranges = [
        {"ph": "X", "cat": "cuda_profiler_range", "name": f"kernel{i}", "pid": 0, "tid": 0}
        | {"ts": 1000.0 + 250 * i, "dur": 250, "args": counters}
        for i in range(3)
    ]
    p = tmp_path / "cupti.json"
    p.write_text(json.dumps(_kineto([_op("aten::mm", 900.0, 900.0), *ranges])))
    s = summary(load(p, cache=False))
    assert s["kernels"] == 0
    (note,) = s["notes"]
    assert "CUPTI range-profiler trace: 3 kernels" in note and "all 250 us long" in note
    again = summary(load(p))
    assert load(p).meta["from_cache"] and summary(load(p))["notes"] == again["notes"] == [note]


def test_plain_trace_has_no_notes(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_kineto([_op("aten::mm", 0.0)])))
    assert summary(load(p, cache=False))["notes"] == []


# -- stray JSON in a ranks directory -------------------------------------------------------------


def test_ranks_directory_skips_non_trace_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "job"
    d.mkdir()
    for r in range(2):
        info = {"rank": r, "world_size": 2}
        (d / f"rank-{r}.json").write_text(
            json.dumps(_kineto([_op(f"op{r}", 0.0)], distributedInfo=info))
        )
    (d / "config.json").write_text(json.dumps({"lr": 0.1, "steps": 5}))
    (d / "truth.json").write_text(json.dumps({"expected": {"kernels": 3}}))
    (d / "memory.json").write_text(json.dumps([[1, 2], [[0, 1], [1, 1]]]))
    prof = load(d, cache=False)
    assert sorted(set(prof.ranks)) == [0, 1]
    notes = summary(prof)["notes"]
    for name in ("config.json", "truth.json", "memory.json"):
        assert sum(n.startswith(f"skipped {name}:") for n in notes) == 1
    code, out = _cli(capsys, "load", str(d), "--no-cache")
    assert code == 0 and "skipped config.json" in out


def test_directory_of_only_non_traces_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"lr": 0.1}))
    with pytest.raises(Exception, match=r"not traces: skipped config.json") as e:
        load(tmp_path)
    assert e.value.__class__.__name__ == "InputError"


# -- one rank of many, opened on purpose ---------------------------------------------------------


def test_one_rank_opened_alone_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    src = shared_trace("multi_rank/hta_sampled_128rank_job/rank-0.json.gz")
    di = json.loads(gzip.decompress(src.read_bytes()))["distributedInfo"]
    want = f"rank {di['rank']} of {di['world_size']}; open the directory for all ranks"
    prof = load(src)
    assert want in summary(prof)["notes"]
    check = {c.id: c for c in diagnose(src).checks}["incomplete.ranks"]
    assert check.status == "ok" and check.title == want
    code, out = _cli(capsys, "doctor", str(src), "--json")
    doc = json.loads(out)
    checks = doc["checks"] if isinstance(doc, dict) else doc
    (got,) = [c for c in checks if c["id"] == "incomplete.ranks"]
    assert code == 0 and (got["status"], got["title"]) == ("ok", want)
