"""A server restarted mid-crawl: every role reconnects by itself and the crawl finishes,
every page stored exactly once."""

import time

import pytest

from manager.services import free_port, port_open, spawn, stop_process
from tests.faults.test_faults_processes import crawl_with, make_cluster

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
