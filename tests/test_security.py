"""Security: every listener on loopback by default; Redis and MongoDB credentials come
from the settings and never reach a log, an error or a status line."""

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from manager.local.cluster import LocalCluster
from manager.local.ports import free_port, is_loopback
from manager.local.processes import spawn, stop_process
from manager.local.serverspec import ServerSpec
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.staticsite import StaticSite
from settings.clients import mongo_client, redis_client
from settings.errors import ServerUnreachable
from settings.loader import load_settings
from tests.faults.siteowner import CrawlWatch
from tests.faults.test_faults_servers import PrivateRedis, wait_for_port

LISTENERS = {"CRAWLCLUSTER_MANAGER_ADDRESS": lambda v: v.rpartition(":")[0],
             "CRAWLCLUSTER_PROXY_API": lambda v: v.rpartition(":")[0],
             "CRAWLCLUSTER_REDIS_URL": lambda v: re.split(r"[/:@]+", v)[1],
             "CRAWLCLUSTER_MONGODB_URL": lambda v: re.split(r"[/:@?]+", v)[1],
             "CRAWLCLUSTER_KAFKA_BOOTSTRAP": lambda v: v.rpartition(":")[0],
             "CRAWLCLUSTER_ZOOKEEPER_HOSTS": lambda v: v.rpartition(":")[0]}


def test_every_listener_defaults_to_loopback(tmp_path):
    defaults = load_settings(environ={})
    for name, host_of in LISTENERS.items():
        assert is_loopback(host_of(defaults[name])), f"{name} = {defaults[name]}"
    # and the local servers are told to bind to that address, not to every interface
    for kind in ("redis", "kafka", "mongodb"):
        command = " ".join(ServerSpec(kind).command("127.0.0.1", 1, tmp_path, defaults))
        assert "0.0.0.0" not in command and "127.0.0.1" in command, command
    ServerSpec("zookeeper").command("127.0.0.1", 1, tmp_path, defaults)
    assert "clientPortAddress=127.0.0.1" in (tmp_path / "zoo.cfg").read_text()


