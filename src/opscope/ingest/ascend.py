"""Reader for the Ascend PyTorch profiler's text output (``*_ascend_pt`` directories).

Layout read (every file optional except that one of ``trace_view.json`` / ``kernel_details.csv``
must be there)::

    rank0_ascend_pt/
      profiler_info_0.json        rank id, profiler config (level, aic_metrics...)
      profiler_metadata.json      kept in meta (environment variables dropped)
      ASCEND_PROFILER_OUTPUT/
        trace_view.json           host ops, python frames, CANN calls, NPU tasks, HCCL, counters
        kernel_details.csv        one row per device kernel (+ PMU columns at Level1/Level2)
        step_trace_time.csv       per-step computing / communication / free breakdown
        memory_record.csv         allocator totals over time          -> counters
        operator_memory.csv       allocations and frees per operator  -> memory
        communication.json        per-collective timing               -> read_communication()
        communication_matrix.json per-link bandwidth                  -> read_communication()

Kernels come from ``kernel_details.csv`` (kind ``"kernel"``, ``"communication"`` on the HCCL
core; with ``op_type`` / ``core_type``,
shapes as compact JSON, ``blocks`` from ``Block Num`` or the older ``Block Dim``); the matching
NPU task in ``trace_view.json`` (same start, to the nanosecond) is not duplicated. Each kernel is
joined to the host operator that issued it through the trace's ``async_npu`` flows (whose end
lies in the kernel; flows bind as Kineto's do, in :func:`opscope.ingest.link.resolve_flows`),
which fills ``op_id`` and through it ``step``, ``stack_id``,
``module``, ``is_backward``. CSV columns are found by name; stray tabs, quotes, a BOM and CRLF
line ends are tolerated. Timestamps are parsed from their decimal text, so no nanosecond is lost
to floating point.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.errors import InputError, TruncatedTraceError
from opscope.ingest import link
from opscope.ingest.registry import Progress
from opscope.model import Profile
from opscope.model import schema as S
from opscope.model.kinds import COMM_CORE_TYPES
from opscope.model.usercode import is_model_file
from opscope.redact import redact

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_STRIP = " \t\r\n\"'"
_NULLS = ["", "N/A", "NA", "nan", "None", "null"]

# kernel_details columns that describe a kernel; every other numeric column is a hardware metric.
_KERNEL_DESCRIPTIVE = {
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
    "Block Dim",
    "Block Num",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
    "Device_id",
}
_KERNEL_ARGS = [
    "Task ID",
    "Model ID",
    "OP State",
    "HF32 Eligible",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
]

# trace_view.json: the fields read. Unknown keys are ignored by the decoder.
_ARG_FIELDS: dict[str, pl.DataType | type[pl.DataType]] = {
    "Sequence number": pl.Int64,
    "Fwd thread id": pl.Int64,
    "Input Dims": pl.String,
    "Input type": pl.String,
    "Call stack": pl.String,
    "Python id": pl.Int64,
    "Python parent id": pl.Int64,
    "connection_id": pl.Int64,
    "correlation_id": pl.Int64,
    "Task Type": pl.String,
    "name": pl.String,
    "labels": pl.String,
    "stream id": pl.Int64,
    "src rank": pl.Int64,
    "dst rank": pl.Int64,
    "size(Byte)": pl.Int64,
    "transport type": pl.String,
    "link type": pl.String,
    "bandwidth(GB/s)": pl.Float64,
    "data_type": pl.String,
    "count": pl.Int64,
    "alg_type": pl.String,
}
# Element sizes of HCCL data types (collective bytes = count x size).
_DTYPE_BYTES = {
    "INT8": 1,
    "UINT8": 1,
    "FP16": 2,
    "BFP16": 2,
    "BF16": 2,
    "INT16": 2,
    "UINT16": 2,
    "FP32": 4,
    "INT32": 4,
    "UINT32": 4,
    "FP64": 8,
    "INT64": 8,
    "UINT64": 8,
}
# NPU task types that are kernels (the rest are syncs, copies and HCCL sub-tasks).
_COMPUTE_TASKS = ["AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"]
# Counter events carry their one value under a unit-like key.
_COUNTER_KEYS = [
    "value",
    "MHz",
    "KB",
    "Read(MB/s)",
    "Write(MB/s)",
    "Throughput(MB/s)",
    "Hit Rate(%)",
    "Mata Bw Level",
    "L2 Buffer Bw Level",
    "Utilization(%)",
    "Bandwidth(MB/s)",
]
_TRACE_SCHEMA: dict[str, Any] = {
    "ph": pl.String,
    "name": pl.String,
    "cat": pl.String,
    "pid": pl.String,
    "tid": pl.String,
    "ts": pl.String,
    "dur": pl.Float64,
    "id": pl.String,
    "args": pl.Struct({**_ARG_FIELDS, **dict.fromkeys(_COUNTER_KEYS, pl.Float64)}),
}


# ---------------------------------------------------------------------------------------------
# Public entry points


def find_output_dir(path: Path) -> Path:
    """The ``ASCEND_PROFILER_OUTPUT`` folder for ``path`` (a ``*_ascend_pt`` dir or the folder)."""
    if (path / OUTPUT_DIR).is_dir():
        return path / OUTPUT_DIR
    return path


#: Files that make a folder one Ascend rank: the text export, the database export
#: (:mod:`opscope.ingest.ascend_db`), or the partial output of a rank that kept only its step
#: breakdown and communication (:func:`opscope.ingest.ascend_comm.read_partial`).
_RANK_FILES = ("trace_view.json", "kernel_details.csv")
_PARTIAL_FILES = ("step_trace_time.csv", "communication.json", "communication_matrix.json")


def is_ascend_dir(path: Path) -> bool:
    """True when ``path`` looks like Ascend output: the output folder or a kernel table, a
    profiler database, or a step breakdown / communication files."""
    if not path.is_dir():
        return False
    out = find_output_dir(path)
    if any((out / n).is_file() for n in _RANK_FILES + _PARTIAL_FILES):
        return True
    return any(f.stat().st_size > 0 for f in out.glob("ascend_pytorch_profiler*.db"))


def rank_of(path: Path) -> int | None:
    """The rank recorded in ``profiler_info_N.json`` beside the output folder, if any."""
    root = path.parent if path.name == OUTPUT_DIR else path
    for info in sorted(root.glob("profiler_info*.json")):
        try:
            data = json.loads(info.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            data = {}
        rid = data.get("rank_id") if isinstance(data, dict) else None
        if isinstance(rid, int) and rid >= 0:
            return rid
        m = re.search(r"profiler_info_(\d+)\.json$", info.name)
        if m:
            return int(m.group(1))
    return None


def read_ascend(
    path: Path,
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
) -> Profile:
    """Read one Ascend rank (a ``*_ascend_pt`` dir, its ``ASCEND_PROFILER_OUTPUT``, or a folder
    holding only ``kernel_details.csv``) into a linked :class:`~opscope.model.Profile`.

    ``salvage`` recovers the complete events of a truncated ``trace_view.json``. With
    ``cache``, outputs whose ``trace_view.json`` is at least :data:`CACHE_MIN_BYTES` are cached
    (:mod:`opscope.ingest.cache`, keyed by that file's size and mtime); smaller ones parse
    faster than a cache is written. Raises :class:`~opscope.errors.InputError` naming the file
    when nothing can be read.
    """
    path = Path(path)
    anchor = cache_anchor(path)
    use_cache = cache and anchor is not None and anchor.stat().st_size >= CACHE_MIN_BYTES
    if use_cache and anchor is not None:
        from opscope.ingest import cache as cache_mod

        hit = cache_mod.lookup(anchor, salvage=salvage)
        if hit is not None:
            return hit
    prof = _parse_export(path, salvage=salvage, progress=progress)
    if use_cache and anchor is not None:
        from opscope.ingest import cache as cache_mod

        cache_mod.store(anchor, prof, salvage=salvage)
    return prof


def _parse_export(path: Path, *, salvage: bool, progress: Progress | None) -> Profile:
    """The text export, else the database export, else a rank's partial output."""
    out = find_output_dir(path)
    if not any((out / n).is_file() for n in _RANK_FILES):
        from opscope.ingest import ascend_comm, ascend_db

        if ascend_db.is_db_dir(path):
            return ascend_db.read_ascend_db(path, cache=False, progress=progress)
        if any((out / n).is_file() for n in _PARTIAL_FILES):
            return ascend_comm.read_partial(path)
    return _parse(path, salvage=salvage, progress=progress)


#: trace_view.json (or profiler database) size from which a parsed Ascend output is cached.
CACHE_MIN_BYTES = 16 * 1024 * 1024


def cache_anchor(path: Path) -> Path | None:
    """The file whose size and mtime key the cache of an Ascend output (its trace_view.json,
    else its kernel_details.csv, else its profiler database); None when none exists."""
    out = find_output_dir(Path(path))
    for name in ("trace_view.json", "kernel_details.csv"):
        if (out / name).is_file():
            return out / name
    from opscope.ingest import ascend_db

    return ascend_db.find_db(Path(path))


def _parse(path: Path, *, salvage: bool, progress: Progress | None) -> Profile:
    out = find_output_dir(path)
    if not out.is_dir():
        raise InputError("not a directory", path)
    trace_file = out / "trace_view.json"
    kernel_file = out / "kernel_details.csv"
    if not trace_file.is_file() and not kernel_file.is_file():
        raise InputError(
            f"no trace_view.json or kernel_details.csv in {out.name}: nothing to read", out
        )
    rank = rank_of(out)
    rank_id = 0 if rank is None else rank
    odd: Counter[str] = Counter()
    read: list[str] = []
    meta_extra: dict[str, Any] = {}

    trace = _read_trace_view(trace_file, salvage, odd, meta_extra) if trace_file.is_file() else None
    if trace is not None:
        read.append(trace_file.name)
    if progress is not None:
        progress("ascend", 1, 3)
    kernels = _read_kernels(kernel_file, odd) if kernel_file.is_file() else None
    if kernels is not None:
        read.append(kernel_file.name)
    device = _device_of(out, rank_id)

    events, raw_flows, counters, threads = _assemble(trace, kernels, device, odd, meta_extra)
    events = events.with_columns(pl.lit(rank_id, pl.Int32).alias("rank"))
    km = _kernel_metrics(events, kernels)
    events, flows, stacks = _link(
        events, raw_flows.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")), odd
    )
    steps = _read_steps(out / "step_trace_time.csv", events, odd, read)
    memory, mem_counters = _read_memory(out, device, odd, read)
    memory = _memory_links(memory, events)
    counters = pl.concat([counters, mem_counters], how="vertical")
    if progress is not None:
        progress("ascend", 2, 3)

    info = _profiler_info(out)
    n_links = int(
        events.filter(pl.col("kind").is_in(["kernel", "communication"]))
        .get_column("op_id")
        .is_not_null()
        .sum()
    )
    meta: dict[str, Any] = {
        "format": "ascend",
        "sources": [str(path)],
        "ranks": [rank_id],
        "oddities": dict(odd),
        "trace_meta": {str(rank_id): redact(info)},
        "ascend": {
            "files": read,
            "level": _level(info),
            "has_trace_view": trace is not None,
            "op_kernel_links": n_links,
            **meta_extra,
        },
    }
    if "salvaged" in meta_extra:
        meta["salvaged"] = meta["ascend"].pop("salvaged")
    tables: dict[str, pl.DataFrame] = {
        "events": events,
        "flows": flows,
        "stacks": stacks,
        "memory": memory.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")),
        "counters": counters.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")),
        "steps": steps.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")),
        "kernel_metrics": km,
        "devices": pl.DataFrame(
            {
                "rank": [rank_id],
                "device": [device],
                "name": ["Ascend NPU"],
                "vendor": ["ascend"],
            },
            schema={"rank": pl.Int32, "device": pl.Int32, "name": pl.String, "vendor": pl.String},
        ),
        "threads": threads.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")),
    }
    if progress is not None:
        progress("ascend", 3, 3)
    return Profile.from_tables(meta=meta, **tables)


def read_communication(path: Path) -> dict[str, pl.DataFrame]:
    """Per-collective timing and per-link traffic of one Ascend rank: see
    :func:`opscope.ingest.ascend_comm.read_communication` (links with global ranks, the
    matrix's summary entries left out)."""
    from opscope.ingest import ascend_comm

    return ascend_comm.read_communication(path)


# ---------------------------------------------------------------------------------------------
# Small converters


def us_text_to_ns(col: pl.Expr) -> pl.Expr:
    """Microseconds given as decimal text ("1736408883704643.212\\t") -> integer ns, exactly.

    Text in scientific notation ("1.69512E+15") falls back to a float conversion.
    """
    s = col.cast(pl.String).str.strip_chars(_STRIP)
    parts = s.str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = (
        parts.struct.field("field_1")
        .fill_null("")
        .str.slice(0, 3)
        .str.pad_end(3, "0")
        .cast(pl.Int64, strict=False)
    )
    approx = (s.cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)
    return pl.when(s.str.contains(r"^\d+(\.\d*)?$")).then(whole * 1000 + frac).otherwise(approx)


def _us_float_to_ns(col: pl.Expr) -> pl.Expr:
    return (col.cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)


def _load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as e:
        raise InputError(f"not valid JSON ({_first_line(e)})", path) from None
    return data if isinstance(data, dict) else {}


def _shapes_json(col: pl.Expr) -> pl.Expr:
    """``"32,3,224,224;64,3,11,11"`` -> ``"[[32,3,224,224],[64,3,11,11]]"``."""
    s = col.str.strip_chars(_STRIP).str.replace_all(r"\s+", "")
    # Only digits, commas and semicolons make a shape; anything else (a shifted column) is null.
    ok = s.str.contains(r"^[\d,;]*$") & ~s.str.contains(r",,|,;|;,|^,|,$")
    return (
        pl.when(s.is_null() | s.is_in(_NULLS) | ~ok)
        .then(None)
        .otherwise(pl.lit("[[") + s.str.replace_all(";", "],[", literal=True) + pl.lit("]]"))
    )


def _types_json(col: pl.Expr) -> pl.Expr:
    """``"FLOAT16;INT64"`` -> ``'["FLOAT16","INT64"]'``."""
    s = col.str.strip_chars(_STRIP).str.replace_all(r"\s+", "")
    return (
        pl.when(s.is_null() | s.is_in(_NULLS))
        .then(None)
        .otherwise(pl.lit('["') + s.str.replace_all(";", '","', literal=True) + pl.lit('"]'))
    )


# ---------------------------------------------------------------------------------------------
# CSV


def read_csv(path: Path, odd: Counter[str] | None = None) -> pl.DataFrame:
    """Read one Ascend CSV as strings: header and values stripped of tabs/quotes, ``N/A`` null.

    Tolerates a BOM, CRLF, short rows (nulls) and long rows (extra fields dropped, counted in
    ``odd`` as ``"<file>: ragged rows"``).
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", path) from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise InputError("empty CSV file", path)
    try:
        df = pl.read_csv(
            io.BytesIO(data),
            infer_schema=False,
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
            raise_if_empty=False,
        )
    except pl.exceptions.PolarsError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"not a readable CSV ({first})", path) from None
    names = [c.strip(_STRIP).lstrip("\ufeff") for c in df.columns]
    df.columns = _dedupe(names)
    if df.width:
        df = df.with_columns(pl.all().str.strip_chars(_STRIP))
        df = df.with_columns(
            pl.when(pl.all().is_in(_NULLS)).then(None).otherwise(pl.all()).name.keep()
        )
        # A row with more fields than the header: polars drops the extras; count those rows.
        if odd is not None:
            extra, short = _count_ragged(data, df.width)
            if extra:
                odd[f"{path.name}: rows with extra fields"] += extra
            if short:
                odd[f"{path.name}: rows with missing fields"] += short
    return df


def _dedupe(names: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for n in names:
        seen[n] += 1
        out.append(n if seen[n] == 1 else f"{n}_{seen[n] - 1}")
    return out


def _count_ragged(data: bytes, width: int) -> tuple[int, int]:
    """Rows with more / fewer fields than the header (polars drops extras, null-fills short).

    Counted per line on the text outside quotes; a file with quoted multi-line fields (an
    unbalanced quote on some line) is not counted.
    """
    lines = pl.Series(data.decode("utf-8", "replace").splitlines()[1:], dtype=pl.String)
    lines = lines.filter(lines.str.strip_chars().str.len_chars() > 0)
    balanced = lines.str.count_matches('"') % 2 == 0
    if lines.len() == 0 or not bool(balanced.all()):
        return 0, 0
    fields = lines.str.replace_all(r'"[^"]*"', "").str.count_matches(",") + 1
    return int((fields > width).sum()), int((fields < width).sum())


def _col(df: pl.DataFrame, *names: str) -> pl.Expr:
    """The first of ``names`` present in ``df``, else a null string column."""
    for n in names:
        if n in df.columns:
            return pl.col(n)
    return pl.lit(None, pl.String)


# ---------------------------------------------------------------------------------------------
# kernel_details.csv


def _read_kernels(path: Path, odd: Counter[str]) -> pl.DataFrame:
    df = read_csv(path, odd)
    missing = [c for c in ("Name", "Start Time(us)", "Duration(us)") if c not in df.columns]
    if missing:
        raise InputError(f"kernel table lacks column(s) {', '.join(missing)}", path)
    k = df.with_columns(
        us_text_to_ns(pl.col("Start Time(us)")).alias("_ts"),
        _us_float_to_ns(pl.col("Duration(us)")).alias("_dur"),
    )
    bad = k.filter(pl.col("_ts").is_null() | pl.col("_dur").is_null()).height
    if bad:
        odd["kernel_details.csv: rows without start or duration (dropped)"] += bad
        k = k.filter(pl.col("_ts").is_not_null() & pl.col("_dur").is_not_null())
    neg = k.filter(pl.col("_dur") < 0).height
    if neg:
        odd["kernel_details.csv: negative durations (clamped)"] += neg
    return k.with_columns(pl.col("_dur").clip(lower_bound=0)).with_row_index("_krow")


# ---------------------------------------------------------------------------------------------
# trace_view.json


def _read_trace_view(
    path: Path, salvage: bool, odd: Counter[str], meta_extra: dict[str, Any]
) -> pl.DataFrame:
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise InputError("empty trace file", path)
    try:
        df = _decode_trace(data)
    except ValueError as e:
        truncated = _looks_truncated(data)
        if not truncated:
            raise InputError(f"not a trace_view.json ({_first_line(e)})", path) from None
        if not salvage:
            raise TruncatedTraceError(
                "trace ends before its JSON does (truncated); --salvage recovers the "
                "complete events",
                path,
            ) from None
        df = _salvage(data, path)
        meta_extra["salvaged"] = {"events": df.height, "reason": "truncated trace_view.json"}
    return df


def _decode_trace(data: bytes) -> pl.DataFrame:
    head = data.lstrip()[:1]
    if head == b"{":
        # Some exports wrap the array: {"traceEvents": [...]}.
        obj = json.loads(data)
        events = obj.get("traceEvents") if isinstance(obj, dict) else None
        if not isinstance(events, list):
            raise ValueError("no event array")
        data = json.dumps(events).encode()
    elif head != b"[":
        raise ValueError("does not start with a JSON array")
    try:
        return pl.read_json(io.BytesIO(data), schema=_TRACE_SCHEMA)
    except pl.exceptions.PolarsError as e:
        raise ValueError(_first_line(e)) from None


def _looks_truncated(data: bytes) -> bool:
    tail = data.rstrip()[-1:]
    if tail in (b"]", b"}"):
        try:
            json.loads(data)
        except json.JSONDecodeError as e:
            return bool(e.pos >= len(data.rstrip()) - 1)
        return False
    return True


def _salvage(data: bytes, path: Path) -> pl.DataFrame:
    # Cut after the last complete object "}," and close the array; retry a few objects back.
    end = len(data)
    for _ in range(64):
        cut = data.rfind(b"}", 0, end)
        if cut < 0:
            break
        try:
            return _decode_trace(data[: cut + 1] + b"]")
        except ValueError:
            end = cut
    raise TruncatedTraceError("truncated, and no complete event could be recovered", path)


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


# ---------------------------------------------------------------------------------------------
# Assemble events


def _device_of(out: Path, rank: int) -> int:
    for name in ("memory_record.csv", "operator_memory.csv"):
        f = out / name
        if f.is_file():
            try:
                head = f.read_text(encoding="utf-8-sig", errors="replace")[:4096]
            except OSError:
                continue
            m = re.search(r"NPU:(\d+)", head)
            if m:
                return int(m.group(1))
    return rank


_EVENT_COLS = [c for c in S.EVENTS if c not in ("rank",)]


def _assemble(
    trace: pl.DataFrame | None,
    kernels: pl.DataFrame | None,
    device: int,
    odd: Counter[str],
    meta_extra: dict[str, Any],
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    parts: list[pl.DataFrame] = []
    flow_parts: list[pl.DataFrame] = []
    counters = S.empty("counters").drop("rank")
    threads = S.empty("threads").drop("rank")
    hw_pid: int | None = None
    hccl_pid: int | None = None

    if trace is not None:
        t = (
            trace.with_columns(
                pl.col("pid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False),
                pl.col("tid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False),
                us_text_to_ns(pl.col("ts")).alias("ts_ns"),
                _us_float_to_ns(pl.col("dur")).alias("dur_ns"),
            )
            .with_columns(
                pl.col("args").struct.rename_fields(
                    [f if f != "name" else "_argname" for f in _TRACE_SCHEMA["args"].to_schema()]
                )
            )
            .unnest("args")
        )
        pnames = _meta_names(trace, "process_name")
        tnames = _meta_names(trace, "thread_name", with_tid=True)
        proc = dict(zip(pnames["pid"].to_list(), pnames["value"].to_list(), strict=True))
        hw = [p for p, n in proc.items() if n == "Ascend Hardware"]
        hccl = [p for p, n in proc.items() if n == "HCCL"]
        cann = [p for p, n in proc.items() if n == "CANN"]
        skip_procs = [p for p, n in proc.items() if n == "Overlap Analysis"]
        hw_pid = hw[0] if hw else None
        hccl_pid = hccl[0] if hccl else None
        python_pids = [p for p, n in proc.items() if n == "Python"]
        host_pid = python_pids[0] if len(python_pids) == 1 else None

        x = t.filter(pl.col("ph") == "X")
        skipped = x.filter(pl.col("pid").is_in(skip_procs)).height
        if skipped:
            meta_extra["skipped_overlap_analysis_slices"] = skipped
        x = x.filter(~pl.col("pid").is_in(skip_procs))
        bad = x.filter(pl.col("ts_ns").is_null() | pl.col("dur_ns").is_null()).height
        if bad:
            odd["trace_view.json: slices without ts or dur (dropped)"] += bad
            x = x.filter(pl.col("ts_ns").is_not_null() & pl.col("dur_ns").is_not_null())
        neg = x.filter(pl.col("dur_ns") < 0).height
        if neg:
            odd["trace_view.json: negative durations (clamped)"] += neg
            x = x.with_columns(pl.col("dur_ns").clip(lower_bound=0))

        is_hw = pl.col("pid").is_in(hw)
        is_hccl = pl.col("pid").is_in(hccl)
        is_cann = pl.col("pid").is_in(cann)
        cat = pl.col("cat").fill_null("")
        kind = (
            # Without a kernel table, compute tasks in the trace are the kernels (MemSet too).
            pl.when(is_hw & pl.lit(kernels is None) & pl.col("Task Type").is_in(_COMPUTE_TASKS))
            .then(pl.lit("kernel"))
            .when(is_hw & pl.col("name").str.contains("(?i)memcpy|memset"))
            .then(
                pl.when(pl.col("name").str.contains("(?i)memset"))
                .then(pl.lit("memset"))
                .otherwise(pl.lit("memcpy"))
            )
            .when(is_hw)
            .then(pl.lit("other"))
            # The HCCL group slice (tid 0) is the collective. The per-plane tasks (Notify_Wait,
            # Memcpy, RDMASend...) are its steps, inside its time: kept for the timeline as
            # "other" so that a collective counts once (kinds.py).
            .when(is_hccl & (pl.col("tid") == 0))
            .then(pl.lit("communication"))
            .when(is_hccl)
            .then(pl.lit("other"))
            .when(is_cann)
            .then(pl.lit("runtime"))
            .when(pl.col("name").str.starts_with("ProfilerStep#"))
            .then(pl.lit("step"))
            .when(cat == "cpu_op")
            .then(pl.lit("cpu_op"))
            .when(cat == "python_function")
            .then(pl.lit("python_function"))
            .when(cat == "user_annotation")
            .then(pl.lit("user_annotation"))
            .otherwise(pl.lit("other"))
        )
        on_device = is_hw | is_hccl
        host_pid_expr = (
            pl.when(is_cann).then(pl.lit(host_pid, pl.Int64)).otherwise(pl.col("pid"))
            if host_pid is not None
            else pl.col("pid")
        )
        comm_args = pl.struct(
            [
                pl.col(c)
                for c in (
                    "src rank",
                    "dst rank",
                    "size(Byte)",
                    "transport type",
                    "link type",
                    "bandwidth(GB/s)",
                    "data_type",
                    "count",
                    "alg_type",
                    "Task Type",
                )
            ]
        )
        ev = x.select(
            kind.cast(S.EventKind).alias("kind"),
            pl.col("name"),
            host_pid_expr.alias("pid"),
            pl.col("tid"),
            pl.col("ts_ns"),
            pl.col("dur_ns"),
            pl.when(on_device).then(pl.lit(device, pl.Int32)).alias("device"),
            pl.when(is_hccl)
            .then(pl.col("stream id"))
            .when(is_hw)
            .then(pl.col("tid"))
            .alias("stream"),
            pl.col("correlation_id").alias("external_id"),
            pl.col("connection_id").alias("correlation"),
            pl.col("Sequence number").alias("seq"),
            pl.col("Fwd thread id").alias("fwd_tid"),
            _dims_json(pl.col("Input Dims")).alias("input_dims"),
            _types_json(pl.col("Input type").str.replace_all(r"\r?\n", "")).alias("input_types"),
            pl.col("Python id").alias("python_id"),
            pl.col("Python parent id").alias("python_parent_id"),
            pl.when(on_device).then(comm_args.struct.json_encode()).alias("args"),
            pl.col("Call stack").alias("_call_stack"),
            pl.when(is_hw & pl.col("Task Type").is_in(_COMPUTE_TASKS))
            .then(pl.col("Task Type"))
            .when(is_hccl & (pl.col("tid") == 0))
            .then(pl.lit("HCCL"))
            .alias("core_type"),
            pl.when(is_hccl & (pl.col("tid") == 0))
            .then(
                pl.col("count")
                * pl.col("data_type")
                .str.to_uppercase()
                .replace_strict(_DTYPE_BYTES, default=None, return_dtype=pl.Int64)
            )
            .otherwise(pl.col("size(Byte)"))
            .alias("bytes"),
        ).with_columns(
            pl.when(pl.col("kind").is_in(["communication", "kernel"]) | is_hccl).then(
                pl.col("bytes")
            )
        )
        parts.append(ev)

        # Flows (s/f pairs by id within a category).
        fl = t.filter(pl.col("ph").is_in(["s", "f", "t"]) & pl.col("id").is_not_null())
        fl = fl.select(
            pl.col("cat").fill_null(""),
            pl.col("ph"),
            pl.col("id").str.strip_chars(_STRIP).alias("fid"),
            host_pid_expr.alias("pid"),
            pl.col("tid"),
            pl.col("ts_ns"),
        )
        flow_parts.append(fl)

        c = t.filter(pl.col("ph") == "C")
        if c.height:
            procname = pl.col("pid").replace_strict(proc, default=None, return_dtype=pl.String)
            counters = c.select(
                pl.when(procname.is_not_null() & (procname != pl.col("name")))
                .then(procname + pl.lit("/") + pl.col("name"))
                .otherwise(pl.col("name"))
                .alias("name"),
                pl.col("ts_ns"),
                pl.coalesce([pl.col(k) for k in _COUNTER_KEYS]).alias("value"),
            )
            nov = counters.filter(pl.col("value").is_null()).height
            if nov:
                odd["trace_view.json: counters with no known value key (dropped)"] += nov
                counters = counters.filter(pl.col("value").is_not_null())

        threads = _threads(pnames, tnames, hw + hccl)

    if kernels is not None:
        k = kernels
        kev = k.select(
            pl.when(
                _col(k, "Accelerator Core").str.to_uppercase().is_in(list(COMM_CORE_TYPES))
                | _col(k, "Task Type").str.to_uppercase().is_in(list(COMM_CORE_TYPES))
            )
            .then(pl.lit("communication"))
            .otherwise(pl.lit("kernel"))
            .cast(S.EventKind)
            .alias("kind"),
            pl.col("Name").alias("name"),
            pl.lit(hw_pid if hw_pid is not None else device, pl.Int64).alias("pid"),
            _col(k, "Stream ID").cast(pl.Int64, strict=False).alias("tid"),
            pl.col("_ts").alias("ts_ns"),
            pl.col("_dur").alias("dur_ns"),
            pl.lit(device, pl.Int32).alias("device"),
            _col(k, "Stream ID").cast(pl.Int64, strict=False).alias("stream"),
            _shapes_json(_col(k, "Input Shapes")).alias("input_dims"),
            _types_json(_col(k, "Input Data Types")).alias("input_types"),
            _col(k, "Block Num", "Block Dim").cast(pl.Int64, strict=False).alias("blocks"),
            pl.struct([_col(k, c).alias(c) for c in _KERNEL_ARGS if c in k.columns])
            .struct.json_encode()
            .alias("args")
            if any(c in k.columns for c in _KERNEL_ARGS)
            else pl.lit(None, pl.String).alias("args"),
            _col(k, "Type").alias("op_type"),
            _col(k, "Accelerator Core").alias("core_type"),
            _col(k, "Step Id").cast(pl.Int32, strict=False).alias("step"),
            pl.col("_krow"),
        )
        if parts:
            ev = parts[0]
            # The NPU task of a kernel_details row starts at the same ns on the same stream;
            # HCCL collectives (no stream in the table) match by name within 2 µs.
            dev = ev.with_row_index("_erow").filter(pl.col("device").is_not_null())
            hc = dev.filter(pl.col("kind") == "communication").select(
                "name",
                pl.col("ts_ns").alias("_hts"),
                pl.col("correlation").alias("_corr"),
                pl.col("bytes").alias("_hb"),
                "_erow",
            )
            # HCCL collectives (no stream in the table) match the HCCL group slice by name
            # within 2 µs; every other row matches the NPU task starting at the same ns.
            hccl_match = (
                kev.join(hc, on="name", how="inner")
                .filter((pl.col("_hts") - pl.col("ts_ns")).abs() <= 2000)
                .sort("_krow", (pl.col("_hts") - pl.col("ts_ns")).abs())
                .unique("_krow", keep="first")
                .unique("_erow", keep="first")
            )
            rest = kev.filter(~pl.col("_krow").is_in(hccl_match.get_column("_krow").implode()))
            hw_match = (
                rest.join(
                    dev.filter(pl.col("kind") != "communication").select(
                        "ts_ns",
                        pl.col("stream").alias("_hstream"),
                        pl.col("correlation").alias("_corr"),
                        "_erow",
                    ),
                    on="ts_ns",
                    how="inner",
                )
                .filter(pl.col("stream").is_null() | (pl.col("stream") == pl.col("_hstream")))
                .unique("_krow", keep="first")
                .unique("_erow", keep="first")
            )
            matched = pl.concat(
                [
                    hw_match.select("_krow", "_corr", pl.lit(None, pl.Int64).alias("_hb"), "_erow"),
                    hccl_match.select("_krow", "_corr", "_hb", "_erow"),
                ]
            )
            kev = (
                kev.join(matched.select("_krow", "_corr", "_hb"), on="_krow", how="left")
                .with_columns(pl.col("_corr").alias("correlation"), pl.col("_hb").alias("bytes"))
                .drop("_corr", "_hb")
            )
            drop_rows = matched.get_column("_erow")
            meta_extra["kernels_matched_to_trace"] = matched.height
            parts[0] = (
                ev.with_row_index("_erow")
                .filter(~pl.col("_erow").is_in(drop_rows.implode()))
                .drop("_erow")
            )
        parts.append(kev)

    events = pl.concat(parts, how="diagonal_relaxed") if parts else S.empty("events").drop("rank")
    events = events.with_columns(
        [
            pl.lit(None, dtype).alias(c)
            for c, dtype in S.EVENTS.items()
            if c not in events.columns and c not in ("id", "rank")
        ]
    )
    if "_krow" not in events.columns:
        events = events.with_columns(pl.lit(None, pl.UInt32).alias("_krow"))
    if "_call_stack" not in events.columns:
        events = events.with_columns(pl.lit(None, pl.String).alias("_call_stack"))
    events = (
        events.sort(["ts_ns", "dur_ns"], descending=[False, True], maintain_order=True)
        .with_row_index("id")
        .with_columns(pl.col("id").cast(pl.Int64))
    )

    events, threads = _device_tracks(events, threads, hccl_pid)
    raw_flows = (
        _raw_flows(flow_parts, odd)
        if flow_parts
        else pl.DataFrame(schema={k: v for k, v in link.RAW_FLOWS.items() if k != "rank"})
    )
    return events, raw_flows, counters, threads


def _dims_json(col: pl.Expr) -> pl.Expr:
    """Trace "Input Dims" text ("32,3;\\r\\n;\\r\\n64") -> compact JSON lists."""
    s = col.str.replace_all(r"\r?\n", "")
    return _shapes_json(s)


def _meta_names(trace: pl.DataFrame, what: str, *, with_tid: bool = False) -> pl.DataFrame:
    m = trace.filter((pl.col("ph") == "M") & (pl.col("name") == what))
    cols = [
        pl.col("pid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False),
        pl.col("args").struct.field("name").alias("value"),
    ]
    if with_tid:
        cols.insert(1, pl.col("tid").str.strip_chars(_STRIP).cast(pl.Int64, strict=False))
    return m.select(cols).unique(maintain_order=True)


def _threads(pnames: pl.DataFrame, tnames: pl.DataFrame, device_pids: list[int]) -> pl.DataFrame:
    """Track names "PROCESS · THREAD" from the trace's metadata ("Ascend Hardware · Stream 2",
    "HCCL · Group 0 Communication", "Python · Thread 7"): the threads table has no process
    column, and the process is what tells a hardware stream from a host thread."""
    proc = pnames.select("pid", pl.col("value").alias("_proc")).unique(
        "pid", keep="first", maintain_order=True
    )
    return (
        tnames.join(proc, on="pid", how="left", maintain_order="left")
        .select(
            pl.col("pid"),
            pl.col("tid"),
            pl.when(pl.col("_proc").is_not_null())
            .then(pl.format("{} · {}", pl.col("_proc"), pl.col("value")))
            .otherwise(pl.col("value"))
            .alias("name"),
            pl.col("pid").is_in(device_pids).alias("is_device"),
        )
        .unique(["pid", "tid"], keep="first", maintain_order=True)
    )


HCCL_LANE_TID: Final = -1
"""Communication lane of HCCL ops that have no stream (kernel_details.csv without a trace)."""


def _device_tracks(
    events: pl.DataFrame, threads: pl.DataFrame, hccl_pid: int | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """HCCL ops on the communication lanes and a name for every device track.

    kernel_details.csv gives an HCCL op no Stream ID: it goes on the HCCL process's
    "Group 0 Communication" lane (tid 0) when the trace has one, else on a lane of its own
    (:data:`HCCL_LANE_TID`, "HCCL · communication"). Device tracks that the metadata does not
    name (kernels of a run without trace_view.json) are named "Ascend Hardware · Stream N"."""
    comm = (pl.col("kind") == "communication") & pl.col("tid").is_null()
    if hccl_pid is not None:
        events = events.with_columns(
            pl.when(comm).then(pl.lit(hccl_pid, pl.Int64)).otherwise(pl.col("pid")).alias("pid"),
            pl.when(comm).then(pl.lit(0, pl.Int64)).otherwise(pl.col("tid")).alias("tid"),
        )
    else:
        events = events.with_columns(
            pl.when(comm)
            .then(pl.lit(HCCL_LANE_TID, pl.Int64))
            .otherwise(pl.col("tid"))
            .alias("tid")
        )
    tracks = (
        events.filter(pl.col("device").is_not_null() & pl.col("tid").is_not_null())
        .select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64))
        .unique()
        .sort("pid", "tid")
    )
    missing = tracks.join(threads.select("pid", "tid"), on=["pid", "tid"], how="anti")
    if missing.height:
        extra = missing.select(
            "pid",
            "tid",
            pl.when(pl.col("tid") == HCCL_LANE_TID)
            .then(pl.lit("HCCL · communication"))
            .otherwise(pl.format("Ascend Hardware · Stream {}", pl.col("tid")))
            .alias("name"),
            pl.lit(True).alias("is_device"),
        )
        threads = pl.concat([threads, extra], how="vertical_relaxed")
    return events, threads


def _raw_flows(parts: list[pl.DataFrame], odd: Counter[str]) -> pl.DataFrame:
    """The trace's flow records as :data:`opscope.ingest.link.RAW_FLOWS` (without ``rank``),
    for :func:`opscope.ingest.link.resolve_flows` to bind once the events are nested."""
    fl = pl.concat(parts)
    kind = (
        pl.when(pl.col("cat") == "async_npu")
        .then(pl.lit("async_npu"))
        .when(pl.col("cat") == "fwdbwd")
        .then(pl.lit("fwdbwd"))
        .when(pl.col("cat") == "HostToDevice")
        .then(pl.lit("ac2g"))
        .otherwise(pl.lit("other"))
    )
    # CANN numbers most HostToDevice flows past 64 bits ("40004912544273661951"): an id that
    # fits an Int64 is kept, any other pairs by a 64-bit hash of its text (casting it gave
    # null, and every such flow one id).
    fid = pl.col("fid")
    flow_id = pl.coalesce(fid.cast(pl.Int64, strict=False), fid.hash().reinterpret(signed=True))
    fl = fl.with_columns(flow_id.alias("flow_id"))
    bad = fl.filter(pl.col("ts_ns").is_null()).height
    if bad:
        odd["trace_view.json: flow records without a ts (dropped)"] += bad
        fl = fl.filter(pl.col("ts_ns").is_not_null())
    return fl.select(
        kind.cast(S.FlowKind).alias("kind"),
        pl.col("flow_id"),
        pl.col("ph").alias("phase"),
        pl.col("pid").cast(pl.Int64),
        pl.col("tid").cast(pl.Int64),
        pl.col("ts_ns").cast(pl.Int64),
    )


# ---------------------------------------------------------------------------------------------
# Linking


def _link(
    events: pl.DataFrame, raw_flows: pl.DataFrame, odd: Counter[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    host = pl.col("device").is_null()
    # Nesting per (rank, pid, tid) track: the shared linker's rule (host threads; device
    # streams nest nothing here, the table's kernels do not overlap on a stream).
    events, index = link.nest_indexed(events)
    # Flows through the shared linker: an endpoint binds to the innermost qualifying slice on
    # its track holding its time (Chrome's rule for flow starts and ``bp: "e"`` ends). CANN's
    # HostToDevice starts fall inside a CANN call, not at its start: an exact-start match
    # bound 23 of 210 on the AlexNet 910B export, this binds all of them.
    flows = link.resolve_flows(events, _onto_streamless(events, raw_flows), index=index)
    unbound = raw_flows.filter(pl.col("phase") == "s").height - flows.height
    if unbound > 0:
        odd["trace_view.json: flows with an endpoint on no slice (dropped)"] += unbound

    # Stacks from "Call stack" text, interned.
    stacks, events = _intern_stacks(events)

    # Walk down the nesting levels: module path, inherited stack, backward flag.
    module_name = (
        pl.when(pl.col("kind") == "python_function")
        .then(pl.col("name").str.extract(r"^nn\.Module:\s*(.+)$"))
        .otherwise(None)
    )
    events = events.with_columns(
        module_name.alias("_mod"),
        (
            (pl.col("fwd_tid").fill_null(0) > 0)
            | pl.col("name").str.contains(r"(?i)backward|autograd::engine")
        )
        .and_(host)
        .alias("is_backward"),
    )
    # Level by level (vectorised per nesting depth): module path = ancestors' module names
    # joined by "/", stack inherited from the nearest ancestor that has one, backward flag
    # inherited from any ancestor.
    max_depth = int(events.get_column("depth").fill_null(0).max() or 0)  # type: ignore[arg-type]
    base = events.select("id", "parent_id", "depth", "_mod", "stack_id", "is_backward")
    level = base.filter(pl.col("depth") == 0).select(
        "id", pl.col("_mod").alias("module"), "stack_id", "is_backward"
    )
    done = [level]
    for lvl in range(1, max_depth + 1):
        rows = base.filter(pl.col("depth") == lvl).join(
            level.rename(
                {"id": "parent_id", "module": "_pm", "stack_id": "_ps", "is_backward": "_pb"}
            ),
            on="parent_id",
            how="left",
        )
        level = rows.select(
            "id",
            pl.when(pl.col("_pm").is_not_null() & pl.col("_mod").is_not_null())
            .then(pl.col("_pm") + pl.lit("/") + pl.col("_mod"))
            .otherwise(pl.coalesce("_mod", "_pm"))
            .alias("module"),
            pl.coalesce("stack_id", "_ps").alias("stack_id"),
            (pl.col("is_backward") | pl.col("_pb").fill_null(False)).alias("is_backward"),
        )
        done.append(level)
    walked = pl.concat(done)
    events = events.drop("stack_id", "is_backward", "module").join(walked, on="id", how="left")
    # Non-module events keep only the module of their ancestors; python frames that are modules
    # keep their own path.

    # Steps on the host: the ProfilerStep slice that contains the event's start.
    steps = (
        events.filter(pl.col("kind") == "step")
        .select(
            pl.col("ts_ns").alias("_sts"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("_send"),
            pl.col("name").str.extract(r"#(\d+)").cast(pl.Int32, strict=False).alias("_step"),
        )
        .sort("_sts")
    )
    if steps.height:
        tagged = (
            events.select("id", "ts_ns")
            .sort("ts_ns")
            .join_asof(steps, left_on="ts_ns", right_on="_sts", strategy="backward")
            .select(
                "id",
                pl.when(pl.col("ts_ns") < pl.col("_send")).then(pl.col("_step")).alias("_hstep"),
            )
        )
        events = events.join(tagged, on="id", how="left")
    else:
        events = events.with_columns(pl.lit(None, pl.Int32).alias("_hstep"))

    # Kernel -> host op through async_npu flows; launch through the CANN call's connection id.
    a = (
        flows.filter(pl.col("kind") == "async_npu")
        .select(pl.col("dst_id").alias("id"), pl.col("src_id").alias("_op"))
        .unique("id", keep="first")
    )
    launches = (
        events.filter(pl.col("kind") == "runtime")
        .filter(pl.col("correlation").is_not_null())
        .select(pl.col("correlation"), pl.col("id").alias("_launch"))
        .unique("correlation", keep="first")
    )
    events = events.join(a, on="id", how="left").join(launches, on="correlation", how="left")
    events = events.with_columns(
        pl.when(host).then(None).otherwise(pl.col("_launch")).alias("launch_id"),
        pl.when(host).then(None).otherwise(pl.col("_op")).alias("op_id"),
    )
    # Host runtime calls: the innermost enclosing cpu_op is their op.
    events = _host_op_of_runtime(events)
    # Fill device rows from their op: step, stack, module, backward; host rows take _hstep.
    opinfo = events.select(
        pl.col("id").alias("op_id"),
        pl.col("_hstep").alias("_ostep"),
        pl.col("stack_id").alias("_ostack"),
        pl.col("module").alias("_omod"),
        pl.col("is_backward").alias("_obwd"),
    )
    events = events.join(opinfo, on="op_id", how="left").with_columns(
        pl.when(host).then(pl.col("_hstep")).otherwise(pl.coalesce("step", "_ostep")).alias("step"),
        pl.when(host).then(pl.col("stack_id")).otherwise(pl.col("_ostack")).alias("stack_id"),
        pl.when(host).then(pl.col("module")).otherwise(pl.col("_omod")).alias("module"),
        pl.when(host)
        .then(pl.col("is_backward"))
        .otherwise(pl.col("_obwd").fill_null(False))
        .alias("is_backward"),
    )
    # Backward op -> forward op via fwdbwd flows.
    fb = (
        flows.filter(pl.col("kind") == "fwdbwd")
        .select(pl.col("dst_id").alias("id"), pl.col("src_id").alias("_fwd"))
        .unique("id", keep="first")
    )
    events = events.join(fb, on="id", how="left").with_columns(pl.col("_fwd").alias("fwd_id"))
    # Backward: the shared linker's rule (autograd evaluate_function / *Backward ops and what
    # they enclose; device events through their op), so both formats agree.
    events = link.mark_backward(events.sort("id"))
    events = events.sort("id").select([c for c in S.EVENTS if c in events.columns])
    return events, flows, stacks


def _onto_streamless(events: pl.DataFrame, raw_flows: pl.DataFrame) -> pl.DataFrame:
    """Flow ends pointing at a trace task that a streamless kernel_details row replaced (level 0
    tables have no Stream ID) move to that row's track (tid null), where it starts at their ts."""
    rows = (
        events.filter(pl.col("device").is_not_null() & pl.col("tid").is_null())
        .select("pid", "ts_ns", pl.lit(True).alias("_streamless"))
        .unique(["pid", "ts_ns"])
    )
    if rows.height == 0:
        return raw_flows
    return (
        raw_flows.join(rows, on=["pid", "ts_ns"], how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("_streamless") & (pl.col("phase") != "s"))
            .then(None)
            .otherwise(pl.col("tid"))
            .alias("tid")
        )
        .drop("_streamless")
    )


