"""Claimed events on their way out: to the events topic, then to the crawl's webhooks.

``claim`` puts an event in the outbox only if nobody claimed it before (one Lua call:
``event_claim.lua``). ``send_due`` leases the outbox's events, sends them to Kafka and
only then, in one transaction, takes them out and queues a webhook delivery for each
``notify`` URL of their crawl: a monitor dying in between leaves them to be sent again
when the lease runs out (same ``id``)."""

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from master.counters import Clock
from master.keys import Keys
from master.lua import LuaScripts
from message_processing.events import Event
from message_processing.events.webhooks import Webhooks
from settings.clients import RedisClient

logger = logging.getLogger(__name__)
LEASE = 60.0        # seconds an outbox event is held by the monitor sending it


class EventOutbox:
    def __init__(self, client: RedisClient, keys: Keys, claim_ttl: float,
                 webhooks: Webhooks, notify_of: Callable[[str], list[str]],
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.claim_ttl = claim_ttl
        self.webhooks = webhooks
        self.notify_of = notify_of        # crawl id -> its notify URLs
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    def claim(self, name: str, event: Event) -> bool:
        """Put ``event`` in the outbox unless ``name`` was claimed; True if this call did."""
        claimed = self.scripts.run(
            "event_claim", [self.keys.event_claim(name), self.keys.event_outbox()],
            [repr(self.clock()), int(self.claim_ttl),
             json.dumps(event, sort_keys=True, ensure_ascii=False)])
        if claimed:
            logger.info("crawl %s: event %s", event["crawlid"], event["id"])
        return bool(claimed)

    def claimed(self, names: list[str]) -> list[bool]:
        """Which of the claim ``names`` are taken (one round trip)."""
        if not names:
            return []
        return [value is not None for value in
                self.client.mget([self.keys.event_claim(name) for name in names])]

    def keep(self, names: list[str]) -> None:
        """Give the claims ``names`` their full time again: an ended crawl's claim, kept
        while the crawl is still in the index however late it retires, so its events are
        never sent again."""
        if names:
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.expire(self.keys.event_claim(name), int(self.claim_ttl))
            pipe.execute()

    def send_due(self, deliver: Callable[[list[bytes]], Any], limit: int = 100) -> int:
        """Send the due events through ``deliver`` (values to the events topic; raises
        if not all are stored), then queue their webhooks; returns how many."""
        now = self.clock()
        members = self.scripts.run("worklist_claim", [self.keys.event_outbox()],
                                   [repr(now), repr(now + LEASE), limit])
        if not members:
            return 0
        deliver([member.encode("utf-8") for member in members])
        pipe = self.client.pipeline(transaction=True)
        deliveries = []
        for member in members:
            event = json.loads(member)
            pipe.zrem(self.keys.event_outbox(), member)
            deliveries += [(url, event) for url in self.notify_of(event["crawlid"])]
        if deliveries:
            self.webhooks.add_new(deliveries, pipe)
        pipe.execute()
        return len(members)
