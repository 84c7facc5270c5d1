"""Ctrl-C held back while the profiler changes state, and delivered right after.

A KeyboardInterrupt raised in the middle of torch's profiler start, stop or trace export (its
Python code runs between the C++ calls) left Kineto half-stopped, and the stop that followed
crashed the process (SIGSEGV) instead of writing the completed steps. The gate's handler is
installed once per recording rather than swapped around every profiler step: under
``with_stack=True`` each Python call of a swap (``signal.signal`` and its enum conversions) is
itself traced: most of the ~90 µs a profiled step cost over a plain torch.profiler. Outside a
held block the handler does what Python's default does: raise KeyboardInterrupt. Only the main
thread can set signal handlers; elsewhere, or when the script has its own SIGINT handler, nothing
is installed or changed.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType


class SigintGate:
    """``arm()`` / ``disarm()`` (counted: nested recordings share one handler); ``with gate:``."""

    def __init__(self) -> None:
        self._arms = 0
        self._installed = False
        self._held = 0
        self._pending = False

    def arm(self) -> None:
        """Install the handler if SIGINT has Python's default one (main thread only)."""
        self._arms += 1
        if self._arms > 1 or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._handler)
            self._installed = True

    def disarm(self) -> None:
        """Undo the matching ``arm()``; the last one puts Python's default handler back."""
        self._arms = max(self._arms - 1, 0)
        if self._arms or not self._installed:
            return
        self._installed = False
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) == self._handler
        ):
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._held:
            self._pending = True
            return
        raise KeyboardInterrupt

    def __enter__(self) -> None:
        self._held += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._held -= 1
        if not self._held and self._pending:
            self._pending = False
            if exc_type is None:
                raise KeyboardInterrupt


GATE = SigintGate()
"""The process's gate: recorders arm it at start and disarm it at stop."""
