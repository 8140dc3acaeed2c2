"""The items firehose on real servers: a crawl's stored items arrive on Kafka exactly as
MongoDB holds them (the items topic and the crawl's own), a consumer written with
scrapy-cluster's field names reads them, and a gone job's items are sent by a monitor.
(A broker stopped mid-crawl: tests/faults/test_faults_firehose.py.)"""

import json
import time

import pytest

from crawler.pipelines import insert_items
from manager.local.crawl import run_crawl, submit
from manager.local.demo import UNIVERSAL_RULE
from master.keys import Keys
from message_processing.firehose import DeliveryMarks, FirehoseResender, encode_item
from settings.clients import kafka_admin, kafka_consumer

FIREHOSE = {"CRAWLCLUSTER_FIREHOSE": "true"}


def read_topic(settings, topic, timeout=30.0, times=None):
    """Every record of ``topic`` from its start, as ``(key, decoded value)``; each one's
    Kafka timestamp (seconds) appended to ``times`` when given."""
    from kafka import TopicPartition

    consumer = kafka_consumer(settings, "test", group_id=None)
    try:
        deadline = time.monotonic() + timeout
        while not (numbers := consumer.partitions_for_topic(topic)):
            assert time.monotonic() < deadline, f"no topic {topic}"
            time.sleep(0.5)
        partitions = [TopicPartition(topic, number) for number in sorted(numbers)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        records = []
        while any(consumer.position(p) < ends[p] for p in partitions):
            assert time.monotonic() < deadline, f"could not read {topic}"
            for batch in consumer.poll(timeout_ms=500).values():
                records += [(r.key.decode(), json.loads(r.value)) for r in batch]
                if times is not None:
                    times += [r.timestamp / 1000 for r in batch]
        return records
    finally:
        consumer.close()


@pytest.fixture
def items_topics(test_settings):
    """The test's items topics, deleted after it."""
    yield test_settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"]
    admin = kafka_admin(test_settings, "test")
    try:
        mine = [name for name in admin.list_topics()
                if name.startswith(test_settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"])]
        if mine:
            admin.delete_topics(mine)
    finally:
        admin.close()


def as_stored(message):
    """A crawlcluster-format message as the MongoDB document it was made from."""
    document = {key: value for key, value in message.items() if key not in ("id", "resent")}
    return message["id"], document


def stored(mongo_db, crawlid, spider_type="universal"):
    return {str(document.pop("_id")): document
            for document in mongo_db[f"items_{spider_type}"].find({"crawlid": crawlid})}


def test_a_crawls_items_arrive_on_kafka_exactly_as_stored(test_settings, redis, mongo_db,
                                                          static_site, items_topics, tmp_path):
    manifest, _ = static_site
    submit(test_settings, {"crawlid": "firehose", "userid": "alice", "items_topic": True,
                           "spider_type": "universal", "url": manifest["start_url"],
                           "rule": UNIVERSAL_RULE})
    submit(test_settings, {"crawlid": "firehose-plain", "userid": "bob",
                           "spider_type": "universal", "url": manifest["start_url"],
                           "rule": UNIVERSAL_RULE})
    assert run_crawl(test_settings, "universal", tmp_path, **FIREHOSE) == [0]

    in_mongo = stored(mongo_db, "firehose")
    assert len(in_mongo) > 100
    sent_at = []
    records = read_topic(test_settings, items_topics, times=sent_at)
    # sent as the crawl goes (within a second or so of being stored), not when it ends
    delays = sorted(at - value["stored_at"] for at, (_, value) in zip(sent_at, records,
                                                                      strict=True))
    assert delays[len(delays) // 2] < 1.5, delays[len(delays) // 2]
    on_kafka = dict(as_stored(value) for _, value in records
                    if value["crawlid"] == "firehose")
    assert len(on_kafka) == len([1 for _, v in records if v["crawlid"] == "firehose"])
    assert on_kafka == in_mongo                     # every item once, as stored
    assert all(key == value["url"] and value["resent"] is False for key, value in records)
    first = next(iter(on_kafka.values()))
    assert first["status"] == 200 and first["stored_by"] == "job0"
    assert (first["change"], first["version"]) == ("new", 1)    # what became of the page
    assert first["stored_at"] >= first["fetched_at"] > time.time() - 600
    assert len({v["id"] for _, v in records if v["crawlid"] == "firehose-plain"}) == \
        len(stored(mongo_db, "firehose-plain"))
    # the crawl that asked has its user's own topic, with its items only
    own = read_topic(test_settings, f"{items_topics}.alice")
    assert dict(as_stored(value) for _, value in own) == in_mongo
    assert not [name for name in kafka_admin(test_settings, "test").list_topics()
                if name == f"{items_topics}.bob"]
    assert not redis.hgetall(Keys.from_settings(test_settings).firehose_delivered())


def test_a_scrapy_cluster_consumer_reads_the_firehose(test_settings, redis, mongo_db,
                                                      static_site, items_topics, tmp_path):
    manifest, _ = static_site
    host = manifest["spec"]["hosts"][0]
    start = f"http://{host}:{manifest['spec']['port']}/list/1.html"
    submit(test_settings, {"crawlid": "sc-firehose", "userid": "testapp",
                           "spider_type": "universal", "url": start, "rule": UNIVERSAL_RULE,
                           "attrs": {"team": "news"}})
    assert run_crawl(test_settings, "universal", tmp_path, **FIREHOSE,
                     CRAWLCLUSTER_FIREHOSE_FORMAT="scrapy-cluster",
                     CRAWLCLUSTER_FIREHOSE_USER_TOPICS="true") == [0]

    # A consumer of scrapy-cluster's demo.crawled_<appid> topic, field names as its docs
    # give them, and nothing of ours.
    crawled = {}
    for _, message in read_topic(test_settings, f"{items_topics}.testapp"):
        assert message["appid"] == "testapp" and message["crawlid"] == "sc-firehose"
        assert message["status_code"] == 200 and message["status_msg"] == "OK"
        assert message["success"] is True and message["attrs"] == {"team": "news"}
        assert message["response_url"] == message["url"]
        time.strptime(message["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")
        crawled[message["url"]] = message["body"]
    in_mongo = stored(mongo_db, "sc-firehose")
    assert crawled == {item["url"]: item["main_text"] for item in in_mongo.values()}
    details = [p for p in manifest["pages"] if p["kind"] == "detail" and p["host"] == host]
    assert all(page["content"][0] in crawled[page["url"]] for page in details)


def test_a_monitor_sends_what_a_gone_job_stored_and_did_not_send(test_settings, redis,
                                                                  mongo_db, items_topics):
    settings = test_settings.copy_with(CRAWLCLUSTER_FIREHOSE=True)
    keys = Keys.from_settings(settings)
    marks = DeliveryMarks(redis, keys, clock=lambda: time.time() - 3600)
    items = [{"url": f"http://example.com/{n}", "crawlid": "gone", "spider_type": "universal",
              "title": f"page {n}"} for n in range(2500)]
    ensured: set[str] = set()
    insert_items(mongo_db, items[:500], ensured, {"stored_at": 100.0, "stored_by": "gone-job"})
    # three batches after its mark, the last of 1500 items (over a read-back's 1000)
    for stored_at, part in ((200.0, items[500:700]), (300.0, items[700:1000]),
                            (400.0, items[1000:])):
        insert_items(mongo_db, part, ensured, {"stored_at": stored_at, "stored_by": "gone-job"})
    insert_items(mongo_db, [dict(items[0], url="http://example.com/live")], ensured,
                 {"stored_at": 500.0, "stored_by": "live-job"})
    marks.set("gone-job", "universal", 100.0)
    marks.set("live-job", "universal", 100.0)
    resender = FirehoseResender(settings, redis, keys, live_jobs=lambda: {"live-job": {}},
                                configs=lambda crawlid: None)
    try:
        assert resender.due()
        assert resender.run_once() == 2000
    finally:
        resender.close()
    records = read_topic(settings, items_topics)
    assert sorted(value["url"] for _, value in records) == \
        sorted(item["url"] for item in items[500:])
    assert all(value["resent"] for _, value in records)
    assert set(marks.all()) == {"live-job"}         # a live job sends its own


def test_a_message_is_the_stored_document():
    document = {"_id": "abc", "url": "http://example.com/", "crawlid": "c", "title": "t",
                "status": 404, "fetched_at": 0.0}
    message = json.loads(encode_item(document, {"userid": "u"}, "crawlcluster", resent=False))
    assert message == {"url": "http://example.com/", "crawlid": "c", "title": "t",
                       "status": 404, "fetched_at": 0.0, "id": "abc", "resent": False}
    sc = json.loads(encode_item(document, {"userid": "u"}, "scrapy-cluster", resent=True))
    assert (sc["status_code"], sc["status_msg"], sc["success"]) == (404, "Not Found", False)
    assert sc["appid"] == "u" and sc["timestamp"] == "1970-01-01T00:00:00"
    assert sc["resent"] is True and sc["item"]["title"] == "t"


def test_a_key_goes_to_the_partition_java_and_kafka_python_producers_pick(test_settings,
                                                                         items_topics):
    """The firehose's producer (librdkafka) puts a URL where the other Kafka clients
    would (murmur2), so consumers partitioned by URL see one URL on one partition."""
    from kafka import TopicPartition
    from kafka.partitioner.default import murmur2

    from message_processing.firehose import ItemProducer

    producer = ItemProducer(test_settings, "test")
    urls = [f"https://example.com/news/{n}.html" for n in range(40)]
    producer.send([(items_topics, url.encode(), b"{}") for url in urls])
    producer.close()
    consumer = kafka_consumer(test_settings, "test", group_id=None)
    try:
        partitions = sorted(consumer.partitions_for_topic(items_topics))
        assert len(partitions) == test_settings.getint("CRAWLCLUSTER_KAFKA_PARTITIONS") > 1
        found = {}
        for number in partitions:
            assigned = TopicPartition(items_topics, number)
            consumer.assign([assigned])
            consumer.seek_to_beginning(assigned)
            end = consumer.end_offsets([assigned])[assigned]
            while consumer.position(assigned) < end:
                for batch in consumer.poll(timeout_ms=500).values():
                    found.update((record.key.decode(), number) for record in batch)
    finally:
        consumer.close()
    assert found == {url: partitions[(murmur2(url.encode()) & 0x7FFFFFFF) % len(partitions)]
                     for url in urls}
