"""The Markdown renderer: the summary line, any failed sections, then each section's Markdown
(its own ``to_markdown``, else a table per DataFrame)."""

from __future__ import annotations

from functools import partial
from typing import Any

from opscope.analysis.assemble import Report, Section, guarded
from opscope.analysis.hotspots import markdown_table
from opscope.analysis.registry import Result


def section_markdown(name: str, result: Any, top: int = 20) -> str:
    """A section's Markdown (its ``to_markdown``, else a table per DataFrame)."""
    from opscope.analysis.compare import Comparison

    if isinstance(result, Comparison):  # data only: its Markdown is written here, in report/
        from opscope.report.compare_render import render_markdown

        return render_markdown(result, top=top)
    if isinstance(result, Section):
        return result.to_markdown()
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
