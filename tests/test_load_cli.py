"""``opscope load``: JSON keys and counts, human output, cache flag."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import shared_trace
from opscope.cli.app import main

KEYS = {
    "format",
    "ranks",
    "events",
    "ops",
    "kernels",
    "steps",
    "fwd_bwd_links",
    "op_kernel_links",
    "span_us",
    "oddities",
    "salvaged",
}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_load_json_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = shared_trace("gpu/hta_amd_mi250_minitoy.json.gz")
    p = tmp_path / src.name
    shutil.copy(src, p)
    doc = json.loads(gzip.decompress(p.read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    code, out, _ = _run(capsys, "load", str(p), "--json")
    assert code == 0
    s = json.loads(out)
    assert set(s) >= KEYS
    assert s["format"] == "kineto" and s["ranks"] == [0]
    assert s["events"] == len(xs)
    assert s["ops"] == sum(
        1 for e in xs if e["cat"] == "cpu_op" and not e["name"].startswith("ProfilerStep#")
    )
    dev = [e for e in xs if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert s["kernels"] == len(dev)
    corr = {e["args"]["correlation"] for e in xs if e["cat"] == "cuda_runtime"}
    assert s["op_kernel_links"] == sum(1 for e in dev if e["args"].get("correlation") in corr)
    assert s["fwd_bwd_links"] == len(
        {e["id"] for e in doc["traceEvents"] if e.get("cat") == "fwdbwd"}
    )
    steps = {
        e["name"]
        for e in xs
        if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"
    }
    assert s["steps"] == len(steps)
    start = min(e["ts"] for e in xs)
    end = max(e["ts"] + e["dur"] for e in xs)
    assert s["span_us"] == pytest.approx(end - start, abs=1e-3)
    assert not s["from_cache"]
    code, out, _ = _run(capsys, "load", str(p), "--json")
    again = json.loads(out)
    assert again["from_cache"]
    assert {k: again[k] for k in KEYS} == {k: s[k] for k in KEYS}


def test_load_human_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = shared_trace("gpu/hta_triton_a100.json.gz")
    code, out, err = _run(capsys, "load", str(src), "--no-cache")
    assert code == 0, err
    assert "kineto" in out and "op kernel links" in out
    assert not (src.parent / f".{src.name}.opscope").exists()
