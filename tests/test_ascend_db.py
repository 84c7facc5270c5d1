"""Ascend database export: one synthetic run written both as the text export and as the
database export gives equal Profiles, table by table; the real AlexNet db/text pairs (separate
runs of the same program) agree on what the program fixes; bad databases are typed errors."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from opscope.errors import InputError
from opscope.ingest import ascend_db
from opscope.ingest.ascend import read_ascend
from opscope.ingest.registry import load
from opscope.model import schema

US = 1000  # ns per µs
T0 = 1_700_000_000_000_000_000  # session start, ns (as large as real epochs)
HOST, MAIN, BWD = 4242, 4242, 4243
MIB = 1024 * 1024

# ---------------------------------------------------------------------------------------------
# The run, once: host ops, CANN calls, device tasks, a collective, memory, a step.

# (name, type, tid, start µs, end µs, seq, fwd tid, shapes, dtypes, stack, connection ids)
API = [
    ("ProfilerStep#5", "op", MAIN, 0, 1000, -1, 0, None, None, None, []),
    ("train.py(10): step", "trace", MAIN, 1, 990, None, None, None, None, None, []),
    (
        "aten::mm",
        "op",
        MAIN,
        10,
        50,
        7,
        0,
        "2,3;\r\n3,4",
        "float;\r\nfloat",
        ["train.py(12): fwd", "torch/nn/modules/linear.py(5): forward"],
        [100, 300],
    ),
    ("aten::add", "op", MAIN, 60, 80, 8, 0, "2,4;\r\n2,4", "float;\r\nfloat", None, [101]),
    ("Enqueue", "queue", MAIN, 82, 84, None, None, None, None, None, [200]),
    ("Dequeue@aclnnAdd", "queue", BWD, 86, 88, None, None, None, None, None, [200]),
    ("MmBackward0", "op", BWD, 500, 540, 7, MAIN, None, None, None, [300]),
    ("c10d::allreduce_", "op", MAIN, 600, 700, 9, 0, None, None, None, [102]),
]
CATS = {100: "async_npu", 101: "async_npu", 102: "async_npu", 200: "async_task_queue"}
CATS[300] = "fwdbwd"
# (level, name, tid, start, end, connection)
CANN = [
    ("acl", "aclnnMm", MAIN, 20, 40, 100),
    ("acl", "aclnnAdd", MAIN, 65, 75, 101),
    ("hccl", "HcclAllreduce", MAIN, 605, 608, 102),
]
# Compute tasks: (gid, name, op type, core, stream, start, end, conn, block, wait ns, shapes)
COMPUTE = [
    (1, "MatMul_1", "MatMulV2", "AI_CORE", 2, 45, 55, 100, 8, 0, '"2,3;3,4"'),
    (2, "Add_2", "Add", "AI_VECTOR_CORE", 2, 85, 90, 101, 4, 30_000, '"2,4;2,4"'),
]
OTHER_TASKS = [(3, "MEMCPY_ASYNC", 3, 95, 96, 103)]  # (gid, task type, stream, start, end, conn)
PMU = {1: {"aic_total_time": 9.5, "aic_mac_ratio": 0.25}, 2: {"aic_total_time": 4.0}}
GROUP = "1234567890"
COMM_OP = ("hcom_allReduce__1_0_1", "hcom_allReduce_", 610, 690, 102, "FP32", "RING", 1024)
# Per-plane tasks: (gid, task type, plane, start, end, src, dst, transport, size, link, stream)
COMM_TASKS = [
    (4, "Memcpy", 0, 611, 650, 0, 1, "SDMA", 4096, "HCCS", 4),
    (5, "Notify_Wait", 1, 612, 680, 1, 0, "LOCAL", 0, "INVALID_TYPE", 4),
]
STEP = (5, 0, 1000)
BREAKDOWN = ("5", 100.5, 40.25, 10.0, 50.25, 20.125, 1000.0)
# (size bytes, alloc µs, release µs or None, alloc total allocated, reserved, release totals)
OP_MEM = [
    (4096, 30, 70, 10 * MIB, 20 * MIB, 9 * MIB, 20 * MIB),
    (1536, 62, None, 11 * MIB, 20 * MIB, None, None),
]
MEM_REC = [("PTA", 5, 10 * MIB, 20 * MIB, 10 * MIB), ("PTA", 900, 12 * MIB, 22 * MIB, 11 * MIB)]
PID_CANN, PID_HW, PID_HCCL = ascend_db.PID_CANN, ascend_db.PID_HW, ascend_db.PID_HCCL
CPID = ascend_db.COUNTER_PIDS
FREQ = [(0, 1800), (500, 1650)]  # (µs, MHz)
NPU_MEM = [("app", 100, 0, 3 * MIB), ("device", 100, 0, 5 * MIB)]  # (type, µs, ddr, hbm bytes)
ACC = [(200, 1, 2, 3, 4)]  # (µs, read bw, write bw, read ost, write ost levels)
SOC = [(300, 5, 6)]  # (µs, mata level, l2 buffer level)
# (µs, hbm id, direction, bytes/s) and (µs, llc id, mode, hit rate %, throughput bytes/s): the
# database's units; the text holds MB/s (2^20 bytes) and the hit rate as a fraction.
HBM = [
    (150, 0, "read", 52_428_800),
    (150, 0, "write", 1_000_000),
    (150, 1, "read", 0),
    (150, 1, "write", 7_340_032),
]
LLC = [(250, 0, "read", 87.5, 20_971_520), (250, 1, "read", 34.5, 1_048_577)]
# The Overlap Analysis slices of this run, by hand: compute tasks 45-55 and 85-90, the
# collective 610-690 (the memcpy and the collective's plane tasks are neither).
OVERLAP = [
    (0, 45, 55),
    (0, 85, 90),
    (1, 610, 690),
    (2, 610, 690),
    (3, 55, 85),
    (3, 90, 610),
]  # (type: Computing, Communication, Communication(Not Overlapped), Free; start µs; end µs)
OVERLAP_NAMES = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]
CANN_PREFIX = {"acl": "AscendCL", "hccl": "Hccl"}


def _ns(us: int) -> int:
    return T0 + us * US


def _ts(us: int) -> str:
    ns = _ns(us)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _pmu_col(name: str) -> str:
    return {"aic_total_time": "aicore_time(us)"}.get(name, name)


# ---------------------------------------------------------------------------------------------
# Writers


def write_db(root: Path, rank: int = 0) -> Path:
    """The run as ``rank{rank}_ascend_pt`` with the database export (schema as the profiler
    writes it: integer ns, names interned in STRING_IDS, enums in ENUM_* tables)."""
    d = root / f"rank{rank}_ascend_pt"
    out = d / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    _info(d, rank, "db")
    con = sqlite3.connect(out / f"ascend_pytorch_profiler_{rank}.db")
    strings: dict[str, int] = {}

    def sid(v: str | None) -> int | None:
        if v is None:
            return None
        return strings.setdefault(v, len(strings))

    x = con.executescript
    x(
        """CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE ENUM_HCCL_DATA_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE ENUM_HCCL_LINK_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE ENUM_HCCL_TRANSPORT_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER,
            connectionId INTEGER, name INTEGER, sequenceNumber INTEGER, fwdThreadId INTEGER,
            inputDtypes INTEGER, inputShapes INTEGER, callchainId INTEGER, type INTEGER,
            depth INTEGER);
        CREATE TABLE PYTORCH_CALLCHAINS (id INTEGER, stack INTEGER, stackDepth INTEGER);
        CREATE TABLE CONNECTION_IDS (id INTEGER, connectionId INTEGER);
        CREATE TABLE connectionCats (connectionId INT, cat);
        CREATE TABLE CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER,
            connectionId INTEGER PRIMARY KEY, name INTEGER, depth INTEGER);
        CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER,
            connectionId INTEGER, globalTaskId INTEGER, globalPid INTEGER, taskType INTEGER,
            contextId INTEGER, streamId INTEGER, taskId INTEGER, modelId INTEGER, depth INTEGER);
        CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY,
            blockDim INTEGER, mixBlockDim INTEGER, taskType INTEGER, opType INTEGER,
            inputFormats INTEGER, inputDataTypes INTEGER, inputShapes INTEGER,
            outputFormats INTEGER, outputDataTypes INTEGER, outputShapes INTEGER,
            attrInfo INTEGER, waitNs INTEGER);
        CREATE TABLE TASK_PMU_INFO (globalTaskId INTEGER, name INTEGER, value NUMERIC);
        CREATE TABLE COMMUNICATION_OP (opName INTEGER, startNs INTEGER, endNs INTEGER,
            connectionId INTEGER, groupName INTEGER, opId INTEGER PRIMARY KEY, relay INTEGER,
            retry INTEGER, dataType INTEGER, algType INTEGER, count NUMERIC, opType INTEGER,
            waitNs INTEGER);
        CREATE TABLE COMMUNICATION_TASK_INFO (name INTEGER, globalTaskId INTEGER,
            taskType INTEGER, planeId INTEGER, groupName INTEGER, notifyId INTEGER,
            rdmaType INTEGER, srcRank INTEGER, dstRank INTEGER, transportType INTEGER,
            size INTEGER, dataType INTEGER, linkType INTEGER, opId INTEGER);
        CREATE TABLE STEP_TIME (id INTEGER, startNs INTEGER, endNs INTEGER);
        CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER);
        CREATE TABLE NPU_INFO (id INTEGER, name TEXT);
        CREATE TABLE OP_MEMORY (name INTEGER, size INTEGER, allocationTime INTEGER,
            releaseTime INTEGER, activeReleaseTime INTEGER, duration INTEGER,
            activeDuration INTEGER, allocationTotalAllocated INTEGER,
            allocationTotalReserved INTEGER, allocationTotalActive INTEGER,
            releaseTotalAllocated INTEGER, releaseTotalReserved INTEGER,
            releaseTotalActive INTEGER, streamPtr INTEGER, deviceId INTEGER);
        CREATE TABLE AICORE_FREQ (deviceId INTEGER, timestampNs NUMERIC, freq INTEGER);
        CREATE TABLE NPU_MEM (type INTEGER, ddr NUMERIC, hbm NUMERIC, timestampNs INTEGER,
            deviceId INTEGER);
        CREATE TABLE ACC_PMU (accId INTEGER, readBwLevel INTEGER, writeBwLevel INTEGER,
            readOstLevel INTEGER, writeOstLevel INTEGER, timestampNs NUMERIC, deviceId INTEGER);
        CREATE TABLE SOC_BANDWIDTH_LEVEL (l2BufferBwLevel INTEGER, mataBwLevel INTEGER,
            timestampNs NUMERIC, deviceId INTEGER);
        CREATE TABLE HBM (deviceId INTEGER, timestampNs INTEGER, bandwidth NUMERIC,
            hbmId INTEGER, type INTEGER);
        CREATE TABLE LLC (deviceId INTEGER, llcId INTEGER, timestampNs INTEGER, hitRate REAL,
            throughput INTEGER, mode INTEGER);
        CREATE TABLE MEMORY_RECORD (component INTEGER, timestamp INTEGER,
            totalAllocated INTEGER, totalReserved INTEGER, totalActive INTEGER,
            streamPtr INTEGER, deviceId INTEGER);"""
    )
    api_types = {"op": 50001, "queue": 50002, "trace": 50003}
    cann_types = {"acl": 20000, "hccl": 5500}
    con.executemany(
        "INSERT INTO ENUM_API_TYPE VALUES (?, ?)",
        [(v, k) for k, v in api_types.items()] + [(v, k) for k, v in cann_types.items()],
    )
    dtypes = {"FP32": 4, "INVALID_TYPE": 65535}
    links = {"HCCS": 1, "INVALID_TYPE": 65535}
    transports = {"SDMA": 0, "LOCAL": 2}
    for table, enum in (
        ("ENUM_HCCL_DATA_TYPE", dtypes),
        ("ENUM_HCCL_LINK_TYPE", links),
        ("ENUM_HCCL_TRANSPORT_TYPE", transports),
    ):
        con.executemany(f"INSERT INTO {table} VALUES (?, ?)", [(v, k) for k, v in enum.items()])
    chain = 0
    for i, (name, typ, tid, s, e, seq, fwd, shapes, dts, stack, conns) in enumerate(API):
        chain_id = None
        if stack:
            chain_id = chain
            chain += 1
            con.executemany(
                "INSERT INTO PYTORCH_CALLCHAINS VALUES (?, ?, ?)",
                [(chain_id, sid(f), depth) for depth, f in enumerate(stack)],
            )
        conn = i if conns else None
        for c in conns:
            con.execute("INSERT INTO CONNECTION_IDS VALUES (?, ?)", (i, c))
        # As the 2.x exporter writes them: the shapes under inputDtypes, the dtypes under
        # inputShapes (the reader tells them apart).
        con.execute(
            "INSERT INTO PYTORCH_API VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                str(_ns(s)),
                str(_ns(e)),
                HOST * (1 << 32) + tid,
                conn,
                sid(name),
                seq,
                fwd,
                sid(shapes),
                sid(dts),
                chain_id,
                api_types[typ],
                0,
            ),
        )
    con.executemany("INSERT INTO connectionCats VALUES (?, ?)", list(CATS.items()))
    for level, name, tid, s, e, conn in CANN:
        con.execute(
            "INSERT INTO CANN_API VALUES (?,?,?,?,?,?,?)",
            (_ns(s), _ns(e), cann_types[level], HOST * (1 << 32) + tid, conn, sid(name), 0),
        )
    task_id = 100
    for gid, name, op_type, core, stream, s, e, conn, block, wait, shapes in COMPUTE:
        task_id += 1
        con.execute(
            "INSERT INTO TASK VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (_ns(s), _ns(e), 0, conn, gid, HOST, sid("KERNEL_AICORE"), 4294967295, stream,
             task_id, 4294967295, 0),
        )  # fmt: skip
        con.execute(
            "INSERT INTO COMPUTE_TASK_INFO VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (sid(name), gid, block, 0, sid(core), sid(op_type), sid("ND;ND"), sid("FLOAT;FLOAT"),
             sid(shapes), sid("ND"), sid("FLOAT"), sid('"2,4"'), sid("N/A"), wait),
        )  # fmt: skip
        for metric, value in PMU.get(gid, {}).items():
            con.execute("INSERT INTO TASK_PMU_INFO VALUES (?, ?, ?)", (gid, sid(metric), value))
    for gid, ttype, stream, s, e, conn in OTHER_TASKS:
        con.execute(
            "INSERT INTO TASK VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (_ns(s), _ns(e), 0, conn, gid, HOST, sid(ttype), 4294967295, stream, 300, 4294967295,
             0),
        )  # fmt: skip
    name, op_type, s, e, conn, dt, alg, count = COMM_OP
    con.execute(
        "INSERT INTO COMMUNICATION_OP VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (sid(name), _ns(s), _ns(e), conn, sid(GROUP), 1, 0, 0, dtypes[dt], sid(alg), count,
         sid(op_type), 5_000),
    )  # fmt: skip
    for gid, ttype, plane, s, e, src, dst, transport, size, link, stream in COMM_TASKS:
        con.execute(
            "INSERT INTO TASK VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (_ns(s), _ns(e), 0, conn, gid, HOST, sid(ttype), plane, stream, 400 + gid,
             4294967295, 0),
        )  # fmt: skip
        con.execute(
            "INSERT INTO COMMUNICATION_TASK_INFO VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (sid(name), gid, sid(ttype), plane, sid(GROUP), 0, 65535, src, dst,
             transports[transport], size, dtypes["INVALID_TYPE"], links[link], 1),
        )  # fmt: skip
    con.execute("INSERT INTO STEP_TIME VALUES (?, ?, ?)", (STEP[0], _ns(STEP[1]), _ns(STEP[2])))
    con.execute("INSERT INTO RANK_DEVICE_MAP VALUES (?, ?)", (rank, rank))
    con.execute("INSERT INTO NPU_INFO VALUES (?, ?)", (rank, "Ascend910B"))
    for size, at, rt, aa, ar, ra, rr in OP_MEM:
        con.execute(
            "INSERT INTO OP_MEMORY VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (sid("aten::empty"), size, _ns(at), None if rt is None else _ns(rt), None, None,
             None, aa, ar, aa, ra, rr, ra, 1, rank),
        )  # fmt: skip
    for comp, t, a, r, act in MEM_REC:
        con.execute(
            "INSERT INTO MEMORY_RECORD VALUES (?,?,?,?,?,?,?)",
            (sid(comp), _ns(t), a, r, act, 1, rank),
        )
    for t, mhz in FREQ:
        con.execute("INSERT INTO AICORE_FREQ VALUES (?, ?, ?)", (rank, _ns(t), mhz))
    for typ, t, ddr, hbm in NPU_MEM:
        con.execute("INSERT INTO NPU_MEM VALUES (?,?,?,?,?)", (sid(typ), ddr, hbm, _ns(t), rank))
    for t, rb, wb, ro, wo in ACC:
        con.execute("INSERT INTO ACC_PMU VALUES (?,?,?,?,?,?,?)", (0, rb, wb, ro, wo, _ns(t), 0))
    for t, mata, l2 in SOC:
        con.execute("INSERT INTO SOC_BANDWIDTH_LEVEL VALUES (?,?,?,?)", (l2, mata, _ns(t), 0))
    # Stored as the profiler orders them: per sample, all reads, then all writes.
    for t, hbm_id, direction, bw in sorted(HBM, key=lambda h: (h[0], h[2], h[1])):
        con.execute(
            "INSERT INTO HBM VALUES (?,?,?,?,?)", (rank, _ns(t), bw, hbm_id, sid(direction))
        )
    for t, llc_id, mode, hit, tp in LLC:
        con.execute(
            "INSERT INTO LLC VALUES (?,?,?,?,?,?)", (rank, llc_id, _ns(t), hit, tp, sid(mode))
        )
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(v, k) for k, v in strings.items()])
    con.commit()
    con.close()
    a = sqlite3.connect(out / "analysis.db")
    a.execute(
        """CREATE TABLE StepTraceTime (step TEXT, computing NUMERIC,
           communication_not_overlapped NUMERIC, overlapped NUMERIC, communication NUMERIC,
           free NUMERIC, stage NUMERIC, bubble NUMERIC,
           communication_not_overlapped_and_exclude_receive NUMERIC, preparing NUMERIC)"""
    )
    a.execute("INSERT INTO StepTraceTime VALUES (?,?,?,?,?,?,?,0,0,0)", BREAKDOWN)
    a.commit()
    a.close()
    return d


def write_text(root: Path, rank: int = 0) -> Path:
    """The same run as the text export (trace_view.json, kernel_details.csv, ...)."""
    d = root / f"rank{rank}_ascend_pt"
    out = d / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    _info(d, rank, "text")
    ev: list[dict[str, Any]] = []

    def meta(kind: str, pid: int, tid: int, value: str) -> None:
        ev.append({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": value}})

    meta("process_name", HOST, 0, "Python")
    meta("process_name", PID_CANN, 0, "CANN")
    meta("process_name", PID_HW, 0, "Ascend Hardware")
    meta("process_name", PID_HCCL, 0, "HCCL")
    for pname, pid in CPID.items():
        meta("process_name", pid, 0, pname)
    meta("process_name", ascend_db.PID_OVERLAP, 0, "Overlap Analysis")
    for t, oname in enumerate(OVERLAP_NAMES):
        meta("thread_name", ascend_db.PID_OVERLAP, t, oname)
    for tid in sorted({a[2] for a in API}):
        meta("thread_name", HOST, tid, f"Thread {tid}")
    for tid in sorted({c[2] for c in CANN}):
        meta("thread_name", PID_CANN, tid, f"Thread {tid}")
    streams = {c[4] for c in COMPUTE} | {t[2] for t in OTHER_TASKS} | {t[10] for t in COMM_TASKS}
    for s in sorted(streams):
        meta("thread_name", PID_HW, s, f"Stream {s}")
    meta("thread_name", PID_HCCL, 0, "Group 0 Communication")
    for t in COMM_TASKS:
        meta("thread_name", PID_HCCL, t[2] + 1, f"Plane {t[2]}")
    api_at: dict[int, tuple[int, int]] = {}  # connection -> (tid, start) of its host row
    for name, typ, tid, s, e, seq, fwd, shapes, dts, stack, conns in API:
        cat = {"op": "cpu_op", "trace": "python_function"}.get(typ, name.split("@")[0].lower())
        args: dict[str, Any] = {}
        if typ == "op":
            args = {"Sequence number": seq, "Fwd thread id": fwd}
            if shapes is not None:
                args["Input Dims"] = shapes
                args["Input type"] = dts
        if stack:
            args["Call stack"] = ";\r\n".join(stack)
        if typ == "queue":
            args["correlation_id"] = conns[0]
        ev.append(
            {"ph": "X", "name": name, "pid": HOST, "tid": tid, "ts": _ts(s), "dur": (e - s),
             "cat": cat, "args": args}
        )  # fmt: skip
        for c in conns:
            api_at.setdefault(c, (tid, s))
            if CATS[c] == "async_task_queue":
                ph = "s" if name == "Enqueue" else "f"
                ev.append(_flow(ph, "async_task_queue", c, HOST, tid, s))
            if CATS[c] == "fwdbwd":
                ph = "s" if api_at[c] == (tid, s) else "f"
                ev.append(_flow(ph, "fwdbwd", c, HOST, tid, s))
    for level, name, tid, s, e, conn in CANN:
        ev.append(
            {"ph": "X", "name": f"{CANN_PREFIX[level]}@{name}", "pid": PID_CANN, "tid": tid,
             "ts": _ts(s), "dur": e - s, "args": {"connection_id": conn}}
        )  # fmt: skip
    cann_at = {c[5]: (c[2], c[3]) for c in CANN}
    targets: list[tuple[int, int, int, int]] = []  # (conn, pid, tid, start)
    for _gid, name, _ot, core, stream, s, e, conn, *_ in COMPUTE:
        ev.append(
            {"ph": "X", "name": name, "pid": PID_HW, "tid": stream, "ts": _ts(s), "dur": e - s,
             "args": {"Task Type": core, "connection_id": conn}}
        )  # fmt: skip
        targets.append((conn, PID_HW, stream, s))
    for _gid, ttype, stream, s, e, conn in OTHER_TASKS:
        ev.append(
            {"ph": "X", "name": ttype, "pid": PID_HW, "tid": stream, "ts": _ts(s), "dur": e - s,
             "args": {"Task Type": ttype, "connection_id": conn}}
        )  # fmt: skip
        targets.append((conn, PID_HW, stream, s))
    name, _ot, s, e, conn, dt, alg, count = COMM_OP
    ev.append(
        {"ph": "X", "name": name, "pid": PID_HCCL, "tid": 0, "ts": _ts(s), "dur": e - s,
         "args": {"connection_id": conn, "data_type": dt, "alg_type": alg, "count": count}}
    )  # fmt: skip
    targets.append((conn, PID_HCCL, 0, s))
    for _gid, ttype, _plane, s, e, *_, stream in COMM_TASKS:
        # Collective tasks are on the hardware view too, as the export writes them.
        ev.append(
            {"ph": "X", "name": ttype, "pid": PID_HW, "tid": stream, "ts": _ts(s), "dur": e - s,
             "args": {"Task Type": ttype, "connection_id": conn}}
        )  # fmt: skip
    for _gid, ttype, plane, s, e, src, dst, transport, size, link, stream in COMM_TASKS:
        dur_ns = (e - s) * US
        ev.append(
            {"ph": "X", "name": ttype, "pid": PID_HCCL, "tid": plane + 1, "ts": _ts(s),
             "dur": e - s, "args": {"stream id": stream, "src rank": src, "dst rank": dst,
                                    "transport type": transport, "size(Byte)": size,
                                    "link type": link, "bandwidth(GB/s)": size / dur_ns}}
        )  # fmt: skip
    for conn, pid, tid, s in targets:
        if conn in api_at and CATS.get(conn) == "async_npu":
            fid = _ns(s)
            ev.append(_flow("s", "async_npu", fid, HOST, *api_at[conn]))
            ev.append(_flow("f", "async_npu", fid, pid, tid, s))
        if conn in cann_at:
            ev.append(_flow("s", "HostToDevice", conn, PID_CANN, *cann_at[conn]))
            ev.append(_flow("f", "HostToDevice", conn, pid, tid, s))

    def counter(pname: str, name: str, us: int, args: dict[str, float]) -> None:
        ev.append({"ph": "C", "name": name, "pid": CPID[pname], "tid": 0, "ts": _ts(us),
                   "args": args})  # fmt: skip

    for t, mhz in FREQ:
        counter("AI Core Freq", "AI Core Freq", t, {"MHz": mhz})
    for typ, t, ddr, hbm in NPU_MEM:
        owner = {"app": "APP", "device": "Device"}[typ]
        for label, v in (("DDR", ddr), ("HBM", hbm), ("Memory", ddr + hbm)):
            counter("NPU MEM", f"{owner}/{label}", t, {"KB": v / 1024})
    for t, *levels in ACC:
        for label, v in zip(
            ("read_bandwidth", "write_band_width", "read_ost", "write_ost"), levels, strict=True
        ):
            counter("Acc PMU", label, t, {"value": v})
    for t, mata, l2 in SOC:
        counter("Stars Soc Info", "Mata Bw Level", t, {"Mata Bw Level": mata})
        counter("Stars Soc Info", "L2 Buffer Bw Level", t, {"L2 Buffer Bw Level": l2})
    for t, hbm_id, direction, bw in HBM:
        rw = direction.title()
        counter("HBM", f"HBM {hbm_id}/{rw}", t, {f"{rw}(MB/s)": bw / MIB})
    for t, llc_id, mode, hit, tp in LLC:
        m = mode.title()
        counter("LLC", f"LLC {llc_id} {m}/Throughput", t, {"Throughput(MB/s)": tp / MIB})
        counter("LLC", f"LLC {llc_id} {m}/Hit Rate", t, {"Hit Rate(%)": hit / 100})
    for typ, s, e in OVERLAP:
        ev.append(
            {"ph": "X", "name": OVERLAP_NAMES[typ], "pid": ascend_db.PID_OVERLAP, "tid": typ,
             "ts": _ts(s), "dur": e - s}
        )  # fmt: skip
    (out / "trace_view.json").write_text(json.dumps(ev))

    cols = ["Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State"]
    cols += ["Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim"]
    cols += ["Mix Block Dim", "HF32 Eligible", "Input Shapes", "Input Data Types"]
    cols += ["Input Formats", "Output Shapes", "Output Data Types", "Output Formats"]
    cols += ["Context ID", "aicore_time(us)", "aic_mac_ratio"]
    rows = []
    task_id = 100
    for gid, name, op_type, core, stream, s, e, _conn, block, wait, shapes in COMPUTE:
        task_id += 1
        pmu = {_pmu_col(k): str(v) for k, v in PMU.get(gid, {}).items()}
        rows.append(
            [str(STEP[0]), "N/A", str(task_id), str(stream), name, op_type, "N/A", core,
             _ts(s) + "\t", str(float(e - s)), str(wait / US), str(block), "0", "N/A",
             shapes, "FLOAT;FLOAT", "ND;ND", '"2,4"', "FLOAT", "ND", "N/A",
             pmu.get("aicore_time(us)", "N/A"), pmu.get("aic_mac_ratio", "N/A")]
        )  # fmt: skip
    name, op_type, s, e, *_ = COMM_OP
    rows.append(
        [str(STEP[0]), "N/A", "N/A", "N/A", name, op_type, "N/A", "HCCL", _ts(s) + "\t",
         str(float(e - s)), str(5_000 / US), "0"] + ["N/A"] * 11
    )  # fmt: skip
    _csv(out / "kernel_details.csv", cols, rows)
    step_cols = ["Step", "Computing", "Communication(Not Overlapped)", "Overlapped"]
    step_cols += ["Communication", "Free", "Stage"]
    _csv(out / "step_trace_time.csv", step_cols, [[str(v) for v in BREAKDOWN]])
    om_cols = ["Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)"]
    om_cols += ["Allocation Total Allocated(MB)", "Allocation Total Reserved(MB)"]
    om_cols += ["Release Total Allocated(MB)", "Release Total Reserved(MB)", "Device Type"]
    _csv(
        out / "operator_memory.csv",
        om_cols,
        [
            ["aten::empty", str(size / 1024), _ts(at), "" if rt is None else _ts(rt),
             str(aa / MIB), str(ar / MIB), "" if ra is None else str(ra / MIB),
             "" if rr is None else str(rr / MIB), f"NPU:{rank}"]
            for size, at, rt, aa, ar, ra, rr in OP_MEM
        ],
    )  # fmt: skip
    mr_cols = ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)"]
    mr_cols += ["Total Active(MB)", "Device Type"]
    _csv(
        out / "memory_record.csv",
        mr_cols,
        [
            [c, _ts(t), str(a / MIB), str(r / MIB), str(act / MIB), f"NPU:{rank}"]
            for c, t, a, r, act in MEM_REC
        ],
    )
    return d


def _flow(ph: str, cat: str, fid: int, pid: int, tid: int, us: int) -> dict[str, Any]:
    return {"ph": ph, "bp": "e", "name": cat, "id": fid, "pid": pid, "tid": tid, "ts": _ts(us),
            "cat": cat}  # fmt: skip


def _csv(path: Path, cols: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)


def _info(d: Path, rank: int, export: str) -> None:
    cfg = {"experimental_config": {"_profiler_level": "Level1", "_export_type": export}}
    (d / f"profiler_info_{rank}.json").write_text(json.dumps({"config": cfg, "rank_id": rank}))


# ---------------------------------------------------------------------------------------------
# Tests

TABLES = ["events", "flows", "stacks", "memory", "counters", "steps", "kernel_metrics"]
TABLES += ["devices", "threads"]


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.sort(df.columns, nulls_last=True)


def test_text_and_db_give_equal_profiles(tmp_path: Path) -> None:
    text = read_ascend(write_text(tmp_path / "text"), cache=False)
    db = read_ascend(write_db(tmp_path / "db"), cache=False)
    assert db.meta["ascend"]["export"] == "db"
    key = "skipped_overlap_analysis_slices"
    assert text.meta["ascend"][key] == db.meta["ascend"][key] == len(OVERLAP)
    for name in TABLES:
        a, b = text.table(name), db.table(name)
        # Row order is not data for these (the flow resolver's order among flows leaving one
        # event is not fixed, even between two reads of the same text export).
        if name in ("threads", "flows"):
            a, b = _sorted(a), _sorted(b)
        assert a.height > 0, name
        assert a.columns == b.columns and a.height == b.height, name
        bad = [c for c in a.columns if not a.get_column(c).equals(b.get_column(c))]
        assert not bad, f"{name}: columns {bad} differ"


def test_db_run_as_the_model_says(tmp_path: Path) -> None:
    p = read_ascend(write_db(tmp_path), cache=False)
    e = p.events
    kernels = e.filter(pl.col("kind") == "kernel").sort("ts_ns")
    assert kernels.get_column("name").to_list() == [c[1] for c in COMPUTE]
    assert kernels.get_column("ts_ns").to_list() == [_ns(c[5]) for c in COMPUTE]
    assert kernels.get_column("dur_ns").to_list() == [(c[6] - c[5]) * US for c in COMPUTE]
    # Every kernel reaches its host op through the async_npu flow.
    ops = dict(zip(e.get_column("id").to_list(), e.get_column("name").to_list(), strict=True))
    assert [ops[i] for i in kernels.get_column("op_id").to_list()] == ["aten::mm", "aten::add"]
    comm = e.filter(pl.col("kind") == "communication")
    assert comm.get_column("name").to_list() == [COMM_OP[0]]
    assert comm.get_column("bytes").to_list() == [COMM_OP[7] * 4]  # count x FP32
    assert ops[comm.get_column("op_id")[0]] == "c10d::allreduce_"
    bwd = e.filter(pl.col("name") == "MmBackward0")
    assert ops[bwd.get_column("fwd_id")[0]] == "aten::mm"
    mm = e.filter(pl.col("name") == "aten::mm")
    assert mm.get_column("input_dims")[0] == "[[2,3],[3,4]]"
    frames = p.stacks.filter(pl.col("stack_id") == mm.get_column("stack_id")[0]).sort("depth")
    assert frames.get_column("function").to_list() == ["fwd", "forward"]
    st = p.steps.row(0, named=True)
    assert st["step"] == STEP[0] and st["ts_ns"] == _ns(0) and st["dur_ns"] == 1000 * US
    assert st["computing_ns"] == round(BREAKDOWN[1] * US)
    assert st["free_ns"] == round(BREAKDOWN[5] * US)
    m = p.memory
    assert m.filter(pl.col("bytes") > 0).get_column("bytes").sum() == sum(r[0] for r in OP_MEM)
    assert m.filter(pl.col("bytes") < 0).get_column("bytes").sum() == -sum(
        r[0] for r in OP_MEM if r[2] is not None
    )
    cn = p.counters
    assert cn.filter(pl.col("name") == "NPU MEM/Device/HBM").get_column("value").to_list() == [
        5 * MIB / 1024
    ]
    assert cn.filter(pl.col("name") == "AI Core Freq").get_column("value").to_list() == [
        float(f) for _, f in FREQ
    ]
    names = {_pmu_col(k) for v in PMU.values() for k in v}
    km = p.kernel_metrics.filter(pl.col("metric").is_in(list(names)))
    by_name = dict(zip(kernels.get_column("id"), kernels.get_column("name"), strict=True))
    got = {(by_name[r["event_id"]], r["metric"], r["value"]) for r in km.iter_rows(named=True)}
    want = {(c[1], _pmu_col(k), v) for c in COMPUTE for k, v in PMU.get(c[0], {}).items()}
    assert got == want


def test_loading_a_folder_of_db_ranks(tmp_path: Path) -> None:
    write_db(tmp_path, 0)
    write_db(tmp_path, 1)
    p = load(tmp_path, cache=False)
    assert sorted(p.meta["ranks"]) == [0, 1]
    assert p.events.filter(pl.col("kind") == "kernel").height == 2 * len(COMPUTE)


def test_bad_database_is_a_typed_error(tmp_path: Path) -> None:
    out = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "ascend_pytorch_profiler_0.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match=r"ascend_pytorch_profiler_0\.db"):
        read_ascend(out.parent, cache=False)


def test_dtypes_and_shapes_in_their_own_columns(tmp_path: Path) -> None:
    """An exporter that writes shapes under inputShapes (not swapped) is read the same."""
    d = write_db(tmp_path)
    db = d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.execute(
        "UPDATE PYTORCH_API SET inputShapes = inputDtypes, inputDtypes = inputShapes"
    )  # SQLite evaluates the right-hand sides before assigning: a swap
    con.commit()
    con.close()
    e = read_ascend(d, cache=False).events.filter(pl.col("name") == "aten::mm")
    assert e.get_column("input_dims")[0] == "[[2,3],[3,4]]"
    assert e.get_column("input_types")[0] == '["float","float"]'


# ---------------------------------------------------------------------------------------------
# The real AlexNet pairs (msinsight test data): db and text are separate runs of the same
# program (start times differ), so only what the program fixes must agree.

ASCEND_DATA = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data"))


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
@pytest.mark.parametrize("rank", [0, 1])
def test_real_db_and_text_agree_on_the_program(level: str, rank: int) -> None:
    db_dir = ASCEND_DATA / "db" / level / f"rank{rank}_ascend_pt"
    text_dir = ASCEND_DATA / "text" / level / f"rank{rank}_ascend_pt"
    if not db_dir.is_dir() or not text_dir.is_dir():
        pytest.skip(f"msinsight AlexNet data not found under {ASCEND_DATA}")
    db, text = read_ascend(db_dir, cache=False), read_ascend(text_dir, cache=False)
    for kind in ("cpu_op", "python_function", "step", "kernel", "memcpy", "communication"):
        n = [p.events.filter(pl.col("kind") == kind).height for p in (db, text)]
        assert n[0] == n[1], (kind, n)
    for name in ("stacks", "memory", "steps", "devices"):
        assert db.table(name).height == text.table(name).height, name
    k = [
        p.events.filter(pl.col("kind") == "kernel").group_by("op_type").len().sort("op_type")
        for p in (db, text)
    ]
    assert k[0].equals(k[1])
    # Every device kernel has its step, and (nearly) every one its host op.
    dev = db.events.filter(pl.col("kind").is_in(["kernel", "communication"]))
    assert dev.get_column("step").null_count() == 0
    assert dev.get_column("op_id").null_count() <= 3
    assert schema.EVENTS.keys() == dict(db.events.schema).keys()


def test_database_export_is_cached(
    tmp_path: Path, user_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opscope.ingest import ascend
    from opscope.ingest import cache as cache_mod

    monkeypatch.setattr(ascend, "CACHE_MIN_BYTES", 0)
    d = write_db(tmp_path)
    first = read_ascend(d)
    anchor = ascend.cache_anchor(d)
    assert anchor is not None and anchor.suffix == ".db"
    hit = cache_mod.lookup(anchor, salvage=False)
    assert hit is not None
    for name in TABLES:
        assert hit.table(name).equals(first.table(name)), name


def test_wait_time_without_a_wait_column(tmp_path: Path) -> None:
    """Older databases have no waitNs: the wait is the gap to the previous kernel's end."""
    d = write_db(tmp_path)
    con = sqlite3.connect(d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    con.execute("ALTER TABLE COMPUTE_TASK_INFO DROP COLUMN waitNs")
    con.execute("ALTER TABLE COMMUNICATION_OP DROP COLUMN waitNs")
    con.commit()
    con.close()
    p = read_ascend(d, cache=False)
    spans = sorted([(c[5], c[6], c[1]) for c in COMPUTE] + [(COMM_OP[2], COMM_OP[3], COMM_OP[0])])
    want = {}
    for i, (s, _e, name) in enumerate(spans):
        want[name] = 0.0 if i == 0 else float(max(0, s - spans[i - 1][1]))
    ids = p.events.filter(pl.col("kind").is_in(["kernel", "communication"]))
    names = dict(zip(ids.get_column("id"), ids.get_column("name"), strict=True))
    w = p.kernel_metrics.filter(pl.col("metric") == "Wait Time(us)")
    assert {names[r["event_id"]]: r["value"] for r in w.iter_rows(named=True)} == want


def test_hbm_and_llc_counters_in_the_text_units(tmp_path: Path) -> None:
    """HBM bandwidth and LLC throughput: bytes/s in the database, MB/s (2^20 bytes) in the
    Profile as in the text; the LLC hit rate: percent in the database, a fraction as the
    text's "Hit Rate(%)" series holds it. Values by hand."""
    c = read_ascend(write_db(tmp_path), cache=False).counters

    def values(name: str) -> list[float]:
        return c.filter(pl.col("name") == name).get_column("value").to_list()

    assert values("HBM/HBM 0/Read") == [50.0]  # 52 428 800 B/s = 50 x 2^20
    assert values("HBM/HBM 0/Write") == [0.95367431640625]  # 10^6 / 2^20
    assert values("HBM/HBM 1/Read") == [0.0]
    assert values("HBM/HBM 1/Write") == [7.0]
    assert values("LLC/LLC 0 Read/Throughput") == [20.0]
    assert values("LLC/LLC 1 Read/Throughput") == [1.0 + 2.0**-20]
    assert values("LLC/LLC 0 Read/Hit Rate") == [0.875]
    assert values("LLC/LLC 1 Read/Hit Rate") == [0.345]
    hbm = c.filter(pl.col("name").str.starts_with("HBM/"))
    assert hbm.get_column("ts_ns").unique().to_list() == [_ns(150)]
    # Per sample each HBM's Read then Write, as the text export writes them.
    assert hbm.get_column("name").to_list() == [
        "HBM/HBM 0/Read",
        "HBM/HBM 0/Write",
        "HBM/HBM 1/Read",
        "HBM/HBM 1/Write",
    ]


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
@pytest.mark.parametrize("rank", [0, 1])
def test_real_hbm_and_llc_counters(level: str, rank: int) -> None:
    """The AlexNet pairs are separate runs, so values differ; what must agree: the same HBM and
    LLC series in db and text, hit rates as fractions in both, and every db LLC throughput a
    3-decimal MB/s value (the profiler's own rounding) once divided by 2^20, as the text's
    are: dividing by 10^6 fits none of them."""
    db_dir = ASCEND_DATA / "db" / level / f"rank{rank}_ascend_pt"
    text_dir = ASCEND_DATA / "text" / level / f"rank{rank}_ascend_pt"
    if not db_dir.is_dir() or not text_dir.is_dir():
        pytest.skip(f"msinsight AlexNet data not found under {ASCEND_DATA}")
    db, text = read_ascend(db_dir, cache=False), read_ascend(text_dir, cache=False)
    hw = pl.col("name").str.starts_with("HBM/") | pl.col("name").str.starts_with("LLC/")
    series = [sorted(set(p.counters.filter(hw).get_column("name").to_list())) for p in (db, text)]
    assert series[0] == series[1]
    assert len(series[0]) == 12  # HBM 0-3 Read/Write, LLC 0-1 Read Throughput/Hit Rate
    for p in (db, text):
        hit = p.counters.filter(pl.col("name").str.ends_with("/Hit Rate")).get_column("value")
        assert hit.len() > 0 and hit.min() >= 0.0 and hit.max() <= 1.0  # type: ignore[operator]
    tp = db.counters.filter(
        pl.col("name").str.ends_with("/Throughput") & (pl.col("value") > 0)
    ).get_column("value")
    assert tp.len() > 0
    for v in tp.to_list():
        assert 0.0 <= round(v, 3) - v < 2.0**-20, v
