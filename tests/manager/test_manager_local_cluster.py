"""End to end across two nodes: a crawl request on Kafka, crawled by two managers' spiders
(different simulated host IPs) into MongoDB, every page once; info, stats, and the
dispatcher's shares following the spiders' speeds."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from manager.local.cluster import LocalCluster
from manager.local.demo import UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import StaticSite
from master.registry import JobRegistry
from message_processing.client import RequestClient
from settings.errors import ConfigError

SLOW_DELAY = 1.0            # seconds between requests per domain on the slow node


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross-node-site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=100, seed=7)
    manifest = generate_site(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        yield manifest, served


@pytest.fixture
def cluster(test_settings, kafka_topics, zookeeper, redis, mongo_db, tmp_path):
    port = free_port()
    settings = test_settings.copy_with(
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_MANAGER_ADDRESS=f"127.0.0.1:{port}",
        CRAWLCLUSTER_THROTTLE_HITS=100000, CRAWLCLUSTER_THROTTLE_WINDOW=1.0,
        CRAWLCLUSTER_DISPATCH_WINDOW=2.0, CRAWLCLUSTER_DISPATCH_HEADROOM=3.0,
        CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT=600, CRAWLCLUSTER_WEIGHT_MIN_AGE=4.0,
        CRAWLCLUSTER_IDLE_TIMEOUT=0.0)
    local = LocalCluster(settings, nodes=2, procs=1, spider_types=("universal",),
                         out=lambda *_: None,
                         spider_settings={2: {"DOWNLOAD_DELAY": SLOW_DELAY,
                                              "RANDOMIZE_DOWNLOAD_DELAY": False}})
    local.up()
    try:
        wait_registered(JobRegistry.from_settings(redis, local.settings),
                        {"node1-universal-1", "node2-universal-1"})
        yield local
    finally:
        local.down(servers=False)


def wait_registered(registry, jobs, timeout=120):
    """Until both spiders are registered: the shares compared below are those of two
    working nodes, not of windows before the slow node's spider had started (on a
    loaded machine it started windows after the other)."""
    import time

    deadline = time.monotonic() + timeout
    while not jobs <= set(registry.live_jobs()):
        assert time.monotonic() < deadline, f"not registered: {jobs - set(registry.live_jobs())}"
        time.sleep(0.5)


def wait_drained(client, crawlid, timeout=240):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.ask({"type": "info", "userid": "e2e", "crawlid": crawlid})
        if info["total_pending"] == 0 and info.get("done"):
            return info
        time.sleep(1.0)
    raise AssertionError(f"crawl {crawlid} did not drain: {info}")


def dispatched_per_window(master_log):
    """``[(tasks to the slow node's job, tasks in all)]`` per dispatch window, in order."""
    windows = []
    for line in master_log.splitlines():
        match = re.search(r"window \d+: dispatched (\d+) tasks: (.*)", line)
        if match:
            parts = dict(re.findall(r"(\S+) (\d+) \(", match.group(2)))
            windows.append((int(parts.get("node2-universal-1", 0)), int(match.group(1))))
    return windows


def share(windows):
    return sum(slow for slow, _ in windows) / max(sum(total for _, total in windows), 1)


def test_a_crawl_across_two_nodes(cluster, site, mongo_db):
    manifest, served = site
    settings = cluster.settings
    client = RequestClient.from_settings(settings, timeout=60)
    try:
        ack = client.ask({"type": "crawl", "userid": "e2e", "crawlid": "e2e",
                          "spider_type": "universal", "url": manifest["start_url"],
                          "rule": UNIVERSAL_RULE, "maxdepth": 20})
        assert ack["status"] == "accepted"
        info = wait_drained(client, "e2e")
        stats = client.ask({"type": "stats", "userid": "e2e", "stats": "crawler"})
    finally:
        client.close()

    # every page exactly once, into MongoDB
    details = {p["url"] for p in manifest["pages"] if p["kind"] == "detail"}
    items = list(mongo_db["items_universal"].find({"crawlid": "e2e"}, {"url": 1}))
    assert sorted(item["url"] for item in items) == sorted(details)
    crawlable = {p["url"] for p in manifest["pages"]}
    fetched = Counter(f"http://{entry['host']}:{manifest['spec']['port']}{entry['path']}"
                      for entry in served.access_log() if entry["path"] != "/robots.txt")
    assert set(fetched) == crawlable
    assert max(fetched.values()) == 1, fetched.most_common(3)
    assert info["total_pending"] == 0 and info["done"] == len(crawlable)

    # stats: both nodes, each with its own IP for the per-IP throttle
    nodes = stats["nodes"]
    assert set(nodes) == {"node1", "node2"}
    assert {nodes["node1"]["ip"], nodes["node2"]["ip"]} == {"127.0.0.1", "127.0.0.2"}

    # the slow node's share drops once the dispatcher has measured the speeds
    done = {node: sum(job["done_last_minutes"] for job in nodes[node]["jobs"].values())
            for node in nodes}
    assert done["node2"] < 0.4 * sum(done.values()), done
    master_log = (cluster.state.log_path("cluster-master")).read_text()
    windows = dispatched_per_window(master_log)
    assert len(windows) >= 4, master_log[-2000:]
    half = len(windows) // 2
    early, late = share(windows[:half]), share(windows[half:])
    print(json.dumps({"done": done, "windows": windows, "early": early, "late": late}))
    assert late < early, windows


def processes_with_state_dir(state_dir):
    """Pids of live processes whose environment names ``state_dir`` (every process a
    local cluster starts gets it)."""
    marker = f"CRAWLCLUSTER_STATE_DIR={state_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:                      # gone meanwhile, or not ours to read
            continue
    return found


def test_a_cluster_that_fails_half_way_stops_what_it_started(
        test_settings, kafka_topics, zookeeper, redis, mongo_db, tmp_path):
    """The roles start, then the first node cannot (its manager address is no
    host:port): ``up`` stops the roles it started before it raises."""
    state_dir = tmp_path / "state"
    settings = test_settings.copy_with(CRAWLCLUSTER_STATE_DIR=str(state_dir),
                                       CRAWLCLUSTER_MANAGER_ADDRESS="127.0.0.1:http")
    local = LocalCluster(settings, nodes=1, procs=1, spider_types=("universal",),
                         out=lambda *_: None)
    with pytest.raises(ConfigError, match="CRAWLCLUSTER_MANAGER_ADDRESS"):
        local.up()
    started = {name for kind, name in local.started_here if kind == "role"}
    assert {"cluster-master", "cluster-preprocess", "cluster-monitor"} <= started
    assert all((state_dir / "logs" / f"{name}.log").exists() for name in started)
    assert [kind for kind in local.state.recorded_kinds() if kind.startswith("cluster-")] == []
    assert processes_with_state_dir(state_dir) == []
