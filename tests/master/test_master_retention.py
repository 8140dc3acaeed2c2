"""Crawl retention (master/retention.py) and a simulated year of a cluster, on real
Redis (single and Cluster) and MongoDB, with a clock the tests drive."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.longrun import DAY, HUB, run_year, year_settings
from master.bloomgen import AgingBloomFilter
from master.crawls import CrawlStore
from master.dispatcher import Dispatcher
from master.frontier import Frontier
from master.keys import Keys
from master.registry import JobRegistry
from master.retention import FRESH, Retention
from master.siteconfig import SiteConfig
from master.throttle import ThrottledQueues
from message_processing.monitor.plugins.info import InfoPlugin
from message_processing.monitor.service import Context
from tests.master.conftest import Clock

RETENTION = 3600.0
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def small(test_settings):
    return test_settings.copy_with(CRAWLCLUSTER_FRONTIER_SHARDS=16,
                                   CRAWLCLUSTER_CRAWL_RETENTION=RETENTION)


class Cluster:
    """A frontier, a job that finishes what it takes, and retention, on one clock."""

    def __init__(self, client, settings, database):
        self.client, self.settings = client, settings
        self.clock = Clock()
        self.keys = Keys.from_settings(settings)
        common = {"clock": self.clock}
        self.frontier = Frontier.from_settings(client, settings, **common)
        self.registry = registry = JobRegistry.from_settings(client, settings, **common)
        registry.register("job", "universal", "host", "10.0.0.1")
        self.dispatcher = Dispatcher(client, self.keys, registry, self.frontier,
                                     default_weight=100_000, **common)
        self.queues = ThrottledQueues(client, self.keys, SiteConfig(100_000, 1.0), **common)
        self.bloom = AgingBloomFilter.from_settings(client, settings, **common)
        self.store = CrawlStore(client, self.keys)
        self.retention = Retention.from_settings(client, settings, **common)
        self.retention.database = lambda: database

    def submit(self, crawlid, url="http://site.test/", **config):
        self.store.submit(dict(config, crawlid=crawlid, url=url, spider_type="universal"),
                          self.bloom, self.frontier)

    def crawl_all(self):
        """Dispatch and finish (done) every task waiting."""
        self.registry.heartbeat("job")
        for _ in range(5):
            self.dispatcher.tick()
            taken = self.queues.take("job", "universal", "10.0.0.1", per_domain=10_000).tasks
            if taken:
                self.frontier.finish_many([(member, "done", "") for _, member in taken])
            self.clock.now += 2

    def retire_all(self):
        """Passes after the crawls ended, then after the retention time."""
        self.clock.now += FRESH + 1
        self.retention.run()
        self.clock.now += RETENTION + 1
        while self.retention.run()["retired"]:
            pass

    def keys_naming(self, crawlid):
        left = [key for key in self.client.scan_iter(match=self.keys.pattern(), count=1000)
                if f":{crawlid}:" in key]
        for shard in self.keys.all_shards():
            for flags in (self.keys.stopped_crawls(shard), self.keys.paused_crawls(shard)):
                left += [flags for field in self.client.hkeys(flags) if field == crawlid]
        for index in (self.keys.crawls(), self.keys.ended_crawls(), self.keys.retiring_crawls()):
            left += [index for member in self.client.zrange(index, 0, -1) if member == crawlid]
        return left


@pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"], indirect=True)
def test_a_drained_crawl_leaves_redis_and_info_answers_from_its_record(
        frontier_redis, frontier_settings, mongo_db):
    settings = frontier_settings.copy_with(CRAWLCLUSTER_FRONTIER_SHARDS=16,
                                           CRAWLCLUSTER_CRAWL_RETENTION=RETENTION)
    cluster = Cluster(frontier_redis, settings, mongo_db)
    cluster.submit("done1", userid="alice")
    cluster.crawl_all()
    frontier_redis.hincrby(cluster.keys.crawl_render("done1"), "~rendered", 1)   # render: auto
    frontier_redis.rpush(cluster.keys.crawl_render_variables("done1"), "h|a")
    frontier_redis.hincrby(cluster.keys.crawl_changes("done1"), "changed", 2)  # a spider's
    assert cluster.keys_naming("done1")
    cluster.clock.now += FRESH + 1
    assert cluster.retention.run() == {"ended": 1, "retired": 0}
    cluster.clock.now += RETENTION - 10
    assert cluster.retention.run()["retired"] == 0          # not yet
    cluster.clock.now += 20
    assert cluster.retention.run()["retired"] == 1
    assert cluster.keys_naming("done1") == []
    assert frontier_redis.smembers(cluster.keys.user_crawls("alice")) == set()
    record = mongo_db["crawls"].find_one({"crawlid": "done1"})
    assert record["final"]["counts"]["done"] == 1 and record["retired_at"]
    info = InfoPlugin(Context(settings, frontier_redis)).crawl_info("done1")
    assert info["retired"] is True and info["done"] == 1 and info["total_pending"] == 0
    assert info["changes"]["changed"] == 2          # kept in the record, gone from Redis


def test_a_stopped_crawl_takes_its_flags_with_it(redis, small, mongo_db):
    cluster = Cluster(redis, small, mongo_db)
    # keys left for good (a seed's dedupe digest goes with its key's TTL)
    prefixed = lambda: sum(1 for key in redis.scan_iter(match=cluster.keys.pattern(),  # noqa: E731
                                                        count=1000) if redis.ttl(key) == -1)
    baseline = prefixed()
    cluster.submit("stopped1")
    cluster.frontier.purge_crawl("stopped1", ["job"])
    shards = cluster.keys.all_shards()
    assert all(redis.hexists(cluster.keys.stopped_crawls(shard), "stopped1") for shard in shards)
    cluster.retire_all()
    assert cluster.keys_naming("stopped1") == []
    assert mongo_db["crawls"].find_one({"crawlid": "stopped1"})["final"]["stopped"] is True
    # what is left is shared, not the crawl's: the flag hashes went with their last field
    assert prefixed() <= baseline + 3


def test_running_revisit_and_resubmitted_crawls_stay(redis, small, mongo_db):
    cluster = Cluster(redis, small, mongo_db)
    cluster.submit("news", url=HUB, hubs=[HUB], hub_span=600)
    cluster.submit("again")
    cluster.submit("busy")
    cluster.crawl_all()
    cluster.clock.now += FRESH + 1
    cluster.retention.run()
    cluster.submit("again")                  # submitted once more: running again
    cluster.submit("busy", url="http://other.test/")     # work came back
    cluster.clock.now += RETENTION + 1
    cluster.retention.run()
    stored = lambda crawlid: redis.exists(cluster.keys.crawl(crawlid))  # noqa: E731
    assert all(stored(crawlid) for crawlid in ("news", "again", "busy"))
    cluster.crawl_all()
    cluster.retire_all()
    assert not stored("again") and not stored("busy")
    assert stored("news")                                # revisits until stopped


CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from pymongo import MongoClient
from master.keys import Keys
from master.retention import Retention
from settings.clients import redis_client
from settings.loader import load_settings
args = json.loads(sys.argv[1])
settings = load_settings().copy_with(**args["settings"])
client = redis_client(settings, "test")
mongo = MongoClient(args["mongo"])[args["database"]]
retention = Retention(client, Keys.from_settings(settings), args["retention"],
                      lambda: mongo, slice_size=10_000, clock=lambda: args["now"])
print("started", flush=True)
while retention.run()["retired"]:
    pass
print("finished", flush=True)
"""


