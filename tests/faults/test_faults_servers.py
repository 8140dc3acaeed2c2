"""A server restarted mid-crawl: every role reconnects by itself and the crawl finishes,
as the crawled site's owner sees it: every page fetched, none more than twice, the extra
fetches within what was in flight plus 1% of the pages (tests/faults/siteowner.py)."""

import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest

from manager.local.cluster import LocalCluster, manager_call
from manager.local.crawl import cluster_env
from manager.local.demo import UNIVERSAL_RULE
from manager.local.ports import free_port, listening
from manager.local.processes import spawn, stop_process
from manager.local.services import LocalServers
from master.siteconfig import parse_config
from message_processing.client import NotDelivered, RequestClient
from message_processing.preprocess.service import Preprocess
from settings.clients import mongo_client, zookeeper_client
from tests.faults.siteowner import (
    CrawlWatch,
    Fault,
    assert_ground_truth,
    crawl_through,
    leased_now,
)
from tests.faults.test_faults_processes import make_cluster
from tests.message_processing.samples import crawl

pytestmark = pytest.mark.faults


def wait_for_port(port, what, timeout=30):
    """Wait until a server of this test's own accepts connections on loopback."""
    deadline = time.monotonic() + timeout
    while not listening("127.0.0.1", port):
        assert time.monotonic() < deadline, f"{what} did not start"
        time.sleep(0.05)


class PrivateRedis:
    """A Redis of this test's own, with the append-only file on (fsync every second)."""

    def __init__(self, data_dir, *options):
        self.port = free_port()
        self.data_dir = data_dir
        self.options = list(options)          # more redis-server options, e.g. ACL users
        self.process = None

    def start(self):
        self.process = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                              "--appendonly", "yes", "--appendfsync", "everysec",
                              "--save", "", "--dir", str(self.data_dir), *self.options],
                             self.data_dir / "redis.log")
        wait_for_port(self.port, "private Redis", timeout=20)
        return self

    def restart(self, down_for=2.0, kill=False):
        if kill:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        else:
            stop_process(self.process.pid)
        time.sleep(down_for)
        self.start()

    def stop(self):
        stop_process(self.process.pid)


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def cluster_on_private_redis(test_settings, private_redis, kafka_topics, zookeeper, mongo_db,
                             tmp_path):
    settings = test_settings.copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{private_redis.port}/0")
    local = make_cluster(settings, tmp_path)
    yield local
    local.down(servers=False)


def test_redis_restarted_mid_crawl(cluster_on_private_redis, private_redis, site, mongo_db):
    info = crawl_through(cluster_on_private_redis, site, mongo_db, "redis-restart",
                         Fault("Redis stopped for 2 s and restarted", 45), private_redis.restart)
    assert info["total_pending"] == 0


def test_redis_killed_and_restarted_from_its_append_only_file_mid_crawl(
        cluster_on_private_redis, private_redis, site, mongo_db):
    crawl_through(cluster_on_private_redis, site, mongo_db, "redis-killed",
                  Fault("Redis SIGKILLed and restarted from its append-only file", 45),
                  lambda: private_redis.restart(kill=True))


def private_server(test_settings, tmp_path, kind, **address):
    """Settings naming a server of this test's own (the shared ones serve every other
    test), and its LocalServers, with the server started."""
    settings = test_settings.copy_with(CRAWLCLUSTER_STATE_DIR=str(tmp_path / f"{kind}-state"),
                                       **address)
    servers = LocalServers(settings, out=lambda *_: None)
    servers.up([kind])
    return settings, servers


@pytest.fixture
def private_zookeeper(test_settings, tmp_path):
    settings, servers = private_server(
        test_settings, tmp_path, "zookeeper",
        CRAWLCLUSTER_ZOOKEEPER_HOSTS=f"127.0.0.1:{free_port()}")
    yield settings, servers
    servers.down(["zookeeper"])


