"""metrics.jsonl: one JSON line per step, profiled or not.

Each line is written with one ``write`` on a file opened for appending, so ranks of a torchrun
job can share the file and a killed run leaves only complete lines (plus at most one torn last
line, which readers skip).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class MetricsWriter:
    """Appends step lines to ``path``."""

    def __init__(self, path: Path, rank: int) -> None:
        self.rank = rank
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(
        self,
        step: int,
        wall_ns: int,
        samples: int,
        mem: tuple[int | None, int | None],
        profiled: bool,
    ) -> None:
        """Append the line for ``step``."""
        sps = samples / (wall_ns / 1e9) if samples and wall_ns > 0 else None
        line = {
            "step": step,
            "wall_ns": wall_ns,
            "samples_per_s": sps,
            "mem_allocated_peak": mem[0],
            "mem_reserved_peak": mem[1],
            "profiled": profiled,
            "rank": self.rank,
        }
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
