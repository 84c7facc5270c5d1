"""The timeline viewer: a local web app over one cached Profile (``opscope view``)."""

from __future__ import annotations

from opscope.report.viewer.query import TimelineIndex, default_overlays
from opscope.report.viewer.server import ViewerServer, make_server

__all__ = ["TimelineIndex", "ViewerServer", "default_overlays", "make_server"]
