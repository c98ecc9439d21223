"""Interrupts during a sweep: a real SIGINT that Python swallows (raised inside a finalizer, where it is only printed
as "Exception ignored") is remembered and raised again between configs (collectors.ops.writer.sticky_interrupts)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from collectors.ops.writer import sticky_interrupts


class _SignalsItselfWhenCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the Python-level handler runs here, inside __del__: its KeyboardInterrupt goes nowhere


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_swallowed_by_a_finalizer_is_lost_without_the_guard(interactive_sigint):
    doomed = _SignalsItselfWhenCollected()
    del doomed                      # no KeyboardInterrupt reaches this frame
    time.sleep(0.05)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_swallowed_by_a_finalizer_is_raised_again_at_the_check(interactive_sigint):
    before = signal.getsignal(signal.SIGINT)
    with sticky_interrupts() as check:
        check()                     # nothing yet
        doomed = _SignalsItselfWhenCollected()
        del doomed                  # swallowed as above
        with pytest.raises(KeyboardInterrupt):
            check()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_plain_interrupt_still_raises_where_it_lands(interactive_sigint):
    with sticky_interrupts() as check:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        with pytest.raises(KeyboardInterrupt):
            check()                 # and is remembered


def test_a_background_job_that_ignores_sigint_keeps_ignoring_it():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sticky_interrupts() as check:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            check()                 # nothing: ignored, as the shell asked
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
