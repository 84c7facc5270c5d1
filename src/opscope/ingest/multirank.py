"""Reader for a directory holding several ranks of Kineto traces and/or Ascend directories.

Discovery (:func:`list_ranks`): Kineto traces (``*.json``, ``*.json.gz``, ``*.pt.trace.json.gz``)
found recursively up to :data:`MAX_DEPTH` folders down, and ``*_ascend_pt`` (or any folder with an
``ASCEND_PROFILER_OUTPUT``) directories. A folder holding only a bare ``kernel_details.csv`` is one
Ascend rank. The rank of each input is, in order of preference:

1. Kineto: the trace's own ``distributedInfo.rank`` (read by decoding the JSON object's leading
   keys, never by searching the text);
2. Ascend: ``profiler_info_N.json`` (its ``rank_id``, else the ``N``);
3. the file or folder name: ``rank-3``, ``rank3``, ``_rank_3``, ``worker3``, ``rank_3_ascend_pt``;
4. the input's position in sorted order (ranks not yet taken).

Two inputs claiming the same rank is an :class:`~opscope.errors.InputError` naming both. A JSON
file that is not a trace (``config.json``, ``truth.json``, any object without ``traceEvents``,
torch's memory timeline export; judged from its head by :mod:`opscope.ingest.detect`) is skipped,
and ``meta["notes"]`` names it.

Reading (:func:`read_directory`): each rank is read by its format's reader. With more than one
worker, ranks are read in a process pool started with ``spawn`` (forking a process after Polars
has started its threads can deadlock); each worker's reader writes the rank's columnar cache
entry (:mod:`opscope.ingest.cache`; a temporary :meth:`Profile.save` folder when there is no
cache) and returns only the folder's path, and the parent opens those folders: no DataFrame is
pickled back. The ranks are then joined with :func:`opscope.model.concat`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zlib
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from opscope.errors import InputError
from opscope.ingest import ascend, detect
from opscope.ingest.registry import Progress, reader
from opscope.model import Profile, concat

#: How many folders below the given directory are searched for traces.
MAX_DEPTH = 4
_KINETO_SUFFIXES = (".json", ".json.gz")
_SKIP_JSON = re.compile(
    r"^(run|model|profiler_info.*|profiler_metadata|communication.*|meta|trace_view)\.json$"
)
_RANK_NAME = re.compile(r"(?:rank|worker)[-_ ]?(\d+)", re.IGNORECASE)
#: Leading bytes of a Kineto trace read to find ``distributedInfo`` (it precedes traceEvents).
_HEAD_BYTES = 1 << 20


def list_ranks(path: Path) -> list[tuple[int, Path, str]]:
    """``(rank, input path, format)`` for every rank under ``path``, sorted by rank.

    ``format`` is ``"kineto"`` or ``"ascend"``. Raises :class:`InputError` when nothing readable
    is found or two inputs claim the same rank.
    """
    path = Path(path)
    if not path.is_dir():
        raise InputError("not a directory", path)
    return discover(path)[0]


def discover(path: Path) -> tuple[list[tuple[int, Path, str]], list[str]]:
    """:func:`list_ranks`, and a note for each JSON file skipped as not a trace (a
    ``config.json``, a ``truth.json``, torch's memory timeline export: see
    :mod:`opscope.ingest.detect`)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError("not a directory", path)
    found: list[tuple[int | None, Path, str]] = []
    if ascend.is_ascend_dir(path):
        return [(_ascend_rank(path, 0), path, "ascend")], []
    skipped: list[str] = []
    for item, fmt in _discover(path, 0):
        if fmt == "kineto":
            shape = detect.classify(item)
            if shape.kind != "trace":
                rel = item.relative_to(path)
                skipped.append(f"skipped {rel}: {shape.describe()}")
                continue
        if fmt == "ascend":
            found.append((_ascend_rank_or_none(item), item, fmt))
        else:
            r = kineto_rank(item)
            found.append((r if r is not None else _name_rank(item), item, fmt))
    if not found:
        why = f" ({len(skipped)} JSON files are not traces: {skipped[0]})" if skipped else ""
        raise InputError(
            "no Kineto traces (*.json, *.json.gz) or Ascend *_ascend_pt directories found" + why,
            path,
        )
    taken: dict[int, Path] = {}
    for r, p, _ in found:
        if r is None:
            continue
        if r in taken:
            raise InputError(
                f"rank {r} claimed by both {taken[r]} and {p}; give each rank its own folder",
                path,
            )
        taken[r] = p
    free = (i for i in range(len(found) + len(taken) + 1) if i not in taken)
    out = [(r if r is not None else next(free), p, fmt) for r, p, fmt in found]
    return sorted(out, key=lambda t: t[0]), skipped


