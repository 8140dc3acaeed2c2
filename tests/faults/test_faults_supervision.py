"""Roles that heal themselves: a loop stuck on a server is found by its role's watchdog
(every thread's stack logged, the heartbeat says "stalled", the process exits non-zero)
and ``crawlcluster supervisor`` starts the role again; a spider that dies is started
again by its manager, and one past its memory bound closes and is started afresh."""

import os
import signal
import time
import urllib.request

import pytest
import redis as redis_py

from manager.local.cluster import manager_call, manager_url
from master.keys import Keys
from master.registry import Heartbeats
from master.siteconfig import SiteConfig
from settings.process import EXIT_STALLED, Watchdog
from tests.faults.siteowner import CrawlWatch, fetch_counts
from tests.faults.test_faults_processes import make_cluster
from tests.faults.test_faults_servers import PrivateRedis

pytestmark = pytest.mark.faults
ROLES = ("master", "preprocess", "monitor", "exporter", "manager-node1")


def test_watchdog_marks_the_heartbeat_stalled_before_it_is_down(redis, test_settings):
    beats = Heartbeats.from_settings(redis, test_settings.copy_with(
        CRAWLCLUSTER_HEARTBEAT_TTL=3.0))
    beats.beat("master", "here:1")
    exits = []
    watchdog = Watchdog(0.5, "master here:1", on_stall=lambda: beats.stalled("master", "here:1"),
                        exit=exits.append).start()
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.05)                  # no beat: the loop is "stuck"
    watchdog.stop()
    assert exits == [EXIT_STALLED]
    assert beats.status()["master"]["here:1"] | {"last_beat": 0} == {
        "up": False, "stalled": True, "last_beat": 0}
    time.sleep(3.2)
    assert beats.status()["master"]["here:1"]["stalled"] is False      # then down


def pid_of(cluster, role):
    record = cluster.state.recorded(f"cluster-{role}")
    return record and record["pid"]


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture
def stuck_redis(tmp_path):
    server = PrivateRedis(tmp_path).start()
    yield server
    os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


def test_watchdog_of_every_role_stuck_on_a_stopped_redis_and_supervisor_restarts(
        test_settings, stuck_redis, kafka_topics, zookeeper, mongo_db, tmp_path):
    """Redis SIGSTOPped: every call waits (a 60 s socket timeout), so every role's loop
    is stuck; each watchdog (5 s) logs the stacks and ends its role with EXIT_STALLED;
    once Redis is back, the supervisor has started each role again."""
    settings = test_settings.copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{stuck_redis.port}/0",
        CRAWLCLUSTER_SOCKET_TIMEOUT=60.0,
        CRAWLCLUSTER_WATCHDOG_SECONDS={role: 5.0 for role in (
            "master", "preprocess", "monitor", "exporter", "manager", "crawler")})
    cluster = make_cluster(settings, tmp_path)
    try:
        cluster.supervise()
        before = {role: pid_of(cluster, role) for role in ROLES}
        os.kill(stuck_redis.process.pid, signal.SIGSTOP)
        wait_for(lambda: all(pid_of(cluster, role) != pid for role, pid in before.items()),
                 40, "a stuck role was not ended by its watchdog")
        os.kill(stuck_redis.process.pid, signal.SIGCONT)
        for role in ROLES:
            log = cluster.state.log_path(f"cluster-{role}").read_text(errors="replace")
            assert "stalled, exiting for its supervisor to start it again" in log, role
            assert "its threads:" in log and "--- MainThread" in log, role
        wait_for(lambda: all(pid_of(cluster, role) not in (None, before[role])
                             for role in ROLES), 90, "the supervisor did not restart a role")
        wait_for(lambda: set(ROLES) <= set(cluster.state.restarts()), 30,
                 "the supervisor did not count a restart")
        print(f"\nrestarts: {cluster.state.restarts()}")
        client = redis_py.Redis(port=stuck_redis.port, decode_responses=True)
        beats = Heartbeats(client, Keys.from_settings(settings))
        wait_for(lambda: any(entry["up"] for entry in beats.status().get("master", {}).values()),
                 60, "the restarted master does not beat")
        client.close()
    finally:
        cluster.down(servers=False)


def test_watchdog_of_a_spider_stuck_on_a_stopped_redis_and_its_manager_restarts_it(
        test_settings, stuck_redis, kafka_topics, zookeeper, mongo_db, tmp_path):
    """Only the spiders' bound is short (5 s): with Redis SIGSTOPped, a spider's
    reactor waits in its scheduler's call, its watchdog logs the stacks and ends it with
    EXIT_STALLED; once Redis is back, its manager (still the same process) starts it
    again as a restart of the same job."""
    settings = test_settings.copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{stuck_redis.port}/0",
        CRAWLCLUSTER_SOCKET_TIMEOUT=60.0,
        CRAWLCLUSTER_WATCHDOG_SECONDS={"master": 300.0, "preprocess": 300.0,
                                       "monitor": 300.0, "exporter": 300.0,
                                       "manager": 300.0, "crawler": 5.0})
    cluster = make_cluster(settings, tmp_path)
    try:
        node = cluster.node_settings(1)
        running = lambda: manager_call(node, "listjobs.json?project=crawlcluster")["running"]  # noqa: E731
        wait_for(running, 30, "the node's spider did not start")
        [job] = running()
        [log] = tmp_path.glob(f"**/{job['id']}.log")
        wait_for(lambda: "registered" in log.read_text(errors="replace"), 30,
                 "the spider did not register")              # past its start-up
        manager = pid_of(cluster, "manager-node1")
        os.kill(stuck_redis.process.pid, signal.SIGSTOP)
        wait_for(lambda: not pid_alive(job["pid"]), 30, "the stuck spider did not exit")
        os.kill(stuck_redis.process.pid, signal.SIGCONT)
        text = log.read_text(errors="replace")
        assert "stalled, exiting for its supervisor to start it again" in text
        assert "its threads:" in text and "--- MainThread" in text
        wait_for(lambda: any(again["id"].startswith(f"{job['id']}-r1-") for again in running()),
                 60, "the manager did not start its stalled spider again")
        assert pid_of(cluster, "manager-node1") == manager
        manager_log = cluster.state.log_path("cluster-manager-node1").read_text(errors="replace")
        assert f"spider job {job['id']} exited with {EXIT_STALLED}" in manager_log
    finally:
        os.kill(stuck_redis.process.pid, signal.SIGCONT)
        cluster.down(servers=False)


