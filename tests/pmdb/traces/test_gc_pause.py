"""pmdb.traces.gc_pause: the cyclic collector is off inside the block and as it was after, an error included."""
import gc

import pytest

from pmdb.traces.gc_pause import collector_paused


def test_the_collector_is_paused_inside_and_restored_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():            # nested: the outer block keeps it off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("in the block")
    assert gc.isenabled()                    # back on after an error


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_as_a_decorator_each_call_pauses():
    @collector_paused()
    def state() -> bool:
        return gc.isenabled()
    assert state() is False and state() is False and gc.isenabled()
