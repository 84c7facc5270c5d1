"""Render a :class:`~opscope.analysis.compare.Comparison`: a rich terminal view and Markdown.

Renderers only read the Comparison's tables; they never load or parse a profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from opscope.analysis.compare import change_text, fmt_us

if TYPE_CHECKING:
    from opscope.analysis.compare import Comparison

_VERDICT_STYLE = {"gain": "green", "loss": "red", "noise": "dim", "untested": "yellow"}
_KIND_TITLE = {
    "op": "op",
    "op_shape": "op+shapes",
    "kernel": "kernel",
    "module": "module",
    "line": "line",
}
_KEY_MAX = 110  # long shape lists are cut in the views (the JSON keeps them whole)


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
    return "-" if x is None else f"{x:.0%}"


def _num(x: Any, unit: str) -> str:
    return "-" if x is None else f"{x:.3g} {unit}"


def render_rich(comp: Comparison, top: int = 15) -> RenderableType:
    """A rich renderable: header, summary, top matched rows, added/removed, roofline, notes."""
    parts: list[RenderableType] = [Text("\n".join(_header(comp)), style="dim")]

    summary = Table(title="summary", title_justify="left", show_edge=False)
    for c in ("metric", comp.names[0], comp.names[1], "change"):
        summary.add_column(
            c,
            justify="left" if c in ("metric", "change") else "right",
            no_wrap=c != "metric",
        )
    for r in comp.summary.iter_rows(named=True):
        style = (
            "green"
            if "faster" in r["change"] or "less" in r["change"]
            else "red"
            if "slower" in r["change"]
            else None
        )
        summary.add_row(r["metric"], r["before"], r["after"], Text(r["change"], style=style or ""))
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
                change_text(r["speedup"], r["verdict"], r["noise_us"]),
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

    if comp.roofline.height:
        t = Table(title="heaviest matched operators", title_justify="left", show_edge=False)
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
    lines = [f"### opscope compare: {b} → {a}", ""]
    lines += _md_table(
        ["metric", b, a, "change"],
        [
            [r["metric"], r["before"], r["after"], r["change"]]
            for r in comp.summary.iter_rows(named=True)
        ],
        {1, 2},
    )
    lines += ["", *(f"<sub>{h}</sub><br>" for h in _header(comp)), ""]
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
                change_text(r["speedup"], r["verdict"], r["noise_us"]),
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
