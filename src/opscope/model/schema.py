"""The one declaration of every table a :class:`~opscope.model.Profile` holds.

Every column has one name everywhere: readers fill these columns, analyses read them, the JSON
output and the viewer's API use the same names. Time is integer nanoseconds (``*_ns``), converted
once at the reader's edge. Ids are ``Int64`` row ids local to one Profile; a missing link is null.

Adding a column: add it here (with its dtype and a comment), bump :data:`SCHEMA_VERSION` so that
caches written before it are rebuilt, and fill it in the readers that know it. Readers that do not
know a column leave it null: :func:`conform` adds missing columns for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import polars as pl

from opscope.model import kinds

# 2: NCCL/RCCL/HCCL/DeepEP... kernels are stored with kind "communication" (they were "kernel"),
#    Ascend HCCL per-plane sub-tasks with kind "other" (they were "communication").
# 3: Ascend tracks named "PROCESS · THREAD" from the trace's metadata, HCCL ops on the
#    communication lanes, communication events of partial-output ranks; database exports.
# 4: Ascend flows bound by the shared linker (a HostToDevice start inside a CANN call binds to
#    it; ids past 64 bits kept apart); Kineto host tracks named "PROCESS · THREAD".
# 5: device work queued before profiling has no step; Ascend .db HBM/LLC counters and Overlap
#    Analysis tracks; the Ascend reader through the shared linker; negative sequence numbers
#    are none.
SCHEMA_VERSION: Final = 5

# What a row of ``events`` is. One table holds host and device slices alike, so that nesting,
# step assignment and the timeline treat them the same way (Perfetto's ``slice`` table).
EVENT_KINDS: Final = (
    "cpu_op",  # aten / torch operator on a host thread (Kineto cpu_op, 2021 Operator, Ascend op)
    "python_function",  # a Python frame (with_stack): name "file.py(12): func" or "nn.Module: X"
    "user_annotation",  # record_function ranges on the host, other than steps
    "step",  # ProfilerStep#N on the host
    "runtime",  # cudaLaunchKernel, hipMemcpy, aclrtLaunch... (cuda_runtime / Runtime)
    "driver",  # cuLaunchKernel... (cuda_driver)
    "kernel",  # a device kernel (kernel / Kernel / Ascend kernel_details row)
    "memcpy",  # a device copy (gpu_memcpy / Memcpy)
    "memset",  # a device fill (gpu_memset / Memset)
    "gpu_annotation",  # gpu_user_annotation: a record_function range projected on a stream
    "communication",  # a collective / p2p kernel on the device (see kinds.py: which ones)
    "other",  # anything else with a duration, kept for the timeline
)
EventKind = pl.Enum(list(EVENT_KINDS))

# The device-activity subsets and the communication classifier are declared once, in kinds.py
# (which says why each subset differs); the subsets are repeated here for schema users.
DEVICE_KINDS: Final = kinds.DEVICE_KINDS
DEVICE_WORK: Final = kinds.DEVICE_WORK
LOCAL_WORK: Final = kinds.LOCAL_WORK
COMPUTE_KINDS: Final = kinds.COMPUTE_KINDS
COPY_KINDS: Final = kinds.COPY_KINDS
COMMUNICATION: Final = kinds.COMMUNICATION
HOST_KINDS: Final = tuple(k for k in EVENT_KINDS if k not in DEVICE_KINDS)

FLOW_KINDS: Final = ("ac2g", "fwdbwd", "async_npu", "other")
FlowKind = pl.Enum(list(FLOW_KINDS))

TableSchema = Mapping[str, pl.DataType | type[pl.DataType]]

# Slices: every event with a start and a duration, on a host thread or a device stream.
EVENTS: Final[TableSchema] = {
    "id": pl.Int64,  # row id, 0..n-1, stable for the life of the Profile (and its cache)
    "rank": pl.Int32,  # distributed rank; 0 for a single-process trace
    "kind": EventKind,
    "name": pl.String,
    "pid": pl.Int64,  # process id; device events: device index (Kineto puts it in pid)
    "tid": pl.Int64,  # thread id; device events: stream id ("stream 7" -> 7)
    "ts_ns": pl.Int64,  # start, ns since the trace's own epoch (Kineto ts * 1000, rounded)
    "dur_ns": pl.Int64,  # duration in ns (>= 0; negative input is clamped and counted)
    "device": pl.Int32,  # device index for device events, null on the host
    "stream": pl.Int64,  # device stream for device events, null on the host
    "external_id": pl.Int64,  # Kineto "External id" (op <-> kernel fallback link)
    "correlation": pl.Int64,  # launch <-> kernel correlation id
    "seq": pl.Int64,  # autograd "Sequence number"
    "fwd_tid": pl.Int64,  # "Fwd thread id" on backward ops
    "flops": pl.Int64,  # torch's own with_flops estimate, when present
    "input_dims": pl.String,  # compact JSON of "Input Dims", e.g. "[[256,1024],[1024,256]]"
    "input_types": pl.String,  # compact JSON of "Input type", e.g. '["float","float"]'
    "input_strides": pl.String,  # compact JSON of "Input Strides"
    "concrete_inputs": pl.String,  # compact JSON of "Concrete Inputs"
    "bytes": pl.Int64,  # memcpy / memset size
    "grid": pl.String,  # kernel grid "[x,y,z]"
    "block": pl.String,  # kernel block "[x,y,z]"
    "blocks": pl.Int64,  # grid size in blocks (product of grid) / Ascend "Block Num"
    "registers": pl.Int32,  # registers per thread
    "shared_mem": pl.Int64,  # shared memory per block (bytes)
    "occupancy": pl.Float64,  # "est. achieved occupancy %"
    "python_id": pl.Int64,  # "Python id" of python_function events
    "python_parent_id": pl.Int64,  # "Python parent id"
    "args": pl.String,  # the remaining args as compact JSON, for details views
    # Links, filled once by the linker:
    "parent_id": pl.Int64,  # enclosing event on the same thread / stream (nesting)
    "depth": pl.Int32,  # nesting depth, 0 at the top of its thread
    "step": pl.Int32,  # ProfilerStep number this event falls in (device: via its launching op)
    "launch_id": pl.Int64,  # kernel -> the runtime/driver event that launched it
    "op_id": pl.Int64,  # kernel / runtime -> innermost cpu_op that issued it
    "fwd_id": pl.Int64,  # backward op -> the forward op it differentiates
    "stack_id": pl.Int64,  # op -> innermost stack entry (see ``stacks``)
    "module": pl.String,  # nn.Module path, e.g. "VisionModel/Sequential_0/Linear_11"
    "is_backward": pl.Boolean,  # op runs in the autograd engine (or is a kernel of such an op)
    "op_type": pl.String,  # Ascend kernel_details "Type" (e.g. "MatMulV2"), null elsewhere
    "core_type": pl.String,  # Ascend "Accelerator Core" (AI_CORE, AI_VECTOR_CORE, HCCL...)
}

# Flows as recorded (s/f pairs), resolved to event ids.
FLOWS: Final[TableSchema] = {
    "rank": pl.Int32,
    "kind": FlowKind,
    "flow_id": pl.Int64,  # the trace's own flow id
    "src_id": pl.Int64,  # event id at the start of the arrow
    "dst_id": pl.Int64,  # event id at the end of the arrow
}

# Call stacks, interned: one row per frame of each distinct stack, innermost first.
# An event's stack_id selects the rows with that stack_id, ordered by ``depth``.
STACKS: Final[TableSchema] = {
    "stack_id": pl.Int64,
    "depth": pl.Int32,  # 0 = innermost frame
    "file": pl.String,
    "line": pl.Int32,
    "function": pl.String,
    "is_user": pl.Boolean,  # not torch / stdlib / site-packages: the user's own code
}

# Allocator events ([memory] instants, Ascend memory_record / operator_memory).
MEMORY: Final[TableSchema] = {
    "rank": pl.Int32,
    "ts_ns": pl.Int64,
    "bytes": pl.Int64,  # signed: > 0 allocation, < 0 free
    "addr": pl.Int64,
    "total_allocated": pl.Int64,
    "total_reserved": pl.Int64,
    "device_type": pl.Int32,  # Kineto: 0 CPU, 1 CUDA, ...
    "device": pl.Int32,
    "op_id": pl.Int64,  # innermost op enclosing the allocation on its thread
    "step": pl.Int32,
}

# Sampled values (memory curves, Ascend AI Core Freq, ...).
COUNTERS: Final[TableSchema] = {
    "rank": pl.Int32,
    "name": pl.String,
    "ts_ns": pl.Int64,
    "value": pl.Float64,
}

# One row per step per rank.
STEPS: Final[TableSchema] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "ts_ns": pl.Int64,
    "dur_ns": pl.Int64,
    # Ascend step_trace_time.csv breakdown, ns, when the source has it:
    "computing_ns": pl.Int64,
    "communication_ns": pl.Int64,
    "communication_not_overlapped_ns": pl.Int64,
    "free_ns": pl.Int64,
}

# Per-kernel hardware counters that only some sources have (Ascend PMU columns, Level1/2),
# long format so that every source's own names survive: ("aic_mac_ratio", 0.42).
KERNEL_METRICS: Final[TableSchema] = {
    "event_id": pl.Int64,
    "metric": pl.String,
    "value": pl.Float64,
}

DEVICES: Final[TableSchema] = {
    "rank": pl.Int32,
    "device": pl.Int32,
    "name": pl.String,  # "NVIDIA H100 80GB HBM3", "Ascend910B4", "cpu"
    "vendor": pl.String,  # "nvidia", "amd", "ascend", "cpu"
    "compute_units": pl.Int32,  # SMs / CUs / AI cores
    "memory_bytes": pl.Int64,
    "compute_capability": pl.String,
}

THREADS: Final[TableSchema] = {
    "rank": pl.Int32,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "name": pl.String,  # thread_name / process_name metadata, or "stream 7"
    "is_device": pl.Boolean,
}

# Step metrics of a recorded run (metrics.jsonl), profiled or not.
METRICS: Final[TableSchema] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "wall_ns": pl.Int64,
    "samples_per_s": pl.Float64,
    "mem_allocated_peak": pl.Int64,
    "mem_reserved_peak": pl.Int64,
    "profiled": pl.Boolean,
}

# Model structure of a recorded run (model.json).
MODULES: Final[TableSchema] = {
    "path": pl.String,
    "type": pl.String,
    "params": pl.Int64,
    "param_shapes": pl.String,  # compact JSON: {"weight": [256, 1024], "bias": [256]}
    "dtypes": pl.String,  # compact JSON list
    "contiguous": pl.Boolean,  # every parameter contiguous
}

TABLES: Final[Mapping[str, TableSchema]] = {
    "events": EVENTS,
    "flows": FLOWS,
    "stacks": STACKS,
    "memory": MEMORY,
    "counters": COUNTERS,
    "steps": STEPS,
    "kernel_metrics": KERNEL_METRICS,
    "devices": DEVICES,
    "threads": THREADS,
    "metrics": METRICS,
    "modules": MODULES,
}


def empty(table: str) -> pl.DataFrame:
    """An empty DataFrame with the declared columns of ``table``."""
    return pl.DataFrame(schema=dict(TABLES[table]))


def conform(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """Return ``df`` with exactly the declared columns of ``table``, in order, cast to their types.

    Missing columns are added as nulls; extra columns are an error (a column not declared here
    would have no agreed name).
    """
    schema = TABLES[table]
    extra = [c for c in df.columns if c not in schema]
    if extra:
        raise ValueError(f"table {table!r} has undeclared columns: {extra}")
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            col = df.get_column(name)
            cols.append(col if col.dtype == dtype else col.cast(dtype, strict=False))
        else:
            cols.append(pl.Series(name, [None] * df.height, dtype=dtype))
    return pl.DataFrame(cols) if cols else df
