"""Columnar cache of loaded traces: a second ``load`` of an unchanged file reads Parquet.

An entry is a directory written by :meth:`Profile.save`, keyed by the source's size, mtime_ns,
absolute path, :data:`~opscope.model.schema.SCHEMA_VERSION`, :data:`LAYOUT`, the opscope version
and the read options (salvage, rank). Entries live in the user cache folder,
``$OPSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/opscope``, else ``~/.cache/opscope``, in a folder
named after the trace and a hash of its absolute path (two traces never share an entry). Nothing is
written beside the user's trace unless asked: with ``OPSCOPE_CACHE_BESIDE=1`` (``opscope load
--cache-beside``) the entry is ``.<tracename>.opscope/`` beside the trace when that folder is
writable. Otherwise ``.opscope`` folders beside traces are ignored. A stale or other-version entry
is rebuilt.

The user cache is bounded: after each write, whole entries are removed oldest first (by last use)
until the folder holds at most :data:`DEFAULT_MAX_BYTES` (``OPSCOPE_CACHE_MAX_BYTES`` overrides);
the entry just written is never removed.

A hit is opened lazily (``Profile.open(lazy=True)``): each table is parsed on its first use, so a
reopen costs what the caller reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from opscope import __version__
from opscope.model import Profile, schema

# How an entry is written (compression, meta.json's table sizes); part of the key, so entries of
# another layout are rebuilt. 2: zstd-1 Parquet without statistics, table sizes in meta.json.
LAYOUT = 2
#: Size bound of the user cache folder (bytes); ``OPSCOPE_CACHE_MAX_BYTES`` overrides.
DEFAULT_MAX_BYTES = 20 * 1024**3
#: The entry folders' suffix (what eviction may remove).
_SUFFIX = ".opscope"


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


def beside_enabled() -> bool:
    """True when ``OPSCOPE_CACHE_BESIDE`` asks for entries beside the trace."""
    return os.environ.get("OPSCOPE_CACHE_BESIDE", "").strip().lower() in ("1", "true", "yes", "on")


def max_bytes() -> int:
    """The user cache's size bound: ``OPSCOPE_CACHE_MAX_BYTES``, else :data:`DEFAULT_MAX_BYTES`."""
    env = os.environ.get("OPSCOPE_CACHE_MAX_BYTES", "").strip()
    return int(env) if env.isdigit() else DEFAULT_MAX_BYTES


def candidates(path: Path) -> list[Path]:
    """Entry locations for ``path``, in lookup order: the user cache, preceded by the folder
    beside the trace only when :func:`beside_enabled`."""
    p = _abs(path)
    h = hashlib.sha256(str(p).encode()).hexdigest()[:16]
    user = user_cache_root() / f"{p.name}.{h}{_SUFFIX}"
    if beside_enabled() and not os.environ.get("OPSCOPE_CACHE_DIR"):
        return [p.parent / f".{p.name}{_SUFFIX}", user]
    return [user]


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
        with contextlib.suppress(OSError):  # last use, for eviction (a read-only cache: fine)
            os.utime(meta_file)
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
            saved = prof.save(entry)
        except OSError:
            continue
        if parent == user_cache_root():
            evict(parent, keep=saved)
        return saved
    return None


def writable_entry(path: Path) -> Path | None:
    """Where :func:`store` would write the entry of ``path`` (the first candidate whose folder
    is writable), for a writer that fills the entry itself (the out-of-core load,
    :mod:`opscope.ingest.window_link`); None when no cache folder is writable."""
    for entry in candidates(path):
        parent = entry.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if _writable(parent):
            return entry
    return None


def spill_folder(path: Path) -> Path:
    """A new empty folder for the Parquet files of an out-of-core load of ``path``
    (:mod:`opscope.ingest.spill`; the loader removes it): under the user cache folder, else the
    system's temporary folder when that is not writable. Named ``<pid>-<trace>-XXXX``: the
    folders of loads whose process is gone (killed mid-load) are removed first."""
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in path.name)[:60]
    root = user_cache_root() / "spill"
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        remove_dead_spills(root)
        return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{stem}-", dir=root))
    return Path(tempfile.mkdtemp(prefix=f"opscope-spill-{os.getpid()}-{stem}-"))


def remove_dead_spills(root: Path) -> list[Path]:
    """Remove the spill folders under ``root`` whose loading process no longer runs."""
    removed = []
    for d in root.iterdir():
        pid = d.name.split("-", 1)[0]
        if not (d.is_dir() and pid.isdigit()) or _alive(int(pid)):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _size(d: Path) -> int:
    total = 0
    for f in d.rglob("*"):
        with contextlib.suppress(OSError):
            if f.is_file():
                total += f.stat().st_size
    return total


def evict(root: Path, *, keep: Path | None = None, limit: int | None = None) -> list[Path]:
    """Remove whole entries under ``root``, least recently used first, until it holds at most
    ``limit`` bytes (default :func:`max_bytes`); ``keep`` is never removed. Returns the removed
    entries. Only folders named ``*.opscope`` holding a ``meta.json`` are touched."""
    limit = max_bytes() if limit is None else limit
    entries: list[tuple[float, int, Path]] = []
    try:
        children = list(root.iterdir())
    except OSError:
        return []
    for d in children:
        meta = d / "meta.json"
        if not (d.name.endswith(_SUFFIX) and d.is_dir() and meta.is_file()):
            continue
        try:
            used = meta.stat().st_mtime
        except OSError:
            continue
        entries.append((used, _size(d), d))
    total = sum(n for _, n, _ in entries)
    removed: list[Path] = []
    for _, n, d in sorted(entries, key=lambda t: t[0]):
        if total <= limit:
            break
        if keep is not None and d == keep:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
        total -= n
    return removed
