"""Bounded reading of possibly-compressed trace files.

Readers call :func:`read_bytes` for any file: gzip (detected by its magic bytes, not its name) is
inflated with ``isal`` when installed (about half the CPU of the stdlib) or ``zlib`` otherwise, and
never beyond a size bound, so that a small malicious archive cannot fill memory (a "gzip bomb").
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opscope.errors import CorruptArchiveError, InputError

GZIP_MAGIC = b"\x1f\x8b"

#: Absolute bound on the decompressed size of one file.
DEFAULT_MAX_BYTES = 16 * 1024**3
#: Bound relative to the compressed size: real traces compress 5-20x; a bomb 1000x.
DEFAULT_MAX_RATIO = 50
#: Compressed inputs smaller than this may always inflate to this much (tiny files, huge ratios).
MIN_ALLOWANCE = 256 * 1024**2

_CHUNK = 4 * 1024**2


def _zlib_module() -> Any:
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:  # pragma: no cover - isal is an optional speed-up
        return zlib


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` starts with the gzip magic bytes."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def max_output_bytes(compressed_size: int, max_bytes: int | None, max_ratio: float | None) -> int:
    """The decompression bound for a compressed input of ``compressed_size`` bytes.

    ``OPSCOPE_MAX_DECOMPRESSED`` (bytes) in the environment overrides the absolute bound.
    """
    env = os.environ.get("OPSCOPE_MAX_DECOMPRESSED")
    absolute = int(env) if env and env.isdigit() else (max_bytes or DEFAULT_MAX_BYTES)
    ratio = DEFAULT_MAX_RATIO if max_ratio is None else max_ratio
    return int(min(absolute, max(MIN_ALLOWANCE, compressed_size * ratio)))


def gunzip_bytes(
    data: bytes | memoryview,
    *,
    path: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
    max_ratio: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    allow_truncated: bool = False,
) -> bytes:
    """Inflate gzip ``data`` (possibly several concatenated members), bounded.

    Raises :class:`~opscope.errors.CorruptArchiveError` naming ``path`` when the data is not valid
    gzip, ends early (unless ``allow_truncated``: then what inflated is returned, for salvage), or
    would inflate beyond the bound.
    """
    zmod = _zlib_module()
    limit = max_output_bytes(len(data), max_bytes, max_ratio)
    view = memoryview(data)
    n = len(view)
    out: list[bytes] = []
    total = 0
    pos = 0  # bytes of ``view`` handed to the decompressor so far
    try:
        d = zmod.decompressobj(31)  # 16 + MAX_WBITS: expect a gzip header
        tail: bytes = b""
        while True:
            if tail:
                buf: bytes | memoryview = tail
            elif pos < n:
                buf = view[pos : pos + _CHUNK]
                pos += len(buf)
            else:
                break
            piece = d.decompress(buf, _CHUNK * 8)
            total += len(piece)
            if total > limit:
                raise CorruptArchiveError(
                    f"gzip inflates beyond {limit} bytes (compressed {n}); looks like a "
                    "decompression bomb (set OPSCOPE_MAX_DECOMPRESSED to allow more)",
                    path,
                )
            out.append(piece)
            tail = d.unconsumed_tail
            if progress is not None:
                progress(pos, n)
            if d.eof:
                # Concatenated members: restart on what follows the end of this one.
                end = pos - len(d.unused_data) - len(tail)
                rest = bytes(view[end : end + 2])
                if end >= n or bytes(view[end:]).strip(b"\x00") == b"":
                    break
                if rest != GZIP_MAGIC:
                    raise CorruptArchiveError(
                        f"trailing garbage after gzip data at byte {end}", path
                    )
                pos = end
                tail = b""
                d = zmod.decompressobj(31)
        if not d.eof and not allow_truncated:
            raise CorruptArchiveError(
                "gzip data ends early (truncated archive; --salvage reads what is there)", path
            )
    except CorruptArchiveError:
        raise
    except Exception as e:  # zlib.error, isal's IsalError, OSError, ValueError
        if allow_truncated and out:
            return b"".join(out)
        raise CorruptArchiveError(f"corrupt gzip data ({e})", path) from None
    if progress is not None:
        progress(n, n)
    return b"".join(out)


def read_bytes(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    max_ratio: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    allow_truncated: bool = False,
) -> bytes:
    """The content of ``path``, inflated when it is gzip (bounded). Raises InputError subclasses."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise InputError("is a directory, expected a trace file", p) from None
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror or e})", p) from None
    if raw[:2] == GZIP_MAGIC:
        return gunzip_bytes(
            raw,
            path=p,
            max_bytes=max_bytes,
            max_ratio=max_ratio,
            progress=progress,
            allow_truncated=allow_truncated,
        )
    if p.name.endswith(".gz"):
        raise CorruptArchiveError("named .gz but is not gzip data", p)
    return raw


