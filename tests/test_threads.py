"""A report's parts on threads (opscope.analysis.threads): outcomes in the order given, failures
kept as outcomes, one thread means the calling one; the per-profile memo computes a shared
intermediate once when two threads ask for it together; a rule that fails after some findings
keeps them, as it did when the rules ran one after the other."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from helpers.synth import training
from opscope.advise import rule as rule_mod
from opscope.advise.finding import Finding
from opscope.advise.rule import advise
from opscope.analysis import threads, tree
from opscope.model import Profile


def test_threads_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    for raw, want in [
        ("", threads.DEFAULT_THREADS),
        ("1", 1),
        ("0", 1),
        ("-3", 1),
        ("2", 2),
        ("64", 3),  # at most the CPUs
        ("two", threads.DEFAULT_THREADS),
    ]:
        monkeypatch.setenv(threads.THREADS_ENV, raw)
        assert threads.threads() == want, raw


def test_outcomes_in_order_with_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(threads.THREADS_ENV, "2")
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    ran_on: dict[int, str] = {}
    both = threading.Barrier(2, timeout=30)

    def part(i: int) -> int:
        ran_on[i] = threading.current_thread().name
        if i < 2:
            both.wait()  # the first two run at once: two threads, or this waits out its timeout
        if i == 3:
            raise ValueError(f"part {i}")
        return i * 10

    outs = threads.run_each([lambda i=i: part(i) for i in range(6)])  # type: ignore[misc]
    assert [o.value for o in outs] == [0, 10, 20, None, 40, 50]
    assert [type(o.error).__name__ if o.error else None for o in outs] == [
        None,
        None,
        None,
        "ValueError",
        None,
        None,
    ]
    assert str(outs[3].error) == "part 3"
    assert all(name.startswith("opscope-part") for name in ran_on.values())
    assert ran_on[0] != ran_on[1]


def test_one_thread_runs_here_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(threads.THREADS_ENV, "1")
    seen: list[tuple[int, str]] = []
    outs = threads.run_each(
        [lambda i=i: seen.append((i, threading.current_thread().name)) for i in range(4)]  # type: ignore[misc]
    )
    assert [o.error for o in outs] == [None] * 4
    assert seen == [(i, threading.current_thread().name) for i in range(4)]


def test_memo_computes_once_when_two_threads_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread 1 computes; thread 2 asks while it does (it has reached the key's lock: the spy
    says so) and must get thread 1's value, not compute its own."""
    computing, release = threading.Event(), threading.Event()
    calls: list[str] = []

    @tree.per_profile
    def slow(profile: Profile) -> object:
        calls.append(threading.current_thread().name)
        computing.set()
        assert release.wait(30)
        return object()

    waiting = threading.Event()
    real = tree.memo_lock

    def spy(key: Any) -> AbstractContextManager[None]:
        if threading.current_thread().name == "second":
            waiting.set()
        return real(key)

    monkeypatch.setattr(tree, "memo_lock", spy)
    prof = training(steps=1).profile
    got: dict[str, object] = {}
    first = threading.Thread(target=lambda: got.update(first=slow(prof)), name="first")
    second = threading.Thread(target=lambda: got.update(second=slow(prof)), name="second")
    first.start()
    assert computing.wait(30)
    second.start()
    assert waiting.wait(30)  # the second thread is at the lock while the first computes
    release.set()
    first.join(30)
    second.join(30)
    assert calls == ["first"]
    assert got["first"] is got["second"]


def test_a_held_key_lock_is_never_dropped() -> None:
    """While one thread holds a key's lock, any number of other keys may come and go; a second
    thread asking for the held key still waits for it (the table once emptied itself when full,
    dropping held locks, and a report computed an intermediate twice)."""
    first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with tree.memo_lock("held"):
            first_in.set()
            assert first_out.wait(30)

    def second() -> None:
        with tree.memo_lock("held"):
            second_in.set()

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_in.wait(30)
    for i in range(1000):
        with tree.memo_lock(("other", i)):
            pass
    t2 = threading.Thread(target=second)
    t2.start()
    deadline = time.monotonic() + 30
    while tree._LOCKS["held"].users < 2:  # the second thread has reached the held lock
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert not second_in.is_set()
    first_out.set()
    t1.join(30)
    t2.join(30)
    assert second_in.is_set()
    assert tree._LOCKS == {}  # no key in use, none kept


