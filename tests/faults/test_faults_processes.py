"""Processes killed mid-crawl, as the crawled site's owner sees it (nginx's log).

Each scenario runs a real local cluster (two nodes, one universal spider each)
crawling the generated site, breaks one process with SIGKILL while the crawl
is under way, and checks what nginx served: every page, none more than twice,
the extra fetches within what was in flight plus 1% of the pages, the crawl
drained within the fault's bound (tests/faults/siteowner.py). Leases and
heartbeats are the defaults scaled down together, so a stall that waits out a
lease shows as one. Every scenario runs with the frontier on a single Redis and
on the local 3-master Redis Cluster.
"""

import os
import signal
import time
from collections import Counter

import pytest

from manager.local.cluster import LocalCluster, manager_call
from manager.local.demo import UNIVERSAL_RULE
from manager.local.docsite import DOCS_RULE
from manager.local.ports import free_port
from master.crawls import CrawlStore
from master.keys import Keys
from message_processing.client import RequestClient
from tests.faults.siteowner import (
    JOB_TTL,
    SCALED,
    Fault,
    crawl_through,
    fetch_counts,
)

pytestmark = [pytest.mark.faults,
              pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"],
                                      indirect=True)]
DISPATCH_LEASE = SCALED["CRAWLCLUSTER_DISPATCH_LEASE_SECONDS"]
# A dead spider's work comes back once its heartbeat is gone; what is left of the crawl
# takes the rest (a fault-free crawl of the whole site takes about 10 s).
SPIDER_DRAIN = JOB_TTL + 30


def make_cluster(test_settings, tmp_path, masters=1, **overrides):
    """A two-node cluster (one universal spider each), up, with the default timings
    scaled down (tests/faults/siteowner.py); ``overrides`` are settings set last."""
    settings = test_settings.copy_with(**{
        **SCALED,
        "CRAWLCLUSTER_STATE_DIR": str(tmp_path / "state"),
        "CRAWLCLUSTER_MANAGER_ADDRESS": f"127.0.0.1:{free_port()}",
        "CRAWLCLUSTER_THROTTLE_HITS": 30, "CRAWLCLUSTER_THROTTLE_WINDOW": 1.0,
        "CRAWLCLUSTER_DISPATCH_WINDOW": 1.0, "CRAWLCLUSTER_DISPATCH_HEADROOM": 2.0,
        "CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT": 1200, "CRAWLCLUSTER_IDLE_TIMEOUT": 0.0,
        **overrides})
    local = LocalCluster(settings, nodes=2, procs=1, spider_types=("universal",),
                         out=lambda *_: None, masters=masters)
    try:
        local.up()
    except BaseException:
        local.down(servers=False)       # no role outlives a cluster that did not start
        raise
    return local


@pytest.fixture
def cluster(frontier_settings, kafka_topics, zookeeper, mongo_db, tmp_path):
    local = make_cluster(frontier_settings, tmp_path)
    yield local
    local.down(servers=False)


@pytest.fixture
def two_masters(frontier_settings, kafka_topics, zookeeper, mongo_db, tmp_path):
    local = make_cluster(frontier_settings, tmp_path, masters=2)
    yield local
    local.down(servers=False)


def running_spider_pid(settings, node):
    jobs = manager_call(settings, "listjobs.json?project=crawlcluster")["running"]
    [job] = [job for job in jobs if job["id"].startswith(f"{node}-")]
    return job["pid"]


def test_a_spider_process_killed_mid_crawl(cluster, site, mongo_db):
    node2 = cluster.node_settings(2)
    crawl_through(cluster, site, mongo_db, "kill-spider",
                  Fault("spider killed", SPIDER_DRAIN),
                  lambda: os.kill(running_spider_pid(node2, "node2"), signal.SIGKILL))


def test_a_spider_killed_mid_crawl_of_a_documentation_site(cluster, docs_site, mongo_db):
    """Hundreds of links a page, each page linked by many fragments: a page crawled
    again after the kill yields them all, and still nothing multiplies."""
    node2 = cluster.node_settings(2)
    crawl_through(cluster, docs_site, mongo_db, "kill-spider-docs",
                  Fault("spider killed on a documentation site", SPIDER_DRAIN),
                  lambda: os.kill(running_spider_pid(node2, "node2"), signal.SIGKILL),
                  done_before=60, rule=DOCS_RULE, maxdepth=50)


def test_a_spider_killed_mid_sitemap_crawl_with_revisits(cluster, site, mongo_db):
    """A crawl seeded by every host's sitemap index too, revisiting them: the revisits
    fetch the sitemaps again by design, never the pages they list."""
    manifest, _ = site
    node2 = cluster.node_settings(2)
    base = manifest["start_url"].rsplit("/", 1)[0]
    crawl_through(cluster, site, mongo_db, "kill-spider-sitemaps",
                  Fault("spider killed in a sitemap crawl with revisits", SPIDER_DRAIN),
                  lambda: os.kill(running_spider_pid(node2, "node2"), signal.SIGKILL),
                  sitemaps=[f"{base}/sitemap.xml"], hub_span=2, revisit={"min": 2, "max": 6})


