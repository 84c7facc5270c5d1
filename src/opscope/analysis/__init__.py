"""Analyses: pure functions ``Profile -> Result``, registered by name.

Importing this package registers the built-in analyses. ``Analyzer(path).generate_report()``
runs them all and returns a :class:`Report`.
"""

import contextlib
import importlib

from opscope.analysis import anomalies, attribution, breakdown, hotspots, memory
from opscope.analysis.report import Analyzer, Report, Section

# Analyses owned by other modules register on import; one still missing must not break the rest.
for _mod in ("roofline", "occupancy", "critical_path", "cluster"):
    with contextlib.suppress(ImportError):
        importlib.import_module(f"opscope.analysis.{_mod}")

__all__ = [
    "Analyzer",
    "Report",
    "Section",
    "anomalies",
    "attribution",
    "breakdown",
    "hotspots",
    "memory",
]
