"""The preprocess transaction against a real Redis, fed records directly: a redelivered
range, even an older one after a rebalance, changes nothing."""

import json
from collections import namedtuple

from kafka.structs import TopicPartition

from master.frontier import Frontier
from message_processing.preprocess.service import Preprocess
from tests.message_processing.samples import crawl

Record = namedtuple("Record", "topic partition offset value")


def records(first, last):
    return [Record("t", 0, n, json.dumps(crawl(n)).encode()) for n in range(first, last + 1)]


def test_redelivered_and_older_ranges_are_skipped(redis, test_settings):
    preprocess = Preprocess(test_settings, redis, consumer=None, producer=None)
    partition = TopicPartition("t", 0)
    frontier = Frontier.from_settings(redis, test_settings)
    assert len(preprocess.apply(partition, records(0, 9))) == 10
    assert preprocess.apply(partition, records(3, 6)) == []          # an older range again
    assert len(preprocess.apply(partition, records(5, 12))) == 3      # only 10, 11, 12 are new
    assert frontier.seeds_count() == 13
    outbox = redis.lrange(preprocess.keys.intake_outbox("t", 0), 0, -1)
    assert sorted(json.loads(reply)["crawlid"] for reply in outbox) == sorted(
        f"c{n}" for n in range(13))                                     # one ack each
