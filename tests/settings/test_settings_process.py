"""Stopping a role on SIGTERM cannot deadlock on the event its loop waits on; a role
started while a server is down waits for it, within a bound."""

import os
import signal
import threading
import time

import pytest

from settings.errors import ServerUnreachable
from settings.process import start_when_reachable, stop_on_signals


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


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def unreachable_for(tries):
    calls = []

    def start():
        calls.append(1)
        if len(calls) <= tries:
            raise ServerUnreachable("preprocess", "kafka", "127.0.0.1:9092", "refused", "check")
        return "started"
    return start, calls


def test_a_role_started_while_its_broker_is_down_starts_once_it_is_back(caplog):
    clock = FakeTime()
    start, calls = unreachable_for(4)
    assert start_when_reachable(start, 60, sleep=clock.sleep, clock=lambda: clock.now) \
        == "started"
    assert len(calls) == 5 and clock.sleeps == [0.5, 1.0, 2.0, 4.0]
    assert "cannot reach kafka at 127.0.0.1:9092" in caplog.text


def test_a_role_gives_up_after_the_startup_wait():
    clock = FakeTime()
    start, calls = unreachable_for(1_000)
    with pytest.raises(ServerUnreachable):
        start_when_reachable(start, 20, sleep=clock.sleep, clock=lambda: clock.now)
    assert clock.now <= 20 and clock.sleeps[-1] == 5.0
    start, calls = unreachable_for(1_000)
    with pytest.raises(ServerUnreachable):
        start_when_reachable(start, 0, sleep=clock.sleep, clock=lambda: clock.now)
    assert len(calls) == 1
