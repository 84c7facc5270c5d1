"""Communication of one Ascend rank: ``communication.json`` and ``communication_matrix.json``.

``communication.json`` (one per rank, in ``ASCEND_PROFILER_OUTPUT``)::

    {"step50": {"collective": {"hcom_allReduce__586_0_1@<group>": {
        "Communication Time Info": {"Start Timestamp(us)", "Elapse Time(ms)", "Transit Time(ms)",
                                    "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)",
                                    "Wait Time Ratio", "Synchronization Time Ratio"},
        "Communication Bandwidth Info": {"HCCS": {"Transit Size(MB)", "Transit Time(ms)",
                                                  "Bandwidth(GB/s)", ...}, "RDMA": ..., ...}},
        "Total Op Info": {...}}, "p2p": {...}}}

``communication_matrix.json``: the same steps and kinds, then per collective (or per summary
entry) the links ``"<src>-<dst>"`` with transport, size, time and bandwidth. The link ends are
the ranks' *local* indices in the collective's group; they are mapped to global ranks through
the group's rank list in ``profiler_metadata.json``::

    "parallel_group_info": {"<group>": {"group_name": "dp", "group_rank": 0,
                                        "global_ranks": [0, 2, 4, 6]}}

Newer exports name the group by a hash of its metadata id (``5862276123280252691`` for
``group_name_7``, :func:`group_hash`); :func:`parallel_groups` lists each group under both. A
group the metadata does not hold keeps its ends as written (local index = global rank, which
holds for the world group; the cluster analysis maps such groups across ranks). Besides one
entry per collective the matrix holds summary entries: ``allreduce-top1``, ``-middle``,
``-bottomN`` (each a copy of one real collective's links, named in ``Op Name``) and ``-total``
and ``Total Op Info`` (sums). Summary entries are never added to the links: a top/middle/bottom
entry adds its collective's links only when the file has no entry of that collective itself
(older exports write only the summaries); totals go to ``link_totals``.

Units: times ns, sizes bytes (the files' MB are 10^6 bytes), bandwidth GB/s as written.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError
from opscope.ingest.ascend import OUTPUT_DIR, find_output_dir, rank_of
from opscope.model import Profile
from opscope.redact import redact

_SUMMARY = re.compile(r"-(top\d*|middle\d*|bottom\d*|total)$", re.IGNORECASE)
_TOTAL = "Total Op Info"

i64, i32, f64, st = pl.Int64, pl.Int32, pl.Float64, pl.String
COLLECTIVES_SCHEMA: dict[str, Any] = {
    "rank": i32,
    "step": i32,
    "kind": st,
    "op_name": st,
    "group": st,
    "start_ns": i64,
    "elapse_ns": i64,
    "transit_ns": i64,
    "wait_ns": i64,
    "synchronization_ns": i64,
    "idle_ns": i64,
    "wait_ratio": f64,
    "synchronization_ratio": f64,
}
BANDWIDTH_SCHEMA: dict[str, Any] = {
    "rank": i32,
    "step": i32,
    "kind": st,
    "op_name": st,
    "group": st,
    "transport": st,
    "size_bytes": i64,
    "time_ns": i64,
    "bandwidth_gbps": f64,
}
LINKS_SCHEMA: dict[str, Any] = {
    "rank": i32,
    "step": i32,
    "kind": st,
    "group": st,
    "op_name": st,
    "src_rank": i32,
    "dst_rank": i32,
    "transport": st,
    "size_bytes": i64,
    "time_ns": i64,
    "bandwidth_gbps": f64,
}


def is_summary_op(name: str) -> bool:
    """True for the matrix's summary entries (``allreduce-top1``, ``-middle``, ``-bottom2``,
    ``-total``, ``Total Op Info``), which are copies or sums of real collectives' links."""
    return name == _TOTAL or bool(_SUMMARY.search(name.partition("@")[0]))


def _root(path: Path) -> Path:
    out = find_output_dir(Path(path))
    return out.parent if out.name == OUTPUT_DIR else out


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"not valid JSON ({first})", path) from None
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", path) from None
    return data if isinstance(data, dict) else {}


def metadata(path: Path) -> dict[str, Any]:
    """``profiler_metadata.json`` of a rank (its folder or output folder); {} when absent."""
    return _json(_root(path) / "profiler_metadata.json")