def test_zookeeper_stopped_mid_crawl(test_settings, private_zookeeper, kafka_topics, redis,
                                     mongo_db, site, tmp_path):
    zk_settings, servers = private_zookeeper
    settings = test_settings.copy_with(
        CRAWLCLUSTER_ZOOKEEPER_HOSTS=zk_settings["CRAWLCLUSTER_ZOOKEEPER_HOSTS"])
    cluster = make_cluster(settings, tmp_path)
    try:
        def outage():
            # Shorter than a ZooKeeper session: crawling goes on under the last config.
            servers.down(["zookeeper"])
            watch = CrawlWatch(cluster.settings, "zk-outage")
            before = watch.info()["done"]
            time.sleep(4)
            assert watch.info()["done"] > before           # still crawling without it
            watch.close()
            servers.up(["zookeeper"])

        crawl_through(cluster, site, mongo_db, "zk-outage",
                      Fault("ZooKeeper stopped for 4 s", 45), outage)
        client = RequestClient.from_settings(cluster.settings, timeout=60)
        try:
            reply = client.ask({"type": "site_config", "userid": "faults", "action": "rate",
                                "domain": "example.org", "rate": 7, "uuid": "after-zk"})
        finally:
            client.close()
        assert reply["status"] == "ok", reply
        zookeeper = zookeeper_client(cluster.settings, "test")
        try:
            config = parse_config(zookeeper.get(reply["znode"])[0])
        finally:
            zookeeper.stop()
            zookeeper.close()
        assert config["domains"]["example.org"]["hits"] == 7    # a change after the outage
    finally:
        cluster.down(servers=False)


@pytest.fixture
def private_mongo(test_settings, tmp_path):
    settings, servers = private_server(
        test_settings, tmp_path, "mongodb",
        CRAWLCLUSTER_MONGODB_URL=f"mongodb://127.0.0.1:{free_port()}/?directConnection=true")
    yield settings, servers
    servers.down(["mongodb"])


def test_mongodb_stopped_for_ten_seconds_mid_crawl(test_settings, private_mongo, kafka_topics,
                                                   zookeeper, redis, site, tmp_path):
    mongo_settings, servers = private_mongo
    settings = test_settings.copy_with(
        CRAWLCLUSTER_MONGODB_URL=mongo_settings["CRAWLCLUSTER_MONGODB_URL"])
    cluster = make_cluster(settings, tmp_path)

    def outage():
        # Items wait in the spiders' pipelines and their tasks stay unacknowledged.
        servers.down(["mongodb"])
        time.sleep(10)
        servers.up(["mongodb"])

    client = mongo_client(settings, "test")
    try:
        crawl_through(cluster, site, client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]],
                      "mongo-outage", Fault("MongoDB stopped for 10 s", 60), outage)
    finally:
        cluster.down(servers=False)
        client.close()


class S3Store:
    """moto's S3 server: a Tansu broker keeps its topics and offsets there, so it can be
    restarted the way a Kafka broker is (the default memory storage forgets everything)."""

    bucket = "tansu"

    def __init__(self, run_dir):
        self.port = free_port()
        self.run_dir = run_dir
        self.process = None

    def start(self):
        import boto3

        self.process = spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                              "-p", str(self.port)], self.run_dir / "moto.log")
        wait_for_port(self.port, "moto's S3 server")
        boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test",
                     ).create_bucket(Bucket=self.bucket)
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def broker_environment(self):
        return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT": self.url,
                "AWS_ALLOW_HTTP": "true"}

    def stop(self):
        stop_process(self.process.pid)


@pytest.fixture
def private_kafka(test_settings, tmp_path, monkeypatch):
    store = S3Store(tmp_path).start()
    for name, value in store.broker_environment().items():
        monkeypatch.setenv(name, value)
    settings, servers = private_server(
        test_settings, tmp_path, "kafka",
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_KAFKA_STORAGE=f"s3://{store.bucket}/")
    yield settings, servers
    servers.down(["kafka"])
    store.stop()


def role_pid(cluster, role):
    record = cluster.state.recorded(f"cluster-{role}")
    return record and record["pid"]


def test_kafka_broker_restarted_mid_crawl(test_settings, private_kafka, zookeeper, redis,
                                          mongo_db, site, tmp_path):
    kafka_settings, servers = private_kafka
    settings = test_settings.copy_with(
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=kafka_settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"],
        CRAWLCLUSTER_REPLY_TIMEOUT=60.0)
    cluster = make_cluster(settings, tmp_path)
    roles = {role: role_pid(cluster, role) for role in ("preprocess", "monitor")}
    client = RequestClient.from_settings(cluster.settings, timeout=8)   # made before it stops
    manifest, _ = site
    try:
        def outage():
            servers.down(["kafka"])
            with pytest.raises(NotDelivered, match="not confirmed by the Kafka broker"):
                client.ask({"type": "info", "userid": "faults", "crawlid": "kafka-restart"})
            time.sleep(3)
            servers.up(["kafka"])

        crawl_through(cluster, site, mongo_db, "kafka-restart",
                      Fault("Kafka broker stopped for 3 s", 60), outage)
        # No manual action: the client made before the outage and the same preprocess and
        # monitor processes take the next requests.
        client.timeout = 60
        reply = client.ask({"type": "info", "userid": "faults", "crawlid": "kafka-restart"})
        assert reply["total_pending"] == 0
        watch = CrawlWatch(cluster.settings, "after-kafka-restart")
        try:
            watch.submit(manifest)
            watch.wait_drained()
        finally:
            watch.close()
        assert_ground_truth(manifest, mongo_db, "after-kafka-restart")
        assert {role: role_pid(cluster, role) for role in roles} == roles
    finally:
        client.close()
        cluster.down(servers=False)


