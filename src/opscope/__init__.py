"""opscope: find out why a PyTorch model runs slower than it should, and prove the fix.

The public API is imported lazily so that ``import opscope`` stays cheap and never imports torch:

- :func:`opscope.load` — read a trace, an Ascend directory or a run directory into a Profile
- :class:`opscope.Profile` — the columnar model
- :func:`opscope.profile` / :func:`opscope.step` — record (needs torch)
- :class:`opscope.Analyzer` — run the analyses, get a Report
- :func:`opscope.compare` — before/after comparison
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

__version__ = "0.1.0"

JEMALLOC_ENV = "_RJEM_MALLOC_CONF"
JEMALLOC_CONF = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
# Polars' allocator (jemalloc) hands freed pages back to the system after 0.5 s by default; a
# load frees and reallocates large column buffers for every window and segment, and paid for
# each round trip in page faults and system time (3 GB out-of-core: 4.82M -> 2.16M faults,
# 13.3 -> 6.3 s of system time with 5 s; the in-memory load's peak +0.1-0.25 GB). It is read once,
# when Polars' library starts, so it is set only when Polars is not loaded yet and only when the
# user has not set it.
if "polars" not in sys.modules:
    os.environ.setdefault(JEMALLOC_ENV, JEMALLOC_CONF)

_EXPORTS = {
    "load": "opscope.ingest",
    "Profile": "opscope.model",
    "OpscopeError": "opscope.errors",
    "profile": "opscope.record",
    "step": "opscope.record",
    "Analyzer": "opscope.analysis",
    "Report": "opscope.analysis",
    "compare": "opscope.analysis.compare",
    "diagnose": "opscope.doctor",
    "trend": "opscope.trend",
}

__all__ = [
    "Analyzer",
    "OpscopeError",
    "Profile",
    "Report",
    "__version__",
    "compare",
    "diagnose",
    "load",
    "profile",
    "step",
    "trend",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opscope' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