class Stream:
    """A file's text read forward in pieces: inflated on the fly when it is gzip, bounded as
    :func:`gunzip_bytes` is (the bomb check counts the inflated bytes as they come), so a large
    ``.json.gz`` is never held inflated in full.

    ``read(n)`` returns up to ``n`` bytes, ``b""`` at the end. ``consumed``/``size``: file bytes
    read so far and in all (for progress). Raises :class:`~opscope.errors.CorruptArchiveError`
    naming the file on corrupt, truncated or oversized gzip data.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._f = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except IsADirectoryError:
            raise InputError("is a directory, expected a trace file", self.path) from None
        except OSError as e:
            raise InputError(f"cannot read ({e.strerror or e})", self.path) from None
        self.size = os.fstat(self._f.fileno()).st_size
        self.consumed = 0
        self.gzip = self._f.read(2) == GZIP_MAGIC
        self._f.seek(0)
        if not self.gzip and self.path.name.endswith(".gz"):
            self._f.close()
            raise CorruptArchiveError("named .gz but is not gzip data", self.path)
        self._zmod = _zlib_module()
        self._d: Any = self._zmod.decompressobj(31) if self.gzip else None
        self._pending = b""  # compressed input not yet handed to the decompressor
        self._total = 0
        self._limit = max_output_bytes(self.size, None, None)
        self._done = False

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of the (inflated) text; ``b""`` at its end."""
        if not self.gzip:
            got = self._f.read(n)
            self.consumed += len(got)
            return got
        try:
            return self._inflate(n)
        except CorruptArchiveError:
            raise
        except Exception as e:  # zlib.error, isal's IsalError, OSError, ValueError
            raise CorruptArchiveError(f"corrupt gzip data ({e})", self.path) from None

    def _inflate(self, n: int) -> bytes:
        while not self._done:
            d = self._d
            tail = d.unconsumed_tail
            if tail:
                buf = tail
            else:
                if not self._pending:
                    self._pending = self._f.read(_CHUNK)
                    self.consumed += len(self._pending)
                buf, self._pending = self._pending, b""
                if not buf:
                    raise CorruptArchiveError(
                        "gzip data ends early (truncated archive; --salvage reads what is there)",
                        self.path,
                    )
            piece: bytes = d.decompress(buf, n)
            self._total += len(piece)
            if self._total > self._limit:
                raise CorruptArchiveError(
                    f"gzip inflates beyond {self._limit} bytes (compressed {self.size}); looks "
                    "like a decompression bomb (set OPSCOPE_MAX_DECOMPRESSED to allow more)",
                    self.path,
                )
            if d.eof:
                self._next_member(d.unused_data)
            if piece:
                return piece
        return b""

    def _next_member(self, unused: bytes) -> None:
        """After one gzip member: start the next (concatenated members) or finish."""
        rest = unused + self._f.read(_CHUNK - len(unused)) if len(unused) < 2 else unused
        self.consumed += len(rest) - len(unused)
        if rest.strip(b"\x00") == b"":
            # the end, unless zero padding goes on past what was read
            more = self._f.read()
            self.consumed += len(more)
            if more.strip(b"\x00") != b"":
                end = self.consumed - len(more) - len(rest)
                raise CorruptArchiveError(
                    f"trailing garbage after gzip data at byte {end}", self.path
                )
            self._done = True
            return
        if rest[:2] != GZIP_MAGIC:
            end = self.consumed - len(self._pending) - len(rest)
            raise CorruptArchiveError(f"trailing garbage after gzip data at byte {end}", self.path)
        self._pending = rest + self._pending
        self._d = self._zmod.decompressobj(31)


class ReadAhead:
    """``read(n)`` of a text served from pieces that a worker thread reads ahead from
    ``source`` (e.g. :meth:`Stream.read`): the inflating of the next pieces overlaps the
    caller's work on this one (the out-of-core scan: the byte scanner and the inflater both
    release the GIL, so on two cores they run side by side). At most ``depth`` pieces of
    ``piece`` bytes wait in memory. Same bytes in the same order as ``source``; an error of
    ``source`` is raised by the ``read`` that reaches it. ``close()`` stops the worker."""

    def __init__(
        self, source: Callable[[int], bytes], *, piece: int = 8 << 20, depth: int = 4
    ) -> None:
        self._source, self._piece = source, piece
        self._q: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=depth)
        self._buf, self._pos, self._eof = b"", 0, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="opscope-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        item: bytes | BaseException
        while not self._stop.is_set():
            try:
                item = self._source(self._piece)
            except BaseException as e:  # handed to the reader, raised there
                item = e
            while not self._stop.is_set():
                try:
                    self._q.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if not isinstance(item, bytes) or not item:
                return

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of the text; ``b""`` at its end."""
        if self._pos >= len(self._buf):
            if self._eof:
                return b""
            item = self._q.get()
            if isinstance(item, BaseException):
                self._eof = True
                raise item
            if not item:
                self._eof = True
                return b""
            self._buf, self._pos = item, 0
        if self._pos == 0 and n >= len(self._buf):
            self._pos = len(self._buf)
            return self._buf  # (the whole piece: no copy)
        out = self._buf[self._pos : self._pos + n]
        self._pos += len(out)
        return out

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self._q.get_nowait()
        self._thread.join()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
