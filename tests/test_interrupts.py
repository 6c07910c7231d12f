"""SIGTERM interrupts a run once; the process group's copy that `timeout` sends next is
ignored (a second KeyboardInterrupt inside the first one's handling broke a lock, D72)."""
import os
import signal

import pytest

from fa2check.core import interrupts


def _two_sigterms():
    raised = 0
    for _ in range(2):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.getsignal(signal.SIGTERM)  # a point where Python runs pending handlers
        except KeyboardInterrupt:
            raised += 1
    return raised


@pytest.fixture
def restore_sigterm():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_the_first_sigterm_interrupts_and_the_second_is_ignored(restore_sigterm):
    interrupts.sigterm_as_interrupt()
    assert _two_sigterms() == 1


def test_the_check_catches_a_handler_that_interrupts_each_time(restore_sigterm, monkeypatch):
    def every_time(signum, frame):  # a planted bug: the handler as it was
        raise KeyboardInterrupt

    monkeypatch.setattr(interrupts, "_interrupt", every_time)
    interrupts.sigterm_as_interrupt()
    assert _two_sigterms() == 2
