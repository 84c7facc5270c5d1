"""metrics.jsonl: one JSON line per step, profiled or not.

Lines are buffered and appended with one ``write`` of whole lines at least every
:data:`FLUSH_SECONDS`, at every profiled sample's start and end, and when the recording stops
(normal exit, an exception, Ctrl-C), on a file opened for appending: ranks of a torchrun job can
share the file, and a killed run leaves only complete lines (plus at most one torn last line,
which readers skip). A system call per step cost more than the step's own bookkeeping (20-100 µs
of a 3 ms step, benchmarks/record_overhead.py); a SIGKILL loses at most the last second of lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_Row = tuple[int, int, int, tuple[int | None, int | None], bool]
"""A buffered step: step, wall_ns, samples, (allocated, reserved) peaks, profiled."""

FLUSH_SECONDS = 1.0
"""Longest time a step's line waits in memory before it is written."""


class MetricsWriter:
    """Appends step lines to ``path``."""

    def __init__(self, path: Path, rank: int) -> None:
        self.rank = rank
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._rows: list[_Row] = []
        self._flushed = time.monotonic()

    def write(
        self,
        step: int,
        wall_ns: int,
        samples: int,
        mem: tuple[int | None, int | None],
        profiled: bool,
    ) -> None:
        """Add the line for ``step`` (written by the next :meth:`flush`, at most a second away)."""
        # A tuple now, the JSON at the flush: the step between samples pays for an append only.
        self._rows.append((step, wall_ns, samples, mem, profiled))
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Append the buffered lines, in one write."""
        if self._rows and self._fd >= 0:
            lines = [self._line(row) for row in self._rows]
            os.write(self._fd, ("\n".join(lines) + "\n").encode())
        self._rows.clear()
        self._flushed = time.monotonic()

    def _line(self, row: _Row) -> str:
        step, wall_ns, samples, mem, profiled = row
        sps = samples / (wall_ns / 1e9) if samples and wall_ns > 0 else None
        return json.dumps(
            {
                "step": step,
                "wall_ns": wall_ns,
                "samples_per_s": sps,
                "mem_allocated_peak": mem[0],
                "mem_reserved_peak": mem[1],
                "profiled": profiled,
                "rank": self.rank,
            }
        )

    def close(self) -> None:
        """Write what is buffered and close the file."""
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
