"""Ctrl-C while the profiler changes state is delivered after the change, not in its middle."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from opscope.record.sigint import SigintGate


@pytest.fixture(autouse=True)
def _python_default_sigint() -> Iterator[None]:
    """Each test starts from Python's own SIGINT handler, whatever this process inherited: a
    process started in the background by a non-interactive shell (``cmd &``, nohup, some CI
    runners) has SIGINT ignored, and Python then leaves it ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_ctrl_c_inside_waits_for_the_block_then_interrupts() -> None:
    gate = SigintGate()
    gate.arm()
    done: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt), gate:
            os.kill(os.getpid(), signal.SIGINT)
            done.append("rest of the profiler transition")  # still runs
        assert done == ["rest of the profiler transition"]
        with gate:  # delivered once: the next block runs through
            done.append("next")
    finally:
        gate.disarm()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_outside_a_block_ctrl_c_interrupts_at_once_as_python_does() -> None:
    gate = SigintGate()
    gate.arm()
    try:
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs at the next bytecode boundary
                pass
            pytest.fail("no KeyboardInterrupt")
    finally:
        gate.disarm()


def test_arms_are_counted_and_the_last_disarm_restores_the_default() -> None:
    gate = SigintGate()
    gate.arm()
    gate.arm()  # a nested recording
    gate.disarm()
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    gate.disarm()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    gate.disarm()  # one too many: harmless
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_custom_handler_is_left_alone() -> None:
    seen: list[int] = []
    old = signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    gate = SigintGate()
    try:
        gate.arm()
        with gate:
            os.kill(os.getpid(), signal.SIGINT)
        assert seen == [signal.SIGINT]
        gate.disarm()
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # still theirs
    finally:
        signal.signal(signal.SIGINT, old)


def test_an_exception_in_the_block_is_not_replaced_by_the_interrupt() -> None:
    gate = SigintGate()
    gate.arm()
    try:
        with pytest.raises(ValueError), gate:
            os.kill(os.getpid(), signal.SIGINT)
            raise ValueError("the transition failed")
    finally:
        gate.disarm()


def test_an_ignored_sigint_is_left_ignored() -> None:
    """Launched with SIGINT ignored (nohup, ``cmd &``): the gate installs nothing, so Ctrl-C
    stays ignored during and after the recording, as the user's launcher asked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gate = SigintGate()
    gate.arm()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    with gate:
        os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # a handler would run at the next bytecode boundary
        pass
    gate.disarm()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
