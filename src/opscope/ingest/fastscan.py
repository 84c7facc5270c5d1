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
takes its lenient path. ``OPSCOPE_SCANNER=reference`` forces that path; without numba it is the
only one.

Times come out as exact int64 ns: a decimal of up to three fraction digits (what Kineto writes) is
converted from its digits; other numbers follow the reference rules (float64 rounding, or the
decimal text when the trace needs exact times: see :func:`jsonscan.needs_exact_times`).
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable
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


def available() -> bool:
    """True when the compiled scanner can run (numba importable, not switched off)."""
    if os.environ.get("OPSCOPE_SCANNER", "").lower() == "reference":
        return False
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency; a platform may lack it
        return False
    return True


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

    def texts(self, data: bytes) -> list[bytes]:
        n = self.count
        es, en = self.es[:n].tolist(), self.en[:n].tolist()
        return [data[s : s + ln] for s, ln in zip(es, en, strict=True)]


class _Bail(Exception):
    """The input is outside what the scanner reads: use the reference decoder."""


def _decode_strings(texts: list[bytes]) -> list[str]:
    out: list[str] = []
    for t in texts:
        if b"\\" in t:
            out.append(msgspec.json.decode(b'"' + t + b'"'))
        else:
            try:
                out.append(t.decode("utf-8"))
            except UnicodeDecodeError:
                raise _Bail from None
    return out


def _decode_raws(texts: list[bytes]) -> list[str | None]:
    out: list[str | None] = []
    for t in texts:
        if t == b"null":
            out.append(None)
        else:
            try:
                out.append(t.decode("utf-8"))
            except UnicodeDecodeError:
                raise _Bail from None
    return out


# --------------------------------------------------------------------------------------------------
# per-field accumulation


@dataclass
class _Field:
    """One field's values over the chunks read so far (numpy; nothing per event in Python)."""

    name: str
    kind: int
    vals: list[IntArray] = field(default_factory=list)  # INT / NS value or string code
    vt: list[np.ndarray[Any, np.dtype[np.int8]]] = field(default_factory=list)
    texts: dict[int, bytes] = field(default_factory=dict)  # event index -> number text
    seen: bool = False


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


