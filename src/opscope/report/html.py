"""The HTML report: one offline file (CSS, JS and data inlined), at most 3 MB for any profile.

It renders from ``report.to_json()`` only (the shape ``opscope report --json`` prints), plus the
memory curve when the Profile is at hand. The data travels as JSON inside
``<script type="application/json">`` with ``<``, ``>``, ``&`` and U+2028/U+2029 written as
``\\u003c``-style escapes, so no string from a trace can close the script element; the page's
script puts every string into the DOM with ``textContent``. A Content-Security-Policy allows only
the page's own inline script and style (by hash) and no network at all.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import tempfile
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from opscope import __version__
from opscope.analysis.assemble import SectionError
from opscope.jsonsafe import finite as _finite
from opscope.model import Profile

MAX_BYTES = 3_000_000
_DATA_BUDGET = MAX_BYTES - 150_000  # room for the page's own CSS and JS
_CURVE_POINTS = 2000
_ROW_LIMITS = (2000, 500, 200, 50, 20, 5)


def _asset(name: str) -> str:
    return resources.files("opscope.report").joinpath("assets", name).read_text(encoding="utf-8")


def escape_json_for_script(text: str) -> str:
    """``text`` (JSON) made safe inside a ``<script>`` element: no ``<``, ``>``, ``&``, U+2028/9."""
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def memory_curves(profile: Profile, points: int = _CURVE_POINTS) -> list[dict[str, Any]]:
    """Allocated bytes over time per (rank, device), at most ``points`` points each.

    Downsampling keeps the largest value of each interval, so the curve's peak is the true peak.
    """
    m = profile.memory
    if m.height == 0 or m.get_column("total_allocated").null_count() == m.height:
        return []
    m = m.filter(pl.col("total_allocated").is_not_null() & pl.col("ts_ns").is_not_null())
    t_origin = int(m.get_column("ts_ns").min())  # type: ignore[arg-type]
    out = []
    # maintain_order: events at one instant in trace order, so a bucket's peak time is the same
    # every run
    for (rank, dtype, dev), group in m.sort("ts_ns", maintain_order=True).group_by(
        "rank", "device_type", "device", maintain_order=True
    ):
        part = group
        n = part.height
        span = int(part.get_column("ts_ns").max()) - int(part.get_column("ts_ns").min()) + 1  # type: ignore[arg-type]
        if n > points:
            width = max(1, span // points + 1)
            part = (
                part.with_columns(((pl.col("ts_ns") - pl.col("ts_ns").min()) // width).alias("_b"))
                .group_by("_b", maintain_order=True)
                .agg(
                    pl.col("ts_ns").sort_by("total_allocated", maintain_order=True).last(),
                    pl.col("total_allocated").max(),
                )
                .sort("ts_ns")
            )
        where = "CPU" if dtype == 0 else f"device {dev}"
        out.append(
            {
                "name": f"rank {rank} · {where} allocated",
                "ts_us": ((part.get_column("ts_ns") - t_origin) / 1e3).to_list(),
                "bytes": part.get_column("total_allocated").to_list(),
                "points": n,
                "downsampled": n > points,
            }
        )
    return out


def _truncate(obj: Any, limit: int, notes: list[str], path: str = "") -> Any:
    if isinstance(obj, dict):
        return {k: _truncate(v, limit, notes, f"{path}.{k}" if path else k) for k, v in obj.items()}
    if isinstance(obj, list):
        if len(obj) > limit and path != "_memory_curve":
            notes.append(f"{path}: first {limit} of {len(obj)} rows kept")
            obj = obj[:limit]
        return [_truncate(v, limit, notes, path) for v in obj]
    if isinstance(obj, str) and len(obj) > 4000:
        return obj[:4000] + "…"
    return obj


def _fit(data: dict[str, Any]) -> tuple[str, list[str]]:
    """The data as JSON within the size budget, and notes on what was cut to get there."""
    enc = msgspec.json.encode(data).decode()
    if len(escape_json_for_script(enc).encode()) <= _DATA_BUDGET:
        return enc, []
    for limit in _ROW_LIMITS:
        notes: list[str] = []
        cut = _truncate(data, limit, notes)
        cut["_notes"] = [
            *(data.get("_notes") or []),
            f"This report was cut to stay under {MAX_BYTES // 1_000_000} MB: " + "; ".join(notes),
        ]
        enc = msgspec.json.encode(cut).decode()
        if len(escape_json_for_script(enc).encode()) <= _DATA_BUDGET:
            return enc, cut["_notes"]
    raise ValueError("report data does not fit in the HTML size limit even when cut")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_html(report: Any, *, profile: Profile | None = None, title: str | None = None) -> str:
    """The report as one self-contained HTML page.

    ``report`` is anything with ``to_json() -> dict`` (a :class:`opscope.Report`) or that dict
    itself. ``profile`` (default: ``report.profile`` when it has one) adds the memory curve.
    """
    data = report.to_json() if hasattr(report, "to_json") else dict(report)
    data = _finite(data)
    if not isinstance(data, dict):
        raise TypeError("report.to_json() must return a dict")
    prof = profile if profile is not None else getattr(report, "profile", None)
    errors = list(data.get("errors") or [])
    story = _guarded_story(report, data, errors)
    if story is not None:
        data["_story"] = story
    viewer = _guarded_viewer_links(report, prof, data, errors)
    if viewer is not None:
        data["_viewer"] = viewer
    _comparison_text(data)
    _offsets_into_steps(data)
    if isinstance(prof, Profile):
        failed = len(errors)
        curves = _guarded_curves(prof, errors)
        if curves:
            data["_memory_curve"] = curves
        if len(errors) > failed:
            data["errors"] = errors
    if errors:
        # shown at the top of the page, under the summary; the list itself is a table further down
        data["_notes"] = [
            f"Warning: {len(errors)} report section(s) failed; the others are complete.",
            *(_error_line(e) for e in errors),
            *(data.get("_notes") or []),
        ]
    payload, _notes = _fit(data)
    css = _asset("report.css")
    js = _asset("report.js")
    sources = data.get("sources_read") or ""
    name = data.get("source")
    heading = title or (f"opscope report: {name}" if name else "opscope report")
    csp = (
        f"default-src 'none'; script-src {_csp_hash(js)}; style-src {_csp_hash(css)}; "
        "img-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
    )
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp, quote=False)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(heading)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
        f'<header><h1>{html.escape(heading)}</h1><div class="sub">'
        f"opscope {html.escape(__version__)} · {stamp} {html.escape(str(sources))}</div></header>\n"
        '<nav id="nav"></nav>\n<main id="main"></main>\n<div id="tip" hidden></div>\n'
        "<noscript><p>This report needs JavaScript to draw its tables and charts.</p></noscript>\n"
        f'<script type="application/json" id="opscope-data">{escape_json_for_script(payload)}'
        f"</script>\n<script>{js}</script>\n</body>\n</html>\n"
    )


def _guarded_story(report: Any, data: dict[str, Any], errors: list[Any]) -> Any:
    """The story's JSON (what the page shows first), or ``None`` with the failure recorded."""
    from opscope.report.story import build_story, story_of

    try:
        if hasattr(report, "sections"):
            return _finite(story_of(report, data=data).to_json())
        return _finite(build_story(data).to_json())
    except Exception as e:
        errors.append(SectionError.of("story", e).to_json())
        data["errors"] = errors
        return None


