"""Test settings of the numba scanner (opscope.ingest.fastscan)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opscope.ingest import fastscan


@contextlib.contextmanager
def chunk_events(events: int) -> Iterator[None]:
    """Within the block, the scanner reads ``events`` events per chunk (restored after)."""
    old = fastscan.CHUNK_EVENTS
    fastscan.CHUNK_EVENTS = events
    try:
        yield
    finally:
        fastscan.CHUNK_EVENTS = old
