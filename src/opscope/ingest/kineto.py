"""Reader for Kineto / Chrome trace JSON (``torch.profiler`` output), plain or gzip.

Both the current schema (``cpu_op``, ``kernel``, ``cuda_runtime``, ``python_function``, flows
``ac2g``/``fwdbwd``) and the 2021 one (``Operator``, ``Kernel``, ``Runtime``, flows ``async``,
lower-case ``external id``, string tids like ``"stream 7"``) are read; ROCm traces use the same
categories with ``hip*`` names. See docs/loading.md for the mapping.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from opscope.errors import InputError, TruncatedTraceError
from opscope.ingest import fastscan, gz, jsonscan, link, outofcore
from opscope.ingest.jsonscan import ScanError
from opscope.model import Profile, schema

_KIND_OF_CAT = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python_function",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
_FLOW_KIND = {
    "ac2g": "ac2g",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "fwdbwd": "fwdbwd",
    "async_npu": "async_npu",
}
_DEVICE_KINDS = list(schema.DEVICE_KINDS)
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])

ProgressFn = Callable[[str, int, int], None]


def read_kineto(
    path: Path,
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: ProgressFn | None = None,
    rank: int | None = None,
    memory_budget: int | None = None,
) -> Profile:
    """Read one Kineto trace file into a linked Profile.

    ``rank`` overrides the trace's own ``distributedInfo.rank`` (the multi-rank reader passes the
    rank it found in a file name). With ``cache`` the columnar cache (in the user cache dir) is
    used and refreshed (:mod:`opscope.ingest.cache`). Raises :class:`~opscope.errors.InputError`
    subclasses naming the file for unreadable input. ``memory_budget`` (bytes): a trace whose
    in-memory load would exceed it is read through a bounded window
    (:mod:`opscope.ingest.outofcore`; same Profile).
    """
    path = Path(path)
    if cache:
        from opscope.ingest import cache as cache_mod

        hit = cache_mod.lookup(path, salvage=salvage, rank=rank)
        if hit is not None:
            return hit
    prof = parse_kineto(
        path,
        salvage=salvage,
        progress=progress,
        rank=rank,
        memory_budget=memory_budget,
        cache_entry=cache,
    )
    # An out-of-core load wrote its cache entry itself (segment by segment) and returns it
    # opened lazily: storing it again would read every table whole.
    if cache and "out_of_core" not in prof.meta:
        from opscope.ingest import cache as cache_mod

        cache_mod.store(path, prof, salvage=salvage, rank=rank)
    return prof


def parse_kineto(
    path: Path,
    *,
    salvage: bool = False,
    progress: ProgressFn | None = None,
    rank: int | None = None,
    memory_budget: int | None = None,
    cache_entry: bool = False,
) -> Profile:
    """Parse without the cache (see :func:`read_kineto`).

    A trace over the memory budget is linked window by window into a Profile folder
    (:mod:`opscope.ingest.window_link`) and returned opened lazily from it: with
    ``cache_entry`` that folder is the trace's cache entry (when the cache folder is writable),
    else a temporary folder removed once opened (the Profile holds its files open).
    """

    def gz_progress(done: int, total: int) -> None:
        if progress is not None:
            progress("decompress", done, total)

    # Handed over in a list that _parse pops from: no caller frame keeps a reference, so the
    # text is freed before the tables are built (peak memory: 1 GB for a 1 GB trace).
    owned: list[bytes] = []
    if not salvage:
        stream = outofcore.over_budget(path, memory_budget)
        fast = _parse_fast(
            path,
            gz_progress,
            progress,
            rank,
            owned,
            stream=stream,
            budget=memory_budget,
            cache_entry=cache_entry,
        )
        if fast is not None:
            return fast
    if not owned:  # (a .json.gz the scanner stepped aside from is not inflated twice)
        owned.append(gz.read_bytes(path, progress=gz_progress, allow_truncated=salvage))
    try:
        return _parse(
            owned,
            path,
            salvage=salvage,
            progress=progress,
            rank=rank,
        )
    except RecursionError:  # msgspec's decoder on JSON nested thousands of levels deep
        raise InputError("JSON is nested too deeply to read", path) from None


def _parse_fast(
    path: Path,
    gz_progress: Callable[[int, int], None],
    progress: ProgressFn | None,
    rank: int | None,
    inflated: list[bytes],
    *,
    stream: bool = False,
    budget: int | None = None,
    cache_entry: bool = False,
) -> Profile | None:
    """The byte scanner's path (:mod:`opscope.ingest.fastscan`); ``None`` sends the file to the
    reference path, which also reports what is wrong with it (an inflated ``.json.gz`` is then
    left in ``inflated`` for it).

    An uncompressed file is memory-mapped and the pages the scanner has passed are dropped from
    this process (they stay in the page cache): the text never adds its size to the peak.
    With ``stream`` (a trace over the memory budget) the text is read through a bounded window
    and each window's slices are spilled to Parquet (:mod:`opscope.ingest.spill`); where that
    steps aside, a ``.json.gz`` is still inflated through the window (:func:`_parse_stream`).
    """
    if not fastscan.available():
        return None
    if stream:
        from opscope.ingest import spill  # (imports this module)

        spilled = spill.load(
            path, progress, rank, budget=outofcore.budget(budget), cache_entry=cache_entry
        )
        return spilled if spilled is not None else _parse_stream(path, progress, rank)

    def scan_progress(done: int, total: int) -> None:
        if progress is not None:
            progress("parse", done, total)

    mm: mmap.mmap | None = None
    try:
        if gz.is_gzip(path) or path.name.endswith(".gz"):  # (read_bytes rejects a false .gz)
            data: bytes | mmap.mmap = gz.read_bytes(path, progress=gz_progress)
        else:
            with open(path, "rb") as f:
                mm = data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # unreadable, a directory, empty: the reference path says so
        return None
    released = [0]

    def release(pos: int) -> None:
        upto = (pos - _KEEP_BEHIND) // mmap.PAGESIZE * mmap.PAGESIZE
        if mm is not None and upto > released[0] and hasattr(mmap, "MADV_DONTNEED"):
            mm.madvise(mmap.MADV_DONTNEED, released[0], upto - released[0])
            released[0] = upto

    try:
        got = fastscan.scan_document(data, progress=scan_progress, release=release)
    finally:
        if mm is not None:
            with contextlib.suppress(BufferError):  # a view still alive: closed when freed
                mm.close()
    if got is None:
        if isinstance(data, bytes):
            inflated.append(data)
        return None
    del data
    return _scanned_profile(got, path, rank)


def _scanned_profile(
    got: tuple[dict[str, Any], fastscan.Scanned], path: Path, rank: int | None
) -> Profile:
    """The Profile of what the byte scanner read (a whole text or a stream)."""
    header, scanned = got
    cols, exact = scanned.columns()
    del scanned
    held = [cols.frame()]
    cols.frames.clear()
    return _build_profile(held, cols.counters, header, path, {}, exact=exact, rank=rank)


def _parse_stream(path: Path, progress: ProgressFn | None, rank: int | None) -> Profile | None:
    """:func:`_parse_fast` for a ``.json.gz`` inflated on the fly into a bounded window."""
    with gz.Stream(path) as st:

        def stream_progress(_: int) -> None:
            if progress is not None:
                progress("parse", st.consumed, st.size)

        got = fastscan.scan_stream(st.read, progress=stream_progress)
    if got is None:
        return None
    return _scanned_profile(got, path, rank)


#: Text kept mapped behind the scan position (the start of the event being read lies there).
_KEEP_BEHIND = 1 << 20


# --------------------------------------------------------------------------------------------------
# top level


def _first_char(data: bytes) -> tuple[int, bytes]:
    m = re.compile(rb"\S").search(data)
    if m is None:
        return -1, b""
    return m.start(), data[m.start() : m.start() + 1]


def _find_array(data: bytes, raw: msgspec.Raw | None) -> tuple[int, int]:
    """Byte offsets of the ``traceEvents`` array's ``[`` and one past its ``]``."""
    size = None if raw is None else len(memoryview(raw))
    for m in re.finditer(rb'"traceEvents"\s*:\s*\[', data):
        start = m.end() - 1
        if size is None:
            return start, -1
        if data[start + size - 1 : start + size] == b"]":
            return start, start + size
    raise InputError("cannot locate the traceEvents array")


