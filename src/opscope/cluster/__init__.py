"""Run the cluster analysis over a multi-rank directory with a local process pool or Ray."""

from __future__ import annotations

from opscope.cluster.engine import ENGINES, rank_summary, run_cluster

__all__ = ["ENGINES", "rank_summary", "run_cluster"]
