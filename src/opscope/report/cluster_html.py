"""The offline HTML page of ``opscope cluster --html``: ranks in msprof-analyze's terms, slow
ranks, pipeline stages, slow links and one bandwidth heatmap per transport. Moved here from
``analysis/cluster_ascend.py`` (issue 23: the analysis computes, report/ writes). Every trace string
is escaped."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import polars as pl

from opscope.analysis.cluster_ascend import (
    UNKNOWN_RANK,
    matrix_totals,
    profiled_ranks,
    rank_gaps,
)

if TYPE_CHECKING:
    from opscope.analysis.cluster import Cluster


def _table(df: pl.DataFrame, limit: int | None = None) -> str:
    if not df.height:
        return "<p>none</p>"
    d = df.head(limit) if limit is not None else df
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in d.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in d.iter_rows()
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def _heatmap(links: pl.DataFrame, transport: str, profiled: set[int]) -> str:
    """src × dst grid of one transport: bandwidth in each cell, shaded by its share of the
    transport's best link, bytes in the cell's title; a destination that was not profiled is
    headed "N (not profiled)"."""
    t = links.filter(pl.col("transport") == transport)
    srcs = sorted(set(t.get_column("src_rank").to_list()))
    dsts = sorted(set(t.get_column("dst_rank").to_list()))
    best = t.get_column("bandwidth_gbps").max()
    top = float(best) if isinstance(best, (int, float)) and best > 0 else 1.0
    cell = {(r["src_rank"], r["dst_rank"]): r for r in t.iter_rows(named=True)}
    head = "".join(
        f"<th>{d}</th>"
        if d in profiled
        else f"<th>{'?' if d == UNKNOWN_RANK else d} (not profiled)</th>"
        for d in dsts
    )
    out = [f"<table class='hm'><thead><tr><th>src \\ dst</th>{head}</tr></thead><tbody>"]
    for s in srcs:
        tds = []
        for d in dsts:
            r = cell.get((s, d))
            if r is None:
                tds.append("<td></td>")
                continue
            bw = r["bandwidth_gbps"]
            share = (bw or 0.0) / top
            title = html.escape(f"{r['size_bytes']} bytes, {r['time_ns'] / 1000.0:.1f} µs")
            tds.append(
                f"<td title='{title}' style='background:rgba(220,60,40,{1 - share:.2f})'>"
                f"{html.escape(_fmt(bw))}</td>"
            )
        out.append(f"<tr><th>{s}</th>{''.join(tds)}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def to_html(res: Cluster) -> str:
    """A self-contained offline page: ranks (msprof terms), slow ranks, stage imbalance, slow
    links and one bandwidth heatmap per transport. Every trace string is escaped."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>opscope cluster</title>",
        "<style>body{font:13px sans-serif;margin:1.5em}table{border-collapse:collapse;"
        "margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "th{background:#f3f3f3}.hm td{min-width:4em}</style></head><body>",
        "<h1>Cluster analysis</h1>",
        "<h2>Ranks (µs; msprof-analyze's terms)</h2>",
        _table(res.msprof),
    ]
    if res.failed:
        parts.append("<h2>Ranks skipped</h2><ul>")
        parts += [f"<li>rank {r}: {html.escape(why)}</li>" for r, why in res.failed]
        parts.append("</ul>")
    gaps = rank_gaps(res.msprof)
    if gaps:
        parts.append("<h2>Largest − smallest over the ranks (µs)</h2><ul>")
        parts += [
            f"<li>{html.escape(c)}: {g['gap']:,.1f} "
            f"(rank {g['max_rank']} − rank {g['min_rank']})</li>"
            for c, g in gaps.items()
        ]
        parts.append("</ul>")
    parts += ["<h2>Slow ranks</h2>", _table(res.slow_ranks)]
    parts += ["<h2>Pipeline stages</h2>", _table(res.stage_imbalance)]
    parts += ["<h2>Slow links</h2>", _table(res.slow_links)]
    parts.append("<h2>Communication matrix (GB/s; cell title: bytes and time)</h2>")
    ranks = res.ranks.get_column("rank").to_list() if "rank" in res.ranks.columns else []
    profiled = profiled_ranks(res.links, ranks)
    if res.links.height:
        tot = matrix_totals(res.links, ranks)
        parts.append(
            f"<p>Bytes between profiled ranks: {tot['profiled_bytes']:,} (what msprof-analyze's "
            "matrix sums)"
        )
        if tot["unprofiled_ranks"]:
            off = ", ".join(str(r) for r in tot["unprofiled_ranks"])
            parts.append(
                f"; to ranks not profiled ({html.escape(off)}): {tot['unprofiled_bytes']:,} "
                "(kept and marked; msprof-analyze drops these links)"
            )
        parts.append(".</p>")
    for tr in sorted(set(res.links.get_column("transport").drop_nulls().to_list())):
        parts.append(f"<h3>{html.escape(tr)}</h3>")
        parts.append(_heatmap(res.links, tr, profiled))
    if not res.links.height:
        parts.append("<p>no communication_matrix.json links</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
