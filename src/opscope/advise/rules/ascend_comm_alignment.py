"""Ascend communication byte alignment: HCCL transfers whose size is not a multiple of 512 B.

msprof-analyze's advisor ("byte alignment" check, read for what it tests, not copied) looks at
the SDMA tasks of each HCCL operator (its ``Memcpy`` and ``Reduce_Inline`` tasks, off-chip
links only, larger than 512 bytes) and flags an operator when a task's size is not a multiple
of 512 bytes; its rule file gives 512 B as both the base and the minimum size, and rates the
issue by the unaligned tasks' share of the SDMA time (low under 20%, high from 70%). It
gives no saving.

opscope's rule reads the same tasks from the HCCL plane tracks of ``trace_view.json`` (``size
(Byte)``, ``transport type``, ``link type`` in the event's args) and adds a bound: the
unaligned tasks' rate is compared with the aligned SDMA tasks of the same link type and of a
similar size (``PEER_SIZE_RATIO``) in the same profile — what the link does for aligned
transfers — and the saving is the unaligned tasks' time above their bytes at that rate
(method ``peer-rate``). The planes of a collective run side by side, so a collective saves
the largest per-plane excess, and only its exposed part (no compute kernel running) shortens
the step: the saving of each collective is capped at its exposed time. Without aligned peers
the saving is ``unknown`` (0, reported with the unaligned tasks' share).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.model import Profile

# msprof-analyze's byte-alignment rule file: sizes are checked against 512 B, and tasks of at
# most 512 B are left out (flags and small control messages).
BASE_BYTES: Final = 512
MIN_BYTES: Final = 512
# The SDMA tasks of an HCCL operator that carry its data (msprof-analyze checks these two).
TASK_NAMES: Final = ("Memcpy", "Reduce_Inline")
TRANSPORT: Final = "SDMA"
ON_CHIP: Final = "ON_CHIP"  # a copy inside the chip: no link, no alignment rule
# Aligned peers count when their size is within this factor of the unaligned task's (a link's
# rate depends on the transfer size; opscope's heuristic).
PEER_SIZE_RATIO: Final = 2.0
MIN_PEERS: Final = 2


def _tasks(profile: Profile) -> pl.DataFrame:
    """The SDMA data tasks off the chip, larger than ``MIN_BYTES``: ``id, rank, tid, ts_ns,
    dur_ns, bytes, link, aligned``."""
    ev = profile.events.filter(
        (pl.col("kind") == "other")
        & pl.col("device").is_not_null()
        & pl.col("name").is_in(TASK_NAMES)
        & pl.col("args").is_not_null()
    )
    if ev.height == 0:
        return ev.select("id")
    t = ev.select(
        "id",
        "rank",
        "tid",
        "ts_ns",
        "dur_ns",
        pl.coalesce(
            "bytes", pl.col("args").str.json_path_match("$['size(Byte)']").cast(pl.Int64)
        ).alias("bytes"),
        pl.col("args").str.json_path_match("$['transport type']").alias("transport"),
        pl.col("args").str.json_path_match("$['link type']").alias("link"),
    )
    return t.filter(
        (pl.col("transport").str.to_uppercase() == TRANSPORT)
        & (pl.col("link").fill_null("").str.to_uppercase() != ON_CHIP)
        & (pl.col("bytes") > MIN_BYTES)
        & (pl.col("dur_ns") > 0)
    ).with_columns((pl.col("bytes") % BASE_BYTES == 0).alias("aligned"))


def _peer_rates(tasks: pl.DataFrame) -> dict[tuple[str | None, int], float]:
    """Bytes per ns of aligned tasks of the same link and a similar size, per (link, size) of
    the unaligned tasks (absent when fewer than ``MIN_PEERS``)."""
    # over the tasks' rows in Python (the SDMA tasks of a profile's collectives: a filter
    # per unaligned size was a query each)
    rows = tasks.select("link", "bytes", "dur_ns", "aligned").rows()
    ok = [(link, b, d) for link, b, d, a in rows if a is True]
    out: dict[tuple[str | None, int], float] = {}
    for link, size in {(link, b) for link, b, _, a in rows if a is False}:
        if link is None:
            continue  # a null link equals no link (as a filter on it)
        peers = [
            (b, d)
            for pl_link, b, d in ok
            if pl_link == link and size / PEER_SIZE_RATIO <= b <= size * PEER_SIZE_RATIO
        ]
        if len(peers) >= MIN_PEERS:
            out[(link, size)] = float(sum(b for b, _ in peers)) / float(sum(d for _, d in peers))
    return out


def _collective_of(profile: Profile, tasks: pl.DataFrame) -> pl.DataFrame:
    """``tasks`` with ``coll`` (the id of the collective whose time holds the task's start)."""
    coll = (
        profile.events.filter(pl.col("kind") == "communication")
        .select(pl.col("id").alias("coll"), "rank", pl.col("ts_ns").alias("c_ts"), "dur_ns")
        .with_columns((pl.col("c_ts") + pl.col("dur_ns")).alias("c_end"))
        .drop("dur_ns")
        .sort("c_ts")
    )
    j = tasks.sort("ts_ns").join_asof(
        coll,
        left_on="ts_ns",
        right_on="c_ts",
        by="rank",
        strategy="backward",
        check_sortedness=False,
    )
    return j.with_columns(
        pl.when(pl.col("ts_ns") < pl.col("c_end")).then(pl.col("coll")).alias("coll")
    )


def _exposed(profile: Profile, colls: pl.DataFrame) -> dict[int, float]:
    """Per collective id: its time with no compute kernel running on its rank (ns)."""
    cols = ("id", "rank", "ts_ns", "dur_ns")
    return exposed_of(profile, *(colls.get_column(n).to_list() for n in cols))


def exposed_of(
    profile: Profile, ids: list[Any], c_ranks: list[Any], c_ts: list[Any], c_dur: list[Any]
) -> dict[int, float]:
    """:func:`_exposed` of the collectives given as columns (ids, ranks, starts, durations)."""
    # the kernels' columns once as arrays, a mask per rank in NumPy (a comparison of a Series
    # is a query of fixed cost); a missing rank reads NaN, equal to no rank
    ev = profile.events
    if c.absent(profile, "kernel"):  # (the columns' filters find no row)
        k_rank = k_ts = k_dur = np.zeros(0, dtype=np.int64)
    else:
        is_kernel = pl.Series(c.kind_mask(profile, "kernel"))
        k_rank = ev.get_column("rank").filter(is_kernel).to_numpy()
        k_ts = ev.get_column("ts_ns").filter(is_kernel).to_numpy()
        k_dur = ev.get_column("dur_ns").filter(is_kernel).to_numpy()
    out: dict[int, float] = {}
    for rank in dict.fromkeys(c_ranks):
        mine = k_rank == rank if rank is not None else np.zeros(len(k_rank), dtype=bool)
        ts = k_ts[mine].astype(np.float64)
        order = np.argsort(ts, kind="stable")  # (the merge below needs starts in order)
        s = ts[order]
        e = s + k_dur[mine].astype(np.float64)[order]
        merged: list[tuple[float, float]] = []
        for a, b in zip(s.tolist(), e.tolist(), strict=True):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        ms = np.array([m[0] for m in merged])
        me = np.array([m[1] for m in merged])
        for cid, r, ts0, dur in zip(ids, c_ranks, c_ts, c_dur, strict=True):
            if r != rank:
                continue
            a, b = float(ts0), float(ts0 + dur)
            # (no kernel on the rank: none busy, without the arrays' fixed cost a collective)
            busy = (
                float(np.clip(np.minimum(me, b) - np.maximum(ms, a), 0, None).sum())
                if merged
                else 0.0
            )
            out[int(cid)] = max(b - a - busy, 0.0)
    return out


class AscendCommByteAlignment:
    """HCCL SDMA transfers whose size is not a multiple of 512 bytes."""

    id = "ascend-comm-byte-alignment"
    doc = (
        "HCCL moves a collective's data in SDMA tasks (`Memcpy`, `Reduce_Inline` on each "
        "link plane); a transfer whose size is not a multiple of 512 bytes runs off the DMA "
        "engine's aligned path and at a lower rate. Like msprof-analyze's byte-alignment "
        f"check, the rule takes the SDMA tasks off the chip larger than {MIN_BYTES} B and "
        f"flags the collectives with a task whose size is not a multiple of {BASE_BYTES} B. "
        "Saving: the unaligned tasks' time above their bytes at the rate of aligned SDMA "
        "tasks of the same link type and a similar size in the same profile (peer rate), "
        "the largest per-plane excess of each collective (planes run side by side), at most "
        "the collective's exposed time (with no compute kernel running); unknown without "
        "aligned peers. Fix: make the communicated tensors' sizes multiples of 512 bytes "
        "(pad buckets, hidden sizes, or DDP `bucket_cap_mb` so that buckets split evenly)."
    )

    # the HCCL plane tasks it tests are "other" events
    needs = ("other",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        tasks = _tasks(profile)
        if tasks.height == 0 or "aligned" not in tasks.columns:
            return []
        if not tasks.get_column("aligned").not_().any():
            return []
        rates = _peer_rates(tasks)
        tasks = _collective_of(profile, tasks)
        bad_colls = tasks.filter(~pl.col("aligned")).get_column("coll").drop_nulls().unique()
        colls = profile.events.filter(pl.col("id").is_in(bad_colls.implode())).select(
            "id", "rank", "name", "ts_ns", "dur_ns", "op_id"
        )
        exposed = _exposed(profile, colls)
        steps = c.step_info(profile)
        # each collective's tasks as rows, in the tasks' order (a filter per collective was
        # two queries each)
        by_coll: dict[Any, list[tuple[Any, ...]]] = {}
        for task in tasks.select("coll", "aligned", "tid", "bytes", "link", "dur_ns", "id").rows():
            if task[0] is not None:
                by_coll.setdefault(task[0], []).append(task[1:])
        rows = []
        for cid, name, op_id in colls.select("id", "name", "op_id").rows():
            mine = by_coll.get(cid, [])
            bad = [t for t in mine if t[0] is False]
            excess: dict[int, float] = {}
            known = True
            for _, tid, size, link, tdur, _ in bad:
                rate = rates.get((link, size))
                if rate is None:
                    known = False
                    continue
                excess[tid] = excess.get(tid, 0.0) + max(float(tdur) - size / rate, 0.0)
            rows.append(
                {
                    "coll": cid,
                    "family": re.sub(r"_+\d+(_\d+)*$", "", str(name)),
                    "op_id": op_id,
                    "saving": min(max(excess.values(), default=0.0), exposed.get(cid, 0.0)),
                    "known": known and bool(excess),
                    "exposed": exposed.get(cid, 0.0),
                    "sdma_ns": float(sum(t[4] for t in mine if t[4] is not None)),
                    "bad_ns": float(sum(t[4] for t in bad if t[4] is not None)),
                    "bad_tasks": len(bad),
                    "sizes": sorted({t[2] for t in bad}),
                    "task_ids": [t[5] for t in bad],
                }
            )
        out = []
        for family in sorted({r["family"] for r in rows}):
            rs = [r for r in rows if r["family"] == family]
            out.append(self._finding(profile, steps, family, rs))
        return out

    def _finding(
        self, profile: Profile, steps: c.StepInfo, family: str, rs: list[dict[str, Any]]
    ) -> Finding:
        anchor = [r["op_id"] for r in rs if r["op_id"] is not None][:1] or [rs[0]["coll"]]
        where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": anchor}))))
        known = all(r["known"] for r in rs)
        saving = float(sum(r["saving"] for r in rs)) if known else 0.0
        exposed = float(sum(r["exposed"] for r in rs))
        sdma = float(sum(r["sdma_ns"] for r in rs))
        bad = float(sum(r["bad_ns"] for r in rs))
        share = bad / sdma if sdma else 0.0
        sizes = sorted({s for r in rs for s in r["sizes"]})
        if known:
            how = (
                "the unaligned tasks' time above their bytes at the rate of aligned SDMA "
                "tasks of the same link and a similar size (the largest per-plane excess of "
                "each collective), at most each collective's exposed time"
            )
            method, sev = "peer-rate", None
        else:
            how = (
                "unknown: no aligned SDMA tasks of the same link and a similar size to compare "
                f"with; the unaligned tasks take {100 * share:.0f}% of these collectives' "
                "SDMA time"
            )
            method, sev = "unknown", "low"
        f: Finding = c.make_finding(
            profile,
            rule=self.id,
            title=f"{family}: {sum(r['bad_tasks'] for r in rs)} SDMA transfers not a multiple "
            f"of {BASE_BYTES} B in {len(rs)} collective{'s' if len(rs) != 1 else ''}",
            where=where,
            key=f"align:{family}",
            saving_ns=saving,
            saving_how=how,
            fix="# pad what is communicated to a multiple of 512 bytes, e.g. a gradient bucket:\n"
            "flat = torch.nn.functional.pad(flat, (0, (-flat.numel()) % (512 // "
            "flat.element_size())))\n"
            "dist.all_reduce(flat)  # and slice the padding off after",
            evidence={
                **c.evidence(
                    [family, *TASK_NAMES],
                    len(rs),
                    {
                        "unaligned_tasks": sum(r["bad_tasks"] for r in rs),
                        "unaligned_sizes_bytes": sizes[:10],
                        "unaligned_share_of_sdma_time": round(share, 4),
                        "unaligned_us_per_step": round(steps.per_step_us(bad), 3),
                        "exposed_us_per_step": round(steps.per_step_us(exposed), 3),
                    },
                    [i for r in rs for i in r["task_ids"]],
                ),
                # the collectives (see advise.overlap): their exposed time is also
                # comm-exposed's, which counts what is left after this finding
                "op_groups": sorted(int(r["coll"]) for r in rs),
                "part_of": ["comm-exposed"],
            },
            severity=sev,
            steps=steps,
            limit_ns=exposed,
            limit_what="the collectives' exposed time",
            method=method,
        )
        return f


register(AscendCommByteAlignment())
