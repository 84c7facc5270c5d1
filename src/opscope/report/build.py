"""The one assembly of a report: :func:`build_report`, used by ``opscope report``, ``opscope
html`` and ``opscope demo``.

Every analysis, the rules' findings, the doctor's warnings and the source view (the run
directory's captured code with each hot line's forward and backward time), plus the comparison
with a baseline when asked. Nothing here raises for a bug in one part: an analysis, a rule, the
rules as a whole, the doctor or the source view that fails is a
:class:`~opscope.analysis.assemble.SectionError` in ``Report.errors``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from opscope.analysis.assemble import Analyzer, Report, SectionError, one_line, taken
from opscope.analysis.source_view import SourceBlock
from opscope.analysis.threads import Background, run_each, sized_for
from opscope.model import Profile

# at import, not on the first report's way: a per-process cost (~2 ms compiling it where no
# bytecode is cached), not a per-report one
from opscope.report.lazy_sections import sections_report, too_large_for_full_report


@dataclass(frozen=True)
class SourceBlocks:
    """The source view as a report section (``"source_blocks"`` in JSON): blocks of code around
    the hot lines, each line with its forward and backward time."""

    blocks: tuple[SourceBlock, ...]
    basis: str  # "device" or "host": what the times are

    json_key: ClassVar[str] = "source_blocks"

    def to_json(self) -> list[dict[str, Any]]:
        """One ``{"file", "path", "total_us", "truncated", "lines": [...]}`` per block."""
        return [{**b.to_json(), "basis": self.basis} for b in self.blocks]

    def to_markdown(self) -> str:
        """Each block as a code listing with the line's times in a comment column."""
        if not self.blocks:
            return ""
        out = [f"## Source ({self.basis} time per line: forward / backward)", ""]
        for b in self.blocks:
            out += [f"`{b.file}`" + (" (copy cut at the size cap)" if b.truncated else ""), ""]
            out.append("```")
            for ln in b.lines:
                t = ""
                if ln.fwd_ns or ln.bwd_ns:
                    t = f"  # fwd {ln.fwd_ns / 1e6:.3f} ms, bwd {ln.bwd_ns / 1e6:.3f} ms"
                out.append(f"{ln.line:>5}  {ln.text}{t}".rstrip())
            out += ["```", ""]
        return "\n".join(out)


def source_section(profile: Profile) -> SourceBlocks | None:
    """The source view of ``profile``, or ``None`` when its run directory carries no sources."""
    from opscope.analysis.attribution import charged_lines
    from opscope.analysis.source_view import source_blocks

    blocks = source_blocks(profile, charged_lines(profile))
    if not blocks:
        return None
    return SourceBlocks(tuple(blocks), "device" if profile.has_device else "host")


def source_name(path: str | os.PathLike[str] | None, profile: Profile) -> str:
    """What to call the profile in titles: the file or folder name it was read from."""
    if path is not None:
        return Path(path).name
    rd = profile.meta.get("rundir")
    if isinstance(rd, dict) and rd.get("path"):
        return Path(str(rd["path"])).name
    src = profile.meta.get("source") or profile.meta.get("path")
    return Path(str(src)).name if src else "profile"


def build_report(
    path_or_profile: str | os.PathLike[str] | Profile,
    *,
    top: int = 20,
    salvage: bool = False,
    before: str | os.PathLike[str] | Profile | None = None,
    findings: Any | None = None,
    device: str | None = None,
    sections: list[str] | None = None,
) -> Report:
    """The whole report of a profile (a path is read with :func:`opscope.load`, which looks the
    cache up): analyses, findings, doctor warnings, source view, and the comparison
    ``before -> this`` when ``before`` is given.

    ``findings``: findings already computed (the demo passes its verified ones) instead of
    running the rules again. ``summary["source"]`` names the profile for titles. ``device``
    names the device whose peaks to use (``--device MI300X``) when the trace carries none.
    ``sections``: run only these analyses (no findings, doctor, source view or comparison), as
    an out-of-core profile's report does with hotspots and breakdown (report/lazy_sections.py).

    A bad baseline is the user's to fix and raises its :class:`~opscope.errors.OpscopeError`;
    anything else that fails is recorded in ``Report.errors``.
    """
    from opscope.advise import advise
    from opscope.doctor import doctor_warnings
    from opscope.errors import OpscopeError

    is_path = not isinstance(path_or_profile, Profile)
    options = None
    if device is not None:
        from opscope.analysis.devices import check_device_name
        from opscope.analysis.registry import Options

        check_device_name(device)  # an unknown name is the user's error, before any work
        options = Options(top=top, device_name=device)
    analyzer = Analyzer(path_or_profile, salvage=salvage)
    profile = analyzer.profile
    if sections is not None or too_large_for_full_report(profile):
        # only these analyses (an out-of-core profile too large: the lazy ones), nothing
        # reading it whole
        part = sections_report(profile, sections, top=top, options=options)
        name = source_name(path_or_profile if is_path else None, profile)  # type: ignore[arg-type]
        return replace(part, summary={**part.summary, "source": name})
    # the source view and the doctor's checks read the profile alone: on a thread of their own
    # while the analyses and then the rules (which read the analyses' sections) run
    with sized_for(profile.height("events")):  # a small profile's parts: in this thread
        side: Background[Any] = Background(
            [lambda: source_section(profile), lambda: doctor_warnings(profile)]
        )
        try:
            report = analyzer.generate_report(top=top, options=options)
            ctx = {**report.sections, "target_name": device} if device else report.sections
            (found_done,) = run_each(
                [(lambda: advise(profile, ctx)) if findings is None else (lambda: findings)]
            )
        finally:
            src_done, warnings_done = side.outcomes()
    errors: list[SectionError] = []
    found = taken("findings", found_done, errors)
    if findings is None:
        for rid, why in (getattr(found, "errors", None) or {}).items():
            kind, _, msg = why.partition(": ")
            errors.append(SectionError(f"rule {rid}", kind, one_line(msg)))
    extra: dict[str, Any] = {}
    if found is not None:
        extra["findings"] = found
    src = taken("source", src_done, errors)
    if src is not None:
        extra["source"] = src
    if before is not None:
        from opscope.analysis.compare import compare

        try:
            extra["comparison"] = compare(before, profile)
        except OpscopeError:
            raise
        except Exception as e:
            errors.append(SectionError.of("comparison", e))
    # the doctor's checks head the report: figures from an untrustworthy profile say so first
    warnings = taken("doctor", warnings_done, errors) or []
    name = source_name(path_or_profile if is_path else None, profile)  # type: ignore[arg-type]
    report = report.with_sections(**extra).with_errors(*errors)
    return replace(report, summary={**report.summary, "warnings": warnings, "source": name})
