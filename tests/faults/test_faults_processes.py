"""Processes killed mid-crawl: the crawl still finishes, every page stored exactly once.

Each scenario runs a real local cluster (two nodes, one universal spider each)
crawling the generated site, breaks one process with SIGKILL while the crawl
is under way, and checks MongoDB against the site's ground truth. Leases and
job heartbeats are short so the tasks a dead process held come back quickly.
Every scenario runs with the frontier on a single Redis and on the local
3-master Redis Cluster.
"""

import os
import signal
import time
from collections import Counter

import pytest

from manager.local.cluster import LocalCluster, manager_call
from manager.local.demo import UNIVERSAL_RULE
from manager.local.services import free_port
from master.crawls import CrawlStore
from master.keys import Keys
from message_processing.client import RequestClient

pytestmark = [pytest.mark.faults,
              pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"],
                                      indirect=True)]
DISPATCH_LEASE = 4.0            # seconds a dead dispatcher's shards stay unserved at most


def make_cluster(test_settings, tmp_path, masters=1):
    """A two-node cluster (one universal spider each), up, with short leases."""
    settings = test_settings.copy_with(
        CRAWLCLUSTER_DISPATCH_LEASE_SECONDS=DISPATCH_LEASE,
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_MANAGER_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_THROTTLE_HITS=30, CRAWLCLUSTER_THROTTLE_WINDOW=1.0,   # a crawl of ~20 s
        CRAWLCLUSTER_DISPATCH_WINDOW=1.0, CRAWLCLUSTER_DISPATCH_HEADROOM=2.0,
        CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT=1200, CRAWLCLUSTER_LEASE_SECONDS=6.0,
        CRAWLCLUSTER_JOB_HEARTBEAT_TTL=5.0, CRAWLCLUSTER_IDLE_TIMEOUT=0.0)
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


class CrawlWatch:
    def __init__(self, settings, crawlid):
        self.client = RequestClient.from_settings(settings, timeout=60)
        self.crawlid = crawlid

    def submit(self, manifest):
        reply = self.client.ask({"type": "crawl", "userid": "faults", "crawlid": self.crawlid,
                                 "spider_type": "universal", "url": manifest["start_url"],
                                 "rule": UNIVERSAL_RULE, "maxdepth": 20})
        assert reply["status"] == "accepted", reply

    def info(self):
        return self.client.ask({"type": "info", "userid": "faults", "crawlid": self.crawlid})

    def wait_done_at_least(self, count, timeout=120):
        deadline = time.monotonic() + timeout
        while (info := self.info()).get("done", 0) < count:
            assert time.monotonic() < deadline, f"crawl stalled: {info}"
            time.sleep(0.5)

    def wait_drained(self, timeout=240):
        deadline = time.monotonic() + timeout
        while True:
            info = self.info()
            if info["total_pending"] == 0 and info.get("done"):
                return info
            assert time.monotonic() < deadline, f"crawl did not finish: {info}"
            time.sleep(1.0)

    def close(self):
        self.client.close()


def assert_ground_truth(manifest, mongo_db, crawlid):
    """Every detail page stored exactly once, with the site's fields."""
    details = {p["url"]: p for p in manifest["pages"] if p["kind"] == "detail"}
    items = list(mongo_db["items_universal"].find({"crawlid": crawlid}))
    assert len(items) == len({item["url"] for item in items})          # nothing twice
    assert {item["url"] for item in items} == set(details)              # nothing missing
    for item in items:
        assert item["title"] == details[item["url"]]["title"]


def running_spider_pid(settings, node):
    jobs = manager_call(settings, "listjobs.json?project=crawlcluster")["running"]
    [job] = [job for job in jobs if job["id"].startswith(f"{node}-")]
    return job["pid"]


def crawl_with(cluster, site, mongo_db, crawlid, break_it):
    manifest, _ = site
    watch = CrawlWatch(cluster.settings, crawlid)
    try:
        watch.submit(manifest)
        watch.wait_done_at_least(60)
        break_it()
        info = watch.wait_drained()
    finally:
        watch.close()
    assert info["failed"] == 0, info
    assert_ground_truth(manifest, mongo_db, crawlid)
    return info


def test_a_spider_process_killed_mid_crawl(cluster, site, mongo_db):
    node2 = cluster.node_settings(2)
    crawl_with(cluster, site, mongo_db, "kill-spider",
               lambda: os.kill(running_spider_pid(node2, "node2"), signal.SIGKILL))


def test_a_whole_node_killed_mid_crawl(cluster, site, mongo_db):
    record = cluster.state.recorded("cluster-manager-node2")

    def kill_node():
        # The manager and its spiders share a process group: the whole node goes.
        os.killpg(record["pid"], signal.SIGKILL)

    crawl_with(cluster, site, mongo_db, "kill-node", kill_node)


def test_the_dispatcher_killed_and_restarted_mid_crawl(cluster, site, mongo_db):
    record = cluster.state.recorded("cluster-master")

    def kill_and_restart():
        os.killpg(record["pid"], signal.SIGKILL)
        time.sleep(2)
        cluster.up()                     # starts what is not running: the master

    crawl_with(cluster, site, mongo_db, "kill-master", kill_and_restart)
    assert cluster.state.recorded("cluster-master")["pid"] != record["pid"]


def test_one_of_two_dispatchers_killed_mid_crawl(two_masters, site, mongo_db, frontier_redis):
    """The survivor holds every shard within a lease of the kill; each page is fetched
    (nginx's log) and stored once."""
    manifest, served = site
    keys = Keys.from_settings(two_masters.settings)
    since = len(served.access_log())
    record = two_masters.state.recorded("cluster-master-2")
    took_over = []

    def owners():
        pipe = frontier_redis.pipeline(transaction=False)
        for shard in keys.all_shards():
            pipe.get(keys.shard_owner(shard))
        return Counter(pipe.execute())

    def kill_one():
        assert len(owners()) == 2, owners()              # both dispatching before
        os.killpg(record["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        while len(held := owners()) != 1 or None in held:
            assert time.monotonic() - killed_at < DISPATCH_LEASE + 3, held
            time.sleep(0.2)
        took_over.append(time.monotonic() - killed_at)

    crawl_with(two_masters, site, mongo_db, "kill-one-master", kill_one)
    port = manifest["spec"]["port"]
    fetched = Counter(f"http://{entry['host']}:{port}{entry['path']}"
                      for entry in served.access_log()[since:] if entry["path"] != "/robots.txt")
    assert set(fetched) == {page["url"] for page in manifest["pages"]}
    assert max(fetched.values()) == 1, fetched.most_common(3)        # nothing dispatched twice
    print(f"shards taken over {took_over[0]:.1f} s after the kill")


def test_preprocess_and_monitor_killed_mid_batch_and_restarted(cluster, site, mongo_db,
                                                              frontier_redis):
    redis = frontier_redis
    """A burst of crawl and info requests; both intake roles SIGKILLed once the first
    replies are out, then restarted: every request answered, every crawl stored once."""
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
        crawl_with(cluster, site, mongo_db, "kill-intake", burst_and_kill)
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
