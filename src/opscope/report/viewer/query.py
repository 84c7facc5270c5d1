"""The timeline viewer's queries over one cached, columnar Profile.

Everything the page asks is answered from columns prepared once here: events sorted by
(track, depth, start), so that a window of one track at one depth is a binary search away, and
slices shorter than a pixel are merged per pixel bucket with a Polars group-by (as Perfetto does),
so that an answer never holds more than a few rows per pixel whatever the profile's size.

Times in every answer are integer nanoseconds relative to ``origin_ns`` (the profile's first
timestamp): absolute Kineto times exceed what a JavaScript number holds exactly.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from opscope.model import Profile, schema
from opscope.model.usercode import is_model_file

_ROW_FIELDS = (
    "kind",
    "name",
    "rank",
    "pid",
    "tid",
    "device",
    "stream",
    "step",
    "module",
    "is_backward",
    "flops",
    "bytes",
    "grid",
    "block",
    "registers",
    "shared_mem",
    "occupancy",
    "correlation",
    "external_id",
    "seq",
)
_JSON_FIELDS = ("input_dims", "input_types", "input_strides", "concrete_inputs", "args")
_DEVICE_WORK = schema.DEVICE_WORK
_LAUNCH_KINDS = ("runtime", "driver")
_PY_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.*)$")
# Characters that mean something to the regex engine (Rust syntax, incl. extended mode).
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")
MAX_MATCHES = 1000
# Python frames kept per thread when stacks are folded (the outermost ones); deeper frames are
# hidden and the operators under them move up, so a with_stack trace's rows stay few.
FOLD_LEVELS = 3
_OP_KINDS = ("cpu_op",)


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


@dataclass(frozen=True)
class Track:
    """One row group of the timeline: a host thread, a device stream, or a counter."""

    id: int
    type: str  # "slice" or "counter"
    rank: int
    group: str
    name: str
    pid: int | None = None
    tid: int | None = None
    is_device: bool = False
    max_depth: int = 0
    count: int = 0
    folded_depth: int | None = None  # max depth with Python stacks folded; None: nothing to fold
    launched_by: int | None = None  # device stream: the host track launching most of its work

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "rank": self.rank,
            "group": self.group,
            "name": self.name,
            "pid": self.pid,
            "tid": self.tid,
            "is_device": self.is_device,
            "max_depth": self.max_depth,
            "count": self.count,
            "folded_depth": self.folded_depth,
            "launched_by": self.launched_by,
        }


_PROC_SEP = " · "


def _process_names(
    keys: pl.DataFrame, thread_names: dict[tuple[int, int, int], str]
) -> dict[tuple[int, int, bool], str]:
    """(rank, pid, is_device) -> the process name its track names start with.

    Readers that know a trace's ``process_name`` metadata put it in front of each thread's name
    ("Ascend Hardware · Stream 2"); where every named track of a process shares that prefix, the
    group header carries it once and the tracks keep the rest.
    """
    seen: dict[tuple[int, int, bool], set[str | None]] = {}
    for row in keys.select("rank", "pid", "tid", "is_device").iter_rows():
        rank, pid, tid, is_dev = int(row[0]), int(row[1]), int(row[2]), bool(row[3])
        name = thread_names.get((rank, pid, tid))
        if name is None:  # an unnamed thread says nothing about its process's name
            continue
        head = name.split(_PROC_SEP, 1)[0] if _PROC_SEP in name else None
        seen.setdefault((rank, pid, is_dev), set()).add(head)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}  # type: ignore[misc]


class _Layer:
    """Slices sorted by (track, depth, start), with what the window queries search."""

    def __init__(self, df: pl.DataFrame) -> None:
        df = df.sort("track", "depth", "ts")
        # The running maximum of end times per (track, depth) is sorted, so the first slice that
        # can reach into a window is found by binary search even where slices overlap.
        df = df.with_columns(pl.col("end").cum_max().over("track", "depth").alias("end_max"))
        self.df = df
        self.ts = df.get_column("ts").to_numpy()
        self.end_max = df.get_column("end_max").to_numpy()
        groups = (
            df.with_row_index("row")
            .group_by("track", "depth")
            .agg(pl.col("row").min().alias("lo"), pl.col("row").max().alias("hi"))
            .sort("track", "depth")
        )
        self.ranges: dict[int, list[tuple[int, int, int]]] = {}
        for t, d, lo, hi in groups.iter_rows():
            self.ranges.setdefault(int(t), []).append((int(d), int(lo), int(hi) + 1))


def _folded_depths(ev: pl.DataFrame, keep: int) -> np.ndarray:
    """Each event's depth with Python stacks folded to their ``keep`` outermost frames; -1 where
    the event is a deeper Python frame (hidden).

    Along any chain of nesting the folded depth still grows strictly, so slices that overlap on
    one thread never land on the same row.
    """
    depth = ev.get_column("depth").fill_null(0).cast(pl.Int32).to_numpy().copy()
    is_py = (ev.get_column("kind").cast(pl.String) == "python_function").fill_null(False)
    if not bool(is_py.any()) or "parent_id" not in ev.columns:
        return depth
    py = is_py.to_numpy()
    prow = (
        ev.select("parent_id")
        .join(
            ev.with_row_index("prow").select(pl.col("id").alias("parent_id"), "prow"),
            on="parent_id",
            how="left",
            maintain_order="left",
        )
        .get_column("prow")
        .cast(pl.Int64)
        .fill_null(-1)
        .to_numpy()
    )
    py_anc = np.zeros(len(depth), dtype=np.int32)  # Python frames above each event
    anc = np.where(prow < 0, depth, 0).astype(np.int32)  # events above (depth where unlinked)
    order = np.argsort(depth, kind="stable")
    sorted_depth = depth[order]
    bounds = np.flatnonzero(np.diff(sorted_depth)) + 1
    for level in np.split(order, bounds):  # parents sit one level up: fill level by level
        rows = level[prow[level] >= 0]
        if rows.size:
            par = prow[rows]
            py_anc[rows] = py_anc[par] + py[par]
            anc[rows] = anc[par] + 1
    folded = np.minimum(py_anc, keep) + (anc - py_anc)
    return np.where(py & (py_anc >= keep), -1, folded).astype(np.int32)


class TimelineIndex:
    """Prepared columns of one Profile and the viewer's queries over them.

    Building it is one pass of vectorised Polars work (sorts, joins); each query afterwards is a
    few binary searches plus a group-by over the rows in the window.
    """

    def __init__(
        self, profile: Profile, overlays: Callable[[Profile], list[dict[str, Any]]] | None = None
    ) -> None:
        self.profile = profile
        ev = profile.events
        starts = [ev.get_column("ts_ns").min()]
        if profile.counters.height:
            starts.append(profile.counters.get_column("ts_ns").min())
        if profile.memory.height:
            starts.append(profile.memory.get_column("ts_ns").min())
        origin = min((int(s) for s in starts if s is not None), default=0)  # type: ignore[arg-type,call-overload]
        self.origin_ns = origin
        self._overlay_fn = overlays
        self._overlays: dict[str, Any] | None = None
        self._overlay_lock = threading.Lock()
        self._source: tuple[dict[str, tuple[list[str], bool]], pl.DataFrame] | None = None
        self._source_lock = threading.Lock()
        self._build_slices(ev, origin)
        self._build_counters(profile, origin)

    # Preparation --------------------------------------------------------------------------------

    def _build_slices(self, ev: pl.DataFrame, origin: int) -> None:
        dev = pl.col("kind").cast(pl.String).is_in(list(schema.DEVICE_KINDS))
        base = ev.select(
            pl.col("id"),
            pl.col("rank").fill_null(0),
            pl.col("pid").fill_null(0),
            pl.col("tid").fill_null(0),
            dev.alias("is_device"),
            pl.col("depth").fill_null(0).cast(pl.Int32),
            (pl.col("ts_ns") - origin).alias("ts"),
            pl.col("dur_ns").fill_null(0).clip(lower_bound=0).alias("dur"),
            pl.col("name").fill_null(""),
            pl.col("device"),
            pl.col("kind")
            .to_physical()
            .fill_null(schema.EVENT_KINDS.index("other"))
            .cast(pl.Int8)
            .alias("kind_code"),
            pl.Series("fdepth", _folded_depths(ev, FOLD_LEVELS), dtype=pl.Int32),
        ).filter(pl.col("ts").is_not_null())
        keys = (
            base.group_by("rank", "pid", "tid", "is_device")
            .agg(
                pl.len().alias("count"),
                pl.col("depth").max().alias("max_depth"),
                pl.col("device").drop_nulls().first().alias("device"),
            )
            .sort("rank", "is_device", "pid", "tid")
            .with_row_index("track")
        )
        thread_names: dict[tuple[int, int, int], str] = {}
        th = self.profile.threads
        if th.height:
            for r in th.select("rank", "pid", "tid", "name").drop_nulls().iter_rows():
                thread_names[(int(r[0]), int(r[1]), int(r[2]))] = str(r[3])
        procs = _process_names(keys, thread_names)
        dev_names: dict[tuple[int, int], str] = {}
        dv = self.profile.devices
        if dv.height:
            for r, d, n in dv.select("rank", "device", "name").drop_nulls().iter_rows():
                dev_names.setdefault((int(r), int(d)), str(n))
        self.tracks: list[Track] = []
        for row in keys.iter_rows(named=True):  # one per thread / stream
            rank, pid, tid, is_dev = (
                int(row["rank"]),
                int(row["pid"]),
                int(row["tid"]),
                bool(row["is_device"]),
            )
            name = thread_names.get((rank, pid, tid))
            proc = procs.get((rank, pid, is_dev))
            if proc is not None and name is not None:
                name = name[len(proc) + len(_PROC_SEP) :]
            if is_dev:
                dev_no = row["device"] if row["device"] is not None else pid
                dev_name = dev_names.get((rank, int(dev_no)))
                extra = f" · {proc}" if proc else (f" ({dev_name})" if dev_name else "")
                group = f"rank {rank} · device {dev_no}" + extra
                name = name or f"stream {tid}"
            else:
                group = f"rank {rank} · " + (f"{proc} ({pid})" if proc else f"process {pid}")
                name = name or f"thread {tid}"
            self.tracks.append(
                Track(
                    id=int(row["track"]),
                    type="slice",
                    rank=rank,
                    group=group,
                    name=name,
                    pid=pid,
                    tid=tid,
                    is_device=is_dev,
                    max_depth=int(row["max_depth"] or 0),
                    count=int(row["count"]),
                )
            )
        names = base.select(pl.col("name").unique().sort()).with_row_index("name_code")
        self.names: list[str] = names.get_column("name").to_list()
        self._names_series = names.get_column("name")
        self.kinds: list[str] = list(schema.EVENT_KINDS)
        df = (
            base.join(
                keys.select("rank", "pid", "tid", "is_device", "track"),
                on=["rank", "pid", "tid", "is_device"],
            )
            .join(names, on="name")
            .select(
                pl.col("track").cast(pl.Int32),
                "depth",
                "ts",
                "dur",
                (pl.col("ts") + pl.col("dur")).alias("end"),
                "id",
                pl.col("name_code").cast(pl.Int32),
                "kind_code",
                "fdepth",
            )
        )
        full = _Layer(df)
        self._df = full.df
        self._ts, self._end_max, self._ranges = full.ts, full.end_max, full.ranges
        # The same slices with Python stacks folded, only where there is something to fold.
        self._fold: _Layer | None = None
        folded_max: dict[int, int] = {}
        if df.height and bool((df.get_column("fdepth") != df.get_column("depth")).any()):
            self._fold = _Layer(
                df.filter(pl.col("fdepth") >= 0).with_columns(pl.col("fdepth").alias("depth"))
            )
            hidden = (
                df.filter(pl.col("fdepth") != pl.col("depth")).get_column("track").unique()
            ).to_list()
            fm = self._fold.df.group_by("track").agg(pl.col("depth").max())
            got = dict(fm.select("track", "depth").iter_rows())
            folded_max = {int(t): int(got.get(t) or 0) for t in hidden}
        # id -> row of the events table, and id -> track/depth for summaries.
        self._by_id = ev.with_row_index("_row").select("id", "_row")
        self._id_track = df.select("id", "track", "depth", "fdepth")
        launched_by = self._launchers(ev)
        self.tracks = [
            dataclasses.replace(
                t, folded_depth=folded_max.get(t.id), launched_by=launched_by.get(t.id)
            )
            for t in self.tracks
        ]
        self.end_ns = int(df.get_column("end").max() or 0) if df.height else 0  # type: ignore[arg-type]

    def _launchers(self, ev: pl.DataFrame) -> dict[int, int]:
        """Device track -> the host track whose launches started most of its work."""
        if "launch_id" not in ev.columns:
            return {}
        tr = self._id_track.select("id", "track")
        pairs = (
            ev.select("id", "launch_id")
            .drop_nulls()
            .join(tr, on="id")
            .join(tr.rename({"id": "launch_id", "track": "host"}), on="launch_id")
        )
        if pairs.height == 0:
            return {}
        best = (
            pairs.group_by("track", "host")
            .len()
            .sort("len", "host", descending=[True, False])
            .unique("track", keep="first")
        )
        return {int(t): int(h) for t, h in best.select("track", "host").iter_rows()}

    def _build_counters(self, profile: Profile, origin: int) -> None:
        series: list[tuple[int, str, pl.DataFrame]] = []
        c = profile.counters
        if c.height:
            for (rank, name), part in c.group_by("rank", "name", maintain_order=True):
                series.append(
                    (
                        int(rank or 0),
                        str(name),
                        part.select((pl.col("ts_ns") - origin).alias("ts"), "value"),
                    )  # type: ignore[call-overload]
                )
        m = profile.memory
        if m.height and m.get_column("total_allocated").null_count() < m.height:
            mm = m.filter(pl.col("total_allocated").is_not_null())
            for (rank, dtype, dev), part in mm.group_by(
                "rank", "device_type", "device", maintain_order=True
            ):
                where = "CPU" if dtype == 0 else f"device {dev if dev is not None else ''}".strip()
                series.append(
                    (
                        int(rank or 0),  # type: ignore[call-overload]
                        f"memory allocated ({where})",
                        part.sort("ts_ns").select(
                            (pl.col("ts_ns") - origin).alias("ts"),
                            pl.col("total_allocated").cast(pl.Float64).alias("value"),
                        ),
                    )
                )
        self._counters: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for rank, name, unsorted in series:
            part = unsorted.sort("ts")
            tid = len(self.tracks)
            self.tracks.append(
                Track(
                    id=tid,
                    type="counter",
                    rank=rank,
                    group=f"rank {rank} · counters",
                    name=name,
                    count=part.height,
                    max_depth=0,
                )
            )
            ts = part.get_column("ts").to_numpy()
            self._counters[tid] = (ts, part.get_column("value").to_numpy())
            if ts.size:
                self.end_ns = max(self.end_ns, int(ts[-1]))

    # Queries ------------------------------------------------------------------------------------

    def tracks_json(self) -> dict[str, Any]:
        """Every track, and the time range of the profile."""
        meta = self.profile.meta
        return {
            "origin_ns": self.origin_ns,
            # exact, for links that give absolute trace times (a JS number is not, past 2**53)
            "origin_text": str(self.origin_ns),
            "start_ns": 0,
            "end_ns": self.end_ns,
            "sources": [str(s) for s in meta.get("sources", [])],
            "events": self._df.height,
            "tracks": [t.to_json() for t in self.tracks],
        }

    def slices(
        self, track_ids: list[int], start_ns: int, end_ns: int, px: int, *, folded: bool = False
    ) -> dict[str, Any]:
        """Slices of ``track_ids`` overlapping ``[start_ns, end_ns)`` at ``px`` pixels across.

        A slice at least one pixel wide comes back as itself (``count`` 1); shorter ones are
        merged per (depth, pixel): the bucket spans its slices' first start to last end, carries
        how many it holds, and the id and name of the longest. ``folded``: with Python stacks
        folded (:data:`FOLD_LEVELS`), depths being the folded ones, on tracks that have any.
        """
        px = max(1, min(int(px), 20000))
        end_ns = max(end_ns, start_ns + 1)
        ns_per_px = max(1, (end_ns - start_ns) // px)
        out = []
        for tid in track_ids:
            if tid in self._counters:
                out.append(self._counter(tid, start_ns, end_ns, ns_per_px))
            elif tid in self._ranges:
                use = self._fold if folded and self._fold is not None else None
                layer = use if use is not None and tid in use.ranges else None
                out.append(self._slice_track(tid, start_ns, end_ns, ns_per_px, layer))
                out[-1]["folded"] = layer is not None
        return {"start_ns": start_ns, "end_ns": end_ns, "ns_per_px": ns_per_px, "tracks": out}

    def _window(
        self, tid: int, start: int, end: int, layer: _Layer | None = None
    ) -> list[pl.DataFrame]:
        """Row blocks of one track that may overlap ``[start, end)``: two searches per depth."""
        ranges, ts, end_max, df = (
            (layer.ranges, layer.ts, layer.end_max, layer.df)
            if layer is not None
            else (self._ranges, self._ts, self._end_max, self._df)
        )
        parts = []
        for _depth, lo, hi in ranges.get(tid, []):
            a = lo + int(np.searchsorted(end_max[lo:hi], start, side="right"))
            b = lo + int(np.searchsorted(ts[lo:hi], end, side="left"))
            if b > a:
                parts.append(df.slice(a, b - a))
        return parts

    def _slice_track(
        self, tid: int, start: int, end: int, ns_per_px: int, layer: _Layer | None = None
    ) -> dict[str, Any]:
        parts = self._window(tid, start, end, layer)
        empty = {
            "track": tid,
            "type": "slice",
            "ts": [],
            "dur": [],
            "depth": [],
            "id": [],
            "count": [],
            "name": [],
            "names": [],
        }
        if not parts:
            return empty
        rows = pl.concat(parts).filter(pl.col("end") > start)
        if rows.height == 0:
            return empty
        big = rows.filter(pl.col("dur") >= ns_per_px).select(
            "depth", "ts", "dur", "id", "name_code", pl.lit(1, dtype=pl.UInt32).alias("count")
        )
        small = (
            rows.filter(pl.col("dur") < ns_per_px)
            .with_columns(((pl.col("ts") - start) // ns_per_px).alias("bucket"))
            .group_by("depth", "bucket")
            .agg(
                pl.col("ts").min().alias("ts"),
                pl.col("end").max().alias("end"),
                pl.col("id").sort_by("dur").last().alias("id"),
                pl.col("name_code").sort_by("dur").last().alias("name_code"),
                pl.len().alias("count"),
            )
            .select(
                "depth",
                "ts",
                (pl.col("end") - pl.col("ts")).alias("dur"),
                "id",
                "name_code",
                pl.col("count").cast(pl.UInt32),
            )
        )
        res = pl.concat([big, small]).sort("depth", "ts")
        codes = res.get_column("name_code")
        uniq = codes.unique().sort()
        local = pl.DataFrame({"name_code": uniq}).with_row_index("name")
        res = res.join(local, on="name_code", how="left", maintain_order="left")
        return {
            "track": tid,
            "type": "slice",
            "ts": res.get_column("ts").to_list(),
            "dur": res.get_column("dur").to_list(),
            "depth": res.get_column("depth").to_list(),
            "id": res.get_column("id").to_list(),
            "count": res.get_column("count").to_list(),
            "name": res.get_column("name").to_list(),
            "names": [self.names[int(c)] for c in uniq.to_list()],
        }

    def _counter(self, tid: int, start: int, end: int, ns_per_px: int) -> dict[str, Any]:
        ts, val = self._counters[tid]
        a = max(0, int(np.searchsorted(ts, start, side="right")) - 1)  # the value in force at start
        b = int(np.searchsorted(ts, end, side="right")) + 1
        t, v = ts[a:b], val[a:b]
        if t.size > 2:
            # Per pixel: the largest value, so that a peak never disappears when zoomed out.
            df = pl.DataFrame({"ts": t, "value": v}).with_columns(
                ((pl.col("ts") - start) // ns_per_px).alias("bucket")
            )
            df = (
                df.group_by("bucket", maintain_order=True)
                .agg(pl.col("ts").first(), pl.col("value").max())
                .sort("ts")
            )
            t_list, v_list = df.get_column("ts").to_list(), df.get_column("value").to_list()
        else:
            t_list, v_list = t.tolist(), v.tolist()
        vmax = float(val.max()) if val.size else 0.0
        return {"track": tid, "type": "counter", "ts": t_list, "value": v_list, "max": vmax}

    def search(
        self,
        q: str,
        case: bool = False,
        word: bool = False,
        limit: int = MAX_MATCHES,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Events whose name matches ``q`` (substring; ``word``: whole word), in time order.

        The match runs once over the distinct names, then selects events by name code, so its
        cost is the number of distinct names plus one integer filter over the events.
        """
        if not q:
            return {"q": q, "total": 0, "offset": 0, "matches": []}
        if word:
            pattern = r"\b" + _escape(q) + r"\b"
            hit = self._names_series.str.contains(("" if case else "(?i)") + pattern)
        elif case:
            hit = self._names_series.str.contains(q, literal=True)
        else:
            hit = self._names_series.str.contains("(?i)" + _escape(q))
        codes = pl.Series("c", np.flatnonzero(hit.fill_null(False).to_numpy()), dtype=pl.Int32)
        found = self._df.filter(pl.col("name_code").is_in(codes.implode())).sort(
            "ts", "track", "depth"
        )
        total = found.height
        page = found.slice(max(0, offset), max(0, min(limit, MAX_MATCHES)))
        matches = [
            {
                "id": r[0],
                "track": r[1],
                "depth": r[2],
                "ts": r[3],
                "dur": r[4],
                "name": self.names[r[5]],
                "fdepth": r[6],
            }
            for r in page.select(
                "id", "track", "depth", "ts", "dur", "name_code", "fdepth"
            ).iter_rows()
        ]
        return {"q": q, "total": total, "offset": offset, "matches": matches}

    def range_summary(
        self, start_ns: int, end_ns: int, track_ids: list[int] | None = None, top: int = 10
    ) -> dict[str, Any]:
        """What runs in ``[start_ns, end_ns)`` on ``track_ids`` (default: every slice track).

        Like Perfetto's area selection: how many slices overlap the range, how many of them are
        operators and device kernels, and per kind and per name (the ``top`` by time) the count
        and the time inside the range (each slice clipped to it; nested slices each count).
        """
        end_ns = max(int(end_ns), int(start_ns) + 1)
        tids = [t.id for t in self.tracks if t.type == "slice"] if track_ids is None else track_ids
        parts = [p for t in tids for p in self._window(t, start_ns, end_ns)]
        kind_names = pl.DataFrame(
            {"kind_code": list(range(len(self.kinds))), "kind": self.kinds},
            schema={"kind_code": pl.Int8, "kind": pl.String},
        )
        empty: dict[str, Any] = {
            "start_ns": start_ns,
            "end_ns": end_ns,
            "tracks": len(tids),
            "slices": 0,
            "ops": 0,
            "kernels": 0,
            "kernel_ns": 0,
            "by_kind": [],
            "top": [],
        }
        if not parts:
            return empty
        rows = (
            pl.concat(parts)
            .filter((pl.col("end") > start_ns) & (pl.col("ts") < end_ns))
            .with_columns(
                (
                    pl.min_horizontal(pl.col("end"), pl.lit(end_ns))
                    - pl.max_horizontal(pl.col("ts"), pl.lit(start_ns))
                ).alias("in_range")
            )
            .join(kind_names, on="kind_code", how="left")
        )
        if rows.height == 0:
            return empty
        by_kind = (
            rows.group_by("kind")
            .agg(pl.len().alias("count"), pl.col("in_range").sum().alias("total_ns"))
            .sort("total_ns", "kind", descending=[True, False])
        )
        by_name = (
            rows.group_by("name_code", "kind")
            .agg(pl.len().alias("count"), pl.col("in_range").sum().alias("total_ns"))
            .sort("total_ns", "count", "name_code", descending=[True, True, False])
            .head(max(0, min(int(top), 100)))
        )
        kinds = rows.get_column("kind")
        kernels = rows.filter(kinds.is_in(list(_DEVICE_WORK)))
        return {
            **empty,
            "slices": rows.height,
            "ops": int(kinds.is_in(list(_OP_KINDS)).sum()),
            "kernels": kernels.height,
            "kernel_ns": int(kernels.get_column("in_range").sum() or 0),
            "by_kind": [
                {"kind": k, "count": int(c), "total_ns": int(t)} for k, c, t in by_kind.iter_rows()
            ],
            "top": [
                {"name": self.names[int(n)], "kind": k, "count": int(c), "total_ns": int(t)}
                for n, k, c, t in by_name.iter_rows()
            ],
        }

    # Details ------------------------------------------------------------------------------------

    def _row(self, event_id: int) -> dict[str, Any] | None:
        hit = self._by_id.filter(pl.col("id") == event_id)
        if hit.height == 0:
            return None
        return self.profile.events.row(int(hit.item(0, "_row")), named=True)

    def summary(self, event_id: int | None) -> dict[str, Any] | None:
        """id, name, kind, track, depth, start and duration of one event (for links and flows)."""
        if event_id is None:
            return None
        row = self._row(int(event_id))
        if row is None:
            return None
        td = self._id_track.filter(pl.col("id") == event_id)
        return {
            "id": int(event_id),
            "name": row["name"],
            "kind": None if row["kind"] is None else str(row["kind"]),
            "track": int(td.item(0, "track")) if td.height else None,
            "depth": int(td.item(0, "depth")) if td.height else 0,
            "fdepth": int(td.item(0, "fdepth")) if td.height else 0,
            "ts": None if row["ts_ns"] is None else int(row["ts_ns"]) - self.origin_ns,
            "dur": int(row["dur_ns"] or 0),
        }

    def _summaries(self, df: pl.DataFrame) -> list[dict[str, Any]]:
        out = []
        for i in df.get_column("id").to_list()[:200]:
            s = self.summary(int(i))
            if s is not None:
                out.append(s)
        return out

    def event(self, event_id: int) -> dict[str, Any] | None:
        """Everything the details panel shows about one event, or None for an unknown id."""
        row = self._row(event_id)
        if row is None:
            return None
        ev = self.profile.events
        out: dict[str, Any] = {"id": event_id, **{k: _plain(row.get(k)) for k in _ROW_FIELDS}}
        out["ts"] = None if row["ts_ns"] is None else int(row["ts_ns"]) - self.origin_ns
        out["dur"] = int(row["dur_ns"] or 0)
        out["dur_us"] = out["dur"] / 1e3
        for k in _JSON_FIELDS:
            out[k] = _maybe_json(row.get(k))
        me = self.summary(event_id) or {}
        out["track"] = me.get("track")
        out["depth"] = me.get("depth", 0)
        # the row it is drawn on while the track's Python stack is folded (-1: folded away);
        # without it a selection on a folded track was outlined on the track's first row
        out["fdepth"] = me.get("fdepth", out["depth"])
        # Ancestors on the same thread, outermost last: a loop over depth, not over events.
        ancestors = []
        parent = row.get("parent_id")
        seen = 0
        while parent is not None and seen < 64:
            s = self.summary(int(parent))
            if s is None:
                break
            ancestors.append(s)
            prow = self._row(int(parent))
            parent = None if prow is None else prow.get("parent_id")
            seen += 1
        out["ancestors"] = ancestors
        stack = self._stack(row.get("stack_id"))
        if not stack:
            stack = _python_frames(ancestors)
        out["stack"] = stack
        out["source"] = next((f for f in stack if f.get("is_user")), None)
        out["source_code"] = (
            self.source_context(str(out["source"]["file"]), int(out["source"]["line"]))
            if out["source"] and out["source"].get("line") is not None
            else None
        )
        kinds = pl.col("kind").cast(pl.String)
        out["kernels"] = self._summaries(
            ev.filter((pl.col("op_id") == event_id) & kinds.is_in(list(_DEVICE_WORK)))
        )
        out["launches"] = self._summaries(
            ev.filter((pl.col("op_id") == event_id) & kinds.is_in(list(_LAUNCH_KINDS)))
        )
        out["launch"] = self.summary(row.get("launch_id"))
        out["op"] = self.summary(row.get("op_id"))
        out["forward"] = self.summary(row.get("fwd_id"))
        out["backward"] = self._summaries(ev.filter(pl.col("fwd_id") == event_id))
        return out

    def source_context(self, file: str, line: int, context: int = 4) -> dict[str, Any] | None:
        """The captured code around ``file:line`` (run directories carry it: sources/) with the
        forward/backward time charged to each line, like a line profiler; None when the run
        directory has no copy of the file."""
        from opscope.analysis.attribution import charged_lines
        from opscope.analysis.source_view import _match, captured_sources

        with self._source_lock:
            if self._source is None:
                src = captured_sources(self.profile)
                per_line = pl.DataFrame(
                    schema={
                        "file": pl.String,
                        "line": pl.Int32,
                        "fwd_ns": pl.Int64,
                        "bwd_ns": pl.Int64,
                    }
                )
                if src:
                    per_line = (
                        charged_lines(self.profile)
                        .filter(pl.col("file").is_not_null() & pl.col("line").is_not_null())
                        .group_by("file", "line")
                        .agg(pl.col("fwd_ns").sum(), pl.col("bwd_ns").sum())
                    )
                self._source = (src, per_line)
            src, per_line = self._source
        path = _match(file, list(src))
        if path is None:
            return None
        text, truncated = src[path]
        times = {
            int(r[0]): (int(r[1]), int(r[2]))
            for r in per_line.filter(pl.col("file") == file)
            .select("line", "fwd_ns", "bwd_ns")
            .iter_rows()
        }
        lo, hi = max(1, line - context), min(len(text), line + context)
        return {
            "path": path,
            "line": line,
            "truncated": truncated,
            "lines": [
                {
                    "line": i,
                    "text": text[i - 1],
                    "fwd_us": times.get(i, (0, 0))[0] / 1e3,
                    "bwd_us": times.get(i, (0, 0))[1] / 1e3,
                }
                for i in range(lo, hi + 1)
            ],
        }

    def _stack(self, stack_id: Any) -> list[dict[str, Any]]:
        if stack_id is None or self.profile.stacks.height == 0:
            return []
        fr = self.profile.stacks.filter(pl.col("stack_id") == int(stack_id)).sort("depth")
        return [
            {
                "file": r["file"],
                "line": r["line"],
                "function": r["function"],
                "is_user": bool(r["is_user"]),
            }
            for r in fr.iter_rows(named=True)
        ]

    def flows(self, event_id: int) -> dict[str, Any]:
        """Arrows touching one event: recorded flows, launch → kernel and forward → backward links.

        For an operator, the arrows from each of its launches to their kernels come too, so that
        one click shows where its device work ran.
        """
        ev = self.profile.events
        pairs: list[tuple[str, int, int]] = []
        fl = self.profile.flows
        if fl.height:
            for kind, s, d in (
                fl.filter((pl.col("src_id") == event_id) | (pl.col("dst_id") == event_id))
                .select(pl.col("kind").cast(pl.String), "src_id", "dst_id")
                .drop_nulls()
                .iter_rows()
            ):
                pairs.append((str(kind), int(s), int(d)))
        row = self._row(event_id)
        if row is not None:
            if row.get("launch_id") is not None:
                pairs.append(("ac2g", int(row["launch_id"]), event_id))
            if row.get("fwd_id") is not None:
                pairs.append(("fwdbwd", int(row["fwd_id"]), event_id))
            for i in ev.filter(pl.col("fwd_id") == event_id).get_column("id").to_list()[:100]:
                pairs.append(("fwdbwd", event_id, int(i)))
            kids = ev.filter(pl.col("launch_id") == event_id).get_column("id").to_list()[:100]
            pairs.extend(("ac2g", event_id, int(k)) for k in kids)
            launches = ev.filter(
                (pl.col("op_id") == event_id)
                & pl.col("kind").cast(pl.String).is_in(list(_LAUNCH_KINDS))
            ).get_column("id")
            if launches.len():
                for kid, lid in (
                    ev.filter(pl.col("launch_id").is_in(launches.implode()))
                    .select("id", "launch_id")
                    .head(200)
                    .iter_rows()
                ):
                    pairs.append(("ac2g", int(lid), int(kid)))
        out = []
        seen: set[tuple[int, int]] = set()
        for kind, s, d in pairs:
            if (s, d) in seen:
                continue
            seen.add((s, d))
            src, dst = self.summary(s), self.summary(d)
            if src is not None and dst is not None:
                out.append({"kind": kind, "src": src, "dst": dst})
        return {"id": event_id, "flows": out}

    def overlays(self) -> dict[str, Any]:
        """Anomalies, findings and the critical path to highlight (computed once, lazily).

        ``overlays``: the items to outline and list, findings first (grouped by rule, rules in the
        order the overlay function gave them), then anomalies; ``bands``: the critical path, one
        list of merged ``[ts, end]`` intervals per track, drawn as a band instead of one outline
        per node; ``layers``: each layer's key, title and item count, in legend order.
        """
        with self._overlay_lock:
            if self._overlays is None:
                items: list[dict[str, Any]] = []
                if self._overlay_fn is not None:
                    try:
                        items = self._overlay_fn(self.profile)
                    except Exception as e:  # an analysis bug must not take the timeline down
                        items = [
                            {
                                "kind": "error",
                                "label": f"overlays unavailable: {type(e).__name__}: {e}",
                            }
                        ]
                path = [int(it["id"]) for it in items if it.get("kind") == "critical_path"]
                path = [i for i in path if i is not None]
                rest = [it for it in items if it.get("kind") != "critical_path"]
                # Findings first, grouped by rule; the rules in the order advise gave them
                # (largest estimated saving first), then anomalies, then anything else.
                order = {"finding": 0, "anomaly": 1}
                rule_at: dict[str, int] = {}
                for it in rest:
                    rule_at.setdefault(str(it.get("rule")), len(rule_at))
                rest.sort(
                    key=lambda it: (order.get(str(it.get("kind")), 2), rule_at[str(it.get("rule"))])
                )
                resolved = []
                for it in rest:
                    s = self.summary(it.get("id")) if it.get("id") is not None else None
                    resolved.append({**it, "layer": _layer_key(it), "event": s})
                bands = self._bands(path)
                layers: dict[str, dict[str, Any]] = {}
                for it in resolved:
                    key = it["layer"]
                    if key not in layers:
                        title = it.get("rule") or it.get("kind") or "other"
                        layers[key] = {"key": key, "kind": it.get("kind"), "title": title}
                        layers[key]["count"] = 0
                    layers[key]["count"] += 1
                if path:
                    layers["critical_path"] = {
                        "key": "critical_path",
                        "kind": "critical_path",
                        "title": "critical path",
                        "count": len(path),
                    }
                self._overlays = {
                    "overlays": resolved,
                    "bands": bands,
                    "layers": list(layers.values()),
                }
            return self._overlays

    def _bands(self, ids: list[int]) -> list[dict[str, Any]]:
        """The events ``ids`` per track as merged, sorted ``[ts, end]`` intervals."""
        if not ids:
            return []
        ev = (
            pl.DataFrame({"id": ids}, schema={"id": pl.Int64})
            .unique()
            .join(self._df.select("id", "track", "ts", "end"), on="id")
            .sort("track", "ts")
        )
        out = []
        for (track,), part in ev.group_by("track", maintain_order=True):
            starts: list[int] = []
            ends: list[int] = []
            for a, b in part.select("ts", "end").iter_rows():
                if starts and a <= ends[-1]:
                    ends[-1] = max(ends[-1], int(b))
                else:
                    starts.append(int(a))
                    ends.append(int(b))
            out.append({"kind": "critical_path", "track": int(track), "ts": starts, "end": ends})  # type: ignore[call-overload]
        return out


def _layer_key(item: dict[str, Any]) -> str:
    kind = str(item.get("kind") or "other")
    return f"{kind}:{item['rule']}" if item.get("rule") else kind


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)


def _maybe_json(v: Any) -> Any:
    if v is None:
        return None
    try:
        return json.loads(v)
    except (TypeError, ValueError):
        return v


def _python_frames(ancestors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A call stack from the enclosing python_function slices, when the trace has no stacks."""
    frames = []
    for a in ancestors:
        if a.get("kind") != "python_function":
            continue
        m = _PY_FRAME.match(str(a.get("name") or ""))
        if m is None:
            continue
        file = m.group("file")
        frames.append(
            {
                "file": file,
                "line": int(m.group("line")),
                "function": m.group("func"),
                "is_user": is_model_file(file),
            }
        )
    return frames