def read_directory(
    path: Path,
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Profile:
    """Read every rank under ``path`` (see :func:`list_ranks`) into one Profile.

    ``workers``: processes to use (default: up to 4, fewer on fewer CPUs, 1 for a single rank).
    A directory holding one Ascend rank (or only a ``kernel_details.csv``) is read directly.
    """
    path = Path(path)
    ranks, skipped = discover(path)
    if len(ranks) == 1 and ranks[0][1] == path:
        return ascend.read_ascend(path, salvage=salvage, cache=cache, progress=progress)
    profiles = read_inputs(ranks, salvage=salvage, cache=cache, progress=progress, workers=workers)
    formats = {p.meta.get("format") for p in profiles}
    meta: dict[str, Any] = {
        "format": formats.pop() if len(formats) == 1 else "mixed",
        "sources": [str(p) for _, p, _ in ranks],
        "rank_sources": {str(r): str(p) for r, p, _ in ranks},
        "oddities": _merge_counts([dict(p.meta.get("oddities", {})) for p in profiles]),
        "notes": skipped
        + [
            f"rank {r}: {n}"
            for (r, _, _), p in zip(ranks, profiles, strict=True)
            for n in p.meta.get("notes") or []
        ],
        "trace_meta": {
            str(r): rank_header(p) for (r, _, _), p in zip(ranks, profiles, strict=True)
        },
    }
    salvaged = [p.meta["salvaged"] for p in profiles if "salvaged" in p.meta]
    if salvaged:
        meta["salvaged"] = {
            "events": sum(int(s.get("events", 0)) for s in salvaged),
            "reason": "; ".join(str(s.get("reason")) for s in salvaged),
        }
    return concat(profiles, meta=meta)


#: Below this much input in all, ranks are read in-process: starting spawn workers (each imports
#: Polars afresh) costs 1-2 s, more than reading a few small traces (measured 2 s vs 0.13 s for a
#: cached run directory).
POOL_MIN_BYTES = 32 * 1024 * 1024


def _input_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def read_inputs(
    items: list[tuple[int, Path, str]],
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
) -> list[Profile]:
    """Read each ``(rank, path, format)`` with its format's reader, in a spawn process pool
    when ``workers`` > 1 (default: in-process below :data:`POOL_MIN_BYTES` of input, else up to
    4 workers, never more than the CPUs or the inputs).

    Each worker's reader writes the input's cache entry (:mod:`opscope.ingest.cache`) and the
    worker returns that folder's path; without a cache entry it saves the Profile to a
    temporary folder instead. The parent opens the folder: no DataFrame is pickled back.
    Results keep the order of ``items``; every table's ``rank`` is set.
    """
    if workers is None:
        small = sum(_input_bytes(p) for _, p, _ in items) < POOL_MIN_BYTES
        workers = 1 if small else min(4, os.cpu_count() or 1, len(items))
    n = workers
    n = max(1, min(n, len(items)))
    profiles: list[Profile] = []
    if n == 1:
        for i, (r, p, fmt) in enumerate(items):
            profiles.append(_with_rank(_read_one(p, fmt, salvage, cache, r), r))
            if progress is not None:
                progress("ranks", i + 1, len(items))
        return profiles
    tmp = Path(tempfile.mkdtemp(prefix="opscope-ranks-"))
    try:
        jobs = [
            (str(p), fmt, r, salvage, cache, str(tmp / f"input{i}"))
            for i, (r, p, fmt) in enumerate(items)
        ]
        with ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn")) as pool:
            for i, (saved, r) in enumerate(pool.map(_worker, jobs)):
                profiles.append(_with_rank(Profile.open(saved), r))
                if progress is not None:
                    progress("ranks", i + 1, len(items))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return profiles


# ---------------------------------------------------------------------------------------------


def _worker(job: tuple[str, str, int, bool, bool, str]) -> tuple[str, int]:
    src, fmt, rank, salvage, cache, out = job
    prof = _read_one(Path(src), fmt, salvage, cache, rank)
    # The reader wrote its cache entry: hand the parent that folder. Otherwise (cache off, or
    # nowhere writable, or an output too small to cache) save the Profile for it.
    entry = _fresh_entry(Path(src), fmt, salvage, rank) if cache else None
    if entry is not None:
        return str(entry), rank
    prof.save(out)
    return out, rank


def _fresh_entry(src: Path, fmt: str, salvage: bool, rank: int) -> Path | None:
    """The cache folder holding ``src``'s current entry (checked by its key, not opened)."""
    from opscope.ingest import cache as cache_mod

    anchor = ascend.cache_anchor(src) if fmt == "ascend" else src
    if anchor is None:
        return None
    try:
        key = cache_mod.cache_key(anchor, salvage=salvage, rank=None if fmt == "ascend" else rank)
    except OSError:
        return None
    for entry in cache_mod.candidates(anchor):
        try:
            stored = json.loads((entry / "meta.json").read_text()).get("cache_key")
        except (OSError, ValueError):
            continue
        if stored == key:
            return entry
    return None


def _read_one(path: Path, fmt: str, salvage: bool, cache: bool, rank: int) -> Profile:
    if fmt == "ascend":
        return ascend.read_ascend(path, salvage=salvage, cache=cache, progress=None)
    fn = reader("kineto")
    return fn(path, salvage=salvage, cache=cache, progress=None, rank=rank)


def _with_rank(p: Profile, rank: int) -> Profile:
    """Set every table's ``rank`` to the rank this input was assigned."""
    import polars as pl

    tables = {}
    for name in ("events", "flows", "memory", "counters", "steps", "devices", "threads", "metrics"):
        df = p.table(name)
        tables[name] = df.with_columns(pl.lit(rank, pl.Int32).alias("rank"))
    return p.with_tables(**tables).with_meta(ranks=[rank])


def rank_header(p: Profile) -> dict[str, Any]:
    """A one-rank profile's own header: its ``trace_meta`` holds just ``{rank: header}``."""
    tm = p.meta.get("trace_meta") or {}
    if isinstance(tm, dict) and len(tm) == 1:
        inner = next(iter(tm.values()))
        return dict(inner) if isinstance(inner, dict) else {}
    return dict(tm) if isinstance(tm, dict) else {}


def _merge_counts(dicts: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _discover(path: Path, depth: int) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    try:
        entries = sorted(path.iterdir())
    except OSError:
        return out
    for e in entries:
        if e.name.startswith("."):
            continue
        if e.is_dir():
            if ascend.is_ascend_dir(e):
                out.append((e, "ascend"))
            elif depth < MAX_DEPTH:
                out.extend(_discover(e, depth + 1))
        elif e.is_file() and e.name.endswith(_KINETO_SUFFIXES) and not _SKIP_JSON.match(e.name):
            out.append((e, "kineto"))
    return out


def _name_rank(path: Path) -> int | None:
    for part in (path.name, path.parent.name):
        m = _RANK_NAME.search(part)
        if m:
            return int(m.group(1))
    return None


def _ascend_rank_or_none(path: Path) -> int | None:
    r = ascend.rank_of(ascend.find_output_dir(path))
    return r if r is not None else _name_rank(path)


def _ascend_rank(path: Path, default: int) -> int:
    r = _ascend_rank_or_none(path)
    return default if r is None else r


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        raw = f.read(_HEAD_BYTES)
    if raw[:2] != b"\x1f\x8b":
        return raw
    d = zlib.decompressobj(wbits=31)
    try:
        return d.decompress(raw, _HEAD_BYTES)
    except zlib.error:
        return b""


def kineto_rank(path: Path) -> int | None:
    """``distributedInfo.rank`` of a Kineto trace, decoded from the JSON object's leading keys.

    Walks the top-level ``"key": value`` pairs with a JSON decoder until ``traceEvents`` (or the
    end of the first MiB); returns None when the trace has no ``distributedInfo`` there.
    """
    text = _head(path).decode("utf-8", "replace")
    dec = json.JSONDecoder()
    i = detect.skip_ws(text, 0)
    if i >= len(text) or text[i] != "{":
        return None
    i += 1
    while True:
        i = detect.skip_ws(text, i)
        if i >= len(text) or text[i] == "}":
            return None
        try:
            key, i = dec.raw_decode(text, i)
        except ValueError:
            return None
        i = detect.skip_ws(text, i)
        if i >= len(text) or text[i] != ":":
            return None
        i = detect.skip_ws(text, i + 1)
        if key == "traceEvents":
            return None
        try:
            value, i = dec.raw_decode(text, i)
        except ValueError:
            return None
        if key == "distributedInfo" and isinstance(value, dict):
            r = value.get("rank")
            return r if isinstance(r, int) and r >= 0 else None
        i = detect.skip_ws(text, i)
        if i < len(text) and text[i] == ",":
            i += 1
