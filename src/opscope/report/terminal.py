"""The terminal renderer: a Report as rich tables (hotspots, lines, anomalies, roofline,
breakdown, memory, then any other section generically)."""

from __future__ import annotations

from functools import partial
from io import StringIO
from typing import Any

import polars as pl
from rich.console import Console, RenderableType
from rich.markdown import Markdown
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from opscope.analysis.hotspots import to_us
from opscope.analysis.registry import Result
from opscope.analysis.report import Report, guarded
from opscope.report.base import renderer

#: Columns shown per known table (others: every column); ns columns are shown in µs.
_COLUMNS: dict[str, list[str]] = {
    "hotspots.ops": ["name", "calls", "total_us", "self_us", "device_us", "pct"],
    "hotspots.kernels": ["name", "calls", "total_us", "mean_us", "pct"],
    "attribution.lines": [
        "file",
        "line",
        "function",
        "module",
        "fwd_us",
        "bwd_us",
        "total_us",
        "host_us",
        "kernels",
        "calls",
    ],
    "anomalies.groups": [
        "kind",
        "name",
        "input_shapes",
        "calls",
        "outlier_calls",
        "median_us",
        "outlier_median_us",
        "steps",
    ],
    "anomalies.efficiency": ["name", "input_shapes", "metric", "calls", "rate", "ratio"],
    "breakdown.steps": [
        "rank",
        "step",
        "dur_us",
        "compute_us",
        "communication_us",
        "memcpy_us",
        "device_idle_us",
        "host_bound_us",
        "data_loading_us",
        "host_ops_us",
    ],
    "breakdown.stats": [
        "rank",
        "steps",
        "mean_us",
        "median_us",
        "std_us",
        "p10_us",
        "p90_us",
        "cv",
    ],
    "roofline.groups": [
        "name",
        "input_shapes",
        "calls",
        "intensity",
        "achieved_tflops",
        "achieved_gbps",
        "pct_of_peak",
        "bound",
    ],
    "memory.peaks": [
        "rank",
        "device_type",
        "device",
        "peak_allocated",
        "reserved",
        "fragmentation",
    ],
    "memory.live_at_peak": ["op", "module", "file", "line", "bytes", "allocations"],
}
_TITLES = {
    "hotspots.ops": "Top operators",
    "hotspots.kernels": "Top kernels",
    "attribution.lines": "Time per source line",
    "anomalies.groups": "Anomalies: slow calls",
    "anomalies.efficiency": "Anomalies: inefficient shapes",
    "breakdown.steps": "Step breakdown",
    "breakdown.stats": "Step time",
    "roofline.groups": "Roofline",
    "memory.peaks": "Memory peaks",
    "memory.live_at_peak": "Live at the peak",
}
_KNOWN = {"hotspots", "attribution", "anomalies", "breakdown", "memory", "roofline"}
_SKIP = {
    "hotspots.op_shapes",
    "hotspots.per_step",
    "hotspots.modules",
    "hotspots.sources",
    "attribution.modules",
    "anomalies.calls",
    "memory.timeline",
    "memory.churn",
    "memory.never_freed",
}


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
    if isinstance(v, list):
        return ",".join(str(x) for x in v[:8]) + ("…" if len(v) > 8 else "")
    s = str(v)
    return s if len(s) <= 70 else s[:67] + "…"


def table(title: str, df: pl.DataFrame, columns: list[str] | None, top: int) -> Table:
    """One rich table of the first ``top`` rows of ``df``."""
    d = to_us(df.head(top))
    cols = [c for c in (columns or d.columns) if c in d.columns]
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in cols:
        numeric = d.schema[c].is_numeric()
        t.add_column(c, justify="right" if numeric else "left", overflow="fold")
    for r in d.select(cols).iter_rows():
        # Text, not str: a trace's names ("[[1,256]]", "<lambda>[...]") are not rich markup
        t.add_row(*(Text(_fmt(v)) for v in r))
    return t


@renderer("terminal")
def render_terminal(report: Report, console: Console | None = None, **_: Any) -> str:
    """Print ``report`` on ``console`` (returns ""), or return it as text when none is given.

    A section that cannot be drawn is a warning line, as is every section that failed before
    (``report.errors``); the last line counts them.
    """
    out = console or Console(file=StringIO(), width=160, record=True)
    s = report.summary
    out.print(
        f"[bold]{s.get('format')}[/] ranks {s.get('ranks')} · {s.get('events')} events · "
        f"{s.get('ops')} ops · {s.get('kernels')} kernels · {s.get('steps')} steps · "
        f"span {float(s.get('span_us') or 0) / 1000:.3f} ms"
    )
    for w in s.get("warnings") or []:
        out.print(f"[yellow]{w}[/]", highlight=False)
    errors = list(report.errors)
    for e in errors:
        out.print(f"[yellow]warning: {escape(e.line())}[/]", highlight=False)
    for name, res in report.sections.items():
        # built in full before printing, so a failing section prints nothing but its warning
        parts = guarded(name, partial(_section, name, res, report.top), errors)
        if parts is None:
            out.print(f"[yellow]warning: {escape(errors[-1].line())}[/]", highlight=False)
            continue
        for part in parts:
            out.print(part)
    for name, why in report.skipped.items():
        out.print(f"[dim]{name}: skipped ({why})[/]")
    if errors:
        out.print(
            f"[yellow]{len(errors)} report section(s) failed; the others are complete.[/]",
            highlight=False,
        )
    return "" if console is not None else out.export_text()


def _section(name: str, res: Any, top: int) -> list[RenderableType]:
    """The renderables of one section."""
    parts: list[RenderableType] = []
    if not isinstance(res, Result):
        if getattr(type(res), "json_key", None) == "findings":
            return [_findings_table(res.to_json(), top)]
        to_md = getattr(res, "to_markdown", None)
        if callable(to_md):  # sections from other layers (comparison, ...)
            parts.append(Markdown(str(to_md())))
        return parts
    for tname, df in res.tables().items():
        key = f"{name}.{tname}"
        if key in _SKIP or not df.height:
            continue
        if key not in _COLUMNS and name in _KNOWN:
            continue
        if key not in _COLUMNS:
            if tname not in ("groups", next(iter(res.tables()))):
                continue  # other sections: their main table only, first columns only
            cols: list[str] | None = df.columns[:8]
        else:
            cols = _COLUMNS[key]
        if key == "attribution.lines":
            shown = df.with_columns(pl.col("file").fill_null("(no user frame)"))
        else:
            shown = df
        parts.append(table(_TITLES.get(key, key), shown, cols, top))
    if name == "anomalies" and not any(t.height for t in res.tables().values()):
        parts.append("[green]No anomalies found.[/]")
    return parts


def _findings_table(findings: list[dict[str, Any]], top: int) -> Table:
    t = Table(title=f"Findings ({len(findings)}, by saving)", title_justify="left")
    for c in ("severity", "rule", "title", "where", "saving/step", "% step"):
        t.add_column(
            c, overflow="fold", justify="right" if c.startswith(("saving", "%")) else "left"
        )
    for f in findings[:top]:
        where = f"{f['file']}:{f['line']}" if f.get("file") else (f.get("module") or "—")
        t.add_row(
            f["severity"],
            f["rule"],
            f["title"],
            where,
            f"{f['saving_us'] / 1000:.3f} ms",
            f"{f['saving_pct']:.1f}",
        )
    return t
