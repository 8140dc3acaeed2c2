"""``EventRunner``: the monitor's thread for crawl events and their webhooks.

Every ``CRAWLCLUSTER_EVENTS_INTERVAL`` seconds it looks at the crawls (``CrawlEvents``);
every round it sends the outbox's events to ``CRAWLCLUSTER_KAFKA_EVENTS_TOPIC``. The due
webhook deliveries are made on a thread of their own: a receiver that takes its whole
timeout to answer (a crawl's ``notify`` may name any host) holds up neither the
monitor's replies nor the events of every other crawl. A failure is logged and counted,
and the next round tries again.
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from master.counters import WindowCounts
from master.crawls import CrawlStore
from master.keys import Keys
from master.lua import LuaScripts
from master.sitehealth import OTHER, read_site_health
from message_processing.events import claim_ttl
from message_processing.events.outbox import EventOutbox
from message_processing.events.sitechecks import SiteFigures
from message_processing.events.watch import CrawlEvents, WatchOptions
from message_processing.events.webhooks import FetchGuard, Webhooks
from settings.clients import RedisClient
from settings.loader import Settings

logger = logging.getLogger(__name__)
ROUND = 0.5         # seconds between rounds of sending


class EventRunner:
    def __init__(self, settings: Settings, redis: RedisClient, producer: Any,
                 guard: FetchGuard) -> None:
        keys = Keys.from_settings(settings)
        scripts = LuaScripts(redis)
        crawls = CrawlStore(redis, keys)
        self.redis, self.keys, self.producer = redis, keys, producer
        self.topic = settings["CRAWLCLUSTER_KAFKA_EVENTS_TOPIC"]
        self.interval = settings.getfloat("CRAWLCLUSTER_EVENTS_INTERVAL")
        self.webhooks = Webhooks.from_settings(redis, settings, guard, scripts=scripts)
        self.outbox = EventOutbox(redis, keys, claim_ttl(settings),
                                  self.webhooks, lambda crawlid: notify_urls(crawls, crawlid),
                                  scripts=scripts)
        self.watch = CrawlEvents(redis, keys, self.outbox, lambda crawlid: read_sites(
            redis, keys, crawlid), WatchOptions.from_settings(settings))
        self.failures = WindowCounts(redis, keys.window_counts("monitor:events:fail"),
                                     scripts=scripts)
        self.last_look = 0.0

    def run(self, stopping: threading.Event) -> None:
        """Rounds until ``stopping`` is set, the webhook deliveries on a thread beside."""
        deliveries = threading.Thread(target=self.repeat, args=(
            stopping, self.webhooks.deliver_due, "webhook deliveries"),
            name="webhook-deliveries", daemon=True)
        deliveries.start()
        self.repeat(stopping, self.run_once, "crawl events round")
        deliveries.join(self.webhooks.timeout * 2)

    def repeat(self, stopping: threading.Event, work: Callable[[], Any], what: str) -> None:
        """``work`` until ``stopping`` is set, waiting a round whenever it had nothing to
        do (it returns how much it did) or failed."""
        while not stopping.is_set():
            try:
                if work():
                    continue
            except Exception as exc:  # noqa: BLE001 - events never stop the monitor
                logger.error("%s failed, trying again: %s", what, exc)
                self._count_failure()
                stopping.wait(2.0)
            stopping.wait(ROUND)

    def run_once(self) -> None:
        """Look at the crawls when due, and send the outbox's events."""
        if time.monotonic() - self.last_look >= self.interval:
            self.last_look = time.monotonic()
            self.watch.run_once()
        while self.outbox.send_due(lambda values: self.producer.deliver(self.topic, values)):
            pass

    def _count_failure(self) -> None:
        try:
            self.failures.increment(1)
        except Exception as exc:  # noqa: BLE001 - Redis down: the log line says it
            logger.warning("could not count the failed round: %s", exc)


def notify_urls(crawls: CrawlStore, crawlid: str) -> list[str]:
    """The webhook URLs the crawl's request names (``notify``)."""
    config = crawls.load(crawlid) or {}
    return [str(url) for url in config.get("notify") or ()]


def read_sites(redis: RedisClient, keys: Keys, crawlid: str) -> dict[str, SiteFigures]:
    """The crawl's figures per site (master/sitehealth.py), without the sites past its
    bound counted together (not one site: nothing to call broken)."""
    return {site: health for site, health in read_site_health(redis, keys, crawlid).items()
            if site != OTHER}
