"""What every long-running role does as a process: stop cleanly on SIGTERM and SIGINT."""

import signal
import threading
from collections.abc import Callable
from types import FrameType


def stop_on_signals(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM and SIGINT, from a thread of its own.

    A signal handler runs in the main thread between two bytecodes, possibly while
    that thread holds the lock inside the very ``threading.Event`` that ``stop`` sets
    (in ``Event.wait``, re-acquiring it): setting the event in the handler would then
    wait for a lock its own thread holds, forever. From another thread it waits only
    until the main thread lets go.
    """
    def handler(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=stop, name="stop", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
