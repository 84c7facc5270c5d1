"""The real Kineto traces of the shared folder, as parameters for tests that sweep them all."""

from __future__ import annotations

from conftest import SHARED_TRACES


def kineto_shared_traces() -> list[str]:
    """Paths, relative to the shared folder, of its Kineto JSON traces (gpu/, compare/,
    multi_rank/; hidden folders left out), sorted.

    ``["(none)"]`` when the folder is absent, so a test parametrized on it still has one case,
    which ``conftest.shared_trace`` skips.
    """
    found = sorted(
        str(p.relative_to(SHARED_TRACES))
        for sub in ("gpu", "compare", "multi_rank")
        for p in (SHARED_TRACES / sub).glob("**/*.json*")
        if SHARED_TRACES.is_dir() and not any(part.startswith(".") for part in p.parts)
    )
    return found or ["(none)"]
