"""Domains paused by pushback, as this process knows them: domain -> the monotonic time
its pause ends.

The cluster's pause lives in Redis and is read as a task is taken (throttle_take.lua),
but a process already holds requests it took before a 429: without this map they would
still go out during the pause. PushbackMiddleware fills it as it records a pushback and
the downloader (crawler/token_deadlines.py) checks it for every request before sending,
without a round trip.
"""

import time

PAUSES_KEPT = 10_000      # domains paused at once that a process remembers


class PausedDomains:
    """domain -> monotonic time its pause ends; ended pauses are dropped as it grows."""

    def __init__(self, kept: int = PAUSES_KEPT) -> None:
        self.kept = kept
        self.until: dict[str, float] = {}

    def pause(self, domain: str, seconds: float, now: float | None = None) -> None:
        """Pause ``domain`` for ``seconds`` from now (a longer pause already noted stays)."""
        if seconds <= 0:
            return
        now = time.monotonic() if now is None else now
        ends = now + seconds
        if ends > self.until.get(domain, 0.0):
            self.until[domain] = ends
        if len(self.until) > self.kept:
            self.until = {name: at for name, at in self.until.items() if at > now}
            while len(self.until) > self.kept:        # all live: the oldest noted go
                del self.until[next(iter(self.until))]

    def remaining(self, domain: str, now: float | None = None) -> float:
        """Seconds until ``domain``'s pause ends (0.0: not paused)."""
        ends = self.until.get(domain)
        if ends is None:
            return 0.0
        left = ends - (time.monotonic() if now is None else now)
        if left <= 0:
            self.until.pop(domain, None)
            return 0.0
        return left
