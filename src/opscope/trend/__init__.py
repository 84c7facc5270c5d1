"""Performance over time: the trend of one run (:func:`trend`) and the run store (:mod:`.store`)."""

from __future__ import annotations

from opscope.trend.series import Trend, trend

__all__ = ["Trend", "trend"]
