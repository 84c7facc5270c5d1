"""What the golden tests (figures recomputed from the raw JSON) share: the traces they sweep,
the Kineto categories they sort events by, and Kineto's µs → ns reading."""

from __future__ import annotations

import math
from pathlib import Path

from conftest import shared_trace

GOLDEN = [
    "gpu/hta_alexnet_a100_cuda_sync.json.gz",
    "gpu/hta_nccl_a100_rank0of2.json.gz",
    "multi_rank/hta_sampled_128rank_job",
    "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",
]
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver"}


def ns(us: float) -> int:
    """µs to ns as Kineto writes them (at most ns digits after the point)."""
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


def golden_files(rel: str) -> list[Path]:
    """The trace files of one GOLDEN entry: the file, or a folder's ``*.json.gz`` sorted;
    skips when the shared trace is absent."""
    p = shared_trace(rel)
    return sorted(p.glob("*.json.gz")) if p.is_dir() else [p]