def group_hash(group_id: str) -> int:
    """The id under which HCCL's communication files name a group: two 32-bit polynomial hashes
    of the group id (``group_name_5``), multipliers 29 (high word) and 131 (low word). This is
    msprof-analyze's ``double_hash`` (msprof-analyze 26.2.0,
    ``cluster_analyse/common_func/utils.py``), by which its cluster analysis maps
    ``parallel_group_info`` to the matrix's groups; it gives all 12 group hashes of msinsight's
    4-rank Megatron level2 run."""
    hi = lo = 0
    for ch in group_id:
        hi = (hi * 29 + ord(ch)) & 0xFFFFFFFF
        lo = (lo * 131 + ord(ch)) & 0xFFFFFFFF
    return (hi << 32) | lo


def parallel_groups(path: Path) -> dict[str, dict[str, Any]]:
    """Group id -> ``{"id": str, "name": str | None, "global_ranks": [int, ...]}`` from the
    metadata's ``parallel_group_info`` (empty when the metadata has none). Each group is listed
    under its id (``group_name_5``) and under :func:`group_hash` of it (``5862276114690318097``),
    the name HCCL's communication files give it; ``global_ranks`` sorted (a group's local rank
    i is its i-th lowest global rank, as torch assigns them and msprof-analyze maps them)."""
    info = metadata(path).get("parallel_group_info")
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(info, dict):
        return out
    for gid, g in info.items():
        if not isinstance(g, dict):
            continue
        ranks = g.get("global_ranks")
        if isinstance(ranks, list) and all(type(r) is int for r in ranks):
            name = g.get("group_name")
            entry = {
                "id": str(gid),
                "name": name if isinstance(name, str) else None,
                "global_ranks": sorted(ranks),
            }
            out[str(gid)] = entry
            out.setdefault(str(group_hash(str(gid))), entry)
    return out


def world_size(path: Path) -> int | None:
    """The job's world size as the rank's metadata records it: ``distributed_args.world_size``
    or ``world_size`` (metadata, then profiler_info), else one past the highest rank of its
    parallel groups; None when nothing says."""
    root = _root(path)
    sources = [metadata(path)]
    for f in sorted(root.glob("profiler_info*.json")):
        sources.append(_json(f))
        break
    for src in sources:
        d = src.get("distributed_args")
        for cand in (d.get("world_size") if isinstance(d, dict) else None, src.get("world_size")):
            if isinstance(cand, int) and cand > 0:
                return cand
    ranks = [r for g in parallel_groups(path).values() for r in g["global_ranks"]]
    return max(ranks) + 1 if ranks else None


def _float(v: Any) -> float | None:
    try:
        return None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return None


def _scaled(v: Any, k: float) -> int | None:
    f = _float(v)
    return None if f is None else round(f * k)


def _step(key: str) -> int | None:
    m = re.search(r"(\d+)$", str(key))
    return int(m.group(1)) if m else None


def read_communication(path: Path) -> dict[str, pl.DataFrame]:
    """Per-collective timing, per-transport bandwidth and per-link traffic of one Ascend rank.

    Returns:

    - ``"collectives"``: one row per collective call (:data:`COLLECTIVES_SCHEMA`): elapse,
      transit, wait, synchronisation, idle (ns) and the two ratios.
    - ``"bandwidth"``: one row per collective per transport (:data:`BANDWIDTH_SCHEMA`).
    - ``"links"``: one row per collective per link, ends as global ranks, summary entries left
      out (:data:`LINKS_SCHEMA`).
    - ``"link_totals"``: the matrix's ``-total`` / ``Total Op Info`` rows, ends global, op_name
      the summary's name.

    Each table also has ``parallel_group``: the group's name in the metadata's
    ``parallel_group_info`` (``dp``, ``pp``, ``tp``...; groups named by id or by its hash),
    null when the metadata does not hold the group.

    Either file may be absent (its tables are then empty). Raises
    :class:`~opscope.errors.InputError` naming a file that is not valid JSON.
    """
    return _read_communication(Path(path))[0]


