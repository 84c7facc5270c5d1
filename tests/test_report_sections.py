"""``opscope report --sections`` and the report of an out-of-core profile: only the named (lazy)
analyses run, the events file of an out-of-core profile is never read whole, one line says what
was not run, and an unknown section name is a one-line error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.registry import Options, run
from opscope.model import Profile
from opscope.model.tablefile import TableFile
from opscope.report.build import build_report
from opscope.report.lazy_sections import (
    FULL_REPORT_BYTES_PER_EVENT,
    LAZY_SECTIONS,
    parse_sections,
)

TRACE = "gpu/hta_nccl_a100_rank0of2.json.gz"


def _profile() -> Profile:
    from opscope.ingest import load

    return load(shared_trace(TRACE), cache=False)


def test_sections_run_alone_with_their_full_figures() -> None:
    p = _profile()
    rep = build_report(p, sections=["breakdown"])
    assert list(rep.sections) == ["breakdown"]
    want = run("breakdown", p, Options())
    assert rep.sections["breakdown"].to_json() == want.to_json()
    (line,) = rep.summary["warnings"]
    assert line.startswith("only breakdown run; not run: anomalies, attribution,")
    assert line.endswith("findings, doctor checks, source view")
    assert rep.summary["events"] == p.events.height
    # the loader counts are today's, from the few columns they need
    full = build_report(p)
    for k in ("events", "ops", "kernels", "steps", "fwd_bwd_links", "op_kernel_links", "span_us"):
        assert rep.summary[k] == full.summary[k], k


def test_out_of_core_profile_reports_the_lazy_sections_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opscope.ingest import outofcore

    p = _profile()
    q = Profile.open(p.save(tmp_path / "e"), lazy=True).with_meta(out_of_core=True)
    # one byte short of what a full report of its events is taken to need
    need = p.events.height * FULL_REPORT_BYTES_PER_EVENT
    monkeypatch.setenv(outofcore.ENV, str(need - 1))
    rep = build_report(q)
    assert tuple(rep.sections) == LAZY_SECTIONS
    ev = q.__dict__["events"]
    assert isinstance(ev, TableFile) and not ev.parsed  # never read whole
    for name in LAZY_SECTIONS:
        assert rep.sections[name].to_json() == run(name, p, Options()).to_json(), name
    (line,) = rep.summary["warnings"]
    assert line.startswith("out-of-core profile: only hotspots, breakdown run; not run:")
    assert rep.summary["span_us"] == pytest.approx(
        float(
            p.events.select(
                (pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()
            ).item()
        )
        / 1000.0
    )


def test_out_of_core_profile_within_this_runs_budget_gets_the_full_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget of the run that reports decides, not the one the profile was loaded under: a
    cached out-of-core entry whose full report fits gets the full report (every section, the
    findings), with the same figures as the in-memory profile's."""
    from opscope.ingest import outofcore

    p = _profile()
    q = Profile.open(p.save(tmp_path / "e"), lazy=True).with_meta(out_of_core=True)
    monkeypatch.setenv(outofcore.ENV, str(p.events.height * FULL_REPORT_BYTES_PER_EVENT))
    rep, want = build_report(q), build_report(p)
    assert list(rep.sections) == list(want.sections)
    assert "findings" in rep.sections and len(rep.sections) > len(LAZY_SECTIONS)
    for name in LAZY_SECTIONS:
        assert rep.sections[name].to_json() == want.sections[name].to_json(), name
    assert not any("only hotspots" in w for w in rep.summary["warnings"])


def test_parse_sections() -> None:
    assert parse_sections(None) is None
    assert parse_sections(" hotspots, breakdown ,") == ["hotspots", "breakdown"]
    with pytest.raises(ValueError, match=r"unknown section\(s\) nope; known: anomalies"):
        parse_sections("hotspots,nope")
    with pytest.raises(ValueError, match=r"\(none\)"):
        parse_sections(",")


def test_cli_unknown_section_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from opscope.cli.app import main

    trace = shared_trace(TRACE)
    assert main(["report", str(trace), "--sections", "hotspot"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--sections: unknown section(s) hotspot;" in lines[0], err
    assert "Traceback" not in err
