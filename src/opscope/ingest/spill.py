"""Out-of-core load, phase 2 (issue 24; design: docs/out-of-core.md): each scanned window's
slices go to a Parquet file of the spill folder as soon as the window is read, so the wide
decoded frame (about 1.2 GB per GB of text) exists one window at a time, never whole.

What :func:`fastscan.scan_stream` hands over per window (its rows, with string codes of the
whole scan's string table) is turned here into what the in-memory load selects from the whole
frame (:func:`opscope.ingest.kineto._build_profile`):

- the slices, as unlinked EVENTS rows (``kineto._events_table`` on the window): one Parquet file
  per window, in window order;
- the small subsets, kept in memory: ``[memory]`` instants, thread and process names, the
  range-profiler rows' durations, the oddity counts.

What the in-memory load computes over the whole trace is carried across windows:

- a non-numeric ``pid``/``tid`` ("Spans") gets ``-1 - its dense rank among the trace's distinct
  non-numeric values``: each window gives each new string a provisional id
  (:data:`PROVISIONAL_BASE` + first-seen order) and the final ids replace them once all are known;
- the events' ids are the row numbers of a stable sort of all slices by ``ts_ns``: each window's
  file is already sorted stably, and the files are read back in window order, so one more
  stable sort gives the whole trace's order;
- exact times: whether ``ts``/``dur`` numbers the kernel left as text are read as decimal or
  float-derived ns depends on the largest ``ts`` of the trace. Windows use float-derived ns; in
  the rare trace that turns out to need the decimal reading of such a number, :func:`load`
  returns None and the caller loads it the phase-1 way.

The flow records go to a Parquet file per window too (sorted by ``ts_ns``, with their trace
position ``_fi``). Then :mod:`opscope.ingest.window_link` links the windows segment by segment
into a Profile folder (phase 3): the events table is never whole in memory.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from opscope.ingest import cache, fastscan, gz, jsonscan, kineto, window_link
from opscope.model import Profile

ROW_GROUP_ROWS = 16_384
"""Rows per row group of a window's file: the linker reads each segment's row range of each
file, and a read decodes the row groups it touches."""

WINDOW_BYTES = 64 * 1024**2
"""Text scanned per window when spilling (or ``fastscan.WINDOW_BYTES`` when smaller): each
window's decoded frame is about 1.2 bytes per byte of text, so the scan's peak is a few windows
(0.67 GB for a 1 GB trace at 64 MB; 1.23 GB at 256 MB), and the time is the same."""

PROVISIONAL_BASE = -(2**31)
"""Provisional ids of non-numeric tracks while the scan runs: ``PROVISIONAL_BASE + i`` for the
i-th distinct string met (Int32, as the ``device`` column that a device slice's pid fills)."""

_TRACK_COLUMNS: dict[str, tuple[str, ...]] = {"pid": ("pid", "device"), "tid": ("tid", "stream")}
"""Columns of the events table that hold a pid or a tid (a device slice's ``device`` and
``stream`` default to its pid and tid)."""

# The in-memory load's order of first bumps (kineto._build_profile): _raw_flows, then
# _events_table; the oddities dict is kept in that order.
_ODDITY_ORDER = (
    "flow without id (dropped)",
    "unsupported phase",
    "slice without ts (dropped)",
    "slice without dur (0 used)",
    "negative duration (clamped to 0)",
    "slice without name",
    "slice without pid/tid",
)


BACKGROUND_WRITES = True
"""Make and write each window's tables on a worker thread while the scanner reads the next
window."""

WINDOWS_IN_FLIGHT = 2
"""Windows handed to the writer's thread that it may not have finished when the scanner hands
over the next one. The writer and the scanner take about the same time per GB, but not per
window: with one, the scanner waited 1.4-1.9 s per GB of ~6 for a writer still on a heavier
window; with two, 0.9-1.5 s (3 GB: 5.1-6.6 -> 2.6-2.9 s), for one window's column pieces more
in memory (~0.05-0.1 GB)."""


class _Writer:
    """The spill's per-window work after the scan: its tables made (events, flows, memory
    rows) and written to Parquet. With :data:`BACKGROUND_WRITES` it runs on one worker thread:
    the frames' work and the encoding release the GIL, which the scanner holds while it reads
    the next window, so the two overlap on a second core. ``wait(keep=WINDOWS_IN_FLIGHT - 1)``
    at each window's hand-over bounds the windows in flight (their frames are the memory it
    adds)."""

    def __init__(self) -> None:
        on = BACKGROUND_WRITES and window_link.worker_threads()
        self.pool = ThreadPoolExecutor(max_workers=1) if on else None
        self.pending: list[Future[None]] = []

    def run(self, job: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """``job(*args, **kwargs)`` on the worker (in order, after what was handed over
        before), or now without it."""
        if self.pool is None:
            job(*args, **kwargs)
        else:
            self.pending.append(self.pool.submit(job, *args, **kwargs))

    def wait(self, keep: int = 0) -> None:
        """Every job handed over but the last ``keep`` has ended (a failed one raises its
        error here)."""
        while len(self.pending) > keep:
            self.pending.pop(0).result()

    def close(self) -> None:
        """Stop the worker once its jobs end (their errors left to :meth:`wait`)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)


@dataclass
class _Provisional:
    """Provisional ids of one column's non-numeric track names, in first-seen order."""

    ids: dict[str, int] = field(default_factory=dict)

    def assign(self, raw: pl.DataFrame, c: str) -> pl.DataFrame:
        """``raw`` with ``{c}_n`` filled for non-numeric names (provisional ids)."""
        bad = pl.col(f"{c}_n").is_null() & pl.col(f"{c}_str").is_not_null()
        new = raw.filter(bad).get_column(f"{c}_str").unique(maintain_order=True).to_list()
        if not new:
            return raw
        for s in new:
            self.ids.setdefault(s, PROVISIONAL_BASE + len(self.ids))
        keys = pl.Series(list(self.ids), dtype=pl.String)
        vals = pl.Series(list(self.ids.values()), dtype=pl.Int64)
        return raw.with_columns(
            pl.when(bad)
            .then(pl.col(f"{c}_str").replace_strict(keys, vals, default=None))
            .otherwise(pl.col(f"{c}_n"))
            .alias(f"{c}_n")
        )

    def final(self) -> tuple[list[int], list[int]]:
        """(provisional ids, final ids): ``-1 - dense rank`` of each name among all names."""
        order = {s: i for i, s in enumerate(sorted(self.ids))}
        old = list(self.ids.values())
        return old, [-2 - order[s] for s in self.ids]


class Spill:
    """The sink of :func:`fastscan.scan_stream`: one window at a time to ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[Path] = []
        self.flow_files: list[Path] = []
        self.n_flows = 0
        self.flow_starts = 0
        self.memory: list[pl.DataFrame] = []
        self.names: list[pl.DataFrame] = []
        self.ranges: list[pl.DataFrame] = []  # cuda_profiler_range rows' dur_ns
        self.oddities: dict[str, int] = {}
        self.tracks = {"pid": _Provisional(), "tid": _Provisional()}
        self.rows = 0
        self.facts = window_link.WindowFacts()  # what the cut plan needs of each window
        self.write = _Writer()

    def __call__(self, first_row: int, window: fastscan.Scanned) -> None:
        # the earlier windows' tables and files (made while this one was read), but the last
        self.write.wait(keep=WINDOWS_IN_FLIGHT - 1)
        cols, times = window.columns()  # (here: it reads the scan's growing string tables)
        del window
        # the window's tables made and written on the writer's thread while the scanner reads
        # the next window (the frames' work releases the GIL the scanner holds); one window at
        # a time, in order, so the provisional track ids and flow counts are the same
        self.write.run(self._window, cols, times)

    def _window(self, cols: jsonscan.Columns, times: tuple[pl.Series, pl.Series]) -> None:
        ts_ns, dur_ns = times
        raw = cols.frame()
        cols.frames.clear()
        raw = self._times_and_tracks(raw, ts_ns, dur_ns)
        # rank 0 here: the header (which may follow the events) gives the rank at the end
        flows = kineto._raw_flows(raw, 0, self.oddities)
        # time order for the linker's segment ranges; _fi: the trace order it links them in
        flows = flows.with_columns(
            (pl.int_range(pl.len(), dtype=pl.Int64) + self.n_flows).alias("_fi")
        ).sort("ts_ns", maintain_order=True)
        self.n_flows += flows.height
        self.facts.add_flows(flows)
        self.flow_starts += flows.filter(pl.col("phase") == "s").height
        flow_file = self.folder / f"flows-{len(self.flow_files):05d}.parquet"
        flows.write_parquet(flow_file, compression="lz4", statistics=False)
        self.flow_files.append(flow_file)
        self.memory.append(kineto._memory_rows(raw, 0))
        self.names.append(kineto._thread_names(raw))
        self.ranges.append(raw.filter(pl.col("cat_l") == "cuda_profiler_range").select("dur_ns"))
        events = kineto._events_table([raw], 0, self.oddities).drop("id")
        file = self.folder / f"events-{len(self.files):05d}.parquet"
        events.write_parquet(
            file, compression="lz4", statistics=False, row_group_size=ROW_GROUP_ROWS
        )
        self.files.append(file)
        self.rows += events.height
        self.facts.add(events)

    def _times_and_tracks(
        self, raw: pl.DataFrame, ts_ns: pl.Series, dur_ns: pl.Series
    ) -> pl.DataFrame:
        """``kineto._with_times_and_tracks`` for one window (non-numeric tracks: provisional)."""
        raw = raw.with_columns(
            ts_ns.alias("ts_ns"),
            dur_ns.alias("dur_ns"),
            kineto._track_ids(pl.col("pid"), pl.col("pid_str")).alias("pid_n"),
            kineto._track_ids(pl.col("tid"), pl.col("tid_str")).alias("tid_n"),
        )
        cat_l = kineto._per_distinct(raw.get_column("cat"), lambda e: e.str.to_lowercase())
        raw = raw.with_columns(cat_l.alias("cat_l"))
        for c, prov in self.tracks.items():
            raw = prov.assign(raw, c)
        return raw

    def finish(
        self,
        header: dict[str, Any],
        scanned: fastscan.Scanned,
        path: Path,
        rank: int | None,
        *,
        budget: int,
        cache_entry: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> Profile:
        """The Profile: the windows linked segment by segment (:mod:`.window_link`)."""
        self.write.wait()
        rk = kineto._rank_of(header, rank)
        oddities: dict[str, int] = {}
        for key in _ODDITY_ORDER + tuple(k for k in self.oddities if k not in _ODDITY_ORDER):
            kineto._bump(oddities, key, self.oddities.get(key, 0))
        maps = {c: prov.final() for c, prov in self.tracks.items()}
        rank_col = pl.lit(rk, pl.Int32).alias("rank")

        def small(parts: list[pl.DataFrame]) -> pl.DataFrame:
            df = pl.concat(parts, how="vertical_relaxed")
            parts.clear()
            return window_link.renumbered(df, maps, {"pid": ("pid",), "tid": ("tid",)})

        memory = small(self.memory).with_columns(rank_col)
        names = small(self.names).unique(["pid", "tid", "_proc"], keep="first", maintain_order=True)
        notes = _range_notes(pl.concat(self.ranges, how="vertical_relaxed").get_column("dur_ns"))
        self.ranges.clear()
        spilled = window_link.Spilled(
            event_files=self.files,
            flow_files=self.flow_files,
            maps=maps,
            rank=rk,
            memory=memory,
            names=names,
            notes=notes,
            counters=scanned.counters,
            header=header,
            path=path,
            oddities=oddities,
            flow_starts=self.flow_starts,
            windows=self.facts,
            rank_arg=rank,
        )
        window_link.probe("scan: all windows spilled")
        return window_link.link_windows(
            spilled, self.folder, budget=budget, cache_entry=cache_entry, progress=progress
        )


def _range_notes(durs: pl.Series) -> list[str]:
    """``kineto._format_notes`` from the range-profiler rows' durations of every window."""
    if not durs.len():
        return []
    distinct = durs.drop_nulls().unique()
    same = f", all {distinct.item() / 1000:g} us long" if distinct.len() == 1 else ""
    return [
        f"CUPTI range-profiler trace: {durs.len()} kernels recorded as hardware-counter "
        f"ranges (cuda_profiler_range{same}), not timed; not read as kernels"
    ]


def needs_decimal_times(scanned: fastscan.Scanned) -> bool:
    """True when the trace's exact (decimal) ns differ from what the windows used: its times
    are large enough for the exact reading and some ``ts``/``dur`` number was left as text."""
    return scanned.exact and any(scanned.fields[c].texts for c in ("ts", "dur"))


#: Inflate a ``.json.gz`` on a worker thread ahead of the scan (:class:`gz.ReadAhead`): the
#: inflating overlaps the byte scanner. Off with ``$OPSCOPE_OOC_THREADS=0`` too.
READ_AHEAD = True


@contextlib.contextmanager
def _reader(st: gz.Stream) -> Iterator[Callable[[int], bytes]]:
    """``st.read``, read ahead on a worker thread when ``st`` inflates a gzip (a plain file's
    read is a copy from the page cache: nothing to overlap)."""
    if not (READ_AHEAD and st.gzip and window_link.worker_threads()):
        yield st.read
        return
    with gz.ReadAhead(st.read) as ahead:
        yield ahead.read


def load(
    path: Path,
    progress: Callable[[str, int, int], None] | None,
    rank: int | None,
    *,
    budget: int = 1,
    cache_entry: bool = False,
) -> Profile | None:
    """The Profile of ``path`` read window by window through the spill folder and linked
    segment by segment into a Profile folder, opened lazily: the cache entry of ``path`` with
    ``cache_entry`` (when the cache folder is writable), else a folder inside the spill folder,
    removed with it (the Profile holds its files open). None when the byte scanner steps aside
    (or decimal times are needed: see the module doc). ``budget``: bytes (sizes the segments)."""
    folder = cache.spill_folder(path)
    spill = Spill(folder)
    try:
        with gz.Stream(path) as st, _reader(st) as read:

            def stream_progress(_: int) -> None:
                if progress is not None:
                    progress("parse", st.consumed, st.size)

            window = min(WINDOW_BYTES, fastscan.WINDOW_BYTES)
            got = fastscan.scan_stream(read, window=window, progress=stream_progress, sink=spill)
        spill.write.wait()  # (the last window's tables: made on the writer's thread)
        if got is None or not spill.files or needs_decimal_times(got[1]):
            return None
        header, scanned = got
        return spill.finish(
            header,
            scanned,
            path,
            rank,
            budget=budget,
            cache_entry=cache_entry,
            progress=progress,
        )
    finally:
        spill.write.close()  # (no write left running into the folder removed here)
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # the spill root too, unless another load uses it
            folder.parent.rmdir()