def parse_bytes(
    data: bytes,
    path: Path,
    *,
    salvage: bool = False,
    progress: ProgressFn | None = None,
    rank: int | None = None,
) -> Profile:
    """Parse the (decompressed) bytes of a Kineto trace."""
    return _parse([data], path, salvage=salvage, progress=progress, rank=rank)


def _parse(
    owned: list[bytes],
    path: Path,
    *,
    salvage: bool = False,
    progress: ProgressFn | None = None,
    rank: int | None = None,
) -> Profile:
    """:func:`parse_bytes` on ``owned.pop()``: this frame holds the only reference it takes."""
    data = owned.pop()
    pos, ch = _first_char(data)
    if pos < 0:
        raise InputError("empty file" if not data else "file holds only whitespace", path)
    oddities: dict[str, int] = {}
    header: dict[str, Any] = {}
    salvaged: dict[str, Any] | None = None
    if ch == b"[":
        start, end = pos, len(data.rstrip())
        if not data.rstrip().endswith(b"]"):
            end = -1
    elif ch == b"{":
        try:
            top = _TOP.decode(data)
        except msgspec.DecodeError as e:
            err = jsonscan._decode_error(e, 0)
            # msgspec calls a number cut by the end of input ("1170.", "-", "1e") invalid.
            cut = err.offset is not None and err.offset >= len(data.rstrip())
            if not (err.truncated or cut):
                raise InputError(f"not valid JSON ({_short(e)})", path) from None
            top = None
        if top is not None:
            if "traceEvents" not in top:
                raise InputError("JSON object has no traceEvents: not a Kineto/Chrome trace", path)
            header = {k: _loads(v) for k, v in top.items() if k != "traceEvents"}
            try:
                start, end = _find_array(data, top["traceEvents"])
            except InputError:
                te = _loads(top["traceEvents"])
                raise InputError(
                    f"traceEvents is a {type(te).__name__}, expected an array", path
                ) from None
            del top
        else:
            # Truncated: keep what precedes the array as header, salvage the array.
            m = re.search(rb'"traceEvents"\s*:\s*\[', data)
            if m is None:
                raise TruncatedTraceError(
                    f"trace is truncated at byte {len(data)} (0 complete events before it)"
                    + ("" if salvage else "; rerun with --salvage"),
                    path,
                )
            start, end = m.end() - 1, -1
            header = _salvage_header(data[:start])
    else:
        raise InputError(
            f"not a JSON trace (starts with {data[pos : pos + 16]!r}); expected a Chrome trace "
            "object with traceEvents",
            path,
        )
    if end < 0:
        end, n_ok = _salvage_end(data, start)
        if not salvage:
            raise TruncatedTraceError(
                f"trace is truncated at byte {len(data)} ({n_ok} complete events before it); "
                "rerun with --salvage",
                path,
            )
        salvaged = {"events": n_ok, "reason": f"truncated at byte {len(data)}"}
        data = data[:end] + b"]"
        end = len(data)

    def scan_progress(done: int, total: int) -> None:
        if progress is not None:
            progress("parse", done, total)

    try:
        cols = jsonscan.scan_array(data, start, end, progress=scan_progress)
    except ScanError as e:
        if e.truncated and salvage:  # pragma: no cover - handled above
            raise
        where = f" at byte {e.offset}" if e.offset is not None else ""
        if "Expected" in str(e) or "expected" in str(e):
            cols = _lenient(data, start, end, oddities, path)
        else:
            raise InputError(f"not valid JSON{where} ({e})", path) from None
    raw = cols.frame()
    cols.frames.clear()
    exact = None
    if jsonscan.needs_exact_times(raw.get_column("ts"), raw.get_column("dur"), data, start, end):
        exact = jsonscan.exact_times(data, start, end)
        if exact[0].len() != raw.height:  # the lenient path dropped events: keep float times
            exact = None
    del data
    held = [raw]
    del raw
    prof = _build_profile(held, cols.counters, header, path, oddities, exact=exact, rank=rank)
    if salvaged is not None:
        prof = prof.with_meta(salvaged=salvaged)
    return prof


