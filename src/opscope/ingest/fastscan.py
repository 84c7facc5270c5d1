"""Kineto ``traceEvents`` straight from the bytes into columns: no per-event Python object.

The reference decoder (:mod:`opscope.ingest.jsonscan`) lets msgspec build a small Struct per event
and transposes them; each object costs microseconds and memory, which for a 1 GB trace is most of
the load. This scanner reads the same fields with compiled kernels
(:mod:`opscope.ingest._scan_kernels`): one pass over the text validates the JSON it walks, looks
each key up in a table of the fields the reference decoder reads, and writes a type code and an
int64 per (field, event) into fixed-size chunk arrays. Strings are interned by content as they are
met (trace strings repeat: a few thousand distinct names in millions of events), so a string
column is an int32 code array plus one short list of distinct values, decoded once.

Its output is the reference decoder's, column for column (tests/test_fastscan.py checks every
trace we hold). It reads only what the reference reads without complaint; anything else — a
field of an unexpected type, an escaped key, nesting deeper than the stack, invalid JSON — makes
:func:`scan` return ``None`` and the caller runs the reference decoder, which reports the error or
takes its lenient path. ``OPSCOPE_SCANNER=reference`` forces that path.

Times come out as exact int64 ns: a decimal of up to three fraction digits (what Kineto writes) is
converted from its digits; other numbers follow the reference rules (float64 rounding, or the
decimal text when the trace needs exact times: see :func:`jsonscan.needs_exact_times`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import typing
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import polars as pl

from opscope.ingest import jsonscan

CHUNK_EVENTS = 65536
"""Events per chunk: the chunk arrays (~60 fields x this) stay around 50 MB."""

_STACK_DEPTH = 512
"""Nesting the scanner follows inside a value; deeper input goes to the reference decoder."""

IntArray = np.ndarray[Any, np.dtype[np.int64]]
Buffer = bytes | mmap.mmap
"""Trace text: bytes, or a read-only memory map of an uncompressed file."""


def available() -> bool:
    """True unless the compiled scanner is switched off (``OPSCOPE_SCANNER=reference``: the
    msgspec reference decoder reads instead). numba is a dependency, not an option."""
    return os.environ.get("OPSCOPE_SCANNER", "").lower() != "reference"


# --------------------------------------------------------------------------------------------------
# the fields, from the reference decoder's Structs (one declaration of what is read)


def _kind(tp: Any, k: Any) -> int:
    if tp is msgspec.Raw:
        return int(k.K_RAW)
    args = set(typing.get_args(tp)) or {tp}
    args.discard(type(None))
    if args == {str}:
        return int(k.K_STR)
    if args == {int}:
        return int(k.K_INT)
    if args == {int, float}:
        return int(k.K_NUM)
    if args == {int, str}:
        return int(k.K_INTSTR)
    if args == {int, float, str}:
        return int(k.K_NUMSTR)
    raise TypeError(f"no scanner kind for {tp!r}")  # pragma: no cover - a new field type


@dataclass(frozen=True)
class _Keys:
    names: tuple[str, ...]  # column names
    kinds: np.ndarray[Any, np.dtype[np.int64]]
    ktab: IntArray
    kh: np.ndarray[Any, np.dtype[np.uint64]]
    kbytes: np.ndarray[Any, np.dtype[np.uint8]]
    koff: IntArray


def _key_table(names: list[str], json_names: list[str], kinds: list[int], k: Any) -> _Keys:
    enc = [n.encode() for n in json_names]
    off = np.zeros(len(enc) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(e) for e in enc])
    hashes = np.array([k.key_hash(e) for e in enc], dtype=np.uint64)
    size = 256
    tab = np.zeros(size, dtype=np.int64)
    for i, h in enumerate(hashes):
        j = int(h) & (size - 1)
        while tab[j]:
            j = (j + 1) & (size - 1)
        tab[j] = i + 1
    return _Keys(
        tuple(names),
        np.array(kinds, dtype=np.int64),
        tab,
        hashes,
        np.frombuffer(b"".join(enc), dtype=np.uint8).copy(),
        off,
    )


@dataclass(frozen=True)
class _Tables:
    events: _Keys
    args: _Keys
    ts_key: int


_TABLES: list[_Tables] = []


def _tables(k: Any) -> _Tables:
    if not _TABLES:
        ev = list(msgspec.structs.fields(jsonscan.Event))
        names = [f.name for f in ev]
        kinds = [
            int(k.K_ARGS)
            if f.name == "args"
            else int(k.K_NS)
            if f.name in ("ts", "dur")
            else int(k.K_STR)
            if f.name == "ph"
            else _kind(f.type, k)
            for f in ev
        ]
        events = _key_table(names, [f.encode_name for f in ev], kinds, k)
        ar = list(msgspec.structs.fields(jsonscan.Args))
        args = _key_table(
            [f.name for f in ar], [f.encode_name for f in ar], [_kind(f.type, k) for f in ar], k
        )
        _TABLES.append(_Tables(events, args, names.index("ts")))
    return _TABLES[0]


# --------------------------------------------------------------------------------------------------
# interned strings


class _Interns:
    """An open-addressing table of byte spans of the text (grown by doubling); the kernels see it
    through slots ``base..base+6`` of the control array."""

    def __init__(self, ctl: IntArray, base: int, cap: int = 1 << 14) -> None:
        self.ctl, self.base = ctl, base
        self.es = np.zeros(cap, dtype=np.int64)
        self.en = np.zeros(cap, dtype=np.int64)
        self.eh = np.zeros(cap, dtype=np.uint64)
        self._install(np.zeros(2 * cap, dtype=np.int64))

    def _install(self, tab: IntArray) -> None:
        self.tab = tab
        c, b = self.ctl, self.base
        c[b : b + 6] = [
            tab.ctypes.data,
            tab.shape[0] - 1,
            self.es.ctypes.data,
            self.en.ctypes.data,
            self.eh.ctypes.data,
            self.es.shape[0],
        ]

    @property
    def count(self) -> int:
        return int(self.ctl[self.base + 6])

    @property
    def full(self) -> bool:
        return self.count >= self.es.shape[0]

    def grow(self, k: Any) -> None:
        cap = 2 * self.es.shape[0]
        n = self.count
        for name in ("es", "en", "eh"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)
        self._install(np.zeros(2 * cap, dtype=np.int64))
        k.rehash(self.ctl.ctypes.data, self.base)

    def texts(self, data: Buffer) -> list[bytes]:
        n = self.count
        es, en = self.es[:n].tolist(), self.en[:n].tolist()
        return [data[s : s + ln] for s, ln in zip(es, en, strict=True)]


class _Bail(Exception):
    """The input is outside what the scanner reads: use the reference decoder."""


def _decode(texts: list[bytes], *, raw: bool) -> list[str | None]:
    """The interned texts as Python strings: string contents are JSON-unescaped, raw JSON texts
    kept verbatim (``null`` is None, as the reference decoder reads an absent-or-null raw)."""
    out: list[str | None] = []
    for t in texts:
        if raw and t == b"null":
            out.append(None)
        elif not raw and b"\\" in t:
            out.append(msgspec.json.decode(b'"' + t + b'"'))
        else:
            try:
                out.append(t.decode("utf-8"))
            except UnicodeDecodeError:
                raise _Bail from None
    return out


# --------------------------------------------------------------------------------------------------
# per-field accumulation


def _nulls(name: str, dtype: Any, n: int) -> pl.Series:
    return pl.Series(name, [], dtype).extend_constant(None, n)


def _masked(name: str, vals: Any, valid: Any, dtype: Any) -> pl.Series:
    """``vals`` where ``valid``, else null. The Series may share ``vals``'s memory: pass an array
    nothing writes to again."""
    s = pl.Series(name, vals, dtype=dtype)
    if bool(valid.all()):
        return s
    return pl.select(pl.when(pl.Series(valid)).then(s).alias(name)).to_series()


@dataclass
class _Field:
    """One field's values over the chunks read so far, already in their final types: Polars
    pieces for numbers (joined without a copy at the end), int32 codes for strings (looked up
    in the distinct strings at the end), and the text of the rare numbers the kernel left as
    text (patched in at the end)."""

    name: str
    kind: int
    nums: list[pl.Series] = field(default_factory=list)  # Int64 / Float64 values; ts, dur: µs
    ns: list[pl.Series] = field(default_factory=list)  # ts, dur: exact ns
    codes: list[np.ndarray[Any, np.dtype[np.int32]]] = field(default_factory=list)
    texts: dict[int, bytes] = field(default_factory=dict)  # event index -> number text
    seen: bool = False
    rows: int = 0
    max_abs_us: float = 0.0  # ts: what the reference compares with 2**43 for exact times


_ALLOWED: dict[int, frozenset[int]] = {}


def _allowed(k: Any) -> dict[int, frozenset[int]]:
    if not _ALLOWED:
        a, i, t, s, r, nu, ns, c = (
            k.ABSENT,
            k.INT,
            k.NUMTEXT,
            k.STR,
            k.RAW,
            k.NULL,
            k.NS,
            k.CONTAINER,
        )
        _ALLOWED.update(
            {
                k.K_STR: frozenset({a, s, nu}),
                k.K_INT: frozenset({a, i, nu}),
                k.K_NUM: frozenset({a, i, t, nu}),
                k.K_INTSTR: frozenset({a, i, s, nu}),
                k.K_NUMSTR: frozenset({a, i, s, nu}),
                k.K_RAW: frozenset({a, r}),
                k.K_ARGS: frozenset({a, c}),
                k.K_NS: frozenset({a, i, ns, t, nu}),
            }
        )
    return _ALLOWED


def _float_kind(name: str) -> bool:
    return name in ("flops", "occupancy")


def _add_nulls(f: _Field, n: int, k: Any) -> None:
    """``n`` events without the field."""
    if f.kind in (k.K_STR, k.K_RAW, k.K_INTSTR, k.K_NUMSTR):
        f.codes.append(np.full(n, -1, np.int32))
    if f.kind == k.K_NS:
        f.nums.append(_nulls(f.name, pl.Float64, n))
        f.ns.append(_nulls(f.name, pl.Int64, n))
    elif f.kind in (k.K_INT, k.K_INTSTR, k.K_NUMSTR, k.K_NUM):
        f.nums.append(_nulls(f.name, pl.Float64 if _float_kind(f.name) else pl.Int64, n))
    f.rows += n


def _add(f: _Field, vt: Any, vals: Any, ilen: Any, n: int, data: Buffer, k: Any) -> None:
    """The chunk's values of ``f`` (``vt``/``vals``/``ilen``: its rows of the chunk arrays)."""
    kind, base = f.kind, f.rows
    if kind in (k.K_STR, k.K_RAW):
        code = k.STR if kind == k.K_STR else k.RAW
        f.codes.append(np.where(vt == code, vals, -1).astype(np.int32))
        f.rows += n
        return
    text_at = np.flatnonzero(vt == k.NUMTEXT)
    for j in text_at.tolist():
        s = int(vals[j])
        f.texts[base + j] = data[s : s + int(ilen[j])]
    is_int = vt == k.INT
    if kind == k.K_NS:
        is_ns = vt == k.NS
        # µs integers: ns = µs * 1000 unless that overflows (the reference's bound: 9.2e15 µs)
        small = is_int & (np.abs(vals) < 9_200_000_000_000_000)
        f.ns.append(_masked(f.name, np.where(small, vals * 1000, vals), small | is_ns, pl.Int64))
        us = np.where(is_int, vals.astype(np.float64), vals / 1000.0)
        f.nums.append(_masked(f.name, us, is_int | is_ns, pl.Float64))
        for sel, scale in ((is_int, 1.0), (is_ns, 1000.0)):
            if sel.any():
                f.max_abs_us = max(f.max_abs_us, float(np.abs(vals[sel]).max()) / scale)
    elif kind == k.K_NUM or _float_kind(f.name):
        f.nums.append(_masked(f.name, vals.astype(np.float64), is_int, pl.Float64))
    else:
        # A copy: Polars takes a contiguous int64 array without copying, and ``vals`` is a row
        # of the chunk buffer that the chunk after next overwrites (events of the first chunk
        # got pid/tid/ids of the third before this copy).
        f.nums.append(_masked(f.name, vals.copy(), is_int, pl.Int64))
        if kind in (k.K_INTSTR, k.K_NUMSTR):
            f.codes.append(np.where(vt == k.STR, vals, -1).astype(np.int32))
    f.rows += n


