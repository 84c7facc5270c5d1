"""A report of some sections only: ``opscope report --sections hotspots,breakdown``, and what an
out-of-core profile gets by default (its events stay on disk: docs/lazy-analyses.md).

Only the named analyses run; the rules' findings, the doctor's checks and the source view (which
read every event) do not, and one line in the summary's warnings (where the doctor's go: the
top of every rendering) says what was left out. The summary's
counts are computed from the few events columns they need, read alone from a file-backed
profile.
"""

from __future__ import annotations

from collections.abc import Sequence

from opscope.analysis.assemble import Report
from opscope.analysis.registry import Options
from opscope.model import Profile

#: What an out-of-core profile's report runs: the analyses that read the events lazily.
LAZY_SECTIONS: tuple[str, ...] = ("hotspots", "breakdown")

#: The events columns the loader summary reads (ingest.summary.summary).
SUMMARY_COLUMNS: tuple[str, ...] = ("rank", "kind", "ts_ns", "dur_ns", "fwd_id", "op_id")


#: What a full report is taken to hold in memory per event (the events table at ~450 B a row,
#: plus the analyses' intermediates; docs/out-of-core.md): a full report of an out-of-core
#: profile is run when its events times this fit the memory budget of this run.
FULL_REPORT_BYTES_PER_EVENT = 1024


def too_large_for_full_report(profile: Profile) -> bool:
    """True for an out-of-core profile whose full report would not fit this run's memory
    budget (``--memory-budget`` / ``$OPSCOPE_MEMORY_BUDGET`` / half the available memory): its
    report is then :data:`LAZY_SECTIONS` alone. The budget of this run decides, not the one the
    profile was loaded under: a cached out-of-core entry of a small trace (forced out with
    ``--memory-budget 1``) gets the full report from a later run with the default budget."""
    if not profile.meta.get("out_of_core"):
        return False
    import polars as pl

    from opscope.ingest import outofcore

    rows = int(profile.collect("events", profile.scan("events").select(pl.len())).item())
    return rows * FULL_REPORT_BYTES_PER_EVENT > outofcore.budget()


def parse_sections(text: str | None) -> list[str] | None:
    """``"hotspots,breakdown"`` as a list of analysis names; raises ``ValueError`` naming an
    unknown one. None stays None."""
    if text is None:
        return None
    from opscope.analysis import registry

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry.names()]
    if unknown or not names:
        known = ", ".join(sorted(registry.names()))
        raise ValueError(f"unknown section(s) {', '.join(unknown) or '(none)'}; known: {known}")
    return names


def sections_report(
    profile: Profile,
    sections: Sequence[str] | None,
    *,
    top: int = 20,
    options: Options | None = None,
) -> Report:
    """The report of ``sections`` (default :data:`LAZY_SECTIONS`) of ``profile`` alone."""
    from dataclasses import replace

    from opscope.analysis import hotspots, registry
    from opscope.analysis.assemble import Analyzer

    names = list(sections or LAZY_SECTIONS)
    report = Analyzer(profile).generate_report(
        top,
        only=names,
        options=options,
        counted=hotspots.projected(profile, SUMMARY_COLUMNS),
    )
    left = [n for n in registry.names() if n not in names]
    why = "out-of-core profile: " if profile.meta.get("out_of_core") else ""
    note = (
        f"{why}only {', '.join(names)} run; not run: {', '.join(left)}, findings, doctor "
        "checks, source view"
    )
    # where the doctor's warnings go: the first lines of every rendering
    return replace(report, summary={**report.summary, "warnings": [note]})