def _short(e: Exception) -> str:
    s = str(e)
    return s if len(s) < 120 else s[:117] + "..."


def _loads(raw: msgspec.Raw) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _salvage_header(text: bytes) -> dict[str, Any]:
    """Top-level keys written before ``traceEvents`` in a truncated file."""
    body = text.rstrip()
    body = body[: body.rfind(b'"traceEvents"')].rstrip().rstrip(b",")
    try:
        out = json.loads(body.decode("utf-8", "replace") + "}")
        return out if isinstance(out, dict) else {}
    except ValueError:
        return {}


def _salvage_end(data: bytes, start: int) -> tuple[int, int]:
    """For a truncated array starting at ``start``: (end of the last complete event, #events)."""
    n = len(data)
    window = 1 << 20
    tried = 0
    while True:
        lo = max(start, n - window)
        cands = [m.start() + 1 for m in jsonscan._BOUNDARY.finditer(data, lo)]
        last = data.rstrip().rfind(b"}")
        if last >= lo:
            cands.append(last + 1)
        for cut in sorted(set(cands), reverse=True):
            tried += 1
            try:
                cols = jsonscan.scan_array(data[:cut] + b"]", start, cut + 1)
            except ScanError:
                if tried > 64:
                    break
                continue
            return cut, cols.n_events
        if lo == start or tried > 64:
            return start + 1, 0
        window *= 8


def _lenient(
    data: bytes, start: int, end: int, oddities: dict[str, int], path: Path
) -> jsonscan.Columns:
    """Slow path for events whose fields have unexpected types: convert one event at a time,
    dropping (and counting) those that cannot be read."""
    try:
        items = msgspec.json.decode(memoryview(data)[start:end])
    except msgspec.DecodeError as e:
        raise InputError(f"not valid JSON ({_short(e)})", path) from None
    if not isinstance(items, list):
        raise InputError("traceEvents is not an array", path)
    good: list[jsonscan.Event] = []
    for it in items:  # only reached for malformed traces
        try:
            good.append(_EV_DEC.decode(msgspec.json.encode(it)))
        except (msgspec.DecodeError, TypeError):
            cleaned = _clean_event(it)
            if cleaned is None:
                oddities["unreadable event"] = oddities.get("unreadable event", 0) + 1
            else:
                oddities["odd field types"] = oddities.get("odd field types", 0) + 1
                good.append(cleaned)
    out = jsonscan.Columns()
    out.frames.append(jsonscan._build(good))
    out.n_events = len(good)
    return out


