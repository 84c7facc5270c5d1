"""What a report says first, as data: the headline, the top findings, the top tables.

:func:`build_story` reads a report's JSON (``Report.to_json()``, the shape ``opscope report
--json`` prints) and selects: the step time and where it goes (compute, copies, communication,
device idle by cause, or host ops on a CPU-only profile), the findings with the largest saving,
the top operators, kernels and source lines, and the other tables only when they say something
(anomalies when there are some, the ranks when there are several, ...). ``full=True`` keeps
every table. The terminal and HTML renderers draw a :class:`Story`; tests check the selection on
the data, then the rendering.

Every share says its basis (:attr:`StoryTable.basis`, :attr:`Headline.basis`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from opscope.report import fmt

#: Rows per main table and findings on the first screen.
TOP_ROWS = 8
TOP_FINDINGS = 5

#: Sections drawn by the story itself (headline, findings, main tables) or never as a table.
_STORY_KEYS = {"hotspots", "sources", "findings", "breakdown", "source_blocks", "comparison"}
_NOT_SECTIONS = {"load", "warnings", "errors", "skipped", "oddities", "ranks", "_notes"}


@dataclass(frozen=True)
class Part:
    """A share of the step: a label, its time (µs, summed over steps and ranks), its percentage
    of the headline's basis, and its own split (device idle by cause)."""

    label: str
    us: float
    pct: float
    detail: tuple[Part, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {
            "label": self.label,
            "us": self.us,
            "pct": self.pct,
            "detail": [d.to_json() for d in self.detail],
        }


@dataclass(frozen=True)
class Headline:
    """Step time and where it goes."""

    source: str
    format: str
    ranks: int
    steps: int
    step_us: float | None  # mean step time (or the span, without steps)
    std_us: float | None
    p10_us: float | None
    p90_us: float | None
    basis: str  # what the parts' percentages are of
    total_us: float  # that basis: the summed step time (or the span)
    device: bool  # the parts are device time (else host time)
    parts: tuple[Part, ...]
    notes: tuple[str, ...] = ()

    def step_text(self) -> str:
        """``4.43 ms ± 0.12 ms over 3 steps (p10-p90 4.30-4.61 ms)``."""
        if self.step_us is None:
            return "no step time"
        what = _steps_text(self.steps, self.ranks) if self.steps else "the span"
        text = f"{fmt.us(self.step_us)}"
        if self.std_us:
            text += f" ± {fmt.us(self.std_us)}"
        text += f" over {what}" if self.steps else f" ({what}: no steps marked)"
        if self.steps > 2 and self.p10_us is not None and self.p90_us is not None:
            text += f" (p10–p90 {fmt.us(self.p10_us)}–{fmt.us(self.p90_us)})"
        return text

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {
            "source": self.source,
            "format": self.format,
            "ranks": self.ranks,
            "steps": self.steps,
            "step_us": self.step_us,
            "std_us": self.std_us,
            "p10_us": self.p10_us,
            "p90_us": self.p90_us,
            "step_text": self.step_text(),
            "basis": self.basis,
            "total_us": self.total_us,
            "device": self.device,
            "parts": [p.to_json() for p in self.parts],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class StoryFinding:
    """One finding as the first screen shows it."""

    rank: int
    rule: str
    severity: str
    title: str
    where: str
    saving_us: float
    saving_pct: float
    fix: str  # one line
    event_ids: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {
            "rank": self.rank,
            "rule": self.rule,
            "severity": self.severity,
            "title": self.title,
            "where": self.where,
            "saving_us": self.saving_us,
            "saving_pct": self.saving_pct,
            "fix": self.fix,
            "event_ids": list(self.event_ids),
        }


@dataclass(frozen=True)
class Column:
    """A column: the row key, its header and its kind (``text``, ``path``, ``code``, ``us``,
    ``pct``, ``bytes``, ``int``, ``num``; a kind says how a renderer formats and fits it)."""

    key: str
    header: str
    kind: str = "text"


@dataclass(frozen=True)
class StoryTable:
    """A table the story shows: its rows already chosen, ``more`` rows left out."""

    id: str
    title: str
    basis: str
    columns: tuple[Column, ...]
    rows: tuple[dict[str, Any], ...]
    more: int = 0

    def cell(self, row: dict[str, Any], col: Column) -> str:
        """The text of one cell."""
        v = row.get(col.key)
        if col.kind == "us":
            return fmt.us(v)
        if col.kind == "pct":
            return fmt.pct(v)
        if col.kind == "bytes":
            return fmt.nbytes(v)
        if col.kind in ("int", "num"):
            return fmt.num(v)
        if col.kind == "auto":
            return fmt.by_column(col.key, v)
        return "" if v is None else fmt.num(v) if not isinstance(v, str) else v

    def to_json(self) -> dict[str, Any]:
        """Plain data: rows with the shown cells as text (``cells``) and the raw values."""
        return {
            "id": self.id,
            "title": self.title,
            "basis": self.basis,
            "columns": [{"key": c.key, "header": c.header, "kind": c.kind} for c in self.columns],
            "rows": [dict(r) for r in self.rows],
            "cells": [[self.cell(r, c) for c in self.columns] for r in self.rows],
            "more": self.more,
        }


@dataclass(frozen=True)
class Story:
    """What the report says, in order: headline, top findings, tables."""

    headline: Headline
    findings: tuple[StoryFinding, ...]
    more_findings: int
    tables: tuple[StoryTable, ...]
    hidden: tuple[str, ...] = ()  # tables left for --full
    warnings: tuple[str, ...] = ()
    extra: tuple[str, ...] = field(default=())  # sections drawn by their own renderer

    def table(self, table_id: str) -> StoryTable | None:
        """The table with this id, if the story shows it."""
        return next((t for t in self.tables if t.id == table_id), None)

    def to_json(self) -> dict[str, Any]:
        """Plain data (the HTML page draws its first screen from it)."""
        return {
            "headline": self.headline.to_json(),
            "findings": [f.to_json() for f in self.findings],
            "more_findings": self.more_findings,
            "tables": [t.to_json() for t in self.tables],
            "hidden": list(self.hidden),
            "warnings": list(self.warnings),
        }


def _f(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _rows(v: Any) -> list[dict[str, Any]]:
    return [r for r in v if isinstance(r, dict)] if isinstance(v, list) else []


def _steps_text(steps: int, ranks: int) -> str:
    text = f"{steps} step{'s' if steps != 1 else ''}"
    return text + (f" × {ranks} ranks" if ranks > 1 else "")


def headline(data: dict[str, Any]) -> Headline:
    """Step time, its spread and where it goes, from the report JSON's ``breakdown``."""
    bd = data.get("breakdown") if isinstance(data.get("breakdown"), dict) else {}
    steps = _rows((bd or {}).get("steps"))
    stats = _rows((bd or {}).get("stats"))
    overall = next((s for s in stats if s.get("rank") is None), stats[0] if stats else {})
    ranks = data.get("ranks")
    n_ranks = len(ranks) if isinstance(ranks, list) else int(_f(ranks)) or 1
    marked = int(_f(data.get("steps")))
    total = sum(_f(r.get("dur_us")) for r in steps)
    notes: list[str] = []
    if steps and any(r.get("step") is not None for r in steps):
        step_us: float | None = overall.get("mean_us") or (total / len(steps))
        n_steps = len({r.get("step") for r in steps})
        step_ranks = len({r.get("rank") for r in steps})
        basis = f"of the summed step time, {fmt.us(total)} = {_steps_text(n_steps, step_ranks)}"
    else:
        span = _f(data.get("span_us"))
        total = total or span
        step_us = total or None
        n_steps = 0
        basis = f"of the trace's span ({fmt.us(total)}; no steps marked)"
        if marked:
            notes.append(f"{marked} steps marked but none could be split")
    device = any(r.get("device_idle_us") is not None for r in steps)
    parts: list[Part] = []

    def part(label: str, v: float, detail: tuple[Part, ...] = ()) -> Part:
        return Part(label, v, 100.0 * v / total if total else 0.0, detail)

    def s(key: str) -> float:
        return sum(_f(r.get(key)) for r in steps)

    if total and device:
        compute, comm_no, idle = s("compute_us"), s("communication_not_overlapped_us"), 0.0
        busy = s("device_busy_us") or compute + comm_no + s("memcpy_us") + s("memset_us")
        copies = max(0.0, busy - compute - comm_no)
        idle = s("device_idle_us")
        parts.append(part("compute (device kernels)", compute))
        if comm_no:
            parts.append(part("communication, not hidden by compute", comm_no))
        if copies:
            parts.append(part("copies and fills, not hidden by compute", copies))
        parts.append(part("device idle", idle, _idle_causes(steps, idle, part)))
        rest = total - (compute + comm_no + copies + idle)
        if abs(rest) > 0.005 * total:  # Ascend: step_trace's own figures, not our unions
            parts.append(part("not split (profiler step figures)", rest))
        comm = s("communication_us")
        if comm > comm_no:
            notes.append(
                f"communication {fmt.us(comm)} in all, {fmt.pct(100 * (comm - comm_no) / comm)}"
                " of it overlapped with compute"
            )
        host = s("host_ops_us")
        if host:
            notes.append(
                f"host operators busy {fmt.pct(100 * host / total)} of the step "
                "(alongside the device)"
            )
    elif total and steps:
        host, loading = s("host_ops_us"), s("data_loading_us")
        parts.append(part("host operators", host))
        if loading:
            parts.append(part("data loading", loading))
        parts.append(part("outside operators (Python, waits)", max(0.0, total - host)))
        notes.append("no device activity in this profile: the shares are host time")
    peak = _memory_peak(data)
    if peak:
        notes.append(peak)
    return Headline(
        source=str(data.get("source") or ""),
        format=str(data.get("format") or ""),
        ranks=n_ranks,
        steps=n_steps,
        step_us=step_us,
        std_us=overall.get("std_us"),
        p10_us=overall.get("p10_us"),
        p90_us=overall.get("p90_us"),
        basis=basis,
        total_us=total,
        device=device,
        parts=tuple(parts),
        notes=tuple(notes),
    )


def _memory_peak(data: dict[str, Any]) -> str | None:
    mem = data.get("memory")
    peaks = _rows(mem.get("peaks")) if isinstance(mem, dict) else []
    dev = [p for p in peaks if p.get("device_type") != 0 and _f(p.get("peak_allocated")) > 0]
    if not dev:
        return None
    p = max(dev, key=lambda r: _f(r.get("peak_allocated")))
    where = f"device {p.get('device')}" + (f" of rank {p['rank']}" if len(dev) > 1 else "")
    text = f"peak memory {fmt.nbytes(p.get('peak_allocated'))} allocated on {where}"
    if _f(p.get("reserved")):
        text += f" ({fmt.nbytes(p.get('reserved'))} reserved)"
    return text


#: The breakdown's idle causes in words (its module doc says what each is).
_IDLE_LABELS = {
    "host wait": "waiting for the host to launch",
    "kernel wait": "launched, waiting on a dependency",
}

_IDLE_SPLIT = re.compile(r"^(?:device_)?idle_(?P<what>.+)_us$|^(?P<what2>.+)_idle_us$")


def _idle_causes(steps: list[dict[str, Any]], idle: float, part: Any) -> tuple[Part, ...]:
    """Device idle by cause: the breakdown's own split when it has one (``idle_<cause>_us``),
    else waiting for the host and data loading."""
    split: dict[str, float] = {}
    for r in steps:
        for k, v in r.items():
            m = _IDLE_SPLIT.match(k)
            if m and k != "device_idle_us" and isinstance(v, int | float):
                what = (m.group("what") or m.group("what2") or k).replace("_", " ")
                what = _IDLE_LABELS.get(what, what)
                split[what] = split.get(what, 0.0) + float(v)
    if split:
        return tuple(part(k, v) for k, v in split.items() if v)
    host_bound = min(idle, sum(_f(r.get("host_bound_us")) for r in steps))
    loading = min(idle - host_bound, sum(_f(r.get("data_loading_us")) for r in steps))
    other = idle - host_bound - loading
    out = []
    if host_bound:
        out.append(part("waiting for the host", host_bound))
    if loading > 0:
        out.append(part("data loading", loading))
    if out and other > 0.005 * idle:
        out.append(part("other", other))
    return tuple(out)


def _fix_line(fix: str) -> str:
    out = ""
    for raw in fix.splitlines():
        ln = raw.strip().removeprefix("#").strip()
        if ln:
            out += ("" if not out else " " if out.endswith((",", ":")) else "; ") + ln
    return out


def findings(
    data: dict[str, Any], event_ids: list[list[int]] | None = None, top: int = TOP_FINDINGS
) -> tuple[tuple[StoryFinding, ...], int]:
    """The ``top`` findings with the largest saving, and how many more there are."""
    rows = _rows(data.get("findings"))
    out = []
    for i, f in enumerate(rows[:top]):
        if f.get("file"):
            where = f"{f['file']}:{f['line']}" if f.get("line") is not None else str(f["file"])
        else:
            where = str(f.get("module") or "")
        ids = event_ids[i] if event_ids and i < len(event_ids) else []
        ev = f.get("evidence")
        if not ids and isinstance(ev, dict):
            ids = [int(x) for x in ev.get("event_ids") or [] if isinstance(x, int)]
        out.append(
            StoryFinding(
                rank=i + 1,
                rule=str(f.get("rule") or ""),
                severity=str(f.get("severity") or ""),
                title=str(f.get("title") or ""),
                where=where,
                saving_us=_f(f.get("saving_us")),
                saving_pct=_f(f.get("saving_pct")),
                fix=_fix_line(str(f.get("fix") or "")),
                event_ids=tuple(ids[:5]),
            )
        )
    return tuple(out), max(0, len(rows) - top)


def _code_by_line(data: dict[str, Any]) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    for b in _rows(data.get("source_blocks")):
        for ln in _rows(b.get("lines")):
            out[(str(b.get("file")), int(_f(ln.get("line"))))] = str(ln.get("text") or "").strip()
    return out


_AUTOGRAD = "autograd::engine::evaluate_function: "


def _op_name(name: str) -> str:
    """An operator's name with its distinctive part first (autograd's wrapper names end with
    the backward function, which a cut name would lose)."""
    return f"{name.removeprefix(_AUTOGRAD)} (autograd)" if name.startswith(_AUTOGRAD) else name


def per_line(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attribution rows summed per (file, line): a line run by several modules (a layer called
    in a loop) is one row, with how many modules ran it."""
    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    for r in lines:
        key = (r.get("file"), r.get("line") if r.get("file") else None)
        acc = out.get(key)
        if acc is None:
            out[key] = {**r, "modules": 1}
            continue
        for k in ("fwd_us", "bwd_us", "total_us", "host_us", "kernels", "calls"):
            acc[k] = _f(acc.get(k)) + _f(r.get(k))
        acc["modules"] += 1
    return sorted(out.values(), key=lambda r: -_f(r.get("total_us")))


def main_tables(
    data: dict[str, Any],
    step_total_us: float,
    rows: int = TOP_ROWS,
    kernel_total_us: float = 0,
    lines: list[dict[str, Any]] | None = None,
) -> list[StoryTable]:
    """Top operators, kernels and source lines."""
    hs = data.get("hotspots") if isinstance(data.get("hotspots"), dict) else {}
    out: list[StoryTable] = []
    ops = _rows((hs or {}).get("ops"))
    step_basis = "% of the summed step time" if data.get("steps") else "% of the trace's span"
    if ops:
        ops = [{**r, "name": _op_name(str(r.get("name") or ""))} for r in ops]
        dev = any(_f(r.get("device_us")) for r in ops)
        cols = [
            Column("name", "operator", "text"),
            Column("calls", "calls", "int"),
            Column("total_us", "total", "us"),
            Column("self_us", "self", "us"),
        ]
        if dev:
            cols.append(Column("device_us", "device", "us"))
        cols.append(Column("pct", "% step", "pct"))
        out.append(
            StoryTable(
                "ops",
                "Top operators",
                f"host time, including child operators (nested operators overlap); {step_basis}",
                tuple(cols),
                tuple(ops[:rows]),
                max(0, len(ops) - rows),
            )
        )
    kernels = _rows((hs or {}).get("kernels"))
    if kernels:
        total_k = kernel_total_us or sum(_f(k.get("total_us")) for k in kernels)
        shown = []
        for k in kernels[:rows]:
            name = str(k.get("name") or "").removeprefix("void ")
            share = 100.0 * _f(k.get("total_us")) / total_k if total_k else None
            shown.append({**k, "name": name, "share": share})
        basis = (
            "% of all kernel time"
            if kernel_total_us
            else f"% of the top {len(kernels)} kernels' time"
        )
        out.append(
            StoryTable(
                "kernels",
                "Top kernels",
                f"device time; {basis} (kernels on parallel streams overlap in the step)",
                (
                    Column("name", "kernel", "text"),
                    Column("calls", "calls", "int"),
                    Column("total_us", "total", "us"),
                    Column("mean_us", "mean", "us"),
                    Column("share", "% kernels", "pct"),
                ),
                tuple(shown),
                max(0, len(kernels) - rows),
            )
        )
    lines = lines if lines is not None else per_line(_rows(data.get("sources")))
    if lines:
        code = _code_by_line(data)
        dev = any(_f(r.get("kernels")) for r in lines)
        # Device time is the work launched in the steps; a device that runs behind the host
        # finishes it after the host's step ends (a recorded H200 run: 108% "of the step"):
        # its share is of all the device time charged to lines, which is what it is part of.
        line_total = sum(_f(r.get("total_us")) for r in lines) if dev else step_total_us
        shown = []
        for r in lines[:rows]:
            f = r.get("file")
            where = f"{f}:{r.get('line')}" if f else "(no user frame)"
            text = code.get((str(f), int(_f(r.get("line"))))) if f else None
            share = 100.0 * _f(r.get("total_us")) / line_total if line_total else None
            what = text or r.get("function") or ""
            if _f(r.get("modules")) > 1:
                what = f"{what} ({r['modules']} modules)"
            shown.append({**r, "where": where, "code": what, "share": share})
        what = "device" if dev else "host"
        basis = "% of the device time charged to lines" if dev else step_basis
        out.append(
            StoryTable(
                "lines",
                "Top source lines",
                f"{what} time charged to the user's line (backward to its forward line), "
                f"summed over the modules that ran it; {basis}",
                (
                    Column("where", "line", "path"),
                    Column("code", "code" if code else "function", "code"),
                    Column("fwd_us", "fwd", "us"),
                    Column("bwd_us", "bwd", "us"),
                    Column("share", "% device" if dev else "% step", "pct"),
                ),
                tuple(shown),
                max(0, len(lines) - rows),
            )
        )
    return out


def _anomalies(data: dict[str, Any], rows: int) -> StoryTable | None:
    slow = [a for a in _rows(data.get("anomalies")) if a.get("kind") != "efficiency"]
    if not slow:
        return None
    return StoryTable(
        "anomalies",
        "Slow calls",
        "calls far slower than their (operator, shapes) group's median",
        (
            Column("name", "operator", "text"),
            Column("input_shapes", "shapes", "num"),
            Column("calls", "calls", "int"),
            Column("outlier_calls", "slow", "int"),
            Column("median_us", "median", "us"),
            Column("outlier_median_us", "slow median", "us"),
        ),
        tuple(slow[:rows]),
        max(0, len(slow) - rows),
    )


def _critical_path(data: dict[str, Any], rows: int) -> StoryTable | None:
    cp = data.get("critical_path")
    steps = _rows(cp.get("steps")) if isinstance(cp, dict) else []
    steps = [s for s in steps if s.get("step") is None or _f(s.get("step")) >= 0]
    if not steps:
        return None
    shown = []
    for s in steps[:rows]:
        ops = _rows(s.get("ops"))[:3]
        top = ", ".join(f"{o.get('name')} {fmt.pct(100 * _f(o.get('share')))}" for o in ops)
        shown.append({**s, "top": top})
    return StoryTable(
        "critical_path",
        "Critical path per step",
        "the chain of host and device work that sets each step's length; "
        "% of the path per operator",
        (
            Column("rank", "rank", "int"),
            Column("step", "step", "int"),
            Column("path_us", "path", "us"),
            Column("host_us", "host", "us"),
            Column("device_us", "device", "us"),
            Column("top", "operators on the path", "text"),
        ),
        tuple(shown),
        max(0, len(steps) - rows),
    )


#: The columns worth a terminal's width, per generic table (others: the first eight).
_PREFERRED = {
    "roofline": ["name", "input_shapes", "calls", "time_us", "achieved_tflops", "achieved_gbps",
                 "pct_of_peak", "bound"],
    "memory.peaks": ["rank", "device_type", "device", "peak_allocated", "reserved",
                     "fragmentation"],
    "memory.live_at_peak": ["op", "file", "line", "bytes", "allocations"],
    "memory.churn": ["rank", "device", "step", "allocated_bytes", "freed_bytes", "allocations"],
    "memory.never_freed": ["op", "file", "line", "bytes", "allocations"],
    "utilisation.kernels": ["name", "calls", "time_us", "grid", "block", "waves",
                            "wave_efficiency", "achieved_occupancy"],
    "cluster.ranks": ["rank", "steps", "step_time_us", "compute_us", "comm_not_overlapped_us",
                      "idle_us", "wait_us"],
    "breakdown.steps": ["rank", "step", "dur_us", "compute_us", "communication_not_overlapped_us",
                        "device_idle_us", "host_bound_us", "host_ops_us"],
}  # fmt: skip


def _row_lists(key: str, title: str, value: Any) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """Every list of rows under ``value``: its table's id, its title and the rows."""
    items: list[tuple[str, Any]] = [(key, value)]
    if isinstance(value, dict):
        items = [(f"{key}.{k}", v) for k, v in value.items()]
    out = []
    for tid, v in items:
        rs = _rows(v)
        if rs:
            name = tid.split(".", 1)[1].replace("_", " ") if "." in tid else ""
            out.append((tid, f"{title}: {name}" if name else title, rs))
    return out


def _generic(key: str, title: str, value: Any, rows: int) -> list[StoryTable]:
    """Every list of rows under ``value`` as a table, cells formatted by column name."""
    out: list[StoryTable] = []
    for tid, table_title, rs in _row_lists(key, title, value):
        cols: list[str] = []
        for r in rs[:rows]:
            for c in r:
                if c not in cols and c not in ("ts_us",) and not _nested(r[c]):
                    cols.append(c)
        pref = [c for c in _PREFERRED.get(tid, []) if c in cols]
        cols = pref or cols[:8]
        # a row's peak_note (roofline, device without peaks) says why "% of peak" is empty
        basis = next((str(r["peak_note"]) for r in rs if r.get("peak_note")), "")
        out.append(
            StoryTable(
                tid,
                table_title,
                basis,
                tuple(Column(c, fmt.header(c), _kind(rs, c)) for c in cols),
                tuple(rs[:rows]),
                max(0, len(rs) - rows),
            )
        )
    return out


def _kind(rows: list[dict[str, Any]], col: str) -> str:
    """``auto`` (a number, formatted by the column's name) or ``text`` (cut to fit)."""
    # one pass that stops at the first value that is not a number (tables run to hundreds of
    # rows, and every column of every section's table is asked)
    for r in rows:
        v = r.get(col)
        t = type(v)
        if t is float or t is int or v is None:  # exact types first: nearly every value
            continue
        if t is bool or not isinstance(v, int | float):
            return "text"
    return "auto"


def _nested(v: Any) -> bool:
    return isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, dict) for x in v))


_TITLES = {
    "anomalies": "Anomalies",
    "roofline": "Roofline",
    "memory": "Memory",
    "cluster": "Ranks",
    "critical_path": "Critical path",
    "utilisation": "Device utilisation",
    "trend": "Trend",
}


def build_story(
    data: dict[str, Any],
    *,
    full: bool = False,
    rows: int = TOP_ROWS,
    event_ids: list[list[int]] | None = None,
    kernel_total_us: float = 0.0,
    lines: list[dict[str, Any]] | None = None,
    full_rows: int = 20,
) -> Story:
    """The story of the report ``data`` (``Report.to_json()``).

    ``full``: every table (the default shows a table only when it says something). Tables show at
    most ``rows`` rows (``full``: ``full_rows``, the report's ``top``). ``event_ids``: per finding,
    events to look at. ``kernel_total_us``: all kernels' time (the basis of the kernel shares;
    without it, the top kernels' time). ``lines``: every attribution row (µs), for the
    per-line sums (without it, the JSON's top rows).
    """
    head = headline(data)
    top_findings, more = findings(data, event_ids)
    n = max(rows, full_rows) if full else rows
    tables = main_tables(
        data, head.total_us, n, kernel_total_us, per_line(lines) if lines is not None else None
    )
    hidden: list[str] = []
    anomalies = _anomalies(data, n)
    if anomalies:
        tables.append(anomalies)
    ranks = data.get("ranks")
    many = isinstance(ranks, list) and len(ranks) > 1
    for key, value in data.items():
        if key in _STORY_KEYS or key in _NOT_SECTIONS or key == "anomalies":
            continue
        if not isinstance(value, dict | list) or not value:
            continue
        if key == "critical_path":
            cp = _critical_path(data, n)
            if cp and full:
                tables.append(cp)
            elif cp:
                hidden.append(cp.title)
            continue
        title = _TITLES.get(key, key.replace("_", " ").capitalize())
        if full or (key == "cluster" and many):
            tables += _generic(key, title, value, n)
        elif key != "cluster":  # one rank: nothing to compare it with
            # a hidden table is only named (its columns and cells are not looked at)
            hidden += [table_title for _, table_title, _ in _row_lists(key, title, value)]
    if full:
        bd = data.get("breakdown")
        if isinstance(bd, dict):
            steps = _generic("breakdown", "", {"steps": bd.get("steps")}, n)
            tables += [replace(t, title="Step breakdown per step") for t in steps]
    elif isinstance(data.get("breakdown"), dict) and len(_rows(data["breakdown"].get("steps"))) > 1:
        hidden.append("Step breakdown: steps")
    warnings = tuple(str(w) for w in data.get("warnings") or [])
    extra = tuple(k for k in ("comparison",) if data.get(k))
    return Story(head, top_findings, more, tuple(tables), tuple(hidden), warnings, extra)


def story_of(
    report: Any,
    *,
    full: bool = False,
    rows: int = TOP_ROWS,
    data: dict[str, Any] | None = None,
) -> Story:
    """The story of a :class:`~opscope.analysis.assemble.Report` (its JSON, ``data`` when already
    made, plus the findings' event ids and all kernels' time that the JSON's top rows lack)."""
    if data is None:
        data = report.to_json()
    ids: list[list[int]] = []
    found = report.sections.get("findings")
    for f in found or []:
        ev = getattr(f, "evidence", None) or {}
        ids.append([int(x) for x in ev.get("event_ids") or [] if isinstance(x, int)])
    ktotal = 0.0
    hs = report.sections.get("hotspots")
    kernels = getattr(hs, "kernels", None)
    if kernels is not None and "total_ns" in getattr(kernels, "columns", []):
        ktotal = float(kernels.get_column("total_ns").sum()) / 1000
    all_lines = None
    attribution = report.sections.get("attribution")
    df = getattr(attribution, "lines", None)
    if df is not None and {"file", "line", "total_ns"} <= set(getattr(df, "columns", [])):
        ns = [c for c in df.columns if c.endswith("_ns")]
        # the rows from the columns' lists (iterating the rows is a query of fixed cost)
        cols = {k: df.get_column(k).to_list() for k in df.columns}
        all_lines = [
            {
                **{k: v for k, v in r.items() if k not in ns},
                **{k[:-3] + "_us": r[k] / 1000 for k in ns},
            }
            for r in (dict(zip(cols, v, strict=True)) for v in zip(*cols.values(), strict=True))
        ]
    return build_story(
        data,
        full=full,
        rows=rows,
        event_ids=ids or None,
        kernel_total_us=ktotal,
        lines=all_lines,
        full_rows=int(getattr(report, "top", 20)),
    )
