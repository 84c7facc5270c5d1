"""Errors a user can cause. Each carries the file and the reason; the CLI prints one line, exit 2.

Tracebacks are for bugs: anything that is not an :class:`OpscopeError` reaching the CLI is one.
"""

from __future__ import annotations

import os


class OpscopeError(Exception):
    """Base of every user-facing error. ``str(err)`` is the one line the CLI prints."""

    exit_code: int = 2

    def __init__(self, reason: str, path: str | os.PathLike[str] | None = None) -> None:
        self.reason = reason
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {reason}" if self.path else reason)


class InputError(OpscopeError):
    """The input cannot be read as any supported profile (garbage, empty, wrong format)."""


class TruncatedTraceError(InputError):
    """A trace ends before its JSON does (a killed writer). ``--salvage`` can recover events."""


class CorruptArchiveError(InputError):
    """A compressed input is corrupt, or decompresses beyond the size bound."""


class UnsupportedFormatError(InputError):
    """The path exists but no reader recognises it."""


class RecordError(OpscopeError):
    """Recording cannot start: script missing, module not importable, output not writable."""


class AnalysisError(OpscopeError):
    """An analysis cannot run on this profile (e.g. compare with no common operators)."""


class StoreError(OpscopeError):
    """The run store cannot be opened or written."""


class GateFailed(OpscopeError):
    """A CI gate (``--fail-if-slower``) tripped. Exit code 1, not 2: the input was fine."""

    exit_code = 1