def _host_op_of_runtime(events: pl.DataFrame) -> pl.DataFrame:
    """Runtime (CANN) calls and other host slices: op_id = innermost enclosing cpu_op."""
    ops = events.select("id", "kind", "parent_id")
    is_op = ops.get_column("kind").to_numpy() == "cpu_op"
    par = ops.get_column("parent_id").fill_null(-1).to_numpy()
    n = ops.height
    owner = np.full(n, -1, dtype=np.int64)
    cur = par.copy()
    host = events.get_column("device").is_null().to_numpy()
    todo = np.nonzero(host & (events.get_column("kind").to_numpy() == "runtime"))[0]
    for _ in range(256):
        if todo.size == 0:
            break
        c = cur[todo]
        valid = c >= 0
        hit = valid & is_op[np.maximum(c, 0)]
        owner[todo[hit]] = c[hit]
        keep = valid & ~hit
        todo = todo[keep]
        cur[todo] = par[cur[todo]]
    return events.with_columns(
        pl.when(pl.col("kind") == "runtime")
        .then(pl.Series("_own", owner).replace(-1, None))
        .otherwise(pl.col("op_id"))
        .alias("op_id")
    )


_FRAME = r"^(?P<file>.*)\((?P<line>\d+)\):\s*(?P<function>.*)$"


