"""Links into the timeline viewer: its URL scheme, and the slice a finding points at.

The scheme is the fragment of the viewer's address (a browser never sends it to the server)::

    http://127.0.0.1:8642/#sel=<event id>&t=<start_ns>,<end_ns>&src=<trace file name>

- ``sel``: the event to select, by its ``id`` in the Profile. Ids are assigned when the trace is
  read, so they are the same for every load of the same trace (cached or not): a link made by the
  report opens the same slice in ``opscope view`` of that trace.
- ``t``: the window to show, in the trace's own clock (the Profile's ``ts_ns``, absolute). Without
  it the viewer frames the selected slice.
- ``src``: the trace's file name; the viewer says so when it shows another trace.

``opscope view TRACE`` listens on :data:`DEFAULT_PORT` unless told otherwise (or unless the port
is taken), so that the HTML report's links reach it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import polars as pl

from opscope.model import Profile

DEFAULT_PORT = 8642
"""The port ``opscope view`` listens on by default, and the one report links open."""


@dataclass(frozen=True)
class Target:
    """A slice to open in the viewer: its event id and span (absolute ns), and why this one."""

    event_id: int
    start_ns: int
    end_ns: int
    why: str  # "the longest of its 3 events", "the slowest step"

    def url(self, src: str | None = None, port: int = DEFAULT_PORT) -> str:
        """The viewer's address with this slice selected and framed (half its length of margin
        on each side)."""
        pad = max((self.end_ns - self.start_ns) // 2, 1000)
        frag = f"sel={self.event_id}&t={self.start_ns - pad},{self.end_ns + pad}"
        if src:
            frag += "&src=" + quote(src, safe="")
        return f"http://127.0.0.1:{port}/#{frag}"


def _longest(events: pl.DataFrame) -> tuple[int, int, int] | None:
    ev = events.filter(pl.col("ts_ns").is_not_null()).with_columns(pl.col("dur_ns").fill_null(0))
    if ev.height == 0:
        return None
    row = ev.sort(["dur_ns", "id"], descending=[True, False]).row(0, named=True)
    start = int(row["ts_ns"])
    return int(row["id"]), start, start + int(row["dur_ns"])


def finding_targets(findings: Iterable[Any], profile: Profile) -> list[Target | None]:
    """Per finding (in order), the slice its link opens: the longest of the events its evidence
    names (the worst instance), else, for a finding about the step as a whole (device idle, data
    loading), the slowest step; ``None`` when the profile has neither."""
    found = list(findings)
    wanted = {
        int(i) for f in found for i in (getattr(f, "evidence", None) or {}).get("event_ids") or []
    }
    ev = profile.events.select("id", "ts_ns", "dur_ns", "kind")
    named = ev.filter(pl.col("id").is_in(list(wanted))) if wanted else ev.clear()
    slowest_step = _longest(ev.filter(pl.col("kind") == "step"))
    out: list[Target | None] = []
    for f in found:
        ids = [int(i) for i in (getattr(f, "evidence", None) or {}).get("event_ids") or []]
        hit = _longest(named.filter(pl.col("id").is_in(ids))) if ids else None
        if hit is not None:
            n = len(ids)
            why = "its event" if n == 1 else f"the longest of its {n} events"
            out.append(Target(*hit, why=why))
        elif not ids and slowest_step is not None:
            out.append(Target(*slowest_step, why="the slowest step"))
        else:
            out.append(None)
    return out


def view_command(trace: str | None, port: int = DEFAULT_PORT) -> str:
    """The command that serves the viewer a report's links open (``trace``: the path or file
    name the report was made from)."""
    where = shlex.quote(trace) if trace else "TRACE"
    return f"opscope view {where}" + ("" if port == DEFAULT_PORT else f" --port {port}")
