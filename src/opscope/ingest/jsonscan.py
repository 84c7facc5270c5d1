"""Fast decode of a Chrome-trace ``traceEvents`` array into columns.

The array is cut at event boundaries into pieces of ~1 MB; each piece is decoded by msgspec into
small typed Structs that keep only the fields opscope uses (unknown keys are skipped inside the
decoder, in C) and transposed into columns with ``astuple`` + ``zip`` (C loops, while the piece's
Structs are still in the CPU cache); the columns become Polars Series per ~8 MB, so per-event
Python objects live only for one piece. That bounds memory and keeps the cost near a bare typed
decode.

Times: Kineto writes microseconds with up to three decimals. A float64 holds such values to within
0.49 ns below 2**43 µs (101 days of uptime, the steady clock Kineto uses), so the integer part
and the fraction are converted separately (``floor(ts) * 1000 + round(frac * 1000)``) which is exact
there. Traces whose fractional timestamps are larger than :data:`EXACT_FLOAT_US` (epoch-based
clocks with sub-µs digits) are re-read from the decimal text, so ns digits are never lost.
"""

from __future__ import annotations

import gc
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec
import polars as pl
from msgspec.structs import astuple

#: Largest |ts| (µs) whose float64 value still resolves every ns exactly.
EXACT_FLOAT_US = float(2**43)

Num = int | float


_NO_RAW = msgspec.Raw(b"")


