"""Reading the Ascend CSV files (strings, tolerant of tabs, quotes, a BOM, CRLF and ragged rows)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import polars as pl

from opscope.errors import InputError
from opscope.ingest.ascend.convert import _NULLS, _STRIP


def read_csv(path: Path, odd: Counter[str] | None = None) -> pl.DataFrame:
    """Read one Ascend CSV as strings: header and values stripped of tabs/quotes, ``N/A`` null.

    Tolerates a BOM, CRLF, short rows (nulls) and long rows (extra fields dropped, counted in
    ``odd`` as ``"<file>: ragged rows"``).
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", path) from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise InputError("empty CSV file", path)
    try:
        df = pl.read_csv(
            io.BytesIO(data),
            infer_schema=False,
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
            raise_if_empty=False,
        )
    except pl.exceptions.PolarsError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"not a readable CSV ({first})", path) from None
    names = [c.strip(_STRIP).lstrip("\ufeff") for c in df.columns]
    df.columns = _dedupe(names)
    if df.width:
        df = df.with_columns(pl.all().str.strip_chars(_STRIP))
        df = df.with_columns(
            pl.when(pl.all().is_in(_NULLS)).then(None).otherwise(pl.all()).name.keep()
        )
        # A row with more fields than the header: polars drops the extras; count those rows.
        if odd is not None:
            extra, short = _count_ragged(data, df.width)
            if extra:
                odd[f"{path.name}: rows with extra fields"] += extra
            if short:
                odd[f"{path.name}: rows with missing fields"] += short
    return df


def _dedupe(names: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for n in names:
        seen[n] += 1
        out.append(n if seen[n] == 1 else f"{n}_{seen[n] - 1}")
    return out


def _count_ragged(data: bytes, width: int) -> tuple[int, int]:
    """Rows with more / fewer fields than the header (polars drops extras, null-fills short).

    Counted per line on the text outside quotes; a file with quoted multi-line fields (an
    unbalanced quote on some line) is not counted.
    """
    lines = pl.Series(data.decode("utf-8", "replace").splitlines()[1:], dtype=pl.String)
    lines = lines.filter(lines.str.strip_chars().str.len_chars() > 0)
    balanced = lines.str.count_matches('"') % 2 == 0
    if lines.len() == 0 or not bool(balanced.all()):
        return 0, 0
    fields = lines.str.replace_all(r'"[^"]*"', "").str.count_matches(",") + 1
    return int((fields > width).sum()), int((fields < width).sum())


def _col(df: pl.DataFrame, *names: str) -> pl.Expr:
    """The first of ``names`` present in ``df``, else a null string column."""
    for n in names:
        if n in df.columns:
            return pl.col(n)
    return pl.lit(None, pl.String)