@dataclass
class Scanned:
    """What :func:`scan` read: numpy arrays and distinct strings, not yet Polars columns.

    Building the frame is separate so that the caller can free the trace text first (peak
    memory): nothing here refers to it.
    """

    n: int
    fields: dict[str, _Field]
    strings: list[str]
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
                num, strs = self._mixed(f, strings, k)
                cols += [num, strs]
            elif name in ("ts", "dur"):
                us, ns[name] = self._times(f, k)
                cols.append(us)
            else:
                col = self._codes(f, strings)
                cols.append(col.fill_null("") if name == "ph" else col)
        for name in jsonscan.ARG_COLUMNS:
            f = self.fields[name]
            if not f.seen:
                cols.append(
                    pl.Series(name, [], jsonscan._NULL_DTYPE[name]).extend_constant(None, self.n)
                )
            elif f.kind == k.K_RAW:
                cols.append(self._codes(f, raws))
            elif f.kind == k.K_STR:
                cols.append(self._codes(f, strings))
            elif f.kind == k.K_INT:
                cols.append(self._ints(f, k))
            elif f.kind == k.K_NUM:
                cols.append(self._floats(f, k))
            else:  # device, stream, bytes, size: numbers, or numeric text (ROCm)
                num, strs = self._mixed(f, strings, k)
                if strs.null_count() < self.n:
                    num = jsonscan._coalesce_numeric_strings(num, strs)
                cols.append(num)
        frame = pl.DataFrame(cols)
        out = jsonscan.Columns(frames=[frame], counters=self.counters, n_events=self.n)
        return out, (ns["ts"].alias("ts_ns"), ns["dur"].alias("dur_ns"))

    # -- per kind

    def _cat(self, f: _Field) -> tuple[IntArray, np.ndarray[Any, np.dtype[np.int8]]]:
        """A field's values and type codes over the whole trace; the field lets go of its
        chunks (each column is built while the rest stay as compact arrays: peak memory)."""
        if not f.seen:
            return np.zeros(self.n, np.int64), np.zeros(self.n, np.int8)
        vals = np.concatenate(f.vals)
        f.vals.clear()
        vt = np.concatenate(f.vt) if f.vt else np.zeros(0, np.int8)
        f.vt.clear()
        return vals, vt

    def _masked(self, name: str, vals: Any, valid: Any, dtype: Any) -> pl.Series:
        s = pl.Series(name, vals, dtype=dtype)
        if bool(valid.all()):
            return s
        return pl.select(pl.when(pl.Series(valid)).then(s).alias(name)).to_series()

    def _codes(self, f: _Field, table: pl.Series) -> pl.Series:
        codes, _ = self._cat(f)
        if not f.seen:
            return pl.Series(f.name, [], pl.String).extend_constant(None, self.n)
        return table.gather(self._masked("i", codes, codes >= 0, pl.Int32)).alias(f.name)

    def _ints(self, f: _Field, k: Any) -> pl.Series:
        vals, vt = self._cat(f)
        return self._masked(f.name, vals, vt == k.INT, pl.Int64)

    def _number_texts(self, f: _Field) -> pl.Series:
        idx = np.fromiter(f.texts.keys(), dtype=np.int64, count=len(f.texts))
        return pl.Series([t.decode() for t in f.texts.values()]), idx  # type: ignore[return-value]

    def _floats(self, f: _Field, k: Any) -> pl.Series:
        vals, vt = self._cat(f)
        out = vals.astype(np.float64)
        valid = vt == k.INT
        if f.texts:
            texts, idx = self._number_texts(f)  # type: ignore[misc]
            out[idx] = texts.cast(pl.Float64).to_numpy()
            valid[idx] = True
        return self._masked(f.name, out, valid, pl.Float64)

    def _mixed(self, f: _Field, strings: pl.Series, k: Any) -> tuple[pl.Series, pl.Series]:
        vals, vt = self._cat(f)
        num = self._masked(f.name, vals, vt == k.INT, pl.Int64)
        if not bool((vt == k.STR).any()):
            strs = pl.Series(f.name + "_str", [], pl.String).extend_constant(None, self.n)
        else:
            strs = strings.gather(self._masked("i", vals, vt == k.STR, pl.Int64))
        return num, strs.alias(f.name + "_str")

    def _times(self, f: _Field, k: Any) -> tuple[pl.Series, pl.Series]:
        """(µs as float64, like the reference column; exact ns)."""
        vals, vt = self._cat(f)
        is_int, is_ns = vt == k.INT, vt == k.NS
        # µs integers: ns = µs * 1000 unless it overflows (the reference's bound: 9.2e15 µs)
        big = is_int & (np.abs(vals) >= 9_200_000_000_000_000)
        ns_vals = np.where(is_int & ~big, vals * 1000, vals)
        ns_valid = (is_int & ~big) | is_ns
        us = np.where(is_int, vals.astype(np.float64), vals / 1000.0)
        us_valid = is_int | is_ns
        if f.texts:
            texts, idx = self._number_texts(f)  # type: ignore[misc]
            fl = texts.cast(pl.Float64)
            us[idx] = fl.to_numpy()
            us_valid[idx] = True
            if self.exact:
                dec = [jsonscan._dec_ns(msgspec.Raw(t)) for t in f.texts.values()]
                got = np.array([-1 if d is None else d for d in dec], dtype=np.int64)
                ok = np.array([d is not None for d in dec], dtype=bool)
            else:
                conv = pl.select(jsonscan.float_us_to_ns(pl.lit(fl))).to_series()
                ok = conv.is_not_null().to_numpy()
                got = conv.fill_null(0).to_numpy()
            ns_vals[idx] = got
            ns_valid[idx] = ok
        return (
            self._masked(f.name, us, us_valid, pl.Float64),
            self._masked(f.name, ns_vals, ns_valid, pl.Int64),
        )


_KERNELS: list[Any] = []


def _kernels() -> Any:
    if not _KERNELS:
        from opscope.ingest import _scan_kernels

        _KERNELS.append(_scan_kernels)
    return _KERNELS[0]


