"""The preprocess transaction against a real Redis, fed records directly: a redelivered
range, even an older one after a rebalance, changes nothing."""

import json
from collections import namedtuple

import pytest
from kafka.structs import TopicPartition

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


def test_redelivered_and_older_ranges_are_skipped(redis, test_settings, partition_of_13):
    partition, consumer = partition_of_13
    preprocess = Preprocess(test_settings, redis, consumer=consumer, producer=None)
    t = partition.topic
    frontier = Frontier.from_settings(redis, test_settings)
    assert len(preprocess.apply(partition, records(t, 0, 9))) == 10
    assert preprocess.apply(partition, records(t, 3, 6)) == []          # an older range again
    assert len(preprocess.apply(partition, records(t, 5, 12))) == 3      # only 10, 11, 12 are new
    assert frontier.pool_count() == 13
    outbox = redis.lrange(preprocess.keys.intake_outbox(t, 0), 0, -1)
    assert sorted(json.loads(reply)["crawlid"] for reply in outbox) == sorted(
        f"c{n}" for n in range(13))                                     # one ack each