def test_a_whole_node_killed_mid_crawl(cluster, site, mongo_db):
    record = cluster.state.recorded("cluster-manager-node2")

    def kill_node():
        # The manager and its spiders share a process group: the whole node goes.
        os.killpg(record["pid"], signal.SIGKILL)

    crawl_through(cluster, site, mongo_db, "kill-node", Fault("node killed", SPIDER_DRAIN),
                  kill_node)


def test_the_dispatcher_killed_and_restarted_mid_crawl(cluster, site, mongo_db):
    record = cluster.state.recorded("cluster-master")

    def kill_and_restart():
        os.killpg(record["pid"], signal.SIGKILL)
        time.sleep(2)
        cluster.up()                     # starts what is not running: the master

    crawl_through(cluster, site, mongo_db, "kill-master",
                  Fault("dispatcher killed and restarted", DISPATCH_LEASE + 30),
                  kill_and_restart)
    assert cluster.state.recorded("cluster-master")["pid"] != record["pid"]


def test_one_of_two_dispatchers_killed_mid_crawl(two_masters, site, mongo_db, frontier_redis):
    """The survivor holds every shard within a lease of the kill; nothing is fetched
    twice: a dispatcher only moves tasks between Redis keys."""
    keys = Keys.from_settings(two_masters.settings)
    record = two_masters.state.recorded("cluster-master-2")
    took_over = []

    def owners():
        pipe = frontier_redis.pipeline(transaction=False)
        for shard in keys.all_shards():
            pipe.get(keys.shard_owner(shard))
        return Counter(pipe.execute())

    def kill_one():
        # Both dispatching before: a shard changing hands as the second one joined is
        # free for an upkeep or two (the first gives it back, then the second claims it).
        deadline = time.monotonic() + DISPATCH_LEASE + 5
        while len(held := owners()) != 2 or None in held:
            assert time.monotonic() < deadline, held
            time.sleep(0.2)
        os.killpg(record["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        while len(held := owners()) != 1 or None in held:
            assert time.monotonic() - killed_at < DISPATCH_LEASE + 3, held
            time.sleep(0.2)
        took_over.append(time.monotonic() - killed_at)

    manifest, served = site
    since = len(served.access_log())
    crawl_through(two_masters, site, mongo_db, "kill-one-master",
                  Fault("one of two dispatchers killed", DISPATCH_LEASE + 30), kill_one)
    fetched = fetch_counts(manifest, served, "kill-one-master", since)
    assert max(fetched.values()) == 1, fetched.most_common(3)        # nothing dispatched twice
    print(f"shards taken over {took_over[0]:.1f} s after the kill")


def test_preprocess_and_monitor_killed_mid_batch_and_restarted(cluster, site, mongo_db,
                                                              frontier_redis):
    """A burst of crawl and info requests; both intake roles SIGKILLed once the first
    replies are out, then restarted: every request answered, every crawl stored once."""
    redis = frontier_redis
    manifest, _ = site
    details = [p["url"] for p in manifest["pages"] if p["kind"] == "detail"][:150]
    records = [cluster.state.recorded(f"cluster-{role}") for role in ("preprocess", "monitor")]
    client = RequestClient.from_settings(cluster.settings, timeout=120)

    def burst_and_kill():
        waiting = dict(client.send({"type": "crawl", "userid": "faults", "crawlid": f"burst-{n}",
                                    "spider_type": "universal", "url": url,
                                    "rule": UNIVERSAL_RULE, "maxdepth": 0})
                       for n, url in enumerate(details))
        waiting |= dict(client.send({"type": "info", "userid": "faults", "crawlid": f"burst-{n}"})
                        for n in range(50))
        replies = client.replies(waiting)
        answered = [next(replies)]                 # the intake is mid-way through the burst
        for record in records:
            os.killpg(record["pid"], signal.SIGKILL)
        time.sleep(1)
        cluster.up()                               # starts what is not running: both roles
        answered += list(replies)
        assert all(reply is not None for _, reply in answered), "a request went unanswered"
        assert len(answered) == len(waiting)
        crawls = [reply for _, reply in answered if reply.get("action") == "crawl"]
        assert sorted(reply["status"] for reply in crawls) == ["accepted"] * len(details)

    try:
        crawl_through(cluster, site, mongo_db, "kill-intake",
                      Fault("preprocess and monitor killed and restarted", 120),
                      burst_and_kill)
    finally:
        client.close()
    assert all(cluster.state.recorded(f"cluster-{role}")["pid"] != record["pid"]
               for role, record in zip(("preprocess", "monitor"), records, strict=True))
    # each crawl stored and its seed queued and crawled once
    keys = Keys.from_settings(cluster.settings)
    deadline = time.monotonic() + 120
    while True:
        counts = [CrawlStore(redis, keys).progress(f"burst-{n}")["counts"]
                  for n in range(len(details))]
        if all(c.get("done") for c in counts) or time.monotonic() > deadline:
            break
        time.sleep(1)
    wrong = {f"burst-{n}": c for n, c in enumerate(counts) if c != {"queued": 1, "done": 1}}
    assert not wrong, wrong