def test_a_master_killed_in_a_retention_pass_leaves_the_next_to_finish(redis, small, mongo_db):
    cluster = Cluster(redis, small, mongo_db)
    crawls = [f"k{n}" for n in range(400)]
    for crawlid in crawls:
        cluster.submit(crawlid, url=f"http://site{int(crawlid[1:]) % 7}.test/")
    cluster.crawl_all()
    cluster.clock.now += FRESH + 1
    cluster.retention.slice_size = 10_000
    assert cluster.retention.run()["ended"] == len(crawls)
    now = cluster.clock.now + RETENTION + 1
    args = {"settings": {name: small[name] for name in (
        "CRAWLCLUSTER_REDIS_URL", "CRAWLCLUSTER_KEY_PREFIX", "CRAWLCLUSTER_FRONTIER_SHARDS")},
        "mongo": small["CRAWLCLUSTER_MONGODB_URL"], "database": mongo_db.name,
        "retention": RETENTION, "now": now}
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=ROOT), json.dumps(args)],
                             stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while redis.zcard(cluster.keys.ended_crawls()) > len(crawls) - 40:
        assert time.monotonic() < deadline and child.poll() is None, "the pass did not start"
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    left = redis.zcard(cluster.keys.ended_crawls()) + redis.zcard(cluster.keys.retiring_crawls())
    assert 0 < left < len(crawls), "the kill came before or after the pass"
    redis.delete(cluster.keys.retention_lock())      # what its TTL would do 5 minutes later
    cluster.clock.now = now
    while cluster.retention.run()["retired"]:
        pass
    for crawlid in crawls:
        assert cluster.keys_naming(crawlid) == [], crawlid
    records = {record["crawlid"]: record for record in mongo_db["crawls"].find()}
    assert len(records) == len(crawls)
    assert all(record["final"]["counts"].get("done") == 1 for record in records.values())


# A quarter of a year here on one Redis, two months on a Redis Cluster (each of its days
# costs more): the filter has turned over its generations several times by then, and the
# year on one Redis took 6 of the suite's 20 minutes. bench/longrun.py runs the whole
# year on both (docs/performance.md).
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("frontier_settings", "days"), [("redis", 90), ("redis-cluster", 60)],
                         indirect=["frontier_settings"])
def test_a_simulated_year_comes_back_to_the_same_state_every_day(
        frontier_redis, frontier_settings, days, mongo_db):
    settings = year_settings(frontier_settings).copy_with(CRAWLCLUSTER_SCHEDULE_KEEP_RUNS=10)
    year = run_year(frontier_redis, settings, mongo_db, days=days, progress=None)
    assert year.runs == days * 24
    assert year.retired >= year.runs - 2 * 24 and year.keys_left == 0
    low, high = year.keys_range
    assert high - low <= 2, year.daily           # the same keys every day, but for timing
    assert year.bytes_growth * 1000 / year.crawls_between <= 64 * 1024
    assert year.fp <= 2 * 0.01, year.fp          # the error rate after a year of URLs
    assert year.figures["generations"] == 4
    assert year.bloom_bytes_max <= year.figures["budget_bytes"] + 16
    assert year.refetched == {}                 # no page twice in one run
    assert year.lost <= 2 * 0.01 * year.articles   # only the filter's false positives
    assert mongo_db["crawls"].count_documents({"schedule": "hourly"}) == 10
    assert year.figures["oldest_age"] < 30 * DAY
