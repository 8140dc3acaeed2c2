"""The client factory against the real servers of the harness."""

import threading
import time

import pytest

from master.keys import Keys
from settings.clients import (
    SERVER_KINDS,
    check_role_servers,
    check_server,
    kafka_consumer,
    kafka_producer,
    mongo_client,
    redact,
    redis_client,
    zookeeper_client,
)
from settings.errors import ServerUnreachable

DEAD = {
    "CRAWLCLUSTER_REDIS_URL": "redis://127.0.0.1:1/0",
    "CRAWLCLUSTER_KAFKA_BOOTSTRAP": "127.0.0.1:1",
    "CRAWLCLUSTER_ZOOKEEPER_HOSTS": "127.0.0.1:1",
    "CRAWLCLUSTER_MONGODB_URL": "mongodb://127.0.0.1:1/?directConnection=true",
}


def test_redis_round_trip(redis, test_settings):
    key = f"{test_settings['CRAWLCLUSTER_KEY_PREFIX']}:roundtrip"
    redis.set(key, "héllo")
    assert redis.get(key) == "héllo"


def test_kafka_produce_and_consume_in_a_group_with_commit(test_settings, kafka_topics):
    topic = kafka_topics[0]
    producer = kafka_producer(test_settings, "test")
    for n in range(5):
        producer.send(topic, f'{{"n": {n}}}'.encode())
    producer.flush()
    producer.close()

    consumer = kafka_consumer(test_settings, "test", topic)
    seen = _poll_values(consumer, 5)
    consumer.commit()
    consumer.close()
    assert sorted(seen) == [f'{{"n": {n}}}'.encode() for n in range(5)]

    # The committed offsets hold: the group gets nothing again.
    again = kafka_consumer(test_settings, "test", topic)
    assert _poll_values(again, 1, timeout=8) == []
    again.close()


def _poll_values(consumer, want, timeout=30):
    values = []
    deadline = time.monotonic() + timeout
    while len(values) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(record.value for record in records)
    return values


def test_zookeeper_data_watch_fires_on_change(zookeeper, test_settings):
    path = f"{test_settings['CRAWLCLUSTER_ZOOKEEPER_ROOT']}/limits"
    zookeeper.create(path, b'{"hits": 10}')
    seen = []
    changed = threading.Event()

    @zookeeper.DataWatch(path)
    def on_change(data, stat):
        seen.append(data)
        if data == b'{"hits": 20}':
            changed.set()

    zookeeper.set(path, b'{"hits": 20}')
    assert changed.wait(5)
    assert seen[0] == b'{"hits": 10}'


def test_mongo_unique_index_refuses_duplicates(mongo_db):
    from pymongo.errors import DuplicateKeyError

    items = mongo_db["items"]
    items.create_index([("crawlid", 1), ("url", 1)], unique=True)
    items.insert_one({"crawlid": "c1", "url": "http://a/1", "title": "一"})
    with pytest.raises(DuplicateKeyError):
        items.insert_one({"crawlid": "c1", "url": "http://a/1", "title": "二"})
    assert items.find_one({"url": "http://a/1"})["title"] == "一"


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_unreachable_server_gives_one_clear_error(base_settings, kind):
    settings = base_settings.copy_with(**DEAD, CRAWLCLUSTER_CONNECT_TIMEOUT=1.0)
    started = time.monotonic()
    with pytest.raises(ServerUnreachable) as caught:
        check_role_servers(settings, "master", [kind])
    message = str(caught.value)
    assert message.startswith(f"master: cannot reach {kind} at ")
    assert "127.0.0.1:1" in message
    assert "\n" not in message
    assert time.monotonic() - started < 10
    assert check_server(settings, kind)[0] is False


def test_factories_raise_server_unreachable(base_settings):
    settings = base_settings.copy_with(**DEAD, CRAWLCLUSTER_CONNECT_TIMEOUT=1.0)
    for build in (redis_client, mongo_client, zookeeper_client, kafka_producer):
        with pytest.raises(ServerUnreachable, match=r"127\.0\.0\.1:1"):
            build(settings, "test")


