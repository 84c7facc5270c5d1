"""Reader for the Ascend PyTorch profiler's database export (``export_type="db"``).

Layout read::

    rank0_ascend_pt/
      profiler_info_0.json                 rank id, profiler config
      ASCEND_PROFILER_OUTPUT/
        ascend_pytorch_profiler_0.db       host ops, CANN calls, device tasks, HCCL, memory
        analysis.db                        step breakdown (StepTraceTime), communication analysis

The database holds what the text export spreads over ``trace_view.json``,
``kernel_details.csv``, ``step_trace_time.csv``, ``operator_memory.csv`` and
``memory_record.csv``. This reader rebuilds those inputs as the frames the text reader parses
(:mod:`opscope.ingest.ascend`) and hands them to the same assembly and linking code, so one run
exported both ways gives the same Profile. Tables used (names interned in ``STRING_IDS``):

- ``PYTORCH_API``: host ops (type ``op``), Python frames (``trace``), enqueue/dequeue
  (``queue``); ``PYTORCH_CALLCHAINS`` their call stacks; ``CONNECTION_IDS`` + ``connectionCats``
  their flows (``async_npu``, ``fwdbwd``, ``async_task_queue``).
- ``CANN_API``: runtime calls (``AscendCL@``, ``Node@``, ``Hccl@`` like the text export).
- ``TASK`` + ``COMPUTE_TASK_INFO`` (+ ``TASK_PMU_INFO``): device tasks, the kernel table and its
  PMU metrics; ``COMMUNICATION_OP`` + ``COMMUNICATION_TASK_INFO``: collectives and their
  per-plane tasks (``ENUM_HCCL_*`` for data, link and transport types).
- ``STEP_TIME``, ``analysis.db:StepTraceTime``: steps; ``OP_MEMORY``, ``MEMORY_RECORD``: memory.
- ``RANK_DEVICE_MAP``, ``NPU_INFO``: rank and device.

- ``AICORE_FREQ``, ``NPU_MEM``, ``ACC_PMU``, ``SOC_BANDWIDTH_LEVEL``, ``HBM``, ``LLC``: the
  sampled counters, in the text export's units (:func:`_counter_rows`).
- ``OVERLAP_ANALYSIS``: the Overlap Analysis tracks, rebuilt from the tasks when absent
  (:mod:`opscope.ingest.ascend_overlap`).

Timestamps are integer ns in the database and stay exact. Not read: QoS (not in the database).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError
from opscope.ingest import ascend as A
from opscope.ingest import ascend_overlap as OV
from opscope.ingest.registry import Progress
from opscope.model import Profile

#: Pseudo process ids of the device-side tracks (the text export uses large synthetic pids too).
PID_CANN = 1 << 40
PID_HW = PID_CANN + 1
PID_HCCL = PID_CANN + 2
#: Pseudo pids of the sampled-counter processes, by the text export's process names.
COUNTER_PIDS = {
    "AI Core Freq": PID_CANN + 3,
    "NPU MEM": PID_CANN + 4,
    "Acc PMU": PID_CANN + 5,
    "Stars Soc Info": PID_CANN + 6,
    "HBM": PID_CANN + 7,
    "LLC": PID_CANN + 8,
}
#: Pseudo pid of the "Overlap Analysis" process (tid = slice type, as the text export writes it).
PID_OVERLAP = PID_CANN + 9
#: Bytes per MB in the text export's MB/s: 2^20. The database stores bandwidth in bytes/s
#: (msprof's description of its db format, "Units ... Bandwidth: Byte/s": hiascend.com, CANN
#: docs, devaids/Profiling/atlasprofiling_16_1144), the text export in MB/s. The MB is 2^20:
#: msprof's HBM model scales by KILOBYTE(1024.0) twice (analysis/msmodel/hardware/hbm_model.py),
#: and each nonzero LLC throughput of the six AlexNet databases (103) is a 3-decimal MB/s value
#: times 2^20 truncated to whole bytes (10^6 fits none of them).
MB = 1024.0 * 1024.0
_CANN_LEVEL = {"acl": "AscendCL", "node": "Node", "hccl": "Hccl", "runtime": "Runtime"}
_LEVEL0_KERNEL_COLS = [
    "Step Id",
    "Name",
    "Type",
    "Accelerator Core",
    "Start Time(us)",
    "Duration(us)",
    "Wait Time(us)",
    "Block Dim",
]
# Columns of the text kernel table rebuilt from the database, in the text's order.
_KERNEL_COLS = [
    "Step Id",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Name",
    "Type",
    "OP State",
    "Accelerator Core",
    "Start Time(us)",
    "Duration(us)",
    "Wait Time(us)",
    "Block Dim",
    "Mix Block Dim",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
]
_INVALID = 4294967295  # the profiler's "no value" for 32-bit ids (model id, context id)


def find_db(path: Path) -> Path | None:
    """The ``ascend_pytorch_profiler*.db`` of an Ascend output folder (or its parent), if any."""
    out = A.find_output_dir(Path(path))
    if not out.is_dir():
        return None
    # An empty file is no database (sqlite would open it as one without tables).
    dbs = [f for f in sorted(out.glob("ascend_pytorch_profiler*.db")) if f.stat().st_size > 0]
    return dbs[0] if dbs else None


def is_db_dir(path: Path) -> bool:
    """True when ``path`` is an Ascend output holding the database export."""
    return Path(path).is_dir() and find_db(Path(path)) is not None


def read_ascend_db(
    path: Path,
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
) -> Profile:
    """Read one Ascend rank exported as a database into a linked
    :class:`~opscope.model.Profile` with the same tables as the text export of the same run.

    Raises :class:`~opscope.errors.InputError` naming the file when it is not a readable
    profiler database.
    """
    del salvage, cache  # a database is never truncated mid-event; it opens fast without a cache
    path = Path(path)
    db = find_db(path)
    if db is None:
        raise InputError("no ascend_pytorch_profiler*.db in the output folder", path)
    out = A.find_output_dir(path)
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"cannot open the database ({e})", db) from None
    try:
        return _parse(path, out, db, con, progress)
    except sqlite3.DatabaseError as e:
        raise InputError(f"not a readable profiler database ({e})", db) from None
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# SQL helpers


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _col(con: sqlite3.Connection, table: str, column: str, expr: str) -> str:
    """``expr`` when ``table`` has ``column`` (columns differ across exporter versions), else
    NULL."""
    cols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
    return expr if column in cols else "NULL"


def _frame(
    con: sqlite3.Connection, sql: str, schema: dict[str, Any], params: tuple[Any, ...] = ()
) -> pl.DataFrame:
    rows = con.execute(sql, params).fetchall()
    return pl.DataFrame(rows, schema=schema, orient="row")


def _us_text(ns: pl.Expr) -> pl.Expr:
    """Integer ns -> the text export's microseconds ("1736408883704643.212"), exactly."""
    return (
        (ns // 1000).cast(pl.String)
        + pl.lit(".")
        + (ns % 1000).cast(pl.String).str.pad_start(3, "0")
    )


def _us_float(ns: pl.Expr) -> pl.Expr:
    return ns.cast(pl.Float64) / 1000.0


# ---------------------------------------------------------------------------------------------
# Parse


def _parse(
    path: Path, out: Path, db: Path, con: sqlite3.Connection, progress: Progress | None
) -> Profile:
    have = _tables(con)
    odd: Counter[str] = Counter()
    meta_extra: dict[str, Any] = {}
    rank = A.rank_of(out)
    dev_map = (
        con.execute("SELECT rankId, deviceId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
        if "RANK_DEVICE_MAP" in have
        else None
    )
    if rank is None and dev_map is not None and dev_map[0] is not None and dev_map[0] >= 0:
        rank = int(dev_map[0])
    rank_id = 0 if rank is None else rank
    device = int(dev_map[1]) if dev_map is not None and dev_map[1] is not None else rank_id
    info = A._profiler_info(out)
    level = A._level(info)
    read = [db.name]

    trace = _trace_frame(con, have)
    if progress is not None:
        progress("ascend", 1, 3)
    kernels = _kernel_frame(con, have, level)

    events, raw_flows, counters, threads = A._assemble(trace, kernels, device, odd, meta_extra)
    events = events.with_columns(pl.lit(rank_id, pl.Int32).alias("rank"))
    km = A._kernel_metrics(events, kernels)
    raw_flows = raw_flows.with_columns(pl.lit(rank_id, pl.Int32).alias("rank"))
    events, flows, stacks = A._link(events, raw_flows, odd)
    analysis = out / "analysis.db"
    step_table = _step_table(analysis)
    if step_table is not None:
        read.append(analysis.name)
    steps = A._steps_from_frame(step_table, events)
    om, mr = _memory_frames(con, have, device)
    memory, mem_counters = A._memory_from_frames(om, mr)
    memory = A._memory_links(memory, events)
    counters = pl.concat([counters, mem_counters], how="vertical")
    if progress is not None:
        progress("ascend", 2, 3)
    npu = (
        con.execute("SELECT name FROM NPU_INFO LIMIT 1").fetchone() if "NPU_INFO" in have else None
    )
    ascend_meta = {
        "files": read,
        "level": level,
        "export": "db",
        "npu": npu[0] if npu else None,
        "has_trace_view": True,
    }
    return A.rank_profile(
        path, rank_id, device, info, odd, ascend_meta, meta_extra,
        events, flows, stacks, memory, counters, steps, km, threads, progress,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The trace (what trace_view.json holds)


_ARG_NAMES = list(A._TRACE_SCHEMA["args"].to_schema())


def _pack(df: pl.DataFrame) -> pl.DataFrame:
    """Flat columns -> the text trace's frame (top-level fields + an ``args`` struct)."""
    args_schema = A._TRACE_SCHEMA["args"].to_schema()
    top = {k: v for k, v in A._TRACE_SCHEMA.items() if k != "args"}
    cols = [
        (pl.col(k) if k in df.columns else pl.lit(None)).cast(v).alias(k) for k, v in top.items()
    ]
    fields = [
        (pl.col(f"a:{k}") if f"a:{k}" in df.columns else pl.lit(None)).cast(v).alias(k)
        for k, v in args_schema.items()
    ]
    return df.select(*cols, pl.struct(fields).alias("args"))


def _trace_frame(con: sqlite3.Connection, have: set[str]) -> pl.DataFrame:
    i64, st = pl.Int64, pl.String
    parts: list[pl.DataFrame] = []
    flows: list[pl.DataFrame] = []
    host_pid: int | None = None
    if "PYTORCH_API" in have:
        api = _frame(
            con,
            """SELECT CAST(p.startNs AS INTEGER), CAST(p.endNs AS INTEGER), p.globalTid,
                      n.value, e.name, p.sequenceNumber, p.fwdThreadId, a.value, b.value,
                      p.callchainId, p.connectionId
               FROM PYTORCH_API p LEFT JOIN STRING_IDS n ON n.id = p.name
               LEFT JOIN ENUM_API_TYPE e ON e.id = p.type
               LEFT JOIN STRING_IDS a ON a.id = p.inputShapes
               LEFT JOIN STRING_IDS b ON b.id = p.inputDtypes""",
            {
                "s": i64,
                "e": i64,
                "gtid": i64,
                "name": st,
                "type": st,
                "seq": i64,
                "fwd": i64,
                "shapes": st,
                "dtypes": st,
                "chain": i64,
                "conn": i64,
            },
        ).with_row_index("_api")
        # Some exporter versions write the dtypes under inputShapes and the shapes under
        # inputDtypes: a column whose values hold letters is the dtypes.
        letters = r"[A-Za-z]"
        if bool(api.get_column("shapes").str.contains(letters).any()) and not bool(
            api.get_column("dtypes").str.contains(letters).any()
        ):
            api = api.rename({"shapes": "dtypes", "dtypes": "shapes"})
        api = api.with_columns(
            (pl.col("gtid") // (1 << 32)).alias("pid"),
            (pl.col("gtid") % (1 << 32)).alias("tid"),
        )
        pids = api.get_column("pid").unique()
        host_pid = int(pids[0]) if pids.len() == 1 else None
        if "PYTORCH_CALLCHAINS" in have:
            chains = (
                _frame(
                    con,
                    """SELECT c.id, c.stackDepth, s.value FROM PYTORCH_CALLCHAINS c
                       LEFT JOIN STRING_IDS s ON s.id = c.stack""",
                    {"chain": i64, "d": i64, "frame": st},
                )
                .sort("chain", "d")
                .group_by("chain", maintain_order=True)
                .agg(pl.col("frame").str.join(";\r\n").alias("stack"))
            )
            api = api.join(chains, on="chain", how="left")
        else:
            api = api.with_columns(pl.lit(None, st).alias("stack"))
        # Connection ids of each api row and their categories.
        conns = _connections(con, have, api)
        queue_corr = (
            conns.filter(pl.col("cat") == "async_task_queue")
            .group_by("conn")
            .agg(pl.col("cid").first().alias("corr"))
        )
        api = api.join(queue_corr, on="conn", how="left")
        is_queue = pl.col("type") == "queue"
        cat = (
            pl.when(pl.col("type") == "op")
            .then(pl.lit("cpu_op"))
            .when(pl.col("type") == "trace")
            .then(pl.lit("python_function"))
            .when(is_queue)
            .then(pl.col("name").str.extract(r"^(\w+)").str.to_lowercase())
            .when(pl.col("type") == "mstx")
            .then(pl.lit("user_annotation"))
            .otherwise(pl.col("type"))
        )
        is_op = pl.col("type") == "op"
        parts.append(
            api.select(
                pl.lit("X").alias("ph"),
                "name",
                cat.alias("cat"),
                pl.col("pid").cast(st),
                pl.col("tid").cast(st),
                _us_text(pl.col("s")).alias("ts"),
                _us_float(pl.col("e") - pl.col("s")).alias("dur"),
                pl.when(is_op).then(pl.col("seq")).alias("a:Sequence number"),
                pl.when(is_op).then(pl.col("fwd")).alias("a:Fwd thread id"),
                pl.when(is_op).then(pl.col("shapes")).alias("a:Input Dims"),
                pl.when(is_op).then(pl.col("dtypes")).alias("a:Input type"),
                pl.col("stack").alias("a:Call stack"),
                pl.when(is_queue).then(pl.col("corr")).alias("a:correlation_id"),
            )
        )
        # Flows that start or end on host rows.
        ends = api.select("_api", "conn", "pid", "tid", "s", "type").join(
            conns, on="conn", how="inner"
        )
        fb = (
            ends.filter(pl.col("cat") == "fwdbwd")
            .sort("cid", "s")
            .with_columns(pl.int_range(pl.len()).over("cid").alias("_i"))
            .filter(pl.col("_i") < 2)
        )
        flows.append(
            fb.select(
                pl.when(pl.col("_i") == 0).then(pl.lit("s")).otherwise(pl.lit("f")).alias("ph"),
                pl.lit("fwdbwd").alias("cat"),
                pl.col("cid").cast(st).alias("id"),
                pl.col("pid").cast(st),
                pl.col("tid").cast(st),
                _us_text(pl.col("s")).alias("ts"),
            )
        )
        q = ends.filter((pl.col("cat") == "async_task_queue") & (pl.col("type") == "queue"))
        flows.append(
            q.join(api.select("_api", "name"), on="_api").select(
                pl.when(pl.col("name").str.starts_with("Enqueue"))
                .then(pl.lit("s"))
                .otherwise(pl.lit("f"))
                .alias("ph"),
                pl.lit("async_task_queue").alias("cat"),
                pl.col("cid").cast(st).alias("id"),
                pl.col("pid").cast(st),
                pl.col("tid").cast(st),
                _us_text(pl.col("s")).alias("ts"),
            )
        )
        async_src = ends.filter(pl.col("cat") == "async_npu").select(
            "cid", "pid", "tid", pl.col("s").alias("_hs")
        )
    else:
        async_src = pl.DataFrame(schema={"cid": i64, "pid": i64, "tid": i64, "_hs": i64})

    if "CANN_API" in have:
        cann = _frame(
            con,
            """SELECT c.startNs, c.endNs, c.globalTid, c.connectionId, n.value, e.name
               FROM CANN_API c LEFT JOIN STRING_IDS n ON n.id = c.name
               LEFT JOIN ENUM_API_TYPE e ON e.id = c.type""",
            {"s": i64, "e": i64, "gtid": i64, "conn": i64, "name": st, "level": st},
        ).with_columns((pl.col("gtid") % (1 << 32)).alias("tid"))
        prefix = pl.col("level").replace_strict(_CANN_LEVEL, default=pl.col("level"))
        parts.append(
            cann.select(
                pl.lit("X").alias("ph"),
                (prefix + pl.lit("@") + pl.col("name")).alias("name"),
                pl.lit(str(PID_CANN)).alias("pid"),
                pl.col("tid").cast(st),
                _us_text(pl.col("s")).alias("ts"),
                _us_float(pl.col("e") - pl.col("s")).alias("dur"),
                pl.col("conn").alias("a:connection_id"),
            )
        )
        cann_src = cann.select(pl.col("conn").alias("cid"), "tid", pl.col("s").alias("_cs"))
    else:
        cann_src = pl.DataFrame(schema={"cid": i64, "tid": i64, "_cs": i64})

    dev_ends: list[pl.DataFrame] = []  # (cid, pid, tid, ts) of device flow targets
    if "TASK" in have:
        comm_tasks = "COMMUNICATION_TASK_INFO" in have
        task = _frame(
            con,
            f"""SELECT t.startNs, t.endNs, t.streamId, t.connectionId, t.globalTaskId,
                      tt.value, cn.value, ct.value, {"ci.globalTaskId" if comm_tasks else "NULL"}
               FROM TASK t LEFT JOIN STRING_IDS tt ON tt.id = t.taskType
               LEFT JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId
               LEFT JOIN STRING_IDS cn ON cn.id = c.name
               LEFT JOIN STRING_IDS ct ON ct.id = c.taskType
               {
                "LEFT JOIN COMMUNICATION_TASK_INFO ci ON ci.globalTaskId = t.globalTaskId"
                if comm_tasks
                else ""
            }""",
            {
                "s": i64,
                "e": i64,
                "stream": i64,
                "conn": i64,
                "gid": i64,
                "ttype": st,
                "cname": st,
                "ctype": st,
                "comm": i64,
            },
        )
        parts.append(
            task.select(
                pl.lit("X").alias("ph"),
                pl.coalesce("cname", "ttype").alias("name"),
                pl.lit(str(PID_HW)).alias("pid"),
                pl.col("stream").cast(st).alias("tid"),
                _us_text(pl.col("s")).alias("ts"),
                _us_float(pl.col("e") - pl.col("s")).alias("dur"),
                pl.col("conn").alias("a:connection_id"),
                pl.coalesce("ctype", "ttype").alias("a:Task Type"),
            )
        )
        dev_ends.append(
            task.filter(pl.col("comm").is_null()).select(
                pl.col("conn").alias("cid"),
                pl.lit(PID_HW, i64).alias("pid"),
                pl.col("stream").alias("tid"),
                pl.col("s").alias("_ds"),
            )
        )
    if "COMMUNICATION_OP" in have:
        ops = _frame(
            con,
            """SELECT o.startNs, o.endNs, o.connectionId, n.value, o.groupName, d.name, a.value,
                      CAST(o.count AS INTEGER)
               FROM COMMUNICATION_OP o LEFT JOIN STRING_IDS n ON n.id = o.opName
               LEFT JOIN ENUM_HCCL_DATA_TYPE d ON d.id = o.dataType
               LEFT JOIN STRING_IDS a ON a.id = o.algType""",
            {
                "s": i64,
                "e": i64,
                "conn": i64,
                "name": st,
                "group": i64,
                "dtype": st,
                "alg": st,
                "count": i64,
            },
        )
        # One "Group N Communication" track per group (tid 0, 1000, 2000...), planes below it.
        groups = ops.get_column("group").unique(maintain_order=True).to_list()
        gtid = {g: i * 1000 for i, g in enumerate(groups)}
        ops = ops.with_columns(
            pl.col("group").replace_strict(gtid, default=0, return_dtype=i64).alias("tid")
        )
        parts.append(
            ops.select(
                pl.lit("X").alias("ph"),
                "name",
                pl.lit(str(PID_HCCL)).alias("pid"),
                pl.col("tid").cast(st),
                _us_text(pl.col("s")).alias("ts"),
                _us_float(pl.col("e") - pl.col("s")).alias("dur"),
                pl.col("conn").alias("a:connection_id"),
                pl.col("dtype").alias("a:data_type"),
                pl.col("alg").alias("a:alg_type"),
                pl.col("count").alias("a:count"),
            )
        )
        dev_ends.append(
            ops.select(
                pl.col("conn").alias("cid"),
                pl.lit(PID_HCCL, i64).alias("pid"),
                "tid",
                pl.col("s").alias("_ds"),
            )
        )
        if "COMMUNICATION_TASK_INFO" in have and "TASK" in have:
            planes = _frame(
                con,
                """SELECT t.startNs, t.endNs, t.streamId, ci.planeId, ci.groupName, tt.value,
                          ci.srcRank, ci.dstRank, tr.name, ci.size, lk.name, dt.name
                   FROM COMMUNICATION_TASK_INFO ci JOIN TASK t ON t.globalTaskId = ci.globalTaskId
                   LEFT JOIN STRING_IDS tt ON tt.id = ci.taskType
                   LEFT JOIN ENUM_HCCL_TRANSPORT_TYPE tr ON tr.id = ci.transportType
                   LEFT JOIN ENUM_HCCL_LINK_TYPE lk ON lk.id = ci.linkType
                   LEFT JOIN ENUM_HCCL_DATA_TYPE dt ON dt.id = ci.dataType""",
                {
                    "s": i64,
                    "e": i64,
                    "stream": i64,
                    "plane": i64,
                    "group": i64,
                    "name": st,
                    "src": i64,
                    "dst": i64,
                    "transport": st,
                    "size": i64,
                    "link": st,
                    "dtype": st,
                },
            ).with_columns(
                (
                    pl.col("group").replace_strict(gtid, default=0, return_dtype=i64)
                    + pl.col("plane")
                    + 1
                ).alias("tid")
            )
            dur = pl.col("e") - pl.col("s")
            parts.append(
                planes.select(
                    pl.lit("X").alias("ph"),
                    "name",
                    pl.lit(str(PID_HCCL)).alias("pid"),
                    pl.col("tid").cast(st),
                    _us_text(pl.col("s")).alias("ts"),
                    _us_float(dur).alias("dur"),
                    pl.col("stream").alias("a:stream id"),
                    pl.col("src").alias("a:src rank"),
                    pl.col("dst").alias("a:dst rank"),
                    pl.col("transport").alias("a:transport type"),
                    pl.col("size").alias("a:size(Byte)"),
                    pl.col("link").alias("a:link type"),
                    pl.when(dur > 0)
                    .then(pl.col("size").cast(pl.Float64) / dur.cast(pl.Float64))
                    .otherwise(0.0)
                    .alias("a:bandwidth(GB/s)"),
                )
            )
            plane_tids = planes.select("tid", "plane").unique()
        else:
            plane_tids = pl.DataFrame(schema={"tid": i64, "plane": i64})
    else:
        gtid = {}
        plane_tids = pl.DataFrame(schema={"tid": i64, "plane": i64})

    ends = (
        pl.concat(dev_ends)
        if dev_ends
        else pl.DataFrame(schema={"cid": i64, "pid": i64, "tid": i64, "_ds": i64})
    )
    # async_npu: host op -> each device task of its connection (flow id = the task's start, as
    # in the text export); HostToDevice: CANN call -> the device task(s) of its connection.
    an = async_src.join(ends.rename({"pid": "_dp", "tid": "_dt"}), on="cid", how="inner")
    fid = pl.col("_ds").cast(st)
    flows.append(
        an.select(
            pl.lit("s").alias("ph"),
            pl.lit("async_npu").alias("cat"),
            fid.alias("id"),
            pl.col("pid").cast(st),
            pl.col("tid").cast(st),
            _us_text(pl.col("_hs")).alias("ts"),
        )
    )
    flows.append(
        an.select(
            pl.lit("f").alias("ph"),
            pl.lit("async_npu").alias("cat"),
            fid.alias("id"),
            pl.col("_dp").cast(st).alias("pid"),
            pl.col("_dt").cast(st).alias("tid"),
            _us_text(pl.col("_ds")).alias("ts"),
        )
    )
    h2d = cann_src.join(ends.rename({"pid": "_dp", "tid": "_dt"}), on="cid", how="inner")
    flows.append(
        h2d.select(
            pl.lit("s").alias("ph"),
            pl.lit("HostToDevice").alias("cat"),
            pl.col("cid").cast(st).alias("id"),
            pl.lit(str(PID_CANN)).alias("pid"),
            pl.col("tid").cast(st),
            _us_text(pl.col("_cs")).alias("ts"),
        ).unique(maintain_order=True)
    )
    flows.append(
        h2d.select(
            pl.lit("f").alias("ph"),
            pl.lit("HostToDevice").alias("cat"),
            pl.col("cid").cast(st).alias("id"),
            pl.col("_dp").cast(st).alias("pid"),
            pl.col("_dt").cast(st).alias("tid"),
            _us_text(pl.col("_ds")).alias("ts"),
        )
    )

    # Process and thread names (the text export's "M" events).
    meta_rows: list[tuple[str, str, str, str]] = []  # (name, pid, tid, value)
    if host_pid is not None:
        meta_rows.append(("process_name", str(host_pid), "0", "Python"))
    meta_rows += [
        ("process_name", str(PID_CANN), "0", "CANN"),
        ("process_name", str(PID_HW), "0", "Ascend Hardware"),
        ("process_name", str(PID_HCCL), "0", "HCCL"),
    ]
    meta_rows += [("process_name", str(pid), "0", n) for n, pid in COUNTER_PIDS.items()]
    overlap = _overlap_frame(con, have)
    if overlap.height:
        # Named as the text export names them, tid = type; the slices go through the same
        # assembly as the text's (which keeps them off the events and counts them).
        parts.append(_overlap_trace(overlap))
        meta_rows.append(("process_name", str(PID_OVERLAP), "0", "Overlap Analysis"))
        meta_rows += [("thread_name", str(PID_OVERLAP), str(t), n) for t, n in enumerate(OV.NAMES)]
    body = pl.concat([p for p in parts if p.height], how="diagonal_relaxed") if parts else None
    if body is not None:
        tracks = body.select("pid", "tid").unique().sort("pid", "tid")
        for pid, tid in tracks.iter_rows():
            p = int(pid)
            if p == PID_HW:
                meta_rows.append(("thread_name", pid, tid, f"Stream {tid}"))
            elif p in (PID_CANN, host_pid):
                meta_rows.append(("thread_name", pid, tid, f"Thread {tid}"))
    for g, t in gtid.items():
        meta_rows.append(("thread_name", str(PID_HCCL), str(t), f"Group {t // 1000} Communication"))
        del g
    for t, plane in plane_tids.sort("tid").iter_rows():
        meta_rows.append(("thread_name", str(PID_HCCL), str(t), f"Plane {plane}"))
    meta_df = pl.DataFrame(
        meta_rows, schema={"name": st, "pid": st, "tid": st, "a:name": st}, orient="row"
    ).with_columns(pl.lit("M").alias("ph"))
    counters = _counter_rows(con, have)
    frames = [meta_df, *[p for p in parts if p.height], *[f for f in flows if f.height]]
    frames += [c for c in counters if c.height]
    return _pack(pl.concat(frames, how="diagonal_relaxed"))


def _connections(con: sqlite3.Connection, have: set[str], api: pl.DataFrame) -> pl.DataFrame:
    """(conn, cid, cat): the connection ids of PYTORCH_API rows and each one's flow category.

    ``connectionCats`` names the categories when the exporter wrote it; otherwise they follow
    from what a connection joins: a queue row's is ``async_task_queue``, one that a device task
    or collective carries is ``async_npu``, one shared by two ops is ``fwdbwd``.
    """
    i64, st = pl.Int64, pl.String
    schema = {"conn": i64, "cid": i64, "cat": st}
    if "CONNECTION_IDS" not in have:
        return pl.DataFrame(schema=schema)
    if "connectionCats" in have:
        return _frame(
            con,
            """SELECT ci.id, ci.connectionId, cc.cat FROM CONNECTION_IDS ci
               JOIN connectionCats cc ON cc.connectionId = ci.connectionId""",
            schema,
        )
    ids = _frame(con, "SELECT id, connectionId FROM CONNECTION_IDS", {"conn": i64, "cid": i64})
    dev_sql = [f"SELECT connectionId FROM {t}" for t in ("TASK", "COMMUNICATION_OP") if t in have]
    dev = (
        _frame(con, " UNION ".join(dev_sql), {"cid": i64}).get_column("cid")
        if dev_sql
        else pl.Series("cid", [], i64)
    )
    rows = ids.join(api.select("conn", "type"), on="conn", how="inner")
    shared = rows.filter(pl.col("type") == "op").group_by("cid").len().filter(pl.col("len") >= 2)
    cat = (
        pl.when(pl.col("type") == "queue")
        .then(pl.lit("async_task_queue"))
        .when(pl.col("cid").is_in(dev.implode()))
        .then(pl.lit("async_npu"))
        .when(pl.col("cid").is_in(shared.get_column("cid").implode()))
        .then(pl.lit("fwdbwd"))
    )
    return rows.select("conn", "cid", cat.alias("cat")).filter(pl.col("cat").is_not_null())


def _per_row(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One frame per value of a sampled row -> the values of each row together, in order (as
    the text export writes them)."""
    return (
        pl.concat(
            [
                f.with_row_index("_r").with_columns(pl.lit(i).alias("_k"))
                for i, f in enumerate(frames)
            ],
            how="diagonal_relaxed",
        )
        .sort("_r", "_k")
        .drop("_r", "_k")
    )


def _counter(df: pl.DataFrame, track: str, name: pl.Expr, arg: str, value: pl.Expr) -> pl.DataFrame:
    """One ``C`` event per row of ``df`` (column ``t``: ns) on the counter track ``track``."""
    return df.select(
        pl.lit("C").alias("ph"),
        name.alias("name"),
        pl.lit(str(COUNTER_PIDS[track])).alias("pid"),
        pl.lit("0").alias("tid"),
        _us_text(pl.col("t")).alias("ts"),
        value.alias(f"a:{arg}"),
    )


def _counter_rows(con: sqlite3.Connection, have: set[str]) -> list[pl.DataFrame]:
    """Sampled counters as the text export's ``C`` events, in the text's units: AI Core
    frequency (MHz), NPU memory (bytes -> KB), accelerator and SoC bandwidth levels, HBM
    bandwidth and LLC throughput (bytes/s -> MB/s, :data:`MB`), LLC hit rate (percent -> the
    fraction the text's "Hit Rate(%)" series holds: msprof's timeline divides by 100,
    analysis/csrc/application/timeline/llc_assembler.cpp)."""
    i64, f64, st = pl.Int64, pl.Float64, pl.String
    out: list[pl.DataFrame] = []

    if "AICORE_FREQ" in have:
        df = _frame(
            con,
            "SELECT CAST(timestampNs AS INTEGER), freq FROM AICORE_FREQ",
            {"t": i64, "v": f64},
        )
        out.append(_counter(df, "AI Core Freq", pl.lit("AI Core Freq"), "MHz", pl.col("v")))
    if "NPU_MEM" in have:
        df = _frame(
            con,
            """SELECT s.value, CAST(m.timestampNs AS INTEGER), m.ddr, m.hbm FROM NPU_MEM m
               LEFT JOIN STRING_IDS s ON s.id = m.type""",
            {"type": st, "t": i64, "ddr": f64, "hbm": f64},
        )
        owner = pl.col("type").replace_strict(
            {"app": "APP", "device": "Device"}, default=pl.col("type")
        )
        out.append(
            _per_row(
                [
                    _counter(df, "NPU MEM", owner + pl.lit(f"/{label}"), "KB", value / 1024.0)
                    for label, value in (
                        ("DDR", pl.col("ddr")),
                        ("HBM", pl.col("hbm")),
                        ("Memory", pl.col("ddr") + pl.col("hbm")),
                    )
                ]
            )
        )
    if "ACC_PMU" in have:
        df = _frame(
            con,
            """SELECT CAST(timestampNs AS INTEGER), readBwLevel, writeBwLevel, readOstLevel,
                      writeOstLevel FROM ACC_PMU""",
            {"t": i64, "rb": f64, "wb": f64, "ro": f64, "wo": f64},
        )
        out.append(
            _per_row(
                [
                    _counter(df, "Acc PMU", pl.lit(label), "value", pl.col(col))
                    for label, col in (
                        ("read_bandwidth", "rb"),
                        ("write_band_width", "wb"),
                        ("read_ost", "ro"),
                        ("write_ost", "wo"),
                    )
                ]
            )
        )
    if "SOC_BANDWIDTH_LEVEL" in have:
        df = _frame(
            con,
            """SELECT CAST(timestampNs AS INTEGER), mataBwLevel, l2BufferBwLevel
               FROM SOC_BANDWIDTH_LEVEL""",
            {"t": i64, "mata": f64, "l2": f64},
        )
        out.append(
            _per_row(
                [
                    _counter(df, "Stars Soc Info", pl.lit(label), label, pl.col(col))
                    for label, col in (("Mata Bw Level", "mata"), ("L2 Buffer Bw Level", "l2"))
                ]
            )
        )
    if "HBM" in have:
        df = _frame(
            con,
            """SELECT CAST(h.timestampNs AS INTEGER), h.hbmId, s.value, h.bandwidth FROM HBM h
               LEFT JOIN STRING_IDS s ON s.id = h.type""",
            {"t": i64, "id": i64, "dir": st, "v": f64},
        )
        # The text writes, per sample, each HBM's Read then Write ("HBM 0/Read", "HBM 0/Write").
        d = pl.col("dir").str.to_titlecase()
        df = df.with_columns(d.alias("dir")).sort("t", "id", pl.col("dir") != "Read")
        read, write = pl.col("dir") == "Read", pl.col("dir") == "Write"
        mbs = pl.col("v") / MB
        out.append(
            df.select(
                pl.lit("C").alias("ph"),
                (pl.lit("HBM ") + pl.col("id").cast(st) + pl.lit("/") + pl.col("dir")).alias(
                    "name"
                ),
                pl.lit(str(COUNTER_PIDS["HBM"])).alias("pid"),
                pl.lit("0").alias("tid"),
                _us_text(pl.col("t")).alias("ts"),
                pl.when(read).then(mbs).alias("a:Read(MB/s)"),
                pl.when(write).then(mbs).alias("a:Write(MB/s)"),
            )
        )
    if "LLC" in have:
        df = _frame(
            con,
            # The hit rate divided here: SQLite divides exactly, Polars may multiply by 0.01.
            """SELECT CAST(l.timestampNs AS INTEGER), l.llcId, s.value, l.hitRate / 100.0,
                      l.throughput
               FROM LLC l LEFT JOIN STRING_IDS s ON s.id = l.mode""",
            {"t": i64, "id": i64, "mode": st, "hit": f64, "tp": f64},
        ).sort("t", "id", "mode")
        # Per sample and LLC: "LLC 0 Read/Throughput" then "LLC 0 Read/Hit Rate", as the text.
        track = pl.lit("LLC ") + pl.col("id").cast(st) + pl.lit(" ")
        track = track + pl.col("mode").str.to_titlecase() + pl.lit("/")
        out.append(
            _per_row(
                [
                    _counter(df, "LLC", track + pl.lit(label), arg, value)
                    for label, arg, value in (
                        ("Throughput", "Throughput(MB/s)", pl.col("tp") / MB),
                        ("Hit Rate", "Hit Rate(%)", pl.col("hit")),
                    )
                ]
            )
        )
    return out


def _overlap_frame(
    con: sqlite3.Connection, have: set[str], *, computed: bool = False
) -> pl.DataFrame:
    """The Overlap Analysis slices (:data:`opscope.ingest.ascend_overlap.SCHEMA`): the
    ``OVERLAP_ANALYSIS`` table when the export wrote it (and ``computed`` is False), else
    rebuilt from the compute tasks and the collectives (:func:`ascend_overlap.overlap`)."""
    i64 = pl.Int64
    if not computed and "OVERLAP_ANALYSIS" in have:
        df = _frame(
            con,
            """SELECT CAST(type AS INTEGER), CAST(startNs AS INTEGER), CAST(endNs AS INTEGER)
               FROM OVERLAP_ANALYSIS""",
            {"type": pl.Int32, "start_ns": i64, "end_ns": i64},
        ).filter(pl.col("type").is_between(0, len(OV.NAMES) - 1))
        if df.height:
            names = dict(enumerate(OV.NAMES))
            return df.select(
                "type",
                pl.col("type").replace_strict(names, return_dtype=pl.String).alias("name"),
                "start_ns",
                "end_ns",
            ).sort("type", "start_ns")
    compute: list[tuple[int, int]] = []
    comm: list[tuple[int, int]] = []
    if "TASK" in have and "COMPUTE_TASK_INFO" in have:
        compute = con.execute(
            """SELECT CAST(t.startNs AS INTEGER), CAST(t.endNs AS INTEGER)
               FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"""
        ).fetchall()
    if "COMMUNICATION_OP" in have:
        comm = con.execute(
            "SELECT CAST(startNs AS INTEGER), CAST(endNs AS INTEGER) FROM COMMUNICATION_OP"
        ).fetchall()
    return OV.overlap(compute, comm)


def read_overlap(path: Path, *, computed: bool = False) -> pl.DataFrame:
    """The Overlap Analysis slices of a database export (``path``: its rank folder): the
    database's own ``OVERLAP_ANALYSIS`` table when it has one, else (or with ``computed``)
    rebuilt from its tasks. Raises :class:`~opscope.errors.InputError` without a database."""
    db = find_db(Path(path))
    if db is None:
        raise InputError("no ascend_pytorch_profiler*.db in the output folder", Path(path))
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"cannot open the database ({e})", db) from None
    try:
        return _overlap_frame(con, _tables(con), computed=computed)
    except sqlite3.DatabaseError as e:
        raise InputError(f"not a readable profiler database ({e})", db) from None
    finally:
        con.close()


def _overlap_trace(ov: pl.DataFrame) -> pl.DataFrame:
    """Overlap slices as the text trace's ``X`` events on the Overlap Analysis process."""
    return ov.select(
        pl.lit("X").alias("ph"),
        "name",
        pl.lit(str(PID_OVERLAP)).alias("pid"),
        pl.col("type").cast(pl.String).alias("tid"),
        _us_text(pl.col("start_ns")).alias("ts"),
        _us_float(pl.col("end_ns") - pl.col("start_ns")).alias("dur"),
    )


# ---------------------------------------------------------------------------------------------
# The kernel table (what kernel_details.csv holds)


def _as_csv(df: pl.DataFrame) -> pl.DataFrame:
    """String columns as the text reader's CSV parsing leaves them: quotes and blanks stripped,
    ``N/A`` and the like null (:func:`opscope.ingest.ascend.read_csv`)."""
    s = pl.col(pl.String).str.strip_chars(A._STRIP)
    return df.with_columns(pl.when(s.is_in(A._NULLS)).then(None).otherwise(s).name.keep())


def _pmu_name(name: str) -> str:
    """Database PMU names -> the text kernel table's column names."""
    if name == "aic_total_time":
        return "aicore_time(us)"
    if name == "aiv_total_time":
        return "aiv_time(us)"
    if name.endswith("_time"):
        return f"{name}(us)"
    return name


def _kernel_frame(
    con: sqlite3.Connection, have: set[str], level: str | None
) -> pl.DataFrame | None:
    if "TASK" not in have or "COMPUTE_TASK_INFO" not in have:
        return None
    i64, st = pl.Int64, pl.String

    def sid(col: str, alias: str) -> str:
        return f"(SELECT value FROM STRING_IDS WHERE id = c.{col}) AS {alias}"

    mix = _col(con, "COMPUTE_TASK_INFO", "mixBlockDim", "c.mixBlockDim")
    wait = _col(con, "COMPUTE_TASK_INFO", "waitNs", "c.waitNs")
    comp = _frame(
        con,
        f"""SELECT t.startNs, t.endNs, t.streamId, t.taskId, t.modelId, t.contextId,
                  t.globalTaskId, c.blockDim, {mix}, {wait},
                  {sid("name", "n")}, {sid("opType", "ot")}, {sid("taskType", "tt")},
                  {sid("inputShapes", "ish")}, {sid("inputDataTypes", "idt")},
                  {sid("inputFormats", "ifm")}, {sid("outputShapes", "osh")},
                  {sid("outputDataTypes", "odt")}, {sid("outputFormats", "ofm")}
           FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId""",
        {
            "s": i64,
            "e": i64,
            "stream": i64,
            "task": i64,
            "model": i64,
            "context": i64,
            "gid": i64,
            "block": i64,
            "mix": i64,
            "wait": i64,
            "Name": st,
            "Type": st,
            "Accelerator Core": st,
            "Input Shapes": st,
            "Input Data Types": st,
            "Input Formats": st,
            "Output Shapes": st,
            "Output Data Types": st,
            "Output Formats": st,
        },
    )

    def text(c: str) -> pl.Expr:
        return pl.col(c).cast(st)

    def valid(c: str) -> pl.Expr:
        return pl.when(pl.col(c) != _INVALID).then(text(c))

    k = comp.select(
        "s",
        "e",
        "gid",
        valid("model").alias("Model ID"),
        text("task").alias("Task ID"),
        text("stream").alias("Stream ID"),
        "Name",
        "Type",
        "Accelerator Core",
        text("block").alias("Block Dim"),
        text("mix").alias("Mix Block Dim"),
        _us_float(pl.col("wait")).cast(st).alias("Wait Time(us)"),
        "Input Shapes",
        "Input Data Types",
        "Input Formats",
        "Output Shapes",
        "Output Data Types",
        "Output Formats",
        valid("context").alias("Context ID"),
    )
    if "COMMUNICATION_OP" in have:
        ops = _frame(
            con,
            f"""SELECT o.startNs, o.endNs, n.value, t.value,
                      {_col(con, "COMMUNICATION_OP", "waitNs", "o.waitNs")} FROM COMMUNICATION_OP o
               LEFT JOIN STRING_IDS n ON n.id = o.opName
               LEFT JOIN STRING_IDS t ON t.id = o.opType""",
            {"s": i64, "e": i64, "Name": st, "Type": st, "wait": i64},
        ).select(
            "s",
            "e",
            pl.lit(None, i64).alias("gid"),
            pl.lit(None, st).alias("Model ID"),
            "Name",
            "Type",
            pl.lit("HCCL").alias("Accelerator Core"),
            pl.lit("0").alias("Block Dim"),
            _us_float(pl.col("wait")).cast(st).alias("Wait Time(us)"),
        )
        k = pl.concat([k, ops], how="diagonal_relaxed")
    steps = (
        _frame(
            con, "SELECT id, startNs, endNs FROM STEP_TIME", {"step": i64, "_ss": i64, "_se": i64}
        )
        if "STEP_TIME" in have
        else pl.DataFrame(schema={"step": i64, "_ss": i64, "_se": i64})
    )
    k = k.sort("s", maintain_order=True)
    # Exporters without waitNs: the text export's Wait Time is the gap between a kernel's start
    # and the end of the kernel before it in start order (0 when they overlap), the collectives
    # included; it matches every row of the AlexNet kernel tables, 191 of 191 per rank.
    gap = (pl.col("s") - pl.col("e").shift(1)).clip(lower_bound=0).fill_null(0)
    k = k.with_columns(pl.coalesce("Wait Time(us)", _us_float(gap).cast(st)).alias("Wait Time(us)"))
    if steps.height:
        k = (
            k.join_asof(steps.sort("_ss"), left_on="s", right_on="_ss", strategy="backward")
            .with_columns(
                pl.when(pl.col("s") <= pl.col("_se")).then(pl.col("step").cast(st)).alias("Step Id")
            )
            .drop("step", "_ss", "_se")
        )
    else:
        k = k.with_columns(pl.lit(None, st).alias("Step Id"))
    k = k.with_columns(
        _us_text(pl.col("s")).alias("Start Time(us)"),
        _us_float(pl.col("e") - pl.col("s")).cast(st).alias("Duration(us)"),
    )
    cols = _LEVEL0_KERNEL_COLS if level == "Level0" else _KERNEL_COLS
    if "TASK_PMU_INFO" in have and level != "Level0":
        pmu = _frame(
            con,
            """SELECT p.globalTaskId, s.value, p.value FROM TASK_PMU_INFO p
               LEFT JOIN STRING_IDS s ON s.id = p.name""",
            {"gid": i64, "metric": st, "value": pl.Float64},
        )
        if pmu.height:
            names = pmu.get_column("metric").unique(maintain_order=True).to_list()
            wide = pmu.pivot(on="metric", index="gid", values="value", aggregate_function="first")
            wide = wide.rename({n: _pmu_name(n) for n in names})
            k = k.join(wide.with_columns(pl.exclude("gid").cast(st)), on="gid", how="left")
            cols = cols + [_pmu_name(n) for n in names]
    k = k.with_columns([pl.lit(None, st).alias(c) for c in cols if c not in k.columns])
    out = _as_csv(k.select(*[pl.col(c).cast(st) for c in cols], "s", "e")).select(
        *cols,
        pl.col("s").alias("_ts"),
        (pl.col("e") - pl.col("s")).clip(lower_bound=0).alias("_dur"),
    )
    return out.with_row_index("_krow")


# ---------------------------------------------------------------------------------------------
# Steps and memory


def _step_table(analysis: Path) -> pl.DataFrame | None:
    """analysis.db's StepTraceTime as the text step_trace_time.csv columns (strings)."""
    if not analysis.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{analysis}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        if "StepTraceTime" not in _tables(con):
            return None
        rows = con.execute(
            """SELECT step, computing, communication_not_overlapped, overlapped, communication,
                      free, stage FROM StepTraceTime"""
        ).fetchall()
    except sqlite3.DatabaseError as e:
        raise InputError(f"not a readable analysis database ({e})", analysis) from None
    finally:
        con.close()
    names = [
        "Step",
        "Computing",
        "Communication(Not Overlapped)",
        "Overlapped",
        "Communication",
        "Free",
        "Stage",
    ]
    return _as_csv(
        pl.DataFrame(
            [[None if v is None else str(v) for v in r] for r in rows],
            schema=dict.fromkeys(names, pl.String),
            orient="row",
        )
    )


def _memory_frames(
    con: sqlite3.Connection, have: set[str], device: int
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """OP_MEMORY and MEMORY_RECORD as the text operator_memory.csv / memory_record.csv."""
    i64, st = pl.Int64, pl.String
    mib = 1024.0 * 1024.0
    om = mr = None
    dev = pl.lit(f"NPU:{device}")
    if "OP_MEMORY" in have:
        df = _frame(
            con,
            """SELECT size, allocationTime, releaseTime, allocationTotalAllocated,
                      allocationTotalReserved, releaseTotalAllocated, releaseTotalReserved
               FROM OP_MEMORY""",
            {"size": i64, "at": i64, "rt": i64, "aa": i64, "ar": i64, "ra": i64, "rr": i64},
        )

        def mb(c: str) -> pl.Expr:
            return (pl.col(c).cast(pl.Float64) / mib).cast(st)

        om = df.select(
            (pl.col("size").cast(pl.Float64) / 1024.0).cast(st).alias("Size(KB)"),
            _us_text(pl.col("at")).alias("Allocation Time(us)"),
            _us_text(pl.col("rt")).alias("Release Time(us)"),
            mb("aa").alias("Allocation Total Allocated(MB)"),
            mb("ar").alias("Allocation Total Reserved(MB)"),
            mb("ra").alias("Release Total Allocated(MB)"),
            mb("rr").alias("Release Total Reserved(MB)"),
            dev.alias("Device Type"),
        )
    if "MEMORY_RECORD" in have:
        df = _frame(
            con,
            """SELECT s.value, m.timestamp, m.totalAllocated, m.totalReserved, m.totalActive
               FROM MEMORY_RECORD m LEFT JOIN STRING_IDS s ON s.id = m.component""",
            {"comp": st, "ts": i64, "a": i64, "r": i64, "act": i64},
        )
        mr = df.select(
            pl.col("comp").alias("Component"),
            _us_text(pl.col("ts")).alias("Timestamp(us)"),
            (pl.col("a").cast(pl.Float64) / mib).cast(st).alias("Total Allocated(MB)"),
            (pl.col("r").cast(pl.Float64) / mib).cast(st).alias("Total Reserved(MB)"),
            (pl.col("act").cast(pl.Float64) / mib).cast(st).alias("Total Active(MB)"),
            dev.alias("Device Type"),
        )
    return (None if om is None else _as_csv(om)), (None if mr is None else _as_csv(mr))


__all__ = ["find_db", "is_db_dir", "read_ascend_db", "read_overlap"]
