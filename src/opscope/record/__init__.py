"""Recording: the only layer that imports torch (lazily).

- :func:`profile` / :func:`step` — the Python API (:mod:`opscope.record.api`)
- :func:`record_callable` / :func:`run_target` — what ``opscope record`` runs
  (:mod:`opscope.record.launcher`)
- :mod:`opscope.record.callbacks` — Lightning and Hugging Face callbacks

Importing this package does not import torch; torch is imported when recording starts.
"""

from __future__ import annotations

from opscope.record.api import RecordSettings, RunResult, profile, step
from opscope.record.launcher import record_callable

__all__ = ["RecordSettings", "RunResult", "profile", "record_callable", "step"]
