"""A report's independent parts run on a few threads.

The analyses of one report, and the rules of one ``advise`` run, read the same immutable
Profile and share intermediates only through the per-profile memo (:func:`opscope.analysis.tree.
per_profile`), which computes each at most once even when two threads ask for it together. Most
of a part's time is spent in Polars and NumPy, which release the GIL, so a second thread runs
another part's Python while the first waits on a query: on two cores a report's wall time fell
by 10-25% on real traces (benchmarks/report_speed.py), its CPU time did not.

On a small profile the threads cost more than they give: each part's queries take
microseconds, and a thread whose query is done waits for the GIL while the other runs Python
(CPython hands it over only after its switch interval, 5 ms). A report of a 15-event Ascend rank
took 16 ms on two threads and 8.5 ms on one; one of 2.5k-5k events, 10% longer on two. Above
~20k events the threads win (a 75k-event trace: 165 ms against 200 ms), and between the two they
are even. So, unless ``$OPSCOPE_THREADS`` says otherwise, the parts of a report of a profile with
fewer than :data:`SERIAL_BELOW_EVENTS` events run in the calling thread
(:func:`sized_for`).

Results come back in the order the parts were given, so the report is the same, byte for byte,
whatever the number of threads. ``OPSCOPE_THREADS=1`` runs every part in the calling thread,
one after the other, as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

THREADS_ENV = "OPSCOPE_THREADS"
"""Threads a report's parts run on (default :data:`DEFAULT_THREADS`, at most the CPUs)."""

DEFAULT_THREADS = 2
"""More threads gain little: the parts' Python holds the GIL, and each thread's live
intermediates add to a large trace's peak memory."""


SERIAL_BELOW_EVENTS = 10_000
"""A profile with fewer events has its report's parts run in the calling thread (see the module
doc), unless ``$OPSCOPE_THREADS`` is set."""

_SMALL: ContextVar[bool] = ContextVar("opscope_small_profile", default=False)


@contextmanager
def sized_for(events: int) -> Iterator[None]:
    """Within this block, :func:`threads` is 1 when ``events`` (the profile's event count) is
    under :data:`SERIAL_BELOW_EVENTS` and ``$OPSCOPE_THREADS`` is not set."""
    token = _SMALL.set(_SMALL.get() or events < SERIAL_BELOW_EVENTS)
    try:
        yield
    finally:
        _SMALL.reset(token)


def threads() -> int:
    """How many threads a report's parts run on: ``$OPSCOPE_THREADS``, else 1 for a small
    profile (:func:`sized_for`), else the default; at most the CPUs this process may use, at
    least 1. A value that is not a whole number is ignored."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    try:
        wanted = int(raw) if raw else (1 if _SMALL.get() else DEFAULT_THREADS)
    except ValueError:
        wanted = 1 if _SMALL.get() else DEFAULT_THREADS
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cpus = os.cpu_count() or 1
    return max(1, min(wanted, cpus))


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one part gave: its value, or the exception it raised (``value`` is then ``None``)."""

    value: T | None
    error: Exception | None = None


def outcome_of(fn: Callable[[], T]) -> Outcome[T]:
    try:
        return Outcome(fn())
    except Exception as e:  # a part's failure is its caller's to record, not the others' end
        return Outcome(None, e)


def run_each(parts: Sequence[Callable[[], T]]) -> list[Outcome[T]]:
    """Run every part (a function of no arguments) and return their outcomes in the same order.

    Parts run on :func:`threads` threads; with one (or a single part) they run here, in order.
    An exception a part raises is its outcome, not raised: each caller records failures its own
    way (a report section, a rule's error). ``BaseException`` (``KeyboardInterrupt``) is not
    caught."""
    n = min(threads(), len(parts))
    if n <= 1:
        return [outcome_of(p) for p in parts]
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="opscope-part")
    try:
        return list(pool.map(outcome_of, parts))
    finally:
        # on Ctrl-C the parts not yet started are dropped, not run to the end first
        pool.shutdown(wait=True, cancel_futures=True)


class Background(Generic[T]):
    """Parts started on a thread of their own while the caller goes on with other work (the
    report's source view and doctor's checks, beside its analyses); :meth:`outcomes` waits for
    them. With one thread (:func:`threads`) nothing starts early: :meth:`outcomes` runs the
    parts then, in the calling thread, in order."""

    def __init__(self, parts: Sequence[Callable[[], T]]) -> None:
        self._parts = list(parts)
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list[Future[Outcome[T]]] = []
        if threads() > 1 and self._parts:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="opscope-side")
            self._futures = [self._pool.submit(outcome_of, p) for p in self._parts]

    def outcomes(self) -> list[Outcome[T]]:
        """The parts' outcomes, in the order given (waiting for those still running)."""
        if self._pool is None:
            return [outcome_of(p) for p in self._parts]
        try:
            return [f.result() for f in self._futures]
        finally:
            self._pool.shutdown(wait=True)
