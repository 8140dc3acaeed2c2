"""The Kafka broker stopped mid-crawl with the items firehose on: the site sees each page
fetched once and the crawl drains as without the outage; once the broker is back, every
item MongoDB stored is on the items topic, as stored; an item that is there twice is
marked ``resent`` in every copy but the first."""

import time
from collections import defaultdict

import pytest

from manager.local.crawl import Crawl, submit
from manager.local.demo import UNIVERSAL_RULE
from tests.crawler.test_crawler_firehose import as_stored, read_topic, stored
from tests.faults.siteowner import agent_of, fetch_counts
from tests.faults.test_faults_servers import private_kafka  # noqa: F401 - a fixture

pytestmark = pytest.mark.faults


def wait_for_items(mongo_db, crawlid, count, timeout=120):
    deadline = time.monotonic() + timeout
    while mongo_db["items_universal"].count_documents({"crawlid": crawlid}) < count:
        assert time.monotonic() < deadline, f"fewer than {count} items stored"
        time.sleep(0.2)


def test_kafka_stopped_mid_crawl_leaves_nothing_off_the_firehose(
        test_settings, private_kafka, redis, mongo_db, site, tmp_path):  # noqa: F811
    kafka_settings, servers = private_kafka
    settings = test_settings.copy_with(
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=kafka_settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"],
        CRAWLCLUSTER_FIREHOSE=True)
    manifest, served = site
    since = len(served.access_log())
    submit(settings, {"crawlid": "firehose-outage", "userid": "faults",
                      "spider_type": "universal", "url": manifest["start_url"],
                      "rule": UNIVERSAL_RULE, "useragent": agent_of("firehose-outage")})
    # ~16 pages/s over the site's 4 hosts: the outage falls well inside the crawl
    crawl = Crawl(settings, "universal", tmp_path, spiders=2,
                  CRAWLCLUSTER_THROTTLE_HITS="4", CRAWLCLUSTER_IDLE_TIMEOUT="8")
    try:
        wait_for_items(mongo_db, "firehose-outage", 40)
        servers.down(["kafka"])
        outage = time.monotonic()
        during = mongo_db["items_universal"].count_documents({"crawlid": "firehose-outage"})
        time.sleep(15)      # longer than a send waits (CRAWLCLUSTER_SOCKET_TIMEOUT)
        grew = mongo_db["items_universal"].count_documents({"crawlid": "firehose-outage"})
        servers.up(["kafka"])
        assert crawl.wait(300) == [0, 0]
        drained_after = time.monotonic() - outage - 8       # less the idle timeout
    finally:
        crawl.stop()
    assert grew > during             # the crawl went on storing while Kafka was away
    # What the site owner sees: every page fetched once, the crawl drained within its
    # pace (~28 s for the site at 16 pages/s) plus the spiders' closing sends
    fetched = fetch_counts(manifest, served, "firehose-outage", since)
    details = {p["url"] for p in manifest["pages"] if p["kind"] == "detail"}
    assert details <= set(fetched) and max(fetched.values()) == 1, fetched.most_common(3)
    assert drained_after < 60, drained_after

    in_mongo = stored(mongo_db, "firehose-outage")
    assert len(in_mongo) == len([p for p in manifest["pages"] if p["kind"] == "detail"])
    copies = defaultdict(list)
    for key, value in read_topic(settings, settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"], 60):
        item_id, document = as_stored(value)
        assert document == in_mongo[item_id] and key == document["url"]
        copies[item_id].append(value["resent"])
    assert set(copies) == set(in_mongo)                # nothing missing
    assert any(True in sent for sent in copies.values())          # read back from MongoDB
    assert all(sent.count(False) <= 1 for sent in copies.values())  # a copy says it is one
