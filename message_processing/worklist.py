"""The monitor's work list: stored requests and scheduled commands in one sorted set.

Preprocess stores a query or command (due now); a crawl with ``expires``
stores an ``expire`` entry due then. A monitor claims due entries with a
lease (one Lua call, so two monitors never take the same entry), answers
them and removes them; an entry whose monitor died is claimed again once its
lease runs out. No ``KEYS`` scans.
"""

import json
import time

from master.keys import Keys
from master.lua import LuaScripts


class WorkList:
    def __init__(self, client, keys, claim_seconds=60.0, clock=time.time, scripts=None):
        self.client = client
        self.keys = keys
        self.claim_seconds = claim_seconds
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client, settings, **kwargs):
        return cls(client, Keys.from_settings(settings),
                   claim_seconds=settings.getfloat("CRAWLCLUSTER_MONITOR_CLAIM_SECONDS"),
                   **kwargs)

    def add(self, entry, due=None, pipe=None):
        """Store an entry (a dict with a unique ``id``), due now or at ``due``."""
        target = pipe if pipe is not None else self.client
        member = json.dumps(entry, sort_keys=True, ensure_ascii=False)
        return target.zadd(self.keys.monitor_work(), {member: self.clock() if due is None
                                                     else float(due)})

    def claim(self, limit=50):
        """``[(member, entry)]`` of due entries, leased to this caller."""
        now = self.clock()
        members = self.scripts.run("worklist_claim", [self.keys.monitor_work()],
                                   [repr(now), repr(now + self.claim_seconds), limit])
        return [(member, json.loads(member)) for member in members]

    def done(self, member):
        self.client.zrem(self.keys.monitor_work(), member)

    def size(self):
        return self.client.zcard(self.keys.monitor_work())