def parse_stacks(texts: pl.Series) -> pl.DataFrame:
    """Intern ``Call stack`` strings ("file(line): func;\\nfile(line): func", innermost first).

    Returns the STACKS table (stack_id = position of the distinct string in ``texts``).
    """
    u = pl.DataFrame({"text": texts}).with_row_index("stack_id")
    frames = (
        u.with_columns(pl.col("text").str.split(";").alias("f"))
        .explode("f")
        .with_columns(pl.col("f").str.strip_chars(" \t\r\n"))
        .filter(pl.col("f").str.len_chars() > 0)
        .with_columns(pl.int_range(pl.len()).over("stack_id").alias("depth"))
        .with_columns(pl.col("f").str.extract_groups(_FRAME).alias("g"))
        .unnest("g")
    )
    file_ = pl.coalesce("file", "f")
    return frames.select(
        pl.col("stack_id").cast(pl.Int64),
        pl.col("depth").cast(pl.Int32),
        file_.alias("file"),
        pl.col("line").cast(pl.Int32, strict=False),
        pl.col("function"),
        # the one rule of what is the model's code (Kineto stacks use it too)
        file_.map_elements(is_model_file, return_dtype=pl.Boolean)
        .fill_null(False)
        .alias("is_user"),
    )


def _intern_stacks(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    text = pl.col("_call_stack").str.replace_all(r"\r?\n", "")
    events = events.with_columns(
        pl.when(text.str.strip_chars(" ;").str.len_chars() > 0).then(text).alias("_cs")
    )
    uniq = events.get_column("_cs").drop_nulls().unique(maintain_order=True)
    if uniq.len() == 0:
        return S.empty("stacks"), events.with_columns(pl.lit(None, pl.Int64).alias("stack_id"))
    stacks = parse_stacks(uniq)
    ids = (
        pl.DataFrame({"_cs": uniq})
        .with_row_index("stack_id")
        .with_columns(pl.col("stack_id").cast(pl.Int64))
    )
    events = events.drop("stack_id", strict=False).join(ids, on="_cs", how="left")
    return stacks, events.sort("id")


def _kernel_metrics(events: pl.DataFrame, kernels: pl.DataFrame | None) -> pl.DataFrame:
    if kernels is None or "_krow" not in events.columns:
        return S.empty("kernel_metrics")
    metric_cols = [
        c for c in kernels.columns if c not in _KERNEL_DESCRIPTIVE and not c.startswith("_")
    ]
    if not metric_cols:
        return S.empty("kernel_metrics")
    ids = events.filter(pl.col("_krow").is_not_null()).select(
        pl.col("id").alias("event_id"), "_krow"
    )
    long = (
        kernels.select("_krow", *[pl.col(c).cast(pl.Float64, strict=False) for c in metric_cols])
        .unpivot(index="_krow", variable_name="metric", value_name="value")
        .filter(pl.col("value").is_not_null())
    )
    return (
        long.join(ids, on="_krow", how="inner")
        .select("event_id", "metric", "value")
        .sort("event_id", maintain_order=True)
    )


# ---------------------------------------------------------------------------------------------
# Steps, memory, info


def _read_steps(
    path: Path, events: pl.DataFrame, odd: Counter[str], read: list[str]
) -> pl.DataFrame:
    if not path.is_file():
        return _steps_from_frame(None, events)
    df = read_csv(path, odd)
    read.append(path.name)
    return _steps_from_frame(df, events)


def _steps_from_frame(df: pl.DataFrame | None, events: pl.DataFrame) -> pl.DataFrame:
    """Steps from a step_trace_time table (strings, the CSV's columns; None: from the events)."""
    marks = (
        events.filter(pl.col("kind") == "step")
        .select(
            pl.col("name").str.extract(r"#(\d+)").cast(pl.Int32, strict=False).alias("step"),
            "ts_ns",
            "dur_ns",
        )
        .unique("step", keep="first")
    )
    dev = (
        events.filter(pl.col("device").is_not_null() & pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            pl.col("ts_ns").min().alias("_dts"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("_dend"),
        )
    )
    if df is None:
        if marks.height:
            return marks.sort("step")
        return dev.select(
            "step",
            pl.col("_dts").alias("ts_ns"),
            (pl.col("_dend") - pl.col("_dts")).alias("dur_ns"),
        ).sort("step")
    if "Step" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("Step"))
    ms = pl.Float64
    b = df.select(
        pl.col("Step").str.extract(r"(\d+)$").cast(pl.Int32, strict=False).alias("step"),
        _us_float_to_ns(_col(df, "Computing").cast(ms, strict=False)).alias("computing_ns"),
        _us_float_to_ns(_col(df, "Communication").cast(ms, strict=False)).alias("communication_ns"),
        _us_float_to_ns(_col(df, "Communication(Not Overlapped)").cast(ms, strict=False)).alias(
            "communication_not_overlapped_ns"
        ),
        _us_float_to_ns(_col(df, "Free").cast(ms, strict=False)).alias("free_ns"),
        _us_float_to_ns(_col(df, "Stage").cast(ms, strict=False)).alias("_stage"),
    )
    out = b.join(marks, on="step", how="left").join(dev, on="step", how="left")
    return out.with_columns(
        pl.coalesce("ts_ns", "_dts").alias("ts_ns"),
        pl.coalesce("dur_ns", "_stage", pl.col("_dend") - pl.col("_dts")).alias("dur_ns"),
    ).select([c for c in S.STEPS if c != "rank"])


def _read_memory(
    out: Path, device: int, odd: Counter[str], read: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    del device
    frames: list[pl.DataFrame | None] = []
    for name in ("operator_memory.csv", "memory_record.csv"):
        f = out / name
        frames.append(read_csv(f, odd) if f.is_file() else None)
        if f.is_file():
            read.append(name)
    return _memory_from_frames(frames[0], frames[1])


def _memory_from_frames(
    om_df: pl.DataFrame | None, mr_df: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Memory rows and allocator counters from operator_memory / memory_record tables
    (strings, the CSVs' columns); either may be None."""
    mib = 1024 * 1024
    memory = S.empty("memory").drop("rank")
    counters = S.empty("counters").drop("rank")
    if om_df is not None:
        df = om_df
        if "Size(KB)" in df.columns and "Allocation Time(us)" in df.columns:
            size = (
                (pl.col("Size(KB)").cast(pl.Float64, strict=False) * 1024).round(0).cast(pl.Int64)
            )
            dev = _col(df, "Device Type").str.extract(r"(\d+)$").cast(pl.Int32, strict=False)

            def mb(c: str) -> pl.Expr:
                return (_col(df, c).cast(pl.Float64, strict=False) * mib).round(0).cast(pl.Int64)

            alloc = df.select(
                us_text_to_ns(pl.col("Allocation Time(us)")).alias("ts_ns"),
                size.alias("bytes"),
                mb("Allocation Total Allocated(MB)").alias("total_allocated"),
                mb("Allocation Total Reserved(MB)").alias("total_reserved"),
                dev.alias("device"),
            )
            free = df.select(
                us_text_to_ns(_col(df, "Release Time(us)")).alias("ts_ns"),
                (-size).alias("bytes"),
                mb("Release Total Allocated(MB)").alias("total_allocated"),
                mb("Release Total Reserved(MB)").alias("total_reserved"),
                dev.alias("device"),
            ).filter(pl.col("ts_ns").is_not_null())
            memory = (
                pl.concat([alloc, free])
                .filter(pl.col("ts_ns").is_not_null())
                .with_columns(pl.lit(20, pl.Int32).alias("device_type"))
                .sort("ts_ns")
            )
    if mr_df is not None:
        df = mr_df
        if "Timestamp(us)" in df.columns:
            comp = _col(df, "Component").fill_null("memory")
            longs = []
            for col, label in (
                ("Total Allocated(MB)", "allocated"),
                ("Total Reserved(MB)", "reserved"),
                ("Total Active(MB)", "active"),
            ):
                if col not in df.columns:
                    continue
                longs.append(
                    df.select(
                        (pl.lit("memory_record/") + comp + pl.lit(f" {label} bytes")).alias("name"),
                        us_text_to_ns(pl.col("Timestamp(us)")).alias("ts_ns"),
                        (pl.col(col).cast(pl.Float64, strict=False) * mib).alias("value"),
                    ).filter(pl.col("value").is_not_null() & pl.col("ts_ns").is_not_null())
                )
            if longs:
                counters = pl.concat(longs)
    return memory, counters


def _memory_links(memory: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Step of each allocation: the ProfilerStep slice holding its timestamp."""
    steps = (
        events.filter(pl.col("kind") == "step")
        .select(
            pl.col("ts_ns").alias("_sts"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("_send"),
            pl.col("step").alias("_step"),
        )
        .sort("_sts")
    )
    if memory.height == 0 or steps.height == 0:
        return memory
    m = memory.with_row_index("_r").sort("ts_ns")
    m = m.join_asof(steps, left_on="ts_ns", right_on="_sts", strategy="backward")
    m = m.with_columns(
        pl.when(pl.col("ts_ns") < pl.col("_send")).then(pl.col("_step")).alias("step")
    )
    return m.sort("_r").drop("_r", "_sts", "_send", "_step")


def _profiler_info(out: Path) -> dict[str, Any]:
    root = out.parent if out.name == OUTPUT_DIR else out
    info: dict[str, Any] = {}
    for f in sorted(root.glob("profiler_info*.json")):
        data = _load_json(f)
        info["profiler_info"] = {k: v for k, v in data.items() if k != "ENV_VARIABLES"}
        break
    md = root / "profiler_metadata.json"
    if md.is_file():
        try:
            data = _load_json(md)
        except InputError:
            data = {}
        # Environment variables can hold secrets: never kept.
        info["profiler_metadata"] = {k: v for k, v in data.items() if k != "ENV_VARIABLES"}
    # The job's world size, where the metadata says it, in the header key Kineto traces use
    # (doctor's missing-rank check and the summary read it there).
    from opscope.ingest import ascend_comm

    try:
        world = ascend_comm.world_size(root)
    except InputError:
        world = None  # an unreadable metadata file is already ignored above
    if world is not None:
        info["distributedInfo"] = {"world_size": world, "rank": rank_of(root)}
    return info


def _level(info: dict[str, Any]) -> str | None:
    exp = info.get("profiler_info", {}).get("config", {}).get("experimental_config", {})
    lvl = exp.get("_profiler_level") if isinstance(exp, dict) else None
    return lvl if isinstance(lvl, str) else None
