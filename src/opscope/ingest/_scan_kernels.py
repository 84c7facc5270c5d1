# mypy: disable-error-code="untyped-decorator,no-any-return,misc"
"""Compiled kernels of the byte scanner (:mod:`opscope.ingest.fastscan`): one pass over the text.

numba compiles these on first use and caches the machine code beside this file (``cache=True``,
numba's own cache of code this module compiled), so a fresh process only loads it. They read the
trace bytes in place and write fixed-size per-chunk arrays; no Python object is made per event.

Why addresses instead of arrays: numba reference-counts every array handed to a helper (an atomic
increment and decrement per array argument per call, ~40 per parsed value here), which made the
first version three times slower than msgspec. The kernels therefore receive the buffers' base
addresses as integers and read and write through the tiny load/store intrinsics below; the
Python side (:mod:`opscope.ingest.fastscan`) owns the arrays and keeps them alive during a call.
All state the kernels share lives in one int64 control array (``ctl``, slots ``C_*``). Every read
of the text checks ``pos < lim`` first.
"""

from __future__ import annotations

from typing import Any

import numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

ABSENT, INT, NUMTEXT, STR, RAW, NULL, BOOL, NS, CONTAINER = range(9)
"""``vtype`` codes: key not in the event; integer literal (``ival``); any other number (its text
span: ``ival`` start, ``ilen`` length); string (``ival`` = code of the interned content); raw JSON
text (``ival`` = code of the interned text); ``null``; ``true``/``false``; a decimal of at most
three fraction digits on a ns key (``ival`` = exact ns); an object or array."""

K_STR, K_INT, K_NUM, K_INTSTR, K_NUMSTR, K_RAW, K_ARGS, K_NS = range(1, 9)
"""Key kinds (what the reference decoder's field type accepts)."""

DONE, FULL, GROW, BAIL = range(4)
"""Scan status: end of array reached; chunk full; an intern table is full (grow it and resume at
the returned position, the start of the event being read); input outside what the scanner reads
(the caller uses the reference decoder, which also reports invalid JSON)."""

# control slots: addresses (A), sizes and counters
(
    C_VT, C_IV, C_IL, C_STRIDE,
    C_S_TAB, C_S_MASK, C_S_ES, C_S_EN, C_S_EH, C_S_CAP, C_S_CNT,
    C_R_TAB, C_R_MASK, C_R_ES, C_R_EN, C_R_EH, C_R_CAP, C_R_CNT,
    C_STACK, C_STACK_CAP,
    C_EK_TAB, C_EK_MASK, C_EK_H, C_EK_BYTES, C_EK_OFF, C_EK_KIND, C_EK_N,
    C_AK_TAB, C_AK_MASK, C_AK_H, C_AK_BYTES, C_AK_OFF, C_AK_KIND, C_AK_N,
    C_BIG_FRACTION, C_TS_KEY, C_ENXT, C_ANXT,
    C_SLOTS,
) = range(39)  # fmt: skip
"""Slots of ``ctl``. ``C_S_*`` / ``C_R_*``: the string and raw-text intern tables (slot table,
entry starts, lengths, hashes, capacity, count); ``C_EK_*`` / ``C_AK_*``: the event and args key
tables; ``C_BIG_FRACTION``: a ``ts`` with 13+ integer digits and a non-zero fraction was seen;
``C_ENXT`` / ``C_ANXT``: predicted next key per key (key order repeats from event to event)."""

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211


