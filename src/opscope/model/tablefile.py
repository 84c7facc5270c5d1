"""A saved table opened but not yet parsed: what lets :meth:`Profile.open` defer its reads.

Opening keeps the file itself (an open handle, or its bytes when small), not its path, so a folder
replaced or deleted after the open (a cache entry rebuilt by another process, the temporary
folder of a multi-rank read) still yields the table as it was when opened. Small files are read
into memory at once so that a profile holds at most a few handles.
"""

from __future__ import annotations

import io
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import polars as pl

from opscope.errors import InputError

# Below this a table file is kept as bytes and its handle closed.
SMALL_BYTES = 1 << 20

_MAGIC = b"PAR1"


class TableFile:
    """One table's Parquet file, checked and held open; parsed on the first :meth:`frame`.

    Raises ``ValueError`` at open when the file is not a whole Parquet file (cut short, or not
    Parquet, or not ``size`` bytes when the writer recorded a size).
    """

    def __init__(self, path: Path, size: int | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._df: pl.DataFrame | None = None
        self._scanned = False
        self._data: bytes | None = None
        self._handle: BinaryIO | None = None
        self._close: Callable[[], object] | None = None
        fh = open(path, "rb")  # noqa: SIM115 - kept open past this call, closed in _release
        try:
            actual = os.fstat(fh.fileno()).st_size
            if size is not None and actual != size:
                raise ValueError(f"{path}: {actual} bytes, {size} written")
            if actual < 2 * len(_MAGIC) or fh.read(len(_MAGIC)) != _MAGIC:
                raise ValueError(f"{path}: not a Parquet file")
            fh.seek(-len(_MAGIC), os.SEEK_END)
            if fh.read(len(_MAGIC)) != _MAGIC:
                raise ValueError(f"{path}: Parquet file cut short")
            if actual <= SMALL_BYTES:
                fh.seek(0)
                self._data = fh.read()
                fh.close()
            else:
                self._handle = fh
                self._close = weakref.finalize(self, fh.close)
        except BaseException:
            fh.close()
            raise

    @property
    def parsed(self) -> bool:
        """True once the whole table has been read."""
        return self._df is not None

    def frame(self) -> pl.DataFrame:
        """The whole table (read once, then shared by every caller)."""
        with self._lock:
            if self._df is None:
                self._df = self._read(None)
                self._release()
            return self._df

    def rows(self, predicate: pl.Expr) -> pl.DataFrame:
        """The rows matching ``predicate``, in table order.

        The first call decodes only the matching rows' values (Parquet predicate pushdown): a
        quick look at a cached profile (one hotspot table) never pays for the whole table. A
        second call reads the whole table and filters it in memory, as every later one does: a
        profile being analysed asks for many selections, each cheaper from memory than a scan.
        """
        with self._lock:
            if self._df is None and not self._scanned:
                self._scanned = True
                return self._read(predicate)
        return self.frame().filter(predicate)

    @property
    def nbytes(self) -> int | None:
        """The file's size while it is not parsed (None once it is: the frame is the table)."""
        with self._lock:
            if self._df is not None:
                return None
            if self._data is not None:
                return len(self._data)
            assert self._handle is not None
            return os.fstat(self._handle.fileno()).st_size

    def scan(self) -> pl.LazyFrame:
        """The table as a lazy scan of its file (of the parsed frame once it is parsed).

        The scan reads the held file through ``/proc/self/fd`` (Linux), so it sees the file as
        it was opened even when the folder was replaced since, and each collect opens its own
        reader (no shared file offset). Where that path is absent, the held bytes or handle are
        scanned instead. Errors surface on collect: use :meth:`collect`.
        """
        with self._lock:
            if self._df is not None:
                return self._df.lazy()
            if self._data is not None:
                return pl.scan_parquet(io.BytesIO(self._data))
            assert self._handle is not None
            fd_path = f"/proc/self/fd/{self._handle.fileno()}"
            if os.path.exists(fd_path):
                return pl.scan_parquet(fd_path)
            self._handle.seek(0)
            return pl.scan_parquet(io.BytesIO(self._handle.read()))

    def collect(self, lf: pl.LazyFrame, *, streaming: bool = False) -> pl.DataFrame:
        """``lf`` (a query over :meth:`scan`) collected; a damaged file is an InputError."""
        try:
            return lf.collect(engine="streaming") if streaming else lf.collect()
        except (pl.exceptions.PolarsError, OSError) as e:
            raise InputError(
                f"damaged table file ({e.__class__.__name__}): delete it, or load without cache",
                self.path,
            ) from e

    def _read(self, predicate: pl.Expr | None) -> pl.DataFrame:
        src: BinaryIO
        if self._data is not None:
            src = io.BytesIO(self._data)
        else:
            assert self._handle is not None
            src = self._handle
            src.seek(0)
        lf = pl.scan_parquet(src)
        if predicate is not None:
            lf = lf.filter(predicate)
        return self.collect(lf)

    def _release(self) -> None:
        self._data = None
        self._handle = None
        if self._close is not None:
            self._close()
            self._close = None
