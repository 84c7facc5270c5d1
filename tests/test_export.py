"""Perfetto export: the raw trace's slices and flows survive, overlays land on extra tracks."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from opscope.report.export import export_perfetto

MI300 = "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, list[dict[str, Any]]]:
    import opscope

    path = shared_trace(MI300)
    with gzip.open(path) as f:
        raw = json.load(f)["traceEvents"]
    prof = opscope.load(path, cache=False)
    kernels = prof.kernels.sort("dur_ns", descending=True).head(3)
    chosen = kernels.get_column("id").to_list()

    def overlays(_: Any) -> list[dict[str, Any]]:
        return [
            {"kind": "finding", "id": chosen[0], "label": "slow <kernel> & co"},
            *({"kind": "critical_path", "id": i, "label": "cp"} for i in sorted(chosen)),
        ]

    out = tmp_path_factory.mktemp("export") / "t.json.gz"
    export_perfetto(prof, out, overlays=overlays)
    with gzip.open(out) as f:
        doc = json.load(f)
    return doc, prof, raw


def test_every_raw_slice_is_exported_with_its_duration(exported: Any) -> None:
    doc, _, raw = exported
    mine = [e for e in doc["traceEvents"] if e["ph"] == "X" and not e["cat"].startswith("opscope.")]
    theirs = [e for e in raw if e.get("ph") == "X" and e.get("cat") != "Trace"]
    assert Counter(e["name"] for e in mine) == Counter(e["name"] for e in theirs)
    dur_mine: Counter[str] = Counter()
    dur_theirs: Counter[str] = Counter()
    for e in mine:
        dur_mine[e["name"]] += e["dur"]
    for e in theirs:
        dur_theirs[e["name"]] += e["dur"]
    calls = Counter(e["name"] for e in theirs)
    for name, d in dur_theirs.items():
        assert abs(dur_mine[name] - d) <= 1e-3 * calls[name]
    # Start times relative to the origin, in µs.
    origin = doc["otherData"]["opscope_origin_ns"]
    t_raw = sorted(round(e["ts"] * 1000) for e in theirs)
    t_mine = sorted(round(e["ts"] * 1000) + origin for e in mine)
    assert len(t_raw) == len(t_mine)
    assert max(abs(a - b) for a, b in zip(t_raw, t_mine, strict=True)) <= 2


def test_flows_and_process_names(exported: Any) -> None:
    doc, _, raw = exported
    ev = doc["traceEvents"]
    for kind in ("ac2g", "fwdbwd"):
        starts = [e for e in ev if e["ph"] == "s" and e["cat"] == kind]
        ends = [e for e in ev if e["ph"] == "f" and e["cat"] == kind]
        assert (
            len(starts)
            == len(ends)
            == sum(1 for e in raw if e.get("ph") == "s" and e.get("cat") == kind)
        )
        assert {e["id"] for e in starts} == {e["id"] for e in ends}
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert "opscope" in names and any(n.startswith("rank 0 · device") for n in names)


def test_overlays_are_extra_tracks_and_flows(exported: Any) -> None:
    doc, prof, _ = exported
    ev = doc["traceEvents"]
    origin = doc["otherData"]["opscope_origin_ns"]
    finding = [e for e in ev if e.get("cat") == "opscope.finding"]
    assert len(finding) == 1 and finding[0]["name"] == "slow <kernel> & co"
    k = prof.events.filter(prof.events["id"] == finding[0]["args"]["opscope_id"]).row(0, named=True)
    assert finding[0]["ts"] == pytest.approx((k["ts_ns"] - origin) / 1e3)
    assert finding[0]["dur"] == pytest.approx(k["dur_ns"] / 1e3)
    cp = [e for e in ev if e.get("cat") == "opscope.critical_path"]
    assert sum(1 for e in cp if e["ph"] == "X") == 3
    assert sum(1 for e in cp if e["ph"] == "s") == 2 == sum(1 for e in cp if e["ph"] == "f")


def test_source_lines_are_enclosing_python_frames(exported: Any) -> None:
    doc, _, raw = exported
    origin = doc["otherData"]["opscope_origin_ns"]
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["args"].get("source"))
    start = op["ts"] * 1000 + origin
    end = start + op["dur"] * 1000
    file, line = op["args"]["source"].rsplit(":", 1)
    frames = [
        e for e in raw
        if e.get("cat") == "python_function" and e["name"].startswith(f"{file}({line}):")
        and e["ts"] * 1000 <= start + 1 and (e["ts"] + e["dur"]) * 1000 >= end - 1
    ]  # fmt: skip
    assert frames


def test_cli_export_writes_atomically_and_rejects_bad_names(tmp_path: Path) -> None:
    from opscope.cli.app import main

    src = shared_trace("gpu/hta_amd_mi250_minitoy.json.gz")
    out = tmp_path / "o.json.gz"
    assert main(["export", str(src), "--perfetto", str(out), "--no-overlays"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["o.json.gz"]
    with gzip.open(out) as f:
        doc = json.load(f)
    with gzip.open(src) as f:
        raw = json.load(f)["traceEvents"]
    n_raw = sum(1 for e in raw if e.get("ph") == "X" and e.get("cat") != "Trace")
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == n_raw
    assert main(["export", str(src), "--perfetto", str(tmp_path / "o.txt")]) == 2
