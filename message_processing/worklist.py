"""The monitor's work list: stored requests and scheduled commands in one sorted set.

Preprocess stores a query or command (due now); a crawl with ``expires``
stores an ``expire`` entry due then. A monitor claims due entries with a
lease (one Lua call, so two monitors never take the same entry), answers
them and removes them; an entry whose monitor died is claimed again once its
lease runs out. No ``KEYS`` scans.
"""

import json
import time
from typing import Any

from master.counters import Clock
from master.keys import Keys
from master.lua import LuaScripts
from settings.clients import RedisClient
from settings.loader import Settings

# {"id", "kind", "format", "request"}: one stored request; with "reply" and "plugin" once
# its reply's delivery failed unsure (Monitor.run_once)
Entry = dict[str, Any]


class WorkList:
    def __init__(self, client: RedisClient, keys: Keys, claim_seconds: float = 60.0,
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.claim_seconds = claim_seconds
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      **kwargs: Any) -> "WorkList":
        return cls(client, Keys.from_settings(settings),
                   claim_seconds=settings.getfloat("CRAWLCLUSTER_MONITOR_CLAIM_SECONDS"),
                   **kwargs)

    def add(self, entry: Entry, due: float | None = None, pipe: Any = None) -> Any:
        """Store an entry (a dict with a unique ``id``), due now or at ``due``."""
        target = pipe if pipe is not None else self.client
        member = json.dumps(entry, sort_keys=True, ensure_ascii=False)
        return target.zadd(self.keys.monitor_work(), {member: self.clock() if due is None
                                                     else float(due)})

    def keep_replies(self, kept: list[tuple[str, Entry, bytes, str | None]]) -> None:
        """For each ``(member, entry, reply, plugin)`` whose delivery failed with the
        broker unsure, put the reply in the entry (due now), in one transaction: it is
        looked for on the replies topic before it is sent again."""
        if not kept:
            return
        pipe = self.client.pipeline(transaction=True)
        for member, entry, reply, plugin in kept:
            pipe.zrem(self.keys.monitor_work(), member)
            self.add(dict(entry, reply=reply.decode("utf-8"), plugin=plugin), pipe=pipe)
        pipe.execute()

    def claim(self, limit: int = 50) -> list[tuple[str, Entry]]:
        """``[(member, entry)]`` of due entries, leased to this caller."""
        now = self.clock()
        members = self.scripts.run("worklist_claim", [self.keys.monitor_work()],
                                   [repr(now), repr(now + self.claim_seconds), limit])
        return [(member, json.loads(member)) for member in members]

    def done(self, member: str) -> None:
        self.client.zrem(self.keys.monitor_work(), member)

    def size(self) -> int:
        return int(self.client.zcard(self.keys.monitor_work()))
