"""ascend-comm-packet on ranks that have communication.json (or analysis.db) but no HCCL tasks.

msprof-analyze's packet analysis reads each rank's communication.json: an operator with SDMA
(RDMA) traffic is small below 16 MB (1 MB); the rank's issue is raised when more than 20% of
those operators are small. The references here count the raw JSON in plain Python.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import opscope
from conftest import shared_trace
from opscope.advise import advise
from opscope.advise.rules.ascend_comm_packet import transit_sizes

ASCEND = {"target": "ascend"}
ST_LEVEL2 = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data")) / "st" / "level2"
LIMIT_MB = {"SDMA": 16.0, "RDMA": 1.0}
SUMMARY = "Total Op Info"


# plain-Python references over communication.json ------------------------------------------


def _ops(comm: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, entry) of every operator, p2p and collective, summary entries left out."""
    return [
        (name, op)
        for kinds in comm.values()
        for ops in kinds.values()
        for name, op in ops.items()
        if name != SUMMARY
    ]


def _band(op: dict[str, Any], transport: str) -> tuple[float, float]:
    b = op["Communication Bandwidth Info"].get(transport) or {}
    return float(b.get("Transit Size(MB)", 0)), float(b.get("Transit Time(ms)", 0))


def _share(comm: dict[str, Any], transport: str) -> tuple[int, int]:
    """(small, with traffic) operators on ``transport``."""
    sizes = [_band(op, transport)[0] for _, op in _ops(comm)]
    sizes = [s for s in sizes if s > 0]
    return sum(s < LIMIT_MB[transport] for s in sizes), len(sizes)


def _peer_rate(comms: list[dict[str, Any]], transport: str) -> float:
    """Bytes per ns of the large operators of every rank (their transit time)."""
    mb = ms = 0.0
    for comm in comms:
        for _, op in _ops(comm):
            s, t = _band(op, transport)
            if s >= LIMIT_MB[transport]:
                mb, ms = mb + s, ms + t
    return mb * 1e6 / (ms * 1e6)


def _rank_saving_ns(comm: dict[str, Any], transport: str, rate: float) -> float:
    """A rank with no kernels: each small operator's transit time above its bytes at the peer
    rate, at most its elapse (nothing hides it)."""
    total = 0.0
    for _, op in _ops(comm):
        s, t = _band(op, transport)
        if 0 < s < LIMIT_MB[transport]:
            elapse = float(op["Communication Time Info"]["Elapse Time(ms)"]) * 1e6
            total += min(max(t * 1e6 - s * 1e6 / rate, 0.0), elapse)
    return total


# synthetic ranks ----------------------------------------------------------------------------


def _op(start_us: float, elapse_ms: float, **bands: tuple[float, float]) -> dict[str, Any]:
    info = {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0}
    bw: dict[str, Any] = {tr: dict(info) for tr in ("HCCS", "PCIE", "SIO", "SDMA", "RDMA")}
    for tr, (mb, ms) in bands.items():
        bw[tr] = {
            "Transit Size(MB)": mb,
            "Transit Time(ms)": ms,
            "Bandwidth(GB/s)": mb / ms if ms else 0,
        }
    return {
        "Communication Time Info": {
            "Start Timestamp(us)": start_us,
            "Elapse Time(ms)": elapse_ms,
            "Transit Time(ms)": 0,
            "Wait Time(ms)": 0,
            "Synchronization Time(ms)": 0,
            "Idle Time(ms)": 0,
            "Wait Time Ratio": 0,
            "Synchronization Time Ratio": 0,
        },
        "Communication Bandwidth Info": bw,
    }


T0 = 1_700_000_000_000_000.0  # µs