def scan(
    data: bytes,
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
        return _scan(data, start, end, progress)
    except _Bail:
        return None


def _scan(
    data: bytes, start: int, end: int, progress: Callable[[int, int], None] | None
) -> Scanned:
    k = _kernels()
    t = _tables(k)
    allowed = _allowed(k)
    ek, ak = t.events, t.args
    n_rows = len(ek.names) + len(ak.names)
    names = ek.names + ak.names
    kinds = np.concatenate([ek.kinds, ak.kinds])
    # column-major: a field's values of the chunk are one contiguous row, copied out as a block
    chunk = CHUNK_EVENTS
    vtype = np.zeros((n_rows, chunk), dtype=np.int8)
    ival = np.zeros((n_rows, chunk), dtype=np.int64)
    ilen = np.zeros((n_rows, chunk), dtype=np.int32)
    stack = np.zeros(_STACK_DEPTH, dtype=np.uint8)
    enxt = np.full(len(ek.names) + 1, -1, dtype=np.int64)
    anxt = np.full(len(ak.names) + 1, -1, dtype=np.int64)
    ctl = np.zeros(k.C_SLOTS, dtype=np.int64)
    ctl[[k.C_VT, k.C_IV, k.C_IL, k.C_STRIDE]] = [
        vtype.ctypes.data,
        ival.ctypes.data,
        ilen.ctypes.data,
        chunk,
    ]
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
    strs, raws = _Interns(ctl, k.C_S_TAB), _Interns(ctl, k.C_R_TAB)
    fields = {nm: _Field(nm, int(kd)) for nm, kd in zip(names, kinds, strict=True)}
    buf = np.frombuffer(data, dtype=np.uint8)
    addr = buf.ctypes.data
    pos, first, n_total = start + 1, True, 0
    while True:
        # every array the kernel reaches through ``ctl`` is referenced from this frame
        status, pos, n = k.scan_events(addr, pos, end, first, chunk, ctl.ctypes.data)
        if status == k.BAIL:
            raise _Bail
        first = False
        if n:
            _take(fields, names, kinds, vtype, ival, ilen, n, n_total, allowed, data, k)
            n_total += n
        vtype[:, : min(n + 1, chunk)] = k.ABSENT
        if status == k.GROW:
            for tab in (strs, raws):
                if tab.full:
                    tab.grow(k)
        if progress is not None:
            progress(pos - start, end - start)
        if status == k.DONE:
            break
    del buf
    if pos != end:
        raise _Bail  # pragma: no cover - the caller hands exactly the array
    strings = _decode_strings(strs.texts(data))
    raw_texts = _decode_raws(raws.texts(data))
    exact = bool(ctl[k.C_BIG_FRACTION])
    if exact:
        ts = fields["ts"]
        exact = _max_abs_us(ts, k) >= jsonscan.EXACT_FLOAT_US
    counters: list[jsonscan.CounterEvent] = []
    ph = fields["ph"]
    if ph.seen and "C" in strings:
        code = strings.index("C")
        if any(bool((v == code).any()) for v in ph.vals):
            counters = [
                c
                for c in jsonscan._counter_decoder.decode(memoryview(data)[start:end])
                if c.ph == "C"
            ]
    return Scanned(n_total, fields, strings, raw_texts, exact, counters)


def _max_abs_us(f: _Field, k: Any) -> float:
    """Largest |value| of a time field, in µs (what the reference compares with 2**43)."""
    best = 0.0
    for v, vt in zip(f.vals, f.vt, strict=True):
        for code, scale in ((k.INT, 1.0), (k.NS, 1000.0)):
            m = vt == code
            if m.any():
                best = max(best, float(np.abs(v[m]).max()) / scale)
    for text in f.texts.values():
        best = max(best, abs(float(text)))
    return best


def _take(
    fields: dict[str, _Field],
    names: tuple[str, ...],
    kinds: Any,
    vtype: Any,
    ival: Any,
    ilen: Any,
    n: int,
    base: int,
    allowed: dict[int, frozenset[int]],
    data: bytes,
    k: Any,
) -> None:
    """Move the first ``n`` events of the chunk arrays into the fields (checking types).

    Strings and raw texts are kept as int32 codes (-1: none), other fields as their int64 value
    plus the type code; the ``args`` container itself is not kept.
    """
    present = (vtype[:, :n] != k.ABSENT).any(axis=1)
    for row, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        f = fields[name]
        coded = kind in (k.K_STR, k.K_RAW)
        if not present[row]:
            if f.seen:
                f.vals.append(np.full(n, -1, np.int32) if coded else np.zeros(n, np.int64))
                if not coded:
                    f.vt.append(np.zeros(n, np.int8))
            continue
        vt = vtype[row, :n]
        counts = np.bincount(vt.view(np.uint8), minlength=16)
        seen_types = set(np.flatnonzero(counts).tolist())
        if not seen_types <= allowed[int(kind)] or (name == "ph" and k.NULL in seen_types):
            raise _Bail  # (``ph`` is the one field the reference requires to be a string)
        if kind == k.K_ARGS:
            continue
        if not f.seen:
            f.seen = True
            if base:
                f.vals.append(np.full(base, -1, np.int32) if coded else np.zeros(base, np.int64))
                if not coded:
                    f.vt.append(np.zeros(base, np.int8))
        vals = ival[row, :n]
        if coded:
            code = k.STR if kind == k.K_STR else k.RAW
            f.vals.append(np.where(vt == code, vals, -1).astype(np.int32))
            continue
        if k.NUMTEXT in seen_types:
            for j in np.flatnonzero(vt == k.NUMTEXT).tolist():
                s, ln = int(vals[j]), int(ilen[row, j])
                f.texts[base + j] = data[s : s + ln]
        f.vals.append(vals.copy())
        f.vt.append(vt.copy())
