"""A server restarted mid-crawl: every role reconnects by itself and the crawl finishes,
every page stored exactly once."""

import time

import pytest

from manager.services import LocalServers, free_port, port_open, spawn, stop_process
from master.siteconfig import parse_config
from message_processing.client import RequestClient
from settings.clients import mongo_client, zookeeper_client
from tests.faults.test_faults_processes import CrawlWatch, crawl_with, make_cluster

pytestmark = pytest.mark.faults


class PrivateRedis:
    """A Redis of this test's own, with the append-only file on (fsync every second)."""

    def __init__(self, data_dir):
        self.port = free_port()
        self.data_dir = data_dir
        self.process = None

    def start(self):
        self.process = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                              "--appendonly", "yes", "--appendfsync", "everysec",
                              "--save", "", "--dir", str(self.data_dir)],
                             self.data_dir / "redis.log")
        deadline = time.monotonic() + 20
        while not port_open("127.0.0.1", self.port):
            assert time.monotonic() < deadline, "private Redis did not start"
            time.sleep(0.05)
        return self

    def restart(self, down_for=2.0):
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
    info = crawl_with(cluster_on_private_redis, site, mongo_db, "redis-restart",
                      private_redis.restart)
    assert info["total_pending"] == 0


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

        crawl_with(cluster, site, mongo_db, "zk-outage", outage)
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
        crawl_with(cluster, site, client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]],
                   "mongo-outage", outage)
    finally:
        cluster.down(servers=False)
        client.close()
