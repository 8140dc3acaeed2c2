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


STUCK_ROLE = """
import threading, time
from settings.process import stop_on_signals
stopped = threading.Event()
stop_on_signals(stopped.set, bound=1.0, what="a stuck role")
# A client's thread retrying a server that is down, and not a daemon: without the
# guard it keeps the process alive after its loop has stopped.
threading.Thread(target=lambda: time.sleep(3600), daemon=False).start()
print("ready", flush=True)
stopped.wait()
"""


def test_shutdown_of_a_process_held_by_a_thread_ends_within_the_bound():
    import subprocess
    import sys

    from settings.process import EXIT_STUCK

    process = subprocess.Popen([sys.executable, "-c", STUCK_ROLE], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == EXIT_STUCK
        assert time.monotonic() - started < 3
        assert "a stuck role did not stop within 1 s" in process.stderr.read()
    finally:
        process.kill()
        process.wait()