def _rank0() -> dict[str, Any]:
    """7 SDMA operators with traffic, 3 small (one of them a p2p), one exactly 16 MB (not
    small: msprof-analyze's test is "<"), one without traffic; 2 RDMA operators, 1 small; a
    summary entry (large) that must not count."""
    coll = {
        "hcom_allReduce__1_0_1@g": _op(T0 + 0, 6.0, SDMA=(100.0, 5.0)),
        "hcom_allReduce__1_1_1@g": _op(T0 + 10_000, 6.0, SDMA=(200.0, 10.0)),
        "hcom_allGather__1_2_1@g": _op(T0 + 20_000, 1.2, SDMA=(16.0, 0.8)),
        "hcom_allReduce__1_3_1@g": _op(T0 + 30_000, 0.5, SDMA=(1.0, 0.2)),
        "hcom_allReduce__1_4_1@g": _op(T0 + 31_000, 0.3, SDMA=(0.000008, 0.002)),
        "hcom_allReduce__1_5_1@g": _op(T0 + 32_000, 0.1),
        "hcom_reduceScatter__1_6_1@g": _op(T0 + 40_000, 4.0, SDMA=(50.0, 2.5)),
        "hcom_allReduce__2_0_1@r": _op(T0 + 50_000, 0.4, RDMA=(0.5, 0.1)),
        "hcom_allReduce__2_1_1@r": _op(T0 + 51_000, 2.0, RDMA=(2.0, 0.4)),
        SUMMARY: _op(T0, 20.0, SDMA=(367.000008, 18.502), RDMA=(2.5, 0.5)),
    }
    p2p = {
        "hcom_send__3_0_1@p": _op(T0 + 60_000, 150.0, SDMA=(8.0, 0.4)),
        SUMMARY: _op(T0 + 60_000, 150.0, SDMA=(8.0, 0.4)),
    }
    return {"step1": {"collective": coll, "p2p": p2p}}


def _rank1() -> dict[str, Any]:
    """1 of 5 SDMA operators small: exactly 20%, not over it, so this rank is silent."""
    coll = {
        f"hcom_allReduce__1_{i}_1@g": _op(T0 + 10_000 * i, 3.0, SDMA=(100.0, 2.5)) for i in range(4)
    }
    coll["hcom_allReduce__1_9_1@g"] = _op(T0 + 90_000, 0.5, SDMA=(2.0, 0.3))
    return {"step1": {"collective": coll}}


def _write(root: Path, comms: list[dict[str, Any]], not_overlapped_us: float) -> Path:
    for rank, comm in enumerate(comms):
        out = root / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        (out / "communication.json").write_text(json.dumps(comm))
        (out / "step_trace_time.csv").write_text(
            "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,"
            "Free,Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing\n"
            f"{rank},1,100000.0,{not_overlapped_us},0.0,{not_overlapped_us},1000.0,"
            f"{200000.0 + not_overlapped_us},0,{not_overlapped_us},0.0\n"
        )
    return root


def test_synthetic_shares_per_rank_equal_a_count_of_the_json(tmp_path: Path) -> None:
    comms = [_rank0(), _rank1()]
    p = opscope.load(_write(tmp_path, comms, 100_000.0))
    found = {
        f.evidence["figures"]["min_bytes"]: f
        for f in advise(p, ASCEND).by_rule("ascend-comm-packet")
    }
    sdma, rdma = found[16_000_000], found[1_000_000]
    assert _share(comms[0], "SDMA") == (3, 7) and _share(comms[1], "SDMA") == (1, 5)
    assert sdma.evidence["figures"]["small_share_by_rank"] == {
        str(r): round(s / n, 4) for r, (s, n) in enumerate(_share(c, "SDMA") for c in comms)
    }
    # rank 1's 20% is not over msprof-analyze's 20%: the finding is rank 0's
    assert sdma.evidence["figures"]["ranks"] == [0]
    assert (
        sdma.evidence["figures"]["small_collectives"],
        sdma.evidence["figures"]["collectives"],
    ) == (3, 7)
    assert "on rank 0" in sdma.title
    assert _share(comms[0], "RDMA") == (1, 2)
    assert rdma.evidence["figures"]["small_share_by_rank"] == {"0": 0.5}
    # msprof-analyze's "Small SDMA duration(ms)": the small operators' transit time
    small_ms = sum(
        _band(op, "SDMA")[1] for _, op in _ops(comms[0]) if 0 < _band(op, "SDMA")[0] < 16
    )
    assert sdma.evidence["figures"]["small_ms_by_rank"] == {"0": pytest.approx(small_ms)}
    assert sdma.evidence["figures"]["transit_source"] == ["communication files"]


