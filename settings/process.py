"""What every long-running role does as a process: stop cleanly on SIGTERM and SIGINT,
end within a bound however the servers it talks to are doing (``exit_within``), and
end for its supervisor to restart it when its loop is stuck (``Watchdog``)."""

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from settings.errors import ServerUnreachable

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Exit status of a process the guard ended: told to stop, it had not within the bound.
EXIT_STUCK = 70


class _Guard:
    """Whether this process's exit guard runs (one per process)."""

    lock = threading.Lock()
    started = False


def exit_within(seconds: float, what: str) -> None:
    """Make sure this process ends within ``seconds`` from now, once per process.

    A clean stop closes clients that may be waiting on a server that is down (a
    ZooKeeper client retrying for good, a producer flushing to a broker that is gone),
    and a non-daemon thread left running keeps a process alive after its work has
    stopped. A daemon thread ends the process (exit status ``EXIT_STUCK``) if it is
    still there after ``seconds``; what it held comes back as after a crash (leases
    when its heartbeat is gone, requests when another consumer takes the partition).
    """
    with _Guard.lock:
        if _Guard.started or seconds <= 0:
            return
        _Guard.started = True

    def guard() -> None:
        time.sleep(seconds)
        logger.error("%s did not stop within %.0f s of being told to: exiting now; its "
                     "threads:\n%s", what, seconds, thread_stacks())
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_STUCK)

    threading.Thread(target=guard, name="exit-guard", daemon=True).start()


def thread_stacks() -> str:
    """Every thread's name and stack, for a log line: where a process that does not stop
    is waiting."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return "\n".join(f"--- {names.get(ident, ident)}"
                     f"{' (daemon)' if _is_daemon(ident) else ''}\n"
                     + "".join(traceback.format_stack(frame))
                     for ident, frame in sys._current_frames().items())


def _is_daemon(ident: int) -> bool:
    return any(thread.daemon for thread in threading.enumerate() if thread.ident == ident)


def stop_on_signals(stop: Callable[[], None], bound: float = 0.0,
                    what: str = "this process") -> None:
    """Call ``stop`` on SIGTERM and SIGINT, from a thread of its own, and end the process
    ``bound`` seconds later if it is still there (``exit_within``; 0: no bound).

    A signal handler runs in the main thread between two bytecodes, possibly while
    that thread holds the lock inside the very ``threading.Event`` that ``stop`` sets
    (in ``Event.wait``, re-acquiring it): setting the event in the handler would then
    wait for a lock its own thread holds, forever. From another thread it waits only
    until the main thread lets go.
    """
    def handler(signum: int, frame: FrameType | None) -> None:
        exit_within(bound, what)
        threading.Thread(target=stop, name="stop", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def guard_signals(bound: float, what: str) -> None:
    """Keep the handlers a framework installed for SIGTERM and SIGINT (Scrapy's, Twisted's),
    and have each also start ``exit_within(bound)``."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(number: int, frame: FrameType | None,
                    previous: object = previous) -> None:
            exit_within(bound, what)
            if callable(previous):
                previous(number, frame)
            elif previous == signal.SIG_DFL:
                raise SystemExit(128 + number)

        signal.signal(signum, handler)


# Exit status of a process whose watchdog found its loop stuck.
EXIT_STALLED = 75
# Exit status of a spider that closed past its memory bound, to be started again at once
# (crawler/extensions.py MemoryBound).
EXIT_RECYCLE = 76


class Watchdog:
    """A loop's progress, watched from a thread of its own.

    The loop calls ``beat()`` each time round (a Twisted role from a one-second
    ``LoopingCall``: a blocked reactor misses them). If no beat comes within ``bound``
    seconds, every thread's stack is logged, ``on_stall`` runs (the role's heartbeat
    says "stalled"; given 2 s at most, it may need the very server that hangs), and
    the process exits with ``EXIT_STALLED`` for its supervisor to start it again. A
    client stuck inside a library (kafka-python's ``poll`` after a broker restart,
    dpkp/kafka-python#3121) is thus cured by a restart instead of stopping the role
    for good.
    """

    def __init__(self, bound: float, what: str,
                 on_stall: Callable[[], None] | None = None,
                 exit: Callable[[int], object] = os._exit) -> None:
        self.bound = bound
        self.what = what
        self.on_stall = on_stall
        self.exit = exit
        self.last = time.monotonic()
        self.stopped = threading.Event()

    def start(self) -> "Watchdog":
        if self.bound > 0:
            threading.Thread(target=self._watch, name="watchdog", daemon=True).start()
        return self

    def beat(self) -> None:
        self.last = time.monotonic()

    def stop(self) -> None:
        """Stop watching (a role shutting down; ``exit_within`` bounds that)."""
        self.stopped.set()

    def _watch(self) -> None:
        while not self.stopped.wait(min(1.0, self.bound / 4)):
            silent = time.monotonic() - self.last
            if silent > self.bound:
                self._stalled(silent)
                return

    def _stalled(self, silent: float) -> None:
        logger.error("%s: its loop has not come round for %.0f s (bound %.0f s): stalled, "
                     "exiting for its supervisor to start it again; its threads:\n%s",
                     self.what, silent, self.bound, thread_stacks())
        telling = threading.Thread(target=self._tell, name="watchdog-tell", daemon=True)
        telling.start()
        telling.join(2.0)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.exit(EXIT_STALLED)

    def _tell(self) -> None:
        try:
            if self.on_stall is not None:
                self.on_stall()
        except Exception as exc:  # noqa: BLE001 - the process exits whatever this did
            logger.warning("could not mark the heartbeat stalled: %s", exc)


def start_when_reachable(start: Callable[[], T], seconds: float,
                         sleep: Callable[[float], None] = time.sleep,
                         clock: Callable[[], float] = time.monotonic) -> T:
    """``start()``, tried again while a server it needs is unreachable, for ``seconds``.

    A role started by a supervisor (or a container's restart policy) while its broker
    or Redis restarts would otherwise exit at once, be started again, exit again, and
    soon be given up on. Each failed try is logged with what could not be reached;
    after ``seconds`` the last ``ServerUnreachable`` is raised.
    """
    deadline = clock() + seconds
    delay = 0.5
    while True:
        try:
            return start()
        except ServerUnreachable as exc:
            if clock() + delay > deadline:
                raise
            logger.warning("%s; trying again in %.1f s (for up to %.0f s after start)",
                           exc, delay, seconds)
            sleep(delay)
            delay = min(delay * 2, 5.0)
