"""Rules that turn a profile (and analysis results) into findings, and their on-device
verification.

- :func:`advise` runs every rule and returns :class:`Findings` sorted by saving
- :func:`opscope.advise.verify.verify` measures each finding's fix on the present device
- :func:`sweep_matmul` times a matmul shape and its variants
"""

from __future__ import annotations

from typing import Any

import opscope.advise.rules as _rule_modules  # noqa: F401
from opscope.advise.finding import REPORT_KEYS, Finding
from opscope.advise.rule import Findings, Rule, advise, register, rules

# ``rules`` names both the function (bound just above) and the subpackage of rule modules: the
# first import of the subpackage sets this package's attribute to it, so it is imported first,
# here, and the function bound after it; later imports of its modules leave the name alone.

__all__ = [
    "REPORT_KEYS",
    "Finding",
    "Findings",
    "Rule",
    "advise",
    "register",
    "rules",
    "sweep_linear",
    "sweep_matmul",
]


def __getattr__(name: str) -> Any:
    # sweep imports torch lazily at call time; keep it out of `import opscope.advise`.
    if name in ("sweep_matmul", "sweep_linear"):
        from opscope.advise import sweep as s

        return getattr(s, name)
    raise AttributeError(name)