def test_synthetic_saving_is_bounded_by_the_small_transfers(tmp_path: Path) -> None:
    comms = [_rank0(), _rank1()]
    p = opscope.load(_write(tmp_path, comms, 100_000.0))
    (f,) = [
        f
        for f in advise(p, ASCEND).by_rule("ascend-comm-packet")
        if f.evidence["figures"]["min_bytes"] == 16_000_000
    ]
    rate = _peer_rate(comms, "SDMA")
    assert f.evidence["figures"]["peer_rate_bytes_per_ns"] == pytest.approx(rate, abs=1e-3)
    want = _rank_saving_ns(comms[0], "SDMA", rate)
    assert want > 0
    assert f.saving_method == "peer-rate"
    assert f.saving_us == pytest.approx(want / 1000, abs=1e-3)
    # at most the small operators' time moving data, never their (wait-filled) elapse
    moving = sum(
        min(_band(op, "SDMA")[1], float(op["Communication Time Info"]["Elapse Time(ms)"]))
        for _, op in _ops(comms[0])
        if 0 < _band(op, "SDMA")[0] < 16
    )
    assert f.saving_limit_us == pytest.approx(moving * 1000, abs=1e-3)
    assert f.saving_us <= f.saving_limit_us


def test_synthetic_saving_at_most_the_ranks_exposed_communication(tmp_path: Path) -> None:
    """A rank with no kernels: its Communication(Not Overlapped) bounds what it can save."""
    comms = [_rank0(), _rank1()]
    p = opscope.load(_write(tmp_path, comms, 50.0))  # µs
    (f,) = [
        f
        for f in advise(p, ASCEND).by_rule("ascend-comm-packet")
        if f.evidence["figures"]["min_bytes"] == 16_000_000
    ]
    assert _rank_saving_ns(comms[0], "SDMA", _peer_rate(comms, "SDMA")) > 50_000
    assert f.saving_us == pytest.approx(50.0) and f.saving_limit_us == pytest.approx(50.0)


def test_synthetic_without_large_collectives_is_unknown(tmp_path: Path) -> None:
    comm = {
        "step1": {
            "collective": {
                f"hcom_allReduce__1_{i}_1@g": _op(T0 + 1000 * i, 0.5, SDMA=(0.5, 0.1))
                for i in range(5)
            }
        }
    }
    p = opscope.load(_write(tmp_path, [comm], 100_000.0))
    (f,) = advise(p, ASCEND).by_rule("ascend-comm-packet")
    assert f.saving_method == "unknown" and f.saving_us == 0.0 and f.severity == "low"
    assert f.evidence["figures"]["small_share_by_rank"] == {"0": 1.0}
    assert f.evidence["figures"]["peer_rate_bytes_per_ns"] is None


def test_synthetic_other_target_is_silent(tmp_path: Path) -> None:
    p = opscope.load(_write(tmp_path, [_rank0()], 100_000.0))
    assert advise(p, {"target": "nvidia"}).by_rule("ascend-comm-packet") == []


# the real 4-rank Megatron run (msinsight st/level2: two ranks hold only communication files) ---


