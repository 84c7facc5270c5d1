"""Ctrl-C while the profiler changes state is delivered after the change, not in its middle."""

from __future__ import annotations

import os
import signal

import pytest

from opscope.record.api import _sigint_deferred


def test_ctrl_c_inside_waits_for_the_block_then_interrupts() -> None:
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt), _sigint_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("rest of the profiler transition")  # still runs
    assert done == ["rest of the profiler transition"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_ctrl_c_no_interrupt_and_handler_restored() -> None:
    with _sigint_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_custom_handler_is_left_alone() -> None:
    seen: list[int] = []
    old = signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    try:
        with _sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old)