@dataclass
class Scanned:
    """What :func:`scan` read: typed pieces per field and the distinct strings.

    Nothing here refers to the trace text, so the caller can free it before building the frame.
    """

    n: int
    fields: dict[str, _Field]
    strings: list[str | None]
    raws: list[str | None]
    exact: bool
    counters: list[jsonscan.CounterEvent]

    def columns(self) -> tuple[jsonscan.Columns, tuple[pl.Series, pl.Series]]:
        """The reference decoder's columns (one frame) and the exact ns times."""
        k = _kernels()
        strings = pl.Series("s", self.strings, dtype=pl.String)
        raws = pl.Series("r", self.raws, dtype=pl.String)
        cols: list[pl.Series] = []
        ns: dict[str, pl.Series] = {}
        for name in jsonscan._EVENT_FIELDS:
            f = self.fields[name]
            if name in ("pid", "tid", "id"):
                cols += self._mixed(f, strings)
            elif name in ("ts", "dur"):
                us, ns[name] = self._times(f)
                cols.append(us)
            else:
                col = self._codes(f, strings)
                cols.append(col.fill_null("") if name == "ph" else col)
        for name in jsonscan.ARG_COLUMNS:
            f = self.fields[name]
            if not f.seen:
                cols.append(_nulls(name, jsonscan._NULL_DTYPE[name], self.n))
            elif f.kind == k.K_RAW:
                cols.append(self._codes(f, raws))
            elif f.kind == k.K_STR:
                cols.append(self._codes(f, strings))
            elif f.kind in (k.K_INT, k.K_NUM):
                cols.append(self._numbers(f))
            else:  # device, stream, bytes, size: numbers, or numeric text (ROCm)
                num, strs = self._mixed(f, strings)
                if strs.null_count() < self.n:
                    num = jsonscan._coalesce_numeric_strings(num, strs)
                cols.append(num)
        frame = pl.DataFrame(cols)
        out = jsonscan.Columns(frames=[frame], counters=self.counters, n_events=self.n)
        return out, (ns["ts"].alias("ts_ns"), ns["dur"].alias("dur_ns"))

    # -- per kind; each lets go of the field's pieces as its column is made (peak memory)

    def _codes(self, f: _Field, table: pl.Series) -> pl.Series:
        if not f.seen:
            return _nulls(f.name, pl.String, self.n)
        codes = np.concatenate(f.codes)
        f.codes.clear()
        return table.gather(_masked("i", codes, codes >= 0, pl.Int32)).alias(f.name)

    def _joined(self, pieces: list[pl.Series]) -> pl.Series:
        s = pl.concat(pieces, rechunk=False)
        pieces.clear()
        return s

    def _patched(self, s: pl.Series, f: _Field) -> pl.Series:
        """``s`` with the numbers left as text parsed (float64, as the reference decodes)."""
        if not f.texts:
            return s
        idx = pl.Series(list(f.texts), dtype=pl.Int64)
        vals = pl.Series([t.decode() for t in f.texts.values()]).cast(pl.Float64)
        return s.rechunk().scatter(idx, vals)

    def _numbers(self, f: _Field) -> pl.Series:
        return self._patched(self._joined(f.nums), f)

    def _mixed(self, f: _Field, strings: pl.Series) -> list[pl.Series]:
        if not f.seen:
            return [_nulls(f.name, pl.Int64, self.n), _nulls(f.name + "_str", pl.String, self.n)]
        num = self._joined(f.nums)
        codes = np.concatenate(f.codes)
        f.codes.clear()
        if (codes < 0).all():
            strs = _nulls(f.name + "_str", pl.String, self.n)
        else:
            strs = strings.gather(_masked("i", codes, codes >= 0, pl.Int32))
        return [num, strs.alias(f.name + "_str")]

    def _times(self, f: _Field) -> tuple[pl.Series, pl.Series]:
        """(µs as float64, like the reference column; exact ns)."""
        if not f.seen:
            return _nulls(f.name, pl.Float64, self.n), _nulls(f.name, pl.Int64, self.n)
        us = self._patched(self._joined(f.nums), f)
        ns = self._joined(f.ns)
        if f.texts:
            idx = pl.Series(list(f.texts), dtype=pl.Int64)
            if self.exact:
                got = pl.Series(
                    [jsonscan._dec_ns(msgspec.Raw(t)) for t in f.texts.values()], dtype=pl.Int64
                )
            else:
                got = pl.select(jsonscan.float_us_to_ns(pl.lit(us.gather(idx)))).to_series()
            ns = ns.rechunk().scatter(idx, got)
        return us, ns


