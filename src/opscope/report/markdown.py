"""The Markdown renderer: the summary line, any failed sections, then each section's Markdown
(its renderer in :mod:`opscope.report.sections_md`, chosen by the result's class; else a report
section's own ``to_markdown``; else a table per DataFrame)."""

from __future__ import annotations

from functools import partial
from typing import Any

from opscope.analysis.assemble import Report, guarded
from opscope.analysis.registry import Result
from opscope.report.sections_md import markdown_table, renderer


def section_markdown(name: str, result: Any, top: int = 20) -> str:
    """A section's Markdown: its renderer by class, else its ``to_markdown`` (sections built in
    report/, such as the source view), else a table per DataFrame."""
    from opscope.analysis.compare import Comparison

    if isinstance(result, Comparison):  # data only: its Markdown is written here, in report/
        from opscope.report.compare_render import render_markdown

        return render_markdown(result, top=top)
    fn = renderer(result)
    if fn is not None:
        return fn(result)
    own = getattr(result, "to_markdown", None)
    if callable(own):
        return str(own())
    parts = [f"## {name}", ""]
    if isinstance(result, Result):
        for k, v in result.tables().items():
            parts += [f"### {k}", "", markdown_table(v, top), ""]
    return "\n".join(parts)


def render(report: Report) -> str:
    """The whole report as one Markdown document."""
    s = report.summary
    head = [
        "# opscope report" + (f": {s['source']}" if s.get("source") else ""),
        "",
        f"format {s.get('format')}, ranks {s.get('ranks')}, {s.get('events')} events, "
        f"{s.get('ops')} ops, {s.get('kernels')} kernels, {s.get('steps')} steps, "
        f"span {float(s.get('span_us') or 0) / 1000:.3f} ms",
        "",
    ]
    # the doctor's checks (and a sections-only report's note) head every rendering
    warnings = [" ".join(str(w).split()) for w in s.get("warnings") or []]
    if warnings:
        head += [*(f"> **Warning:** {w}" for w in warnings), ""]
    errors = list(report.errors)
    body = []
    for n, r in report.sections.items():
        md = guarded(n, partial(section_markdown, n, r, report.top), errors)
        if md is not None:
            body.append(md)
    if errors:
        warn = [f"**Warning: {len(errors)} report section(s) failed.**", ""]
        warn += [f"- {e.line()}" for e in errors]
        head += [*warn, ""]
    return "\n".join(head) + "\n".join(body)