def viewer_links(report: Any, profile: Profile, source: str | None) -> dict[str, Any] | None:
    """Where each finding opens in the timeline viewer: ``{"command", "port", "links"}`` with
    one ``{"url", "event_id", "why"}`` (or null) per finding, in the report's order; ``None``
    when the report has no findings. The links work while ``command`` serves the same trace."""
    from opscope.report.viewer.links import DEFAULT_PORT, finding_targets, view_command

    found = list(getattr(report, "sections", {}).get("findings") or ())
    if not found:
        return None
    links = [
        None if t is None else {"url": t.url(source), "event_id": t.event_id, "why": t.why}
        for t in finding_targets(found, profile)
    ]
    return {"command": view_command(source), "port": DEFAULT_PORT, "links": links}


def _guarded_viewer_links(
    report: Any, profile: Any, data: dict[str, Any], errors: list[Any]
) -> dict[str, Any] | None:
    if not isinstance(profile, Profile):
        return None
    try:
        return viewer_links(report, profile, data.get("source"))
    except Exception as e:
        errors.append(SectionError.of("viewer links", e).to_json())
        data["errors"] = errors
        return None


def _comparison_text(data: dict[str, Any]) -> None:
    """The comparison's summary and explain rows (numbers and codes in the JSON) as the text the
    compare views print: metric, before, after, change; row, delta_us."""
    comp = data.get("comparison")
    if not isinstance(comp, dict):
        return
    from opscope.report.compare_render import explain_label, summary_cells

    rows = comp.get("summary")
    if isinstance(rows, list) and all(isinstance(r, dict) and "unit" in r for r in rows):
        keys = ("metric", "before", "after", "change")
        comp["summary"] = [dict(zip(keys, summary_cells(r), strict=True)) for r in rows]
    rows = comp.get("explain")
    if isinstance(rows, list) and all(isinstance(r, dict) and "side" in r for r in rows):
        comp["explain"] = [{"row": explain_label(r), "delta_us": r["delta_us"]} for r in rows]