def _read_communication(
    path: Path,
) -> tuple[dict[str, pl.DataFrame], list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`read_communication`, and the rows of its collectives and bandwidth tables."""
    out = find_output_dir(Path(path))
    rank = rank_of(out)
    rank_id = 0 if rank is None else rank
    groups = parallel_groups(path)
    comm_src, matrix_src = _sources(out)
    coll, bw = _comm_rows(comm_src, rank_id)
    links, totals = _matrix(matrix_src, rank_id, groups)
    names = {g: v["name"] for g, v in groups.items() if v["name"] is not None}

    def named(df: pl.DataFrame) -> pl.DataFrame:
        # The group's parallel name from the metadata ("dp", "pp", "tp"...), null when unknown.
        return df.with_columns(
            pl.col("group")
            .replace_strict(names, default=None, return_dtype=st)
            .alias("parallel_group")
        )

    tables = {
        "collectives": named(pl.DataFrame(coll, schema=COLLECTIVES_SCHEMA)),
        "bandwidth": named(pl.DataFrame(bw, schema=BANDWIDTH_SCHEMA)),
        "links": named(pl.DataFrame(links, schema=LINKS_SCHEMA)),
        "link_totals": named(pl.DataFrame(totals, schema=LINKS_SCHEMA)),
    }
    return tables, coll, bw


def communication_rows(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of :func:`read_communication`'s ``collectives`` and ``bandwidth`` tables (no
    ``parallel_group``), from ``communication.json`` (or ``analysis.db``) alone: for a caller
    that needs only those, without the matrix, the metadata and the tables' queries (the
    packet rule reads them on every report). Raises :class:`~opscope.errors.InputError` as
    :func:`read_communication` does for that file."""
    out = find_output_dir(Path(path))
    rank = rank_of(out)
    return _comm_rows(_sources(out)[0], 0 if rank is None else rank)


#: A transit row (:func:`transit_rows`): one per collective and transport of the file's
#: Communication Bandwidth Info, with its collective's start and elapse (ns, bytes).
TRANSIT_COLUMNS = ("rank", "op_name", "transport", "size_bytes", "time_ns", "start_ns", "elapse_ns")


def transit_rows(
    colls: list[dict[str, Any]], bws: list[dict[str, Any]], rank: int | None = None
) -> list[tuple[Any, ...]]:
    """The rows of :data:`TRANSIT_COLUMNS` of one rank's :func:`communication_rows`: each
    bandwidth row with the start and elapse of its collective, matched on (step, kind,
    op_name, group), every match (a left join: a missing key part matches a missing one, a row
    without its collective has no start); ``rank`` (when given) replaces the file's."""
    starts: dict[tuple[str, ...], list[tuple[Any, Any]]] = {}
    for r in colls:
        starts.setdefault(_file_key(r), []).append((r["start_ns"], r["elapse_ns"]))
    out: list[tuple[Any, ...]] = []
    for r in bws:
        rk = r["rank"] if rank is None else rank
        size, t = r["size_bytes"], r["time_ns"]
        for start, elapse in starts.get(_file_key(r), [(None, None)]):
            out.append((rk, r["op_name"], r["transport"], size, t, start, elapse))
    return out


def _file_key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        "" if row[k] is None else str(row[k]) for k in ("step", "kind", "op_name", "group")
    )


