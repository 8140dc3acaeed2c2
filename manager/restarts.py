"""When a supervised process that died is started again (roles: manager/local/supervisor.py;
spiders: manager/launcher.py).

After a backoff that doubles with each death within ``window`` seconds, up to ``cap``.
A process that died more than ``limit`` times within the window is most often waiting
on a server that is down (a Redis Cluster node the settings name, a broker restarting):
it is not given up on but *waiting*. Its servers are looked at every
``SERVER_CHECK_EVERY`` seconds; it is started again as soon as they answer if one was
seen down meanwhile (the outage explains its deaths), else ``cap`` seconds after it
died (something else kills it: a start a minute, not a busy loop). It stops waiting
once a start holds for a whole window.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

RESTART_LIMIT = 5
RESTART_WINDOW = 600.0        # seconds
FIRST_BACKOFF = 1.0           # seconds; doubled at each death within the window
BACKOFF_CAP = 60.0            # seconds between tries of a process that keeps dying
SERVER_CHECK_EVERY = 5.0      # seconds between looks at the servers a waiting process needs


@dataclass
class RestartPolicy:
    limit: int = RESTART_LIMIT
    window: float = RESTART_WINDOW
    first: float = FIRST_BACKOFF
    cap: float = BACKOFF_CAP
    clock: Callable[[], float] = time.monotonic
    deaths: dict[str, list[float]] = field(default_factory=dict)   # name -> when it died
    starts: dict[str, float] = field(default_factory=dict)         # name -> its last start
    waiting_names: set[str] = field(default_factory=set)

    def died(self, name: str) -> float:
        """Note a death; the seconds to wait before starting ``name`` again."""
        now = self.clock()
        self._forget_healthy(now)
        deaths = [at for at in self.deaths.get(name, []) if now - at < self.window]
        deaths.append(now)
        self.deaths[name] = deaths
        if name in self.waiting_names and now - self.starts.get(name, now) >= self.window:
            self.waiting_names.discard(name)          # its last start held a whole window
        if len(deaths) > self.limit:
            self.waiting_names.add(name)
        if name in self.waiting_names:
            return SERVER_CHECK_EVERY
        return min(self.cap, self.first * 2 ** (len(deaths) - 1))

    def _forget_healthy(self, now: float) -> None:
        """Drop what is known of processes that have not died for a window and are not
        waiting: a manager running for months keeps only its recent deaths."""
        for other in [other for other, deaths in self.deaths.items()
                      if other not in self.waiting_names and now - deaths[-1] >= self.window]:
            del self.deaths[other]
            self.starts.pop(other, None)

    def started(self, name: str) -> None:
        self.starts[name] = self.clock()

    def waiting(self, name: str) -> bool:
        """Whether ``name`` died more than ``limit`` times within a window and has not
        run a whole window since: it is started again only once its servers answer."""
        return name in self.waiting_names

    def may_start(self, name: str, outage_seen: bool) -> bool:
        """Whether a waiting ``name`` whose servers answer now may start: at once after
        an outage, else ``cap`` seconds after its last death."""
        deaths = self.deaths.get(name) or [-self.cap]
        return outage_seen or self.clock() >= deaths[-1] + self.cap

    def restarts(self, name: str) -> int:
        """Deaths of ``name`` within the window."""
        now = self.clock()
        return sum(1 for at in self.deaths.get(name, []) if now - at < self.window)