def _offsets_into_steps(data: dict[str, Any]) -> None:
    """Replace every row's absolute ``ts_us`` (µs since the epoch or the trace's clock origin)
    by ``at_us``: its offset into its step (rows that name a step), else from the first step
    (or the earliest timestamp)."""
    bd = data.get("breakdown")
    steps = bd.get("steps") if isinstance(bd, dict) else None
    starts: dict[tuple[Any, Any], float] = {}
    for r in steps if isinstance(steps, list) else []:
        if isinstance(r, dict) and isinstance(r.get("ts_us"), int | float):
            starts[(r.get("rank"), r.get("step"))] = float(r["ts_us"])
    all_ts: list[float] = []

    def collect(obj: Any) -> None:
        if isinstance(obj, dict):
            if isinstance(obj.get("ts_us"), int | float):
                all_ts.append(float(obj["ts_us"]))
            for k, v in obj.items():
                if k != "_memory_curve":
                    collect(v)
        elif isinstance(obj, list):
            for v in obj:
                collect(v)

    collect(data)
    if not all_ts:
        return
    origin = min(starts.values()) if starts else min(all_ts)

    def fix(obj: Any, in_steps: bool) -> None:
        if isinstance(obj, dict):
            if isinstance(obj.get("ts_us"), int | float):
                ts = float(obj.pop("ts_us"))
                if in_steps:
                    obj["start_us"] = ts - origin  # a step's start: from the first step
                else:
                    base = starts.get((obj.get("rank"), obj.get("step")))
                    if base is None and len(starts) == 1 and obj.get("step") is None:
                        base = origin
                    obj["at_us" if base is not None else "from_start_us"] = ts - (
                        base if base is not None else origin
                    )
            for k, v in obj.items():
                if k != "_memory_curve":
                    fix(v, in_steps)
        elif isinstance(obj, list):
            for v in obj:
                fix(v, in_steps)

    for k, v in data.items():
        if k == "breakdown" and isinstance(v, dict):
            fix(v.get("steps"), True)
            fix({kk: vv for kk, vv in v.items() if kk != "steps"}, False)
        elif k != "_memory_curve":
            fix(v, False)


def _guarded_curves(profile: Profile, errors: list[Any]) -> list[dict[str, Any]]:
    try:
        return memory_curves(profile)
    except Exception as e:
        errors.append(SectionError.of("memory curve", e).to_json())
        return []


def _error_line(e: Any) -> str:
    if isinstance(e, dict):
        return f"section {e.get('section')} failed: {e.get('type')}: {e.get('message')}"
    return str(e)


def write_html(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
