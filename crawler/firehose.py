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
    messages,
)

if TYPE_CHECKING:
    from crawler.context import JobContext

logger = logging.getLogger(__name__)
RETRY_AFTER = 2.0        # seconds between tries while Kafka does not answer
MARK_EVERY = 1.0         # seconds between saves of the job's mark in Redis
SEND_AT = 500            # messages that are sent at once, without waiting for more
SEND_AFTER = 0.25        # seconds a stored batch waits at most for others to go with it
CATCH_UP = "catch up"    # what the thread does next: read back from MongoDB


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
        self.marked = 0.0              # when the mark was last saved in Redis
        self._save_mark()
        self.behind = False            # something after the mark is only in MongoDB
        self.queue: deque[tuple[float, list[Message], float]] = deque()   # + when queued
        self.waiting = 0               # messages in the queue
        self.wake = threading.Condition()
        self.closing = False
        self.gave_up = False           # closed before all was sent: a monitor sends the rest
        self.thread = threading.Thread(target=self._run, name="firehose", daemon=True)
        self.thread.start()

    def put(self, documents: list[Document], stored_at: float) -> None:
        """Queue a stored batch (its messages are made here, on the reactor, where the
        crawl configs are cached)."""
        batch = messages(documents, self.configs, self.topics, self.fields, resent=False)
        with self.wake:
            if len(self.queue) >= self.limit:
                self.queue.clear()           # in MongoDB: read back once Kafka answers
                self.waiting = 0
                self.behind = True
                self.stats.inc_value("crawlcluster/firehose/fell_behind")
            else:
                self.queue.append((stored_at, batch, time.monotonic()))
                self.waiting += len(batch)
            # the first batch starts the thread's wait of SEND_AFTER; a full queue ends it
            if len(self.queue) == 1 or self.waiting >= SEND_AT or self.behind:
                self.wake.notify()

    def _run(self) -> None:
        self._prepare()
        while True:
            work = self._next()
            if work is None:
                return
            try:
                if isinstance(work, tuple):
                    self._send(*work)
                else:
                    self._catch_up()
            except Exception as exc:  # noqa: BLE001 - Kafka or MongoDB away: try again later
                self._fall_behind(exc)

    def _prepare(self) -> None:
        """The items topic and the producer, made as the spider opens: made at the first
        send, their start-up (~0.2 s of Python: kafka-python's admin client) would share
        the GIL with the reactor mid-crawl. With Kafka away, the first send tries again."""
        try:
            self.producer.prepare([self.topics.firehose])
        except Exception as exc:  # noqa: BLE001 - the first send reports and catches up
            logger.info("firehose: Kafka not ready as the spider opens (%s)", exc)

    def _next(self) -> tuple[float, list[Message]] | str | None:
        """What to do next: send ``(stored_at, messages)``, every batch queued in one go
        (once ``SEND_AT`` messages wait, or the first has waited ``SEND_AFTER``: a
        Kafka request per stored batch costs the spider more than the messages do),
        ``CATCH_UP``, or None to end."""
        with self.wake:
            while True:
                if self.gave_up or (self.closing and not self.queue and not self.behind):
                    return None
                if self.behind:
                    return CATCH_UP
                if self.queue:
                    waited = time.monotonic() - self.queue[0][2]
                    if self.closing or self.waiting >= SEND_AT or waited >= SEND_AFTER:
                        break
                    self.wake.wait(SEND_AFTER - waited)
                else:
                    self.wake.wait()
            batches, self.waiting = list(self.queue), 0
            self.queue.clear()
        fresh = [batch for batch in batches if batch[0] > self.mark]   # not sent by a catch-up
        return batches[-1][0], [message for _, messages, _ in fresh for message in messages]

    def _send(self, stored_at: float, batch: list[Message]) -> None:
        self.producer.send(batch)
        self.mark = stored_at
        if time.monotonic() - self.marked >= MARK_EVERY:
            self._save_mark()
        self.stats.inc_value("crawlcluster/firehose/sent", len(batch))

    def _save_mark(self) -> None:
        """The mark in Redis, for a monitor to go on from if this job dies (it may lag the
        one in memory by ``MARK_EVERY``: a monitor then sends those items again, resent)."""
        self.marks.set(self.job, self.spider_type, self.mark)
        self.marked = time.monotonic()

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
            self.waiting = 0
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
            self._save_mark()
            logger.warning("firehose: items stored after %.3f are not all on Kafka; a "
                           "monitor sends them once this job is gone", self.mark)
        else:
            self.marks.remove(self.job)
        self.producer.close(timeout=0 if not done else None)
        self.mongo.close()