def test_a_broker_that_lost_its_topics(test_settings, redis, zookeeper, tmp_path):
    """The local broker's default memory storage forgets everything when it restarts:
    topics are made again by the next client, and preprocess takes the new messages
    (numbered from 0 again) instead of skipping them as already applied."""
    kafka_settings, servers = private_server(
        test_settings, tmp_path, "kafka", CRAWLCLUSTER_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}")
    settings = test_settings.copy_with(
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=kafka_settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"],
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"))
    cluster = LocalCluster(settings, nodes=0, out=lambda *_: None)
    try:
        cluster.up()
        preprocess = role_pid(cluster, "preprocess")

        def submit(crawlids):
            client = RequestClient.from_settings(settings, timeout=60)
            try:
                return [client.ask({"type": "crawl", "userid": "faults", "crawlid": crawlid,
                                    "spider_type": "universal", "url": "http://example.org/",
                                    "rule": UNIVERSAL_RULE})["status"]
                        for crawlid in crawlids]
            finally:
                client.close()

        assert submit([f"before-{n}" for n in range(6)]) == ["accepted"] * 6
        servers.down(["kafka"])
        servers.up(["kafka"])
        assert submit(["after-0", "after-1"]) == ["accepted"] * 2
        assert role_pid(cluster, "preprocess") == preprocess
    finally:
        cluster.down(servers=False)
        servers.down(["kafka"])


@pytest.fixture
def intake_in_thread(test_settings, private_kafka, redis):
    """A preprocess of the private broker polling in a thread (its consumer is replaced
    after 10 s without a partition; joining takes ~3 s), and a client."""
    kafka_settings, servers = private_kafka
    settings = test_settings.copy_with(
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=kafka_settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"],
        CRAWLCLUSTER_KAFKA_REJOIN_AFTER=10.0)
    preprocess = Preprocess.from_settings(settings)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            preprocess.poll_once(timeout_ms=200)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    client = RequestClient.from_settings(settings, timeout=45)
    yield preprocess, servers, client
    stop.set()
    thread.join(timeout=30)
    client.close()
    preprocess.close()


def wait_assigned(preprocess, timeout=30):
    deadline = time.monotonic() + timeout
    while not preprocess.assignments.assigned:
        assert time.monotonic() < deadline, "the intake's consumer got no partition"
        time.sleep(0.1)


def test_an_intake_consumer_left_out_of_its_group_is_replaced(intake_in_thread):
    preprocess, servers, client = intake_in_thread
    wait_assigned(preprocess)
    # What a consumer stuck in a JoinGroup the broker never answers looks like.
    left_out = preprocess.assignments
    left_out.assigned.clear()
    left_out.unassigned_since = time.monotonic() - 60
    wait_assigned(preprocess)
    assert preprocess.consumers_made == 2 and preprocess.assignments is not left_out
    assert client.ask(crawl(1))["crawlid"] == "c1"

    servers.down(["kafka"])          # and the new consumer outlives a broker restart
    time.sleep(3)
    servers.up(["kafka"])
    assert client.ask(crawl(2))["crawlid"] == "c2"


@pytest.fixture
def private_redis_cluster(test_settings, tmp_path):
    """A 3-master Redis Cluster (a replica each) of this test's own: one master dies."""
    from manager.local.ports import free_redis_cluster_port

    settings, servers = private_server(
        test_settings, tmp_path, "redis", CRAWLCLUSTER_REDIS_CLUSTER=True,
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{free_redis_cluster_port()}/0")
    yield settings
    servers.down(["redis"])


def kill_master_and_wait_for_promotion(settings, port):
    """SIGKILL the Redis Cluster master on ``port`` and wait until a replica holds its
    slots (node timeout 2 s); return the masters after the failover."""
    import redis as redis_py

    from settings.clients import redis_client

    client = redis_client(settings, "test")
    ports = [node.port for node in client.get_nodes()]
    client.close()
    os.kill(int(redis_py.Redis(port=port).info("server")["process_id"]), signal.SIGKILL)
    survivor = redis_py.Redis(port=next(p for p in ports if p != port), decode_responses=True)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                nodes = survivor.execute_command("CLUSTER", "NODES")
                masters = [line.split()[1].split("@")[0].rsplit(":", 1)[1]
                           for line in nodes.splitlines()
                           if "master" in line.split()[2] and "fail" not in line.split()[2]]
                if str(port) not in masters and len(masters) == 3 and \
                        survivor.cluster("info")["cluster_state"] == "ok":
                    return masters
            except redis_py.RedisError:
                pass                                  # the survivor is busy failing over
            assert time.monotonic() < deadline, "no replica was promoted"
            time.sleep(0.5)
    finally:
        survivor.close()


@pytest.mark.parametrize("run", range(5))
def test_a_redis_cluster_master_killed_mid_crawl_failover(private_redis_cluster, kafka_topics,
                                                          zookeeper, mongo_db, site, tmp_path,
                                                          run):
    """SIGKILL the master holding the most frontier keys: its replica is promoted (node
    timeout 2 s) without the writes it had not been sent yet; every role carries on by
    itself (jobs push their last links again and set their leases right), and nginx sees
    each page fetched at most twice. Five times in a row: it must hold every time."""
    from settings.clients import redis_client

    local = make_cluster(private_redis_cluster, tmp_path)
    promoted = []

    def kill_a_master():
        client = redis_client(local.settings, "test")
        busiest = max(client.get_primaries(), key=lambda node: client.dbsize(target_nodes=node))
        client.close()
        promoted.append(kill_master_and_wait_for_promotion(local.settings, busiest.port))

    try:
        crawl_through(local, site, mongo_db, f"cluster-failover-{run}",
                      Fault("a Redis Cluster master SIGKILLed", 60), kill_a_master)
    finally:
        local.down(servers=False)
    print(f"masters after the failover: {promoted}")
    assert promoted


def test_the_redis_cluster_node_the_settings_name_killed_then_spiders_killed_failover(
        private_redis_cluster, kafka_topics, zookeeper, mongo_db, site, tmp_path):
    """``CRAWLCLUSTER_REDIS_URL`` names every master, as ``services up`` prints it; the
    first it names is SIGKILLed mid-crawl. While it stays down every spider is killed
    (its manager starts it again), every role (dispatcher, preprocess, monitor,
    exporter) is killed and started again and the CLI asks Redis: each starts from
    another node it names. nginx sees each page
    fetched at most twice, and the crawl drains."""
    from settings.clients import cluster_nodes, masters_url

    url = masters_url(private_redis_cluster)
    local = make_cluster(private_redis_cluster.copy_with(CRAWLCLUSTER_REDIS_URL=url), tmp_path)
    named = urlsplit(cluster_nodes(url)[0]).port
    notes = []

    def strike():
        kill_master_and_wait_for_promotion(local.settings, named)
        # two faults: what was in flight at the node's kill, then at the spiders'
        fault.in_flight += leased_now(local.settings)
        spiders = [job["pid"] for node in (1, 2) for job in manager_call(
            local.node_settings(node), "listjobs.json?project=crawlcluster")["running"]]
        for pid in spiders:
            os.kill(pid, signal.SIGKILL)
        for role in local.roles():           # each role again, the named node down
            os.killpg(local.state.recorded(f"cluster-{role}")["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 10
            while local.state.recorded(f"cluster-{role}"):     # until the kill has landed
                assert time.monotonic() < deadline, f"{role} outlived SIGKILL"
                time.sleep(0.05)
            local.start(role)
        ping = subprocess.run([sys.executable, "-m", "manager.cli", "ping", "redis"],
                              env=cluster_env(local.settings, fast=False), capture_output=True,
                              text=True, timeout=60, check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        notes.append(f"{len(spiders)} spiders and the roles {', '.join(local.roles())} "
                     f"killed and started again after the failover of {named}; "
                     f"ping: {ping.stdout.strip()}")

    fault = Fault("the Redis Cluster node the settings name SIGKILLed, then every spider",
                  60, notes=notes)
    try:
        crawl_through(local, site, mongo_db, "named-node-failover", fault, strike)
        restarted = [job["id"] for node in (1, 2) for job in manager_call(
            local.node_settings(node), "listjobs.json?project=crawlcluster")["running"]]
    finally:
        local.down(servers=False)
    assert len(restarted) == 2 and all("-r1-" in job for job in restarted), restarted