def test_a_spider_killed_while_redis_is_down_waits_and_is_started_once_it_answers(
        test_settings, stuck_redis, kafka_topics, zookeeper, mongo_db, tmp_path):
    """Redis stopped and a node's spider SIGKILLed: its manager starts it again, and
    again (each exits at once: Redis does not answer), then, having seen it die more
    than 5 times, lists it as waiting and counts it in its metrics, instead of giving up
    for good; once Redis answers again it starts the spider, which runs."""
    settings = test_settings.copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{stuck_redis.port}/0")
    cluster = make_cluster(settings, tmp_path)
    try:
        node = cluster.node_settings(1)
        jobs = lambda: manager_call(node, "listjobs.json?project=crawlcluster")  # noqa: E731
        wait_for(lambda: jobs()["running"], 30, "the node's spider did not start")
        [job] = jobs()["running"]
        stuck_redis.stop()
        os.kill(job["pid"], signal.SIGKILL)
        wait_for(lambda: jobs()["waiting"], 90, "the manager never listed its spider waiting")
        [waiting] = jobs()["waiting"]
        assert waiting["spider"] == "universal" and waiting["deaths"] > 5
        with urllib.request.urlopen(manager_url(node) + "metrics", timeout=30) as page:
            metrics = page.read().decode()
        assert 'crawlcluster_spiders_waiting{spider="universal"} 1.0' in metrics
        time.sleep(8)                      # it stays waiting while Redis is down
        assert jobs()["waiting"] and not jobs()["running"]
        stuck_redis.start()
        wait_for(lambda: any(again["id"] == waiting["job"] for again in jobs()["running"]),
                 30, "the manager did not start its spider once Redis answered")
        assert not jobs()["waiting"]
        time.sleep(3)
        assert [again["id"] for again in jobs()["running"]] == [waiting["job"]]   # it runs
        log = cluster.state.log_path("cluster-manager-node1").read_text(errors="replace")
        assert "waits for its servers to answer" in log
        assert "the servers of universal answer again" in log
    finally:
        cluster.down(servers=False)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:      # a zombie not yet reaped is gone too
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_spider_that_died_is_started_again_by_its_manager_supervised(
        test_settings, redis, kafka_topics, zookeeper, mongo_db, tmp_path):
    cluster = make_cluster(test_settings, tmp_path)
    try:
        node = cluster.node_settings(2)

        def running():
            return manager_call(node, "listjobs.json?project=crawlcluster")["running"]

        wait_for(running, 30, "the node's spider did not start")
        [job] = running()
        os.kill(job["pid"], signal.SIGKILL)

        def restarted():
            return [again for again in running() if again["id"].startswith(f"{job['id']}-r1-")]

        wait_for(restarted, 30, "the manager did not start its spider again")
        log = cluster.state.log_path("cluster-manager-node2").read_text(errors="replace")
        assert f"spider job {job['id']} exited with None: starting universal again" in log
    finally:
        cluster.down(servers=False)


def test_spiders_recycled_past_their_memory_bound_lose_and_refetch_nothing_supervised(
        test_settings, redis, kafka_topics, zookeeper, mongo_db, site, tmp_path):
    """A bound every spider is past: each closes at its first check (3 s in), as on
    SIGTERM, and its manager starts it again at once, over and over through the crawl.
    nginx serves every page exactly once and every detail page is stored once."""
    settings = test_settings.copy_with(CRAWLCLUSTER_SPIDER_MEMORY_LIMIT_MB=1.0,
                                       CRAWLCLUSTER_MEMORY_TRIM_SECONDS=3.0)
    manifest, served = site
    cluster = make_cluster(settings, tmp_path)
    limits = SiteConfig.from_settings(cluster.settings, zookeeper)
    for host in manifest["spec"]["hosts"]:      # 20 pages/s: a crawl of many spider lives
        limits.set_limit(host, hits=5, window=1)
    watch = CrawlWatch(cluster.settings, "recycled")
    since = len(served.access_log())
    try:
        watch.submit(manifest)
        info = watch.wait_drained(timeout=240)
    finally:
        watch.close()
        cluster.down(servers=False)
    fetched = fetch_counts(manifest, served, "recycled", since)
    assert set(fetched) == {page["url"] for page in manifest["pages"]}
    assert max(fetched.values()) == 1, fetched.most_common(5)
    assert info["failed"] == 0, info
    details = {page["url"] for page in manifest["pages"] if page["kind"] == "detail"}
    stored = [item["url"] for item in mongo_db["items_universal"].find({"crawlid": "recycled"})]
    assert sorted(stored) == sorted(details)
    recycles = sum(cluster.state.log_path(f"cluster-manager-node{n}").read_text(
        errors="replace").count("closed past its memory bound") for n in (1, 2))
    print(f"\n{len(fetched)} pages, each served once, over {recycles} recycled spiders")
    assert recycles >= 6
