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

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.ascend_comm_alignment import _collective_of, _exposed
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
    """:func:`_files_plan`, collected (its schema's empty table without a file row)."""
    plan, ranks = _files_plan(profile)
    if plan is None:
        return pl.DataFrame(schema=_TRANSIT_SCHEMA), ranks
    return plan.collect(engine="in-memory"), ranks


def _files_plan(profile: Profile) -> tuple[pl.LazyFrame | None, set[int]]:
    """The ranks' own figures, as msprof-analyze reads them: per collective and transport
    with traffic, ``coll, rank, transport, bytes, tasks, time_ns`` (``time_ns`` the
    transport's Transit Time; ``start_ns``, ``elapse_ns`` the file's; ``tasks`` null;
    ``coll`` null for a collective with no event of that name on its rank: a kernel table
    that holds fewer collectives than the file), from each source's
    ``communication.json`` / ``analysis.db``, as a plan (None: no row); and the ranks that
    have such a file."""
    from opscope.ingest.ascend_comm import communication_rows

    # the files' rows in Python, one frame for all ranks and one query for the match (a
    # rank's files hold a few hundred collectives at most; the tables and their joins per
    # rank were ~15 queries a report)
    rows: list[tuple[Any, ...]] = []
    ranks: set[int] = set()
    # a multi-rank load names each rank's folder (its rank may come from the folder's name,
    # where communication_rows finds no profiler_info_N.json)
    by_rank = profile.meta.get("rank_sources") or {}
    pairs: list[tuple[int | None, str]] = [(int(r), str(p)) for r, p in by_rank.items()]
    if not pairs:
        pairs = [(None, str(p)) for p in profile.meta.get("sources") or []]
    for rank, src in pairs:
        try:
            colls, bws = communication_rows(Path(src))
        except (InputError, OSError, ValueError):
            continue  # a source that is not an Ascend rank folder, or gone since loading
        if not colls:
            continue
        ranks.update({int(r["rank"]) if rank is None else rank for r in colls})
        # each bandwidth row with the file's start and elapse of its collective: matched on
        # (step, kind, op_name, group), every match (a left join; a missing key part matches
        # a missing one: an operator named without "@group", a step key without a number)
        starts: dict[tuple[Any, ...], list[tuple[Any, Any]]] = {}
        for r in colls:
            starts.setdefault(_file_key(r), []).append((r["start_ns"], r["elapse_ns"]))
        for r in bws:
            size = r["size_bytes"]
            if r["transport"] not in MIN_BYTES or size is None or size <= 0:
                continue
            rk = r["rank"] if rank is None else rank
            for start, elapse in starts.get(_file_key(r), [(None, None)]):
                rows.append((rk, r["op_name"], r["transport"], size, r["time_ns"], start, elapse))
    if not rows:
        return None, ranks
    files = pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int32,
            "op_name": pl.String,
            "transport": pl.String,
            "size_bytes": pl.Int64,
            "time_ns": pl.Int64,
            "start_ns": pl.Int64,
            "elapse_ns": pl.Int64,
        },
        orient="row",
    )
    events = (
        profile.events.lazy()
        .filter(pl.col("kind") == "communication")
        .select(pl.col("id").alias("coll"), "rank", pl.col("name").alias("op_name"), "ts_ns")
        .sort("ts_ns")
    )
    # the event of the same name on the same rank that starts nearest (a name may recur
    # in another step)
    out = (
        files.lazy()
        .with_columns(pl.col("start_ns").fill_null(0).alias("at_ns"))
        .sort("at_ns")
        .join_asof(
            events,
            left_on="at_ns",
            right_on="ts_ns",
            by=["rank", "op_name"],
            strategy="nearest",
            check_sortedness=False,
        )
        .select(
            "coll",
            "rank",
            "transport",
            pl.col("size_bytes").alias("bytes"),
            pl.lit(None, pl.UInt32).alias("tasks"),
            "time_ns",
            "start_ns",
            "elapse_ns",
            "op_name",
        )
        .cast(_TRANSIT_SCHEMA)  # type: ignore[arg-type]
    )
    return out, ranks


