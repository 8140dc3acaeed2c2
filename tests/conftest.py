"""Shared fixtures: real servers from the harness, one namespace per test.

The servers are the ones ``crawlcluster services up`` runs (started here if
they are not answering); under pytest-xdist each worker starts its own, on ports
and in a state directory of its own. Outside CI a server that cannot be started
skips the tests needing it; in CI (``CI=true``) it fails them.

Every test that touches a server gets ``test_settings``: the loaded settings
with its own Redis key prefix, Kafka topics and group id, ZooKeeper root and
MongoDB database, all removed after the test.
"""

import os
import tempfile
import uuid
from pathlib import Path

import pytest

from master.keys import Keys
from settings.clients import (
    check_server,
    kafka_admin,
    mongo_client,
    redis_client,
    zookeeper_client,
)
from settings.errors import CrawlClusterError
from settings.loader import load_settings, parse_bool

IN_CI = parse_bool("CI", os.environ.get("CI", "false"))
# pytest-xdist workers (``-n auto`` in pytest.ini): two a CPU, as most of a test's time
# is spent waiting on servers and sites (docs/development.md). A worker runs a whole file
# at a time (``--dist loadgroup``, grouped by file below), so a module's local clusters
# are built once.
WORKERS_PER_CPU = 2
MAX_WORKERS = 4
SERVER_ADDRESSES = {
    "CRAWLCLUSTER_REDIS_URL": "redis://127.0.0.1:{port}/0",
    "CRAWLCLUSTER_KAFKA_BOOTSTRAP": "127.0.0.1:{port}",
    "CRAWLCLUSTER_ZOOKEEPER_HOSTS": "127.0.0.1:{port}",
    "CRAWLCLUSTER_MONGODB_URL": "mongodb://127.0.0.1:{port}/?directConnection=true",
}
TEST_ALLOWED_NETWORKS = '["127.0.0.0/8", "::1/128"]'
LISTENER_ADDRESSES = {name: "127.0.0.1:{port}" for name in (
    "CRAWLCLUSTER_EXPORTER_ADDRESS", "CRAWLCLUSTER_MANAGER_ADDRESS", "CRAWLCLUSTER_PROXY_API")}


# Tests that take minutes: each is a work unit of its own for the xdist workers (the rest
# go a whole file at a time), and they start first, so the run does not end waiting on one.
SLOW_TESTS = ("test_a_simulated_year_comes_back_to_the_same_state_every_day",
              "test_broker_restarts_30_times_with_requests_flowing")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Group the tests for ``--dist loadgroup``: by file, each slow test alone, slow
    tests first (the order is the same on every worker, as xdist requires)."""
    def slow(item):
        return item.originalname in SLOW_TESTS

    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = item.nodeid if slow(item) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: not slow(item))     # a stable sort keeps the file order


@pytest.hookimpl(optionalhook=True)         # pytest -p no:xdist runs without it
def pytest_xdist_auto_num_workers(config):
    return max(1, min(MAX_WORKERS, WORKERS_PER_CPU * (os.cpu_count() or 1)))


def pytest_configure(config):
    """An xdist worker gets servers of its own (``local_servers`` starts them): its own
    ports and state directory, set in its environment so that everything it starts
    (roles, spiders, CLI commands) finds them too."""
    # The test sites are on loopback: ordinary tests may crawl them (the URL guard's own
    # tests, tests/security/, set it back to the default, nothing allowed).
    os.environ.setdefault("CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS", TEST_ALLOWED_NETWORKS)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        os.environ.update(worker_environment(worker, os.environ.get("PYTEST_XDIST_TESTRUNUID",
                                                                    uuid.uuid4().hex)))


def worker_environment(worker, run):
    """The settings of one xdist worker's servers, and of what its local clusters listen
    on (two workers' exporters on the default port: the second one's cannot start), as
    environment variables."""
    from manager.local.ports import free_port

    state = Path(tempfile.gettempdir()) / f"crawlcluster-tests-{run[:12]}" / worker
    return {"CRAWLCLUSTER_STATE_DIR": str(state),
            **{name: address.format(port=free_port()) for name, address
               in {**SERVER_ADDRESSES, **LISTENER_ADDRESSES}.items()}}


@pytest.fixture(scope="session")
def base_settings():
    return load_settings()


@pytest.fixture(scope="session")
def local_servers(base_settings):
    """Make sure every server answers; stop at the end only what was started here."""
    from manager.local.services import LocalServers

    servers = LocalServers(base_settings, out=lambda line: None)
    down = [kind for kind in ("redis", "kafka", "zookeeper", "mongodb")
            if not check_server(base_settings, kind)[0]]
    if down:
        try:
            servers.up(down)
        except (CrawlClusterError, OSError) as exc:
            message = f"servers {down} not answering and could not be started: {exc}"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
    yield base_settings
    if down:
        servers.down(down)


@pytest.fixture
def test_settings(local_servers):
    """Settings with names no other test uses."""
    token = uuid.uuid4().hex[:10]
    return local_servers.copy_with(
        CRAWLCLUSTER_KEY_PREFIX=f"test:{token}",
        CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC=f"test.{token}.requests",
        CRAWLCLUSTER_KAFKA_REPLIES_TOPIC=f"test.{token}.replies",
        CRAWLCLUSTER_KAFKA_ITEMS_TOPIC=f"test.{token}.items",
        CRAWLCLUSTER_KAFKA_GROUP_ID=f"test-{token}",
        CRAWLCLUSTER_ZOOKEEPER_ROOT=f"/crawlcluster-test/{token}",
        CRAWLCLUSTER_MONGODB_DATABASE=f"test_{token}",
    )


@pytest.fixture
def redis(test_settings):
    """A Redis client from the factory; the test's keys are deleted after it."""
    client = redis_client(test_settings, "test")
    yield client
    keys = list(client.scan_iter(match=Keys.from_settings(test_settings).pattern(), count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def kafka_topics(test_settings):
    """The test's request and reply topics, created, deleted after the test."""
    from kafka.admin import NewTopic

    names = [test_settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"],
             test_settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]]
    admin = kafka_admin(test_settings, "test")
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)
                         for name in names])
    yield names
    admin.delete_topics(names)
    admin.close()