_KERNELS: list[Any] = []


def _kernels() -> Any:
    if not _KERNELS:
        from opscope.ingest import _scan_kernels

        _KERNELS.append(_scan_kernels)
    return _KERNELS[0]


def scan(
    data: Buffer,
    start: int,
    end: int,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Scanned | None:
    """Read the array whose brackets are at ``data[start]`` and ``data[end - 1]``; ``None`` when
    the reference decoder must (input outside the scanner's subset, or no scanner here)."""
    if not available():
        return None
    try:
        scanned, stop = _scan(data, start, end, progress, None)
    except _Bail:
        return None
    return scanned if stop == end else None


_WS = re.compile(rb"[ \t\n\r]*")


def scan_document(
    data: Buffer,
    *,
    progress: Callable[[int, int], None] | None = None,
    release: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], Scanned] | None:
    """A whole Chrome trace: (the top-level keys other than ``traceEvents``, decoded; the
    events) or ``None`` for the reference path. Walks the top-level object itself, so the text is
    read once. ``release(pos)`` is called as the scan passes ``pos``: text before it is not read
    again except for the few interned strings (the caller may drop it from memory)."""
    if not available():
        return None
    try:
        return _document(data, progress, release)
    except (_Bail, msgspec.DecodeError):
        return None


def _document(
    data: Buffer,
    progress: Callable[[int, int], None] | None,
    release: Callable[[int], None] | None,
) -> tuple[dict[str, Any], Scanned]:
    k = _kernels()
    lim = len(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    ctl = np.zeros(k.C_SLOTS, dtype=np.int64)
    stack = np.zeros(_STACK_DEPTH, dtype=np.uint8)
    ctl[[k.C_STACK, k.C_STACK_CAP]] = [stack.ctypes.data, _STACK_DEPTH]
    addr = buf.ctypes.data

    def value_end(p: int) -> int:
        e = int(k.skip_value(addr, p, lim, ctl.ctypes.data))
        if e < 0:
            raise _Bail
        return e

    def ws(p: int) -> int:
        m = _WS.match(data, p)
        return p if m is None else m.end()

    p = ws(0)
    if p < lim and data[p : p + 1] == b"[":
        scanned, stop = _scan(data, p, lim, progress, release)
        if ws(stop) != lim:
            raise _Bail
        return {}, scanned
    if data[p : p + 1] != b"{":
        raise _Bail
    header: dict[str, Any] = {}
    events: Scanned | None = None
    p = ws(p + 1)
    if data[p : p + 1] == b"}":
        raise _Bail  # no traceEvents: the reference path says so
    while True:
        e = value_end(p)
        key = msgspec.json.decode(data[p:e])
        if not isinstance(key, str):
            raise _Bail
        p = ws(e)
        if data[p : p + 1] != b":":
            raise _Bail
        p = ws(p + 1)
        if key == "traceEvents":
            if events is not None or data[p : p + 1] != b"[":
                raise _Bail
            events, e = _scan(data, p, lim, progress, release)
        else:
            e = value_end(p)
            header[key] = msgspec.json.decode(data[p:e])
        p = ws(e)
        c = data[p : p + 1]
        if c == b",":
            p = ws(p + 1)
        elif c == b"}" and ws(p + 1) == lim and events is not None:
            return header, events
        else:
            raise _Bail


@dataclass
class _ScanSetup:
    """What a scan of an events array (:func:`_scan`, :func:`_scan_stream`) sets up before its
    first chunk: the kernel's control block ``ctl`` with the key tables installed, and the
    field names and kinds of a row (event fields, then ``args`` fields).

    ``ctl`` holds only the addresses of ``stack``, ``enxt`` and ``anxt``: keep this object
    (not only ``ctl``) for as long as the kernel runs.
    """

    k: Any
    ctl: IntArray
    allowed: dict[int, frozenset[int]]
    names: tuple[str, ...]
    kinds: np.ndarray[Any, np.dtype[np.int64]]
    stack: np.ndarray[Any, np.dtype[np.uint8]]
    enxt: IntArray
    anxt: IntArray

    @classmethod
    def new(cls) -> _ScanSetup:
        k = _kernels()
        t = _tables(k)
        ek, ak = t.events, t.args
        stack = np.zeros(_STACK_DEPTH, dtype=np.uint8)
        enxt = np.full(len(ek.names) + 1, -1, dtype=np.int64)
        anxt = np.full(len(ak.names) + 1, -1, dtype=np.int64)
        ctl = np.zeros(k.C_SLOTS, dtype=np.int64)
        ctl[[k.C_STACK, k.C_STACK_CAP]] = [stack.ctypes.data, _STACK_DEPTH]
        for base, keys in ((k.C_EK_TAB, ek), (k.C_AK_TAB, ak)):
            ctl[base : base + 7] = [
                keys.ktab.ctypes.data,
                keys.ktab.shape[0] - 1,
                keys.kh.ctypes.data,
                keys.kbytes.ctypes.data,
                keys.koff.ctypes.data,
                keys.kinds.ctypes.data,
                len(keys.names),
            ]
        ctl[[k.C_TS_KEY, k.C_ENXT, k.C_ANXT]] = [t.ts_key, enxt.ctypes.data, anxt.ctypes.data]
        names = ek.names + ak.names
        kinds = np.concatenate([ek.kinds, ak.kinds])
        return cls(k, ctl, _allowed(k), names, kinds, stack, enxt, anxt)

    def fields(self) -> dict[str, _Field]:
        """One empty column per field of a row."""
        return {nm: _Field(nm, int(kd)) for nm, kd in zip(self.names, self.kinds, strict=True)}


def _scan(
    data: Buffer,
    start: int,
    end: int,
    progress: Callable[[int, int], None] | None,
    release: Callable[[int], None] | None,
) -> tuple[Scanned, int]:
    """The array at ``data[start]``, read up to ``end`` at most: (events, position after its
    closing bracket).

    Two chunk buffers alternate: the kernel (which releases the GIL) fills one in a worker thread
    while this thread turns the other into typed pieces, so the two cores share the work.
    """
    setup = _ScanSetup.new()
    k, ctl, allowed, names, kinds = setup.k, setup.ctl, setup.allowed, setup.names, setup.kinds
    chunk = CHUNK_EVENTS
    bufs = [_ChunkBuf(len(names), chunk), _ChunkBuf(len(names), chunk)]
    strs, raws = _Interns(ctl, k.C_S_TAB), _Interns(ctl, k.C_R_TAB)
    fields = setup.fields()
    buf = np.frombuffer(data, dtype=np.uint8)
    addr = buf.ctypes.data
    cur, n_total = 0, 0

    def run(b: _ChunkBuf, pos: int, first: bool) -> tuple[int, int, int]:
        # every array the kernel reaches through ``ctl`` is referenced from this frame
        b.install(ctl, k)
        status, stop, n = k.scan_events(addr, pos, end, first, chunk, ctl.ctypes.data)
        return int(status), int(stop), int(n)

    with ThreadPoolExecutor(max_workers=1) as pool:
        job: Future[tuple[int, int, int]] | None = pool.submit(run, bufs[cur], start + 1, True)
        while job is not None:
            status, pos, n = job.result()
            if status == k.BAIL:
                raise _Bail
            done = bufs[cur]
            job = None
            if status != k.DONE:
                if status == k.GROW:
                    for tab in (strs, raws):
                        if tab.full:
                            tab.grow(k)
                cur ^= 1
                job = pool.submit(run, bufs[cur], pos, False)
            try:
                done.take(n_total, fields, names, kinds, n, allowed, data, k)
                n_total += n
            except _Bail:
                if job is not None:
                    job.result()  # the kernel must be done with the buffers before they go
                raise
            if progress is not None:
                progress(pos - start, end - start)
            if release is not None:
                release(pos)
    del buf
    strings = _decode(strs.texts(data), raw=False)
    raw_texts = _decode(raws.texts(data), raw=True)
    exact = bool(ctl[k.C_BIG_FRACTION])
    if exact:
        ts = fields["ts"]
        big = max([ts.max_abs_us] + [abs(float(x)) for x in ts.texts.values()])
        exact = big >= jsonscan.EXACT_FLOAT_US
    counters: list[jsonscan.CounterEvent] = []
    ph = fields["ph"]
    if ph.seen and "C" in strings:
        code = strings.index("C")
        if any(bool((v == code).any()) for v in ph.codes):
            counters = [
                c
                for c in jsonscan._counter_decoder.decode(memoryview(data)[start:pos])
                if c.ph == "C"
            ]
    return Scanned(n_total, fields, strings, raw_texts, exact, counters), pos


class _ChunkBuf:
    """One set of chunk arrays (column-major: a field's values of the chunk are one row)."""

    def __init__(self, n_rows: int, chunk: int) -> None:
        self.vtype = np.zeros((n_rows, chunk), dtype=np.int8)
        self.ival = np.zeros((n_rows, chunk), dtype=np.int64)
        self.ilen = np.zeros((n_rows, chunk), dtype=np.int32)
        self.chunk = chunk

    def install(self, ctl: IntArray, k: Any) -> None:
        ctl[[k.C_VT, k.C_IV, k.C_IL, k.C_STRIDE]] = [
            self.vtype.ctypes.data,
            self.ival.ctypes.data,
            self.ilen.ctypes.data,
            self.chunk,
        ]

    def take(
        self,
        base: int,
        fields: dict[str, _Field],
        names: tuple[str, ...],
        kinds: Any,
        n: int,
        allowed: dict[int, frozenset[int]],
        data: Buffer,
        k: Any,
    ) -> None:
        """Move the first ``n`` events (``base``: events taken before) into the fields,
        checking their types, then clear the buffer (the kernel writes only the fields present,
        so ``vtype`` must start at ABSENT; a half-read event after them, on GROW, is cleared
        too)."""
        vtype = self.vtype
        present = (vtype[:, :n] != k.ABSENT).any(axis=1) if n else np.zeros(len(names), bool)
        for row, (name, kind) in enumerate(zip(names, kinds, strict=True)):
            f = fields[name]
            if kind == k.K_ARGS:  # (the kernel bails on anything but an object)
                continue
            if not present[row]:
                if f.seen and n:
                    _add_nulls(f, n, k)
                continue
            vt = vtype[row, :n]
            counts = np.bincount(vt.view(np.uint8), minlength=16)
            seen_types = set(np.flatnonzero(counts).tolist())
            if not seen_types <= allowed[int(kind)] or (name == "ph" and k.NULL in seen_types):
                raise _Bail  # (``ph`` is the one field the reference requires to be a string)
            if not f.seen:
                f.seen = True
                if base:
                    _add_nulls(f, base, k)
            _add(f, vt, self.ival[row, :n], self.ilen[row, :n], n, data, k)
        vtype[:, : min(n + 1, self.chunk)] = k.ABSENT


# --------------------------------------------------------------------------------------------------
# streaming: the text through a bounded sliding window

WINDOW_BYTES = 256 * 1024**2
"""Text held at once by :func:`scan_stream`: the window the kernels scan before it slides on."""

_WINDOW_GROWTH = 8
"""How far the window may grow past its size to hold one event (larger: the reference path)."""


class _Window:
    """A sliding window over a text read forward: bytes ``[off, off + n)`` of the text sit at
    ``mm[0:n]`` (an anonymous map, so slices come out as bytes, as from a file map)."""

    def __init__(self, read: Callable[[int], bytes], cap: int) -> None:
        self.read, self.cap, self.max_cap = read, cap, cap * _WINDOW_GROWTH
        self.mm = mmap.mmap(-1, cap)
        self.arr = np.frombuffer(self.mm, dtype=np.uint8)
        self.off = self.n = 0
        self.eof = False
        self._fill()

    @property
    def addr(self) -> int:
        return int(self.arr.ctypes.data)

    def _fill(self) -> None:
        while self.n < self.cap and not self.eof:
            piece = self.read(self.cap - self.n)
            if not piece:
                self.eof = True
                break
            self.mm[self.n : self.n + len(piece)] = piece
            self.n += len(piece)

    def slide(self, p: int) -> None:
        """Drop the text before ``p`` (positions then count from it) and read on; when ``p`` is 0
        the window is full of one unfinished value: grow it (:class:`_Bail` past the bound)."""
        if p == 0:
            if self.cap >= self.max_cap:
                raise _Bail
            cap = self.cap * 2
            mm = mmap.mmap(-1, cap)
            mm[: self.n] = self.mm[: self.n]
            del self.arr
            self.mm.close()
            self.mm, self.cap = mm, cap
            self.arr = np.frombuffer(mm, dtype=np.uint8)
        else:
            self.mm.move(0, p, self.n - p)
            self.off += p
            self.n -= p
        self._fill()

    def ws(self, p: int) -> int:
        """``p`` past whitespace, sliding the window when the whitespace runs to its end (the
        returned position may then be smaller); ``n`` only at the end of the text."""
        while True:
            m = _WS.match(self.mm, p, self.n)  # type: ignore[call-overload]
            p = p if m is None else m.end()
            if p < self.n or self.eof:
                return p
            self.slide(p)
            p = 0

    def close(self) -> None:
        del self.arr
        with contextlib.suppress(BufferError):
            self.mm.close()


def scan_stream(
    read: Callable[[int], bytes],
    *,
    window: int | None = None,
    progress: Callable[[int], None] | None = None,
    sink: Callable[[int, Scanned], None] | None = None,
) -> tuple[dict[str, Any], Scanned] | None:
    """:func:`scan_document` on a text read forward by ``read(n)`` (a file, or a gzip inflated
    on the fly: :class:`opscope.ingest.gz.Stream`), holding at most a window of ``window`` bytes
    (default :data:`WINDOW_BYTES`; grown to hold an event that does not fit, up to
    ``_WINDOW_GROWTH`` times) instead of the whole text. Same result as :func:`scan_document` on
    the whole text; ``None`` likewise. ``progress(pos)``: text bytes read so far.

    With ``sink`` the events are not held: at the end of each window, ``sink(first_row,
    window_events)`` receives that window's rows (a :class:`Scanned` of the window alone; its
    string codes are already those of the whole scan, its ``exact`` is False: ns of numbers
    left as text are float-derived) and the returned :class:`Scanned` keeps only the count,
    the counters, ``exact`` and the ``ts``/``dur`` number texts (for an exact-time patch)."""
    if not available():
        return None
    win = _Window(read, max(64, window or WINDOW_BYTES))
    try:
        return _document_stream(win, progress, sink)
    except (_Bail, msgspec.DecodeError):
        return None
    finally:
        win.close()


def _document_stream(
    win: _Window,
    progress: Callable[[int], None] | None,
    sink: Callable[[int, Scanned], None] | None = None,
) -> tuple[dict[str, Any], Scanned]:
    k = _kernels()
    ctl = np.zeros(k.C_SLOTS, dtype=np.int64)
    stack = np.zeros(_STACK_DEPTH, dtype=np.uint8)
    ctl[[k.C_STACK, k.C_STACK_CAP]] = [stack.ctypes.data, _STACK_DEPTH]

    def value(p: int) -> tuple[Any, int]:
        """(the JSON value at ``p``, decoded; the position after it)."""
        while True:
            e = int(k.skip_value(win.addr, p, win.n, ctl.ctypes.data))
            # (a number running to the window's end may go on past it)
            if e >= 0 and (e < win.n or win.eof):
                return msgspec.json.decode(win.mm[p:e]), e
            if win.eof:
                raise _Bail
            win.slide(p)
            p = 0

    p = win.ws(0)
    c = win.mm[p : p + 1]
    if p < win.n and c == b"[":
        scanned, stop = _scan_stream(win, p, progress, sink)
        if win.ws(stop) != win.n:
            raise _Bail
        return {}, scanned
    if c != b"{":
        raise _Bail
    header: dict[str, Any] = {}
    events: Scanned | None = None
    p = win.ws(p + 1)
    if win.mm[p : p + 1] == b"}":
        raise _Bail  # no traceEvents: the reference path says so
    while True:
        key, p = value(p)
        if not isinstance(key, str):
            raise _Bail
        p = win.ws(p)
        if win.mm[p : p + 1] != b":":
            raise _Bail
        p = win.ws(p + 1)
        if key == "traceEvents":
            if events is not None or win.mm[p : p + 1] != b"[":
                raise _Bail
            events, p = _scan_stream(win, p, progress, sink)
        else:
            header[key], p = value(p)
        p = win.ws(p)
        c = win.mm[p : p + 1]
        if c == b",":
            p = win.ws(p + 1)
        elif c == b"}" and win.ws(p + 1) == win.n and events is not None:
            return header, events
        else:
            raise _Bail


def _scan_stream(
    win: _Window,
    start: int,
    progress: Callable[[int], None] | None,
    sink: Callable[[int, Scanned], None] | None = None,
) -> tuple[Scanned, int]:
    """:func:`_scan` over a sliding window: the array at ``win.mm[start]``, read window by
    window; returns (events, position in the window after the closing bracket).

    Each window is scanned with fresh intern tables (their entries are spans of the window's
    text); at its end the window's strings are decoded and its codes renumbered into the
    distinct strings of the whole scan. An event cut by the window's end makes the kernel stop
    at its start (every event ends with ``}``, so a cut one never reads as complete); the window
    then slides to it.
    """
    setup = _ScanSetup.new()
    k, ctl, allowed, names, kinds = setup.k, setup.ctl, setup.allowed, setup.names, setup.kinds
    chunk = CHUNK_EVENTS
    bufs = [_ChunkBuf(len(names), chunk), _ChunkBuf(len(names), chunk)]
    fields = setup.fields()
    raw_kinds = {int(k.K_RAW)}
    str_kinds = {int(k.K_STR), int(k.K_INTSTR), int(k.K_NUMSTR)}
    strings: list[str | None] = []
    raw_texts: list[str | None] = []
    s_code: dict[str | None, int] = {}
    r_code: dict[str | None, int] = {}
    counters: list[jsonscan.CounterEvent] = []
    n_total = 0
    pos, first, done = start + 1, True, False
    cur = 0
    flushed = 0  # rows handed to ``sink`` so far
    starts: dict[str, int] = {}  # field -> the row its held pieces begin at (sink only)

    def run(
        b: _ChunkBuf, addr: int, lim: int, at: int, first: bool, most: int = chunk
    ) -> tuple[int, int, int]:
        b.install(ctl, k)
        status, stop, n = k.scan_events(addr, at, lim, first, most, ctl.ctypes.data)
        return int(status), int(stop), int(n)

    with ThreadPoolExecutor(max_workers=1) as pool:
        while not done:
            # one window: fresh intern tables, the kernel stops at the text's end
            strs, raws = _Interns(ctl, k.C_S_TAB), _Interns(ctl, k.C_R_TAB)
            ctl[[k.C_S_TAB + 6, k.C_R_TAB + 6]] = 0
            marks = {nm: len(f.codes) for nm, f in fields.items()}
            addr, lim, seg = win.addr, win.n, pos
            at = pos
            job: Future[tuple[int, int, int]] | None = pool.submit(
                run, bufs[cur], addr, lim, at, first
            )
            stop, resume, sep = pos, -1, False
            run_first = first
            while job is not None:
                status, stop, n = job.result()
                held = bufs[cur]
                job = None
                if status == k.BAIL and win.eof:
                    raise _Bail
                if status in (k.FULL, k.GROW):
                    if status == k.GROW:
                        for tab in (strs, raws):
                            if tab.full:
                                tab.grow(k)
                    cur ^= 1
                    at, run_first = stop, first and n == 0
                    job = pool.submit(run, bufs[cur], addr, lim, stop, run_first)
                try:
                    held.take(n_total, fields, names, kinds, n, allowed, win.mm, k)
                    n_total += n
                except _Bail:
                    if job is not None:
                        job.result()
                    raise
                if n:
                    first = False
                if status == k.DONE:
                    done = True
                elif status == k.BAIL:
                    # The window's end (or bad input: then no window gets past it). The kernel
                    # stops somewhere inside the cut event; where it began is found by reading
                    # the run's whole events again (at most one chunk).
                    resume = at
                    if not n:
                        m = _WS.match(win.mm, at, lim)  # type: ignore[call-overload]
                        if m is not None and m.end() == lim:
                            resume = lim  # only whitespace since ``at``: slide past it all
                    else:
                        st2, p2, n2 = run(held, addr, lim, at, run_first, n)
                        held.vtype[:, : min(n + 1, chunk)] = k.ABSENT
                        if n2 != n or st2 not in (k.FULL, k.BAIL):
                            raise _Bail  # pragma: no cover - the same bytes read the same
                        # FULL: stopped before the next event; BAIL: its separator is past ``lim``
                        resume, sep = (p2, False) if st2 == k.FULL else (lim, True)
                    stop = resume
            # the window's strings into the whole scan's, its codes renumbered
            for tab, table, code, kset, is_raw in (
                (strs, strings, s_code, str_kinds, False),
                (raws, raw_texts, r_code, raw_kinds, True),
            ):
                local = _decode(tab.texts(win.mm), raw=is_raw)
                lut = np.empty(len(local) + 1, dtype=np.int32)
                lut[-1] = -1  # (code -1, no value, indexes the last entry)
                for i, s in enumerate(local):
                    g = code.get(s)
                    if g is None:
                        g = code[s] = len(table)
                        table.append(s)
                    lut[i] = g
                for nm, f in fields.items():
                    if f.kind in kset:
                        for j in range(marks[nm], len(f.codes)):
                            f.codes[j] = lut[f.codes[j]]
            c_code = s_code.get("C")
            ph = fields["ph"]
            if c_code is not None and any(
                bool((ph.codes[j] == c_code).any()) for j in range(marks["ph"], len(ph.codes))
            ):
                text = win.mm[seg:stop].strip()
                if done:
                    text = text[:-1]  # the closing bracket
                text = text.strip(b" \t\n\r,")
                counters += [
                    c for c in jsonscan._counter_decoder.decode(b"[" + text + b"]") if c.ph == "C"
                ]
            if sink is not None and n_total > flushed:
                sink(flushed, _window_rows(fields, starts, flushed, n_total, strings, raw_texts))
                flushed = n_total
            if progress is not None:
                progress(win.off + stop)
            if done:
                break
            # the next window starts where the cut event does (at 0: grow to hold it, or bail)
            win.slide(resume)
            pos = 0
            if sep:  # a whole event at the window's end: its separator follows
                pos = win.ws(0)
                c = win.mm[pos : pos + 1]
                if c == b"]":
                    done = True
                    stop = pos + 1
                elif c == b",":
                    pos += 1
                else:
                    raise _Bail
    exact = bool(ctl[k.C_BIG_FRACTION])
    if exact:
        ts = fields["ts"]
        big = max([ts.max_abs_us] + [abs(float(x)) for x in ts.texts.values()])
        exact = big >= jsonscan.EXACT_FLOAT_US
    return Scanned(n_total, fields, strings, raw_texts, exact, counters), stop


def _window_rows(
    fields: dict[str, _Field],
    starts: dict[str, int],
    lo: int,
    hi: int,
    strings: list[str | None],
    raws: list[str | None],
) -> Scanned:
    """Rows ``[lo, hi)`` of the scan as a :class:`Scanned` of their own, taken out of ``fields``
    (whose pieces then hold nothing; ``starts`` records where the next pieces begin). A field
    first seen in this window holds a null piece from row 0: its rows before ``lo`` are cut off.
    The ``ts``/``dur`` number texts stay in ``fields`` too (the exact-time patch needs them)."""
    out: dict[str, _Field] = {}
    for nm, f in fields.items():
        w = _Field(nm, f.kind, seen=f.seen, rows=hi - lo, max_abs_us=f.max_abs_us)
        if f.seen:
            cut = lo - starts.get(nm, 0)
            if f.nums:
                w.nums = [pl.concat(f.nums, rechunk=False).slice(cut)]
            if f.ns:
                w.ns = [pl.concat(f.ns, rechunk=False).slice(cut)]
            if f.codes:
                w.codes = [np.concatenate(f.codes)[cut:]]
            f.nums, f.ns, f.codes = [], [], []
            starts[nm] = hi
            w.texts = {i - lo: t for i, t in f.texts.items() if i >= lo}
            if nm not in ("ts", "dur"):
                f.texts = {}
        out[nm] = w
    return Scanned(hi - lo, out, strings, raws, False, [])
