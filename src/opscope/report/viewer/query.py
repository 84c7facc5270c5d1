"""The timeline viewer's queries over one cached, columnar Profile.

Everything the page asks is answered from columns prepared once here: events sorted by
(track, depth, start), so that a window of one track at one depth is a binary search away, and
slices shorter than a pixel are merged per pixel bucket with a Polars group-by (as Perfetto does),
so that an answer never holds more than a few rows per pixel whatever the profile's size.

Times in every answer are integer nanoseconds relative to ``origin_ns`` (the profile's first
timestamp): absolute Kineto times exceed what a JavaScript number holds exactly.
"""

from __future__ import annotations

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
        }


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
        self._overlays: list[dict[str, Any]] | None = None
        self._overlay_lock = threading.Lock()
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
        self.tracks: list[Track] = []
        for row in keys.iter_rows(named=True):  # one per thread / stream
            rank, pid, tid, is_dev = (
                int(row["rank"]),
                int(row["pid"]),
                int(row["tid"]),
                bool(row["is_device"]),
            )
            name = thread_names.get((rank, pid, tid))
            if is_dev:
                dev_no = row["device"] if row["device"] is not None else pid
                group = f"rank {rank} · device {dev_no}"
                name = name or f"stream {tid}"
            else:
                group = f"rank {rank} · process {pid}"
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
            )
            .sort("track", "depth", "ts")
        )
        # The running maximum of end times per (track, depth) is sorted, so the first slice that
        # can reach into a window is found by binary search even where slices overlap.
        df = df.with_columns(pl.col("end").cum_max().over("track", "depth").alias("end_max"))
        self._df = df
        self._ts = df.get_column("ts").to_numpy()
        self._end_max = df.get_column("end_max").to_numpy()
        groups = (
            df.with_row_index("row")
            .group_by("track", "depth")
            .agg(pl.col("row").min().alias("lo"), pl.col("row").max().alias("hi"))
            .sort("track", "depth")
        )
        self._ranges: dict[int, list[tuple[int, int, int]]] = {}
        for t, d, lo, hi in groups.iter_rows():
            self._ranges.setdefault(int(t), []).append((int(d), int(lo), int(hi) + 1))
        # id -> row of the events table, and id -> track/depth for summaries.
        self._by_id = ev.with_row_index("_row").select("id", "_row")
        self._id_track = df.select("id", "track", "depth")
        self.end_ns = int(df.get_column("end").max() or 0) if df.height else 0  # type: ignore[arg-type]

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
            "start_ns": 0,
            "end_ns": self.end_ns,
            "sources": [str(s) for s in meta.get("sources", [])],
            "events": self._df.height,
            "tracks": [t.to_json() for t in self.tracks],
        }

    def slices(self, track_ids: list[int], start_ns: int, end_ns: int, px: int) -> dict[str, Any]:
        """Slices of ``track_ids`` overlapping ``[start_ns, end_ns)`` at ``px`` pixels across.

        A slice at least one pixel wide comes back as itself (``count`` 1); shorter ones are
        merged per (depth, pixel): the bucket spans its slices' first start to last end, carries
        how many it holds, and the id and name of the longest.
        """
        px = max(1, min(int(px), 20000))
        end_ns = max(end_ns, start_ns + 1)
        ns_per_px = max(1, (end_ns - start_ns) // px)
        out = []
        for tid in track_ids:
            if tid in self._counters:
                out.append(self._counter(tid, start_ns, end_ns, ns_per_px))
            elif tid in self._ranges:
                out.append(self._slice_track(tid, start_ns, end_ns, ns_per_px))
        return {"start_ns": start_ns, "end_ns": end_ns, "ns_per_px": ns_per_px, "tracks": out}

    def _slice_track(self, tid: int, start: int, end: int, ns_per_px: int) -> dict[str, Any]:
        parts = []
        for _depth, lo, hi in self._ranges[tid]:
            a = lo + int(np.searchsorted(self._end_max[lo:hi], start, side="right"))
            b = lo + int(np.searchsorted(self._ts[lo:hi], end, side="left"))
            if b > a:
                parts.append(self._df.slice(a, b - a))
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
            }
            for r in page.select("id", "track", "depth", "ts", "dur", "name_code").iter_rows()
        ]
        return {"q": q, "total": total, "offset": offset, "matches": matches}

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
        """Anomalies, findings and critical-path events to highlight (computed once, lazily)."""
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
                resolved = []
                for it in items:
                    s = self.summary(it.get("id")) if it.get("id") is not None else None
                    resolved.append({**it, "event": s})
                self._overlays = resolved
            return {"overlays": self._overlays}


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


def default_overlays(profile: Profile) -> list[dict[str, Any]]:
    """What the analyses registered say about ``profile``, as overlay items with event ids.

    Uses the analyses registered as ``"anomalies"`` and ``"critical_path"`` and the advise rules
    when they are importable; any of them missing (or failing) leaves its part out.
    """
    items: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    try:
        import opscope.analysis  # noqa: F401  (registers the built-in analyses)
        from opscope.analysis import registry
    except ImportError:
        return items
    for name in ("anomalies", "critical_path"):
        if name not in registry.names():
            continue
        try:
            res = registry.run(name, profile)
        except Exception:
            continue
        results[name] = res
        for table_name, table in res.tables().items():
            id_col = next((c for c in ("event_id", "id") if c in table.columns), None)
            if id_col is None:
                continue
            kind = "critical_path" if name == "critical_path" else "anomaly"
            if kind == "critical_path" and table_name != "path":
                continue
            for r in table.head(2000).iter_rows(named=True):
                if r[id_col] is None:
                    continue
                label_bits = [
                    str(r[k]) for k in ("reason", "kind", "name", "op") if r.get(k) is not None
                ]
                if "step" in r and r["step"] is not None:
                    label_bits.append(f"step {r['step']}")
                label = " · ".join(dict.fromkeys(label_bits)) or name  # each bit once
                items.append({"kind": kind, "id": int(r[id_col]), "label": label})
    try:
        from opscope.advise import advise

        for f in advise(profile, results):
            ids = list((f.evidence or {}).get("event_ids") or [])
            label = f"[{f.severity}] {f.title} ({f.location})"
            if not ids:
                items.append({"kind": "finding", "id": None, "label": label})
            for i in ids[:20]:
                items.append({"kind": "finding", "id": int(i), "label": label})
    except Exception:
        pass
    return items
