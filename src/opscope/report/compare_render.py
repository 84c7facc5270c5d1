"""Render a :class:`~opscope.analysis.compare.Comparison`: a rich terminal view, Markdown and
one offline HTML page (its JSON is ``Comparison.to_json``).

The comparison holds numbers only; every word and unit of its views is written here (durations
and bytes through :mod:`opscope.report.fmt`, as in the report). Renderers only read the
Comparison's tables; they never load or parse a profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from opscope.report import fmt

if TYPE_CHECKING:
    from opscope.analysis.compare import Comparison

_VERDICT_STYLE = {"gain": "green", "loss": "red", "noise": "dim", "untested": "yellow"}
_KIND_TITLE = {
    "semantic": "layer",
    "op": "op",
    "op_shape": "op+shapes",
    "kernel": "kernel",
    "module": "module",
    "line": "line",
}
_KEY_MAX = 110  # long shape lists are cut in the views (the JSON keeps them whole)


def fmt_us(us: float | None) -> str:
    """A duration in µs in the unit that reads best ('12.4 ms', '940 µs'); '-' for none."""
    return fmt.us(us) or "-"


def change_text(
    speedup: float | None, verdict: str | None, noise_us: float | None, *, per_step: bool = False
) -> str:
    """'13.7× faster', '1.15× slower', 'noise (1.01×, ±0.2 ms)', with '(untested)' when needed.

    ``per_step``: the figures beside it are totals over the steps while the noise band is per
    step (a row's): the band is written '±0.2 ms/step' so that it is not read against the
    totals."""
    if speedup is None:
        return "gone" if verdict != "noise" else "noise"
    if verdict == "noise":
        unit = "/step" if per_step else ""
        spread = f", ±{fmt_us(noise_us)}{unit}" if noise_us else ""
        return f"noise ({speedup:.2f}×{spread})"
    word = (
        f"{speedup:.3g}× faster"
        if speedup >= 1
        else f"{1 / speedup:.3g}× slower"
        if speedup > 0
        else "slower"
    )
    return f"{word} (untested)" if verdict == "untested" else word


def _figure(unit: str, x: float | None) -> str:
    if x is None:
        return "n/a" if unit == "fraction" else "-"
    if unit == "us":
        return fmt_us(x)
    if unit == "bytes":
        return fmt.nbytes(x) or "-"
    if unit == "fraction":
        return f"{x:.0%}"
    return f"{x:.4g}"


def _pair_change(x: float, y: float, lower_is_better: bool) -> str:
    """How a figure without a noise test moved: '2.00× less', '1.50× more', '2.00×'."""
    if x == y:
        return "same"
    if lower_is_better:
        return f"{x / y:.2f}× less" if y and y < x else f"{y / x:.2f}× more" if x else "new"
    return f"{y / x:.2f}×" if x else "new"


def summary_cells(r: dict[str, Any]) -> list[str]:
    """One ``Comparison.summary`` row as text: metric, before, after, change."""
    unit, x, y = r["unit"], r["before"], r["after"]
    if unit == "fraction":
        change = "n/a" if x is None or y is None else f"{(y - x) * 100:+.0f} pts"
    elif r["verdict"] is not None:
        change = change_text(r["speedup"], r["verdict"], r["noise_us"], per_step=r["per_step"])
    else:
        change = _pair_change(float(x), float(y), bool(r["lower_is_better"]))
    return [r["metric"], _figure(unit, x), _figure(unit, y), change]


_EXPLAIN_REST = {
    "other_matched": "other matched rows",
    "other_one_side": "other rows on one side only",
    "residual": "not in any row (idle gaps, overlap, host time, median vs mean)",
}


def explain_label(r: dict[str, Any]) -> str:
    """What one ``Comparison.explain`` row stands for, in words."""
    if r["kind"] != "row":
        return _EXPLAIN_REST.get(r["kind"], str(r["kind"]))
    return str(r["key"]) + ("" if r["side"] == "both" else f" (only {r['side']})")


def _short(key: str) -> str:
    return key if len(key) <= _KEY_MAX else key[: _KEY_MAX - 1] + "…"


def _top_rows(comp: Comparison, top: int) -> pl.DataFrame:
    """The rows worth showing first: real changes before noise, largest |delta| first."""
    order = pl.col("verdict").replace_strict(
        {"gain": 0, "loss": 0, "untested": 1, "noise": 2}, default=3, return_dtype=pl.Int8
    )
    return (
        comp.rows.with_columns(order.alias("_o"), pl.col("delta_us").abs().alias("_d"))
        .sort("_o", "_d", "key", descending=[False, True, False])
        .drop("_o", "_d")
        .head(top)
    )


def _header(comp: Comparison) -> list[str]:
    a, b = comp.sides.row(0, named=True), comp.sides.row(1, named=True)
    return [
        f"{comp.names[0]}: {a['source']} ({a['steps']} steps from {a['step_source']})",
        f"{comp.names[1]}: {b['source']} ({b['steps']} steps from {b['step_source']})",
        f"rows compare {comp.basis} time, {comp.normalisation}",
    ]


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def headline(comp: Comparison) -> str:
    """One line: the median step's change, its noise band and verdict."""
    d = comp.step_after_us - comp.step_before_us
    noise = f" ± {fmt_us(comp.step_noise_us)} noise" if comp.step_noise_us is not None else ""
    verdict = {
        "gain": "faster, beyond the noise",
        "loss": "slower, beyond the noise",
        "noise": "within the noise",
        "untested": "not tested (fewer than 3 steps a side)",
    }.get(comp.step_verdict, comp.step_verdict)
    return (
        f"step time {fmt_us(comp.step_before_us)} → {fmt_us(comp.step_after_us)} "
        f"({'+' if d >= 0 else '−'}{fmt_us(abs(d))}{noise}; {verdict})"
    )


def _signed(us: float) -> str:
    return ("+" if us >= 0 else "−") + fmt_us(abs(us))


def _heavy_cells(r: dict[str, Any]) -> list[str]:
    return [
        fmt_us(r["before_us"]),
        fmt_us(r["after_us"]),
        change_text(r["speedup"], r["verdict"], r["noise_us"], per_step=True),
        f"{_num(r['before_gbps'], '')}→ {_num(r['after_gbps'], '')}",
        f"{_pct(r['before_bw_util'])} → {_pct(r['after_bw_util'])}",
        f"{_num(r['before_tflops'], '')}→ {_num(r['after_tflops'], '')}",
        f"{_pct(r['before_flops_util'])} → {_pct(r['after_flops_util'])}",
    ]


_HEAVY_HEADER = ["row", "before", "after", "change", "GB/s", "bw util", "TFLOP/s", "FLOP/s util"]


def _num(x: Any, unit: str) -> str:
    return "n/a " if x is None else f"{x:.3g} {unit}"


def render_rich(comp: Comparison, top: int = 15) -> RenderableType:
    """A rich renderable: header, summary, top matched rows, added/removed, roofline, notes."""
    parts: list[RenderableType] = [Text(headline(comp), style="bold")]
    for w in comp.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    parts.append(Text("\n".join(_header(comp)), style="dim"))
    if comp.explain.height:
        t = Table(
            title="what changed the step (per step; the rows sum to the step change)",
            title_justify="left",
            show_edge=False,
        )
        t.add_column("row", ratio=1)
        t.add_column("Δ per step", justify="right", no_wrap=True)
        for r in comp.explain.iter_rows(named=True):
            tone = "green" if r["delta_us"] < 0 else "red" if r["delta_us"] > 0 else ""
            t.add_row(
                Text(_short(explain_label(r)), overflow="fold"),
                Text(_signed(r["delta_us"]), style=tone if r["kind"] == "row" else "dim"),
            )
        parts.append(t)

    summary = Table(title="summary", title_justify="left", show_edge=False)
    for c in ("metric", comp.names[0], comp.names[1], "change"):
        summary.add_column(
            c,
            justify="left" if c in ("metric", "change") else "right",
            no_wrap=c != "metric",
        )
    for r in comp.summary.iter_rows(named=True):
        metric, before, after, change = summary_cells(r)
        style = (
            "green"
            if "faster" in change or "less" in change
            else "red"
            if "slower" in change
            else None
        )
        summary.add_row(metric, before, after, Text(change, style=style or ""))
    parts.append(summary)

    rows = Table(title=f"top {top} matched rows", title_justify="left", show_edge=False)
    # no delta column here (it is in the JSON and Markdown): the key needs the width
    for c in ("kind", "key", comp.names[0], comp.names[1], "change", "calls"):
        rows.add_column(
            c,
            justify="right" if c in (*comp.names, "calls") else "left",
            no_wrap=c not in ("key", "calls"),
            ratio=1 if c == "key" else None,
        )
    for r in _top_rows(comp, top).iter_rows(named=True):
        # fallback keys already say how they matched ("via op", "(shape changed)")
        key = _short(r["key"])
        rows.add_row(
            _KIND_TITLE.get(r["kind"], r["kind"]),
            Text(key, overflow="fold"),
            fmt_us(r["before_us"]),
            fmt_us(r["after_us"]),
            Text(
                change_text(r["speedup"], r["verdict"], r["noise_us"], per_step=True),
                style=_VERDICT_STYLE.get(r["verdict"], ""),
            ),
            f"{r['calls_before']} → {r['calls_after']}",
        )
    parts.append(rows)

    for title, df in (
        (f"only in {comp.names[1]}", comp.added),
        (f"only in {comp.names[0]}", comp.removed),
    ):
        if df.height == 0:
            continue
        t = Table(
            title=f"{title} (top {top} of {df.height})", title_justify="left", show_edge=False
        )
        for c in ("kind", "key", "time", "calls"):
            t.add_column(
                c,
                justify="right" if c in ("time", "calls") else "left",
                no_wrap=c != "key",
                ratio=1 if c == "key" else None,
            )
        for r in df.head(top).iter_rows(named=True):
            t.add_row(
                _KIND_TITLE.get(r["kind"], r["kind"]),
                Text(_short(r["key"]), overflow="fold"),
                fmt_us(r["us"]),
                str(r["calls"]),
            )
        parts.append(t)

    if comp.heavy.height:
        t = Table(
            title="heaviest matched rows (time, achieved bandwidth and FLOP/s, share of peak)",
            title_justify="left",
            show_edge=False,
        )
        # the terminal keeps the key readable: time, achieved GB/s and both utilisations
        # (TFLOP/s and the verdict are in the Markdown, HTML and JSON)
        for c in ("row", "time", "GB/s", "bw util", "FLOP/s util"):
            t.add_column(
                c,
                justify="left" if c == "row" else "right",
                ratio=1 if c == "row" else None,
                no_wrap=c != "row",
            )
        for r in comp.heavy.iter_rows(named=True):
            cells = _heavy_cells(r)
            t.add_row(
                Text(_short(r["key"]), overflow="fold"),
                f"{cells[0]} → {cells[1]}",
                cells[3].replace("  ", " ").strip(),
                cells[4],
                cells[6],
            )
        parts.append(t)
    if comp.roofline.height:
        t = Table(
            title="heaviest matched operators (all modules)", title_justify="left", show_edge=False
        )
        util = "before_bw_util" in comp.roofline.columns
        cols = ["operator", "TFLOP/s", "GB/s"] + (["FLOP/s util", "bandwidth util"] if util else [])
        for c in cols:
            t.add_column(c, justify="left" if c == "operator" else "right")
        for r in comp.roofline.iter_rows(named=True):
            cells = [
                r["key"],
                f"{_num(r['before_tflops'], '')}→ {_num(r['after_tflops'], '')}",
                f"{_num(r['before_gbps'], '')}→ {_num(r['after_gbps'], '')}",
            ]
            if util:
                cells += [
                    f"{_pct(r['before_flops_util'])} → {_pct(r['after_flops_util'])}",
                    f"{_pct(r['before_bw_util'])} → {_pct(r['after_bw_util'])}",
                ]
            t.add_row(*cells)
        parts.append(t)
    if comp.notes:
        parts.append(Text("\n".join(f"note: {n}" for n in comp.notes), style="dim"))
    return Group(*parts)


def print_rich(comp: Comparison, console: Console, top: int = 15) -> None:
    """Print :func:`render_rich` on ``console``."""
    console.print(render_rich(comp, top=top))


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    out = ["| " + " | ".join(header) + " |"]
    out.append("|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|")
    out += ["| " + " | ".join(_md_escape(c) for c in r) + " |" for r in rows]
    return out


def render_markdown(comp: Comparison, top: int = 15) -> str:
    """GitHub-flavoured Markdown for a PR comment: summary first, details folded."""
    b, a = comp.names
    lines = [f"### opscope compare: {b} → {a}", "", f"**{headline(comp)}**", ""]
    lines += [f"> ⚠ {w}" for w in comp.warnings]
    if comp.warnings:
        lines.append("")
    lines += _md_table(
        ["metric", b, a, "change"],
        [summary_cells(r) for r in comp.summary.iter_rows(named=True)],
        {1, 2},
    )
    lines += ["", *(f"<sub>{h}</sub><br>" for h in _header(comp)), ""]
    if comp.explain.height:
        lines += ["What changed the step (per step; the rows sum to the step change):", ""]
        lines += _md_table(
            ["row", "Δ per step"],
            [
                [explain_label(r), _signed(r["delta_us"])]
                for r in comp.explain.iter_rows(named=True)
            ],
            {1},
        )
        lines.append("")
    if comp.heavy.height:
        lines += ["<details><summary>heaviest matched rows</summary>", ""]
        lines += _md_table(
            _HEAVY_HEADER,
            [[r["key"], *_heavy_cells(r)] for r in comp.heavy.iter_rows(named=True)],
            set(range(1, len(_HEAVY_HEADER))),
        )
        lines += ["", "</details>", ""]
    lines += ["<details><summary>top matched rows</summary>", ""]
    lines += _md_table(
        ["kind", "key", b, a, "delta", "change", "calls"],
        [
            [
                _KIND_TITLE.get(r["kind"], r["kind"]),
                f"`{_short(r['key'])}`",
                fmt_us(r["before_us"]),
                fmt_us(r["after_us"]),
                fmt_us(r["delta_us"]),
                change_text(r["speedup"], r["verdict"], r["noise_us"], per_step=True),
                f"{r['calls_before']} → {r['calls_after']}",
            ]
            for r in _top_rows(comp, top).iter_rows(named=True)
        ],
        {2, 3, 4, 6},
    )
    lines += ["", "</details>", ""]
    for title, df in ((f"only in {a}", comp.added), (f"only in {b}", comp.removed)):
        if df.height == 0:
            continue
        lines += [f"<details><summary>{title} ({df.height})</summary>", ""]
        lines += _md_table(
            ["kind", "key", "time", "calls"],
            [
                [
                    _KIND_TITLE.get(r["kind"], r["kind"]),
                    f"`{r['key']}`",
                    fmt_us(r["us"]),
                    str(r["calls"]),
                ]
                for r in df.head(top).iter_rows(named=True)
            ],
            {2, 3},
        )
        lines += ["", "</details>", ""]
    if comp.notes:
        lines += [f"> {n}" for n in comp.notes]
    return "\n".join(lines).rstrip() + "\n"


# HTML ---------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:3px 8px;border-bottom:1px solid #ddd}
th{text-align:left;background:#f4f4f4}td.n{text-align:right;white-space:nowrap}
.warn{background:#fff4d6;border-left:4px solid #e0a800;padding:.5em 1em}
.head{font-size:1.15em;font-weight:600}.dim{color:#777}
.gain{color:#1a7f37}.loss{color:#c62828}
"""


def _esc(x: Any) -> str:
    import html

    return html.escape("" if x is None else str(x), quote=True)


def _html_table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    th = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{_esc(c)}</td>' if i in right else f"<td>{_esc(c)}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _svg_bars(comp: Comparison, top: int) -> str:
    """Before/after time of the heaviest matched rows as horizontal bars (inline SVG)."""
    rows = comp.heavy.head(top).to_dicts()
    if not rows:
        return ""
    vmax = max(max(r["before_us"] or 0.0, r["after_us"] or 0.0) for r in rows) or 1.0
    label_w, bar_w, row_h = 420, 520, 34
    h = row_h * len(rows) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 90}" height="{h}" '
        'role="img" aria-label="before and after time of the heaviest matched rows">'
    ]
    out.append(
        f'<rect x="{label_w}" y="4" width="12" height="10" fill="#9e9e9e"/>'
        f'<text x="{label_w + 16}" y="13" font-size="11">{_esc(comp.names[0])}</text>'
        f'<rect x="{label_w + 110}" y="4" width="12" height="10" fill="#1e88e5"/>'
        f'<text x="{label_w + 126}" y="13" font-size="11">{_esc(comp.names[1])}</text>'
    )
    for i, r in enumerate(rows):
        y = 24 + i * row_h
        key = r["key"] if len(r["key"]) <= 64 else r["key"][:63] + "…"
        out.append(
            f'<text x="{label_w - 6}" y="{y + 17}" font-size="11" text-anchor="end">'
            f"<title>{_esc(r['key'])}</title>{_esc(key)}</text>"
        )
        for j, (col, color) in enumerate((("before_us", "#9e9e9e"), ("after_us", "#1e88e5"))):
            v = float(r[col] or 0.0)
            w = max(v / vmax * bar_w, 0.5)
            yy = y + 2 + j * 14
            out.append(
                f'<rect x="{label_w}" y="{yy}" width="{w:.1f}" height="12" fill="{color}"/>'
                f'<text x="{label_w + w + 4:.1f}" y="{yy + 10}" font-size="10">'
                f"{_esc(fmt_us(v))}</text>"
            )
    out.append("</svg>")
    return "".join(out)


def render_html(comp: Comparison, top: int = 15) -> str:
    """One offline HTML page: headline, warnings, what explains the step change, a chart of the
    heaviest matched rows, their roofline figures, the summary and the matched rows. Every
    string from a trace is escaped."""
    b, a = comp.names
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>opscope compare: {_esc(b)} → {_esc(a)}</title><style>{_CSS}</style></head><body>",
        f"<h1>opscope compare: {_esc(b)} → {_esc(a)}</h1>",
        f'<p class="head">{_esc(headline(comp))}</p>',
    ]
    parts += [f'<p class="warn">warning: {_esc(w)}</p>' for w in comp.warnings]
    parts.append("".join(f'<div class="dim">{_esc(h)}</div>' for h in _header(comp)))
    if comp.explain.height:
        parts.append("<h2>What changed the step (per step; the rows sum to the step change)</h2>")
        parts.append(
            _html_table(
                ["row", "Δ per step"],
                [
                    [explain_label(r), _signed(r["delta_us"])]
                    for r in comp.explain.iter_rows(named=True)
                ],
                {1},
            )
        )
    if comp.heavy.height:
        parts.append("<h2>Heaviest matched rows</h2>")
        parts.append(_svg_bars(comp, top))
        parts.append(
            _html_table(
                _HEAVY_HEADER,
                [[r["key"], *_heavy_cells(r)] for r in comp.heavy.iter_rows(named=True)],
                set(range(1, len(_HEAVY_HEADER))),
            )
        )
    parts.append("<h2>Summary</h2>")
    parts.append(
        _html_table(
            ["metric", b, a, "change"],
            [summary_cells(r) for r in comp.summary.iter_rows(named=True)],
            {1, 2},
        )
    )
    parts.append(f"<h2>Top {top} matched rows</h2>")
    parts.append(
        _html_table(
            ["kind", "key", b, a, "change", "calls"],
            [
                [
                    _KIND_TITLE.get(r["kind"], r["kind"]),
                    r["key"],
                    fmt_us(r["before_us"]),
                    fmt_us(r["after_us"]),
                    change_text(r["speedup"], r["verdict"], r["noise_us"], per_step=True),
                    f"{r['calls_before']} → {r['calls_after']}",
                ]
                for r in _top_rows(comp, top).iter_rows(named=True)
            ],
            {2, 3, 5},
        )
    )
    if comp.notes:
        parts.append("".join(f'<p class="dim">note: {_esc(n)}</p>' for n in comp.notes))
    parts.append("</body></html>\n")
    return "".join(parts)
