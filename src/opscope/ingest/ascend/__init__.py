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

Modules (this package re-exports the names other readers use):

- :mod:`.layout`: finding a rank's files, its rank id and device, the profiler's info;
- :mod:`.convert`: text values -> columns (exact ns, shapes and dtypes as JSON);
- :mod:`.csvfile`: tolerant CSV reading;
- :mod:`.trace_view`: decoding (and salvaging) ``trace_view.json``;
- :mod:`.trace_events`: trace records -> raw events, flow records, track names;
- :mod:`.counters`: the trace's counter records;
- :mod:`.kernels`: ``kernel_details.csv``, its rows as events matched to their trace tasks, its
  hardware metrics;
- :mod:`.assemble`: all of it -> raw events (ids in time order) and raw flow records, HCCL lanes;
- :mod:`.linking`: the raw tables through the shared linker (:mod:`opscope.ingest.link`);
- :mod:`.steps`, :mod:`.memory`: the steps table, allocations and allocator counters;
- :mod:`.reader`: one rank -> :class:`~opscope.model.Profile`.
"""

from __future__ import annotations

from opscope.ingest.ascend.assemble import HCCL_LANE_TID, _assemble
from opscope.ingest.ascend.convert import _NULLS, _STRIP, us_text_to_ns
from opscope.ingest.ascend.csvfile import read_csv
from opscope.ingest.ascend.kernels import _kernel_metrics
from opscope.ingest.ascend.layout import (
    _PARTIAL_FILES,
    _RANK_FILES,
    CACHE_MIN_BYTES,
    OUTPUT_DIR,
    _level,
    _profiler_info,
    cache_anchor,
    find_output_dir,
    is_ascend_dir,
    rank_of,
)
from opscope.ingest.ascend.linking import _link
from opscope.ingest.ascend.memory import _memory_from_frames, _memory_links
from opscope.ingest.ascend.reader import rank_profile, read_ascend, read_communication
from opscope.ingest.ascend.steps import _steps_from_frame
from opscope.ingest.ascend.trace_view import _TRACE_SCHEMA

# The database reader (ascend_db) and the partial-output reader (ascend_comm) share the
# assembly, steps, memory and info helpers through these names.
__all__ = [
    "CACHE_MIN_BYTES",
    "HCCL_LANE_TID",
    "OUTPUT_DIR",
    "_NULLS",
    "_PARTIAL_FILES",
    "_RANK_FILES",
    "_STRIP",
    "_TRACE_SCHEMA",
    "_assemble",
    "_kernel_metrics",
    "_level",
    "_link",
    "_memory_from_frames",
    "_memory_links",
    "_profiler_info",
    "_steps_from_frame",
    "cache_anchor",
    "find_output_dir",
    "is_ascend_dir",
    "rank_of",
    "rank_profile",
    "read_ascend",
    "read_communication",
    "read_csv",
    "us_text_to_ns",
]
