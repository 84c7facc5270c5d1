"""Decoding ``trace_view.json`` (and salvaging a truncated one) into one row per trace record."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError, TruncatedTraceError
from opscope.ingest.ascend.convert import _first_line

# trace_view.json: the fields read. Unknown keys are ignored by the decoder.
_ARG_FIELDS: dict[str, pl.DataType | type[pl.DataType]] = {
    "Sequence number": pl.Int64,
    "Fwd thread id": pl.Int64,
    "Input Dims": pl.String,
    "Input type": pl.String,
    "Call stack": pl.String,
    "Python id": pl.Int64,
    "Python parent id": pl.Int64,
    "connection_id": pl.Int64,
    "correlation_id": pl.Int64,
    "Task Type": pl.String,
    "name": pl.String,
    "labels": pl.String,
    "stream id": pl.Int64,
    "src rank": pl.Int64,
    "dst rank": pl.Int64,
    "size(Byte)": pl.Int64,
    "transport type": pl.String,
    "link type": pl.String,
    "bandwidth(GB/s)": pl.Float64,
    "data_type": pl.String,
    "count": pl.Int64,
    "alg_type": pl.String,
}


# Counter events carry their one value under a unit-like key.
_COUNTER_KEYS = [
    "value",
    "MHz",
    "KB",
    "Read(MB/s)",
    "Write(MB/s)",
    "Throughput(MB/s)",
    "Hit Rate(%)",
    "Mata Bw Level",
    "L2 Buffer Bw Level",
    "Utilization(%)",
    "Bandwidth(MB/s)",
]


_TRACE_SCHEMA: dict[str, Any] = {
    "ph": pl.String,
    "name": pl.String,
    "cat": pl.String,
    "pid": pl.String,
    "tid": pl.String,
    "ts": pl.String,
    "dur": pl.Float64,
    "id": pl.String,
    "args": pl.Struct({**_ARG_FIELDS, **dict.fromkeys(_COUNTER_KEYS, pl.Float64)}),
}


def _read_trace_view(
    path: Path, salvage: bool, odd: Counter[str], meta_extra: dict[str, Any]
) -> pl.DataFrame:
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise InputError("empty trace file", path)
    try:
        df = _decode_trace(data)
    except ValueError as e:
        truncated = _looks_truncated(data)
        if not truncated:
            raise InputError(f"not a trace_view.json ({_first_line(e)})", path) from None
        if not salvage:
            raise TruncatedTraceError(
                "trace ends before its JSON does (truncated); --salvage recovers the "
                "complete events",
                path,
            ) from None
        df = _salvage(data, path)
        meta_extra["salvaged"] = {"events": df.height, "reason": "truncated trace_view.json"}
    return df


def _decode_trace(data: bytes) -> pl.DataFrame:
    head = data.lstrip()[:1]
    if head == b"{":
        # Some exports wrap the array: {"traceEvents": [...]}.
        obj = json.loads(data)
        events = obj.get("traceEvents") if isinstance(obj, dict) else None
        if not isinstance(events, list):
            raise ValueError("no event array")
        data = json.dumps(events).encode()
    elif head != b"[":
        raise ValueError("does not start with a JSON array")
    try:
        return pl.read_json(io.BytesIO(data), schema=_TRACE_SCHEMA)
    except pl.exceptions.PolarsError as e:
        raise ValueError(_first_line(e)) from None


def _looks_truncated(data: bytes) -> bool:
    tail = data.rstrip()[-1:]
    if tail in (b"]", b"}"):
        try:
            json.loads(data)
        except json.JSONDecodeError as e:
            return bool(e.pos >= len(data.rstrip()) - 1)
        return False
    return True


def _salvage(data: bytes, path: Path) -> pl.DataFrame:
    # Cut after the last complete object "}," and close the array; retry a few objects back.
    end = len(data)
    for _ in range(64):
        cut = data.rfind(b"}", 0, end)
        if cut < 0:
            break
        try:
            return _decode_trace(data[: cut + 1] + b"]")
        except ValueError:
            end = cut
    raise TruncatedTraceError("truncated, and no complete event could be recovered", path)
