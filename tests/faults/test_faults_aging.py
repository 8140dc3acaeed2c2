"""A crawl running while the cluster ages under it, as the site's owner sees it.

A real local cluster crawls the generated site while a second master turns the
seen-URL filter over (generations start, the oldest are dropped) and retires an
ended crawl from Redis. nginx's log must show every page fetched exactly once,
and MongoDB every detail page stored once (tests/faults/siteowner.py). The filter
is small: its older generations are full of another crawl's URLs before this one
starts, so the turnovers during the crawl drop them.
"""

import threading

import pytest

from master.bloomgen import AgingBloomFilter
from master.keys import Keys
from master.retention import Retention
from settings.clients import redis_client
from tests.faults.siteowner import CrawlWatch, Fault, crawl_through
from tests.faults.test_faults_processes import make_cluster

pytestmark = [pytest.mark.faults,
              pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"],
                                      indirect=True)]


@pytest.fixture
def aging_cluster(frontier_settings, kafka_topics, zookeeper, mongo_db, tmp_path):
    # A small filter, at a rate that makes a lost link (a false positive) unlikely even
    # though the crawl fills the newest generation about twice past its 300 URLs before
    # the 5 s that a generation stays newest are over: what is tested is the turnover.
    # (Before each group hashed on its own, the junk generations alone erred at ~1e-5,
    # and on some ports a page of the site was one of those errors, never fetched.)
    # Half the fault tests' request rate, so that the crawl (444 pages over 4 hosts,
    # about 8 s) outlasts the 5 s its first generation must stay newest: at 30 a second
    # a host, a fast crawl could end before any turnover.
    settings = frontier_settings.copy_with(CRAWLCLUSTER_BLOOM_CAPACITY=1_200,
                                           CRAWLCLUSTER_BLOOM_ERROR_RATE=1e-8,
                                           CRAWLCLUSTER_CRAWL_RETENTION=1.0)
    local = make_cluster(settings, tmp_path, CRAWLCLUSTER_THROTTLE_HITS=15)
    yield local
    local.down(servers=False)


class SecondMaster:
    """Upkeep of the filter and retention passes, every half second, in a thread.

    The cluster's own dispatcher keeps the filter and runs retention too, and may turn
    the filter over or retire the ended crawl first: the generations are watched in the
    list itself, and the crawl's retirement in Redis and MongoDB, whoever made them."""

    def __init__(self, settings, database):
        self.client = redis_client(settings, "test")
        self.bloom = AgingBloomFilter.from_settings(self.client, settings)
        self.retention = Retention.from_settings(self.client, settings)
        self.retention.database = lambda: database
        self.retired = 0
        self.before: set[str] = set()
        self.seen: set[str] = set()
        self.last: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def watch_from_now(self):
        self.before = self.seen = self.live_names()

    def live_names(self) -> set[str]:
        self.bloom._read_at = float("-inf")
        return {bloom.name for bloom in self.bloom.live()}

    @property
    def turnovers(self) -> int:
        return len(self.seen - self.before)

    @property
    def dropped(self) -> set[str]:
        return self.seen - self.last

    def run(self):
        while not self.stop.wait(0.5):
            self.bloom.upkeep()
            self.seen = self.seen | self.live_names()
            self.retired += self.retention.run()["retired"]

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)
        self.last = self.live_names()
        self.seen = self.seen | self.last
        self.client.close()


def test_a_crawl_through_filter_turnover_and_retention(aging_cluster, site, mongo_db):
    settings = aging_cluster.settings
    manifest, _ = site
    # An ended crawl for retention to retire during the next one: submitted, stopped.
    old = CrawlWatch(settings, "aging-old")
    old.submit(manifest, maxdepth=0)
    assert old.client.ask({"type": "stop", "userid": "faults",
                           "crawlid": "aging-old"})["action"] == "stop"
    old.close()
    master = SecondMaster(settings, mongo_db)
    filler = master.bloom.live()[-1]
    junk = 0
    while len(master.bloom.live()) < 4 or filler is master.bloom.live()[-1]:
        filler = master.bloom.live()[-1]
        master.bloom.add_many([f"http://junk.test/{junk + n}" for n in range(25)], "junk")
        junk += 25
        master.bloom._read_at = float("-inf")
        master.bloom.refresh, refresh = 0.0, master.bloom.refresh    # no gap: nobody adds yet
        master.bloom.upkeep()
        master.bloom.refresh = refresh
    master.watch_from_now()
    junk_generations = master.before
    try:
        crawl_through(aging_cluster, site, mongo_db, "aging-crawl",
                      Fault("filter turnover and retention", drain_bound=120),
                      master.thread.start, done_before=20)
    finally:
        master.close()
    fresh = [f"http://fresh.test/{n}" for n in range(20_000)]
    error = sum(master.bloom.contains_many(fresh, "aging-crawl")) / len(fresh)
    print(f"{junk} junk URLs first; {master.turnovers} turnovers during the crawl, "
          f"{len(master.dropped)} generations dropped, {master.retired} crawl retired here; "
          f"{error:.5f} of fresh URLs taken as seen")
    assert master.turnovers >= 1 and master.dropped <= junk_generations and master.dropped
    # retired once, by this master or the cluster's own (which runs retention too)
    assert master.retired <= 1
    assert error <= 1e-3          # the junk generations were filled a little past capacity
    client = redis_client(settings, "test")
    try:
        assert not client.exists(Keys.from_settings(settings).crawl("aging-old"))
    finally:
        client.close()
    record = mongo_db["crawls"].find_one({"crawlid": "aging-old"})
    assert record["retired_at"] and record["final"]["stopped"] is True