def _load(ty: Any) -> Any:
    @intrinsic  # type: ignore[misc]
    def load(typingctx: Any, addr: Any, i: Any) -> Any:
        sig = ty(types.int64, types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ptr = builder.inttoptr(args[0], context.get_value_type(ty).as_pointer())
            return builder.load(builder.gep(ptr, [args[1]]))

        return sig, codegen

    return load


def _store(ty: Any) -> Any:
    @intrinsic  # type: ignore[misc]
    def store(typingctx: Any, addr: Any, i: Any, v: Any) -> Any:
        sig = types.void(types.int64, types.int64, ty)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ptr = builder.inttoptr(args[0], context.get_value_type(ty).as_pointer())
            builder.store(args[2], builder.gep(ptr, [args[1]]))
            return context.get_dummy_value()

        return sig, codegen

    return store


_u8 = _load(types.uint8)
_i64 = _load(types.int64)
_u64 = _load(types.uint64)
_set_i8 = _store(types.int8)
_set_i32 = _store(types.int32)
_set_i64 = _store(types.int64)
_set_u64 = _store(types.uint64)
_set_u8 = _store(types.uint8)
del ir  # the intrinsics build IR through numba's context

# Plain compiled calls, not numba-level inlining: with scalar arguments only, LLVM inlines the
# small helpers itself, and numba-level inlining quadrupled the compile time (24 s -> 6 s).
_jit: Any = numba.njit(cache=True, nogil=True)


@_jit
def _hash(b: int, s: int, n: int) -> Any:
    """FNV-style hash of 8-byte words of ``b[s:s+n]`` (see :func:`key_hash`)."""
    h = numba.uint64(_FNV_OFFSET) ^ numba.uint64(n)
    prime = numba.uint64(_FNV_PRIME)
    i = s
    e = s + n
    while i + 8 <= e:
        w = numba.uint64(0)
        for j in range(7, -1, -1):
            w = (w << numba.uint64(8)) | numba.uint64(_u8(b, i + j))
        h = (h ^ w) * prime
        h ^= h >> numba.uint64(31)
        i += 8
    w = numba.uint64(0)
    j = e - 1
    while j >= i:
        w = (w << numba.uint64(8)) | numba.uint64(_u8(b, j))
        j -= 1
    h = (h ^ w) * prime
    return h ^ (h >> numba.uint64(29))


def key_hash(data: bytes) -> int:
    """:func:`_hash` in Python (for the key tables, built once)."""
    m = 0xFFFFFFFFFFFFFFFF
    h = _FNV_OFFSET ^ len(data)
    i = 0
    while i + 8 <= len(data):
        h = ((h ^ int.from_bytes(data[i : i + 8], "little")) * _FNV_PRIME) & m
        h ^= h >> 31
        i += 8
    h = ((h ^ int.from_bytes(data[i:], "little")) * _FNV_PRIME) & m
    return h ^ (h >> 29)


@_jit
def _ws(b: int, p: int, lim: int) -> int:
    while p < lim:
        c = _u8(b, p)
        if c == 32 or c == 10 or c == 13 or c == 9:
            p += 1
        else:
            break
    return p


@_jit
def _is_hex(c: int) -> bool:
    return (48 <= c <= 57) or (65 <= c <= 70) or (97 <= c <= 102)


@_jit
def _string(b: int, p: int, lim: int) -> tuple[int, int]:
    """``p`` at an opening quote: (position after the closing quote, had an escape); -1 if bad."""
    p += 1
    esc = 0
    while p < lim:
        c = _u8(b, p)
        if c == 34:
            return p + 1, esc
        if c == 92:
            esc = 1
            if p + 1 >= lim:
                return -1, 0
            d = _u8(b, p + 1)
            if d == 117:
                if p + 5 >= lim:
                    return -1, 0
                for k in range(2, 6):
                    if not _is_hex(_u8(b, p + k)):
                        return -1, 0
                p += 6
            elif d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110:
                p += 2
            elif d == 114 or d == 116:
                p += 2
            else:
                return -1, 0
            continue
        if c < 32:
            return -1, 0
        p += 1
    return -1, 0


@_jit
def _digits(b: int, p: int, lim: int) -> tuple[int, int, int]:
    """The run of decimal digits at ``p``: (end, value of its first 18 digits, its length)."""
    v = 0
    n = 0
    while p < lim:
        d = _u8(b, p)
        if not (48 <= d <= 57):
            break
        if n < 18:
            v = v * 10 + (d - 48)
        n += 1
        p += 1
    return p, v, n


@_jit
def _number(b: int, p: int, lim: int) -> tuple[int, int, int, int, int, int]:
    """A JSON number at ``p``: (end, is_plain_int, int_part, n_int_digits, frac_value,
    n_frac_digits); end -1 if not a number. Over 18 digits, or an exponent, is "not plain"
    (``n_frac_digits`` 99 for an exponent)."""
    neg = False
    if p < lim and _u8(b, p) == 45:
        neg = True
        p += 1
    if p >= lim:
        return -1, 0, 0, 0, 0, 0
    c = _u8(b, p)
    ip = 0
    nd = 0
    if c == 48:
        p += 1
        nd = 1
    elif 49 <= c <= 57:
        p, ip, nd = _digits(b, p, lim)
    else:
        return -1, 0, 0, 0, 0, 0
    plain = nd <= 18
    fv = 0
    nf = 0
    if p < lim and _u8(b, p) == 46:
        p += 1
        if p >= lim or not (48 <= _u8(b, p) <= 57):
            return -1, 0, 0, 0, 0, 0
        p, fv, nf = _digits(b, p, lim)
    if p < lim and (_u8(b, p) == 101 or _u8(b, p) == 69):
        p += 1
        if p < lim and (_u8(b, p) == 43 or _u8(b, p) == 45):
            p += 1
        if p >= lim or not (48 <= _u8(b, p) <= 57):
            return -1, 0, 0, 0, 0, 0
        while p < lim and 48 <= _u8(b, p) <= 57:
            p += 1
        plain = False
        nf = 99
    if neg:
        ip = -ip
        fv = -fv
    return p, 1 if (plain and nf == 0) else 0, ip, nd, fv, nf


@_jit
def _literal(b: int, p: int, lim: int) -> tuple[int, int]:
    """``true`` / ``false`` / ``null`` at ``p``: (end, NULL or BOOL); end -1 otherwise."""
    c = _u8(b, p)
    if c == 110 and p + 4 <= lim:
        if _u8(b, p + 1) == 117 and _u8(b, p + 2) == 108 and _u8(b, p + 3) == 108:
            return p + 4, NULL
    if c == 116 and p + 4 <= lim:
        if _u8(b, p + 1) == 114 and _u8(b, p + 2) == 117 and _u8(b, p + 3) == 101:
            return p + 4, BOOL
    if c == 102 and p + 5 <= lim:
        if (
            _u8(b, p + 1) == 97
            and _u8(b, p + 2) == 108
            and _u8(b, p + 3) == 115
            and _u8(b, p + 4) == 101
        ):
            return p + 5, BOOL
    return -1, 0


@_jit
def _scalar_end(b: int, p: int, lim: int) -> int:
    """End of the scalar (string, number, literal) at ``p``; -1 if none is there."""
    c = _u8(b, p)
    if c == 34:
        e, _ = _string(b, p, lim)
        return e
    if c == 45 or 48 <= c <= 57:
        e, _, _, _, _, _ = _number(b, p, lim)
        return e
    e, _ = _literal(b, p, lim)
    return e


@_jit
def _object_key(b: int, p: int, lim: int) -> int:
    """``p`` at a key inside an object: the position after ``"key" :``; -1 if not there."""
    if p >= lim or _u8(b, p) != 34:
        return -1
    p, _ = _string(b, p, lim)
    if p < 0:
        return -1
    p = _ws(b, p, lim)
    if p >= lim or _u8(b, p) != 58:
        return -1
    return p + 1


@_jit
def skip_value(b: int, p: int, lim: int, ctl: int) -> int:
    """End of the JSON value at ``p`` (validated); -1 if invalid or nested too deeply."""
    stack = _i64(ctl, C_STACK)
    cap = _i64(ctl, C_STACK_CAP)
    depth = 0
    while True:
        # a value starts here
        p = _ws(b, p, lim)
        if p >= lim:
            return -1
        c = _u8(b, p)
        closed = False
        if c == 123 or c == 91:
            q = _ws(b, p + 1, lim)
            if q >= lim:
                return -1
            d = _u8(b, q)
            if (c == 123 and d == 125) or (c == 91 and d == 93):
                p = q + 1
                closed = True
            else:
                if depth >= cap:
                    return -1
                _set_u8(stack, depth, c)
                depth += 1
                if c == 123:
                    p = _object_key(b, q, lim)
                    if p < 0:
                        return -1
                else:
                    p = q
                continue
        else:
            p = _scalar_end(b, p, lim)
            if p < 0:
                return -1
            closed = True
        # after a complete value: close containers or go on to the next element
        while closed:
            if depth == 0:
                return p
            p = _ws(b, p, lim)
            if p >= lim:
                return -1
            c = _u8(b, p)
            top = _u8(stack, depth - 1)
            if c == 44:
                p += 1
                if top == 123:
                    p = _object_key(b, _ws(b, p, lim), lim)
                    if p < 0:
                        return -1
                closed = False
            elif (top == 123 and c == 125) or (top == 91 and c == 93):
                depth -= 1
                p += 1
            else:
                return -1


@_jit
def _intern(b: int, s: int, n: int, ctl: int, base: int) -> int:
    """Code of the bytes ``b[s:s+n]`` in the intern table at slots ``base..``; -1 when full.

    ``base`` is ``C_S_TAB`` or ``C_R_TAB``: both tables have the same slot layout.
    """
    tab = _i64(ctl, base)
    mask = _i64(ctl, base + 1)
    es = _i64(ctl, base + 2)
    en = _i64(ctl, base + 3)
    eh = _i64(ctl, base + 4)
    h = _hash(b, s, n)
    i = numba.int64(h & numba.uint64(mask))
    while True:
        e = _i64(tab, i)
        if e == 0:
            k = _i64(ctl, base + 6)
            if k >= _i64(ctl, base + 5):
                return -1
            _set_i64(es, k, s)
            _set_i64(en, k, n)
            _set_u64(eh, k, h)
            _set_i64(tab, i, k + 1)
            _set_i64(ctl, base + 6, k + 1)
            return k
        e -= 1
        if _u64(eh, e) == h and _i64(en, e) == n:
            a = _i64(es, e)
            same = True
            for j in range(n):
                if _u8(b, a + j) != _u8(b, s + j):
                    same = False
                    break
            if same:
                return e
        i = (i + 1) & mask


@_jit
def _is_key(b: int, s: int, n: int, idx: int, kbytes: int, koff: int) -> bool:
    """True when ``b[s:s+n]`` is known key ``idx``."""
    if idx < 0:
        return False
    a = _i64(koff, idx)
    if _i64(koff, idx + 1) - a != n:
        return False
    for j in range(n):
        if _u8(kbytes, a + j) != _u8(b, s + j):
            return False
    return True


@_jit
def _key(b: int, s: int, n: int, ctl: int, base: int, prev: int) -> int:
    """Index of the key ``b[s:s+n]`` in the key table at slots ``base..`` (``C_EK_TAB`` or
    ``C_AK_TAB``), trying first the key that followed ``prev`` last time; -1 if unknown."""
    kbytes = _i64(ctl, base + 3)
    koff = _i64(ctl, base + 4)
    nxt = _i64(ctl, C_ENXT if base == C_EK_TAB else C_ANXT)
    guess = _i64(nxt, prev)
    if _is_key(b, s, n, guess, kbytes, koff):
        return guess
    ktab = _i64(ctl, base)
    mask = _i64(ctl, base + 1)
    kh = _i64(ctl, base + 2)
    h = _hash(b, s, n)
    i = numba.int64(h & numba.uint64(mask))
    while True:
        e = _i64(ktab, i)
        if e == 0:
            return -1
        e -= 1
        if _u64(kh, e) == h and _is_key(b, s, n, e, kbytes, koff):
            _set_i64(nxt, prev, e)
            return e
        i = (i + 1) & mask


@_jit
def _put(ctl: int, ev: int, row: int, vt: int, val: int) -> None:
    at = row * _i64(ctl, C_STRIDE) + ev
    _set_i8(_i64(ctl, C_VT), at, vt)
    _set_i64(_i64(ctl, C_IV), at, val)


@_jit
def _value(b: int, p: int, lim: int, kind: int, row: int, ev: int, ctl: int, is_ts: bool) -> int:
    """Read the value at ``p`` for a known key; returns its end, -1 invalid, -2 table full."""
    c = _u8(b, p)
    if kind == K_RAW:
        e = skip_value(b, p, lim, ctl)
        if e < 0:
            return -1
        k = _intern(b, p, e - p, ctl, C_R_TAB)
        if k < 0:
            return -2
        _put(ctl, ev, row, RAW, k)
        return e
    if c == 34:
        e, _ = _string(b, p, lim)
        if e < 0:
            return -1
        k = _intern(b, p + 1, e - p - 2, ctl, C_S_TAB)
        if k < 0:
            return -2
        _put(ctl, ev, row, STR, k)
        return e
    if c == 45 or 48 <= c <= 57:
        e, plain, ip, nd, fv, nf = _number(b, p, lim)
        if e < 0:
            return -1
        if is_ts and nd >= 13 and nf < 99 and fv != 0:
            _set_i64(ctl, C_BIG_FRACTION, 1)
        if plain:
            _put(ctl, ev, row, INT, ip)
        elif kind == K_NS and nd <= 15 and nf <= 3:
            scale = 1
            for _ in range(3 - nf):
                scale *= 10
            _put(ctl, ev, row, NS, ip * 1000 + fv * scale)
        else:
            _put(ctl, ev, row, NUMTEXT, p)
            _set_i32(_i64(ctl, C_IL), row * _i64(ctl, C_STRIDE) + ev, e - p)
        return e
    if c == 123 or c == 91:
        e = skip_value(b, p, lim, ctl)
        _put(ctl, ev, row, CONTAINER, 0)
        return e
    e, t = _literal(b, p, lim)
    if e < 0:
        return -1
    _put(ctl, ev, row, t, 0)
    return e


@_jit
def _after_member(b: int, p: int, lim: int) -> tuple[int, int]:
    """After an object member: (position of the next key, 0) after a comma, (position after the
    brace, 1) at the end of the object, (-1, 0) otherwise."""
    p = _ws(b, p, lim)
    if p >= lim:
        return -1, 0
    c = _u8(b, p)
    if c == 44:
        return _ws(b, p + 1, lim), 0
    if c == 125:
        return p + 1, 1
    return -1, 0


@_jit
def _args(b: int, p: int, lim: int, ev: int, ctl: int) -> int:
    """The ``args`` object at ``p`` (its ``{``): its end; -1 bail, -2 table full."""
    n_ev_keys = _i64(ctl, C_EK_N)
    kinds = _i64(ctl, C_AK_KIND)
    prev = _i64(ctl, C_AK_N)
    p = _ws(b, p + 1, lim)
    if p < lim and _u8(b, p) == 125:
        return p + 1
    while True:
        if p >= lim or _u8(b, p) != 34:
            return -1
        e, esc = _string(b, p, lim)
        if e < 0 or esc:
            return -1
        a = _key(b, p + 1, e - p - 2, ctl, C_AK_TAB, prev)
        p = _ws(b, e, lim)
        if p >= lim or _u8(b, p) != 58:
            return -1
        p = _ws(b, p + 1, lim)
        if p >= lim:
            return -1
        if a < 0:
            p = skip_value(b, p, lim, ctl)
        else:
            prev = a
            p = _value(b, p, lim, _i64(kinds, a), n_ev_keys + a, ev, ctl, False)
        if p < 0:
            return p
        p, end = _after_member(b, p, lim)
        if p < 0:
            return -1
        if end:
            return p


@_jit
def scan_events(
    b: int, pos: int, lim: int, first: bool, max_ev: int, ctl: int
) -> tuple[int, int, int]:
    """Read events of the array whose inside starts at ``pos`` (``lim``: just after its ``]``).

    ``first``: ``pos`` is just after the ``[`` (else just after a ``,``). Returns (status, pos,
    events read); on FULL and GROW, ``pos`` is where to resume with ``first=False`` (GROW: the
    start of the event to read again). The chunk arrays are column-major (field row times
    ``C_STRIDE`` plus event); only present fields are written, so the caller zeroes ``vtype`` of
    the events it took (and of a half-read one) before the next call.
    """
    n_ev_keys = _i64(ctl, C_EK_N)
    kinds = _i64(ctl, C_EK_KIND)
    ts_key = _i64(ctl, C_TS_KEY)
    n = 0
    p = _ws(b, pos, lim)
    if first and p < lim and _u8(b, p) == 93:
        return DONE, p + 1, 0
    while True:
        if n >= max_ev:
            return FULL, p, n
        ev_start = p
        if p >= lim or _u8(b, p) != 123:
            return BAIL, p, n
        prev = n_ev_keys
        p = _ws(b, p + 1, lim)
        if p < lim and _u8(b, p) == 125:
            p += 1
        else:
            while True:
                if p >= lim or _u8(b, p) != 34:
                    return BAIL, p, n
                e, esc = _string(b, p, lim)
                if e < 0 or esc:
                    return BAIL, p, n
                k = _key(b, p + 1, e - p - 2, ctl, C_EK_TAB, prev)
                p = _ws(b, e, lim)
                if p >= lim or _u8(b, p) != 58:
                    return BAIL, p, n
                p = _ws(b, p + 1, lim)
                if p >= lim:
                    return BAIL, p, n
                if k < 0:
                    p = skip_value(b, p, lim, ctl)
                else:
                    prev = k
                    kind = _i64(kinds, k)
                    if kind == K_ARGS:
                        if _u8(b, p) != 123:
                            return BAIL, p, n
                        p = _args(b, p, lim, n, ctl)
                        if p >= 0:
                            _put(ctl, n, k, CONTAINER, 0)
                    else:
                        p = _value(b, p, lim, kind, k, n, ctl, k == ts_key)
                if p == -2:
                    return GROW, ev_start, n
                if p < 0:
                    return BAIL, ev_start, n
                p, end = _after_member(b, p, lim)
                if p < 0:
                    return BAIL, ev_start, n
                if end:
                    break
        n += 1
        p = _ws(b, p, lim)
        if p >= lim:
            return BAIL, p, n
        c = _u8(b, p)
        if c == 44:
            p = _ws(b, p + 1, lim)
        elif c == 93:
            return DONE, p + 1, n
        else:
            return BAIL, p, n


@_jit
def rehash(ctl: int, base: int) -> None:
    """Refill the (new, zeroed) slot table of the intern table at ``base`` from its entries."""
    tab = _i64(ctl, base)
    mask = _i64(ctl, base + 1)
    eh = _i64(ctl, base + 4)
    for k in range(_i64(ctl, base + 6)):
        i = numba.int64(_u64(eh, k) & numba.uint64(mask))
        while _i64(tab, i) != 0:
            i = (i + 1) & mask
        _set_i64(tab, i, k + 1)
