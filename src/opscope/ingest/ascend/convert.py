"""Text values of the Ascend exports -> columns: microsecond text to exact ns, shapes and dtypes to
JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError

_STRIP = " \t\r\n\"'"


_NULLS = ["", "N/A", "NA", "nan", "None", "null"]


def us_text_to_ns(col: pl.Expr) -> pl.Expr:
    """Microseconds given as decimal text ("1736408883704643.212\\t") -> integer ns, exactly.

    Text in scientific notation ("1.69512E+15") falls back to a float conversion.
    """
    s = col.cast(pl.String).str.strip_chars(_STRIP)
    parts = s.str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = (
        parts.struct.field("field_1")
        .fill_null("")
        .str.slice(0, 3)
        .str.pad_end(3, "0")
        .cast(pl.Int64, strict=False)
    )
    approx = (s.cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)
    return pl.when(s.str.contains(r"^\d+(\.\d*)?$")).then(whole * 1000 + frac).otherwise(approx)


def _us_float_to_ns(col: pl.Expr) -> pl.Expr:
    return (col.cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)


def _load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as e:
        raise InputError(f"not valid JSON ({_first_line(e)})", path) from None
    return data if isinstance(data, dict) else {}


def _shapes_json(col: pl.Expr) -> pl.Expr:
    """``"32,3,224,224;64,3,11,11"`` -> ``"[[32,3,224,224],[64,3,11,11]]"``."""
    s = col.str.strip_chars(_STRIP).str.replace_all(r"\s+", "")
    # Only digits, commas and semicolons make a shape; anything else (a shifted column) is null.
    ok = s.str.contains(r"^[\d,;]*$") & ~s.str.contains(r",,|,;|;,|^,|,$")
    return (
        pl.when(s.is_null() | s.is_in(_NULLS) | ~ok)
        .then(None)
        .otherwise(pl.lit("[[") + s.str.replace_all(";", "],[", literal=True) + pl.lit("]]"))
    )


def _types_json(col: pl.Expr) -> pl.Expr:
    """``"FLOAT16;INT64"`` -> ``'["FLOAT16","INT64"]'``."""
    s = col.str.strip_chars(_STRIP).str.replace_all(r"\s+", "")
    return (
        pl.when(s.is_null() | s.is_in(_NULLS))
        .then(None)
        .otherwise(pl.lit('["') + s.str.replace_all(";", '","', literal=True) + pl.lit('"]'))
    )


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _dims_json(col: pl.Expr) -> pl.Expr:
    """Trace "Input Dims" text ("32,3;\\r\\n;\\r\\n64") -> compact JSON lists."""
    s = col.str.replace_all(r"\r?\n", "")
    return _shapes_json(s)