def _file_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(
        "" if row[k] is None else str(row[k]) for k in ("step", "kind", "op_name", "group")
    )


def transit_sizes(profile: Profile) -> pl.DataFrame:
    """:func:`transit_from_files` for the ranks that have communication files, :func:`transit`
    (the HCCL tasks of ``trace_view.json``) for the others; with ``source`` (the file)."""
    return _sizes_plan(profile).collect(engine="in-memory")


def _sizes_plan(profile: Profile) -> pl.LazyFrame:
    """:func:`transit_sizes` as a plan: the rule runs it with its own join, one query (the
    files' match, the concatenation and the join were a query each)."""
    plan, ranks = _files_plan(profile)
    files = (pl.DataFrame(schema=_TRANSIT_SCHEMA).lazy() if plan is None else plan).with_columns(
        pl.lit("communication files").alias("source")
    )
    # the trace's tasks of the other ranks only: parsing the args of every task of a rank the
    # files cover (938 on a 4k-event AlexNet rank: 5 ms) was thrown away
    tasks = transit(profile, ranks)
    if tasks.height == 0 and c.absent(profile, "other"):
        return files  # the files' rows alone (what the concatenation with no task gives)
    return pl.concat(
        [
            files,
            tasks.lazy()
            .filter(~pl.col("rank").is_in(sorted(ranks)))
            .with_columns(pl.lit("trace_view.json").alias("source")),
        ],
        how="vertical",
    )


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
        colls = (
            profile.events.lazy()
            .filter(pl.col("kind") == "communication")
            .select(pl.col("id").alias("coll"), "name", "ts_ns", "dur_ns", "op_id")
        )
        # the time the collective spends moving its bytes: the transport's Transit Time where
        # the rank's communication files give it (the collective's elapse there also holds
        # the wait for peers: a pipeline send waits out the other stage's compute), else the
        # collective's own duration
        # a collective with no event has the file's start and elapse, and an id below 0
        tr = (
            _sizes_plan(profile)
            .join(colls, on="coll", how="left", maintain_order="left")
            .with_row_index("row")
            .with_columns(
                pl.coalesce("time_ns", "dur_ns").alias("move_ns"),
                pl.coalesce("ts_ns", "start_ns").alias("ts_ns"),
                pl.coalesce("dur_ns", "elapse_ns").alias("dur_ns"),
                pl.coalesce("name", "op_name").alias("name"),
                pl.coalesce("coll", -1 - pl.col("row").cast(pl.Int64)).alias("key"),
            )
            .collect(engine="in-memory")
        )
        if tr.height == 0:  # (each size keeps its row through the left join on unique ids)
            return []
        steps = c.step_info(profile)
        out = []
        # the collectives as rows, per transport in order of appearance (a rank's files hold
        # a few hundred collectives at most; the figures below as frames were ~20 queries)
        by_transport: dict[str, list[dict[str, Any]]] = {}
        for row in tr.rows(named=True):
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
        exposed = _exposed(
            profile,
            pl.DataFrame(
                {
                    "id": [r["key"] for r in timed],
                    "rank": [r["rank"] for r in timed],
                    "ts_ns": [r["ts_ns"] for r in timed],
                    "dur_ns": [r["dur_ns"] or 0 for r in timed],
                },
                schema={"id": pl.Int64, "rank": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64},
            ),
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
            where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": anchor}))))
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
    ev = profile.events
    # the kernels' ranks by the kinds' mask, the bare ranks' steps summed in Python (integer
    # sums, the nulls left out: a comparison, a filter and a group-by were a query each)
    is_kernel = pl.Series(c.kind_mask(profile, "kernel"))
    with_kernels = set(ev.get_column("rank").filter(is_kernel).to_list())
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
