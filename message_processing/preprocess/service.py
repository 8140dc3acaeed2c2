"""The preprocess role: Kafka requests in, validated, stored in Redis, replies out.

One loop: poll a batch, and for each partition of it

1. decode and validate every message and let its plugin prepare the writes
   (nothing is written yet; a bad message becomes an error reply);
2. run one Redis transaction that skips messages at or below the partition's
   applied offset (a redelivery), queues the cluster-wide writes (crawl configs,
   indexes, the monitor's work), the replies (into the partition's outbox), the
   writes into the frontier's shards and the counters (into the partition's
   staged list), and the new applied offset: so Redis holds every result exactly
   once even when Kafka delivers twice. Every key of the transaction carries the
   cluster-wide hash tag, so it is one transaction on a Redis Cluster too;
3. apply the staged list (seed tasks into their shards' pools) and trim it;
4. send the outbox to the replies topic and trim what was sent;

then add the batch's seed URLs to their crawls' Bloom filters and commit the
offsets to Kafka. A failure before the commit means the batch is delivered
again: step 2 makes that harmless, steps 3 and 4 pick up what a crash left.
The loop never stops on bad input or a server error: it logs, backs off and
takes the same batch again.
"""

import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka import ConsumerRebalanceListener
from kafka.errors import KafkaError
from redis import RedisError

from master.bloomgen import AgingBloomFilter
from master.counters import WindowCounts
from master.crawls import CrawlStore, WriteBatch
from master.frontier import Frontier
from master.keys import Keys
from master.registry import Heartbeats
from message_processing.delivery import DeliveryFailed
from message_processing.plugins import load_plugins, route_table
from message_processing.replies import encode, error_reply
from message_processing.requests import Message, RequestError, decode, route, validate
from message_processing.worklist import WorkList
from settings.clients import RedisClient
from settings.loader import Settings
from settings.process import exit_within

logger = logging.getLogger(__name__)
ROLE = "preprocess"


@dataclass
class Handled:
    """One Kafka message after step 1."""

    offset: int
    source: str
    plugin: Any = None
    staged: Any = None
    error: Message | None = None


class Context:
    """What plugins write through."""

    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        keys = Keys.from_settings(settings)
        self.redis = redis
        self.keys = keys
        self.crawls = CrawlStore(redis, keys)
        self.frontier = Frontier.from_settings(redis, settings)
        self.worklist = WorkList.from_settings(redis, settings)
        self.bloom = AgingBloomFilter.from_settings(redis, settings)


class Assignments(ConsumerRebalanceListener):
    """Logs the consumer's rebalances and remembers since when it has held no partition."""

    def __init__(self) -> None:
        self.assigned: set[Any] = set()     # kafka TopicPartitions
        self.unassigned_since = time.monotonic()

    def on_partitions_revoked(self, revoked: list[Any]) -> None:
        logger.info("partitions revoked: %s", _names(revoked))
        self.assigned -= set(revoked)
        if not self.assigned:
            self.unassigned_since = time.monotonic()

    def on_partitions_assigned(self, assigned: list[Any]) -> None:
        logger.info("partitions assigned: %s", _names(assigned))
        self.assigned |= set(assigned)

    def unassigned_for(self) -> float:
        """Seconds without any partition (0 while it holds some)."""
        return 0.0 if self.assigned else time.monotonic() - self.unassigned_since


def _names(partitions: list[Any]) -> list[str]:
    return sorted(f"{p.topic}/{p.partition}" for p in partitions)


