"""Ascend communication packet size: many HCCL collectives that each move little data.

msprof-analyze's advisor ("Packet Analysis", read for what it tests, not copied) takes each
HCCL operator's SDMA and RDMA transit size (``communication.json``'s Communication Bandwidth
Info: the bytes of the operator's transfer tasks) and calls the operator's packet small below
16 MB over SDMA or 1 MB over RDMA (its rule file's ``min_sdma_size`` / ``min_rdma_size``);
the issue is raised when more than 20% of the operators with such traffic are small
(``min_sdma_ratio`` / ``min_rdma_ratio``), "excessive small communication packets may cause
host delivery bottlenecks". It gives no saving.

Per rank, opscope's rule takes the transit sizes from where msprof-analyze takes them: the
rank's ``communication.json`` (or, for the database export, ``analysis.db``'s
``CommAnalyzerBandwidth``, msprof-analyze's db path), read by
:func:`opscope.ingest.ascend_comm.communication_rows` (the rows of ``read_communication``'s
collectives and bandwidth tables, without its matrix) from the profile's sources, each
collective matched to its ``communication`` event by name (nearest start). A rank without those
files (a planted or trimmed export) has its sizes computed from the HCCL plane tasks of
``trace_view.json`` (``size(Byte)``, ``transport type``, ``link type`` in each task's args;
on-chip copies and zero-size notifies carry no link data), equal to msprof's figures on the
AlexNet exports. Both p2p and collective operators count, as in msprof-analyze; the file's
summary entries (``Total Op Info``) do not: msprof-analyze's text path counts them as two more
(large) operators, so its share on the Megatron run reads 3/10 where opscope's is 3/8 (see
docs/rules/ascend-comm-packet.md). The rule fires when any rank's share is over 20%, on the
small collectives of those ranks, and lists every rank's share. It adds a bound: every
collective pays a fixed cost (launch, notifies, the algorithm's steps) whatever its size, which
fewer, larger collectives pay once. The small collectives' time above their bytes at the rate
of the large collectives of the same transport in the profile (peer rate, wall time of the
collectives) is what bucketing them can remove; only the exposed part (no compute kernel
running) shortens the step, so each collective's saving is capped at its exposed time; a rank
without kernels in the profile (only its communication files) has no overlap to subtract, so
its collectives count whole, together at most the rank's ``Communication(Not Overlapped)`` of
``step_trace_time.csv``. Ranks run at once, so the finding's saving is the largest rank's, not
their sum. Without large collectives to compare with, the saving is ``unknown``. The
collectives' exposed time is also ``comm-exposed``'s: this finding names that rule in
``evidence.part_of`` and keeps its saving, ``comm-exposed`` counts the rest
(:mod:`opscope.advise.overlap`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.ascend_comm_alignment import _collective_of, exposed_of
from opscope.errors import InputError
from opscope.model import Profile

# msprof-analyze's packet rule file (advisor/rules/en/packet.yaml): a collective's transit
# below 16 MB over SDMA or 1 MB over RDMA is a small packet (MB = 10^6 bytes, as its
# communication.json sizes), and more than 20% small collectives is an issue.
MIN_BYTES: Final = {"SDMA": 16_000_000, "RDMA": 1_000_000}
MIN_SMALL_SHARE: Final = 0.2
# Links that carry a collective's data off the chip; ON_CHIP copies and the INVALID_TYPE of
# notify tasks do not count (msprof-analyze's SDMA transit is the HCCS + PCIE + SIO bytes).
NO_LINK: Final = ("ON_CHIP", "INVALID_TYPE")
# At least this many large collectives for a peer rate (else the saving is unknown).
MIN_PEERS: Final = 1


_TRANSIT_SCHEMA: Final = {
    "coll": pl.Int64,
    "rank": pl.Int32,
    "transport": pl.String,
    "bytes": pl.Int64,
    "tasks": pl.UInt32,
    "time_ns": pl.Int64,
    "start_ns": pl.Int64,
    "elapse_ns": pl.Int64,
    "op_name": pl.String,
}


def transit(profile: Profile, skip_ranks: Collection[int] = ()) -> pl.DataFrame:
    """Per collective and transport: ``coll, rank, transport, bytes, tasks`` (the bytes of
    its transfer tasks off the chip, as msprof-analyze's Transit Size); ranks in
    ``skip_ranks`` left out (before the args are parsed: each row's figures are its own, and
    a collective is matched on its own rank)."""
    keep = (pl.col("kind") == "other") & pl.col("device").is_not_null()
    if skip_ranks:
        keep = keep & ~pl.col("rank").is_in(sorted(skip_ranks))
    empty = pl.DataFrame(schema=_TRANSIT_SCHEMA)
    if c.absent(profile, "other"):
        return empty  # no HCCL task (an export of the communication files only)
    ev = profile.events.filter(keep & pl.col("args").is_not_null())
    if ev.height == 0:
        return empty
    t = ev.select(
        "id",
        "rank",
        "tid",
        "ts_ns",
        "dur_ns",
        pl.coalesce(
            "bytes", pl.col("args").str.json_path_match("$['size(Byte)']").cast(pl.Int64)
        ).alias("bytes"),
        pl.col("args").str.json_path_match("$['transport type']").str.to_uppercase().alias("tr"),
        pl.col("args").str.json_path_match("$['link type']").str.to_uppercase().alias("link"),
    ).filter(
        pl.col("tr").is_in(list(MIN_BYTES))
        & ~pl.col("link").fill_null("").is_in(list(NO_LINK))
        & (pl.col("bytes") > 0)
    )
    if t.height == 0:
        return empty
    t = _collective_of(profile, t).filter(pl.col("coll").is_not_null())
    return t.group_by("coll", "rank", pl.col("tr").alias("transport"), maintain_order=True).agg(
        pl.col("bytes").sum().cast(pl.Int64),
        pl.len().alias("tasks"),
        pl.lit(None, pl.Int64).alias("time_ns"),
        pl.lit(None, pl.Int64).alias("start_ns"),
        pl.lit(None, pl.Int64).alias("elapse_ns"),
        pl.lit(None, pl.String).alias("op_name"),
    )


def transit_from_files(profile: Profile) -> tuple[pl.DataFrame, set[int]]:
    """The ranks' own figures, as msprof-analyze reads them: per collective and transport
    with traffic, ``coll, rank, transport, bytes, tasks, time_ns`` (``time_ns`` the
    transport's Transit Time; ``start_ns``, ``elapse_ns`` the file's; ``tasks`` null;
    ``coll`` null for a collective with no event of that name on its rank: a kernel table
    that holds fewer collectives than the file), from each rank's ``communication.json`` /
    ``analysis.db``; and the ranks that have such a file."""
    rows, ranks = _files_rows(profile)
    return pl.DataFrame(rows, schema=_TRANSIT_SCHEMA, orient="row"), ranks


def _file_transit(profile: Profile) -> tuple[list[tuple[Any, ...]], set[int]]:
    """The transit rows (:func:`opscope.ingest.ascend_comm.transit_rows`) of the ranks'
    communication files and the ranks that have such a file. A rank loaded without a trace
    (:func:`~opscope.ingest.ascend_comm.read_partial`) keeps its rows from the load; the other
    sources are read here (a full load does not read the files)."""
    from opscope.ingest.ascend_comm import communication_rows, transit_rows

    meta = profile.meta
    by_rank = meta.get("rank_sources") or {}
    kept = (meta.get("ascend") or {}).get("transit")
    if kept is not None and not by_rank and len(meta.get("sources") or []) == 1:
        # one rank, loaded with its rows (a multi-rank load's meta is one rank's)
        return [tuple(r) for r in kept["rows"]], {int(r) for r in kept["ranks"]}
    rows: list[tuple[Any, ...]] = []
    ranks: set[int] = set()
    # a multi-rank load names each rank's folder (its rank may come from the folder's name,
    # where communication_rows finds no profiler_info_N.json)
    pairs: list[tuple[int | None, str]] = [(int(r), str(p)) for r, p in by_rank.items()]
    if not pairs:
        pairs = [(None, str(p)) for p in meta.get("sources") or []]
    for rank, src in pairs:
        try:
            colls, bws = communication_rows(Path(src))
        except (InputError, OSError, ValueError):
            continue  # a source that is not an Ascend rank folder, or gone since loading
        if not colls:
            continue
        ranks.update({int(r["rank"]) if rank is None else rank for r in colls})
        rows += transit_rows(colls, bws, rank)
    return rows, ranks


def _files_rows(profile: Profile) -> tuple[list[tuple[Any, ...]], set[int]]:
    """:func:`transit_from_files`' rows (in its columns' order, by the file's start, a row
    without one at 0) and ranks: the rows with traffic on a transport the rule tests, each
    matched to the event of its collective's name on its rank that starts nearest (a name may
    recur in another step; on a tie the later start, and of events starting together the
    last: a join_asof's ``nearest``). In Python (a rank's files hold a few hundred collectives
    at most; the rows as frames, their sorts and the join were ~0.5 ms of queries a report)."""
    got, ranks = _file_transit(profile)
    rows = [r for r in got if r[2] in MIN_BYTES and r[3] is not None and r[3] > 0]
    if not rows:
        return [], ranks
    ev = _collectives(profile)
    # per (rank, name): the events' starts in order and their ids (stable: events starting
    # together in the events' order)
    starts: dict[tuple[Any, Any], tuple[list[int], list[int]]] = {}
    order = sorted(
        (k for k, t in enumerate(ev["ts_ns"]) if t is not None), key=ev["ts_ns"].__getitem__
    )
    for k in order:
        key = (ev["rank"][k], ev["name"][k])
        if None not in key:
            ts, ids = starts.setdefault(key, ([], []))
            ts.append(ev["ts_ns"][k])
            ids.append(ev["id"][k])
    out: list[tuple[Any, ...]] = []
    for rank, op, tr, size, t, start, elapse in sorted(
        rows, key=lambda r: 0 if r[5] is None else r[5]
    ):
        at = 0 if start is None else start
        coll = None
        if (rank, op) in starts:
            ts, ids = starts[(rank, op)]
            i = bisect.bisect_right(ts, at)  # ts[i - 1] <= at < ts[i]
            if i < len(ts) and (i == 0 or ts[i] - at <= at - ts[i - 1]):
                i = bisect.bisect_right(ts, ts[i])  # the later start; the last of its events
            coll = ids[i - 1]
        out.append((coll, rank, tr, size, None, t, start, elapse, op))
    return out, ranks


def _collectives(profile: Profile) -> dict[str, list[Any]]:
    """The communication events' columns the rule reads, as lists (by the kinds' mask: a
    filter of the events is a query)."""

    def run() -> dict[str, list[Any]]:
        names = ("id", "rank", "name", "ts_ns", "dur_ns", "op_id")
        ev = profile.events
        n = c.kind_counts(profile).get("communication", 0)
        if n == 0:
            return {k: [] for k in names}
        if n == ev.height:  # every event is one (a rank without a trace): no filter
            return {k: ev.get_column(k).to_list() for k in names}
        mask = pl.Series(c.kind_mask(profile, "communication"))
        return {k: ev.get_column(k).filter(mask).to_list() for k in names}

    out: dict[str, list[Any]] = c._memo("packet.collectives", profile, run)
    return out


def _all_rows(profile: Profile) -> list[dict[str, Any]]:
    """:func:`transit_sizes`' rows: the files' rows, then the trace's tasks' of the other
    ranks."""
    rows, ranks = _files_rows(profile)
    keys = (*_TRANSIT_SCHEMA, "source")
    out = [dict(zip(keys, (*r, "communication files"), strict=True)) for r in rows]
    # the trace's tasks of the other ranks only: parsing the args of every task of a rank the
    # files cover (938 on a 4k-event AlexNet rank: 5 ms) was thrown away
    tasks = None if c.absent(profile, "other") else transit(profile, ranks)  # (no HCCL task)
    if tasks is not None and tasks.height:
        for r in tasks.rows(named=True):
            if r["rank"] is not None and r["rank"] not in ranks:  # (a null rank: no collective)
                out.append({**r, "source": "trace_view.json"})
    return out


def transit_sizes(profile: Profile) -> pl.DataFrame:
    """:func:`transit_from_files` for the ranks that have communication files, :func:`transit`
    (the HCCL tasks of ``trace_view.json``) for the others; with ``source`` (the file)."""
    schema = {**_TRANSIT_SCHEMA, "source": pl.String}
    return pl.DataFrame(_all_rows(profile), schema=schema)


class AscendCommPacket:
    """Many small HCCL collectives (small communication packets)."""

    id = "ascend-comm-packet"
    doc = (
        "Every HCCL collective pays a fixed cost (launch, notifies, the algorithm's steps) "
        "whatever it moves; many collectives that each move little data pay it many times. "
        "Like msprof-analyze's packet analysis, the rule takes each collective's SDMA / RDMA "
        "transit size per rank from the rank's communication.json (or analysis.db), else "
        "sums its transfer tasks off the chip in trace_view.json, and calls it small "
        f"below {MIN_BYTES['SDMA'] // 1_000_000} MB over SDMA or "
        f"{MIN_BYTES['RDMA'] // 1_000_000} MB over RDMA; it fires when more than "
        f"{MIN_SMALL_SHARE:.0%} of a rank's collectives of a transport are small. Saving: the "
        "small collectives' transfer time above their bytes at the rate of the large "
        "collectives of the same transport in the profile (peer rate), each at most its "
        "exposed time (no compute kernel running), on the rank that gains most; unknown "
        "without large collectives. Fix: fewer, larger "
        "collectives (larger DDP buckets, gradient accumulation, a larger batch, ZeRO-1/2 "
        "instead of ZeRO-3, fused/affinity optimizers that communicate flat buffers)."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        # the time the collective spends moving its bytes: the transport's Transit Time where
        # the rank's communication files give it (the collective's elapse there also holds
        # the wait for peers: a pipeline send waits out the other stage's compute), else the
        # collective's own duration
        # a collective with no event has the file's start and elapse, and an id below 0
        ev = _collectives(profile)
        at = {i: k for k, i in enumerate(ev["id"])}
        tr: list[dict[str, Any]] = []
        for n, r in enumerate(_all_rows(profile)):
            k = at.get(r["coll"])  # (a left join on the ids, unique)
            name, ts, dur, op = (
                (None,) * 4
                if k is None
                else (ev["name"][k], ev["ts_ns"][k], ev["dur_ns"][k], ev["op_id"][k])
            )
            tr.append(
                {
                    **r,
                    "name": r["op_name"] if name is None else name,
                    "ts_ns": r["start_ns"] if ts is None else ts,
                    "dur_ns": r["elapse_ns"] if dur is None else dur,
                    "op_id": op,
                    "move_ns": dur if r["time_ns"] is None else r["time_ns"],
                    "key": -1 - n if r["coll"] is None else r["coll"],
                }
            )
        if not tr:
            return []
        steps = c.step_info(profile)
        out = []
        # the collectives as rows, per transport in order of appearance (a rank's files hold
        # a few hundred collectives at most; the figures below as frames were ~20 queries)
        by_transport: dict[str, list[dict[str, Any]]] = {}
        for row in tr:
            by_transport.setdefault(str(row["transport"]), []).append(row)
        for transport, rows in by_transport.items():
            f = self._transport(profile, steps, transport, rows)
            if f is not None:
                out.append(f)
        return out

    def _transport(
        self, profile: Profile, steps: c.StepInfo, transport: str, rows: list[dict[str, Any]]
    ) -> Finding | None:
        limit = MIN_BYTES[transport]

        def is_small(r: dict[str, Any]) -> bool:
            return r["bytes"] is not None and r["bytes"] < limit

        # msprof-analyze's figure, rank by rank: the share of the operators with traffic on
        # this transport that move less than the limit
        counts: dict[int, list[int]] = {}
        for r in rows:
            n_s = counts.setdefault(int(r["rank"]), [0, 0])
            n_s[0] += 1
            n_s[1] += is_small(r)
        shares = {r: s / n for r, (n, s) in sorted(counts.items())}
        firing = sorted(r for r, (n, s) in counts.items() if s > 0 and s / n > MIN_SMALL_SHARE)
        if not firing:
            return None
        grp_f = [r for r in rows if r["rank"] in firing]
        small = [r for r in grp_f if is_small(r)]
        share = len(small) / len(grp_f)
        large = [
            r
            for r in rows
            if r["bytes"] is not None and r["bytes"] >= limit and r["move_ns"] is not None
        ]
        rate = None
        large_ns = sum(r["move_ns"] for r in large)
        if len(large) >= MIN_PEERS and float(large_ns) > 0:
            rate = float(sum(r["bytes"] for r in large)) / float(large_ns)
        timed = [r for r in small if r["move_ns"] is not None and r["ts_ns"] is not None]
        exposed = exposed_of(
            profile,
            [r["key"] for r in timed],
            [r["rank"] for r in timed],
            [r["ts_ns"] for r in timed],
            [r["dur_ns"] or 0 for r in timed],
        )
        caps = _rank_caps(profile, firing)
        # per rank: exposed time, small collectives' time and saving; ranks run at once, so
        # the step shortens by the largest rank's saving, not by their sum
        exp_r: dict[int, float] = {}
        time_r: dict[int, float] = {}
        lim_r: dict[int, float] = {}  # each collective's time, at most its exposed time
        save_r: dict[int, float] = {}
        for row in timed:
            cid, rank, b, d = row["key"], row["rank"], row["bytes"], row["move_ns"]
            rk, e = int(rank), exposed.get(int(cid), 0.0)
            exp_r[rk] = exp_r.get(rk, 0.0) + e
            time_r[rk] = time_r.get(rk, 0.0) + float(d)
            lim_r[rk] = lim_r.get(rk, 0.0) + min(float(d), e)
            if rate is not None:
                save_r[rk] = save_r.get(rk, 0.0) + min(max(float(d) - b / rate, 0.0), e)
        for rk, cap in caps.items():
            exp_r[rk] = min(exp_r.get(rk, 0.0), cap)
            lim_r[rk] = min(lim_r.get(rk, 0.0), cap)
            save_r[rk] = min(save_r.get(rk, 0.0), cap)
        exp_ns = max(exp_r.values(), default=0.0)
        lim_ns = max(lim_r.values(), default=0.0)
        time_ns = max(time_r.values(), default=0.0)
        saving = max(save_r.values(), default=0.0)
        if rate is not None:
            how = (
                f"the small collectives' time above their bytes at the large {transport} "
                f"collectives' rate ({rate:.1f} B/ns), each at most its exposed time"
            )
            if len(firing) > 1:
                how += "; the rank that gains most"
            method, sev = "peer-rate", None
        else:
            how = (
                f"unknown: no {transport} collective of {limit / 1e6:g} MB or more to compare "
                f"with; the small ones take {steps.per_step_us(time_ns):.1f} µs/step"
            )
            method, sev = "unknown", "low"
        on = ""
        if len(shares) > 1:
            on = f" on rank{'s' if len(firing) > 1 else ''} {', '.join(map(str, firing))}"
        families = sorted(
            {re.sub(r"_+\d+(_\d+)*$", "", str(r["name"])) for r in small if r["name"] is not None}
        )
        small_colls = [r["coll"] for r in small if r["coll"] is not None]
        anchor = [r["op_id"] for r in small if r["op_id"] is not None][:1] or small_colls[:1]
        where: tuple[str | None, int | None, str | None] = (None, None, None)
        if anchor:
            where = next(iter(c.group_by_location(profile, anchor)))
        sizes = [r["bytes"] for r in small]
        f: Finding = c.make_finding(
            profile,
            rule=self.id,
            title=f"{len(small)} of {len(grp_f)} {transport} collectives move under "
            f"{limit / 1e6:g} MB{on} ({', '.join(families[:3])})",
            where=where,
            key=f"packet:{transport}",
            saving_ns=saving,
            saving_how=how,
            fix="# fewer, larger collectives: larger DDP buckets (and gradient accumulation)\n"
            "model = DDP(model, bucket_cap_mb=100)\n"
            "# or bucket small tensors into one collective\n"
            "flat = torch.cat([t.flatten() for t in tensors]); dist.all_reduce(flat)",
            evidence={
                **c.evidence(
                    families,
                    len(small),
                    {
                        "collectives": len(grp_f),
                        "small_collectives": len(small),
                        "small_share": round(share, 4),
                        "min_bytes": limit,
                        "small_bytes_median": sorted(sizes)[len(sizes) // 2],
                        "small_us_per_step": round(steps.per_step_us(time_ns), 3),
                        "exposed_us_per_step": round(steps.per_step_us(exp_ns), 3),
                        "peer_rate_bytes_per_ns": None if rate is None else round(rate, 3),
                        # msprof-analyze's "Small ... ratio", every rank (it reads one)
                        "small_share_by_rank": {str(r): round(v, 4) for r, v in shares.items()},
                        # msprof-analyze's "Small ... duration(ms)" on the ranks that fire
                        # (Transit Time from the communication files; the trace's durations)
                        "small_ms_by_rank": {
                            str(r): round(v / 1e6, 4) for r, v in sorted(time_r.items())
                        },
                        "ranks": firing,
                        "transit_source": sorted({r["source"] for r in grp_f}),
                    },
                    small_colls,
                ),
                # the collectives (see advise.overlap): their exposed time is also
                # comm-exposed's, which counts what is left after this finding
                "op_groups": sorted(int(x) for x in small_colls),
                "part_of": ["comm-exposed"],
            },
            severity=sev,
            steps=steps,
            limit_ns=lim_ns,
            limit_what="the small collectives' time moving data, each at most its exposed time",
            method=method,
        )
        return f


def _rank_caps(profile: Profile, ranks: list[int]) -> dict[int, float]:
    """For each of ``ranks`` with no kernel in the profile (only its communication files):
    its steps' Communication(Not Overlapped) (ns), the most of its collectives' time that no
    compute hides; a rank without that figure gets 0 (nothing shown exposed)."""
    # the kernels' ranks by the kinds' mask, the bare ranks' steps summed in Python (integer
    # sums, the nulls left out: a comparison, a filter and a group-by were a query each)
    with_kernels: set[Any] = set()
    if not c.absent(profile, "kernel"):
        is_kernel = pl.Series(c.kind_mask(profile, "kernel"))
        with_kernels = set(profile.events.get_column("rank").filter(is_kernel).to_list())
    bare = [r for r in ranks if r not in with_kernels]
    if not bare:
        return {}
    st = profile.steps
    got: dict[int, int] = {}
    for r, n in zip(
        st.get_column("rank").to_list(),
        st.get_column("communication_not_overlapped_ns").to_list(),
        strict=True,
    ):
        if r in bare and n is not None:
            got[r] = got.get(r, 0) + n
    return {r: float(got.get(r) or 0) for r in bare}


register(AscendCommPacket())
