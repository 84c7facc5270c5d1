"""``opscope doctor``: what is wrong with a profile before anyone trusts its numbers.

:func:`diagnose` runs pure checks over a loaded :class:`~opscope.model.Profile` (or loads a path
first) and returns a :class:`Diagnosis`: one :class:`Check` per question (incomplete data,
missing stacks / shapes / memory, unstable timings), each with a status, the evidence and what
to do. :func:`doctor_warnings` gives the one-line warnings the report shows at its top.
"""

from __future__ import annotations

from opscope.doctor.checks import (
    KNOWN_VERSION_ISSUES,
    Check,
    Diagnosis,
    diagnose,
    doctor_warnings,
)

__all__ = ["KNOWN_VERSION_ISSUES", "Check", "Diagnosis", "diagnose", "doctor_warnings"]