def test_passwords_are_redacted():
    assert redact("redis://user:secret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact("mongodb://host:27017") == "mongodb://host:27017"


def test_a_cluster_url_may_name_several_nodes(cluster_settings):
    """A role starts while the first node its URL names is down (a master SIGKILLed,
    say): the client asks the next one for the slot map."""
    from settings.clients import cluster_nodes

    assert cluster_nodes("redis://:pw@h1:7000,h2:7001,h3/0") == (
        "redis://:pw@h1:7000/0", [("h2", 7001), ("h3", 6379)])
    live = cluster_settings["CRAWLCLUSTER_REDIS_URL"].split("//", 1)[1].split("/", 1)[0]
    settings = cluster_settings.copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:1,{live}/0", CRAWLCLUSTER_CONNECT_TIMEOUT=1.0)
    client = redis_client(settings, "test")
    try:
        assert len(client.get_primaries()) == 3
        assert client.set(Keys.from_settings(settings).prefix + ":several-nodes", "1")
        client.delete(Keys.from_settings(settings).prefix + ":several-nodes")
    finally:
        client.close()


class AckWithoutOffset:
    """The first send of each batch acknowledged as a stopping broker may: offset -1,
    the messages stored (``stored=True``) or lost."""

    def __init__(self, producer, stored):
        self.producer, self.stored, self.real = producer, stored, producer._send
        self.calls = 0

    def __call__(self, topic, values, timeout):
        self.calls += 1
        if self.calls > 1:
            return self.real(topic, values, timeout)
        return self.first(topic, values, timeout)

    def first(self, topic, values, timeout):
        sent, error = self.real(topic, values, timeout) if self.stored else \
            self.real(topic, [b"something else"] * len(values), timeout)
        assert error is None
        return [metadata._replace(offset=-1) for metadata in sent], None


def topic_values(settings, topic):
    from kafka import TopicPartition

    consumer = kafka_consumer(settings, "test", group_id=None)
    try:
        partitions = [TopicPartition(topic, n) for n in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        values = []
        deadline = time.monotonic() + 30
        while any(consumer.position(p) < ends[p] for p in partitions):
            assert time.monotonic() < deadline
            for records in consumer.poll(timeout_ms=500).values():
                values += [record.value for record in records]
        return values
    finally:
        consumer.close()


class FailAfterSend(AckWithoutOffset):
    """A ``_send`` whose first call ends in a KafkaTimeoutError, as a flush that timed out
    does, with the messages stored (``stored=True``) or not."""

    def first(self, topic, values, timeout):
        from kafka.errors import KafkaTimeoutError

        if self.stored:
            self.real(topic, values, timeout)
        return [None] * len(values), KafkaTimeoutError("flush timed out")


class PartlyFailed(AckWithoutOffset):
    """A first ``_send`` whose first two messages are confirmed and whose others fail
    with a connection error, stored (``stored=True``) or not: a broker that stopped
    between two requests of one batch."""

    def first(self, topic, values, timeout):
        from kafka.errors import KafkaConnectionError

        sent, error = self.real(topic, values if self.stored else values[:2], timeout)
        assert error is None
        return sent[:2] + [None] * (len(values) - 2), KafkaConnectionError("socket disconnected")


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "lost"])
@pytest.mark.parametrize("first_send", [AckWithoutOffset, FailAfterSend, PartlyFailed],
                         ids=["acknowledged-without-offset", "timed-out", "partly-failed"])
def test_a_message_not_confirmed_is_on_the_topic_once(test_settings, kafka_topics, stored,
                                                       first_send):
    """Looked for on the topic: found, it is not sent again; lost, it is."""
    from message_processing.delivery import DeliveringProducer

    topic = kafka_topics[0]
    producer = DeliveringProducer(test_settings, "test")
    try:
        producer._send = first_send(producer, stored)
        values = [f"message {n}".encode() for n in range(5)]
        sent = producer.deliver(topic, values)
    finally:
        producer.close()
    assert producer._send.calls == (1 if stored else 2)
    assert all(metadata.offset >= 0 and metadata.topic == topic for metadata in sent)
    on_topic = topic_values(test_settings, topic)
    assert sorted(value for value in on_topic if value.startswith(b"message")) == values