class Preprocess:
    def __init__(self, settings: Settings, redis: RedisClient, consumer: Any, producer: Any,
                 instance: str | None = None, assignments: Assignments | None = None,
                 new_consumer: Callable[[], tuple[Any, Assignments]] | None = None) -> None:
        self.settings = settings
        self.redis = redis
        self.consumer = consumer
        # With a group consumer: its listener, and how to make a new one when it stays
        # out of the group (kafka-python can wait on a JoinGroup a restarted broker
        # never answers, for minutes).
        self.assignments = assignments
        self.new_consumer = new_consumer
        self.rejoin_after = settings.getfloat("CRAWLCLUSTER_KAFKA_REJOIN_AFTER")
        self.consumers_made = 1
        self.producer = producer
        self.context = Context(redis, settings)
        self.keys = self.context.keys
        self.plugins = load_plugins(settings["CRAWLCLUSTER_PREPROCESS_PLUGINS"], self.context)
        self.routes = route_table(self.plugins)
        self.replies_topic = settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]
        self.max_bytes = settings.getint("CRAWLCLUSTER_MAX_MESSAGE_BYTES")
        self.max_depth = settings.getint("CRAWLCLUSTER_MAX_JSON_DEPTH")
        self.batch = settings.getint("CRAWLCLUSTER_PREPROCESS_BATCH")
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}"
        self.heartbeats = Heartbeats.from_settings(redis, settings)
        self.topic_ids: dict[str, str] = {}    # topic -> its id on the broker
        # outbox -> replies to look for on the topic before sending them: those a failed
        # delivery left unsure, and those an earlier process left there
        self.unsure_replies: dict[str, set[bytes]] = {}
        self.running = True
        self.last_beat = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> "Preprocess":
        from message_processing.delivery import DeliveringProducer
        from settings.clients import ensure_topics, kafka_consumer, redis_client

        redis = redis_client(settings, ROLE)
        ensure_topics(settings, ROLE)

        def new_consumer() -> tuple[Any, Assignments]:
            assignments = Assignments()
            consumer = kafka_consumer(settings, ROLE)
            consumer.subscribe([settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"]],
                               listener=assignments)
            return consumer, assignments

        consumer, assignments = new_consumer()
        # Replies go out a poll at a time: bigger producer batches, fewer requests.
        producer = DeliveringProducer(settings, ROLE, batch_size=512 * 1024, linger_ms=20)
        return cls(settings, redis, consumer, producer, assignments=assignments,
                   new_consumer=new_consumer)

    def counter(self, name: str) -> WindowCounts:
        return WindowCounts(self.redis, self.keys.window_counts(f"{ROLE}:{name}"),
                            scripts=self.context.frontier.scripts)

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        logger.info("preprocess %s: %s -> Redis, replies on %s; plugins: %s", self.instance,
                    self.settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"], self.replies_topic,
                    ", ".join(plugin.name for plugin in self.plugins))
        watchdog = self.heartbeats.watchdog(self.settings, ROLE, self.instance)
        try:
            while self.running:
                watchdog.beat()
                self.poll_once()
        finally:
            watchdog.stop()
            self.close()

    def stop(self, *_: object) -> None:
        # A poll or a producer's close may wait on a broker that is gone.
        exit_within(self.settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"),
                    f"preprocess {self.instance}")
        self.running = False

    def close(self) -> None:
        try:
            self.heartbeats.stop(ROLE, self.instance)
        except RedisError as exc:   # Redis gone at shutdown: nothing left to tell it
            logger.warning("could not clear the heartbeat: %s", exc)
        self.consumer.close()
        self.producer.close()

    def poll_once(self, timeout_ms: int = 500) -> int:
        """Handle one poll's messages; return how many were new to Redis."""
        self._heartbeat()
        self._rejoin_if_left_out()
        try:
            batches = self.consumer.poll(timeout_ms=timeout_ms, max_records=self.batch)
        except KafkaError as exc:
            # kafka-python 3.0 can raise a connection error out of poll while the broker
            # restarts; the consumer reconnects on a later poll.
            logger.warning("poll failed (polling again in 1 s): %s", exc)
            time.sleep(1.0)
            return 0
        fresh = 0
        offsets: dict[Any, int] = {}          # partition -> next offset to commit
        seen: list[tuple[str, str]] = []
        for partition, records in batches.items():
            try:
                applied = self.apply(partition, records)
                self.send_outbox(partition)
            except Exception as exc:  # noqa: BLE001 - the intake outlives any failure
                logger.error("partition %s/%d: %s; taking these %d messages again",
                             partition.topic, partition.partition, exc, len(records))
                self.consumer.seek(partition, records[0].offset)
                time.sleep(1.0)
                continue
            fresh += len(applied)
            seen += [h.staged.seen for h in applied if h.staged is not None and h.staged.seen]
            offsets[partition] = records[-1].offset + 1
        self._add_seen(seen)
        self._commit(offsets)
        return fresh

    def _heartbeat(self) -> None:
        if time.monotonic() - self.last_beat >= self.heartbeats.interval:
            try:
                self.heartbeats.beat(ROLE, self.instance)
                self.last_beat = time.monotonic()
            except RedisError as exc:
                logger.error("heartbeat failed: %s", exc)

    def _rejoin_if_left_out(self) -> None:
        """A consumer that held no partition for CRAWLCLUSTER_KAFKA_REJOIN_AFTER seconds
        is closed and a new one joins the group (its uncommitted messages come again,
        which the applied offsets in Redis make harmless)."""
        if self.assignments is None or self.new_consumer is None:
            return
        waited = self.assignments.unassigned_for()
        if waited < self.rejoin_after:
            return
        logger.warning("no partition assigned for %.0f s: joining the group with a new "
                       "consumer", waited)
        self.assignments.unassigned_since = time.monotonic()    # next try after as long
        try:
            consumer, assignments = self.new_consumer()
        except Exception as exc:  # noqa: BLE001 - the intake outlives any failure
            logger.error("could not make a new consumer (trying again in %.0f s): %s",
                         self.rejoin_after, exc)
            return
        try:
            self.consumer.close(autocommit=False, timeout_ms=1000)
        except Exception as exc:  # noqa: BLE001 - it is being dropped anyway
            logger.warning("closing the old consumer: %s", exc)
        self.consumer, self.assignments = consumer, assignments
        self.consumers_made += 1

    # --- step 1: decode, validate, prepare --------------------------------------------------

    def handle(self, record: Any) -> Handled:
        source = f"{record.topic}/{record.partition}/{record.offset}"
        message = None
        try:
            message = decode(record.value, self.max_bytes, self.max_depth)
            kind, request = validate(message)
            plugin = self.routes.get(route(kind, request))
            if plugin is None:
                raise RequestError(f"no plugin handles {route(kind, request)!r} requests", "type")
            return Handled(record.offset, source, plugin, plugin.prepare(kind, request, source))
        except RequestError as exc:
            logger.warning("refused %s: %s", source, exc)
            return Handled(record.offset, source, error=error_reply(source, exc, message))
        except Exception as exc:
            logger.exception("plugin failed on %s", source)
            error = RequestError(f"internal error: {type(exc).__name__}: {exc}")
            return Handled(record.offset, source, error=error_reply(source, error, message))

    # --- step 2: one transaction per partition -----------------------------------------------

    def apply(self, partition: Any, records: list[Any]) -> list[Handled]:
        """Store the partition's new messages (steps 2 and 3); return the ``Handled`` ones
        that were new."""
        handled = [self.handle(record) for record in records]
        outbox = self.keys.intake_outbox(partition.topic, partition.partition)
        if outbox not in self.unsure_replies:       # what an earlier process left
            self.unsure_replies[outbox] = {reply.encode("utf-8")
                                           for reply in self.redis.lrange(outbox, 0, -1)}
        fresh = self._store(partition, records, handled, self._topic_id(partition.topic))
        if not fresh and self._topic_id_changed(partition.topic):
            # It all looked applied because the topic was made again (a broker that lost
            # its storage) and numbers from 0: not a redelivery.
            fresh = self._store(partition, records, handled, self._topic_id(partition.topic))
        self.apply_staged(partition)
        return fresh

    def _store(self, partition: Any, records: list[Any], handled: list[Handled],
               topic_id: str) -> list[Handled]:
        applied_key = self.keys.intake_applied(partition.topic, partition.partition)
        id_key = self.keys.intake_topic_id(partition.topic, partition.partition)
        outbox = self.keys.intake_outbox(partition.topic, partition.partition)
        staged = self.keys.intake_staged(partition.topic, partition.partition)

        def transaction(pipe: Any) -> list[Handled]:
            # Every key here carries the cluster-wide hash tag: one transaction even on
            # a Redis Cluster. The writes into the shards are staged and applied after.
            applied, applied_in = pipe.get(applied_key), pipe.get(id_key)
            last = int(applied) if applied is not None else -1
            if applied_in not in (None, topic_id):
                logger.warning("%s was made again on the broker (id %s, was %s); its "
                               "messages are numbered from 0 again", partition.topic,
                               topic_id, applied_in)
                last = -1
            fresh = [h for h in handled if h.offset > last]
            pipe.multi()
            batch = WriteBatch(pipe)
            replies = []
            for h in fresh:
                if h.error is None:
                    h.staged.write(batch)
                    replies.append(h.staged.reply)
                else:
                    replies.append(h.error)
            batch.flush_cluster_wide(self.context.frontier)
            if fresh:
                pipe.rpush(staged, json.dumps({"writes": batch.shard_writes(),
                                               "counts": self._counts(fresh)}))
            encoded = [encode(reply) for reply in replies if reply is not None]
            if encoded:
                pipe.rpush(outbox, *encoded)
            # Never lower it: a rebalance may redeliver an older range.
            pipe.set(applied_key, max(last, records[-1].offset))
            pipe.set(id_key, topic_id)
            return fresh

        fresh: list[Handled] = self.redis.transaction(transaction, applied_key, id_key,
                                                      value_from_callable=True)
        return fresh

    @staticmethod
    def _counts(fresh: list[Handled]) -> dict[str, int]:
        """``{counter name: events}`` of a partition's new messages."""
        counts = {"total": len(fresh)}
        failed = sum(1 for h in fresh if h.error is not None)
        if failed:
            counts["fail"] = failed
        for h in fresh:
            if h.plugin is not None:
                name = f"plugin:{h.plugin.name}"
                counts[name] = counts.get(name, 0) + 1
        return counts

    def apply_staged(self, partition: Any) -> None:
        """Apply the partition's stored shard writes and counts, then trim them.
        A crash in between applies them again (see WriteBatch.apply_shard_writes)."""
        staged = self.keys.intake_staged(partition.topic, partition.partition)
        entries = self.redis.lrange(staged, 0, -1)
        if not entries:
            return
        pipe = self.redis.pipeline(transaction=False)
        for raw in entries:
            entry = json.loads(raw)
            WriteBatch.apply_shard_writes(self.context.frontier, entry["writes"], pipe)
            for name, count in entry["counts"].items():
                self.counter(name).increment(count, pipe=pipe)
        pipe.execute()
        self.redis.ltrim(staged, len(entries), -1)

    def _topic_id(self, topic: str) -> str:
        """The topic's id on the broker, looked up once."""
        if topic not in self.topic_ids:
            self.topic_ids[topic] = self._describe_topic_id(topic)
        return self.topic_ids[topic]

    def _topic_id_changed(self, topic: str) -> bool:
        known = self.topic_ids.get(topic)
        self.topic_ids[topic] = self._describe_topic_id(topic)
        return self.topic_ids[topic] != known

    def _describe_topic_id(self, topic: str) -> str:
        from settings.clients import kafka_admin

        admin = kafka_admin(self.settings, ROLE)
        try:
            [described] = admin.describe_topics([topic])
        finally:
            admin.close()
        return str(described["topic_id"])

    # --- step 3 and after ---------------------------------------------------------------------

    def send_outbox(self, partition: Any) -> None:
        """Send the partition's stored replies, then trim those sent. Replies a delivery
        left unsure, and those an earlier process left (``apply``), are looked for on
        the topic first: sent again, a reply the broker has would answer twice."""
        outbox = self.keys.intake_outbox(partition.topic, partition.partition)
        replies = [reply.encode("utf-8") for reply in self.redis.lrange(outbox, 0, -1)]
        unsure = self.unsure_replies.get(outbox, set())
        self.unsure_replies[outbox] = set()
        if not replies:
            return
        try:
            self.producer.deliver(self.replies_topic, replies, unsure=[
                n for n, reply in enumerate(replies) if reply in unsure])
        except DeliveryFailed as exc:
            # Those stored leave the outbox now; the others are looked for next time.
            self.unsure_replies[outbox] = {replies[n] for n in exc.unsure()}
            pipe = self.redis.pipeline(transaction=False)
            for n in exc.stored():
                pipe.lrem(outbox, 1, replies[n])
            pipe.execute()
            raise
        self.redis.ltrim(outbox, len(replies), -1)

    def _add_seen(self, seen: list[tuple[str, str]]) -> None:
        if not seen:
            return
        try:
            self.context.bloom.add_many([url for _, url in seen],
                                        scope=[crawlid for crawlid, _ in seen])
        except RedisError as exc:
            # Only an optimisation (a seed fetched once more if a page links to it).
            logger.warning("could not add %d seed URLs to their filters: %s", len(seen), exc)

    def _commit(self, offsets: dict[Any, int]) -> None:
        from kafka.structs import OffsetAndMetadata

        if not offsets:
            return
        try:
            self.consumer.commit({partition: OffsetAndMetadata(offset, "", -1)
                                  for partition, offset in offsets.items()})
        except KafkaError as exc:
            # Redelivered to whoever owns the partition now; the applied offset in
            # Redis makes that a no-op.
            logger.warning("offset commit failed (messages will be redelivered): %s", exc)