@pytest.fixture
def zookeeper(test_settings):
    """A started KazooClient; the test's root znode is removed after it."""
    client = zookeeper_client(test_settings, "test")
    root = test_settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"]
    client.ensure_path(root)
    yield client
    client.delete(root, recursive=True)
    client.stop()
    client.close()


@pytest.fixture
def mongo_db(test_settings):
    """The test's own MongoDB database, dropped after it."""
    client = mongo_client(test_settings, "test")
    name = test_settings["CRAWLCLUSTER_MONGODB_DATABASE"]
    yield client[name]
    client.drop_database(name)
    client.close()


@pytest.fixture(scope="session")
def static_site(tmp_path_factory):
    """A generated 4-host site (list/detail pages, a GBK page, robots.txt) on nginx.

    Yields ``(manifest, site)``; ``site.access_log()`` lists every request served.
    """
    from manager.local.ports import free_port
    from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
    from manager.local.staticsite import StaticSite

    root = tmp_path_factory.mktemp("site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=30)
    manifest = generate_site(root, spec)
    site = serve_or_fail(StaticSite(root / "www", spec.hosts, spec.port, root / "run"))
    yield manifest, site
    site.stop()


def serve_or_fail(site):
    """Start nginx for a test site: a failure fails the tests in CI, skips them outside."""
    try:
        return site.start()
    except CrawlClusterError as exc:
        if IN_CI:
            pytest.fail(f"nginx could not serve a test site: {exc}")
        pytest.skip(f"nginx could not serve a test site: {exc}")


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """A generated site shaped like real documentation (``manager.local.docsite``: 261
    pages of hundreds of links each, fragments, self-links, large pages) on nginx.

    Yields ``(manifest, site)``."""
    from manager.local.docsite import DocsSpec, generate_docs_site
    from manager.local.ports import free_port
    from manager.local.staticsite import StaticSite

    root = tmp_path_factory.mktemp("docs-site")
    spec = DocsSpec(port=free_port([DocsSpec.host]))
    manifest = generate_docs_site(root, spec)
    site = serve_or_fail(StaticSite(root / "www", [spec.host], spec.port, root / "run"))
    yield manifest, site
    site.stop()


@pytest.fixture(scope="session")
def redis_cluster(base_settings, tmp_path_factory):
    """Settings naming a local Redis Cluster (3 masters, each with a replica) started by
    ``crawlcluster services`` for this session, on six free consecutive ports."""
    from manager.local.ports import free_redis_cluster_port
    from manager.local.services import LocalServers

    port = free_redis_cluster_port()
    settings = base_settings.copy_with(
        CRAWLCLUSTER_REDIS_CLUSTER=True, CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{port}/0",
        CRAWLCLUSTER_STATE_DIR=str(tmp_path_factory.mktemp("redis-cluster")))
    servers = LocalServers(settings, out=lambda line: None)
    try:
        servers.up(["redis"])
    except (CrawlClusterError, OSError) as exc:
        servers.down(["redis"])          # the nodes that did start
        if IN_CI:
            pytest.fail(f"could not start a local Redis Cluster: {exc}")
        pytest.skip(f"could not start a local Redis Cluster: {exc}")
    yield settings
    servers.down(["redis"])


@pytest.fixture
def cluster_settings(redis_cluster, test_settings):
    """``test_settings`` (its own prefix, topics, ...) on the local Redis Cluster."""
    return test_settings.copy_with(
        CRAWLCLUSTER_REDIS_CLUSTER=True,
        CRAWLCLUSTER_REDIS_URL=redis_cluster["CRAWLCLUSTER_REDIS_URL"])


@pytest.fixture
def cluster_redis(cluster_settings):
    """A Redis Cluster client; the test's keys are deleted after it, one at a time."""
    client = redis_client(cluster_settings, "test")
    yield client
    pattern = Keys.from_settings(cluster_settings).pattern()
    pipe = client.pipeline(transaction=False)
    for key in client.scan_iter(match=pattern, count=1000):
        pipe.delete(key)
    pipe.execute()
    client.close()


@pytest.fixture
def frontier_settings(request, test_settings):
    """The test's settings on a single Redis; parametrized indirectly with
    ``"redis-cluster"``, on the local 3-master Redis Cluster instead."""
    if getattr(request, "param", "redis") == "redis":
        request.getfixturevalue("redis")                  # the test's keys removed after it
        return test_settings
    request.getfixturevalue("cluster_redis")
    return request.getfixturevalue("cluster_settings")


@pytest.fixture
def frontier_redis(request, frontier_settings):
    """A client of the Redis ``frontier_settings`` names (the test's keys removed after)."""
    on_cluster = frontier_settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER")
    return request.getfixturevalue("cluster_redis" if on_cluster else "redis")
