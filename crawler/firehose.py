"""A spider's firehose: its stored items onto Kafka, in a thread of their own.

``MongoPipeline`` hands over each batch MongoDB stored (``put``, on the reactor: it
only queues). The thread sends them in order and moves the job's mark in Redis
(``message_processing/firehose.py``) to the last batch sent. When a send fails, or
more than ``CRAWLCLUSTER_FIREHOSE_QUEUE`` batches wait (Kafka slow or down), the thread
drops what it holds and falls behind: once Kafka takes messages again it reads what
the job stored after its mark back from MongoDB (marked ``resent``), then goes on
with the batches that come after. Memory stays bounded however long Kafka is away,
and nothing stored is left off the topic.
"""

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from message_processing.firehose import (
    CatchUp,
    DeliveryMarks,
    Document,
    ItemProducer,
    ItemTopics,
    Message,
    encode_item,
)

if TYPE_CHECKING:
    from crawler.context import JobContext

logger = logging.getLogger(__name__)
RETRY_AFTER = 2.0        # seconds between tries while Kafka does not answer


class Firehose:
    def __init__(self, context: "JobContext") -> None:
        from master.crawls import CrawlStore
        from settings.clients import mongo_client

        settings = context.settings
        self.job, self.spider_type = context.job, context.spider_type
        self.topics = ItemTopics(settings)
        self.fields = settings["CRAWLCLUSTER_FIREHOSE_FORMAT"]
        self.configs = context.crawls.load               # the reactor's (put runs there)
        self.limit = settings.getint("CRAWLCLUSTER_FIREHOSE_QUEUE")
        self.stats = context.crawler.stats
        self.marks = DeliveryMarks(context.redis, context.keys)
        self.producer = ItemProducer(settings, "crawler")
        self.mongo = mongo_client(settings, "crawler")
        own_store = CrawlStore.from_settings(context.redis, settings)   # the thread's cache
        self.catch_up = CatchUp(self.mongo[settings["CRAWLCLUSTER_MONGODB_DATABASE"]],
                                self.producer, self.topics, self.fields, own_store.load,
                                self.marks)
        self.mark = time.time()        # every batch stored up to here is on Kafka
        self.marks.set(self.job, self.spider_type, self.mark)
        self.behind = False            # something after the mark is only in MongoDB
        self.queue: deque[tuple[float, list[Message]]] = deque()
        self.wake = threading.Condition()
        self.closing = False
        self.gave_up = False           # closed before all was sent: a monitor sends the rest
        self.thread = threading.Thread(target=self._run, name="firehose", daemon=True)
        self.thread.start()

    def put(self, documents: list[Document], stored_at: float) -> None:
        """Queue a stored batch (its messages are made here, on the reactor, where the
        crawl configs are cached)."""
        batch = [(topic, str(document["url"]).encode("utf-8"), value)
                 for document in documents
                 for value, topics in [self._encode(document)] for topic in topics]
        with self.wake:
            if len(self.queue) >= self.limit:
                self.queue.clear()           # in MongoDB: read back once Kafka answers
                self.behind = True
                self.stats.inc_value("crawlcluster/firehose/fell_behind")
            else:
                self.queue.append((stored_at, batch))
            self.wake.notify()

    def _encode(self, document: Document) -> tuple[bytes, list[str]]:
        config = self.configs(document["crawlid"])
        return encode_item(document, config, self.fields, resent=False), self.topics.of(config)

    def _run(self) -> None:
        while True:
            with self.wake:
                while not (self.queue or self.behind or self.closing):
                    self.wake.wait()
                if self.gave_up or (self.closing and not self.queue and not self.behind):
                    return
                behind = self.behind
                stored_at, batch = self.queue.popleft() if self.queue and not behind \
                    else (0.0, [])
            try:
                if behind:
                    self._catch_up()
                elif stored_at > self.mark:      # a catch-up may have sent it already
                    self._send(stored_at, batch)
            except Exception as exc:  # noqa: BLE001 - Kafka or MongoDB away: try again later
                self._fall_behind(exc)

    def _send(self, stored_at: float, batch: list[Message]) -> None:
        self.producer.send(batch)
        self.mark = stored_at
        self.marks.set(self.job, self.spider_type, stored_at)
        self.stats.inc_value("crawlcluster/firehose/sent", len(batch))

    def _catch_up(self) -> None:
        self.mark, sent = self.catch_up.run(self.job, self.spider_type, self.mark,
                                            stopping=lambda: self.gave_up)
        self.stats.inc_value("crawlcluster/firehose/resent", sent)
        with self.wake:
            self.behind = False
        logger.info("firehose: caught up (%d items read back from MongoDB)", sent)

    def _fall_behind(self, error: Exception) -> None:
        logger.warning("firehose: items not sent to Kafka (%s); they are sent from MongoDB "
                       "once it answers", error)
        self.stats.inc_value("crawlcluster/firehose/failures")
        with self.wake:
            self.queue.clear()
            self.behind = True
            self.wake.wait(RETRY_AFTER)

    def close(self, timeout: float) -> None:
        """Send what is left, for up to ``timeout`` seconds (blocking: call it in a
        thread). What is still not sent then is left to a monitor: the job's mark stays."""
        with self.wake:
            self.closing = True
            self.wake.notify()
        self.thread.join(timeout)
        done = not self.thread.is_alive() and not self.behind and not self.queue
        if not done:
            with self.wake:
                self.gave_up = True
                self.wake.notify()
            logger.warning("firehose: items stored after %.3f are not all on Kafka; a "
                           "monitor sends them once this job is gone", self.mark)
        else:
            self.marks.remove(self.job)
        self.producer.close(timeout=0 if not done else None)
        self.mongo.close()
