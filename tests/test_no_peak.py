"""A device without known peaks: "% of peak" reads n/a with the way out (``--device`` or
``opscope calibrate``) in every renderer, never 0% or a bare blank; unknown tails are unknown."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import opscope.analysis  # noqa: F401
from conftest import shared_trace
from opscope.analysis.registry import run
from opscope.analysis.roofline import NO_PEAK
from opscope.cli.app import main
from opscope.ingest import load


@pytest.fixture
def mystery(tmp_path: Path) -> Path:
    """The H100 BERT trace with its device renamed to one no datasheet or calibration knows."""
    doc = json.loads(
        gzip.decompress(shared_trace("gpu/tracelens_h100_bert_small.json.gz").read_bytes())
    )
    for p in doc["deviceProperties"]:
        p["name"] = "Mystery Accelerator 9000"
        p.pop("computeMajor", None)
        p.pop("computeMinor", None)
    out = tmp_path / "mystery.json"
    out.write_text(json.dumps(doc))
    return out


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def test_every_renderer_says_na(
    mystery: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(_report(capsys, str(mystery), "--json"))
    rows = doc["roofline"]
    assert rows and all(r["pct_of_peak"] is None and r["peak_note"] == NO_PEAK for r in rows)
    md = _report(capsys, str(mystery), "--md", "--full")
    assert f"Peaks: {NO_PEAK}" in md
    table = md.split(f"Peaks: {NO_PEAK}")[1].split("\n\n")[1]
    body = [ln for ln in table.splitlines() if ln.startswith("| aten::")]
    assert body and all(ln.split("|")[-3].strip() == "n/a" for ln in body)
    term = _report(capsys, str(mystery), "--full")
    assert " ".join(term.split()).count(NO_PEAK) >= 1
    html = tmp_path / "r.html"
    _report(capsys, str(mystery), "--html", str(html))
    assert f'"peak_note":"{NO_PEAK}"' in html.read_text()  # the data the page's roofline reads


def test_known_device_has_no_na(capsys: pytest.CaptureFixture[str]) -> None:
    src = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    rows = json.loads(_report(capsys, str(src), "--json"))["roofline"]
    assert any(r["pct_of_peak"] is not None for r in rows)
    assert not any("peak_note" in r for r in rows)


def test_tail_idle_unknown_without_sm_count(mystery: Path) -> None:
    res = run("utilisation", load(mystery))
    k = res.kernels  # type: ignore[attr-defined]
    assert k.height and k.get_column("waves").null_count() == k.height
    assert k.get_column("tail_idle").null_count() == k.height  # was 0.0: "no tail"
    known = run("utilisation", load(shared_trace("gpu/tracelens_h100_bert_small.json.gz")))
    for r in known.kernels.iter_rows(named=True):  # type: ignore[attr-defined]
        w = r["waves"]
        want = 0.0 if w == int(w) else 1 - (w - int(w))
        assert r["tail_idle"] == pytest.approx(want)
