"""Ascend communication packet size: many HCCL collectives that each move little data.

msprof-analyze's advisor ("Packet Analysis", read for what it tests, not copied) takes each
HCCL operator's SDMA and RDMA transit size (``communication.json``'s Communication Bandwidth
Info: the bytes of the operator's transfer tasks) and calls the operator's packet small below
16 MB over SDMA or 1 MB over RDMA (its rule file's ``min_sdma_size`` / ``min_rdma_size``);
the issue is raised when more than 20% of the operators with such traffic are small
(``min_sdma_ratio`` / ``min_rdma_ratio``), "excessive small communication packets may cause
host delivery bottlenecks". It gives no saving.

opscope's rule computes the same transit sizes from the HCCL plane tasks of ``trace_view.json``
(``size(Byte)``, ``transport type``, ``link type`` in each task's args; on-chip copies and
zero-size notifies carry no link data), per collective, and applies the same thresholds. It
adds a bound: every collective pays a fixed cost (launch, notifies, the algorithm's steps)
whatever its size, which fewer, larger collectives pay once. The small collectives' time above
their bytes at the rate of the large collectives of the same transport in the profile (peer
rate, wall time of the collectives) is what bucketing them can remove; only the exposed part
(no compute kernel running) shortens the step, so each collective's saving is capped at its
exposed time. Without large collectives to compare with, the saving is ``unknown``. The
collectives' exposed time is also ``comm-exposed``'s: this finding names that rule in
``evidence.part_of`` and keeps its saving, ``comm-exposed`` counts the rest
(:mod:`opscope.advise.overlap`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.ascend_comm_alignment import _collective_of, _exposed
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


def transit(profile: Profile) -> pl.DataFrame:
    """Per collective and transport: ``coll, rank, transport, bytes, tasks`` (the bytes of
    its transfer tasks off the chip, as msprof-analyze's Transit Size)."""
    ev = profile.events.filter(
        (pl.col("kind") == "other") & pl.col("device").is_not_null() & pl.col("args").is_not_null()
    )
    empty = pl.DataFrame(
        schema={
            "coll": pl.Int64,
            "rank": pl.Int32,
            "transport": pl.String,
            "bytes": pl.Int64,
            "tasks": pl.UInt32,
        }
    )
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
        pl.col("bytes").sum().cast(pl.Int64), pl.len().alias("tasks")
    )


class AscendCommPacket:
    """Many small HCCL collectives (small communication packets)."""

    id = "ascend-comm-packet"
    doc = (
        "Every HCCL collective pays a fixed cost (launch, notifies, the algorithm's steps) "
        "whatever it moves; many collectives that each move little data pay it many times. "
        "Like msprof-analyze's packet analysis, the rule sums each collective's transfer "
        "tasks off the chip per transport (its SDMA / RDMA transit size) and calls it small "
        f"below {MIN_BYTES['SDMA'] // 1_000_000} MB over SDMA or "
        f"{MIN_BYTES['RDMA'] // 1_000_000} MB over RDMA; it fires when more than "
        f"{MIN_SMALL_SHARE:.0%} of the collectives of a transport are small. Saving: the small "
        "collectives' time above their bytes at the rate of the large collectives of the "
        "same transport in the profile (peer rate), each at most its exposed time (no "
        "compute kernel running); unknown without large collectives. Fix: fewer, larger "
        "collectives (larger DDP buckets, gradient accumulation, a larger batch, ZeRO-1/2 "
        "instead of ZeRO-3, fused/affinity optimizers that communicate flat buffers)."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        tr = transit(profile)
        if tr.height == 0:
            return []
        colls = profile.events.filter(pl.col("kind") == "communication").select(
            pl.col("id").alias("coll"), "name", "ts_ns", "dur_ns", "op_id"
        )
        tr = tr.join(colls, on="coll", how="inner")
        steps = c.step_info(profile)
        out = []
        for (transport,), grp in tr.group_by("transport", maintain_order=True):
            f = self._transport(profile, steps, str(transport), grp)
            if f is not None:
                out.append(f)
        return out

    def _transport(
        self, profile: Profile, steps: c.StepInfo, transport: str, grp: pl.DataFrame
    ) -> Finding | None:
        limit = MIN_BYTES[transport]
        small = grp.filter(pl.col("bytes") < limit)
        share = small.height / grp.height
        if small.height == 0 or share <= MIN_SMALL_SHARE:
            return None
        large = grp.filter(pl.col("bytes") >= limit)
        rate = None
        if large.height >= MIN_PEERS and float(large.get_column("dur_ns").sum()) > 0:
            rate = float(large.get_column("bytes").sum()) / float(large.get_column("dur_ns").sum())
        exposed = _exposed(
            profile, small.select(pl.col("coll").alias("id"), "rank", "ts_ns", "dur_ns")
        )
        exp_ns = float(sum(exposed.values()))
        time_ns = float(small.get_column("dur_ns").sum())
        saving = 0.0
        if rate is not None:
            for cid, b, d in small.select("coll", "bytes", "dur_ns").rows():
                saving += min(max(float(d) - b / rate, 0.0), exposed.get(int(cid), 0.0))
            how = (
                f"the small collectives' time above their bytes at the large {transport} "
                f"collectives' rate ({rate:.1f} B/ns), each at most its exposed time"
            )
            method, sev = "peer-rate", None
        else:
            how = (
                f"unknown: no {transport} collective of {limit / 1e6:g} MB or more to compare "
                f"with; the small ones take {steps.per_step_us(time_ns):.1f} µs/step"
            )
            method, sev = "unknown", "low"
        families = sorted({re.sub(r"_+\d+(_\d+)*$", "", str(n)) for n in small["name"]})
        anchor = small.get_column("op_id").drop_nulls().to_list()[:1] or [small["coll"][0]]
        where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": anchor}))))
        sizes = small.get_column("bytes").to_list()
        f: Finding = c.make_finding(
            profile,
            rule=self.id,
            title=f"{small.height} of {grp.height} {transport} collectives move under "
            f"{limit / 1e6:g} MB ({', '.join(families[:3])})",
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
                    small.height,
                    {
                        "collectives": grp.height,
                        "small_collectives": small.height,
                        "small_share": round(share, 4),
                        "min_bytes": limit,
                        "small_bytes_median": sorted(sizes)[len(sizes) // 2],
                        "small_us_per_step": round(steps.per_step_us(time_ns), 3),
                        "exposed_us_per_step": round(steps.per_step_us(exp_ns), 3),
                        "peer_rate_bytes_per_ns": None if rate is None else round(rate, 3),
                    },
                    small.get_column("coll").to_list(),
                ),
                # the collectives (see advise.overlap): their exposed time is also
                # comm-exposed's, which counts what is left after this finding
                "op_groups": sorted(int(x) for x in small.get_column("coll").to_list()),
                "part_of": ["comm-exposed"],
            },
            severity=sev,
            steps=steps,
            limit_ns=exp_ns,
            limit_what="the small collectives' exposed time",
            method=method,
        )
        return f


register(AscendCommPacket())