class _HalfThenFail:
    id = "x-half-then-fail"

    def match(self, profile: Profile, ctx: dict[str, Any]) -> Iterator[Finding]:
        yield Finding(
            id="x-half-then-fail-1",
            rule=self.id,
            severity="low",
            title="one finding before the failure",
            saving_us=1.0,
        )
        raise RuntimeError("after one")


def test_rule_failing_after_a_finding_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(threads.THREADS_ENV, "2")
    monkeypatch.setitem(rule_mod._RULES, _HalfThenFail.id, _HalfThenFail())
    prof = training(steps=2).profile
    found = advise(prof, only=[_HalfThenFail.id, "overhead-host-sync"])
    assert [f.title for f in found.by_rule(_HalfThenFail.id)] == ["one finding before the failure"]
    assert found.errors == {_HalfThenFail.id: "RuntimeError: after one"}


def test_background_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    for n, where in [("2", "opscope-side"), ("1", threading.current_thread().name)]:
        monkeypatch.setenv(threads.THREADS_ENV, n)
        seen: list[tuple[int, str]] = []

        def part(i: int, seen: list[tuple[int, str]] = seen) -> int:
            seen.append((i, threading.current_thread().name))
            if i == 1:
                raise KeyError("part 1")
            return i

        side = threads.Background([lambda i=i: part(i) for i in range(3)])  # type: ignore[misc]
        outs = side.outcomes()
        assert [o.value for o in outs] == [0, None, 2]
        assert isinstance(outs[1].error, KeyError)
        assert [i for i, _ in seen] == [0, 1, 2]
        assert all(name.startswith(where) for _, name in seen), (n, seen)


def test_analyses_start_longest_first_and_keep_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The longest analyses start first; the report's sections keep the canonical order (the
    order they ran in with one thread before), so JSON and text do not move."""
    from opscope.analysis import Analyzer, registry
    from opscope.analysis.assemble import _ORDER_FIRST, _START_FIRST

    monkeypatch.setenv(threads.THREADS_ENV, "1")  # one thread: parts start in the given order
    started: list[str] = []
    for name, fn in list(registry._REGISTRY.items()):

        def spy(profile: Profile, options: Any, name: str = name, fn: Any = fn) -> Any:
            started.append(name)
            return fn(profile, options)

        monkeypatch.setitem(registry._REGISTRY, name, spy)
    report = Analyzer(training(steps=2).profile).generate_report()
    canonical = _ORDER_FIRST + [n for n in registry.names() if n not in _ORDER_FIRST]
    assert set(started[: len(_START_FIRST)]) == set(_START_FIRST)
    assert sorted(started) == sorted(canonical)
    assert list(report.sections) == [n for n in canonical if n in report.sections]
    assert started != [n for n in canonical if n in started]  # the start order did change


def test_a_small_profile_runs_its_parts_here_unless_the_env_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    small, large = threads.SERIAL_BELOW_EVENTS - 1, threads.SERIAL_BELOW_EVENTS
    with threads.sized_for(small):
        assert threads.threads() == 1
        with threads.sized_for(large):  # (a part's own profile inside a small one's report)
            assert threads.threads() == 1
    with threads.sized_for(large):
        assert threads.threads() == threads.DEFAULT_THREADS
    assert threads.threads() == threads.DEFAULT_THREADS  # the block's setting ends with it
    monkeypatch.setenv(threads.THREADS_ENV, "2")  # said explicitly: taken whatever the size
    with threads.sized_for(small):
        assert threads.threads() == 2


def test_build_report_of_a_small_profile_stays_in_the_calling_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opscope.analysis import registry
    from opscope.report.build import build_report

    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    seen: set[str] = set()
    for name, fn in list(registry._REGISTRY.items()):

        def spy(profile: Profile, options: Any, fn: Any = fn) -> Any:
            seen.add(threading.current_thread().name)
            return fn(profile, options)

        monkeypatch.setitem(registry._REGISTRY, name, spy)
    prof = training(steps=2).profile
    assert prof.events.height < threads.SERIAL_BELOW_EVENTS
    for env, want_here in (("", True), ("2", False)):
        monkeypatch.setenv(threads.THREADS_ENV, env)
        seen.clear()
        build_report(prof)
        assert (seen == {threading.current_thread().name}) is want_here, (env, seen)
