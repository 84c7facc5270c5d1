"""The timeline viewer: a local web app over one cached Profile (``opscope view``)."""

from __future__ import annotations

from opscope.report.viewer.links import DEFAULT_PORT
from opscope.report.viewer.overlays import default_overlays, report_overlays
from opscope.report.viewer.query import TimelineIndex
from opscope.report.viewer.server import ViewerServer, make_server

__all__ = [
    "DEFAULT_PORT",
    "TimelineIndex",
    "ViewerServer",
    "default_overlays",
    "make_server",
    "report_overlays",
]