def _comm_rows(
    comm_src: dict[str, Any], rank_id: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    coll: list[dict[str, Any]] = []
    bw: list[dict[str, Any]] = []
    for step_key, kinds in comm_src.items():
        step = _step(step_key)
        for kind, ops in (kinds or {}).items() if isinstance(kinds, dict) else ():
            for op_key, info in (ops or {}).items() if isinstance(ops, dict) else ():
                if is_summary_op(op_key) or not isinstance(info, dict):
                    continue
                name, _, group = op_key.partition("@")
                t = info.get("Communication Time Info") or {}
                coll.append(
                    {
                        "rank": rank_id,
                        "step": step,
                        "kind": kind,
                        "op_name": name,
                        "group": group or None,
                        "start_ns": _scaled(t.get("Start Timestamp(us)"), 1e3),
                        "elapse_ns": _scaled(t.get("Elapse Time(ms)"), 1e6),
                        "transit_ns": _scaled(t.get("Transit Time(ms)"), 1e6),
                        "wait_ns": _scaled(t.get("Wait Time(ms)"), 1e6),
                        "synchronization_ns": _scaled(t.get("Synchronization Time(ms)"), 1e6),
                        "idle_ns": _scaled(t.get("Idle Time(ms)"), 1e6),
                        "wait_ratio": _float(t.get("Wait Time Ratio")),
                        "synchronization_ratio": _float(t.get("Synchronization Time Ratio")),
                    }
                )
                for transport, b in (info.get("Communication Bandwidth Info") or {}).items():
                    if not isinstance(b, dict):
                        continue
                    bw.append(
                        {
                            "rank": rank_id,
                            "step": step,
                            "kind": kind,
                            "op_name": name,
                            "group": group or None,
                            "transport": transport,
                            "size_bytes": _scaled(b.get("Transit Size(MB)"), 1e6),
                            "time_ns": _scaled(b.get("Transit Time(ms)"), 1e6),
                            "bandwidth_gbps": _float(b.get("Bandwidth(GB/s)")),
                        }
                    )
    return coll, bw


def _global(end: str, ranks: list[int] | None) -> int | None:
    if not end.isdigit():
        return None
    i = int(end)
    if ranks is None:
        return i
    return ranks[i] if i < len(ranks) else None


def _sources(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """communication.json and communication_matrix.json as dicts; for the database export
    (no JSON files), the same shape rebuilt from analysis.db's CommAnalyzer* tables."""
    cj, mj = out / "communication.json", out / "communication_matrix.json"
    if cj.is_file() or mj.is_file() or not (out / "analysis.db").is_file():
        return _json(cj), _json(mj)
    return _from_analysis_db(out / "analysis.db")


def _from_analysis_db(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    comm: dict[str, Any] = {}
    matrix: dict[str, Any] = {}
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"cannot open the database ({e})", path) from None
    try:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CommAnalyzerTime" in have:
            for op, group, start, el, tr, wait, sync, idle, step, kind in con.execute(
                """SELECT hccl_op_name, group_name, start_timestamp, elapse_time, transit_time,
                          wait_time, synchronization_time, idle_time, step, type
                   FROM CommAnalyzerTime"""
            ):
                entry = comm.setdefault(step, {}).setdefault(kind, {})
                entry[f"{op}@{group}"] = {
                    "Communication Time Info": {
                        "Start Timestamp(us)": start,
                        "Elapse Time(ms)": el,
                        "Transit Time(ms)": tr,
                        "Wait Time(ms)": wait,
                        "Synchronization Time(ms)": sync,
                        "Idle Time(ms)": idle,
                        "Wait Time Ratio": wait / (wait + tr) if wait and (wait + tr) else 0.0,
                        "Synchronization Time Ratio": sync / (sync + tr)
                        if sync and (sync + tr)
                        else 0.0,
                    },
                    "Communication Bandwidth Info": {},
                }
        if "CommAnalyzerBandwidth" in have:
            # One row per packet-size bucket; the per-transport figures repeat on each.
            for op, group, transport, size, t, bw, step, kind in con.execute(
                """SELECT hccl_op_name, group_name, transport_type, transit_size, transit_time,
                          bandwidth, step, type FROM CommAnalyzerBandwidth"""
            ):
                info = comm.get(step, {}).get(kind, {}).get(f"{op}@{group}")
                if info is not None:
                    info["Communication Bandwidth Info"][transport] = {
                        "Transit Size(MB)": size,
                        "Transit Time(ms)": t,
                        "Bandwidth(GB/s)": bw,
                    }
        if "CommAnalyzerMatrix" in have:
            for op, group, src, dst, transport, size, t, bw, step, kind, name in con.execute(
                """SELECT hccl_op_name, group_name, src_rank, dst_rank, transport_type,
                          transit_size, transit_time, bandwidth, step, type, op_name
                   FROM CommAnalyzerMatrix"""
            ):
                pairs = matrix.setdefault(step, {}).setdefault(kind, {})
                pairs.setdefault(f"{op}@{group}", {})[f"{src}-{dst}"] = {
                    "Transport Type": transport,
                    "Transit Size(MB)": size,
                    "Transit Time(ms)": t,
                    "Bandwidth(GB/s)": bw,
                    "Op Name": name,
                }
    except sqlite3.DatabaseError as e:
        raise InputError(f"not a readable analysis database ({e})", path) from None
    finally:
        con.close()
    return comm, matrix


def _matrix(
    data: dict[str, Any], rank_id: int, groups: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    links: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for step_key, kinds in data.items():
        step = _step(step_key)
        for kind, entries in (kinds or {}).items() if isinstance(kinds, dict) else ():
            if not isinstance(entries, dict):
                continue
            real = {k.partition("@")[0] for k in entries if not is_summary_op(k)}
            seen: set[tuple[str, str, str]] = set()  # (op, group, pair) already taken
            for key, pairs in entries.items():
                if not isinstance(pairs, dict):
                    continue
                entry, _, group = key.partition("@")
                g = groups.get(group)
                ranks = g["global_ranks"] if g else None
                total = key == _TOTAL or entry.lower().endswith("-total")
                for pair, v in pairs.items():
                    if not isinstance(v, dict):
                        continue
                    src, _, dst = str(pair).partition("-")
                    op = entry if not is_summary_op(key) else v.get("Op Name")
                    row = {
                        "rank": rank_id,
                        "step": step,
                        "kind": kind,
                        "group": group or None,
                        "op_name": entry if total else op,
                        "src_rank": _global(src, ranks),
                        "dst_rank": _global(dst, ranks),
                        "transport": v.get("Transport Type"),
                        "size_bytes": _scaled(v.get("Transit Size(MB)"), 1e6),
                        "time_ns": _scaled(v.get("Transit Time(ms)"), 1e6),
                        "bandwidth_gbps": _float(v.get("Bandwidth(GB/s)")),
                    }
                    if total:
                        totals.append(row)
                        continue
                    if not isinstance(op, str):
                        continue
                    # A top/middle/bottom entry copies a real collective's links: taken only
                    # when the file lacks that collective's own entry, and once.
                    if is_summary_op(key) and op in real:
                        continue
                    mark = (op, group, str(pair))
                    if mark in seen:
                        continue
                    seen.add(mark)
                    links.append(row)
    return links, totals


def read_partial(path: Path) -> Profile:
    """A rank that kept only ``step_trace_time.csv`` and/or ``communication*.json`` (no trace,
    no kernel table) as a :class:`~opscope.model.Profile`: its steps (the step breakdown), and
    each collective of ``communication.json`` as one ``communication`` event on the rank's
    device (start and elapse as recorded, in its step). The metadata's world size and parallel
    groups are kept in ``meta["ascend"]``, and so are the file's transit figures: ``transit``,
    ``{"ranks": [...], "columns": TRANSIT_COLUMNS, "rows": [...]}`` (:func:`transit_rows`; ranks
    empty without a collective), what the packet rule reads of a rank without a trace (read
    here with the collectives, not again from the folder at report time).
    """
    from opscope.ingest import ascend as A
    from opscope.model import schema as S

    path = Path(path)
    out = find_output_dir(path)
    rank = rank_of(out)
    rank_id = 0 if rank is None else rank
    comm, coll_rows, bw_rows = _read_communication(path)
    coll = comm["collectives"].filter(pl.col("start_ns").is_not_null())
    events = (
        coll.sort("start_ns")
        .select(
            pl.lit("communication").cast(S.EventKind).alias("kind"),
            pl.col("op_name").alias("name"),
            pl.col("start_ns").alias("ts_ns"),
            pl.col("elapse_ns").fill_null(0).alias("dur_ns"),
            pl.lit(rank_id, pl.Int32).alias("device"),
            pl.col("step"),
            pl.lit("COMMUNICATION").alias("core_type"),
            pl.lit(False).alias("is_backward"),
        )
        .with_row_index("id")
        .with_columns(pl.col("id").cast(pl.Int64), pl.lit(rank_id, pl.Int32).alias("rank"))
    )
    read: list[str] = []
    st = out / "step_trace_time.csv"
    steps = A._steps_from_frame(A.read_csv(st) if st.is_file() else None, events)
    for name in ("step_trace_time.csv", "communication.json", "communication_matrix.json"):
        if (out / name).is_file():
            read.append(name)
    groups = {k: g for k, g in parallel_groups(path).items() if k == g["id"]}
    info = A._profiler_info(out)
    meta: dict[str, Any] = {
        "format": "ascend",
        "sources": [str(path)],
        "ranks": [rank_id],
        "oddities": {},
        "trace_meta": {str(rank_id): redact(info)},
        "ascend": {
            "files": read,
            "level": A._level(info),
            "partial": True,
            "has_trace_view": False,
            "world_size": world_size(path),
            "parallel_groups": groups,
            "transit": {
                "ranks": [rank_id] if coll_rows else [],
                "columns": list(TRANSIT_COLUMNS),
                "rows": [list(r) for r in transit_rows(coll_rows, bw_rows)],
            },
        },
    }
    return Profile.from_tables(
        meta=meta,
        events=events,
        steps=steps.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")),
        devices=pl.DataFrame(
            {"rank": [rank_id], "device": [rank_id], "name": ["Ascend NPU"], "vendor": ["ascend"]},
            schema={"rank": pl.Int32, "device": pl.Int32, "name": pl.String, "vendor": pl.String},
        ),
    )
