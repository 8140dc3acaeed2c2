"""The Kafka delivery protocol: a producer whose sends are confirmed, retried within a
bound, and reported when they fail for good, so no message is lost silently."""

import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, NamedTuple

from settings.clients import kafka_consumer, kafka_producer
from settings.errors import CrawlClusterError, ServerUnreachable

if TYPE_CHECKING:
    from settings.loader import Settings

logger = logging.getLogger(__name__)


class Delivered(NamedTuple):
    """Where a message is on its topic, when it was found there rather than confirmed."""

    topic: str
    partition: int
    offset: int

class DeliveryFailed(CrawlClusterError):
    """Some messages of a delivery are not known to be stored. ``results`` holds, for each
    message, where it is (stored) or None (not stored, or not known to be: the broker
    could not be read to tell)."""

    def __init__(self, message: str, results: list[Any]) -> None:
        super().__init__(message)
        self.results = results

    def stored(self) -> list[int]:
        """The indexes of the messages known to be stored."""
        return [n for n, result in enumerate(self.results) if result is not None]

    def unsure(self) -> list[int]:
        """The indexes of the others: to be looked for before they are sent again."""
        return [n for n, result in enumerate(self.results) if result is None]

class DeliveringProducer:
    """A Kafka producer for messages that must arrive: ``deliver`` returns only once the
    broker has every one of them, or raises ``DeliveryFailed`` saying which it has.

    A producer whose delivery failed is dropped with what it still buffered and made
    again on the next call: a broker that restarted without its state (Tansu's memory
    storage) no longer knows the old producer's id and would refuse it for good.

    A message the broker did not confirm may be stored all the same: a broker that is
    stopping acknowledges some without an offset (-1), a delivery that timed out or
    failed may have reached it, and one message of a batch can fail while the rest
    are stored. Every message not confirmed is looked for once the broker answers again,
    and only those not there are sent again. A plain resend would answer a request
    twice; trusting the acknowledgment loses one now and then. The look reads each
    partition from the offset after the last message this producer had confirmed there
    before the unsure ones were sent (they can only be later), or, not knowing that (a
    process that left them), its last ``LOOK_BACK`` records: a broker that serves a
    fetch slowly (Tansu on S3 reads a few hundred records in 10 s) cannot be read back
    that far in time, and the messages were sent again, some twice.
    """

    LOOK_BACK = 2_000
    # Read on this long before saying a message is not there: just after acknowledging
    # without an offset, or restarting, Tansu's end offsets may leave out a message it
    # stored and serves a moment later (sent again at once: 7 of 1,471 answered twice).
    SETTLE = 3.0
    KEEP_FLOORS = 10_000        # unsure messages whose floors are kept, at most

    def __init__(self, settings: "Settings", role: str, **overrides: Any):
        self.settings, self.role = settings, role
        self._make: Callable[[], Any] = lambda: kafka_producer(settings, role, **overrides)
        self.timeout = settings.getfloat("CRAWLCLUSTER_SOCKET_TIMEOUT")
        self.producer = self._make()
        # topic -> {partition: the offset after the last message confirmed there}
        self._confirmed_next: dict[str, dict[int, int]] = {}
        # (topic, message left unsure) -> those offsets when it was sent
        self._sent_after: dict[tuple[str, bytes], dict[int, int]] = {}

    def deliver(self, topic: str, values: list[bytes], timeout: float | None = None,
                give_up_after: float | None = None,
                unsure: Collection[int] = ()) -> list[Any]:
        """Send ``values`` (bytes) to ``topic``; return where each is (RecordMetadata or
        ``Delivered``: ``topic``, ``partition``, ``offset``).

        ``timeout`` bounds each send and each look; messages not confirmed are looked
        for and sent again (a broker that restarts) until ``give_up_after`` seconds have
        passed (four times ``timeout`` unless given), then ``DeliveryFailed`` is raised
        naming the messages stored. The messages ``unsure`` names (indexes: of an
        earlier delivery that failed so) are looked for before anything is sent, and
        sent again if the topic cannot be read that long."""
        floor = self._floor(topic, values, unsure)
        try:
            results = self._deliver(topic, values, timeout or self.timeout, give_up_after,
                                    unsure, floor)
        except DeliveryFailed as exc:
            self._note(topic, values, exc.results, floor)
            raise
        self._note(topic, values, results, floor)
        return results

    def _floor(self, topic: str, values: list[bytes], unsure: Collection[int]
               ) -> dict[int, int]:
        """``{partition: offset}`` below which none of ``values`` can be: where this
        producer's confirmed messages ended before they were sent (for those ``unsure``,
        when they were first sent); a partition left out is not known."""
        if not unsure:
            return dict(self._confirmed_next.get(topic, {}))
        floors = [self._sent_after.get((topic, values[n])) for n in unsure]
        known = [floor for floor in floors if floor is not None]
        if len(known) < len(floors):
            return {}
        return {partition: min(floor.get(partition, 0) for floor in known)
                for partition in known[0]}

    def _note(self, topic: str, values: list[bytes], results: list[Any],
              floor: dict[int, int]) -> None:
        """Keep where the confirmed messages end, and the floor of those left unsure.
        The ends are this call's, not the highest ever: a topic made again on the broker
        numbers from 0."""
        ends: dict[int, int] = {}
        for value, result in zip(values, results, strict=True):
            if result is None:
                if len(self._sent_after) >= self.KEEP_FLOORS:
                    self._sent_after.clear()        # looked for further back, no more
                self._sent_after[(topic, value)] = floor
                continue
            self._sent_after.pop((topic, value), None)
            if result.offset >= 0:
                ends[result.partition] = max(ends.get(result.partition, 0), result.offset + 1)
        self._confirmed_next.setdefault(topic, {}).update(ends)

    def _deliver(self, topic: str, values: list[bytes], timeout: float,
                 give_up_after: float | None, unsure: Collection[int],
                 floor: dict[int, int]) -> list[Any]:
        budget = give_up_after or 4 * timeout
        results: list[Any] = [None] * len(values)
        if unsure:
            try:
                self._look(topic, values, sorted(unsure), results, timeout,
                           time.monotonic() + budget, floor)
            except DeliveryFailed as exc:
                # Never stall for good on a topic too slow to read back: a message sent
                # twice is answered twice, one never sent is lost.
                logger.warning("%s: sending them again (some may be there twice)", exc)
        deadline = time.monotonic() + budget
        pending = [n for n in range(len(values)) if results[n] is None]
        while pending:
            sent, error = self._send(topic, [values[n] for n in pending], timeout)
            for n, metadata in zip(pending, sent, strict=True):
                if metadata is not None and metadata.offset >= 0:
                    results[n] = metadata
            unsure = [n for n in pending if results[n] is None]
            if not unsure:
                break
            if not getattr(error, "retriable", True):       # e.g. a message too large
                raise DeliveryFailed(f"{len(unsure)} of {len(values)} messages to {topic} "
                                     f"refused: {error}", results)
            logger.warning("%d of %d messages to %s not confirmed (%s): looking for them on "
                           "the topic", len(unsure), len(values), topic,
                           error or "acknowledged without an offset")
            self._look(topic, values, unsure, results, timeout, deadline, floor)
            pending = [n for n in unsure if results[n] is None]
            if pending:
                logger.warning("%d of %d messages to %s not confirmed and not on the topic: "
                               "sending them again", len(pending), len(values), topic)
                if time.monotonic() > deadline:
                    raise DeliveryFailed(f"{len(pending)} of {len(values)} messages to "
                                         f"{topic} not stored", results)
        return results

    def _look(self, topic: str, values: list[bytes], unsure: list[int], results: list[Any],
              timeout: float, deadline: float, floor: dict[int, int]) -> None:
        """Fill ``results`` for those of ``unsure`` found on the topic; raise
        ``DeliveryFailed`` if it cannot be read by ``deadline`` (sending them again
        could store them twice)."""
        from kafka.errors import KafkaError

        try:
            found = self._find_by(topic, {values[n] for n in unsure}, timeout, deadline,
                                  floor)
        except (KafkaError, ServerUnreachable) as exc:
            raise DeliveryFailed(f"{len(unsure)} of {len(values)} messages to {topic} not "
                                 f"known to be stored, and the topic could not be read: "
                                 f"{exc}", results) from None
        for n in unsure:
            if values[n] in found:
                results[n] = Delivered(topic, *found[values[n]])

    def _send(self, topic: str, values: list[bytes], timeout: float) -> tuple[list[Any], Any]:
        """``([RecordMetadata or None for each value], the first error or None)``: None
        for a message whose send failed or did not finish in time."""
        from kafka.errors import KafkaError, KafkaTimeoutError

        futures: list[Any] = [None] * len(values)
        errors: list[Exception] = []
        try:
            if self.producer is None:
                self.producer = self._make()
            for n, value in enumerate(values):
                try:
                    futures[n] = self.producer.send(topic, value)
                except KafkaError as exc:      # this one only (e.g. too large)
                    errors.append(exc)
            self.producer.flush(timeout=timeout)
        except (KafkaError, ServerUnreachable) as exc:
            errors.append(exc)
        sent: list[Any] = [None] * len(values)
        for n, future in enumerate(futures):
            if future is None:
                continue
            if not future.is_done:
                errors.append(KafkaTimeoutError(f"no answer within {timeout} s"))
            elif future.failed():
                errors.append(future.exception)
            else:
                sent[n] = future.value
        if errors and self.producer is not None:
            self.producer.close(timeout=0)
            self.producer = None
        return sent, errors[0] if errors else None

    def _find_by(self, topic: str, wanted: set[bytes], timeout: float,
                 deadline: float, floor: dict[int, int]) -> dict[bytes, tuple[int, int]]:
        """``_find``, tried again until ``deadline`` while the topic cannot be read:
        giving up would send the whole batch again, answering some requests twice."""
        from kafka.errors import KafkaError

        while True:
            try:
                return self._find(topic, wanted, timeout, floor)
            except (KafkaError, ServerUnreachable) as exc:
                if time.monotonic() > deadline:
                    raise
                logger.warning("could not look for messages not confirmed (trying again): "
                               "%s", exc)
                time.sleep(1.0)

    def _find(self, topic: str, wanted: set[bytes], timeout: float,
              floor: dict[int, int]) -> dict[bytes, tuple[int, int]]:
        """``{value: (partition, offset)}`` of the ``wanted`` values among the records of
        the topic's partitions from ``floor`` on (or their last ``LOOK_BACK``), read for
        ``SETTLE`` seconds at least. Raises a KafkaError if it cannot read them in time."""
        from kafka import TopicPartition
        from kafka.errors import KafkaTimeoutError

        consumer = kafka_consumer(self.settings, self.role, group_id=None)
        try:
            partitions = [TopicPartition(topic, number)
                          for number in sorted(consumer.partitions_for_topic(topic) or ())]
            if not partitions:
                raise KafkaTimeoutError(f"the partitions of {topic} are not known yet")
            consumer.assign(partitions)
            # A partition's end is where its last batch starts, plus one, on Tansu (past
            # its last record on Kafka): read while below it, the last batch comes whole.
            # One that ends at or before the floor has no batch sent after it.
            ends = consumer.end_offsets(partitions)
            for partition in partitions:
                consumer.seek(partition, max(0, ends[partition] - self.LOOK_BACK,
                                             floor.get(partition.partition, 0)))
            found: dict[bytes, tuple[int, int]] = {}
            started = time.monotonic()
            settled, stop = started + min(self.SETTLE, timeout), started + timeout
            while len(found) < len(wanted):
                behind = {partition.partition: (consumer.position(partition), ends[partition])
                          for partition in partitions
                          if consumer.position(partition) < ends[partition]}
                if not behind and time.monotonic() >= settled:
                    break
                if time.monotonic() > stop:
                    raise KafkaTimeoutError(f"could not read {topic} back in {timeout} s "
                                            f"(partition: (position, end) {behind})")
                for partition, records in consumer.poll(timeout_ms=200).items():
                    for record in records:
                        if record.value in wanted:
                            found.setdefault(record.value, (partition.partition, record.offset))
            return found
        finally:
            consumer.close()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
