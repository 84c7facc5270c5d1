"""Pick the reader for a path, and the one public entry point :func:`load`.

Sniffing order (first match wins):

1. a directory with ``run.json`` — an opscope run directory (:mod:`opscope.ingest.rundir`)
2. a directory with ``ASCEND_PROFILER_OUTPUT`` (or that *is* one) — one Ascend rank
   (:mod:`opscope.ingest.ascend`)
3. any other directory — several ranks of either format (:mod:`opscope.ingest.multirank`)
4. a file — a Kineto Chrome trace, plain or gzip (:mod:`opscope.ingest.kineto`), after its head
   is checked (:mod:`opscope.ingest.detect`): torch's memory timeline export and a rocprofiler-sdk
   JSON are refused with a one-line error saying what they are; an Ascend ``trace_view.json``
   opened on its own is read by the Ascend reader from its folder (a note says so).

Every reader returns a fully linked :class:`~opscope.model.Profile`. Single-file reads go through
the columnar cache (:mod:`opscope.ingest.cache`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from opscope.errors import InputError
from opscope.model import Profile


class Progress(Protocol):
    """Receives load progress: ``done`` of ``total`` bytes (or units) for a ``label``."""

    def __call__(self, label: str, done: int, total: int) -> None: ...


def sniff(path: Path) -> str:
    """The reader name for ``path``: ``"rundir"``, ``"ascend"``, ``"multirank"`` or ``"kineto"``."""
    if not path.exists():
        raise InputError("no such file or directory", path)
    if path.is_dir():
        if (path / "run.json").is_file():
            return "rundir"
        if (path / "ASCEND_PROFILER_OUTPUT").is_dir() or path.name == "ASCEND_PROFILER_OUTPUT":
            return "ascend"
        return "multirank"
    return "kineto"


_READERS: dict[str, tuple[str, str]] = {
    "rundir": ("opscope.ingest.rundir", "read_run_dir"),
    "ascend": ("opscope.ingest.ascend", "read_ascend"),
    "multirank": ("opscope.ingest.multirank", "read_directory"),
    "kineto": ("opscope.ingest.kineto", "read_kineto"),
}


def reader(name: str) -> Callable[..., Profile]:
    """The reader function registered as ``name``."""
    module, func = _READERS[name]
    fn: Callable[..., Profile] = getattr(importlib.import_module(module), func)
    return fn


def load(
    path: str | os.PathLike[str],
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
) -> Profile:
    """Read a profile from ``path`` into a linked, columnar :class:`~opscope.model.Profile`.

    ``path`` may be a Kineto trace (``.json``, ``.json.gz``, ``*.pt.trace.json(.gz)``), an Ascend
    ``*_ascend_pt`` directory, a directory of several ranks, or an opscope run directory.

    ``salvage`` recovers the complete events before a truncation instead of failing (the count is
    in ``profile.meta["salvaged"]``). ``cache`` reads/writes the columnar cache (in the user cache
    dir, keyed by the trace's path, size and mtime; beside the trace only with
    ``OPSCOPE_CACHE_BESIDE``).
    Raises :class:`~opscope.errors.InputError` (exit code 2 in the CLI) on unreadable input.
    """
    p = Path(path)
    kind = sniff(p)
    if kind == "kineto":
        routed = _route_file(p, salvage=salvage, cache=cache, progress=progress)
        if routed is not None:
            return routed
    if kind == "kineto" and cache:
        # A hit needs no reader: looked up before importing one (the Kineto reader's decoder
        # imports cost a tenth of a second, a large part of a cached reopen).
        from opscope.ingest import cache as cache_mod

        hit = cache_mod.lookup(p, salvage=salvage)
        if hit is not None:
            return hit
    return reader(kind)(p, salvage=salvage, cache=cache, progress=progress)


def _route_file(
    p: Path, *, salvage: bool, cache: bool, progress: Progress | None
) -> Profile | None:
    """A file that is not a Kineto trace: read by its own reader, or refused naming what it is
    (None: a Kineto trace, for the Kineto reader)."""
    from opscope.errors import UnsupportedFormatError
    from opscope.ingest import detect

    shape = detect.classify(p)
    if shape.kind in ("trace", "not_trace"):  # (the Kineto reader names a missing traceEvents)
        return None
    if shape.kind == "ascend" and p.name == "trace_view.json":
        prof = reader("ascend")(p.parent, salvage=salvage, cache=cache, progress=progress)
        note = (
            f"{p.name} is Ascend profiler output: read with the Ascend reader from {p.parent}"
            " (open the *_ascend_pt directory to read every file of the rank)"
        )
        return prof.with_meta(notes=[*prof.meta.get("notes", []), note])
    raise UnsupportedFormatError(shape.describe(), p)
