"""Columnar cache of loaded traces: a second ``load`` of an unchanged file reads Parquet.

An entry is a directory written by :meth:`Profile.save`, keyed by the source's size, mtime_ns,
absolute path, :data:`~opscope.model.schema.SCHEMA_VERSION`, :data:`LAYOUT`, the opscope version
and the read options (salvage, rank). It lives beside the trace as ``.<tracename>.opscope/`` (one
per trace, so two traces in one folder never share an entry) or, when that folder is not
writable, under ``$XDG_CACHE_HOME/opscope`` (default ``~/.cache/opscope``) in a folder named after
a hash of the trace's absolute path. A stale or other-version entry is rebuilt.
``OPSCOPE_CACHE_DIR`` forces the fallback location (handy for read-only data sets).

A hit is opened lazily (``Profile.open(lazy=True)``): each table is parsed on its first use, so a
reopen costs what the caller reads.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from opscope import __version__
from opscope.model import Profile, schema

# How an entry is written (compression, meta.json's table sizes); part of the key, so entries of
# another layout are rebuilt. 2: zstd-1 Parquet without statistics, table sizes in meta.json.
LAYOUT = 2


def _abs(path: Path) -> Path:
    return Path(os.path.abspath(path))


def cache_key(path: Path, *, salvage: bool = False, rank: int | None = None) -> dict[str, Any]:
    """What must match for an entry to be reused."""
    st = path.stat()
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "path_hash": hashlib.sha256(str(_abs(path)).encode()).hexdigest()[:32],
        "schema_version": schema.SCHEMA_VERSION,
        "layout": LAYOUT,
        "opscope_version": __version__,
        "salvage": bool(salvage),
        "rank": rank,
    }


def user_cache_root() -> Path:
    """``$OPSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/opscope``, else ``~/.cache/opscope``."""
    forced = os.environ.get("OPSCOPE_CACHE_DIR")
    if forced:
        return Path(forced)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "opscope"


def candidates(path: Path) -> list[Path]:
    """Entry locations for ``path``, in lookup order: beside it, then the user cache."""
    p = _abs(path)
    h = hashlib.sha256(str(p).encode()).hexdigest()[:16]
    user = user_cache_root() / f"{p.name}.{h}.opscope"
    if os.environ.get("OPSCOPE_CACHE_DIR"):
        return [user]
    return [p.parent / f".{p.name}.opscope", user]


def _writable(d: Path) -> bool:
    """Writable, and not marked read-only: root passes ``os.access`` on an ``r-x`` folder, but a
    folder without any write bit (a shared data set) is not ours to fill."""
    try:
        mode = d.stat().st_mode
    except OSError:
        return False
    return bool(mode & 0o222) and os.access(d, os.W_OK | os.X_OK)


def lookup(path: Path, *, salvage: bool = False, rank: int | None = None) -> Profile | None:
    """The cached Profile of ``path`` when a fresh entry exists, else None.

    The returned Profile's ``meta["from_cache"]`` is True. Its tables are parsed on first use;
    the open checks every table file (present, whole, the size written), so a cut-short or
    overwritten entry is a miss and gets rebuilt.
    """
    try:
        key = cache_key(path, salvage=salvage, rank=rank)
    except OSError:
        return None
    for entry in candidates(path):
        meta_file = entry / "meta.json"
        if not meta_file.is_file():
            continue
        try:
            stored = json.loads(meta_file.read_text()).get("cache_key")
            if stored != key:
                continue
            prof = Profile.open(entry, lazy=True)
        except Exception:  # a damaged entry (any odd meta.json or table file): rebuild it
            continue
        return prof.with_meta(from_cache=True, cache_path=str(entry))
    return None


def store(
    path: Path, profile: Profile, *, salvage: bool = False, rank: int | None = None
) -> Path | None:
    """Write ``profile`` as the cache entry of ``path``; returns the entry (None if nowhere
    writable). Failures to write a cache never fail a load."""
    try:
        key = cache_key(path, salvage=salvage, rank=rank)
    except OSError:
        return None
    prof = profile.with_meta(cache_key=key)
    for entry in candidates(path):
        parent = entry.parent
        try:
            if not parent.exists():
                parent.mkdir(parents=True, exist_ok=True)
            if not _writable(parent):
                continue
            return prof.save(entry)
        except OSError:
            continue
    return None
