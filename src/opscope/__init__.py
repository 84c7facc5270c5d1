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
from typing import Any

__version__ = "0.1.0"

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