class Args(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` keys opscope reads; others are skipped by the decoder."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_2021: int | None = msgspec.field(default=None, name="external id")
    correlation: int | None = None
    seq: int | None = msgspec.field(default=None, name="Sequence number")
    fwd_tid: int | None = msgspec.field(default=None, name="Fwd thread id")
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    flops: Num | None = None
    device: int | str | None = None
    stream: int | str | None = None
    bytes_: Num | str | None = msgspec.field(default=None, name="bytes")
    size: Num | str | None = None  # ROCm hipMemcpy runtime "size": "2560"
    grid: msgspec.Raw = _NO_RAW
    block: msgspec.Raw = _NO_RAW
    registers: int | None = msgspec.field(default=None, name="registers per thread")
    shared_mem: int | None = msgspec.field(default=None, name="shared memory")
    occupancy: Num | None = msgspec.field(default=None, name="est. achieved occupancy %")
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    module_hierarchy: str | None = msgspec.field(default=None, name="Module Hierarchy")
    # [memory] instants
    mem_bytes: int | None = msgspec.field(default=None, name="Bytes")
    addr: int | None = msgspec.field(default=None, name="Addr")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    # 2021 schema: host op's device as "Device" (the pid) - unused but common; skipped.
    # metadata events (ph "M")
    meta_name: str | None = msgspec.field(default=None, name="name")
    # kept verbatim in the ``args`` column (collectives, Triton, cuda_sync, ROCm launches)
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Process Group Ranks")
    kernel_backend: str | None = None
    kernel_hash: str | None = None
    cuda_sync_kind: str | None = None
    wait_on_stream: int | None = None
    wait_on_event_corr: int | None = msgspec.field(
        default=None, name="wait_on_cuda_event_record_corr_id"
    )


_NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One element of ``traceEvents`` (only the keys opscope reads)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: Num | None = None
    dur: Num | None = None
    id: int | str | None = None
    bp: str | None = None
    args: Args = _NO_ARGS


class RawTsEvent(msgspec.Struct, gc=False):
    """Only the times, as their decimal text (for the exact slow path)."""

    ts: msgspec.Raw = _NO_RAW
    dur: msgspec.Raw = _NO_RAW


class CounterEvent(msgspec.Struct, gc=False):
    """A ``ph: "C"`` counter: every args key is a series."""

    ph: str = ""
    name: str | None = None
    pid: int | str | None = None
    ts: Num | None = None
    args: msgspec.Raw = _NO_RAW


# The columns of one decoded chunk, in this order.
ARG_COLUMNS: tuple[str, ...] = tuple(f for f in Args.__struct_fields__)
EXTRA_ARGS: tuple[tuple[str, str], ...] = (
    ("collective", "Collective name"),
    ("in_nelems", "In msg nelems"),
    ("out_nelems", "Out msg nelems"),
    ("group_size", "Group size"),
    ("dtype", "dtype"),
    ("pg_name", "Process Group Name"),
    ("pg_desc", "Process Group Description"),
    ("pg_ranks", "Process Group Ranks"),
    ("kernel_backend", "kernel_backend"),
    ("kernel_hash", "kernel_hash"),
    ("cuda_sync_kind", "cuda_sync_kind"),
    ("wait_on_stream", "wait_on_stream"),
    ("wait_on_event_corr", "wait_on_cuda_event_record_corr_id"),
)
_RAW_ARGS = frozenset(
    {"input_dims", "input_types", "input_strides", "concrete_inputs", "grid", "block", "pg_ranks"}
)
_MIXED_ARGS = frozenset({"device", "stream", "bytes_", "size", "flops", "occupancy"})

_list_decoder = msgspec.json.Decoder(list[Event])
_raw_ts_decoder = msgspec.json.Decoder(list[RawTsEvent])
_counter_decoder = msgspec.json.Decoder(list[CounterEvent])


class ScanError(Exception):
    """The array text is not valid JSON at ``offset`` (relative to the array start)."""

    def __init__(self, message: str, offset: int | None, truncated: bool) -> None:
        super().__init__(message)
        self.offset = offset
        self.truncated = truncated


@dataclass
class Columns:
    """Decoded columns of every event, as Polars Series of equal length, plus counts."""

    frames: list[pl.DataFrame] = field(default_factory=list)
    counters: list[CounterEvent] = field(default_factory=list)
    oddities: dict[str, int] = field(default_factory=dict)
    n_events: int = 0

    def frame(self) -> pl.DataFrame:
        """All chunks as one DataFrame (``rechunk`` avoided: columns are consumed lazily)."""
        if not self.frames:
            return _empty_frame()
        if len(self.frames) == 1:
            return self.frames[0]
        return pl.concat(self.frames, how="vertical_relaxed", rechunk=False)


def _mixed_series(name: str, values: list[Any]) -> tuple[pl.Series, pl.Series | None]:
    """Split a column of int/float/str/None into a numeric Series and (when any) a string one."""
    try:
        return pl.Series(name, values, dtype=pl.Float64 if name in _FLOATS else pl.Int64), None
    except (TypeError, OverflowError, pl.exceptions.PolarsError, ValueError):
        pass
    nums = [v if type(v) is int or type(v) is float else None for v in values]
    strs = [v if type(v) is str else None for v in values]
    dtype = pl.Float64 if name in _FLOATS else pl.Int64
    try:
        num = pl.Series(name, nums, dtype=dtype, strict=False)
    except OverflowError:
        num = pl.Series(name, [None] * len(values), dtype=dtype)
    return num, pl.Series(name + "_str", strs, dtype=pl.String)


_FLOATS = frozenset({"ts", "dur", "flops", "occupancy"})


def _empty_frame() -> pl.DataFrame:
    return _build([])


_EVENT_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp")
_STR_ARGS = frozenset(n for n in ARG_COLUMNS if Args.__annotations__[n] == "str | None")


def _raw_series(name: str, vals: list[msgspec.Raw]) -> pl.Series:
    """Raw JSON texts to a String Series without a Python call per value.

    NUL cannot occur in JSON text (control characters must be escaped), so the texts are joined
    with it in C and split in Polars; an empty text (the field was absent) becomes null.
    """
    if not vals:
        return pl.Series(name, [], dtype=pl.String)
    joined = b"\x00".join(vals).decode("utf-8", "replace")
    out = pl.Series(name, [joined]).str.split("\x00").explode()
    return (
        pl.DataFrame({name: out})
        .select(
            pl.when((pl.col(name) == "") | (pl.col(name) == "null"))
            .then(None)
            .otherwise(pl.col(name))
            .alias(name)
        )
        .to_series()
    )


def _int_series(name: str, vals: list[Any]) -> pl.Series:
    try:
        return pl.Series(name, vals, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError, ValueError):
        return pl.Series(
            name,
            [v if type(v) is int and -(2**63) <= v < 2**63 else None for v in vals],
            dtype=pl.Int64,
        )


def _transpose(structs: list[Any], width: int) -> list[tuple[Any, ...]]:
    """The fields of ``structs`` as one tuple per field: ``astuple`` per struct and ``zip`` run in
    C, one pass over the objects (a sweep per field would touch every object once per field)."""
    if not structs:
        return [()] * width
    return list(zip(*map(astuple, structs), strict=True))


_NULL_DTYPE: dict[str, type[pl.DataType]] = {
    name: (
        pl.String
        if name in _RAW_ARGS or name in _STR_ARGS
        else pl.Float64
        if name in _FLOATS
        else pl.Int64
    )
    for name in ARG_COLUMNS
}


def _build(evs: list[Event], text: bytes | None = None) -> pl.DataFrame:
    """Columns of a chunk of events as a DataFrame (see :func:`_frame`). ``text`` is accepted for
    compatibility and unused."""
    del text
    acc = _Acc()
    acc.add(evs)
    return acc.frame()


class _Acc:
    """Columns of several decoded pieces, appended as Python lists until a frame is built.

    Decoding and transposing small pieces (~1 MB of text) keeps their Structs in the CPU cache
    (about twice as fast as 8 MB pieces); building Polars Series per larger chunk keeps the
    per-Series overhead and the number of frames low.
    """

    def __init__(self) -> None:
        self.top: list[list[Any]] = []
        self.args: list[list[Any]] = []
        self.n = 0
        self._reset()

    def _reset(self) -> None:
        self.top = [[] for _ in range(len(_EVENT_FIELDS))]
        self.args = [[] for _ in ARG_COLUMNS]
        self.n = 0

    def add(self, evs: list[Event]) -> None:
        top = _transpose(evs, len(_EVENT_FIELDS) + 1)
        for dst, src in zip(self.top, top, strict=False):
            dst.extend(src)
        arg_cols = _transpose(list(top[-1]), len(ARG_COLUMNS))
        del top
        for dst, src in zip(self.args, arg_cols, strict=True):
            dst.extend(src)
        self.n += len(evs)

    def frame(self) -> pl.DataFrame:
        top, args, n = self.top, self.args, self.n
        self._reset()
        return _frame(top, args, n)


def _frame(top: list[list[Any]], arg_cols: list[list[Any]], n: int) -> pl.DataFrame:
    """Each column goes to Polars at once, no Python code per event. An args key absent from the
    whole chunk (most are) is found by ``list.count`` and becomes a null column without a
    conversion."""
    cols: dict[str, pl.Series] = {}
    for i, key in enumerate(_EVENT_FIELDS):
        vals: Any = top[i]
        if key in ("pid", "tid", "id"):
            num, strs = _mixed_series(key, vals)
            cols[key] = num
            cols[key + "_str"] = (
                strs
                if strs is not None
                else pl.Series(key + "_str", [], pl.String).extend_constant(None, n)
            )
        elif key in ("ts", "dur"):
            cols[key] = pl.Series(key, vals, dtype=pl.Float64, strict=False)
        else:
            cols[key] = pl.Series(key, vals, dtype=pl.String)
    del top
    for j, (name, vals) in enumerate(zip(ARG_COLUMNS, arg_cols, strict=True)):
        absent = vals.count(_NO_RAW) if name in _RAW_ARGS else vals.count(None)
        if absent == n:  # most keys are absent from most chunks: skip the convert
            cols[name] = pl.Series(name, [], _NULL_DTYPE[name]).extend_constant(None, n)
        elif name in _RAW_ARGS:
            cols[name] = _raw_series(name, vals)
        elif name in _MIXED_ARGS:
            num, strs = _mixed_series(name, vals)
            cols[name] = num
            if strs is not None and name in ("stream", "bytes_", "size", "device"):
                cols[name] = _coalesce_numeric_strings(num, strs)
        elif name in _STR_ARGS:
            cols[name] = pl.Series(name, vals, dtype=pl.String)
        else:
            cols[name] = _int_series(name, vals)
        arg_cols[j] = []  # free the Python objects as we go
    return pl.DataFrame(list(cols.values()))


def _coalesce_numeric_strings(num: pl.Series, strs: pl.Series) -> pl.Series:
    """ROCm writes ``"stream": "0x0"`` and ``"size": "2560"``: parse decimal and hex text."""
    s = strs.str.strip_chars()
    dec = s.cast(pl.Int64, strict=False)
    hexv = (
        pl.DataFrame({"s": s})
        .select(
            pl.when(pl.col("s").str.starts_with("0x"))
            .then(pl.col("s").str.slice(2).str.to_integer(base=16, strict=False))
            .otherwise(None)
        )
        .to_series()
    )
    out = pl.DataFrame({"n": num, "d": dec, "h": hexv}).select(
        pl.coalesce("n", "d", "h").cast(num.dtype, strict=False)
    )
    return out.to_series().alias(num.name)


_LEAD = re.compile(rb"\s*,?\s*")
#: Text decoded at once (see :class:`_Acc`).
_DECODE_BYTES = 1024 * 1024

# Boundary between two elements of the array: "}" "," "{" with optional whitespace.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


def chunk_bounds(data: bytes | memoryview, start: int, end: int, target: int) -> Iterator[int]:
    """Offsets in ``data[start:end]`` (the array's inside) where chunks of ~``target`` bytes begin.

    Cuts are put just after a ``}`` that is followed by ``,`` and ``{``. Such a sequence could in
    principle sit inside a string; a chunk cut there fails to decode and the caller falls back to
    one decode of the whole array, so a wrong cut costs time, never correctness.
    """
    yield start
    pos = start + target
    while pos < end:
        m = _BOUNDARY.search(data, pos, min(end, pos + 64 * 1024 * 1024))
        if m is None:
            break
        cut = m.start() + 1
        yield cut
        pos = cut + target
    yield end


def _decode_error(e: msgspec.DecodeError, base: int) -> ScanError:
    msg = str(e)
    m = re.search(r"byte (\d+)", msg)
    off = int(m.group(1)) + base if m else None
    truncated = "truncated" in msg.lower()
    return ScanError(msg, off, truncated)


def scan_array(
    data: bytes,
    start: int,
    end: int,
    *,
    chunk_bytes: int = 8 * 1024 * 1024,
    progress: Callable[[int, int], None] | None = None,
) -> Columns:
    """Decode the JSON array whose brackets are at ``data[start]`` and ``data[end - 1]``.

    Raises :class:`ScanError` when the array is not valid (the offset is relative to ``data``).
    """
    # The transposition makes a tuple per event; each would count towards a cyclic-GC pass
    # (hundreds per 100 MB, a quarter of the scan's time) although nothing here forms a cycle:
    # every object is freed by reference counting.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        return _scan_array(data, start, end, chunk_bytes=chunk_bytes, progress=progress)
    finally:
        if gc_was_on:
            gc.enable()


def _scan_array(
    data: bytes,
    start: int,
    end: int,
    *,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None,
) -> Columns:
    out = Columns()
    view = memoryview(data)
    inner_start, inner_end = start + 1, end - 1
    bounds = list(chunk_bounds(data, inner_start, inner_end, min(chunk_bytes, _DECODE_BYTES)))
    acc = _Acc()
    acc_from = inner_start
    try:
        for a, b in itertools.pairwise(bounds):
            # The pieces between cuts start with "," (except the first); wrap as an array with
            # one copy of the text.
            x = _LEAD.match(data, a, b).end()  # type: ignore[union-attr]
            if x >= b:
                continue
            evs = _list_decoder.decode(b"".join((b"[", view[x:b], b"]")))
            acc.add(evs)
            out.n_events += len(evs)
            del evs
            if b - acc_from >= chunk_bytes:
                out.frames.append(acc.frame())
                acc_from = b
            if progress is not None:
                progress(b - start, end - start)
        if acc.n:
            out.frames.append(acc.frame())
    except msgspec.DecodeError:
        # A cut inside a string, or invalid JSON: decode the whole array once to know which.
        out = Columns()
        try:
            evs = _list_decoder.decode(view[start:end])
        except msgspec.ValidationError as e:
            raise _decode_error(e, start) from None
        except msgspec.DecodeError as e:
            raise _decode_error(e, start) from None
        out.frames.append(_build(evs))
        out.n_events = len(evs)
        del evs
    # Counters are rare: known from the decoded phases, not from a scan of the text.
    if any(bool((f.get_column("ph") == "C").any()) for f in out.frames):
        out.counters = [c for c in _counter_decoder.decode(view[start:end]) if c.ph == "C"]
    return out


def exact_times(data: bytes, start: int, end: int) -> tuple[pl.Series, pl.Series]:
    """ts and dur in ns from the decimal text (slow path for timestamps beyond float precision)."""
    evs = _raw_ts_decoder.decode(memoryview(data)[start:end])
    return (
        pl.Series("ts_ns", [_dec_ns(e.ts) for e in evs], dtype=pl.Int64),
        pl.Series("dur_ns", [_dec_ns(e.dur) for e in evs], dtype=pl.Int64),
    )


def _dec_ns(raw: msgspec.Raw) -> int | None:
    text = bytes(raw).strip().strip(b'"')
    if not text or text == b"null":
        return None
    try:
        ns = int((Decimal(text.decode()) * 1000).to_integral_value())
    except Exception:
        return None
    # beyond Int64 (garbage input): null, as float_us_to_ns gives, counted as a missing ts / dur
    return ns if -_NS_LIMIT < ns < _NS_LIMIT else None


_NS_LIMIT = 9_200_000_000_000_000_000  # 9.2e15 µs: float_us_to_ns's bound, inside Int64


def float_us_to_ns(us: pl.Expr) -> pl.Expr:
    """µs (float64) to int ns without losing the ns digits (see the module doc)."""
    # Beyond ~9.2e15 µs the ns value overflows Int64 (garbage input, NaN, inf): null, which the
    # readers count as a slice without ts / dur.
    us = pl.when(us.abs() < 9.2e15).then(us)
    whole = us.floor()
    return (whole.cast(pl.Int64) * 1000 + ((us - whole) * 1000).round(0).cast(pl.Int64)).alias("ns")


_BIG_FRACTION = re.compile(rb'"(?:ts|dur)"\s*:\s*-?\d{13,}\.\d*[1-9]')


def needs_exact_times(ts: pl.Series, dur: pl.Series, data: bytes, start: int, end: int) -> bool:
    """True when some timestamp or duration is too large for float64 to hold its ns digits and is
    written with a fraction (the float value itself cannot tell: its fraction may have rounded
    away)."""
    peaks = [s.abs().max() for s in (ts, dur)]
    if all(m is None or float(m) < EXACT_FLOAT_US for m in peaks):  # type: ignore[arg-type]
        return False
    return _BIG_FRACTION.search(data, start, end) is not None
