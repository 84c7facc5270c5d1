"""Each source line's forward and backward time next to its code, like a line profiler.

The code comes from the run directory's ``sources/`` (copied at record time, redacted and
bounded: :mod:`opscope.record.sources`); the times from attribution's charged lines
(:func:`opscope.analysis.attribution.charged_lines`: device time when the profile has device
work, host time otherwise). A trace names a file relative to the ``sys.path`` entry that held
it (``model.py``, ``transformers/models/vit/modeling_vit.py``) or by its absolute path; a
captured file matches when its absolute path ends with that name.

:func:`source_blocks` returns, for the files holding most time, the hot lines with a few lines
of context around each: what a report shows without printing whole files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from opscope.model import Profile

INDEX = Path("sources") / "index.json"


@dataclass(frozen=True)
class SourceLine:
    """One line of a block: its number, code, and the time charged to it."""

    line: int
    text: str
    fwd_ns: int
    bwd_ns: int
    calls: int


@dataclass(frozen=True)
class SourceBlock:
    """A run of consecutive lines of one file (hot lines and their context)."""

    file: str  # as the trace names it
    path: str  # the original absolute path
    lines: list[SourceLine]
    total_ns: int  # time charged to the whole file
    truncated: bool  # the copy was cut at the size cap

    def to_json(self) -> dict[str, Any]:
        """Plain data: file, path, total_us, truncated, lines (line, text, fwd_us, bwd_us)."""
        return {
            "file": self.file,
            "path": self.path,
            "total_us": self.total_ns / 1000,
            "truncated": self.truncated,
            "lines": [
                {
                    "line": ln.line,
                    "text": ln.text,
                    "fwd_us": ln.fwd_ns / 1000,
                    "bwd_us": ln.bwd_ns / 1000,
                    "calls": ln.calls,
                }
                for ln in self.lines
            ],
        }


def captured_sources(profile: Profile) -> dict[str, tuple[list[str], bool]]:
    """Original path -> (its lines, truncated) for the files the run directory carries."""
    rd = profile.meta.get("rundir")
    if not isinstance(rd, dict) or not rd.get("path"):
        return {}
    root = Path(str(rd["path"]))
    try:
        index = json.loads((root / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, tuple[list[str], bool]] = {}
    files = index.get("files") if isinstance(index, dict) else None
    if not isinstance(files, dict):
        return {}
    for path, ent in files.items():
        if not isinstance(ent, dict) or not isinstance(ent.get("copy"), str):
            continue
        copy = (root / "sources" / Path(ent["copy"]).name).resolve()
        try:
            text = copy.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out[str(path)] = (text.splitlines(), bool(ent.get("truncated")))
    return out


def _match(name: str, paths: list[str]) -> str | None:
    n = name.replace("\\", "/")
    exact = [p for p in paths if p == n]
    if exact:
        return exact[0]
    tails = [p for p in paths if p.replace("\\", "/").endswith("/" + n.lstrip("/"))]
    return min(tails, key=len) if tails else None


def source_blocks(
    profile: Profile,
    lines: pl.DataFrame,
    *,
    files: int = 3,
    hot: int = 8,
    context: int = 2,
) -> list[SourceBlock]:
    """Blocks of code around the ``hot`` lines with most time in each of the top ``files``.

    ``lines``: attribution's charged lines (``file``, ``line``, ``fwd_ns``, ``bwd_ns``,
    ``calls``). Lines of the same file closer than ``2 * context`` join one block.
    """
    src = captured_sources(profile)
    if not src or lines.height == 0:
        return []
    per_line = (
        lines.filter(pl.col("file").is_not_null() & pl.col("line").is_not_null())
        .group_by("file", "line")
        .agg(pl.col("fwd_ns").sum(), pl.col("bwd_ns").sum(), pl.col("calls").sum())
    )
    paths = list(src)
    per_line = per_line.with_columns(
        pl.col("file")
        .map_elements(lambda f: _match(f, paths), return_dtype=pl.String)
        .alias("path")
    ).filter(pl.col("path").is_not_null())
    if per_line.height == 0:
        return []
    by_file = (
        per_line.group_by("path")
        .agg((pl.col("fwd_ns") + pl.col("bwd_ns")).sum().alias("t"), pl.col("file").first())
        .sort("t", "path", descending=[True, False])
        .head(files)
    )
    out: list[SourceBlock] = []
    for path, total, name in by_file.select("path", "t", "file").iter_rows():
        text, truncated = src[path]
        rows = per_line.filter(pl.col("path") == path)
        times = {
            int(r["line"]): (int(r["fwd_ns"]), int(r["bwd_ns"]), int(r["calls"]))
            for r in rows.iter_rows(named=True)
        }
        top = sorted(times, key=lambda k: (-(times[k][0] + times[k][1]), k))[:hot]
        spans: list[list[int]] = []
        for ln in sorted(top):
            lo, hi = max(1, ln - context), min(len(text), ln + context)
            if lo > hi:
                continue  # a line past the copy (cut at the cap)
            if spans and lo <= spans[-1][1] + 1:
                spans[-1][1] = max(spans[-1][1], hi)
            else:
                spans.append([lo, hi])
        for lo, hi in spans:
            block = [
                SourceLine(i, text[i - 1], *times.get(i, (0, 0, 0))) for i in range(lo, hi + 1)
            ]
            out.append(SourceBlock(str(name), path, block, int(total), truncated))
    return out