_EVENT_KEYS = tuple(f.encode_name for f in msgspec.structs.fields(jsonscan.Event))
_ARG_KEYS = tuple(f.encode_name for f in msgspec.structs.fields(jsonscan.Args))
_EV_DEC = msgspec.json.Decoder(jsonscan.Event, strict=False)
_ARGS_DEC = msgspec.json.Decoder(jsonscan.Args, strict=False)


def _fits(dec: msgspec.json.Decoder[Any], key: str, value: Any) -> bool:
    try:
        dec.decode(msgspec.json.encode({key: value}))
    except (msgspec.DecodeError, TypeError):
        return False
    return True


def _clean_event(it: Any) -> jsonscan.Event | None:
    """The fields of one event that have usable types (the rest dropped)."""
    if not isinstance(it, dict):
        return None
    ev = {k: it[k] for k in _EVENT_KEYS if k in it and k != "args" and _fits(_EV_DEC, k, it[k])}
    args = it.get("args")
    if isinstance(args, dict):
        ev["args"] = {k: args[k] for k in _ARG_KEYS if k in args and _fits(_ARGS_DEC, k, args[k])}
    try:
        out: jsonscan.Event = _EV_DEC.decode(msgspec.json.encode(ev))
    except (msgspec.DecodeError, TypeError):
        return None
    return out


# --------------------------------------------------------------------------------------------------
# tables


def _bump(odd: dict[str, int], key: str, n: int) -> None:
    if n:
        odd[key] = odd.get(key, 0) + int(n)


def _rank_of(header: dict[str, Any], rank: int | None) -> int:
    if rank is not None:
        return int(rank)
    di = header.get("distributedInfo")
    if isinstance(di, str):
        try:
            di = json.loads(di)
        except ValueError:
            di = None
    if isinstance(di, dict):
        r = di.get("rank")
        if isinstance(r, str) and r.strip().isdigit():
            r = int(r)
        # The rank column is Int32: a garbage rank beyond it (or negative) is not a rank.
        if isinstance(r, int) and 0 <= r < 2**31:
            return r
    return 0


def redact(obj: Any) -> Any:
    """Copy of ``obj`` with the values of secret-looking keys replaced by ``"<redacted>"``."""
    # One rule for every reader and output (COOKIE/SESSION names, "NAME=value" lists, depth).
    from opscope.redact import redact as _redact

    return _redact(obj)


def _track_ids(num: pl.Expr, text: pl.Expr) -> pl.Expr:
    """Numeric pid/tid: the number, else the digits a string ends with ("stream 7" -> 7)."""
    return pl.coalesce(num, text.str.extract(r"(-?\d+)\s*$", 1).cast(pl.Int64, strict=False))


def _compact_numeric(text: pl.Expr) -> pl.Expr:
    return text.str.replace_all(r"\s+", "")


def _compact_strings(text: pl.Expr) -> pl.Expr:
    return (
        text.str.replace_all(r'",\s+"', '","')
        .str.replace_all(r"\[\s+", "[")
        .str.replace_all(r"\s+\]", "]")
    )


def build_profile(
    raw: pl.DataFrame,
    counters: list[jsonscan.CounterEvent],
    header: dict[str, Any],
    path: Path,
    oddities: dict[str, int],
    *,
    exact: tuple[pl.Series, pl.Series] | None = None,
    rank: int | None = None,
) -> Profile:
    """Turn decoded columns into linked Profile tables (all vectorised)."""
    return _build_profile([raw], counters, header, path, oddities, exact=exact, rank=rank)


def _build_profile(
    held: list[pl.DataFrame],
    counters: list[jsonscan.CounterEvent],
    header: dict[str, Any],
    path: Path,
    oddities: dict[str, int],
    *,
    exact: tuple[pl.Series, pl.Series] | None = None,
    rank: int | None = None,
) -> Profile:
    """:func:`build_profile` on ``held.pop()``, which is dropped before linking (peak memory)."""
    # raw is only ever referenced from this list, so _events_table can free it (the largest
    # object here) as soon as the events are selected, before they are sorted (peak memory).
    raw = [_with_times_and_tracks(held.pop(), exact)]
    rk = _rank_of(header, rank)
    raw_flows = _raw_flows(raw[0], rk, oddities)
    mem = _memory_rows(raw[0], rk)
    names = _thread_names(raw[0])
    notes = _format_notes(raw[0])
    # (no local name for the events: _linked_profile frees them once linked)
    return _linked_profile(
        [_events_table(raw, rk, oddities)],
        raw_flows,
        mem,
        names,
        notes,
        counters,
        header,
        path,
        oddities,
        rk,
    )


