"""Analyses: pure functions ``Profile -> Result``, registered by name.

Importing this package registers the built-in analyses. ``Analyzer(path).generate_report()``
runs them all and returns a :class:`Report`.
"""

from opscope.analysis import (
    anomalies,
    attribution,
    breakdown,
    cluster,
    critical_path,
    hotspots,
    memory,
    occupancy,
    roofline,
)
from opscope.analysis.assemble import Analyzer, Report, Section

__all__ = [
    "Analyzer",
    "Report",
    "Section",
    "anomalies",
    "attribution",
    "breakdown",
    "cluster",
    "critical_path",
    "hotspots",
    "memory",
    "occupancy",
    "roofline",
]
