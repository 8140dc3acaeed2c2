"""The monitor role: claim due entries of the work list, answer them, reply on Kafka.

An entry is removed only after its reply is on the replies topic, so a monitor
killed in between leaves it to be claimed again when its lease runs out (the
plugins are idempotent: a stop purges nothing the second time, a config write
sets the same value). A reply whose delivery failed without the broker saying
whether it has it is kept in its entry and looked for on the topic before it is
sent again. Several monitors share the list safely: a claim is one Lua call.
"""

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis import RedisError

from master.counters import WindowCounts
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.keys import Keys
from master.pushback import PushbackStore
from master.registry import Heartbeats, JobRegistry
from message_processing.delivery import DeliveryFailed
from message_processing.events.runner import EventRunner
from message_processing.events.webhooks import FetchGuard
from message_processing.firehose import FirehoseResender
from message_processing.plugins import load_plugins, route_table
from message_processing.replies import encode, reply_to
from message_processing.worklist import Entry, WorkList
from settings.clients import RedisClient, stop_zookeeper
from settings.errors import ServerUnreachable
from settings.loader import Settings
from settings.process import stop_on_signals

logger = logging.getLogger(__name__)
ROLE = "monitor"


class Context:
    """What monitor plugins read and write through."""

    def __init__(self, settings: Settings, redis: RedisClient,
                 zookeeper_factory: Callable[[], Any] | None = None) -> None:
        keys = Keys.from_settings(settings)
        self.settings = settings
        self.redis = redis
        self.keys = keys
        self.crawls = CrawlStore(redis, keys)
        self.frontier = Frontier.from_settings(redis, settings)
        self.registry = JobRegistry.from_settings(redis, settings)
        self.heartbeats = Heartbeats.from_settings(redis, settings)
        self.worklist = WorkList.from_settings(redis, settings)
        self.pushback = PushbackStore.from_settings(redis, settings)
        self._zookeeper_factory = zookeeper_factory
        self._zookeeper: Any = None
        self._mongo: Any = None

    @property
    def zookeeper(self) -> Any:
        """A ZooKeeper client, connected on first use (only config changes need it)."""
        if self._zookeeper is None:
            from settings.clients import zookeeper_client

            factory = self._zookeeper_factory or (lambda: zookeeper_client(self.settings, ROLE))
            self._zookeeper = factory()
        return self._zookeeper

    def retired_record(self, crawlid: str) -> dict[str, Any] | None:
        """A retired crawl's MongoDB crawl record, or None (MongoDB connected on first use:
        only ``info`` on a crawl Redis no longer knows needs it)."""
        from pymongo.errors import PyMongoError

        from settings.clients import mongo_client

        try:
            if self._mongo is None:
                self._mongo = mongo_client(self.settings, ROLE)
            records = self._mongo[self.settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["crawls"]
            record: dict[str, Any] | None = records.find_one(
                {"crawlid": crawlid, "retired_at": {"$exists": True}}, {"_id": 0})
        except (PyMongoError, ServerUnreachable) as exc:
            logger.warning("crawl %s is not in Redis and its crawl record could not be "
                           "read from MongoDB: %s", crawlid, exc)
            return None
        return record

    def window_counts(self, name: str) -> WindowCounts:
        return WindowCounts(self.redis, self.keys.window_counts(name),
                            scripts=self.frontier.scripts)

    def close(self) -> None:
        if self._zookeeper is not None:
            stop_zookeeper(self._zookeeper)
        if self._mongo is not None:
            self._mongo.close()


@dataclass
class Answer:
    """One claimed work-list entry, answered."""

    member: str                 # the entry as stored
    entry: Entry
    reply: bytes | None         # encoded; None: nothing to send
    plugin: str | None          # the plugin that answered; None when it failed
    kept: bool = False          # kept from a delivery that failed: look for it first


class Monitor:
    def __init__(self, settings: Settings, redis: RedisClient, producer: Any,
                 instance: str | None = None,
                 zookeeper_factory: Callable[[], Any] | None = None,
                 events: EventRunner | None = None) -> None:
        self.settings = settings
        self.events = events          # crawl events and webhooks, in a thread of their own
        self.events_thread: threading.Thread | None = None
        self.redis = redis
        self.producer = producer
        self.context = Context(settings, redis, zookeeper_factory)
        self.plugins = load_plugins(settings["CRAWLCLUSTER_MONITOR_PLUGINS"], self.context)
        self.routes = route_table(self.plugins)
        self.replies_topic = settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]
        self.sleep = settings.getfloat("CRAWLCLUSTER_MONITOR_SLEEP")
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}"
        self.stopping = threading.Event()
        self.last_beat = 0.0
        context = self.context
        self.resender = FirehoseResender(settings, redis, context.keys,
                                         context.registry.live_jobs, context.crawls.load)

    @classmethod
    def from_settings(cls, settings: Settings,
                      webhook_guard: FetchGuard | None = None) -> "Monitor":
        """``webhook_guard``: the URL guard webhook deliveries go through (a UrlGuard
        allowing ``CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS``); without one, no events."""
        from message_processing.delivery import DeliveringProducer
        from settings.clients import ensure_topics, redis_client

        redis = redis_client(settings, ROLE)
        ensure_topics(settings, ROLE)
        events = None
        if webhook_guard is not None and settings.getfloat("CRAWLCLUSTER_EVENTS_INTERVAL") > 0:
            ensure_topics(settings, ROLE, {settings["CRAWLCLUSTER_KAFKA_EVENTS_TOPIC"]: 1})
            events = EventRunner(settings, redis, DeliveringProducer(settings, ROLE),
                                 webhook_guard)
        return cls(settings, redis, DeliveringProducer(settings, ROLE), events=events)

    def run(self) -> None:
        stop_on_signals(self.stop, self.settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"),
                        f"the monitor {self.instance}")
        logger.info("monitor %s: plugins %s; replies on %s", self.instance,
                    ", ".join(plugin.name for plugin in self.plugins), self.replies_topic)
        watchdog = self.context.heartbeats.watchdog(self.settings, ROLE, self.instance)
        if self.events is not None:
            self.events_thread = threading.Thread(target=self.events.run, args=(self.stopping,),
                                                  name="crawl-events", daemon=True)
            self.events_thread.start()
        try:
            while not self.stopping.is_set():
                watchdog.beat()
                try:
                    answered = self.run_once()
                    if self.resender.due():
                        self.resender.run_once()
                except Exception as exc:  # noqa: BLE001 - the monitor outlives any failure
                    logger.error("monitor round failed, retrying: %s", exc)
                    answered = 0
                    self.stopping.wait(1.0)
                if answered == 0:
                    self.stopping.wait(self.sleep)
        finally:
            watchdog.stop()
            self.close()

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def close(self) -> None:
        try:
            self.context.heartbeats.stop(ROLE, self.instance)
        except RedisError as exc:
            logger.warning("could not clear the heartbeat: %s", exc)
        self.context.close()
        self.producer.close()
        self.resender.close()
        if self.events is not None:
            if self.events_thread is not None:
                self.events_thread.join(self.settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"))
            self.events.producer.close()

    def run_once(self, limit: int = 50) -> int:
        """Answer the entries due now; return how many."""
        self._heartbeat()
        claimed = self.context.worklist.claim(limit)
        if not claimed:
            return 0
        answers = [self.answer(member, entry) for member, entry in claimed]
        # Entries leave the work list only once their replies are on Kafka. A reply whose
        # delivery failed unsure is kept in its entry and looked for before it is sent
        # again: answered anew, it would differ and be answered twice.
        replied = [answer for answer in answers if answer.reply is not None]
        try:
            values = [answer.reply for answer in replied if answer.reply is not None]
            self.producer.deliver(self.replies_topic, values,
                                  unsure=[n for n, answer in enumerate(replied) if answer.kept])
        except DeliveryFailed as exc:
            self.context.worklist.keep_replies([
                (a.member, a.entry, a.reply or b"", a.plugin)
                for a in (replied[n] for n in exc.unsure())])
            self._done([replied[n] for n in exc.stored()]
                       + [answer for answer in answers if answer.reply is None])
            raise
        self._done(answers)
        return len(answers)

    def _done(self, answers: list["Answer"]) -> None:
        """Remove the answered entries from the work list and count them."""
        pipe = self.redis.pipeline(transaction=False)
        for answer in answers:
            pipe.zrem(self.context.keys.monitor_work(), answer.member)
            self._count(answer.plugin, pipe)
        pipe.execute()

    def answer(self, member: str, entry: Entry) -> "Answer":
        """The entry's reply (None if there is none to send) and the plugin that made it
        (None when it failed); a reply kept from a delivery that failed as it was."""
        if "reply" in entry:
            return Answer(member, entry, entry["reply"].encode("utf-8"), entry.get("plugin"),
                          kept=True)
        plugin = self.routes.get(str(entry.get("kind")))
        request = entry.get("request") or {}
        if plugin is None:
            logger.error("no monitor plugin for %r (entry %s)", entry.get("kind"), entry.get("id"))
            reply = reply_to(request, status="error", error=f"no monitor plugin handles "
                             f"{entry.get('kind')!r} requests")
            return Answer(member, entry, encode(reply), None)
        try:
            answered = plugin.answer(entry)
        except Exception as exc:
            logger.exception("%s failed on %s", plugin.name, entry.get("id"))
            reply = reply_to(request, status="error",
                             error=f"{plugin.name} failed: {type(exc).__name__}: {exc}")
            return Answer(member, entry, encode(reply), None)
        return Answer(member, entry, None if answered is None else encode(answered), plugin.name)

    def _count(self, plugin_name: str | None, pipe: Any) -> None:
        self.context.window_counts(f"{ROLE}:total").increment(1, pipe=pipe)
        if plugin_name is None:
            self.context.window_counts(f"{ROLE}:fail").increment(1, pipe=pipe)
        else:
            self.context.window_counts(f"{ROLE}:plugin:{plugin_name}").increment(1, pipe=pipe)

    def _heartbeat(self) -> None:
        if time.monotonic() - self.last_beat >= self.context.heartbeats.interval:
            self.context.heartbeats.beat(ROLE, self.instance)
            self.last_beat = time.monotonic()
