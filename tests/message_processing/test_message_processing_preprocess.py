"""The preprocess transaction against a real Redis and a real Redis Cluster, fed records
directly: a redelivered range, even an older one after a rebalance, changes nothing, and
the staged writes into the shards are applied once however often they are replayed."""

import json
from collections import namedtuple

import pytest
from kafka.structs import TopicPartition

from master.crawls import CrawlStore
from master.frontier import Frontier
from message_processing.preprocess.service import Preprocess
from settings.clients import kafka_consumer, kafka_producer
from tests.message_processing.samples import crawl

Record = namedtuple("Record", "topic partition offset value")


def records(topic, first, last):
    return [Record(topic, 0, n, json.dumps(crawl(n)).encode()) for n in range(first, last + 1)]


@pytest.fixture
def partition_of_13(test_settings, kafka_topics):
    """Partition 0 of the test's requests topic holding 13 messages, and a consumer."""
    topic = kafka_topics[0]
    producer = kafka_producer(test_settings, "test")
    for n in range(13):
        producer.send(topic, json.dumps(crawl(n)).encode(), partition=0)
    producer.flush()
    producer.close()
    consumer = kafka_consumer(test_settings, "test", group_id=None)
    yield TopicPartition(topic, 0), consumer
    consumer.close()


BOTH = pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"], indirect=True)


@BOTH
def test_redelivered_and_older_ranges_are_skipped(frontier_redis, frontier_settings,
                                                  partition_of_13):
    redis = frontier_redis
    partition, consumer = partition_of_13
    preprocess = Preprocess(frontier_settings, redis, consumer=consumer, producer=None)
    t = partition.topic
    frontier = Frontier.from_settings(redis, frontier_settings)
    assert len(preprocess.apply(partition, records(t, 0, 9))) == 10
    assert preprocess.apply(partition, records(t, 3, 6)) == []          # an older range again
    assert len(preprocess.apply(partition, records(t, 5, 12))) == 3      # only 10, 11, 12 are new
    assert frontier.pool_count() == 13
    outbox = redis.lrange(preprocess.keys.intake_outbox(t, 0), 0, -1)
    assert sorted(json.loads(reply)["crawlid"] for reply in outbox) == sorted(
        f"c{n}" for n in range(13))                                     # one ack each


@BOTH
def test_staged_shard_writes_survive_a_crash_and_apply_once(frontier_redis, frontier_settings,
                                                           partition_of_13):
    """Killed between the transaction and applying its shard writes: the next round
    applies them; applying them again queues nothing twice."""
    redis = frontier_redis
    partition, consumer = partition_of_13
    preprocess = Preprocess(frontier_settings, redis, consumer=consumer, producer=None)
    t = partition.topic
    frontier = Frontier.from_settings(redis, frontier_settings)
    staged = preprocess.keys.intake_staged(t, 0)
    batch = records(t, 0, 12)
    topic_id = preprocess._topic_id(t)
    assert len(preprocess._store(partition, batch, [preprocess.handle(r) for r in batch],
                                 topic_id)) == 13                  # step 2 only, then "killed"
    assert frontier.pool_count() == 0 and redis.llen(staged) == 1
    assert all(redis.get(preprocess.keys.crawl(f"c{n}")) for n in range(13))   # configs stored

    entry = redis.lindex(staged, 0)
    assert preprocess.apply(partition, batch) == []                # the redelivery
    assert frontier.pool_count() == 13 and redis.llen(staged) == 0
    redis.rpush(staged, entry)                                     # applied, not yet trimmed
    preprocess.apply_staged(partition)
    assert frontier.pool_count() == 13
    pending = CrawlStore(redis, preprocess.keys).pending_totals([f"c{n}" for n in range(13)])
    assert set(pending.values()) == {1}                            # counted once each
    for shard in frontier.keys.all_shards():                       # dispatched meanwhile
        redis.delete(frontier.keys.pool(shard, "universal"))
    redis.rpush(staged, entry)                                     # and applied again
    preprocess.apply_staged(partition)
    assert frontier.pool_count() == 0                              # the seeds not queued again
    pending = CrawlStore(redis, preprocess.keys).pending_totals([f"c{n}" for n in range(13)])
    assert set(pending.values()) == {1}


class StoresTheFirst:
    """A producer whose delivery stores the first ``n`` replies and fails the rest (the
    broker went away mid-batch)."""

    def __init__(self, n):
        self.n = n
        self.delivered = []
        self.asked = []                  # (values, unsure) of each call

    def deliver(self, topic, values, unsure=()):
        from message_processing.delivery import DeliveryFailed

        self.asked.append((list(values), list(unsure)))
        if self.n is None:               # stores every one
            self.delivered += values
            return [object()] * len(values)
        self.delivered += values[:self.n]
        raise DeliveryFailed("the broker went away", [object()] * self.n
                             + [None] * (len(values) - self.n))

    def close(self):
        pass


def test_replies_stored_before_a_failed_delivery_leave_the_outbox(frontier_redis,
                                                                   frontier_settings,
                                                                   partition_of_13):
    """Sent again, a reply the broker already has would answer a request twice."""
    from message_processing.delivery import DeliveryFailed

    redis = frontier_redis
    partition, consumer = partition_of_13
    producer = StoresTheFirst(4)
    preprocess = Preprocess(frontier_settings, redis, consumer=consumer, producer=producer)
    preprocess.apply(partition, records(partition.topic, 0, 9))
    outbox = preprocess.keys.intake_outbox(partition.topic, 0)
    with pytest.raises(DeliveryFailed):
        preprocess.send_outbox(partition)
    left = [reply.encode() for reply in redis.lrange(outbox, 0, -1)]
    assert len(left) == 6 and not set(left) & set(producer.delivered)

    producer.n = None                    # the broker is back: the six are looked for first
    preprocess.send_outbox(partition)
    assert producer.asked[-1] == (left, list(range(6))) and redis.llen(outbox) == 0


def test_replies_an_earlier_process_left_are_looked_for_before_they_are_sent(
        frontier_redis, frontier_settings, partition_of_13):
    """Killed between sending its replies and trimming them: the next process looks for
    what it finds in the outbox; the replies of its own first batch it just sends."""
    redis = frontier_redis
    partition, consumer = partition_of_13
    Preprocess(frontier_settings, redis, consumer=consumer, producer=None).apply(
        partition, records(partition.topic, 0, 4))                   # then "killed"
    producer = StoresTheFirst(None)
    preprocess = Preprocess(frontier_settings, redis, consumer=consumer, producer=producer)
    outbox = preprocess.keys.intake_outbox(partition.topic, 0)
    left = [reply.encode() for reply in redis.lrange(outbox, 0, -1)]
    preprocess.apply(partition, records(partition.topic, 5, 7))
    preprocess.send_outbox(partition)
    [(values, unsure)] = producer.asked
    assert len(left) == 5 and len(values) == 8 and unsure == list(range(5))
    assert values[:5] == left