def _linked_profile(
    held: list[pl.DataFrame],
    raw_flows: pl.DataFrame,
    mem: pl.DataFrame,
    names: pl.DataFrame,
    notes: list[str],
    counters: list[jsonscan.CounterEvent],
    header: dict[str, Any],
    path: Path,
    oddities: dict[str, int],
    rk: int,
) -> Profile:
    """The Profile of the unlinked events table ``held.pop()`` (in time order, ids 0..n-1) and
    the small tables selected beside it (the in-memory and the spilled load's common end)."""
    events = held.pop()
    linked = link.link_events(events, raw_flows)
    del events
    n_flow_pairs = raw_flows.filter(pl.col("phase") == "s").height
    del raw_flows
    _bump(oddities, "flow not bound to events", max(0, n_flow_pairs - linked.flows.height))
    memory = link.link_memory(linked.events, mem, linked.steps, index=linked.index)
    meta = _profile_meta(header, path, oddities, notes, rk)
    return Profile.from_tables(
        meta=meta,
        events=linked.events,
        flows=linked.flows,
        stacks=linked.stacks,
        memory=memory,
        counters=_counters(counters, rk),
        steps=linked.steps,
        devices=_devices(header, rk),
        threads=_threads(linked.events, names, rk),
    )


def _profile_meta(
    header: dict[str, Any], path: Path, oddities: dict[str, int], notes: list[str], rk: int
) -> dict[str, Any]:
    """The Profile's meta (the in-memory and the windowed load's)."""
    meta: dict[str, Any] = {
        "format": "kineto",
        "sources": [str(path)],
        "ranks": [rk],
        "oddities": oddities,
        "trace_meta": {str(rk): redact(header)},
    }
    base = header.get("baseTimeNanoseconds")
    if isinstance(base, int):
        meta["base_time_ns"] = base
    if notes:
        meta["notes"] = notes
    return meta


def _format_notes(raw: pl.DataFrame) -> list[str]:
    """What the user must know about this trace's kind (meta ``notes``).

    A CUPTI range-profiler trace (``cuda_profiler_range``: one slice per kernel holding hardware
    counters) replays each kernel under the counters: its slices are laid back to back with one
    made-up duration, so they are not kernel times and are not read as kernels.
    """
    ranges = raw.filter(_CAT_L == "cuda_profiler_range")
    if not ranges.height:
        return []
    durs = ranges.get_column("dur_ns").drop_nulls().unique()
    same = f", all {durs.item() / 1000:g} us long" if durs.len() == 1 else ""
    return [
        f"CUPTI range-profiler trace: {ranges.height} kernels recorded as hardware-counter "
        f"ranges (cuda_profiler_range{same}), not timed; not read as kernels"
    ]


def _with_times_and_tracks(
    raw: pl.DataFrame, exact: tuple[pl.Series, pl.Series] | None
) -> pl.DataFrame:
    """``raw`` plus int ns times (``ts_ns``, ``dur_ns``) and numeric tracks (``pid_n``,
    ``tid_n``)."""
    if exact is not None:
        ts_ns, dur_ns = exact
        raw = raw.with_columns(ts_ns.alias("ts_ns"), dur_ns.alias("dur_ns"))
    else:
        raw = raw.with_columns(
            jsonscan.float_us_to_ns(pl.col("ts")).alias("ts_ns"),
            jsonscan.float_us_to_ns(pl.col("dur")).alias("dur_ns"),
        )
    raw = raw.with_columns(
        _track_ids(pl.col("pid"), pl.col("pid_str")).alias("pid_n"),
        _track_ids(pl.col("tid"), pl.col("tid_str")).alias("tid_n"),
    )
    # A handful of distinct categories over millions of rows: lower-cased once each.
    cat_l = _per_distinct(raw.get_column("cat"), lambda e: e.str.to_lowercase())
    raw = raw.with_columns(cat_l.alias("cat_l"))
    # Non-numeric track names ("Spans", "") get stable negative ids.
    for c in ("pid", "tid"):
        bad = raw.get_column(f"{c}_n").is_null() & raw.get_column(f"{c}_str").is_not_null()
        if bad.any():
            raw = raw.with_columns(
                pl.when(pl.col(f"{c}_n").is_null() & pl.col(f"{c}_str").is_not_null())
                .then(-1 - pl.col(f"{c}_str").rank("dense").cast(pl.Int64))
                .otherwise(pl.col(f"{c}_n"))
                .alias(f"{c}_n")
            )
    return raw


_PH = pl.col("ph")
_CAT_L = pl.col("cat_l")  # lower-case cat, added by _with_times_and_tracks