@pytest.mark.skipif(not ST_LEVEL2.is_dir(), reason="msinsight st/level2 not present")
def test_st_level2_shares_per_rank_equal_the_json() -> None:
    """0.375, 0.5455, 0.6429, 0.6875: msprof-analyze 26.2's figures when it reads analysis.db
    (its text path adds the two "Total Op Info" entries: 0.30, 0.4615, 0.5625, 0.6111)."""
    comms = [
        json.loads((d / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
        for d in sorted(ST_LEVEL2.glob("rank_*_ascend_pt"))
    ]
    p = opscope.load(ST_LEVEL2)
    (f,) = advise(p, ASCEND).by_rule("ascend-comm-packet")
    fig = f.evidence["figures"]
    want = {str(r): _share(c, "SDMA") for r, c in enumerate(comms)}
    assert {r: (s, n) for r, (s, n) in want.items()} == {
        "0": (3, 8),
        "1": (6, 11),
        "2": (9, 14),
        "3": (11, 16),
    }
    assert fig["small_share_by_rank"] == {r: round(s / n, 4) for r, (s, n) in want.items()}
    assert fig["ranks"] == [0, 1, 2, 3]
    assert (fig["small_collectives"], fig["collectives"]) == (29, 49)
    # msprof-analyze's "total time" of the small operators, per rank: 0.8065 ... 0.823 ms
    assert fig["small_ms_by_rank"] == {
        str(r): pytest.approx(
            sum(_band(op, "SDMA")[1] for _, op in _ops(c) if 0 < _band(op, "SDMA")[0] < 16),
            abs=1e-4,
        )
        for r, c in enumerate(comms)
    }
    rate = _peer_rate(comms, "SDMA")
    assert fig["peer_rate_bytes_per_ns"] == pytest.approx(rate, abs=1e-3)
    # ranks 1 and 3 have no kernels: their saving is the plain sum; 0 and 2 subtract the
    # kernels' overlap, so at most it. The finding is the largest rank's.
    bare = [_rank_saving_ns(comms[r], "SDMA", rate) for r in (1, 3)]
    most = max(_rank_saving_ns(c, "SDMA", rate) for c in comms)
    assert max(bare) / 1000 - 1e-3 <= f.saving_us <= most / 1000 + 1e-3
    assert (
        f.saving_us
        <= f.saving_limit_us
        <= max(float(v) for v in fig["small_ms_by_rank"].values()) * 1000 + 1e-3
    )
    assert f.saving_method == "peer-rate"


def test_small_two_rank_counts_the_collectives_its_kernel_table_lacks() -> None:
    """The shared small_two_rank sample: communication.json holds 12 and 17 operators, the
    kernel tables 4 and 2 of them; every operator of the file counts, as for msprof-analyze
    (its advisor: rank 0 RDMA 50.00% = 4/8 and rank 1 SDMA 41.18% = 7/17 with the summary
    entries; 4/6 and 7/16 without)."""
    root = shared_trace("ascend/small_two_rank")
    comms = [
        json.loads(
            (root / f"test_rank_{r}" / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text()
        )
        for r in (0, 1)
    ]
    found = advise(opscope.load(root), ASCEND).by_rule("ascend-comm-packet")
    by = {f.evidence["figures"]["min_bytes"]: f.evidence["figures"] for f in found}
    for transport, limit in (("SDMA", 16_000_000), ("RDMA", 1_000_000)):
        shares = {str(r): _share(c, transport) for r, c in enumerate(comms)}
        assert by[limit]["small_share_by_rank"] == {
            r: round(s / n, 4) for r, (s, n) in shares.items()
        }
        assert by[limit]["ranks"] == [int(r) for r, (s, n) in shares.items() if s / n > 0.2]
    assert _share(comms[0], "RDMA") == (4, 6) and _share(comms[1], "SDMA") == (7, 16)


@pytest.mark.skipif(not (ST_LEVEL2.parent.parent / "db").is_dir(), reason="AlexNet db not present")
@pytest.mark.parametrize("level", ["level1", "level2"])
def test_db_export_reads_analysis_db(level: str) -> None:
    """The database export has no communication.json: the sizes come from analysis.db's
    CommAnalyzerBandwidth (msprof-analyze's db path); every AlexNet all-reduce moves 16 MB or
    more, so no finding."""
    run = ST_LEVEL2.parent.parent / "db" / level
    p = opscope.load(run)
    got = transit_sizes(p)
    for rank in (0, 1):
        db = run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        # one row per packet-size bucket: the operator's transport figures repeat on each
        rows = con.execute(
            "SELECT hccl_op_name, MAX(transit_size) FROM CommAnalyzerBandwidth "
            "WHERE transport_type = 'SDMA' AND transit_size > 0 GROUP BY hccl_op_name"
        ).fetchall()
        want = sorted(round(size * 1e6) for _, size in rows)
        con.close()
        mine = got.filter((got["rank"] == rank) & (got["transport"] == "SDMA"))
        assert sorted(mine["bytes"].to_list()) == want and len(want) == 4
        assert set(mine["source"]) == {"communication files"}
        assert min(want) >= 16_000_000
    assert advise(p, ASCEND).by_rule("ascend-comm-packet") == []
