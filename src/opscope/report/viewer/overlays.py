"""What the viewer highlights, taken from the one report assembly (:func:`build_report`).

The viewer draws the findings, anomalies and critical path of the same
:class:`~opscope.analysis.assemble.Report` that ``opscope report`` prints and ``opscope html``
writes, so the three agree: the rules see every analysis (roofline, breakdown, steps, ...), not a
subset assembled here.
"""

from __future__ import annotations

from typing import Any

from opscope.analysis.assemble import Report
from opscope.model import Profile

#: Events listed per anomaly table and per finding (the critical path is drawn whole, as bands).
LISTED = 2000
PER_FINDING = 20


def _table_items(kind: str, name: str, result: Any, table_name: str | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for tname, table in result.tables().items():
        if table_name is not None and tname != table_name:
            continue
        id_col = next((c for c in ("event_id", "id") if c in table.columns), None)
        if id_col is None:
            continue
        limit = None if kind == "critical_path" else LISTED
        rows = table if limit is None else table.head(limit)
        for r in rows.iter_rows(named=True):
            if r[id_col] is None:
                continue
            bits = [str(r[k]) for k in ("reason", "kind", "name", "op") if r.get(k) is not None]
            if r.get("step") is not None:
                bits.append(f"step {r['step']}")
            label = " · ".join(dict.fromkeys(bits)) or name  # each bit once
            items.append({"kind": kind, "id": int(r[id_col]), "label": label})
    return items


def report_overlays(report: Report) -> list[dict[str, Any]]:
    """Overlay items of a built report: each finding's events (``kind`` ``finding``, with its
    ``rule`` and ``severity``; a finding without events is listed without an id), the anomalies'
    events, the critical path's nodes, and one ``error`` item per failed report section."""
    items: list[dict[str, Any]] = []
    anomalies = report.sections.get("anomalies")
    if anomalies is not None:
        items += _table_items("anomaly", "anomalies", anomalies, None)
    path = report.sections.get("critical_path")
    if path is not None:
        items += _table_items("critical_path", "critical_path", path, "path")
    for f in report.sections.get("findings") or ():
        ids = [int(i) for i in (f.evidence or {}).get("event_ids") or []]
        label = f"[{f.severity}] {f.title} ({f.location})"
        bits = {"kind": "finding", "rule": f.rule, "severity": str(f.severity)}
        if not ids:
            items.append({**bits, "id": None, "label": label})
        for i in ids[:PER_FINDING]:
            items.append({**bits, "id": i, "label": label})
    for e in report.errors:
        items.append({"kind": "error", "label": f"report {e.line()}"})
    return items


def default_overlays(profile: Profile, *, device: str | None = None) -> list[dict[str, Any]]:
    """The overlay items of ``build_report(profile)`` (``device``: whose peaks the rules use)."""
    from opscope.report.build import build_report

    return report_overlays(build_report(profile, device=device))