def _events_table(raw: list[pl.DataFrame], rk: int, oddities: dict[str, int]) -> pl.DataFrame:
    """The slices (``ph: "X"``) of ``raw.pop()`` as EVENTS rows in time order, ids 0..n-1 (before
    linking). The decoded frame is taken apart column by column as the rows are selected."""
    frame = raw.pop()
    _bump(
        oddities,
        "unsupported phase",
        frame.select((~_PH.is_in(["X", "i", "I", "s", "f", "t", "M", "C", "R", "n"])).sum()).item(),
    )
    is_slice = (_PH == "X") & (_CAT_L.fill_null("") != "trace")
    has_ts = pl.col("ts_ns").is_not_null()
    # Lazy: only the five columns the counts read are filtered.
    odd = (
        frame.lazy()
        .filter(is_slice)
        .select(
            pl.col("ts_ns").is_null().sum().alias("no_ts"),
            (has_ts & pl.col("dur_ns").is_null()).sum().alias("no_dur"),
            (has_ts & (pl.col("dur_ns") < 0)).sum().alias("neg"),
            (has_ts & pl.col("name").is_null()).sum().alias("no_name"),
            (has_ts & (pl.col("pid_n").is_null() | pl.col("tid_n").is_null()))
            .sum()
            .alias("no_track"),
        )
        .collect()
    )
    _bump(oddities, "slice without ts (dropped)", int(odd.item(0, "no_ts")))
    _bump(oddities, "slice without dur (0 used)", int(odd.item(0, "no_dur")))
    _bump(oddities, "negative duration (clamped to 0)", int(odd.item(0, "neg")))
    _bump(oddities, "slice without name", int(odd.item(0, "no_name")))
    _bump(oddities, "slice without pid/tid", int(odd.item(0, "no_track")))
    rows = frame.select(pl.arg_where(is_slice & has_ts)).to_series()
    # One column at a time: each decoded column is freed as soon as its slice rows are gathered,
    # so the frame shrinks while the slices grow (a frame-wide filter, even streaming, held
    # ~1.2 GB of both at once for a 1 GB trace).
    exprs = _event_columns(rk)
    needed = {name for e in exprs for name in e.meta.root_names()}
    for name in [c for c in frame.columns if c not in needed]:
        frame.drop_in_place(name)
    xs = pl.DataFrame([frame.drop_in_place(name).gather(rows) for name in frame.columns])
    del frame
    events = xs.select(exprs)
    del xs
    held = [_clean_distinct(events)]
    del events
    return _sorted_by_time(held)


def _sorted_by_time(held: list[pl.DataFrame]) -> pl.DataFrame:
    """``held.pop()`` stably sorted by ``ts_ns``, with ``id`` = row number in front.

    A few columns at a time, each batch dropped once gathered: a frame-wide sort holds both
    copies of every column at once (peak memory), one column at a time gives up the threads.
    """
    events = held.pop()
    order = events.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).sort_by("ts_ns", maintain_order=True)
    ).to_series()
    parts = [pl.int_range(events.height, dtype=pl.Int64, eager=True).alias("id").to_frame()]
    names = events.columns
    for i in range(0, len(names), _SORT_BATCH):
        batch = names[i : i + _SORT_BATCH]
        parts.append(events.select(batch)[order])
        events = events.drop(batch)
    return pl.concat(parts, how="horizontal")


_SORT_BATCH = 8  # columns gathered together by _sorted_by_time


def _event_columns(rk: int) -> list[pl.Expr]:
    kind = (
        pl.when(
            pl.col("name").str.contains(r"^ProfilerStep#\d+$").fill_null(False)
            & _CAT_L.is_in(["cpu_op", "operator", "user_annotation"])
        )
        .then(pl.lit("step", schema.EventKind))
        # straight to the Enum: no String column in between
        .otherwise(
            _CAT_L.replace_strict(_KIND_OF_CAT, default="other", return_dtype=schema.EventKind)
        )
    )
    # Never "step" for a device category, so the category alone tells (no string per row).
    is_dev = _CAT_L.is_in([c for c, k in _KIND_OF_CAT.items() if k in _DEVICE_KINDS])
    extra = pl.struct(
        [pl.col(field).alias(key) for field, key in jsonscan.EXTRA_ARGS if field != "pg_ranks"]
        + [pl.col("pg_ranks").alias("Process Group Ranks")]
    )
    any_extra = pl.any_horizontal([pl.col(f).is_not_null() for f, _ in jsonscan.EXTRA_ARGS])
    return [
        pl.lit(rk, pl.Int32).alias("rank"),
        kind.alias("kind"),
        pl.col("name").fill_null(""),
        pl.col("pid_n").alias("pid"),
        pl.col("tid_n").alias("tid"),
        pl.col("ts_ns"),
        pl.col("dur_ns").fill_null(0).clip(lower_bound=0).alias("dur_ns"),
        pl.when(is_dev)
        .then(pl.coalesce(pl.col("device"), pl.col("pid_n")))
        .otherwise(None)
        .cast(pl.Int32)
        .alias("device"),
        pl.when(is_dev)
        .then(pl.coalesce(pl.col("stream"), pl.col("tid_n")))
        .otherwise(None)
        .alias("stream"),
        pl.coalesce("external_id", "external_id_2021").alias("external_id"),
        pl.col("correlation"),
        pl.col("seq"),
        pl.col("fwd_tid"),
        pl.col("flops").round(0).cast(pl.Int64, strict=False).alias("flops"),
        # Texts cleaned by _clean_distinct once the rows are collected.
        pl.col("input_dims"),
        pl.col("input_types"),
        pl.col("input_strides"),
        pl.col("concrete_inputs"),
        pl.coalesce("bytes_", "size").round(0).cast(pl.Int64, strict=False).alias("bytes"),
        pl.col("grid"),
        pl.col("block"),
        pl.col("grid").alias("blocks"),
        pl.col("registers").cast(pl.Int32, strict=False),
        pl.col("shared_mem").alias("shared_mem"),
        pl.col("occupancy").cast(pl.Float64),
        pl.col("python_id"),
        pl.col("python_parent_id"),
        pl.when(any_extra).then(extra.struct.json_encode()).otherwise(None).alias("args"),
        pl.col("call_stack"),
        pl.col("module_hierarchy"),
    ]


