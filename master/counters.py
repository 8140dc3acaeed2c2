"""Distributed counters on Redis sorted sets (thesis 4.1.1).

``RollingTimeCounter`` counts events in the last ``window`` seconds (the tasks a
job finished: the dispatcher's weights), in per-second buckets with a running sum.
``StepTimeCounter`` counts events per fixed window aligned to the epoch (per hour
by default), one sorted-set member per event.

Both bound their size themselves: every write trims what left the window and
sets an expiry, so an idle counter disappears and an active one holds at most
its window. Time comes from an injectable ``clock`` so behaviour over minutes is
tested in simulated time.
"""

import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from master.keys import Keys
from master.lua import LuaScripts
from settings.clients import RedisClient
from settings.loader import Settings

TOTAL = "*"                  # the member of a zset of counts per name that holds their sum

Clock = Callable[[], float]


def _call_id() -> str:
    return uuid.uuid4().hex[:16]


class RollingTimeCounter:
    """Events in the last ``window`` seconds, exact to the second."""

    def __init__(self, client: RedisClient, key: str, window: float, clock: Clock = time.time,
                 scripts: LuaScripts | None = None) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        self.client = client
        self.key = key
        self.window = window
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, name: str,
                      window: float | None = None, **kwargs: Any) -> "RollingTimeCounter":
        window = window or settings.getint("CRAWLCLUSTER_COUNTER_WINDOW")
        return cls(client, Keys.from_settings(settings).rolling_counter(name), window, **kwargs)

    def increment(self, count: int = 1, pipe: Any = None) -> Any:
        """Record ``count`` events now; return the events in the window.

        With ``pipe`` the call is queued on that pipeline and returns it.
        """
        return self._run(count, pipe)

    def value(self) -> int:
        """Events in ``(now - window, now]``; also drops the older ones."""
        return int(self._run(0, None))

    def _run(self, count: int, pipe: Any) -> Any:
        args = (repr(self.clock()), repr(self.window), math.ceil(self.window) + 1, count)
        return self.scripts.run("counter_rolling_add", [self.key], args, pipe=pipe)


def events_since(buckets: dict[str, str], moment: float) -> int:
    """Events in the seconds after ``moment``, from a rolling counter's hash as read
    (``HGETALL``)."""
    return sum(int(events) for field, events in buckets.items()
               if field.isdigit() and int(field) > moment)


class StepTimeCounter:
    """Events per fixed window of ``step`` seconds, the last ``keep`` windows kept."""

    def __init__(self, client: RedisClient, keys: Keys, name: str, step: int, keep: int,
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        if step <= 0 or keep <= 0:
            raise ValueError(f"step and keep must be positive, got {step}, {keep}")
        self.client = client
        self.keys = keys
        self.name = name
        self.step = step
        self.keep = keep
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, name: str,
                      step: int | None = None, keep: int | None = None,
                      **kwargs: Any) -> "StepTimeCounter":
        step = step or settings.getint("CRAWLCLUSTER_COUNTER_STEP")
        keep = keep or settings.getint("CRAWLCLUSTER_COUNTER_KEEP_STEPS")
        return cls(client, Keys.from_settings(settings), name, step, keep, **kwargs)

    def window_start(self, at: float | None = None) -> int:
        """Start of the window holding time ``at`` (default: now)."""
        at = self.clock() if at is None else at
        return math.floor(at / self.step) * self.step

    def key(self, at: float | None = None) -> str:
        return self.keys.step_counter(self.name, self.window_start(at))

    def increment(self, count: int = 1, pipe: Any = None) -> Any:
        """Record ``count`` events now; return the count of the current window."""
        if count <= 0:
            raise ValueError(f"count must be positive, got {count}")
        now = self.clock()
        # A TTL, not an absolute expiry, so a simulated clock works too.
        ttl = math.ceil(self.window_start(now) + self.step * self.keep - now)
        args = (repr(now), ttl, count, _call_id())
        return self.scripts.run("counter_step_add", [self.key(now)], args, pipe=pipe)

    def value(self, at: float | None = None) -> int:
        """Events in the window holding ``at`` (default: the current window)."""
        return int(self.client.zcard(self.key(at)))

    def history(self, windows: int | None = None) -> list[tuple[int, int]]:
        """``[(window_start, count), ...]`` for the last windows, oldest first."""
        windows = min(windows or self.keep, self.keep)
        current = self.window_start()
        starts = [current - self.step * back for back in range(windows - 1, -1, -1)]
        pipe = self.client.pipeline(transaction=False)
        for start in starts:
            pipe.zcard(self.keys.step_counter(self.name, start))
        return list(zip(starts, pipe.execute(), strict=True))


class WindowCounts:
    """Events in scrapy-cluster's rolling windows (15 min to 7 days) and in all time.

    For counts too frequent for one sorted-set member per event (every message
    preprocess handles): events go into per-minute buckets of one hash, so a
    window's count is exact to the minute, and adding a batch is one call.
    """

    WINDOWS = (900, 3600, 21600, 43200, 86400, 604800)

    def __init__(self, client: RedisClient, key: str, clock: Clock = time.time,
                 scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.key = key
        self.clock = clock
        self._scripts = scripts

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, name: str,
                      **kwargs: Any) -> "WindowCounts":
        return cls(client, Keys.from_settings(settings).window_counts(name), **kwargs)

    @property
    def scripts(self) -> LuaScripts:
        # Built on first write only: most of these objects only read (stats).
        if self._scripts is None:
            self._scripts = LuaScripts(self.client)
        return self._scripts

    def increment(self, count: int = 1, pipe: Any = None) -> Any:
        """Record ``count`` events now (queued on ``pipe`` when given)."""
        minute = int(self.clock() // 60)
        oldest = minute - max(self.WINDOWS) // 60
        return self.scripts.run("window_counts_add", [self.key], [minute, count, oldest],
                                pipe=pipe)

    def values(self, raw: dict[str, str] | None = None) -> dict[str, int]:
        """``{"900": n, ..., "lifetime": n}``; ``raw`` is the hash if already read."""
        raw = self.client.hgetall(self.key) if raw is None else raw
        minute = int(self.clock() // 60)
        buckets = {int(field): int(value) for field, value in raw.items() if field != "lifetime"}
        counts = {str(window): sum(value for at, value in buckets.items()
                                   if at > minute - window // 60)
                  for window in self.WINDOWS}
        counts["lifetime"] = int(raw.get("lifetime", 0))
        return counts


def grouped_window_counts(client: RedisClient, keys: Keys,
                          kind: str) -> dict[str, dict[str, dict[str, int]]]:
    """``{who: {status: windows}}`` of the ``<kind>:<who>:<status>`` counters (kind is
    ``spider`` or ``machine``: the crawlers' status codes per spider type or host)."""
    prefix = keys.window_counts(f"{kind}:")
    found: dict[str, dict[str, dict[str, int]]] = {}
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        who, status = key[len(prefix):].rsplit(":", 1)
        found.setdefault(who, {})[status] = WindowCounts(client, key).values()
    return found
