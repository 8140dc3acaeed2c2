"""Stored items on Kafka: the firehose's messages and topics, and the catch-up from MongoDB.

With ``CRAWLCLUSTER_FIREHOSE`` on, every item a spider stores in MongoDB is produced to
``CRAWLCLUSTER_KAFKA_ITEMS_TOPIC`` (and to its crawl's own topic, when asked), keyed by
its URL. A spider sends each batch right after storing it (``crawler/firehose.py``) and
notes in Redis how far its items are on Kafka: the ``stored_at`` of its last batch sent
(``Keys.firehose_delivered``). Every item stored carries ``stored_by`` (its job) and
``stored_at`` (its batch's time), so whatever a job stored after its mark can be read
back from MongoDB in the order it was stored (``CatchUp``):

- Kafka down or slow: the spider drops the batches it holds and, once Kafka answers
  again, sends what it stored after its mark from MongoDB;
- a spider that is gone with items not sent: a monitor does the same for it
  (``FirehoseResender``), then removes its mark.

Items sent by a catch-up may have reached Kafka before (a batch whose delivery failed
half way, or sent just before its job died): they carry ``"resent": true``, and a
consumer that must not see an item twice keeps the ``id`` of those it has.
"""

import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from master.keys import Keys
from settings.clients import RedisClient
from settings.loader import Settings

logger = logging.getLogger(__name__)

Document = dict[str, Any]          # an item as MongoDB stores it (with its ``_id``)
Message = tuple[str, bytes, bytes]      # (topic, key, value)
READ_BACK = 1000                   # items a catch-up reads from MongoDB at a time


def topic_name(text: str) -> str:
    """``text`` as a legal Kafka topic name part (letters, digits, ``._-``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:200] or "_"


class ItemTopics:
    """Which topics an item goes to: the items topic, and its crawl's own when the crawl
    asked for it (``"items_topic": true``) or ``CRAWLCLUSTER_FIREHOSE_USER_TOPICS`` is on:
    ``<items topic>.<userid>``, as scrapy-cluster's ``crawled_<appid>`` topics."""

    def __init__(self, settings: Settings) -> None:
        self.firehose = settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"]
        self.user_topics = settings.getbool("CRAWLCLUSTER_FIREHOSE_USER_TOPICS")

    def of(self, config: dict[str, Any] | None) -> list[str]:
        if config and config.get("userid") and (self.user_topics or config.get("items_topic")):
            return [self.firehose, f"{self.firehose}.{topic_name(str(config['userid']))}"]
        return [self.firehose]


def encode_item(document: Document, config: dict[str, Any] | None, fields: str,
                resent: bool) -> bytes:
    """The message of a stored item: the document as stored, its ``_id`` as ``id`` and
    ``resent``; or, with ``fields="scrapy-cluster"``, the fields of scrapy-cluster's
    crawled firehose, the stored item under ``item``."""
    item = {key: value for key, value in document.items() if key != "_id"}
    item["id"] = str(document.get("_id", ""))
    item["resent"] = resent
    if fields == "scrapy-cluster":
        item = scrapy_cluster_fields(item, config or {})
    return json.dumps(item, ensure_ascii=False, default=str).encode("utf-8")


def scrapy_cluster_fields(item: Document, config: dict[str, Any]) -> Document:
    """What scrapy-cluster's ``KafkaPipeline`` puts on ``<prefix>.crawled_firehose``."""
    status = int(item.get("status") or 200)
    try:
        status_msg = HTTPStatus(status).phrase
    except ValueError:
        status_msg = ""
    fetched_at = float(next((item[name] for name in ("fetched_at", "stored_at")
                             if item.get(name) is not None), time.time()))
    return {"url": item.get("url"), "response_url": item.get("url"),
            "status_code": status, "status_msg": status_msg, "success": status < 400,
            "crawlid": item.get("crawlid"), "appid": config.get("userid", ""),
            "attrs": config.get("attrs"), "encoding": "utf-8",
            "body": item.get("main_text", ""), "links": [],
            "request_headers": {}, "response_headers": {},
            "timestamp": datetime.fromtimestamp(fetched_at, UTC).replace(tzinfo=None).isoformat(),
            "id": item["id"], "resent": item["resent"], "item": item}


