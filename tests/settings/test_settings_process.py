"""Stopping a role on SIGTERM cannot deadlock on the event its loop waits on."""

import os
import signal
import threading
import time

from settings.process import stop_on_signals


def test_a_signal_arriving_inside_event_wait_still_stops_the_loop():
    stopping = threading.Event()
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stop_on_signals(stopping.set)
    try:
        # The main thread holds the event's lock, as inside Event.wait, when the
        # signal comes: setting the event in the handler itself would hang here.
        with stopping._cond:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)                 # the handler has run; the setter waits
            assert not stopping.is_set()
        assert stopping.wait(5)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
