"""The Markdown of each analysis result, written here in report/ (issue 23): the results are data
(their ``to_json`` and their tables); how each reads as Markdown is this module's business.

:func:`renderer` finds a result's renderer by its class's qualified name (the way pyinstrument
picks a renderer by name), so nothing here imports the analyses to render them: the CLI's import
time stays what it was, and a result of a class not listed falls back to its tables
(:mod:`opscope.report.markdown`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from opscope.analysis.hotspots import to_us

if TYPE_CHECKING:
    from opscope.advise.rule import Findings
    from opscope.analysis.anomalies import Anomalies
    from opscope.analysis.attribution import Attribution
    from opscope.analysis.breakdown import Breakdown
    from opscope.analysis.cluster import Cluster
    from opscope.analysis.critical_path import CriticalPathResult
    from opscope.analysis.hotspots import Hotspots
    from opscope.analysis.memory import Memory
    from opscope.analysis.roofline import RooflineResult
    from opscope.doctor.checks import Diagnosis


def markdown_table(df: pl.DataFrame, top: int | None = None) -> str:
    """A GitHub Markdown table of the first ``top`` rows (ns columns shown in µs)."""
    out = to_us(df if top is None else df.head(top))
    if not out.width:
        return ""
    header = "| " + " | ".join(out.columns) + " |"
    sep = "|" + "|".join("---" for _ in out.columns) + "|"
    lines = [header, sep]
    for row in out.iter_rows():
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v).replace("|", "\\|")


def hotspots_md(res: Hotspots) -> str:
    """Top operators, kernels and operator shapes as Markdown tables."""
    parts = ["## Hotspots", "", "### Operators", "", markdown_table(res.ops, res.top)]
    if res.kernels.height:
        parts += ["", "### Kernels", "", markdown_table(res.kernels, res.top)]
    parts += ["", "### Operators by input shapes", "", markdown_table(res.op_shapes, res.top)]
    if res.modules.height:
        parts += ["", "### Modules", "", markdown_table(res.modules, res.top)]
    return "\n".join(parts) + "\n"


def attribution_md(res: Attribution) -> str:
    """The top source lines as a Markdown table."""
    what = "device" if res.device else "host"
    df = res.lines.with_columns(pl.col("file").fill_null("(no user frame)"))
    return f"## Time per source line ({what} time)\n\n{markdown_table(df, res.top)}\n"


def anomalies_md(res: Anomalies) -> str:
    """The anomalous groups and shapes as Markdown tables."""
    if not res.groups.height and not res.efficiency.height:
        return "## Anomalies\n\nNone found.\n"
    parts = ["## Anomalies", ""]
    if res.groups.height:
        parts += [markdown_table(res.groups.drop("ts_ns"), res.top), ""]
    if res.efficiency.height:
        parts += ["### Inefficient shapes", "", markdown_table(res.efficiency, res.top), ""]
    return "\n".join(parts)


def _num(v: float | int | None, scale: float = 1.0) -> str:
    """A roofline cell: three significant digits, thousands grouped, ``-`` for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    x = v * scale
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def roofline_md(res: RooflineResult, top: int = 20) -> str:
    """A Markdown table of the top groups by time."""
    lines = [
        f"Peaks: {res.peaks_note}. Time: {res.time_source}.",
        "",
        "| operator | input shapes | calls | time (µs) | GFLOP | MB | FLOP/B | TFLOP/s "
        "| GB/s | % of peak | bound |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for df in (res.groups, res.kernel_groups):
        for r in df.head(top).iter_rows(named=True):
            lines.append(
                f"| {r['name']} | {r['input_dims']} | {r['calls']} | "
                f"{_num(r['time_ns'], 1e-3)} | {_num(r['flops'], 1e-9)} | "
                f"{_num(r['bytes'], 1e-6)} | {_num(r['intensity'])} | "
                f"{_num(r['achieved_tflops'])} | {_num(r['achieved_gbps'])} | "
                f"{_num(r['pct_of_peak']) if res.peak_known else 'n/a'} | "
                f"{r['bound'] or '?'} |"
            )
    return "\n".join(lines) + "\n"


def breakdown_md(res: Breakdown) -> str:
    """Per-step breakdown, idle per stream, launch queues and step-time spread as Markdown."""
    out = "## Step breakdown\n\n" + markdown_table(res.steps, res.top)
    if res.streams.height:
        out += "\n\n### Device idle per stream\n\n" + markdown_table(res.streams, res.top)
    if res.queue.height:
        out += "\n\n### Launch queue per stream\n\n" + markdown_table(res.queue, res.top)
    return out + "\n\n### Step time\n\n" + markdown_table(res.stats) + "\n"


def memory_md(res: Memory) -> str:
    """Peaks and what was live at them as Markdown."""
    from opscope.analysis.memory import HOST_DEVICE_TYPE

    if not res.peaks.height:
        return "## Memory\n\nNo memory events in this profile.\n"
    return (
        "## Memory\n\n"
        + markdown_table(res.peaks)
        + (
            "\n\nFragmentation: n/a for host memory (no caching allocator; the trace "
            "records no reserved bytes for it)."
            if (res.peaks.get_column("device_type") == HOST_DEVICE_TYPE).any()
            else ""
        )
        + "\n\n### Live at the peak\n\n"
        + markdown_table(res.live_at_peak, res.top)
        + "\n\n### Never freed\n\n"
        + markdown_table(res.never_freed, res.top)
        + "\n"
    )


def cluster_md(res: Cluster) -> str:
    """Ranks, slow ranks, step gap and slow links as Markdown."""
    parts = ["## Cluster: ranks\n", markdown_table(res.ranks, res.top)]
    if res.failed:
        parts.append(f"\n{len(res.failed)} rank(s) could not be read and were skipped:\n")
        parts += [f"- rank {r}: {why}" for r, why in res.failed]
    ids = res.slow_rank_ids
    parts.append("\n### Slow ranks\n")
    parts.append(markdown_table(res.slow_ranks) if ids else "No rank makes the others wait.")
    parts.append("\n### Step gap (slowest − fastest rank)\n")
    parts.append(markdown_table(res.step_gap, res.top))
    if res.stage_imbalance.height:
        parts.append("\n### Pipeline stages (compute per rank)\n")
        parts.append(markdown_table(res.stage_imbalance))
    if res.hccl.height:
        parts.append("\n### Ranks in msprof-analyze's terms (µs)\n")
        parts.append(markdown_table(res.msprof, res.top))
    if res.links.height:
        parts.append("\n### Slow links\n")
        parts.append(
            markdown_table(res.slow_links)
            if res.slow_links.height
            else "No link is far below its transport's median bandwidth."
        )
    return "\n".join(parts) + "\n"


def critical_path_md(res: CriticalPathResult, top: int = 10) -> str:
    """Per step: path vs step time, and the top operators on the path."""
    lines = []
    for s in res.steps.iter_rows(named=True):
        lines.append(
            f"Step {s['step']} (rank {s['rank']}): critical path {s['path_ns'] / 1e3:.1f} µs "
            f"of {s['step_ns'] / 1e3:.1f} µs (host {s['host_ns'] / 1e3:.1f}, "
            f"device {s['device_ns'] / 1e3:.1f})"
        )
        lines.append("")
        lines.append("| operator | on path (µs) | share of step |")
        lines.append("|---|---:|---:|")
        ops = res.ops.filter((pl.col("rank") == s["rank"]) & (pl.col("step") == s["step"]))
        for r in ops.head(top).iter_rows(named=True):
            lines.append(f"| {r['op']} | {r['on_path_ns'] / 1e3:.1f} | {r['share']:.1%} |")
        lines.append("")
    return "\n".join(lines)


def findings_md(res: Findings) -> str:
    """A Markdown section: one table row per finding, then each fix."""
    if not res.items:
        return f"## {res.title}\n\nNo findings.\n"
    lines = [
        f"## {res.title}",
        "",
        "| severity | rule | finding | where | saving/step | verified |",
        "|---|---|---|---|---|---|",
    ]
    for f in res.items:
        saving = f"{f.saving_us:.1f} µs ({f.saving_pct:.1f}%)" if f.saving_us else "—"
        ver = "—" if f.verified_speedup is None else f"{f.verified_speedup:.2f}×"
        title = f.title.replace("|", "\\|")
        lines.append(f"| {f.severity} | {f.rule} | {title} | {f.location} | {saving} | {ver} |")
    lines.append("")
    for f in res.items:
        lines += [f"### {f.title} (`{f.id}`)", "", f"Saving: {f.saving_how}", ""]
        if f.fix:
            lines += ["```python", f.fix.rstrip(), "```", ""]
        if f.verification and f.verification.get("summary"):
            lines += [f"Verification: {f.verification['summary']}", ""]
    return "\n".join(lines)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def diagnosis_md(d: Diagnosis) -> str:
    """``opscope doctor --markdown``: a table of checks, then the actions for the failing ones."""
    lines = [f"# opscope doctor: {d.source or 'profile'}", "", f"Overall: **{d.status}**"]
    lines += ["", "| status | check | title |", "|---|---|---|"]
    for c in d.checks:
        lines.append(f"| {c.status} | `{c.id}` | {_md(c.title)} |")
    for c in d.problems:
        lines += ["", f"## {c.status}: {_md(c.title)} (`{c.id}`)", ""]
        for k, v in c.evidence.items():
            lines.append(f"- {k}: `{_md(json.dumps(v, default=str))}`")
        if c.action:
            lines += ["", f"**What to do:** {_md(c.action)}"]
    return "\n".join(lines) + "\n"


#: Each result class (by module and qualified name) and its renderer. Keys are names, not
#: classes, so that rendering one result imports no other analysis.
RENDERERS: Final[dict[str, Callable[[Any], str]]] = {
    "opscope.analysis.hotspots.Hotspots": hotspots_md,
    "opscope.analysis.attribution.Attribution": attribution_md,
    "opscope.analysis.anomalies.Anomalies": anomalies_md,
    "opscope.analysis.roofline.RooflineResult": roofline_md,
    "opscope.analysis.breakdown.Breakdown": breakdown_md,
    "opscope.analysis.memory.Memory": memory_md,
    "opscope.analysis.cluster.Cluster": cluster_md,
    "opscope.analysis.critical_path.CriticalPathResult": critical_path_md,
    "opscope.advise.rule.Findings": findings_md,
    "opscope.doctor.checks.Diagnosis": diagnosis_md,
}


def renderer(result: object) -> Callable[[Any], str] | None:
    """The Markdown renderer of ``result``'s class, or ``None`` when there is none."""
    t = type(result)
    return RENDERERS.get(f"{t.__module__}.{t.__qualname__}")


def to_markdown(result: object) -> str:
    """``result`` as Markdown; ``TypeError`` for a class that has no renderer."""
    fn = renderer(result)
    if fn is None:
        raise TypeError(f"no Markdown renderer for {type(result).__qualname__}")
    return fn(result)