class LookSpy:
    """``_find`` that notes the floor it reads from; unreadable the first ``fails`` times."""

    def __init__(self, producer, fails=0):
        self.real, self.fails, self.floors = producer._find, fails, []

    def __call__(self, topic, wanted, timeout, floor):
        from kafka.errors import KafkaTimeoutError

        self.floors.append(floor)
        if len(self.floors) <= self.fails:
            raise KafkaTimeoutError(f"could not read {topic} back in {timeout} s")
        return self.real(topic, wanted, timeout, floor)


@pytest.mark.parametrize("first_look_fails", [False, True], ids=["found", "after-a-failure"])
def test_a_look_reads_from_where_the_producers_confirmed_messages_ended(
        test_settings, kafka_topics, first_look_fails):
    """A message not confirmed was sent after those confirmed before it: the look reads
    from there, not the last LOOK_BACK records (too slow on some brokers), also in the
    call after a delivery that failed unsure."""
    from message_processing.delivery import DeliveringProducer, DeliveryFailed

    topic = kafka_topics[0]
    producer = DeliveringProducer(test_settings, "test")
    try:
        earlier = producer.deliver(topic, [b"earlier %d" % n for n in range(20)])
        ends: dict[int, int] = {}
        for metadata in earlier:
            ends[metadata.partition] = max(ends.get(metadata.partition, 0), metadata.offset + 1)
        producer._send = FailAfterSend(producer, stored=True)
        producer._find = spy = LookSpy(producer, fails=2 if first_look_fails else 0)
        if first_look_fails:
            with pytest.raises(DeliveryFailed):
                producer.deliver(topic, [b"unsure"], timeout=1.0, give_up_after=0.5)
            producer.deliver(topic, [b"unsure"], unsure=[0])
        else:
            producer.deliver(topic, [b"unsure"])
    finally:
        producer.close()
    assert spy.floors[-1] == ends and all(floor == ends for floor in spy.floors)
    assert producer._send.calls == 1           # found, never sent again
    assert topic_values(test_settings, topic).count(b"unsure") == 1


def test_a_message_refused_for_good_fails_the_delivery_naming_those_stored(test_settings,
                                                                           kafka_topics):
    """A message too large is not sent again and again; the caller learns which of the
    batch the broker has (a role takes those out of what it sends again)."""
    from message_processing.delivery import DeliveringProducer, DeliveryFailed

    topic = kafka_topics[0]
    producer = DeliveringProducer(test_settings, "test")
    try:
        with pytest.raises(DeliveryFailed, match="refused") as failed:
            producer.deliver(topic, [b"small one", b"x" * 2_000_000, b"small two"])
    finally:
        producer.close()
    assert failed.value.stored() == [0, 2]
    assert sorted(topic_values(test_settings, topic)) == [b"small one", b"small two"]


def test_a_message_that_cannot_be_looked_for_is_sent_all_the_same(test_settings, kafka_topics):
    """Unsure after an earlier failed delivery, and the topic too slow to read back: it is
    sent once the look gives up (twice on the topic, perhaps, but never lost)."""
    from kafka.errors import KafkaTimeoutError

    from message_processing.delivery import DeliveringProducer

    def unreadable(topic, wanted, timeout, floor):
        raise KafkaTimeoutError(f"could not read {topic} back in {timeout} s")

    topic = kafka_topics[0]
    producer = DeliveringProducer(test_settings, "test")
    producer._find = unreadable
    try:
        [sent] = producer.deliver(topic, [b"unsure one"], timeout=1.0, give_up_after=2.0,
                                  unsure=[0])
    finally:
        producer.close()
    assert sent.offset >= 0 and topic_values(test_settings, topic) == [b"unsure one"]
