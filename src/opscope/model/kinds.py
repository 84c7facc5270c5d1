"""The one definition of device-activity kinds and of what is communication.

Every reader, linker step, analysis and renderer that asks "is this device activity?" uses one of
the named subsets below instead of its own list (there were a dozen lists with four different
memberships). The subsets nest::

    DEVICE_KINDS  ⊃  DEVICE_WORK  ⊃  LOCAL_WORK  ⊃  COMPUTE_KINDS
                                                ⊃  COPY_KINDS

- :data:`DEVICE_KINDS`: everything that sits on a device stream, ``gpu_annotation`` included.
  Use it to tell device rows from host rows (nesting tracks, device/stream columns, "host-only"
  filters, the timeline's device lanes).
- :data:`DEVICE_WORK`: device activity that occupies a stream: kernels, copies, fills and
  communication. ``gpu_annotation`` is left out because it is a ``record_function`` range
  projected over work already counted (its kernels), so adding it to busy time, kernel hotspots
  or gap searches would count the same nanoseconds twice.
- :data:`LOCAL_WORK`: device work that involves this device only (``DEVICE_WORK`` less
  communication). Roofline and per-operator cost models use it: a collective's time is set by
  the network and its peers, not by the FLOPs and bytes of the launching op.
- :data:`COMPUTE_KINDS`: compute kernels only (occupancy, launch-configuration rules).
- :data:`COPY_KINDS`: copies and fills.

Communication (:data:`COMMUNICATION`) is decided once, at load time, and ``kind ==
"communication"`` is the only test downstream. A device kernel is communication when its name
matches :data:`COMM_KERNEL_PATTERN` (NCCL/RCCL/MSCCL, HCCL/hcom, DeepEP dispatch/combine,
NVSHMEM, torch symmetric-memory and vLLM custom all-reduce kernels, and whole-word collective
names) or when the host op that launched it is a collective (:data:`COMM_OP_PATTERN`:
``record_param_comms``, ``c10d::*``, ``nccl:*``, ``hccl*``). Ascend tasks go by their core type
(:data:`COMM_CORE_TYPES`). Elementwise kernels whose names say ``broadcast`` (a tensor broadcast,
e.g. ``BinaryOp broadcast multiply``) are compute: ``broadcast`` alone is never a pattern.
"""

from __future__ import annotations

from typing import Final

import polars as pl

COMMUNICATION: Final = "communication"

#: Every kind that sits on a device stream (host rows are the other kinds).
DEVICE_KINDS: Final = ("kernel", "memcpy", "memset", COMMUNICATION, "gpu_annotation")
#: Device activity that occupies a stream: busy time, gaps, kernel hotspots, device totals.
DEVICE_WORK: Final = ("kernel", "memcpy", "memset", COMMUNICATION)
#: Device work on this device alone (no peers): roofline and per-op cost models.
LOCAL_WORK: Final = ("kernel", "memcpy", "memset")
#: Compute kernels.
COMPUTE_KINDS: Final = ("kernel",)
#: Device copies and fills.
COPY_KINDS: Final = ("memcpy", "memset")

#: Kernel names that are communication (case-insensitive, searched anywhere in the name).
#: ``\b`` treats ``_`` as a word character, so the generic collective words match only as whole
#: tokens (``vllm::all_reduce``, ``AllGather(``), never inside ``foo_all_reduce_bar``; the named
#: libraries' kernels are listed on their own.
COMM_KERNEL_PATTERN: Final = (
    r"(?i)"
    r"\b(?:nccl|rccl|msccl)"  # ncclKernel_*, ncclDevKernel_* (NCCL and RCCL), mscclKernel_*
    r"|\bhccl|\bhcom_"  # Ascend HCCL: hcom_allReduce__586_0_1, HcclAllReduce
    r"|\b(?:dpsk::ep|deep_ep)::(?:intranode|internode|internode_ll)::"  # DeepEP dispatch/combine
    r"|\bnvshmem"  # nvshmem_*, nvshmemi_* device kernels
    r"|multimem_\w*(?:reduce|gather)"  # torch symmetric memory: multimem_all_reduce_kernel
    r"|\b(?:one|two)_shot_\w*(?:reduce|gather)"  # torch symm mem one_shot_all_reduce_kernel
    r"|symm_mem|symmetric_memory"  # torch symmetric-memory namespaces
    r"|cross_device_reduce"  # vLLM / sglang custom all-reduce (cross_device_reduce_1stage)
    r"|\b(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)\b"
)
#: Host ops / annotations whose launches are communication.
COMM_OP_PATTERN: Final = r"^(?:record_param_comms$|c10d::|nccl:|hccl)"
#: Ascend core / task types of collectives (kernel_details "Accelerator Core", trace task type).
COMM_CORE_TYPES: Final = ("HCCL", "COMMUNICATION")


def is_comm_kernel_name(name: pl.Expr) -> pl.Expr:
    """True where a kernel name is a communication kernel (nulls: False)."""
    return name.str.contains(COMM_KERNEL_PATTERN).fill_null(False)


def is_comm_op_name(name: pl.Expr) -> pl.Expr:
    """True where a host op / annotation name launches communication (nulls: False)."""
    return name.str.contains(COMM_OP_PATTERN).fill_null(False)