class ItemProducer:
    """Keyed messages to Kafka, every one confirmed or an error raised; topics are created
    when first used. Sent by librdkafka (``native_producer``), whose batching and sending
    stay off the spider's GIL. A producer whose delivery failed is dropped with what it
    buffered and made again on the next send."""

    def __init__(self, settings: Settings, role: str) -> None:
        self.settings, self.role = settings, role
        self.timeout = settings.getfloat("CRAWLCLUSTER_SOCKET_TIMEOUT")
        self.producer: Any = None
        self.topics: set[str] = set()

    def prepare(self, topics: Iterable[str]) -> None:
        """Create ``topics`` if the broker lacks them, and the producer if not made yet."""
        from settings.clients import ensure_topics, native_producer

        new = set(topics) - self.topics
        if new:
            partitions = self.settings.getint("CRAWLCLUSTER_KAFKA_PARTITIONS")
            ensure_topics(self.settings, self.role, topics=dict.fromkeys(new, partitions))
            self.topics |= new
        if self.producer is None:
            self.producer = native_producer(self.settings, self.role)

    def send(self, messages: list[Message]) -> None:
        """Raises a KafkaError or ServerUnreachable unless the broker stored them all."""
        from kafka.errors import KafkaError, KafkaTimeoutError

        self.prepare({topic for topic, _, _ in messages})
        failed: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:     # in flush, on this thread
            if error is not None:
                failed.append(error)

        try:
            for topic, key, value in messages:
                self._produce(topic, key, value, delivered)
            left = self.producer.flush(self.timeout)
            if left:
                raise KafkaTimeoutError(f"{left} messages not confirmed in {self.timeout} s")
            if failed:
                raise KafkaError(f"{len(failed)} messages not stored: {failed[0]}")
        except KafkaError:
            self.close(timeout=0)
            raise

    def _produce(self, topic: str, key: bytes, value: bytes, delivered: Any) -> None:
        """One message into librdkafka's queue (waiting for deliveries once if it is
        full); librdkafka's refusals raised as a KafkaError."""
        from confluent_kafka import KafkaException
        from kafka.errors import KafkaError, KafkaTimeoutError

        try:
            try:
                self.producer.produce(topic, value, key=key, on_delivery=delivered)
            except BufferError:
                if self.producer.flush(self.timeout):
                    raise KafkaTimeoutError(f"not confirmed in {self.timeout} s") from None
                self.producer.produce(topic, value, key=key, on_delivery=delivered)
        except KafkaException as exc:
            raise KafkaError(f"refused by the producer: {exc}") from None

    def close(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` s (the socket timeout if None) for what is buffered;
        with 0, drop it."""
        if self.producer is not None:
            if timeout == 0:
                self.producer.purge()
                self.producer.flush(0)
            else:
                self.producer.flush(self.timeout if timeout is None else timeout)
            self.producer = None


class DeliveryMarks:
    """How far each job's stored items are on Kafka (one Redis hash)."""

    def __init__(self, client: RedisClient, keys: Keys,
                 clock: Callable[[], float] = time.time) -> None:
        self.client, self.key, self.clock = client, keys.firehose_delivered(), clock

    def set(self, job: str, spider_type: str, stored_at: float) -> None:
        mark = {"stored_at": stored_at, "spider_type": spider_type, "at": self.clock()}
        self.client.hset(self.key, job, json.dumps(mark))

    def remove(self, job: str) -> None:
        self.client.hdel(self.key, job)

    def all(self) -> dict[str, dict[str, Any]]:
        return {job: json.loads(raw) for job, raw in self.client.hgetall(self.key).items()}


class CatchUp:
    """Sends what a job stored after a mark, read back from MongoDB in the order it was
    stored, batch by batch, marked resent; the mark follows each batch sent."""

    def __init__(self, database: Any, producer: ItemProducer, topics: ItemTopics,
                 fields: str, configs: Callable[[str], dict[str, Any] | None],
                 marks: DeliveryMarks) -> None:
        self.database, self.producer, self.topics = database, producer, topics
        self.fields, self.configs, self.marks = fields, configs, marks

    def run(self, job: str, spider_type: str, since: float,
            stopping: Callable[[], bool] = lambda: False) -> tuple[float, int]:
        """``(new mark, items sent)``; raises what Kafka or MongoDB raise (the mark then
        says how far it got)."""
        collection = self.database[f"items_{spider_type}"]
        sent = 0
        while not stopping():
            documents = self._next_batches(collection, job, since)
            if not documents:
                break
            self.producer.send(messages(documents, self.configs, self.topics, self.fields,
                                        resent=True))
            since = documents[-1]["stored_at"]
            sent += len(documents)
            self.marks.set(job, spider_type, since)
        return since, sent

    @staticmethod
    def _next_batches(collection: Any, job: str, since: float) -> list[Document]:
        """Whole stored batches after ``since``: up to READ_BACK items, cut before the last
        batch unless it is the only one (a batch shares one ``stored_at``)."""
        query = {"stored_by": job, "stored_at": {"$gt": since}}
        documents = list(collection.find(query).sort("stored_at", 1).limit(READ_BACK))
        if len(documents) < READ_BACK:
            return documents
        last = documents[-1]["stored_at"]
        head = [document for document in documents if document["stored_at"] < last]
        return head or list(collection.find({"stored_by": job, "stored_at": last}))


def messages(documents: Iterable[Document], configs: Callable[[str], dict[str, Any] | None],
             topics: ItemTopics, fields: str, resent: bool) -> list[Message]:
    """Every (topic, key, value) of ``documents``."""
    out: list[Message] = []
    for document in documents:
        config = configs(document["crawlid"])
        value = encode_item(document, config, fields, resent)
        key = str(document["url"]).encode("utf-8")
        out.extend((topic, key, value) for topic in topics.of(config))
    return out


class FirehoseResender:
    """The monitor's part: sends the rest of the items of jobs that are gone (silent
    past the heartbeat TTL, their mark older than it too), one monitor at a time."""

    ROLE = "monitor"

    def __init__(self, settings: Settings, redis: RedisClient, keys: Keys,
                 live_jobs: Callable[[], dict[str, Any]],
                 configs: Callable[[str], dict[str, Any] | None],
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.redis, self.keys, self.clock = settings, redis, keys, clock
        self.live_jobs = live_jobs
        self.configs = configs
        self.every = settings.getfloat("CRAWLCLUSTER_FIREHOSE_RESEND_EVERY")
        self.ttl = settings.getfloat("CRAWLCLUSTER_HEARTBEAT_TTL")
        self.marks = DeliveryMarks(redis, keys, clock)
        self.producer = ItemProducer(settings, self.ROLE)
        self.last = 0.0
        self._mongo: Any = None

    def due(self) -> bool:
        """Time for a look (whether or not this monitor's settings turn the firehose on:
        the spiders' may, and a look at no marks costs one HGETALL)."""
        return time.monotonic() - self.last >= self.every

    def run_once(self) -> int:
        """Send what gone jobs left; return how many items."""
        self.last = time.monotonic()
        lock = self.keys.firehose_lock()
        if not self.redis.set(lock, "1", nx=True, ex=600):
            return 0
        try:
            return sum(self._finish(job, mark) for job, mark in self._gone().items())
        finally:
            self.redis.delete(lock)

    def _gone(self) -> dict[str, dict[str, Any]]:
        cutoff = self.clock() - self.ttl
        live = self.live_jobs()
        return {job: mark for job, mark in self.marks.all().items()
                if job not in live and mark["at"] < cutoff}

    def _finish(self, job: str, mark: dict[str, Any]) -> int:
        catch_up = CatchUp(self._database(), self.producer, ItemTopics(self.settings),
                           self.settings["CRAWLCLUSTER_FIREHOSE_FORMAT"], self.configs,
                           self.marks)
        _, sent = catch_up.run(job, mark["spider_type"], mark["stored_at"])
        self.marks.remove(job)
        logger.info("firehose: job %s is gone; sent the %d items it had not", job, sent)
        return sent

    def _database(self) -> Any:
        from settings.clients import mongo_client

        if self._mongo is None:
            self._mongo = mongo_client(self.settings, self.ROLE)
        return self._mongo[self.settings["CRAWLCLUSTER_MONGODB_DATABASE"]]

    def close(self) -> None:
        self.producer.close()
        if self._mongo is not None:
            self._mongo.close()