def _blocks(grid: pl.Expr) -> pl.Expr:
    """Thread blocks of a launch: the product of its grid dims, for a plain ``[x, y, z]``."""
    dims = grid.str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64))
    return (
        pl.when(grid.str.contains(r"^\s*\[[\d,\s]*\]\s*$").fill_null(False))
        .then(dims.list.eval(pl.element().product()).list.first())
        .otherwise(None)
    )


# column -> how its raw JSON text is cleaned (``blocks`` is computed from the grid text)
_CLEAN: dict[str, Callable[[pl.Expr], pl.Expr]] = {
    "input_dims": _compact_numeric,
    "input_types": _compact_strings,
    "input_strides": _compact_numeric,
    "concrete_inputs": _compact_strings,
    "grid": _compact_numeric,
    "block": _compact_numeric,
    "blocks": _blocks,
}


def _clean_distinct(events: pl.DataFrame) -> pl.DataFrame:
    """Apply :data:`_CLEAN` once per distinct text: shapes and launch configs repeat every step
    (a few hundred distinct texts over millions of rows), and the regexes cost ~5x the lookup."""
    return events.with_columns(_per_distinct(events.get_column(c), f) for c, f in _CLEAN.items())


def _per_distinct(s: pl.Series, fn: Callable[[pl.Expr], pl.Expr]) -> pl.Series:
    """``fn`` applied to each distinct value of ``s`` once, then spread back to every row."""
    u = s.unique().drop_nulls()
    mapped = pl.DataFrame({"v": u}).select(fn(pl.col("v"))).to_series()
    if u.len() == 0:
        return pl.repeat(None, s.len(), dtype=mapped.dtype, eager=True).alias(s.name)
    # Through an Enum of the distinct values: its codes index ``mapped`` (nulls stay null), ~3x
    # cheaper than a replace's hash per row.
    codes = s.cast(pl.Enum(u)).to_physical()
    return mapped.gather(codes).alias(s.name)


def _raw_flows(raw: pl.DataFrame, rk: int, oddities: dict[str, int]) -> pl.DataFrame:
    """Flow records (``s``/``f``/``t``) as :data:`~opscope.ingest.link.RAW_FLOWS` rows."""
    fl = raw.lazy().filter(_PH.is_in(["s", "f", "t"]))
    no_id = fl.select(pl.col("id").is_null().sum()).collect().item()
    _bump(oddities, "flow without id (dropped)", int(no_id))
    return (
        fl.filter(pl.col("id").is_not_null() & pl.col("ts_ns").is_not_null())
        .select(
            pl.lit(rk, pl.Int32).alias("rank"),
            _CAT_L.replace_strict(_FLOW_KIND, default="other").cast(schema.FlowKind).alias("kind"),
            pl.col("id").alias("flow_id"),
            pl.col("ph").alias("phase"),
            pl.col("pid_n").alias("pid"),
            pl.col("tid_n").alias("tid"),
            pl.col("ts_ns"),
        )
        .collect()
    )


def _memory_rows(raw: pl.DataFrame, rk: int) -> pl.DataFrame:
    """``[memory]`` instants, with their pid/tid for :func:`link.link_memory`."""
    return (
        raw.lazy()
        .filter(_PH.is_in(["i", "I"]) & (pl.col("name") == "[memory]"))
        .select(
            pl.lit(rk, pl.Int32).alias("rank"),
            pl.col("ts_ns"),
            pl.col("mem_bytes").alias("bytes"),
            pl.col("addr"),
            pl.col("total_allocated"),
            pl.col("total_reserved"),
            pl.col("device_type").cast(pl.Int32),
            pl.col("device_id").cast(pl.Int32).alias("device"),
            pl.col("pid_n").alias("pid"),
            pl.col("tid_n").alias("tid"),
        )
        .collect()
    )


def _thread_names(raw: pl.DataFrame) -> pl.DataFrame:
    """``thread_name`` metadata: ``pid``, ``tid``, ``tn`` (the first name given per track), and
    ``process_name`` metadata as rows with a null ``tid`` (the first name given per process)."""
    names = (
        raw.lazy()
        .filter((_PH == "M") & pl.col("name").is_in(["thread_name", "process_name"]))
        .select(
            pl.col("pid_n").alias("pid"),
            pl.when(pl.col("name") == "thread_name").then(pl.col("tid_n")).alias("tid"),
            pl.col("meta_name").alias("tn"),
            (pl.col("name") == "process_name").alias("_proc"),
        )
        .filter(pl.col("tn").is_not_null() | ~pl.col("_proc"))
        .collect()
    )
    return names.unique(["pid", "tid", "_proc"], keep="first", maintain_order=True)