def listening_addresses():
    """(ip, port) of every listening TCP socket on this machine (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":                                   # LISTEN
                address, port = local.split(":")
                found.add((address, int(port, 16)))
    return found


LOOPBACK_HEX = ("0100007F", "00000000000000000000000001000000",
                "0000000000000000FFFF00000100007F")


def test_the_running_servers_listen_on_loopback_only(local_servers):
    ports = {kind: int(re.findall(r":(\d+)", local_servers[name])[-1])
             for kind, name in (("redis", "CRAWLCLUSTER_REDIS_URL"),
                                ("kafka", "CRAWLCLUSTER_KAFKA_BOOTSTRAP"),
                                ("zookeeper", "CRAWLCLUSTER_ZOOKEEPER_HOSTS"),
                                ("mongodb", "CRAWLCLUSTER_MONGODB_URL"))}
    listening = listening_addresses()
    for kind, port in ports.items():
        addresses = {address for address, p in listening if p == port}
        assert addresses, f"nothing listens on {kind}'s port {port}"
        assert addresses <= set(LOOPBACK_HEX), f"{kind} listens on {addresses}"


# --- credentials ------------------------------------------------------------------------

SECRET = f"Secret{uuid.uuid4().hex[:12]}"


class SecureMongo:
    """A MongoDB-wire server that requires a user (SCRAM-SHA-256)."""

    def __init__(self, data_dir):
        self.port = free_port()
        self.data_dir = data_dir
        self.process = None

    def _spawn(self, *options):
        self.process = spawn(["secantusd-py", "--host", "127.0.0.1", "--port", str(self.port),
                              "--storage-path", str(self.data_dir / "data"), "--standalone",
                              "--log-level", "WARNING", *options],
                             self.data_dir / "mongo.log")
        wait_for_port(self.port, "MongoDB-wire server")

    def start(self):
        import pymongo

        self._spawn()          # users are made once without auth, then auth is required
        client = pymongo.MongoClient(f"mongodb://127.0.0.1:{self.port}/?directConnection=true")
        client.admin.command("createUser", "crawler", pwd=SECRET, roles=["root"])
        client.close()
        stop_process(self.process.pid)
        self._spawn("--auth")
        self._wait_for_user()
        return self

    def _wait_for_user(self, timeout=60):
        """Until the user is let in: a port that accepts is not yet a server that
        answers, and a test on a loaded machine must not find it missing later."""
        import pymongo

        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, (
                f"the MongoDB-wire server exited with {self.process.returncode}: "
                f"{(self.data_dir / 'mongo.log').read_text(errors='replace')[-2000:]}")
            client = pymongo.MongoClient(self.url(), serverSelectionTimeoutMS=2000)
            try:
                client.admin.command("ping")
                return
            except pymongo.errors.PyMongoError:
                assert time.monotonic() < deadline, "the MongoDB-wire server never let its user in"
                time.sleep(0.2)
            finally:
                client.close()

    def url(self, password=SECRET):
        return (f"mongodb://crawler:{password}@127.0.0.1:{self.port}/"
                "?directConnection=true&authSource=admin")

    def stop(self):
        stop_process(self.process.pid)


@pytest.fixture
def secured(test_settings, tmp_path):
    """Settings naming a Redis with an ACL user and a MongoDB with a user, both with
    passwords (the default users refused)."""
    (tmp_path / "redis").mkdir()
    (tmp_path / "mongo").mkdir()
    redis = PrivateRedis(tmp_path / "redis", "--user", "default", "off",
                         "--user", "crawler", "on", f">{SECRET}", "~*", "&*", "+@all").start()
    mongo = SecureMongo(tmp_path / "mongo").start()
    settings = test_settings.copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://crawler:{SECRET}@127.0.0.1:{redis.port}/0",
        CRAWLCLUSTER_MONGODB_URL=mongo.url(),
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_MANAGER_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_IDLE_TIMEOUT=0.0)
    yield settings
    redis.stop()
    mongo.stop()


def test_credentials_work_and_are_never_logged(secured, kafka_topics, zookeeper, tmp_path):
    spec = SiteSpec(port=free_port(), hosts=("127.0.0.1",), details_per_host=10, seed=5)
    manifest = generate_site(tmp_path / "site", spec)
    cluster = LocalCluster(secured, nodes=1, procs=1, spider_types=("universal",),
                           out=lambda *_: None)
    printed = []
    with StaticSite(tmp_path / "site" / "www", spec.hosts, spec.port, tmp_path / "run"):
        cluster.up()
        try:
            watch = CrawlWatch(secured, "secured")
            try:
                watch.submit(manifest)
                watch.wait_drained()
            finally:
                watch.close()
            printed += cluster.describe({role: 0 for role in cluster.roles()} |
                                        {"node1": "http://x/"})
            printed.append(run_cli(secured, "services", "status"))
            printed.append(run_cli(secured, "stats"))
        finally:
            cluster.down(servers=False)
    database = mongo_client(secured, "test")[secured["CRAWLCLUSTER_MONGODB_DATABASE"]]
    assert database["items_universal"].count_documents({"crawlid": "secured"}) == 10
    # a wrong password: the error names the server, not the password
    for setting, url in (("CRAWLCLUSTER_REDIS_URL", secured["CRAWLCLUSTER_REDIS_URL"]),
                         ("CRAWLCLUSTER_MONGODB_URL", secured["CRAWLCLUSTER_MONGODB_URL"])):
        wrong = secured.copy_with(**{setting: url.replace(SECRET, SECRET[::-1])})
        with pytest.raises(ServerUnreachable) as refused:
            (redis_client if "REDIS" in setting else mongo_client)(wrong, "test")
        printed.append(str(refused.value))
    logs = [path for path in Path(tmp_path).rglob("*")
            if path.is_file() and path.suffix in (".log", ".out", ".err", "")
            and "data" not in path.parts]
    assert any(path.name.startswith("cluster-") for path in logs)
    leaked = [str(path) for path in logs if SECRET.encode() in path.read_bytes()]
    leaked += [line for line in printed if SECRET in line or SECRET[::-1] in line]
    assert leaked == []


def run_cli(settings, *args):
    from manager.local.crawl import cluster_env

    result = subprocess.run([sys.executable, "-m", "manager.cli", *args], check=False,
                            capture_output=True,
                            text=True, env=cluster_env(settings, fast=False), timeout=120)
    return result.stdout + result.stderr