def _threads(events: pl.DataFrame, names: pl.DataFrame, rk: int) -> pl.DataFrame:
    """The THREADS table: host tracks named "PROCESS · THREAD" where the trace names the process
    (``process_name``: "python3 · thread 19392 (python3)"), as the Ascend reader names its
    tracks, so the viewer's group header shows the process. Device streams keep their own name:
    Kineto gives a GPU's pid the host process's name ("python3"), which says less than the
    device header the viewer already shows."""
    return _threads_of(_tracks(events), names, rk)


def _tracks(events: pl.DataFrame) -> pl.DataFrame:
    """``pid, tid, is_device`` of each track of ``events`` (any order)."""
    dev = pl.Series("dev", link.kind_mask(events, *_DEVICE_KINDS))
    return (
        events.select("pid", "tid")
        .with_columns(dev)
        .group_by(["pid", "tid"])
        .agg(pl.col("dev").any().alias("is_device"))
    )


def _threads_of(tracks: pl.DataFrame, names: pl.DataFrame, rk: int) -> pl.DataFrame:
    """:func:`_threads` from the tracks (:func:`_tracks`, whole trace)."""
    procs = names.filter(pl.col("_proc")).select("pid", pl.col("tn").alias("_pn"))
    names = names.filter(~pl.col("_proc")).drop("_proc")
    device_pids = tracks.filter(pl.col("is_device")).get_column("pid").unique().implode()
    out = (
        tracks.join(names, on=["pid", "tid"], how="full", coalesce=True)
        .join(procs, on="pid", how="left")
        .select(
            pl.lit(rk, pl.Int32).alias("rank"),
            "pid",
            "tid",
            pl.when(pl.col("tn").is_not_null() & pl.col("_pn").is_not_null())
            .then(
                pl.when(pl.col("pid").is_in(device_pids))
                .then(pl.col("tn"))
                .otherwise(pl.format("{} · {}", pl.col("_pn"), pl.col("tn")))
            )
            .when(pl.col("tn").is_not_null())
            .then(pl.col("tn"))
            .when(pl.col("is_device").fill_null(False))
            .then(pl.format("stream {}", pl.col("tid")))
            .otherwise(None)
            .alias("name"),
            pl.col("is_device").fill_null(False),
        )
    )
    return schema.conform("threads", out.sort(["pid", "tid"]))


def _counters(counters: list[jsonscan.CounterEvent], rk: int) -> pl.DataFrame:
    rows: list[tuple[str, Any, float]] = []
    for c in counters:  # counter records are few (one per sample)
        if c.args is None or c.ts is None:
            continue
        try:
            vals = msgspec.json.decode(c.args)
        except msgspec.DecodeError:
            continue
        if not isinstance(vals, dict):
            continue
        for k, v in vals.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                series = f"{c.name}.{k}" if c.name and k != c.name else (c.name or k)
                rows.append((series, c.ts, float(v)))
    if not rows:
        return schema.empty("counters")
    df = pl.DataFrame(
        rows, schema={"name": pl.String, "ts": pl.Float64, "value": pl.Float64}, orient="row"
    )
    df = df.select(
        pl.lit(rk, pl.Int32).alias("rank"),
        "name",
        jsonscan.float_us_to_ns(pl.col("ts")).alias("ts_ns"),
        "value",
    )
    return schema.conform("counters", df)


def _devices(header: dict[str, Any], rk: int) -> pl.DataFrame:
    props = header.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return schema.empty("devices")
    amd = any(k.startswith(("hip_", "roctracer")) for k in header)
    rows = []
    for i, d in enumerate(props):  # one row per device
        if not isinstance(d, dict):
            continue
        name = str(d.get("name", ""))
        low = name.lower()
        if amd or "amd" in low or "instinct" in low or re.search(r"\bmi\d{3}", low):
            vendor = "amd"
        elif "ascend" in low:
            vendor = "ascend"
        else:
            vendor = "nvidia"
        major, minor = d.get("computeMajor"), d.get("computeMinor")
        cc = f"{major}.{minor}" if major is not None and minor is not None else None
        dev_id = d.get("id", i)
        rows.append(
            {
                "rank": rk,
                "device": int(dev_id) if isinstance(dev_id, int) else i,
                "name": name,
                "vendor": vendor,
                "compute_units": d.get("numSms") if isinstance(d.get("numSms"), int) else None,
                "memory_bytes": d.get("totalGlobalMem")
                if isinstance(d.get("totalGlobalMem"), int)
                else None,
                "compute_capability": cc,
            }
        )
    return schema.conform("devices", pl.DataFrame(rows, schema=dict(schema.DEVICES)))
